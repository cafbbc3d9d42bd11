#!/usr/bin/env python3
"""Replays one gradsweep run in PyTorch and compares every parameter after every step with the run's trace.

    tools/torch_replay.py REPORT RUN_ID [--tolerance X] [--sum-order stock|rank] [--clip-norm stock|double]

The run needs its initial parameters (the trace's, report.trace true, or the file of report.save_weights initial or
both), something to compare against (the trace: every step; else the final weights file: the last step) and data
this replay can reproduce: inline data (the samples are in the run's configuration), or the teacher and
Fashion-MNIST datasets with the run's saved batches (report.save_batches true: the sample indices of every step, rank
and micro-batch; the samples regenerated or read by tools/replay_data.py). It trains the same model (mlp / linear:
torch.nn.Sequential of torch.nn.Linear layers, weight [out, in], bias [out], ReLU between them) from those initial
parameters in PyTorch on CPU, one process per rank (torch.distributed with gloo), as DistributedDataParallel with
the comm hook that matches the run's strategy:

  sync allreduce, no compression   DDP's own all-reduce (--sum-order rank: a hook that sums the ranks in rank order,
                                   gradsweep's order, instead of gloo's)
  compression fp16                 ddp_comm_hooks.default_hooks.fp16_compress_hook (--sum-order rank: its arithmetic
                                   with a rank-order fp16 sum)
  compression bf16                 bf16_compress_hook's arithmetic (cast to bf16, divide by N, sum in bf16 in rank
                                   order, cast back); gloo has no bf16 sum
  compression powersgd             powerSGD_hook (PowerSGDState: matrix_approximation_rank = rank, start_powerSGD_iter
                                   = start_step, min_compression_rate, orthogonalization_epsilon, no error
                                   feedback, warm_start)
                                   with the run's exported initial Q (run["powersgd_q"]) instead of its random draw
  sync local_sgd                   post_localSGD_hook (PostLocalSGDState with start_localSGD_iter = warmup,
                                   post_local_gradient_allreduce False) and PeriodicModelAverager(period H,
                                   warmup_steps = warmup + H - 1): the phase mapping of docs/parity.md

with the micro-batches of every step (no_sync on all but the last), the loss as gradsweep defines it (mse: 0.5 per
sample times the squared error summed; cross_entropy: summed), divided by K x b per micro-batch (DDP then divides by
N), torch.optim.SGD / Adam / AdamW (first_moment lerp: PyTorch 2's Adam on 1.13's ops), torch.nn.utils.
clip_grad_norm_ (--clip-norm double: the norm summed in double as gradsweep does) and torch's StepLR / LinearLR +
CosineAnnealingLR schedules. It prints, per step, the largest |torch - gradsweep| over every parameter of every rank
and exits 1 when one exceeds --tolerance (2 when the run cannot be replayed). docs/parity.md has the table of what
matches bit for bit and why the rest differs.
"""
import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay_data  # noqa: E402
import report_lib as rl  # noqa: E402

DEFAULT_TOLERANCE = 1e-5


class Unsupported(Exception):
    """The run uses something this replay does not reproduce (the message says what)."""


# Seconds one replay may take, all ranks together (GRADSWEEP_REPLAY_TIMEOUT_S overrides): the suite's replays take a few
# seconds each on 2 cores.
REPLAY_TIMEOUT_S = float(os.environ.get("GRADSWEEP_REPLAY_TIMEOUT_S", "300"))

def load_run(report_path, run_id):
    try:
        report = rl.load_report(report_path, validate=False)
    except rl.ReportError as e:
        raise Unsupported(str(e)) from e
    for run in report.get("runs", []):
        if run.get("id") == run_id:
            return run
    ids = ", ".join(r.get("id", "?") for r in report.get("runs", []))
    raise Unsupported(f"{report_path}: no run with id {run_id!r} (runs: {ids})")


def check_replayable(cfg, run):
    """The reasons this replay cannot reproduce the run (empty when it can)."""
    why = []
    model, data, sync, comp = cfg["model"], cfg["data"], cfg["sync"], cfg["compression"]
    if model["kind"] not in ("mlp", "linear"):
        why.append(f"model.kind {model['kind']} (mlp and linear are replayed)")
    if model["kind"] == "mlp" and model["activation"] != "relu":
        why.append("model.activation gelu (relu is replayed)")
    if data["kind"] in ("teacher", "fashion_mnist"):
        if not run.get("batches"):
            why.append(f"data.kind {data['kind']} needs the run's saved batches (set report.save_batches true)")
    elif data["kind"] != "inline":
        why.append(f"data.kind {data['kind']} (inline, teacher and fashion_mnist data are replayed)")
    if sync["kind"] not in ("allreduce", "local_sgd"):
        why.append(f"sync.kind {sync['kind']} (allreduce and local_sgd are replayed)")
    if sync["kind"] == "allreduce" and sync.get("staleness", 0) != 0:
        why.append("sync.staleness > 0")
    if comp["kind"] not in ("none", "fp16", "bf16", "powersgd"):
        why.append(f"compression.kind {comp['kind']} (none, fp16, bf16, powersgd are replayed)")
    if comp["kind"] in ("fp16", "bf16", "powersgd") and comp.get("error_feedback") not in (None, False, "none"):
        why.append("compression.error_feedback")
    if comp["kind"] == "powersgd":
        if not run.get("powersgd_q"):
            why.append("compression.kind powersgd without its initial Q (set report.trace true)")
        if comp.get("start_step", 0) < 2:
            why.append("compression.start_step < 2 (powerSGD_hook with warm_start needs start_powerSGD_iter >= 2)")
    if cfg["precision"]["mode"] != "fp32":
        why.append(f"precision.mode {cfg['precision']['mode']} (fp32 is replayed)")
    if cfg["training"]["pitfall"] != "none":
        why.append(f"training.pitfall {cfg['training']['pitfall']}")
    weights = run.get("weights") or {}
    if not run.get("trace") and not weights.get("initial"):
        why.append("no initial parameters (set report.trace true, or report.save_weights \"initial\" or \"both\")")
    if not run.get("trace") and not weights.get("final"):
        why.append("nothing to compare against (set report.trace true, or report.save_weights \"final\" or \"both\")")
    if not run.get("trace") and sync["kind"] != "allreduce":
        why.append(f"sync.kind {sync['kind']} without a trace (its final weights are the replicas' average: set "
                   "report.trace true)")
    return why


def tensor_shapes(cfg):
    """gradsweep's parameter table of an mlp / linear model: (state_dict name, shape) in flat-buffer order. The names
    are those of build_model's nn.Sequential (layer l is module 2l), which report.save_weights files use."""
    widths, bias = cfg["model"]["layers"], cfg["model"]["bias"]
    out = []
    for l in range(len(widths) - 1):
        out.append((f"{2 * l}.weight", (widths[l + 1], widths[l])))
        if bias:
            out.append((f"{2 * l}.bias", (widths[l + 1],)))
    return out


def flat_from_file(cfg, path):
    """The flat parameter buffer (float32) of a safetensors file of the model's state_dict."""
    tensors = replay_data.read_safetensors(path)
    parts = []
    for name, shape in tensor_shapes(cfg):
        if name not in tensors or tuple(tensors[name].shape) != shape:
            got = tensors[name].shape if name in tensors else "missing"
            raise Unsupported(f"{path}: tensor {name}: expected shape {list(shape)}, got {got}")
        parts.append(tensors[name].reshape(-1))
    return np.concatenate(parts).astype(np.float32)


def indexed_batches(cfg, run, base_dir, world, steps):
    """Per rank, its micro-batches of every step from the run's saved batches (report.save_batches)."""
    ds = replay_data.dataset(cfg)
    indices = np.load(os.path.join(base_dir, run["batches"]["file"]))[run["batches"]["array"]]
    K = cfg["training"]["accumulation_steps"]
    if indices.shape[0] < steps or indices.shape[1] != world or indices.shape[2] != K:
        raise Unsupported(f"the saved batches have shape {list(indices.shape)}, expected [>= {steps}, {world}, {K}, b]")
    return [replay_data.micro_batches(ds, indices[:steps], r) for r in range(world)]


def inline_batches(cfg):
    """Per rank, its list of micro-batches as (x float32 [b, in], y float32 [b, out] or int64 labels [b])."""
    classification = cfg["model"]["loss"] == "cross_entropy"
    in_dim = cfg["model"]["layers"][0]
    out = []
    for rank_list in cfg["data"]["ranks"]:
        batches = []
        for mb in rank_list:
            y = mb["y"]
            x = np.array(mb["x"], dtype=np.float32) if "x" in mb else np.ones((len(y), in_dim), np.float32)
            y = np.array(y, dtype=np.int64) if classification else np.array(y, dtype=np.float32)
            batches.append((x, y))
        out.append(batches)
    return out


def build_model(torch, cfg):
    widths, bias = cfg["model"]["layers"], cfg["model"]["bias"]
    layers = []
    for l in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[l], widths[l + 1], bias=bias))
        if l + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def flat_params(torch, model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def load_flat(torch, model, flat):
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(torch.from_numpy(np.ascontiguousarray(flat[offset:offset + n])).reshape(p.shape))
            offset += n
    if offset != flat.size:
        raise Unsupported(f"the trace has {flat.size} parameters, the model {offset}")


def make_schedule(torch, opt, cfg, total):
    s = cfg["training"]["schedule"]
    if s["kind"] == "constant":
        return None
    if s["kind"] == "step":
        return torch.optim.lr_scheduler.StepLR(opt, step_size=s["step_size"], gamma=s["gamma"])
    warmup = s["warmup_steps"]
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, total - warmup), eta_min=s["min_lr"])
    if warmup == 0:
        return cosine
    # gradsweep: lr = base (t + 1) / warmup for t < warmup: LinearLR from 1/warmup to 1 over warmup - 1 steps.
    linear = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0 / warmup, end_factor=1.0,
                                               total_iters=max(1, warmup - 1))
    return torch.optim.lr_scheduler.SequentialLR(opt, [linear, cosine], milestones=[warmup])


def make_adam2(torch):
    """torch.optim.Adam / AdamW as PyTorch >= 2.0 writes the first moment (exp_avg.lerp_(grad, 1 - beta1)), built
    from 1.13's ops; everything else is 1.13's _single_tensor_adam(w) op for op."""

    class Adam2(torch.optim.Optimizer):
        def __init__(self, params, lr, betas, eps, weight_decay, decoupled):
            super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
            self.decoupled = decoupled

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                beta1, beta2 = group["betas"]
                lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    grad = p.grad
                    st = self.state[p]
                    if not st:
                        st["step"] = 0
                        st["exp_avg"] = torch.zeros_like(p)
                        st["exp_avg_sq"] = torch.zeros_like(p)
                    st["step"] += 1
                    step = st["step"]
                    if self.decoupled:
                        p.mul_(1 - lr * wd)
                    elif wd != 0:
                        grad = grad.add(p, alpha=wd)
                    st["exp_avg"].lerp_(grad, 1 - beta1)
                    st["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad.conj(), value=1 - beta2)
                    bias_correction1 = 1 - beta1 ** step
                    bias_correction2 = 1 - beta2 ** step
                    step_size = lr / bias_correction1
                    denom = (st["exp_avg_sq"].sqrt() / math.sqrt(bias_correction2)).add_(eps)
                    p.addcdiv_(st["exp_avg"], denom, value=-step_size)

    return Adam2


def make_optimizer(torch, params, cfg):
    o = cfg["training"]["optimizer"]
    if o["kind"] == "sgd":
        return torch.optim.SGD(params, lr=o["lr"], momentum=o["momentum"], nesterov=o["nesterov"],
                               weight_decay=o["weight_decay"])
    betas = (o["beta1"], o["beta2"])
    if o.get("first_moment", "lerp") == "lerp" and not torch.__version__.startswith("1."):
        cls = torch.optim.AdamW if o["kind"] == "adamw" else torch.optim.Adam
        return cls(params, lr=o["lr"], betas=betas, eps=o["eps"], weight_decay=o["weight_decay"])
    if o.get("first_moment", "lerp") == "lerp":
        return make_adam2(torch)(params, o["lr"], betas, o["eps"], o["weight_decay"], o["kind"] == "adamw")
    cls = torch.optim.AdamW if o["kind"] == "adamw" else torch.optim.Adam
    return cls(params, lr=o["lr"], betas=betas, eps=o["eps"], weight_decay=o["weight_decay"])


def rank_order_sum(torch, dist, tensor, world):
    """tensor summed over the ranks in rank order 0, 1, ..., N-1 (gradsweep's host all-reduce), on every rank."""
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor)
    acc = parts[0].clone()
    for p in parts[1:]:
        acc += p
    return acc


def make_hook(torch, dist, cfg, world, sum_order):
    """The DDP comm hook that matches the run (None: DDP's own all-reduce)."""
    kind = cfg["compression"]["kind"]
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as hooks

    def done(t):
        fut = torch.futures.Future()
        fut.set_result(t)
        return fut

    if kind == "none":
        if sum_order == "stock":
            return None, None

        def rank_order_allreduce(state, bucket):
            buf = bucket.buffer()
            return done(rank_order_sum(torch, dist, buf, world).div_(world))

        return rank_order_allreduce, None
    if kind == "powersgd":
        return powersgd_hook(torch, cfg), None
    if kind == "fp16" and sum_order == "stock":
        return hooks.fp16_compress_hook, None
    wire = torch.float16 if kind == "fp16" else torch.bfloat16

    def cast_hook(state, bucket):
        # fp16_compress_hook / bf16_compress_hook: buffer.to(wire).div_(N), all-reduce (sum) in the wire format, then
        # copied back into the fp32 bucket; the sum here runs in rank order in the wire format.
        buf = bucket.buffer()
        compressed = buf.to(wire).div_(world)
        bits = compressed.view(torch.float16)  # gloo moves no bf16: gather the same 16 bits as fp16 (no arithmetic)
        parts = [torch.empty_like(bits) for _ in range(world)]
        dist.all_gather(parts, bits)
        parts = [p.view(wire) for p in parts]
        acc = parts[0].clone()
        for p in parts[1:]:
            acc += p
        buf.copy_(acc)
        return done(buf)

    return cast_hook, None


def powersgd_hook(torch, cfg):
    """powerSGD_hook (PyTorch's, unchanged) with gradsweep's options and, at the first compressed step of a bucket,
    gradsweep's initial Q (cfg["_powersgd_q"], {parameter name: [cols, r]}) placed in the state's q memory instead of
    the hook's random draw, in the hook's order (the bucket's tensors grouped by shape). The hook orthogonalizes that
    Q (and every warm-started Q) before P = M Q, as gradsweep does. Returns (hook, state); register with the state."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psh
    comp = cfg["compression"]
    # gradsweep compresses a matrix iff (rows + cols) r x compression.min_compression_rate (default 1) < rows cols.
    state = psh.PowerSGDState(process_group=None, matrix_approximation_rank=comp["rank"],
                              start_powerSGD_iter=comp["start_step"],
                              min_compression_rate=comp.get("min_compression_rate", 1),
                              use_error_feedback=False, warm_start=True,
                              orthogonalization_epsilon=comp.get("orthogonalization_epsilon", 0.0))
    q0 = cfg["_powersgd_q"]

    def hook(st, bucket):
        idx = bucket.index()
        if st.iter >= st.start_powerSGD_iter and idx not in st.p_memory_dict:
            names = cfg["_param_names"]
            by_shape, p_size = {}, 0
            for p in bucket.parameters():
                mat = p.view(p.shape[0], -1)
                n, m = mat.shape
                r = min(n, m, st.matrix_approximation_rank)
                if psh._should_compress(n, m, r, st.min_compression_rate)[0]:
                    by_shape.setdefault(tuple(mat.shape), []).append(names[id(p)])
                    p_size += n * r
            parts = [torch.from_numpy(np.ascontiguousarray(q0[name], np.float32)).reshape(-1)
                     for group in by_shape.values() for name in group]
            st.p_memory_dict[idx] = torch.empty(p_size)
            st.q_memory_dict[idx] = torch.cat(parts) if parts else torch.empty(0)
        return psh.powerSGD_hook(st, bucket)

    return hook, state


def clip_double(torch, params, max_norm):
    """clip_grad_norm_ with gradsweep's norm: the sum of squares in double over the flat gradient, then torch's
    clip_coef = max_norm / (norm + 1e-6) clamped to 1, in float."""
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch.cat([g.detach().reshape(-1) for g in grads]).numpy().astype(np.float64)
    s = float(np.cumsum(flat * flat)[-1]) if flat.size else 0.0  # a running sum in flat order, as gradsweep's
    norm = torch.tensor(math.sqrt(s), dtype=torch.float32)
    coef = torch.tensor(max_norm, dtype=torch.float32) / (norm + 1e-6)
    coef = torch.clamp(coef, max=1.0)
    for g in grads:
        g.detach().mul_(coef)
    return norm


def _worker(rank, world, cfg, init, steps, out_dir, init_file, sum_order, clip_norm, all_batches):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    import datetime
    # A bounded gloo timeout: a rank whose peer is gone raises instead of waiting for ever.
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        model = build_model(torch, cfg)
        load_flat(torch, model, init)
        sync = cfg["sync"]
        ddp = DDP(model, bucket_cap_mb=sync["bucket_mb"])
        hook, _ = make_hook(torch, dist, cfg, world, sum_order)
        averager = None
        if sync["kind"] == "local_sgd":
            from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as pl
            from torch.distributed.algorithms.model_averaging import averagers
            warmup, period = sync["warmup_steps"], sync["period"]
            state = pl.PostLocalSGDState(process_group=None, subgroup=None, start_localSGD_iter=warmup,
                                         post_local_gradient_allreduce=False)
            ddp.register_comm_hook(state, pl.post_localSGD_hook)
            averager = averagers.PeriodicModelAverager(period=period, warmup_steps=warmup + period - 1)
        elif cfg["compression"]["kind"] == "powersgd":
            cfg["_param_names"] = {id(p): n for n, p in model.named_parameters()}
            psgd_hook, psgd_state = hook
            ddp.register_comm_hook(psgd_state, psgd_hook)
        elif hook is not None:
            ddp.register_comm_hook(None, hook)
        opt = make_optimizer(torch, ddp.parameters(), cfg)
        sched = make_schedule(torch, opt, cfg, steps)
        batches = all_batches[rank]
        K = cfg["training"]["accumulation_steps"]
        classification = cfg["model"]["loss"] == "cross_entropy"
        clip = cfg["training"]["clip_grad_norm"]
        out = np.empty((steps, init.size), np.float32)
        lrs = []
        for t in range(steps):
            opt.zero_grad()
            for k in range(K):
                x, y = batches[(t * K + k) % len(batches)]
                b = x.shape[0]
                ctx = ddp.no_sync() if k + 1 < K else contextlib.nullcontext()
                with ctx:
                    pred = ddp(torch.from_numpy(x))
                    if classification:
                        loss = torch.nn.functional.cross_entropy(pred, torch.from_numpy(y), reduction="sum")
                    else:
                        loss = 0.5 * ((pred - torch.from_numpy(y)) ** 2).sum()
                    (loss / (K * b)).backward()
            if clip > 0:
                if clip_norm == "double":
                    clip_double(torch, list(ddp.parameters()), clip)
                else:
                    torch.nn.utils.clip_grad_norm_(ddp.parameters(), clip)
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            if averager is not None:
                averager.average_parameters(ddp.parameters())
            if sched is not None:
                sched.step()
            out[t] = flat_params(torch, model)
        np.save(os.path.join(out_dir, f"rank{rank}.npy"), out)
        np.save(os.path.join(out_dir, f"lr{rank}.npy"), np.array(lrs, np.float64))
        # No rank leaves while another may still be inside the last step's collectives.
        dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    # The results are on disk: leave without tearing torch down. Torch 1.13's teardown can deadlock: the DDP Reducer's
    # destructor (run by the garbage collector, holding the GIL) joins ProcessGroupGloo's worker thread, which is
    # freeing a tensor that needs the GIL (seen here: one rank of a 4-rank replay blocked for an hour in
    # ProcessGroupGloo::~ProcessGroupGloo -> std::thread::join, its worker in TensorImpl::destroy_pyobj_if_needed).
    # os._exit skips the teardown; the parent's join sees exit code 0.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def join_within(ctx, timeout_s):
    """Waits for the ranks of `ctx` (torch.multiprocessing's ProcessContext) for at most `timeout_s` seconds.

    A deadline on the whole replay: a rank that hangs (a torch bug, a lost peer) ends it with an error instead of
    blocking the caller (a test, CI) for ever. The wait is polled at most a second at a time and never past the
    deadline, so a deadline shorter than a poll is kept too. Raises RuntimeError (after killing the live ranks) when
    the deadline passes; ctx.join raises when a rank failed.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            for proc in ctx.processes:
                if proc.is_alive():
                    proc.kill()
            raise RuntimeError(f"the PyTorch replay did not finish within {timeout_s} s (ranks killed)")
        if ctx.join(timeout=min(1.0, left)):
            return


def replay(run, sum_order="stock", clip_norm="stock", base_dir="."):
    """Trains the run in PyTorch; base_dir is the report's folder (the run's saved files are relative to it).
    Returns (torch_params, gradsweep_params, lrs [steps]) as float32 arrays: with a trace [steps, ranks, n] each,
    otherwise the last step only against the saved final weights ([1, ranks, n] each). Raises Unsupported with every
    reason the run cannot be replayed."""
    cfg = run["config"]
    why = check_replayable(cfg, run)
    if why:
        raise Unsupported("cannot replay this run: " + "; ".join(why))
    import torch
    import torch.multiprocessing as mp

    trace, weights = run.get("trace"), run.get("weights") or {}
    world = cfg["cluster"]["ranks"]
    if weights.get("initial"):
        init = flat_from_file(cfg, os.path.join(base_dir, weights["initial"]))
    else:
        init = np.array(trace["initial"], dtype=np.float32)
    if trace:
        want = np.array(trace["params"], dtype=np.float32)  # [steps, ranks, n]
        steps = want.shape[0]
        if want.shape[1] != world:
            raise Unsupported(f"the trace has {want.shape[1]} ranks, cluster.ranks is {world}")
    else:
        steps = weights["final_step"]
        final = flat_from_file(cfg, os.path.join(base_dir, weights["final"]))
        want = np.broadcast_to(final, (1, world, final.size))
    if cfg["compression"]["kind"] == "powersgd":
        cfg = dict(cfg, _powersgd_q=replay_data.read_safetensors(os.path.join(base_dir, run["powersgd_q"]["file"])))
    if cfg["data"]["kind"] == "inline":
        all_batches = inline_batches(cfg)
    else:
        all_batches = indexed_batches(cfg, run, base_dir, world, steps)
    with tempfile.TemporaryDirectory(prefix="torch_replay_") as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        # spawn, not fork: a rank forked from a process that has run PyTorch (its thread pools, OpenMP) can hang for
        # ever in its first parallel region or in gloo; a spawned rank re-imports torch (about a second) and is safe.
        ctx = mp.start_processes(_worker, args=(world, cfg, init, steps, tmp, init_file, sum_order, clip_norm,
                                                all_batches), nprocs=world, join=False, start_method="spawn")
        join_within(ctx, REPLAY_TIMEOUT_S)
        got = np.stack([np.load(os.path.join(tmp, f"rank{r}.npy")) for r in range(world)], axis=1)
        lrs = np.load(os.path.join(tmp, "lr0.npy"))
    if not trace:
        got = got[-1:]
    return got, want, lrs


def max_differences(got, want):
    """Per step, the largest |got - want| over every rank and parameter (NaN where either is NaN)."""
    d = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return d.reshape(d.shape[0], -1).max(axis=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("report", help="report.json of a gradsweep run")
    ap.add_argument("run_id", help="the run's id in that report")
    ap.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                    help=f"largest allowed |torch - gradsweep| per parameter (default {DEFAULT_TOLERANCE}; 0: bit for bit)")
    ap.add_argument("--sum-order", choices=["stock", "rank"], default="stock",
                    help="stock: DDP's own all-reduce (gloo's order); rank: sum the ranks in rank order")
    ap.add_argument("--clip-norm", choices=["stock", "double"], default="stock",
                    help="stock: torch.nn.utils.clip_grad_norm_; double: the norm summed in double as gradsweep")
    args = ap.parse_args(argv)
    try:
        run = load_run(args.report, args.run_id)
        got, want, _ = replay(run, args.sum_order, args.clip_norm, os.path.dirname(os.path.abspath(args.report)))
    except (Unsupported, OSError, json.JSONDecodeError, KeyError) as e:
        print(f"torch_replay: {e}", file=sys.stderr)
        return 2
    diffs = max_differences(got, want)
    worst = 0.0
    first = 1 if run.get("trace") else run["weights"]["final_step"]  # without a trace: the final weights alone
    for t, d in enumerate(diffs):
        print(f"step {first + t}: max |torch - gradsweep| = {d:.3g}")
        worst = max(worst, d) if not math.isnan(d) else math.inf
    ok = worst <= args.tolerance
    print(f"{'ok' if ok else 'FAILED'}: largest difference {worst:.3g} over {len(diffs)} steps "
          f"(tolerance {args.tolerance:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
