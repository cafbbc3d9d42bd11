"""Shared setup of the end-to-end tests: $COLUMNS is removed from the environment the tests (and the programs they
start) see, so that gradsweep's and the tools' lines are not wrapped to a width the test did not choose; a test of
the wrapping sets COLUMNS (or a pseudo-terminal's size) itself."""
import pytest


@pytest.fixture(autouse=True)
def no_columns_from_the_caller(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)


def comparable_runs(report):
    """What must be equal between two reports of one sweep (uninterrupted and resumed, whole and merged from slices,
    ...): every run's id, place, settings, outcome, losses, evaluations, bytes, target and modeled times; the
    measured (wall-clock) times aside."""
    out = []
    for r in report["runs"]:
        out.append({
            "id": r["id"], "index": r["index"], "swept": r["swept"], "config": r["config"],
            "disposition": r["disposition"], "steps": r["steps_completed"],
            "loss": [p["train_loss"] for p in r["convergence"]["series"]],
            "eval": [(p["eval_loss"], p["eval_accuracy"]) for p in r["convergence"]["series"]],
            "bytes": r["communication"]["bytes_sent_per_rank_per_step"],
            "target": {k: v for k, v in (r["time_to_target"] or {}).items() if k in ("reached", "step")},
            "modeled": r["timing"]["modeled"] if r["timing"] else None,
        })
    return out


@pytest.fixture
def comparable():
    """comparable(report): the runs of a report without their measured times (comparable_runs), to compare two
    reports of one sweep with ==."""
    return comparable_runs
