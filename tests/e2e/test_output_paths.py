"""QA faults on gradsweep's inputs and outputs: a FIFO, folder or device at report.json / runs.jsonl (refused by name
before any run, never opened: a regression would block, so every call has a timeout), mistyped run fields read back by
--resume, non-UTF-8 bytes in argv, unbounded error texts, NUL bytes in JSON and the --filter length cap."""
import hashlib
import json
import os
import signal
import subprocess

import pytest

from test_cli import BIN, REPO, scenario, write

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} is not built")


def gs(*args, timeout=120):
    """Runs gradsweep with bytes arguments allowed; stdout/stderr as bytes."""
    args = [a if isinstance(a, bytes) else str(a) for a in args]
    return subprocess.run([str(BIN), *args], capture_output=True, timeout=timeout)


def two_runs(tmp_path):
    return write(tmp_path, scenario(steps=5, axes={"training.accumulation_steps": [1, 2]}))


@pytest.mark.parametrize("name", ["report.json", "runs.jsonl"])
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_fifo_or_folder_at_an_output_file_is_refused_before_any_run(tmp_path, name, kind):
    path = two_runs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    target = out / name
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    for extra in ([], ["--resume"]):
        p = gs("run", path, "--out", out, "--quiet", *extra, timeout=60)  # a FIFO opened would block: timeout fails
        err = p.stderr.decode()
        assert p.returncode == (3 if not extra else p.returncode), err
        assert p.returncode in (2, 3) and str(target) in err and "nothing was run" in err, (extra, err)
        assert "not a regular file" in err, err
    assert (out / name).exists() and not (out / name).is_file()  # left as it was
    assert not (out / ("runs.jsonl" if name == "report.json" else "report.json")).is_file()  # nothing written


def finished(tmp_path):
    path = two_runs(tmp_path)
    out = tmp_path / "out"
    p = gs("run", path, "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    return path, out


@pytest.mark.parametrize("field,value,expected", [
    ("disposition", 5, "expected a string"),
    ("index", "zero", "expected an integer >= 0"),
    ("index", None, "expected an integer >= 0"),
    ("id", 7, "expected a string"),
])
def test_resume_names_a_mistyped_run_field_of_the_report(tmp_path, field, value, expected):
    path, out = finished(tmp_path)
    doc = json.loads((out / "report.json").read_text())
    doc["runs"][1][field] = value
    (out / "report.json").write_text(json.dumps(doc))
    (out / "runs.jsonl").unlink()  # the report alone is read back
    p = gs("run", path, "--out", out, "--resume", "--quiet")
    err = p.stderr.decode()
    assert p.returncode == 2, err
    assert f"{out / 'report.json'}: $.runs[1].{field}: {expected}" in err, err
    assert "json.exception" not in err


@pytest.mark.parametrize("field,value", [("index", None), ("index", "zero"), ("disposition", 5), ("id", [1])])
def test_resume_skips_a_mistyped_journal_line_like_a_cut_one_and_reruns_that_run(tmp_path, field, value):
    path, out = finished(tmp_path)
    lines = (out / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 3  # identity + 2 runs
    bad = json.loads(lines[2])
    bad[field] = value
    lines[2] = json.dumps(bad)
    (out / "runs.jsonl").write_text("\n".join(lines) + "\n")
    (out / "report.json").unlink()  # the journal alone is read back
    p = gs("run", path, "--out", out, "--resume")
    err = p.stderr.decode()
    assert p.returncode == 0, err
    assert "1 to run (1 already in the report)" in err, err
    runs = json.loads((out / "report.json").read_text())["runs"]
    assert [r["index"] for r in runs] == [0, 1]


def test_a_non_utf8_byte_in_out_writes_a_valid_utf8_report(tmp_path):
    path = os.fsencode(tmp_path) + b"/s\xfe.json"  # the scenario path too
    with open(path, "w") as f:
        json.dump(scenario(steps=5, axes={"training.accumulation_steps": [1, 2]}), f)
    out = os.fsencode(tmp_path) + b"/out\xff"
    p = gs("run", path, "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    text = open(out + b"/report.json", "rb").read().decode("utf-8")  # strict: raises on invalid UTF-8
    doc = json.loads(text)
    assert len(doc["runs"]) == 2
    argv = " ".join(doc["context"]["argv"])
    assert "out\ufffd" in argv and "s\ufffd.json" in argv, argv  # the bytes 0xff, 0xfe replaced by U+FFFD
    for line in open(out + b"/runs.jsonl", "rb").read().splitlines():
        json.loads(line.decode("utf-8"))


def test_error_texts_built_from_huge_input_are_bounded(tmp_path):
    path = two_runs(tmp_path)
    nines = "9" * 5000
    p = gs("validate", path, "--set", f"training.steps={nines}")
    err = p.stderr.decode() + p.stdout.decode()
    assert p.returncode == 2, err
    assert "training.steps" in err and "..." in err and len(err) < 1000, err
    # A 5000-digit number in a scenario: bounded, and at its line:col like every syntax error.
    doc = '{\n  "name": "x",\n  "training": {"steps": ' + nines + '}\n}\n'
    big = write(tmp_path, doc, "big.json")
    at = doc.index(nines)
    line = doc.count("\n", 0, at) + 1
    col = at - doc.rfind("\n", 0, at)
    p = gs("validate", big)
    err = p.stderr.decode() + p.stdout.decode()
    assert p.returncode == 2, err
    assert f"{big}:{line}:{col}: " in err and "number overflow" in err, err
    assert len(err) < 1000, len(err)


def test_a_nul_byte_in_json_is_refused_at_its_line_and_column(tmp_path):
    text = b'{"name": "x",\n "model": 1}\x00 garbage {{{'
    f = tmp_path / "f.json"
    f.write_bytes(text)
    at = text.index(b"\x00")
    line, col = text.count(b"\n", 0, at) + 1, at - text.rfind(b"\n", 0, at)
    p = gs("validate", f)
    err = p.stderr.decode() + p.stdout.decode()
    assert p.returncode == 2, err
    assert f"{f}:{line}:{col}: " in err and "NUL" in err, err
    # A hardware profile goes through the same loader.
    p = gs("validate", two_runs(tmp_path), "--hardware", f)
    err = p.stderr.decode() + p.stdout.decode()
    assert p.returncode == 2 and f"{f}:{line}:{col}: " in err and "NUL" in err, err


def test_filter_longer_than_512_characters_is_refused_not_crashed(tmp_path):
    path = two_runs(tmp_path)
    ok = "x?" * 256  # 512 characters, matches the empty string: every run
    p = gs("run", path, "--dry-run", "--filter", ok)
    assert p.returncode == 0, p.stderr
    assert "2 of 2 runs match" in p.stdout.decode()
    for pattern in ["x?" * 256 + "y", "a" * 100000, "(" * 20000 + "a" + ")" * 20000]:
        p = gs("run", path, "--dry-run", "--filter", pattern)
        err = p.stderr.decode()
        assert p.returncode == 2, (p.returncode, err[:300])
        assert f"at most 512 characters is accepted, got {len(pattern)} characters" in err and len(err) < 400, err


def test_a_backtracking_filter_ends_with_the_right_answer(tmp_path):
    """QA: --filter '(.*)*x' spun for ever in std::regex. RE2 matches without backtracking: no id has an 'x' (none of
    the 2 runs match), every id ends in r0 (both match); timeouts fail the test if it hangs."""
    path = two_runs(tmp_path)
    ids = [line.split()[1] for line in gs("run", path, "--dry-run").stdout.decode().splitlines()[1:]]
    assert len(ids) == 2 and not any("x" in i for i in ids), ids
    p = gs("run", path, "--dry-run", "--filter", "(.*)*x", timeout=30)
    err = p.stderr.decode()
    assert p.returncode == 2 and '--filter "(.*)*x": 0 of 2 runs match; ids look like ' in err, err
    p = gs("run", path, "--dry-run", "--filter", "((.*)*)*r0$", timeout=30)
    assert p.returncode == 0 and "2 of 2 runs match" in p.stdout.decode(), p.stderr
    # What RE2 does not take is refused by name, with RE2's reason, before any run.
    p = gs("run", path, "--out", tmp_path / "out", "--filter", "(r)\\1", timeout=30)
    err = p.stderr.decode()
    assert p.returncode == 2 and '--filter: not an RE2 pattern: "(r)\\1"' in err, err
    assert "\\1 (backreferences are not supported" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_first_signal_before_the_report_exits_at_once(tmp_path, sig, code):
    """QA: the first SIGTERM only set the stop flag, so a start-up that never reached a run (a hung --filter) could
    not be stopped. Before the report is open a first signal exits at once with 128 + signal, writing nothing."""
    path = two_runs(tmp_path)
    out = tmp_path / "out"
    env = dict(os.environ, GRADSWEEP_TEST_FAULTS="stop_before_report=1")
    proc = subprocess.Popen([str(BIN), "run", str(path), "--out", str(out)], env=env, stderr=subprocess.PIPE)
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), f"child ended instead of stopping (status {status})"
    proc.send_signal(sig)
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert b"stopped by a signal before any run started; nothing was run" in err, err
    assert not out.exists(), list(out.iterdir())


def test_resume_compares_set_values_by_their_bytes(tmp_path):
    """QA: a --set value with bytes that are not UTF-8 is written to the report as U+FFFD, so --resume with the very
    same bytes was refused (the text read back differs from the bytes given) and two different such bytes would read
    alike. The report and the journal carry a SHA-256 of the --set bytes: the same bytes resume, other bytes are
    refused, and a report without the fingerprint (older versions) is compared by its text."""
    path = two_runs(tmp_path)
    shipped = REPO / "scenarios" / "hardware" / "h100-sxm-8.json"
    hw = tmp_path.as_posix().encode() + b"/hw"
    os.makedirs(hw, exist_ok=True)
    for name in (b"h\xff.json", b"h\xfe.json"):
        with open(hw + b"/" + name, "wb") as f:
            f.write(shipped.read_bytes())
    same, other = b"cluster.hardware=" + hw + b"/h\xff.json", b"cluster.hardware=" + hw + b"/h\xfe.json"
    out = tmp_path / "out"
    p = gs("run", path, "--out", out, "--quiet", "--set", same)
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "report.json").read_text())
    # The fingerprint is SHA-256 of each value's bytes followed by a NUL.
    assert report["context"]["overrides_sha256"] == hashlib.sha256(same + b"\0").hexdigest()
    p = gs("run", path, "--out", out, "--quiet", "--resume", "--set", same)
    assert p.returncode == 0, p.stderr
    assert len(json.loads((out / "report.json").read_text())["runs"]) == 2
    p = gs("run", path, "--out", out, "--quiet", "--resume", "--set", other)
    err = p.stderr.decode()
    assert p.returncode == 2 and "resume with the same overrides" in err, err
    assert "the same text: they differ in bytes that are not UTF-8" in err, err
    # An older report (no fingerprint, no journal): the text as written is compared, so the same bytes resume.
    del report["context"]["overrides_sha256"]
    (out / "report.json").write_text(json.dumps(report))
    (out / "runs.jsonl").unlink()
    p = gs("run", path, "--out", out, "--quiet", "--resume", "--set", same)
    assert p.returncode == 0, p.stderr


def test_relative_file_paths_in_a_scenario_are_taken_from_its_folder(tmp_path):
    """Every path field of a scenario (model.init.from, data.path, cluster.hardware) given relative in the file is
    taken from the file's folder, wherever gradsweep runs; given by --set, from the current folder. A built-in
    hardware profile name stays a name."""
    scen, hw, elsewhere = tmp_path / "scen", tmp_path / "hw", tmp_path / "elsewhere"
    for d in (scen, hw, elsewhere):
        d.mkdir()
    profile = REPO / "scenarios" / "hardware" / "h100-sxm-8.json"
    (hw / "mine.json").write_text(profile.read_text())
    (scen / "beside.json").write_text(profile.read_text())
    for given, resolved in (("../hw/mine.json", hw / "mine.json"), ("beside.json", scen / "beside.json"),
                            ("h100-sxm-8", "h100-sxm-8")):
        doc = scenario(name="rel", steps=2, axes={})
        doc["cluster"]["hardware"] = given
        path = write(scen, doc)
        out = tmp_path / f"out_{len(str(resolved))}"
        p = subprocess.run([str(BIN), "run", str(path), "--out", str(out), "--quiet"], capture_output=True,
                           text=True, cwd=elsewhere, timeout=300)
        assert p.returncode == 0, (given, p.stderr)
        run = json.loads((out / "report.json").read_text())["runs"][0]
        assert run["config"]["cluster"]["hardware"] == str(resolved), given
    # --set: from the current folder (tmp_path), not the scenario's.
    p = subprocess.run([str(BIN), "validate", str(path), "--set", "cluster.hardware=hw/mine.json"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    # data.path: the folder the error names is the scenario folder's "fm", not the current folder's.
    doc = scenario(name="fm", steps=2, axes={})
    doc["model"]["layers"] = [784, 10]
    doc["data"] = {"kind": "fashion_mnist", "batch_per_rank": 8, "path": "fm"}
    p = subprocess.run([str(BIN), "validate", str(write(scen, doc))], capture_output=True, text=True,
                       cwd=elsewhere, timeout=120)
    assert p.returncode == 2 and f"{scen}/fm" in p.stderr and f"{elsewhere}/fm" not in p.stderr, p.stderr
