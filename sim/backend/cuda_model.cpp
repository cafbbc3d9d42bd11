// The cuda backend's GPU model (cuda_model.h): the host mlp/linear model's tensors and init with forward,
// backward and evaluation through kernels/cuda_dense.h (fp32) and kernels/cuda_dense_mixed.h (bf16/fp16 mixed), one
// GPU workspace per rank: fp32 and tf32 through the fp32 stack (tf32 as the handle's math mode), bf16_mixed,
// fp16_mixed, fp16_pure and fp8_mixed through the mixed stack with the host model's MixedSpec. A new precision mode
// gets its branch in GpuDenseModel::forward / backward.
#include "sim/backend/cuda_model.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "kernels/cuda_dense.h"
#include "kernels/cuda_dense_mixed.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_runtime.h"
#include "kernels/dense.h"
#include "sim/core/error.h"
#include "sim/backend/cuda_element_ops.h"
#include "sim/backend/cuda_probe.h"

namespace gs {
namespace {

// Which GPU stack the last forward ran (backward follows it, as the host model's last_forward_mixed).
enum class GpuPath { kNone, kFp32, kFp32Scaled, kMixed };

// One rank's device state. Bound to a device on its first forward/evaluate (the batch's rank); every call sets that
// device in the calling thread first (evaluation may run on another thread than the rank's).
struct GpuWorkspace final : Workspace {
  int64_t max_rows = 0;
  int device = -1;
  std::optional<gpu::Stream> stream;               // staged, or a resident evaluation's: the workspace's own stream
  cudaStream_t st = nullptr;                       // the stream its work runs on (own, or the resident memory's)
  // Resident evaluation (bound by evaluate): the rank that owns the evaluated parameters (-1: none), and the event
  // recorded on its stream before each evaluation, which st waits for (cudaStreamWaitEvent) before reading them.
  int owner = -1;
  std::optional<gpu::Event> owner_ready;
  std::unique_ptr<gpu::BlasHandle> blas;
  std::optional<gpu::DenseScratchGpu> scratch;
  std::optional<gpu::MixedScratchGpu> mixed;
  gpu::DeviceBuffer<float> params, grad, grad_scaled, x, y;
  gpu::DeviceBuffer<int32_t> labels;
  // The batch's pinned staging (upload_batch): the rows are copied here on the host, then to x / y / labels with one
  // asynchronous copy each; `staged` is recorded after them, and waited for before the slot is written again.
  gpu::PinnedBuffer<float> pin_x, pin_y;
  gpu::PinnedBuffer<int32_t> pin_labels;
  std::optional<gpu::Event> staged;
  gpu::DeviceBuffer<double> loss_sum;                // one device double
  gpu::DeviceBuffer<unsigned long long> counts;      // count_rounding's (underflow, non-finite), or count_correct's
  const float* uploaded_params = nullptr;            // the host parameters the device copy was made from
  GpuPath last = GpuPath::kNone;
  int64_t last_rows = 0;

  ~GpuWorkspace() override {
    if (device >= 0) (void)cudaSetDevice(device);  // free on the device that owns the memory
    blas.reset();
  }
};

GpuWorkspace& as_gpu_workspace(Workspace& ws) {
  auto* w = dynamic_cast<GpuWorkspace*>(&ws);
  GS_EXPECT(w != nullptr, "cuda model: workspace was not made by this model");
  return *w;
}

class GpuDenseModel final : public HostShapedModel {
 public:
  // `resident`: parameters and gradients are device buffers of that memory (the backend seam, cuda_backend.h); null:
  // host buffers staged through the workspace's copies.
  GpuDenseModel(std::unique_ptr<Model> host, DenseStack stack, int device_count, bool tf32,
                CudaElementOps* resident = nullptr)
      : HostShapedModel(std::move(host)), stack_(std::move(stack)), device_count_(std::max(device_count, 1)),
        tf32_(tf32), resident_(resident) {
    GS_EXPECT(HostShapedModel::host().num_params() == stack_.num_params(),
              "cuda model: the host model's parameters are not its dense stack's");
  }

  // No device work here: the device is known at the first batch (its rank).
  std::unique_ptr<Workspace> make_workspace(int64_t max_batch) const override {
    GS_EXPECT(max_batch >= 1, fmt::format("cuda model: workspace for {} samples", max_batch));
    auto ws = std::make_unique<GpuWorkspace>();
    ws->max_rows = max_batch;
    return ws;
  }

  double forward(const float* params, const Batch& batch, Workspace& ws, const PrecisionPolicy& p) const override {
    GpuWorkspace& w = as_gpu_workspace(ws);
    check_batch(batch, 0, batch.count, w.max_rows);
    bind(w, batch.rank, false);
    GS_EXPECT(w.owner < 0, "cuda model: a workspace first used by evaluate is for evaluations only");
    const cudaStream_t st = w.st;
    const float* dparams = device_params(w, params, true);
    upload_batch(w, batch, 0, batch.count);
    w.last_rows = batch.count;
    if (p.mode == PrecisionMode::kFp32 || p.mode == PrecisionMode::kTf32) {  // tf32: the handle's math mode (bind)
      w.last = p.loss_scale != 1.0f ? GpuPath::kFp32Scaled : GpuPath::kFp32;
      gpu::dense_stack_forward_gpu(*w.blas, *w.scratch, stack_, dparams, w.x.get(), batch.count, targets(w),
                                   labels(w), w.loss_sum.get());
    } else if (p.emulated()) {
      w.last = GpuPath::kMixed;
      const MixedSpec spec = mixed_spec(p);
      // Made once per workspace (the policy's mode is the run's): fp8's delayed scalings live on in it, as in the host
      // model's scratch.
      if (!w.mixed || w.mixed->spec.format != spec.format || w.mixed->spec.fp8_gemm != spec.fp8_gemm ||
          w.mixed->spec.grad_in_format != spec.grad_in_format)
        w.mixed = gpu::make_mixed_scratch_gpu(stack_, w.max_rows, spec, 1);
      gpu::dense_stack_forward_mixed_gpu(*w.blas, *w.scratch, *w.mixed, stack_, dparams, w.x.get(),
                                         batch.count, targets(w), labels(w), w.loss_sum.get());
    } else {
      throw Error(fmt::format("cuda model: precision.mode {} has no GPU forward in this version",
                              precision_mode_name(p.mode)));
    }
    double loss = 0.0;
    GS_CUDA_CHECK(cudaMemcpyAsync(&loss, w.loss_sum.get(), sizeof(double), cudaMemcpyDeviceToHost, st));
    GS_CUDA_CHECK(cudaStreamSynchronize(st));
    return loss;
  }

  void backward(const float* params, const Batch& batch, Workspace& ws, float* grad,
                const PrecisionPolicy& p) const override {
    GpuWorkspace& w = as_gpu_workspace(ws);
    GS_EXPECT(w.last != GpuPath::kNone && w.last_rows == batch.count,
              "cuda model: backward needs the forward of the same batch first");
    GS_CUDA_CHECK(cudaSetDevice(w.device));
    const cudaStream_t st = w.st;
    const size_t n = stack_.num_params();
    const float* dparams = device_params(w, params, false);  // staged: a no-op after this batch's forward
    // Resident: backward adds into the caller's device gradient; staged: into the workspace's copy of the host one.
    float* dgrad = resident_ != nullptr ? grad : w.grad.get();
    if (resident_ == nullptr)
      GS_CUDA_CHECK(cudaMemcpyAsync(w.grad.get(), grad, n * sizeof(float), cudaMemcpyHostToDevice, st));
    if (w.last == GpuPath::kFp32) {
      gpu::dense_stack_backward_gpu(*w.blas, dgrad, *w.scratch, stack_, dparams, w.x.get(), batch.count, targets(w),
                                    labels(w));
    } else if (w.last == GpuPath::kFp32Scaled) {
      // The gradient of loss_scale x the loss sum: the unscaled gradient into a zeroed buffer, times the scale, added.
      GS_CUDA_CHECK(cudaMemsetAsync(w.grad_scaled.get(), 0, n * sizeof(float), st));
      gpu::dense_stack_backward_gpu(*w.blas, w.grad_scaled.get(), *w.scratch, stack_, dparams, w.x.get(),
                                    batch.count, targets(w), labels(w));
      gpu::scale(w.grad_scaled.get(), n, p.loss_scale, st);
      gpu::count_rounding(FloatFormat::kFp32, w.grad_scaled.get(), n, w.counts.get(), st);  // [1]: non-finite
      gpu::add_into(dgrad, w.grad_scaled.get(), n, st);
      unsigned long long c[2] = {0, 0};
      GS_CUDA_CHECK(cudaMemcpyAsync(c, w.counts.get(), sizeof c, cudaMemcpyDeviceToHost, st));
      GS_CUDA_CHECK(cudaStreamSynchronize(st));
      w.precision.grad_nonfinite += c[1];
    } else {
      gpu::reset_counts(*w.mixed, st);
      gpu::dense_stack_backward_mixed_gpu(*w.blas, dgrad, *w.scratch, *w.mixed, stack_, batch.count,
                                          targets(w), labels(w), p.loss_scale);
      MixedCounters c;
      gpu::counters_to_host(*w.mixed, c, st);  // synchronizes
      w.precision.grad_values += c.grad_values;
      w.precision.grad_underflow += c.grad_underflow;
      w.precision.grad_nonfinite += c.grad_nonfinite;
    }
    if (resident_ == nullptr) {
      GS_CUDA_CHECK(cudaMemcpyAsync(grad, w.grad.get(), n * sizeof(float), cudaMemcpyDeviceToHost, st));
      GS_CUDA_CHECK(cudaStreamSynchronize(st));
    }
    // Staged: the host copy is final only now, so every layer is announced after the download, last layer first.
    // Resident: the gradient kernels are enqueued on the rank's stream, before anything a subscriber enqueues or
    // orders after it (a bucket's all-reduce waits for the stream's work so far), so the same announcements hold.
    for (int64_t l = stack_.num_layers() - 1; l >= 0; --l)
      announce_layer(ws, stack_.weight_offset(l), stack_.weight_offset(l + 1));
  }

  // fp32 forward in chunks of the workspace's capacity (as the host model), loss sums added in double on the host.
  // Resident: the evaluated parameters are rank 0's device buffer, read on the workspace's own stream (bound here)
  // after the work rank 0's stream holds now (an event recorded there and waited for), so an evaluation from another
  // thread (the parameter server's progress points) neither runs on rank 0's stream nor lands between the events
  // that time rank 0's phases. Returns after its stream is done (each chunk's sums are read back).
  EvalSums evaluate(const float* params, const Batch& batch, Workspace& ws) const override {
    GpuWorkspace& w = as_gpu_workspace(ws);
    EvalSums sums;
    if (batch.count == 0) return sums;
    bind(w, resident_ != nullptr ? 0 : batch.rank, true);
    const cudaStream_t st = w.st;
    if (w.owner >= 0) {  // the rank's stream now (CudaElementOps::set_stream may have changed it)
      w.owner_ready->record(resident_->stream(w.owner));
      GS_CUDA_CHECK(cudaStreamWaitEvent(st, w.owner_ready->get(), 0));
    }
    const float* dparams = device_params(w, params, true);
    const int64_t out_dim = stack_.widths.back();
    for (int64_t first = 0; first < batch.count; first += w.max_rows) {
      const int64_t rows = std::min(w.max_rows, batch.count - first);
      check_batch(batch, first, rows, w.max_rows);
      upload_batch(w, batch, first, rows);
      gpu::dense_stack_forward_gpu(*w.blas, *w.scratch, stack_, dparams, w.x.get(), rows, targets(w),
                                   labels(w), w.loss_sum.get());
      if (classification())
        gpu::count_correct(w.counts.get(), w.scratch->pre.back().get(), w.labels.get(), rows, out_dim, st);
      double loss = 0.0;
      unsigned long long correct = 0;
      GS_CUDA_CHECK(cudaMemcpyAsync(&loss, w.loss_sum.get(), sizeof(double), cudaMemcpyDeviceToHost, st));
      if (classification())
        GS_CUDA_CHECK(cudaMemcpyAsync(&correct, w.counts.get(), sizeof correct, cudaMemcpyDeviceToHost, st));
      GS_CUDA_CHECK(cudaStreamSynchronize(st));
      sums.loss_sum += loss;
      sums.correct += static_cast<int64_t>(correct);
    }
    w.last = GpuPath::kNone;  // the scratch now holds an evaluation chunk: no backward may follow
    sums.count = batch.count;
    return sums;
  }

 private:
  // Sets the workspace's device in this thread; on first use picks it (rank % devices) and allocates. Resident: a
  // workspace first bound by forward runs on the rank's stream; one first bound by evaluation (`evaluation`) on a
  // stream of its own that orders after the rank's through owner_ready (evaluate).
  void bind(GpuWorkspace& w, int rank, bool evaluation) const {
    if (w.device < 0) {
      const int r = rank < 0 ? 0 : rank;
      const int device = resident_ != nullptr ? resident_->device(r) : r % device_count_;
      GS_CUDA_CHECK(cudaSetDevice(device));
      w.device = device;
      const size_t n = stack_.num_params();
      const auto rows = static_cast<size_t>(w.max_rows);
      const int64_t in_dim = stack_.widths.front(), out_dim = stack_.widths.back();
      if (resident_ != nullptr && !evaluation) {
        w.st = resident_->stream(r);  // the rank's element operations and collectives order against this stream
      } else {
        w.stream.emplace();
        w.st = w.stream->get();
      }
      if (resident_ != nullptr && evaluation) {
        w.owner = r;
        w.owner_ready.emplace(false);  // ordering only: no timing
      }
      w.blas = std::make_unique<gpu::BlasHandle>(w.st);
      if (tf32_) gpu::set_tf32_math(*w.blas, true);  // fp32 GEMMs on TF32 tensor cores (forward, backward, evaluation)
      w.scratch = gpu::make_dense_scratch_gpu(stack_, w.max_rows);
      if (resident_ == nullptr) {
        w.params = gpu::DeviceBuffer<float>(n, "parameters");
        w.grad = gpu::DeviceBuffer<float>(n, "gradient");
      }
      w.grad_scaled = gpu::DeviceBuffer<float>(n, "scaled gradient");
      w.x = gpu::DeviceBuffer<float>(rows * static_cast<size_t>(in_dim), "batch inputs");
      w.pin_x = gpu::PinnedBuffer<float>(rows * static_cast<size_t>(in_dim), "pinned batch inputs");
      if (classification()) {
        w.labels = gpu::DeviceBuffer<int32_t>(rows, "batch labels");
        w.pin_labels = gpu::PinnedBuffer<int32_t>(rows, "pinned batch labels");
      } else {
        w.y = gpu::DeviceBuffer<float>(rows * static_cast<size_t>(out_dim), "batch targets");
        w.pin_y = gpu::PinnedBuffer<float>(rows * static_cast<size_t>(out_dim), "pinned batch targets");
      }
      w.staged.emplace(false);
      w.loss_sum = gpu::DeviceBuffer<double>(1, "loss sum");
      w.counts = gpu::DeviceBuffer<unsigned long long>(2, "counts");
    } else {
      GS_CUDA_CHECK(cudaSetDevice(w.device));
    }
  }

  // The parameters to the device. Forward and evaluation always copy (the strategy updates its buffers in place, so
  // the same pointer may hold new values); backward only when its pointer is not its forward's.
  // Resident: `params` is already the rank's device buffer.
  const float* device_params(GpuWorkspace& w, const float* params, bool always) const {
    if (resident_ != nullptr) return params;
    if (!always && w.uploaded_params == params) return w.params.get();
    GS_CUDA_CHECK(cudaMemcpyAsync(w.params.get(), params, stack_.num_params() * sizeof(float),
                                  cudaMemcpyHostToDevice, w.st));
    w.uploaded_params = params;
    return w.params.get();
  }

  // Rows [first, first + rows) of the batch to the device buffers' start, through the workspace's pinned staging (a
  // copy from pageable memory would be staged by the driver and could not overlap the stream's work): the previous
  // upload's copies are waited for (they read the pinned slot), the rows copied into it, and the copies enqueued.
  void upload_batch(GpuWorkspace& w, const Batch& batch, int64_t first, int64_t rows) const {
    const cudaStream_t st = w.st;
    const auto in_dim = static_cast<size_t>(stack_.widths.front());
    const auto out_dim = static_cast<size_t>(stack_.widths.back());
    const auto r = static_cast<size_t>(rows);
    const auto f = static_cast<size_t>(first);
    w.staged->synchronize();
    std::copy_n(batch.x.data() + f * in_dim, r * in_dim, w.pin_x.get());
    GS_CUDA_CHECK(cudaMemcpyAsync(w.x.get(), w.pin_x.get(), r * in_dim * sizeof(float), cudaMemcpyHostToDevice, st));
    if (classification()) {
      std::copy_n(batch.labels.data() + f, r, w.pin_labels.get());
      GS_CUDA_CHECK(cudaMemcpyAsync(w.labels.get(), w.pin_labels.get(), r * sizeof(int32_t), cudaMemcpyHostToDevice,
                                    st));
    } else {
      std::copy_n(batch.y.data() + f * out_dim, r * out_dim, w.pin_y.get());
      GS_CUDA_CHECK(cudaMemcpyAsync(w.y.get(), w.pin_y.get(), r * out_dim * sizeof(float), cudaMemcpyHostToDevice,
                                    st));
    }
    w.staged->record(st);
  }

  const float* targets(const GpuWorkspace& w) const { return classification() ? nullptr : w.y.get(); }
  const int32_t* labels(const GpuWorkspace& w) const { return classification() ? w.labels.get() : nullptr; }

  // The host model's checks (mlp.cpp): shapes, sizes and label range (an out-of-range label would index past the
  // logits on the device).
  void check_batch(const Batch& batch, int64_t first, int64_t rows, int64_t max_rows) const {
    const int64_t in_dim = stack_.widths.front(), out_dim = stack_.widths.back();
    GS_EXPECT(rows <= max_rows, fmt::format("cuda model: batch of {} samples exceeds the workspace's {}", rows,
                                            max_rows));
    GS_EXPECT(batch.in_dim == in_dim,
              fmt::format("cuda model: batch in_dim {} != model.layers[0] {}", batch.in_dim, in_dim));
    GS_EXPECT(batch.x.size() >= static_cast<size_t>((first + rows) * in_dim),
              "cuda model: batch.x shorter than count x in_dim");
    if (!classification()) {
      GS_EXPECT(batch.out_dim == out_dim,
                fmt::format("cuda model: batch out_dim {} != the model's {} outputs (mse)", batch.out_dim, out_dim));
      GS_EXPECT(batch.y.size() >= static_cast<size_t>((first + rows) * out_dim),
                "cuda model: batch.y shorter than count x out_dim");
    } else {
      GS_EXPECT(batch.labels.size() >= static_cast<size_t>(first + rows), "cuda model: batch.labels shorter than count");
      for (int64_t r = first; r < first + rows; ++r) {
        const int32_t label = batch.labels[static_cast<size_t>(r)];
        GS_EXPECT(label >= 0 && label < out_dim,
                  fmt::format("cuda model: label {} of sample {} outside [0, {})", label, r, out_dim));
      }
    }
  }

  DenseStack stack_;
  int device_count_ = 1;
  bool tf32_ = false;  // precision.mode tf32: every GEMM of the handle in TF32 math
  CudaElementOps* resident_ = nullptr;
};

}  // namespace

std::unique_ptr<Model> make_gpu_model(const RunConfig& config, CudaElementOps* resident) {
  if (config.model.kind != "mlp" && config.model.kind != "linear")
    throw Error("model.kind: \"" + config.model.kind + "\" has no GPU model (mlp, linear)");
  const CudaProbe& probe = cuda_status();
  GS_EXPECT(cuda_usable(probe), "cuda model: no usable GPU (" + probe.error + ")");
  return std::make_unique<GpuDenseModel>(make_model(config), dense_stack_from_config(config.model),
                                         probe.device_count, config.precision.mode == "tf32", resident);
}

}  // namespace gs
