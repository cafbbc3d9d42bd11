"""The one report loader (tools/report_lib.load_report) and every tool that reads reports through it: bad files of each
kind give `error: <file>: ...` on stderr, nothing on stdout, exit 2 and no traceback, in tools/compare.py and
tools/plot.py alike; no tool reads a report JSON file any other way. Extend: a new kind of bad file is one entry in
BAD_FILES (its text or bytes and the words the error must contain)."""
import json
import os
import re
import subprocess
import sys

import pytest

import report_lib as rl
from tools_test_paths import EXAMPLE, REPO_ROOT, TOOLS

READERS = ("compare.py", "plot.py")


def run_tool(tool, *args, env=None):
    return subprocess.run([sys.executable, str(TOOLS / tool), *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=str(REPO_ROOT), env=env)


def assert_refused(result, path, *parts):
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"error: {path}: "), result.stderr
    for part in parts:
        assert part in result.stderr, result.stderr


def nested(levels):
    """A report whose runs is `levels` lists deep: the top object is level 1, so the deepest list is level levels+1."""
    return '{"schema_version": 1, "runs": ' + "[" * levels + "]" * levels + "}"


NOT_UTF8 = b'{"schema_version": 1, "runs": [], "note": "caf\xe9"}'
NOT_UTF8_OFFSET = NOT_UTF8.index(bytes([0xE9]))

# name -> (file content, words the error must contain). Words come from the input: offsets, sizes, kinds.
BAD_FILES = {
    # 2000 levels: beyond what Python's json parser can recurse (the fault the QA engineer found: RecursionError).
    "nested 2000 deep": (nested(2000), ["$: nested too deeply to parse"]),
    # 100 levels parse, but would exhaust the stack of whatever walks them next (jsonschema, the tools).
    "nested 100 deep": (nested(100), ["$.runs[0][0][0][0][0]...: nested deeper than 64 levels"]),
    "not UTF-8": (NOT_UTF8, [f"not UTF-8 text: byte 0xe9 at offset {NOT_UTF8_OFFSET}"]),
    "a JSON list": ("[1, 2]", ["$: expected a gradsweep report", "found a list"]),
    "a JSON string": ('"report"', ["$: expected a gradsweep report", "found a string"]),
    "schema_version a string": ('{"schema_version": "1", "runs": []}',
                                ["$.schema_version: expected an integer, found a string"]),
    "schema_version a boolean": ('{"schema_version": true, "runs": []}',
                                 ["$.schema_version: expected an integer, found a boolean"]),
    "schema_version 0": ('{"schema_version": 0, "runs": []}', ["$.schema_version: 0 is not a version"]),
    "schema_version 2": ('{"schema_version": 2, "runs": []}', ["$.schema_version: 2 is newer than this tool"]),
    "runs missing": ('{"schema_version": 1}', ["$.runs: missing"]),
    "runs an object": ('{"schema_version": 1, "runs": {}}', ["$.runs: expected a list of runs, found an object"]),
    # An integer of 5000 digits: Python refuses to convert it (ValueError, not JSONDecodeError).
    "5000-digit integer": ('{"schema_version": 1, "runs": [], "n": 1' + "0" * 4999 + "}", ["invalid JSON"]),
    "empty file": ("", ["invalid JSON"]),
}


@pytest.mark.parametrize("tool", READERS)
@pytest.mark.parametrize("case", list(BAD_FILES), ids=list(BAD_FILES))
def test_bad_file_is_refused_by_every_reader(tmp_path, tool, case):
    content, parts = BAD_FILES[case]
    path = tmp_path / "bad.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    assert_refused(run_tool(tool, path, "--out", tmp_path / "figs") if tool == "plot.py" else run_tool(tool, path),
                   path, *parts)
    assert not list(tmp_path.rglob("*.png"))


@pytest.mark.parametrize("tool", READERS)
def test_folder_missing_file_and_fifo_are_refused(tmp_path, tool):
    assert_refused(run_tool(tool, tmp_path), tmp_path, "cannot read: a folder")
    missing = tmp_path / "nope.json"
    assert_refused(run_tool(tool, missing), missing, "cannot read: No such file or directory")
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # opening it would block until a writer comes: refused before it is opened
    assert_refused(run_tool(tool, fifo), fifo, "cannot read: not a regular file")


@pytest.mark.parametrize("tool", READERS)
def test_size_cap(tmp_path, tool):
    """A report one byte over GRADSWEEP_REPORT_MAX_BYTES is refused naming its size; at the cap it is read."""
    path = tmp_path / "report.json"
    path.write_bytes(EXAMPLE.read_bytes())
    size = path.stat().st_size
    env = dict(os.environ, GRADSWEEP_REPORT_MAX_BYTES=str(size - 1))
    args = [path, "--out", tmp_path / "figs"] if tool == "plot.py" else [path]
    assert_refused(run_tool(tool, *args, env=env), path, f"{size} bytes, more than the {size - 1} bytes")
    env["GRADSWEEP_REPORT_MAX_BYTES"] = str(size)
    result = run_tool(tool, *args, env=env)
    assert result.returncode == 0, result.stderr


def test_default_cap_is_one_gib(monkeypatch):
    monkeypatch.delenv("GRADSWEEP_REPORT_MAX_BYTES", raising=False)
    assert rl.max_report_bytes() == 2 ** 30
    monkeypatch.setenv("GRADSWEEP_REPORT_MAX_BYTES", "junk")
    assert rl.max_report_bytes() == 2 ** 30


def test_nesting_limit_is_exact(tmp_path):
    """64 levels in all (the top object and 63 lists) load; 65 do not."""
    path = tmp_path / "r.json"
    path.write_text(nested(63))
    assert rl.load_json(path)["runs"] == json.loads(nested(63))["runs"]
    path.write_text(nested(64))
    with pytest.raises(rl.ReportError, match=re.escape(f"{path}: $.runs[0][0][0][0][0]...: nested deeper")):
        rl.load_json(path)


def test_permission_denied_names_the_file(tmp_path, monkeypatch):
    path = tmp_path / "locked.json"
    path.write_bytes(EXAMPLE.read_bytes())
    if os.geteuid() != 0:  # root reads anything: there the refusal of open() is simulated below only
        path.chmod(0)
        for tool in READERS:
            assert_refused(run_tool(tool, path), path, "cannot read: Permission denied")
        path.chmod(0o644)

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("builtins.open", refuse)
    with pytest.raises(rl.ReportError, match=re.escape(f"{path}: cannot read: Permission denied")):
        rl.load_report(path)


def test_duplicate_run_ids_refused_by_plot_too(tmp_path):
    doc = json.loads(EXAMPLE.read_text())
    doc["runs"][1]["id"] = doc["runs"][0]["id"]
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(doc))
    assert_refused(run_tool("plot.py", path, "--out", tmp_path / "figs"), path, "$.runs[1].id", "repeats $.runs[0].id")


def test_no_tool_reads_a_report_file_but_through_report_lib():
    """Every JSON file read in tools/ goes through report_lib (json.load of a file, json.loads of a file's text)."""
    offenders = []
    pattern = re.compile(r"json\.load\(|json\.loads\([^)]*(read_text|read\(|open\()")
    for path in sorted(TOOLS.iterdir()):
        # bench_vs_torch.sh reads Google Benchmark's JSON output, not a report.
        if not path.is_file() or path.name in ("report_lib.py", "bench_vs_torch.sh"):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        # A line marked "not a report" reads Google Benchmark's JSON (device_check.sh's benchmark ratios).
        offenders += [f"{path.name}:{i}" for i, line in enumerate(text.splitlines(), 1)
                      if pattern.search(line) and "# not a report" not in line]
    assert offenders == []


def test_counts_of_one_are_singular():
    """report_lib.count_text: "1 run", "2 runs"; steps_text of a one-step run reads "0 of 1 step"."""
    assert rl.count_text(1, "run") == "1 run" and rl.count_text(2, "run") == "2 runs"
    assert rl.count_text(0, "run") == "0 runs" and rl.count_text(1, "batch", "batches") == "1 batch"
    assert rl.count_text(3, "batch", "batches") == "3 batches"
    assert rl.steps_text({"steps_completed": 0, "config": {"training": {"steps": 1}}}) == "0 of 1 step"
    assert rl.steps_text({"steps_completed": 66, "config": {"training": {"steps": 468}}}) == "66 of 468 steps"
