// LockstepControl (lockstep_control.h): the control all-reduce, the divergence order, and rank 0's end of a step.
#include "sim/core/count_text.h"
#include "sim/runtime/lockstep_control.h"

#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "kernels/nvtx.h"
#include "sim/core/error.h"

namespace gs {

LockstepControl::LockstepControl(const Setup& s)
    : comm_(s.comm),
      monitor_(s.monitor),
      modeled_(s.modeled),
      strategy_(s.strategy),
      res_(s.res),
      ranks_(s.ranks),
      n_(s.num_params),
      total_(s.total_steps),
      trace_(s.trace),
      scaler_active_(s.scaler_active),
      first_rank_(s.first_rank),
      rank_(static_cast<size_t>(s.ranks)),
      trace_buf_(s.trace ? static_cast<size_t>(s.ranks) * s.num_params : 0),
      ops_(s.ops != nullptr && !s.ops->host() ? s.ops : nullptr),
      trace_dev_(static_cast<size_t>(s.trace && ops_ != nullptr ? s.ranks : 0)) {}

void LockstepControl::begin_step(int rank, int64_t) {
  RankStep& s = rank_[static_cast<size_t>(rank)];
  s.ctl.fill(0.0);
  // Each process's first rank reads that process's stop request and run timeout; the control all-reduce adds them, so
  // a signal that reaches any one process of mpirun stops the run on all of them at the same step.
  if (rank != first_rank_) return;
  const StopReading reading = monitor_.read_stop();
  s.ctl[kCtlStop] = reading.stop ? 1.0 : 0.0;
  s.ctl[kCtlTimeout] = reading.timed_out ? 1.0 : 0.0;
}

StepVerdict LockstepControl::combine(int rank, int64_t step, const StepTally& tally, PhaseClock& clock) {
  RankStep& s = rank_[static_cast<size_t>(rank)];
  double* ctl = s.ctl.data();
  ctl[kCtlSamples] = tally.samples;
  ctl[kCtlLossSum] = tally.loss_sum;
  ctl[kCtlBadParams] = tally.bad_params;
  ctl[kCtlBadGrad] = tally.bad_grad;
  ctl[kCtlGradSamples] = tally.grad_samples;
  ctl[kCtlScalerExhausted] = tally.scaler_exhausted;
  {
    PhaseTimer t(clock, Phase::kWait);  // the step's control values; waiting for the slowest rank
    comm_.all_reduce_sum(rank, ctl, kControlCount);
    comm_.take_stats(rank);
  }
  // Every rank sees the same S, so every rank stops here together.
  if (ctl[kCtlSamples] <= 0) throw Error(fmt::format("step {} has no samples on any rank", step + 1));
  s.train_loss = ctl[kCtlLossSum] / ctl[kCtlSamples];  // every micro-batch's samples, also under a pitfall
  // A diverged step applies no update. Under an active scaler a non-finite loss or gradient is the scaler's: the
  // strategy skips the window (StepInput::loss_nonfinite).
  const bool loss_nonfinite = !std::isfinite(s.train_loss);
  s.non_finite = ctl[kCtlBadParams] > 0                  ? NonFinite::kParameters
                 : ctl[kCtlScalerExhausted] > 0          ? NonFinite::kLossScale
                 : loss_nonfinite && !scaler_active_     ? NonFinite::kTrainLoss
                 : ctl[kCtlBadGrad] > 0                  ? NonFinite::kGradient
                                                         : NonFinite::kNone;
  StepVerdict v;
  v.global_samples = ctl[kCtlGradSamples];
  v.loss_nonfinite = loss_nonfinite;  // every rank's loss (the control all-reduce's)
  v.apply = s.non_finite == NonFinite::kNone;
  return v;
}

StepEnd LockstepControl::step_end(int64_t step, const RankStep& s, bool want_eval) const {
  StepEnd e;
  e.step = step;
  e.train_loss = s.train_loss;
  e.non_finite = s.non_finite;
  e.reading.stop = s.ctl[kCtlStop] > 0;
  e.reading.timed_out = s.ctl[kCtlTimeout] > 0;
  e.eval = want_eval;
  if (s.non_finite == NonFinite::kLossScale) {
    e.detail = fmt::format("{:.0f} of {} scalers", s.ctl[kCtlScalerExhausted], count_text(ranks_, "rank's", "ranks'"));
  } else if (s.non_finite != NonFinite::kNone) {
    const double count = s.ctl[kCtlBadParams] > 0 ? s.ctl[kCtlBadParams] : s.ctl[kCtlBadGrad];
    e.detail = count_text(count, "value") + " over all ranks";
  }
  return e;
}

void LockstepControl::record_step(int rank, int64_t step, const RankStep& s, const PhaseClock& clock) {
  ++ended_;
  if (step > 0) modeled_.share(step - 1);
  if (rank != 0) return;
  trained_s_ += clock.steps().back().step_s;
  monitor_.record(step + 1, trained_s_, s.train_loss, s.ctl[kCtlSamples]);
  if (step > 0) modeled_.model_step(step - 1);
}

void LockstepControl::gather_trace(int rank) {
  if (ops_ != nullptr) {
    FloatBuffer& mine = trace_dev_[static_cast<size_t>(rank)];
    if (mine.size() == 0) mine = ops_->allocate(rank, trace_buf_.size());
    comm_.all_gather(rank, mine.get(), strategy_.params(rank), n_);
    if (rank == 0) ops_->download(0, trace_buf_.data(), mine.get(), trace_buf_.size());
  } else {
    comm_.all_gather(rank, trace_buf_.data(), strategy_.params(rank), n_);
  }
  if (rank != 0) return;
  std::vector<std::vector<float>> snap;
  for (int r = 0; r < ranks_; ++r) {
    const float* p = trace_buf_.data() + static_cast<size_t>(r) * n_;
    snap.emplace_back(p, p + n_);
  }
  res_.trace.push_back(std::move(snap));
}

bool LockstepControl::end_step(int rank, int64_t step, const StepVerdict& verdict, const PhaseClock& clock) {
  const RankStep& s = rank_[static_cast<size_t>(rank)];
  if (rank == first_rank_) record_step(rank, step, s, clock);
  const StepEnd e = step_end(step, s, verdict.apply && monitor_.eval_due(step + 1));
  if (!trace_ && !e.eval && !e.reading.any() && verdict.apply) {
    if (rank == 0) monitor_.step_done(step + 1, s.train_loss);
    return true;
  }
  comm_.barrier(rank);  // parameters of this step are final everywhere
  if (trace_) gather_trace(rank);
  double stop = 0.0;  // rank 0's decision, all-reduced: every rank of every process stops or goes on together
  if (rank == 0 && monitor_.end_step(e, [&] { return strategy_.eval_params(); })) stop = 1.0;
  comm_.all_reduce_sum(rank, &stop, 1);
  comm_.take_stats(rank);
  return stop == 0.0;
}

void LockstepControl::finish() { modeled_.finish(ended_); }

}  // namespace gs
