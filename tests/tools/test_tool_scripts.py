"""Every tools/X that the documentation (any tracked *.md) names and that is a program (a shebang, or a .py/.sh file
that runs as __main__) is executable, in git (mode 100755, so a clean clone gets it) and on disk, and starts with a
shebang: the synopses write `tools/compare.py REPORT...`, not `python3 tools/compare.py`. Extend: nothing to do, new
tools and new docs are found by the scan."""
import os
import re
import subprocess

import pytest

from tools_test_paths import REPO_ROOT

# `tools/NAME` not preceded by a path character (so tests/tools/test_plot.py is not read as tools/test_plot.py).
REFERENCE = re.compile(r"(?<![\w./-])tools/([\w.-]+)")


def tracked_markdown():
    result = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO_ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        return sorted(REPO_ROOT.rglob("*.md"))
    return [REPO_ROOT / line for line in result.stdout.splitlines()]


def referenced_programs():
    names = set()
    for doc in tracked_markdown():
        if ".venv" in doc.parts or not doc.is_file():
            continue
        names.update(REFERENCE.findall(doc.read_text(encoding="utf-8")))
    programs = []
    for name in sorted(names):
        path = REPO_ROOT / "tools" / name.rstrip(".")
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        runs_as_main = path.suffix == ".sh" or (path.suffix == ".py" and "__main__" in text)
        if text.startswith("#!") or runs_as_main:
            programs.append(path)
    return programs


def git_modes():
    result = subprocess.run(["git", "ls-files", "-s", "tools"], cwd=REPO_ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        return None
    return {line.split("\t")[1]: line.split()[0] for line in result.stdout.splitlines()}


def test_the_scan_finds_the_documented_programs():
    """The docs name compare.py and plot.py in synopses (docs/compare.md, reports/README.md): the scan must see them,
    and must not take the library report_lib.py (imported, never run) for a program."""
    names = {p.name for p in referenced_programs()}
    assert {"compare.py", "plot.py", "test", "setup.sh", "build.sh"} <= names
    assert "report_lib.py" not in names


@pytest.mark.parametrize("path", referenced_programs(), ids=lambda p: p.name)
def test_documented_program_is_executable(path):
    assert path.read_text(encoding="utf-8", errors="replace").startswith("#!"), f"{path.name}: no shebang"
    assert os.access(path, os.X_OK), f"{path}: not executable on disk"
    modes = git_modes()
    if modes is not None and f"tools/{path.name}" in modes:
        assert modes[f"tools/{path.name}"] == "100755", f"tools/{path.name}: git mode is not 100755 " \
                                                        "(git update-index --chmod=+x)"
