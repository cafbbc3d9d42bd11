"""reports/schema.json: the example report follows it, broken reports do not, and real reports (GRADSWEEP_REPORTS)
follow it too."""
import json
import math

import jsonschema
import pytest

import report_lib as rl

EXAMPLE = rl.REPO_ROOT / "reports" / "examples" / "tiny_report.json"


def errors(schema, doc):
    return list(jsonschema.Draft202012Validator(schema).iter_errors(doc))


def passed(doc):
    return next(r for r in doc["runs"] if r["disposition"] == "passed")


def test_schema_is_a_valid_draft_2020_12_schema(schema):
    jsonschema.Draft202012Validator.check_schema(schema)


def test_example_validates(schema, example):
    assert errors(schema, example) == []


def test_example_is_small():
    assert EXAMPLE.stat().st_size < 60 * 1024


def test_example_is_a_consistent_sweep(example):
    """The hand-written example obeys the rules of reports/README.md that the schema cannot express."""
    axes, runs = example["axes"], example["runs"]
    assert [a["paths"] for a in axes] == [["training.accumulation_steps"], ["cluster.ranks"]]
    assert len(runs) == math.prod(len(a["values"]) for a in axes) * example["repeats"]
    assert [r["index"] for r in runs] == list(range(len(runs)))
    assert len({r["id"] for r in runs}) == len(runs)
    for run in runs:
        swept = run["swept"]
        assert list(swept) == [p for a in axes for p in a["paths"]]
        expected_id = ".".join([example["scenario_name"]]
                               + [f"{p.rsplit('.', 1)[-1]}={json.dumps(v)}" for p, v in swept.items()]
                               + [f"r{run['repeat']}"])
        assert run["id"] == expected_id
        for path, value in swept.items():  # the resolved config holds the swept values
            section, key = path.split(".")
            assert run["config"][section][key] == value
        for axis in axes:
            assert rl.run_axis_value(run, axis) in axis["values"]
    dispositions = sorted(r["disposition"] for r in runs)
    assert dispositions == ["failed", "passed", "passed", "passed", "passed", "skipped"]
    for run in runs:
        if run["disposition"] == "passed":
            series = run["convergence"]["series"]
            assert [p["step"] for p in series] == list(range(1, run["steps_completed"] + 1))
            times = [p["measured_s"] for p in series]
            assert times == sorted(times)
            assert len(run["communication"]["bytes_sent_per_rank_per_step"]) == run["config"]["cluster"]["ranks"]
            for dist in [*run["timing"]["measured"]["phases"].values(), run["timing"]["measured"]["step"]]:
                assert len(dist["per_rank"]) == run["config"]["cluster"]["ranks"]
        else:
            assert run["message"]


def test_example_has_the_keys_real_reports_add(example):
    """Keys the current writer adds beyond the schema's required ones (documented in reports/README.md)."""
    assert example["context"]["overrides"] == []  # the --set strings of the invocation
    for run in example["runs"]:
        if run["disposition"] == "skipped":  # never started: no model, no backend
            assert "num_params" not in run and "backend" not in run
            continue
        assert run["num_params"] == 32 * 64 + 64 + 64 * 10 + 10  # mlp 32-64-10 with biases
        assert run["backend"] == "host"
        if run["timing"] is None:
            continue
        measured = run["timing"]["measured"]
        for dist in [*measured["phases"].values(), measured["step"]]:
            for summary in [dist["all"], *dist["per_rank"]]:
                assert summary["p99_ms"] <= summary["max_ms"] <= summary["total_ms"]


def _del(path):
    def mutate(doc):
        *parents, last = path
        target = doc
        for key in parents:
            target = target[key] if not callable(key) else key(target)
        del target[last]
    return mutate


def _set(path, value):
    def mutate(doc):
        *parents, last = path
        target = doc
        for key in parents:
            target = target[key] if not callable(key) else key(target)
        target[last] = value
    return mutate


def _phases(doc):
    return passed(doc)["timing"]["measured"]["phases"]


def _first_point(doc):
    return passed(doc)["convergence"]["series"][0]


BROKEN = {
    "missing runs": _del(["runs"]),
    "missing schema_version": _del(["schema_version"]),
    "newer schema_version": _set(["schema_version"], 2),
    "runs not a list": _set(["runs"], {}),
    "missing tool": _del(["tool"]),
    "git_dirty not a bool": _set(["tool", "git_dirty"], "no"),
    "git_commit not hex": _set(["tool", "git_commit"], "HEAD"),
    "missing context.argv": _del(["context", "argv"]),
    "cores not an int": _set(["context", "cores"], 8.5),
    "sha256 too short": _set(["context", "scenario_sha256"], "abc123"),
    "date not ISO 8601": _set(["context", "date"], "Sunday"),
    "cuda missing device_count": _del(["context", "cuda", "device_count"]),
    "axis without paths": _del(["axes", 0, "paths"]),
    "axis value not a tuple": _set(["axes", 0, "values"], [1, 2]),
    "repeats zero": _set(["repeats"], 0),
    "disposition bogus": _set(["runs", 0, "disposition"], "bogus"),
    "id not a string": _set(["runs", 0, "id"], 7),
    "missing id": _del(["runs", 0, "id"]),
    "index negative": _set(["runs", 0, "index"], -1),
    "message a number": _set(["runs", 0, "message"], 3),
    "missing wall_s": _del(["runs", 0, "wall_s"]),
    "missing config.sync": _del(["runs", 0, "config", "sync"]),
    "sync.kind not a string": _set(["runs", 0, "config", "sync", "kind"], 1),
    "ranks zero": _set(["runs", 0, "config", "cluster", "ranks"], 0),
    "summary missing p50_ms": _del([_phases, "forward", "all", "p50_ms"]),
    "per-rank summary missing count": _del([_phases, "forward", "per_rank", 0, "count"]),
    "summary mean a string": _set([_phases, "backward", "all", "mean_ms"], "0.1"),
    "phase missing": _del([_phases, "wait"]),
    "step distribution missing": _del([passed, "timing", "measured", "step"]),
    "timing missing modeled": _del([passed, "timing", "modeled"]),
    "timing a list": _set([passed, "timing"], []),
    "missing throughput": _del([passed, "throughput"]),
    "samples_per_s a string": _set([passed, "throughput", "samples_per_s"], "fast"),
    "bytes per rank not a list": _set([passed, "communication", "bytes_sent_per_rank_per_step"], 100),
    "missing busbw": _del([passed, "communication", "busbw_GBps"]),
    "series step zero": _set([_first_point, "step"], 0),
    "series step a float": _set([_first_point, "step"], 1.5),
    "series missing measured_s": _del([_first_point, "measured_s"]),
    "eval_accuracy above 1": _set([passed, "convergence", "final", "eval_accuracy"], 1.5),
    "missing convergence.final": _del([passed, "convergence", "final"]),
    "time_to_target metric bogus": _set([passed, "time_to_target", "metric"], "speed"),
    "time_to_target missing reached": _del([passed, "time_to_target", "reached"]),
    "missing time_to_target": _del([passed, "time_to_target"]),
    "missing trace": _del([passed, "trace"]),
    "trace missing params": _set([passed, "trace"], {"initial": [0.0]}),
    "trace params flat": _set([passed, "trace"], {"initial": [0.0], "params": [0.1, 0.2]}),
}


@pytest.mark.parametrize("mutation", list(BROKEN), ids=list(BROKEN))
def test_broken_report_fails(schema, example, mutation):
    BROKEN[mutation](example)
    assert errors(schema, example), f"'{mutation}' should not validate"


ACCEPTED = {
    "unknown keys everywhere": lambda d: (
        d.update(future_key={"x": 1}), passed(d).update(staleness_histogram=[1, 2]),
        _phases(d)["forward"]["all"].update(p90_ms=0.1), _first_point(d).update(loss_scale=65536.0),
        _phases(d).update(h2d_copy=_phases(d)["data"])),
    "diverged run with null losses": lambda d: (
        passed(d).update(disposition="diverged", message="train loss is NaN at step 3"),
        [p.update(train_loss=None, eval_loss=None, eval_accuracy=None) for p in passed(d)["convergence"]["series"]],
        passed(d)["convergence"]["final"].update(train_loss=None)),
    "null statistics of an empty summary": lambda d: _phases(d)["compress"]["all"].update(
        count=0, min_ms=None, p50_ms=None, p95_ms=None, p99_ms=None, mean_ms=None, stdev_ms=None, max_ms=None,
        total_ms=0),
    "timing without measured clock": lambda d: passed(d)["timing"].update(measured=None),
    "modeled clock object": lambda d: passed(d)["timing"].update(modeled=dict(
        passed(d)["timing"]["measured"], hardware="h100-sxm-8",
        communication={"exposed": passed(d)["timing"]["measured"]["step"],
                       "overlapped": passed(d)["timing"]["measured"]["step"],
                       "buckets": [{"grad_begin": 0, "grad_end": 10, "bytes": 40.0, "algorithm": "ring",
                                    "protocol": "LL", "comm_ms": 0.015, "compute_ms": 0.0}]})),
    "modeled times": lambda d: _first_point(d).update(modeled_s=0.0021),
    "a trace": lambda d: passed(d).update(trace={"initial": [0.5, -1.0], "params": [[[0.4, -0.9], [0.4, -0.9]]]}),
    "interrupted and timeout": lambda d: (d["runs"][0].update(disposition="interrupted"),
                                          d["runs"][1].update(disposition="timeout")),
    "no git": lambda d: d["tool"].update(git_commit=None, git_dirty=None),
    "a GPU": lambda d: d["context"].update(gpus=[{"name": "NVIDIA H200", "compute_capability": "9.0",
                                                  "memory_bytes": 150754820096}]),
    "zip axis": lambda d: d["axes"].append({"paths": ["compression.kind", "compression.ratio"],
                                            "values": [["none", 1.0], ["topk", 0.01]]}),
    "unswept scenario": lambda d: d.update(axes=[]),
}


@pytest.mark.parametrize("mutation", list(ACCEPTED), ids=list(ACCEPTED))
def test_accepted_variation_validates(schema, example, mutation):
    ACCEPTED[mutation](example)
    assert errors(schema, example) == []


def test_report_lib_names_the_file_of_an_invalid_report(tmp_path, example):
    del example["runs"][0]["timing"]["measured"]["phases"]["forward"]["all"]["p50_ms"]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(example))
    with pytest.raises(rl.ReportError) as info:
        rl.load_report(path)
    assert str(path) in str(info.value)
    assert "p50_ms" in str(info.value)


def test_report_lib_refuses_a_newer_schema_version(tmp_path, example):
    example["schema_version"] = 99
    path = tmp_path / "future.json"
    path.write_text(json.dumps(example))
    with pytest.raises(rl.ReportError, match="newer"):
        rl.load_report(path)


def test_real_report_validates(schema, real_report):
    """Each report named by GRADSWEEP_REPORTS (set by the end-to-end test script) follows the schema."""
    doc = json.loads(real_report.read_text())
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors(schema, doc)[:20]]
    assert problems == [], f"{real_report} does not follow reports/schema.json"
    ids = [r["id"] for r in doc["runs"]]
    assert len(set(ids)) == len(ids), f"{real_report}: run ids are not unique"
    # Keys the schema does not require, with the types reports/README.md gives them where present.
    overrides = doc["context"].get("overrides", [])
    assert isinstance(overrides, list) and all(isinstance(o, str) for o in overrides), real_report
    for run in doc["runs"]:
        assert isinstance(run.get("num_params", 0), int) and run.get("num_params", 0) >= 0, run["id"]


def test_slice_and_merged_blocks_are_checked(schema, example):
    """`shard` (gradsweep run --shard K/N) and `merged` (gradsweep merge) are optional, typed when present."""
    ids = [r["id"] for r in example["runs"]]
    doc = json.loads(json.dumps(example))
    doc["shard"] = {"index": 2, "count": 3, "sweep_runs": len(ids), "ids": ids[:1]}
    assert errors(schema, doc) == []
    for bad in ({"index": 0}, {"count": "3"}, {"ids": [1]}):
        broken = json.loads(json.dumps(doc))
        broken["shard"].update(bad)
        assert errors(schema, broken), bad
    del doc["shard"]
    doc["merged"] = {"argv": ["gradsweep", "merge"], "reports": ["a/report.json"], "shard_count": 3,
                     "missing_shards": [], "missing": [], "interrupted": []}
    assert errors(schema, doc) == []
    del doc["merged"]["missing"]
    assert errors(schema, doc)
