// Sync strategies: how replicas agree. A SyncStrategy owns everything from a rank's accumulated local gradient to its
// next parameters (buffers, optimizers, communication, the step's modeled price) and how ranks step together (its
// StepControl). Extend: a new strategy is one file plus one line in kStrategies (registry.cpp; README).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sim/comm/communicator.h"
#include "sim/config/run_config.h"
#include "sim/cost/step_cost.h"
#include "sim/cost/cost_model.h"
#include "sim/model/model.h"
#include "sim/optim/precision_step.h"
#include "sim/core/clock.h"

namespace gs {

// A contiguous range of the flat gradient buffer communicated as one unit, [begin, end) in elements.
struct Bucket {
  size_t begin = 0;
  size_t end = 0;
};

// DDP-style buckets: whole tensors in reverse table order (last layer first); the first bucket closes once it holds
// at least first_bucket_bytes, the others at bucket_bytes. Buckets are contiguous because the table is.
std::vector<Bucket> make_buckets(const std::vector<TensorInfo>& tensors, size_t first_bucket_bytes,
                                 size_t bucket_bytes);

// One read of the server's parameters by a worker of a free-running strategy (parameter server), for tests that
// check the SSP guarantee on every read: the worker is about to start clock `clock` (0-based) and the parameters it
// read contain applied_per_rank[q] pushes of rank q (its clocks 0 .. applied_per_rank[q] - 1).
struct ParameterRead {
  int rank = 0;
  int64_t clock = 0;
  std::vector<int64_t> applied_per_rank;
};

// What a free-running strategy reports once per `ranks` applied gradients (one optimizer step's worth of
// gradients, the unit of training.steps), from inside its serialized section in modeled-time order.
struct ProgressPoint {
  int64_t step = 0;          // 1-based: step x ranks gradients applied
  double modeled_s = 0.0;    // modeled time of the apply that completed it
  double train_loss = 0.0;   // mean per-sample loss over the samples of those gradients
  double samples = 0.0;      // samples behind those gradients
  const float* params = nullptr;  // the server's parameters after it (valid during the call)
  int scaler_exhausted_rank = -1;  // a worker whose loss scaler cannot recover (LossScaler::exhausted), or -1
};
// Returns false to end the run (divergence, stop request, time limit): the strategy then ends every rank's loop.
using ProgressSink = std::function<bool(const ProgressPoint&)>;

// The values one rank brings to its optimizer step's control (the rank loop fills them after its micro-batches).
struct StepTally {
  double samples = 0.0;           // samples of the rank's micro-batches this step
  double loss_sum = 0.0;          // their per-sample losses, summed
  double grad_samples = 0.0;      // the divisor behind the rank's gradient sum (training.pitfall changes it)
  double bad_params = 0.0;        // non-finite parameters entering the step
  double bad_grad = 0.0;          // non-finite gradient values (0 under a loss scaler or a reduced format: theirs)
  double scaler_exhausted = 0.0;  // 1 when the rank's loss scaler cannot recover after the previous step
};

// What the control made of a rank's step: the StepInput values it decides, and whether the strategy steps at all.
struct StepVerdict {
  double global_samples = 0.0;  // StepInput::global_samples
  bool loss_nonfinite = false;  // StepInput::loss_nonfinite
  bool apply = true;            // false: the step diverged; the strategy is not called
};

// How the ranks' steps relate: the lockstep control (the default, sim/runtime/lockstep_control.h) all-reduces every
// rank's StepTally so all ranks see the step's S, train loss, divergence and stop decision and stop together; a
// free-running strategy (the parameter server) supplies its own, whose ranks step on their own and end when the
// strategy says so. The rank loop calls, per rank and step: begin_step, (micro-batches), combine, (strategy step,
// clock end), end_step; finish once after every rank's loop. Every method but finish is called by the rank's thread.
class StepControl {
 public:
  virtual ~StepControl() = default;
  // Optimizer steps one rank's loader may serve.
  virtual int64_t loader_steps() const = 0;
  // True when rank `rank` runs its 0-based step `step`.
  virtual bool runs(int rank, int64_t step) const = 0;
  // Before the step's micro-batches.
  virtual void begin_step(int rank, int64_t step) {}
  // The step's verdict from the rank's tally (the control's own waiting goes into clock).
  virtual StepVerdict combine(int rank, int64_t step, const StepTally& tally, PhaseClock& clock) = 0;
  // After the strategy's step and clock.end_step(): the end of the step; false ends the rank's loop.
  virtual bool end_step(int rank, int64_t step, const StepVerdict& verdict, const PhaseClock& clock) = 0;
  // After every rank's loop (one thread).
  virtual void finish() {}
  // Wakes rank threads blocked inside the control or its strategy (a rank failed); they throw gs::Aborted.
  virtual void abort() {}
};

// What a strategy is built from (once per run, before the rank threads start).
struct StrategySetup {
  const RunConfig& config;
  const Model& model;
  Communicator& comm;
  int ranks;
  const CostModel* cost_model = nullptr;  // prices optimizer steps and the like (add_optimizer)
  bool timing_only = false;               // training.mode "timing": allocate nothing; only price is called
  const std::function<void(const ParameterRead&)>* on_read = nullptr;  // tests: every parameter read (free-running)
};

// One rank's call at the end of its optimizer step.
struct StepInput {
  int rank = 0;
  int64_t step = 0;               // 0-based optimizer step
  float* grad = nullptr;          // the rank's gradient SUM over its local samples of this step (may be modified)
  double local_samples = 0.0;     // samples behind grad
  double global_samples = 0.0;    // S: samples of this step over all ranks and micro-batches
  double lr = 0.0;                // learning rate of this step (schedule applied)
  double local_loss_sum = 0.0;    // sum of the rank's per-sample losses of this step (free-running strategies)
  // The step's training loss is inf/NaN: lockstep strategies get every rank's (the loss all-reduced in the step's
  // control values), free-running ones their own. Under an active loss scaler the step is then skipped like one with
  // a non-finite gradient (PrecisionStep::before_update); a scope of one rank (independent, local SGD's local steps)
  // uses local_loss_nonfinite() instead. Without a scaler the rank loop diverges before calling step().
  bool loss_nonfinite = false;
  bool local_loss_nonfinite() const { return !std::isfinite(local_loss_sum); }
  int64_t total_steps = 0;        // the run's planned optimizer steps
  PhaseClock* clock = nullptr;    // the rank's clock: attribute communicate / optimizer time and bytes
  StepCost* cost = nullptr;       // the rank's modeled step: add what the strategy does (see sim/cost/step_cost.h)
};

// Steps (and ranks) whose SyncStrategy::price records the same work share a key: (schedule class of the step, rank
// class). Most strategies: {0, 0} for every step and rank. The timing-only loop prices one step per key.
using PriceKey = std::pair<int64_t, int>;

// What a strategy reports after the run (SyncStrategy::report).
struct StrategyReport {
  // The precision step (loss scaler, clipping) the report's "precision" object follows (rank 0's); null when none.
  const PrecisionStep* precision = nullptr;
  nlohmann::json compression;  // the report's "compression" object; null when gradients travel uncompressed
  nlohmann::json staleness;    // the report's "staleness" object (free-running strategies); null otherwise
  // [rank][step] modeled steps of a strategy that models its own clock (free-running: ranks step on their own);
  // empty when the rank loop's lockstep modeled clock has them.
  std::vector<std::vector<ModeledStep>> modeled_rank_steps;
};

// What make_control gets from the rank loop.
struct ControlSetup {
  int64_t total_steps = 0;  // the run's planned optimizer steps
  int ranks = 1;
  // Where a free-running strategy reports a progress point (once per `ranks` applied gradients, from inside its
  // serialized section, in modeled-time order); false ends the run.
  ProgressSink progress;
  // The rank loop's lockstep control (sim/runtime/lockstep_control.h): the default.
  std::function<std::unique_ptr<StepControl>()> lockstep;
};

class SyncStrategy {
 public:
  virtual ~SyncStrategy() = default;
  // The rank's parameters (num_params floats). Ranks may share one buffer when the strategy shares identical state.
  virtual float* params(int rank) = 0;
  // The parameters that represent the model for evaluation (called from one thread between steps).
  virtual const float* eval_params() = 0;
  // The loss scale rank `rank` multiplies its loss by in this step's backward (read by the rank's own thread before
  // its micro-batches; 1 without a scaler). The rank loop also reads from it whether the scaler can still recover.
  virtual float loss_scale(int rank) const { return 1.0f; }
  // Called by every rank thread concurrently; returns when the rank's next parameters are in params(rank) and safe
  // to read for the next forward. Adds its work to in.cost through price(in).
  virtual void step(const StepInput& in) = 0;
  // True when the rank loop also hands the strategy each micro-batch's gradient as its backward ends (micro_batch),
  // before step() gets their sum (sync.kind "zero" with sync.reduce_every_microbatch).
  virtual bool takes_micro_batches() const { return false; }
  // Rank `rank`'s micro-batch k (0-based) of the step about to end: grad is that micro-batch's gradient sum alone
  // (num_params floats; zeros for a micro-batch without samples). Called by every rank thread for every k, in order.
  virtual void micro_batch(int rank, int64_t k, float* grad, PhaseClock& clock) {}
  // The modeled step beyond the micro-batches: records into in.cost (when not null) what rank in.rank's step in.step
  // does (its collectives, optimizer, precision passes) without touching any data (in.grad may be null), and returns
  // the step's PriceKey. Used by step() for the modeled clock and alone by timing-only runs (training.mode "timing").
  virtual PriceKey price(const StepInput& in) const = 0;
  // True when every rank's parameters are equal after every step of a run of total_steps optimizer steps (the
  // strategy's claim, recorded before the run; the report checks it under trace).
  virtual bool replicas_identical(int64_t total_steps) const = 0;
  // After the run: what the report takes from the strategy.
  virtual StrategyReport report() const { return {}; }
  // After a timing-only run of `steps` optimizer steps: the report's "compression" object from the modeled prices
  // alone (null: the gradients travel uncompressed, or the strategy models no compressor).
  virtual nlohmann::json modeled_compression(int64_t steps) const { return nullptr; }
  // The run's step control (once, before the rank threads start): the lockstep one unless the strategy's ranks do
  // not step together (the parameter server supplies its own and reports through setup.progress).
  virtual std::unique_ptr<StepControl> make_control(const ControlSetup& setup) { return setup.lockstep(); }
};

struct StrategyEntry {
  const char* name;
  const char* doc;
  std::unique_ptr<SyncStrategy> (*make)(const StrategySetup& setup);
  // The fields (or sections) that apply under this kind: the kind field's choices, its fields' "only applies when
  // ..." rules and the kinds at the start of their docs are derived from them (sim/validate/kinds.cpp).
  std::vector<std::string> options;
  KindIssues issues = nullptr;  // its cross-field rule beyond the options (sim/validate: validate_config)
};

// The sync strategies (sync.kind), in listing order.
const std::vector<StrategyEntry>& strategy_registry();
// The optimizers that own the gradient's communication and run as sync strategies of their own in place of
// sync.kind "allreduce" (training.optimizer.kind, after optimizer_registry's: DeepSpeed's 1-bit Adam and 0/1 Adam).
const std::vector<StrategyEntry>& optimizer_strategy_registry();
std::unique_ptr<SyncStrategy> make_strategy(const StrategySetup& setup);

std::unique_ptr<SyncStrategy> make_allreduce(const StrategySetup& setup);
std::unique_ptr<SyncStrategy> make_independent(const StrategySetup& setup);
std::unique_ptr<SyncStrategy> make_local_sgd(const StrategySetup& setup);
std::unique_ptr<SyncStrategy> make_parameter_server(const StrategySetup& setup);
std::unique_ptr<SyncStrategy> make_zero(const StrategySetup& setup);
// sync.kind "zero": elements of each rank's partition of n parameters over `ranks` (DeepSpeed's equal padded
// partitions: ceil(n / ranks) rounded up to 16 floats).
size_t zero_partition(size_t n, int ranks);
// training.optimizer.kind "onebit_adam" (sim/strategy/onebit_adam.cpp): chosen by make_strategy in place of
// sync.kind "allreduce" (validate_config refuses it with any other sync.kind).
std::unique_ptr<SyncStrategy> make_onebit_adam(const StrategySetup& setup);
// training.optimizer.kind "zero_one_adam" (sim/strategy/zero_one_adam.cpp): likewise.
std::unique_ptr<SyncStrategy> make_zero_one_adam(const StrategySetup& setup);

}  // namespace gs
