"""Every scenario of scenarios/strategies/ (issue 10) runs in a reduced form and its report validates against
reports/schema.json; the runs are exactly the scenario's sweep expansion, computed here from the file itself.
A new scenario in that folder joins this test by being there; REDUCED says how a run is shortened."""
import itertools
import json
import os
import subprocess
from pathlib import Path

import jsonschema
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("GRADSWEEP_BIN", REPO / "build" / "gradsweep"))
SCHEMA = json.loads((REPO / "reports" / "schema.json").read_text())
SCENARIOS = sorted((REPO / "scenarios" / "strategies").glob("*.json"))

# A few steps with two evaluations on a small evaluation set: each run takes well under a second of arithmetic, so
# the whole folder (about 60 runs) stays within a minute or two on a loaded 2-core machine. Nothing swept is changed.
STEPS = 6  # more than the largest all-reduce staleness in the folder (4): a delay >= steps is refused
REDUCED = {"training.steps": STEPS, "training.eval_every": 2, "data.eval_samples": 128}

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} is not built")


def lookup(config, dotted):
    for part in dotted.split("."):
        config = config[part]
    return config


def expansion(doc):
    """The sweep as a list of {path: value} in run order, from scenarios/README.md's rule: the grid product of the
    axes in the order written, then each zip group as one axis, the last axis varying fastest; repeats innermost."""
    sweep = doc.get("sweep") or {}
    axes = [[{path: v} for v in values] for path, values in (sweep.get("axes") or {}).items()]
    groups = sweep.get("zip") or []
    if isinstance(groups, dict):
        groups = [groups]
    for group in groups:
        paths = list(group)
        axes.append([dict(zip(paths, row)) for row in zip(*(group[p] for p in paths))])
    points = [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*axes)]
    return points, sweep.get("repeats", 1)


def test_the_folder_has_every_strategy_of_issue_10():
    names = {p.stem for p in SCENARIOS}
    assert {"async_ps", "compression", "mixed_precision", "accumulation", "ps_sharded", "delayed_sync", "data_cache",
            "all"} <= names


# Values a scenario may give that the resolved config writes as another: compression.error_feedback's booleans
# (scenarios/README.md: true is "gradient", false "none").
# A swept null leaves the field at its default (zero.json's allreduce row has no stage: sync.stage's default, 1).
# (onebit_adam.json's Adam row has no freeze_step: its default, 100000; likewise 0/1 Adam's fields.)
RESOLVED = {"compression.error_feedback": {True: "gradient", False: "none"}, "sync.stage": {None: 1},
            "training.optimizer.freeze_step": {None: 100000}, "training.optimizer.var_freeze_step": {None: 100000},
            "training.optimizer.local_step_scaler": {None: 32678}}


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_reduced_scenario_runs_and_its_report_validates(path, tmp_path):
    doc = json.loads(path.read_text())
    points, repeats = expansion(doc)
    reduced = dict(REDUCED)
    if doc.get("data", {}).get("kind") == "teacher":  # its evaluation set is data.teacher.eval_samples
        reduced["data.teacher.eval_samples"] = reduced.pop("data.eval_samples")
    sets = [a for key, value in reduced.items() for a in ("--set", f"{key}={json.dumps(value)}")]
    out = tmp_path / "out"
    p = subprocess.run([str(BIN), "run", str(path), "--out", str(out), "--quiet", *sets],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    assert report["scenario_name"] == doc["name"]
    runs = report["runs"]
    assert len(runs) == len(points) * repeats
    for i, run in enumerate(runs):
        expected = points[i // repeats]
        assert run["disposition"] == "passed", (run["id"], run.get("message"))
        assert run["swept"] == expected, run["id"]
        for dotted, value in expected.items():
            want = RESOLVED[dotted].get(value, value) if dotted in RESOLVED else value
            assert lookup(run["config"], dotted) == want, (run["id"], dotted)
        assert run["config"]["training"]["steps"] == STEPS
        # Every strategy counts optimizer steps (the parameter server: its budget of steps x ranks pushes).
        assert run["steps_completed"] == STEPS, run["id"]
        assert run["convergence"]["final"]["eval_accuracy"] is not None, run["id"]
