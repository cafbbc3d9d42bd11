"""End-to-end tests of the gradsweep binary: a sweep writes a report that validates against reports/schema.json,
bad scenarios exit 2 before anything runs, --dry-run prints the product, a killed sweep leaves a valid report that
--resume completes to the same content as an uninterrupted sweep, SIGINT records `interrupted` and exits 130, and
tools/plot.py draws a produced report."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("GRADSWEEP_BIN", REPO / "build" / "gradsweep"))
SCHEMA = json.loads((REPO / "reports" / "schema.json").read_text())

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} is not built")


def scenario(name="e2e", steps=30, axes=None, repeats=1, **extra):
    s = {
        "name": name,
        "model": {"kind": "mlp", "layers": [16, 32, 4], "loss": "cross_entropy"},
        "data": {"kind": "teacher", "batch_per_rank": 8,
                 "teacher": {"in_dim": 16, "hidden": 24, "out_dim": 4, "train_samples": 4096, "eval_samples": 256}},
        "cluster": {"ranks": 2},
        "training": {"steps": steps, "eval_every": 10, "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9},
                     "target": {"metric": "eval_accuracy", "value": 0.3}},
        "sweep": {"axes": axes if axes is not None else {"training.accumulation_steps": [1, 2],
                                                          "cluster.ranks": [1, 2]},
                  "repeats": repeats},
    }
    s.update(extra)
    return s


def write(tmp_path, doc, name="s.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return p


def run(*args, **kw):
    """gradsweep ARGS with its output in pipes; $COLUMNS left out (set, it would wrap the lines to its width)."""
    kw.setdefault("env", {k: v for k, v in os.environ.items() if k != "COLUMNS"})
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=600, **kw)


def test_sweep_writes_a_report_that_validates(tmp_path):
    out = tmp_path / "out"
    p = run("run", write(tmp_path, scenario()), "--out", out)
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    assert [r["id"] for r in report["runs"]] == [
        "e2e.accumulation_steps=1.ranks=1.r0", "e2e.accumulation_steps=1.ranks=2.r0",
        "e2e.accumulation_steps=2.ranks=1.r0", "e2e.accumulation_steps=2.ranks=2.r0"]
    for r in report["runs"]:
        assert r["disposition"] == "passed"
        assert len(r["convergence"]["series"]) == 30
        assert r["convergence"]["final"]["eval_accuracy"] is not None
        assert len(r["timing"]["measured"]["step"]["per_rank"]) == r["config"]["cluster"]["ranks"]
    # The gradient crosses the wire only with 2 ranks: 2(n-1)/n * 4 bytes per parameter = 4 bytes per parameter.
    n_params = 16 * 32 + 32 + 32 * 4 + 4
    assert report["runs"][1]["communication"]["bytes_sent_per_rank_per_step"] == [4.0 * n_params] * 2
    assert report["runs"][0]["communication"]["bytes_sent_per_rank_per_step"] == [0.0]
    assert report["context"]["scenario"]["name"] == "e2e"
    assert len(report["context"]["scenario_sha256"]) == 64


def test_bad_scenario_exits_2_with_every_problem_and_writes_nothing(tmp_path):
    bad = scenario(axes={"training.eval_every": [5, 10]})  # the bad fields are the base's own (not swept)
    bad["cluster"]["ranks"] = 0
    bad["training"]["optimizer"]["lr"] = -0.1
    bad["training"]["accumulation_steps"] = 0
    bad["data"]["batch_per_rank"] = 0
    bad["trainig"] = {}
    out = tmp_path / "out"
    p = run("run", write(tmp_path, bad), "--out", out)
    assert p.returncode == 2
    for fragment in ["cluster.ranks", "training.optimizer.lr", "training.accumulation_steps",
                     "data.batch_per_rank", "did you mean \"training\"", "s.json"]:
        assert fragment in p.stderr, (fragment, p.stderr)
    assert not out.exists()
    v = run("validate", tmp_path / "s.json")
    assert v.returncode == 2
    # With cluster.ranks and training.accumulation_steps swept, every run replaces the base's bad values: only the
    # other problems are left.
    swept = dict(bad, sweep=scenario()["sweep"])
    p = run("validate", write(tmp_path, swept, "swept.json"))
    assert p.returncode == 2 and "3 problems" in p.stderr, p.stderr
    assert "cluster.ranks" not in p.stderr and "training.accumulation_steps" not in p.stderr, p.stderr


def test_bad_staleness_and_local_sgd_fields_exit_2_with_their_paths(tmp_path):
    bad = scenario(sync={"kind": "local_sgd", "period": 0, "warmup_steps": -1, "staleness": 2})
    p = run("validate", write(tmp_path, bad))
    assert p.returncode == 2
    for fragment in ["s.json: sync.period: expected an integer >= 1", "sync.warmup_steps: expected an integer >= 0",
                     "sync.staleness: only applies when sync.kind is \"allreduce\""]:
        assert fragment in p.stderr, (fragment, p.stderr)
    good = scenario(sync={"staleness": 2, "overlap": False}, axes={"sync.staleness": [0, 1, 2]})
    assert run("validate", write(tmp_path, good, "good.json")).returncode == 0


def test_reduce_every_microbatch_at_stage_1_or_without_zero_exits_2_with_file_path_and_reason(tmp_path):
    for sync, reason in [({"kind": "zero", "stage": 1, "reduce_every_microbatch": True}, "sync.stage 2 or 3"),
                         ({"kind": "allreduce", "reduce_every_microbatch": True}, "only applies when sync.kind is")]:
        bad = scenario(sync=sync, axes={"training.accumulation_steps": [1, 2]})
        p = run("validate", write(tmp_path, bad, "rem.json"))
        assert p.returncode == 2, p.stderr
        for fragment in ["rem.json", "sync.reduce_every_microbatch", reason]:
            assert fragment in p.stderr, (fragment, p.stderr)
    good = scenario(sync={"kind": "zero", "stage": 2, "reduce_every_microbatch": True},
                    axes={"training.accumulation_steps": [1, 2]})
    assert run("validate", write(tmp_path, good, "good.json")).returncode == 0


def test_inline_number_past_float32_range_exits_2_naming_file_and_path(tmp_path):
    """1e39 in data.inline would be inf in float32: refused before any run, with the file and the JSON path."""
    bad = {"name": "f32", "model": {"kind": "linear", "layers": [1, 1], "bias": False, "loss": "mse"},
           "data": {"kind": "inline", "ranks": [[{"x": [[1.0]], "y": [[1.0]]}, {"x": [[1.0]], "y": [[1e39]]}]]},
           "cluster": {"ranks": 1}, "training": {"steps": 2, "optimizer": {"kind": "sgd", "lr": 0.1}}}
    out = tmp_path / "out"
    p = run("run", write(tmp_path, bad), "--out", out)
    assert p.returncode == 2, p.stderr
    assert "s.json" in p.stderr and "data.ranks[0][1].y[0][0]: 1e+39 is outside float32's range" in p.stderr, p.stderr
    assert not out.exists()


def test_syntax_error_names_line_and_column(tmp_path):
    p = run("validate", write(tmp_path, '{"name": "x",\n "model": {"kind": }\n}'))
    assert p.returncode == 2
    assert "s.json:2:20" in p.stderr, p.stderr  # the "}" where a value was due


def test_dry_run_prints_the_product_and_runs_nothing(tmp_path):
    out = tmp_path / "out"
    p = run("run", write(tmp_path, scenario(repeats=3)), "--dry-run", "--out", out)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == (
        "12 runs = 2 [training.accumulation_steps] x 2 [cluster.ranks] x 3 [repeats]")
    assert "e2e.accumulation_steps=2.ranks=1.r2" in p.stdout
    assert not out.exists()


def test_killed_sweep_leaves_a_valid_report_and_resume_completes_it(tmp_path, comparable):
    doc = scenario(steps=150, axes={"training.accumulation_steps": [1, 2, 3], "cluster.ranks": [1, 2]})
    path = write(tmp_path, doc)
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert run("run", path, "--out", full, "--quiet").returncode == 0
    # The child stops itself (SIGSTOP) after step 1 of its third run, so the kill lands at a known point however
    # loaded the machine is: two runs finished and journaled, the third in flight.
    env = dict(os.environ, GRADSWEEP_TEST_FAULTS="stop_at=3:1")
    proc = subprocess.Popen([str(BIN), "run", str(path), "--out", str(cut), "--quiet"], env=env)
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), f"child ended instead of stopping (status {status})"
    proc.kill()
    proc.wait()
    journal = (cut / "runs.jsonl").read_text().splitlines()
    assert len(journal) == 3  # the identity header and the two finished runs
    partial = json.loads((cut / "report.json").read_text())
    jsonschema.validate(partial, SCHEMA)
    # report.json is rewritten at a pace (at most every few seconds), so it may lag the journal, never lead it.
    journaled = [json.loads(line)["id"] for line in journal[1:]]
    assert [r["id"] for r in partial["runs"]] == journaled[:len(partial["runs"])]
    p = run("run", path, "--out", cut, "--resume", "--quiet")
    assert p.returncode == 0, p.stderr
    resumed = json.loads((cut / "report.json").read_text())
    jsonschema.validate(resumed, SCHEMA)
    assert comparable(resumed) == comparable(json.loads((full / "report.json").read_text()))


def test_sigint_records_interrupted_and_resume_reruns_it(tmp_path):
    doc = scenario(axes={"training.steps": [20, 5000000]})
    doc["training"]["eval_every"] = 0
    path = write(tmp_path, doc)
    out = tmp_path / "out"

    def interrupt_at(stop_at, *extra):
        # The child stops itself (SIGSTOP) after a chosen step of the long run, so SIGINT lands inside that run
        # however loaded the machine is (a fixed sleep could land before the short run ended, or before the handler).
        env = dict(os.environ, GRADSWEEP_TEST_FAULTS=f"stop_at={stop_at}")
        proc = subprocess.Popen([str(BIN), "run", str(path), "--out", str(out), "--quiet", *extra],
                                stderr=subprocess.PIPE, text=True, env=env)
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), f"child ended instead of stopping (status {status})"
        proc.send_signal(signal.SIGINT)
        os.kill(proc.pid, signal.SIGCONT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        report = json.loads((out / "report.json").read_text())
        jsonschema.validate(report, SCHEMA)
        return report

    first = interrupt_at("2:50")  # the second run, the long one (a thinned series: test_report.cpp)
    short, long = first["runs"]
    assert short["disposition"] == "passed"
    assert long["disposition"] == "interrupted", long["message"]
    assert 0 < long["steps_completed"] < 5000000
    assert long["convergence"]["series"][-1]["step"] == long["steps_completed"]
    # --resume keeps the finished run and runs the interrupted one again (interrupted again here: the first run
    # this process runs).
    second = interrupt_at("1:7", "--resume")
    assert second["runs"][0] == short
    assert second["runs"][1]["disposition"] == "interrupted", second["runs"][1]["message"]
    assert second["runs"][1]["wall_s"] != long["wall_s"]


def test_plot_draws_a_produced_report(tmp_path):
    out = tmp_path / "out"
    assert run("run", write(tmp_path, scenario(steps=20)), "--out", out, "--quiet").returncode == 0
    p = subprocess.run([sys.executable, str(REPO / "tools" / "plot.py"), str(out / "report.json")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    for name in ["loss_vs_step.png", "loss_vs_time.png", "accuracy_vs_time.png", "step_breakdown.png"]:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000, name
    assert list(out.glob("heatmap_*.png")), "a two-axis sweep gets a heatmap"


def test_list_and_fields_name_every_registered_piece():
    p = run("list")
    assert p.returncode == 0
    for name in ["mlp", "linear", "quadratic", "fashion_mnist", "teacher", "inline", "allreduce", "independent"]:
        assert name in p.stdout
    f = run("fields")
    assert "`training.accumulation_steps`" in f.stdout and "`sync.bucket_mb`" in f.stdout
    for profile in ["h100-sxm-8", "h200-sxm-8", "a100-sxm-8", "h100-pcie-8", "h200-1"]:
        assert profile in p.stdout, profile


def test_list_fits_its_columns_to_the_longest_name_and_the_width():
    p = run("list", env={**os.environ, "COLUMNS": "80"})
    assert p.returncode == 0
    entries = [l for l in p.stdout.splitlines() if l.startswith("  ") and not l.startswith("   ")]
    names = [l.split()[0] for l in entries]
    assert "parameter_server" in names
    doc_at = 2 + max(len(n) for n in names) + 2  # the name column is as wide as the longest name
    for line in p.stdout.splitlines():
        if not line.startswith(" "):
            continue  # a section title
        assert len(line) <= 79, line  # wrapped to at most COLUMNS - 1, as every line gradsweep prints
        assert line[doc_at - 2:doc_at] == "  " and line[doc_at] != " ", line  # every doc starts in the same column
    # 40 columns leave the docs too little room beside the names: each doc goes below its name, indented by 4.
    narrow = run("list", env={**os.environ, "COLUMNS": "40"})
    assert narrow.returncode == 0
    assert [t for t in narrow.stdout.splitlines() if len(t) > 39] == []
    assert " ".join(narrow.stdout.split()) == " ".join(p.stdout.split())  # the same words
    assert "  mlp" in narrow.stdout.splitlines() and "  parameter_server" in narrow.stdout.splitlines()
    # Unknown width (a pipe without COLUMNS): nothing is wrapped, each doc is one line beside its name.
    pipe = run("list")
    assert " ".join(pipe.stdout.split()) == " ".join(p.stdout.split())
    assert [t for t in pipe.stdout.splitlines() if t.startswith("   ")] == []


def test_validate_lists_a_type_error_and_an_unrelated_cross_field_problem_together(tmp_path):
    f = tmp_path / "two.json"
    f.write_text(json.dumps({
        "name": "two", "model": {"kind": "mlp", "layers": [8, 4, 5]},
        "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}},
        "training": {"steps": 2, "optimizer": {"lr": "fast"}}}))
    p = run("validate", f)
    assert p.returncode == 2
    assert f"{f}: training.optimizer.lr: expected a number > 0" in p.stderr, p.stderr
    assert f"{f}: model.layers: last width must equal data.teacher.out_dim (3), got 5" in p.stderr, p.stderr
    assert "2 problems; nothing was run" in p.stderr, p.stderr


def test_more_ranks_than_the_profiles_gpus_is_noted_not_refused():
    profile = REPO / "scenarios" / "hardware" / "h100-sxm-8.json"
    gpus = json.loads(profile.read_text())["gpus_per_node"]["value"]
    p = run("validate", REPO / "scenarios" / "quickstart.json", "--set", f"cluster.ranks={gpus + 4}",
            cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert f"cluster.ranks: {gpus + 4} is more than the {gpus} GPUs of hardware profile \"h100-sxm-8\"" in p.stderr
    assert "h100-sxm-8.json" in p.stderr
    p = run("validate", REPO / "scenarios" / "quickstart.json", "--set", f"cluster.ranks={gpus}", cwd=REPO)
    assert p.returncode == 0 and "note:" not in p.stderr, p.stderr


def test_unknown_hardware_is_refused_before_running_and_names_the_choices(tmp_path):
    p = run("validate", REPO / "scenarios" / "quickstart.json", "--hardware", "h900-sxm-8")
    assert p.returncode == 2
    assert "cluster.hardware" in p.stderr and "h900-sxm-8" in p.stderr and "a100-sxm-8" in p.stderr, p.stderr
    # The option as typed, not the --set it stands for.
    assert "(the value of --hardware, not of the file)" in p.stderr and "--set" not in p.stderr, p.stderr
    p = run("run", REPO / "scenarios" / "quickstart.json", "--hardware", "h900-sxm-8", "--out", tmp_path / "r")
    assert p.returncode == 2 and not (tmp_path / "r" / "report.json").exists()
    assert "(the value of --hardware, not of the file)" in p.stderr, p.stderr
    # --timing-only on a schedule it does not price names --timing-only.
    doc = scenario(sync={"kind": "parameter_server", "staleness": 2}, axes={})
    p = run("run", write(tmp_path, doc), "--timing-only", "--out", tmp_path / "t")
    assert p.returncode == 2, p.stderr
    assert "training.mode: timing-only runs" in p.stderr and "(the value of --timing-only, not of the file)" in p.stderr
    # Given with --set as well, the problem names --set (the user typed both).
    p = run("validate", REPO / "scenarios" / "quickstart.json", "--hardware", "h900-sxm-8", "--set",
            "cluster.hardware=h900-sxm-8")
    assert p.returncode == 2 and "(the value of --set cluster.hardware, not of the file)" in p.stderr, p.stderr


def test_every_shipped_scenario_validates():
    files = sorted(p for p in (REPO / "scenarios").rglob("*.json") if "hardware" not in p.parts)
    assert files
    for f in files:
        p = run("validate", f)
        assert p.returncode == 0, (f, p.stderr)


def test_scenarios_readme_lists_every_field_as_the_program_does():
    table = run("fields").stdout.strip().splitlines()
    readme = (REPO / "scenarios" / "README.md").read_text()
    missing = [line for line in table if line not in readme]
    assert not missing, "scenarios/README.md is out of date; regenerate with `gradsweep fields`:\n" + "\n".join(missing)


def test_timing_only_prices_a_7b_model_without_its_memory_and_plots_draw_it(tmp_path):
    """LLaMA-7B's parameters alone are 27 GB per replica; a timing-only sweep over 8 ranks must allocate none of it,
    write a report with the modeled clock only (no loss, no measured clock), and still get its plots. fp16_pure and
    activation checkpointing keep it inside one 80 GB GPU of the modeled node (docs/memory.md: 4 bytes per parameter
    with plain SGD, 40 GiB with the DDP buckets)."""
    import resource
    doc = {"name": "timing", "model": {"kind": "llama-7b"}, "data": {"kind": "none", "batch_per_rank": 2},
           "cluster": {"ranks": 8}, "precision": {"mode": "fp16_pure"},
           "training": {"steps": 10, "eval_every": 0, "activation_checkpointing": True},
           "sweep": {"axes": {"cluster.hardware": ["h100-sxm-8", "h100-pcie-8"], "cluster.ranks": [1, 8]}}}
    path = write(tmp_path, doc)
    p = run("validate", path)
    assert p.returncode == 2 and "training.mode" in p.stderr, "a shape preset needs timing mode"
    out = tmp_path / "out"
    p = run("run", path, "--timing-only", "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 1024 * 1024, "kB: under 1 GB"
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    assert [r["disposition"] for r in report["runs"]] == ["passed"] * 4
    for r in report["runs"]:
        assert r["num_params"] == 6738415616
        assert r["timing"]["measured"] is None and r["timing"]["modeled"]["hardware"] in ("h100-sxm-8", "h100-pcie-8")
        series = r["convergence"]["series"]
        assert len(series) == 10 and all(pt["train_loss"] is None for pt in series)
        assert all(b["modeled_s"] > a["modeled_s"] > 0 for a, b in zip(series, series[1:]))
        assert r["throughput"]["modeled_samples_per_s"] > 0
        # The modeled wire bytes per rank and step: a ring all-reduce sends 2(R-1)/R of the 2n-byte fp16 gradient
        # (3.5n on 8 ranks, exact in every bucket; nothing on one rank).
        ranks = r["swept"]["cluster.ranks"]
        assert r["communication"]["bytes_sent_per_rank_per_step"] == [2 * (ranks - 1) / ranks * 2 * 6738415616] * ranks
    by_id = {r["id"]: r for r in report["runs"]}
    sxm8 = next(r for r in report["runs"] if r["swept"] == {"cluster.hardware": "h100-sxm-8", "cluster.ranks": 8})
    pcie8 = next(r for r in report["runs"] if r["swept"] == {"cluster.hardware": "h100-pcie-8", "cluster.ranks": 8})
    # The same compute on a slower fabric and slower GPUs: PCIe is slower, and chooses no NVLS.
    assert pcie8["throughput"]["modeled_samples_per_s"] < sxm8["throughput"]["modeled_samples_per_s"]
    assert {b["algorithm"] for b in pcie8["timing"]["modeled"]["communication"]["buckets"]} <= {"ring", "tree"}
    assert by_id
    plots = tmp_path / "plots"
    p = subprocess.run([sys.executable, str(REPO / "tools" / "plot.py"), str(out / "report.json"), "--out", str(plots)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    names = sorted(f.name for f in plots.glob("*.png"))
    assert "step_breakdown_modeled.png" in names and "throughput_vs_ranks.png" in names, names
    assert "loss_vs_step.png" not in names and "timing-only" in p.stderr


def test_resume_dry_run_shows_kept_and_rerun_ids_and_is_refused_as_the_resume_is(tmp_path):
    """QA6 F6: `--resume --dry-run` listed every run with exit 0. It marks the runs the resume keeps (done) and the
    ones it runs, and is refused with the real resume's message when the folder holds other --set values."""
    path = write(tmp_path, scenario(steps=5))
    out = tmp_path / "out"
    p = run("run", path, "--out", out, "--quiet", "--filter", "accumulation_steps=1", "--set", "training.steps=4")
    assert p.returncode == 0, p.stderr
    before = (out / "report.json").read_bytes(), (out / "runs.jsonl").read_bytes()
    p = run("run", path, "--out", out, "--resume", "--dry-run", "--set", "training.steps=4")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    for ranks in (1, 2):
        assert any(f"e2e.accumulation_steps=1.ranks={ranks}.r0" in l and l.endswith("(done: kept)") for l in lines)
        assert any(f"e2e.accumulation_steps=2.ranks={ranks}.r0" in l and l.endswith("(runs)") for l in lines)
    assert lines[-1] == f"--resume into {out}: 2 to run, 2 already done (kept)"
    # Without the --set the folder was written with, the resume is refused; the dry run says the same, exit 2.
    dry = run("run", path, "--out", out, "--resume", "--dry-run")
    assert dry.returncode == 2
    assert 'written with --set ["training.steps=4"], now []' in dry.stderr
    assert ((out / "report.json").read_bytes(), (out / "runs.jsonl").read_bytes()) == before
    real = run("run", path, "--out", out, "--resume")
    assert real.returncode == 2
    assert real.stderr == dry.stderr


@pytest.mark.parametrize("args, message", [
    (["merge"], "merge: sources is required"),
    (["merge", "SLICES"], "merge: --out is required"),
    (["merge", "SLICES", "--out"], "merge: --out: 1 required TEXT missing"),
    (["run", "--bogus"], "run: The following argument was not expected: --bogus"),
    (["run", "--retry-failed"], "run: --retry-failed requires --resume"),
    (["validate"], "validate: scenario is required"),
    (["list", "extra"], "list: The following argument was not expected: extra"),
    (["fields", "--x"], "fields: The following argument was not expected: --x"),
    (["price", "--ranks", "abc"], "price: Could not convert: --ranks = abc"),
    (["calibrate", "--base", "h100-sxm-8"], "calibrate: --out is required"),
])
def test_command_line_errors_of_every_command_say_gradsweep_and_exit_2(tmp_path, args, message):
    """CLI11's refusals read like every other: one "gradsweep: CMD: ..." line on stderr pointing at CMD's --help."""
    args = [str(tmp_path / "slices") if a == "SLICES" else a for a in args]
    p = run(*args, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    assert p.stderr == f"gradsweep: {message} (see gradsweep {args[0]} --help)\n"
    assert list(tmp_path.iterdir()) == []  # nothing was written


def test_a_missing_command_says_gradsweep_and_exits_2():
    p = run()
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("gradsweep: ") and p.stderr.endswith(" (see gradsweep --help)\n"), p.stderr
    help_ = run("merge", "--help")
    assert help_.returncode == 0 and "--allow-missing" in help_.stdout and help_.stderr == ""


def test_a_damaged_report_says_how_to_resume_from_the_journal_and_that_works(tmp_path):
    # QA: a truncated report.json refused --resume with one line; the journal holds every finished run.
    path = write(tmp_path, scenario(steps=5))
    out = tmp_path / "out"
    assert run("run", path, "--out", out, "--quiet").returncode == 0
    whole = json.loads((out / "report.json").read_text())
    text = (out / "report.json").read_text()
    (out / "report.json").write_text(text[:1000])
    p = run("run", path, "--out", out, "--resume", "--quiet")
    assert p.returncode == 2
    assert "cannot resume from an unreadable report" in p.stderr
    assert f"the journal {out}/runs.jsonl holds the runs that finished" in p.stderr
    assert f"mv {out}/report.json {out}/report.json.damaged" in p.stderr
    (out / "report.json").rename(out / "report.json.damaged")  # as the message says
    p = run("run", path, "--out", out, "--resume", "--quiet")
    assert p.returncode == 0, p.stderr
    rebuilt = json.loads((out / "report.json").read_text())
    assert [r["id"] for r in rebuilt["runs"]] == [r["id"] for r in whole["runs"]]
    assert [r["convergence"]["final"] for r in rebuilt["runs"]] == [r["convergence"]["final"] for r in whole["runs"]]


def test_an_empty_out_is_refused(tmp_path):
    p = run("run", write(tmp_path, scenario(steps=2)), "--out", "", "--quiet", cwd=tmp_path)
    assert p.returncode == 2
    assert "--out: expected the report folder's path, got an empty one" in p.stderr
    assert not (tmp_path / "reports").exists()


def test_dry_run_is_refused_where_the_out_folder_cannot_be_created(tmp_path):
    # QA: --dry-run passed where the run exits 3 (a read-only folder). As root, permissions do not stop a write: a
    # read-only file system does, which needs a mount; a plain file in the path stops both as well.
    blocker = tmp_path / "file"
    blocker.write_text("")
    path = write(tmp_path, scenario(steps=2))
    real = run("run", path, "--out", blocker / "out", "--quiet")
    dry = run("run", path, "--out", blocker / "out", "--dry-run")
    assert real.returncode != 0 and dry.returncode != 0, (real.stderr, dry.stdout)
    assert "report folder" in dry.stderr and str(blocker) in dry.stderr, dry.stderr


def test_validate_takes_the_run_commands_timing_only(tmp_path):
    # QA: `validate` refused --timing-only, so a `run ... --timing-only` command line could not be validated as typed.
    doc = {"name": "t", "model": {"kind": "gpt2-small"}, "data": {"kind": "none", "batch_per_rank": 2},
           "cluster": {"ranks": 8}, "training": {"steps": 5, "eval_every": 0}}
    path = write(tmp_path, doc)
    p = run("validate", path)
    assert p.returncode == 2 and "training.mode" in p.stderr, p.stderr  # a shape preset prices, it does not train
    p = run("validate", path, "--timing-only")
    assert p.returncode == 0, p.stderr
    assert "valid; 1 run" in p.stdout


def test_a_wrong_base_value_the_sweep_replaces_is_noted(tmp_path):
    # QA: "cluster.ranks": "four" with the ranks swept validated without a word (the value is never used).
    doc = scenario(axes={"cluster.ranks": [1, 2]})
    doc["cluster"]["ranks"] = "four"
    doc["training"]["optimizer"]["lr"] = 0.1
    p = run("validate", write(tmp_path, doc))
    assert p.returncode == 0, p.stderr
    assert ('cluster.ranks: the base\'s value is not used (the sweep sets this field in every run); as a value it '
            'would be refused: expected an integer >= 1 and <= 1024, got "four"') in " ".join(p.stderr.split()), p.stderr
    doc["cluster"]["ranks"] = 2  # a right one: nothing to say
    p = run("validate", write(tmp_path, doc))
    assert p.returncode == 0 and "not used" not in p.stderr, p.stderr


def test_price_refuses_rank_counts_below_two_and_notes_partial_nodes():
    # --ranks 0 and -1 used to price the profile's 8 ranks silently (QA); a count that is not whole nodes of a
    # multi-node profile is priced on the nodes it spans, and the table says so.
    for bad in ("0", "-1", "1"):
        p = subprocess.run([str(BIN), "price", "--ranks", bad], capture_output=True, text=True, timeout=30)
        assert p.returncode == 2, (bad, p.stdout, p.stderr)
        assert "--ranks" in p.stderr and p.stdout == "", (bad, p.stderr)
    p = subprocess.run([str(BIN), "price", "--hardware", "h100-sxm-8x4-ib", "--ranks", "12", "--bytes", "1G"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert "# note: 12 ranks are not whole nodes" in p.stdout and "priced on 2 nodes of 8" in p.stdout, p.stdout
    q = subprocess.run([str(BIN), "price", "--hardware", "h100-sxm-8x4-ib", "--ranks", "16", "--bytes", "1G",
                        "--json"], capture_output=True, text=True, timeout=30)
    whole = json.loads(q.stdout)
    assert whole["nodes"] == 2 and whole["note"] is None
    row12 = [line.split() for line in p.stdout.splitlines() if not line.startswith("#")][0]
    assert float(row12[5]) == pytest.approx(whole["rows"][0]["time_us"], abs=0.01)  # the pace of 2 full nodes
