"""Paths the tests of tools/ share (imported by name: a module called `conftest` is ambiguous when pytest collects
tests/tools and tests/e2e, which both have one). Importing it puts tools/ on sys.path."""
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS = REPO_ROOT / "tools"
PLOT = TOOLS / "plot.py"
SCHEMA = REPO_ROOT / "reports" / "schema.json"
EXAMPLE = REPO_ROOT / "reports" / "examples" / "tiny_report.json"

sys.path.insert(0, str(TOOLS))
