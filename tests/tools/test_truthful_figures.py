"""Figures and tables that do not mislead (tools/plot.py, tools/compare.py, tools/report_lib.py), read from what is
drawn (matplotlib artists, returned data), not from pixels: runs that did not finish are never drawn or ranked as
data; a heatmap never averages over an axis it does not show; no two series share color, marker and dash; the Pareto
plot numbers its points and keys them by the swept values that differ; a log staleness axis is ticked at every
decade; every axis names its unit; the measured clock of the host backend says it is the host's time, and the Pareto
plot defaults to the modeled clock; timing-only runs are said to have no accuracy and are ranked by throughput."""
import copy
import itertools
import math
import re

import matplotlib.pyplot as plt
import numpy as np
import pytest

import compare
import plot
import report_lib as rl
from test_plot import compressed_report, data_cache_report, figure_of, hand_point, staleness_report


def close_after(fig):
    plt.close(fig)


# ---- runs that did not finish --------------------------------------------------------------------------------------

def interrupt(run, steps_completed, total_steps=468):
    run["disposition"] = "interrupted"
    run["steps_completed"] = steps_completed
    run["config"]["training"]["steps"] = total_steps


def test_the_note_of_an_interrupted_run_says_its_steps_once(example):
    """QA: "interrupted at 52 of 300 steps: stopped after step 52 of 300" said the steps twice; a time limit's reason
    stays."""
    doc = copy.deepcopy(example)
    stopped, timed = doc["runs"][0], doc["runs"][1]
    interrupt(stopped, 52, 300)
    stopped["message"] = "stopped after step 52 of 300"
    interrupt(timed, 7, 300)
    timed["disposition"] = "timeout"
    timed["message"] = "stopped after step 7 of 300: training.run_timeout_s 5 s passed"
    note = rl.undrawn_note(doc)
    assert f"{stopped['id']} (interrupted at 52 of 300 steps: not finished, so not drawn as data)" in note, note
    assert f"{timed['id']} (timeout at 7 of 300 steps: training.run_timeout_s 5 s passed)" in note, note
    assert "stopped after" not in note


def test_an_interrupted_run_is_no_point_of_the_data_cache_figure(example, tmp_path, monkeypatch):
    """QA: a run stopped after 66 of 468 steps, all in epoch 0 (cold cache), drew a 0.998 stall share."""
    doc = data_cache_report(example)
    stopped = doc["runs"][3]  # nfs, capacity 0.5, partitioned
    interrupt(stopped, 66)
    stopped["data"]["per_rank"][0]["epochs"] = [rl_epoch for rl_epoch in stopped["data"]["per_rank"][0]["epochs"][:1]]
    stopped["data"]["per_rank"][0]["epochs"][0].update(stall_modeled_s=0.998, step_modeled_s=1.0)
    curves = rl.data_curves(doc, rl.capacity_axis(doc))
    assert [c for c, _ in curves["storage=nfs, policy=partitioned"]] == [0, 1]  # its 0.5 point is gone
    fig = figure_of(monkeypatch, lambda: plot.fig_data_cache(doc, plot.run_styles(doc["runs"]), tmp_path,
                                                             rl.undrawn_note(doc)))
    try:
        shares = [y for line in fig.axes[1].get_lines() for y in line.get_ydata()]
        assert 0.998 not in [round(float(v), 3) for v in shares]
        assert len(shares) == 2 * (len(doc["runs"]) - 1)  # modeled and measured share of every finished run
        note = " ".join(t.get_text() for t in fig.texts)
        assert f"{stopped['id']} (interrupted at 66 of 468 steps: not finished, so not drawn as data)" in note
    finally:
        close_after(fig)


def test_unfinished_runs_are_left_out_of_curves_bars_and_rankings(example, tmp_path, monkeypatch):
    doc = copy.deepcopy(example)
    stopped = doc["runs"][0]
    interrupt(stopped, 5, 24)
    for figure in (plot.fig_loss_vs_step, plot.fig_step_breakdown):
        fig = figure_of(monkeypatch, lambda: figure(doc, plot.run_styles(doc["runs"]), tmp_path, ""))
        try:
            labels = [t.get_text() for t in fig.axes[0].get_xticklabels()] + \
                [line.get_label() for line in fig.axes[0].get_lines()]
            assert not any("accumulation_steps=1 ranks=1" in text for text in labels), labels
        finally:
            close_after(fig)
    # compare.py: no metric, no speedup, not the baseline, not on the Pareto plot; its status says where it stopped.
    rows = [compare.Row(doc, "r.json", run) for run in doc["runs"]]
    baseline = compare.pick_baseline(rows, None)
    assert baseline.run is not stopped
    compare.set_speedups(rows, baseline)
    assert math.isnan(rows[0].speedup_measured)
    text = compare.table(rows, [doc], "markdown")
    line = next(x for x in text.splitlines() if x.startswith(f"| {stopped['id']} "))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[-1] == "interrupted at 5 of 24 steps"
    assert set(cells[3:-1]) == {"-"}, cells  # every metric cell empty
    assert "in every metric of a run that did not finish" in text
    fig, placed = compare.pareto_figure(rows, [doc], "measured")
    try:
        assert stopped["id"] not in [r.id for r in placed]
    finally:
        close_after(fig)


def test_the_summary_draws_no_bar_for_an_unfinished_run(example, tmp_path, monkeypatch):
    doc = compressed_report(example)
    for run in doc["runs"]:
        run["time_to_target"] = {"metric": "eval_accuracy", "value": 0.5, "reached": True, "step": 4,
                                 "measured_s": 0.04, "modeled_s": 2.0}
    interrupt(doc["runs"][1], 2, 4)
    fig = figure_of(monkeypatch, lambda: plot.fig_summary([doc], [tmp_path / "report.json"], tmp_path / "s.png"))
    try:
        for ax in fig.axes[:3]:
            assert "interrupted at 2 of 4 steps: not drawn" in [t.get_text().strip() for t in ax.texts]
        ax_t, _, ax_a = fig.axes[:3]  # (these runs have no modeled step: the middle panel has no bars)
        assert [p.get_width() for p in ax_t.patches] == [2000.0, 2000.0]  # time to target, ms: runs 0 and 2
        assert [p.get_width() for p in ax_a.patches] == [0.55, 0.65]
    finally:
        close_after(fig)


# ---- the heatmap never averages over an axis it does not show -------------------------------------------------------

def three_axis_report(example, third=(25, 100), fourth=None):
    """accumulation_steps {1, 2} x ranks {1, 2, 4} x bucket_mb `third` (x a fourth axis), eval accuracy set to
    0.1 a + 0.01 r + 0.001 b (+ 0.0001 d): every cell of every panel known."""
    template = next(r for r in example["runs"] if r["disposition"] == "passed")
    doc = copy.deepcopy(example)
    values = {"training.accumulation_steps": [1, 2], "cluster.ranks": [1, 2, 4], "sync.bucket_mb": list(third)}
    if fourth:
        values["training.seed"] = list(fourth)
    doc["axes"] = [{"paths": [p], "values": [[v] for v in vs]} for p, vs in values.items()]
    doc["runs"] = []
    for combo in itertools.product(*values.values()):
        run = copy.deepcopy(template)
        index = len(doc["runs"])
        swept = dict(zip(values, combo))
        run.update(id=f"h.{index}.r0", index=index, swept=swept)
        acc = 0.1 * combo[0] + 0.01 * combo[1] + 0.001 * combo[2] + (0.0001 * combo[3] if fourth else 0)
        run["convergence"]["final"]["eval_accuracy"] = acc
        doc["runs"].append(run)
    return doc


def test_the_heatmap_draws_one_panel_per_value_of_the_axis_it_does_not_show(example, tmp_path, monkeypatch):
    doc = three_axis_report(example)
    fig = figure_of(monkeypatch, lambda: plot.fig_heatmap(doc, {}, tmp_path, "", "eval_accuracy"))
    try:
        panels = [ax for ax in fig.axes if ax.images]
        assert [ax.get_title() for ax in panels] == ["bucket_mb=25", "bucket_mb=100"]
        for ax, bucket in zip(panels, (25, 100)):
            expected = [[0.1 * a + 0.01 * r + 0.001 * bucket for a in (1, 2)] for r in (1, 2, 4)]  # rows: ranks (y)
            np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), expected, rtol=1e-12)
        # One color scale for every panel.
        assert len({(ax.images[0].norm.vmin, ax.images[0].norm.vmax) for ax in panels}) == 1
        assert "mean" not in fig._suptitle.get_text() and "one panel per sync.bucket_mb" in fig._suptitle.get_text()
    finally:
        close_after(fig)


def test_a_heatmap_that_would_need_too_many_panels_is_refused_naming_x_and_y(example, tmp_path, capsys, run_plot):
    doc = three_axis_report(example, third=(1, 2, 3, 4), fourth=(1, 2, 3, 4))  # 16 panels over the first two axes
    x_axis, y_axis, facets = plot.heatmap_axes(doc)  # by default: the two axes of the most values instead
    assert [a["paths"][0] for a in (x_axis, y_axis)] == ["sync.bucket_mb", "training.seed"]
    assert plot.panel_count(facets) == 6
    path = tmp_path / "report.json"
    path.write_text(__import__("json").dumps(doc))
    result = run_plot(path, "--x", "accumulation_steps", "--y", "ranks")
    assert result.returncode == 2, result.stderr
    assert "16 panels, more than 12" in result.stderr and "give --x and --y" in result.stderr, result.stderr
    assert "it never averages over an axis it does not show" in result.stderr


# ---- distinct series -----------------------------------------------------------------------------------------------

def compression_sweep(example, kinds):
    """One run per entry of kinds (a compression scenario's zip: kind with several ratios), each evaluated twice."""
    doc = compressed_report(example)
    template = doc["runs"][0]
    doc["runs"] = []
    values = []
    for index, (kind, ratio) in enumerate(kinds):
        run = copy.deepcopy(template)
        run["config"]["compression"]["kind"] = kind
        run.update(id=f"comp.{index}.r0", index=index, swept={"compression.kind": kind, "compression.ratio": ratio})
        run["compression"] = copy.deepcopy(template["compression"])
        run["compression"]["wire_bytes_per_rank_per_step"] = 1000.0 * (index + 1)
        run["convergence"]["series"] = [hand_point(2, 1.0, 0.4 + 0.01 * index), hand_point(4, 2.0, 0.5 + 0.01 * index)]
        doc["runs"].append(run)
        values.append([kind, ratio])
    doc["axes"] = [{"paths": ["compression.kind", "compression.ratio"], "values": values}]
    return doc


# The shape of scenarios/compression.json: 21 runs, 7 compressors.
COMPRESSION_ZIP = ([("none", 0.01), ("fp16", 0.01)] + [("topk", r) for r in (0.1, 0.01, 0.001) * 2]
                   + [("randomk", r) for r in (0.1, 0.01, 0.001) * 2] + [("qsgd", 0.01)] * 3 + [("signsgd", 0.01)]
                   + [("powersgd", 0.01)] * 3)


def test_twenty_one_series_have_distinct_styles_and_a_legend_entry_each_outside_the_axes(example, tmp_path,
                                                                                          monkeypatch):
    doc = compression_sweep(example, COMPRESSION_ZIP)
    fig = figure_of(monkeypatch, lambda: plot.fig_accuracy_vs_bytes(doc, plot.run_styles(doc["runs"]), tmp_path, ""))
    try:
        ax = fig.axes[0]
        lines = ax.get_lines()
        assert len(lines) == 21
        styles = {(line.get_color(), line.get_marker(), line.get_linestyle()) for line in lines}
        assert len(styles) == 21
        legend = ax.get_legend()
        assert len(legend.get_texts()) == 21
        handles = getattr(legend, "legend_handles", None) or legend.legendHandles  # the name before matplotlib 3.7
        assert [h.get_marker() for h in handles] == [line.get_marker() for line in lines]
        fig.canvas.draw()
        assert legend.get_window_extent().x0 >= ax.get_window_extent().x1  # outside, right of the axes
    finally:
        close_after(fig)


def test_run_styles_stay_distinct_when_strategy_families_repeat():
    runs = [{"id": f"s{k}.{j}", "index": 10 * k + j, "config": {"sync": {"kind": f"strategy{k}"}}}
            for k in range(10) for j in range(3)]  # 10 strategies: the 8 hue families cycle
    styles = plot.run_styles(runs)
    assert len({(s.color, s.marker, s.dash) for s in styles.values()}) == 30
    assert len({(s.color, s.marker) for s in styles.values()}) == 30  # loss figures draw no per-run dash
    assert len(set(plot.series_styles(45))) == 45


def test_throughput_lines_that_coincide_still_show_apart(example, tmp_path, monkeypatch):
    """QA (scenarios/scaling.json): lines of bucket sizes 25 and 100 MB have the same throughput and were drawn on top
    of each other with one marker and line style: the later hid the earlier."""
    template = next(r for r in example["runs"] if r["disposition"] == "passed")
    doc = copy.deepcopy(example)
    values = {"cluster.ranks": [1, 2, 4], "cluster.hardware": ["h100-sxm-8", "h100-pcie-8"],
              "sync.bucket_mb": [25, 100], "training.accumulation_steps": [1, 4]}
    doc["axes"] = [{"paths": [p], "values": [[v] for v in vs]} for p, vs in values.items()]
    doc["runs"] = []
    for combo in itertools.product(*values.values()):
        run = copy.deepcopy(template)
        index = len(doc["runs"])
        run.update(id=f"s.{index}.r0", index=index, swept=dict(zip(values, combo)))
        # The bucket size changes nothing here: pairs of lines coincide.
        rate = 10.0 * combo[0] * (1 + combo[3]) * (2 if combo[1] == "h100-sxm-8" else 1)
        run["throughput"] = {"samples_per_s": None, "modeled_samples_per_s": rate}
        doc["runs"].append(run)
    fig = figure_of(monkeypatch, lambda: plot.fig_throughput_vs_ranks(doc, {}, tmp_path, ""))
    try:
        lines = fig.axes[0].get_lines()
        assert len(lines) == 8
        assert len({(line.get_color(), line.get_marker(), line.get_linestyle()) for line in lines}) == 8
        # Each coinciding pair differs in marker and in dash, not only in a color the upper line covers.
        by_y = {}
        for line in lines:
            by_y.setdefault(tuple(line.get_ydata()), []).append(line)
        pairs = [group for group in by_y.values() if len(group) > 1]
        assert len(pairs) == 4
        for a, b in pairs:
            assert a.get_marker() != b.get_marker() and a.get_linestyle() != b.get_linestyle()
    finally:
        close_after(fig)


# ---- the Pareto plot: numbered points, a key of the values that differ -----------------------------------------------

def test_pareto_points_are_numbered_and_keyed_by_the_swept_values_that_differ(example):
    doc = compression_sweep(example, COMPRESSION_ZIP[:6])
    for k, run in enumerate(doc["runs"]):
        # 0.05 s apart, except runs 4 and 5 at one place.
        t = 0.05 * min(k, 4)
        run["time_to_target"] = {"metric": "eval_accuracy", "value": 0.4, "reached": True, "step": 2,
                                 "measured_s": t + 1, "modeled_s": t + 0.5}
        run["convergence"]["final"]["eval_accuracy"] = 0.8 if k >= 4 else 0.6 + 0.01 * k
    rows = [compare.Row(doc, "r.json", run) for run in doc["runs"]]
    compare.set_speedups(rows, compare.pick_baseline(rows, None))
    assert compare.pareto_clock(rows) == "modeled"
    fig, placed = compare.pareto_figure(rows, [doc], "modeled")
    try:
        ax, key_ax = fig.axes
        numbers = sorted(t.get_text() for t in ax.texts)
        assert numbers == ["1", "2", "3", "4", "5,6"]
        key = key_ax.texts[0].get_text().splitlines()
        # Accuracy rises with time up to run 5; run 6 repeats run 5's place, so it is dominated.
        assert key[1:] == [" 1  kind=none ratio=0.01 (baseline)  [front]", " 2  kind=fp16 ratio=0.01  [front]",
                           " 3  kind=topk ratio=0.1  [front]", " 4  kind=topk ratio=0.01  [front]",
                           " 5  kind=topk ratio=0.001  [front]", " 6  kind=topk ratio=0.1"]
        assert "\u2026" not in key_ax.texts[0].get_text()
        assert ax.get_xlabel() == "time to target (s, modeled)"
    finally:
        close_after(fig)


def test_pareto_defaults_to_the_modeled_clock_and_says_when_the_measured_one_is_the_hosts(example, tmp_path):
    doc = compression_sweep(example, COMPRESSION_ZIP[:3])
    for run in doc["runs"]:
        run["time_to_target"] = {"metric": "eval_accuracy", "value": 0.4, "reached": True, "step": 2,
                                 "measured_s": 1.0 + run["index"], "modeled_s": None}
    rows = [compare.Row(doc, "r.json", run) for run in doc["runs"]]
    assert compare.pareto_clock(rows) == "measured"  # no modeled time to target: the measured clock
    fig, _ = compare.pareto_figure(rows, [doc], "measured")
    try:
        assert "this host's time (host backend, 4 rank threads on 8 cores)" in \
            fig.axes[0].get_title().replace("\n", " ")
    finally:
        close_after(fig)


# ---- axes: ticks and units ------------------------------------------------------------------------------------------

def test_a_log_staleness_axis_is_ticked_at_every_decade(example, tmp_path, monkeypatch):
    doc, ids = staleness_report(example)
    run = next(r for r in doc["runs"] if r["id"] == ids[1])
    run["staleness"]["clocks"].update(values=[0, 3, 40, 300], counts=[1, 1, 1, 1])
    fig = figure_of(monkeypatch, lambda: plot.fig_staleness(doc, plot.run_styles(doc["runs"]), tmp_path, "", "clocks"))
    try:
        ax = fig.axes[0]
        assert ax.get_xscale() == "symlog"
        assert list(ax.get_xticks()) == [0, 1, 2, 5, 10, 20, 50, 100, 200]
    finally:
        close_after(fig)
    fig = figure_of(monkeypatch, lambda: plot.fig_staleness(doc, plot.run_styles(doc["runs"]), tmp_path, "",
                                                            "versions"))
    try:
        ax = fig.axes[0]  # versions up to 3: a linear axis of integers
        assert ax.get_xscale() == "linear" and all(float(t).is_integer() for t in ax.get_xticks())
    finally:
        close_after(fig)


UNIT = re.compile(r"\(.+\)")


def numeric_ticks(axis):
    texts = [t.get_text().replace("\u2212", "-").replace(",", "") for t in axis.get_ticklabels()]
    texts = [t for t in texts if t]

    def number(t):
        try:
            float(re.sub(r"\$.*?\$", "1", t))
            return True
        except ValueError:
            return False
    return bool(texts) and all(number(t) for t in texts)


def test_every_axis_of_every_figure_names_its_unit(example, tmp_path, monkeypatch):
    """Every axis with numeric ticks says its unit in parentheses; axes of swept values say so ("(swept values)")."""
    reports = [example, compressed_report(example), data_cache_report(example), staleness_report(example)[0],
               three_axis_report(example)]
    checked, missing = [], []

    def check(fig, path):
        fig.canvas.draw()
        for ax in fig.axes:
            if not ax.axison or not (ax.lines or ax.images or ax.patches or ax.collections):
                continue
            for which, axis, label in (("x", ax.xaxis, ax.get_xlabel()), ("y", ax.yaxis, ax.get_ylabel())):
                if numeric_ticks(axis) and not UNIT.search(label):
                    missing.append(f"{path.name}: {which} axis {label!r}")
        checked.append(path.name)
        close_after(fig)
        return path

    monkeypatch.setattr(plot, "save", check)
    for doc in reports:
        plot.write_figures(doc, tmp_path)
    assert len(checked) >= 15, checked
    assert not missing, missing


# ---- the measured clock of the host --------------------------------------------------------------------------------

def test_measured_clock_figures_of_the_host_backend_say_it_is_the_hosts_time(example, tmp_path, monkeypatch):
    for draw in (plot.fig_step_breakdown, plot.fig_loss_vs_time, plot.fig_accuracy_vs_time):
        fig = figure_of(monkeypatch, lambda: draw(example, plot.run_styles(example["runs"]), tmp_path, ""))
        try:
            # The example's drawn runs have 1 and 2 ranks; its context says 8 cores.
            assert "this host's time (host backend, 2 rank threads on 8 cores), not a GPU's" in \
                fig.axes[0].get_title().replace("\n", " "), draw.__name__
        finally:
            close_after(fig)
    doc = compressed_report(example)  # modeled clock figures say nothing of the kind
    fig = figure_of(monkeypatch, lambda: plot.fig_accuracy_vs_modeled_time(doc, plot.run_styles(doc["runs"]),
                                                                          tmp_path, ""))
    try:
        assert "host" not in fig.axes[0].get_title()
    finally:
        close_after(fig)


# ---- timing-only runs of a scenario with an accuracy target ---------------------------------------------------------

def timing_only(example):
    doc = copy.deepcopy(example)
    doc["runs"] = [r for r in doc["runs"] if r["disposition"] == "passed"]
    for k, run in enumerate(doc["runs"]):
        run["config"]["training"]["mode"] = "timing"
        run["time_to_target"] = {"metric": "eval_accuracy", "value": 0.55, "reached": False, "step": None,
                                 "measured_s": None, "modeled_s": None}
        run["convergence"]["final"] = {"train_loss": None, "eval_loss": None, "eval_accuracy": None}
        run["throughput"] = {"samples_per_s": None, "modeled_samples_per_s": 1000.0 * (k + 1)}
    return doc


def test_timing_only_runs_say_they_have_no_accuracy_and_are_ranked_by_throughput(example):
    doc = timing_only(example)
    rows = [compare.Row(doc, "r.json", run) for run in doc["runs"]]
    baseline = compare.pick_baseline(rows, None)
    compare.set_speedups(rows, baseline)
    assert [r.speedup_modeled for r in rows] == pytest.approx([1.0, 2.0, 3.0, 4.0][:len(rows)])
    assert {r.speedup_basis for r in rows} == {"throughput"}
    assert {r.status.replace(", baseline", "") for r in rows} == {"timing-only (no accuracy)"}
    text = compare.table(rows, [doc], "markdown")
    assert "not reached" not in text and "timing-only runs (training.mode \"timing\") compute no loss" in text


def test_the_summary_ranks_timing_only_runs_by_throughput(example, tmp_path, monkeypatch):
    doc = timing_only(example)
    fig = figure_of(monkeypatch, lambda: plot.fig_summary([doc], [tmp_path / "r.json"], tmp_path / "s.png"))
    try:
        ax_t = fig.axes[0]
        assert ax_t.get_xlabel() == "throughput, modeled (samples/s)"
        assert sorted(p.get_width() for p in ax_t.patches) == [1000.0 * (k + 1) for k in range(len(doc["runs"]))]
        assert "not reached" not in [t.get_text().strip() for t in ax_t.texts]
    finally:
        close_after(fig)


# ---- notes on a terminal ---------------------------------------------------------------------------------------------

def test_notes_are_wrapped_to_the_terminal_and_left_whole_elsewhere(monkeypatch):
    import io
    import os
    import shutil

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    text = ("note: heatmap_eval_accuracy.png not written: a heatmap of cluster.hardware by cluster.ranks needs one "
            "panel per combination; /tmp/a/very/long/path/that/is/longer/than/the/line/of/forty/columns/report.json")
    monkeypatch.setattr(shutil, "get_terminal_size", lambda fallback=(80, 24): os.terminal_size((40, 24)))
    out = Terminal()
    rl.say(text, out)
    lines = out.getvalue().rstrip("\n").split("\n")
    assert len(lines) > 3 and all(len(line) <= 39 for line in lines), lines
    assert all(line.startswith("  ") for line in lines[1:])
    assert "".join(line.strip() for line in lines).replace(" ", "") == text.replace(" ", "")
    plain = io.StringIO()  # a file or a pipe: one line, as written
    rl.say(text, plain)
    assert plain.getvalue() == text + "\n"
