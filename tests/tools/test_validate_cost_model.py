"""tools/validate_cost_model.py: the published figures it compares with name their sources, docs/cost-model.md's
validation section is its output, and the modeled clock meets the targets on the held-out points (the published
figures are the expected values; the fitted points are not counted)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "validate_cost_model.py"
DATA = REPO / "tools" / "data" / "published_figures.json"
BIN = Path(os.environ.get("GRADSWEEP_BIN", REPO / "build" / "gradsweep"))

sys.path.insert(0, str(REPO / "tools"))


def test_every_figure_names_a_source_with_repository_path_and_commit():
    data = json.loads(DATA.read_text())
    sources = data["sources"]
    for s in sources.values():
        # A file at a commit, or an issue thread (its address and which comments hold the figures).
        assert s["repository"] and s["setup"]
        assert len(s.get("commit", "")) == 40 or (s["url"].startswith(f"https://github.com/{s['repository']}/issues/")
                                                   and s["thread"]), s
    roles = set()
    for c in data["collectives"]:
        assert c["source"] in sources
        for point in c["points"]:
            size, busbw, role = point[:3]
            assert size > 0 and busbw > 0 and len(point) in (3, 4)
            assert len(point) == 3 or point[3] > 0  # the published time, us
            roles.add(role)
    for e in data["end_to_end"]:
        assert e["source"] in sources and e["differences"] and e["adjustment"] and e["table"] and e["row"]
        roles.add(e["role"])
    assert roles == {"fit", "held-out", "other-source"}
    # At least 8 all-reduce points over the size range on two GPU generations, and 3 end-to-end model sizes.
    held = {c["hardware"] for c in data["collectives"] if any(p[2] == "held-out" for p in c["points"])}
    assert {"h100-sxm-8", "a100-sxm-8"} <= held
    assert len({e["model"] for e in data["end_to_end"] if e["role"] == "held-out"}) >= 3


@pytest.fixture(scope="module")
def markdown():
    if not BIN.exists():
        pytest.skip(f"{BIN} not built")
    r = subprocess.run([sys.executable, str(SCRIPT), "--binary", str(BIN), "--markdown", "--analytic"],
                       capture_output=True, text=True, check=False, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_docs_validation_section_is_the_scripts_output(markdown):
    import validate_cost_model
    assert validate_cost_model.doc_section(str(REPO / "docs" / "cost-model.md")) == markdown, (
        "docs/cost-model.md is stale: run tools/validate_cost_model.py --update-doc")


def test_targets_are_met_on_the_held_out_points(markdown):
    section = markdown.split("Targets on held-out points")[1].split("Targets on other sources")[0]
    lines = [l for l in section.splitlines() if l.startswith("- ")]
    assert len(lines) == 4
    for l in lines:
        assert ": met (" in l, l


def test_multi_node_figures_are_fitted_on_one_table_per_interconnect_and_held_out_on_the_others():
    """Each published multi-node table is wholly "fit" or "held-out", exactly one table per interconnect (ib, roce) is
    "fit" (the profiles' internode.nvls_tree_efficiency and pipeline_window_MB are fitted on it) and the others are
    held out; each is priced on a profile with an inter-node level and whole nodes of 8 ranks, and says how its setup
    differs from that profile."""
    data = json.loads(DATA.read_text())
    multi = [c for c in data["collectives"] if c.get("nodes", 1) > 1]
    assert len(multi) >= 3 and {c["hardware"].split("-")[0] for c in multi} == {"h100", "a100"}
    fits = {}
    for c in multi:
        assert c["ranks"] == 8 * c["nodes"] and c["setup"] and c["note"], c
        roles = {p[2] for p in c["points"]}
        assert roles in ({"fit"}, {"held-out"}), c["setup"]
        kind = json.loads((REPO / "scenarios" / "hardware" / (c["hardware"] + ".json")).read_text())["internode"]["kind"]
        if roles == {"fit"}:
            fits.setdefault(kind["value"] if isinstance(kind, dict) else kind, []).append(c["setup"])
        profile = json.loads((REPO / "scenarios" / "hardware" / (c["hardware"] + ".json")).read_text())
        assert profile["internode"]["nics_per_node"]["value"] > 0 and profile["nodes"]["value"] > 1, c["hardware"]
    assert sorted(fits) == ["ib", "roce"] and all(len(v) == 1 for v in fits.values()), fits


def test_multi_node_section_lists_every_published_table(markdown):
    section = markdown.split("**Multi-node all-reduce**")[1]
    data = json.loads(DATA.read_text())
    for c in data["collectives"]:
        if c.get("nodes", 1) > 1:
            role = c["points"][0][2]
            assert f"- [{role}] {c['source']}, {c['setup']} ({c['hardware']}, {c['ranks']} ranks): busbw" in section, (
                c["setup"])
    assert "**Targets on the held-out multi-node rows" in section


def test_a_data_file_that_is_not_the_published_figures_is_refused_with_a_message():
    # QA: a hardware profile given as --data ended in a KeyError traceback.
    for data, needle in [(REPO / "scenarios" / "hardware" / "h100-sxm-8.json", "missing: sources, end_to_end"),
                         (REPO / "no-such-file.json", "cannot read")]:
        p = subprocess.run([sys.executable, str(SCRIPT), "--data", str(data), "--no-e2e"], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2, p.stderr
        assert needle in p.stderr and "Traceback" not in p.stderr, p.stderr
