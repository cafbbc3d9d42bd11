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
// Measured clock from CUDA event pairs per phase; modeled clock as on the host. Extend: a feature the loop learns
// drops its refusal from cuda_loop_issues (device.cpp) and adds its steps here.
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

}  // namespace

RunResult run_training_cuda(const RunPlan& plan, const RunHooks& hooks) {
  GS_NVTX_RANGE(kRun);
  const RunConfig& config = plan.config;
  RunResult res;
  res.backend = "cuda";
  res.backend_reason = plan.backend.reason;
  const double wall0 = now_s();
  const int ranks = plan.shape.ranks;
  const int64_t K = plan.shape.micro_batches;
  try {
    const CudaProbe& probe = cuda_status();
    GS_EXPECT(cuda_usable(probe), "cluster.backend cuda: no usable GPU (" + probe.error + ")");
    const std::vector<ConfigIssue> unsupported = cuda_loop_issues(config);
    if (!unsupported.empty()) throw Error(unsupported.front().path + ": " + unsupported.front().message);
    std::unique_ptr<Model> model = make_model(config);
    const DenseStack stack = dense_stack_from_config(config.model);
    std::unique_ptr<Dataset> data = hooks.make_dataset ? hooks.make_dataset(config) : make_dataset(config);
    const size_t n = model->num_params();
    GS_EXPECT(n == stack.num_params(), "cuda loop: the model's parameters are not its dense stack's");
    const int64_t in_dim = stack.widths.front(), out_dim = stack.widths.back();
    const bool classification = stack.loss == LossKind::kCrossEntropy;
    const int64_t total = planned_steps(config, data->steps_per_epoch());

    // Devices and communicators: nccl when every rank can have a GPU of its own (and NCCL is linked), else every rank
    // on GPU 0 through local (NCCL forbids two ranks of one communicator on one GPU).
    res.ranks_one_per_gpu = nccl_compiled() && ranks <= probe.device_count;
    std::vector<int> device_of(static_cast<size_t>(ranks), 0);
    if (res.ranks_one_per_gpu)
      for (int r = 0; r < ranks; ++r) device_of[static_cast<size_t>(r)] = r;
    const double deadline_s = wait_deadline_s(config.training.run_timeout_s);  // of every wait in a collective
    std::unique_ptr<GpuCommunicator> gcomm = res.ranks_one_per_gpu ? make_nccl_communicator(device_of, deadline_s)
                                                                   : make_local_communicator(ranks, 0, deadline_s);
    std::unique_ptr<Communicator> control = make_host_communicator(ranks, deadline_s);

    // The modeled clock: the host loop's cost model, and the all-reduce strategy made timing-only (it prices the
    // bucket collectives and the optimizer; it holds no buffers and is only asked to price).
    CostModel cost_model(config, *model);
    res.hardware = cost_model.hardware().name;
    StrategySetup setup{config, *model, *control, ranks, &cost_model, true};
    std::unique_ptr<SyncStrategy> pricing = make_strategy(setup);
    const std::vector<Bucket> buckets =
        make_buckets(model->tensors(), static_cast<size_t>(config.sync.first_bucket_mb * 1048576.0),
                     static_cast<size_t>(config.sync.bucket_mb * 1048576.0));

    // Input pipeline (loader per rank, no node cache here) priced as on the host.
    const StorageProfile storage = load_storage_profile(config.data.storage);
    const int ranks_per_node = std::max(1, std::min(ranks, cost_model.hardware().gpus_per_node));
    DataResult data_result;
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
    RunMonitor monitor(config, hooks, res, total, wall0);  // series, evaluation records, stops, outcomes
    std::vector<float> init(n);
    model->init_params(init.data(), static_cast<uint64_t>(config.training.seed));

    // Modeled clock, shared with rank_loop.cpp (lockstep_clock.h): slot [step % 3][rank]; rank 0 models step t - 1
    // after step t's control all-reduce (every rank priced t - 1 before it), the last step after the run.
    LockstepModeledClock modeled(cost_model, config, res);

    const OptimizerConfig& opt = config.training.optimizer;
    const bool adam = opt.kind == "adam" || opt.kind == "adamw";
    GS_EXPECT(adam || opt.kind == "sgd", "training.optimizer.kind: unknown optimizer '" + opt.kind + "'");
    GS_EXPECT(!opt.nesterov || opt.momentum > 0.0,
              "training.optimizer.nesterov: Nesterov momentum needs training.optimizer.momentum > 0");
    const bool inject = config.cluster.stragglers.inject;
    // Buckets start during the last micro-batch's backward (DDP overlap) with sync.overlap, under nccl and local (whose
    // reduction of a bucket waits on the communication stream for every rank's "bucket final" event, in start order).
    // Not with injected stragglers (the delay must come before any of the rank's communication, as the modeled clock
    // has it).
    const bool overlap = config.sync.overlap && !inject;
    std::atomic<bool> final_params_bad{false};
    // Precision: fp32 / tf32 (fp32 stack; tf32 with TF32 tensor-op GEMMs), or a mode of the mixed stack with the
    // host model's MixedSpec (mixed_spec, sim/model/model.h): bf16_mixed, fp16_mixed, fp8_mixed (fp32 master weights
    // and optimizer state; fp8: E4M3/E5M2 GEMM operands with delayed scaling, bf16 elsewhere).
    const PrecisionMode mode = plan.precision;
    const bool mixed = mode == PrecisionMode::kBf16Mixed || mode == PrecisionMode::kFp16Mixed ||
                       mode == PrecisionMode::kFp8Mixed;
    const MixedSpec spec = mixed_spec(precision_policy(config.precision));
    std::vector<MixedCounters> rank_counters(static_cast<size_t>(ranks));
    std::vector<std::optional<int64_t>> first_nonfinite(static_cast<size_t>(ranks));
    ScaledUpdate report_scaler(config.precision);  // rank 0's copy after the run (every rank's decides alike)
    // The local gradient's check before the all-reduce, where the host loop checks it (check_nonfinite there): a
    // reduced-precision mode or a loss scaler.
    const bool check_local = precision_policy(config.precision).emulated() || plan.scaler_active();
    uint64_t averaged_nonfinite = 0;  // rank 0's count of inf/NaN values in all-reduced gradients
    double trained_s = 0.0;
    World world(ranks);

    auto rank_main = [&](int rank) {
      GS_NVTX_RANGE(kRun);
      const int device = device_of[static_cast<size_t>(rank)];
      GS_CUDA_CHECK(cudaSetDevice(device));
      gpu::Stream compute;
      nvtx_name_stream(compute.get(), fmt::format("rank {} compute", rank).c_str());
      gcomm->set_compute_stream(rank, compute.get());
      const cudaStream_t cs = compute.get();
      gpu::BlasHandle blas(cs);
      if (mode == PrecisionMode::kTf32) gpu::set_tf32_math(blas, true);  // fp32 GEMMs on TF32 tensor cores
      PhaseClock clock;
      clock.reserve(static_cast<size_t>(std::min<int64_t>(total, 1 << 16)));

      gpu::DeviceBuffer<float> params(n, "parameters"), grad(n, "gradient");
      gpu::DeviceBuffer<float> state_a(adam || opt.momentum != 0.0 ? n : 0, "optimizer state");
      gpu::DeviceBuffer<float> state_b(adam ? n : 0, "optimizer state");
      GS_CUDA_CHECK(cudaMemcpyAsync(params.get(), init.data(), n * sizeof(float), cudaMemcpyHostToDevice, cs));
      if (state_a.size() > 0) GS_CUDA_CHECK(cudaMemsetAsync(state_a.get(), 0, state_a.bytes(), cs));
      if (state_b.size() > 0) GS_CUDA_CHECK(cudaMemsetAsync(state_b.get(), 0, state_b.bytes(), cs));
      int64_t capacity = std::max<int64_t>(plan.shape.batch_per_rank, 1);
      gpu::DenseScratchGpu scratch = gpu::make_dense_scratch_gpu(stack, capacity);
      std::optional<gpu::MixedScratchGpu> mixed_scratch;
      if (mixed) mixed_scratch = gpu::make_mixed_scratch_gpu(stack, capacity, spec, K);
      ScaledUpdate scaled(config.precision);
      MixedCounters& counters = rank_counters[static_cast<size_t>(rank)];
      std::array<StagingSlot, 2> slots;
      for (StagingSlot& s : slots) s.reserve(capacity, in_dim, out_dim, classification);
      gpu::DeviceBuffer<double> loss_sums(static_cast<size_t>(K), "micro-batch loss sums");
      gpu::PinnedBuffer<double> loss_host(static_cast<size_t>(K), "micro-batch loss sums");
      // Non-finite flags: [0] parameters entering the step, [1] the all-reduced gradient, [2] this rank's local
      // gradient (each bucket checked just before its all-reduce starts; the report's first_nonfinite_step).
      gpu::DeviceBuffer<int> flags(3, "non-finite flags");
      gpu::PinnedBuffer<int> flags_host(3, "non-finite flags");
      gpu::DeviceBuffer<unsigned long long> nonfinite_count(2, "non-finite count");
      gpu::PinnedBuffer<unsigned long long> nonfinite_count_host(2, "non-finite count");
      gpu::Event comm_begin, comm_end, opt_begin, opt_end;
      std::optional<DeviceEvalSet> eval;
      compute.synchronize();
      // Declared after the rank's device buffers, so it runs first when a throw unwinds this rank: the communicators
      // are aborted (nccl: every rank's ncclCommAbort, ending NCCL kernels whose peers are gone) before those
      // buffers' cudaFree, which waits for the device.
      struct AbortOnThrow {
        GpuCommunicator& comm;
        int uncaught = std::uncaught_exceptions();
        ~AbortOnThrow() {
          if (std::uncaught_exceptions() > uncaught) comm.abort();
        }
      } abort_on_throw{*gcomm};

      Loader loader(*data, config, nullptr, rank, total, config.data.prefetch);
      std::vector<DataStepRecord>& data_steps = data_result.steps[static_cast<size_t>(rank)];
      data_steps.reserve(static_cast<size_t>(std::min<int64_t>(total, 1 << 16)));
      const int node_first = rank / ranks_per_node * ranks_per_node;
      const double readers = static_cast<double>(std::min(ranks_per_node, ranks - node_first));
      const double window =
          static_cast<double>(std::max<int64_t>(1, config.data.prefetch) * plan.shape.batch_per_rank);
      Batch batch;
      DataCounts micro_counts;

      // Evaluation of this rank's parameters on the whole evaluation set (rank 0): (mean loss, accuracy or nullopt).
      auto evaluate = [&]() -> std::pair<double, std::optional<double>> {
        const Batch& e = data->eval_set();
        if (!eval) {
          eval.emplace();
          eval->count = e.count;
          // Uploaded on the compute stream that reads it (a synchronous cudaMemcpy would run on the legacy stream,
          // which the non-blocking compute stream does not wait for).
          eval->x = gpu::DeviceBuffer<float>(e.x.size(), "evaluation inputs");
          gpu::copy_to_device_async(eval->x.get(), e.x.data(), e.x.size() * sizeof(float), cs);
          if (classification) {
            eval->labels = gpu::DeviceBuffer<int32_t>(e.labels.size(), "evaluation labels");
            gpu::copy_to_device_async(eval->labels.get(), e.labels.data(), e.labels.size() * sizeof(int32_t), cs);
          } else {
            eval->y = gpu::DeviceBuffer<float>(e.y.size(), "evaluation targets");
            gpu::copy_to_device_async(eval->y.get(), e.y.data(), e.y.size() * sizeof(float), cs);
          }
          const auto chunks = static_cast<size_t>((e.count + kEvalChunk - 1) / kEvalChunk);
          eval->chunk_loss = gpu::DeviceBuffer<double>(std::max<size_t>(chunks, 1), "evaluation loss sums");
          eval->chunk_correct =
              gpu::DeviceBuffer<unsigned long long>(std::max<size_t>(chunks, 1), "evaluation correct counts");
          eval->scratch = gpu::make_dense_scratch_gpu(stack, std::min<int64_t>(kEvalChunk, std::max<int64_t>(e.count, 1)));
        }
        const int64_t count = eval->count;
        if (count == 0) return {std::nan(""), std::nullopt};
        const auto chunks = static_cast<size_t>((count + kEvalChunk - 1) / kEvalChunk);
        for (size_t c = 0; c < chunks; ++c) {
          const int64_t first = static_cast<int64_t>(c) * kEvalChunk;
          const int64_t rows = std::min(kEvalChunk, count - first);
          const int32_t* labels = classification ? eval->labels.get() + first : nullptr;
          const float* y = classification ? nullptr : eval->y.get() + first * out_dim;
          gpu::dense_stack_forward_gpu(blas, eval->scratch, stack, params.get(), eval->x.get() + first * in_dim, rows, y,
                                       labels, eval->chunk_loss.get() + c);
          if (classification)
            gpu::count_correct(eval->chunk_correct.get() + c, eval->scratch.pre.back().get(), labels, rows, out_dim, cs);
        }
        std::vector<double> loss(chunks);
        std::vector<unsigned long long> correct(chunks, 0);
        GS_CUDA_CHECK(cudaMemcpyAsync(loss.data(), eval->chunk_loss.get(), chunks * sizeof(double),
                                      cudaMemcpyDeviceToHost, cs));
        if (classification)
          GS_CUDA_CHECK(cudaMemcpyAsync(correct.data(), eval->chunk_correct.get(),
                                        chunks * sizeof(unsigned long long), cudaMemcpyDeviceToHost, cs));
        compute.synchronize();
        double loss_sum = 0.0;
        unsigned long long right = 0;
        for (size_t c = 0; c < chunks; ++c) {  // chunk order, as the host's evaluate()
          loss_sum += loss[c];
          right += correct[c];
        }
        std::optional<double> acc;
        if (classification) acc = static_cast<double>(right) / static_cast<double>(count);
        return {loss_sum / static_cast<double>(count), acc};
      };

      GS_NVTX_RANGE(kMeasure);
      for (int64_t step = 0; step < total; ++step) {
        GS_NVTX_RANGE(kStep);
        clock.begin_step();
        StepCost& cost = modeled.cost(step, rank);
        cost.clear();
        double ctl[kControlCount] = {};
        if (rank == 0) {
          const StopReading reading = monitor.read_stop();
          ctl[kCtlStop] = reading.stop ? 1.0 : 0.0;
          ctl[kCtlTimeout] = reading.timed_out ? 1.0 : 0.0;
        }
        gpu::find_nonfinite(params.get(), n, flags.get(), cs);
        GS_CUDA_CHECK(cudaMemsetAsync(flags.get() + 2, 0, sizeof(int), cs));
        GS_CUDA_CHECK(cudaMemsetAsync(grad.get(), 0, grad.bytes(), cs));
        GS_CUDA_CHECK(cudaMemsetAsync(loss_sums.get(), 0, loss_sums.bytes(), cs));
        if (mixed) gpu::reset_counts(*mixed_scratch, cs);
        const float loss_scale = scaled.loss_scale();  // this step's backward seed factor
        DataStepRecord data_step;
        size_t next_bucket = 0;  // buckets started so far this step (in bucket order: last layers first)
        // Starts every bucket not yet started whose gradient elements all lie at or after first_final (final in
        // stream order).
        auto start_buckets = [&](size_t first_final) {
          for (; next_bucket < buckets.size() && buckets[next_bucket].begin >= first_final; ++next_bucket) {
            const Bucket& b = buckets[next_bucket];
            GS_NVTX_RANGE_BYTES(kCommunicate, (b.end - b.begin) * sizeof(float));
            // The local gradient's check, in stream order before the in-place all-reduce overwrites the bucket.
            if (check_local) gpu::find_nonfinite(grad.get() + b.begin, b.end - b.begin, flags.get() + 2, cs, true);
            gcomm->all_reduce_sum_start(rank, grad.get() + b.begin, b.end - b.begin);
          }
        };
        for (int64_t k = 0; k < K; ++k) {
          GS_NVTX_RANGE(kMicroStep);
          {
            PhaseTimer t(clock, Phase::kData);  // the wait for the loader (host clock)
            loader.next(batch, micro_counts);
          }
          data_step.counts += micro_counts;
          if (batch.count == 0) continue;
          GS_EXPECT(batch.in_dim == in_dim, fmt::format("cuda loop: batch in_dim {} != model.layers[0] {}",
                                                        batch.in_dim, in_dim));
          if (classification) {
            GS_EXPECT(batch.labels.size() >= static_cast<size_t>(batch.count), "cuda loop: batch labels short");
            for (int64_t r = 0; r < batch.count; ++r) {
              const int32_t label = batch.labels[static_cast<size_t>(r)];
              GS_EXPECT(label >= 0 && label < out_dim,
                        fmt::format("cuda loop: label {} of sample {} outside [0, {})", label, r, out_dim));
            }
          } else {
            GS_EXPECT(batch.out_dim == out_dim && batch.y.size() >= static_cast<size_t>(batch.count * out_dim),
                      fmt::format("cuda loop: batch targets ({} per sample) != the model's {} outputs",
                                  batch.out_dim, out_dim));
          }
          if (batch.count > capacity) {  // inline micro-batches may exceed b: grow to the largest seen
            for (StagingSlot& s : slots) s.harvest(clock);
            compute.synchronize();
            capacity = batch.count;
            scratch = gpu::make_dense_scratch_gpu(stack, capacity);
            if (mixed) {  // keeps this step's counts: read them, then start the new scratch's at its next micro-batch
              gpu::counters_to_host(*mixed_scratch, counters, cs);
              const int64_t done = mixed_scratch->backward_index;
              gpu::MixedScratchGpu grown = gpu::make_mixed_scratch_gpu(stack, capacity, spec, K);
              // fp8: the delayed scalings (scales and amax histories) go on; they do not depend on the rows.
              grown.fp8_state = std::move(mixed_scratch->fp8_state);
              grown.fp8_history = std::move(mixed_scratch->fp8_history);
              mixed_scratch = std::move(grown);
              gpu::reset_counts(*mixed_scratch, cs);
              mixed_scratch->backward_index = done;
            }
            for (StagingSlot& s : slots) s.reserve(capacity, in_dim, out_dim, classification);
          }
          StagingSlot& slot = slots[static_cast<size_t>(k % 2)];
          slot.harvest(clock);  // micro-batch k - 2 is done with this slot's pinned memory
          const auto rows = static_cast<size_t>(batch.count);
          std::memcpy(slot.pin_x.get(), batch.x.data(), rows * static_cast<size_t>(in_dim) * sizeof(float));
          slot.copy_begin.record(cs);
          GS_CUDA_CHECK(cudaMemcpyAsync(slot.x.get(), slot.pin_x.get(), rows * static_cast<size_t>(in_dim) * sizeof(float),
                                        cudaMemcpyHostToDevice, cs));
          if (classification) {
            std::memcpy(slot.pin_labels.get(), batch.labels.data(), rows * sizeof(int32_t));
            GS_CUDA_CHECK(cudaMemcpyAsync(slot.labels.get(), slot.pin_labels.get(), rows * sizeof(int32_t),
                                          cudaMemcpyHostToDevice, cs));
          } else {
            std::memcpy(slot.pin_y.get(), batch.y.data(), rows * static_cast<size_t>(out_dim) * sizeof(float));
            GS_CUDA_CHECK(cudaMemcpyAsync(slot.y.get(), slot.pin_y.get(),
                                          rows * static_cast<size_t>(out_dim) * sizeof(float), cudaMemcpyHostToDevice,
                                          cs));
          }
          const float* y = classification ? nullptr : slot.y.get();
          const int32_t* labels = classification ? slot.labels.get() : nullptr;
          slot.forward_begin.record(cs);
          {
            GS_NVTX_RANGE(kForward);
            if (mixed) {
              gpu::dense_stack_forward_mixed_gpu(blas, scratch, *mixed_scratch, stack, params.get(), slot.x.get(),
                                                 batch.count, y, labels, loss_sums.get() + k);
            } else {
              gpu::dense_stack_forward_gpu(blas, scratch, stack, params.get(), slot.x.get(), batch.count, y, labels,
                                           loss_sums.get() + k);
            }
          }
          slot.backward_begin.record(cs);
          {
            GS_NVTX_RANGE(kBackward);
            std::function<void(int64_t)> after_layer;
            if (overlap && k + 1 == K)
              after_layer = [&](int64_t layer) { start_buckets(stack.weight_offset(layer)); };
            if (mixed) {
              gpu::dense_stack_backward_mixed_gpu(blas, grad.get(), scratch, *mixed_scratch, stack, batch.count, y,
                                                  labels, loss_scale, after_layer);
            } else {
              gpu::dense_stack_backward_gpu(blas, grad.get(), scratch, stack, params.get(), slot.x.get(), batch.count,
                                            y, labels, after_layer);
            }
          }
          slot.backward_end.record(cs);
          slot.pending = true;
          ctl[kCtlSamples] += static_cast<double>(batch.count);
          cost_model.add_micro_batch(cost, batch.count, k + 1 == K);
          price_precision_micro_batch(cost, mode, static_cast<double>(n));  // format casts
        }
        {
          const DataCounts& dc = data_step.counts;
          double fetch =
              storage_read_s(storage, static_cast<double>(dc.storage_samples), dc.storage_bytes, readers, window);
          if (dc.peer_transfers > 0)
            fetch += static_cast<double>(dc.peer_transfers) *
                     cost_model.collectives().p2p_s(dc.peer_bytes / static_cast<double>(dc.peer_transfers));
          data_step.fetch_modeled_s = fetch;
          modeled.set_fetch_s(step, rank, fetch);
          data_steps.push_back(data_step);
        }
        if (inject) {
          // cluster.stragglers.inject: this rank's compute is stretched by its straggler factor for real (a host
          // sleep of (f - 1) x the step's measured forward + backward, before its all-reduce starts), so the other
          // ranks wait for it in the collectives. Factors <= 1 cannot speed a GPU up and add nothing.
          for (StagingSlot& s : slots) s.harvest(clock);
          const double f = straggler_factor(config.cluster.stragglers, static_cast<uint64_t>(config.training.seed),
                                            step, rank);
          const StepTimes& now = clock.current();
          const double compute_s = now.phase_s[static_cast<size_t>(Phase::kForward)] +
                                   now.phase_s[static_cast<size_t>(Phase::kBackward)];
          if (f > 1.0 && compute_s > 0.0) {
            const double delay_s = (f - 1.0) * compute_s;
            const double t0 = now_s();
            std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
            clock.add(Phase::kBackward, now_s() - t0);
          }
        }
        // The bucket all-reduces of the gradient sum not started during backward (all of them without overlap), in
        // one group, then their wait. `communicate` is measured from the end of backward: the exposed part.
        comm_begin.record(cs);
        gcomm->group_begin(rank);
        start_buckets(0);
        gcomm->group_end(rank);
        gcomm->all_reduce_wait(rank);
        comm_end.record(cs);
        // The all-reduced gradient's non-finite check (an inf/NaN in any rank's local gradient reaches the sum), then
        // the step's loss sums and flags to the host.
        gpu::find_nonfinite(grad.get(), n, flags.get() + 1, cs);
        GS_CUDA_CHECK(cudaMemcpyAsync(loss_host.get(), loss_sums.get(), loss_sums.bytes(), cudaMemcpyDeviceToHost, cs));
        GS_CUDA_CHECK(cudaMemcpyAsync(flags_host.get(), flags.get(), 3 * sizeof(int), cudaMemcpyDeviceToHost, cs));
        for (StagingSlot& s : slots) s.harvest(clock);
        compute.synchronize();  // loss sums and flags are on the host now
        if (mixed) gpu::counters_to_host(*mixed_scratch, counters, cs);
        {
          StepInput pin;  // the modeled step: the strategy's collectives and optimizer
          pin.rank = rank;
          pin.step = step;
          pin.local_samples = ctl[kCtlSamples];
          pin.cost = &cost;
          pricing->price(pin);
        }
        for (int64_t k = 0; k < K; ++k) ctl[kCtlLossSum] += loss_host[static_cast<size_t>(k)];  // micro-batch order
        ctl[kCtlBadParams] = flags_host[0] != 0 ? 1.0 : 0.0;
        ctl[kCtlBadGrad] = flags_host[1] != 0 ? 1.0 : 0.0;
        if (check_local && flags_host[2] != 0 && !first_nonfinite[static_cast<size_t>(rank)])
          first_nonfinite[static_cast<size_t>(rank)] = step + 1;
        if (flags_host[1] != 0 && rank == 0) {  // how many values (rare: only on a step whose sum holds one)
          gpu::count_rounding(FloatFormat::kFp32, grad.get(), n, nonfinite_count.get(), cs);
          GS_CUDA_CHECK(cudaMemcpyAsync(nonfinite_count_host.get(), nonfinite_count.get(), 2 * sizeof(unsigned long long),
                                        cudaMemcpyDeviceToHost, cs));
          compute.synchronize();
          averaged_nonfinite += nonfinite_count_host[1];
        }
        {
          PhaseTimer t(clock, Phase::kWait);  // the step's control values; waiting for the slowest rank
          control->all_reduce_sum(rank, ctl, kControlCount);
          control->take_stats(rank);
        }
        if (ctl[kCtlSamples] <= 0) throw Error(fmt::format("step {} has no samples on any rank", step + 1));
        const double train_loss = ctl[kCtlLossSum] / ctl[kCtlSamples];
        // Under a mixed mode or a loss scaler an inf/NaN gradient is the scaler's (skip and back off), not a divergence;
        // under an active scaler so is an inf/NaN loss (the window is skipped, as the host loop's strategies do).
        const bool grad_bad = ctl[kCtlBadGrad] > 0;
        const bool loss_bad = !std::isfinite(train_loss);
        NonFinite non_finite = ctl[kCtlBadParams] > 0                             ? NonFinite::kParameters
                               : loss_bad && !scaled.scaler().active()           ? NonFinite::kTrainLoss
                               : grad_bad && !scaled.handles_nonfinite()         ? NonFinite::kGradient
                                                                                 : NonFinite::kNone;
        bool diverged = non_finite != NonFinite::kNone;
        // The scaler's decision, the same on every rank (the flag is the all-reduced gradient's, the loss every
        // rank's): a skipped step runs no optimizer and does not count as an update (GradScaler.step).
        const float unscale = scaled.unscale_factor();  // this step's scale, before decide() updates it
        const bool apply = !diverged && scaled.decide(grad_bad, step + 1, loss_bad);
        if (!diverged && scaled.scaler().exhausted()) {  // backed off past 2^-128: it cannot recover (every rank alike)
          non_finite = NonFinite::kLossScale;
          diverged = true;
        }
        if (apply) {
          GS_NVTX_RANGE(kOptimizer);
          opt_begin.record(cs);
          gpu::divide(grad.get(), n, static_cast<float>(ctl[kCtlSamples]), cs);  // the average, as allreduce.cpp
          if (unscale != 1.0f) gpu::scale(grad.get(), n, unscale, cs);         // torch's unscale_, after the average
          const double lr = learning_rate(config.training.schedule, opt.lr, step, total);
          const int64_t t = scaled.update_count();  // updates applied including this one
          if (adam) {
            const AdamScalars s =
                adam_scalars(lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, opt.kind == "adamw", t,
                             opt.first_moment == "lerp");
            gpu::adam_update(params.get(), grad.get(), state_a.get(), state_b.get(), n, s, cs);
          } else {
            SgdScalars s;
            s.lr = static_cast<float>(lr);
            s.momentum = static_cast<float>(opt.momentum);
            s.weight_decay = static_cast<float>(opt.weight_decay);
            s.nesterov = opt.nesterov;
            s.first_step = t == 1;
            gpu::sgd_update(params.get(), grad.get(), state_a.size() > 0 ? state_a.get() : nullptr, n, s, cs);
          }
          opt_end.record(cs);
          compute.synchronize();
          clock.add(Phase::kOptimizer, seconds_between(opt_begin, opt_end));
        }
        {
          const double comm_s = seconds_between(comm_begin, comm_end);
          const CommStats st = gcomm->take_stats(rank);
          clock.add(Phase::kCommunicate, comm_s);
          // local: the host time all_reduce_wait spends until every rank has started this rank's buckets is waiting
          // for other ranks, not communication.
          if (!res.ranks_one_per_gpu) clock.move(Phase::kCommunicate, Phase::kWait, std::min(st.wait_s, comm_s));
          clock.add_bytes(st.bytes_sent);
        }
        clock.end_step();
        if (rank == 0) {
          trained_s += clock.steps().back().step_s;
          monitor.record(step + 1, trained_s, train_loss, ctl[kCtlSamples]);
          if (step > 0) modeled.model_step(step - 1);
        }
        StopReading reading;
        reading.stop = ctl[kCtlStop] > 0;
        reading.timed_out = ctl[kCtlTimeout] > 0;
        // Every rank saw the same control values, so every rank stops at the same step without a barrier (rank 0
        // records the outcome).
        const bool stop_here = diverged || (reading.any() && step + 1 < total);
        if (rank == 0) {
          if (!diverged && monitor.eval_due(step + 1)) {
            GS_NVTX_RANGE(kEval);
            auto [loss, acc] = evaluate();
            monitor.record_eval(EvalResult{loss, acc});
          }
          if (non_finite == NonFinite::kLossScale) {
            monitor.diverged(step + 1, non_finite, train_loss, fmt::format("all {} scalers", count_text(ranks, "rank's", "ranks'")));
          } else if (diverged) {
            monitor.diverged(step, non_finite, train_loss,
                             ctl[kCtlBadParams] > 0 ? count_text(ctl[kCtlBadParams], "rank holds", "ranks hold") + " some"
                                                    : std::string("the all-reduced gradient holds inf or NaN"));
          } else {
            monitor.stop_after(step + 1, reading);
          }
          monitor.step_done(step + 1, train_loss);
        }
        if (stop_here) break;
      }
      if (rank == 0) {  // the last update can overflow after the last loss was computed
        gpu::find_nonfinite(params.get(), n, flags.get(), cs);
        GS_CUDA_CHECK(cudaMemcpyAsync(flags_host.get(), flags.get(), sizeof(int), cudaMemcpyDeviceToHost, cs));
        compute.synchronize();
        final_params_bad.store(flags_host[0] != 0);
      }
      res.steps[static_cast<size_t>(rank)] = clock.steps();
      if (rank == 0) report_scaler = scaled;
      data_result.max_queue_depth[static_cast<size_t>(rank)] = static_cast<int64_t>(loader.max_queue_depth());
    };
    world.run(rank_main, [&] {
      gcomm->abort();
      control->abort();
    });
    modeled.finish(res.steps_completed);

    PrecisionResult p;  // as the host loop's precision_result: rank 0's scaler, counts summed over ranks
    p.mode = config.precision.mode;
    const LossScalerSettings settings = loss_scaler_settings(config.precision);
    p.loss_scale = settings.kind == LossScaleKind::kDynamic  ? "dynamic"
                   : settings.kind == LossScaleKind::kStatic ? "static"
                                                             : "none";
    p.loss_scale_trajectory = report_scaler.scaler().trajectory();
    p.final_loss_scale = report_scaler.scaler().scale();
    p.skipped_steps = report_scaler.scaler().skipped_step_list();
    p.skipped_nonfinite_loss = report_scaler.scaler().skipped_for_loss();
    p.skipped_nonfinite_gradient = report_scaler.scaler().skipped_for_gradient();
    // The averaged (all-reduced) gradient's checks: every step's flag, and on a flagged step the count of its values.
    p.averaged_grad_nonfinite = averaged_nonfinite;
    p.first_nonfinite_averaged_step = report_scaler.first_nonfinite_step();
    for (const MixedCounters& c : rank_counters) {
      p.grad_values += c.grad_values;
      p.grad_underflow += c.grad_underflow;
      p.grad_nonfinite += c.grad_nonfinite;
    }
    p.first_nonfinite_step = first_nonfinite;
    p.bytes = bytes_per_param(mode, adam ? 2 : (opt.momentum != 0.0 ? 1 : 0));
    res.precision = p;
    res.data = std::move(data_result);
    res.compression = nullptr;
    res.staleness = nullptr;
    monitor.final_parameters_checked(final_params_bad.load() ? 1 : 0);
  } catch (const std::bad_alloc&) {
    res.set_disposition(Disposition::kFailed,
                        fmt::format("out of host memory ({} per replica, {})", count_text(res.num_params, "parameter"), count_text(ranks, "rank")));
  } catch (const std::exception& e) {
    res.set_disposition(Disposition::kFailed, e.what());
  }
  res.wall_s = now_s() - wall0;
  return res;
}

}  // namespace gs
