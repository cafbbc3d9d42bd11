// RunMonitor: the end of every optimizer step, written once for every rank loop (host lockstep, free-running,
// timing-only, cuda): the convergence series, evaluation when due, the stop request and the time limit, and how the
// run ended (diverged, timeout, interrupted). A new per-step record or outcome is one method here (end_step for a
// lockstep step, progress for a free-running strategy's progress point).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "sim/config/run_config.h"
#include "sim/runtime/rank_loop.h"
#include "sim/runtime/run_result.h"
#include "sim/strategy/strategy.h"

namespace gs {

// Mean loss and accuracy (classification only) of some parameters on the evaluation set.
struct EvalResult {
  double loss = 0.0;
  std::optional<double> accuracy;
};
// Evaluates parameters (num_params floats) on the whole evaluation set. The backend's: host chunks, device chunks.
using Evaluator = std::function<EvalResult(const float* params)>;

// The stop request (RunHooks::stop) and the time limit (training.run_timeout_s) as read at one moment.
struct StopReading {
  bool stop = false;
  bool timed_out = false;
  bool any() const { return stop || timed_out; }
};

// The first non-finite quantity of a lockstep step, in the order computed: the parameters entering the step (the
// last update's result), a loss scaler that cannot recover (kLossScale: LossScaler::exhausted after the skip of the
// previous step), the training loss (forward), the gradient (backward). Under an active scaler a non-finite loss or
// gradient is the scaler's (the window is skipped), not a divergence.
enum class NonFinite { kNone, kParameters, kLossScale, kTrainLoss, kGradient };
// "parameters" | "loss_scale" | "train_loss" | "gradient" (report key divergence.quantity)
const char* non_finite_name(NonFinite q);

// The end of one lockstep step as its control decided it (every rank the same): 0-based step, train loss, the first
// non-finite quantity with its detail ("12 values over all ranks"), the stop reading all-reduced with the step, and
// whether an evaluation is due (never after a divergence).
struct StepEnd {
  int64_t step = 0;
  double train_loss = 0.0;
  NonFinite non_finite = NonFinite::kNone;
  std::string detail;
  StopReading reading;
  bool eval = false;
};

class RunMonitor {
 public:
  // total_steps: the planned optimizer steps. The time limit counts from wall0_s (now_s() at the run's start).
  RunMonitor(const RunConfig& config, const RunHooks& hooks, RunResult& res, int64_t total_steps, double wall0_s);

  int64_t total_steps() const { return total_; }
  // hooks.stop and the time limit, now (lockstep loops read it on rank 0 at a step's start and all-reduce it, so every
  // rank stops at the same step).
  StopReading read_stop() const;
  // True when 1-based step `step` ends with an evaluation: the last step, or every training.eval_every steps.
  bool eval_due(int64_t step) const;

  // Appends the series point of 1-based `step` (training time so far on rank 0's measured clock, train loss; the
  // modeled time when the loop knows it, else the modeled clock fills it later), counts its samples and the steps
  // completed. Returns the point for the evaluation to fill.
  SeriesPoint& record(int64_t step, double measured_s, double train_loss, double samples, double modeled_s = 0.0);
  // The loop's evaluator, set once its model and data exist.
  void set_evaluator(Evaluator evaluator) { evaluator_ = std::move(evaluator); }
  // Evaluates `params` into the last series point; the measured seconds it took are added to eval_spent_s()
  // (free-running loops keep evaluation out of their training time).
  void evaluate(const float* params);
  double eval_spent_s() const { return eval_spent_s_; }

  // Rank 0's end of a lockstep step (after record): evaluates eval_params() when due, the divergence or the stop,
  // then step_done. Returns true when the run stops after this step.
  bool end_step(const StepEnd& e, const std::function<const float*()>& eval_params);
  // A free-running strategy's progress point (from inside its serialized section, in modeled-time order): records it
  // (measured_s: training time so far without evaluations), evaluates the server's parameters when due, and judges
  // divergence (bad_params non-finite parameters, a worker's exhausted scaler, or a non-finite train loss without a
  // loss scaler). Returns false to end the run (divergence, stop request, time limit).
  bool progress(const ProgressPoint& p, size_t bad_params, bool scaler_active, double measured_s);

  // hooks.on_step(step, total, train_loss): rank 0's (or the strategy's) step is done.
  void step_done(int64_t step, double train_loss) const;

  // Outcomes. A lockstep step (0-based `step`) whose first non-finite quantity is `q`; `detail` says how much was
  // non-finite ("12 values over all ranks"), left out where empty. Divergence step: the step whose result was
  // non-finite (the parameters entering step t are step t - 1's update; at step 0 the initial parameters); for
  // kLossScale `step` is the 1-based step whose skip exhausted the scaler. Numbers print as format_number does (NaN,
  // inf, -inf).
  void diverged(int64_t step, NonFinite q, double train_loss, const std::string& detail);
  // A free-running strategy's progress point `step` (1-based) whose server parameters (`bad_params` values) or train
  // loss are non-finite.
  void diverged_at_progress(int64_t step, size_t bad_params, double train_loss);
  // The last update's parameters are non-finite although every step's checks passed (only a passed run changes).
  void final_parameters_checked(size_t bad_params);
  // A stop at the boundary after 1-based `steps_done`: "timeout" when the time limit passed, else "interrupted".
  // Never after the last step (the run is complete). Returns true when the run stops here.
  bool stop_after(int64_t steps_done, const StopReading& reading);

 private:
  RunResult& res_;
  const RunHooks& hooks_;
  int64_t total_;
  int64_t eval_every_;
  double timeout_s_;
  double wall0_s_;
  double eval_spent_s_ = 0.0;
  Evaluator evaluator_;
};

// Rows per evaluation forward (host and device evaluators alike).
constexpr int64_t kEvalChunkRows = 1024;

}  // namespace gs
