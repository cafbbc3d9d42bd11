"""Shared fixtures for the tests of tools/: paths, the example report, and the GRADSWEEP_REPORTS hook.

GRADSWEEP_REPORTS names real report.json files (os.pathsep-separated) produced by the C++ side; tests that take the
`real_report` fixture run once per file and are skipped when the variable is unset.
"""
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools_test_paths import EXAMPLE, PLOT, REPO_ROOT, SCHEMA, TOOLS  # noqa: F401 (re-exported)


def real_report_paths():
    value = os.environ.get("GRADSWEEP_REPORTS", "")
    return [Path(p) for p in value.split(os.pathsep) if p.strip()]


def pytest_generate_tests(metafunc):
    if "real_report" in metafunc.fixturenames:
        paths = real_report_paths()
        params = [pytest.param(p, id=str(p)) for p in paths] or [
            pytest.param(None, marks=pytest.mark.skip(reason="GRADSWEEP_REPORTS is not set"), id="unset")]
        metafunc.parametrize("real_report", params)


@pytest.fixture(scope="session")
def schema():
    return json.loads(SCHEMA.read_text())


@pytest.fixture(scope="session")
def example_doc():
    return json.loads(EXAMPLE.read_text())


@pytest.fixture
def example(example_doc):
    """A fresh deep copy of the example report, free to mutate."""
    return copy.deepcopy(example_doc)


@pytest.fixture
def example_copy(tmp_path):
    """The example report copied into its own folder under tmp_path (figures land beside it)."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    path = folder / "report.json"
    path.write_text(EXAMPLE.read_text())
    return path


@pytest.fixture(scope="session")
def run_plot():
    """run_plot(*args): runs tools/plot.py in a subprocess and returns the CompletedProcess (text output)."""
    def run(*args):
        return subprocess.run([sys.executable, str(PLOT), *map(str, args)], capture_output=True, text=True,
                              timeout=300, cwd=str(REPO_ROOT))
    return run


@pytest.fixture(autouse=True)
def no_columns_from_the_caller(monkeypatch):
    """$COLUMNS left out of the environment of every test and of the tools it starts: set, it would wrap their notes
    to a width the test did not choose (tests of the wrapping set it themselves)."""
    monkeypatch.delenv("COLUMNS", raising=False)
