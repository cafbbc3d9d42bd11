"""Shared setup of the end-to-end tests: $COLUMNS is removed from the environment the tests (and the programs they
start) see, so that gradsweep's and the tools' lines are not wrapped to a width the test did not choose; a test of
the wrapping sets COLUMNS (or a pseudo-terminal's size) itself."""
import pytest


@pytest.fixture(autouse=True)
def no_columns_from_the_caller(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
