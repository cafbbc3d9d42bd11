"""gradsweep against PyTorch 1.13 (CPU, gloo, one process per rank; stock torch.optim, clip_grad_norm_, DDP comm
hooks, PeriodicModelAverager): every parameter of every rank after every step, from the same initial weights (the
trace's) and the same micro-batches. Expected: bit for bit on 2 ranks; on 4 ranks bit for bit once torch sums the
ranks in gradsweep's rank order (a comm hook), and within a few ulps with gloo's own order. Where gradsweep differs
on purpose, the test asserts the documented difference (docs/parity.md)."""
import numpy as np
import pytest

from parity_lib import replay_max, run_gradsweep, scenario, torch

SGD_CASES = {
    "sgd": {"kind": "sgd", "lr": 0.1},
    "momentum": {"kind": "sgd", "lr": 0.07, "momentum": 0.9},
    "nesterov_wd": {"kind": "sgd", "lr": 0.03, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
}
ADAM_CASES = {
    "adam_1.13": {"kind": "adam", "lr": 0.003, "weight_decay": 0.01, "first_moment": "mul_add"},
    "adamw_1.13": {"kind": "adamw", "lr": 0.003, "weight_decay": 0.05, "first_moment": "mul_add"},
    "adam_2.x": {"kind": "adam", "lr": 0.003, "first_moment": "lerp"},
    "adamw_2.x": {"kind": "adamw", "lr": 0.01, "weight_decay": 0.1, "first_moment": "lerp"},
}


@pytest.mark.parametrize("name", list(SGD_CASES) + list(ADAM_CASES))
def test_optimizers_on_two_ranks_are_bit_identical(tmp_path, name):
    opt = SGD_CASES.get(name) or ADAM_CASES[name]
    run = run_gradsweep(tmp_path, scenario(name.replace(".", "_"), optimizer=opt, steps=8))
    diffs, _ = replay_max(run)
    assert diffs.max() == 0.0, f"{name}: per-step max differences {diffs}"


@pytest.mark.parametrize("name", list(SGD_CASES) + list(ADAM_CASES))
def test_four_ranks_differ_only_by_the_summation_order(tmp_path, name):
    opt = SGD_CASES.get(name) or ADAM_CASES[name]
    run = run_gradsweep(tmp_path, scenario(name.replace(".", "_") + "_4", ranks=4, optimizer=opt, steps=6))
    ordered, _ = replay_max(run, sum_order="rank")
    assert ordered.max() == 0.0, f"rank-order sum: {ordered}"
    stock, _ = replay_max(run)  # gloo's ring order: a few ulps apart, no more
    scale = np.abs(np.array(run["trace"]["params"], dtype=np.float64)).max()
    assert stock.max() <= 1e-5 * scale, f"gloo order: {stock}"


def test_accumulation_with_no_sync_sums_each_micro_batch_first(tmp_path):
    # K = 4 micro-batches of 32 samples, widths 40 (bias columns 0-31 take PyTorch's multi_row_sum, 32-39 its
    # row_sum): weights and biases accumulate micro-batch sums, as DDP under no_sync does.
    cfg = scenario("accumulate", K=4, batch=32, layers=(8, 40, 3), steps=5,
                   optimizer={"kind": "sgd", "lr": 0.05, "momentum": 0.9})
    run = run_gradsweep(tmp_path, cfg)
    diffs, _ = replay_max(run)
    assert diffs.max() == 0.0, diffs


def test_clip_grad_norm_differs_only_by_the_norm_summed_in_double(tmp_path):
    cfg = scenario("clip", optimizer={"kind": "sgd", "lr": 0.1, "momentum": 0.9}, clip=0.05, steps=6)
    run = run_gradsweep(tmp_path, cfg)
    same_norm, _ = replay_max(run, clip_norm="double")
    assert same_norm.max() == 0.0, f"with gradsweep's norm: {same_norm}"
    stock, _ = replay_max(run)  # torch's norm of per-tensor float norms: the coefficient moves by an ulp or so
    assert stock.max() <= 1e-6, f"stock clip_grad_norm_: {stock}"


@pytest.mark.parametrize("schedule", [
    {"kind": "step", "step_size": 3, "gamma": 0.1},
    {"kind": "warmup_cosine", "warmup_steps": 3, "min_lr": 0.01},
    {"kind": "warmup_cosine", "warmup_steps": 0, "min_lr": 0.0},
], ids=["steplr", "warmup_cosine", "cosine"])
def test_schedules_match_torchs_schedulers(tmp_path, schedule):
    cfg = scenario("sched", optimizer={"kind": "sgd", "lr": 0.2, "momentum": 0.5}, schedule=schedule, steps=10)
    run = run_gradsweep(tmp_path, cfg)
    diffs, lrs = replay_max(run)
    assert diffs.max() == 0.0, f"lr per step (torch) {lrs}: {diffs}"


def test_post_local_sgd_matches_periodic_model_averager(tmp_path):
    cfg = scenario("local", optimizer={"kind": "sgd", "lr": 0.1, "momentum": 0.9}, steps=9,
                   sync={"kind": "local_sgd", "period": 3, "warmup_steps": 2})
    run = run_gradsweep(tmp_path, cfg)
    diffs, _ = replay_max(run)
    assert diffs.max() == 0.0, diffs
    # The replicas differ between averages (so the comparison is per rank) and agree after step 2 + 3.
    p = np.array(run["trace"]["params"], dtype=np.float32)
    assert (p[3, 0] != p[3, 1]).any() and (p[4, 0] == p[4, 1]).all()


@pytest.mark.parametrize("kind", ["fp16", "bf16"])
def test_cast_hooks_arithmetic(tmp_path, kind):
    cfg = scenario(f"cast_{kind}", optimizer={"kind": "sgd", "lr": 0.1, "momentum": 0.9}, steps=6,
                   compression={"kind": kind, "divide": "pre"})
    run = run_gradsweep(tmp_path, cfg)
    diffs, _ = replay_max(run, sum_order="rank")
    assert diffs.max() == 0.0, diffs
    if kind == "fp16":  # the stock fp16_compress_hook (gloo's fp16 all-reduce): on 2 ranks the order cannot matter
        stock, _ = replay_max(run)
        assert stock.max() == 0.0, stock


POWERSGD_CASES = {
    # widths 8-16-4: every product rows x cols x r < 400 (torch.bmm's own float loop); P's columns of 16 and 4 rows
    # (no tail / the 4-value tail of the contiguous norm).
    "rank1": dict(rank=1),
    "rank2": dict(rank=2),
    # widths 12-37-5: 0.weight [37, 12] goes through BLAS sgemm (444 x r >= 400), 2.weight [5, 37] through the loop
    # at rank 1; columns of 37, 12 and 5 rows take every tail of the norms; an epsilon on the norms.
    "rank1_blas_eps": dict(rank=1, orthogonalization_epsilon=1e-8, layers=(12, 37, 5)),
    "rank2_blas": dict(rank=2, layers=(12, 37, 5)),
}


@pytest.mark.parametrize("name", list(POWERSGD_CASES))
def test_powersgd_hook_with_gradsweeps_initial_q_is_bit_identical(tmp_path, name):
    # Dense steps 0-1, compressed 2-7 (both weight matrices; biases dense), warm start. torch's powerSGD_hook gets
    # gradsweep's initial Q (the report's powersgd_q file); both orthogonalize Q before P = M Q and P before
    # Q = M^T P in the same float order (docs/parity.md).
    case = dict(POWERSGD_CASES[name])
    layers = case.pop("layers", (8, 16, 4))
    cfg = scenario(f"powersgd_{name}", optimizer={"kind": "sgd", "lr": 0.1, "momentum": 0.9}, steps=8,
                   layers=layers, compression={"kind": "powersgd", "start_step": 2, **case})
    run = run_gradsweep(tmp_path, cfg)
    assert run["powersgd_q"]["rank"] == case["rank"]
    diffs, _ = replay_max(run)
    assert diffs.max() == 0.0, f"per-step max differences {diffs}"
    # The compressed steps moved the weights by something other than the dense gradient (the test is not vacuous).
    p = np.array(run["trace"]["params"], dtype=np.float64)
    assert np.abs(p[-1] - p[1]).max() > 1e-3


def test_powersgd_rank_3_differs_only_by_torchs_qr(tmp_path):
    # From rank 3 on, torch's hook orthogonalizes with torch.linalg.qr (Householder, LAPACK) where gradsweep keeps
    # Gram-Schmidt: the same factors up to column signs (which cancel in P Q^T) and rounding. docs/parity.md states the
    # difference: a few float32 ulps of the weights, 6.0e-8 on this model after 6 compressed steps.
    cfg = scenario("powersgd_rank3", optimizer={"kind": "sgd", "lr": 0.1, "momentum": 0.9}, steps=8,
                   compression={"kind": "powersgd", "rank": 3, "start_step": 2})
    run = run_gradsweep(tmp_path, cfg)
    assert run["powersgd_q"]["rank"] == 3
    diffs, _ = replay_max(run)
    assert diffs[:2].max() == 0.0, f"dense steps 0-1 must be bit-identical: {diffs}"
    p = np.array(run["trace"]["params"], dtype=np.float64)
    ulp = np.spacing(np.float32(np.abs(p).max()))
    assert 0.0 < diffs.max() <= 8 * ulp, f"per-step max differences {diffs} (ulp {ulp}); update docs/parity.md"
    assert np.abs(p[-1] - p[1]).max() > 1e-3  # the compressed steps moved the weights


def test_powersgd_min_compression_rate_sends_the_same_matrices_dense(tmp_path):
    # rank 2: 2.weight [4, 16] has (4 + 16) 2 = 40 < 64 values (compressed at rate 1) but 80 >= 64 at torch's default
    # rate 2, so it goes dense; 0.weight [16, 8] (48 x 2 = 96 < 128) stays compressed. Both sides must agree on that
    # (a matrix compressed by one side only would differ by far more than rounding).
    cfg = scenario("powersgd_rate", optimizer={"kind": "sgd", "lr": 0.1, "momentum": 0.9}, steps=6,
                   compression={"kind": "powersgd", "rank": 2, "start_step": 2, "min_compression_rate": 2})
    run = run_gradsweep(tmp_path, cfg)
    diffs, _ = replay_max(run)
    assert diffs.max() == 0.0, f"per-step max differences {diffs}"


def test_a_replay_past_its_deadline_is_ended_with_an_error(tmp_path, monkeypatch):
    # A rank that hangs (torch 1.13's gloo teardown can deadlock) must not block the suite: past REPLAY_TIMEOUT_S the
    # replay kills its ranks and raises. 0.05 s is far less than a spawned rank needs to start Python and import torch
    # (hundreds of ms on a warm machine), and the wait is never polled past the deadline (a 1 s poll once let ranks
    # that finished within it through).
    import time
    import torch_replay
    run = run_gradsweep(tmp_path, scenario("deadline", optimizer=SGD_CASES["sgd"], steps=2))
    monkeypatch.setattr(torch_replay, "REPLAY_TIMEOUT_S", 0.05)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="did not finish within 0.05 s"):
        replay_max(run)
    assert time.monotonic() - start < 30


class _Clock:
    """A fake time.monotonic for torch_replay: it moves only when a fake rank context waits, so what join_within does
    at and around its deadline does not depend on how loaded the machine is."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now


class _Rank:
    def __init__(self):
        self.killed = False

    def is_alive(self):
        return not self.killed

    def kill(self):
        self.killed = True


class _Ranks:
    """A stand-in for torch's ProcessContext whose ranks finish `finish_s` seconds after it is made (None: never);
    join(timeout) advances `clock` by the time it waits."""

    def __init__(self, clock, finish_s):
        self.clock = clock
        self.finish_at = None if finish_s is None else clock.now + finish_s
        self.processes = [_Rank(), _Rank()]
        self.polls = []

    def join(self, timeout):
        self.polls.append(timeout)
        if self.finish_at is not None and self.finish_at <= self.clock.now + timeout:
            self.clock.now = max(self.clock.now, self.finish_at)
            return True
        self.clock.now += timeout
        return False


def test_join_within_kills_hung_ranks_at_the_deadline_not_at_the_next_poll(monkeypatch):
    import torch_replay
    clock = _Clock()
    monkeypatch.setattr(torch_replay, "time", clock)
    ranks = _Ranks(clock, finish_s=None)
    start = clock.now
    with pytest.raises(RuntimeError, match="did not finish within 0.2 s"):
        torch_replay.join_within(ranks, 0.2)
    assert clock.now - start == pytest.approx(0.2)  # a whole 1 s poll would overshoot the deadline
    assert all(p.killed for p in ranks.processes)
    assert max(ranks.polls) <= 0.2


def test_join_within_returns_when_the_ranks_finish_before_the_deadline(monkeypatch):
    import torch_replay
    clock = _Clock()
    monkeypatch.setattr(torch_replay, "time", clock)
    ranks = _Ranks(clock, finish_s=1.5)  # past one 1 s poll, within the deadline
    torch_replay.join_within(ranks, 10.0)
    assert not any(p.killed for p in ranks.processes)
    assert ranks.polls == [1.0, 1.0] and clock.now == 1.5
