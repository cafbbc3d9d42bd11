"""One run across processes under mpirun (docs/cluster.md, "One run across processes (MPI)"): 6 ranks as 2 processes
of 3 threads and as 3 processes of 2 give the same parameters after every step, bit for bit (report.trace), as the
same 6 ranks in one process, for plain all-reduce and with gradient accumulation; so do the losses, evaluations,
modeled clock and per-rank data records of process 0's report. Refused configurations exit 2 before anything is
written; a run that fails in one process ends the job (never a hang) with process 0's report holding the runs
before it. Skipped where mpirun or an MPI build of gradsweep is missing."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("GRADSWEEP_BIN", REPO / "build" / "gradsweep"))
MPIRUN = shutil.which("mpirun")
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def mpirun(np_, *args, timeout=60):
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(np_), str(BIN), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **ROOT_OK})


@pytest.fixture(scope="module", autouse=True)
def mpi_build():
    if not BIN.exists():
        pytest.skip(f"{BIN} is not built")
    if MPIRUN is None:
        pytest.skip("mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev; tools/setup.sh)")
    p = mpirun(1, "list")
    if p.returncode != 0:
        pytest.skip(f"gradsweep does not run under mpirun (built without MPI?): {p.stderr.strip()[-300:]}")


def scenario(tmp_path, ranks=6, **extra):
    s = {
        "name": "mpi",
        "model": {"kind": "mlp", "layers": [16, 32, 4], "loss": "cross_entropy"},
        "data": {"kind": "teacher", "batch_per_rank": 8,
                 "teacher": {"in_dim": 16, "hidden": 24, "out_dim": 4, "train_samples": 4096, "eval_samples": 256}},
        "cluster": {"ranks": ranks, "backend": "host"},
        "training": {"steps": 4, "eval_every": 2, "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9}},
        "report": {"trace": True},
        "sweep": {"axes": {"training.accumulation_steps": [1, 3]}},
    }
    s.update(extra)
    path = tmp_path / "mpi.json"
    path.write_text(json.dumps(s))
    return path


def runs_of(out):
    return {r["id"]: r for r in json.loads((out / "report.json").read_text())["runs"]}


def without_measured(x):
    """The report's values that do not depend on wall-clock time (keys naming measured time dropped)."""
    if isinstance(x, dict):
        return {k: without_measured(v) for k, v in x.items() if "measured" not in k}
    if isinstance(x, list):
        return [without_measured(v) for v in x]
    return x


def deterministic(run):
    return {"disposition": run["disposition"], "steps_completed": run["steps_completed"],
            "series": without_measured(run["convergence"]["series"]), "modeled": run["timing"]["modeled"],
            "bytes": run["communication"]["bytes_sent_per_rank_per_step"], "data": without_measured(run["data"]),
            "precision": run["precision"], "replicas_identical": run["replicas_identical"]}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one")
    out = tmp / "out"
    p = subprocess.run([str(BIN), "run", str(scenario(tmp)), "--out", str(out), "--quiet"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return runs_of(out)


@pytest.mark.parametrize("processes", [2, 3])
def test_processes_give_the_one_process_parameters_bit_for_bit(tmp_path, one_process, processes):
    out = tmp_path / "out"
    p = mpirun(processes, "run", str(scenario(tmp_path)), "--out", str(out), "--quiet")
    assert p.returncode == 0, p.stderr
    runs = runs_of(out)
    assert sorted(runs) == sorted(one_process) and len(runs) == 2  # all-reduce, and accumulation over 3
    for rid, ref in one_process.items():
        run = runs[rid]
        assert run["disposition"] == "passed", run["message"]
        got = np.array(run["trace"]["params"], dtype=np.float32)
        want = np.array(ref["trace"]["params"], dtype=np.float32)
        assert got.shape == (4, 6, 16 * 32 + 32 + 32 * 4 + 4)  # [step][rank][param]: every rank's, also remote ones
        assert got.tobytes() == want.tobytes(), rid
        assert not np.array_equal(got[0], got[-1])  # the parameters moved
        assert deterministic(run) == deterministic(ref), rid


def test_only_process_0_writes_anything(tmp_path):
    # Process 0 gets --out A, processes 1 and 2 --out B (mpirun's MPMD form): B must never be created.
    path, a, b = scenario(tmp_path), tmp_path / "A", tmp_path / "B"
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "1", str(BIN), "run", str(path), "--out", str(a),
           "--quiet", ":", "-np", "2", str(BIN), "run", str(path), "--out", str(b), "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**os.environ, **ROOT_OK})
    assert p.returncode == 0, p.stderr
    assert len(runs_of(a)) == 2
    assert not b.exists()


def mpmd(path, out, faulty, processes=3, timeout=60):
    """mpirun's MPMD form: process `faulty` alone gets GRADSWEEP_TEST_FAULTS=fail_read=100 (its 100th sample read
    throws: in the second run, as the first reads 4 steps x 2 ranks x 8 samples = 64 per process)."""
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe"]
    for p in range(processes):
        env = ["env", "GRADSWEEP_TEST_FAULTS=fail_read=100"] if p == faulty else []
        cmd += [*([":"] if p else []), "-np", "1", *env, str(BIN), "run", str(path), "--out", str(out), "--quiet"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **ROOT_OK})


def test_a_run_failing_in_process_0_is_reported_and_ends_the_job(tmp_path):
    out = tmp_path / "out"
    p = mpmd(scenario(tmp_path), out, faulty=0)
    assert p.returncode != 0
    runs = sorted(runs_of(out).values(), key=lambda r: r["index"])
    assert [r["disposition"] for r in runs] == ["passed", "failed"]
    assert "test fault fail_read" in runs[1]["message"]
    assert runs[1]["steps_completed"] < 4


def test_a_run_failing_in_another_process_ends_the_job_without_a_hang(tmp_path):
    out = tmp_path / "out"
    p = mpmd(scenario(tmp_path), out, faulty=2)  # the processes 0 and 1 wait inside a collective: process 2 ends it
    assert p.returncode != 0
    assert re.search(r"process 2: run mpi\.accumulation_steps=3\.r0 failed: rank [45]: test fault fail_read", p.stderr)
    assert [r["disposition"] for r in runs_of(out).values()] == ["passed"]  # the run finished before


@pytest.mark.parametrize("sets,field", [
    (["--set", "sync.kind=local_sgd"], "sync.kind"),
    (["--set", "sync.kind=parameter_server", "--set", "report.trace=false"], "sync.kind"),
    (["--set", "compression.kind=topk"], "compression.kind"),
    (["--set", "cluster.backend=cuda"], "cluster.backend"),
    (["--set", "cluster.ranks=5"], "cluster.ranks"),
])
def test_refused_configuration_exits_2_and_writes_nothing(tmp_path, sets, field):
    out = tmp_path / "out"
    p = mpirun(2, "run", str(scenario(tmp_path)), "--out", str(out), "--quiet", *sets)
    assert p.returncode == 2, p.stderr
    assert f"mpi.json: {field}: " in p.stderr
    assert not out.exists()


def test_ranks_not_divisible_by_processes_is_refused(tmp_path):
    out = tmp_path / "out"
    p = mpirun(4, "run", str(scenario(tmp_path)), "--out", str(out), "--quiet")
    assert p.returncode == 2, p.stderr
    assert "cluster.ranks: 6 ranks cannot be split evenly over 4 processes" in p.stderr
    assert not out.exists()
