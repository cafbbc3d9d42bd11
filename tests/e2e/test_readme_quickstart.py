"""README's same-global-batch example quotes final eval accuracies of the quickstart (scenarios/quickstart.json) on
OpenBLAS's Haswell kernel: the runs with 1 and 2 ranks and 1 and 2 micro-batches, run with OPENBLAS_CORETYPE=Haswell,
give the numbers README states (and 1 x 2 equals 2 x 1, the same update)."""
import json
import os
import re

import pytest

from test_cli import BIN, REPO, run

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} is not built")


def test_readme_quotes_the_quickstart_accuracies_of_the_haswell_kernel(tmp_path):
    text = re.sub(r"\s+", " ", (REPO / "README.md").read_text())
    m = re.search(r"on OpenBLAS's Haswell kernel\): 1 rank x 2 micro-batches and 2 ranks x 1 both reach ([0-9.]+),"
                  r" .*?2 ranks x 2 reaches ([0-9.]+);", text)
    assert m, "README's quickstart example has changed its wording"
    pair, two_by_two = float(m.group(1)), float(m.group(2))
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["OPENBLAS_CORETYPE"] = "Haswell"
    p = run("run", REPO / "scenarios" / "quickstart.json", "--out", out, "--quiet",
            "--filter", r"accumulation_steps=[12]\.ranks=[12]\.", env=env)
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "report.json").read_text())
    if report["context"].get("blas", {}).get("core") != "Haswell":
        pytest.skip(f"OpenBLAS did not take the Haswell kernel here: {report['context'].get('blas')}")
    acc = {(r["swept"]["cluster.ranks"], r["swept"]["training.accumulation_steps"]):
           r["convergence"]["final"]["eval_accuracy"] for r in report["runs"]}
    assert acc[(1, 2)] == acc[(2, 1)], acc
    assert round(acc[(1, 2)], 4) == pair, acc
    assert round(acc[(2, 2)], 4) == two_by_two, acc
