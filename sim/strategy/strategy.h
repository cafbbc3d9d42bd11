// Sync strategies: how replicas agree. A SyncStrategy owns everything from a rank's accumulated local gradient to its
// next parameters (buffers, optimizers, communication, the step's modeled price) and how ranks step together (its
// StepControl). Extend: a new strategy is one file plus one line in kStrategies (registry.cpp; README).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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
#include "sim/core/element_ops.h"

namespace gs {

class ProcessGroup;  // sim/comm/process_group.h

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

// ---- Gradient-ready events: the shape of PyTorch c10d's Reducer ---------------------------------------------------
// Per rank and optimizer step the rank loop relays, for each micro-batch k = 0 .. K-1 in order, the model's events of
// its backward (layer_ready: one layer's elements are final for that backward, last layer first, as Model::backward
// announces them; none for a micro-batch without samples, which runs no backward) and then the micro-batch's end
// (micro_batch_end, every micro-batch). A strategy subscribes in its constructor (StrategySetup::gradients) to what
// it acts on; the rank loop asks it nothing. Events come on the rank's own thread, one call per layer or micro-batch.

// One layer of rank `rank`'s backward of micro-batch `micro_batch` is finished.
struct LayerReady {
  int rank = 0;
  int64_t micro_batch = 0;      // 0-based within the step
  size_t begin = 0, end = 0;    // the layer's elements [begin, end) of the flat gradient
  // The buffer that backward adds into (num_params floats, in the run's memory: StrategySetup::ops): the micro-batch's
  // own gradient under GradientHooks::Gradient::kEachMicroBatch or a pitfall that keeps micro-batches apart
  // (mean_of_means), else the step's running sum.
  float* grad = nullptr;
  // grad is the step's gradient sum (the buffer step() gets as StepInput::grad) and [begin, end) of it is final for
  // the step: the last micro-batch's backward into the sum itself. A subscriber may start communicating these
  // elements here (the all-reduce's buckets on a device): where the communicator starts buckets asynchronously the
  // rank loop has tallied the layer's inf/NaN values (ElementOps::tally_nonfinite) before relaying the event, so an
  // in-place reduction never changes the rank's own count.
  bool final = false;
};

// Rank `rank`'s micro-batch `micro_batch` has ended (its backward, if it had samples, is done).
struct MicroBatchEnd {
  int rank = 0;
  int64_t micro_batch = 0;
  bool last = false;            // the step's last micro-batch
  // The micro-batch's gradient sum alone (num_params floats; zeros for a micro-batch without samples) when a
  // subscriber asked for it (GradientHooks::Gradient::kEachMicroBatch); null otherwise.
  const float* grad = nullptr;
  PhaseClock* clock = nullptr;  // the rank's measured clock: a subscriber times its work here (communicate, wait)
};

class GradientSubscriber {
 public:
  virtual void layer_ready(const LayerReady& event) {}
  virtual void micro_batch_end(const MicroBatchEnd& event) {}

 protected:
  ~GradientSubscriber() = default;
};

// The subscriptions of one run (owned by the loop that runs it; filled before the rank threads start, then read only).
class GradientHooks {
 public:
  // kRunningSum: the backward adds straight into the step's gradient sum (the events' grad is that sum);
  // kEachMicroBatch: each micro-batch's backward runs into a buffer of its own, handed to micro_batch_end before it
  // is added into the sum (c10d without no_sync: every micro-batch's gradient is reduced).
  enum class Gradient { kRunningSum, kEachMicroBatch };
  void subscribe(GradientSubscriber& subscriber, Gradient gradient = Gradient::kRunningSum) {
    subscribers_.push_back(&subscriber);
    each_micro_batch_ = each_micro_batch_ || gradient == Gradient::kEachMicroBatch;
  }
  bool empty() const { return subscribers_.empty(); }
  bool each_micro_batch() const { return each_micro_batch_; }
  void layer_ready(const LayerReady& event) const {
    for (GradientSubscriber* s : subscribers_) s->layer_ready(event);
  }
  void micro_batch_end(const MicroBatchEnd& event) const {
    for (GradientSubscriber* s : subscribers_) s->micro_batch_end(event);
  }

 private:
  std::vector<GradientSubscriber*> subscribers_;
  bool each_micro_batch_ = false;
};

// What a strategy states about a run once, in its constructor (StrategySetup::claim_*); the loop records it before
// the run.
struct StrategyTraits {
  // Every rank's parameters are equal after every step of the run (the report's replicas_identical, checked against
  // the trace under report.trace).
  bool replicas_identical = true;
};

// What a strategy is built from (once per run, before the rank threads start).
struct StrategySetup {
  const RunConfig& config;
  const Model& model;
  Communicator& comm;
  int ranks;
  const CostModel* cost_model = nullptr;  // prices optimizer steps and the like (add_optimizer)
  bool timing_only = false;               // training.mode "timing": allocate nothing; only price and report are called
  const std::function<void(const ParameterRead&)>* on_read = nullptr;  // tests: every parameter read (free-running)
  int64_t total_steps = 0;                // the run's planned optimizer steps
  // Where the strategy subscribes to the rank loop's gradient-ready events; null where no rank loop runs it
  // (timing-only runs, tests that only price).
  GradientHooks* gradients = nullptr;
  StrategyTraits* traits = nullptr;       // where the claims below go (null: nobody records them)
  // The memory the strategy keeps its parameters, gradients and optimizer state in, and whose element operations it
  // runs on them (sim/core/element_ops.h): a backend's device memory when the run is device-resident (only where
  // host_memory_reason is empty; `comm` then reduces device buffers), else null: host memory (host_element_ops()).
  ElementOps* ops = nullptr;
  ElementOps& memory() const { return ops != nullptr ? *ops : host_element_ops(); }

  // The strategy's claim that every rank's parameters are equal after every step of this run.
  void claim_replicas_identical(bool identical) const {
    if (traits != nullptr) traits->replicas_identical = identical;
  }
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

// What SyncStrategy::report is asked with.
struct ReportContext {
  int64_t steps = 0;  // optimizer steps the run completed (a timing-only run's modeled compression counts them)
};

// What a strategy reports after the run (SyncStrategy::report).
struct StrategyReport {
  // The precision step (loss scaler, clipping) the report's "precision" object follows (rank 0's); null when none.
  const PrecisionStep* precision = nullptr;
  // The report's "compression" object (a timing-only run's from the modeled prices alone); null when gradients
  // travel uncompressed or the strategy models no compressor.
  nlohmann::json compression;
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

// The seven methods every loop calls: the parameters (params, eval_params, loss_scale), the step and its price
// (step, price), the report after the run and the step control before it; across processes (mpirun) the host rank
// loop also calls gather_ranks before the report. What a strategy needs from the rank loop beyond the step
// (micro-batch gradients, per-layer readiness) it subscribes to in its constructor (GradientHooks); what it claims
// about the run it states there too (StrategySetup::claim_replicas_identical).
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
  // The modeled step beyond the micro-batches: records into in.cost (when not null) what rank in.rank's step in.step
  // does (its collectives, optimizer, precision passes) without touching any data (in.grad may be null), and returns
  // the step's PriceKey. Used by step() for the modeled clock and alone by timing-only runs (training.mode "timing").
  // Bucket readiness comes from each chain's GradRange and the model's layer table (CostModel::chain_ready_s), the
  // order the gradient-ready events follow.
  virtual PriceKey price(const StepInput& in) const = 0;
  // After the run (one thread): what the report takes from the strategy; a timing-only run's too.
  virtual StrategyReport report(const ReportContext& context) const { return {}; }
  // Across processes (mpirun), after the run and before report(), on every process: brings what report() reads of
  // the other processes' ranks (first_rank .. first_rank + local_ranks - 1 are this process's) to process 0, e.g. with
  // gather_rank_rows (sim/comm/rank_gather.h). Nothing to do for a strategy whose report reads no per-rank record.
  virtual void gather_ranks(ProcessGroup& group, int first_rank, int local_ranks) {}
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
// sync.kind "allreduce" (training.optimizer.kind, after optimizer_registry's: DeepSpeed's 1-bit Adam, 0/1 Adam and
// 1-bit LAMB).
const std::vector<StrategyEntry>& optimizer_strategy_registry();
// True when training.optimizer.kind is one of optimizer_strategy_registry's (it owns the gradient's communication).
bool owns_communication(const OptimizerConfig& optimizer);
// The registry line of config's strategy: training.optimizer.kind's where that optimizer owns the gradient's
// communication, else sync.kind's. Throws gs::Error naming sync.kind and the known strategies otherwise.
const StrategyEntry& find_strategy(const RunConfig& config);
std::unique_ptr<SyncStrategy> make_strategy(const StrategySetup& setup);
// What keeps `config`'s strategy from holding its buffers in a backend's device memory: its element code that exists as
// host loops only, as "PATH: why" naming the first such setting (sync.kind, training.optimizer.kind, compression.kind),
// or nullopt when every element operation of its step runs through ElementOps and CompressOps (sync.kind allreduce with
// any compressor, zero (its cast reduce-scatter too), local_sgd or independent, with sgd / adam / adamw or the 1-bit
// optimizers, every precision mode, any loss scaler, clipping, delayed update, pitfall) or, for parameter_server (with
// or without compression), where its workers' element work does and its server is host memory by design. A backend
// with device memory refuses a run it names (residency.cpp); every kind of the registries passes today.
std::optional<std::string> host_memory_reason(const RunConfig& config);

// sync.kind "zero": elements of each rank's partition of n parameters over `ranks` (DeepSpeed's equal padded
// partitions: ceil(n / ranks) rounded up to 16 floats).
size_t zero_partition(size_t n, int ranks);
// The rule of training.optimizer.kind "onebit_adam", "zero_one_adam" and "onebit_lamb" (sim/strategy/onebit_adam.cpp):
// they own the gradient's communication, so settings that would change it are refused.
void onebit_adam_issues(const RunConfig& c, std::vector<ConfigIssue>& issues);

// Option groups of registry lines: the bucket sizes, the cast all-reduce's (reduce-scatter's), Adam's betas; and
// their concatenation.
inline const std::vector<std::string> kBucketOptions = {"sync.bucket_mb", "sync.first_bucket_mb"};
inline const std::vector<std::string> kCastOptions = {"compression.divide", "compression.accumulate"};
inline const std::vector<std::string> kAdamBetaOptions = {"training.optimizer.beta1", "training.optimizer.beta2",
                                                          "training.optimizer.betas", "training.optimizer.eps"};
inline std::vector<std::string> join_options(std::vector<std::string> a, const std::vector<std::string>& b = {},
                                             const std::vector<std::string>& c = {}) {
  a.insert(a.end(), b.begin(), b.end());
  a.insert(a.end(), c.begin(), c.end());
  return a;
}

}  // namespace gs
