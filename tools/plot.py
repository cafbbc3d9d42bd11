#!/usr/bin/env python3
"""Figures from gradsweep reports: loss and accuracy curves (accuracy also against the modeled clock and, when some
run compresses, against the bytes sent), per-phase step breakdown, a sweep heatmap, and, when a report sweeps the
data cache's capacity, step time and data-stall share against it.

    python tools/plot.py REPORT... [--out DIR] [--metric NAME] [--x AXIS --y AXIS]
    python tools/plot.py --summary OUT.png REPORT...   # one scenario on one or more hardware profiles (fig_summary)

One function per figure (fig_*); a new figure is one function plus one line in write_figures. Each strategy has a hue
family (a sequential colormap: Blues, Oranges, ...; the same in every figure of a report); its runs take shades of it
from dark to light in run order, a marker each and, where a figure draws one curve per run, a dash each: no two runs
share color, marker and dash (run_styles). Train curves are solid, eval curves dashed.

What is drawn is data: only finished runs (passed, diverged; report_lib.finished) are drawn, the others are named
under the figure with how far they got; the heatmap draws one panel per value of the sweep axes it does not show (it
never averages over them) and names the --x and --y to give past MAX_FACETS panels; every axis names its unit;
figures of the measured clock of host-backend runs say that it is the host's time, not a GPU's.

Every figure fits in MAX_WIDTH_PX x MAX_HEIGHT_PX, however many runs or axis values a report has: past
MAX_LEGEND_RUNS runs a curve legend names the strategies (and, for one strategy, a color bar gives the run order)
instead of every run; past MAX_VERTICAL_BARS runs the step breakdown averages repeats and turns its bars sideways;
label parts are cut to report_lib.LABEL_CHARS characters. Every report and argument is checked before any file is
written.

The paths of the figures written go to stdout, one a line, relative to the current folder when under it. A figure that
does not apply to what was swept is left out without a word (accuracy against bytes without a compressor, staleness
without a parameter server, the modeled-clock figures without a modeled clock, throughput against ranks without a
cluster.ranks axis, a heatmap with fewer than two axes, the cache figure without a cache-capacity axis); one that the
report calls for but cannot have gets a note on stderr saying why.
"""
import argparse
import itertools
import json
import math
import os
import sys
import textwrap
from collections import Counter, namedtuple
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless; must precede the pyplot import
import matplotlib.colors  # noqa: E402
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.cm import ScalarMappable  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report_lib as rl  # noqa: E402

# Strategy hue families (matplotlib sequential colormaps) in order of first appearance; cycled past the last.
FAMILIES = ["Blues", "Oranges", "Greens", "Purples", "Reds", "Greys", "YlOrBr", "RdPu"]
# Runs of one strategy take shades from DARKEST (first run) to LIGHTEST (last run) of its colormap; a strategy with a
# single run takes SINGLE, which is also the strategy's own color (strategy_colors: the step breakdown's tick labels).
DARKEST, LIGHTEST, SINGLE = 0.9, 0.35, 0.75
# Runs of one strategy, in order, take these markers (cycled; the shade already differs).
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "*", "h", "p", "d", "8"]
TRAIN_LINESTYLE = "-"
EVAL_LINESTYLE = "--"  # reserved for eval curves
# Line styles of figures that draw one kind of curve per run (accuracy, staleness): the k-th run of a strategy takes
# DASHES[k % 3], so neighbouring shades of one family differ in dash as well as in marker.
DASHES = ["-", "-.", ":"]
# Colors of series that are not runs of a strategy (throughput lines, data-cache curves): tab10's ten, then tab20's
# ten light variants; past twenty, series_styles changes the marker too.
SERIES_COLORS = [matplotlib.colors.to_hex(plt.get_cmap("tab20")(i)) for i in list(range(0, 20, 2)) + list(range(1, 20, 2))]
# Fixed phase colors for the step breakdown, in rl.PHASES order.
PHASE_COLORS = {"data": "#9e9e9e", "forward": "#4c72b0", "backward": "#55a868", "compress": "#8172b2",
                "communicate": "#c44e52", "optimizer": "#ccb974", "wait": "#e0e0e0"}
# Config paths that set a run's strategy (rl.strategy_label): when one is swept, labels show it among the values.
STRATEGY_PATHS = {"sync", "sync.kind", "compression", "compression.kind", "precision", "precision.mode"}
# Metrics where lower is better get the reversed colormap, so "better" has the same color in every heatmap.
LOWER_IS_BETTER = {"eval_loss", "train_loss", "time_to_target_s", "step_p50_ms", "modeled_time_to_target_s",
                   "modeled_step_p50_ms"}

# Figure size limits. Sizes are chosen in inches at DPI; the caps leave room for the tight bounding box's padding.
DPI = 110
MAX_WIDTH_PX, MAX_HEIGHT_PX = 2400, 1800
MAX_WIDTH_IN, MAX_HEIGHT_IN = MAX_WIDTH_PX / DPI - 0.3, MAX_HEIGHT_PX / DPI - 0.3
# Past this many runs a curve legend lists the strategies, not the runs (up to it, every run has an entry, outside the
# axes past 4 runs, and its own color x marker x dash: run_styles).
MAX_LEGEND_RUNS = 24
# Past this many bars the step breakdown averages repeats and draws horizontal bars in a height-capped figure.
MAX_VERTICAL_BARS = 16
BAR_ROW_IN = 0.25  # height of one horizontal bar
LABEL_ROW_IN = 0.14  # closest spacing of tick labels (7 pt) that stays legible; denser rows label every k-th bar
NOTE_LINES = 6  # longest note strip under a figure

Style = namedtuple("Style", "color marker family dash")


# ---- styles ---------------------------------------------------------------------------------------------------------

def strategy_families(runs):
    """{strategy label: colormap name}, families assigned in order of first appearance among runs."""
    families = {}
    for run in runs:
        label = rl.strategy_label(run)
        if label not in families:
            families[label] = FAMILIES[len(families) % len(FAMILIES)]
    return families


def family_color(family, shade):
    """The color at `shade` (0 light .. 1 dark) of a family's colormap, as a hex string."""
    return matplotlib.colors.to_hex(plt.get_cmap(family)(shade))


def strategy_colors(runs):
    """{strategy label: color}: each strategy's own color (its family at the SINGLE shade)."""
    return {label: family_color(family, SINGLE) for label, family in strategy_families(runs).items()}


def run_styles(runs):
    """{run id: Style}: the k-th of n runs of a strategy (in run index order) takes shade k of n from dark to light
    in the strategy's family, the k-th marker (shifted by 5 for each time the families have cycled, past 8
    strategies) and dash k % 3 (DASHES). No two runs share color, marker and dash: a combination already taken moves
    on to the next marker."""
    families = strategy_families(runs)
    members = {}
    for run in sorted(runs, key=lambda r: r.get("index", 0)):
        members.setdefault(rl.strategy_label(run), []).append(run)
    styles, taken = {}, set()
    for s_index, (label, group) in enumerate(members.items()):
        n = len(group)
        cycle = s_index // len(FAMILIES)
        for k, run in enumerate(group):
            shade = SINGLE if n == 1 else DARKEST - (DARKEST - LIGHTEST) * k / (n - 1)
            color = family_color(families[label], shade)
            candidates = [(color, MARKERS[(k + 5 * cycle + m) % len(MARKERS)], DASHES[(k + cycle + d) % len(DASHES)])
                          for d in range(len(DASHES)) for m in range(len(MARKERS))]
            combo = next((c for c in candidates if c not in taken), candidates[0])
            taken.add(combo)
            styles[run["id"]] = Style(combo[0], combo[1], families[label], combo[2])
    return styles


def series_styles(n):
    """n (color, marker, dash) combinations for series that are not runs (one per combination of other swept values):
    the i-th takes SERIES_COLORS[i % 20], MARKERS[i % 14] and DASHES[i % 3], so no two of the first 420 are alike and
    two series drawn on top of each other still show both markers and dashes."""
    return [(SERIES_COLORS[i % len(SERIES_COLORS)], MARKERS[i % len(MARKERS)], DASHES[i % len(DASHES)])
            for i in range(n)]


def single_strategy(runs):
    """The strategy label shared by every run, or None when they differ (or there are no runs)."""
    labels = {rl.strategy_label(r) for r in runs}
    return labels.pop() if len(labels) == 1 else None


# ---- labels ---------------------------------------------------------------------------------------------------------

def run_labels(report, runs, repeats=None):
    """(labels, caption): the legend or tick text of each run, without its disposition (disposition_suffix).

    A label is the strategy (unless all runs share one, or a swept path that sets it shows it among the values) and
    the swept values "key=value ..." (the run id when nothing was swept), each part cut to rl.LABEL_CHARS. When some
    run's "key=value" text is longer than that, every label shows the values only ("1, 0.05 r0") and `caption`
    names them ("accumulation_steps, lr (r: repeat)"); else
    caption is None. `repeats` overrides the report's (1: no repeat suffix).
    """
    repeats = report.get("repeats", 1) if repeats is None else repeats
    axes = report.get("axes")
    texts = [rl.swept_text(r, repeats, axes) for r in runs]
    caption = None
    if any(len(t) > rl.LABEL_CHARS for t in texts):
        texts = [rl.swept_text(r, repeats, axes, names=False) for r in runs]
        caption = rl.swept_caption(runs[0], repeats, axes) or None
    swept = {p for r in runs for p in (r.get("swept") or {})}
    with_strategy = single_strategy(runs) is None and not swept & STRATEGY_PATHS
    labels = []
    for run, text in zip(runs, texts):
        parts = [rl.shorten(rl.strategy_label(run))] if with_strategy else []
        parts.append(rl.shorten(text or run.get("id", "?")))
        labels.append(" ".join(parts))
    return labels, caption


def disposition_suffix(runs, repeats=1):
    """" (diverged)" and the like when some of `runs` (one run, or the repeats averaged in one bar) did not pass;
    " (1 of 2)" when a bar averages fewer runs than the sweep repeats."""
    others = sorted({r.get("disposition", "?") for r in runs} - {"passed"})
    text = f" ({'/'.join(others)})" if others else ""
    if repeats > 1 and len(runs) != repeats:
        text += f" ({len(runs)} of {repeats})"
    return text


def axis_caption(what, strategy, caption):
    """An axis or legend title: "runs (allreduce): accumulation_steps, lr"."""
    text = what + (f" ({rl.shorten(strategy)})" if strategy else "")
    return f"{text}: {caption}" if caption else text


# ---- figure helpers -------------------------------------------------------------------------------------------------

def legend_room(runs):
    """Extra figure width for a legend placed outside the axes (run_legend does so past 4 runs)."""
    return 2.6 if len(runs) > 4 else 0.0


def note_lines(note, width):
    """The note wrapped to the figure's width between words (never inside a run id, nor at its hyphens: h100-pcie-8),
    at most NOTE_LINES lines; a word longer than a line is cut with an ellipsis."""
    chars = int(width * 16)
    lines = textwrap.wrap(note, width=chars, break_long_words=False, break_on_hyphens=False) if note else []
    lines = [rl.shorten(line, chars) for line in lines]
    if len(lines) > NOTE_LINES:
        lines = lines[:NOTE_LINES - 1] + [rl.shorten(lines[NOTE_LINES - 1], chars - 2) + " \u2026"]
    return lines


def new_figure(report, title, note, width=9.0, height=5.5, subtitle=""):
    """A figure with one axes titled with the report's name; `subtitle` (e.g. rl.host_clock_note) goes under the title
    in a smaller font; `note`, when given, goes in a text strip below the axes. Width and height (the note's strip
    included) are capped at MAX_WIDTH_IN and MAX_HEIGHT_IN."""
    width = min(width, MAX_WIDTH_IN)
    lines = note_lines(note, width)
    strip = 0.15 * len(lines) + 0.05 if lines else 0.0
    height = min(height, MAX_HEIGHT_IN - strip)
    if not lines:
        fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    else:
        fig, (ax, note_ax) = plt.subplots(2, 1, figsize=(width, height + strip), layout="constrained",
                                          gridspec_kw={"height_ratios": [height, strip]})
        note_ax.axis("off")
        note_ax.text(0.0, 1.0, "\n".join(lines), fontsize=7, color="#555555", va="top", ha="left",
                     transform=note_ax.transAxes)
    ax.set_title(f"{rl.shorten(report['scenario_name'], 40)}: {title}")
    if subtitle:
        ax.set_title(ax.get_title() + "\n" + textwrap.fill(subtitle, width=int(width * 13)), fontsize=9)
    return fig, ax


def integer_ticks(axis):
    """Integer ticks only (an axis of optimizer steps)."""
    axis.set_major_locator(MaxNLocator(integer=True))


def save(fig, path):
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def finite_xy(x, y):
    pairs = [(a, b) for a, b in zip(x, y) if not (math.isnan(a) or math.isnan(b))]
    return [a for a, _ in pairs], [b for _, b in pairs]


def maybe_log_scale(ax, values):
    """Log y when every value is positive and they span more than a factor of 20 (diverging or long runs)."""
    vals = [v for v in values if not math.isnan(v)]
    if vals and min(vals) > 0 and max(vals) / min(vals) > 20:
        ax.set_yscale("log")


def run_legend(ax, report, runs, styles, keys=(), caption=None):
    """The legend of the runs drawn on ax, plus `keys` (handles explaining line styles and markers). With one strategy
    its name (and `caption`, what the values in the labels are) is the legend's title instead of a prefix of every
    entry. Outside the axes, on the right, past 4 runs (legend_room widens the figure to match). Past
    MAX_LEGEND_RUNS runs: strategy_legend."""
    if len(runs) > MAX_LEGEND_RUNS:
        strategy_legend(ax, report, runs, styles, keys)
        return
    handles, _ = ax.get_legend_handles_labels()
    handles = handles + list(keys)
    if not handles:
        return
    place = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)} if len(runs) > 4 else {"loc": "best"}
    strategy = single_strategy(runs)
    title = axis_caption(rl.shorten(strategy), None, caption) if strategy else caption
    ax.legend(handles=handles, fontsize=7 if len(handles) <= 16 else 6, title=title, title_fontsize=7,
              handlelength=3.0, **place)


def strategy_legend(ax, report, runs, styles, keys=()):
    """The legend of many runs: one entry per strategy (its color and run count, at most MAX_LEGEND_RUNS entries;
    titled "N runs" when there are several), plus `keys`; with a single strategy, a color bar below the axes maps its
    shades to the run order, ticked with the values of the axis the runs are ordered by."""
    counts = Counter(rl.strategy_label(r) for r in runs)
    families = strategy_families(report["runs"])
    handles = [Line2D([], [], color=family_color(families[label], SINGLE), linewidth=2.5,
                      label=f"{rl.shorten(label)}: {rl.count_text(n, 'run')}")
               for label, n in list(counts.items())[:MAX_LEGEND_RUNS]]
    if len(counts) > MAX_LEGEND_RUNS:
        handles.append(Line2D([], [], linestyle="none", label=f"... and {len(counts) - MAX_LEGEND_RUNS} more"))
    ax.legend(handles=handles + list(keys), fontsize=7, title=f"{len(runs)} runs" if len(counts) > 1 else None,
              title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if len(counts) == 1:
        shade_colorbar(ax, report, runs, styles)


def shade_colorbar(ax, report, runs, styles):
    """A color bar below ax with the shades of `runs` (one strategy) in run order, ticked at the middle of each
    block of runs sharing a value of the axis the run order follows (rl.slowest_axis; at most 12 ticks)."""
    runs = sorted(runs, key=lambda r: r.get("index", 0))
    n = len(runs)
    mappable = ScalarMappable(norm=matplotlib.colors.Normalize(-0.5, n - 0.5),
                              cmap=matplotlib.colors.ListedColormap([styles[r["id"]].color for r in runs]))
    bar = ax.figure.colorbar(mappable, ax=ax, location="bottom", shrink=0.7, aspect=50, pad=0.01)
    bar.ax.tick_params(labelsize=7)
    axis = rl.slowest_axis(report, runs)
    if axis is None:
        integer_ticks(bar.ax.xaxis)
        bar.set_label("runs in run order (dark: first)", fontsize=8)
        return
    values = [rl.run_axis_value(r, axis) for r in runs]
    starts = [k for k in range(n) if k == 0 or values[k] != values[k - 1]]
    middles = [(a + b - 1) / 2 for a, b in zip(starts, starts[1:] + [n])]
    every = math.ceil(len(starts) / 12)
    bar.set_ticks(middles[::every], labels=[rl.axis_value_text(axis, values[k]) for k in starts[::every]])
    bar.set_label(f"runs in run order (dark: first), by {rl.shorten(rl.axis_name(axis), 60)}", fontsize=8)


def style_keys(with_eval, with_diverged):
    """Legend entries for the line conventions: solid train loss, dashed eval loss, a cross where a run diverged."""
    keys = []
    if with_eval:
        keys += [Line2D([], [], color="black", linestyle=TRAIN_LINESTYLE, label="train loss"),
                 Line2D([], [], color="black", linestyle=EVAL_LINESTYLE, label="eval loss")]
    if with_diverged:
        keys.append(Line2D([], [], color="black", marker="x", markersize=7, linestyle="none", label="diverged"))
    return keys


def draw_loss(ax, report, styles, x_key):
    """Train loss (solid) and eval loss (dashed, where evaluated) of every drawn run against x_key."""
    runs = rl.drawn_runs(report)
    labels, caption = run_labels(report, runs) if runs else ([], None)
    many = len(runs) > MAX_LEGEND_RUNS  # no legend entry per run, so no marker per run either
    any_eval, any_diverged, all_y = False, False, []
    for run, label in zip(runs, labels):
        style = styles[run["id"]]
        steps, train = rl.series(run, "train_loss")
        x = steps if x_key == "step" else rl.series(run, x_key)[1]
        every = max(1, len(x) // 10)
        # Train losses are noisy (one step's samples each): thin and slightly transparent, under the eval curves.
        ax.plot(x, train, color=style.color, marker=None if many else style.marker, linestyle=TRAIN_LINESTYLE,
                markevery=every, markersize=4, linewidth=0.9, alpha=0.8, zorder=2,
                label=None if many else label + disposition_suffix([run]))
        all_y += train
        ex, ey = finite_xy(x, rl.series(run, "eval_loss")[1])
        if ex:
            any_eval = True
            all_y += ey
            ax.plot(ex, ey, color=style.color, marker=style.marker, linestyle=EVAL_LINESTYLE,
                    markersize=3 if many else 5, linewidth=1.6, zorder=3)
        if run.get("disposition") == "diverged":
            fx, fy = finite_xy(x, train)
            if fx:
                any_diverged = True
                ax.plot(fx[-1], fy[-1], marker="x", markersize=10, color=style.color, linestyle="none")
    maybe_log_scale(ax, all_y)
    ax.set_ylabel(f"loss ({rl.loss_unit(runs)})")
    ax.grid(alpha=0.3)
    run_legend(ax, report, runs, styles, style_keys(any_eval, any_diverged), caption)


# ---- figures (one function each; each returns the path written, or None with a note on stderr) ----------------------

def only_timing(report):
    """True when every drawn run is timing-only (training.mode "timing"; and there is one): none of them trained, so
    the figures of training (loss, accuracy, staleness, the measured step, the input pipeline) do not apply to the
    report; write_figures says so once (timing_only_note) instead of a note per figure."""
    drawn = rl.drawn_runs(report)
    return bool(drawn) and all(rl.timing_only(r) for r in drawn)


def timing_only_note(report):
    """The one note about a report's timing-only runs: they have no convergence curves (no loss, no accuracy) and
    which figures that leaves; None when no drawn run is timing-only."""
    drawn = rl.drawn_runs(report)
    timing = [r for r in drawn if rl.timing_only(r)]
    if not timing:
        return None
    if len(timing) == len(drawn):
        return ("timing-only runs (training.mode \"timing\") train nothing, so they have no convergence curves: no "
                "loss, accuracy, staleness, input-pipeline or measured-clock figures, only the modeled clock's")
    verb = "is" if len(timing) == 1 else "are"
    return (f"{len(timing)} of the {rl.count_text(len(drawn), 'drawn run')} {verb} timing-only "
            f"(training.mode \"timing\"): {'it has' if len(timing) == 1 else 'they have'} no convergence curves, so "
            f"the loss and accuracy figures draw the other runs")


def has_loss(report):
    """True when some drawn run has a finite loss (timing-only runs train nothing and have none)."""
    return any(finite_xy(*rl.series(r, "train_loss"))[0] for r in rl.drawn_runs(report))


def fig_loss_vs_step(report, styles, out_dir, note):
    if only_timing(report):
        return not_applicable()
    if not rl.drawn_runs(report):
        return skipped("loss_vs_step.png", "no run with a convergence series")
    if not has_loss(report):
        return skipped("loss_vs_step.png", "no run has a loss (timing-only runs train nothing)")
    fig, ax = new_figure(report, "loss vs step", note, width=9.0 + legend_room(rl.drawn_runs(report)))
    draw_loss(ax, report, styles, "step")
    ax.set_xlabel("optimizer step (count)")
    integer_ticks(ax.xaxis)
    return save(fig, out_dir / "loss_vs_step.png")


def fig_loss_vs_time(report, styles, out_dir, note):
    if only_timing(report):
        return not_applicable()
    if not rl.drawn_runs(report):
        return skipped("loss_vs_time.png", "no run with a convergence series")
    if not has_loss(report):
        return skipped("loss_vs_time.png", "no run has a loss (timing-only runs train nothing)")
    fig, ax = new_figure(report, "loss vs measured time", note, width=9.0 + legend_room(rl.drawn_runs(report)),
                         subtitle=rl.host_clock_note(report, rl.drawn_runs(report)))
    draw_loss(ax, report, styles, "measured_s")
    ax.set_xlabel("measured time (s)")
    return save(fig, out_dir / "loss_vs_time.png")


def accuracy_runs(report, x_of):
    """The drawn runs with at least one eval accuracy at a finite x (x_of(run): the run's x list, one per point)."""
    return [r for r in rl.drawn_runs(report) if finite_xy(x_of(r), rl.series(r, "eval_accuracy")[1])[0]]


def draw_accuracy(ax, report, styles, runs, x_of):
    """Eval accuracy of `runs` against x_of(run) (one x per series point), one line per run, the targets of
    eval_accuracy dotted, and the run legend."""
    targets = set()
    labels, caption = run_labels(report, runs)
    many = len(runs) > MAX_LEGEND_RUNS
    for run, label in zip(runs, labels):
        style = styles[run["id"]]
        # Only eval curves here: dashes are free to tell neighbouring shades apart (run_styles).
        x, y = finite_xy(x_of(run), rl.series(run, "eval_accuracy")[1])
        ax.plot(x, y, color=style.color, marker=style.marker, linestyle=style.dash, markersize=3 if many else 4,
                linewidth=1.0 if many else 1.3, label=None if many else label + disposition_suffix([run]))
        ttt = run.get("time_to_target")
        if ttt and ttt.get("metric") == "eval_accuracy":
            targets.add(ttt["value"])
    for value in sorted(targets):
        ax.axhline(value, color="black", linewidth=0.8, linestyle=":")
        ax.annotate(f"target {value:g}", (0.01, value), xycoords=("axes fraction", "data"), fontsize=7,
                    va="bottom", ha="left")
    ax.set_ylabel("eval accuracy (fraction correct)")
    ax.grid(alpha=0.3)
    run_legend(ax, report, runs, styles, caption=caption)


def fig_accuracy_vs_time(report, styles, out_dir, note):
    if only_timing(report):
        return not_applicable()
    runs = accuracy_runs(report, lambda r: rl.series(r, "measured_s")[1])
    if not runs:
        return skipped("accuracy_vs_time.png", "no run has eval_accuracy")
    fig, ax = new_figure(report, "eval accuracy vs measured time", note, width=9.0 + legend_room(runs),
                         subtitle=rl.host_clock_note(report, runs))
    draw_accuracy(ax, report, styles, runs, lambda r: rl.series(r, "measured_s")[1])
    ax.set_xlabel("measured time (s)")
    return save(fig, out_dir / "accuracy_vs_time.png")


def fig_accuracy_vs_modeled_time(report, styles, out_dir, note):
    """Eval accuracy against the modeled clock (series modeled_s), written when some run has both."""
    if only_timing(report):
        return not_applicable()
    runs = accuracy_runs(report, lambda r: rl.series(r, "modeled_s")[1])
    if not runs:
        if not any(math.isfinite(t) for r in rl.drawn_runs(report) for t in rl.series(r, "modeled_s")[1]):
            return not_applicable()  # no modeled clock
        return skipped("accuracy_vs_modeled_time.png", "no run has eval_accuracy on the modeled clock")
    fig, ax = new_figure(report, "eval accuracy vs modeled time", note, width=9.0 + legend_room(runs))
    draw_accuracy(ax, report, styles, runs, lambda r: rl.series(r, "modeled_s")[1])
    ax.set_xlabel("modeled time (s)")
    return save(fig, out_dir / "accuracy_vs_modeled_time.png")


def staleness_ticks(ax, largest):
    """The staleness axis: linear with integer ticks up to 10; beyond, linear up to 10 and logarithmic after
    (asynchronous runs reach many clocks), ticked at 0, 1, 2, 5, 10, 20, 50, ... up to `largest`, so a log axis shows
    every decade."""
    if largest <= 10:
        integer_ticks(ax.xaxis)
        return
    ax.set_xscale("symlog", linthresh=10)
    ticks, decade = [0, 1, 2, 5], 10
    while decade <= largest * 1.05:
        ticks += [t for t in (decade, 2 * decade, 5 * decade) if t <= largest * 1.05]
        decade *= 10
    ax.set_xticks(ticks, labels=[f"{t:,}" for t in ticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


STALENESS_UNITS = {"versions": "staleness in versions (optimizer updates between the read and the apply)",
                   "clocks": "staleness in clocks (the writer's clock minus the clock of the parameters it read)"}


def is_parameter_server(run):
    return ((run.get("config") or {}).get("sync") or {}).get("kind") == "parameter_server"


def staleness_missing_reason(runs):
    """Why no run of `runs` has a staleness histogram: no parameter-server run at all (lock-step strategies have no
    staleness), only timing-only ones (training.mode "timing": nothing is applied, so nothing is measured), or
    parameter-server runs that applied no gradient."""
    ps = [r for r in runs if is_parameter_server(r)]
    if not ps:
        return "no parameter server run (the lock-step strategies have no staleness)"
    timing = [r for r in ps if ((r.get("config") or {}).get("training") or {}).get("mode") == "timing"]
    if len(timing) == len(ps):
        return (f"the {len(ps)} parameter server run{'s are' if len(ps) > 1 else ' is'} timing-only (training.mode "
                f"\"timing\"): no gradient is computed or applied, so there are no staleness measurements; run "
                f"with training.mode \"train\" for them")
    trained = len(ps) - len(timing)
    who = ("the parameter server run that trains applied no gradient" if trained == 1 else
           f"none of the {trained} parameter server runs that train applied a gradient")
    return (f"{who} (failed, skipped or interrupted before its first push was applied)"
            + (f"; {len(timing)} more {'is' if len(timing) == 1 else 'are'} timing-only, with no staleness "
               f"measurements" if timing else ""))


def fig_staleness(report, styles, out_dir, note, unit):
    """staleness_<unit>.png: the staleness histogram of the applied gradients in `unit` (versions or clocks), one
    step line per run that has a staleness object (parameter server runs), as the fraction of its applied gradients;
    written when some run has one. x is linear up to 10, logarithmic beyond (asynchronous runs reach many clocks)."""
    name = f"staleness_{unit}.png"
    runs = [r for r in rl.drawn_runs(report) if rl.staleness_histogram(r, unit)[0]]
    if not runs and only_timing(report):
        return not_applicable()
    if not runs:
        if not any(is_parameter_server(r) for r in rl.drawn_runs(report)):
            return not_applicable()  # the lock-step strategies have no staleness
        return skipped(name, staleness_missing_reason(rl.drawn_runs(report)))
    fig, ax = new_figure(report, f"staleness of applied gradients ({unit})", note, width=9.0 + legend_room(runs))
    labels, caption = run_labels(report, runs)
    for run, label in zip(runs, labels):
        style = styles[run["id"]]
        x, y = rl.staleness_histogram(run, unit)
        ax.step(x, y, where="mid", color=style.color, marker=style.marker, linestyle=style.dash, markersize=3,
                linewidth=1.2, label=label + disposition_suffix([run]))
    staleness_ticks(ax, max(max(rl.staleness_histogram(r, unit)[0]) for r in runs))
    ax.set_xlabel(STALENESS_UNITS[unit])
    ax.set_ylabel("share of applied gradients (fraction)")
    ax.grid(alpha=0.3)
    run_legend(ax, report, runs, styles, caption=caption)
    return save(fig, out_dir / name)


def positive_bytes(run):
    """The run's cumulative bytes per series point (rl.cumulative_bytes), NaN where not positive (no log x)."""
    return [b if b > 0 else math.nan for b in rl.cumulative_bytes(run)[1]]


def fig_accuracy_vs_bytes(report, styles, out_dir, note):
    """Eval accuracy against the cumulative bytes one rank sent (rl.cumulative_bytes, log x), written when some run
    of the report compresses; uncompressed runs of the report are drawn beside them as the baseline."""
    if not any(rl.compressed(r) for r in report["runs"]) or only_timing(report):
        return not_applicable()  # no run compresses (compression.kind is none), or none trained
    runs = accuracy_runs(report, positive_bytes)
    if not runs:
        return skipped("accuracy_vs_bytes.png", "no run has both eval_accuracy and bytes sent")
    fig, ax = new_figure(report, "eval accuracy vs bytes sent per rank", note, width=9.0 + legend_room(runs))
    draw_accuracy(ax, report, styles, runs, positive_bytes)
    ax.set_xscale("log")
    ax.set_xlabel("bytes sent per rank, cumulative (mean bytes per step x steps; log scale)")
    return save(fig, out_dir / "accuracy_vs_bytes.png")


def breakdown_rows(report, runs):
    """The bars of the step breakdown, each a list of runs: one per run, or, past MAX_VERTICAL_BARS runs of a sweep
    with repeats, one per sweep point (its repeats, averaged), in run order."""
    if len(runs) <= MAX_VERTICAL_BARS or report.get("repeats", 1) <= 1:
        return [[run] for run in runs]
    groups = {}
    for run in runs:
        groups.setdefault(rl.sweep_point(run), []).append(run)
    return list(groups.values())


def phase_means(rows, phases_of=rl.measured_phases):
    """{phase: array of the mean ms per step of each row (the mean over its runs; a missing phase counts 0)}."""
    def mean_ms(run, phase):
        return rl.num(((phases_of(run).get(phase) or {}).get("all") or {}).get("mean_ms"))

    return {phase: np.array([np.mean(np.nan_to_num([mean_ms(r, phase) for r in row], nan=0.0)) for row in rows])
            for phase in rl.PHASES}


def fig_step_breakdown(report, styles, out_dir, note, clock="measured"):
    """Stacked bars of the mean time per phase of each run on one clock (measured, or modeled by the cost model):
    vertical up to MAX_VERTICAL_BARS bars, else horizontal in a figure whose height is capped (repeats averaged, and
    only every k-th bar labelled when rows get too dense)."""
    phases_of = rl.measured_phases if clock == "measured" else rl.modeled_phases
    name = "step_breakdown.png" if clock == "measured" else "step_breakdown_modeled.png"
    runs = [r for r in rl.drawn_runs(report) if phases_of(r)]
    if not runs:
        if clock == "modeled" or only_timing(report):
            return not_applicable()  # no modeled clock; timing-only runs have no measured one
        return skipped(name, f"no run has {clock} timing")
    rows = breakdown_rows(report, runs)
    grouped = len(rows) < len(runs)
    repeats = report.get("repeats", 1)
    firsts = [row[0] for row in rows]
    labels, caption = run_labels(report, firsts, repeats=1 if grouped else None)
    labels = [label + disposition_suffix(row, repeats if grouped else 1) for label, row in zip(labels, rows)]
    title = f"mean {clock} time per step by phase (all ranks)"
    if clock == "modeled":
        hardware = sorted({((r.get("timing") or {}).get("modeled") or {}).get("hardware", "?") for r in runs})
        title += " on " + ", ".join(hardware)
    if grouped:
        title += f", mean of {repeats} repeats"
    n = len(rows)
    horizontal = n > MAX_VERTICAL_BARS
    subtitle = rl.host_clock_note(report, runs) if clock == "measured" else ""
    if subtitle and any(phases_of is rl.measured_phases and rl.modeled_phases(r) for r in runs):
        subtitle += ": step_breakdown_modeled.png"
    if horizontal:
        fig, ax = new_figure(report, title, note, width=11.0, height=2.2 + BAR_ROW_IN * n, subtitle=subtitle)
    else:
        fig, ax = new_figure(report, title, note, width=max(7.0, 0.9 * n + 3.0), subtitle=subtitle)
    position = np.arange(n)
    base = np.zeros(n)
    for phase, means in phase_means(rows, phases_of).items():
        if horizontal:
            ax.barh(position, means, 0.7, left=base, color=PHASE_COLORS[phase], edgecolor="white", linewidth=0.5,
                    label=phase)
        else:
            ax.bar(position, means, 0.7, bottom=base, color=PHASE_COLORS[phase], edgecolor="white", linewidth=0.5,
                   label=phase)
        base += means
    colors = strategy_colors(runs)
    tick_colors = [colors[rl.strategy_label(row[0])] for row in rows]  # a light run shade is hard to read
    what = axis_caption("sweep points" if grouped else "runs", single_strategy(runs), caption)
    if horizontal:
        room = fig.get_size_inches()[1] - 2.2
        every = max(1, math.ceil(n / max(1.0, room / LABEL_ROW_IN)))
        if every > 1:
            what += f" (one label per {every} bars)"
        ax.set_yticks(position[::every])
        ax.set_yticklabels(labels[::every], fontsize=7)
        tick_colors = tick_colors[::every]
        ax.set_ylim(n - 0.5, -0.5)  # the first run on top
        ax.set_ylabel(what, fontsize=9)
        ax.set_xlabel("ms per step (mean)")
        ax.grid(axis="x", alpha=0.3)
        ticks = ax.get_yticklabels()
    else:
        ax.set_xticks(position)
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
        ax.set_xlabel(what, fontsize=9)
        ax.set_ylabel("ms per step (mean)")
        ax.grid(axis="y", alpha=0.3)
        ticks = ax.get_xticklabels()
    for tick, color in zip(ticks, tick_colors):
        tick.set_color(color)
    handles, phase_labels = ax.get_legend_handles_labels()
    if horizontal:
        # Phases stack left to right: the legend lists them in that order.
        ax.legend(handles, phase_labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(handles[::-1], phase_labels[::-1], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save(fig, out_dir / name)


def fig_throughput_vs_ranks(report, styles, out_dir, note):
    """Throughput (modeled, else measured) against cluster.ranks when the sweep has that axis: one line per
    combination of the other axes' values, passed runs only, repeats averaged."""
    axes = report.get("axes") or []
    ranks_axis = next((a for a in axes if a["paths"] == ["cluster.ranks"]), None)
    if ranks_axis is None:
        return not_applicable()  # the sweep has no cluster.ranks axis
    passed = [r for r in report["runs"] if r.get("disposition") == "passed"]
    metric = "modeled_samples_per_s"
    if not any(not math.isnan(rl.metric_value(r, metric)) for r in passed):
        metric = "samples_per_s"
    others = [a for a in axes if a is not ranks_axis]
    lines = {}
    for run in passed:
        value = rl.metric_value(run, metric)
        if math.isnan(value):
            continue
        key = tuple(json.dumps(rl.run_axis_value(run, a)) for a in others)
        ranks = rl.run_axis_value(run, ranks_axis)
        if ranks is None:
            continue
        lines.setdefault(key, {}).setdefault(ranks[0], []).append(value)
    if not lines:
        return skipped("throughput_vs_ranks.png", "no passed run has a throughput")
    legend = 1 < len(lines) <= MAX_LEGEND_RUNS
    title = f"{rl.METRICS[metric]} vs ranks"
    if len(lines) > MAX_LEGEND_RUNS:
        title += f" ({len(lines)} combinations of the other axes)"
    fig, ax = new_figure(report, title, note, width=9.0 + (2.5 if legend else 0))
    for (key, points), (color, marker, dash) in zip(sorted(lines.items()), series_styles(len(lines))):
        xs = sorted(points)
        ys = [float(np.mean(points[x])) for x in xs]
        label = ", ".join(f"{rl.axis_name(a).split('.')[-1]}="
                          f"{'/'.join(map(str, json.loads(v) or ['?']))}" for a, v in zip(others, key))
        ax.plot(xs, ys, marker=marker, linestyle=dash, markersize=5, markerfacecolor="none", linewidth=1.3,
                color=color, label=(label[:60] or None) if legend else None)
    ax.set_xlabel("cluster.ranks (ranks)")
    ax.set_ylabel(rl.METRICS[metric])
    integer_ticks(ax.xaxis)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save(fig, out_dir / "throughput_vs_ranks.png")


def heatmap_matrix(report, x_axis, y_axis, metric, runs=None):
    """The heatmap grid of `metric` over two sweep axes, from passed runs only (of `runs`, default every run).

    Returns (values, counts, labels): values[i][j] is the mean metric of the passed runs at y value i and x value j
    (NaN when there is none, or the metric is null for all of them); counts[i][j] how many runs that mean covers;
    labels[i][j] says what the value leaves out: "" when every passed run of the cell has a value; "not reached"
    (time to target) or "no value" when none has; "k/n reached" (or "k/n with a value") when only some have; the
    dispositions of the cell's runs when none passed; "no run" for an empty cell.
    """
    xs, ys = x_axis["values"], y_axis["values"]
    sums = np.zeros((len(ys), len(xs)))
    counts = np.zeros((len(ys), len(xs)), dtype=int)
    passed = np.zeros((len(ys), len(xs)), dtype=int)
    others = [[set() for _ in xs] for _ in ys]
    for run in report["runs"] if runs is None else runs:
        xv, yv = rl.run_axis_value(run, x_axis), rl.run_axis_value(run, y_axis)
        if xv not in xs or yv not in ys:
            continue
        i, j = ys.index(yv), xs.index(xv)
        value = rl.metric_value(run, metric)
        if run.get("disposition") == "passed":
            passed[i, j] += 1
            if not math.isnan(value):
                sums[i, j] += value
                counts[i, j] += 1
        else:
            others[i][j].add(run.get("disposition", "?"))
    with np.errstate(invalid="ignore", divide="ignore"):
        values = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    reached = metric in ("time_to_target_s", "modeled_time_to_target_s")

    def label(i, j):
        if passed[i, j] == 0:
            return "/".join(sorted(others[i][j])) or "no run"
        if counts[i, j] == 0:
            return "not reached" if reached else "no value"
        if counts[i, j] < passed[i, j]:
            return f"{counts[i, j]}/{passed[i, j]} " + ("reached" if reached else "with a value")
        return ""

    labels = [[label(i, j) for j in range(len(xs))] for i in range(len(ys))]
    return values, counts, labels


def cell_format(values):
    """The format of every number in one heatmap: fixed decimals, chosen so the largest magnitude shows three
    significant digits (0.8502 -> "0.850", 12.34 -> "12.3", 51234.5 -> "51,234")."""
    finite = np.abs(values[np.isfinite(values)])
    top = float(finite.max()) if finite.size else 0.0
    decimals = 2 if top == 0 else min(6, max(0, 2 - math.floor(math.log10(top))))
    return lambda v: f"{v:,.{decimals}f}"


# Most panels of one heatmap: one per combination of the values of the axes it does not draw.
MAX_FACETS = 12


class TooManyPanels(rl.ReportError):
    """A heatmap whose undrawn axes have more value combinations than MAX_FACETS panels; the text says which --x and
    --y to give."""


def facet_axes(report, x_axis, y_axis):
    """The sweep axes a heatmap of x_axis by y_axis draws one panel per value of: every other axis with more than one
    value (a heatmap never averages over an axis it does not show)."""
    return [a for a in report.get("axes") or [] if a is not x_axis and a is not y_axis and len(a["values"]) > 1]


def panel_count(facets):
    return math.prod(len(a["values"]) for a in facets) if facets else 1


def heatmap_axes(report, x_name=None, y_name=None):
    """(x axis, y axis, facet axes) of the heatmap: the named axes (rl.find_axis), unnamed ones filled in with the
    first axes of the sweep, or, when that would need more than MAX_FACETS panels, with the axes of the most values;
    the facets are every other axis with several values (facet_axes). None (no heatmap) when neither is named and the
    sweep has fewer than two axes. Raises ReportError for a name that is no axis of the report, or when the two would
    be missing or the same, and TooManyPanels when the undrawn axes need more than MAX_FACETS panels."""
    axes = report.get("axes") or []
    if x_name is None and y_name is None and len(axes) < 2:
        return None
    x_named = rl.find_axis(report, x_name) if x_name is not None else None
    y_named = rl.find_axis(report, y_name) if y_name is not None else None

    def fill(order):
        rest = [a for a in order if a is not x_named and a is not y_named]
        x_axis = x_named or (rest.pop(0) if rest else None)
        y_axis = y_named or (rest.pop(0) if rest else None)
        return x_axis, y_axis

    x_axis, y_axis = fill(axes)
    if x_axis is not None and y_axis is not None and x_axis is not y_axis and \
            panel_count(facet_axes(report, x_axis, y_axis)) > MAX_FACETS and (x_named is None or y_named is None):
        x_axis, y_axis = fill(sorted(axes, key=lambda a: -len(a["values"])))  # stable: sweep order among equals
    if x_axis is None or y_axis is None or x_axis is y_axis:
        known = ", ".join(rl.axis_name(a) for a in axes) or "none"
        raise rl.ReportError(f"a heatmap needs two different sweep axes (--x, --y; axes: {known})")
    facets = facet_axes(report, x_axis, y_axis)
    if panel_count(facets) > MAX_FACETS:
        counts = " x ".join(f"{rl.axis_name(a)} ({rl.count_text(len(a['values']), 'value')})" for a in facets)
        biggest = sorted(axes, key=lambda a: -len(a["values"]))[:2]
        raise TooManyPanels(
            f"a heatmap of {rl.axis_name(x_axis)} by {rl.axis_name(y_axis)} needs one panel per combination of the "
            f"axes it does not draw, {counts}: {panel_count(facets)} panels, more than {MAX_FACETS} (it never "
            f"averages over an axis it does not show); give --x and --y two axes of many values (e.g. --x "
            f"{rl.axis_name(biggest[0])} --y {rl.axis_name(biggest[1])}) or sweep fewer axes")
    return x_axis, y_axis, facets


def tick_every(count, cell_in, text_in):
    """Label every k-th of `count` ticks `cell_in` inches apart so that labels `text_in` inches across do not
    overlap."""
    return max(1, math.ceil(text_in / max(cell_in, 1e-6))) if count > 1 else 1


def facet_title(facets, combo):
    """A panel's title: the values of the undrawn axes it holds, "bucket_mb=25, accumulation_steps=4"."""
    names = rl.short_paths([rl.axis_name(a) for a in facets])
    return ", ".join(f"{names[rl.axis_name(a)]}={rl.axis_value_text(a, v)}" for a, v in zip(facets, combo))


def draw_heatmap_panel(ax, values, labels, x_axis, y_axis, metric, fontsize, norm, cell_w, cell_h):
    """One heatmap panel: cells colored on the shared `norm` (NaN cells hatched and labelled with why), numbers in
    them at `fontsize` (0: none), ticks thinned to fit cells of cell_w x cell_h inches. Returns the image."""
    xs, ys = x_axis["values"], y_axis["values"]
    cmap = plt.get_cmap("viridis_r" if metric in LOWER_IS_BETTER else "viridis").copy()
    cmap.set_bad("white")
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, norm=norm, origin="lower", aspect="auto")
    middle = (norm.vmin + norm.vmax) / 2 if norm.vmin is not None else 0.0
    fmt = cell_format(values)
    for i in range(len(ys)):
        for j in range(len(xs)):
            v = values[i, j]
            if math.isnan(v):
                # No value: hatched, and labelled with the reason (not reached, failed, ...).
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="#f4f4f4", edgecolor="#bdbdbd",
                                       hatch="///", linewidth=0))
                if fontsize:
                    ax.text(j, i, labels[i][j], ha="center", va="center", fontsize=fontsize - 1, color="#444444",
                            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 2})
                continue
            if not fontsize:
                continue
            dark = (v < middle) != (metric in LOWER_IS_BETTER)
            text = fmt(v) + (f"\n{labels[i][j]}" if labels[i][j] else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=fontsize, color="white" if dark else "black")
    x_texts = [rl.axis_value_text(x_axis, v) for v in xs]
    y_texts = [rl.axis_value_text(y_axis, v) for v in ys]
    char_in = 0.075  # width of a 10 pt tick label character
    x_rotate = max(map(len, x_texts)) * char_in > 0.9 * cell_w
    x_every = tick_every(len(xs), cell_w, 0.2 if x_rotate else max(map(len, x_texts)) * char_in)
    y_every = tick_every(len(ys), cell_h, 0.17)
    ax.set_xticks(range(0, len(xs), x_every))
    ax.set_xticklabels(x_texts[::x_every], rotation=30 if x_rotate else 0, ha="right" if x_rotate else "center")
    ax.set_yticks(range(0, len(ys), y_every))
    ax.set_yticklabels(y_texts[::y_every])
    ax.set_xlabel(rl.shorten(rl.axis_name(x_axis), 80) + " (swept values)")
    ax.set_ylabel(rl.shorten(rl.axis_name(y_axis), 80) + " (swept values)")
    return image


def fig_heatmap(report, styles, out_dir, note, metric, x_name=None, y_name=None):
    """The metric over two sweep axes, passed runs only: one panel per combination of the values of the other axes
    (facet_axes; at most MAX_FACETS, else skipped with a note naming --x and --y), one color scale for all panels,
    repeats averaged per cell."""
    if not report["runs"]:
        return skipped("heatmap", "the report has no runs")
    try:
        axes = heatmap_axes(report, x_name, y_name)
    except TooManyPanels as e:
        return skipped(f"heatmap_{metric}.png", str(e))
    if axes is None:
        return not_applicable()  # fewer than two sweep axes
    x_axis, y_axis, facets = axes
    combos = list(itertools.product(*[a["values"] for a in facets])) if facets else [()]
    panels = []
    for combo in combos:
        runs = [r for r in report["runs"] if all(rl.run_axis_value(r, a) == v for a, v in zip(facets, combo))]
        panels.append((combo, *heatmap_matrix(report, x_axis, y_axis, metric, runs)))
    title = f"{rl.METRICS[metric]}, passed runs"
    if max(int(c.max(initial=0)) for _, _, c, _ in panels) > 1:
        title += " (mean of the repeats per cell)"
    if facets:
        title += "; one panel per " + " x ".join(rl.shorten(rl.axis_name(a), 40) for a in facets)
    xs, ys = x_axis["values"], y_axis["values"]
    n = len(panels)
    ncols = min(3, math.ceil(math.sqrt(n)))  # 4 panels: 2 x 2
    nrows = math.ceil(n / ncols)
    # Room for the y tick labels beyond the 3.0 / 1.6 inches of decorations allowed for below (0.075 in a character
    # of 10 pt): without it long labels (a zip group's values) squeeze the axes to nothing.
    y_label_in = max(len(rl.axis_value_text(y_axis, v)) for v in ys) * 0.075
    if n == 1:
        extra = max(0.0, y_label_in - 1.0)
        fig, ax = new_figure(report, title, note, width=min(MAX_WIDTH_IN, max(6.0, 1.2 * len(xs) + 3.0 + extra)),
                             height=max(4.5, 0.8 * len(ys) + 2.5))
        grid = [ax]
        width, height = fig.get_size_inches()
        cell_w, cell_h = (width - 3.0 - extra) / len(xs), (height - 2.5) / len(ys)
    else:
        extra = max(0.0, y_label_in - 0.9)
        panel_w, panel_h = max(3.6, 1.0 * len(xs) + 1.6 + extra), max(3.0, 0.6 * len(ys) + 1.6)
        width = min(ncols * panel_w + 1.2, MAX_WIDTH_IN)
        lines = note_lines(note, width)
        height = min(nrows * panel_h + 0.8, MAX_HEIGHT_IN - 0.15 * len(lines))
        fig, ax_grid = plt.subplots(nrows, ncols, figsize=(width, height), layout="constrained", squeeze=False)
        grid = list(ax_grid.flat)
        for extra in grid[n:]:
            extra.axis("off")
        fig.suptitle(f"{rl.shorten(report['scenario_name'], 40)}: {title}", fontsize=10)
        if lines:
            fig.text(0.0, -0.01, "\n".join(lines), fontsize=7, color="#555555", va="top", ha="left")
        cell_w = max(0.05, ((width - 1.2) / ncols - 1.6 - extra) / len(xs))
        cell_h = ((height - 0.8) / nrows - 1.6) / len(ys)
    fontsize = 9 if cell_w >= 0.9 and cell_h >= 0.45 else 7 if cell_w >= 0.55 and cell_h >= 0.3 else 0
    if fontsize == 0:
        title += "; values by color only"
        if n == 1:
            grid[0].set_title(f"{rl.shorten(report['scenario_name'], 40)}: {title}")
        else:
            fig.suptitle(f"{rl.shorten(report['scenario_name'], 40)}: {title}", fontsize=10)
    finite = np.concatenate([v[np.isfinite(v)] for _, v, _, _ in panels])
    norm = matplotlib.colors.Normalize(float(finite.min()), float(finite.max())) if finite.size else \
        matplotlib.colors.Normalize()
    image = None
    for ax, (combo, values, _, labels) in zip(grid, panels):
        image = draw_heatmap_panel(ax, values, labels, x_axis, y_axis, metric, fontsize, norm, cell_w, cell_h)
        if facets:
            ax.set_title(rl.shorten(facet_title(facets, combo), 60), fontsize=9)
    if finite.size:
        fig.colorbar(image, ax=grid[:n], label=rl.METRICS[metric])
    return save(fig, out_dir / f"heatmap_{metric}.png")


# Line styles of the data-cache figure by cache policy (colors by the other swept values).
POLICY_MARKERS = {"none": "x", "lru": "o", "static": "s", "partitioned": "^"}


def fig_data_cache(report, styles, out_dir, note):
    """Two panels against the cache capacity (the sweep axis over data.cache.capacity_*), from each run's last epoch
    (the cache warm when it filled in the first; rl.last_epoch_data): the mean modeled step time (log y when it spans
    more than 20x) and the share of step time lost to data stalls (modeled solid, measured dashed). One curve per
    combination of the other swept values (rl.data_curves): a color per value of everything but the cache policy, a
    marker per policy. Written when a report sweeps the capacity and its runs have data."""
    name = "data_cache_vs_capacity.png"
    axis = rl.capacity_axis(report)
    if axis is None:
        return not_applicable()  # no sweep axis over data.cache.capacity_fraction or data.cache.capacity_bytes
    curves = rl.data_curves(report, axis)
    if not curves and only_timing(report):
        return not_applicable()  # timing-only runs read no data
    if not curves:
        return skipped(name, "no run has data totals")
    width = min(13.0 + (2.6 if len(curves) > 4 else 0.0), MAX_WIDTH_IN)
    lines = note_lines(note, width)
    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(width, 5.5), layout="constrained")
    fig.suptitle(f"{rl.shorten(report['scenario_name'], 40)}: step time and data-stall share vs cache capacity "
                 "(last epoch)")
    def color_key(label):
        return ", ".join(part for part in label.split(", ") if not part.startswith("policy="))

    groups = sorted({color_key(label) for label in curves})
    steps_seen = []
    for label, points in curves.items():
        policy = next((run["data"]["cache"]["policy"] for _, run in points
                       if run["data"]["cache"]["policy"] != "none"), "none")
        color = SERIES_COLORS[groups.index(color_key(label)) % len(SERIES_COLORS)]
        marker = POLICY_MARKERS.get(policy, "o")
        x = [c for c, _ in points]
        values = [rl.last_epoch_data(run) for _, run in points]
        step_ms = [v[0] for v in values]
        steps_seen += step_ms
        ax_t.plot(*finite_xy(x, step_ms), color=color, marker=marker, label=rl.shorten(label, 60) or "runs")
        ax_s.plot(*finite_xy(x, [v[1] for v in values]), color=color, marker=marker)
        ax_s.plot(*finite_xy(x, [v[2] for v in values]), color=color, marker=marker, linestyle=EVAL_LINESTYLE,
                  alpha=0.5)
    xlabel = ("cache capacity (fraction of the training set, per node)"
              if axis["paths"][0].endswith("fraction") else "cache capacity (bytes per node)")
    maybe_log_scale(ax_t, steps_seen)
    ax_t.set_xlabel(xlabel)
    ax_t.set_ylabel("mean step time, modeled (ms)")
    ax_s.set_xlabel(xlabel)
    ax_s.set_ylabel("share of step time lost to data stalls (fraction)")
    ax_s.set_ylim(-0.02, 1.02)
    keys = [Line2D([], [], color="#555555", linestyle="-", label="modeled clock"),
            Line2D([], [], color="#555555", linestyle=EVAL_LINESTYLE, label="measured clock (this host)")]
    place = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)} if len(curves) > 4 else {"loc": "best"}
    ax_s.legend(handles=keys + ax_t.get_legend_handles_labels()[0], fontsize=7, **place)
    if lines:
        fig.text(0.0, -0.02, "\n".join(lines), fontsize=7, color="#555555", va="top", ha="left")
    return save(fig, out_dir / name)


# ---- strategy summary (--summary): the runs of one scenario on one or more hardware profiles ------------------------

# One color per report (hardware profile) of a summary, in the order given.
PROFILE_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#8172b2", "#c44e52", "#937860"]


def profile_names(reports, paths):
    """The name of each report of a summary: its runs' modeled hardware profile (timing.modeled.hardware); where two
    reports share one (or one has none), the report's folder name, else its file name, else "report N"."""
    def profile(report):
        for run in report["runs"]:
            name = ((run.get("timing") or {}).get("modeled") or {}).get("hardware")
            if name:
                return str(name)
        return None

    for names in ([profile(r) for r in reports], [Path(p).resolve().parent.name for p in paths],
                  [Path(p).stem for p in paths]):
        if None not in names and "" not in names and len(set(names)) == len(names):
            return names
    return [f"report {i + 1}" for i in range(len(reports))]


def data_summary(report):
    """True when the summary's middle panel shows the last epoch and its data stall: the report sweeps the data cache
    or the storage (a data.cache* or data.storage* path) and every run has per-epoch data of more than one epoch."""
    swept = {p for a in report.get("axes") or [] for p in a["paths"]}
    if not any(p.startswith(("data.cache", "data.storage")) for p in swept):
        return False
    for run in report["runs"]:
        epochs = [r.get("epochs") or [] for r in (run.get("data") or {}).get("per_rank") or []]
        if not epochs or not all(len(e) > 1 for e in epochs):
            return False
    return True


def summary_step(run, last_epoch):
    """(step ms, part ms) of the summary's middle panel: with last_epoch (data_summary), the last epoch's mean
    modeled step and data stall (the cache warm); else the mean modeled step and the exposed communication
    (rl.exposed_communication_ms)."""
    if last_epoch:
        step_ms, stall_share, _ = rl.last_epoch_data(run)
        return step_ms, step_ms * stall_share
    return rl.modeled_step_mean_ms(run), rl.exposed_communication_ms(run)


def summary_target(runs):
    """The eval_accuracy target value shared by the runs' time_to_target objects, or None."""
    values = {(r.get("time_to_target") or {}).get("value") for r in runs
              if (r.get("time_to_target") or {}).get("metric") == "eval_accuracy"}
    return values.pop() if len(values) == 1 else None


def fig_summary(reports, paths, out_path):
    """One figure comparing the runs of one scenario on one or more hardware profiles (one report each; runs matched
    by id to the first report's, in its order). Three panels sharing the rows (rl.summary_labels: the swept values
    that differ from the first run): modeled time to target (ms; "not reached" or the disposition where there is
    none; without any target, modeled throughput instead), the mean modeled step (ms) with its exposed communication
    (or, for data-cache sweeps, data_summary: the last epoch's step and data stall) hatched inside it, and the final
    eval accuracy with the target. One bar color per report. Returns out_path."""
    first = reports[0]
    runs = list(first["runs"])
    names = profile_names(reports, paths)
    by_id = [{r["id"]: r for r in rep["runs"]} for rep in reports]
    labels, reference = rl.summary_labels(first, runs)
    all_runs = [r for rep in reports for r in rep["runs"]]
    # Timing-only runs have no accuracy, so never a time to target: they are ranked by modeled throughput.
    with_target = any(r.get("time_to_target") and not rl.timing_only(r) for r in all_runs)
    n, k = len(runs), len(reports)
    group_h = 0.8
    bar_h = group_h / k
    height = min(1.6 + n * (0.22 * k + 0.18), MAX_HEIGHT_IN)
    fig, (ax_t, ax_s, ax_a) = plt.subplots(1, 3, figsize=(min(13.0, MAX_WIDTH_IN), height), sharey=True,
                                           layout="constrained", gridspec_kw={"width_ratios": [1.2, 1.2, 1.0]})
    title = f"{rl.shorten(first['scenario_name'], 40)}: when each variant pays off"
    if k > 1:
        title += " (" + " vs ".join(names) + ")"
    fig.suptitle(title, fontsize=11)
    y_mid = np.arange(n)
    last_epoch = all(data_summary(r) for r in reports)
    t_values, s_values, accs = [], [], []
    for j, (lookup, name) in enumerate(zip(by_id, names)):
        color = PROFILE_COLORS[j % len(PROFILE_COLORS)]
        y = y_mid - group_h / 2 + bar_h * (j + 0.5)
        for i, base in enumerate(runs):
            run = lookup.get(base["id"])
            if run is None:
                ax_t.text(0, y[i], " not in this report", fontsize=6, va="center", color="#777777")
                continue
            if not rl.finished(run):  # stopped part-way (or never ran): no bar is data
                for ax in (ax_t, ax_s, ax_a):
                    ax.text(0, y[i], f" {rl.unfinished_text(run)}: not drawn", fontsize=6, va="center", color=color)
                continue
            if with_target:
                value = rl.metric_value(run, "modeled_time_to_target_s") * 1e3
            else:
                value = rl.metric_value(run, "modeled_samples_per_s")
            if math.isnan(value):
                why = run.get("disposition", "?")
                why = "not reached" if why == "passed" else why
                ax_t.text(0, y[i], f" {why}", fontsize=6, va="center", color=color)
            else:
                t_values.append(value)
                ax_t.barh(y[i], value, height=bar_h * 0.9, color=color, label=name if i == 0 else None)
                ax_t.text(value, y[i], f" {value:.3g}", fontsize=6, va="center")
            step_ms, part_ms = summary_step(run, last_epoch)
            if not math.isnan(step_ms):
                s_values.append(step_ms)
                ax_s.barh(y[i], step_ms, height=bar_h * 0.9, color=color, alpha=0.45)
                if not math.isnan(part_ms) and part_ms > 0:
                    ax_s.barh(y[i], part_ms, height=bar_h * 0.9, color=color, hatch="////", edgecolor="white",
                              linewidth=0)
                ax_s.text(step_ms, y[i], f" {step_ms:.3g}", fontsize=6, va="center")
            acc = rl.metric_value(run, "eval_accuracy")
            if not math.isnan(acc):
                accs.append(acc)
                ax_a.barh(y[i], acc, height=bar_h * 0.9, color=color)
                ax_a.text(acc, y[i], f" {acc:.3f}", fontsize=6, va="center")
    for ax, values in ((ax_t, t_values), (ax_s, s_values)):
        if values and min(values) > 0 and max(values) / min(values) > 20:
            ax.set_xscale("log")
        elif values:
            ax.set_xlim(0, max(values) * 1.22)
        ax.grid(axis="x", alpha=0.3)
    ax_t.set_xlabel("time to target, modeled (ms)" if with_target else "throughput, modeled (samples/s)")
    ax_t.set_title("time to target (shorter is better)" if with_target else "throughput (higher is better)",
                   fontsize=9)
    part = "data stall" if last_epoch else "exposed communication"
    if not last_epoch and any(rl.parameter_server(r) for r in all_runs):
        part += "\n(parameter server: its push and pull)"
    step_what = "last epoch's step" if last_epoch else "step"
    ax_s.set_xlabel(f"mean modeled {step_what} (ms); hatched: {part}")
    ax_s.set_title(f"modeled {step_what} (shorter is better)", fontsize=9)
    target = summary_target(all_runs)
    if accs:
        low = min(accs + ([target] if target else []))
        ax_a.set_xlim(max(0.0, low - 0.08), min(1.0, max(accs) + 0.06))
    if target is not None:
        ax_a.axvline(target, color="black", linestyle=":", linewidth=0.9)
        ax_a.text(target, n - 0.5, f"target {target:g} ", fontsize=6, ha="right", va="bottom")
    ax_a.set_xlabel("final eval accuracy (fraction correct)")
    ax_a.set_title("final eval accuracy (higher is better)", fontsize=9)
    ax_a.grid(axis="x", alpha=0.3)
    ax_t.set_yticks(y_mid, labels=[textwrap.fill(label, 28) for label in labels], fontsize=7)
    ax_t.get_yticklabels()[0].set_fontweight("bold")
    ax_t.set_ylim(n - 0.5, -0.7)
    if k > 1:  # under the panels, right of the note: never over a bar
        handles, names_drawn = ax_t.get_legend_handles_labels()
        fig.legend(handles, names_drawn, title="hardware profile", fontsize=7, title_fontsize=7, ncol=k,
                   loc="upper right", bbox_to_anchor=(1.0, 0.0))
    note = f"reference (first run): {reference}. Other rows: the swept values that differ from it."
    if k == 1:
        note += f" One hardware profile: {names[0]}."
    fig.text(0.0, 0.0, "\n".join(note_lines(note, 13.0)), fontsize=7, color="#555555", va="top", ha="left")
    return save(fig, out_path)


def summary_main(summary, report_paths):
    """--summary: checks every report (readable, valid, the same scenario name), then writes one summary figure."""
    errors, reports = [], []
    for path in report_paths:
        try:
            reports.append(rl.load_report(path))
        except rl.ReportError as e:
            errors.append(error_text(path, e))
    if not errors:
        names = {r["scenario_name"] for r in reports}
        if len(names) > 1:
            errors.append(f"--summary compares one scenario on several profiles; the reports are of {len(names)} "
                          f"scenarios ({', '.join(sorted(names))})")
        elif not reports[0]["runs"]:
            errors.append(f"{report_paths[0]}: the report has no runs")
        problem = summary_path_problem(Path(summary))
        if problem:
            errors.append(f"--summary {summary}: {problem}")
    if errors:
        for message in errors:
            rl.say(f"error: {message}")
        rl.say("error: no figure written")
        return 2
    try:
        written = fig_summary(reports, report_paths, Path(summary))
    except (OSError, ValueError) as e:
        rl.say(f"error: {summary}: cannot write the summary figure: {e}")
        return 2
    print(rl.shown_path(written))
    return 0


def summary_path_problem(path):
    """Why --summary PATH cannot be written as named (matplotlib would add ".png" to a folder or a name without a
    suffix, and fail with a traceback on an unknown suffix or a missing folder), or None."""
    from matplotlib.backend_bases import FigureCanvasBase
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    if path.is_dir():
        return "is a folder; expected a file name such as summary.png"
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in formats:
        return (f"the file name must end in one of {', '.join('.' + f for f in formats)}"
                + (f" (got .{suffix})" if suffix else " (it has no suffix)"))
    if not path.parent.is_dir():
        return f"{path.parent} is not a folder"
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return f"{path.parent} is not writable"
    if path.exists() and not path.is_file():
        return "is not a regular file"
    return None


def skipped(name, why):
    """A figure the report calls for but cannot have: a note on stderr saying why (its own lines when long)."""
    rl.say(f"note: {name} not written:", explanation=why)
    return None


def not_applicable():
    """A figure that does not apply to what was swept (no compressor, no parameter server, no modeled clock, no ranks
    or cache-capacity axis, fewer than two axes for a heatmap): left out without a note."""
    return None


# ---- driver ---------------------------------------------------------------------------------------------------------

def write_figures(report, out_dir, metric=None, x_name=None, y_name=None):
    """Writes every figure of one report into out_dir; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    styles = run_styles(report["runs"])
    note = rl.undrawn_note(report)
    metric = metric or rl.default_metric(report)
    if timing_only_note(report):
        rl.say(f"note: {timing_only_note(report)}")
    paths = [
        fig_loss_vs_step(report, styles, out_dir, note),
        fig_loss_vs_time(report, styles, out_dir, note),
        fig_accuracy_vs_time(report, styles, out_dir, note),
        fig_accuracy_vs_modeled_time(report, styles, out_dir, note),
        fig_accuracy_vs_bytes(report, styles, out_dir, note),
        fig_staleness(report, styles, out_dir, note, "versions"),
        fig_staleness(report, styles, out_dir, note, "clocks"),
        fig_step_breakdown(report, styles, out_dir, note),
        fig_step_breakdown(report, styles, out_dir, note, clock="modeled"),
        fig_throughput_vs_ranks(report, styles, out_dir, note),
        fig_heatmap(report, styles, out_dir, note, metric, x_name, y_name),
        fig_data_cache(report, styles, out_dir, note),
    ]
    return [p for p in paths if p is not None]


def output_dirs(report_paths, out):
    """Where each report's figures go: beside the report, or --out (one subfolder per report when several)."""
    if out is None:
        return [p.resolve().parent for p in report_paths]
    if len(report_paths) == 1:
        return [out]
    dirs, used = [], set()
    for p in report_paths:
        name = p.resolve().parent.name or p.stem
        candidate, n = name, 1
        while candidate in used:
            n += 1
            candidate = f"{name}_{n}"
        used.add(candidate)
        dirs.append(out / candidate)
    return dirs


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT", help="report.json files")
    parser.add_argument("--out", type=Path, help="folder for the figures (default: beside each report)")
    parser.add_argument("--metric", choices=sorted(rl.METRICS),
                        help="heatmap metric (default: eval_accuracy when present, else train_loss)")
    parser.add_argument("--x", help="heatmap x axis: dotted path, its last component, or index (default: first axis; "
                                    "the other axes get a panel per value, at most 12 panels)")
    parser.add_argument("--y", help="heatmap y axis (default: second axis)")
    parser.add_argument("--summary", type=Path, metavar="PNG",
                        help="write only one summary figure of one scenario's runs (time to target, modeled step, "
                             "final accuracy), one bar color per report: the same scenario on several hardware "
                             "profiles")
    return parser.parse_args(argv)


def check_out_dir(out_dir):
    """Raises ReportError unless out_dir is a folder, or can be made as one, that this process can write in."""
    existing = Path(out_dir)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise rl.ReportError(f"{out_dir}: cannot write figures there: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise rl.ReportError(f"{out_dir}: cannot write figures there: {existing} is not writable")


def error_text(path, error):
    message = str(error)
    return message if str(path) in message else f"{path}: {message}"


def main(argv=None):
    """Checks every report and argument first (reports readable and valid, --x/--y axes of every report, output
    folders writable), and writes nothing when one fails; then writes the figures of each report."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.summary is not None:
        return summary_main(args.summary, args.reports)
    jobs, errors = [], []
    for path, out_dir in zip(args.reports, output_dirs(args.reports, args.out)):
        try:
            report = rl.load_report(path)
            if not report["runs"]:  # nothing to draw: an error like every other case that writes no figure
                raise rl.ReportError(f"{path}: the report has no runs (nothing to draw)")
            try:
                heatmap_axes(report, args.x, args.y)
            except TooManyPanels:
                if args.x is not None or args.y is not None:  # asked for: refused; by default: a note, no heatmap
                    raise
        except rl.ReportError as e:
            errors.append(error_text(path, e))
            continue
        try:
            check_out_dir(out_dir)
            jobs.append((path, out_dir, report))
        except rl.ReportError as e:  # the output folder's problem: named by it, not by the report
            errors.append(str(e))
    if errors:
        for message in errors:
            rl.say(f"error: {message}")
        rl.say("error: no figure written")
        return 2
    status = 0
    for path, out_dir, report in jobs:
        if rl.undrawn_runs(report):
            rl.say(f"{rl.shown_path(path)}: {rl.undrawn_note(report)}")
        try:
            for written in write_figures(report, out_dir, args.metric, args.x, args.y):
                print(rl.shown_path(written))
        except rl.ReportError as e:
            rl.say(f"error: {error_text(path, e)}")
            status = 2
        except OSError as e:  # writing a figure: the output folder is to blame, not the report
            rl.say(f"error: {out_dir}: cannot write figures there: {e}")
            status = 2
    return status


if __name__ == "__main__":
    sys.exit(main())
