"""scenarios/precision.json's description, checked on its fp16_mixed runs (shortened to 100 steps): without a loss
scale fp16 flushes a small fraction of the gradient values it rounds (above 0, below 1%), the dynamic scale from 2^16
lifts the gradients 16 binades above fp16's subnormal floor so that at most a hundredth as many flush, and the flushed
values are too few to move the accuracy (the two runs' eval accuracy within 0.01)."""
import json
import os

import pytest

from test_cli import BIN, REPO, run

pytestmark = [pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} is not built"),
              pytest.mark.skipif(not os.path.isdir("/usr/share/datasets/fashion-mnist"),
                                 reason="Fashion-MNIST (dataset-fashion-mnist) is not installed")]


def test_fp16_without_a_loss_scale_flushes_few_gradients_and_keeps_the_accuracy(tmp_path):
    scenario = REPO / "scenarios" / "precision.json"
    description = json.loads(scenario.read_text())["description"]
    assert "flushes about 0.02% of the gradient values" in description and "fp16 without a loss scale flushes small " \
        "gradients to zero" not in description
    out = tmp_path / "out"
    p = run("run", scenario, "--filter", r"mode=fp16_mixed\.", "--set", "training.steps=100",
            "--set", "training.eval_every=100", "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    runs = {r["swept"]["precision.loss_scale"]: r for r in json.loads((out / "report.json").read_text())["runs"]}
    assert sorted(runs) == ["dynamic", "none"]
    none, dynamic = (runs[k]["precision"]["grad_underflow_fraction"] for k in ("none", "dynamic"))
    assert 0 < none < 0.01, none
    assert dynamic <= none / 100, (dynamic, none)
    acc = {k: r["convergence"]["final"]["eval_accuracy"] for k, r in runs.items()}
    assert abs(acc["none"] - acc["dynamic"]) <= 0.01, acc
