// The cuda backend's rank loop (run_training_cuda, rank_loop.h): one persistent thread per rank (World), cudaSetDevice
// once per rank thread; per rank a compute stream with its cuBLAS handle, parameters / gradient / optimizer state in
// DeviceBuffers, batches staged through two pinned slots and cudaMemcpyAsync. The flat gradient is all-reduced bucket
// by bucket (GpuCommunicator: nccl with one rank per GPU, local when ranks outnumber GPUs; each bucket starts as soon
// as the last micro-batch's backward has enqueued its layers, so it overlaps the rest of backward, as DDP; under local
// its reduction runs once every rank's backward has produced it),
// waited for before the division by S and the optimizer; control values (samples, loss, stop, divergence) go through a host communicator.
// bf16_mixed / fp16_mixed / fp8_mixed run the mixed stack (kernels/cuda_dense_mixed.h) on fp32 master weights; tf32
// runs the fp32 stack with TF32 tensor-op GEMMs. The loss scaler (ScaledUpdate, precision_step.h) decides on the host
// from the all-reduced gradient's non-finite flag. fp16_pure is refused (cuda_loop_issues): its wire is an fp16 sum
// in rank order, which the GPU communicators do not do.
// Measured clock from CUDA event pairs per phase; modeled clock as on the host. CudaRun holds what the rank threads
// share, CudaRank one rank thread's device state and step. Extend: a feature the loop learns drops its refusal from
// cuda_loop_issues (device.cpp) and adds its steps to CudaRank.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "kernels/cuda_dense.h"
#include "kernels/cuda_dense_mixed.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_runtime.h"
#include "kernels/dense.h"
#include "kernels/nvtx.h"
#include "sim/core/count_text.h"
#include "sim/comm/communicator.h"
#include "sim/comm/gpu_communicator.h"
#include "sim/core/error.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/storage_model.h"
#include "sim/model/dataset.h"
#include "sim/model/loader.h"
#include "sim/model/model.h"
#include "sim/optim/loss_scaler.h"
#include "sim/optim/optimizer.h"
#include "sim/optim/precision_step.h"
#include "sim/runtime/device.h"
#include "sim/runtime/lockstep_clock.h"
#include "sim/runtime/rank_loop.h"
#include "sim/runtime/run_monitor.h"
#include "sim/runtime/run_plan.h"
#include "sim/runtime/world.h"
#include "sim/strategy/strategy.h"

namespace gs {
namespace {

constexpr int64_t kEvalChunk = kEvalChunkRows;  // evaluation rows per forward (as the host loop)
// The per-step control values all-reduced on the host by every rank.
enum : size_t { kCtlSamples, kCtlLossSum, kCtlStop, kCtlTimeout, kCtlBadParams, kCtlBadGrad, kControlCount };

double seconds_between(const gpu::Event& a, const gpu::Event& b) {
  return static_cast<double>(gpu::Event::elapsed_ms(a, b)) * 1e-3;
}

// One of the two staging slots of a rank's micro-batches: pinned host copies, device copies, and the events around
// the copy, the forward and the backward. Micro-batch k uses slot k % 2; its slot is reused by micro-batch k + 2
// only after harvest() has waited for its backward (so the pinned memory is free again).
struct StagingSlot {
  gpu::PinnedBuffer<float> pin_x, pin_y;
  gpu::PinnedBuffer<int32_t> pin_labels;
  gpu::DeviceBuffer<float> x, y;
  gpu::DeviceBuffer<int32_t> labels;
  gpu::Event copy_begin, forward_begin, backward_begin, backward_end;
  bool pending = false;  // events recorded and not yet read

  void reserve(int64_t rows, int64_t in_dim, int64_t out_dim, bool classification) {
    const auto r = static_cast<size_t>(rows);
    if (pin_x.size() < r * static_cast<size_t>(in_dim)) {
      pin_x = gpu::PinnedBuffer<float>(r * static_cast<size_t>(in_dim), "pinned batch inputs");
      x = gpu::DeviceBuffer<float>(r * static_cast<size_t>(in_dim), "batch inputs");
    }
    if (classification && pin_labels.size() < r) {
      pin_labels = gpu::PinnedBuffer<int32_t>(r, "pinned batch labels");
      labels = gpu::DeviceBuffer<int32_t>(r, "batch labels");
    }
    if (!classification && pin_y.size() < r * static_cast<size_t>(out_dim)) {
      pin_y = gpu::PinnedBuffer<float>(r * static_cast<size_t>(out_dim), "pinned batch targets");
      y = gpu::DeviceBuffer<float>(r * static_cast<size_t>(out_dim), "batch targets");
    }
  }

  // Waits for the slot's backward and adds its copy, forward and backward times to the clock.
  void harvest(PhaseClock& clock) {
    if (!pending) return;
    backward_end.synchronize();
    clock.add(Phase::kData, seconds_between(copy_begin, forward_begin));
    clock.add(Phase::kForward, seconds_between(forward_begin, backward_begin));
    clock.add(Phase::kBackward, seconds_between(backward_begin, backward_end));
    pending = false;
  }
};

// The evaluation set on the device, in chunks of kEvalChunk rows, for rank 0.
struct DeviceEvalSet {
  int64_t count = 0;
  gpu::DeviceBuffer<float> x, y;
  gpu::DeviceBuffer<int32_t> labels;
  gpu::DeviceBuffer<double> chunk_loss;               // one loss sum per chunk
  gpu::DeviceBuffer<unsigned long long> chunk_correct;  // one correct count per chunk (classification)
  gpu::DenseScratchGpu scratch;
};

// What every rank thread of one cuda run shares: the model, data, communicators, cost model, monitor and the
// per-rank results, set up once before the rank threads start (in the order of the checks a run fails on).
struct CudaRun {
  CudaRun(const RunPlan& run_plan, const RunHooks& hooks, RunResult& result, double wall0);
  // The precision object of the report (as the host loop's precision_result): rank 0's scaler, counts over ranks.
  PrecisionResult precision_result() const;

  const RunPlan& plan;
  const RunConfig& config;
  RunResult& res;
  const int ranks;
  const int64_t K;  // micro-batches per step
  std::unique_ptr<Model> model;
  DenseStack stack;
  std::unique_ptr<Dataset> data;
  size_t n = 0;
  int64_t in_dim = 0, out_dim = 0;
  bool classification = false;
  int64_t total = 0;  // planned steps
  std::vector<int> device_of;
  std::unique_ptr<GpuCommunicator> gcomm;
  std::unique_ptr<Communicator> control;
  std::optional<CostModel> cost_model;
  std::unique_ptr<SyncStrategy> pricing;
  std::vector<Bucket> buckets;
  StorageProfile storage;
  int ranks_per_node = 1;
  DataResult data_result;
  std::optional<RunMonitor> monitor;  // series, evaluation records, stops, outcomes
  std::vector<float> init;
  std::optional<LockstepModeledClock> modeled;
  const OptimizerConfig& opt;
  bool adam = false;
  bool inject = false;
  bool overlap = false;
  PrecisionMode mode = PrecisionMode::kFp32;
  bool mixed = false;
  MixedSpec spec;
  bool check_local = false;
  // Written by the rank threads: each its own slot, or rank 0 alone.
  std::atomic<bool> final_params_bad{false};
  std::vector<MixedCounters> rank_counters;
  std::vector<std::optional<int64_t>> first_nonfinite;
  std::optional<ScaledUpdate> report_scaler;  // rank 0's copy after the run (every rank's decides alike)
  uint64_t averaged_nonfinite = 0;            // rank 0's count of inf/NaN values in all-reduced gradients
  double trained_s = 0.0;
};

CudaRun::CudaRun(const RunPlan& run_plan, const RunHooks& hooks, RunResult& result, double wall0)
    : plan(run_plan),
      config(run_plan.config),
      res(result),
      ranks(run_plan.shape.ranks),
      K(run_plan.shape.micro_batches),
      opt(run_plan.config.training.optimizer) {
  const CudaProbe& probe = cuda_status();
  GS_EXPECT(cuda_usable(probe), "cluster.backend cuda: no usable GPU (" + probe.error + ")");
  const std::vector<ConfigIssue> unsupported = cuda_loop_issues(config);
  if (!unsupported.empty()) throw Error(unsupported.front().path + ": " + unsupported.front().message);
  model = make_model(config);
  stack = dense_stack_from_config(config.model);
  data = hooks.make_dataset ? hooks.make_dataset(config) : make_dataset(config);
  n = model->num_params();
  GS_EXPECT(n == stack.num_params(), "cuda loop: the model's parameters are not its dense stack's");
  in_dim = stack.widths.front();
  out_dim = stack.widths.back();
  classification = stack.loss == LossKind::kCrossEntropy;
  total = planned_steps(config, data->steps_per_epoch());

  // Devices and communicators: nccl when every rank can have a GPU of its own (and NCCL is linked), else every rank
  // on GPU 0 through local (NCCL forbids two ranks of one communicator on one GPU).
  res.ranks_one_per_gpu = nccl_compiled() && ranks <= probe.device_count;
  device_of.assign(static_cast<size_t>(ranks), 0);
  if (res.ranks_one_per_gpu)
    for (int r = 0; r < ranks; ++r) device_of[static_cast<size_t>(r)] = r;
  const double deadline_s = wait_deadline_s(config.training.run_timeout_s);  // of every wait in a collective
  gcomm = res.ranks_one_per_gpu ? make_nccl_communicator(device_of, deadline_s)
                                : make_local_communicator(ranks, 0, deadline_s);
  control = make_host_communicator(ranks, deadline_s);

  // The modeled clock: the host loop's cost model, and the all-reduce strategy made timing-only (it prices the
  // bucket collectives and the optimizer; it holds no buffers and is only asked to price).
  cost_model.emplace(config, *model);
  res.hardware = cost_model->hardware().name;
  StrategySetup setup{config, *model, *control, ranks, &*cost_model, true};
  pricing = plan.strategy->make(setup);
  buckets = make_buckets(model->tensors(), static_cast<size_t>(config.sync.first_bucket_mb * 1048576.0),
                         static_cast<size_t>(config.sync.bucket_mb * 1048576.0));

  // Input pipeline (loader per rank, no node cache here) priced as on the host.
  storage = load_storage_profile(config.data.storage);
  ranks_per_node = std::max(1, std::min(ranks, cost_model->hardware().gpus_per_node));
  data_result.storage = storage.name;
  data_result.prefetch = config.data.prefetch;
  data_result.cache_policy = "none";
  data_result.ranks_per_node = ranks_per_node;
  data_result.steps_per_epoch = data->steps_per_epoch();
  data_result.max_queue_depth.assign(static_cast<size_t>(ranks), 0);
  data_result.steps.assign(static_cast<size_t>(ranks), {});

  res.steps_planned = total;
  res.num_params = static_cast<int64_t>(n);
  res.classification = classification;
  res.replicas_identical = true;  // every rank applies the same update to the same all-reduced gradient
  res.steps.assign(static_cast<size_t>(ranks), {});
  monitor.emplace(config, hooks, res, total, wall0);
  init.resize(n);
  model->init_params(init.data(), static_cast<uint64_t>(config.training.seed));

  // Modeled clock, shared with rank_loop.cpp (lockstep_clock.h): slot [step % 3][rank]; rank 0 models step t - 1
  // after step t's control all-reduce (every rank priced t - 1 before it), the last step after the run.
  modeled.emplace(*cost_model, config, res);

  adam = opt.kind == "adam" || opt.kind == "adamw";
  GS_EXPECT(adam || opt.kind == "sgd", "training.optimizer.kind: unknown optimizer '" + opt.kind + "'");
  GS_EXPECT(!opt.nesterov || opt.momentum > 0.0,
            "training.optimizer.nesterov: Nesterov momentum needs training.optimizer.momentum > 0");
  inject = config.cluster.stragglers.inject;
  // Buckets start during the last micro-batch's backward (DDP overlap) with sync.overlap, under nccl and local (whose
  // reduction of a bucket waits on the communication stream for every rank's "bucket final" event, in start order).
  // Not with injected stragglers (the delay must come before any of the rank's communication, as the modeled clock
  // has it).
  overlap = config.sync.overlap && !inject;
  // Precision: fp32 / tf32 (fp32 stack; tf32 with TF32 tensor-op GEMMs), or a mode of the mixed stack with the
  // host model's MixedSpec (mixed_spec, sim/model/model.h): bf16_mixed, fp16_mixed, fp8_mixed (fp32 master weights
  // and optimizer state; fp8: E4M3/E5M2 GEMM operands with delayed scaling, bf16 elsewhere).
  mode = plan.precision;
  mixed = mode == PrecisionMode::kBf16Mixed || mode == PrecisionMode::kFp16Mixed || mode == PrecisionMode::kFp8Mixed;
  spec = mixed_spec(precision_policy(config.precision));
  rank_counters.assign(static_cast<size_t>(ranks), {});
  first_nonfinite.assign(static_cast<size_t>(ranks), std::nullopt);
  report_scaler.emplace(config.precision);
  // The local gradient's check before the all-reduce, where the host loop checks it (check_nonfinite there): a
  // reduced-precision mode or a loss scaler.
  check_local = precision_policy(config.precision).emulated() || plan.scaler_active();
}

PrecisionResult CudaRun::precision_result() const {
  std::vector<PrecisionCounters> counters;
  for (const MixedCounters& c : rank_counters) counters.push_back({c.grad_values, c.grad_underflow, c.grad_nonfinite});
  return gs::precision_result(config, &report_scaler->scaler(), averaged_nonfinite,
                              report_scaler->first_nonfinite_step(), counters, first_nonfinite);
}

int set_device(int device) {
  GS_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

// Aborts the communicators when a throw unwinds the rank: a member declared after the rank's device buffers, so it
// runs first (nccl: every rank's ncclCommAbort, ending NCCL kernels whose peers are gone) before those buffers'
// cudaFree, which waits for the device.
struct AbortOnThrow {
  GpuCommunicator& comm;
  int uncaught = std::uncaught_exceptions();
  ~AbortOnThrow() {
    if (std::uncaught_exceptions() > uncaught) comm.abort();
  }
};

// One rank thread of a cuda run: its device (set before any of its buffers), compute stream, cuBLAS handle, device
// buffers and loader, and its step: stage and run K micro-batches, all-reduce the gradient's buckets, agree on the
// control values, apply the update, record.
class CudaRank {
 public:
  CudaRank(CudaRun& run, int rank);
  // The rank's steps until the planned total, a stop or a divergence, then its results into the run.
  void train();

 private:
  // The step's start: the control values rank 0 reads, the parameters' check, the gradient and loss sums zeroed.
  void begin_step(double* ctl);
  // Starts every bucket not yet started whose gradient elements all lie at or after first_final (final in stream
  // order), in bucket order (last layers first).
  void start_buckets(size_t first_final);
  // The step's K micro-batches: read, staged, forward and backward; returns the step's data record.
  DataStepRecord micro_batches(int64_t step, StepCost& cost, double* ctl);
  // Checks the batch against the model and grows the scratch and staging slots to its rows.
  void check_and_fit(const Batch& batch);
  // Copies the batch into slot k % 2 and runs its forward and backward on the compute stream.
  void forward_backward(int64_t k, float loss_scale);
  // cluster.stragglers.inject: this rank's compute stretched by its straggler factor for real.
  void inject_straggler(int64_t step);
  // The bucket all-reduces not started during backward, their wait, and the step's flags and loss sums to the host.
  void communicate(int64_t step, StepCost& cost, double* ctl);
  // The average, unscale and optimizer update of an applied step.
  void apply_update(int64_t step, double samples, float unscale);
  // The step's end after the control all-reduce: divergence and the scaler's decision, the update, the clock, the
  // monitor; returns true when every rank stops here.
  bool end_step(int64_t step, double* ctl);
  // Evaluation of this rank's parameters on the whole evaluation set (rank 0): (mean loss, accuracy or nullopt).
  std::pair<double, std::optional<double>> evaluate();

  CudaRun& r_;
  const int rank_;
  const int device_;
  gpu::Stream compute_;
  const cudaStream_t cs_;
  gpu::BlasHandle blas_;
  PhaseClock clock_;
  gpu::DeviceBuffer<float> params_, grad_, state_a_, state_b_;
  int64_t capacity_;
  gpu::DenseScratchGpu scratch_;
  std::optional<gpu::MixedScratchGpu> mixed_scratch_;
  ScaledUpdate scaled_;
  MixedCounters& counters_;
  std::array<StagingSlot, 2> slots_;
  gpu::DeviceBuffer<double> loss_sums_;
  gpu::PinnedBuffer<double> loss_host_;
  // Non-finite flags: [0] parameters entering the step, [1] the all-reduced gradient, [2] this rank's local
  // gradient (each bucket checked just before its all-reduce starts; the report's first_nonfinite_step).
  gpu::DeviceBuffer<int> flags_;
  gpu::PinnedBuffer<int> flags_host_;
  gpu::DeviceBuffer<unsigned long long> nonfinite_count_;
  gpu::PinnedBuffer<unsigned long long> nonfinite_count_host_;
  gpu::Event comm_begin_, comm_end_, opt_begin_, opt_end_;
  std::optional<DeviceEvalSet> eval_;
  AbortOnThrow abort_on_throw_;
  Loader loader_;
  std::vector<DataStepRecord>& data_steps_;
  double readers_ = 1.0, window_ = 1.0;  // the storage model's readers on this node and its read-ahead window
  Batch batch_;
  DataCounts micro_counts_;
  size_t next_bucket_ = 0;  // buckets started so far this step
};

CudaRank::CudaRank(CudaRun& run, int rank)
    : r_(run),
      rank_(rank),
      device_(set_device(run.device_of[static_cast<size_t>(rank)])),
      cs_(compute_.get()),
      blas_(cs_),
      params_(run.n, "parameters"),
      grad_(run.n, "gradient"),
      state_a_(run.adam || run.opt.momentum != 0.0 ? run.n : 0, "optimizer state"),
      state_b_(run.adam ? run.n : 0, "optimizer state"),
      capacity_(std::max<int64_t>(run.plan.shape.batch_per_rank, 1)),
      scratch_(gpu::make_dense_scratch_gpu(run.stack, capacity_)),
      scaled_(run.config.precision),
      counters_(run.rank_counters[static_cast<size_t>(rank)]),
      loss_sums_(static_cast<size_t>(run.K), "micro-batch loss sums"),
      loss_host_(static_cast<size_t>(run.K), "micro-batch loss sums"),
      flags_(3, "non-finite flags"),
      flags_host_(3, "non-finite flags"),
      nonfinite_count_(2, "non-finite count"),
      nonfinite_count_host_(2, "non-finite count"),
      abort_on_throw_{*run.gcomm},
      loader_(*run.data, run.config, nullptr, rank, run.total, run.config.data.prefetch),
      data_steps_(run.data_result.steps[static_cast<size_t>(rank)]) {
  nvtx_name_stream(cs_, fmt::format("rank {} compute", rank).c_str());
  r_.gcomm->set_compute_stream(rank, cs_);
  if (r_.mode == PrecisionMode::kTf32) gpu::set_tf32_math(blas_, true);  // fp32 GEMMs on TF32 tensor cores
  clock_.reserve(static_cast<size_t>(std::min<int64_t>(r_.total, 1 << 16)));
  GS_CUDA_CHECK(cudaMemcpyAsync(params_.get(), r_.init.data(), r_.n * sizeof(float), cudaMemcpyHostToDevice, cs_));
  if (state_a_.size() > 0) GS_CUDA_CHECK(cudaMemsetAsync(state_a_.get(), 0, state_a_.bytes(), cs_));
  if (state_b_.size() > 0) GS_CUDA_CHECK(cudaMemsetAsync(state_b_.get(), 0, state_b_.bytes(), cs_));
  if (r_.mixed) mixed_scratch_ = gpu::make_mixed_scratch_gpu(r_.stack, capacity_, r_.spec, r_.K);
  for (StagingSlot& s : slots_) s.reserve(capacity_, r_.in_dim, r_.out_dim, r_.classification);
  compute_.synchronize();
  data_steps_.reserve(static_cast<size_t>(std::min<int64_t>(r_.total, 1 << 16)));
  const int node_first = rank / r_.ranks_per_node * r_.ranks_per_node;
  readers_ = static_cast<double>(std::min(r_.ranks_per_node, r_.ranks - node_first));
  window_ = static_cast<double>(std::max<int64_t>(1, r_.config.data.prefetch) * r_.plan.shape.batch_per_rank);
}

std::pair<double, std::optional<double>> CudaRank::evaluate() {
  const Batch& e = r_.data->eval_set();
  const DenseStack& stack = r_.stack;
  const bool classification = r_.classification;
  if (!eval_) {
    eval_.emplace();
    eval_->count = e.count;
    // Uploaded on the compute stream that reads it (a synchronous cudaMemcpy would run on the legacy stream,
    // which the non-blocking compute stream does not wait for).
    eval_->x = gpu::DeviceBuffer<float>(e.x.size(), "evaluation inputs");
    gpu::copy_to_device_async(eval_->x.get(), e.x.data(), e.x.size() * sizeof(float), cs_);
    if (classification) {
      eval_->labels = gpu::DeviceBuffer<int32_t>(e.labels.size(), "evaluation labels");
      gpu::copy_to_device_async(eval_->labels.get(), e.labels.data(), e.labels.size() * sizeof(int32_t), cs_);
    } else {
      eval_->y = gpu::DeviceBuffer<float>(e.y.size(), "evaluation targets");
      gpu::copy_to_device_async(eval_->y.get(), e.y.data(), e.y.size() * sizeof(float), cs_);
    }
    const auto chunks = static_cast<size_t>((e.count + kEvalChunk - 1) / kEvalChunk);
    eval_->chunk_loss = gpu::DeviceBuffer<double>(std::max<size_t>(chunks, 1), "evaluation loss sums");
    eval_->chunk_correct =
        gpu::DeviceBuffer<unsigned long long>(std::max<size_t>(chunks, 1), "evaluation correct counts");
    eval_->scratch = gpu::make_dense_scratch_gpu(stack, std::min<int64_t>(kEvalChunk, std::max<int64_t>(e.count, 1)));
  }
  const int64_t count = eval_->count;
  if (count == 0) return {std::nan(""), std::nullopt};
  const auto chunks = static_cast<size_t>((count + kEvalChunk - 1) / kEvalChunk);
  for (size_t c = 0; c < chunks; ++c) {
    const int64_t first = static_cast<int64_t>(c) * kEvalChunk;
    const int64_t rows = std::min(kEvalChunk, count - first);
    const int32_t* labels = classification ? eval_->labels.get() + first : nullptr;
    const float* y = classification ? nullptr : eval_->y.get() + first * r_.out_dim;
    gpu::dense_stack_forward_gpu(blas_, eval_->scratch, stack, params_.get(), eval_->x.get() + first * r_.in_dim, rows,
                                 y, labels, eval_->chunk_loss.get() + c);
    if (classification)
      gpu::count_correct(eval_->chunk_correct.get() + c, eval_->scratch.pre.back().get(), labels, rows, r_.out_dim,
                         cs_);
  }
  std::vector<double> loss(chunks);
  std::vector<unsigned long long> correct(chunks, 0);
  GS_CUDA_CHECK(
      cudaMemcpyAsync(loss.data(), eval_->chunk_loss.get(), chunks * sizeof(double), cudaMemcpyDeviceToHost, cs_));
  if (classification)
    GS_CUDA_CHECK(cudaMemcpyAsync(correct.data(), eval_->chunk_correct.get(), chunks * sizeof(unsigned long long),
                                  cudaMemcpyDeviceToHost, cs_));
  compute_.synchronize();
  double loss_sum = 0.0;
  unsigned long long right = 0;
  for (size_t c = 0; c < chunks; ++c) {  // chunk order, as the host's evaluate()
    loss_sum += loss[c];
    right += correct[c];
  }
  std::optional<double> acc;
  if (classification) acc = static_cast<double>(right) / static_cast<double>(count);
  return {loss_sum / static_cast<double>(count), acc};
}

void CudaRank::begin_step(double* ctl) {
  if (rank_ == 0) {
    const StopReading reading = r_.monitor->read_stop();
    ctl[kCtlStop] = reading.stop ? 1.0 : 0.0;
    ctl[kCtlTimeout] = reading.timed_out ? 1.0 : 0.0;
  }
  gpu::find_nonfinite(params_.get(), r_.n, flags_.get(), cs_);
  GS_CUDA_CHECK(cudaMemsetAsync(flags_.get() + 2, 0, sizeof(int), cs_));
  GS_CUDA_CHECK(cudaMemsetAsync(grad_.get(), 0, grad_.bytes(), cs_));
  GS_CUDA_CHECK(cudaMemsetAsync(loss_sums_.get(), 0, loss_sums_.bytes(), cs_));
  if (r_.mixed) gpu::reset_counts(*mixed_scratch_, cs_);
  next_bucket_ = 0;
}

void CudaRank::start_buckets(size_t first_final) {
  for (; next_bucket_ < r_.buckets.size() && r_.buckets[next_bucket_].begin >= first_final; ++next_bucket_) {
    const Bucket& b = r_.buckets[next_bucket_];
    GS_NVTX_RANGE_BYTES(kCommunicate, (b.end - b.begin) * sizeof(float));
    // The local gradient's check, in stream order before the in-place all-reduce overwrites the bucket.
    if (r_.check_local) gpu::find_nonfinite(grad_.get() + b.begin, b.end - b.begin, flags_.get() + 2, cs_, true);
    r_.gcomm->all_reduce_sum_start(rank_, grad_.get() + b.begin, b.end - b.begin);
  }
}

void CudaRank::check_and_fit(const Batch& batch) {
  const int64_t in_dim = r_.in_dim, out_dim = r_.out_dim;
  GS_EXPECT(batch.in_dim == in_dim,
            fmt::format("cuda loop: batch in_dim {} != model.layers[0] {}", batch.in_dim, in_dim));
  if (r_.classification) {
    GS_EXPECT(batch.labels.size() >= static_cast<size_t>(batch.count), "cuda loop: batch labels short");
    for (int64_t r = 0; r < batch.count; ++r) {
      const int32_t label = batch.labels[static_cast<size_t>(r)];
      GS_EXPECT(label >= 0 && label < out_dim,
                fmt::format("cuda loop: label {} of sample {} outside [0, {})", label, r, out_dim));
    }
  } else {
    GS_EXPECT(batch.out_dim == out_dim && batch.y.size() >= static_cast<size_t>(batch.count * out_dim),
              fmt::format("cuda loop: batch targets ({} per sample) != the model's {} outputs", batch.out_dim,
                          out_dim));
  }
  if (batch.count <= capacity_) return;
  // Inline micro-batches may exceed b: grow to the largest seen.
  for (StagingSlot& s : slots_) s.harvest(clock_);
  compute_.synchronize();
  capacity_ = batch.count;
  scratch_ = gpu::make_dense_scratch_gpu(r_.stack, capacity_);
  if (r_.mixed) {  // keeps this step's counts: read them, then start the new scratch's at its next micro-batch
    gpu::counters_to_host(*mixed_scratch_, counters_, cs_);
    const int64_t done = mixed_scratch_->backward_index;
    gpu::MixedScratchGpu grown = gpu::make_mixed_scratch_gpu(r_.stack, capacity_, r_.spec, r_.K);
    // fp8: the delayed scalings (scales and amax histories) go on; they do not depend on the rows.
    grown.fp8_state = std::move(mixed_scratch_->fp8_state);
    grown.fp8_history = std::move(mixed_scratch_->fp8_history);
    mixed_scratch_ = std::move(grown);
    gpu::reset_counts(*mixed_scratch_, cs_);
    mixed_scratch_->backward_index = done;
  }
  for (StagingSlot& s : slots_) s.reserve(capacity_, r_.in_dim, r_.out_dim, r_.classification);
}

void CudaRank::forward_backward(int64_t k, float loss_scale) {
  const Batch& batch = batch_;
  const DenseStack& stack = r_.stack;
  const bool classification = r_.classification;
  StagingSlot& slot = slots_[static_cast<size_t>(k % 2)];
  slot.harvest(clock_);  // micro-batch k - 2 is done with this slot's pinned memory
  const auto rows = static_cast<size_t>(batch.count);
  const size_t x_bytes = rows * static_cast<size_t>(r_.in_dim) * sizeof(float);
  std::memcpy(slot.pin_x.get(), batch.x.data(), x_bytes);
  slot.copy_begin.record(cs_);
  GS_CUDA_CHECK(cudaMemcpyAsync(slot.x.get(), slot.pin_x.get(), x_bytes, cudaMemcpyHostToDevice, cs_));
  if (classification) {
    std::memcpy(slot.pin_labels.get(), batch.labels.data(), rows * sizeof(int32_t));
    GS_CUDA_CHECK(cudaMemcpyAsync(slot.labels.get(), slot.pin_labels.get(), rows * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, cs_));
  } else {
    const size_t y_bytes = rows * static_cast<size_t>(r_.out_dim) * sizeof(float);
    std::memcpy(slot.pin_y.get(), batch.y.data(), y_bytes);
    GS_CUDA_CHECK(cudaMemcpyAsync(slot.y.get(), slot.pin_y.get(), y_bytes, cudaMemcpyHostToDevice, cs_));
  }
  const float* y = classification ? nullptr : slot.y.get();
  const int32_t* labels = classification ? slot.labels.get() : nullptr;
  slot.forward_begin.record(cs_);
  {
    GS_NVTX_RANGE(kForward);
    if (r_.mixed) {
      gpu::dense_stack_forward_mixed_gpu(blas_, scratch_, *mixed_scratch_, stack, params_.get(), slot.x.get(),
                                         batch.count, y, labels, loss_sums_.get() + k);
    } else {
      gpu::dense_stack_forward_gpu(blas_, scratch_, stack, params_.get(), slot.x.get(), batch.count, y, labels,
                                   loss_sums_.get() + k);
    }
  }
  slot.backward_begin.record(cs_);
  {
    GS_NVTX_RANGE(kBackward);
    std::function<void(int64_t)> after_layer;
    if (r_.overlap && k + 1 == r_.K)
      after_layer = [this, &stack](int64_t layer) { start_buckets(stack.weight_offset(layer)); };
    if (r_.mixed) {
      gpu::dense_stack_backward_mixed_gpu(blas_, grad_.get(), scratch_, *mixed_scratch_, stack, batch.count, y,
                                          labels, loss_scale, after_layer);
    } else {
      gpu::dense_stack_backward_gpu(blas_, grad_.get(), scratch_, stack, params_.get(), slot.x.get(), batch.count, y,
                                    labels, after_layer);
    }
  }
  slot.backward_end.record(cs_);
  slot.pending = true;
}

DataStepRecord CudaRank::micro_batches(int64_t step, StepCost& cost, double* ctl) {
  const float loss_scale = scaled_.loss_scale();  // this step's backward seed factor
  DataStepRecord data_step;
  for (int64_t k = 0; k < r_.K; ++k) {
    GS_NVTX_RANGE(kMicroStep);
    {
      PhaseTimer t(clock_, Phase::kData);  // the wait for the loader (host clock)
      loader_.next(batch_, micro_counts_);
    }
    data_step.counts += micro_counts_;
    if (batch_.count == 0) continue;
    check_and_fit(batch_);
    forward_backward(k, loss_scale);
    ctl[kCtlSamples] += static_cast<double>(batch_.count);
    r_.cost_model->add_micro_batch(cost, batch_.count, k + 1 == r_.K);
    price_precision_micro_batch(cost, r_.mode, static_cast<double>(r_.n));  // format casts
  }
  const DataCounts& dc = data_step.counts;
  double fetch = storage_read_s(r_.storage, static_cast<double>(dc.storage_samples), dc.storage_bytes, readers_,
                                window_);
  if (dc.peer_transfers > 0)
    fetch += static_cast<double>(dc.peer_transfers) *
             r_.cost_model->collectives().p2p_s(dc.peer_bytes / static_cast<double>(dc.peer_transfers));
  data_step.fetch_modeled_s = fetch;
  r_.modeled->set_fetch_s(step, rank_, fetch);
  return data_step;
}

void CudaRank::inject_straggler(int64_t step) {
  // A host sleep of (f - 1) x the step's measured forward + backward, before its all-reduce starts, so the other
  // ranks wait for it in the collectives. Factors <= 1 cannot speed a GPU up and add nothing.
  for (StagingSlot& s : slots_) s.harvest(clock_);
  const double f = straggler_factor(r_.config.cluster.stragglers, static_cast<uint64_t>(r_.config.training.seed),
                                    step, rank_);
  const StepTimes& now = clock_.current();
  const double compute_s =
      now.phase_s[static_cast<size_t>(Phase::kForward)] + now.phase_s[static_cast<size_t>(Phase::kBackward)];
  if (f > 1.0 && compute_s > 0.0) {
    const double delay_s = (f - 1.0) * compute_s;
    const double t0 = now_s();
    std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
    clock_.add(Phase::kBackward, now_s() - t0);
  }
}

void CudaRank::communicate(int64_t step, StepCost& cost, double* ctl) {
  // The bucket all-reduces of the gradient sum not started during backward (all of them without overlap), in one
  // group, then their wait. `communicate` is measured from the end of backward: the exposed part.
  comm_begin_.record(cs_);
  r_.gcomm->group_begin(rank_);
  start_buckets(0);
  r_.gcomm->group_end(rank_);
  r_.gcomm->all_reduce_wait(rank_);
  comm_end_.record(cs_);
  // The all-reduced gradient's non-finite check (an inf/NaN in any rank's local gradient reaches the sum), then the
  // step's loss sums and flags to the host.
  gpu::find_nonfinite(grad_.get(), r_.n, flags_.get() + 1, cs_);
  GS_CUDA_CHECK(cudaMemcpyAsync(loss_host_.get(), loss_sums_.get(), loss_sums_.bytes(), cudaMemcpyDeviceToHost, cs_));
  GS_CUDA_CHECK(cudaMemcpyAsync(flags_host_.get(), flags_.get(), 3 * sizeof(int), cudaMemcpyDeviceToHost, cs_));
  for (StagingSlot& s : slots_) s.harvest(clock_);
  compute_.synchronize();  // loss sums and flags are on the host now
  if (r_.mixed) gpu::counters_to_host(*mixed_scratch_, counters_, cs_);
  {
    StepInput pin;  // the modeled step: the strategy's collectives and optimizer
    pin.rank = rank_;
    pin.step = step;
    pin.local_samples = ctl[kCtlSamples];
    pin.cost = &cost;
    r_.pricing->price(pin);
  }
  for (int64_t k = 0; k < r_.K; ++k) ctl[kCtlLossSum] += loss_host_[static_cast<size_t>(k)];  // micro-batch order
  ctl[kCtlBadParams] = flags_host_[0] != 0 ? 1.0 : 0.0;
  ctl[kCtlBadGrad] = flags_host_[1] != 0 ? 1.0 : 0.0;
  std::optional<int64_t>& first_bad = r_.first_nonfinite[static_cast<size_t>(rank_)];
  if (r_.check_local && flags_host_[2] != 0 && !first_bad) first_bad = step + 1;
  if (flags_host_[1] != 0 && rank_ == 0) {  // how many values (rare: only on a step whose sum holds one)
    gpu::count_rounding(FloatFormat::kFp32, grad_.get(), r_.n, nonfinite_count_.get(), cs_);
    GS_CUDA_CHECK(cudaMemcpyAsync(nonfinite_count_host_.get(), nonfinite_count_.get(), 2 * sizeof(unsigned long long),
                                  cudaMemcpyDeviceToHost, cs_));
    compute_.synchronize();
    r_.averaged_nonfinite += nonfinite_count_host_[1];
  }
}

void CudaRank::apply_update(int64_t step, double samples, float unscale) {
  GS_NVTX_RANGE(kOptimizer);
  const OptimizerConfig& opt = r_.opt;
  const size_t n = r_.n;
  opt_begin_.record(cs_);
  gpu::divide(grad_.get(), n, static_cast<float>(samples), cs_);  // the average, as allreduce.cpp
  if (unscale != 1.0f) gpu::scale(grad_.get(), n, unscale, cs_);  // torch's unscale_, after the average
  const double lr = learning_rate(r_.config.training.schedule, opt.lr, step, r_.total);
  const int64_t t = scaled_.update_count();  // updates applied including this one
  if (r_.adam) {
    const AdamScalars s = adam_scalars(lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, opt.kind == "adamw", t,
                                       opt.first_moment == "lerp");
    gpu::adam_update(params_.get(), grad_.get(), state_a_.get(), state_b_.get(), n, s, cs_);
  } else {
    SgdScalars s;
    s.lr = static_cast<float>(lr);
    s.momentum = static_cast<float>(opt.momentum);
    s.weight_decay = static_cast<float>(opt.weight_decay);
    s.nesterov = opt.nesterov;
    s.first_step = t == 1;
    gpu::sgd_update(params_.get(), grad_.get(), state_a_.size() > 0 ? state_a_.get() : nullptr, n, s, cs_);
  }
  opt_end_.record(cs_);
  compute_.synchronize();
  clock_.add(Phase::kOptimizer, seconds_between(opt_begin_, opt_end_));
}

bool CudaRank::end_step(int64_t step, double* ctl) {
  if (ctl[kCtlSamples] <= 0) throw Error(fmt::format("step {} has no samples on any rank", step + 1));
  const double train_loss = ctl[kCtlLossSum] / ctl[kCtlSamples];
  // Under a mixed mode or a loss scaler an inf/NaN gradient is the scaler's (skip and back off), not a divergence;
  // under an active scaler so is an inf/NaN loss (the window is skipped, as the host loop's strategies do).
  const bool grad_bad = ctl[kCtlBadGrad] > 0;
  const bool loss_bad = !std::isfinite(train_loss);
  NonFinite non_finite = ctl[kCtlBadParams] > 0                     ? NonFinite::kParameters
                         : loss_bad && !scaled_.scaler().active()   ? NonFinite::kTrainLoss
                         : grad_bad && !scaled_.handles_nonfinite() ? NonFinite::kGradient
                                                                    : NonFinite::kNone;
  bool diverged = non_finite != NonFinite::kNone;
  // The scaler's decision, the same on every rank (the flag is the all-reduced gradient's, the loss every rank's): a
  // skipped step runs no optimizer and does not count as an update (GradScaler.step).
  const float unscale = scaled_.unscale_factor();  // this step's scale, before decide() updates it
  const bool apply = !diverged && scaled_.decide(grad_bad, step + 1, loss_bad);
  if (!diverged && scaled_.scaler().exhausted()) {  // backed off past 2^-128: it cannot recover (every rank alike)
    non_finite = NonFinite::kLossScale;
    diverged = true;
  }
  if (apply) apply_update(step, ctl[kCtlSamples], unscale);
  {
    const double comm_s = seconds_between(comm_begin_, comm_end_);
    const CommStats st = r_.gcomm->take_stats(rank_);
    clock_.add(Phase::kCommunicate, comm_s);
    // local: the host time all_reduce_wait spends until every rank has started this rank's buckets is waiting for
    // other ranks, not communication.
    if (!r_.res.ranks_one_per_gpu) clock_.move(Phase::kCommunicate, Phase::kWait, std::min(st.wait_s, comm_s));
    clock_.add_bytes(st.bytes_sent);
  }
  clock_.end_step();
  StopReading reading;
  reading.stop = ctl[kCtlStop] > 0;
  reading.timed_out = ctl[kCtlTimeout] > 0;
  // Every rank saw the same control values, so every rank stops at the same step without a barrier (rank 0 records
  // the outcome).
  const bool stop_here = diverged || (reading.any() && step + 1 < r_.total);
  if (rank_ != 0) return stop_here;
  RunMonitor& monitor = *r_.monitor;
  r_.trained_s += clock_.steps().back().step_s;
  monitor.record(step + 1, r_.trained_s, train_loss, ctl[kCtlSamples]);
  if (step > 0) r_.modeled->model_step(step - 1);
  if (!diverged && monitor.eval_due(step + 1)) {
    GS_NVTX_RANGE(kEval);
    auto [loss, acc] = evaluate();
    monitor.record_eval(EvalResult{loss, acc});
  }
  if (non_finite == NonFinite::kLossScale) {
    monitor.diverged(step + 1, non_finite, train_loss,
                     fmt::format("all {} scalers", count_text(r_.ranks, "rank's", "ranks'")));
  } else if (diverged) {
    monitor.diverged(step, non_finite, train_loss,
                     ctl[kCtlBadParams] > 0 ? count_text(ctl[kCtlBadParams], "rank holds", "ranks hold") + " some"
                                            : std::string("the all-reduced gradient holds inf or NaN"));
  } else {
    monitor.stop_after(step + 1, reading);
  }
  monitor.step_done(step + 1, train_loss);
  return stop_here;
}

void CudaRank::train() {
  GS_NVTX_RANGE(kMeasure);
  for (int64_t step = 0; step < r_.total; ++step) {
    GS_NVTX_RANGE(kStep);
    clock_.begin_step();
    StepCost& cost = r_.modeled->cost(step, rank_);
    cost.clear();
    double ctl[kControlCount] = {};
    begin_step(ctl);
    data_steps_.push_back(micro_batches(step, cost, ctl));
    if (r_.inject) inject_straggler(step);
    communicate(step, cost, ctl);
    {
      PhaseTimer t(clock_, Phase::kWait);  // the step's control values; waiting for the slowest rank
      r_.control->all_reduce_sum(rank_, ctl, kControlCount);
      r_.control->take_stats(rank_);
    }
    if (end_step(step, ctl)) break;
  }
  if (rank_ == 0) {  // the last update can overflow after the last loss was computed
    gpu::find_nonfinite(params_.get(), r_.n, flags_.get(), cs_);
    GS_CUDA_CHECK(cudaMemcpyAsync(flags_host_.get(), flags_.get(), sizeof(int), cudaMemcpyDeviceToHost, cs_));
    compute_.synchronize();
    r_.final_params_bad.store(flags_host_[0] != 0);
  }
  r_.res.steps[static_cast<size_t>(rank_)] = clock_.steps();
  if (rank_ == 0) r_.report_scaler = scaled_;
  r_.data_result.max_queue_depth[static_cast<size_t>(rank_)] = static_cast<int64_t>(loader_.max_queue_depth());
}

}  // namespace

RunResult run_training_cuda(const RunPlan& plan, const RunHooks& hooks) {
  GS_NVTX_RANGE(kRun);
  RunResult res;
  res.backend = "cuda";
  res.backend_reason = plan.backend.reason;
  const double wall0 = now_s();
  try {
    CudaRun run(plan, hooks, res, wall0);
    World world(run.ranks);
    world.run(
        [&](int rank) {
          GS_NVTX_RANGE(kRun);
          CudaRank(run, rank).train();
        },
        [&] {
          run.gcomm->abort();
          run.control->abort();
        });
    run.modeled->finish(res.steps_completed);
    res.precision = run.precision_result();
    res.data = std::move(run.data_result);
    res.compression = nullptr;
    res.staleness = nullptr;
    run.monitor->final_parameters_checked(run.final_params_bad.load() ? 1 : 0);
  } catch (const std::bad_alloc&) {
    res.set_disposition(Disposition::kFailed, fmt::format("out of host memory ({} per replica, {})",
                                                          count_text(res.num_params, "parameter"),
                                                          count_text(plan.shape.ranks, "rank")));
  } catch (const std::exception& e) {
    res.set_disposition(Disposition::kFailed, e.what());
  }
  res.wall_s = now_s() - wall0;
  return res;
}

}  // namespace gs
