"""pytest plugin of `tools/test -R REGEX` (loaded with `-p pytest_node_regex`, tools/ on PYTHONPATH): with
--node-regex REGEX, keeps the tests whose node id (tests/e2e/test_cli.py::test_name[param]) REGEX matches anywhere
(Python's re.search, as ctest -R matches anywhere in a test's name) and deselects the others. Without the option it
does nothing."""
import re

import pytest


def pytest_addoption(parser):
    parser.addoption("--node-regex", default=None, metavar="REGEX",
                     help="run only the tests whose node id matches REGEX (re.search)")


def pytest_collection_modifyitems(config, items):
    pattern = config.getoption("node_regex")
    if pattern is None:
        return
    try:
        regex = re.compile(pattern)
    except re.error as e:
        raise pytest.UsageError(f"--node-regex {pattern!r}: not a regular expression ({e})")
    keep = [item for item in items if regex.search(item.nodeid)]
    dropped = [item for item in items if not regex.search(item.nodeid)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
