// RunMonitor (run_monitor.h): series points, evaluation, stop decisions and the wording of every outcome. Extend: a
// new outcome's wording is one method here.
#include "sim/core/count_text.h"
#include "sim/runtime/run_monitor.h"

#include <cmath>

#include <fmt/format.h>

#include "kernels/nvtx.h"
#include "sim/core/clock.h"
#include "sim/core/error.h"

namespace gs {

const char* non_finite_name(NonFinite q) {
  switch (q) {
    case NonFinite::kParameters: return "parameters";
    case NonFinite::kLossScale: return "loss_scale";
    case NonFinite::kTrainLoss: return "train_loss";
    case NonFinite::kGradient: return "gradient";
    case NonFinite::kNone: break;
  }
  return "none";
}

RunMonitor::RunMonitor(const RunConfig& config, const RunHooks& hooks, RunResult& res, int64_t total_steps,
                       double wall0_s)
    : res_(res),
      hooks_(hooks),
      total_(total_steps),
      eval_every_(config.training.eval_every),
      timeout_s_(config.training.run_timeout_s),
      wall0_s_(wall0_s) {}

StopReading RunMonitor::read_stop() const {
  StopReading r;
  r.stop = hooks_.stop != nullptr && hooks_.stop->load(std::memory_order_relaxed);
  r.timed_out = timeout_s_ > 0 && now_s() - wall0_s_ > timeout_s_;
  return r;
}

bool RunMonitor::eval_due(int64_t step) const {
  return evaluation_due(step, total_, eval_every_);
}

SeriesPoint& RunMonitor::record(int64_t step, double measured_s, double train_loss, double samples,
                                double modeled_s) {
  SeriesPoint pt;
  pt.step = step;
  pt.measured_s = measured_s;
  pt.modeled_s = modeled_s;
  pt.train_loss = train_loss;
  res_.series.push_back(pt);
  res_.samples_trained += samples;
  res_.steps_completed = step;
  return res_.series.back();
}

void RunMonitor::evaluate(const float* params) {
  GS_EXPECT(evaluator_ && !res_.series.empty(), "RunMonitor::evaluate: no evaluator or no series point");
  const double t0 = now_s();
  const EvalResult e = evaluator_(params);
  res_.series.back().eval_loss = e.loss;
  res_.series.back().eval_accuracy = e.accuracy;
  eval_spent_s_ += now_s() - t0;
}

void RunMonitor::step_done(int64_t step, double train_loss) const {
  if (hooks_.on_step) hooks_.on_step(step, total_, train_loss);
}

bool RunMonitor::end_step(const StepEnd& e, const std::function<const float*()>& eval_params) {
  if (e.eval) {
    GS_NVTX_RANGE(kEval);
    evaluate(eval_params());
  }
  bool stop = e.non_finite != NonFinite::kNone;
  if (stop) {
    diverged(e.step, e.non_finite, e.train_loss, e.detail);
  } else {
    stop = stop_after(e.step + 1, e.reading);
  }
  step_done(e.step + 1, e.train_loss);
  return stop;
}

bool RunMonitor::progress(const ProgressPoint& p, size_t bad_params, bool scaler_active, double measured_s) {
  record(p.step, measured_s, p.train_loss, p.samples, p.modeled_s);
  // Under a loss scaler a worker with a non-finite loss skipped its push (its scaler's to handle); the run diverges
  // when a worker's scaler cannot recover.
  const bool loss_bad = !scaler_active && !std::isfinite(p.train_loss);
  const bool bad = bad_params > 0 || p.scaler_exhausted_rank >= 0 || loss_bad;
  if (!bad && eval_due(p.step)) evaluate(p.params);
  step_done(p.step, p.train_loss);
  if (bad) {
    if (bad_params == 0 && p.scaler_exhausted_rank >= 0)
      diverged(p.step, NonFinite::kLossScale, p.train_loss, fmt::format("worker {}'s scaler", p.scaler_exhausted_rank));
    else
      diverged_at_progress(p.step, bad_params, p.train_loss);
    return false;
  }
  return !stop_after(p.step, read_stop());
}

void RunMonitor::diverged(int64_t step, NonFinite q, double train_loss, const std::string& detail) {
  res_.disposition = Disposition::kDiverged;
  res_.divergence_quantity = non_finite_name(q);
  const std::string paren = detail.empty() ? std::string() : " (" + detail + ")";
  if (q == NonFinite::kParameters) {
    // The parameters entering this step came from the previous step's update.
    res_.divergence_step = step;
    res_.message = step == 0 ? "the initial parameters are non-finite"
                             : fmt::format("diverged at step {}: the first non-finite quantity is the parameters after "
                                           "its update{}", step, paren);
  } else if (q == NonFinite::kLossScale) {
    // The scaler backed off past recovery at the skip of step `step` (seen by the next step's control values, after
    // the run).
    res_.divergence_step = step;
    res_.message = fmt::format("diverged at step {}: the loss scaler skipped that step's update and its scale backed "
                               "off below 2^-128, whose reciprocal (the unscale factor) overflows float, so every "
                               "later step would be skipped: it cannot recover{}", step, paren);
  } else if (q == NonFinite::kGradient) {
    res_.divergence_step = step + 1;
    res_.message = fmt::format("diverged at step {}: the first non-finite quantity is the gradient ({}training loss "
                               "{})", step + 1, detail.empty() ? std::string() : detail + "; ",
                               format_number(train_loss, 6));
  } else {
    res_.divergence_step = step + 1;
    res_.message = fmt::format("diverged at step {}: the first non-finite quantity is the training loss ({}; the "
                               "parameters entering the step were finite)", step + 1, format_number(train_loss));
  }
}

void RunMonitor::diverged_at_progress(int64_t step, size_t bad_params, double train_loss) {
  res_.disposition = Disposition::kDiverged;
  res_.divergence_step = step;
  res_.divergence_quantity = bad_params > 0 ? "parameters" : "train_loss";
  res_.message = bad_params > 0 ? fmt::format("diverged at step {}: the first non-finite quantity is the server's "
                                              "parameters ({})", step, count_text(bad_params, "value"))
                                : fmt::format("diverged at step {}: the first non-finite quantity is the training "
                                              "loss ({})", step, format_number(train_loss));
}

void RunMonitor::final_parameters_checked(size_t bad_params) {
  if (!res_.is(Disposition::kPassed) || bad_params == 0) return;
  res_.disposition = Disposition::kDiverged;
  res_.divergence_step = res_.steps_completed;
  res_.divergence_quantity = "parameters";
  res_.message = fmt::format("diverged at step {}: the first non-finite quantity is the parameters after its update",
                             res_.steps_completed);
}

bool RunMonitor::stop_after(int64_t steps_done, const StopReading& reading) {
  if (!reading.any() || steps_done >= total_) return false;
  res_.disposition = reading.timed_out ? Disposition::kTimeout : Disposition::kInterrupted;
  res_.message = reading.timed_out ? fmt::format("stopped after step {} of {}: training.run_timeout_s {} s passed",
                                                 steps_done, total_, timeout_s_)
                                   : fmt::format("stopped after step {} of {}", steps_done, total_);
  return true;
}

}  // namespace gs
