"""A report is never replaced: `gradsweep run` into a folder that holds runs (a finished or interrupted report of
any scenario, or only its journal) exits 2 before any run, leaves every file as it was and says how to go on
(--resume, another --out, --overwrite); --overwrite moves report.json, runs.jsonl and the figures beside them into
replaced-<date>-<time>/ and deletes nothing. Through the binary, as a user runs it."""
import json
import re

import pytest

from test_cli import BIN, run, scenario, write
from test_progress import run_in_pty

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} is not built")


def two_runs(tmp_path, name="s.json", **kw):
    return write(tmp_path, scenario(steps=4, axes={"training.accumulation_steps": [1, 2]}, **kw), name)


def snapshot(folder):
    """Every file under folder (relative path -> bytes), the lock file left out."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def finished(tmp_path, *extra):
    path = two_runs(tmp_path)
    out = tmp_path / "out"
    p = run("run", path, "--out", out, "--quiet", *extra)
    assert p.returncode == 0, p.stderr
    return path, out


def assert_refused(p, out, before, resume_line=None, folder=None):
    assert p.returncode == 2, p.stderr
    assert "nothing was run" in p.stderr and "--out DIR" in p.stderr and "--overwrite" in p.stderr, p.stderr
    assert f"{out}/replaced-<date>-<time>/" in p.stderr, p.stderr
    if resume_line is None:
        assert "--resume continues only a report of the same scenario file and --set values" in p.stderr, p.stderr
    else:
        assert resume_line in p.stderr, p.stderr
    assert snapshot(folder or out) == before, "a refused run changed the folder"


def test_another_scenarios_report_is_refused_and_left_as_it_was(tmp_path):
    _, out = finished(tmp_path)
    before = snapshot(out)
    other = write(tmp_path, scenario(name="other", steps=3, axes={"cluster.ranks": [1]}), "other.json")
    p = run("run", other, "--out", out)
    assert_refused(p, out, before)
    assert 'a report of 2 runs (2 finished) of scenario "e2e" that --resume cannot continue' in p.stderr, p.stderr
    # Both files and scenarios named, then what differs between them (the two scenario files above, by hand).
    assert f'its runs come from {tmp_path / "s.json"} (scenario "e2e"),\n' in p.stderr, p.stderr
    assert f'this sweep reads {other} (scenario "other");' in p.stderr, p.stderr
    differ = p.stderr.split("they differ in these settings:\n")[1].split("\nThis sweep")[0].splitlines()
    assert differ == ['    name: "e2e", now "other"',
                      '    sweep.axes.cluster.ranks: (not set), now [1]',
                      '    sweep.axes.training.accumulation_steps: [1,2], now (not set)',
                      '    training.steps: 4, now 3'], p.stderr


def test_a_resume_of_another_scenarios_report_names_ways_on_that_work(tmp_path):
    """--resume into another scenario's report is refused (exit 2, folder unchanged) with the ways on: a plain run
    would be refused as well, so the refusal names --overwrite (and where it moves the report) or another --out; the
    first of them then works."""
    _, out = finished(tmp_path)
    before = snapshot(out)
    other = write(tmp_path, scenario(name="other", steps=3, axes={"cluster.ranks": [1]}), "other.json")
    p = run("run", other, "--out", out, "--resume")
    assert p.returncode == 2, p.stderr
    assert "run without --resume" not in p.stderr, p.stderr
    assert (f"run with --overwrite instead of --resume (it moves that report aside into "
            f"{out}/replaced-<date>-<time>/) or choose another --out") in p.stderr, p.stderr
    assert snapshot(out) == before
    p = run("run", other, "--out", out, "--overwrite", "--quiet")
    assert p.returncode == 0, p.stderr
    assert len(list(out.glob("replaced-*/report.json"))) == 1


def test_the_refusal_of_another_version_fits_80_columns_and_names_what_changed(tmp_path):
    """The same file edited since its report: named once, with the changed settings; every line of the refusal
    within an 80-column terminal."""
    path, out = finished(tmp_path)
    before = snapshot(out)
    doc = json.loads(path.read_text())
    doc["training"]["optimizer"]["lr"] = 0.05
    path.write_text(json.dumps(doc))
    code, text = run_in_pty(["run", path, "--out", out], 80, faults=None)
    lines = text.replace("\r\n", "\n").splitlines()
    assert code == 2, text
    assert [t for t in lines if len(t) > 79] == [], text
    joined = re.sub(r"\n +", " ", "\n".join(lines))  # the wrapped lines joined again
    assert f'its runs come from another version of {path} (scenario "e2e"); they differ in one setting: ' \
           "training.optimizer.lr: 0.1, now 0.05\nThis sweep" in joined, joined
    assert "    training.optimizer.lr: 0.1, now 0.05" in lines, text
    assert snapshot(out) == before


def test_the_refusal_with_a_long_folder_fits_80_columns_and_cuts_the_path_only_at_slashes(tmp_path):
    """The same scenario again into a folder whose absolute path is longer than a line: every line of the refusal
    within an 80-column terminal (the --resume hint included), the path broken only after a '/', so each folder
    name stays whole on one line."""
    names = ["a-folder-with-a-rather-long-name", "and-another-one-just-as-long-as-it", "reports-of-this-sweep"]
    path = two_runs(tmp_path)
    out = tmp_path.joinpath(*names)
    assert run("run", path, "--out", out, "--quiet").returncode == 0
    assert len(str(out)) > 79
    before = snapshot(out)
    code, text = run_in_pty(["run", path, "--out", out], 80, faults=None)
    lines = text.replace("\r\n", "\n").splitlines()
    assert code == 2, text
    assert [t for t in lines if len(t) > 79] == [], text
    assert "  --resume      keep its 2 finished runs, run the 0 missing or interrupted" in lines, text
    for name in names:  # a cut inside a folder name would leave no line holding it whole
        assert sum(name in t for t in lines) >= 2, text  # "DIR already holds" and "DIR/replaced-..."
    # Joining only the breaks after a '/' gives the whole path back: it was cut nowhere else.
    joined = re.sub(r"/\n +", "/", "\n".join(lines))
    assert f"{out} already holds a report of 2 runs" in joined, joined
    assert f"{out}/replaced-<date>-<time>/" in joined, joined
    assert snapshot(out) == before


def test_the_same_scenario_with_other_set_values_is_refused(tmp_path):
    path, out = finished(tmp_path)
    before = snapshot(out)
    p = run("run", path, "--out", out, "--set", "training.steps=3")
    assert_refused(p, out, before)
    assert 'written with --set [], now ["training.steps=3"]' in p.stderr, p.stderr


def test_the_same_scenario_finished_is_refused_and_resume_keeps_it(tmp_path):
    path, out = finished(tmp_path)
    before = snapshot(out)
    p = run("run", path, "--out", out)
    assert_refused(p, out, before, "--resume      keep its 2 finished runs, run the 0 missing or interrupted\n")
    assert "of this scenario (the same file and --set values)" in p.stderr
    again = run("run", path, "--out", out, "--resume", "--quiet")
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "report.json").read_text())["runs"] == json.loads(before["report.json"])["runs"]


def test_the_default_output_folder_is_never_replaced(tmp_path):
    path = two_runs(tmp_path)
    p = run("run", path, "--quiet", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "reports" / "e2e"
    before = snapshot(out)
    p = run("run", path, "--set", "training.steps=3", cwd=tmp_path)
    assert_refused(p, "reports/e2e", before, folder=out)
    assert p.stderr.startswith("gradsweep: reports/e2e already holds a report of 2 runs"), p.stderr


def test_an_interrupted_report_is_refused_with_how_many_resume_reruns(tmp_path):
    path, out = finished(tmp_path)
    # The second run as a sweep stopped by a signal leaves it: `interrupted` in report and journal.
    doc = json.loads((out / "report.json").read_text())
    doc["runs"][1]["disposition"] = "interrupted"
    (out / "report.json").write_text(json.dumps(doc))
    lines = (out / "runs.jsonl").read_text().splitlines()
    last = json.loads(lines[2])
    last["disposition"] = "interrupted"
    (out / "runs.jsonl").write_text("\n".join(lines[:2] + [json.dumps(last)]) + "\n")
    before = snapshot(out)
    p = run("run", path, "--out", out)
    assert_refused(p, out, before, "--resume      keep its 1 finished run, run the 1 missing or interrupted\n")
    assert "a report of 2 runs (1 finished, 1 interrupted)" in p.stderr, p.stderr


def test_a_folder_with_only_the_journal_is_refused(tmp_path):
    path, out = finished(tmp_path)
    (out / "report.json").unlink()
    before = snapshot(out)
    assert list(before) == ["runs.jsonl"]
    p = run("run", path, "--out", out, "--set", "training.steps=3")
    assert_refused(p, out, before)
    assert "a report of 2 runs (2 finished)" in p.stderr, p.stderr


def test_a_report_file_that_cannot_be_read_is_kept_too(tmp_path):
    path = two_runs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("my notes, not a report\n")
    before = snapshot(out)
    p = run("run", path, "--out", out)
    assert_refused(p, out, before)
    assert "cannot be read as a gradsweep report" in p.stderr, p.stderr
    p = run("run", path, "--out", out, "--overwrite", "--quiet")
    assert p.returncode == 0, p.stderr
    aside = [d for d in out.iterdir() if d.name.startswith("replaced-")]
    assert len(aside) == 1 and (aside[0] / "report.json").read_bytes() == before["report.json"]


def test_a_folder_whose_files_hold_no_run_is_written_over(tmp_path):
    # Nothing to lose: a report without runs (a sweep stopped before its first run ended) and its journal header.
    path = two_runs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text(json.dumps({"schema_version": 1, "scenario_name": "x", "runs": []}))
    p = run("run", path, "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    assert len(json.loads((out / "report.json").read_text())["runs"]) == 2
    assert not [d for d in out.iterdir() if d.name.startswith("replaced-")]


def test_overwrite_moves_report_journal_and_figures_aside_and_deletes_nothing(tmp_path):
    _, out = finished(tmp_path)
    (out / "loss_vs_step.png").write_bytes(b"\x89PNG old figure")
    (out / "notes.txt").write_text("mine")
    # The run files a report names relative to its folder (save_weights, save_batches, timeline) go with it: left
    # behind, the moved report would point at nothing and the next sweep would write over them.
    for folder, name in (("weights", "a.r0.final.safetensors"), ("batches", "a.r0.npz"), ("timeline", "a.r0.json")):
        (out / folder).mkdir()
        (out / folder / name).write_bytes(f"old {folder}".encode())
    before = snapshot(out)
    other = write(tmp_path, scenario(name="other", steps=3, axes={"cluster.ranks": [1]}), "other.json")
    first = run("run", other, "--out", out, "--overwrite", "--quiet")
    assert first.returncode == 0, first.stderr
    aside = sorted(d for d in out.iterdir() if d.is_dir() and d.name.startswith("replaced-"))
    assert len(aside) == 1, list(out.iterdir())
    assert f"--overwrite: moved the previous report of {out} into {aside[0]}/" in first.stderr, first.stderr
    moved = snapshot(aside[0])
    assert moved == {k: v for k, v in before.items() if k != "notes.txt"}, sorted(moved)
    assert (out / "notes.txt").read_text() == "mine"  # not a report file: left where it was
    assert not (out / "loss_vs_step.png").exists()  # the old figure went with its report
    assert moved["weights/a.r0.final.safetensors"] == b"old weights" and not (out / "weights").exists()
    assert moved["batches/a.r0.npz"] == b"old batches" and moved["timeline/a.r0.json"] == b"old timeline"
    new = json.loads((out / "report.json").read_text())
    assert new["scenario_name"] == "other" and [r["id"] for r in new["runs"]] == ["other.ranks=1.r0"]
    # A second --overwrite within the same second gets its own folder: the first one is kept.
    second = run("run", other, "--out", out, "--overwrite", "--quiet")
    assert second.returncode == 0, second.stderr
    aside2 = sorted(d for d in out.iterdir() if d.is_dir() and d.name.startswith("replaced-"))
    assert len(aside2) == 2 and snapshot(aside[0]) == moved
    assert json.loads((set(aside2) - set(aside)).pop().joinpath("report.json").read_text())["runs"] == new["runs"]


def test_dry_run_is_refused_where_the_run_is_and_overwrite_says_what_it_would_move(tmp_path):
    path, out = finished(tmp_path)
    before = snapshot(out)
    p = run("run", path, "--out", out, "--dry-run")
    assert_refused(p, out, before, "--resume      keep its 2 finished runs")
    p = run("run", path, "--out", out, "--dry-run", "--overwrite")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == (f"--overwrite: would first move the 2 runs in {out} (report.json, runs.jsonl, "
                                         f"figures, weights/, batches/, timeline/) into {out}/replaced-<date>-<time>/")
    assert snapshot(out) == before and not [d for d in out.iterdir() if d.is_dir()]
    # An empty folder: nothing to say.
    p = run("run", path, "--out", tmp_path / "empty", "--dry-run", "--overwrite")
    assert p.returncode == 0 and "--overwrite" not in p.stdout, p.stdout


def test_filter_into_an_existing_report_is_refused_and_resume_filter_adds_to_it(tmp_path):
    path = write(tmp_path, scenario(steps=4, axes={"training.accumulation_steps": [1, 2, 3]}))
    out = tmp_path / "out"
    assert run("run", path, "--out", out, "--filter", "steps=1", "--quiet").returncode == 0
    before = snapshot(out)
    p = run("run", path, "--out", out, "--filter", "steps=2")
    assert_refused(p, out, before,
                   "--resume      keep its 1 finished run, run the 1 missing or interrupted that --filter keeps")
    p = run("run", path, "--out", out, "--filter", "steps=2", "--resume", "--quiet")
    assert p.returncode == 0, p.stderr
    ids = [r["id"] for r in json.loads((out / "report.json").read_text())["runs"]]
    assert ids == ["e2e.accumulation_steps=1.r0", "e2e.accumulation_steps=2.r0"]


def test_overwrite_and_resume_exclude_each_other(tmp_path):
    path, out = finished(tmp_path)
    before = snapshot(out)
    p = run("run", path, "--out", out, "--overwrite", "--resume")
    assert p.returncode == 2 and "excludes" in p.stderr, p.stderr
    assert snapshot(out) == before
