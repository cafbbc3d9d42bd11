"""End-to-end tests of sweeps split over machines (docs/cluster.md): `gradsweep run --shard K/N` runs the runs whose
id hashes to slice K (FNV-1a 64 of the id modulo N, plus 1, computed here apart from the binary) into
OUT/shard-K-of-N/; `gradsweep merge` joins the slices into a report whose runs equal the unsharded sweep's (timings
aside), refuses slices of another scenario or --set values, runs of one id that differ, and missing runs; a slice
killed mid-sweep is finished with --resume and then merges."""
import fcntl
import json
import os
import re
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


def fnv1a64(text):
    """FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3) over the UTF-8 bytes."""
    h = 0xcbf29ce484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001b3) % 2**64
    return h


def slice_of(run_id, n):
    return fnv1a64(run_id) % n + 1


def test_reference_hash_matches_the_published_vectors():
    assert [fnv1a64(s) for s in ("", "a", "foobar")] == [0xcbf29ce484222325, 0xaf63dc4c8601ec8c, 0x85944171f73967e8]


def scenario(name="e2e", steps=30, axes=None, **extra):
    s = {
        "name": name,
        "model": {"kind": "mlp", "layers": [16, 32, 4], "loss": "cross_entropy"},
        "data": {"kind": "teacher", "batch_per_rank": 8,
                 "teacher": {"in_dim": 16, "hidden": 24, "out_dim": 4, "train_samples": 4096, "eval_samples": 256}},
        "cluster": {"ranks": 2},
        "training": {"steps": steps, "eval_every": 10, "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9},
                     "target": {"metric": "eval_accuracy", "value": 0.3}},
        "sweep": {"axes": axes if axes is not None else {"training.accumulation_steps": [1, 2],
                                                          "cluster.ranks": [1, 2]}},
    }
    s.update(extra)
    return s


def write(tmp_path, doc, name="s.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def run(*args, **kw):
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=600, **kw)


def load(path):
    report = json.loads(Path(path).read_text())
    jsonschema.validate(report, SCHEMA)
    return report


def run_slices(path, out, n, *extra):
    for k in range(1, n + 1):
        p = run("run", path, "--shard", f"{k}/{n}", "--out", out, "--quiet", *extra)
        assert p.returncode == 0, p.stderr


def test_a_finished_slice_run_again_counts_only_its_own_runs_to_resume(tmp_path):
    doc = scenario(steps=4)
    path = write(tmp_path, doc)
    ids = [f"e2e.accumulation_steps={a}.ranks={r}.r0" for a in (1, 2) for r in (1, 2)]
    mine = [i for i in ids if slice_of(i, 2) == 1]
    assert run("run", path, "--shard", "1/2", "--out", tmp_path / "o", "--quiet").returncode == 0
    p = run("run", path, "--shard", "1/2", "--out", tmp_path / "o", "--quiet")
    assert p.returncode == 2, p.stderr
    # The slice is finished: --resume would run none of the other slice's runs.
    n = len(mine)
    assert f"keep its {n} finished run{'' if n == 1 else 's'}, run the 0 missing" in p.stderr, p.stderr


def test_dry_run_lists_the_slice_the_hash_gives(tmp_path):
    path = write(tmp_path, scenario(axes={"training.optimizer.lr": [0.1, 0.2, 0.3, 0.4, 0.5], "cluster.ranks": [1, 2]}))
    everything = run("run", path, "--dry-run", "--out", tmp_path / "o")
    assert everything.returncode == 0, everything.stderr
    listed = re.compile(r"^  \[\d+\] (\S+)  ", re.M)
    ids = listed.findall(everything.stdout)
    assert len(ids) == 10
    seen = []
    for k in (1, 2, 3):
        p = run("run", path, "--dry-run", "--shard", f"{k}/3", "--out", tmp_path / "o")
        assert p.returncode == 0, p.stderr
        mine = listed.findall(p.stdout)
        assert mine == [i for i in ids if slice_of(i, 3) == k]
        assert f"--shard {k}/3: {len(mine)} of 10 runs in this slice -> {tmp_path / 'o'}/shard-{k}-of-3" in p.stdout
        seen += mine
    assert sorted(seen) == sorted(ids)
    assert not (tmp_path / "o").exists()
    # A third repeat adds runs but moves none: the runs of each slice stay in it.
    more = write(tmp_path, scenario(sweep={"axes": {"training.optimizer.lr": [0.1, 0.2, 0.3, 0.4, 0.5],
                                                    "cluster.ranks": [1, 2]}, "repeats": 3}), "more.json")
    for k in (1, 2, 3):
        before = listed.findall(run("run", path, "--dry-run", "--shard", f"{k}/3", "--out", tmp_path / "o").stdout)
        after = listed.findall(run("run", more, "--dry-run", "--shard", f"{k}/3", "--out", tmp_path / "o").stdout)
        assert all(slice_of(i, 3) == k for i in after) and any(i.endswith(".r2") for i in after)
        assert set(before) <= set(after), k


@pytest.mark.parametrize("bad, why", [("0/2", "K must be from 1 to N = 2, got 0"),
                                      ("3/2", "K must be from 1 to N = 2, got 3"),
                                      ("a/b", "digits only"),
                                      ("1/0", "N must be from 1 to 1000000, got 0"),
                                      ("2", "expected K/N")])
def test_a_bad_shard_exits_2_before_any_run(tmp_path, bad, why):
    out = tmp_path / "out"
    p = run("run", write(tmp_path, scenario()), "--shard", bad, "--out", out)
    assert p.returncode == 2, p.stderr
    assert f'--shard "{bad}": ' in p.stderr and why in p.stderr, p.stderr
    assert not out.exists()


def test_three_slices_merge_into_the_unsharded_report(tmp_path, comparable):
    path = write(tmp_path, scenario())
    full, sliced, merged = tmp_path / "full", tmp_path / "sliced", tmp_path / "merged"
    assert run("run", path, "--out", full, "--quiet").returncode == 0
    whole = load(full / "report.json")
    run_slices(path, sliced, 3)
    for k in (1, 2, 3):
        part = load(sliced / f"shard-{k}-of-3" / "report.json")
        expected = [r["id"] for r in whole["runs"] if slice_of(r["id"], 3) == k]
        assert [r["id"] for r in part["runs"]] == expected  # slice 1 of these 4 ids is empty: an empty report
        assert part["shard"] == {"index": k, "count": 3, "sweep_runs": 4, "ids": expected}
    p = run("merge", sliced, "--out", merged)
    assert p.returncode == 0, p.stderr
    assert f"merged 3 slice reports of 3 slices: 4 runs (0 given twice, the same), 0 run files copied -> " \
           f"{merged}/report.json" in p.stderr
    joined = load(merged / "report.json")
    assert "shard" not in joined
    assert joined["merged"]["shard_count"] == 3 and joined["merged"]["missing"] == []
    assert comparable(joined) == comparable(whole)
    for key in ("scenario_name", "axes", "repeats", "schema_version"):
        assert joined[key] == whole[key]
    # The merged report is one that the tools read like any other.
    c = subprocess.run([sys.executable, str(REPO / "tools" / "compare.py"), str(merged / "report.json")],
                       capture_output=True, text=True, timeout=300)
    assert c.returncode == 0, c.stderr
    assert all(r["id"] in c.stdout for r in whole["runs"]), c.stdout


def test_a_killed_slice_resumes_and_then_merges(tmp_path, comparable):
    doc = scenario(steps=60)
    path = write(tmp_path, doc)
    full, sliced, merged = tmp_path / "full", tmp_path / "sliced", tmp_path / "merged"
    assert run("run", path, "--out", full, "--quiet").returncode == 0
    whole = load(full / "report.json")
    sizes = {k: sum(slice_of(r["id"], 3) == k for r in whole["runs"]) for k in (1, 2, 3)}
    big = max(sizes, key=sizes.get)
    assert sizes[big] >= 2
    for k in (1, 2, 3):
        if k == big:
            continue
        assert run("run", path, "--shard", f"{k}/3", "--out", sliced, "--quiet").returncode == 0
    # The biggest slice stops itself after step 1 of its second run and is killed there.
    env = dict(os.environ, GRADSWEEP_TEST_FAULTS="stop_at=2:1")
    proc = subprocess.Popen([str(BIN), "run", str(path), "--shard", f"{big}/3", "--out", str(sliced), "--quiet"],
                            env=env)
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), f"child ended instead of stopping (status {status})"
    try:
        p = run("merge", sliced, "--out", merged)  # its lock is held: the slice is being written
        assert p.returncode == 2 and f"a gradsweep is writing {sliced}/shard-{big}-of-3" in p.stderr, p.stderr
    finally:
        proc.kill()
        proc.wait()
    p = run("merge", sliced, "--out", merged)
    assert p.returncode == 2, p.stderr
    # Its report.json holds the runs finished so far (it may lag the journal by the run just finished).
    done = len(load(sliced / f"shard-{big}-of-3" / "report.json")["runs"])
    assert done <= 1
    assert f"slice {big} of 3 (" in p.stderr and f"lacks {sizes[big] - done} of its {sizes[big]} runs" in p.stderr
    assert f"--shard {big}/3 --resume" in p.stderr
    assert not (merged / "report.json").exists()
    p = run("run", path, "--shard", f"{big}/3", "--out", sliced, "--resume", "--quiet")
    assert p.returncode == 0, p.stderr
    p = run("merge", sliced, "--out", merged)
    assert p.returncode == 0, p.stderr
    assert comparable(load(merged / "report.json")) == comparable(whole)


def test_an_interrupted_run_is_named_until_resumed(tmp_path):
    """A slice stopped by SIGTERM (a batch system's time limit) keeps its stopped run as `interrupted`: merge names it."""
    path = write(tmp_path, scenario(steps=40))
    sliced, merged = tmp_path / "sliced", tmp_path / "merged"
    ids = [f"e2e.accumulation_steps={a}.ranks={r}.r0" for a in (1, 2) for r in (1, 2)]
    sizes = {k: sum(slice_of(i, 3) == k for i in ids) for k in (1, 2, 3)}
    big = max(sizes, key=sizes.get)
    for k in (1, 2, 3):
        if k != big:
            assert run("run", path, "--shard", f"{k}/3", "--out", sliced, "--quiet").returncode == 0
    env = dict(os.environ, GRADSWEEP_TEST_FAULTS="stop_at=2:5")
    proc = subprocess.Popen([str(BIN), "run", str(path), "--shard", f"{big}/3", "--out", str(sliced), "--quiet"],
                            env=env, stderr=subprocess.PIPE, text=True)
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), f"child ended instead of stopping (status {status})"
    proc.send_signal(signal.SIGTERM)
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    part = load(sliced / f"shard-{big}-of-3" / "report.json")
    stopped = [r["id"] for r in part["runs"] if r["disposition"] == "interrupted"]
    assert len(stopped) == 1 and len(part["runs"]) == 2
    p = run("merge", sliced, "--out", merged)
    assert p.returncode == 2, p.stderr
    assert f"1 of its {sizes[big]} runs was interrupted: {stopped[0]}" in p.stderr
    assert f"lacks {sizes[big] - 2} of its {sizes[big]} runs" in p.stderr
    p = run("merge", sliced, "--out", merged, "--allow-missing")
    assert p.returncode == 0, p.stderr
    assert f"note: merge: interrupted run {stopped[0]}" in p.stderr
    joined = load(merged / "report.json")
    assert joined["merged"]["interrupted"] == stopped and len(joined["merged"]["missing"]) == sizes[big] - 2
    assert run("run", path, "--shard", f"{big}/3", "--out", sliced, "--resume", "--quiet").returncode == 0
    p = run("merge", sliced, "--out", tmp_path / "again")
    assert p.returncode == 0, p.stderr
    assert load(tmp_path / "again" / "report.json")["merged"]["interrupted"] == []


def test_merge_refuses_slices_of_another_sweep(tmp_path):
    path = write(tmp_path, scenario(steps=10))
    a, b = tmp_path / "a", tmp_path / "b"
    run_slices(path, a, 2)
    assert run("run", path, "--shard", "2/2", "--out", b, "--quiet", "--set", "training.steps=11").returncode == 0
    p = run("merge", a / "shard-1-of-2", b / "shard-2-of-2", "--out", tmp_path / "m")
    assert p.returncode == 2, p.stderr
    assert "is not a slice of the same sweep as" in p.stderr and "the --set values (context.overrides) differs" in p.stderr
    other = write(tmp_path, scenario(steps=12), "t.json")  # same name and ids, another file
    assert run("run", other, "--shard", "2/2", "--out", tmp_path / "c", "--quiet").returncode == 0
    p = run("merge", a / "shard-1-of-2", tmp_path / "c", "--out", tmp_path / "m")
    assert p.returncode == 2, p.stderr
    assert "the scenario file (context.scenario_sha256) differs" in p.stderr
    assert run("run", path, "--shard", "1/3", "--out", tmp_path / "d", "--quiet").returncode == 0
    p = run("merge", a / "shard-1-of-2", tmp_path / "d", "--out", tmp_path / "m")
    assert p.returncode == 2 and "N of --shard K/N (shard.count; merge the slices of one N) differs: 2 in" in p.stderr, p.stderr
    # A whole sweep's report is no slice.
    assert run("run", path, "--out", tmp_path / "whole", "--quiet").returncode == 0
    p = run("merge", a / "shard-1-of-2", tmp_path / "whole", "--out", tmp_path / "m")
    assert p.returncode == 2 and "$.shard: not a slice's report" in p.stderr, p.stderr
    assert not (tmp_path / "m" / "report.json").exists()


def test_duplicates_must_agree_and_missing_runs_need_allow_missing(tmp_path):
    path = write(tmp_path, scenario(steps=10))
    a, b, m = tmp_path / "a", tmp_path / "b", tmp_path / "m"
    run_slices(path, a, 2)
    # The same slice run again elsewhere: the same results with other wall-clock times, accepted once each.
    assert run("run", path, "--shard", "2/2", "--out", b, "--quiet").returncode == 0
    again = load(b / "shard-2-of-2" / "report.json")
    first = load(a / "shard-2-of-2" / "report.json")
    assert again["runs"][0]["wall_s"] != first["runs"][0]["wall_s"]
    p = run("merge", a, b, "--out", m)
    assert p.returncode == 0, p.stderr
    assert f"4 runs ({len(first['runs'])} given twice, the same)" in p.stderr
    # A run of one id with another result is refused, naming where it differs.
    again["runs"][0]["convergence"]["final"]["train_loss"] += 1.0
    (b / "shard-2-of-2" / "report.json").write_text(json.dumps(again))
    p = run("merge", a, b, "--out", tmp_path / "m2")
    assert p.returncode == 2, p.stderr
    assert f"run {again['runs'][0]['id']} is in" in p.stderr
    assert "different results (first at $.convergence.final.train_loss" in p.stderr
    # A missing slice is named; --allow-missing writes the rest and lists it.
    p = run("merge", a / "shard-2-of-2", "--out", tmp_path / "m3")
    assert p.returncode == 2 and "slice 1 of 2 is not among the sources" in p.stderr, p.stderr
    p = run("merge", a / "shard-2-of-2", "--out", tmp_path / "m3", "--allow-missing")
    assert p.returncode == 0, p.stderr
    partial = load(tmp_path / "m3" / "report.json")
    assert partial["merged"]["missing_shards"] == [1]
    assert [r["id"] for r in partial["runs"]] == [r["id"] for r in first["runs"]]
    # The merged report keeps the scenario's fingerprint: a --resume into it runs what it lacks.
    p = run("run", path, "--out", tmp_path / "m3", "--resume", "--quiet")
    assert p.returncode == 0, p.stderr
    assert sorted(r["id"] for r in load(tmp_path / "m3" / "report.json")["runs"]) == \
        sorted(r["id"] for r in load(m / "report.json")["runs"])
    # A merged report is never replaced.
    p = run("merge", a, "--out", m)
    assert p.returncode == 2 and "report.json exists" in p.stderr, p.stderr


def test_merge_copies_the_run_files(tmp_path):
    doc = scenario(steps=5)
    doc["report"] = {"timeline": True}
    path = write(tmp_path, doc)
    sliced, merged = tmp_path / "sliced", tmp_path / "merged"
    run_slices(path, sliced, 2, "--resume")  # --resume on a slice not yet started: a plain run
    p = run("merge", sliced, "--out", merged)
    assert p.returncode == 0, p.stderr
    joined = load(merged / "report.json")
    assert len(joined["runs"]) == 4
    for r in joined["runs"]:
        name = r["timeline"]["file"]
        k = slice_of(r["id"], 2)
        assert (merged / name).read_bytes() == (sliced / f"shard-{k}-of-2" / name).read_bytes()
    assert "4 run files copied" in p.stderr


def test_merge_leaves_no_lock_file_and_never_removes_one_that_is_held(tmp_path):
    path = write(tmp_path, scenario(steps=5))
    sliced, merged = tmp_path / "sliced", tmp_path / "merged"
    run_slices(path, sliced, 2)
    p = run("merge", sliced, "--out", merged)
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in merged.iterdir()) == ["report.json"]
    # Refused (a report is never replaced) after it locked the folder: its lock file goes too.
    p = run("merge", sliced, "--out", merged)
    assert p.returncode == 2 and "report.json exists" in p.stderr, p.stderr
    assert sorted(f.name for f in merged.iterdir()) == ["report.json"]
    # A lock another live process holds stays where it is, the same file.
    other = tmp_path / "other"
    other.mkdir()
    with open(other / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        p = run("merge", sliced, "--out", other)
        assert p.returncode == 2 and f"another gradsweep is writing {other}" in p.stderr, p.stderr
        assert (other / ".lock").exists() and os.stat(other / ".lock").st_ino == os.fstat(held.fileno()).st_ino
    assert sorted(f.name for f in other.iterdir()) == [".lock"]
    # Once let go, the merge takes that folder and leaves it without a lock file.
    p = run("merge", sliced, "--out", other)
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in other.iterdir()) == ["report.json"]


def test_a_resume_into_an_allow_missing_merge_keeps_its_merged_block(tmp_path):
    """`merge --allow-missing` of slice 2 of 2 lists slice 1 as missing; `run --resume` into the merged folder runs
    slice 1's runs (those whose id hashes to 1, computed here) and keeps the merged block as the merge wrote it, with
    `resumed` naming the runs the resume completed, in the sweep's order. A second resume has nothing to run and
    changes nothing of it."""
    path = write(tmp_path, scenario(steps=4))
    sliced, merged = tmp_path / "sliced", tmp_path / "merged"
    assert run("run", path, "--shard", "2/2", "--out", sliced, "--quiet").returncode == 0
    p = run("merge", sliced / "shard-2-of-2", "--out", merged, "--allow-missing")
    assert p.returncode == 0, p.stderr
    before = load(merged / "report.json")["merged"]
    assert before["missing_shards"] == [1] and "resumed" not in before
    p = run("run", path, "--out", merged, "--resume", "--quiet")
    assert p.returncode == 0, p.stderr
    report = load(merged / "report.json")
    ids = [r["id"] for r in report["runs"]]
    assert len(ids) == 4 and [r["index"] for r in report["runs"]] == [0, 1, 2, 3]
    first_slice = [i for i in ids if slice_of(i, 2) == 1]
    assert first_slice, ids  # the hash puts some of the 4 runs in slice 1 (else the merge would lack nothing)
    assert report["merged"] == dict(before, resumed=first_slice)
    assert all(r["disposition"] == "passed" for r in report["runs"])
    assert run("run", path, "--out", merged, "--resume", "--quiet").returncode == 0
    assert load(merged / "report.json")["merged"] == dict(before, resumed=first_slice)
