"""tools/compare.py: the table and the run-by-run diff of the hand-written reports in tests/tools/data (expected text
and speedups written by hand from their numbers), baseline choice, the Pareto front, bad input, and real reports
(GRADSWEEP_REPORTS)."""
import csv
import io
import json
import math
import subprocess
import sys

import matplotlib.figure
import pytest

import compare
from tools_test_paths import REPO_ROOT, TOOLS
from test_plot import assert_png

COMPARE = TOOLS / "compare.py"
DATA = "tests/tools/data"
OLD, NEW, OTHER = f"{DATA}/compare_old.json", f"{DATA}/compare_new.json", f"{DATA}/compare_other.json"
R0 = "cmp.accumulation_steps=1.ranks=2.r0"
R1 = "cmp.accumulation_steps=1.ranks=4.r0"
R2 = "cmp.accumulation_steps=2.ranks=2.r0"
R3 = "cmp.accumulation_steps=2.ranks=4.r0"
LOCAL = "cmp_local.kind=local_sgd.r0"


def run_compare(*args):
    return subprocess.run([sys.executable, str(COMPARE), *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=str(REPO_ROOT))


def csv_rows(text):
    return list(csv.DictReader(io.StringIO(text)))


# ---- table ----------------------------------------------------------------------------------------------------------

# Written by hand from compare_old.json and compare_other.json. Baseline: the first run that reached the target (R0:
# 2.0 s measured, 0.5 s modeled). Speedups: R1 2.0/1.6 = 1.25 and 0.5/0.2 = 2.5; LOCAL 2.0/1.0 = 2 and 0.5/0.25 = 2.
# Bytes: the mean of bytes_sent_per_rank_per_step; exposed: timing.modeled.communication.exposed.all.mean_ms.
EXPECTED_TABLE = """\
baseline: cmp.accumulation_steps=1.ranks=2.r0

| run                                 | scenario  | accumulation_steps | ranks | kind      \
| time to target (s, measured) | time to target (s, modeled) | final eval accuracy | wire bytes per step \
| exposed comm (ms, modeled) | speedup (measured) | speedup (modeled) | status            |
| ----------------------------------- | --------- | -----------------: | ----: | --------- \
| ---------------------------: | --------------------------: | ------------------: | ------------------: \
| -------------------------: | -----------------: | ----------------: | ----------------- |
| cmp.accumulation_steps=1.ranks=2.r0 | cmp       |                  1 |     2 | -         \
|                            2 |                         0.5 |              0.8500 |              1000 B \
|                       0.25 |              1.00x |             1.00x | reached, baseline |
| cmp.accumulation_steps=1.ranks=4.r0 | cmp       |                  1 |     4 | -         \
|                          1.6 |                         0.2 |              0.8400 |              1500 B \
|                        0.4 |              1.25x |             2.50x | reached           |
| cmp.accumulation_steps=2.ranks=2.r0 | cmp       |                  2 |     2 | -         \
|                            - |                           - |              0.7123 |              1000 B \
|                      0.125 |                  - |                 - | not reached       |
| cmp.accumulation_steps=2.ranks=4.r0 | cmp       |                  2 |     4 | -         \
|                            - |                           - |                   - |                   - \
|                          - |                  - |                 - | diverged          |
| cmp_local.kind=local_sgd.r0         | cmp_local |                  - |     - | local_sgd \
|                            1 |                        0.25 |              0.8512 |               250 B \
|                          - |              2.00x |             2.00x | reached           |

`-` speedup: a target is set, but the run or the baseline has no time to target on that clock (not reached, \
diverged, failed, or no modeled clock)
"""


def test_markdown_table_of_two_scenarios_is_the_expected_text():
    result = run_compare(OLD, OTHER)
    assert result.returncode == 0, result.stderr
    assert result.stdout == EXPECTED_TABLE


def test_csv_table_has_full_precision_and_empty_cells():
    result = run_compare(OLD, OTHER, "--format", "csv")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == ("run,scenario,training.accumulation_steps,cluster.ranks,sync.kind,time_to_target_measured_s,"
                        "time_to_target_modeled_s,final_eval_accuracy,wire_bytes_per_rank_per_step,"
                        "exposed_communication_ms,speedup_measured,speedup_modeled,status,speedup_basis,modeled_bound")
    assert lines[1] == f"{R0},cmp,1,2,,2.0,0.5,0.85,1000.0,0.25,1.0,1.0,\"reached, baseline\",time_to_target,"
    assert lines[4] == f"{R3},cmp,2,4,,,,,,,,,diverged,,"
    assert lines[5] == f"{LOCAL},cmp_local,,,local_sgd,1.0,0.25,0.8512,250.0,,2.0,2.0,reached,time_to_target,"
    assert len(lines) == 6


def speedups(*args):
    result = run_compare(*args, "--format", "csv")
    assert result.returncode == 0, result.stderr
    rows = csv_rows(result.stdout)
    return {r["run"]: (r["speedup_measured"], r["speedup_modeled"]) for r in rows}, rows


def test_baseline_by_run_id():
    got, rows = speedups(OLD, OTHER, "--baseline", R1)
    # R1: 1.6 s measured, 0.2 s modeled. R0: 1.6/2.0, 0.2/0.5; LOCAL: 1.6/1.0, 0.2/0.25.
    assert float(got[R0][0]) == pytest.approx(0.8) and float(got[R0][1]) == pytest.approx(0.4)
    assert float(got[R1][0]) == 1.0 and float(got[R1][1]) == 1.0
    assert float(got[LOCAL][0]) == pytest.approx(1.6) and float(got[LOCAL][1]) == pytest.approx(0.8)
    assert got[R2] == ("", "") and got[R3] == ("", "")  # not reached, diverged: no speedup
    assert [r["status"] for r in rows] == ["reached", "reached, baseline", "not reached", "diverged", "reached"]


def test_baseline_by_run_name_and_by_part_of_an_id():
    got, _ = speedups(OLD, OTHER, "--baseline", "cmp_local")  # config.name of the one run of cmp_local
    # LOCAL: 1.0 s, 0.25 s. R0: 1.0/2.0, 0.25/0.5; R1: 1.0/1.6, 0.25/0.2.
    assert float(got[R0][0]) == pytest.approx(0.5) and float(got[R0][1]) == pytest.approx(0.5)
    assert float(got[R1][0]) == pytest.approx(0.625) and float(got[R1][1]) == pytest.approx(1.25)
    got, _ = speedups(OLD, OTHER, "--baseline", "accumulation_steps=1.ranks=4")
    assert float(got[R1][0]) == 1.0 and float(got[R0][1]) == pytest.approx(0.4)


def test_default_baseline_skips_runs_without_a_time_to_target():
    doc = compare.load(REPO_ROOT / OLD)
    rows = [compare.Row(doc, OLD, run) for run in doc["runs"]]
    assert compare.pick_baseline(rows[2:] + rows[:2], None).id == R0  # R2 not reached, R3 diverged
    assert compare.pick_baseline(rows[2:4], None).id == R2  # nothing reached: the first run


# ---- diff -----------------------------------------------------------------------------------------------------------

# Written by hand from compare_old.json and compare_new.json; change = (new - old) / old: 1.6 vs 2 -20%, 0.86 vs 0.85
# +1/85 = +1.18%, 0.36 vs 0.38 -1/19 = -5.26%, 0.79 vs 0.84 -5/84 = -5.95%, 0.45 vs 0.4 +12.5%, 110 vs 100 +10%,
# 750 vs 1500 -50%, 0.2 vs 0.4 -50%, 0.8101 vs 0.7123 +0.0978/0.7123 = +13.73%, 0.45 vs 0.9 -50%. Metrics that
# neither run has (measured step time, throughput, eval loss) are left out.
EXPECTED_DIFF = """\
old: tests/tools/data/compare_old.json (commit 111111111111)
new: tests/tools/data/compare_new.json (commit 222222222222-dirty)

| run                                 | metric                       |         old |         new |      change |
| ----------------------------------- | ---------------------------- | ----------: | ----------: | ----------: |
| cmp.accumulation_steps=1.ranks=2.r0 | status                       |     reached |     reached |             |
| cmp.accumulation_steps=1.ranks=2.r0 | time_to_target_measured_s    |           2 |         1.6 |     -20.00% |
| cmp.accumulation_steps=1.ranks=2.r0 | time_to_target_modeled_s     |         0.5 |         0.5 |      +0.00% |
| cmp.accumulation_steps=1.ranks=2.r0 | final_eval_accuracy          |      0.8500 |      0.8600 |      +1.18% |
| cmp.accumulation_steps=1.ranks=2.r0 | final_train_loss             |        0.38 |        0.36 |      -5.26% |
| cmp.accumulation_steps=1.ranks=2.r0 | modeled_step_p50_ms          |         125 |         125 |      +0.00% |
| cmp.accumulation_steps=1.ranks=2.r0 | wire_bytes_per_rank_per_step |      1000 B |      1000 B |      +0.00% |
| cmp.accumulation_steps=1.ranks=2.r0 | exposed_communication_ms     |        0.25 |        0.25 |      +0.00% |
| cmp.accumulation_steps=1.ranks=4.r0 | status                       |     reached | not reached |     changed |
| cmp.accumulation_steps=1.ranks=4.r0 | time_to_target_measured_s    |         1.6 |           - |           - |
| cmp.accumulation_steps=1.ranks=4.r0 | time_to_target_modeled_s     |         0.2 |           - |           - |
| cmp.accumulation_steps=1.ranks=4.r0 | final_eval_accuracy          |      0.8400 |      0.7900 |      -5.95% |
| cmp.accumulation_steps=1.ranks=4.r0 | final_train_loss             |         0.4 |        0.45 |     +12.50% |
| cmp.accumulation_steps=1.ranks=4.r0 | modeled_step_p50_ms          |         100 |         110 |     +10.00% |
| cmp.accumulation_steps=1.ranks=4.r0 | wire_bytes_per_rank_per_step |      1500 B |       750 B |     -50.00% |
| cmp.accumulation_steps=1.ranks=4.r0 | exposed_communication_ms     |         0.4 |         0.2 |     -50.00% |
| cmp.accumulation_steps=2.ranks=2.r0 | status                       | not reached |     reached |     changed |
| cmp.accumulation_steps=2.ranks=2.r0 | time_to_target_measured_s    |           - |           3 |           - |
| cmp.accumulation_steps=2.ranks=2.r0 | time_to_target_modeled_s     |           - |        0.75 |           - |
| cmp.accumulation_steps=2.ranks=2.r0 | final_eval_accuracy          |      0.7123 |      0.8101 |     +13.73% |
| cmp.accumulation_steps=2.ranks=2.r0 | final_train_loss             |         0.9 |        0.45 |     -50.00% |
| cmp.accumulation_steps=2.ranks=2.r0 | modeled_step_p50_ms          |         250 |         250 |      +0.00% |
| cmp.accumulation_steps=2.ranks=2.r0 | wire_bytes_per_rank_per_step |      1000 B |      1000 B |      +0.00% |
| cmp.accumulation_steps=2.ranks=2.r0 | exposed_communication_ms     |       0.125 |       0.125 |      +0.00% |
| cmp.accumulation_steps=2.ranks=4.r0 | status                       |    diverged |      absent | only in old |
| cmp.accumulation_steps=1.ranks=8.r0 | status                       |      absent |     reached | only in new |
"""


def test_two_reports_of_one_scenario_are_diffed_run_by_run():
    result = run_compare(OLD, NEW)  # same scenario name: diff mode without --diff
    assert result.returncode == 0, result.stderr
    assert result.stdout == EXPECTED_DIFF
    assert run_compare("--diff", OLD, NEW).stdout == EXPECTED_DIFF


def test_diff_csv_changes():
    result = run_compare(OLD, NEW, "--format", "csv")
    assert result.returncode == 0, result.stderr
    rows = {(r["run"], r["metric"]): r for r in csv_rows(result.stdout)}
    assert float(rows[R0, "final_train_loss"]["change"]) == pytest.approx(-1 / 19)
    assert float(rows[R0, "time_to_target_measured_s"]["change"]) == pytest.approx(-0.2)
    assert float(rows[R2, "final_eval_accuracy"]["change"]) == pytest.approx(0.0978 / 0.7123)
    assert rows[R1, "time_to_target_measured_s"]["new"] == "" and rows[R1, "time_to_target_measured_s"]["change"] == ""
    assert rows[R1, "status"]["old"] == "reached" and rows[R1, "status"]["new"] == "not reached"
    assert rows[R3, "status"]["change"] == "only in old"
    assert rows["cmp.accumulation_steps=1.ranks=8.r0", "status"]["change"] == "only in new"
    assert not any(run == R3 for run, metric in rows if metric != "status")


def test_table_flag_puts_two_reports_of_one_scenario_in_one_table():
    result = run_compare(OLD, NEW, "--table", "--format", "csv")
    assert result.returncode == 0, result.stderr
    rows = csv_rows(result.stdout)
    assert len(rows) == 8 and rows[0]["run"] == R0 and rows[4]["run"] == R0
    # Baseline: old R0 (2.0 s); new R0 reached in 1.6 s: 2.0/1.6 = 1.25.
    assert float(rows[4]["speedup_measured"]) == pytest.approx(1.25)


# ---- Pareto ---------------------------------------------------------------------------------------------------------

def test_pareto_front_by_hand():
    points = [(3, 0.9), (1, 0.5), (2, 0.8), (2.5, 0.7), (1, 0.4), (4, 0.9)]
    # (1, 0.4) is as fast as (1, 0.5) and less accurate; (2.5, 0.7) is slower than (2, 0.8) and less accurate;
    # (4, 0.9) is slower than (3, 0.9) and not more accurate.
    assert compare.pareto_front(points) == [1, 2, 0]
    assert compare.pareto_front([]) == []


def test_pareto_plot_marks_the_front(tmp_path, monkeypatch, capsys):
    saved = []
    original = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: (saved.append(fig),
                                                                                 original(fig, *a, **k)))
    png = tmp_path / "pareto.png"
    assert compare.main([str(REPO_ROOT / OLD), str(REPO_ROOT / OTHER), "--pareto", str(png), "--clock",
                         "modeled"]) == 0
    assert_png(png)
    assert "3 of 5 runs placed" in capsys.readouterr().err
    ax = saved[0].axes[0]
    # Modeled (time, accuracy): R0 (0.5, 0.85), R1 (0.2, 0.84), LOCAL (0.25, 0.8512): R0 is dominated by LOCAL.
    front = [line for line in ax.get_lines() if line.get_label() == "Pareto front"][0]
    assert list(front.get_xdata()) == [0.2, 0.25] and list(front.get_ydata()) == [0.84, 0.8512]
    assert ax.get_xlabel() == "time to target (s, modeled)"


# ---- bad input ------------------------------------------------------------------------------------------------------

def assert_error(result, *parts):
    assert result.returncode == 2
    assert result.stdout == ""
    for part in parts:
        assert part in result.stderr, result.stderr


def test_unreadable_file(tmp_path):
    missing = tmp_path / "nope.json"
    assert_error(run_compare(missing), f"{missing}: cannot read")


def test_not_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{\"runs\": [")
    assert_error(run_compare(path), f"{path}: invalid JSON")


def test_not_a_report(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    assert_error(run_compare(path), f"{path}: $: expected a gradsweep report", "found a list")
    path.write_text("{\"schema_version\": 1}")
    assert_error(run_compare(path), f"{path}: $.runs: missing")


def test_newer_schema_version(tmp_path):
    doc = json.loads((REPO_ROOT / OLD).read_text())
    doc["schema_version"] = 2
    path = tmp_path / "future.json"
    path.write_text(json.dumps(doc))
    assert_error(run_compare(path), f"{path}: $.schema_version: 2 is newer than this tool supports (1)")


def test_schema_violation_names_the_json_path(tmp_path):
    doc = json.loads((REPO_ROOT / OLD).read_text())
    doc["runs"][2]["disposition"] = "bogus"
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(doc))
    assert_error(run_compare(path), str(path), "$.runs[2].disposition")


def test_duplicate_run_ids(tmp_path):
    doc = json.loads((REPO_ROOT / OLD).read_text())
    doc["runs"][3]["id"] = R1
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(doc))
    assert_error(run_compare(path), f"{path}: $.runs[3].id", "repeats $.runs[1].id")


def test_baseline_not_found_or_ambiguous():
    assert_error(run_compare(OLD, "--baseline", "nope"), "--baseline nope: no run has this id or name",
                 f"runs: {R0}, {R1}, {R2}, {R3}")
    assert_error(run_compare(OLD, "--baseline", "ranks=4"),
                 f"--baseline ranks=4: matches 2 runs as whole parts of an id ({R1}, {R3}); give one run id")
    # A scenario name with several runs: the candidates are that scenario's runs.
    assert_error(run_compare(OLD, OTHER, "--baseline", "cmp"),
                 f"--baseline cmp: matches 4 runs as scenario or run name ({R0}, {R1}, {R2}, {R3})")
    # A substring of several ids ("steps=2" is no whole part of any).
    assert_error(run_compare(OLD, "--baseline", "steps=2"), "matches 2 runs as part of an id", R2, R3)


def baseline_id(*args):
    doc_rows = []
    for path in args[:-1]:
        doc = compare.load(REPO_ROOT / path)
        doc_rows += [compare.Row(doc, path, run) for run in doc["runs"]]
    return compare.pick_baseline(doc_rows, args[-1]).id


def test_baseline_rule_order():
    """Exact id, then a scenario or run name, then whole dot-separated parts of an id, then a unique substring."""
    assert baseline_id(OLD, OTHER, R2) == R2  # exact id
    assert baseline_id(OLD, OTHER, "cmp_local") == LOCAL  # the scenario (config.name) of one run
    assert baseline_id(OLD, OTHER, "kind=local_sgd.r0") == LOCAL  # run name: the id without the scenario name
    assert baseline_id(OLD, OTHER, "accumulation_steps=2.ranks=4") == R3  # run name without the repeat suffix
    with pytest.raises(compare.rl.ReportError, match="matches 2 runs as whole parts of an id"):
        baseline_id(OLD, OTHER, "ranks=2.r0")  # R0 and R2 both end so
    assert baseline_id(OLD, "steps=2.ranks=2") == R2  # not whole parts ("accumulation_steps=2"): a substring
    assert baseline_id(OLD, OTHER, "local") == LOCAL  # substring of one id only
    # "cmp" is the scenario of four runs, and a substring of all five: the name rule decides and is ambiguous.
    with pytest.raises(compare.rl.ReportError, match="as scenario or run name"):
        baseline_id(OLD, OTHER, "cmp")
    # Two reports of one scenario (--table): an id in both is the first report's run.
    doc_old, doc_new = compare.load(REPO_ROOT / OLD), compare.load(REPO_ROOT / NEW)
    rows = [compare.Row(d, p, r) for d, p in ((doc_old, OLD), (doc_new, NEW)) for r in d["runs"]]
    assert compare.pick_baseline(rows, "accumulation_steps=1.ranks=2").report is doc_old


def test_diff_needs_two_reports_and_takes_no_baseline():
    assert_error(run_compare("--diff", OLD, NEW, OTHER), "--diff compares two reports, got 3")
    assert_error(run_compare(OLD, NEW, "--baseline", R0), "--baseline and --pareto apply to the table")


# ---- real reports ---------------------------------------------------------------------------------------------------

def test_real_report_table_and_self_diff(real_report):
    """A report the binary wrote (GRADSWEEP_REPORTS): one CSV row per run with its numbers, and a diff of the report
    with itself changes nothing."""
    doc = json.loads(real_report.read_text())
    result = run_compare(real_report, "--format", "csv")
    assert result.returncode == 0, result.stderr
    rows = csv_rows(result.stdout)
    assert [r["run"] for r in rows] == [run["id"] for run in doc["runs"]]
    for row, run in zip(rows, doc["runs"]):
        ttt = run["time_to_target"]
        if ttt and ttt["reached"]:
            assert float(row["time_to_target_measured_s"]) == ttt["measured_s"]
        else:
            assert row["time_to_target_measured_s"] == ""
        sent = run["communication"]["bytes_sent_per_rank_per_step"]
        if sent and not run.get("compression"):
            assert float(row["wire_bytes_per_rank_per_step"]) == pytest.approx(sum(sent) / len(sent))
        for path, value in run["swept"].items():
            assert row[path] == (value if isinstance(value, str) else json.dumps(value))
    assert run_compare(real_report, "--format", "markdown").returncode == 0
    result = run_compare(real_report, real_report, "--format", "csv")
    assert result.returncode == 0, result.stderr
    for row in csv_rows(result.stdout):
        assert row["change"] in ("", "0.0"), row
        assert row["old"] == row["new"], row


# ---- optional columns: waits, staleness, the input pipeline ---------------------------------------------------------

def with_extras(doc):
    """compare_old.json's runs with keys other strategies write: R1 waits 2.5 ms per modeled step and has a staleness
    histogram (clocks 0, 0, 1, 2: mean 0.75); R0 has input-pipeline totals (hit rate 0.5, stall share 0.125)."""
    r0, r1 = doc["runs"][0], doc["runs"][1]
    r1["timing"]["modeled"]["phases"]["wait"]["all"]["mean_ms"] = 2.5
    r1["staleness"] = {"clocks": {"values": [0, 1, 2], "counts": [2, 1, 1], "mean": 0.75, "max": 2}}
    r0["data"] = {"totals": {"hit_rate": 0.5, "stall_share_modeled": 0.125}}
    return doc


def test_optional_columns_appear_when_some_run_has_a_value():
    doc = with_extras(compare.load(REPO_ROOT / OLD))
    rows = [compare.Row(doc, OLD, run) for run in doc["runs"]]
    compare.set_speedups(rows, rows[0])
    table = csv_rows(compare.table(rows, [doc], "csv"))
    assert [r["wait_modeled_ms"] for r in table] == ["0.0", "2.5", "0.0", ""]  # R3 has no timing
    assert [r["staleness_clocks_mean"] for r in table] == ["", "0.75", "", ""]
    assert [r["cache_hit_rate"] for r in table] == ["0.5", "", "", ""]
    assert [r["data_stall_share_modeled"] for r in table] == ["0.125", "", "", ""]
    # Without them (the hand-written reports as they are) none of these columns is shown: EXPECTED_TABLE.


def test_diff_shows_optional_metrics_only_where_one_side_is_non_zero():
    old = compare.load(REPO_ROOT / OLD)
    new = with_extras(compare.load(REPO_ROOT / OLD))
    rows = {(r["run"], r["metric"]): r for r in csv_rows(compare.diff(old, new, "csv"))}
    assert rows[R1, "wait_modeled_ms"]["old"] == "0.0" and rows[R1, "wait_modeled_ms"]["new"] == "2.5"
    assert rows[R1, "wait_modeled_ms"]["change"] == ""  # from 0: no relative change
    assert rows[R1, "staleness_clocks_mean"]["old"] == "" and rows[R1, "staleness_clocks_mean"]["new"] == "0.75"
    assert rows[R0, "cache_hit_rate"]["new"] == "0.5"
    assert (R0, "wait_modeled_ms") not in rows and (R2, "wait_modeled_ms") not in rows  # 0 on both sides
    assert all(rows[k]["change"] in ("", "0.0") for k in rows if k[1] not in ("wait_modeled_ms",))


def test_diff_notes_reports_made_with_different_overrides(tmp_path):
    doc = json.loads((REPO_ROOT / NEW).read_text())
    doc["context"]["overrides"] = ["training.steps=8"]
    path = tmp_path / "new.json"
    path.write_text(json.dumps(doc))
    result = run_compare(OLD, path)
    assert result.returncode == 0, result.stderr
    assert "note: context.overrides differs (old [], new ['training.steps=8'])" in result.stderr
    assert "context.overrides" not in run_compare(OLD, NEW).stderr


# ---- speedup without a time to target; the parameter server's exposed communication ----------------------------

def timing_only_with_a_server(doc):
    """compare_old.json's runs as a scenario without a target (time_to_target null, as timing-only scenarios write)
    with throughputs set by hand (samples/s measured, modeled): R0 100 and 400, R1 150 and 1000, R2 50 and null; R3
    diverged with none. R1 is a parameter-server run: its report writes its push and pull, 0.3 ms per step, both as the
    modeled communicate phase and as `exposed` (nothing hides them; the file's 0.4 was a collective's)."""
    rates = [(100, 400), (150, 1000), (50, None), (None, None)]
    for run, (measured, modeled) in zip(doc["runs"], rates):
        run["time_to_target"] = None
        run["throughput"] = {"samples_per_s": measured, "modeled_samples_per_s": modeled}
    r1 = doc["runs"][1]
    r1["config"]["sync"]["kind"] = "parameter_server"
    r1["timing"]["modeled"]["phases"]["communicate"]["all"]["mean_ms"] = 0.3
    r1["timing"]["modeled"]["communication"]["exposed"]["all"]["mean_ms"] = 0.3
    return doc


# Written by hand: baseline R0 (no run reached a target: the first run). Speedups in throughput: R1 150/100 = 1.50,
# 1000/400 = 2.50; R2 50/100 = 0.50, modeled none (R2 has no modeled rate); R3 none. R1's exposed communication is its
# push and pull (0.3 ms) as the report writes it, like any run's (no marker); no run has a target ("no target").
EXPECTED_THROUGHPUT_TABLE = """\
baseline: cmp.accumulation_steps=1.ranks=2.r0

| run                                 | accumulation_steps | ranks | time to target (s, measured) \
| time to target (s, modeled) | final eval accuracy | wire bytes per step | exposed comm (ms, modeled) \
| speedup (measured) | speedup (modeled) | status              |
| ----------------------------------- | -----------------: | ----: | ---------------------------: \
| --------------------------: | ------------------: | ------------------: | -------------------------: \
| -----------------: | ----------------: | ------------------- |
| cmp.accumulation_steps=1.ranks=2.r0 |                  1 |     2 |                            - \
|                           - |              0.8500 |              1000 B |                       0.25 \
|             1.00x* |            1.00x* | no target, baseline |
| cmp.accumulation_steps=1.ranks=4.r0 |                  1 |     4 |                            - \
|                           - |              0.8400 |              1500 B |                        0.3 \
|             1.50x* |            2.50x* | no target           |
| cmp.accumulation_steps=2.ranks=2.r0 |                  2 |     2 |                            - \
|                           - |              0.7123 |              1000 B |                      0.125 \
|             0.50x* |                 - | no target           |
| cmp.accumulation_steps=2.ranks=4.r0 |                  2 |     4 |                            - \
|                           - |                   - |                   - |                          - \
|                  - |                 - | diverged            |

`*` speedup in throughput (the run's samples/s / the baseline's, on that clock) instead of time to target: neither \
the run nor the baseline sets a target
"""


def test_speedup_falls_back_to_throughput_without_a_target_and_a_server_shows_its_push_and_pull(tmp_path):
    doc = timing_only_with_a_server(json.loads((REPO_ROOT / OLD).read_text()))
    path = tmp_path / "no_target.json"
    path.write_text(json.dumps(doc))
    result = run_compare(path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == EXPECTED_THROUGHPUT_TABLE
    rows = csv_rows(run_compare(path, "--format", "csv").stdout)
    assert [r["speedup_measured"] for r in rows] == ["1.0", "1.5", "0.5", ""]
    assert [r["speedup_modeled"] for r in rows] == ["1.0", "2.5", "", ""]
    assert [r["speedup_basis"] for r in rows] == ["throughput", "throughput", "throughput", ""]
    assert [r["exposed_communication_ms"] for r in rows] == ["0.25", "0.3", "0.125", ""]


def test_the_throughput_footnote_of_timing_only_runs_with_a_target_gives_the_true_reason(tmp_path):
    """Timing-only runs of a scenario that sets a target (their report's time_to_target: set, never reached, as
    gradsweep writes it) get throughput speedups marked `*`; the footnote says the speedup is in throughput because
    timing-only runs have no time to target, not that no target is set (it said "neither run sets a target").
    Modeled throughputs by hand: R0 400, R1 1000 samples/s, so R1's modeled speedup is 1000/400 = 2.50x; no measured
    clock, so no measured speedup."""
    doc = json.loads((REPO_ROOT / OLD).read_text())
    doc["runs"] = doc["runs"][:2]
    for run, modeled in zip(doc["runs"], (400, 1000)):
        run["config"]["training"]["mode"] = "timing"
        run["time_to_target"] = {"metric": "eval_accuracy", "value": 0.8, "reached": False, "step": None,
                                 "measured_s": None, "modeled_s": None}
        run["throughput"] = {"samples_per_s": None, "modeled_samples_per_s": modeled}
    path = tmp_path / "timing_target.json"
    path.write_text(json.dumps(doc))
    result = run_compare(path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    r1 = [c.strip() for c in next(line for line in lines if line.startswith(f"| {R1} ")).split("|")]
    assert r1[-4:-1] == ["-", "2.50x*", "timing-only (no accuracy)"], r1
    star = [line for line in lines if line.startswith("`*`")]
    assert len(star) == 1, lines
    assert star[0].startswith("`*` speedup in throughput (the run's samples/s / the baseline's, on that clock)"), star
    assert "timing-only run has no time to target even where its scenario sets a target" in star[0], star
    assert "sets a target" not in star[0].replace("its scenario sets a target", ""), star


def test_a_run_whose_modeled_clock_is_a_bound_is_marked_with_its_reason(tmp_path):
    """R1 of compare_old.json given timing.modeled.bound "lower" and a reason by hand: its modeled time to target
    (0.2), exposed communication (0.4) and modeled speedup (2.50x) carry `^`, its measured figures and every other
    run do not; one footnote names the bound, the reason and R1; CSV has the kind in modeled_bound."""
    doc = json.loads((REPO_ROOT / OLD).read_text())
    doc["runs"][1]["timing"]["modeled"]["bound"] = "lower"
    doc["runs"][1]["timing"]["modeled"]["bound_reason"] = "the shard host's GPU is shared"
    path = tmp_path / "bound.json"
    path.write_text(json.dumps(doc))
    result = run_compare(path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    r1 = [c.strip() for c in next(line for line in lines if line.startswith(f"| {R1} ")).split("|")]
    assert r1[4:] == ["1.6", "0.2^", "0.8400", "1500 B", "0.4^", "1.25x", "2.50x^", "reached", ""]
    assert sum("^" in line for line in lines if line.startswith("| cmp")) == 1
    notes = [line for line in lines if line.startswith("`^`")]
    assert len(notes) == 1
    assert "lower bound" in notes[0] and "can only be longer" in notes[0]
    assert "the shard host's GPU is shared" in notes[0] and R1 in notes[0]
    rows = csv_rows(run_compare(path, "--format", "csv").stdout)
    assert [r["modeled_bound"] for r in rows] == ["", "lower", "", ""]
    assert rows[1]["time_to_target_modeled_s"] == "0.2"
    # An upper bound reads "an upper bound", and its times can only be shorter.
    doc["runs"][1]["timing"]["modeled"]["bound"] = "upper"
    path.write_text(json.dumps(doc))
    notes = [line for line in run_compare(path).stdout.splitlines() if line.startswith("`^`")]
    assert len(notes) == 1 and "is an upper bound (its times can only be shorter" in notes[0], notes


def test_a_run_that_did_not_reach_a_set_target_gets_no_throughput_speedup():
    """A target is set (compare_old.json): R2 did not reach it, so its speedup is empty even with throughputs."""
    doc = compare.load(REPO_ROOT / OLD)
    for run, rate in zip(doc["runs"], (100, 150, 50, None)):
        run["throughput"] = {"samples_per_s": rate, "modeled_samples_per_s": rate}
    rows = [compare.Row(doc, OLD, run) for run in doc["runs"]]
    compare.set_speedups(rows, rows[0])
    assert (rows[1].speedup_measured, rows[1].speedup_basis) == (pytest.approx(2.0 / 1.6), "time_to_target")
    assert math.isnan(rows[2].speedup_measured) and math.isnan(rows[2].speedup_modeled)
    assert rows[2].speedup_basis == ""


def test_markdown_of_a_report_with_no_runs_starts_with_a_baseline_line(tmp_path):
    """QA6 F9: docs/compare.md says Markdown output starts with a `baseline:` line; with no runs it printed none."""
    doc = json.loads((REPO_ROOT / OLD).read_text())
    doc["runs"] = []
    empty = tmp_path / "noruns.json"
    empty.write_text(json.dumps(doc))
    result = run_compare(empty)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("baseline: none (the reports have no runs)\n"), result.stdout
