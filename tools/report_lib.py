"""Reading helpers for gradsweep reports (reports/README.md is the reference, reports/schema.json the contract).

Shared by tools/plot.py and other readers: loading and validating a report, run labels and strategy names, sweep
axes, and the scalar metrics that figures and comparisons use. Plotting code does not belong here.
"""
import json
import math
import os
import re
import shutil
import stat
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = REPO_ROOT / "reports" / "schema.json"
SUPPORTED_SCHEMA_VERSION = 1

DISPOSITIONS = ("passed", "diverged", "failed", "skipped", "interrupted", "timeout")
# Finished runs: the only ones drawn and ranked as data (a diverged run ran until it diverged, which is its result).
# interrupted and timeout runs stopped part-way (a run stopped in its first epoch looks nothing like a finished one),
# failed and skipped runs have no data: every figure and table lists them as not drawn, with their step count.
DRAWN_DISPOSITIONS = ("passed", "diverged")
FINISHED_DISPOSITIONS = DRAWN_DISPOSITIONS
# Phases of a step in the order they happen (and the order of stacked bars).
PHASES = ("data", "forward", "backward", "compress", "communicate", "optimizer", "wait")

# Scalar metrics of one run, by name: (description with unit, getter).
METRICS = {
    "eval_accuracy": "final eval accuracy (fraction correct)",
    "eval_loss": "final eval loss (the model's loss)",
    "train_loss": "final train loss (the model's loss)",
    "samples_per_s": "throughput (samples/s, measured)",
    "time_to_target_s": "time to target (s, measured)",
    "step_p50_ms": "step time p50 (ms, measured)",
    "modeled_samples_per_s": "throughput (samples/s, modeled)",
    "modeled_time_to_target_s": "time to target (s, modeled)",
    "modeled_step_p50_ms": "step time p50 (ms, modeled)",
}


def output_width(stream):
    """The columns lines on `stream` are wrapped to: $COLUMNS when set to a positive number (as gradsweep and Python's
    shutil read it), else the terminal's width when `stream` is a terminal, else None (unknown: not wrapped, so a log
    keeps one line per message)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if stream.isatty():
        return shutil.get_terminal_size().columns
    return None


def say(text, stream=None, explanation=None):
    """Prints a note or error line on stderr (or `stream`); where the width is known (output_width) wrapped to it,
    continuation lines indented by two spaces, so no line wraps by itself (a long path is broken where the line ends).
    `explanation`: the rest of the line after `text` ("note: X not written:" + why); where the whole does not fit, it
    goes on lines of its own below, indented by two spaces."""
    stream = sys.stderr if stream is None else stream
    text = str(text)
    columns = output_width(stream)
    if columns is None:
        print(text + ("" if explanation is None else " " + explanation), file=stream)
        return
    width = max(20, columns - 1)
    if explanation is not None:
        text = text + " " + explanation if len(text) + 1 + len(explanation) <= width else text + "\n  " + explanation
    text = "\n".join(textwrap.fill(line, width=width, subsequent_indent=" " * (len(line) - len(line.lstrip(" ")) or 2),
                                    break_long_words=True, break_on_hyphens=False) or line
                     for line in text.split("\n"))
    print(text, file=stream)


def count_text(n, noun, plural=None):
    """"1 run", "2 runs": n and the noun, in the plural (default: noun + "s") unless n is 1."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def shown_path(path):
    """path as the tools print it: relative to the current folder when under it (as gradsweep prints the report's
    path), else as it is."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve())) if path.is_absolute() else str(path)
    except ValueError:
        return str(path)


class ReportError(Exception):
    """A report that cannot be read or does not follow the schema; the message names the file."""


# Limits of what a reader accepts as a report. The largest report in this repository's scenarios is a few MB (traces
# are capped at 10,000 parameters unless report.trace_max_params raises it, and at about 256 MiB per run); 1 GiB leaves room for long sweeps without reading a runaway file into memory.
# GRADSWEEP_REPORT_MAX_BYTES overrides the size (tests, unusual sweeps). A report nests at most about 10 levels
# ($.runs[i].trace.params[step][rank][k]; a scenario's own values a few more); 64 stops deep input before anything
# that walks it recursively (json, jsonschema, the tools) can run out of stack.
MAX_REPORT_BYTES = 1 << 30
MAX_NESTING = 64


def max_report_bytes():
    """The size cap in bytes: GRADSWEEP_REPORT_MAX_BYTES when set to a positive integer, else MAX_REPORT_BYTES."""
    value = os.environ.get("GRADSWEEP_REPORT_MAX_BYTES", "")
    return int(value) if value.isdigit() and int(value) > 0 else MAX_REPORT_BYTES


def _too_deep(doc, limit):
    """The JSON path (first parts) of a value nested deeper than `limit` containers, or None. Iterative: no recursion."""
    stack = [(doc, 1, ())]
    while stack:
        value, depth, parts = stack.pop()
        if not isinstance(value, (dict, list)):
            continue
        if depth > limit:
            return _json_path(parts[:6]) + ("..." if len(parts) > 6 else "")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1, parts + (key,) if len(parts) <= 6 else parts))
    return None


def load_json(path, max_bytes=None):
    """Parses the JSON file at path. Raises ReportError, its message starting with the file name, when the file cannot
    be read (missing, a folder, no permission, not a regular file), is larger than max_bytes (default
    max_report_bytes()), is not UTF-8, is not JSON, or nests deeper than MAX_NESTING levels."""
    path = Path(path)
    cap = max_report_bytes() if max_bytes is None else max_bytes
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise ReportError(f"{path}: cannot read: a folder, not a report file")
        if not stat.S_ISREG(info.st_mode):
            raise ReportError(f"{path}: cannot read: not a regular file")
        if info.st_size > cap:
            raise ReportError(f"{path}: cannot read: {info.st_size} bytes, more than the {cap} bytes a report may "
                              "have (GRADSWEEP_REPORT_MAX_BYTES)")
        with open(path, "rb") as f:
            data = f.read(cap + 1)
    except OSError as e:
        raise ReportError(f"{path}: cannot read: {e.strerror or e}") from e
    if len(data) > cap:  # grew while being read
        raise ReportError(f"{path}: cannot read: more than the {cap} bytes a report may have "
                          "(GRADSWEEP_REPORT_MAX_BYTES)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ReportError(f"{path}: not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start}") from e
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: invalid JSON: {e}") from e
    except RecursionError as e:
        raise ReportError(f"{path}: $: nested too deeply to parse; a report nests at most {MAX_NESTING} "
                          "levels") from e
    except (ValueError, MemoryError) as e:  # e.g. an integer of more digits than Python converts
        raise ReportError(f"{path}: invalid JSON: {e}") from e
    deep = _too_deep(doc, MAX_NESTING)
    if deep is not None:
        raise ReportError(f"{path}: {deep}: nested deeper than {MAX_NESTING} levels; a report nests at most "
                          f"{MAX_NESTING}")
    return doc


_schema_cache = {}


def load_schema(path=SCHEMA_PATH):
    """The report schema (reports/schema.json), parsed once."""
    key = str(path)
    if key not in _schema_cache:
        with open(path, encoding="utf-8") as f:
            _schema_cache[key] = json.load(f)
    return _schema_cache[key]


def _json_path(parts):
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def schema_errors(doc, schema=None, limit=5):
    """Up to `limit` schema violations of doc as "$.json.path: message" strings ([] when valid).

    Uses jsonschema when it is installed; without it, only the top-level shape is checked.
    """
    try:
        import jsonschema
    except ImportError:
        return _basic_errors(doc)[:limit]
    validator = jsonschema.Draft202012Validator(schema or load_schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    out = []
    for e in errors[:limit]:
        message = e.message if len(e.message) <= 200 else e.message[:200] + "..."
        out.append(f"{_json_path(e.absolute_path)}: {message}")
    if len(errors) > limit:
        out.append(f"... and {len(errors) - limit} more")
    return out


def _basic_errors(doc):
    if not isinstance(doc, dict):
        return ["$: a report is a JSON object"]
    missing = [k for k in ("schema_version", "scenario_name", "axes", "runs") if k not in doc]
    if missing:
        return [f"$: missing {', '.join(missing)}"]
    if not isinstance(doc["runs"], list) or not all(isinstance(r, dict) for r in doc["runs"]):
        return ["$.runs: expected a list of run objects"]
    return []


def _kind_of(value):
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def check_report_shape(doc, name="report"):
    """Raises ReportError "<name>: <JSON path>: <what was expected>" unless doc is an object with an integer
    schema_version this reader supports and a runs list whose ids are unique."""
    if not isinstance(doc, dict):
        raise ReportError(f"{name}: $: expected a gradsweep report (a JSON object with schema_version and runs), "
                          f"found {_kind_of(doc)}")
    for key in ("schema_version", "runs"):
        if key not in doc:
            raise ReportError(f"{name}: $.{key}: missing; a gradsweep report (a JSON object with schema_version "
                              "and runs) was expected")
    version = doc["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise ReportError(f"{name}: $.schema_version: expected an integer, found {_kind_of(version)}")
    if version > SUPPORTED_SCHEMA_VERSION:
        raise ReportError(f"{name}: $.schema_version: {version} is newer than this tool supports "
                          f"({SUPPORTED_SCHEMA_VERSION}); update tools/")
    if version < 1:
        raise ReportError(f"{name}: $.schema_version: {version} is not a version gradsweep wrote (the first is 1)")
    runs = doc["runs"]
    if not isinstance(runs, list):
        raise ReportError(f"{name}: $.runs: expected a list of runs, found {_kind_of(runs)}")
    seen = {}
    for i, run in enumerate(runs):
        run_id = run.get("id") if isinstance(run, dict) else None
        if not isinstance(run_id, str):
            continue  # the schema names what is wrong with such a run
        if run_id in seen:
            raise ReportError(f"{name}: $.runs[{i}].id: {run_id!r} repeats $.runs[{seen[run_id]}].id; "
                              "expected unique run ids")
        seen[run_id] = i


def validate_report(doc, name="report"):
    """Raises ReportError (naming `name`) unless doc is a report of the supported schema version that follows
    reports/schema.json."""
    check_report_shape(doc, name)
    try:
        errors = schema_errors(doc)
    except RecursionError as e:
        raise ReportError(f"{name}: $: nested too deeply to check against reports/schema.json") from e
    if errors:
        raise ReportError(f"{name}: does not follow reports/schema.json:\n  " + "\n  ".join(errors))


def load_report(path, validate=True, max_bytes=None):
    """Reads a report: the one loader every tool uses. Raises ReportError, its message starting with the file name,
    for a file that cannot be read or is too large (load_json), is not UTF-8 or JSON, nests too deeply, is not a
    report object, has an unsupported schema_version or duplicate run ids (check_report_shape), or, with validate,
    does not follow reports/schema.json."""
    doc = load_json(path, max_bytes)
    if validate:
        validate_report(doc, str(path))
    else:
        check_report_shape(doc, str(path))
    return doc


# ---- runs -----------------------------------------------------------------------------------------------------------

def num(x):
    """x as a float, or NaN for null/non-numbers (the report writes non-finite numbers as null)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return math.nan
    return float(x)


def strategy_label(run):
    """The run's strategy: sync.kind, plus "+<compression.kind>" unless none, plus "+<precision.mode>" unless fp32."""
    config = run.get("config") or {}
    label = str((config.get("sync") or {}).get("kind", "?"))
    compression = (config.get("compression") or {}).get("kind", "none")
    if compression not in (None, "none"):
        label += f"+{compression}"
    precision = (config.get("precision") or {}).get("mode", "fp32")
    if precision not in (None, "fp32"):
        label += f"+{precision}"
    return label


def format_value(v):
    """A swept value as it appears in labels: JSON text for numbers, booleans and null, bare strings."""
    if isinstance(v, str):
        return v
    return json.dumps(v)


# Longest value text in labels (legends, ticks); longer values (JSON objects and lists) end in an ellipsis.
LABEL_VALUE_CHARS = 30
# Longest text of one label part (the swept values of a run, a strategy name); longer ones end in an ellipsis.
LABEL_CHARS = 30


def shorten(text, limit=LABEL_CHARS):
    """text cut to `limit` characters, the last one an ellipsis when it was longer."""
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def label_value(v, limit=LABEL_VALUE_CHARS, among=None):
    """format_value(v) for labels: objects and lists in compact JSON, cut to `limit` characters with an ellipsis.

    `among`: all values of v's axis. An object among objects shows only the keys whose values differ between them,
    after "{\u2026," ({"kind":"topk","ratio":0.01} among ratios 0.01 and 0.1: {\u2026,"ratio":0.01})."""
    if isinstance(v, dict) and among and len(among) > 1 and all(isinstance(o, dict) for o in among):
        missing = object()
        varying = {k: x for k, x in v.items() if any(o.get(k, missing) != x for o in among)}
        if varying and len(varying) < len(v):
            text = "{\u2026," + json.dumps(varying, separators=(",", ":"))[1:]
            return text if len(text) <= limit else text[:limit - 1] + "\u2026"
    text = json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else format_value(v)
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def axis_values_of(path, axes):
    """Every value the axis sweeping `path` takes (None when no axis of `axes` sweeps it)."""
    for axis in axes or []:
        if path in axis["paths"]:
            i = axis["paths"].index(path)
            return [value[i] for value in axis["values"]]
    return None


def short_paths(paths):
    """Maps each dotted path to its last component, or to the full path where last components collide."""
    last = [p.rsplit(".", 1)[-1] for p in paths]
    return {p: (s if last.count(s) == 1 else p) for p, s in zip(paths, last)}


def swept_order(run, axes=None):
    """The run's swept paths in the order of `axes` (the report's axes) when given, then any others in the order of
    the run's `swept` object."""
    swept = run.get("swept") or {}
    order = [p for a in (axes or []) for p in a["paths"] if p in swept]
    return order + [p for p in swept if p not in order]


def value_limit(texts, budget):
    """The largest cut (at least 4 characters) that fits `texts`, each cut to it, in `budget` characters together."""
    limit = max(map(len, texts), default=0)
    while limit > 4 and sum(min(len(t), limit) for t in texts) > budget:
        limit -= 1
    return limit


def swept_units(run, axes=None):
    """The run's swept paths in swept_order, grouped: a zip group's paths (an axis of several paths) together, every
    other path alone."""
    order = swept_order(run, axes)
    units, seen = [], set()
    for p in order:
        if p in seen:
            continue
        group = next((a["paths"] for a in (axes or []) if len(a["paths"]) > 1 and p in a["paths"]), None)
        unit = [q for q in order if q in group] if group else [p]
        seen.update(unit)
        units.append(unit)
    return units


def swept_text(run, repeats=1, axes=None, names=True):
    """The run's swept values as "key=value key=value" (plus "r<repeat>" when the sweep repeats), in swept_order.
    Long values are cut (label_value). A zip group's null members are left out (their absence says null, as in the
    heatmap's ticks and the shortened run ids). With names=False only the values: "1, 0.05 r0", a zip group's
    non-null values joined by "/" ("adam/0.001"; swept_caption names them; cut in its middle), the longest cut further
    so that every value shows in LABEL_CHARS characters where it can."""
    swept = run.get("swept") or {}
    units = swept_units(run, axes)
    short = short_paths(swept_order(run, axes))

    def members(unit):
        if len(unit) == 1:
            return unit
        return [p for p in unit if swept[p] is not None] or unit

    if names:
        text = " ".join(f"{short[p]}={label_value(swept[p], among=axis_values_of(p, axes))}"
                        for unit in units for p in members(unit))
    else:
        def unit_text(unit, limit=LABEL_VALUE_CHARS):
            if len(unit) == 1:
                return label_value(swept[unit[0]], limit, axis_values_of(unit[0], axes))
            text = "/".join(label_value(swept[p], among=axis_values_of(p, axes)) for p in members(unit))
            if len(text) <= limit:
                return text
            head = (limit - 1 + 1) // 2  # cut in the middle: a group's later members often tell runs apart
            return text[:head] + "\u2026" + text[len(text) - (limit - 1 - head):]
        texts = [unit_text(u) for u in units]
        budget = LABEL_CHARS - 2 * (len(units) - 1) - (4 if repeats > 1 else 0)
        limit = value_limit(texts, budget)
        text = ", ".join(unit_text(u, limit) for u in units)
    if repeats > 1:
        text = f"{text} r{run.get('repeat', 0)}".strip()
    return text

def swept_caption(run, repeats=1, axes=None):
    """What the values of swept_text(names=False) are: "accumulation_steps, lr (r: repeat)"; a zip group's names joined
    by "/" (its non-null values are, in that order)."""
    order = swept_order(run, axes)
    short = short_paths(order)
    text = ", ".join("/".join(short[p] for p in unit) for unit in swept_units(run, axes))
    if repeats > 1:
        text = f"{text} (r: repeat)".strip()
    return text


def sweep_point(run):
    """A key shared by the runs that differ only in their repeat: their strategy and swept values."""
    return strategy_label(run) + " " + json.dumps(run.get("swept") or {}, sort_keys=True)


def run_label(run, repeats=1, axes=None):
    """A legend label: the swept values (in axis order when axes is given), or the run id when nothing was swept."""
    return swept_text(run, repeats, axes) or str(run.get("id", "?"))


def has_series(run):
    return bool(((run.get("convergence") or {}).get("series")))


def finished(run):
    """True for a run that ran to its end (passed) or to its divergence: the runs figures and tables treat as data."""
    return run.get("disposition") in FINISHED_DISPOSITIONS


def steps_text(run):
    """"66 of 468 steps" (steps_completed of config.training.steps), or "" when the report lacks either."""
    done = run.get("steps_completed")
    total = ((run.get("config") or {}).get("training") or {}).get("steps")
    if isinstance(done, int) and isinstance(total, int) and not isinstance(done, bool):
        return f"{done} of {count_text(total, 'step')}"
    return ""


def unfinished_text(run):
    """What a run that is not drawn as data is: "interrupted at 66 of 468 steps", "timeout at ...", "failed"."""
    disposition = str(run.get("disposition", "?"))
    steps = steps_text(run)
    if disposition in ("interrupted", "timeout") and steps:
        return f"{disposition} at {steps}"
    return disposition


def drawn_runs(report):
    """Runs whose convergence is drawn: finished (passed or diverged), with a non-empty series."""
    return [r for r in report["runs"] if r.get("disposition") in DRAWN_DISPOSITIONS and has_series(r)]


def undrawn_runs(report):
    """The other runs (failed, skipped, timeout, or without a series)."""
    drawn = {id(r) for r in drawn_runs(report)}
    return [r for r in report["runs"] if id(r) not in drawn]


def undrawn_note(report, limit=6):
    """A short text listing runs that are not drawn and why ("" when every run is drawn)."""
    lines = []
    for r in undrawn_runs(report):
        why = unfinished_text(r)
        message = str(r.get("message") or "")
        if why != r.get("disposition"):  # "interrupted at 52 of 300 steps" says what "stopped after step 52 of 300" does
            message = re.sub(r"^stopped after step \d+ of \d+(: )?", "", message)
        if message:
            why += f": {shorten(message, 100)}"
        elif finished(r):
            why += ": no convergence series"
        else:
            why += ": not finished, so not drawn as data"
        lines.append(f"{r.get('id', '?')} ({why})")
    if len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more"]
    return "not drawn: " + "; ".join(lines) if lines else ""


def series(run, key):
    """(x, y) float lists of a series field (measured_s, train_loss, ...) against the step; null -> NaN."""
    points = (run.get("convergence") or {}).get("series") or []
    return [p["step"] for p in points], [num(p.get(key)) for p in points]


# The unit of each model.loss (model.loss; the cross-entropy uses the natural logarithm).
LOSS_UNITS = {"cross_entropy": "cross-entropy, nats", "mse": "mean squared error, squared output units"}


def loss_unit(runs):
    """The unit of the loss the runs report: LOSS_UNITS of their config.model.loss, several joined by " / " when they
    differ; "the model's loss" when no run names one."""
    kinds = sorted({str(((r.get("config") or {}).get("model") or {}).get("loss")) for r in runs} - {"None"})
    return " / ".join(LOSS_UNITS.get(k, k) for k in kinds) or "the model's loss"


def timing_only(run):
    """True for a run of training.mode "timing": the schedule priced on the modeled clock, no arithmetic, so no loss
    and no accuracy (its time to target is never reached)."""
    return ((run.get("config") or {}).get("training") or {}).get("mode") == "timing"


def host_clock_note(report, runs):
    """The note a measured-clock figure of host-backend runs carries: the measured clock is this machine's (rank
    threads on its CPU cores), not a GPU's; "" when no run of `runs` is on the host backend."""
    host = [r for r in runs if r.get("backend", "host") == "host"]
    if not host:
        return ""
    ranks = max((((r.get("config") or {}).get("cluster") or {}).get("ranks") or 1) for r in host)
    cores = (report.get("context") or {}).get("cores")
    where = f"{ranks} rank thread{'s' if ranks != 1 else ''} on {cores} core{'s' if cores != 1 else ''}" \
        if isinstance(cores, int) else f"{ranks} rank thread{'s' if ranks != 1 else ''}"
    return (f"measured clock: this host's time (host backend, {where}), not a GPU's; "
            "waits include thread preemption. The modeled clock prices the GPU node")


def compressed(run):
    """True when the run's config sets a compressor (compression.kind other than none)."""
    return ((run.get("config") or {}).get("compression") or {}).get("kind", "none") not in (None, "none")


def wire_bytes_per_step(run):
    """Bytes one rank puts on the wire per optimizer step (mean over steps and ranks): the run's
    compression.wire_bytes_per_rank_per_step when it has a compression object, else the mean over ranks of
    communication.bytes_sent_per_rank_per_step (the same figure, reports/README.md); NaN when neither is there."""
    value = num((run.get("compression") or {}).get("wire_bytes_per_rank_per_step"))
    if not math.isnan(value):
        return value
    sent = [num(b) for b in (run.get("communication") or {}).get("bytes_sent_per_rank_per_step") or []]
    sent = [b for b in sent if not math.isnan(b)]
    return sum(sent) / len(sent) if sent else math.nan


def cumulative_bytes(run):
    """(steps, bytes): the bytes one rank has sent after each series point's step, step * wire_bytes_per_step(run).

    The report holds the mean bytes per step only, so the cumulative figure is exact at the last step and linear in
    between: a compressor whose payload changes over the run (dgc's warm-up of the ratio, powersgd dense before
    start_step) is drawn at its mean rate. NaN bytes when the run has no byte count."""
    steps, _ = series(run, "step")
    per_step = wire_bytes_per_step(run)
    return steps, [step * per_step for step in steps]


def staleness_histogram(run, unit):
    """(values, fractions) of the run's staleness histogram in `unit` ("versions" or "clocks"; reports/README.md,
    staleness): each staleness value and the fraction of applied gradients that had it. ([], []) when the run has
    no staleness object (lock-step strategies) or applied nothing."""
    hist = (run.get("staleness") or {}).get(unit) or {}
    values, counts = hist.get("values") or [], hist.get("counts") or []
    total = sum(counts)
    if not total:
        return [], []
    return list(values), [c / total for c in counts]


def measured_phases(run):
    """{phase: dict with "all"/"per_rank"} of the measured clock, or None when the run has no measured timing."""
    measured = (run.get("timing") or {}).get("measured")
    return measured.get("phases") if measured else None


def modeled_phases(run):
    """{phase: dict with "all"/"per_rank"} of the modeled clock (cost model), or None when the run has none."""
    modeled = (run.get("timing") or {}).get("modeled")
    return modeled.get("phases") if modeled else None


def metric_value(run, metric):
    """The scalar `metric` (a key of METRICS) of one run, NaN when absent or null."""
    if metric in ("eval_accuracy", "eval_loss", "train_loss"):
        return num(((run.get("convergence") or {}).get("final") or {}).get(metric))
    if metric == "samples_per_s":
        return num((run.get("throughput") or {}).get("samples_per_s"))
    if metric == "time_to_target_s":
        ttt = run.get("time_to_target")
        return num(ttt.get("measured_s")) if ttt and ttt.get("reached") else math.nan
    if metric == "step_p50_ms":
        measured = (run.get("timing") or {}).get("measured")
        return num(((measured or {}).get("step") or {}).get("all", {}).get("p50_ms")) if measured else math.nan
    if metric == "modeled_samples_per_s":
        return num((run.get("throughput") or {}).get("modeled_samples_per_s"))
    if metric == "modeled_time_to_target_s":
        ttt = run.get("time_to_target")
        return num(ttt.get("modeled_s")) if ttt and ttt.get("reached") else math.nan
    if metric == "modeled_step_p50_ms":
        modeled = (run.get("timing") or {}).get("modeled")
        return num(((modeled or {}).get("step") or {}).get("all", {}).get("p50_ms")) if modeled else math.nan
    raise KeyError(f"unknown metric {metric!r} (known: {', '.join(METRICS)})")


def default_metric(report):
    """Final eval accuracy when some passed run has it, else final train loss, else (timing-only runs train nothing)
    the modeled throughput."""
    passed = [r for r in report["runs"] if r.get("disposition") == "passed"]
    if any(not math.isnan(metric_value(r, "eval_accuracy")) for r in passed):
        return "eval_accuracy"
    if not any(not math.isnan(metric_value(r, "train_loss")) for r in passed) and \
            any(not math.isnan(metric_value(r, "modeled_samples_per_s")) for r in passed):
        return "modeled_samples_per_s"
    return "train_loss"


# ---- sweep axes -----------------------------------------------------------------------------------------------------

def axis_name(axis):
    """An axis's name: its path, or "a+b" for a zip group of several paths."""
    return "+".join(axis["paths"])


def find_axis(report, name):
    """The axis named `name`: a full dotted path, a unique last component ("ranks"), "a+b" for a zip group, or its
    0-based index. Raises ReportError when no axis or several match."""
    axes = report.get("axes") or []
    if name.isdigit() and int(name) < len(axes):
        return axes[int(name)]
    exact = [a for a in axes if name == axis_name(a) or name in a["paths"]]
    if len(exact) == 1:
        return exact[0]
    suffix = [a for a in axes if any(p == name or p.endswith("." + name) for p in a["paths"])]
    if len(suffix) == 1:
        return suffix[0]
    known = ", ".join(axis_name(a) for a in axes) or "none"
    what = "matches several axes" if suffix else "is not a sweep axis"
    raise ReportError(f"axis {name!r} {what} of this report (axes: {known})")


def run_axis_value(run, axis):
    """The run's value of an axis as a list (one entry per path), or None when the run lacks one of the paths."""
    swept = run.get("swept") or {}
    if not all(p in swept for p in axis["paths"]):
        return None
    return [swept[p] for p in axis["paths"]]


def slowest_axis(report, runs):
    """The axis of the report whose value changes least often along `runs` (in run index order; the first such
    axis on a tie), or None when the report has no axes. Run order follows it in blocks: the first axis of a sweep."""
    axes = report.get("axes") or []
    ordered = sorted(runs, key=lambda r: r.get("index", 0))

    def changes(axis):
        values = [json.dumps(run_axis_value(r, axis)) for r in ordered]
        return sum(a != b for a, b in zip(values, values[1:]))

    return min(axes, key=changes) if axes else None


def axis_value_text(axis, value):
    """Tick text of one axis value: "4", or "k=4,ratio=0.1" for a zip group; long values cut, and objects shown by
    the keys that differ along the axis (label_value). A zip group's null members are left out, as in the run ids
    the progress lines shorten ("kind=adam,lr=0.001" for kind=adam, lr=0.001, freeze_step=null): their absence says
    null; all null: "name=null" of each."""
    if len(axis["paths"]) == 1:
        return label_value(value[0], among=axis_values_of(axis["paths"][0], [axis]))
    names = short_paths(axis["paths"])
    pairs = [(p, v) for p, v in zip(axis["paths"], value) if v is not None] or list(zip(axis["paths"], value))
    return ",".join(f"{names[p]}={label_value(v, among=axis_values_of(p, [axis]))}" for p, v in pairs)


# ---- input pipeline (runs[].data; reports/README.md, "data") ------------------------------------------------------

def data_totals(run):
    """The run's data totals (hit_rate, stall_share_modeled, ...), or None when it has no data object."""
    return (run.get("data") or {}).get("totals")


def capacity_axis(report):
    """The sweep axis over the cache capacity (data.cache.capacity_fraction or data.cache.capacity_bytes), or None."""
    for axis in report.get("axes") or []:
        if len(axis["paths"]) == 1 and axis["paths"][0] in ("data.cache.capacity_fraction",
                                                             "data.cache.capacity_bytes"):
            return axis
    return None


def data_curves(report, axis):
    """Curves over the capacity axis: {label: [(capacity, run), ...] sorted by capacity}, one curve per combination
    of the other swept values (e.g. storage x policy), for finished runs that have data totals; label "a=x, b=y" from the
    short names of the other swept paths in the report's axis order ("" when there are none)."""
    path = axis["paths"][0]
    curves = {}
    for run in report["runs"]:
        swept = run.get("swept") or {}
        if path not in swept or data_totals(run) is None or not finished(run):
            continue
        others = [p for p in swept_order(run, report.get("axes")) if p != path]
        names = short_paths(others)
        label = ", ".join(f"{names[p]}={format_value(swept[p])}" for p in others)
        curves.setdefault(label, []).append((num(swept[path]), run))
    for points in curves.values():
        points.sort(key=lambda p: p[0])
    return curves


def modeled_step_mean_ms(run):
    """Mean modeled step time in ms over all ranks and steps, NaN when absent."""
    step = ((run.get("timing") or {}).get("modeled") or {}).get("step") or {}
    return num((step.get("all") or {}).get("mean_ms"))


def last_epoch_data(run):
    """Over the ranks' last epoch entry of runs[].data (the cache warm when it fills in the first epoch): (mean
    modeled step ms, modeled stall share, measured stall share); NaNs when the run has no per-epoch data."""
    entries = [r["epochs"][-1] for r in (run.get("data") or {}).get("per_rank") or [] if r.get("epochs")]
    steps = sum(e["steps"] for e in entries)
    if not entries or steps == 0:
        return math.nan, math.nan, math.nan
    step_mod = sum(num(e.get("step_modeled_s")) for e in entries)
    step_meas = sum(num(e.get("step_measured_s")) for e in entries)
    stall_mod = sum(num(e.get("stall_modeled_s")) for e in entries)
    stall_meas = sum(num(e.get("stall_measured_s")) for e in entries)
    return (step_mod / steps * 1e3,
            stall_mod / step_mod if step_mod > 0 else math.nan,
            stall_meas / step_meas if step_meas > 0 else math.nan)


def parameter_server(run):
    """True for a parameter-server run (its config's sync.kind)."""
    return ((run.get("config") or {}).get("sync") or {}).get("kind") == "parameter_server"


def exposed_communication_ms(run):
    """Modeled communication per rank and step that compute does not hide (ms):
    timing.modeled.communication.exposed.all.mean_ms, for every strategy (a parameter server's is its push and pull,
    which nothing hides; reports/README.md). NaN without a modeled clock."""
    modeled = (run.get("timing") or {}).get("modeled") or {}
    exposed = (modeled.get("communication") or {}).get("exposed") or {}
    return num((exposed.get("all") or {}).get("mean_ms"))


# ---- short run labels for summaries (tools/plot.py --summary) -------------------------------------------------------

def distinguishing_paths(axis):
    """The paths of a sweep axis needed to tell its values apart: all of a single-path axis; for a zip group, paths
    added greedily (the one that separates most values, ties to the shortest longest value text, then axis order)
    until every value of the group is told apart (or no path helps further)."""
    paths = axis["paths"]
    if len(paths) == 1:
        return list(paths)
    values = axis["values"]
    target = len({json.dumps(v) for v in values})
    chosen = []
    while True:
        seen = len({json.dumps([v[paths.index(p)] for p in chosen]) for v in values}) if chosen else 1
        if seen >= target:
            return [p for p in paths if p in chosen]
        best = None
        for i, p in enumerate(paths):
            if p in chosen:
                continue
            trial = chosen + [p]
            count = len({json.dumps([v[paths.index(q)] for q in trial]) for v in values})
            width = max(len(label_value(v[i])) for v in values)
            key = (-count, width, i)
            if best is None or key < best[0]:
                best = (key, p)
        if best is None or -best[0][0] <= seen:
            return [p for p in paths if p in chosen]
        chosen.append(best[1])


SUMMARY_LABEL_CHARS = 56


def summary_labels(report, runs):
    """(labels, reference): one short label per run for a summary figure, and the text of the reference run.

    The reference is the first run. Every other run is labelled with the swept values it does not share with the
    reference ("key=value ...", short key names); when that text is longer than SUMMARY_LABEL_CHARS, only the paths
    each zip group needs to tell its values apart (distinguishing_paths) are kept. The reference is labelled
    "reference"; `reference` is its full "key=value" text (for a caption). A run with no difference (a repeat) is
    labelled by its repeat."""
    axes = report.get("axes") or []
    if not runs:
        return [], ""
    first = runs[0].get("swept") or {}
    order = swept_order(runs[0], axes)
    kept = {p for a in axes for p in distinguishing_paths(a)} | {p for p in order if not any(p in a["paths"]
                                                                                         for a in axes)}

    def text(run, paths):
        swept = run.get("swept") or {}
        diff = [p for p in swept_order(run, axes) if p in paths and swept.get(p) != first.get(p)]
        short = short_paths(diff)
        return " ".join(f"{short[p]}={label_value(swept[p], limit=20, among=axis_values_of(p, axes))}"
                        for p in diff)

    labels = []
    for k, run in enumerate(runs):
        if k == 0:
            labels.append("reference")
            continue
        full = text(run, set(order) | set(run.get("swept") or {}))
        label = full if len(full) <= SUMMARY_LABEL_CHARS else text(run, kept)
        labels.append(label or f"reference, repeat {run.get('repeat', 0)}")
    short = short_paths(order)
    reference = " ".join(f"{short[p]}={label_value(first[p], limit=20)}" for p in order)
    return labels, reference
