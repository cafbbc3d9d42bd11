"""The repository stands on its own: the README, docs/, scenarios/ and reports/README.md point at nothing a clone
lacks (no ../shared/, no /work/ paths, no "issue N", "Article 00N", sessions or engineers of the development process),
and every relative Markdown link among them names a file or folder of the repository."""
import re
from pathlib import Path

import pytest

from tools_test_paths import REPO_ROOT

USER_TEXTS = sorted([REPO_ROOT / "README.md", REPO_ROOT / "reports" / "README.md", REPO_ROOT / "bench" / "peers" /
                     "README.md", *(REPO_ROOT / "docs").glob("*.md"), *(REPO_ROOT / "scenarios").rglob("*.json"),
                     *(REPO_ROOT / "scenarios").rglob("*.md")])
OUTSIDE = [
    (re.compile(r"\.\./shared\b|(?<![\w.])shared/(seeds|cases|anchors|DESIGN)"), "a folder beside the checkout"),
    (re.compile(r"/work/"), "a path of the development machine"),
    (re.compile(r"\b[Ii]ssues? #?\d+"), "an issue of the development process"),
    (re.compile(r"\bArticle `?\d{3}\b"), "a development-process name of a source article"),
    (re.compile(r"\bsessions?\b", re.IGNORECASE), "a development session"),
    (re.compile(r"\b(?:other |fellow )?engineers?\b(?!ing)", re.IGNORECASE), "the development team"),
    (re.compile(r"\bDESIGN\.md\b"), "the development design notes (docs/design.md is the repository's)"),
]


def rel(path):
    return str(path.relative_to(REPO_ROOT))


@pytest.mark.parametrize("path", USER_TEXTS, ids=rel)
def test_user_texts_point_at_nothing_a_clone_lacks(path):
    problems = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        for pattern, what in OUTSIDE:
            for m in pattern.finditer(line):
                problems.append(f"{rel(path)}:{n}: {m.group(0)!r} ({what})")
    assert not problems, "\n".join(problems)


LINK = re.compile(r"\[[^\]]*\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("path", [p for p in USER_TEXTS if p.suffix == ".md"], ids=rel)
def test_relative_links_name_files_of_the_repository(path):
    missing = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        if not (path.parent / target).exists():
            missing.append(target)
    assert not missing, f"{rel(path)}: links to {missing}"


def test_the_checker_finds_what_it_is_for():
    """The patterns catch each kind of reference they exist for (and leave ordinary words alone)."""
    caught = ["see ../shared/DESIGN.md", "the seeds (shared/seeds/)", "/work/shared/anchors/x.py", "issue 10's",
              "Issue 9: the target", "Article 002 says", "Article `002` (strategy 4)", "DESIGN.md section 3",
              "the checkout the session started in", "other engineers' builds"]
    fine = ["tests/data/strategy_cases.json", "docs/design.md, section 2", "the cuda_staged_issues() check",
            "a shared base", "shared memory", "stas00/ml-engineering `network/README.md`", "one source article"]
    for text in caught:
        assert any(p.search(text) for p, _ in OUTSIDE), text
    for text in fine:
        assert not any(p.search(text) for p, _ in OUTSIDE), text
