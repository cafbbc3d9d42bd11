"""End-to-end tests of the GPU memory estimate and the modeled timeline: a LLaMA-7B run that cannot fit an 80 GB GPU is
skipped with the estimate in the report and a line in compare.py; `report.timeline: true` writes a Chrome trace-event
file that a JSON parser reads, with the format's required fields, whose slices add up to the report's modeled phase
and communication totals per rank, with the measured phases and the data loader on their own tracks; the timeline's
size cap is refused at validation; the activation formulas match what PyTorch's autograd saves."""
import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import jsonschema
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("GRADSWEEP_BIN", REPO / "build" / "gradsweep"))
SCHEMA = json.loads((REPO / "reports" / "schema.json").read_text())

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} is not built")

# Timeline tids per rank: compute, communication, data loader, measured, unshard (tid = rank * 5 + track + 1).
TRACKS = 5


def run(*args):
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=600)


def write(tmp_path, doc, name="s.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def llama(**training):
    return {"name": "llm", "model": {"kind": "llama-7b"}, "data": {"kind": "none", "batch_per_rank": 1},
            "cluster": {"ranks": 8, "hardware": "h100-sxm-8"},
            "training": {"mode": "timing", "steps": 2, "eval_every": 0, "optimizer": {"kind": "adamw", "lr": 1e-4},
                         **training},
            "precision": {"mode": "bf16_mixed"}}


def test_llama_7b_with_adamw_is_skipped_on_80_gb_and_compare_says_why(tmp_path):
    """18 bytes per parameter (bf16 weights, fp32 master weights and gradients, AdamW) x 6,738,415,616 = 121.3 GB
    before activations: more than an 80 GB GPU holds. On an H200 with fp16_pure and checkpointing it fits."""
    doc = llama()
    doc["sweep"] = {"zip": {"cluster.hardware": ["h100-sxm-8", "h200-sxm-8"],
                            "precision.mode": ["bf16_mixed", "fp16_pure"],
                            "training.activation_checkpointing": [False, True]}}
    out = tmp_path / "out"
    p = run("run", write(tmp_path, doc), "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    skipped, passed = report["runs"]
    assert skipped["disposition"] == "skipped" and passed["disposition"] == "passed"
    gpu = skipped["memory"]["gpu"]
    states = gpu["weights_bytes"] + gpu["master_weights_bytes"] + gpu["gradients_bytes"] + gpu["optimizer_bytes"]
    assert states == 18 * 6738415616
    assert gpu["capacity_bytes"] == 80 * 2 ** 30 and gpu["usable_bytes"] == int(0.9 * 80 * 2 ** 30)
    assert gpu["fits"] is False and gpu["total_bytes"] > gpu["usable_bytes"]
    assert "121.3 GB, 18.0 bytes per parameter" in skipped["message"] and "72.0 GiB is usable" in skipped["message"]
    assert passed["memory"]["gpu"]["fits"] is True and passed["memory"]["gpu"]["hardware"] == "h200-sxm-8"
    # fp16_pure: 2-byte weights and gradients, 2 x 2-byte Adam moments.
    g = passed["memory"]["gpu"]
    assert g["weights_bytes"] + g["gradients_bytes"] + g["optimizer_bytes"] == 8 * 6738415616
    c = subprocess.run([sys.executable, str(REPO / "tools" / "compare.py"), str(out / "report.json")],
                       capture_output=True, text=True, timeout=300)
    assert c.returncode == 0, c.stderr
    line = next(ln for ln in c.stdout.splitlines() if ln.startswith("skipped: "))
    assert skipped["id"] in line and "does not fit one GPU" in line and "113.0 GiB" in line, c.stdout



def test_gpu_memory_warn_prices_a_run_that_does_not_fit(tmp_path):
    """cluster.gpu_memory "warn": the same 121.3 GB LLaMA-7B run on 80 GB is priced, not skipped, and its report
    still says it does not fit; the default "skip" skips it."""
    doc = llama()
    doc["sweep"] = {"axes": {"cluster.gpu_memory": ["skip", "warn"]}}
    out = tmp_path / "out"
    p = run("run", write(tmp_path, doc), "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "report.json").read_text())
    skipped, warned = report["runs"]
    assert skipped["disposition"] == "skipped" and warned["disposition"] == "passed"
    assert warned["memory"]["gpu"]["fits"] is False
    assert warned["memory"]["gpu"]["total_bytes"] == skipped["memory"]["gpu"]["total_bytes"] > 72 * 2 ** 30
    assert warned["timing"]["modeled"]["step"]["all"]["p50_ms"] > 0

def load_timeline(out, run):
    assert run["timeline"] is not None, run["id"]
    path = out / run["timeline"]["file"]
    trace = json.loads(path.read_text())  # the whole file is one JSON object
    assert run["timeline"]["bytes"] == path.stat().st_size
    events = trace["traceEvents"]
    for e in events:
        assert {"name", "ph", "pid", "tid"} <= e.keys(), e
        if e["ph"] == "X":
            assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] > 0, e
            assert e["ts"] >= 0
        elif e["ph"] == "i":
            assert "ts" in e and e["s"] == "t"
        else:
            assert e["ph"] == "M", e
    assert {e["pid"] for e in events} == {1}
    assert sum(e["ph"] == "X" for e in events) == run["timeline"]["slices"]
    return trace, events


def per_track(events, track, ph="X"):
    """{rank: [events]} of one track, in file order."""
    out = defaultdict(list)
    for e in events:
        if e["ph"] == ph and (e["tid"] - 1) % TRACKS == track:
            out[(e["tid"] - 1) // TRACKS].append(e)
    return out


def close(a, b, n=1):
    """Equal up to the file's 1e-4 us rounding of n numbers (times in us)."""
    return abs(a - b) <= 1e-4 * n + 1e-9 * abs(b)


def check_modeled(run, events):
    """Per rank: compute-track slices by category = the report's modeled phase totals; step instants at the
    cumulative modeled step times; collective and chain slices = exposed + overlapped communication."""
    modeled = run["timing"]["modeled"]
    ranks = len(modeled["step"]["per_rank"])
    compute = per_track(events, 0)
    steps = per_track(events, 0, "i")
    comm = per_track(events, 1)
    unshard = per_track(events, 4)  # ZeRO stage 3's parameter gathers, on their own stream
    assert sorted(compute) == list(range(ranks))
    for r in range(ranks):
        by_cat = defaultdict(float)
        for e in compute[r]:
            by_cat[e["cat"]] += e["dur"]
        for phase, summary in modeled["phases"].items():
            want_us = summary["per_rank"][r]["total_ms"] * 1e3
            assert close(by_cat.get(phase, 0.0), want_us, len(compute[r])), (r, phase, by_cat.get(phase), want_us)
        assert set(by_cat) <= set(modeled["phases"]), by_cat.keys()
        # The track is one stream: slices in order, none overlapping.
        for a, b in zip(compute[r], compute[r][1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-3, (a, b)
        # Steps: one instant each, at the sum of the modeled steps before it.
        total_us = modeled["step"]["per_rank"][r]["total_ms"] * 1e3
        assert len(steps[r]) == run["steps_completed"]
        assert steps[r][0]["ts"] == 0
        starts = [e["ts"] for e in steps[r]] + [total_us]
        step_us = [e["args"]["step_ms"] * 1e3 for e in steps[r]]
        for k, d in enumerate(step_us):
            assert math.isclose(starts[k + 1] - starts[k], d, rel_tol=1e-5, abs_tol=1e-3), (r, k)
        chain_us = sum(e["dur"] for e in comm.get(r, []) + unshard.get(r, []))
        want = (modeled["communication"]["exposed"]["per_rank"][r]["total_ms"] +
                modeled["communication"]["overlapped"]["per_rank"][r]["total_ms"]) * 1e3
        assert close(chain_us, want, len(comm.get(r, [])) + len(unshard.get(r, [])) + 1), (r, chain_us, want)
        for stream in (comm, unshard):
            for a, b in zip(stream.get(r, []), stream.get(r, [])[1:]):
                assert b["ts"] >= a["ts"] + a["dur"] - 1e-3, (a, b)
    return compute, comm


def test_timeline_of_a_timing_only_run_adds_up_to_the_report(tmp_path):
    """GPT-2 small on 4 ranks of PCIe H100s, two micro-batches, one rank 1.3x slower: the collectives wait for it."""
    doc = {"name": "tl", "model": {"kind": "gpt2-small"}, "data": {"kind": "none", "batch_per_rank": 4},
           "cluster": {"ranks": 4, "hardware": "h100-pcie-8", "stragglers": {"factors": [1, 1, 1.3, 1]}},
           "training": {"mode": "timing", "steps": 3, "eval_every": 0, "accumulation_steps": 2},
           "precision": {"mode": "bf16_mixed"}, "report": {"timeline": True}}
    out = tmp_path / "out"
    p = run("run", write(tmp_path, doc), "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    (r,) = report["runs"]
    trace, events = load_timeline(out, r)
    assert trace["displayTimeUnit"] == "ms" and trace["otherData"]["time_unit"] == "us"
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "rank 2 compute (modeled)" in names and "rank 0 communication (modeled)" in names
    assert not any("measured" in n for n in names), "a timing-only run has no measured clock"
    compute, comm = check_modeled(r, events)
    # Two micro-batches per step: two forward and two backward slices per rank and step.
    assert sum(e["name"] == "forward" for e in compute[0]) == 2 * 3
    # Every bucket's collective carries its bytes and NCCL's algorithm; their bytes are the report's buckets'.
    buckets = r["timing"]["modeled"]["communication"]["buckets"]
    step1 = [e for e in comm[0] if e["cat"] == "collective" and e["args"]["step"] == 1]
    assert [e["args"]["bytes"] for e in step1] == [b["bytes"] for b in buckets]
    assert [e["args"]["algorithm"] for e in step1] == [b["algorithm"] for b in buckets]
    assert {e["name"] for e in step1} == {"all_reduce"}
    # The straggler: the fast ranks wait for it, it waits for nobody.
    wait = {rk: sum(e["dur"] for e in compute[rk] if e["cat"] == "wait") for rk in compute}
    assert wait[2] < 1e-3 * wait[0] and wait[0] > 0


def test_timeline_of_zero_stage_3_has_one_slice_per_layer_gather(tmp_path):
    """ZeRO stage 3 (GPT-2 small, bf16_mixed, 4 ranks on PCIe H100s, 2 micro-batches, 2 steps): on each rank's unshard
    track one all_gather slice per layer with parameters, pass (forward, backward) and micro-batch, each of the
    layer's parameters in bf16 (bytes = 2 x its parameters; (N-1)/N of that on the wire), at most as fast as the
    PCIe link (64 GB/s per direction); the compute track's waits for them, each ending as its gather ends, are their
    exposed part; the report's
    buckets list the same gathers (stream unshard) and the run's busbw stays below the link too."""
    doc = {"name": "z3", "model": {"kind": "gpt2-small"}, "data": {"kind": "none", "batch_per_rank": 1},
           "cluster": {"ranks": 4, "hardware": "h100-pcie-8"}, "sync": {"kind": "zero", "stage": 3},
           "training": {"mode": "timing", "steps": 2, "eval_every": 0, "accumulation_steps": 2},
           "precision": {"mode": "bf16_mixed"}, "report": {"timeline": True}}
    out = tmp_path / "out"
    p = run("run", write(tmp_path, doc), "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    (r,) = report["runs"]
    _, events = load_timeline(out, r)
    compute, _ = check_modeled(r, events)
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "rank 3 unshard: parameter all-gathers (modeled)" in names
    gathers = [b for b in r["timing"]["modeled"]["communication"]["buckets"] if b.get("stream") == "unshard"]
    layers = {b["layer"] for b in gathers}
    assert len(layers) > 10 and len(gathers) == 2 * 2 * len(layers)  # passes x micro-batches x layers
    unshard = per_track(events, 4)
    assert sorted(unshard) == [0, 1, 2, 3]
    for rank, slices in unshard.items():
        assert len(slices) == 2 * len(gathers), rank  # every gather of both steps, one slice each
        for e in slices:
            a = e["args"]
            assert e["name"] == "all_gather" and a["pass"] in ("forward", "backward")
            assert a["bytes"] == 2 * (a["param_end"] - a["param_begin"])
            assert a["bytes"] * 3 / 4 / (e["dur"] * 1e-6) / 1e9 <= 64.0, e
        # A gather's exposed part is the compute stream's stall for it, which ends when the gather ends; it can be
        # longer than the gather itself, which may have queued behind a reduce-scatter on the shared link.
        stalls = [w for w in compute[rank] if w["name"] == "wait for parameter all-gather (exposed)"]
        for e in slices:
            if e["args"]["exposed_us"] <= 0:
                continue
            end = e["ts"] + e["dur"]
            assert any(math.isclose(w["ts"] + w["dur"], end, rel_tol=1e-9, abs_tol=0.01)
                       and math.isclose(w["dur"], e["args"]["exposed_us"], rel_tol=1e-5, abs_tol=0.01)
                       for w in stalls), e
        waits = sum(w["dur"] for w in stalls)
        assert math.isclose(waits, sum(e["args"]["exposed_us"] for e in slices), rel_tol=1e-5, abs_tol=1e-2)
    step1 = [e for e in unshard[0] if e["args"]["step"] == 1]
    assert [e["args"]["bytes"] for e in step1] == [b["bytes"] for b in gathers]
    assert r["communication"]["busbw_GBps"] <= 64.0
    assert r["timing"]["modeled"]["communication"]["overlapped"]["all"]["total_ms"] > 0


def test_timeline_of_a_trained_run_has_the_loader_and_the_measured_clock(tmp_path):
    doc = {"name": "tt", "model": {"kind": "mlp", "layers": [16, 32, 4]},
           "data": {"kind": "teacher", "batch_per_rank": 8, "prefetch": 2, "storage": "nfs",
                    "teacher": {"in_dim": 16, "hidden": 24, "out_dim": 4, "train_samples": 4096, "eval_samples": 64}},
           "cluster": {"ranks": 2}, "training": {"steps": 5, "eval_every": 0}, "report": {"timeline": True}}
    out = tmp_path / "out"
    p = run("run", write(tmp_path, doc), "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "report.json").read_text())
    (r,) = report["runs"]
    _, events = load_timeline(out, r)
    check_modeled(r, events)
    # The loader's work per step: one slice per rank and step, of the run's fetch time on the modeled clock.
    loader = per_track(events, 2)
    assert sorted(loader) == [0, 1] and all(len(v) == 5 for v in loader.values())
    for rank in (0, 1):
        fetch_s = sum(e["fetch_modeled_s"] for e in r["data"]["per_rank"][rank]["epochs"])
        assert fetch_s > 0 and close(sum(e["dur"] for e in loader[rank]), fetch_s * 1e6, 5), rank
    # The measured clock: per rank, its phases add up to the report's measured phase totals.
    measured = per_track(events, 3)
    for rank in (0, 1):
        by_cat = defaultdict(float)
        for e in measured[rank]:
            by_cat[e["cat"]] += e["dur"]
        for phase, summary in r["timing"]["measured"]["phases"].items():
            assert close(by_cat.get(phase, 0.0), summary["per_rank"][rank]["total_ms"] * 1e3, 10), phase
        assert close(sum(by_cat.values()), r["timing"]["measured"]["step"]["per_rank"][rank]["total_ms"] * 1e3, 40)


def test_timeline_size_caps_are_refused_at_validation(tmp_path):
    doc = {"name": "cap", "model": {"kind": "mlp", "layers": [16, 4]},
           "data": {"kind": "teacher", "teacher": {"in_dim": 16, "out_dim": 4}},
           "training": {"steps": 51}, "report": {"timeline": True}}
    p = run("validate", write(tmp_path, doc))
    assert p.returncode == 2
    assert "report.timeline" in p.stderr and "at most 50 optimizer steps" in p.stderr and "has 51" in p.stderr
    # LLaMA-7B on 8 ranks under ZeRO stage 3 with 8 micro-batches: per rank and step 2 x 8 micro-batches + 162
    # buckets (make_buckets: a tensor larger than 25 MiB is a bucket of its own) + 3 others + 6 x 34 layers x 8 =
    # 1813 slices; x 8 ranks x 50 steps = 725,200 > 500,000, and 500,000 / 14,504 fits 34 steps.
    doc = {**llama(steps=50, accumulation_steps=8), "report": {"timeline": True}, "sync": {"kind": "zero", "stage": 3}}
    p = run("validate", write(tmp_path, doc, "l.json"))
    assert p.returncode == 2, p.stderr
    assert "about 725200 slices" in p.stderr and "more than the limit of 500000: at most 34 steps" in p.stderr, p.stderr
    # The plain all-reduce of LLaMA-7B fits 50 steps now that a bucket is one slice (it was 3, over 1,029 buckets).
    p = run("validate", write(tmp_path, {**llama(steps=50), "report": {"timeline": True}}, "l2.json"))
    assert p.returncode == 0, p.stderr


def test_activation_formulas_are_what_pytorch_saves(tmp_path):
    """tools/torch_activation_memory.py (PyTorch's autograd on eager blocks) against the report's per-block bytes, at
    the presets' shapes and short sequences (GPT-2 small bf16, LLaMA-7B fp32)."""
    candidates = [sys.executable, "/usr/bin/python3"]  # the tools' .venv sees Debian's python3-torch
    torch_python = next((py for py in candidates if Path(py).exists() and subprocess.run(
        [py, "-c", "import torch"], capture_output=True).returncode == 0), None)
    if torch_python is None:
        pytest.skip("no Python with PyTorch")
    cases = [("gpt2-small", "gpt2", 768, 12, 3072, 32, "bf16_mixed", "bf16"),
             ("llama-7b", "llama", 4096, 32, 11008, 8, "fp32", "fp32")]
    for kind, arch, h, a, f, seq, mode, dtype in cases:
        doc = llama(steps=1)
        doc["model"] = {"kind": kind, "sequence_length": seq}
        doc["cluster"]["ranks"] = 1
        doc["precision"]["mode"] = mode
        out = tmp_path / kind
        p = run("run", write(tmp_path, doc, f"{kind}.json"), "--out", out, "--quiet")
        assert p.returncode == 0, p.stderr
        ours = json.loads((out / "report.json").read_text())["runs"][0]["memory"]["gpu"]["activations"]
        t = subprocess.run([torch_python, str(REPO / "tools" / "torch_activation_memory.py"), "--arch", arch,
                            "--hidden", str(h), "--heads", str(a), "--ffn", str(f), "--seq", str(seq),
                            "--dtype", dtype, "--json"], capture_output=True, text=True, timeout=600)
        assert t.returncode == 0, t.stderr
        ref = json.loads(t.stdout)
        assert ours["per_block_bytes"] == ref["saved_bytes"] - ref["norm_statistics_bytes"], (kind, ours, ref)
