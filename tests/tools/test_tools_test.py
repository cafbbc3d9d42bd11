"""tools/test -R REGEX selects on both sides: the ctest tests whose name REGEX matches and the pytest tests whose node
id it matches (tools/pytest_node_regex.py); one side matching nothing is fine, neither side is exit 2. Each case runs
tools/test on the build folder already built (GRADSWEEP_BIN's, else build/) with a regex that selects one or two
tests; a case costs a no-op setup and build and pytest's collection of every test (a few seconds, most of it
importing torch and matplotlib). The last line is the summary "N passed, N failed". The tools/test these cases
start skips them (NESTED): a tools/test that ran every pytest test would otherwise start itself again and again."""
import os
import re
import subprocess
from pathlib import Path

import pytest

from tools_test_paths import REPO_ROOT

BUILD = Path(os.environ["GRADSWEEP_BIN"]).parent if os.environ.get("GRADSWEEP_BIN") else REPO_ROOT / "build"
CTEST_ONE = "Shard.Fnv1a64MatchesPublishedVectors"  # tests/unit/test_shard.cpp
PYTEST_ONE = "test_reference_hash_matches_the_published_vectors"  # tests/e2e/test_cluster.py

NESTED = "GRADSWEEP_TOOLS_TEST_CASE"

pytestmark = [
    pytest.mark.skipif(not (BUILD / "gradsweep").exists() or not (BUILD / "CMakeCache.txt").exists(),
                       reason=f"{BUILD} is not built"),
    pytest.mark.skipif(NESTED in os.environ, reason="inside a tools/test started by one of these cases"),
]


def tools_test(*args):
    """tools/test ARGS on BUILD, with CI set as BUILD was configured (so build.sh finds nothing to do)."""
    cache = (BUILD / "CMakeCache.txt").read_text()
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "GRADSWEEP_REPORTS")}
    env["GRADSWEEP_BUILD_DIR"] = str(BUILD)
    env[NESTED] = "1"
    if "GRADSWEEP_WERROR:BOOL=ON" in cache:
        env["CI"] = "true"
    return subprocess.run([str(REPO_ROOT / "tools" / "test"), *args], capture_output=True, text=True, env=env,
                          cwd=str(REPO_ROOT), timeout=600)


def last_line(p):
    lines = p.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def test_a_regex_selects_the_ctest_and_the_pytest_tests_it_matches():
    p = tools_test("-R", f"{CTEST_ONE}|{PYTEST_ONE}")
    assert p.returncode == 0, p.stdout + p.stderr
    assert last_line(p) == "2 passed, 0 failed", p.stdout
    assert "1 passed" in p.stdout and "deselected" in p.stdout, p.stdout  # pytest's own count: the one selected


def test_a_regex_that_matches_on_one_side_only_is_fine():
    """A ctest name alone: pytest deselects every test (its exit status 5), which is no failure here."""
    p = tools_test("-R", CTEST_ONE)
    assert p.returncode == 0, p.stdout + p.stderr
    assert last_line(p) == "1 passed, 0 failed", p.stdout
    assert re.search(r"^\d+ deselected in ", p.stdout, re.M), p.stdout  # pytest ran none of its tests


def test_a_regex_that_matches_nothing_is_an_error():
    p = tools_test("-R", "no_test_is_named_like_this")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "-R 'no_test_is_named_like_this' matches no ctest test name and no pytest node id" in p.stderr, p.stderr
    assert last_line(p) == "0 passed, 0 failed", p.stdout
