// The host rank loop (run_training, rank_loop.h): one loop for every host run, lockstep and free-running. Per rank and
// optimizer step: K micro-batches of data -> forward -> backward into the local gradient SUM (the pitfall's
// Accumulation rule decides what is summed and the divisor), the step control (StepControl: the lockstep all-reduce of
// the control values, or a free-running strategy's own), the strategy's step, and the end of the step in the control
// and the RunMonitor. Timing-only runs price the schedule in a short loop of their own with the same monitor
// (run_timing_only). Extend: a per-step quantity of every rank is one StepTally field; a new pitfall one rule in
// Accumulation; a new way of stepping together a StepControl (sim/strategy/strategy.h).
#include "sim/core/count_text.h"
#include "sim/runtime/rank_loop.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "kernels/convert.h"
#include "kernels/nvtx.h"
#include "sim/comm/communicator.h"
#include "sim/comm/process_group.h"
#include "sim/comm/rank_gather.h"
#include "sim/core/error.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/storage_model.h"
#include "sim/model/data_cache.h"
#include "sim/model/dataset.h"
#include "sim/model/loader.h"
#include "sim/model/model.h"
#include "sim/optim/loss_scaler.h"
#include "sim/optim/optimizer.h"
#include "sim/backend/backend.h"
#include "sim/backend/cuda_backend.h"
#include "sim/runtime/device.h"
#include "sim/runtime/lockstep_clock.h"
#include "sim/runtime/lockstep_control.h"
#include "sim/runtime/run_monitor.h"
#include "sim/runtime/run_plan.h"
#include "sim/runtime/world.h"
#include "sim/strategy/strategy.h"

namespace gs {
namespace {

// Ranks whose loss scaler cannot recover (loss_scale_exhausted) after the run's last step, from every rank's scale.
int exhausted_scalers(const std::vector<float>& scales, LossScaleKind kind) {
  int count = 0;
  for (const float scale : scales) count += loss_scale_exhausted(kind, scale) ? 1 : 0;
  return count;
}

// Evaluates params on the whole evaluation set in chunks of kEvalChunkRows (the host backend's evaluator).
EvalResult evaluate(const Model& model, const Dataset& data, const float* params, Workspace& ws, Batch& chunk) {
  const Batch& e = data.eval_set();
  EvalSums total;
  for (int64_t start = 0; start < e.count; start += kEvalChunkRows) {
    int64_t n = std::min(kEvalChunkRows, e.count - start);
    chunk.rank = e.rank;
    chunk.count = n;
    chunk.in_dim = e.in_dim;
    chunk.out_dim = e.out_dim;
    chunk.x.assign(e.x.begin() + start * e.in_dim, e.x.begin() + (start + n) * e.in_dim);
    if (!e.y.empty()) chunk.y.assign(e.y.begin() + start * e.out_dim, e.y.begin() + (start + n) * e.out_dim);
    if (!e.labels.empty()) chunk.labels.assign(e.labels.begin() + start, e.labels.begin() + start + n);
    EvalSums s = model.evaluate(params, chunk, ws);
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
    total.count += s.count;
  }
  EvalResult r;
  if (total.count == 0) {
    r.loss = std::nan("");
    return r;
  }
  r.loss = total.loss_sum / static_cast<double>(total.count);
  if (model.classification()) r.accuracy = static_cast<double>(total.correct) / static_cast<double>(total.count);
  return r;
}

// The host loop's precision object: rank 0's precision step (under all-reduce every rank's is the same; nullptr where
// the strategy has none), counts over all ranks.
PrecisionResult precision_result(const RunConfig& config, const PrecisionStep* ps,
                                 const std::vector<PrecisionCounters>& counters,
                                 const std::vector<std::optional<int64_t>>& first_nonfinite) {
  if (ps == nullptr) return precision_result(config, nullptr, 0, std::nullopt, counters, first_nonfinite);
  return precision_result(config, &ps->scaler(), ps->averaged_nonfinite_values(), ps->first_nonfinite_averaged_step(),
                          counters, first_nonfinite);
}

}  // namespace

PrecisionResult precision_result(const RunConfig& config, const LossScaler* scaler, uint64_t averaged_nonfinite,
                                 std::optional<int64_t> first_nonfinite_averaged,
                                 const std::vector<PrecisionCounters>& counters,
                                 const std::vector<std::optional<int64_t>>& first_nonfinite) {
  PrecisionResult p;
  p.mode = config.precision.mode;
  const LossScalerSettings settings = loss_scaler_settings(config.precision);
  p.loss_scale = settings.kind == LossScaleKind::kDynamic  ? "dynamic"
                 : settings.kind == LossScaleKind::kStatic ? "static"
                                                           : "none";
  if (scaler != nullptr) {
    p.loss_scale_trajectory = scaler->trajectory();
    p.final_loss_scale = scaler->scale();
    p.skipped_steps = scaler->skipped_step_list();
    p.skipped_nonfinite_loss = scaler->skipped_for_loss();
    p.skipped_nonfinite_gradient = scaler->skipped_for_gradient();
    p.averaged_grad_nonfinite = averaged_nonfinite;
    p.first_nonfinite_averaged_step = first_nonfinite_averaged;
  }
  for (const PrecisionCounters& c : counters) {
    p.grad_values += c.grad_values;
    p.grad_underflow += c.grad_underflow;
    p.grad_nonfinite += c.grad_nonfinite;
  }
  p.first_nonfinite_step = first_nonfinite;
  const std::string& opt = config.training.optimizer.kind;
  const int state_buffers = opt == "sgd" ? (config.training.optimizer.momentum != 0.0 ? 1 : 0) : 2;
  p.bytes = bytes_per_param(parse_precision_mode(config.precision.mode), state_buffers);
  return p;
}

int64_t planned_steps(const RunConfig& config, int64_t steps_per_epoch) {
  if (config.training.epochs <= 0) return config.training.steps;
  GS_EXPECT(steps_per_epoch > 0, fmt::format("training.epochs: the data has no epochs or fewer samples than one "
                                             "global batch ({} x {} x {})",
                                             count_text(config.cluster.ranks, "rank"),
                                             count_text(config.training.accumulation_steps, "micro-batch", "micro-batches"),
                                             count_text(config.data.batch_per_rank, "sample")));
  return std::max<int64_t>(1, static_cast<int64_t>(std::floor(config.training.epochs *
                                                              static_cast<double>(steps_per_epoch))));
}

namespace {

// How a rank's micro-batch gradients become its step gradient (training.pitfall, docs/pitfalls.md). Correct: the sum
// of every sample's gradient, divided by the samples. zero_grad_in_loop: the article's loop zeroes the gradient
// before every micro-batch's backward and steps every K-th, so the update is the last non-empty micro-batch's mean
// gradient (divided by its own size, not by K b), at the full learning rate. mean_of_means: each micro-batch's mean
// gradient, divided by K, averaged over ranks: (1/(N K)) sum_r sum_k (1/b_rk) sum_{i in (r,k)} g_i. each_micro_batch
// (a gradient subscriber takes every micro-batch's gradient, GradientHooks::Gradient::kEachMicroBatch): each backward
// runs into a buffer of its own (micro()), then adds into the step's sum.
// Every buffer is rank `rank`'s in the run's memory (ElementOps: host RAM, or a backend's device memory).
class Accumulation {
 public:
  Accumulation(Pitfall pitfall, ElementOps& ops, int rank, size_t n, bool each_micro_batch)
      : zero_each_(pitfall == Pitfall::kZeroGradInLoop),
        mean_each_(pitfall == Pitfall::kMeanOfMeans),
        each_(each_micro_batch && !mean_each_),
        ops_(ops),
        rank_(rank),
        micro_(ops.allocate(rank, mean_each_ || each_ ? n : 0)) {}
  // One micro-batch's backward into grad (n floats); grad_samples counts the samples behind grad.
  void backward(const Model& model, const float* params, const Batch& batch, Workspace& ws,
                const PrecisionPolicy& precision, float* grad, size_t n, double& grad_samples) {
    if (zero_each_) {  // optimizer.zero_grad() inside the loop: earlier micro-batches are lost
      ops_.zero(rank_, grad, n);
      grad_samples = 0.0;
    }
    if (mean_each_) {
      ops_.zero(rank_, micro_.get(), n);
      model.backward(params, batch, ws, micro_.get(), precision);
      const float inv_count = 1.0f / static_cast<float>(batch.count);  // (loss_k / b_k) / K; K in divisor
      ops_.add_scaled(rank_, grad, micro_.get(), inv_count, n);
    } else if (each_) {
      ops_.zero(rank_, micro_.get(), n);
      model.backward(params, batch, ws, micro_.get(), precision);
      ops_.add(rank_, grad, micro_.get(), n);
    } else {
      model.backward(params, batch, ws, grad, precision);
    }
    grad_samples += static_cast<double>(batch.count);
  }
  // The divisor behind the step's gradient: the samples, or K per rank under mean_of_means.
  double divisor(double grad_samples, int64_t K) const { return mean_each_ ? static_cast<double>(K) : grad_samples; }
  // The buffer the next backward adds into: the micro-batch's own, or the step's sum `grad`.
  float* target(float* grad) { return mean_each_ || each_ ? micro_.get() : grad; }
  // The backward adds into the step's sum itself (target is the sum): its last micro-batch's layers are final.
  bool into_sum() const { return !(mean_each_ || each_); }
  // each_micro_batch: the last backward's gradient alone; after empty(), zeros (a micro-batch without samples).
  float* micro() { return micro_.get(); }
  void empty() { ops_.zero(rank_, micro_.get(), micro_.size()); }

 private:
  bool zero_each_;
  bool mean_each_;
  bool each_;
  ElementOps& ops_;
  int rank_;
  FloatBuffer micro_;  // mean_of_means, each_micro_batch: one micro-batch's gradient sum
};

// One rank's backward events (GradReady, set as its workspace's grad_ready) relayed to the run's gradient subscribers
// with the rank and micro-batch they belong to; one call per layer, nothing allocated. With `tally` (a communicator
// that starts buckets asynchronously, so a started layer may be reduced in place before the loop's count after the
// micro-batches), each final layer's inf/NaN values are added to the rank's tally in `ops` before it is relayed.
class LayerRelay final : public GradReady {
 public:
  LayerRelay(const GradientHooks& hooks, ElementOps& ops, int rank, bool tally)
      : hooks_(hooks), ops_(ops), tally_(tally) {
    event_.rank = rank;
  }
  // Before micro-batch k's backward into `grad` (Accumulation::target); `final`: the step's sum, last micro-batch.
  void begin(int64_t k, float* grad, bool final) {
    event_.micro_batch = k;
    event_.grad = grad;
    event_.final = final;
  }
  void layer_ready(size_t begin, size_t end) override {
    event_.begin = begin;
    event_.end = end;
    if (tally_ && event_.final) {
      ops_.tally_nonfinite(event_.rank, event_.grad + begin, end - begin);
      tallied_ += end - begin;
    }
    hooks_.layer_ready(event_);
  }
  // Elements of the step's sum tallied so far this step; take_tallied returns them and starts the next step at 0.
  size_t take_tallied() { return std::exchange(tallied_, 0); }

 private:
  const GradientHooks& hooks_;
  ElementOps& ops_;
  bool tally_;
  size_t tallied_ = 0;
  LayerReady event_;
};

// A run's modeled steps from a strategy that models its own clock (free-running: ranks may have different counts);
// nothing when `rank_steps` is empty (the lockstep modeled clock has them).
void adopt_modeled_rank_steps(const std::vector<std::vector<ModeledStep>>& rank_steps, RunResult& res) {
  if (rank_steps.empty()) return;
  res.modeled_steps.clear();
  res.modeled_exposed_s.clear();
  res.modeled_overlapped_s.clear();
  for (const auto& steps : rank_steps) {
    res.modeled_steps.emplace_back();
    res.modeled_exposed_s.emplace_back();
    res.modeled_overlapped_s.emplace_back();
    for (const ModeledStep& m : steps) {
      res.modeled_steps.back().push_back(m.times);
      res.modeled_exposed_s.back().push_back(m.exposed_s);
      res.modeled_overlapped_s.back().push_back(m.overlapped_s);
    }
  }
}

// One host run: what its rank threads share, built once before they start (model, data, communicator, cost model,
// strategy, step control, input pipeline, modeled clock, monitor), the rank loop, and the report's last fields.
class HostRun {
 public:
  // `backend`: the memory, model and communicator of the run (outlives it); its model is `model`.
  HostRun(const RunPlan& plan, const RunHooks& hooks, RunResult& res, double wall0, Backend& backend,
          std::unique_ptr<Model> model, std::unique_ptr<Dataset> data);
  // Runs every rank's loop on the world, then fills the report's fields of the whole run.
  void run();

 private:
  // One rank's loop state (its own thread's).
  struct RankState {
    RankState(HostRun& run, int rank);
    PhaseClock clock;
    int64_t ws_capacity;
    std::unique_ptr<Workspace> ws;
    LayerRelay relay;  // ws->grad_ready when the run has gradient subscribers
    Batch batch;
    FloatBuffer grad;  // the step's gradient sum, in the run's memory
    Accumulation accumulation;
    PrecisionPolicy precision;
    Loader loader;
    DataCounts micro_counts;
    double readers;  // ranks of this rank's node reading the storage together
    double window;   // requests the loader may keep in flight: the samples of the micro-batches its queue holds
  };
  void init_data_result();
  void init_params();
  // The communicator of the run's ranks: across processes under mpirun, else the backend's.
  std::unique_ptr<Communicator> make_comm(Backend& backend);
  // Across processes: the per-rank results of the other processes' ranks into process 0's (rank_gather.h).
  void gather_ranks();
  void rank_main(int rank);
  // The step's K micro-batches: data, forward, backward (the accumulation rule), precision counters, modeled cost.
  void micro_batches(RankState& rs, int rank, const float* params, StepCost& cost, StepTally& tally,
                     DataStepRecord& data_step);
  // A workspace for micro-batches of up to `samples`, its backward events relayed when anyone subscribed.
  std::unique_ptr<Workspace> make_workspace(RankState& rs, int64_t samples) const;
  // The end of micro-batch k to the gradient subscribers (every micro-batch, with or without samples).
  void end_micro_batch(RankState& rs, int rank, int64_t k);
  // The inf/NaN values of the rank's step gradient after its micro-batches (the layers' tally where buckets start
  // asynchronously, always taken so the next step starts at 0; else one count, only when `wanted`: 0 otherwise).
  size_t gradient_nonfinite(RankState& rs, int rank, bool wanted);
  // cluster.stragglers.inject (the cuda backend's runs; validation refuses it elsewhere): after its micro-batches the
  // rank sleeps (f - 1) x its measured forward + backward of the step (f: its straggler factor of the step, the
  // modeled clock's) and counts the sleep as backward, before the strategy communicates (allreduce then starts no
  // bucket from the layer events), so the other ranks wait for it in the collectives.
  // Factors <= 1 cannot speed a GPU up and add nothing.
  void inject_straggler(RankState& rs, int rank, int64_t step);
  // The loader's work behind the step's batches on the modeled clock (storage reads and peer transfers).
  double fetch_modeled_s(const RankState& rs, const DataCounts& dc) const;
  void finish();

  const RunPlan& plan_;
  const RunConfig& config_;
  const RunHooks& hooks_;
  RunResult& res_;
  double wall0_;
  const int ranks_;
  // mpirun: this process runs ranks first_rank_ .. first_rank_ + local_ranks_ - 1 (all of them in one process).
  ProcessGroup& group_;
  const int local_ranks_;
  const int first_rank_;
  const int64_t K_;
  // The memory of parameters, gradients and optimizer state (backend.h): host RAM, or a device's.
  ElementOps& ops_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Dataset> data_;
  std::unique_ptr<Communicator> comm_;
  CostModel cost_model_;
  const size_t n_;
  const int64_t total_;
  // Gradient-ready subscriptions (the strategy's, made in its constructor, and a test's) and the strategy's claims.
  GradientHooks gradients_;
  StrategyTraits traits_;
  std::unique_ptr<SyncStrategy> strategy_;
  const bool each_micro_;  // gradients_.each_micro_batch(): micro-batch gradients kept apart
  // Buckets start asynchronously from the gradient-ready events: each final layer is tallied before it is relayed.
  const bool tally_layers_;
  // Input pipeline: per rank a loader thread (loader.h) through the node cache (data_cache.h), priced on the modeled
  // clock by the storage profile and the prefetch recurrence (storage_model.h).
  const StorageProfile storage_;
  const int ranks_per_node_;
  std::unique_ptr<DataCache> cache_;
  DataResult data_result_;
  std::vector<float> final_scales_;  // [rank] every rank's loss scale after the run (gather_ranks)
  // Modeled clock (lockstep_clock.h): each rank records its step into slot [step % 3][rank]; in lockstep runs rank 0
  // models step t - 1 after its own step t has ended, the last step after the run (free-running strategies model
  // their steps themselves).
  LockstepModeledClock modeled_;
  // Precision bookkeeping per rank (each rank writes only its own entry). Under a reduced format or a loss scaler
  // the local gradient is scanned for the first non-finite step; a non-finite gradient is then not a divergence.
  const PrecisionPolicy base_policy_;
  const bool check_nonfinite_;
  std::vector<PrecisionCounters> rank_counters_;
  std::vector<std::optional<int64_t>> first_nonfinite_;
  // The end of every step (series, evaluation, stop, outcome). Evaluation is serialized (between barriers, or
  // inside the strategy's turns).
  RunMonitor monitor_;
  std::unique_ptr<Workspace> eval_ws_;
  Batch eval_chunk_;
  std::unique_ptr<StepControl> control_;
  double train_start_s_ = 0.0;
};

HostRun::HostRun(const RunPlan& plan, const RunHooks& hooks, RunResult& res, double wall0, Backend& backend,
                 std::unique_ptr<Model> model, std::unique_ptr<Dataset> data)
    : plan_(plan),
      config_(plan.config),
      hooks_(hooks),
      res_(res),
      wall0_(wall0),
      ranks_(plan.shape.ranks),
      group_(process_group()),
      local_ranks_(ranks_ / group_.size()),
      first_rank_(group_.rank() * local_ranks_),
      K_(plan.shape.micro_batches),
      ops_(backend.memory()),
      model_(std::move(model)),
      data_(std::move(data)),
      comm_(make_comm(backend)),
      cost_model_(config_, *model_),
      n_(model_->num_params()),
      total_(planned_steps(config_, data_->steps_per_epoch())),
      strategy_([&] {
        res_.hardware = cost_model_.hardware().name;
        StrategySetup setup{config_, *model_, *comm_, ranks_, &cost_model_};
        setup.on_read = hooks.on_read ? &hooks.on_read : nullptr;
        setup.total_steps = total_;
        setup.gradients = &gradients_;
        setup.traits = &traits_;
        setup.ops = ops_.host() ? nullptr : &ops_;
        std::unique_ptr<SyncStrategy> strategy = plan_.strategy->make(setup);  // the plan's registry line
        if (hooks.subscribe_gradients) hooks.subscribe_gradients(gradients_);
        return strategy;
      }()),
      each_micro_(gradients_.each_micro_batch()),
      tally_layers_(comm_->starts_asynchronously() && !gradients_.empty()),
      storage_(load_storage_profile(config_.data.storage)),
      ranks_per_node_(std::max(1, std::min(ranks_, cost_model_.hardware().gpus_per_node))),
      modeled_(cost_model_, config_, res_),
      base_policy_(precision_policy(config_.precision)),
      check_nonfinite_(base_policy_.emulated() || plan.scaler_active()),
      rank_counters_(static_cast<size_t>(ranks_)),
      first_nonfinite_(static_cast<size_t>(ranks_)),
      monitor_(config_, hooks, res_, total_, wall0) {
  if (data_->train_size() > 0 && cache_capacity_samples(config_, *data_) > 0)
    cache_ = std::make_unique<DataCache>(*data_, config_, ranks_per_node_);
  init_data_result();
  modeled_.spread(group_, first_rank_, local_ranks_);
  res_.steps_planned = total_;
  res_.num_params = static_cast<int64_t>(n_);
  res_.classification = model_->classification();
  res_.replicas_identical = traits_.replicas_identical;
  res_.steps.assign(static_cast<size_t>(ranks_), {});
  init_params();
  monitor_.set_evaluator([this](const float* p) {
    if (!eval_ws_) eval_ws_ = model_->make_workspace(kEvalChunkRows);
    return evaluate(*model_, *data_, p, *eval_ws_, eval_chunk_);
  });
  ControlSetup control;
  control.total_steps = total_;
  control.ranks = ranks_;
  control.lockstep = [this] {
    return std::make_unique<LockstepControl>(LockstepControl::Setup{
        *comm_, monitor_, modeled_, *strategy_, res_, ranks_, n_, total_, config_.report.trace,
        plan_.scaler_active(), first_rank_, &ops_});
  };
  // A free-running strategy's progress points, from inside its serialized section in modeled-time order. Measured
  // training time leaves the evaluations out, as lockstep runs' does.
  control.progress = [this](const ProgressPoint& p) {
    const double measured_s = now_s() - train_start_s_ - monitor_.eval_spent_s();
    return monitor_.progress(p, ops_.count_nonfinite(0, p.params, n_), plan_.scaler_active(), measured_s);
  };
  control_ = strategy_->make_control(control);
}

void HostRun::init_data_result() {
  data_result_.storage = storage_.name;
  data_result_.prefetch = config_.data.prefetch;
  data_result_.cache_policy = cache_ ? config_.data.cache.policy : "none";
  data_result_.cache_capacity_samples = cache_ ? cache_->capacity_samples() : 0;
  data_result_.ranks_per_node = ranks_per_node_;
  data_result_.steps_per_epoch = data_->steps_per_epoch();
  data_result_.max_queue_depth.assign(static_cast<size_t>(ranks_), 0);
  data_result_.steps.assign(static_cast<size_t>(ranks_), {});
}

std::unique_ptr<Communicator> HostRun::make_comm(Backend& backend) {
  if (group_.size() > 1) {
    GS_EXPECT(ops_.host(), "across processes (mpirun) the run's buffers are host memory");
    return make_process_communicator(local_ranks_, first_rank_, group_);
  }
  return backend.make_communicator(ranks_);
}

void HostRun::gather_ranks() {
  gather_rank_rows(group_, res_.steps, first_rank_, local_ranks_);
  gather_rank_rows(group_, data_result_.steps, first_rank_, local_ranks_);
  gather_rank_values(group_, data_result_.max_queue_depth, first_rank_, local_ranks_);
  gather_rank_values(group_, rank_counters_, first_rank_, local_ranks_);
  gather_rank_values(group_, first_nonfinite_, first_rank_, local_ranks_);
  strategy_->gather_ranks(group_, first_rank_, local_ranks_);
  // Every rank's loss scale after the run (the count of exhausted scalers): the other processes' ranks' from them.
  final_scales_.assign(static_cast<size_t>(ranks_), 1.0f);
  for (int r = first_rank_; r < first_rank_ + local_ranks_; ++r)
    final_scales_[static_cast<size_t>(r)] = strategy_->loss_scale(r);
  gather_rank_values(group_, final_scales_, first_rank_, local_ranks_);
}

// Initial parameters: identical on every rank (written once per distinct buffer).
void HostRun::init_params() {
  std::vector<float> init(n_);
  model_->init_params(init.data(), static_cast<uint64_t>(config_.training.seed));
  // fp16_pure holds the weights in fp16 from the start (model.half()).
  if (plan_.precision == PrecisionMode::kFp16Pure) round_fp32_through_fp16(init.data(), init.data(), n_);
  for (int r = 0; r < ranks_; ++r) {
    float* p = strategy_->params(r);
    if (r == 0 || p != strategy_->params(0)) ops_.upload(r, p, init.data(), n_);
  }
  if (config_.report.trace) res_.trace_initial = init;
  const std::string& save = config_.report.save_weights;
  if (save == "initial" || save == "both") res_.initial_params = init;
}

HostRun::RankState::RankState(HostRun& run, int rank)
    : ws_capacity(std::max<int64_t>(run.plan_.shape.batch_per_rank, 1)),
      relay(run.gradients_, run.ops_, rank, run.tally_layers_),
      grad(run.ops_.allocate(rank, run.n_)),
      accumulation(run.plan_.pitfall, run.ops_, rank, run.n_, run.each_micro_),
      precision(run.base_policy_),
      loader(*run.data_, run.config_, run.cache_.get(), rank, run.control_->loader_steps(), run.config_.data.prefetch),
      readers(static_cast<double>(
          std::min(run.ranks_per_node_, run.ranks_ - rank / run.ranks_per_node_ * run.ranks_per_node_))),
      window(static_cast<double>(std::max<int64_t>(1, run.config_.data.prefetch) * run.plan_.shape.batch_per_rank)) {
  clock.reserve(static_cast<size_t>(std::min<int64_t>(run.total_, 1 << 16)));
  ws = run.make_workspace(*this, ws_capacity);
}

std::unique_ptr<Workspace> HostRun::make_workspace(RankState& rs, int64_t samples) const {
  std::unique_ptr<Workspace> ws = model_->make_workspace(samples);
  if (!gradients_.empty()) ws->grad_ready = &rs.relay;
  return ws;
}

void HostRun::end_micro_batch(RankState& rs, int rank, int64_t k) {
  if (gradients_.empty()) return;
  // The step's sum is final now; what its layers' events did not tally (a last micro-batch without samples, or
  // micro-batches kept apart) is counted before a subscriber may start reducing it.
  if (tally_layers_ && k + 1 == K_ && rs.relay.take_tallied() == 0) ops_.tally_nonfinite(rank, rs.grad.get(), n_);
  MicroBatchEnd e;
  e.rank = rank;
  e.micro_batch = k;
  e.last = k + 1 == K_;
  e.grad = each_micro_ ? rs.accumulation.micro() : nullptr;
  e.clock = &rs.clock;
  gradients_.micro_batch_end(e);
}

void HostRun::micro_batches(RankState& rs, int rank, const float* params, StepCost& cost, StepTally& tally,
                            DataStepRecord& data_step) {
  PrecisionCounters& counters = rank_counters_[static_cast<size_t>(rank)];
  for (int64_t k = 0; k < K_; ++k) {
    GS_NVTX_RANGE(kMicroStep);
    {
      PhaseTimer t(rs.clock, Phase::kData);  // the wait for the loader: data stall on the measured clock
      rs.loader.next(rs.batch, rs.micro_counts);
    }
    data_step.counts += rs.micro_counts;
    if (rs.batch.count == 0) {  // no backward; every rank still ends every micro-batch (subscribers' collectives pair)
      if (each_micro_) rs.accumulation.empty();
      end_micro_batch(rs, rank, k);
      continue;
    }
    if (rs.batch.count > rs.ws_capacity) {  // inline micro-batches may exceed b: grow to the largest seen
      rs.ws = make_workspace(rs, rs.batch.count);
      rs.ws_capacity = rs.batch.count;
    }
    {
      GS_NVTX_RANGE(kForward);
      TimedPhase t(ops_, rank, rs.clock, Phase::kForward);  // the memory's clock (a device's: events on its stream)
      tally.loss_sum += model_->forward(params, rs.batch, *rs.ws, rs.precision);
    }
    {
      GS_NVTX_RANGE(kBackward);
      TimedPhase t(ops_, rank, rs.clock, Phase::kBackward);
      rs.relay.begin(k, rs.accumulation.target(rs.grad.get()), k + 1 == K_ && rs.accumulation.into_sum());
      rs.accumulation.backward(*model_, params, rs.batch, *rs.ws, rs.precision, rs.grad.get(), n_,
                               tally.grad_samples);
    }
    end_micro_batch(rs, rank, k);
    counters.grad_values += rs.ws->precision.grad_values;
    counters.grad_underflow += rs.ws->precision.grad_underflow;
    counters.grad_nonfinite += rs.ws->precision.grad_nonfinite;
    rs.ws->precision = {};
    tally.samples += static_cast<double>(rs.batch.count);
    cost_model_.add_micro_batch(cost, rs.batch.count, k + 1 == K_);
    price_precision_micro_batch(cost, rs.precision.mode, static_cast<double>(n_));  // format casts
  }
}

void HostRun::inject_straggler(RankState& rs, int rank, int64_t step) {
  ops_.settle(rank, rs.clock);  // a device's forward and backward times reach the clock
  const double f = straggler_factor(config_.cluster.stragglers, static_cast<uint64_t>(config_.training.seed), step,
                                    rank);
  const StepTimes& now = rs.clock.current();
  const double compute_s =
      now.phase_s[static_cast<size_t>(Phase::kForward)] + now.phase_s[static_cast<size_t>(Phase::kBackward)];
  if (f <= 1.0 || compute_s <= 0.0) return;
  const double t0 = now_s();
  std::this_thread::sleep_for(std::chrono::duration<double>((f - 1.0) * compute_s));
  rs.clock.add(Phase::kBackward, now_s() - t0);
}

size_t HostRun::gradient_nonfinite(RankState& rs, int rank, bool wanted) {
  if (!tally_layers_) return wanted ? ops_.count_nonfinite(rank, rs.grad.get(), n_) : 0;
  rs.relay.take_tallied();
  return ops_.take_nonfinite(rank);
}

double HostRun::fetch_modeled_s(const RankState& rs, const DataCounts& dc) const {
  double fetch = storage_read_s(storage_, static_cast<double>(dc.storage_samples), dc.storage_bytes, rs.readers,
                                rs.window);
  if (dc.peer_transfers > 0)  // one transfer per (micro-batch, peer), priced as the fabric's p2p cost
    fetch += static_cast<double>(dc.peer_transfers) *
             cost_model_.collectives().p2p_s(dc.peer_bytes / static_cast<double>(dc.peer_transfers));
  return fetch;
}

void HostRun::rank_main(int rank) {
  GS_NVTX_RANGE(kRun);  // this rank's part of the run
  const size_t ri = static_cast<size_t>(rank);
  RankState rs(*this, rank);
  // Declared after the rank's buffers, so destroyed before them: a rank that throws aborts the communicators first.
  // On a device, freeing a buffer waits for the device, and a collective this rank enqueued may wait there for peers
  // that have gone (ncclCommAbort ends it); World's own abort comes only after the unwinding.
  struct AbortOnThrow {
    HostRun& run;
    int unwinding = std::uncaught_exceptions();
    ~AbortOnThrow() {
      if (std::uncaught_exceptions() <= unwinding) return;
      run.comm_->abort();
      run.control_->abort();
    }
  } abort_on_throw{*this};
  std::vector<DataStepRecord>& data_steps = data_result_.steps[ri];
  data_steps.reserve(static_cast<size_t>(std::min<int64_t>(total_, 1 << 16)));
  GS_NVTX_RANGE(kMeasure);  // every step is measured (the range ends with the loop: nothing timed follows)
  for (int64_t step = 0; control_->runs(rank, step); ++step) {
    GS_NVTX_RANGE(kStep);
    rs.clock.begin_step();
    StepCost& cost = modeled_.cost(step, rank);
    cost.clear();
    ops_.zero(rank, rs.grad.get(), n_);
    control_->begin_step(rank, step);
    // The step's control values: the non-finite parameters entering it and this rank's scaler after the last step;
    // below its samples, loss and non-finite gradient entries.
    const float* params = strategy_->params(rank);
    rs.precision.loss_scale = strategy_->loss_scale(rank);
    StepTally tally;
    tally.bad_params = static_cast<double>(ops_.count_nonfinite(rank, params, n_));
    tally.scaler_exhausted = loss_scale_exhausted(plan_.loss_scale, rs.precision.loss_scale) ? 1.0 : 0.0;
    DataStepRecord data_step;
    micro_batches(rs, rank, params, cost, tally, data_step);
    if (config_.cluster.stragglers.inject) inject_straggler(rs, rank, step);
    data_step.fetch_modeled_s = fetch_modeled_s(rs, data_step.counts);
    modeled_.set_fetch_s(step, rank, data_step.fetch_modeled_s);
    data_steps.push_back(data_step);
    // Counted where it decides something: the divergence check, or the first non-finite step not yet seen.
    const size_t grad_nonfinite = gradient_nonfinite(rs, rank, !check_nonfinite_ || !first_nonfinite_[ri]);
    if (check_nonfinite_ && !first_nonfinite_[ri] && grad_nonfinite > 0) first_nonfinite_[ri] = step + 1;
    // Under loss scaling a non-finite gradient is the scaler's to handle (it skips the step and lowers the scale),
    // not a divergence.
    tally.bad_grad = check_nonfinite_ ? 0.0 : static_cast<double>(grad_nonfinite);
    tally.grad_samples = rs.accumulation.divisor(tally.grad_samples, K_);
    const StepVerdict verdict = control_->combine(rank, step, tally, rs.clock);
    if (verdict.apply) {
      StepInput in;
      in.rank = rank;
      in.step = step;
      in.grad = rs.grad.get();
      in.local_samples = tally.grad_samples;
      in.global_samples = verdict.global_samples;
      in.lr = learning_rate(config_.training.schedule, config_.training.optimizer.lr, std::min(step, total_ - 1),
                            total_);
      in.local_loss_sum = tally.loss_sum;
      in.loss_nonfinite = verdict.loss_nonfinite;
      in.total_steps = total_;
      in.clock = &rs.clock;
      in.cost = &cost;
      strategy_->step(in);
    } else {
      comm_->all_reduce_wait(rank);  // buckets the layer events started (every rank's verdict is the same)
    }
    ops_.settle(rank, rs.clock);  // a device memory's phase times reach the clock (host RAM: nothing pending)
    rs.clock.end_step();
    if (!control_->end_step(rank, step, verdict, rs.clock)) break;
  }
  res_.steps[ri] = rs.clock.steps();
  data_result_.max_queue_depth[ri] = static_cast<int64_t>(rs.loader.max_queue_depth());
}

void HostRun::run() {
  World world(local_ranks_, first_rank_);
  train_start_s_ = now_s();
  world.run([this](int rank) { rank_main(rank); },
            [this] {
              comm_->abort();
              control_->abort();
            });
  finish();
}

void HostRun::finish() {
  control_->finish();
  gather_ranks();
  const StrategyReport report = strategy_->report(ReportContext{res_.steps_completed});
  adopt_modeled_rank_steps(report.modeled_rank_steps, res_);
  res_.staleness = report.staleness;
  // The strategy's claim of identical replicas, checked against the trace when there is one.
  for (const auto& snap : res_.trace)
    for (size_t r = 1; r < snap.size() && res_.replicas_identical; ++r)
      res_.replicas_identical = std::memcmp(snap[0].data(), snap[r].data(), n_ * sizeof(float)) == 0;
  res_.precision = precision_result(config_, report.precision, rank_counters_, first_nonfinite_);
  res_.data = std::move(data_result_);
  res_.compression = report.compression;
  // The last update can overflow after the last loss was computed; the last skip can exhaust a scaler.
  monitor_.final_parameters_checked(ops_.count_nonfinite(0, strategy_->eval_params(), n_));
  if (const std::string& save = config_.report.save_weights; save == "final" || save == "both") {
    res_.final_params.resize(n_);
    ops_.download(0, res_.final_params.data(), strategy_->eval_params(), n_);
  }
  if (res_.is(Disposition::kPassed))
    if (const int gave_up = exhausted_scalers(final_scales_, plan_.loss_scale); gave_up > 0)
      monitor_.diverged(res_.steps_completed, NonFinite::kLossScale, std::nan(""),
                        fmt::format("{} of {} scalers", gave_up, count_text(ranks_, "rank's", "ranks'")));
}

// training.mode "timing": no arithmetic, no parameters, no data. Every rank's step is the same schedule (the model's
// declared layers for K micro-batches of data.batch_per_rank samples, then what the strategy prices), recorded once;
// the modeled clock adds stragglers and the synchronous wait per step. One thread: nothing here needs the others.
void run_timing_only(const RunPlan& plan, const RunHooks& hooks, RunResult& res, double wall0_s) {
  const RunConfig& config = plan.config;
  const int ranks = plan.shape.ranks;
  const int64_t K = plan.shape.micro_batches;
  const int64_t b = plan.shape.batch_per_rank;
  std::unique_ptr<Model> model = make_model(config);
  CostModel cost_model(config, *model);
  res.hardware = cost_model.hardware().name;
  std::unique_ptr<Communicator> comm = make_host_communicator(ranks);
  const int64_t total = config.training.steps;
  StrategyTraits traits;
  StrategySetup setup{config, *model, *comm, ranks, &cost_model, true};
  setup.total_steps = total;
  setup.traits = &traits;
  std::unique_ptr<SyncStrategy> strategy = plan.strategy->make(setup);  // the plan's registry line
  res.steps_planned = total;
  res.num_params = static_cast<int64_t>(model->num_params());
  res.classification = model->classification();
  res.replicas_identical = traits.replicas_identical;
  StepCost cost = cost_model.make_step_cost();
  for (int64_t k = 0; k < K; ++k) {
    cost_model.add_micro_batch(cost, b, k + 1 == K);
    price_precision_micro_batch(cost, plan.precision, static_cast<double>(res.num_params));  // format casts
  }
  StepInput in;
  in.local_samples = static_cast<double>(plan.shape.samples_per_rank());
  in.global_samples = static_cast<double>(plan.shape.global_batch);
  in.lr = config.training.optimizer.lr;
  // One priced step per PriceKey of the strategy (most strategies: one for the whole run and every rank; the first
  // rank of a key prices it for all).
  std::map<PriceKey, StepCost> priced;
  auto priced_step = [&](int64_t step, int rank) -> const StepCost& {
    in.step = step;
    in.rank = rank;
    in.cost = nullptr;
    const PriceKey key = strategy->price(in);
    auto it = priced.find(key);
    if (it != priced.end()) return it->second;
    StepCost c = cost;
    in.cost = &c;
    strategy->price(in);
    return priced.emplace(key, std::move(c)).first->second;
  };
  res.modeled_chains = priced_step(0, 0).chains;
  std::vector<const StepCost*> recs(static_cast<size_t>(ranks), &priced_step(0, 0));
  res.modeled_steps.assign(static_cast<size_t>(ranks), {});
  res.modeled_exposed_s.assign(static_cast<size_t>(ranks), {});
  res.modeled_overlapped_s.assign(static_cast<size_t>(ranks), {});
  for (auto* v : {&res.modeled_exposed_s, &res.modeled_overlapped_s})
    for (auto& r : *v) r.reserve(static_cast<size_t>(total));
  for (auto& r : res.modeled_steps) r.reserve(static_cast<size_t>(total));
  res.series.reserve(static_cast<size_t>(total));
  double modeled_total_s = 0.0;
  RunMonitor monitor(config, hooks, res, total, wall0_s);
  std::vector<double> rank_clock_s(static_cast<size_t>(ranks), 0.0);
  GS_NVTX_RANGE(kMeasure);
  for (int64_t step = 0; step < total; ++step) {
    GS_NVTX_RANGE(kStep);
    for (int r = 0; r < ranks; ++r) recs[static_cast<size_t>(r)] = &priced_step(step, r);
    std::vector<ModeledStep> m = cost_model.model_step(recs, step);
    carry_rank_clocks(m, rank_clock_s);
    if (step == 0 && !m.empty()) res.modeled_chains = with_modeled_slots(res.modeled_chains, m[0].unshard_slots);
    if (cost_model.record_layouts()) res.modeled_layouts.resize(m.size());
    for (size_t r = 0; r < m.size(); ++r) {
      res.modeled_steps[r].push_back(m[r].times);
      res.modeled_exposed_s[r].push_back(m[r].exposed_s);
      res.modeled_overlapped_s[r].push_back(m[r].overlapped_s);
      if (m[r].layout) res.modeled_layouts[r].push_back(std::move(*m[r].layout));
    }
    modeled_total_s += m[0].times.step_s;
    const double nothing_trained = std::nan("");
    monitor.record(step + 1, 0.0, nothing_trained, in.global_samples, modeled_total_s);
    monitor.step_done(step + 1, nothing_trained);
    if (monitor.stop_after(step + 1, monitor.read_stop())) break;
  }
  res.compression = strategy->report(ReportContext{res.steps_completed}).compression;
}

// The run of every backend: the host's, the cuda backend's (every buffer in GPU memory, cuda_backend.h), or a test's
// (RunHooks::make_backend).
void run_host(const RunPlan& plan, const RunHooks& hooks, RunResult& res, double wall0) {
  const RunConfig& config = plan.config;
  std::unique_ptr<Backend> backend = hooks.make_backend ? hooks.make_backend(config)
                                     : plan.on_device() ? make_cuda_backend(config)
                                                        : make_host_backend();
  if (const std::optional<std::string> issue = backend->issue(config, host_memory_reason(config)))
    throw Error(*issue + " (this run's backend keeps its buffers in device memory)");
  res.ranks_one_per_gpu = backend->one_rank_per_device();
  std::unique_ptr<Model> model = backend->make_model(config);
  std::unique_ptr<Dataset> data = hooks.make_dataset ? hooks.make_dataset(config) : make_dataset(config);
  std::vector<Device> devices = make_devices(config);
  res.backend = backend_name(devices.front().backend);
  if (plan.precision == PrecisionMode::kTf32 && devices.front().backend == BackendKind::kHost) {
    // tf32 is tensor-core arithmetic (GEMM inputs rounded to 10 mantissa bits inside the unit); the host backend
    // does not emulate it, so the run is skipped and a sweep over modes goes on with the others.
    res.set_disposition(Disposition::kSkipped,
                        "precision.mode tf32 runs on GPUs only (tensor-core arithmetic); this run's backend is host");
    return;
  }
  HostRun run(plan, hooks, res, wall0, *backend, std::move(model), std::move(data));
  run.run();
}

}  // namespace

namespace {

// Across processes (mpirun) no two ranks share a buffer (cluster.share_identical off: the same bits, RunConfig).
RunConfig for_this_job(const RunConfig& requested) {
  RunConfig c = requested;
  if (process_group().size() > 1) c.cluster.share_identical = false;
  return c;
}

}  // namespace

RunResult run_training(const RunConfig& requested, const RunHooks& hooks) {
  RunResult res;
  const std::optional<RunPlan> resolved = plan_run(for_this_job(requested), res);
  if (!resolved) return res;
  const RunPlan& plan = *resolved;
  if (process_group().size() > 1 && !plan.timing() && plan.backend.backend != BackendKind::kHost) {
    res.set_disposition(Disposition::kFailed, "cluster.backend: the run chose the " +
                                                  std::string(backend_name(plan.backend.backend)) +
                                                  " backend; across processes (mpirun) only the host backend runs "
                                                  "(set cluster.backend \"host\")");
    return res;
  }
  GS_NVTX_RANGE(kRun);  // the calling thread's part of the run (setup, rank threads, teardown)
  const double wall0 = now_s();
  try {
    if (plan.timing()) {
      run_timing_only(plan, hooks, res, wall0);
    } else {
      run_host(plan, hooks, res, wall0);
    }
  } catch (const std::bad_alloc&) {
    res.set_disposition(Disposition::kFailed, fmt::format("out of memory ({} per replica, {})",
                                                          count_text(res.num_params, "parameter"),
                                                          count_text(plan.shape.ranks, "rank")));
  } catch (const std::exception& e) {
    res.set_disposition(Disposition::kFailed, e.what());
  }
  res.wall_s = now_s() - wall0;
  return res;
}

}  // namespace gs
