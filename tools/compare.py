#!/usr/bin/env python3
"""Compares the runs of gradsweep reports: one table row per run, or run by run between two reports of one scenario.
A new table column is one entry in TABLE_COLUMNS (OPTIONAL: shown only when some run has a non-zero value); a new diff
metric one entry in DIFF_METRICS.

    python tools/compare.py REPORT... [--baseline RUN_ID|NAME] [--format markdown|csv] [--pareto PNG]
                                      [--clock auto|measured|modeled] [--diff | --table]

Table mode (several scenarios, or one report): one row per run with the swept values as columns, time to target on
both clocks, final eval accuracy, bytes on the wire per rank and step, modeled exposed communication per step, the
speedup in time to target against a baseline run on both clocks (throughput when neither run has a target it can
reach: none set, or timing-only runs; "-" with a footnote when a target is set but not reached), and a status that
marks runs that did not reach the target, diverged or failed. Diff mode (two reports of the same scenario, e.g.
from two commits; forced by --diff):
runs matched by id, one row per run and metric with old, new and the relative change; runs in only one report are
flagged. docs/compare.md describes the columns, the defaults and the errors.
"""
import argparse
import csv
import io
import json
import math
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report_lib as rl  # noqa: E402

MISSING = "-"  # a cell without a value (Markdown); CSV leaves it empty


class Row:
    """One run of one report, with the values the table and the diff need (floats are NaN when absent)."""

    def __init__(self, report, path, run):
        self.report, self.path, self.run = report, path, run
        self.id = str(run.get("id", "?"))
        self.ttt_measured_s = rl.metric_value(run, "time_to_target_s")
        self.ttt_modeled_s = rl.metric_value(run, "modeled_time_to_target_s")
        self.speedup_measured = math.nan
        self.speedup_modeled = math.nan
        self.speedup_basis = ""  # "time_to_target", "throughput" (neither run has a reachable target), "" (none)
        self.baseline = False

    @property
    def status(self):
        text = run_status(self.run)
        return f"{text}, baseline" if self.baseline else text


def run_status(run):
    """"reached", "not reached" or "no target" for passed runs, "timing-only (no accuracy)" for passed timing-only
    runs (training.mode "timing": nothing is trained, so a target is never reached); the disposition (diverged,
    failed, skipped) otherwise, with the steps it got to when it stopped part-way ("interrupted at 66 of 468
    steps", rl.unfinished_text)."""
    disposition = run.get("disposition", "?")
    if disposition != "passed":
        return rl.unfinished_text(run)
    if rl.timing_only(run):
        return "timing-only (no accuracy)"
    ttt = run.get("time_to_target")
    if not ttt:
        return "no target"
    return "reached" if ttt.get("reached") else "not reached"


parameter_server = rl.parameter_server
exposed_communication_ms = rl.exposed_communication_ms  # the report's exposed (parameter server: push and pull)


def has_target(run):
    """True when the run's configuration sets a target (its report has a time_to_target object) that it can reach:
    a timing-only run computes no accuracy or loss, so its target does not count."""
    return bool(run.get("time_to_target")) and not rl.timing_only(run)


def modeled_wait_ms(run):
    """Modeled wait per rank and step (ms; barriers, the stale-synchronous bound, the slowest rank):
    timing.modeled.phases.wait.all.mean_ms; NaN without a modeled clock."""
    modeled = (run.get("timing") or {}).get("modeled") or {}
    wait = (modeled.get("phases") or {}).get("wait") or {}
    return rl.num((wait.get("all") or {}).get("mean_ms"))


def staleness_clocks_mean(run):
    """Mean staleness in clocks of the applied gradients of a free-running strategy (staleness.clocks.mean); NaN for
    lock-step strategies and reports without the key."""
    staleness = run.get("staleness")
    return rl.num(((staleness if isinstance(staleness, dict) else {}).get("clocks") or {}).get("mean"))


def data_total(key):
    """A getter of the input pipeline's totals over ranks and epochs (run key `data`, not config.data): NaN without
    them."""
    def get(run):
        data = run.get("data")
        return rl.num(((data if isinstance(data, dict) else {}).get("totals") or {}).get(key))
    return get


# ---- loading ---------------------------------------------------------------------------------------------------------

def load(path):
    """Reads and validates one report (report_lib.load_report: the loader every tool shares); raises ReportError
    naming the file, the JSON path and what was expected."""
    return rl.load_report(path)


# ---- table mode ------------------------------------------------------------------------------------------------------

def swept_paths(reports):
    """Every swept path of the reports, in axis order of the first report that sweeps it."""
    paths = []
    for report in reports:
        for run in report["runs"]:
            for p in rl.swept_order(run, report.get("axes")):
                if p not in paths:
                    paths.append(p)
    return paths


def run_names(row):
    """The names a run answers to besides its id: the id without the scenario name ("accumulation_steps=1.ranks=4.r0"
    for "cmp.accumulation_steps=1.ranks=4.r0") and, without its repeat suffix, "accumulation_steps=1.ranks=4"."""
    scenario = str(row.report.get("scenario_name", ""))
    if not row.id.startswith(scenario + "."):
        return set()
    rest = row.id[len(scenario) + 1:]
    names = {rest}
    head, _, tail = rest.rpartition(".")
    if head and tail.startswith("r") and tail[1:].isdigit():
        names.add(head)
    return names


def candidates_text(rows, limit=8):
    ids = list(dict.fromkeys(r.id for r in rows))
    return ", ".join(ids[:limit]) + (f", ... ({len(ids) - limit} more)" if len(ids) > limit else "")


def pick_baseline(rows, selector):
    """The baseline row. With a selector, the first rule that matches any run decides (rows in input order):
    1. the run id equals it (the first such row: two reports of one scenario share ids);
    2. a scenario name (`scenario_name`, the runs' config.name) equals it, or a run name does (the id without the
       scenario name, with or without its repeat suffix ".r0");
    3. it equals one or more whole dot-separated parts of an id ("ranks=1" in "q.ranks=1.r0", not in "q.ranks=12.r0");
    4. an id contains it as a substring.
    Rules 2-4 must single out one run id (the first row with it wins), else ReportError lists the candidates; no
    match at all is a ReportError listing the runs. Without a selector: the first row that reached the target (time
    to target on either clock), else the first finished row (rl.finished), else the first row."""
    if selector is None:
        done = [r for r in rows if rl.finished(r.run)]
        reached = [r for r in done if not (math.isnan(r.ttt_measured_s) and math.isnan(r.ttt_modeled_s))]
        return (reached or done or rows)[0] if rows else None
    for row in rows:
        if row.id == selector:
            return row
    tiers = [
        ("scenario or run name", [r for r in rows if selector in run_names(r)
                                  or r.report.get("scenario_name") == selector
                                  or (r.run.get("config") or {}).get("name") == selector]),
        ("whole parts of an id", [r for r in rows if f".{selector}." in f".{r.id}."]),
        ("part of an id", [r for r in rows if selector in r.id]),
    ]
    for what, matches in tiers:
        ids = list(dict.fromkeys(r.id for r in matches))
        if len(ids) == 1:
            return matches[0]
        if len(ids) > 1:
            raise rl.ReportError(f"--baseline {selector}: matches {len(ids)} runs as {what} "
                                 f"({candidates_text(matches)}); give one run id")
    raise rl.ReportError(f"--baseline {selector}: no run has this id or name, and no run id contains it "
                         f"(runs: {candidates_text(rows)})")


def throughput(row, clock):
    return rl.metric_value(row.run, "samples_per_s" if clock == "measured" else "modeled_samples_per_s")


def set_speedups(rows, baseline):
    """Speedup on each clock = the baseline's time to target / the run's when both reached the target; when neither
    the run nor the baseline has a target it can reach (no target, or timing-only runs: has_target), the run's
    throughput / the baseline's (samples/s; speedup_basis "throughput"); else NaN (a target is set but one of them
    did not reach it, or one of them did not finish: rl.finished)."""
    if baseline is None:
        return
    baseline.baseline = True
    for row in rows:
        bases = set()
        if not (rl.finished(row.run) and rl.finished(baseline.run)):
            continue  # a run stopped part-way is no data to rank
        for clock in ("measured", "modeled"):
            ttt = row.ttt_measured_s if clock == "measured" else row.ttt_modeled_s
            base_ttt = baseline.ttt_measured_s if clock == "measured" else baseline.ttt_modeled_s
            value = math.nan
            if ttt > 0 and base_ttt > 0:
                value = base_ttt / ttt
                bases.add("time_to_target")
            elif not has_target(row.run) and not has_target(baseline.run):
                run_rate, base_rate = throughput(row, clock), throughput(baseline, clock)
                if run_rate > 0 and base_rate > 0:
                    value = run_rate / base_rate
                    bases.add("throughput")
            setattr(row, f"speedup_{clock}", value)
        row.speedup_basis = "time_to_target" if "time_to_target" in bases else "throughput" if bases else ""


def fmt_g(x):
    return MISSING if math.isnan(x) else f"{x:.4g}"


def fmt_accuracy(x):
    return MISSING if math.isnan(x) else f"{x:.4f}"


def fmt_speedup(x):
    return MISSING if math.isnan(x) else f"{x:.2f}x"


def fmt_bytes(x):
    """Bytes in decimal units with 3 significant digits past 9999 (12.3 kB, 4.56 GB), whole bytes below (750 B)."""
    if math.isnan(x):
        return MISSING
    if abs(x) < 10000:
        return f"{x:.0f} B"
    for unit, scale in (("kB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12)):
        if abs(x) < 1000 * scale or unit == "TB":
            digits = 2 if abs(x) < 10 * scale else 1 if abs(x) < 100 * scale else 0
            return f"{x / scale:.{digits}f} {unit}"


def csv_number(x):
    return "" if math.isnan(x) else repr(float(x))


# (Markdown header, CSV header, value getter, Markdown formatter, right-aligned). The swept columns come first.
TABLE_COLUMNS = [
    ("time to target (s, measured)", "time_to_target_measured_s", lambda r: r.ttt_measured_s, fmt_g),
    ("time to target (s, modeled)", "time_to_target_modeled_s", lambda r: r.ttt_modeled_s, fmt_g),
    ("final eval accuracy", "final_eval_accuracy", lambda r: rl.metric_value(r.run, "eval_accuracy"), fmt_accuracy),
    ("wire bytes per step", "wire_bytes_per_rank_per_step", lambda r: rl.wire_bytes_per_step(r.run), fmt_bytes),
    ("exposed comm (ms, modeled)", "exposed_communication_ms", lambda r: exposed_communication_ms(r.run), fmt_g),
    # Shown only when some run has a non-zero value (OPTIONAL): waits, staleness, the input pipeline.
    ("wait (ms, modeled)", "wait_modeled_ms", lambda r: modeled_wait_ms(r.run), fmt_g),
    ("staleness (clocks, mean)", "staleness_clocks_mean", lambda r: staleness_clocks_mean(r.run), fmt_g),
    ("data stall share (modeled)", "data_stall_share_modeled", lambda r: data_total("stall_share_modeled")(r.run),
     fmt_g),
    ("cache hit rate", "cache_hit_rate", lambda r: data_total("hit_rate")(r.run), fmt_accuracy),
    ("speedup (measured)", "speedup_measured", lambda r: r.speedup_measured, fmt_speedup),
    ("speedup (modeled)", "speedup_modeled", lambda r: r.speedup_modeled, fmt_speedup),
]
SPEEDUPS = {"speedup_measured", "speedup_modeled"}
# Markdown footnote markers: a throughput-based speedup; a modeled figure that is a bound (BOUND_COLUMNS).
THROUGHPUT_MARK = "*"
BOUND_MARK = "^"
BOUND_COLUMNS = {"time_to_target_modeled_s", "exposed_communication_ms", "speedup_modeled"}
# Why a speedup marked THROUGHPUT_MARK is in throughput rather than in time to target (throughput_footnote).
THROUGHPUT_REASONS = {
    "no_target": "neither the run nor the baseline sets a target",
    "timing_only": "a timing-only run has no time to target even where its scenario sets a target (below)",
}
FOOTNOTES = {
    "timing_only": "timing-only runs (training.mode \"timing\") compute no loss or accuracy, so they never reach a "
                   "target: they are ranked by throughput (the speedup column)",
    "unfinished": f"`{MISSING}` in every metric of a run that did not finish (interrupted, timeout, failed, "
                  "skipped): what it recorded is not data to compare; its status says where it stopped",
    "no_speedup": f"`{MISSING}` speedup: a target is set, but the run or the baseline has no time to target on that "
                  "clock (not reached, diverged, failed, or no modeled clock)",
}


OPTIONAL = {"wait_modeled_ms", "staleness_clocks_mean", "data_stall_share_modeled", "cache_hit_rate"}


def modeled_bound(run):
    """(kind, reason) when the run's modeled clock is a bound rather than an estimate (timing.modeled.bound "lower" or
    "upper" with timing.modeled.bound_reason: a parameter server whose model leaves something out, reports/README.md);
    None otherwise."""
    modeled = (run.get("timing") or {}).get("modeled") or {}
    kind = modeled.get("bound")
    return (kind, str(modeled.get("bound_reason") or "no reason given")) if kind in ("lower", "upper") else None


def throughput_reason(row, baseline):
    """Why row's speedup is in throughput (set_speedups: neither it nor the baseline has a target it can reach): a
    key of THROUGHPUT_REASONS."""
    pair = (row.run, baseline.run) if baseline is not None else (row.run,)
    return "timing_only" if any(rl.timing_only(r) and r.get("time_to_target") for r in pair) else "no_target"


def throughput_footnote(reasons):
    """The footnote of THROUGHPUT_MARK: what the marked speedups divide and why (the reasons of the marked rows, in
    THROUGHPUT_REASONS order)."""
    why = "; ".join(text for key, text in THROUGHPUT_REASONS.items() if key in reasons)
    return (f"`{THROUGHPUT_MARK}` speedup in throughput (the run's samples/s / the baseline's, on that clock) instead "
            f"of time to target: {why}")


def bound_footnotes(bounds):
    """One footnote per (kind, reason) of the marked runs ({(kind, reason): [Row, ...]}), naming them."""
    lines = []
    for (kind, reason), rows in bounds.items():
        time, speedup = ("longer", "smaller") if kind == "lower" else ("shorter", "larger")
        lines.append(f"`{BOUND_MARK}` modeled figure of a run whose modeled clock is {'an' if kind == 'upper' else 'a'} {kind} bound (its times can only "
                     f"be {time} in fact, its speedup only {speedup}): {reason} (runs: {candidates_text(rows)})")
    return lines


def table(rows, reports, fmt):
    """The table as text: Markdown (aligned, numbers right-aligned, "-" for no value) or CSV (full precision, empty
    cells for no value, swept values as JSON text, headers with units)."""
    paths = swept_paths(reports)
    short = rl.short_paths(paths)
    columns = [c for c in TABLE_COLUMNS
               if c[1] not in OPTIONAL or any(not math.isnan(c[2](r)) and c[2](r) != 0 for r in rows)]
    scenario_column = len({id(r.report) for r in rows}) > 1
    header, csv_header, right = ["run"], ["run"], [False]
    if scenario_column:
        header.append("scenario")
        csv_header.append("scenario")
        right.append(False)
    header += [short[p] for p in paths]
    csv_header += paths
    # A swept column is right-aligned when every value it holds is a number.
    right += [all(isinstance((r.run.get("swept") or {}).get(p, 0), (int, float)) for r in rows) for p in paths]
    header += [c[0] for c in columns] + ["status"]
    csv_header += [c[1] for c in columns] + ["status"]
    right += [True] * len(columns) + [False]

    md_rows, csv_rows, notes, bounds, reasons = [], [], set(), {}, set()
    baseline = next((r for r in rows if r.baseline), None)
    for row in rows:
        swept = row.run.get("swept") or {}
        bound = modeled_bound(row.run) if rl.finished(row.run) else None
        md, cs = [row.id], [row.id]
        if scenario_column:
            md.append(str(row.report.get("scenario_name", "")))
            cs.append(md[-1])
        for p in paths:
            if p in swept:
                md.append(rl.label_value(swept[p], limit=40))
                cs.append(rl.label_value(swept[p], limit=10 ** 6))
            else:
                md.append(MISSING)
                cs.append("")
        for _, name, get, fmt_md in columns:
            value = get(row) if rl.finished(row.run) else math.nan
            if not rl.finished(row.run):
                notes.add("unfinished")
            text = fmt_md(value)
            if name in SPEEDUPS and row.speedup_basis == "throughput" and text != MISSING:
                text += THROUGHPUT_MARK
                reasons.add(throughput_reason(row, baseline))
            elif name in SPEEDUPS and text == MISSING and has_target(row.run) and rl.finished(row.run):
                notes.add("no_speedup")
            if bound and name in BOUND_COLUMNS and text != MISSING:
                text += BOUND_MARK
                bounds.setdefault(bound, []).append(row)
            md.append(text)
            cs.append(csv_number(value))
        if rl.timing_only(row.run):
            notes.add("timing_only")
        md.append(row.status)
        cs.append(row.status)
        cs.append(row.speedup_basis)
        cs.append(bound[0] if bound else "")
        md_rows.append(md)
        csv_rows.append(cs)
    if fmt == "csv":
        return csv_text(csv_header + ["speedup_basis", "modeled_bound"], csv_rows)
    text = markdown(header, md_rows, right)
    footnotes = ([throughput_footnote(reasons)] if reasons else []) + [FOOTNOTES[k] for k in FOOTNOTES if k in notes]
    footnotes += bound_footnotes(bounds)
    # Each skipped run with its reason (the GPU or host memory estimate and what would fit), one line each.
    footnotes += [f"skipped: {row.id}: {row.run.get('message') or 'no reason given'}" for row in rows
                  if row.run.get("disposition") == "skipped"]
    return text + ("\n" + "\n".join(footnotes) + "\n" if footnotes else "")


def csv_text(header, rows):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def markdown(header, rows, right):
    """A pipe table with every column padded to its widest cell; `right` columns right-aligned ("---:")."""
    cells = [[c.replace("|", "\\|") for c in r] for r in [header] + rows]
    widths = [max(3, *(len(r[i]) for r in cells)) for i in range(len(header))]

    def line(r):
        return "| " + " | ".join(c.rjust(w) if a else c.ljust(w) for c, w, a in zip(r, widths, right)) + " |"

    rule = "| " + " | ".join("-" * (w - 1) + ":" if a else "-" * w for w, a in zip(widths, right)) + " |"
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]]) + "\n"


# ---- Pareto plot -----------------------------------------------------------------------------------------------------

def pareto_front(points):
    """Indices of the points (time, accuracy) that no other point dominates (no other is at most as slow and at least
    as accurate, and better in one), sorted by time. A point that repeats an earlier one is not on the front."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1], i))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def pareto_clock(rows, clock="auto"):
    """The clock of the Pareto plot: `clock` when given; "auto": the modeled clock when some finished run reached the
    target on it (the clock this tool's guide reads: the host's measured clock is rank threads sharing its cores),
    else the measured one."""
    if clock != "auto":
        return clock
    modeled = any(rl.finished(r.run) and not math.isnan(r.ttt_modeled_s) for r in rows)
    return "modeled" if modeled else "measured"


def differing_paths(rows):
    """{report id: the swept paths whose values differ between its rows}, in axis order: what tells its runs apart."""
    out = {}
    for row in rows:
        out.setdefault(id(row.report), []).append(row)
    result = {}
    for key, group in out.items():
        paths = []
        for row in group:
            for p in rl.swept_order(row.run, row.report.get("axes")):
                if p not in paths:
                    paths.append(p)
        result[key] = [p for p in paths if len({json.dumps((r.run.get("swept") or {}).get(p), sort_keys=True)
                                                 for r in group}) > 1]
    return result


def point_label(row, paths):
    """A run's label in the Pareto key: its values of `paths` ("kind=topk ratio=0.01"), objects by the keys that
    differ along their axis, each value at most 40 characters; the run id when no path differs."""
    swept = row.run.get("swept") or {}
    axes = row.report.get("axes")
    short = rl.short_paths(paths)
    text = " ".join(f"{short[p]}={rl.label_value(swept[p], limit=40, among=rl.axis_values_of(p, axes))}"
                    for p in paths if p in swept)
    return text or row.id


def pareto_figure(rows, reports, clock):
    """The Pareto figure: final eval accuracy against time to target on `clock` of the finished runs that have both,
    the Pareto front marked and joined. Each point carries a number (by time to target; points at one place share a
    label "3,7"), and a key beside the axes gives each number's swept values that differ between the runs
    (differing_paths), uncut. Runs without both values, or that did not finish, are named in a note; a measured
    clock of host-backend runs says it is the host's time. Returns (figure, placed rows in key order)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    placed, left_out = [], []
    for row in rows:
        t = row.ttt_measured_s if clock == "measured" else row.ttt_modeled_s
        acc = rl.metric_value(row.run, "eval_accuracy")
        if not rl.finished(row.run) or math.isnan(t) or math.isnan(acc):
            left_out.append(row)
        else:
            placed.append((row, t, acc))
    placed.sort(key=lambda p: (p[1], -p[2]))
    points = [(t, acc) for _, t, acc in placed]
    front = pareto_front(points)
    paths = differing_paths([row for row, _, _ in placed])
    several = len(reports) > 1
    key_lines = []
    for k, (row, _, _) in enumerate(placed, start=1):
        label = point_label(row, paths[id(row.report)])
        if several:
            label = f"{row.report.get('scenario_name', '')}: {label}"
        key_lines.append(f"{k:>2}  {label}" + (" (baseline)" if row.baseline else "") + (
            "  [front]" if k - 1 in front else ""))
    key_width = min(6.0, 0.065 * max((len(line) for line in key_lines), default=0) + 0.3)
    fig = plt.figure(figsize=(8 + key_width, 5.5), dpi=110, layout="constrained")
    grid = fig.add_gridspec(1, 2, width_ratios=[8, max(key_width, 0.01)])
    ax = fig.add_subplot(grid[0, 0])
    key_ax = fig.add_subplot(grid[0, 1])
    key_ax.axis("off")
    off = [i for i in range(len(points)) if i not in front]
    ax.scatter([points[i][0] for i in off], [points[i][1] for i in off], color="#8c8c8c", label="dominated", zorder=2)
    ax.plot([points[i][0] for i in front], [points[i][1] for i in front], color="#c44e52", marker="o",
            drawstyle="steps-post", label="Pareto front", zorder=3)
    # One number per place: points that coincide (repeats, equal runs) share it as "3,7".
    places = {}
    for k, (t, acc) in enumerate(points, start=1):
        places.setdefault((float(f"{t:.6g}"), float(f"{acc:.6g}")), []).append(k)
    for (t, acc), numbers in places.items():
        ax.annotate(",".join(map(str, numbers)), (t, acc), fontsize=7, xytext=(3, 3), textcoords="offset points")
    if key_lines:
        key_ax.text(0.0, 1.0, "runs (number: swept values that differ)\n" + "\n".join(key_lines), fontsize=7,
                    family="monospace", va="top", ha="left", transform=key_ax.transAxes)
    ax.set_xlabel(f"time to target (s, {clock})")
    ax.set_ylabel("final eval accuracy (fraction correct)")
    title = f"time to target ({clock} clock) against final eval accuracy"
    host = rl.host_clock_note(reports[0], [row.run for row, _, _ in placed]) if clock == "measured" else ""
    if host:
        title += "\n" + textwrap.fill(host, 110)
    ax.set_title(title, fontsize=10 if not host else 8)
    if points:
        ax.legend(loc="lower right")
    if left_out:
        note = "not placed (unfinished, or no time to target or accuracy on this clock): " + "; ".join(
            f"{row.id} ({row.status})" for row in left_out[:6])
        if len(left_out) > 6:
            note += f"; ... and {len(left_out) - 6} more"
        fig.text(0.01, -0.01, textwrap.fill(rl.shorten(note, 1200), 130), fontsize=7, va="top")
    return fig, [row for row, _, _ in placed]


def write_pareto(rows, reports, path, clock):
    """Writes pareto_figure to path; returns how many runs were placed."""
    import matplotlib.pyplot as plt
    fig, placed = pareto_figure(rows, reports, clock)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return len(placed)


# ---- diff mode -------------------------------------------------------------------------------------------------------

# (name with unit, getter of a run, Markdown formatter). Rows where neither report has a value are left out, and rows of
# OPTIONAL metrics where neither has a non-zero value.
DIFF_METRICS = [
    ("time_to_target_measured_s", lambda r: rl.metric_value(r, "time_to_target_s"), fmt_g),
    ("time_to_target_modeled_s", lambda r: rl.metric_value(r, "modeled_time_to_target_s"), fmt_g),
    ("final_eval_accuracy", lambda r: rl.metric_value(r, "eval_accuracy"), fmt_accuracy),
    ("final_eval_loss", lambda r: rl.metric_value(r, "eval_loss"), fmt_g),
    ("final_train_loss", lambda r: rl.metric_value(r, "train_loss"), fmt_g),
    ("samples_per_s", lambda r: rl.metric_value(r, "samples_per_s"), fmt_g),
    ("modeled_samples_per_s", lambda r: rl.metric_value(r, "modeled_samples_per_s"), fmt_g),
    ("step_p50_ms", lambda r: rl.metric_value(r, "step_p50_ms"), fmt_g),
    ("modeled_step_p50_ms", lambda r: rl.metric_value(r, "modeled_step_p50_ms"), fmt_g),
    ("wire_bytes_per_rank_per_step", rl.wire_bytes_per_step, fmt_bytes),
    ("exposed_communication_ms", exposed_communication_ms, fmt_g),
    ("wait_modeled_ms", modeled_wait_ms, fmt_g),
    ("staleness_clocks_mean", staleness_clocks_mean, fmt_g),
    ("data_stall_share_modeled", data_total("stall_share_modeled"), fmt_g),
    ("cache_hit_rate", data_total("hit_rate"), fmt_accuracy),
]


def relative_change(old, new):
    """(new - old) / old; 0 when both are 0; NaN when either is missing or old is 0 and new is not."""
    if math.isnan(old) or math.isnan(new):
        return math.nan
    if old == 0:
        return 0.0 if new == 0 else math.nan
    return (new - old) / old


def diff(old_doc, new_doc, fmt):
    """Run-by-run comparison by id: per run a status row (old and new status; "changed" when they differ), then one
    row per metric that either run has, with old, new and (new - old) / old (no metric rows when either did not
    finish). A run in only one report gets one status row with "absent" on the other side and "only in old"/"only in
    new"."""
    old_runs = {r["id"]: r for r in old_doc["runs"]}
    new_runs = {r["id"]: r for r in new_doc["runs"]}
    ids = list(old_runs) + [i for i in new_runs if i not in old_runs]
    md, cs = [], []
    for run_id in ids:
        old, new = old_runs.get(run_id), new_runs.get(run_id)
        if old is None or new is None:
            where = "only in new" if old is None else "only in old"
            status = [run_status(old) if old else "absent", run_status(new) if new else "absent"]
            md.append([run_id, "status", *status, where])
            cs.append([run_id, "status", *status, where])
            continue
        status = [run_status(old), run_status(new)]
        changed = "changed" if status[0] != status[1] else ""
        md.append([run_id, "status", *status, changed])
        cs.append([run_id, "status", *status, changed])
        if not (rl.finished(old) and rl.finished(new)):
            continue  # a run stopped part-way on one side: its status row says so, its numbers are no data
        for name, get, fmt_md in DIFF_METRICS:
            a, b = get(old), get(new)
            if all(math.isnan(x) or (name in OPTIONAL and x == 0) for x in (a, b)):
                continue
            change = relative_change(a, b)
            text = MISSING if math.isnan(change) else f"{change:+.2%}".replace("-0.00%", "+0.00%")
            md.append([run_id, name, fmt_md(a), fmt_md(b), text])
            cs.append([run_id, name, csv_number(a), csv_number(b), csv_number(change)])
    if fmt == "csv":
        return csv_text(["run", "metric", "old", "new", "change"], cs)
    return markdown(["run", "metric", "old", "new", "change"], md, [False, False, True, True, True])


def describe(path, doc):
    tool = doc.get("tool") or {}
    commit = tool.get("git_commit")
    text = f"{path} (commit {commit[:12]}{'-dirty' if tool.get('git_dirty') else ''})" if commit else str(path)
    return text


# ---- driver ----------------------------------------------------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT", help="report.json files")
    parser.add_argument("--baseline", metavar="RUN_ID|NAME",
                        help="table mode: the run speedups are measured against: a run id, else a scenario or run "
                             "name (the id without the scenario name, with or without '.r0'), else whole "
                             "dot-separated parts of one id ('ranks=1'), else a substring of one id (default: the "
                             "first run that reached the target, else the first run)")
    parser.add_argument("--format", choices=("markdown", "csv"), default="markdown", help="output (default markdown)")
    parser.add_argument("--pareto", type=Path, metavar="PNG",
                        help="table mode: also write a Pareto plot (time to target against final eval accuracy)")
    parser.add_argument("--clock", choices=("auto", "measured", "modeled"), default="auto",
                        help="the time to target of the Pareto plot (default auto: the modeled clock when runs have "
                             "it, else the measured one, which on the host backend is this machine's time)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true",
                      help="compare two reports run by run (default when exactly two reports share a scenario name)")
    mode.add_argument("--table", action="store_true", help="one table of every run, even for two reports of one "
                                                           "scenario")
    return parser.parse_args(argv)


def main(argv=None):
    """Loads and checks every report and option first; prints the table or diff on stdout, notes on stderr. Exit 0,
    or 2 on bad input (nothing printed on stdout)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        reports = [load(p) for p in args.reports]
        same_scenario = len(reports) == 2 and reports[0]["scenario_name"] == reports[1]["scenario_name"]
        if args.diff or (same_scenario and not args.table):
            if len(reports) != 2:
                raise rl.ReportError(f"--diff compares two reports, got {len(reports)}")
            if args.baseline is not None or args.pareto is not None:
                raise rl.ReportError("--baseline and --pareto apply to the table, not to the run-by-run diff "
                                     "(add --table for a table of both reports)")
            old, new = reports
            if old["scenario_name"] != new["scenario_name"]:
                rl.say(f"note: scenario names differ ({old['scenario_name']}, {new['scenario_name']}); runs are "
                       "matched by id, which starts with the scenario name")
            for key in ("scenario_sha256", "overrides"):
                a, b = (old.get("context") or {}).get(key), (new.get("context") or {}).get(key)
                if a != b:
                    rl.say(f"note: context.{key} differs (old {a}, new {b}): the runs may differ in more than the "
                           "code")
            if args.format == "markdown":
                print(f"old: {describe(args.reports[0], old)}\nnew: {describe(args.reports[1], new)}\n")
            print(diff(old, new, args.format), end="")
            return 0
        rows = [Row(doc, path, run) for doc, path in zip(reports, args.reports) for run in doc["runs"]]
        baseline = pick_baseline(rows, args.baseline)
        set_speedups(rows, baseline)
        if args.pareto is not None and not args.pareto.parent.is_dir():
            raise rl.ReportError(f"--pareto {args.pareto}: {args.pareto.parent} is not a folder")
    except rl.ReportError as e:
        rl.say(f"error: {e}")
        return 2
    if baseline is not None and not any(r.speedup_basis for r in rows if r is not baseline):
        rl.say(f"note: the baseline {baseline.id} has no time to target: no speedups")
    if args.format == "markdown":
        print(f"baseline: {baseline.id}\n" if baseline is not None else "baseline: none (the reports have no runs)\n")
    print(table(rows, reports, args.format), end="")
    if args.pareto is not None:
        try:
            clock = pareto_clock(rows, args.clock)
            placed = write_pareto(rows, reports, args.pareto, clock)
        except (OSError, ValueError) as e:
            rl.say(f"error: {args.pareto}: cannot write the Pareto plot: {e}")
            return 2
        rl.say(f"note: {args.pareto}: {placed} of {rl.count_text(len(rows), 'run')} placed (time to target on the "
               f"{clock} clock)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
