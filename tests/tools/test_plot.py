"""tools/plot.py: the figures it writes from the example report (and real reports, GRADSWEEP_REPORTS), its helpers
(heatmap grid, strategy colors), and its refusal of bad input."""
import copy
import json
import math
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

import plot
import report_lib as rl

FIGURES = ["loss_vs_step.png", "loss_vs_time.png", "accuracy_vs_time.png", "step_breakdown.png",
           "heatmap_eval_accuracy.png"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NAN = math.nan


def assert_png(path):
    path = Path(path)
    assert path.is_file(), f"{path} was not written"
    assert path.read_bytes()[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 0 and image.shape[1] > 0


def write_report(tmp_path, doc, name="report.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


# ---- the command line ----------------------------------------------------------------------------------------------

def test_writes_every_figure_beside_the_report(run_plot, example_copy):
    result = run_plot(example_copy)
    assert result.returncode == 0, result.stderr
    written = [Path(line) for line in result.stdout.splitlines()]
    assert sorted(p.name for p in written) == sorted(FIGURES)
    for path in written:
        assert path.parent == example_copy.parent
        assert_png(path)
    # The failed and the skipped run are named on stderr.
    assert "tiny.accumulation_steps=1.ranks=4.r0" in result.stderr
    assert "tiny.accumulation_steps=2.ranks=4.r0" in result.stderr


def test_out_folder(run_plot, example_copy, tmp_path):
    out = tmp_path / "figures" / "nested"
    result = run_plot(example_copy, "--out", out)
    assert result.returncode == 0, result.stderr
    for name in FIGURES:
        assert_png(out / name)
        assert not (example_copy.parent / name).exists()
    assert sorted(Path(line).name for line in result.stdout.splitlines()) == sorted(FIGURES)


def test_several_reports_into_one_out_folder_get_a_subfolder_each(run_plot, example_copy, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    second = other / "report.json"
    second.write_text(example_copy.read_text())
    out = tmp_path / "figures"
    result = run_plot(example_copy, second, "--out", out)
    assert result.returncode == 0, result.stderr
    for sub in ("tiny", "other"):
        for name in FIGURES:
            assert_png(out / sub / name)


def test_metric_and_axes_options(run_plot, example_copy):
    result = run_plot(example_copy, "--metric", "samples_per_s", "--x", "ranks", "--y", "training.accumulation_steps")
    assert result.returncode == 0, result.stderr
    assert_png(example_copy.parent / "heatmap_samples_per_s.png")
    assert not (example_copy.parent / "heatmap_eval_accuracy.png").exists()


@pytest.mark.parametrize("metric", sorted(rl.METRICS))
def test_every_heatmap_metric(example, tmp_path, metric):
    path = plot.fig_heatmap(example, plot.run_styles(example["runs"]), tmp_path, rl.undrawn_note(example), metric)
    assert path == tmp_path / f"heatmap_{metric}.png"
    assert_png(path)


def test_unknown_axis_exits_2(run_plot, example_copy):
    result = run_plot(example_copy, "--x", "compression.ratio")
    assert result.returncode == 2
    assert "compression.ratio" in result.stderr and "cluster.ranks" in result.stderr


def test_without_accuracy_the_accuracy_figure_is_skipped_with_a_note(run_plot, example, tmp_path):
    for run in example["runs"]:
        for point in run["convergence"]["series"]:
            point["eval_accuracy"] = None
        run["convergence"]["final"]["eval_accuracy"] = None
    path = write_report(tmp_path, example)
    result = run_plot(path)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "accuracy_vs_time.png").exists()
    assert "accuracy_vs_time.png" in result.stderr
    assert_png(tmp_path / "heatmap_train_loss.png")  # the default metric falls back to the final train loss


def test_one_axis_sweep_has_no_heatmap(run_plot, example, tmp_path):
    example["axes"] = example["axes"][:1]
    path = write_report(tmp_path, example)
    result = run_plot(path)
    assert result.returncode == 0, result.stderr
    assert not list(tmp_path.glob("heatmap_*.png"))
    assert "heatmap" in result.stderr
    assert_png(tmp_path / "loss_vs_step.png")


def test_diverged_and_mixed_strategies_plot(run_plot, example, tmp_path):
    example["runs"][1]["config"]["compression"]["kind"] = "topk"
    diverged = example["runs"][4]
    diverged["disposition"], diverged["message"] = "diverged", "train loss is NaN at step 12"
    for point in diverged["convergence"]["series"][11:]:
        point.update(train_loss=None, eval_loss=None, eval_accuracy=None)
    path = write_report(tmp_path, example)
    result = run_plot(path)
    assert result.returncode == 0, result.stderr
    for name in FIGURES:
        assert_png(tmp_path / name)


# ---- bad input -----------------------------------------------------------------------------------------------------

BAD_INPUT = {
    "invalid JSON": "{\"schema_version\": 1, \"runs\": [",
    "not a report": json.dumps({"name": "quickstart", "model": {"kind": "mlp"}}),
    "a JSON list": json.dumps([1, 2, 3]),
    "schema violation": None,  # the example with a run's disposition broken, filled in below
    "empty file": "",
}


@pytest.mark.parametrize("case", list(BAD_INPUT), ids=list(BAD_INPUT))
def test_bad_input_exits_2_naming_the_file(run_plot, example, tmp_path, case):
    text = BAD_INPUT[case]
    if text is None:
        example["runs"][0]["disposition"] = "bogus"
        text = json.dumps(example)
    path = tmp_path / "bad_report.json"
    path.write_text(text)
    result = run_plot(path)
    assert result.returncode == 2
    assert str(path) in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.glob("*.png"))


def test_missing_file_exits_2(run_plot, tmp_path):
    path = tmp_path / "nowhere" / "report.json"
    result = run_plot(path)
    assert result.returncode == 2
    assert str(path) in result.stderr


def test_a_bad_report_does_not_stop_the_good_ones(run_plot, example_copy, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    result = run_plot(bad, example_copy)
    assert result.returncode == 2
    assert str(bad) in result.stderr
    assert_png(example_copy.parent / "loss_vs_step.png")


# ---- helpers -------------------------------------------------------------------------------------------------------

def axes_of(report):
    return rl.find_axis(report, "training.accumulation_steps"), rl.find_axis(report, "cluster.ranks")


def test_heatmap_matrix_of_the_example(example):
    accumulation, ranks = axes_of(example)
    values, counts, labels = plot.heatmap_matrix(example, accumulation, ranks, "eval_accuracy")
    # rows: ranks 1, 2, 4; columns: accumulation steps 1, 2. ranks=4 failed (K=1) and was skipped (K=2).
    np.testing.assert_allclose(values, [[0.6979, 0.7425], [0.7425, 0.7746], [NAN, NAN]], equal_nan=True)
    assert counts.tolist() == [[1, 1], [1, 1], [0, 0]]
    assert labels == [["", ""], ["", ""], ["failed", "skipped"]]

    values, _, _ = plot.heatmap_matrix(example, ranks, accumulation, "train_loss")  # swapped axes: transposed
    np.testing.assert_allclose(values, [[0.8093, 0.7928, NAN], [0.7928, 0.6871, NAN]], equal_nan=True)

    values, _, _ = plot.heatmap_matrix(example, accumulation, ranks, "step_p50_ms")
    np.testing.assert_allclose(values, [[0.0848, 0.1575], [0.1065, 0.1855], [NAN, NAN]], equal_nan=True)


def test_heatmap_matrix_averages_repeats_and_ignores_unpassed_runs(example):
    accumulation, ranks = axes_of(example)
    repeat = copy.deepcopy(example["runs"][0])  # K=1, ranks=1
    repeat.update(id=repeat["id"].replace(".r0", ".r1"), repeat=1)
    repeat["convergence"]["final"]["eval_accuracy"] = 0.7021
    diverged = copy.deepcopy(example["runs"][4])  # K=2, ranks=2
    diverged.update(id="x", disposition="diverged")
    diverged["convergence"]["final"]["eval_accuracy"] = 0.1
    example["runs"] += [repeat, diverged]
    values, counts, _ = plot.heatmap_matrix(example, accumulation, ranks, "eval_accuracy")
    assert values[0, 0] == pytest.approx(0.7)
    assert counts[0, 0] == 2
    assert values[1, 1] == pytest.approx(0.7746)
    assert counts[1, 1] == 1


def test_default_metric(example):
    assert rl.default_metric(example) == "eval_accuracy"
    for run in example["runs"]:
        run["convergence"]["final"]["eval_accuracy"] = None
    assert rl.default_metric(example) == "train_loss"


def test_metric_values_of_a_run(example):
    run = example["runs"][4]  # K=2, ranks=2
    assert rl.metric_value(run, "eval_accuracy") == 0.7746
    assert rl.metric_value(run, "train_loss") == 0.6871
    assert rl.metric_value(run, "samples_per_s") == run["throughput"]["samples_per_s"]
    assert rl.metric_value(run, "time_to_target_s") == run["time_to_target"]["measured_s"]
    assert rl.metric_value(run, "step_p50_ms") == 0.1855
    failed = example["runs"][2]
    assert all(math.isnan(rl.metric_value(failed, m)) for m in rl.METRICS)


def test_find_axis_accepts_path_suffix_and_index(example):
    ranks = example["axes"][1]
    assert rl.find_axis(example, "cluster.ranks") is ranks
    assert rl.find_axis(example, "ranks") is ranks
    assert rl.find_axis(example, "1") is ranks
    with pytest.raises(rl.ReportError, match="not a sweep axis"):
        rl.find_axis(example, "lr")


def make_run(run_id, sync="allreduce", compression="none", precision="fp32"):
    return {"id": run_id, "swept": {}, "disposition": "passed",
            "config": {"sync": {"kind": sync}, "compression": {"kind": compression}, "precision": {"mode": precision}}}


def test_strategy_labels():
    assert rl.strategy_label(make_run("a")) == "allreduce"
    assert rl.strategy_label(make_run("a", compression="topk")) == "allreduce+topk"
    assert rl.strategy_label(make_run("a", precision="fp16_mixed")) == "allreduce+fp16_mixed"
    assert rl.strategy_label(make_run("a", "local_sgd", "qsgd", "bf16_mixed")) == "local_sgd+qsgd+bf16_mixed"


def test_strategy_colors_same_strategy_same_color_different_strategies_different_colors():
    runs = [make_run("a"), make_run("b", compression="topk"), make_run("c"), make_run("d", precision="fp16_mixed"),
            make_run("e", compression="topk"), make_run("f", sync="parameter_server")]
    styles = plot.run_styles(runs)
    assert styles["a"].color == styles["c"].color
    assert styles["b"].color == styles["e"].color
    distinct = [styles[i].color for i in ("a", "b", "d", "f")]
    assert len(set(distinct)) == 4
    # Runs of one strategy are told apart by marker or line style.
    assert (styles["a"].marker, styles["a"].linestyle) != (styles["c"].marker, styles["c"].linestyle)
    assert plot.strategy_colors(runs) == {"allreduce": styles["a"].color, "allreduce+topk": styles["b"].color,
                                          "allreduce+fp16_mixed": styles["d"].color,
                                          "parameter_server": styles["f"].color}


def test_strategy_colors_are_stable_for_a_report(example):
    first, second = plot.run_styles(example["runs"]), plot.run_styles(copy.deepcopy(example["runs"]))
    assert first == second
    assert len({s.color for s in first.values()}) == 1  # the example has one strategy
    assert len({(s.marker, s.linestyle) for s in first.values()}) == len(first)


def test_run_labels_carry_swept_values(example):
    assert rl.run_label(example["runs"][4]) == "accumulation_steps=2 ranks=2"
    assert rl.run_label(example["runs"][4], repeats=3) == "accumulation_steps=2 ranks=2 r0"
    assert rl.run_label({"id": "q.r0", "swept": {}}) == "q.r0"


# ---- real reports --------------------------------------------------------------------------------------------------

def test_real_report_plots(run_plot, real_report, tmp_path):
    """Each report named by GRADSWEEP_REPORTS plots without error into a fresh folder."""
    out = tmp_path / "figures"
    result = run_plot(real_report, "--out", out)
    assert result.returncode == 0, f"{real_report}:\n{result.stderr}"
    written = [Path(line) for line in result.stdout.splitlines()]
    assert written, f"{real_report}: no figure written\n{result.stderr}"
    for path in written:
        assert_png(path)
