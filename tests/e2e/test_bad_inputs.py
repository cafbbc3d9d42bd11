"""Bad input files given to the gradsweep binary: deep nesting, devices, folders and oversized files are refused with
exit 2 and a message naming the file (never a crash or an endless read), and one problem does not hide another.
Expected texts come from the inputs (their nesting, sizes, parameter counts)."""
import json
import os

import pytest

from test_cli import BIN, run, scenario, write

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} is not built")


def test_deeply_nested_hardware_profile_is_refused_not_a_crash(tmp_path):
    d = 100000
    prefix = '{"name":'
    hw = tmp_path / "deephw.json"
    hw.write_text(prefix + "[" * d + "]" * d + "}")
    p = run("validate", write(tmp_path, scenario()), "--hardware", hw)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    # Level 65 (the outer object is level 1) is the 64th '[', at column len(prefix) + 64.
    assert f"{hw}:1:{len(prefix) + 64}: JSON nested deeper than 64 levels" in p.stderr, p.stderr
    assert len(p.stderr) < 2000  # no dump of the value


def test_devices_folders_and_oversized_json_inputs_are_refused_by_name(tmp_path):
    s = write(tmp_path, scenario())
    p = run("validate", s, "--hardware", "/dev/zero")
    assert p.returncode == 2 and "/dev/zero: is not a regular file" in p.stderr, p.stderr
    p = run("validate", "/dev/zero")
    assert p.returncode == 2 and "/dev/zero: is not a regular file" in p.stderr, p.stderr
    p = run("validate", s, "--hardware", tmp_path)
    assert p.returncode == 2 and f"{tmp_path}: is a folder, not a JSON file" in p.stderr, p.stderr
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: 64 MiB + 1 byte
        f.truncate(64 * 1024 * 1024 + 1)
    for args in (("validate", big), ("validate", s, "--hardware", big)):
        p = run(*args)
        assert p.returncode == 2, p.stderr
        assert f"{big}: larger than {64 * 1024 * 1024} bytes (64 MiB)" in p.stderr, p.stderr


@pytest.mark.parametrize("text,what", [("", "0 bytes"), (" \n\t\r\n", "blanks only")])
def test_an_empty_scenario_file_is_said_to_be_empty(tmp_path, text, what):
    f = tmp_path / "empty.json"
    f.write_text(text)
    for args in (("validate", f), ("run", f, "--out", tmp_path / "out")):
        p = run(*args)
        assert p.returncode == 2, p.stderr
        assert f"{f}: the file is empty ({what}): expected a scenario, a JSON object" in p.stderr, p.stderr
        assert "syntax error" not in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


def test_a_mistyped_field_does_not_hide_the_trace_size_limit(tmp_path):
    doc = {"name": "a12", "model": {"kind": "mlp", "layers": [784, 64, 10]}, "data": {"kind": "fashion_mnist"},
           "cluster": {"ranks": "two"}, "training": {"steps": 10}, "report": {"trace": True}}
    p = run("validate", write(tmp_path, doc))
    assert p.returncode == 2
    layers = doc["model"]["layers"]
    params = sum(a * b + b for a, b in zip(layers, layers[1:]))
    assert 'cluster.ranks: expected an integer' in p.stderr, p.stderr
    assert f"report.trace: trace is refused above 10000 parameters; this model has {params}" in p.stderr, p.stderr


def test_orthogonalization_epsilon_is_refused_below_zero_and_outside_powersgd(tmp_path):
    for comp, expected in [
        ({"kind": "powersgd", "orthogonalization_epsilon": -1e-8},
         "compression.orthogonalization_epsilon: expected a number >= 0, got -1e-08"),
        ({"kind": "powersgd", "orthogonalization_epsilon": "tiny"},
         "compression.orthogonalization_epsilon: expected a number"),
        ({"kind": "topk", "orthogonalization_epsilon": 1e-8},
         'compression.orthogonalization_epsilon: only applies when compression.kind is "powersgd" (it is "topk")'),
    ]:
        path = write(tmp_path, dict(scenario(), compression=comp))
        p = run("validate", path)
        assert p.returncode == 2, p.stderr
        assert f"{path}: {expected}" in p.stderr, p.stderr
    path = write(tmp_path, dict(scenario(), compression={"kind": "powersgd", "orthogonalization_epsilon": 1e-8}))
    p = run("validate", path)
    assert p.returncode == 0, p.stderr


def ps_staleness_scenario(tmp_path):
    """A parameter server swept over staleness 0 (BSP) and 2 (SSP): timing-only runs price BSP only, so run with
    --timing-only the staleness-2 run is refused (sim/strategy/registry.cpp: SSP needs the event order of a training run)."""
    doc = scenario(name="ps", steps=4, axes={"sync.staleness": [0, 2]})
    doc["sync"] = {"kind": "parameter_server"}
    return write(tmp_path, doc)


def test_a_filter_that_leaves_out_the_refused_runs_runs_the_rest(tmp_path):
    path = ps_staleness_scenario(tmp_path)
    refusal = 'training.mode: timing-only runs of sync.kind "parameter_server" price BSP (sync.staleness 0) only'
    # No filter: the staleness-2 run is refused, exit 2 before any run, nothing written.
    p = run("run", path, "--timing-only", "--out", tmp_path / "all", "--quiet")
    assert p.returncode == 2 and refusal in p.stderr and "(sweep run ps.staleness=2)" in p.stderr, p.stderr
    assert not (tmp_path / "all").exists()
    # A filter that keeps the refused run: the same refusal, nothing written.
    p = run("run", path, "--timing-only", "--filter", "staleness=2", "--out", tmp_path / "two", "--quiet")
    assert p.returncode == 2 and refusal in p.stderr, p.stderr
    assert not (tmp_path / "two").exists()
    # A filter that leaves it out: its problem is not this sweep's; the BSP run runs (1 of the 2 runs).
    out = tmp_path / "bsp"
    p = run("run", path, "--timing-only", "--filter", "staleness=0", "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    runs = json.loads((out / "report.json").read_text())["runs"]
    assert [(r["id"], r["index"], r["disposition"]) for r in runs] == [("ps.staleness=0.r0", 0, "passed")]
    # The dry run with the same filter lists that run, and counts both runs of the sweep.
    p = run("run", path, "--timing-only", "--filter", "staleness=0", "--dry-run", "--out", tmp_path / "dry")
    assert p.returncode == 0, p.stderr
    assert "  [0] ps.staleness=0.r0  sync.staleness=0" in p.stdout and "staleness=2.r0" not in p.stdout, p.stdout
    assert "1 of 2 runs match --filter staleness=0" in p.stdout, p.stdout
    # validate has no filter: it reports the problem.
    p = run("validate", path, "--set", "training.mode=timing")
    assert p.returncode == 2 and refusal in p.stderr, p.stderr


def no_claimed_value(stderr, path):
    """No line of the refusal about `path` says a value was given ("got ..."): the user gave none."""
    return not [t for t in stderr.splitlines() if f": {path}:" in t and "got" in t]


@pytest.mark.parametrize("kind", ["dgc", "threshold"])
def test_a_timing_only_run_without_an_expected_density_says_it_is_required(tmp_path, kind):
    """threshold and dgc keep a share of values that depends on the gradient: a timing-only run needs
    compression.expected_density. Left out, the refusal said "got 0" (its default); it says the field is required in
    timing-only runs, with its range, naming the file and the path, exit 2 before any run."""
    field = "compression.expected_density"
    required = f'{field}: required in timing-only runs (training.mode "timing", --timing-only) of compression.kind ' \
               f'"{kind}"'
    train = write(tmp_path, dict(scenario(steps=4), compression={"kind": kind}), "train.json")
    timing = scenario(name="t", steps=2, axes={}, compression={"kind": kind})
    timing.update(model={"kind": "gpt2-small"}, data={"kind": "none", "batch_per_rank": 4},
                  cluster={"ranks": 8, "hardware": "h100-sxm-8"}, training={"mode": "timing", "steps": 2})
    timing = write(tmp_path, timing, "timing.json")
    for path, args in ((train, ["--timing-only"]), (timing, [])):
        for command in (["run", path, *args, "--out", tmp_path / "out"], ["run", path, *args, "--dry-run"]):
            p = run(*command)
            assert p.returncode == 2, p.stderr
            assert f"{path}: {required}" in p.stderr, p.stderr
            assert "expected the fraction kept per bucket in (0, 1] (e.g. 0.001)" in p.stderr, p.stderr
            assert no_claimed_value(p.stderr, field), p.stderr
            assert "nothing was run" in p.stderr and not (tmp_path / "out").exists(), p.stderr
    # Given, it runs: the density is what a training run would measure.
    p = run("run", timing, "--set", f"{field}=0.001", "--dry-run")
    assert p.returncode == 0, p.stderr


def test_fields_a_mode_requires_are_said_to_be_required_when_left_out(tmp_path):
    """The same for the other fields a setting requires and whose default means "not given": an accuracy target's
    value, the quadratic model's starting point and curvatures, the rows of inline data. None of them claims a value
    ("got 0", "got null"); a value given out of range is still quoted."""
    target = scenario(steps=4)
    target["training"]["target"] = {"metric": "eval_accuracy"}
    quad = {"name": "q", "model": {"kind": "quadratic"}, "data": {"kind": "none"}, "training": {"steps": 2}}
    quad_w = dict(quad, model={"kind": "quadratic", "initial_w": [1.0, 2.0]})
    inline = {"name": "i", "model": {"kind": "linear", "layers": [2, 1], "loss": "mse"}, "data": {"kind": "inline"},
              "cluster": {"ranks": 2}, "training": {"steps": 2}}
    cases = [
        (target, "training.target.value",
         'required by training.target.metric "eval_accuracy": expected the accuracy to reach, in (0, 1]'),
        (quad, "model.initial_w", 'required by model.kind "quadratic": expected a list of numbers'),
        (quad_w, "model.a", 'required by model.kind "quadratic": expected a list of 2 numbers'),
        (inline, "data.ranks", 'required by data.kind "inline": expected a list of 2 rows'),
    ]
    for n, (doc, field, required) in enumerate(cases):
        path = write(tmp_path, doc, f"{n}.json")
        p = run("validate", path)
        assert p.returncode == 2, p.stderr
        assert f"{path}: {field}: {required}" in p.stderr, p.stderr
        assert no_claimed_value(p.stderr, field), p.stderr
    target["training"]["target"]["value"] = 1.5
    path = write(tmp_path, target, "given.json")
    p = run("validate", path)
    assert p.returncode == 2 and f"{path}: training.target.value: an accuracy target is in (0, 1], got 1.5" in p.stderr


@pytest.mark.parametrize("metric", ["eval_loss", "train_loss"])
def test_a_loss_target_without_a_value_is_refused(tmp_path, metric):
    """A loss target left without its value read as "loss <= 0" (the default), a target no run reaches: it is refused
    like an accuracy target without one, naming the file, the path and what is expected, exit 2 before any run."""
    doc = scenario(steps=4, axes={})
    doc["training"]["target"] = {"metric": metric}
    path = write(tmp_path, doc)
    required = f'training.target.value: required by training.target.metric "{metric}": expected the loss to reach'
    for command in (["validate", path], ["run", path, "--out", tmp_path / "out"]):
        p = run(*command)
        assert p.returncode == 2, p.stderr
        assert f"{path}: {required}" in p.stderr, p.stderr
        assert no_claimed_value(p.stderr, "training.target.value"), p.stderr
    assert not (tmp_path / "out").exists()
    # Given (0 too: a loss of 0 can be reached by an exact model), it is accepted.
    for value in (0.5, 0):
        doc["training"]["target"]["value"] = value
        p = run("validate", write(tmp_path, doc, f"given{value}.json"))
        assert p.returncode == 0, p.stderr


def test_an_accuracy_target_of_0_given_is_out_of_range_not_missing(tmp_path):
    doc = scenario(steps=4, axes={})
    doc["training"]["target"] = {"metric": "eval_accuracy", "value": 0}
    path = write(tmp_path, doc)
    p = run("validate", path)
    assert p.returncode == 2, p.stderr
    assert f"{path}: training.target.value: an accuracy target is in (0, 1], got 0" in p.stderr, p.stderr
    assert "required" not in p.stderr, p.stderr


def inline_linear(ranks, rows):
    """A linear model [2 -> 1] on inline data: `rows` lists of one micro-batch each for cluster.ranks = `ranks`."""
    batch = {"x": [[1.0, 2.0]], "y": [[0.5]]}
    return {"name": "i", "model": {"kind": "linear", "layers": [2, 1], "loss": "mse"},
            "data": {"kind": "inline", "ranks": [[batch] for _ in range(rows)]},
            "cluster": {"ranks": ranks}, "training": {"steps": 2, "optimizer": {"kind": "sgd", "lr": 0.1}}}


@pytest.mark.parametrize("ranks, rows, expected", [
    (1, 2, "expected a list of 1 row (one list of micro-batches per rank, cluster.ranks = 1), got 2 rows"),
    (2, 1, "expected a list of 2 rows (one list of micro-batches per rank, cluster.ranks = 2), got 1 row"),
    (3, 2, "expected a list of 3 rows (one list of micro-batches per rank, cluster.ranks = 3), got 2 rows"),
])
def test_inline_data_counts_its_rows_in_the_singular_and_plural(tmp_path, ranks, rows, expected):
    path = write(tmp_path, inline_linear(ranks, rows))
    p = run("validate", path)
    assert p.returncode == 2, p.stderr
    assert f"{path}: data.ranks: {expected}" in p.stderr.splitlines(), p.stderr


def test_inline_targets_are_counted_against_one_row_of_x(tmp_path):
    doc = inline_linear(1, 1)
    doc["data"]["ranks"][0][0]["y"] = [[0.5], [0.25]]
    path = write(tmp_path, doc)
    p = run("validate", path)
    assert p.returncode == 2, p.stderr
    assert "data.ranks[0][0].y: expected 1 entry (one per row of x), got 2" in p.stderr, p.stderr


@pytest.mark.parametrize("kind", ["dgc", "threshold"])
def test_an_expected_density_of_0_given_is_out_of_range_not_missing(tmp_path, kind):
    """compression.expected_density: 0 written (or set with --set) is a value out of (0, 1], quoted; only a density
    left out is "required"."""
    field = "compression.expected_density"
    timing = scenario(name="t", steps=2, axes={}, compression={"kind": kind, "expected_density": 0})
    timing.update(model={"kind": "gpt2-small"}, data={"kind": "none", "batch_per_rank": 4},
                  cluster={"ranks": 8, "hardware": "h100-sxm-8"}, training={"mode": "timing", "steps": 2})
    given = write(tmp_path, timing, "given.json")
    del timing["compression"]["expected_density"]
    left_out = write(tmp_path, timing, "left_out.json")
    for path, extra in ((given, []), (left_out, ["--set", f"{field}=0"])):
        p = run("run", path, *extra, "--out", tmp_path / "out")
        assert p.returncode == 2, p.stderr
        assert f"{path}: {field}: out of range (0, 1], got 0: {kind} keeps a share of values" in p.stderr, p.stderr
        assert "required" not in p.stderr and not (tmp_path / "out").exists(), p.stderr
    p = run("validate", left_out)
    assert p.returncode == 2 and f"{left_out}: {field}: required in timing-only runs" in p.stderr, p.stderr
