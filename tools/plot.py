#!/usr/bin/env python3
"""Figures from gradsweep reports: loss and accuracy curves, per-phase step breakdown, and a sweep heatmap.

    python tools/plot.py REPORT... [--out DIR] [--metric NAME] [--x AXIS --y AXIS]

One function per figure (fig_*); a new figure is one function plus one line in write_figures. Each strategy has a hue
family (a sequential colormap: Blues, Oranges, ...; the same in every figure of a report); its runs take shades of it
from dark to light in run order, and a marker each. Train curves are solid, eval curves dashed.
"""
import argparse
import math
import sys
import textwrap
from collections import namedtuple
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless; must precede the pyplot import
import matplotlib.colors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
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
# Fixed phase colors for the step breakdown, in rl.PHASES order.
PHASE_COLORS = {"data": "#9e9e9e", "forward": "#4c72b0", "backward": "#55a868", "compress": "#8172b2",
                "communicate": "#c44e52", "optimizer": "#ccb974", "wait": "#e0e0e0"}
# Metrics where lower is better get the reversed colormap, so "better" has the same color in every heatmap.
LOWER_IS_BETTER = {"eval_loss", "train_loss", "time_to_target_s", "step_p50_ms"}

Style = namedtuple("Style", "color marker family")


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
    in the strategy's family, and the k-th marker."""
    families = strategy_families(runs)
    members = {}
    for run in sorted(runs, key=lambda r: r.get("index", 0)):
        members.setdefault(rl.strategy_label(run), []).append(run)
    styles = {}
    for label, group in members.items():
        n = len(group)
        for k, run in enumerate(group):
            shade = SINGLE if n == 1 else DARKEST - (DARKEST - LIGHTEST) * k / (n - 1)
            styles[run["id"]] = Style(family_color(families[label], shade), MARKERS[k % len(MARKERS)],
                                      families[label])
    return styles


def single_strategy(runs):
    """The strategy label shared by every run, or None when they differ (or there are no runs)."""
    labels = {rl.strategy_label(r) for r in runs}
    return labels.pop() if len(labels) == 1 else None


def legend_label(run, repeats, with_strategy=True, axes=None):
    text = rl.run_label(run, repeats, axes)
    if with_strategy:
        text = f"{rl.strategy_label(run)} {text}"
    if run.get("disposition") != "passed":
        text += f" ({run.get('disposition')})"
    return text


# ---- figure helpers -------------------------------------------------------------------------------------------------

def legend_room(runs):
    """Extra figure width for a legend placed outside the axes (run_legend does so past 4 runs)."""
    return 2.6 if len(runs) > 4 else 0.0


def new_figure(report, title, note, width=9.0, height=5.5):
    """A figure with one axes titled with the report's name; `note`, when given, goes in a text strip below it."""
    if not note:
        fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    else:
        wrapped = textwrap.fill(note, width=int(width * 16))
        lines = wrapped.count("\n") + 1
        fig, (ax, note_ax) = plt.subplots(2, 1, figsize=(width, height + 0.15 * lines), layout="constrained",
                                          gridspec_kw={"height_ratios": [height, 0.15 * lines + 0.05]})
        note_ax.axis("off")
        note_ax.text(0.0, 1.0, wrapped, fontsize=7, color="#555555", va="top", ha="left",
                     transform=note_ax.transAxes)
    ax.set_title(f"{report['scenario_name']}: {title}")
    return fig, ax


def save(fig, path):
    fig.savefig(path, dpi=110, bbox_inches="tight")
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


def run_legend(ax, runs, keys=()):
    """The legend of the runs drawn on ax, plus `keys` (handles explaining line styles and markers). With one strategy
    its name is the legend's title instead of a prefix of every entry. Outside the axes, on the right, past 4 runs
    (legend_room widens the figure to match)."""
    handles, _ = ax.get_legend_handles_labels()
    handles = handles + list(keys)
    if not handles:
        return
    place = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)} if len(runs) > 4 else {"loc": "best"}
    ax.legend(handles=handles, fontsize=7, title=single_strategy(runs), title_fontsize=7, **place)


def style_keys(with_eval, with_diverged):
    """Legend entries for the line conventions: solid train loss, dashed eval loss, a cross where a run diverged."""
    keys = []
    if with_eval:
        keys += [Line2D([], [], color="black", linestyle=TRAIN_LINESTYLE, label="train loss"),
                 Line2D([], [], color="black", linestyle=EVAL_LINESTYLE, label="eval loss")]
    if with_diverged:
        keys.append(Line2D([], [], color="black", marker="x", markersize=7, linestyle="none", label="diverged"))
    return keys


def run_text(report, run, runs):
    """A run's legend or tick text: the strategy (unless all runs share one), the swept values, the disposition."""
    return legend_label(run, report["repeats"], with_strategy=single_strategy(runs) is None, axes=report.get("axes"))


def draw_loss(ax, report, styles, x_key):
    """Train loss (solid) and eval loss (dashed, where evaluated) of every drawn run against x_key."""
    runs = rl.drawn_runs(report)
    any_eval, any_diverged, all_y = False, False, []
    for run in runs:
        style = styles[run["id"]]
        steps, train = rl.series(run, "train_loss")
        x = steps if x_key == "step" else rl.series(run, x_key)[1]
        every = max(1, len(x) // 10)
        # Train losses are noisy (one step's samples each): thin and slightly transparent, under the eval curves.
        ax.plot(x, train, color=style.color, marker=style.marker, linestyle=TRAIN_LINESTYLE, markevery=every,
                markersize=4, linewidth=0.9, alpha=0.8, zorder=2, label=run_text(report, run, runs))
        all_y += train
        ex, ey = finite_xy(x, rl.series(run, "eval_loss")[1])
        if ex:
            any_eval = True
            all_y += ey
            ax.plot(ex, ey, color=style.color, marker=style.marker, linestyle=EVAL_LINESTYLE, markersize=5,
                    linewidth=1.6, zorder=3)
        if run.get("disposition") == "diverged":
            fx, fy = finite_xy(x, train)
            if fx:
                any_diverged = True
                ax.plot(fx[-1], fy[-1], marker="x", markersize=10, color=style.color, linestyle="none")
    maybe_log_scale(ax, all_y)
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    run_legend(ax, runs, style_keys(any_eval, any_diverged))


# ---- figures (one function each; each returns the path written, or None with a note on stderr) ----------------------

def fig_loss_vs_step(report, styles, out_dir, note):
    if not rl.drawn_runs(report):
        return skipped("loss_vs_step.png", "no run with a convergence series")
    fig, ax = new_figure(report, "loss vs step", note, width=9.0 + legend_room(rl.drawn_runs(report)))
    draw_loss(ax, report, styles, "step")
    ax.set_xlabel("optimizer step")
    return save(fig, out_dir / "loss_vs_step.png")


def fig_loss_vs_time(report, styles, out_dir, note):
    if not rl.drawn_runs(report):
        return skipped("loss_vs_time.png", "no run with a convergence series")
    fig, ax = new_figure(report, "loss vs measured time", note, width=9.0 + legend_room(rl.drawn_runs(report)))
    draw_loss(ax, report, styles, "measured_s")
    ax.set_xlabel("measured time (s)")
    return save(fig, out_dir / "loss_vs_time.png")


def fig_accuracy_vs_time(report, styles, out_dir, note):
    runs = [r for r in rl.drawn_runs(report) if finite_xy(*rl.series(r, "eval_accuracy"))[0]]
    if not runs:
        return skipped("accuracy_vs_time.png", "no run has eval_accuracy")
    fig, ax = new_figure(report, "eval accuracy vs measured time", note, width=9.0 + legend_room(runs))
    targets = set()
    for run in runs:
        style = styles[run["id"]]
        # Only eval curves here, so they need no dashes to tell them from train curves.
        x, y = finite_xy(rl.series(run, "measured_s")[1], rl.series(run, "eval_accuracy")[1])
        ax.plot(x, y, color=style.color, marker=style.marker, linestyle=TRAIN_LINESTYLE, markersize=4,
                linewidth=1.3, label=run_text(report, run, runs))
        ttt = run.get("time_to_target")
        if ttt and ttt.get("metric") == "eval_accuracy":
            targets.add(ttt["value"])
    for value in sorted(targets):
        ax.axhline(value, color="black", linewidth=0.8, linestyle=":")
        ax.annotate(f"target {value:g}", (0.01, value), xycoords=("axes fraction", "data"), fontsize=7,
                    va="bottom", ha="left")
    ax.set_xlabel("measured time (s)")
    ax.set_ylabel("eval accuracy")
    ax.grid(alpha=0.3)
    run_legend(ax, runs)
    return save(fig, out_dir / "accuracy_vs_time.png")


def fig_step_breakdown(report, styles, out_dir, note):
    runs = [r for r in rl.drawn_runs(report) if rl.measured_phases(r)]
    if not runs:
        return skipped("step_breakdown.png", "no run has measured timing")
    fig, ax = new_figure(report, "mean measured time per step by phase (all ranks)", note,
                         width=max(7.0, 0.9 * len(runs) + 3.0))
    x = np.arange(len(runs))
    bottom = np.zeros(len(runs))
    for phase in rl.PHASES:
        means = np.array([rl.num(((rl.measured_phases(r).get(phase) or {}).get("all") or {}).get("mean_ms"))
                          for r in runs])
        means = np.nan_to_num(means, nan=0.0)
        ax.bar(x, means, 0.7, bottom=bottom, color=PHASE_COLORS[phase], edgecolor="white", linewidth=0.5,
               label=phase)
        bottom += means
    ax.set_xticks(x)
    ax.set_xticklabels([run_text(report, r, runs) for r in runs], rotation=30, ha="right", fontsize=7)
    colors = strategy_colors(runs)
    for tick, run in zip(ax.get_xticklabels(), runs):
        tick.set_color(colors[rl.strategy_label(run)])  # the strategy's color: a light run shade is hard to read
    strategy = single_strategy(runs)
    if strategy:
        ax.set_xlabel(f"runs ({strategy})")
    ax.set_ylabel("ms per step (mean)")
    ax.grid(axis="y", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save(fig, out_dir / "step_breakdown.png")


def heatmap_matrix(report, x_axis, y_axis, metric):
    """The heatmap grid of `metric` over two sweep axes, from passed runs only.

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
    for run in report["runs"]:
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
    reached = metric == "time_to_target_s"

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


def fig_heatmap(report, styles, out_dir, note, metric, x_name=None, y_name=None):
    axes = report.get("axes") or []
    if not report["runs"]:
        return skipped("heatmap", "the report has no runs")
    if x_name is None and y_name is None and len(axes) < 2:
        return skipped("heatmap", f"the sweep has {len(axes)} axis(es), a heatmap needs two")
    x_axis = rl.find_axis(report, x_name) if x_name is not None else None
    y_axis = rl.find_axis(report, y_name) if y_name is not None else None
    rest = [a for a in axes if a is not x_axis and a is not y_axis]
    x_axis = x_axis or (rest.pop(0) if rest else None)
    y_axis = y_axis or (rest.pop(0) if rest else None)
    if x_axis is None or y_axis is None or x_axis is y_axis:
        raise rl.ReportError("a heatmap needs two different sweep axes (--x, --y)")
    values, counts, labels = heatmap_matrix(report, x_axis, y_axis, metric)
    title = f"{rl.METRICS[metric]}, passed runs"
    if counts.max(initial=0) > 1:
        title += " (mean per cell)"
    xs, ys = x_axis["values"], y_axis["values"]
    fig, ax = new_figure(report, title, note, width=max(6.0, 1.2 * len(xs) + 3.0),
                         height=max(4.5, 0.8 * len(ys) + 2.5))
    cmap = plt.get_cmap("viridis_r" if metric in LOWER_IS_BETTER else "viridis").copy()
    cmap.set_bad("white")
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, origin="lower", aspect="auto")
    if not np.all(np.isnan(values)):
        fig.colorbar(image, ax=ax, label=rl.METRICS[metric])
    finite = values[~np.isnan(values)]
    middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    fmt = cell_format(values)
    for i in range(len(ys)):
        for j in range(len(xs)):
            v = values[i, j]
            if math.isnan(v):
                # No value: hatched, and labelled with the reason (not reached, failed, ...).
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="#f4f4f4", edgecolor="#bdbdbd",
                                       hatch="///", linewidth=0))
                ax.text(j, i, labels[i][j], ha="center", va="center", fontsize=8, color="#444444",
                        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 2})
                continue
            dark = (v < middle) != (metric in LOWER_IS_BETTER)
            text = fmt(v) + (f"\n{labels[i][j]}" if labels[i][j] else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=9, color="white" if dark else "black")
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels([rl.axis_value_text(x_axis, v) for v in xs])
    ax.set_yticks(range(len(ys)))
    ax.set_yticklabels([rl.axis_value_text(y_axis, v) for v in ys])
    ax.set_xlabel(rl.axis_name(x_axis))
    ax.set_ylabel(rl.axis_name(y_axis))
    return save(fig, out_dir / f"heatmap_{metric}.png")


def skipped(name, why):
    print(f"note: {name} not written: {why}", file=sys.stderr)
    return None


# ---- driver ---------------------------------------------------------------------------------------------------------

def write_figures(report, out_dir, metric=None, x_name=None, y_name=None):
    """Writes every figure of one report into out_dir; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    styles = run_styles(report["runs"])
    note = rl.undrawn_note(report)
    metric = metric or rl.default_metric(report)
    paths = [
        fig_loss_vs_step(report, styles, out_dir, note),
        fig_loss_vs_time(report, styles, out_dir, note),
        fig_accuracy_vs_time(report, styles, out_dir, note),
        fig_step_breakdown(report, styles, out_dir, note),
        fig_heatmap(report, styles, out_dir, note, metric, x_name, y_name),
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
    parser.add_argument("--x", help="heatmap x axis: dotted path, its last component, or index (default: first axis)")
    parser.add_argument("--y", help="heatmap y axis (default: second axis)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    status = 0
    for path, out_dir in zip(args.reports, output_dirs(args.reports, args.out)):
        try:
            report = rl.load_report(path)
            if rl.undrawn_runs(report):
                print(f"{path}: {rl.undrawn_note(report)}", file=sys.stderr)
            for written in write_figures(report, out_dir, args.metric, args.x, args.y):
                print(written)
        except rl.ReportError as e:
            message = str(e)
            if str(path) not in message:
                message = f"{path}: {message}"
            print(f"error: {message}", file=sys.stderr)
            status = 2
    return status


if __name__ == "__main__":
    sys.exit(main())
