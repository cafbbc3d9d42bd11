#!/usr/bin/env python3
"""Compare the modeled clock with published measurements and print its error against the targets.

Inputs: tools/data/published_figures.json (every figure with its source: repository, path, commit, table) and the
gradsweep binary. Collectives are priced with `gradsweep price --json`; end-to-end rows run a timing-only scenario
built from the row (model preset, micro-batch, accumulation, precision, 8 ranks) and compare tokens/s per GPU.

Each point has a role: "fit" (the profile carries it or was fitted to it: shown, not counted), "held-out" (the
same source's other points: the targets are judged on these) and "other-source" (other machines and NCCL versions:
shown and summarized separately). --analytic also prices every all-reduce point without the profile's curve (the
fallback a profile without measurements gets).

Multi-node figures (collectives with "nodes" > 1: published all_reduce_perf tables of 2-8 nodes of 8 GPUs over
InfiniBand or RoCE) are priced on a multi-node profile with ranks = nodes x 8 (the node count is ranks /
gpus_per_node) and shown in a table of their own. One table per interconnect is "fit" (the profiles'
internode.nvls_tree_efficiency and internode.pipeline_window_MB are fitted on it: --fit-multinode redoes that fit),
every other table "held-out"; the targets are judged on the held-out tables, and shown per published table. Their
points may carry the published time (a 4th element), which is compared for sizes <= 64 KiB.

Usage: tools/validate_cost_model.py [--binary build/gradsweep] [--markdown] [--analytic] [--check] [--update-doc]
  --markdown    the tables as Markdown (docs/cost-model.md's validation section is this output, with --analytic)
  --update-doc  write that Markdown between the markers of docs/cost-model.md's validation section
  --check       exit 1 when a target is not met on the held-out points (single node; the multi-node targets are
                reported, not checked: they are not met, docs/cost-model.md "Multi-node rows")
  --fit-multinode  redo the fit of the multi-node constants on each interconnect's fit table (a grid; prints the best
                values and the profiles' values)
"""
import contextlib
import io
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_lib  # noqa: E402  (tools/report_lib.py: every JSON file the tools read goes through it)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tools", "data", "published_figures.json")

TARGETS = {
    "busbw": ("all-reduce busbw, 1 MiB to 8 GiB, both GPU generations", 0.10),
    "small": ("small-message time (<= 64 KiB)", 0.20),
    "e2e": ("end-to-end throughput, every compared model", 0.15),
    "median": ("median error over all points", 0.07),
}
SMALL_MAX = 64 * 1024
BUSBW_MIN = 1024 * 1024


def size_text(b):
    for unit, v in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= v and b % v == 0:
            return f"{b // v}{unit}"
    return str(b)


def price(binary, hardware, op, ranks, sizes, algo=None):
    """{size: row} from gradsweep price --json: one call over the sizes' range at factor 2, then one call for each
    size that range does not hold."""
    def call(spec):
        cmd = [binary, "price", "--hardware", hardware, "--op", op, "--ranks", str(ranks), "--bytes", spec, "--json"]
        if algo and algo != "default":
            cmd += ["--algo", algo]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise SystemExit(f"validate_cost_model: {' '.join(cmd)} failed: {r.stderr.strip()}")
        return {int(row["size_bytes"]): row for row in json.loads(r.stdout)["rows"]}

    out = call(f"{min(sizes)}:{max(sizes)}:2")
    for s in sizes:
        if s not in out:
            out.update(call(f"{s}:{s}"))
    return {s: out[s] for s in sizes}


def profile_without_curves(hardware, tmp):
    """A copy of a built-in profile with no measured curve (the analytic fallback), as a file path."""
    src = os.path.join(ROOT, "scenarios", "hardware", hardware + ".json")
    p = report_lib.load_json(src)
    p.pop("collectives", None)
    path = os.path.join(tmp, hardware + "-analytic.json")
    with open(path, "w") as f:
        json.dump(p, f)
    return path


def collective_rows(binary, data, analytic, tmp):
    rows = []
    for c in data["collectives"]:
        sizes = [int(p[0]) for p in c["points"]]
        nodes = int(c.get("nodes", 1))
        priced = price(binary, c["hardware"], c["op"], c["ranks"], sizes, c.get("algo"))
        fallback = {}
        if analytic and nodes == 1 and c.get("algo", "default") == "default":
            fallback = price(binary, profile_without_curves(c["hardware"], tmp), c["op"], c["ranks"], sizes)
        for point in c["points"]:
            s, busbw, role = int(point[0]), point[1], point[2]
            row = priced[s]
            factor = 2.0 * (c["ranks"] - 1) / c["ranks"] if c["op"] == "all_reduce" else 1.0
            # The published time where the table gives it (multi-node rows), else the time busbw implies.
            published_us = point[3] if len(point) > 3 else s * factor / (busbw * 1e3)
            small = s <= SMALL_MAX
            kind = "small" if small else ("busbw" if s >= BUSBW_MIN else "mid")
            # Small messages are compared by time (latency), the rest by busbw.
            if small:
                pub, mod, unit = published_us, row["time_us"], "us"
            else:
                pub, mod, unit = busbw, row["busbw_GBps"], "GB/s"
            r = {"group": f"{c['op']} {c.get('algo', 'default')}", "hardware": c["hardware"], "what": size_text(s),
                 "bytes": s, "published_us": published_us, "modeled_us": row["time_us"],
                 "kind": kind, "published": pub, "modeled": mod, "unit": unit, "role": role,
                 "source": c["source"], "from": row["from"], "algo": f"{row['algorithm']}/{row['protocol']}",
                 "nodes": nodes, "ranks": c["ranks"], "setup": c.get("setup", "")}
            r["error"] = (mod - pub) / pub
            if s in fallback:
                fb = fallback[s]["time_us"] if small else fallback[s]["busbw_GBps"]
                r["analytic_error"] = (fb - pub) / pub
            rows.append(r)
    return rows


def e2e_rows(binary, data, tmp):
    rows = []
    for e in data.get("end_to_end", []):
        scenario = {
            "name": "validate_" + e["id"].replace("-", "_"),
            "model": {"kind": e["model"], "sequence_length": e["sequence_length"]},
            "data": {"kind": "none", "batch_per_rank": e["micro_batch"]},
            # The published runs are FSDP (sharded model states), which the GPU memory estimate does not model: a
            # DDP replica of the larger ones does not fit, so the run is priced with a warning instead of skipped.
            "cluster": {"ranks": e["ranks"], "hardware": e["hardware"], "gpu_memory": "warn"},
            "precision": {"mode": e["precision"]},
            "training": {"mode": "timing", "steps": 3, "accumulation_steps": e["accumulation_steps"],
                         "optimizer": {"kind": "adamw", "lr": 1e-4}},
            "sync": {"kind": "allreduce"},
        }
        path = os.path.join(tmp, e["id"] + ".json")
        with open(path, "w") as f:
            json.dump(scenario, f)
        out = os.path.join(tmp, "out_" + e["id"])
        r = subprocess.run([binary, "run", path, "--out", out, "--quiet"], capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise SystemExit(f"validate_cost_model: the run of {e['id']} failed: {r.stderr.strip()}")
        run = report_lib.load_report(os.path.join(out, "report.json"))["runs"][0]
        step_s = run["timing"]["modeled"]["step"]["all"]["p50_ms"] / 1e3
        tokens = e["micro_batch"] * e["accumulation_steps"] * e["sequence_length"]
        modeled = tokens / step_s
        pub = e["published_tokens_per_s_per_gpu"]
        rows.append({"group": "end-to-end", "hardware": e["hardware"], "what": e["model"], "kind": "e2e",
                     "published": pub, "modeled": modeled, "unit": "tokens/s/GPU", "role": e["role"],
                     "source": e["source"], "error": (modeled - pub) / pub, "from": "run", "algo": "",
                     "step_s": step_s, "nodes": 1})
    return rows


def judge(rows, role):
    """Each target: (met, worst |error|, count) over the rows of that role."""
    sel = [r for r in rows if r["role"] == role]
    out = {}
    busbw = [abs(r["error"]) for r in sel if r["kind"] == "busbw"]
    gens = {r["hardware"].split("-")[0] for r in sel if r["kind"] == "busbw"}
    small = [abs(r["error"]) for r in sel if r["kind"] == "small"]
    e2e = [abs(r["error"]) for r in sel if r["kind"] == "e2e"]
    allp = [abs(r["error"]) for r in sel]
    if busbw:
        out["busbw"] = (max(busbw) <= TARGETS["busbw"][1] and {"h100", "a100"} <= gens, max(busbw), len(busbw))
    if small:
        out["small"] = (max(small) <= TARGETS["small"][1], max(small), len(small))
    if e2e:
        out["e2e"] = (max(e2e) <= TARGETS["e2e"][1], max(e2e), len(e2e))
    if allp:
        med = statistics.median(allp)
        out["median"] = (med < TARGETS["median"][1], med, len(allp))
    return out


def fmt_num(v):
    return f"{v:.0f}" if abs(v) >= 1000 else (f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}")


def source_where(src):
    """Where a source is: repository, path and commit, or an issue thread's address."""
    if "commit" in src:
        return f"{src['repository']} `{src.get('path', '')}` at {src['commit'][:12]}"
    return f"{src['url']} ({src['thread']})"


def print_tables(rows, data, markdown, analytic):
    if markdown:
        hdr = "| figure | hardware | size / model | published | modeled | error | role | source |"
        if analytic:
            hdr = hdr[:-len(" source |")] + " no-curve error | source |"
        print(hdr)
        print("|" + "---|" * (hdr.count("|") - 1))
    else:
        print(f"{'figure':<20} {'hardware':<11} {'size/model':<10} {'published':>11} {'modeled':>11} {'unit':<13} "
              f"{'error':>7}  {'role':<12} {'from':<9} source")
    for r in rows:
        if markdown:
            line = (f"| {r['group']} | {r['hardware']} | {r['what']} | {fmt_num(r['published'])} {r['unit']} | "
                    f"{fmt_num(r['modeled'])} | {100 * r['error']:+.1f}% | {r['role']} |")
            if analytic:
                line += f" {100 * r['analytic_error']:+.1f}% |" if "analytic_error" in r else " |"
            print(line + f" {r['source']} |")
        else:
            print(f"{r['group']:<20} {r['hardware']:<11} {r['what']:<10} {fmt_num(r['published']):>11} "
                  f"{fmt_num(r['modeled']):>11} {r['unit']:<13} {100 * r['error']:>+6.1f}%  {r['role']:<12} "
                  f"{r['from']:<9} {r['source']}")


def print_sources(rows, data, markdown):
    used = []
    for r in rows:
        if r["source"] not in used:
            used.append(r["source"])
    print()
    print("Sources:" if not markdown else "**Sources** (each figure's `source` in tools/data/published_figures.json):")
    print()
    for key in used:
        s = data["sources"][key]
        print(f"{'- ' if markdown else '  '}{'`' + key + '`' if markdown else key}: {source_where(s)}; {s['setup']}")
    for e in data.get("end_to_end", [])[:1] if any(r["kind"] == "e2e" for r in rows) else []:
        print(f"{'- ' if markdown else '  '}end-to-end rows: published setup vs modeled: {e['differences']}. "
              f"Adjustment: {e['adjustment']}.")


def judge_line(res, key, markdown):
    """One target's line: met or not, its largest (or median) |error| and the points it is judged on."""
    text, limit = TARGETS[key]
    met, worst, n = res[key]
    what = "median" if key == "median" else "largest |error|"
    return (f"{'- ' if markdown else '  '}{text}: {'met' if met else 'NOT met'} "
            f"({what} {100 * worst:.1f}% over {n} points, target {'<' if key == 'median' else '<='} "
            f"{100 * limit:.0f}%)")


def print_targets(rows, markdown):
    ok_all = True
    for role, title in (("held-out", "held-out points of the fitted sources (the targets)"),
                        ("other-source", "other sources (other machines, NCCL versions; not fitted)")):
        res = judge(rows, role)
        if not res:
            continue
        print()
        print(f"{'**' if markdown else ''}Targets on {title}{'**' if markdown else ''}:")
        print()
        for key in TARGETS:
            if key not in res:
                continue
            print(judge_line(res, key, markdown))
            if role == "held-out" and not res[key][0]:
                ok_all = False
    return ok_all


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.environ.get("GRADSWEEP_BIN", os.path.join(ROOT, "build", "gradsweep")),
                    help="the gradsweep binary that prices (default: $GRADSWEEP_BIN or build/gradsweep)")
    ap.add_argument("--data", default=DATA, help="the published figures with their sources (default: %(default)s)")
    ap.add_argument("--markdown", action="store_true", help="the tables as Markdown")
    ap.add_argument("--analytic", action="store_true",
                    help="also the analytic model's price of the points that have a measured curve")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a single-node target is not met on the held-out points (the multi-node "
                         "targets are printed, not checked)")
    ap.add_argument("--no-e2e", action="store_true", help="collectives only (fast)")
    ap.add_argument("--update-doc", action="store_true",
                    help="write the Markdown into docs/cost-model.md's validation section")
    ap.add_argument("--fit-multinode", action="store_true",
                    help="redo the grid fit of the multi-node constants on each interconnect's fit table")
    args = ap.parse_args()
    try:
        data = report_lib.load_json(args.data)
    except (OSError, ValueError, report_lib.ReportError) as e:
        print(f"validate_cost_model: --data: {e}", file=sys.stderr)
        return 2
    missing = [k for k in ("sources", "collectives", "end_to_end") if not isinstance(data, dict) or k not in data]
    if missing:
        print(f"validate_cost_model: --data {args.data}: expected the published-figures file (keys sources, "
              f"collectives, end_to_end, as tools/data/published_figures.json), missing: {', '.join(missing)}",
              file=sys.stderr)
        return 2
    if args.fit_multinode:
        return fit_multinode(args.binary, report_lib.load_json(args.data))
    if args.update_doc:
        args.markdown = args.analytic = True
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = run(args)
        replace_doc_section(DOC, buf.getvalue())
        return code
    return run(args)


def table_key(r):
    return (r["source"], r["setup"], r["hardware"], r["ranks"])


def print_multinode(rows, data, markdown):
    """The multi-node table, its sources, the targets on the held-out tables (and, for the record, on the fit tables)
    and per published table."""
    if not rows:
        return
    print()
    if markdown:
        print("**Multi-node all-reduce** (published all_reduce_perf tables of 2-8 nodes of 8 GPUs; `fit`: the one table "
              "per interconnect the profiles' `internode.nvls_tree_efficiency` and `pipeline_window_MB` are fitted on, "
              "`held-out`: every other table; `modeled algorithm` is the model's choice):")
        print()
        hdr = ("| published setup | hardware (ranks) | size | published | modeled | error | role | modeled algorithm | "
               "source |")
        print(hdr)
        print("|" + "---|" * (hdr.count("|") - 1))
    else:
        print("Multi-node all-reduce (fit: one table per interconnect; held-out: the others):")
        print(f"{'setup':<58} {'hardware (ranks)':<28} {'size':<5} {'published':>11} {'modeled':>9} {'unit':<5} "
              f"{'error':>7}  {'role':<8} {'algo':<15} source")
    for r in rows:
        hw = f"{r['hardware']} ({r['ranks']})"
        if markdown:
            print(f"| {r['setup']} | {hw} | {r['what']} | {fmt_num(r['published'])} {r['unit']} | "
                  f"{fmt_num(r['modeled'])} | {100 * r['error']:+.1f}% | {r['role']} | {r['algo']} | {r['source']} |")
        else:
            print(f"{r['setup'][:58]:<58} {hw:<28} {r['what']:<5} {fmt_num(r['published']):>11} "
                  f"{fmt_num(r['modeled']):>9} {r['unit']:<5} {100 * r['error']:>+6.1f}%  {r['role']:<8} "
                  f"{r['algo']:<15} {r['source']}")
    print()
    print("Multi-node sources:" if not markdown else "**Multi-node sources** (how each setup differs from the "
          "profile it is priced on is its `note` in tools/data/published_figures.json):")
    print()
    seen = []
    for r in rows:
        if r["source"] not in seen:
            seen.append(r["source"])
            s = data["sources"][r["source"]]
            print(f"{'- ' if markdown else '  '}{'`' + r['source'] + '`' if markdown else r['source']}: "
                  f"{source_where(s)}; {s['setup']}")
    bold = "**" if markdown else ""
    tables = []
    for r in rows:
        if table_key(r) not in tables:
            tables.append(table_key(r))
    fit_tables = [k for k in tables if any(r["role"] == "fit" for r in rows if table_key(r) == k)]
    for role, title in (("held-out", "Targets on the held-out multi-node rows (the targets; not fitted)"),
                        ("fit", "For the record, the multi-node fit tables (" +
                         "; ".join(f"{k[0]}, {k[1]}" for k in fit_tables) + ")")):
        res = judge(rows, role)
        print()
        print(f"{bold}{title}{bold}:")
        print()
        for key in TARGETS:
            if key in res:
                line = judge_line(res, key, markdown)
                if key == "busbw":
                    bw = [abs(r["error"]) for r in rows if r["role"] == role and r["kind"] == "busbw"]
                    within = sum(1 for e in bw if e <= TARGETS["busbw"][1])
                    line = line[:-1] + f"; {within} of {len(bw)} within 10%)"
                print(line)
    print()
    print("Per published table (all-reduce busbw 1 MiB to 8 GiB: largest and median |error|, points within 10%; "
          "time <= 64 KiB: largest |error|):")
    print()
    for k in tables:
        sel = [r for r in rows if table_key(r) == k]
        bw = [abs(r["error"]) for r in sel if r["kind"] == "busbw"]
        small = [abs(r["error"]) for r in sel if r["kind"] == "small"]
        parts = []
        if bw:
            within = sum(1 for e in bw if e <= TARGETS["busbw"][1])
            parts.append(f"busbw largest {100 * max(bw):.1f}%, median {100 * statistics.median(bw):.1f}%, "
                         f"{within} of {len(bw)} within 10%")
        if small:
            parts.append(f"time <= 64 KiB largest {100 * max(small):.1f}% over {len(small)}")
        print(f"{'- ' if markdown else '  '}[{sel[0]['role']}] {k[0]}, {k[1]} ({k[2]}, {k[3]} ranks): "
              f"{'; '.join(parts)}")
    print_launch_fit(rows, markdown)


# The multi-node constants fitted per interconnect (--fit-multinode): each on its own grid, on the interconnect's fit
# table (the points with role "fit"), minimizing the squared log error of busbw (> 64 KiB) and time (<= 64 KiB).
MULTINODE_GRID = {
    "nvls_tree_efficiency": [round(0.80 + 0.01 * i, 2) for i in range(21)],
    "pipeline_window_MB": [0.0, 1.0, 2.0, 4.0, 6.0, 8.0, 12.0, 16.0, 20.0, 24.0, 28.0, 32.0, 40.0, 48.0, 64.0],
}


def fit_multinode(binary, data):
    """Grid fit of MULTINODE_GRID's constants on each fit table, on a copy of the table's profile; prints the best
    values next to the profile's."""
    fits = [c for c in data["collectives"] if c.get("nodes", 1) > 1 and all(p[2] == "fit" for p in c["points"])]
    with tempfile.TemporaryDirectory(prefix="gs_fit_") as tmp:
        for c in fits:
            src = os.path.join(ROOT, "scenarios", "hardware", c["hardware"] + ".json")
            prof = report_lib.load_json(src)
            names = [k for k in MULTINODE_GRID if k in prof["internode"]]
            best = None
            grid = [[]]
            for k in names:
                grid = [g + [v] for g in grid for v in MULTINODE_GRID[k]]
            for values in grid:
                for k, v in zip(names, values):
                    prof["internode"][k]["value"] = v
                path = os.path.join(tmp, c["hardware"] + ".json")
                with open(path, "w") as f:
                    json.dump(prof, f)
                one = dict(c, hardware=path)
                rows = collective_rows(binary, {"collectives": [one]}, False, tmp)
                loss = sum(math.log(1.0 + r["error"]) ** 2 for r in rows)
                if best is None or loss < best[0] - 1e-12:
                    best = (loss, values)
            shipped = report_lib.load_json(src)["internode"]
            print(f"{c['source']}, {c['setup']} ({c['hardware']}, {len(c['points'])} points): " +
                  ", ".join(f"{k} {v} (profile {shipped[k]['value']})" for k, v in zip(names, best[1])))
    return 0


# The table a per-call launch cost across nodes is fitted on (the profile's own configuration: h100-sxm-8x4-ib, 4
# nodes); the multi-node price has none (sim/cost/hierarchical.h), and this fit says why. A probe of its own, apart from
# the fit / held-out split of the profiles' fitted terms: the other tables' best constants are shown beside it.
LAUNCH_FIT_TABLE = ("nccl-tests-309-qoofyk", "4 hosts (virtual machines), NCCL's choice")


def launch_fit(rows, lo, hi):
    """The per-call constant L (us, a grid of 0.25 us from lo to hi, as gradsweep calibrate's launch_us) that, added to
    every modeled time of rows, minimizes the squared log error of the time; None without rows."""
    if not rows:
        return None
    best = None
    for i in range(int(round((hi - lo) / 0.25)) + 1):
        launch = lo + 0.25 * i
        if any(r["modeled_us"] + launch <= 0 for r in rows):
            continue
        loss = sum(math.log((r["modeled_us"] + launch) / r["published_us"]) ** 2 for r in rows)
        if best is None or loss < best[0]:
            best = (loss, launch)
    return best[1]


def print_launch_fit(rows, markdown):
    """The launch cost across nodes: fitted on LAUNCH_FIT_TABLE's times <= 64 KiB (grid 0-60 us) and, for the
    record, without the grid's bound and on each other table."""
    tables = []
    for r in rows:
        if (r["source"], r["setup"]) not in tables:
            tables.append((r["source"], r["setup"]))
    small = {t: [r for r in rows if (r["source"], r["setup"]) == t and r["kind"] == "small"] for t in tables}
    fit = small.get(LAUNCH_FIT_TABLE)
    if not fit:
        return
    held = [f"{t[0]}, {t[1]}: {launch_fit(small[t], -60, 60):+.2f} us" for t in tables
            if t != LAUNCH_FIT_TABLE and small[t]]
    print()
    print(f"{'- ' if markdown else '  '}per-call launch cost across nodes (the price has none): fitted on "
          f"{LAUNCH_FIT_TABLE[0]}, {LAUNCH_FIT_TABLE[1]}, times <= 64 KiB ({len(fit)} points; grid 0-60 us in "
          f"0.25 us, as gradsweep calibrate's launch_us): {launch_fit(fit, 0, 60):.2f} us (without the grid's lower "
          f"bound {launch_fit(fit, -60, 60):+.2f} us); each other table's own best constant: {'; '.join(held)}")


DOC = os.path.join(ROOT, "docs", "cost-model.md")
BEGIN, END = "<!-- validate_cost_model.py begin -->", "<!-- validate_cost_model.py end -->"


def doc_section(path):
    """The text between the markers of docs/cost-model.md (what --update-doc wrote)."""
    with open(path) as f:
        text = f.read()
    return text[text.index(BEGIN) + len(BEGIN) + 1:text.index(END)]


def replace_doc_section(path, body):
    with open(path) as f:
        text = f.read()
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text[:a] + "\n" + body + text[b:])
    os.replace(tmp, path)


def run(args):
    data = report_lib.load_json(args.data)
    with tempfile.TemporaryDirectory(prefix="gs_validate_") as tmp:
        rows = collective_rows(args.binary, data, args.analytic, tmp)
        if not args.no_e2e:
            rows += e2e_rows(args.binary, data, tmp)
    multi = [r for r in rows if r["nodes"] > 1]
    rows = [r for r in rows if r["nodes"] == 1]
    print_tables(rows, data, args.markdown, args.analytic)
    print_sources(rows, data, args.markdown)
    ok = print_targets(rows, args.markdown)
    if args.analytic:
        an = [abs(r["analytic_error"]) for r in rows if "analytic_error" in r and r["role"] != "fit"]
        if an:
            print()
            print(f"{'- ' if args.markdown else '  '}without the curves (the analytic model with the fitted latency "
                  f"scale and launch): median |error| {100 * statistics.median(an):.1f}%, largest "
                  f"{100 * max(an):.1f}% over {len(an)} all-reduce points")
    print_multinode(multi, data, args.markdown)
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
