// The rank loop: every rank thread runs rank_main for the whole run. Per optimizer step: K micro-batches of
// data -> forward -> backward into the local gradient SUM; an all-reduce of (samples, loss) gives S and the train
// loss; the sync strategy turns the local gradient into the next parameters. Evaluation runs between steps on the
// parameters the strategy names. Nothing here knows which strategy runs. training.pitfall zero_grad_in_loop and
// mean_of_means change what the micro-batch loop accumulates and the divisor S (docs/pitfalls.md).
// Free-running strategies (SyncStrategy::lockstep() false: the parameter server) change three things, all marked
// "free-running" below: no per-step control all-reduce (ranks do not step together), each rank's loop ends when the
// strategy says so (rank_done), and the series comes from the strategy's progress points (every `ranks` applied
// gradients, in modeled-time order) instead of rank 0's steps.
#include "sim/runtime/rank_loop.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>
#include <memory>

#include <fmt/format.h>

#include "kernels/convert.h"
#include "kernels/nvtx.h"
#include "sim/comm/communicator.h"
#include "sim/core/error.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/storage_model.h"
#include "sim/model/data_cache.h"
#include "sim/model/dataset.h"
#include "sim/model/loader.h"
#include "sim/model/model.h"
#include "sim/optim/loss_scaler.h"
#include "sim/optim/optimizer.h"
#include "sim/runtime/cuda_model.h"
#include "sim/runtime/device.h"
#include "sim/runtime/lockstep_clock.h"
#include "sim/runtime/run_monitor.h"
#include "sim/runtime/run_plan.h"
#include "sim/runtime/world.h"
#include "sim/strategy/strategy.h"

namespace gs {
namespace {

// The per-step control values all-reduced by every rank (see rank_main).
// kCtlGradSamples is the divisor behind the gradient: the samples, except under training.pitfall zero_grad_in_loop
// (the last micro-batch's) and mean_of_means (K per rank, each micro-batch pre-divided by its size).
// kCtlScalerExhausted counts the ranks whose loss scaler cannot recover after the previous step (LossScaler::exhausted).
enum : size_t {
  kCtlSamples, kCtlLossSum, kCtlStop, kCtlTimeout, kCtlBadParams, kCtlBadGrad, kCtlGradSamples, kCtlScalerExhausted,
  kControlCount
};

// Ranks (of `ranks`) whose loss scaler cannot recover (LossScaler::exhausted) after the run's last step.
int exhausted_scalers(const SyncStrategy& strategy, int ranks) {
  int count = 0;
  for (int r = 0; r < ranks; ++r) {
    const PrecisionStep* ps = strategy.precision_step(r);
    count += ps != nullptr && ps->scaler().exhausted() ? 1 : 0;
  }
  return count;
}

// Number of non-finite values in x[0..n) (divergence checks; one pass, no branches in the loop).
size_t count_non_finite(const float* x, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += !std::isfinite(x[i]);
  return bad;
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

// The report's precision object: rank 0's scaler (under all-reduce every rank's is the same), counts over all ranks.
PrecisionResult precision_result(const RunConfig& config, const SyncStrategy& strategy,
                                 const std::vector<PrecisionCounters>& counters,
                                 const std::vector<std::optional<int64_t>>& first_nonfinite) {
  PrecisionResult p;
  p.mode = config.precision.mode;
  const LossScalerSettings settings = loss_scaler_settings(config.precision);
  p.loss_scale = settings.kind == LossScaleKind::kDynamic  ? "dynamic"
                 : settings.kind == LossScaleKind::kStatic ? "static"
                                                           : "none";
  if (const PrecisionStep* ps = strategy.precision_step(0)) {
    p.loss_scale_trajectory = ps->scaler().trajectory();
    p.final_loss_scale = ps->scaler().scale();
    p.skipped_steps = ps->scaler().skipped_step_list();
    p.skipped_nonfinite_loss = ps->scaler().skipped_for_loss();
    p.skipped_nonfinite_gradient = ps->scaler().skipped_for_gradient();
    p.averaged_grad_nonfinite = ps->averaged_nonfinite_values();
    p.first_nonfinite_averaged_step = ps->first_nonfinite_averaged_step();
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

}  // namespace

int64_t planned_steps(const RunConfig& config, int64_t steps_per_epoch) {
  if (config.training.epochs <= 0) return config.training.steps;
  GS_EXPECT(steps_per_epoch > 0, fmt::format("training.epochs: the data has no epochs or fewer samples than one "
                                             "global batch ({} ranks x {} micro-batches x {} samples)",
                                             config.cluster.ranks, config.training.accumulation_steps,
                                             config.data.batch_per_rank));
  return std::max<int64_t>(1, static_cast<int64_t>(std::floor(config.training.epochs *
                                                              static_cast<double>(steps_per_epoch))));
}

namespace {

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
  StrategySetup setup{config, *model, *comm, ranks, &cost_model, true};
  std::unique_ptr<SyncStrategy> strategy = make_strategy(setup);
  const int64_t total = config.training.steps;
  res.steps_planned = total;
  res.num_params = static_cast<int64_t>(model->num_params());
  res.classification = model->classification();
  res.replicas_identical = strategy->replicas_identical_in(total);
  StepCost cost = cost_model.make_step_cost();
  for (int64_t k = 0; k < K; ++k) {
    cost_model.add_micro_batch(cost, b, k + 1 == K);
    price_precision_micro_batch(cost, plan.precision, static_cast<double>(res.num_params));  // format casts
  }
  StepInput in;
  in.local_samples = static_cast<double>(plan.shape.samples_per_rank());
  in.global_samples = static_cast<double>(plan.shape.global_batch);
  in.lr = config.training.optimizer.lr;
  // One priced step per schedule key of the strategy (most strategies: one for the whole run), and per rank when the
  // strategy's price depends on the rank (else rank 0's step stands for every rank).
  const bool per_rank = strategy->price_depends_on_rank();
  std::map<std::pair<int64_t, int>, StepCost> priced;
  auto priced_step = [&](int64_t step, int rank) -> const StepCost& {
    const std::pair<int64_t, int> key{strategy->schedule_key(step), per_rank ? rank : 0};
    auto it = priced.find(key);
    if (it != priced.end()) return it->second;
    StepCost c = cost;
    in.step = step;
    in.rank = key.second;
    in.cost = &c;
    strategy->price_step(in);
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
    if (per_rank) {
      for (int r = 0; r < ranks; ++r) recs[static_cast<size_t>(r)] = &priced_step(step, r);
    } else {
      std::fill(recs.begin(), recs.end(), &priced_step(step, 0));
    }
    std::vector<ModeledStep> m = cost_model.model_step(recs, step);
    carry_rank_clocks(m, rank_clock_s);
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
}

}  // namespace

RunResult run_training(const RunConfig& requested, const RunHooks& hooks) {
  RunResult res;
  const std::optional<RunPlan> resolved = plan_run(requested, res);
  if (!resolved) return res;
  const RunPlan& plan = *resolved;
  const RunConfig& config = plan.config;
#if defined(GRADSWEEP_HAVE_CUDA)
  // The cuda backend's device path has its own loop (cuda_rank_loop.cpp); its staged path is the loop below with the
  // GPU model (cuda_model.h) in place of the host model; everything else below is the host backend's.
  if (plan.device_loop()) {
    RunResult r = run_training_cuda(config, hooks, plan.backend.reason);
    r.cuda_path = res.cuda_path;
    return r;
  }
#endif
  const bool staged = plan.staged();
  GS_NVTX_RANGE(kRun);  // the calling thread's part of the run (setup, rank threads, teardown)
  if (plan.timing()) {
    double t0 = now_s();
    try {
      run_timing_only(plan, hooks, res, t0);
    } catch (const std::exception& e) {
      res.set_disposition(Disposition::kFailed, e.what());
    }
    res.wall_s = now_s() - t0;
    return res;
  }
  double wall0 = now_s();
  const int ranks = static_cast<int>(config.cluster.ranks);
  const int64_t K = config.training.accumulation_steps;
  try {
    // The staged cuda path: the same loop and strategies with forward / backward / evaluation on the GPU.
    std::unique_ptr<Model> model = staged ? make_gpu_model(config) : make_model(config);
    std::unique_ptr<Dataset> data = hooks.make_dataset ? hooks.make_dataset(config) : make_dataset(config);
    std::vector<Device> devices = make_devices(config);
    res.backend = backend_name(devices.front().backend);
    if (plan.precision == PrecisionMode::kTf32 && devices.front().backend == Backend::kHost) {
      // tf32 is tensor-core arithmetic (GEMM inputs rounded to 10 mantissa bits inside the unit); the host backend
      // does not emulate it, so the run is skipped and a sweep over modes goes on with the others.
      res.set_disposition(Disposition::kSkipped,
                          "precision.mode tf32 runs on GPUs only (tensor-core arithmetic); this run's backend is host");
      res.wall_s = now_s() - wall0;
      return res;
    }
    // Staged: the strategies' buffers are host memory, so the communicator is the host's.
    std::unique_ptr<Communicator> comm = staged ? make_host_communicator(ranks) : make_communicator(devices);
    CostModel cost_model(config, *model);
    res.hardware = cost_model.hardware().name;
    StrategySetup setup{config, *model, *comm, ranks, &cost_model};
    setup.on_read = hooks.on_read ? &hooks.on_read : nullptr;
    std::unique_ptr<SyncStrategy> strategy = make_strategy(setup);
    const bool lockstep = strategy->lockstep();
    const size_t n = model->num_params();
    const int64_t total = planned_steps(config, data->steps_per_epoch());

    // Input pipeline: per rank a loader thread (loader.h) through the node cache (data_cache.h), priced on the
    // modeled clock by the storage profile and the prefetch recurrence (storage_model.h).
    const StorageProfile storage = load_storage_profile(config.data.storage);
    const int ranks_per_node = std::max(1, std::min(ranks, cost_model.hardware().gpus_per_node));
    std::unique_ptr<DataCache> cache;
    if (data->train_size() > 0 && cache_capacity_samples(config, *data) > 0)
      cache = std::make_unique<DataCache>(*data, config, ranks_per_node);
    DataResult data_result;
    data_result.storage = storage.name;
    data_result.prefetch = config.data.prefetch;
    data_result.cache_policy = cache ? config.data.cache.policy : "none";
    data_result.cache_capacity_samples = cache ? cache->capacity_samples() : 0;
    data_result.ranks_per_node = ranks_per_node;
    data_result.steps_per_epoch = data->steps_per_epoch();
    data_result.max_queue_depth.assign(static_cast<size_t>(ranks), 0);
    data_result.steps.assign(static_cast<size_t>(ranks), {});
    res.steps_planned = total;
    res.num_params = static_cast<int64_t>(n);
    res.classification = model->classification();
    res.replicas_identical = strategy->replicas_identical_in(total);
    res.steps.assign(static_cast<size_t>(ranks), {});
    const bool trace = config.report.trace;

    // Initial parameters: identical on every rank (written once per distinct buffer).
    std::vector<float> init(n);
    model->init_params(init.data(), static_cast<uint64_t>(config.training.seed));
    // fp16_pure holds the weights in fp16 from the start (model.half()).
    if (plan.precision == PrecisionMode::kFp16Pure) round_fp32_through_fp16(init.data(), init.data(), n);
    for (int r = 0; r < ranks; ++r) {
      float* p = strategy->params(r);
      if (r == 0 || p != strategy->params(0)) std::memcpy(p, init.data(), n * sizeof(float));
    }
    if (trace) res.trace_initial = init;
    const std::string& save = config.report.save_weights;
    if (save == "initial" || save == "both") res.initial_params = init;

    // Modeled clock (lockstep_clock.h): each rank records its step into slot [step % 3][rank]; rank 0 models step
    // t - 1 after its own step t has ended, the last step after the run. Free-running ranks use slot 0 (their
    // strategy models the steps).
    LockstepModeledClock modeled(cost_model, config, res);

    // Precision bookkeeping per rank (each rank writes only its own entry).
    const PrecisionPolicy base_policy = precision_policy(config.precision);
    // Under an active loss scaler a non-finite loss or gradient is the scaler's to handle (it skips the window and
    // backs off), not a divergence; the run diverges when the scaler cannot recover (LossScaler::exhausted).
    const bool scaler_active = plan.scaler_active();
    const bool check_nonfinite = base_policy.emulated() || scaler_active;
    std::vector<PrecisionCounters> rank_counters(static_cast<size_t>(ranks));
    std::vector<std::optional<int64_t>> first_nonfinite(static_cast<size_t>(ranks));
    // Known pitfalls (docs/pitfalls.md). zero_grad_in_loop: the article's loop zeroes the gradient before every
    // micro-batch's backward and steps every K-th, so the update is the last non-empty micro-batch's mean gradient
    // (divided by its own size, not by K b), at the full learning rate. mean_of_means: each micro-batch's mean
    // gradient divided by K, averaged over ranks: (1/(N K)) sum_r sum_k (1/b_rk) sum_{i in (r,k)} g_i.
    const bool zero_grad_in_loop = plan.pitfall == Pitfall::kZeroGradInLoop;
    const bool mean_of_means = plan.pitfall == Pitfall::kMeanOfMeans;

    World world(ranks);
    std::atomic<bool> stop_all{false};
    double trained_s = 0.0;  // rank 0's cumulative step time

    // The end of every step (series, evaluation, stop, outcome): rank 0's in lockstep runs, the strategy's progress
    // points in free-running ones. Evaluation is serialized (between barriers, or inside the strategy's turns).
    std::unique_ptr<Workspace> eval_ws;
    Batch eval_chunk;
    RunMonitor monitor(config, hooks, res, total, wall0);
    monitor.set_evaluator([&](const float* p) {
      if (!eval_ws) eval_ws = model->make_workspace(kEvalChunkRows);
      return evaluate(*model, *data, p, *eval_ws, eval_chunk);
    });
    const double train_start_s = now_s();
    if (!lockstep) {
      // Free-running: the strategy calls this inside its serialized section, in modeled-time order, once per `ranks`
      // applied gradients; false ends the run (divergence, stop request, time limit). Measured training time leaves
      // the evaluations out, as lockstep runs' does.
      strategy->set_progress_sink([&](const ProgressPoint& p) {
        monitor.record(p.step, now_s() - train_start_s - monitor.eval_spent_s(), p.train_loss, p.samples,
                       p.modeled_s);
        const size_t bad = count_non_finite(p.params, n);
        // Under a loss scaler a worker with a non-finite loss skipped its push (its scaler's to handle); the run
        // diverges when a worker's scaler cannot recover.
        const bool loss_bad = !scaler_active && !std::isfinite(p.train_loss);
        const bool diverged = bad > 0 || p.scaler_exhausted_rank >= 0 || loss_bad;
        if (!diverged && monitor.eval_due(p.step)) monitor.evaluate(p.params);
        monitor.step_done(p.step, p.train_loss);
        if (diverged) {
          if (bad == 0 && p.scaler_exhausted_rank >= 0)
            monitor.diverged(p.step, NonFinite::kLossScale, p.train_loss,
                             fmt::format("worker {}'s scaler", p.scaler_exhausted_rank));
          else
            monitor.diverged_at_progress(p.step, bad, p.train_loss);
          return false;
        }
        return !monitor.stop_after(p.step, monitor.read_stop());
      });
    }

    auto rank_main = [&](int rank) {
      GS_NVTX_RANGE(kRun);  // this rank's part of the run
      PhaseClock clock;
      clock.reserve(static_cast<size_t>(std::min<int64_t>(total, 1 << 16)));
      int64_t ws_capacity = std::max<int64_t>(config.data.batch_per_rank, 1);
      std::unique_ptr<Workspace> ws = model->make_workspace(ws_capacity);
      Batch batch;
      std::vector<float> grad(n);
      std::vector<float> micro_grad(mean_of_means ? n : 0);  // mean_of_means: one micro-batch's gradient sum
      PrecisionPolicy precision = base_policy;
      PrecisionCounters& counters = rank_counters[static_cast<size_t>(rank)];
      // A free-running rank may take more steps than `total` (fast workers push more; the run ends on the strategy's
      // budget of total x ranks pushes), so its loader may serve up to that many.
      const int64_t loader_steps = lockstep ? total : total * static_cast<int64_t>(ranks);
      Loader loader(*data, config, cache.get(), rank, loader_steps, config.data.prefetch);
      std::vector<DataStepRecord>& data_steps = data_result.steps[static_cast<size_t>(rank)];
      data_steps.reserve(static_cast<size_t>(std::min<int64_t>(total, 1 << 16)));
      const int node_first = rank / ranks_per_node * ranks_per_node;
      const double readers = static_cast<double>(std::min(ranks_per_node, ranks - node_first));
      // Requests the loader may keep in flight: the samples of the micro-batches its queue has room for.
      const double window = static_cast<double>(std::max<int64_t>(1, config.data.prefetch) * config.data.batch_per_rank);
      DataCounts micro_counts;
      GS_NVTX_RANGE(kMeasure);  // every step is measured (the range ends with the loop: nothing timed follows)
      // Free-running ranks run until the strategy ends their loop (a fast worker computes more than `total` steps).
      for (int64_t step = 0; !lockstep || step < total; ++step) {
        GS_NVTX_RANGE(kStep);
        clock.begin_step();
        StepCost& cost = modeled.cost(lockstep ? step : 0, rank);
        cost.clear();
        std::fill(grad.begin(), grad.end(), 0.0f);
        // Control values all-reduced once per step: local samples, local loss sum, rank 0's reading of the stop
        // request and of the run's time limit (so every rank makes the same stop decision at the same step), and
        // the non-finite parameters entering the step and gradient entries of this step (divergence).
        double ctl[kControlCount] = {};
        if (rank == 0) {
          const StopReading reading = monitor.read_stop();
          ctl[kCtlStop] = reading.stop ? 1.0 : 0.0;
          ctl[kCtlTimeout] = reading.timed_out ? 1.0 : 0.0;
        }
        const float* params = strategy->params(rank);
        precision.loss_scale = strategy->loss_scale(rank);
        ctl[kCtlBadParams] = static_cast<double>(count_non_finite(params, n));
        if (const PrecisionStep* ps = strategy->precision_step(rank))  // this rank's scaler after the last step
          ctl[kCtlScalerExhausted] = ps->scaler().exhausted() ? 1.0 : 0.0;
        DataStepRecord data_step;
        double grad_samples = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          GS_NVTX_RANGE(kMicroStep);
          {
            PhaseTimer t(clock, Phase::kData);  // the wait for the loader: data stall on the measured clock
            loader.next(batch, micro_counts);
          }
          data_step.counts += micro_counts;
          if (batch.count == 0) continue;
          if (batch.count > ws_capacity) {  // inline micro-batches may exceed b: grow to the largest seen
            ws = model->make_workspace(batch.count);
            ws_capacity = batch.count;
          }
          {
            GS_NVTX_RANGE(kForward);
            PhaseTimer t(clock, Phase::kForward);
            ctl[kCtlLossSum] += model->forward(params, batch, *ws, precision);
          }
          {
            GS_NVTX_RANGE(kBackward);
            PhaseTimer t(clock, Phase::kBackward);
            if (zero_grad_in_loop) {  // optimizer.zero_grad() inside the loop: earlier micro-batches are lost
              std::fill(grad.begin(), grad.end(), 0.0f);
              grad_samples = 0.0;
            }
            if (mean_of_means) {
              std::fill(micro_grad.begin(), micro_grad.end(), 0.0f);
              model->backward(params, batch, *ws, micro_grad.data(), precision);
              const float inv_count = 1.0f / static_cast<float>(batch.count);  // (loss_k / b_k) / K; K below
              for (size_t i = 0; i < n; ++i) grad[i] += inv_count * micro_grad[i];
            } else {
              model->backward(params, batch, *ws, grad.data(), precision);
            }
          }
          counters.grad_values += ws->precision.grad_values;
          counters.grad_underflow += ws->precision.grad_underflow;
          counters.grad_nonfinite += ws->precision.grad_nonfinite;
          ws->precision = {};
          ctl[kCtlSamples] += static_cast<double>(batch.count);
          grad_samples += static_cast<double>(batch.count);
          cost_model.add_micro_batch(cost, batch.count, k + 1 == K);
          price_precision_micro_batch(cost, precision.mode, static_cast<double>(n));  // format casts
        }
        {
          const DataCounts& dc = data_step.counts;
          double fetch = storage_read_s(storage, static_cast<double>(dc.storage_samples), dc.storage_bytes, readers,
                                        window);
          if (dc.peer_transfers > 0)  // one transfer per (micro-batch, peer), priced as the fabric's p2p cost
            fetch += static_cast<double>(dc.peer_transfers) *
                     cost_model.collectives().p2p_s(dc.peer_bytes / static_cast<double>(dc.peer_transfers));
          data_step.fetch_modeled_s = fetch;
          modeled.set_fetch_s(step, rank, fetch);
          data_steps.push_back(data_step);
        }
        if (check_nonfinite && !first_nonfinite[static_cast<size_t>(rank)]) {
          if (scan_gradient(grad.data(), 0, n, false).nonfinite) first_nonfinite[static_cast<size_t>(rank)] = step + 1;
        }
        // Under loss scaling a non-finite gradient is the scaler's to handle (it skips the step and lowers the scale),
        // not a divergence.
        ctl[kCtlBadGrad] = check_nonfinite ? 0.0 : static_cast<double>(count_non_finite(grad.data(), n));
        if (mean_of_means) grad_samples = static_cast<double>(K);
        ctl[kCtlGradSamples] = grad_samples;
        const double local_samples = grad_samples;
        const double local_loss_sum = ctl[kCtlLossSum];
        if (!lockstep) {  // free-running: no control all-reduce; the strategy owns progress, stops and divergence
          StepInput in;
          in.rank = rank;
          in.step = step;
          in.grad = grad.data();
          in.local_samples = local_samples;
          in.global_samples = local_samples;
          in.local_loss_sum = local_loss_sum;
          in.loss_nonfinite = !std::isfinite(local_loss_sum);  // free-running: the worker's own loss
          in.total_steps = total;
          in.lr = learning_rate(config.training.schedule, config.training.optimizer.lr, std::min(step, total - 1),
                                total);
          in.clock = &clock;
          in.cost = &cost;
          strategy->step(in);
          clock.end_step();
          if (strategy->rank_done(rank)) break;
          continue;
        }
        {
          PhaseTimer t(clock, Phase::kWait);  // the step's control values; waiting for the slowest rank
          comm->all_reduce_sum(rank, ctl, kControlCount);
          comm->take_stats(rank);
        }
        const double global_samples = ctl[kCtlGradSamples];
        // Every rank sees the same S, so every rank stops here together.
        if (ctl[kCtlSamples] <= 0) throw Error(fmt::format("step {} has no samples on any rank", step + 1));
        const double train_loss = ctl[kCtlLossSum] / ctl[kCtlSamples];  // every micro-batch's samples, also under a pitfall
        // The first non-finite quantity of the step, in the order computed: the parameters entering it (the last
        // update's result), a scaler that cannot recover (LossScaler::exhausted after the last skip), the loss
        // (forward), the gradient (backward). A diverged step applies no update. Under an active scaler a non-finite
        // loss or gradient is the scaler's: the strategy skips the window (StepInput::loss_nonfinite).
        const bool loss_nonfinite = !std::isfinite(train_loss);
        const NonFinite non_finite = ctl[kCtlBadParams] > 0               ? NonFinite::kParameters
                                     : ctl[kCtlScalerExhausted] > 0       ? NonFinite::kLossScale
                                     : loss_nonfinite && !scaler_active   ? NonFinite::kTrainLoss
                                     : ctl[kCtlBadGrad] > 0               ? NonFinite::kGradient
                                                                          : NonFinite::kNone;
        const bool diverged = non_finite != NonFinite::kNone;
        if (!diverged) {
          StepInput in;
          in.rank = rank;
          in.step = step;
          in.grad = grad.data();
          in.local_samples = local_samples;
          in.global_samples = global_samples;
          in.lr = learning_rate(config.training.schedule, config.training.optimizer.lr, step, total);
          in.local_loss_sum = local_loss_sum;
          in.loss_nonfinite = loss_nonfinite;  // every rank's loss (the control all-reduce's)
          in.total_steps = total;
          in.clock = &clock;
          in.cost = &cost;
          strategy->step(in);
        }
        clock.end_step();
        if (rank == 0) {
          trained_s += clock.steps().back().step_s;
          monitor.record(step + 1, trained_s, train_loss, ctl[kCtlSamples]);
          if (step > 0) modeled.model_step(step - 1);
        }
        const bool want_eval = !diverged && monitor.eval_due(step + 1);
        StopReading reading;
        reading.stop = ctl[kCtlStop] > 0;
        reading.timed_out = ctl[kCtlTimeout] > 0;
        if (trace || want_eval || reading.any() || diverged) {
          comm->barrier(rank);  // parameters of this step are final everywhere
          if (rank == 0) {
            if (trace) {
              std::vector<std::vector<float>> snap;
              for (int r = 0; r < ranks; ++r) {
                const float* p = strategy->params(r);
                snap.emplace_back(p, p + n);
              }
              res.trace.push_back(std::move(snap));
            }
            if (want_eval) {
              GS_NVTX_RANGE(kEval);
              monitor.evaluate(strategy->eval_params());
            }
            bool stop = diverged;
            if (non_finite == NonFinite::kLossScale) {
              monitor.diverged(step, non_finite, train_loss,
                               fmt::format("{:.0f} of {} ranks' scalers", ctl[kCtlScalerExhausted], ranks));
            } else if (diverged) {
              const double count = ctl[kCtlBadParams] > 0 ? ctl[kCtlBadParams] : ctl[kCtlBadGrad];
              monitor.diverged(step, non_finite, train_loss, fmt::format("{:.0f} values over all ranks", count));
            } else {
              stop = monitor.stop_after(step + 1, reading);
            }
            if (stop) stop_all.store(true);
            monitor.step_done(step + 1, train_loss);
          }
          comm->barrier(rank);
          comm->take_stats(rank);
          if (stop_all.load()) break;
        } else if (rank == 0) {
          monitor.step_done(step + 1, train_loss);
        }
      }
      res.steps[static_cast<size_t>(rank)] = clock.steps();
      data_result.max_queue_depth[static_cast<size_t>(rank)] = static_cast<int64_t>(loader.max_queue_depth());
    };
    world.run(rank_main, [&] {
      comm->abort();
      strategy->abort();
    });
    if (lockstep) modeled.finish(res.steps_completed);
    if (!lockstep) {  // free-running: the strategy's modeled steps per rank (ranks may have different counts)
      res.modeled_steps.clear();
      res.modeled_exposed_s.clear();
      res.modeled_overlapped_s.clear();
      for (const auto& rank_steps : strategy->modeled_rank_steps()) {
        res.modeled_steps.emplace_back();
        res.modeled_exposed_s.emplace_back();
        res.modeled_overlapped_s.emplace_back();
        for (const ModeledStep& m : rank_steps) {
          res.modeled_steps.back().push_back(m.times);
          res.modeled_exposed_s.back().push_back(m.exposed_s);
          res.modeled_overlapped_s.back().push_back(m.overlapped_s);
        }
      }
    }
    res.staleness = strategy->staleness_report();

    // The strategy's claim of identical replicas, checked against the trace when there is one.
    for (const auto& snap : res.trace)
      for (size_t r = 1; r < snap.size() && res.replicas_identical; ++r)
        res.replicas_identical = std::memcmp(snap[0].data(), snap[r].data(), n * sizeof(float)) == 0;
    res.precision = precision_result(config, *strategy, rank_counters, first_nonfinite);
    res.data = std::move(data_result);
    res.compression = strategy->compression_report();
    // The last update can overflow after the last loss was computed; the last skip can exhaust a scaler.
    monitor.final_parameters_checked(count_non_finite(strategy->eval_params(), n));
    if (save == "final" || save == "both") res.final_params.assign(strategy->eval_params(), strategy->eval_params() + n);
    if (res.is(Disposition::kPassed))
      if (const int gave_up = exhausted_scalers(*strategy, ranks); gave_up > 0)
        monitor.diverged(res.steps_completed, NonFinite::kLossScale, std::nan(""),
                         fmt::format("{} of {} ranks' scalers", gave_up, ranks));
  } catch (const std::bad_alloc&) {
    res.set_disposition(Disposition::kFailed, fmt::format("out of memory ({} parameters per replica, {} ranks)", res.num_params, ranks));
  } catch (const std::exception& e) {
    res.set_disposition(Disposition::kFailed, e.what());
  }
  res.wall_s = now_s() - wall0;
  return res;
}

}  // namespace gs
