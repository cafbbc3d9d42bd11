"""tools/plot.py: the figures it writes from the example report (and real reports, GRADSWEEP_REPORTS), its helpers
(heatmap grid and its labels and numbers, strategy hue families and run shades, line styles, label shortening), and its
refusal of bad input."""
import colorsys
import copy
import itertools
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import matplotlib.colors
import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pytest

import plot
import report_lib as rl
from tools_test_paths import PLOT

# The example report has a cluster.ranks axis (throughput against ranks) and no modeled clock.
FIGURES = ["loss_vs_step.png", "loss_vs_time.png", "accuracy_vs_time.png", "step_breakdown.png",
           "heatmap_eval_accuracy.png", "throughput_vs_ranks.png"]
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
    assert not pngs_under(example_copy.parent)  # checked before any figure is written


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
    assert "heatmap" not in result.stderr  # a heatmap needs two axes: nothing to say about one that does not apply
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


def pngs_under(folder):
    return sorted(Path(folder).rglob("*.png"))


def test_a_bad_report_among_good_ones_writes_nothing(run_plot, example_copy, tmp_path):
    """Every report is checked before any figure is written: one bad report, every error named, no file."""
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    worse = tmp_path / "worse.json"
    worse.write_text("[]")
    result = run_plot(example_copy, bad, worse)
    assert result.returncode == 2
    assert str(bad) in result.stderr and str(worse) in result.stderr
    assert "no figure written" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert not pngs_under(tmp_path)


@pytest.mark.parametrize("args", [
    ["--x", "compression.ratio"],
    ["--y", "lr"],
    ["--x", "ranks", "--y", "cluster.ranks"],  # the same axis twice
    ["--x", "7"],
], ids=["unknown x", "unknown y", "same axis", "index out of range"])
def test_a_bad_axis_argument_writes_nothing(run_plot, example_copy, args):
    result = run_plot(example_copy, *args)
    assert result.returncode == 2, result.stderr
    assert str(example_copy) in result.stderr
    assert "Traceback" not in result.stderr
    assert not pngs_under(example_copy.parent)


def test_an_axis_one_of_several_reports_lacks_writes_nothing(run_plot, example_copy, example, tmp_path):
    """--x ranks fits the first report but not the second, which has one axis only: nothing is written at all."""
    example["axes"] = example["axes"][:1]
    one_axis = tmp_path / "one" / "report.json"
    one_axis.parent.mkdir()
    one_axis.write_text(json.dumps(example))
    out = tmp_path / "figures"
    result = run_plot(example_copy, one_axis, "--x", "ranks", "--out", out)
    assert result.returncode == 2
    assert str(one_axis) in result.stderr and str(example_copy) not in result.stderr
    assert not out.exists()
    assert not pngs_under(tmp_path)


def test_an_out_path_that_is_a_file_writes_nothing(run_plot, example_copy, tmp_path):
    out = tmp_path / "taken"
    out.write_text("a file, not a folder")
    for target in (out, out / "below"):
        result = run_plot(example_copy, "--out", target)
        assert result.returncode == 2
        assert "not a folder" in result.stderr and "Traceback" not in result.stderr
        assert not pngs_under(tmp_path)


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


def on_colormap(color, family):
    """Whether color is (to rounding) a shade of the colormap `family`: its hue family."""
    shades = plt.get_cmap(family)(np.linspace(0.0, 1.0, 1001))[:, :3]
    return float(np.min(np.abs(shades - matplotlib.colors.to_rgb(color)).max(axis=1))) < 0.01


def hue(color):
    return colorsys.rgb_to_hsv(*matplotlib.colors.to_rgb(color))[0]


def hue_distance(a, b):
    d = abs(hue(a) - hue(b)) % 1.0
    return min(d, 1.0 - d)


def lightness(color):
    return colorsys.rgb_to_hls(*matplotlib.colors.to_rgb(color))[1]


def test_one_hue_family_per_strategy_and_a_shade_per_run():
    runs = [make_run("a"), make_run("b", compression="topk"), make_run("c"), make_run("d", precision="fp16_mixed"),
            make_run("e", compression="topk"), make_run("f", sync="parameter_server"), make_run("g")]
    for i, run in enumerate(runs):
        run["index"] = i
    styles = plot.run_styles(runs)
    # Same strategy -> same hue family; different strategies -> different families.
    assert styles["a"].family == styles["c"].family == styles["g"].family
    assert styles["b"].family == styles["e"].family
    assert len({styles[i].family for i in "abdf"}) == 4
    for run_id, style in styles.items():
        assert on_colormap(style.color, style.family), run_id
    colors = plot.strategy_colors(runs)
    assert list(colors) == ["allreduce", "allreduce+topk", "allreduce+fp16_mixed", "parameter_server"]
    assert all(hue_distance(x, y) > 0.1 for x, y in itertools.combinations(colors.values(), 2))
    for run_id, strategy in [("a", "allreduce"), ("c", "allreduce"), ("g", "allreduce"), ("e", "allreduce+topk")]:
        assert hue_distance(styles[run_id].color, colors[strategy]) < 0.1
    # Distinct runs of one strategy -> distinct colors, dark to light in run order, and distinct markers.
    assert lightness(styles["a"].color) < lightness(styles["c"].color) < lightness(styles["g"].color)
    assert lightness(styles["b"].color) < lightness(styles["e"].color)
    assert len({styles[i].marker for i in "acg"}) == 3


def test_shades_follow_the_run_index_not_the_list_order():
    runs = [make_run("late"), make_run("early")]
    runs[0]["index"], runs[1]["index"] = 1, 0
    styles = plot.run_styles(runs)
    assert lightness(styles["early"].color) < lightness(styles["late"].color)
    assert styles["early"].marker == plot.MARKERS[0]


def test_a_twelve_run_sweep_of_one_strategy_has_twelve_colors():
    """The quickstart case: 12 runs, all allreduce."""
    runs = [dict(make_run(f"r{i}"), index=i) for i in range(12)]
    styles = plot.run_styles(runs)
    assert len({s.family for s in styles.values()}) == 1
    assert len({s.color for s in styles.values()}) == 12
    assert len({(s.color, s.marker) for s in styles.values()}) == 12
    light = [lightness(styles[f"r{i}"].color) for i in range(12)]
    assert light == sorted(light)


def test_strategy_colors_are_stable_for_a_report(example):
    first, second = plot.run_styles(example["runs"]), plot.run_styles(copy.deepcopy(example["runs"]))
    assert first == second
    assert len({s.family for s in first.values()}) == 1  # the example has one strategy
    assert len({s.color for s in first.values()}) == len(first)
    assert len({s.marker for s in first.values()}) == len(first)


def test_train_curves_are_solid_and_only_eval_curves_dashed(example):
    example["runs"][1]["config"]["compression"]["kind"] = "topk"
    fig, ax = plt.subplots()
    try:
        plot.draw_loss(ax, example, plot.run_styles(example["runs"]), "step")
        drawn = rl.drawn_runs(example)
        train = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
        assert len(train) == len(drawn)
        assert all(line.get_linestyle() == "-" for line in train)
        others = [line for line in ax.get_lines() if line.get_label().startswith("_")]
        with_eval = [r for r in drawn if any(not math.isnan(v) for v in rl.series(r, "eval_loss")[1])]
        assert sum(line.get_linestyle() == "--" for line in others) == len(with_eval) > 0
        assert not [line for line in ax.get_lines() if line.get_linestyle() in ("-.", ":")]
    finally:
        plt.close(fig)


def test_heatmap_marks_unreached_targets(example, tmp_path, monkeypatch):
    accumulation, ranks = axes_of(example)
    example["runs"][0]["time_to_target"].update(reached=False, step=None, measured_s=None)  # K=1, ranks=1
    repeat = copy.deepcopy(example["runs"][1])  # K=1, ranks=2, reached; its repeat does not reach the target
    repeat.update(id=repeat["id"].replace(".r0", ".r1"), repeat=1)
    repeat["time_to_target"].update(reached=False, step=None, measured_s=None)
    example["runs"].append(repeat)
    values, counts, labels = plot.heatmap_matrix(example, accumulation, ranks, "time_to_target_s")
    assert math.isnan(values[0, 0]) and labels[0][0] == "not reached"
    assert counts[1, 0] == 1 and labels[1][0] == "1/2 reached"
    assert labels[2] == ["failed", "skipped"]

    figures = []
    monkeypatch.setattr(plot, "save", lambda fig, path: figures.append(fig) or path)
    plot.fig_heatmap(example, plot.run_styles(example["runs"]), tmp_path, "", "time_to_target_s")
    ax = figures[0].axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert "not reached" in texts and "failed" in texts and "skipped" in texts
    assert any(t.endswith("\n1/2 reached") for t in texts)
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 3  # the unreached cell, the failed and the skipped one
    plt.close(figures[0])


def test_heatmap_numbers_share_one_format():
    assert [plot.cell_format(np.array([0.8502, 0.78, NAN]))(v) for v in (0.8502, 0.78)] == ["0.850", "0.780"]
    assert [plot.cell_format(np.array([12.34, 1.5]))(v) for v in (12.34, 1.5)] == ["12.3", "1.5"]
    assert [plot.cell_format(np.array([51234.4, 900.0]))(v) for v in (51234.4, 900.0)] == ["51,234", "900"]
    assert plot.cell_format(np.array([0.0848, 0.1855]))(0.0848) == "0.085"
    assert plot.cell_format(np.array([NAN]))(1.0) == "1.00"


def test_run_labels_carry_swept_values(example):
    assert rl.run_label(example["runs"][4]) == "accumulation_steps=2 ranks=2"
    assert rl.run_label(example["runs"][4], repeats=3) == "accumulation_steps=2 ranks=2 r0"
    assert rl.run_label({"id": "q.r0", "swept": {}}) == "q.r0"
    # Real reports may list `swept` in another order (JSON objects are unordered); the axes give the order.
    run = {"id": "x", "swept": {"cluster.ranks": 2, "training.accumulation_steps": 1}}
    assert rl.run_label(run) == "ranks=2 accumulation_steps=1"
    assert rl.run_label(run, axes=example["axes"]) == "accumulation_steps=1 ranks=2"


def test_long_json_values_are_cut_in_labels(example):
    value = {"kind": "topk", "ratio": 0.01, "error_feedback": True, "warmup_steps": 100}
    text = rl.label_value(value)
    assert len(text) == rl.LABEL_VALUE_CHARS == 30
    assert text == '{"kind":"topk","ratio":0.01,"\u2026'
    assert rl.label_value([784, 256, 10]) == "[784,256,10]"
    assert rl.label_value("fp16_mixed") == "fp16_mixed"
    assert rl.label_value(0.05) == "0.05"
    run = {"id": "x", "swept": {"compression": value, "cluster.ranks": 2}}
    assert rl.run_label(run) == f"compression={text} ranks=2"
    axis = {"paths": ["compression"], "values": [[value]]}
    assert rl.axis_value_text(axis, [value]) == text
    # Along an axis of several objects, only the keys that differ show.
    axis = {"paths": ["compression"], "values": [[value], [dict(value, ratio=0.1)], [dict(value, kind="qsgd")]]}
    assert rl.axis_value_text(axis, [value]) == '{\u2026,"kind":"topk","ratio":0.01}'
    assert rl.label_value(value, among=[value, dict(value, ratio=0.1)]) == '{\u2026,"ratio":0.01}'
    assert rl.label_value(value, among=[value, {"kind": "none"}]) == text  # every key differs: the whole object
    zipped = {"paths": ["compression", "cluster.ranks"], "values": [[value, 4]]}
    assert rl.axis_value_text(zipped, [value, 4]) == f"compression={text},ranks=4"
    # A zip group's null members are left out; all null, each shows.
    zipped = {"paths": ["training.optimizer.kind", "training.optimizer.freeze_step", "training.optimizer.lr"],
              "values": [["adam", None, 0.001], ["onebit_adam", 20, 0.001], [None, None, None]]}
    assert rl.axis_value_text(zipped, ["adam", None, 0.001]) == "kind=adam,lr=0.001"
    assert rl.axis_value_text(zipped, ["onebit_adam", 20, 0.001]) == "kind=onebit_adam,freeze_step=20,lr=0.001"
    assert rl.axis_value_text(zipped, [None, None, None]) == "kind=null,freeze_step=null,lr=null"


# ---- large reports: figure sizes, legends, labels, step ticks --------------------------------------------------------

def sweep_report(example, x_values, y_values, repeats=1, x_path="training.accumulation_steps",
                 y_path="training.optimizer.lr", strategies=("allreduce",)):
    """A report of len(strategies) x len(x_values) x len(y_values) x repeats passed runs, each a copy of the example's
    first run with its own swept values (strategies are swept too, as sync.kind, when there are several)."""
    template = example["runs"][0]
    doc = copy.deepcopy(example)
    doc["axes"] = [{"paths": [x_path], "values": [[v] for v in x_values]},
                   {"paths": [y_path], "values": [[v] for v in y_values]}]
    if len(strategies) > 1:
        doc["axes"].insert(0, {"paths": ["sync.kind"], "values": [[k] for k in strategies]})
    doc["repeats"] = repeats
    doc["runs"] = []
    for kind, x, y, repeat in itertools.product(strategies, x_values, y_values, range(repeats)):
        run = copy.deepcopy(template)
        index = len(doc["runs"])
        swept = {x_path: x, y_path: y}
        if len(strategies) > 1:
            swept = {"sync.kind": kind, **swept}
        run.update(id=f"big.{index}.r{repeat}", index=index, repeat=repeat, swept=swept)
        run["config"]["sync"]["kind"] = kind
        for k, point in enumerate(run["convergence"]["series"]):
            point["train_loss"] = 2.0 / (1 + k) + 0.001 * index
        doc["runs"].append(run)
    return doc


def png_size(path):
    """(width, height) of a PNG in pixels."""
    image = matplotlib.image.imread(path)
    return image.shape[1], image.shape[0]


LONG_VALUE = {"kind": "topk", "ratio": 0.01, "error_feedback": True}
LARGE_REPORTS = {
    # 120 runs: 10 x 6 sweep points, 2 repeats (the QA case: 112 runs drew a 11430 px wide step breakdown).
    "120 runs with repeats": dict(x_values=list(range(1, 11)), y_values=[0.01, 0.02, 0.05, 0.1, 0.2, 0.5],
                                  repeats=2),
    # 120 runs, no repeats to average: 120 horizontal bars.
    "120 runs without repeats": dict(x_values=list(range(1, 13)), y_values=[0.01 * k for k in range(1, 11)]),
    # 4 strategies x 30 runs with long JSON values in every label.
    "120 runs, 4 strategies, long values": dict(
        x_values=[dict(LONG_VALUE, ratio=r) for r in (0.01, 0.02, 0.05, 0.1, 0.2)],
        y_values=list(range(1, 7)), x_path="compression", strategies=("allreduce", "local_sgd", "ps", "gossip")),
    # A 40 x 12 heatmap (and 480 horizontal bars).
    "480 runs, 40 x 12 heatmap": dict(x_values=list(range(40)), y_values=list(range(12))),
}


@pytest.mark.parametrize("case", list(LARGE_REPORTS), ids=list(LARGE_REPORTS))
def test_figure_sizes_are_capped_however_many_runs(example, tmp_path, case):
    doc = sweep_report(example, **LARGE_REPORTS[case])
    rl.validate_report(doc)
    written = plot.write_figures(doc, tmp_path)
    has_ranks = any(a["paths"] == ["cluster.ranks"] for a in doc["axes"])
    assert sorted(p.name for p in written) == sorted(f for f in FIGURES
                                                     if has_ranks or f != "throughput_vs_ranks.png")
    for path in written:
        width, height = png_size(path)
        assert width <= plot.MAX_WIDTH_PX and height <= plot.MAX_HEIGHT_PX, f"{path.name}: {width} x {height}"
        assert width >= 600 and height >= 400, f"{path.name}: {width} x {height}"


def test_the_example_figures_keep_their_size(example_copy, example):
    """A small report is drawn as before: nothing shrinks or grows for it."""
    written = plot.write_figures(example, example_copy.parent)
    sizes = {p.name: png_size(p) for p in written}
    for name, (width, height) in sizes.items():
        assert 600 <= width <= 1400 and 400 <= height <= 800, f"{name}: {width} x {height}"


def figure_of(monkeypatch, draw):
    """The figure a fig_* call would save (not closed: the caller closes it)."""
    figures = []
    monkeypatch.setattr(plot, "save", lambda fig, path: figures.append(fig) or path)
    draw()
    assert len(figures) == 1
    return figures[0]


def test_many_runs_get_a_strategy_legend_and_a_run_order_color_bar(example, tmp_path, monkeypatch):
    doc = sweep_report(example, list(range(1, 11)), [0.01, 0.02, 0.05, 0.1, 0.2, 0.5], repeats=2)
    fig = figure_of(monkeypatch, lambda: plot.fig_loss_vs_step(doc, plot.run_styles(doc["runs"]), tmp_path, ""))
    try:
        ax = fig.axes[0]
        texts = [t.get_text() for t in ax.get_legend().get_texts()]
        assert texts == ["allreduce: 120 runs", "train loss", "eval loss"]
        # The color bar (the figure's second axes) ticks the values of the first axis, in run order.
        bar = fig.axes[1]
        assert [t.get_text() for t in bar.get_xticklabels()] == [str(v) for v in range(1, 11)]
        assert "training.accumulation_steps" in bar.get_xlabel()
        assert not [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    finally:
        plt.close(fig)

    doc = sweep_report(example, [1, 2, 3], [0.1, 0.2, 0.3, 0.4, 0.5], strategies=("allreduce", "local_sgd"))
    fig = figure_of(monkeypatch, lambda: plot.fig_loss_vs_step(doc, plot.run_styles(doc["runs"]), tmp_path, ""))
    try:
        legend = fig.axes[0].get_legend()
        assert legend.get_title().get_text() == "30 runs"
        assert [t.get_text() for t in legend.get_texts()][:2] == ["allreduce: 15 runs", "local_sgd: 15 runs"]
        assert len(fig.axes) == 1  # no color bar: the shades belong to two strategies
    finally:
        plt.close(fig)


def test_twelve_runs_keep_a_legend_entry_each(example, tmp_path, monkeypatch):
    """The quickstart case: 12 runs are still listed one by one."""
    doc = sweep_report(example, [1, 2, 4, 8], [1, 2, 4], y_path="cluster.ranks")
    fig = figure_of(monkeypatch, lambda: plot.fig_loss_vs_step(doc, plot.run_styles(doc["runs"]), tmp_path, ""))
    try:
        texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        assert texts[0] == "accumulation_steps=1 ranks=1" and len(texts) == 12 + 2
        assert len(fig.axes) == 1
    finally:
        plt.close(fig)


def test_step_breakdown_averages_repeats_and_turns_sideways(example, tmp_path, monkeypatch):
    doc = sweep_report(example, list(range(1, 11)), [0.01, 0.02, 0.05, 0.1, 0.2, 0.5], repeats=2)
    runs = rl.drawn_runs(doc)
    rows = plot.breakdown_rows(doc, runs)
    assert len(rows) == 60 and all(len(row) == 2 for row in rows)
    assert all(rl.sweep_point(a) == rl.sweep_point(b) and a["repeat"] != b["repeat"] for a, b in rows)
    assert plot.breakdown_rows(example, rl.drawn_runs(example)) == [[r] for r in rl.drawn_runs(example)]
    fig = figure_of(monkeypatch, lambda: plot.fig_step_breakdown(doc, plot.run_styles(doc["runs"]), tmp_path, ""))
    try:
        ax = fig.axes[0]
        assert "mean of 2 repeats" in ax.get_title()
        assert len(ax.patches) == 60 * len(rl.PHASES)
        assert all(p.get_width() >= 0 for p in ax.patches)
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels[0] == "accumulation_steps=1 lr=0.01"  # a sweep point, no repeat suffix
        assert all(len(t) <= rl.LABEL_CHARS for t in labels)
        width, height = fig.get_size_inches() * plot.DPI
        assert width <= plot.MAX_WIDTH_PX and height <= plot.MAX_HEIGHT_PX
    finally:
        plt.close(fig)


def test_crowded_horizontal_bars_label_every_kth(example, tmp_path, monkeypatch):
    doc = sweep_report(example, list(range(20)), list(range(15)))  # 300 runs, no repeats
    fig = figure_of(monkeypatch, lambda: plot.fig_step_breakdown(doc, plot.run_styles(doc["runs"]), tmp_path, ""))
    try:
        ax = fig.axes[0]
        ticks = ax.get_yticks()
        assert 10 <= len(ticks) < 300
        spacing = (fig.get_size_inches()[1] - 2.2) / 300 * (ticks[1] - ticks[0])
        assert spacing >= plot.LABEL_ROW_IN
        assert f"one label per {round(ticks[1] - ticks[0])} bars" in ax.get_ylabel()
    finally:
        plt.close(fig)


def test_long_labels_are_cut_and_named_once(example):
    doc = sweep_report(example, [dict(LONG_VALUE, ratio=r) for r in (0.01, 0.02)], [1, 2], x_path="compression",
                       repeats=2, strategies=("allreduce", "parameter_server+powersgd+bf16_mixed"))
    labels, caption = plot.run_labels(doc, doc["runs"])
    # "kind=allreduce compression={...} lr=1 r0" is too long: the values only, named by the caption.
    assert caption == "kind, compression, lr (r: repeat)"
    # Every value shows, the longest cut most; objects by the keys that differ along their axis.
    # The strategy is swept (sync.kind): among the values, not in front of them.
    assert labels[0] == 'allreduce, {\u2026,"ratio":\u2026, 1 r0'
    assert labels[-1] == 'parameter\u2026, {\u2026,"ratio\u2026, 2 r1'
    assert all(len(label) <= rl.LABEL_CHARS for label in labels)
    # Strategies that differ without a swept path that sets them (hand-made reports) lead the label.
    doc = sweep_report(example, [1, 2], [0.1, 0.2], strategies=("allreduce", "parameter_server+powersgd+bf16_mixed"))
    for run in doc["runs"]:
        run["swept"].pop("sync.kind")
    labels, caption = plot.run_labels(doc, doc["runs"])
    assert caption is None
    assert labels[-1] == 'parameter_server+powersgd+bf1\u2026 accumulation_steps=2 lr=0.2'
    doc = sweep_report(example, [dict(LONG_VALUE, ratio=r) for r in (0.01, 0.02)], [1, 2], x_path="compression",
                       repeats=2)
    labels, caption = plot.run_labels(doc, doc["runs"])
    assert caption == "compression, lr (r: repeat)"
    assert labels[:3] == ['{\u2026,"ratio":0.01}, 1 r0', '{\u2026,"ratio":0.01}, 1 r1', '{\u2026,"ratio":0.01}, 2 r0']
    assert rl.shorten("parameter_server+powersgd+bf16_mixed") == "parameter_server+powersgd+bf1…"
    # Short labels keep their names.
    labels, caption = plot.run_labels(example, example["runs"])
    assert caption is None and labels[4] == "accumulation_steps=2 ranks=2"


def test_long_scenario_names_and_notes_are_cut(example, tmp_path):
    example["scenario_name"] = "a_scenario_with_a_very_long_name_" * 4
    for run in example["runs"][:3]:
        run["disposition"], run["message"] = "failed", "x" * 2000
    for path in plot.write_figures(example, tmp_path):
        width, height = png_size(path)
        assert width <= 1400 and height <= 900, f"{path.name}: {width} x {height}"


def test_big_heatmaps_drop_cell_numbers_and_thin_ticks(example, tmp_path, monkeypatch):
    def heatmap(doc):
        return figure_of(monkeypatch, lambda: plot.fig_heatmap(doc, plot.run_styles(doc["runs"]), tmp_path, "",
                                                              "train_loss"))

    fig = heatmap(sweep_report(example, list(range(40)), list(range(30))))
    try:
        ax = fig.axes[0]
        assert not ax.texts and "values by color only" in ax.get_title()
        assert len(ax.get_xticks()) == 40 and len(ax.get_yticks()) == 30  # 0.46 x 0.45 in cells: room for each
    finally:
        plt.close(fig)
    fig = heatmap(sweep_report(example, list(range(120)), [1, 2]))
    try:
        ax = fig.axes[0]
        ticks = ax.get_xticks()
        assert 40 <= len(ticks) <= 60 and ticks[1] - ticks[0] == 2  # 0.15 in columns: every other one labelled
        assert ax.get_xticklabels()[0].get_rotation() == 30
    finally:
        plt.close(fig)
    assert plot.tick_every(10, 1.0, 0.3) == 1 and plot.tick_every(10, 0.1, 0.25) == 3 and plot.tick_every(1, 0, 1) == 1


def test_a_heatmap_of_long_zip_group_labels_keeps_its_layout(example, tmp_path):
    """scenarios/strategies/onebit_adam.json's heatmap: 2 hardware profiles x 8 values of a 5-member zip group whose
    labels ran to 75 characters squeezed the axes to nothing (matplotlib: "constrained_layout not applied because
    axes sizes collapsed to zero"). With the null members left out and the figure widened for the labels that are
    left, it draws without the warning and within the size limit."""
    group = ["training.optimizer.kind", "training.optimizer.lr", "training.optimizer.freeze_step",
             "training.optimizer.var_freeze_step", "training.optimizer.local_step_scaler"]
    values = [["adam", 0.001, None, None, None], ["onebit_adam", 0.001, 20, None, None],
              ["zero_one_adam", 0.001, None, 100, 10], ["onebit_lamb", 0.01, 100000, None, None]]
    doc = sweep_report(example, ["h100-pcie-8", "h100-sxm-8"], [0], x_path="cluster.hardware")
    template = doc["runs"][0]
    doc["axes"][1] = {"paths": group, "values": values}
    doc["runs"] = []
    for x, v in itertools.product(["h100-pcie-8", "h100-sxm-8"], values):
        run = copy.deepcopy(template)
        run.update(id=f"z.{len(doc['runs'])}.r0", index=len(doc["runs"]),
                   swept={"cluster.hardware": x, **dict(zip(group, v))})
        doc["runs"].append(run)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = plot.fig_heatmap(doc, plot.run_styles(doc["runs"]), tmp_path, "", "train_loss")
    width, height = png_size(path)
    assert width <= 1400 and height <= 900, (width, height)
    assert [rl.axis_value_text(doc["axes"][1], v) for v in values] == [
        "kind=adam,lr=0.001", "kind=onebit_adam,lr=0.001,freeze_step=20",
        "kind=zero_one_adam,lr=0.001,var_freeze_step=100,local_step_scaler=10",
        "kind=onebit_lamb,lr=0.01,freeze_step=100000"]


def test_run_labels_group_a_zip_axis_and_leave_out_its_nulls():
    """onebit_adam's sweep (hardware x a 5-member zip group of optimizer settings): the legend and bar labels showed
    "h10..., adam, 0.0..., null, null,..." and two runs alike. A zip group is one value of the label, its non-null
    members joined by "/", and the caption names the group's members in that order."""
    group = ["training.optimizer.kind", "training.optimizer.lr", "training.optimizer.freeze_step",
             "training.optimizer.var_freeze_step", "training.optimizer.local_step_scaler"]
    axes = [{"paths": ["cluster.hardware"], "values": [["h100-pcie-8"], ["h100-sxm-8"]]},
            {"paths": group, "values": [["adam", 0.001, None, None, None], ["onebit_adam", 0.001, 20, None, None]]}]
    runs = []
    for hw, (kind, lr, freeze) in itertools.product(["h100-pcie-8", "h100-sxm-8"],
                                                    [("adam", 0.001, None), ("onebit_adam", 0.001, 20),
                                                     ("onebit_adam", 0.001, 100)]):
        swept = {"cluster.hardware": hw, group[0]: kind, group[1]: lr, group[2]: freeze, group[3]: None,
                 group[4]: None}
        runs.append({"id": f"o.{len(runs)}.r0", "swept": swept})
    texts = [rl.swept_text(r, 1, axes, names=False) for r in runs]
    # 28 characters for two values (LABEL_CHARS less the ", "): a group that does not fit is cut in its middle, so its
    # last members (freeze_step 20 or 100) stay; every label distinct and within LABEL_CHARS.
    for run, text in zip(runs, texts):
        hw, group_text = text.split(", ", 1)
        sw = run["swept"]
        full = "/".join(str(sw[p]) for p in group if sw[p] is not None)
        assert hw == sw["cluster.hardware"] and len(text) <= rl.LABEL_CHARS, text
        head, _, tail = group_text.partition("\u2026")
        assert group_text == full or (tail and full.startswith(head) and full.endswith(tail)), (group_text, full)
    assert texts[0] == "h100-pcie-8, adam/0.001" and texts[2].endswith("/100") and texts[1].endswith("/20"), texts
    assert len(set(texts)) == 6, texts
    assert rl.swept_caption(runs[0], 1, axes) == "hardware, kind/lr/freeze_step/var_freeze_step/local_step_scaler"
    assert rl.swept_text(runs[1], 1, axes) == "hardware=h100-sxm-8 kind=onebit_adam lr=0.001 freeze_step=20".replace(
        "sxm", "pcie")
    example = {"axes": axes, "runs": runs, "repeats": 1}
    labels, caption = plot.run_labels(example, runs)
    assert len(set(labels)) == 6 and caption, (labels, caption)


def test_notes_break_between_words_never_inside_an_id():
    """A "not drawn" note of long ids with hyphenated values breaks at blanks only: every line is a run of whole
    words of the note (the ids keep their h100-pcie-8), none longer than the figure allows (16 characters an inch);
    one word longer than a line is cut with an ellipsis."""
    ids = [f"onebit_adam.hardware=h100-pcie-8.kind=onebit_adam.lr=0.001.freeze_step={k}.r0" for k in (20, 100, 7)]
    note = "not drawn: " + "; ".join(f"{i} (failed: out of memory)" for i in ids)
    words = note.split()
    lines = plot.note_lines(note, 6.0)  # 96 characters a line
    assert len(lines) > 1 and all(len(line) <= 96 for line in lines), lines
    assert " ".join(lines).split() == words, lines  # whole words, in order, nothing added or cut
    for line in lines:
        assert all(w in words for w in line.split()), line
    long = "x" * 200
    assert plot.note_lines(f"not drawn: {long}", 6.0) == ["not drawn:", "x" * 95 + "\u2026"]


def test_step_axes_have_integer_ticks(example, tmp_path, monkeypatch):
    """Three steps would get ticks at 1.25, 1.5, ... without an integer locator."""
    for run in example["runs"]:
        run["convergence"]["series"] = run["convergence"]["series"][:3]
    fig = figure_of(monkeypatch, lambda: plot.fig_loss_vs_step(example, plot.run_styles(example["runs"]), tmp_path,
                                                              ""))
    try:
        fig.canvas.draw()
        ax = fig.axes[0]
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert len(ticks) >= 2
        assert all(float(t).is_integer() for t in ticks), ticks
    finally:
        plt.close(fig)


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


# ---- compression: accuracy against bytes sent and against the modeled clock -----------------------------------------

def compression_stats(kind, collective, wire_bytes, payload_bytes):
    """A run's compression object (reports/README.md, compression) with the given byte counts, 1000 parameters."""
    timing = {"count": 16, "p50_ms": 0.1, "mean_ms": 0.1, "total_ms": 1.6}
    return {"kind": kind, "collective": collective, "error_feedback": "plain",
            "dense_bytes_per_rank_per_step": 4000, "payload_bytes_per_rank_per_step": payload_bytes,
            "wire_bytes_per_rank_per_step": wire_bytes, "compression_ratio": 4000 / payload_bytes,
            "compress_time": timing, "decompress_time": dict(timing), "relative_error": None, "residual_norm": None}


def hand_point(step, modeled_s, accuracy=None):
    return {"step": step, "measured_s": 0.01 * step, "modeled_s": modeled_s, "train_loss": 2.0 / step,
            "eval_loss": None if accuracy is None else 1.5 / step, "eval_accuracy": accuracy}


def compressed_report(example):
    """Two compressed runs (topk over all-gather, fp16 over all-reduce) on 4 ranks and one uncompressed run, each
    evaluated at steps 2 and 4; only the envelope (tool, context) and the config sections come from the example."""
    template = example["runs"][0]
    runs = []
    specs = [
        # kind, compression object, communication bytes per rank, series
        ("topk", compression_stats("topk", "all_gather", 2400.0, 800.0), [2400, 2400, 2400, 2400],
         [hand_point(1, 0.5), hand_point(2, 1.0, 0.40), hand_point(3, 1.5), hand_point(4, 2.0, 0.55)]),
        ("fp16", compression_stats("fp16", "all_reduce", 3000.0, 2000.0), [3000, 3000, 3000, 3000],
         [hand_point(1, 0.7), hand_point(2, 1.4, 0.45), hand_point(3, 2.1), hand_point(4, 2.8, 0.60)]),
        ("none", None, [6000, 6000, 6000, 6004],
         [hand_point(1, 0.9), hand_point(2, 1.8, 0.50), hand_point(3, 2.7), hand_point(4, 3.6, 0.65)]),
    ]
    for index, (kind, stats, sent, points) in enumerate(specs):
        config = copy.deepcopy(template["config"])
        config["compression"]["kind"] = kind
        config["cluster"]["ranks"] = 4
        runs.append({"id": f"comp.kind={kind}.r0", "index": index, "repeat": 0, "swept": {"compression.kind": kind},
                     "config": config, "disposition": "passed", "message": None, "steps_completed": 4,
                     "wall_s": 0.1, "timing": None, "throughput": {"samples_per_s": None, "modeled_samples_per_s": None},
                     "communication": {"bytes_sent_per_rank_per_step": sent, "algbw_GBps": None,
                                       "busbw_GBps": None},
                     "convergence": {"series": points,
                                     "final": {"train_loss": 0.5, "eval_loss": 0.4,
                                               "eval_accuracy": points[-1]["eval_accuracy"]}},
                     "time_to_target": None, "trace": None, "compression": stats})
    doc = {key: copy.deepcopy(example[key]) for key in ("schema_version", "tool", "context")}
    doc.update(scenario_name="comp", repeats=1, runs=runs,
               axes=[{"paths": ["compression.kind"], "values": [["topk"], ["fp16"], ["none"]]}])
    return doc


def test_cumulative_bytes_are_steps_times_the_wire_bytes_per_step(example):
    doc = compressed_report(example)
    rl.validate_report(doc)
    topk, fp16, none = doc["runs"]
    assert rl.compressed(topk) and rl.compressed(fp16) and not rl.compressed(none)
    assert rl.cumulative_bytes(topk) == ([1, 2, 3, 4], [2400.0, 4800.0, 7200.0, 9600.0])
    assert rl.cumulative_bytes(fp16) == ([1, 2, 3, 4], [3000.0, 6000.0, 9000.0, 12000.0])
    # Without a compression object: the mean over ranks of communication.bytes_sent_per_rank_per_step.
    assert rl.wire_bytes_per_step(none) == 6001.0
    none["communication"]["bytes_sent_per_rank_per_step"] = []
    assert math.isnan(rl.wire_bytes_per_step(none))


def test_accuracy_vs_bytes_draws_each_run_at_its_cumulative_bytes(example, tmp_path, monkeypatch):
    doc = compressed_report(example)
    fig = figure_of(monkeypatch, lambda: plot.fig_accuracy_vs_bytes(doc, plot.run_styles(doc["runs"]), tmp_path, ""))
    try:
        ax = fig.axes[0]
        assert ax.get_xscale() == "log"
        lines = ax.get_lines()
        # One line per run, at the evaluated steps 2 and 4: step x wire bytes per rank per step.
        assert [list(line.get_xdata()) for line in lines] == [[2 * 2400.0, 4 * 2400.0], [2 * 3000.0, 4 * 3000.0],
                                                              [2 * 6001.0, 4 * 6001.0]]
        assert [list(line.get_ydata()) for line in lines] == [[0.40, 0.55], [0.45, 0.60], [0.50, 0.65]]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["kind=topk", "kind=fp16", "kind=none"]
    finally:
        plt.close(fig)


def test_accuracy_vs_modeled_time_uses_the_modeled_clock(example, tmp_path, monkeypatch):
    doc = compressed_report(example)
    draw = lambda: plot.fig_accuracy_vs_modeled_time(doc, plot.run_styles(doc["runs"]), tmp_path, "")  # noqa: E731
    fig = figure_of(monkeypatch, draw)
    try:
        xs = [list(line.get_xdata()) for line in fig.axes[0].get_lines()]
        assert xs == [[1.0, 2.0], [1.4, 2.8], [1.8, 3.6]]
        assert fig.axes[0].get_xlabel() == "modeled time (s)"
    finally:
        plt.close(fig)


def test_a_compressed_report_gets_the_bytes_and_modeled_time_figures(run_plot, example, tmp_path):
    path = write_report(tmp_path, compressed_report(example))
    result = run_plot(path)
    assert result.returncode == 0, result.stderr
    written = sorted(Path(line).name for line in result.stdout.splitlines())
    assert "accuracy_vs_bytes.png" in written and "accuracy_vs_modeled_time.png" in written
    assert_png(tmp_path / "accuracy_vs_bytes.png")
    assert_png(tmp_path / "accuracy_vs_modeled_time.png")


def test_figures_that_do_not_apply_are_left_out_without_a_note(run_plot, example_copy):
    """The example has no compressor, no modeled clock (modeled_s null), no parameter server and no cache-capacity
    axis: the figures of those are not written and not mentioned (a quickstart printed four such notes); the failed
    and skipped runs are still named."""
    result = run_plot(example_copy)
    assert result.returncode == 0, result.stderr
    for name in ("accuracy_vs_bytes", "accuracy_vs_modeled_time", "staleness_versions", "staleness_clocks",
                 "step_breakdown_modeled", "data_cache_vs_capacity"):
        assert name not in result.stderr, result.stderr
        assert not (example_copy.parent / f"{name}.png").exists()
    assert "not written" not in result.stderr, result.stderr
    assert "tiny.accumulation_steps=1.ranks=4.r0" in result.stderr


def test_a_modeled_clock_without_accuracy_still_says_why_its_accuracy_figure_is_missing(run_plot, example, tmp_path):
    """Where the report has what a figure is for (a modeled clock) but not its data (eval accuracy), the note stays."""
    for run in example["runs"]:
        for k, point in enumerate(run["convergence"]["series"]):
            point["modeled_s"] = 0.5 * (k + 1)
            point["eval_accuracy"] = None
        run["convergence"]["final"]["eval_accuracy"] = None
    result = run_plot(write_report(tmp_path, example))
    assert result.returncode == 0, result.stderr
    assert "note: accuracy_vs_modeled_time.png not written: no run has eval_accuracy on the modeled clock" \
        in result.stderr, result.stderr


def staleness_report(example):
    """The example with a staleness object on its first two passed runs (hand-written histograms)."""
    doc = copy.deepcopy(example)
    runs = [r for r in doc["runs"] if r["disposition"] == "passed"][:2]
    hists = [({"values": [0], "counts": [8]}, {"values": [0], "counts": [8]}),
             ({"values": [0, 1, 3], "counts": [1, 2, 5]}, {"values": [0, 2], "counts": [6, 2]})]
    for run, (versions, clocks) in zip(runs, hists):
        run["staleness"] = {"ordering": "modeled", "staleness": "inf", "shards": 2, "dedicated": False,
                            "versions": dict(versions, mean=None, max=None), "clocks": dict(clocks, mean=None, max=None),
                            "wait_s_per_rank": [0.0, 0.0], "pushes_per_rank": [4, 4], "discarded_pushes": 0}
    return doc, [r["id"] for r in runs]


def test_staleness_histogram_is_the_fraction_of_applied_gradients(example):
    doc, ids = staleness_report(example)
    run = next(r for r in doc["runs"] if r["id"] == ids[1])
    assert rl.staleness_histogram(run, "versions") == ([0, 1, 3], [0.125, 0.25, 0.625])
    assert rl.staleness_histogram(run, "clocks") == ([0, 2], [0.75, 0.25])
    lockstep = next(r for r in doc["runs"] if r["id"] not in ids)
    assert rl.staleness_histogram(lockstep, "versions") == ([], [])


def test_staleness_figures_draw_one_line_per_parameter_server_run(example, tmp_path, monkeypatch):
    doc, ids = staleness_report(example)
    for unit, expected in (("versions", [([0.0], [1.0]), ([0.0, 1.0, 3.0], [0.125, 0.25, 0.625])]),
                           ("clocks", [([0.0], [1.0]), ([0.0, 2.0], [0.75, 0.25])])):
        fig = figure_of(monkeypatch, lambda: plot.fig_staleness(doc, plot.run_styles(doc["runs"]), tmp_path, "", unit))
        try:
            lines = [(list(map(float, l.get_xdata())), list(map(float, l.get_ydata()))) for l in fig.axes[0].get_lines()]
            assert lines == expected
            assert unit in fig.axes[0].get_xlabel()
        finally:
            plt.close(fig)
    # Without any parameter server run the figures are skipped.
    assert plot.fig_staleness(example, plot.run_styles(example["runs"]), tmp_path, "", "clocks") is None


def test_staleness_figure_says_what_is_missing(example, tmp_path, capsys):
    """QA: a timing-only parameter-server report was told "no parameter server run". The note names what is
    missing: no parameter-server run, only timing-only ones (which measure no staleness), or none that applied."""
    def note_of(doc):
        assert plot.fig_staleness(doc, plot.run_styles(doc["runs"]), tmp_path, "", "versions") is None
        return capsys.readouterr().err

    assert note_of(example) == ""  # no parameter server run: the figure does not apply, nothing to say
    timing = copy.deepcopy(example)
    drawn = rl.drawn_runs(timing)
    assert len(drawn) == 4
    for run in drawn[1:]:  # timing-only parameter server runs, as `--timing-only` writes them, beside a trained run
        run["config"]["sync"]["kind"] = "parameter_server"
        run["config"]["training"]["mode"] = "timing"
        run.pop("staleness", None)
    err = note_of(timing)
    assert "the 3 parameter server runs are timing-only" in err, err
    assert "no staleness measurements" in err and "no parameter server run" not in err, err
    # One of them trains but applied nothing (an empty histogram): said so, and the timing-only rest too.
    drawn[1]["config"]["training"]["mode"] = "train"
    drawn[1]["staleness"] = {"versions": {"values": [], "counts": []}, "clocks": {"values": [], "counts": []}}
    err = note_of(timing)
    assert "the parameter server run that trains applied no gradient" in err, err
    assert "; 2 more are timing-only" in err, err
    # Every drawn run timing-only: the figure does not apply (write_figures says once that such runs train nothing).
    for run in drawn:
        run["config"]["sync"]["kind"] = "parameter_server"
        run["config"]["training"]["mode"] = "timing"
        run.pop("staleness", None)
    assert note_of(timing) == ""


# ---- data cache figure -----------------------------------------------------------------------------------------------

def epoch_entry(epoch, step_modeled_s, stall_modeled_s, step_measured_s, stall_measured_s, steps=10):
    """One runs[].data.per_rank[].epochs entry (reports/README.md, "data") with the given times."""
    return {"epoch": epoch, "epoch_last": epoch, "steps": steps, "samples": 100, "hits": 0, "hit_rate": 0.0,
            "peer_samples": 0, "peer_rate": 0.0, "storage_samples": 100, "storage_bytes": 1.0, "peer_bytes": 0.0,
            "fetch_modeled_s": stall_modeled_s, "stall_measured_s": stall_measured_s,
            "stall_modeled_s": stall_modeled_s, "step_measured_s": step_measured_s,
            "step_modeled_s": step_modeled_s, "stall_share_measured": stall_measured_s / step_measured_s,
            "stall_share_modeled": stall_modeled_s / step_modeled_s}


def data_cache_report(example):
    """storage {nfs, object_store} x capacity {0, 0.5, 1} x policy {static, partitioned}, each run with data totals
    whose modeled step time and stall share are set from its swept values (known here)."""
    template = example["runs"][0]
    doc = copy.deepcopy(example)
    storages, capacities, policies = ["nfs", "object_store"], [0, 0.5, 1], ["static", "partitioned"]
    doc["axes"] = [{"paths": ["data.storage"], "values": [[v] for v in storages]},
                   {"paths": ["data.cache.capacity_fraction"], "values": [[v] for v in capacities]},
                   {"paths": ["data.cache.policy"], "values": [[v] for v in policies]}]
    doc["repeats"] = 1
    doc["runs"] = []
    for storage, cap, policy in itertools.product(storages, capacities, policies):
        run = copy.deepcopy(template)
        index = len(doc["runs"])
        run.update(id=f"dc.{index}.r0", index=index, repeat=0, disposition="passed",
                   swept={"data.storage": storage, "data.cache.capacity_fraction": cap, "data.cache.policy": policy})
        step_ms = (100.0 if storage == "object_store" else 1.0) * (1 - cap) + 0.1
        share = (1 - cap) * 0.9
        measured = copy.deepcopy(template["timing"]["measured"])
        step = copy.deepcopy(measured["step"])
        step["all"].update(mean_ms=step_ms, min_ms=step_ms, p50_ms=step_ms, max_ms=step_ms)
        run["timing"]["modeled"] = {"hardware": "h100-sxm-8", "phases": measured["phases"], "step": step,
                                    "communication": {"exposed": measured["step"], "overlapped": measured["step"],
                                                      "buckets": []}}
        totals = {"samples": 100, "hit_rate": cap, "peer_rate": 0.0, "storage_bytes": 1.0, "peer_bytes": 0.0,
                  "stall_measured_s": 0.0, "stall_modeled_s": 1.0, "stall_share_measured": 0.01,
                  "stall_share_modeled": share}
        run["data"] = {"storage": storage, "prefetch": 2,
                       "cache": {"policy": policy if cap > 0 else "none", "capacity_samples": int(cap * 100)},
                       "ranks_per_node": 8, "steps_per_epoch": 10, "max_queue_depth": [2],
                       "totals": totals,
                       "per_rank": [{"rank": 0, "epochs": [
                           epoch_entry(0, 1.0, 0.9, 1.0, 0.1),
                           epoch_entry(1, step_ms * 10 / 1e3, share * step_ms * 10 / 1e3, 2.0, 0.02)]}]}
        doc["runs"].append(run)
    return doc


def test_data_curves_group_runs_by_storage_and_policy_over_capacity(example):
    doc = data_cache_report(example)
    axis = rl.capacity_axis(doc)
    assert axis["paths"] == ["data.cache.capacity_fraction"]
    curves = rl.data_curves(doc, axis)
    assert sorted(curves) == ["storage=nfs, policy=partitioned", "storage=nfs, policy=static",
                              "storage=object_store, policy=partitioned", "storage=object_store, policy=static"]
    points = curves["storage=object_store, policy=static"]
    assert [c for c, _ in points] == [0, 0.5, 1]
    assert [rl.modeled_step_mean_ms(r) for _, r in points] == pytest.approx([100.1, 50.1, 0.1])
    assert [rl.data_totals(r)["stall_share_modeled"] for _, r in points] == pytest.approx([0.9, 0.45, 0.0])
    # The last epoch: mean modeled step ms, modeled and measured stall shares.
    assert [rl.last_epoch_data(r) for _, r in points] == [pytest.approx((100.1, 0.9, 0.01)),
                                                          pytest.approx((50.1, 0.45, 0.01)),
                                                          pytest.approx((0.1, 0.0, 0.01))]


def test_data_cache_figure_is_written_for_a_capacity_sweep_only(run_plot, example, tmp_path):
    path = write_report(tmp_path, data_cache_report(example))
    result = run_plot(path)
    assert result.returncode == 0, result.stderr
    written = {Path(line).name for line in result.stdout.splitlines()}
    assert "data_cache_vs_capacity.png" in written
    assert_png(tmp_path / "data_cache_vs_capacity.png")
    other = tmp_path / "other"
    other.mkdir()
    result = run_plot(write_report(other, example))
    assert "data_cache_vs_capacity.png" not in result.stdout
    assert "data_cache_vs_capacity" not in result.stderr  # no capacity axis: the figure does not apply


# ---- --summary: one scenario on one or more hardware profiles -------------------------------------------------------

def zip_report():
    """A hand-written report with a zip group of three paths over four values and an axis of two, like
    scenarios/strategies/async_ps.json: labels must come from the values that differ from the first run."""
    group = {"paths": ["sync.kind", "sync.staleness", "training.optimizer.momentum"],
             "values": [["allreduce", 0, 0.9], ["parameter_server", 0, 0.9], ["parameter_server", "inf", 0.9],
                        ["allreduce", 0, 0.0]]}
    noise = {"paths": ["cluster.stragglers.factors", "cluster.stragglers.noise.kind", "cluster.stragglers.noise.sigma"],
             "values": [[None, "none", 0], [[1, 1, 1.5], "lognormal", 0.2]]}
    runs = []
    for n in noise["values"]:
        for g in group["values"]:
            swept = dict(zip(noise["paths"], n)) | dict(zip(group["paths"], g))
            runs.append({"id": f"z.{len(runs)}.r0", "repeat": 0, "swept": swept})
    return {"scenario_name": "z", "axes": [noise, group], "runs": runs}


def test_distinguishing_paths_of_a_zip_group():
    report = zip_report()
    noise, group = report["axes"]
    # Each noise path alone tells the two values apart; sigma has the shortest texts ("0", "0.2").
    assert rl.distinguishing_paths(noise) == ["cluster.stragglers.noise.sigma"]
    # kind + staleness leave (allreduce, 0) twice; staleness + momentum leave (0, 0.9) twice: all three are needed.
    assert rl.distinguishing_paths(group) == group["paths"]
    assert rl.distinguishing_paths({"paths": ["a"], "values": [[1], [2]]}) == ["a"]
    # b alone separates all three values; a and c each only two.
    assert rl.distinguishing_paths({"paths": ["a", "b", "c"], "values": [[1, 1, 1], [1, 2, 2], [2, 3, 2]]}) == ["b"]


def test_summary_labels_name_what_differs_from_the_first_run():
    assert rl.SUMMARY_LABEL_CHARS == 56
    report = zip_report()
    labels, reference = rl.summary_labels(report, report["runs"])
    assert labels == [
        "reference",
        "kind=parameter_server",
        "kind=parameter_server staleness=inf",
        "momentum=0.0",
        # All three noise paths differ: "factors=[1,1,1.5] kind=lognormal sigma=0.2" (42 characters, at most 56).
        "factors=[1,1,1.5] kind=lognormal sigma=0.2",
        # With a sync path too, "kind" names two paths and the text is over 56 characters: each zip group keeps only
        # the paths that tell its values apart, sigma for the noise group.
        "sigma=0.2 kind=parameter_server",
        "sigma=0.2 kind=parameter_server staleness=inf",
        # No second "kind" here: 55 characters, all kept.
        "factors=[1,1,1.5] kind=lognormal sigma=0.2 momentum=0.0",
    ]
    assert reference == ("factors=null cluster.stragglers.noise.kind=none sigma=0 sync.kind=allreduce staleness=0 "
                         "momentum=0.9")


def test_summary_draws_each_profile_and_marks_runs_without_a_time_to_target(tmp_path, monkeypatch):
    """compare_old.json and compare_new.json as the same scenario on two profiles (their folder is the same, so the
    bars are named by file). Time to target bars in ms: old R0 500, R1 200; new R0 500, R2 750 (R1 not reached, R3
    absent from new; old R2 not reached, R3 diverged)."""
    from tools_test_paths import REPO_ROOT
    paths = [REPO_ROOT / "tests/tools/data/compare_old.json", REPO_ROOT / "tests/tools/data/compare_new.json"]
    old, new = (rl.load_report(p) for p in paths)
    for run in old["runs"]:  # give both reports a hardware profile of their own
        if run.get("timing"):
            run["timing"]["modeled"]["hardware"] = "h100-pcie-8"
    fig = figure_of(monkeypatch, lambda: plot.fig_summary([old, new], paths, tmp_path / "s.png"))
    try:
        ax_t, ax_s, ax_a = fig.axes[:3]
        widths = sorted(round(p.get_width(), 6) for p in ax_t.patches)
        assert widths == [200.0, 500.0, 500.0, 750.0]
        texts = [t.get_text().strip() for t in ax_t.texts]
        assert texts.count("not reached") == 2 and "diverged" in texts and "not in this report" in texts
        assert [t.get_text() for t in fig.legends[0].get_texts()] == ["h100-pcie-8", "h100-sxm-8"]
        assert [t.get_text() for t in ax_t.get_yticklabels()] == ["reference", "ranks=4", "accumulation_steps=2",
                                                                  "accumulation_steps=2 ranks=4"]  # 28 chars a line
        # Accuracy bars: old 0.85, 0.84, 0.7123 (R3 diverged: none); new 0.86, 0.79, 0.8101.
        assert sorted(round(p.get_width(), 4) for p in ax_a.patches) == [0.7123, 0.79, 0.8101, 0.84, 0.85, 0.86]
    finally:
        plt.close(fig)


def test_summary_refuses_reports_of_different_scenarios(run_plot, example, tmp_path):
    from tools_test_paths import REPO_ROOT
    out = tmp_path / "s.png"
    result = run_plot("--summary", out, REPO_ROOT / "tests/tools/data/compare_old.json",
                      REPO_ROOT / "tests/tools/data/compare_other.json")
    assert result.returncode == 2
    assert "the reports are of 2 scenarios (cmp, cmp_local)" in result.stderr and not out.exists()
    result = run_plot("--summary", out, REPO_ROOT / "tests/tools/data/compare_old.json")
    assert result.returncode == 0, result.stderr
    assert_png(out)


@pytest.mark.parametrize("name,expected", [
    ("x.txt", "the file name must end in one of"),
    ("noext", "(it has no suffix)"),
    ("folder", "is a folder"),
    ("missing/x.png", "missing is not a folder"),
])
def test_summary_refuses_an_output_it_cannot_write_as_named(run_plot, tmp_path, name, expected):
    from tools_test_paths import REPO_ROOT
    (tmp_path / "folder").mkdir()
    out = tmp_path / name
    result = run_plot("--summary", out, REPO_ROOT / "tests/tools/data/compare_old.json")
    assert result.returncode == 2, result.stderr
    assert f"error: --summary {out}: " in result.stderr and expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]  # nothing written anywhere (no noext.png)
    assert not any((tmp_path / "folder").iterdir())


def test_summary_prints_the_path_it_wrote(run_plot, tmp_path):
    from tools_test_paths import REPO_ROOT
    out = tmp_path / "s.pdf"
    result = run_plot("--summary", out, REPO_ROOT / "tests/tools/data/compare_old.json")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(out)
    assert out.read_bytes().startswith(b"%PDF")


def test_guide_figures_refuses_an_unknown_scenario_name():
    import subprocess
    from tools_test_paths import REPO_ROOT
    script = REPO_ROOT / "tools/guide_figures.sh"
    names = [line.split()[0].strip('"') for line in script.read_text().split("SCENARIOS=(")[1].split(")")[0]
             .strip().splitlines()]
    assert "async_ps" in names
    result = subprocess.run([str(script), "async_ps", "nosuch"], capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin", "GRADSWEEP": "/nonexistent"})
    assert result.returncode == 2, result.stderr
    assert 'unknown scenario "nosuch"' in result.stderr and f"valid names: {' '.join(names)}" in result.stderr
    assert "total:" not in result.stdout


def test_a_report_with_no_runs_is_an_error_that_writes_nothing(run_plot, example_copy, tmp_path):
    """QA6 F9: `runs: []` wrote no figure yet exited 0; it is an error (exit 2) naming the report, like every other
    input with nothing to draw."""
    doc = json.loads(example_copy.read_text())
    doc["runs"] = []
    example_copy.write_text(json.dumps(doc))
    result = run_plot(example_copy)
    assert result.returncode == 2, result.stderr
    assert f"error: {example_copy}: the report has no runs" in result.stderr
    assert "no figure written" in result.stderr
    assert not pngs_under(tmp_path)


def test_an_output_folder_that_cannot_be_made_is_named_not_the_report(run_plot, example_copy, tmp_path):
    """QA6 F9: `--out /proc/...` (a folder no one can create, root included) blamed the report file; the message names
    the output folder and not the report."""
    target = "/proc/gradsweep_no_such_folder/figs"
    result = run_plot(example_copy, "--out", target)
    assert result.returncode == 2, result.stderr
    assert f"error: {target}: cannot write figures there" in result.stderr
    assert f"error: {example_copy}" not in result.stderr
    assert "Traceback" not in result.stderr


# ---- what plot.py prints --------------------------------------------------------------------------------------------

def run_plot_in(cwd, *args, columns=None):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, str(PLOT), *map(str, args)], capture_output=True, text=True, timeout=300,
                          cwd=str(cwd), env=env)


def test_figure_paths_print_relative_to_the_current_folder_when_under_it(example_copy, tmp_path):
    """gradsweep prints its report as reports/NAME/report.json; the figures of it print the same way, whether the
    report was named relative or absolute; outside the current folder they stay absolute."""
    for given in (example_copy.relative_to(tmp_path), example_copy):
        result = run_plot_in(tmp_path, given)
        assert result.returncode == 0, result.stderr
        assert sorted(result.stdout.splitlines()) == sorted(f"tiny/{name}" for name in FIGURES)
        assert "tiny/report.json: " in result.stderr and str(tmp_path) not in result.stderr, result.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_plot_in(elsewhere, example_copy)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == sorted(str(example_copy.parent / name) for name in FIGURES)


def test_notes_fit_80_columns_with_a_long_reason_on_lines_of_its_own(example, tmp_path):
    """Under COLUMNS=80 (a pipe, as a log of an 80-column terminal) every note has at most 79 characters; a reason
    too long for the note's line goes below it, indented by two spaces."""
    for run in rl.drawn_runs(example)[1:]:  # timing-only parameter-server runs beside a trained one: a long reason
        run["config"]["sync"]["kind"] = "parameter_server"
        run["config"]["training"]["mode"] = "timing"
        run.pop("staleness", None)
    write_report(tmp_path, example)
    result = run_plot_in(tmp_path, "report.json", columns=80)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert [t for t in lines if len(t) > 79] == [], lines
    for unit in ("versions", "clocks"):
        at = lines.index(f"note: staleness_{unit}.png not written:")
        assert lines[at + 1].startswith("  the ") and "parameter server runs are timing-only" in lines[at + 1], lines
    # Without a width (a pipe, COLUMNS unset) the same note is one line, as a log keeps it.
    result = run_plot_in(tmp_path, "report.json")
    assert [t for t in result.stderr.splitlines() if t.startswith("note: staleness_versions.png not written: the ")]


def timing_only_report(doc):
    """The example's runs as `--timing-only` writes them (a real timing-only report's shape): no loss or accuracy in
    the series, no measured clock, no data totals, no target, a modeled throughput (100, 200, ... samples/s)."""
    for k, run in enumerate(doc["runs"]):
        run["config"]["training"]["mode"] = "timing"
        for point in run["convergence"]["series"]:
            point.update(train_loss=None, eval_loss=None, eval_accuracy=None, measured_s=0.0)
        run["convergence"]["final"] = {"eval_accuracy": None, "eval_loss": None, "train_loss": None}
        if run.get("timing"):
            run["timing"]["measured"] = None
        run["throughput"] = {"samples_per_s": None, "modeled_samples_per_s": 100.0 * (k + 1)}
        run["data"] = None
        run["time_to_target"] = None
    return doc


def test_timing_only_runs_are_said_once_to_have_no_convergence_curves(example, tmp_path):
    """A report of timing-only runs: one note says they have no convergence curves; no "not written" note for a
    figure of training (loss, accuracy, staleness, measured step, input pipeline), which cannot apply to it. The
    modeled throughput is still drawn (throughput vs ranks, the heatmap of it)."""
    write_report(tmp_path, timing_only_report(copy.deepcopy(example)))
    result = run_plot_in(tmp_path, "report.json")
    assert result.returncode == 0, result.stderr
    notes = [t for t in result.stderr.splitlines() if t.startswith("note: ")]
    assert len(notes) == 1, result.stderr
    assert "timing-only runs" in notes[0] and "no convergence curves" in notes[0], notes
    assert "not written" not in result.stderr, result.stderr
    assert sorted(result.stdout.split()) == ["heatmap_modeled_samples_per_s.png", "throughput_vs_ranks.png"]
    # Beside a trained run, the note says how many are timing-only; the trained run's figures are written.
    doc = timing_only_report(copy.deepcopy(example))
    first = rl.drawn_runs(example)[0]
    doc["runs"][[r["id"] for r in doc["runs"]].index(first["id"])] = first
    write_report(tmp_path, doc)
    result = run_plot_in(tmp_path, "report.json")
    assert result.returncode == 0, result.stderr
    notes = [t for t in result.stderr.splitlines() if t.startswith("note: ")]
    assert "note: 3 of the 4 drawn runs are timing-only" in notes[0], notes
    assert "loss_vs_step.png" in result.stdout.split(), result.stdout
