"""tools/validate_memory.py --no-torch: gradsweep's GPU memory estimate against the published figures of its table
(DeepSpeed's and Korthikanti et al.'s formulas, Hugging Face's parameter counts; the expected values are those
figures, each row with its tolerance), and docs/memory.md holds the rows the script prints. The rows that need
PyTorch (the bytes autograd saves) are left to a run by hand with torch."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "validate_memory.py"
BIN = Path(os.environ.get("GRADSWEEP_BIN", REPO / "build" / "gradsweep"))


def test_every_published_memory_figure_is_within_its_tolerance_and_in_the_docs():
    if not BIN.exists():
        pytest.skip(f"{BIN} not built")
    r = subprocess.run([sys.executable, str(SCRIPT), "--bin", str(BIN), "--no-torch"], capture_output=True,
                       text=True, check=False, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) >= 10, r.stdout
    summary = r.stdout.strip().splitlines()[-1]
    assert summary == f"{len(rows)} of {len(rows)} rows within their tolerance", summary
    doc = (REPO / "docs" / "memory.md").read_text()
    missing = [row for row in rows if row not in doc]
    assert not missing, "docs/memory.md lacks rows the script prints (rerun it):\n" + "\n".join(missing)
