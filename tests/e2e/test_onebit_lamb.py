"""training.optimizer.kind "onebit_lamb" (DeepSpeed's 1-bit LAMB) against the independent NumPy re-implementation of
DeepSpeed's OnebitLamb (tests/tools/onebit_adam_reference.py, written from DeepSpeed's lamb.py), on the quadratic model
cut into several tensors (model.split: LAMB's coefficients are per tensor): every rank's parameters after every step
(report.trace) and the report's per-tensor coefficients. Also: 1-bit Adam's non-freeze group (uncompressed_tensors)
against plain DeepSpeed Adam, and the error buffers of both optimizers starting at zero in a run started from saved
weights (model.init.from), as DeepSpeed's load_state_dict resets them."""
import json
import math

import numpy as np
import pytest

from test_onebit_adam import BIN, F32, local_gradient, quadratic_problem, ref, ulps

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} is not built")
DEFAULTS = {"lr": 0.05, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "freeze_step": 100000}


def run_report(tmp_path, ranks, a, b, w0, optimizer, steps, split, tag="", model_extra=None, report_extra=None):
    import subprocess
    cfg = {"name": "lamb", "model": {"kind": "quadratic", "a": a.tolist(), "b": b.tolist(),
                                     "initial_w": [float(x) for x in w0], "split": split, **(model_extra or {})},
           "data": {"kind": "none"}, "cluster": {"ranks": ranks, "backend": "host"},
           "training": {"steps": steps, "eval_every": 0, "optimizer": {"kind": "onebit_lamb", **optimizer}},
           "report": {"trace": True, **(report_extra or {})}}
    path = tmp_path / f"lamb_{ranks}{tag}.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / f"out_{ranks}{tag}"
    p = subprocess.run([str(BIN), "run", str(path), "--out", str(out), "--quiet"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    run = json.loads((out / "report.json").read_text())["runs"][0]
    assert run["disposition"] == "passed", run.get("message")
    return run, out


def reference(ranks, a, b, w0, optimizer, steps, split, kind="onebit_lamb"):
    o = {**DEFAULTS, **optimizer}
    o.pop("kind", None)
    if kind == "onebit_lamb":
        extra = {k: o[k] for k in ("max_coeff", "min_coeff", "coeff_beta", "factor_max", "factor_min",
                                   "factor_threshold", "exp_avg_mask") if k in o}
        opt = ref.OnebitLamb(w0, ranks, split, o["lr"], o["beta1"], o["beta2"], o["eps"], o["weight_decay"],
                             o["freeze_step"], **extra)
    else:
        opt = ref.OnebitAdam(w0, ranks, o["lr"], o["beta1"], o["beta2"], o["eps"], o["weight_decay"], o["freeze_step"],
                             o.get("exp_avg_mask", "none"))
    trace, phases, norms = [], [], []
    for _ in range(steps):
        local = [local_gradient(a, b, opt.params[r], r) for r in range(ranks)]
        total = local[0].copy()
        for r in range(1, ranks):  # the all-reduce's sum in rank order, then / S (one sample per rank)
            total = (total + local[r]).astype(F32)
        phases.append(opt.step(averaged=(total / F32(ranks)).astype(F32), local=local))
        trace.append(np.stack(opt.params))
        if phases[-1] == "compressed" and ranks > 1:  # the report's norms: L2 per rank, mean over ranks
            norms.append((np.mean([np.linalg.norm(e.astype(np.float64)) for e in opt.worker_error]),
                          np.mean([np.linalg.norm(e.astype(np.float64)) for e in opt.server_error])))
    return np.array(trace), phases, norms, opt


def test_warmup_is_deepspeeds_lamb_bit_for_bit(tmp_path):
    # Tensors of 3 and 2 values; freeze_step never reached: init, then LAMB without bias correction.
    a, b, w0 = quadratic_problem(2, 5, seed=21)
    opt = {"lr": 0.01, "weight_decay": 0.02}
    run, _ = run_report(tmp_path, 2, a, b, w0, opt, steps=6, split=[3, 2])
    got = np.array(run["trace"]["params"], dtype=F32)
    want, phases, _, r = reference(2, a, b, w0, opt, steps=6, split=[3, 2])
    assert phases == ["init"] + ["warmup"] * 5
    assert np.array_equal(got[0], np.stack([w0, w0])), "the initialization step moves no parameter"
    # Step 2 by hand (double): m = 0.1 g, v = 0.001 g^2, u = m / (sqrt(v) + eps) + wd w0; per tensor
    # c = ||w0_t|| / ||u_t|| clipped to [0.01, 10]; w = w0 - lr c u.
    g = np.mean([a[k] * (w0.astype(np.float64) - b[k]) for k in range(2)], axis=0)
    u = 0.1 * g / (np.sqrt(0.001 * g * g) + 1e-8) + 0.02 * w0
    hand = w0.astype(np.float64).copy()
    for s in (slice(0, 3), slice(3, 5)):
        c = min(10.0, max(0.01, np.linalg.norm(w0[s]) / np.linalg.norm(u[s])))
        hand[s] -= 0.01 * c * u[s]
    assert got[1][0] == pytest.approx(hand, rel=1e-5, abs=1e-6)
    assert ulps(got, want) == 0.0, "warm-up steps differ from the float32 re-implementation of DeepSpeed's LAMB"
    assert run["compression"] is None, "nothing is compressed before the freeze"


@pytest.mark.parametrize("ranks,wd", [(2, 0.01), (4, 0.01), (2, 0.0), (1, 0.01)])
def test_compressed_stage_equals_deepspeeds_onebit_lamb(tmp_path, ranks, wd):
    # 37 parameters in tensors of 20, 10 and 7 (padded to 48 on 2 ranks, 64 on 4); freeze_step 4: init, three LAMB
    # steps, eight compressed; factor_threshold 0.3 lets the factor move.
    a, b, w0 = quadratic_problem(max(ranks, 2), 37, seed=30 + ranks)
    a, b = a[:ranks], b[:ranks]
    opt = {"lr": 0.02, "beta1": 0.8, "beta2": 0.99, "freeze_step": 4, "weight_decay": wd, "coeff_beta": 0.5,
           "factor_threshold": 0.3}
    split = [20, 10, 7]
    run, _ = run_report(tmp_path, ranks, a, b, w0, opt, steps=12, split=split, tag=f"_{wd}")
    got = np.array(run["trace"]["params"], dtype=F32)
    want, phases, norms, r = reference(ranks, a, b, w0, opt, steps=12, split=split)
    assert phases == ["init", "warmup", "warmup", "warmup"] + ["compressed"] * 8
    for k in range(1, ranks):
        assert np.array_equal(got[:, k], got[:, 0]), "replicas stay identical"
    diff = ulps(got, want)
    assert diff == 0.0, f"{ranks} ranks: {diff} ulps from the reference"
    if ranks == 1:
        assert run["compression"] is None  # DeepSpeed: `if self.size > 1`
        return
    c = run["compression"]
    assert c["kind"] == "onebit_lamb" and c["compressed_steps"] == 8 and c["freeze_step"] == 4
    assert [t["tensor"] for t in c["lamb"]] == ["w0", "w1", "w2"]
    for j, t in enumerate(c["lamb"]):
        assert t["lamb_coeff_freeze"] == pytest.approx(r.coeff_freeze[0][j], rel=1e-12)
        assert t["scaling_coeff"] == pytest.approx(r.scaling[j], rel=1e-12)
        assert t["last_factor"] == pytest.approx(r.last_factor[0][j], rel=1e-12)
        assert t["lamb_coeff"] == pytest.approx(r.lamb_coeffs[0][j], rel=1e-12)
    assert any(t["last_factor"] != 1.0 for t in c["lamb"]), "the factor moved"
    assert c["residual_norm"]["count"] == 8
    assert c["residual_norm"]["last"] == pytest.approx(norms[-1][0], rel=1e-9)
    assert c["server_error_norm"]["last"] == pytest.approx(norms[-1][1], rel=1e-9)
    assert c["residual_norm"]["max"] == pytest.approx(max(x[0] for x in norms), rel=1e-9)
    if ranks == 2:  # n 37, P 48: the fp32 all-reduce 2 (N-1)/N x 4n = 148 bytes at steps 1-4; the compressed
        # all-reduce (N-1)/N x P/8 twice + (N-1) x 4 twice = 14 bytes at step 1 and the 8 compressed steps.
        want_bytes = (4 * 148 + 9 * 14) / 12
        assert run["communication"]["bytes_sent_per_rank_per_step"] == pytest.approx([want_bytes] * 2)


def test_zero_variance_mask_holds_a_coordinate_with_zero_gradient(tmp_path):
    a, b, w0 = quadratic_problem(2, 9, seed=25)
    a[:, 3] = 0.0  # coordinate 3 (in tensor w0) never has a gradient: its frozen variance is exactly 0
    opt = {"lr": 0.01, "freeze_step": 3, "exp_avg_mask": "zero_variance"}
    run, _ = run_report(tmp_path, 2, a, b, w0, opt, steps=7, split=[5, 4])
    got = np.array(run["trace"]["params"], dtype=F32)
    want, _, _, _ = reference(2, a, b, w0, opt, steps=7, split=[5, 4])
    assert ulps(got, want) == 0.0
    assert np.all(got[:, :, 3] == w0[3])


def non_freeze_adam(ranks, a, b, w0, o, steps):
    """OnebitAdam.step for the parameters of a non_freeze group, written from DeepSpeed's adam.py: plain DeepSpeed
    Adam (no bias correction, the variance never frozen) on the mean gradient; at step 1 (the initialization step,
    where OnebitAdam has already set adam_freeze_key) the non_freeze branch runs: the engine's averaged gradient
    all-reduced again (a sum in rank order) and multiplied by float32(1 / N) goes into m and v, and nothing moves. From
    the freeze on, the gradient is all_reduce(each rank's own mean) * float32(1 / N)."""
    p = w0.astype(F32).copy()
    m, v = np.zeros_like(p), np.zeros_like(p)
    trace = []
    for k in range(1, steps + 1):
        local = [local_gradient(a, b, p, r) for r in range(ranks)]
        total = local[0].copy()
        for r in range(1, ranks):
            total = (total + local[r]).astype(F32)
        if k == 1:
            g = (total / F32(ranks)).astype(F32)
            total = g.copy()
            for _ in range(1, ranks):
                total = (total + g).astype(F32)
            g = (total * F32(1.0 / ranks)).astype(F32)
        elif k <= max(o["freeze_step"], 2):
            g = (total / F32(ranks)).astype(F32)
        else:
            g = (total * F32(1.0 / ranks)).astype(F32)
        m = ref.fma32(F32(1.0 - o["beta1"]), g, (m * F32(o["beta1"])).astype(F32))
        v = ref.fma32((F32(1.0 - o["beta2"]) * g).astype(F32), g, (v * F32(o["beta2"])).astype(F32))
        if k > 1:
            u = (m / (np.sqrt(v).astype(F32) + F32(1e-8))).astype(F32)
            u = (u + (F32(o["weight_decay"]) * p).astype(F32)).astype(F32)
            p = (p + (F32(-o["lr"]) * u).astype(F32)).astype(F32)
        trace.append(np.stack([p] * ranks))
    return np.array(trace)


@pytest.mark.parametrize("ranks", [2, 4])
def test_non_freeze_group_is_plain_deepspeed_adam_and_the_rest_is_onebit_adam(tmp_path, ranks):
    # DeepSpeed's non-freeze group (uncompressed_tensors ["w1"]): w1 gets plain Adam on the all-reduced gradient with
    # its variance never frozen and its momentum updated in place (PR 1278), while w0 is 1-bit Adam on its own
    # compressed buffer. The quadratic is separable, so each tensor's trajectory is that of its optimizer on its
    # coordinates alone: w1 the scalar Adam above, w0 the 1-bit Adam of its own 20 values (padded on their own).
    import subprocess
    a, b, w0 = quadratic_problem(ranks, 30, seed=40 + ranks)
    opt = {"lr": 0.02, "beta1": 0.8, "beta2": 0.99, "freeze_step": 3, "weight_decay": 0.01}
    cfg = {"name": "nonfreeze", "model": {"kind": "quadratic", "a": a.tolist(), "b": b.tolist(),
                                          "initial_w": [float(x) for x in w0], "split": [20, 10]},
           "data": {"kind": "none"}, "cluster": {"ranks": ranks, "backend": "host"},
           "training": {"steps": 10, "eval_every": 0,
                        "optimizer": {"kind": "onebit_adam", "uncompressed_tensors": ["w1"], **opt}},
           "report": {"trace": True}}
    path = tmp_path / f"nf{ranks}.json"
    path.write_text(json.dumps(cfg))
    p = subprocess.run([str(BIN), "run", str(path), "--out", str(tmp_path / f"nf{ranks}"), "--quiet"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    run = json.loads((tmp_path / f"nf{ranks}" / "report.json").read_text())["runs"][0]
    got = np.array(run["trace"]["params"], dtype=F32)
    adam = non_freeze_adam(ranks, a[:, 20:], b[:, 20:], w0[20:], opt, 10)
    onebit, phases, norms, _ = reference(ranks, a[:, :20], b[:, :20], w0[:20], opt, 10, None, kind="onebit_adam")
    assert phases[3:] == ["compressed"] * 7
    assert ulps(got[:, :, 20:], adam) == 0.0, f"{ranks} ranks: the non-freeze group is not plain Adam"
    assert ulps(got[:, :, :20], onebit) == 0.0, f"{ranks} ranks: the compressed group is not 1-bit Adam"
    c = run["compression"]
    assert c["padded_elements"] == ref.padded_size(20, ranks)
    assert c["residual_norm"]["last"] == pytest.approx(norms[-1][0], rel=1e-9)


@pytest.mark.parametrize("kind", ["onebit_lamb", "onebit_adam"])
def test_a_run_started_from_saved_weights_starts_with_zero_error_buffers(tmp_path, kind):
    # A first run reaches its compressed stage (errors non-zero) and saves its final weights; a second run started
    # from that file (model.init.from) is the reference started from those weights with every state zero: fresh
    # moments, a new warm-up and zero worker and server errors (DeepSpeed's load_state_dict resets the errors;
    # gradsweep keeps no optimizer state across runs, and --resume runs an interrupted run again from step 1).
    a, b, w0 = quadratic_problem(2, 9, seed=50)
    opt = {"kind": kind, "lr": 0.02, "freeze_step": 3}
    first, out = run_report(tmp_path, 2, a, b, w0, opt, steps=6, split=[5, 4], tag=f"_first_{kind}",
                            report_extra={"save_weights": "final"})
    assert first["compression"]["residual_norm"]["last"] > 0.0
    start = np.array(first["trace"]["params"][-1][0], dtype=F32)
    second, _ = run_report(tmp_path, 2, a, b, w0, opt, steps=6, split=[5, 4], tag=f"_second_{kind}",
                           model_extra={"init": {"from": str(out / first["weights"]["final"])}})
    assert np.array_equal(np.array(second["trace"]["initial"], dtype=F32), start)
    got = np.array(second["trace"]["params"], dtype=F32)
    want, _, norms, _ = reference(2, a, b, start, opt, steps=6, split=[5, 4], kind=kind)
    assert ulps(got, want) == 0.0
    assert second["compression"]["residual_norm"]["count"] == 3
    assert second["compression"]["residual_norm"]["last"] == pytest.approx(norms[-1][0], rel=1e-9)
    assert math.isfinite(second["compression"]["server_error_norm"]["last"])
