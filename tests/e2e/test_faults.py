"""Faults on the gradsweep binary, each triggered on purpose and followed by --resume: SIGINT/SIGTERM at a chosen step
(the child stops itself there via GRADSWEEP_TEST_FAULTS=stop_at, the test signals it and lets it continue), a
second signal in the middle of a journal write, a full disk and an unwritable folder (injected: CI runs as root),
divergence, and the per-run time limit. Every case checks the exit status, that the report validates against
reports/schema.json, that finished runs are kept, and that --resume completes the sweep."""
import json
import os
import signal
import subprocess

import jsonschema
import pytest

from test_cli import BIN, SCHEMA, run, scenario, write

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} is not built")

STEPS = 40


def three_runs(tmp_path):
    return write(tmp_path, scenario(steps=STEPS, axes={"training.accumulation_steps": [1, 2, 3]}))


def full_report(tmp_path, path):
    out = tmp_path / "full"
    p = run("run", path, "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    return json.loads((out / "report.json").read_text())


def start(path, out, faults, *extra):
    env = dict(os.environ, GRADSWEEP_TEST_FAULTS=faults)
    return subprocess.Popen([str(BIN), "run", str(path), "--out", str(out), "--quiet", *extra], env=env,
                            stderr=subprocess.PIPE, text=True)


def wait_stopped(proc):
    """Waits until the child has stopped itself (SIGSTOP from a test fault)."""
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), f"child ended instead of stopping (status {status})"


def load_valid(out):
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    return report


def resume_and_compare(comparable, path, out, full, *extra):
    p = run("run", path, "--out", out, "--resume", "--quiet", *extra)
    assert p.returncode == 0, p.stderr
    resumed = load_valid(out)
    assert comparable(resumed) == comparable(full)
    assert not list(out.glob("report.json.tmp.*")), "stale temporary files must be cleaned up"
    return resumed


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_at_a_chosen_step_records_interrupted_and_resume_completes(tmp_path, sig, code, comparable):
    path = three_runs(tmp_path)
    full = full_report(tmp_path, path)
    out = tmp_path / "cut"
    proc = start(path, out, "stop_at=2:10")  # after step 10 of the second run
    wait_stopped(proc)
    proc.send_signal(sig)
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    report = load_valid(out)
    first, second = report["runs"]  # the third never started
    assert first["disposition"] == "passed" and first["steps_completed"] == STEPS
    assert first == next(r for r in report["runs"] if r["id"] == first["id"])
    # The stop request is read at the start of the next step, which finishes: stopped after step 11.
    assert second["disposition"] == "interrupted", second["message"]
    assert second["steps_completed"] == 11
    assert [p["step"] for p in second["convergence"]["series"]] == list(range(1, 12))
    assert second["message"] == f"stopped after step 11 of {STEPS}"
    assert comparable({"runs": [first]}) == comparable({"runs": [full["runs"][0]]})
    resume_and_compare(comparable, path, out, full)


@pytest.mark.parametrize("compression,optimizer", [
    ({"kind": "topk", "ratio": 0.1, "error_feedback": "gradient"}, {"kind": "sgd", "lr": 0.1, "momentum": 0.9}),
    ({"kind": "none"}, {"kind": "onebit_adam", "lr": 0.001, "freeze_step": 4}),
])
def test_a_resumed_run_starts_with_zero_error_buffers(tmp_path, compression, optimizer, comparable):
    """Error-feedback state (top-k's gradient residual, 1-bit Adam's worker and server errors) is not carried into a
    resumed run: the run interrupted after step 11 of 40 runs again from step 1 with its buffers at zero, so the
    resumed report equals the uninterrupted one (a residual left from the cut run would change every later loss)."""
    doc = scenario(steps=STEPS, axes={"training.accumulation_steps": [1, 2, 3]}, compression=compression)
    doc["training"]["optimizer"] = optimizer
    path = write(tmp_path, doc)
    full = full_report(tmp_path, path)
    out = tmp_path / "cut"
    proc = start(path, out, "stop_at=2:10")
    wait_stopped(proc)
    proc.send_signal(signal.SIGINT)
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    cut = load_valid(out)
    assert cut["runs"][1]["disposition"] == "interrupted" and cut["runs"][1]["steps_completed"] == 11
    resume_and_compare(comparable, path, out, full)


def test_second_signal_mid_write_exits_at_once_and_the_report_survives(tmp_path, comparable):
    path = three_runs(tmp_path)
    full = full_report(tmp_path, path)
    out = tmp_path / "cut"
    # Journal writes: its header line, then one line per run; stop half-way through the second run's line.
    proc = start(path, out, "stop_in_write=runs.jsonl:3")
    wait_stopped(proc)
    # Both pending while it is stopped: whichever handler runs first asks for a stop, the second exits at once
    # with 128 + its signal (rank threads may take them in either order).
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGTERM)
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (130, 143), err
    report = load_valid(out)
    assert len(report["runs"]) <= 2
    lines = (out / "runs.jsonl").read_text().split("\n")
    assert json.loads(lines[1])["disposition"] == "passed"
    with pytest.raises(ValueError):
        json.loads(lines[2])  # the cut line: it exited inside the write, not after finishing it
    resume_and_compare(comparable, path, out, full)
    # The resumed journal holds no glued or cut line.
    for line in (out / "runs.jsonl").read_text().splitlines():
        json.loads(line)


def test_disk_full_mid_sweep_exits_3_keeps_finished_runs_and_resume_completes(tmp_path, comparable):
    path = three_runs(tmp_path)
    full = full_report(tmp_path, path)
    out = tmp_path / "cut"
    proc = start(path, out, "disk_full=runs.jsonl:3")  # the second run's journal line
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert "runs.jsonl" in err and os.strerror(28) in err, err  # ENOSPC
    report = load_valid(out)
    assert [r["disposition"] for r in report["runs"]][:1] == ["passed"]
    assert len(report["runs"]) <= 2
    assert (out / "runs.jsonl").read_text().endswith("\n"), "no partial journal line"
    resume_and_compare(comparable, path, out, full)


def test_disk_full_or_unwritable_folder_leaves_the_previous_report_intact(tmp_path):
    path = three_runs(tmp_path)
    out = tmp_path / "out"
    assert run("run", path, "--out", out, "--quiet").returncode == 0
    before = (out / "report.json").read_bytes()
    for faults, needle in [("disk_full=report.json:1", os.strerror(28)), (f"unwritable={out}", os.strerror(13))]:
        env = dict(os.environ, GRADSWEEP_TEST_FAULTS=faults)
        for extra in ([], ["--resume"], ["--overwrite"]):
            p = subprocess.run([str(BIN), "run", str(path), "--out", str(out), "--quiet", *extra], env=env,
                               capture_output=True, text=True, timeout=300)
            # Without --resume or --overwrite the folder's runs are refused before anything is written.
            assert p.returncode == (2 if not extra else 3), (faults, extra, p.stderr)
            assert (needle if extra else "--overwrite") in p.stderr and str(out) in p.stderr, p.stderr
            aside = sorted(out.glob("replaced-*"))
            kept = aside[-1] / "report.json" if extra == ["--overwrite"] and aside else out / "report.json"
            assert kept.read_bytes() == before, (faults, extra)  # moved aside whole, or left in place
            assert not list(out.glob("report.json.tmp.*"))
            if aside:  # put it back for the next case
                for f in aside[-1].iterdir():
                    f.replace(out / f.name)
                aside[-1].rmdir()
    # A folder that cannot be created: exit 3 before any run, nothing created.
    new = tmp_path / "new" / "deeper"
    env = dict(os.environ, GRADSWEEP_TEST_FAULTS=f"unwritable={tmp_path / 'new'}")
    p = subprocess.run([str(BIN), "run", str(path), "--out", str(new), "--quiet"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 3, p.stderr
    assert "cannot create the report folder" in p.stderr, p.stderr
    assert "nothing was run" in p.stderr and "journaled" not in p.stderr, p.stderr  # no run had started
    assert not (tmp_path / "new").exists()


def test_diverged_run_names_step_and_quantity_and_the_sweep_continues(tmp_path):
    doc = scenario(steps=30, axes={"training.optimizer.lr": [1e30, 0.1]})
    doc["training"]["optimizer"]["momentum"] = 0.0
    path = write(tmp_path, doc)
    out = tmp_path / "out"
    p = run("run", path, "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr  # a diverged run is a result
    report = load_valid(out)
    bad, good = report["runs"]
    assert bad["disposition"] == "diverged"
    d = bad["divergence"]
    assert d["quantity"] in ("parameters", "train_loss", "gradient")
    assert 1 <= d["step"] <= bad["steps_completed"] < 30
    assert f"step {d['step']}" in bad["message"] and "first non-finite quantity" in bad["message"]
    assert good["disposition"] == "passed" and good["steps_completed"] == 30 and good["divergence"] is None


def test_run_timeout_stops_one_run_and_retry_failed_reruns_it(tmp_path):
    doc = scenario(axes={"training.steps": [5000000, 20]})
    doc["training"]["run_timeout_s"] = 0.5
    doc["training"]["eval_every"] = 0
    path = write(tmp_path, doc)
    out = tmp_path / "out"
    p = run("run", path, "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    report = load_valid(out)
    slow, fast = report["runs"]
    assert slow["disposition"] == "timeout", slow["message"]
    assert 0 < slow["steps_completed"] < 5000000
    assert slow["wall_s"] >= 0.5
    assert "run_timeout_s" in slow["message"]
    assert fast["disposition"] == "passed" and fast["steps_completed"] == 20
    # --resume keeps it; --resume --retry-failed runs it again (and it times out again); --retry-failed alone is
    # a usage error.
    p = run("run", path, "--out", out, "--resume", "--quiet")
    assert p.returncode == 0, p.stderr
    assert load_valid(out)["runs"][0] == slow
    p = run("run", path, "--out", out, "--resume", "--retry-failed", "--quiet")
    assert p.returncode == 0, p.stderr
    again = load_valid(out)["runs"]
    assert again[0]["disposition"] == "timeout" and again[0]["wall_s"] != slow["wall_s"]
    assert again[1] == fast
    assert run("run", path, "--out", out, "--retry-failed").returncode == 2


def test_run_that_does_not_fit_memory_is_skipped_with_estimate_and_largest_fitting_setting(tmp_path):
    path = write(tmp_path, scenario(steps=5, axes={"cluster.ranks": [4, 1]}))
    out = tmp_path / "out"
    p = run("run", path, "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    four, one = load_valid(out)["runs"]
    est4, est1 = four["memory"]["total_bytes"], one["memory"]["total_bytes"]
    assert est1 < est4
    # Room for one rank but not for four: the 4-rank run is skipped (not started), the sweep goes on.
    available = (est1 + est4) // 2
    env = dict(os.environ, GRADSWEEP_MEMORY_AVAILABLE_BYTES=str(available))
    p = subprocess.run([str(BIN), "run", str(path), "--out", str(out), "--quiet", "--overwrite"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    skipped, ran = load_valid(out)["runs"]
    assert skipped["disposition"] == "skipped" and skipped["steps_completed"] == 0
    assert skipped["memory"]["total_bytes"] == est4 and skipped["memory"]["available_bytes"] == available
    m = skipped["message"]
    assert "needs an estimated" in m and "available" in m and "parameters" in m, m
    largest = int(m.split("the largest cluster.ranks that fits is ")[1])
    assert 1 <= largest < 4
    assert ran["disposition"] == "passed"
    # The named setting fits and one more rank does not (the estimate grows with the ranks).
    for ranks, expected in [(largest, "passed"), (largest + 1, "skipped")]:
        p = subprocess.run([str(BIN), "run", str(path), "--out", str(tmp_path / f"r{ranks}"), "--quiet",
                            "--set", f"cluster.ranks={ranks}"], env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        assert json.loads((tmp_path / f"r{ranks}" / "report.json").read_text())["runs"][0]["disposition"] == expected
