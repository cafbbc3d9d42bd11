// The `mlp` model: fully connected layers [in, h1, ..., out], relu|gelu on hidden layers, cross_entropy|mse loss,
// on the host dense stack (kernels/dense.h). Init follows torch.nn.Linear's default (see init_params). The `linear`
// model (linear.cpp) is this model with one layer and optional explicit initial values.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kernels/dense.h"
#include "kernels/dense_mixed.h"
#include "kernels/rng.h"
#include "sim/core/error.h"
#include "sim/model/model.h"

namespace gs {
namespace {

struct MlpWorkspace : Workspace {
  DenseScratch<float> scratch;
  MixedScratch mixed;     // emulated precision modes only; made on their first forward
  bool mixed_ready = false;
  bool last_forward_mixed = false;  // which stack the last forward ran (backward follows it)
};

MlpWorkspace& as_mlp_workspace(Workspace& ws) {
  auto* w = dynamic_cast<MlpWorkspace*>(&ws);
  GS_EXPECT(w != nullptr, "mlp: workspace was not made by this model");
  return *w;
}

}  // namespace

// Reads and checks model.layers / activation / loss / bias. Throws gs::Error naming the JSON path.
DenseStack dense_stack_from_config(const ModelConfig& m) {
  const auto& widths = m.layers;
  if (widths.size() < 2) {
    throw Error(fmt::format("model.layers: expected at least 2 widths [in, ..., out], got [{}]",
                            fmt::join(widths, ", ")));
  }
  for (size_t i = 0; i < widths.size(); ++i) {
    if (widths[i] < 1) throw Error(fmt::format("model.layers[{}]: expected a width >= 1, got {}", i, widths[i]));
  }
  DenseStack s;
  s.widths = widths;
  s.bias = m.bias;
  if (m.activation == "relu") {
    s.activation = Activation::kRelu;
  } else if (m.activation == "gelu") {
    s.activation = Activation::kGelu;
  } else {
    throw Error(fmt::format("model.activation: expected relu or gelu, got '{}'", m.activation));
  }
  if (m.loss == "cross_entropy") {
    s.loss = LossKind::kCrossEntropy;
    if (widths.back() < 2) {
      throw Error(fmt::format("model.layers: cross_entropy needs at least 2 classes (the last width), got {}",
                              widths.back()));
    }
  } else if (m.loss == "mse") {
    s.loss = LossKind::kMse;
  } else {
    throw Error(fmt::format("model.loss: expected cross_entropy or mse, got '{}'", m.loss));
  }
  return s;
}

namespace {

class MlpModel final : public Model {
 public:
  explicit MlpModel(DenseStack stack) : stack_(std::move(stack)) {
    for (int64_t l = 0; l < stack_.num_layers(); ++l) {
      const int64_t in = stack_.widths[l], out = stack_.widths[l + 1];
      // torch: nn.Sequential(Linear, ReLU, Linear, ...): layer l is module 2l.
      tensors_.push_back({fmt::format("layer{}.weight", l), {out, in}, stack_.weight_offset(l),
                          static_cast<size_t>(out * in), fmt::format("{}.weight", 2 * l)});
      if (stack_.bias) {
        tensors_.push_back({fmt::format("layer{}.bias", l), {out}, stack_.bias_offset(l), static_cast<size_t>(out),
                            fmt::format("{}.bias", 2 * l)});
      }
    }
  }

  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  bool classification() const override { return stack_.loss == LossKind::kCrossEntropy; }

  // torch.nn.Linear's default (reset_parameters: kaiming_uniform_(a=sqrt(5)) for the weight, which is
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias). Layer l's weight draws from Philox key
  // (seed, kInit, step = 2l, rank = 0), its bias from step 2l + 1: every rank gets identical parameters.
  void init_params(float* params, uint64_t seed) const override {
    for (int64_t l = 0; l < stack_.num_layers(); ++l) {
      const int64_t in = stack_.widths[l], out = stack_.widths[l + 1];
      const auto bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in)));
      fill_uniform(params + stack_.weight_offset(l), static_cast<uint64_t>(out * in), -bound, bound, seed,
                   Purpose::kInit, static_cast<uint32_t>(2 * l), 0);
      if (stack_.bias) {
        fill_uniform(params + stack_.bias_offset(l), static_cast<uint64_t>(out), -bound, bound, seed, Purpose::kInit,
                     static_cast<uint32_t>(2 * l + 1), 0);
      }
    }
  }

  std::unique_ptr<Workspace> make_workspace(int64_t max_batch) const override {
    GS_EXPECT(max_batch >= 1, fmt::format("mlp: workspace for {} samples", max_batch));
    auto ws = std::make_unique<MlpWorkspace>();
    ws->scratch = make_dense_scratch<float>(stack_, max_batch);
    return ws;
  }

  // fp32 (and tf32, which never runs on the host) take the fp32 stack untouched; emulated modes, and fp32 under a
  // loss scale (the scale must reach the gradient seed), take the mixed stack (format fp32: no rounding).
  double forward(const float* params, const Batch& batch, Workspace& ws, const PrecisionPolicy& p) const override {
    MlpWorkspace& w = as_mlp_workspace(ws);
    auto& s = w.scratch;
    check_batch(batch, 0, batch.count, s.max_rows);
    w.last_forward_mixed = p.emulated() || p.loss_scale != 1.0f;
    if (!w.last_forward_mixed) {
      return dense_stack_forward(s, stack_, params, batch.x.data(), batch.count, targets(batch, 0), labels(batch, 0));
    }
    const MixedSpec spec = mixed_spec(p);
    if (!w.mixed_ready) {
      w.mixed = make_mixed_scratch(stack_, s.max_rows, spec);
      w.mixed_ready = true;
    }
    return dense_stack_forward_mixed(s, w.mixed, stack_, params, batch.x.data(), batch.count, targets(batch, 0),
                                     labels(batch, 0), spec);
  }

  // Follows the path of the forward before it (same batch, same policy). Each layer (weight and bias) is announced
  // to ws.grad_ready as the stack finishes it, last layer first.
  void backward(const float* params, const Batch& batch, Workspace& ws, float* grad,
                const PrecisionPolicy& p) const override {
    MlpWorkspace& w = as_mlp_workspace(ws);
    auto& s = w.scratch;
    std::function<void(int64_t)> after_layer;  // two pointers: held in place, no allocation
    if (w.grad_ready != nullptr)
      after_layer = [this, &w](int64_t l) { announce_layer(w, stack_.weight_offset(l), stack_.weight_offset(l + 1)); };
    if (!w.last_forward_mixed) {
      dense_stack_backward(grad, s, stack_, params, batch.x.data(), batch.count, targets(batch, 0), labels(batch, 0),
                           after_layer);
      return;
    }
    const MixedCounters before = w.mixed.counters;
    dense_stack_backward_mixed(grad, s, w.mixed, stack_, params, batch.count, targets(batch, 0), labels(batch, 0),
                               mixed_spec(p), after_layer);
    w.precision.grad_values += w.mixed.counters.grad_values - before.grad_values;
    w.precision.grad_underflow += w.mixed.counters.grad_underflow - before.grad_underflow;
    w.precision.grad_nonfinite += w.mixed.counters.grad_nonfinite - before.grad_nonfinite;
  }

  // Evaluates in chunks of the workspace's capacity, so an evaluation set may exceed max_batch.
  EvalSums evaluate(const float* params, const Batch& batch, Workspace& ws) const override {
    auto& s = as_mlp_workspace(ws).scratch;
    EvalSums sums;
    const int64_t in_dim = stack_.widths.front(), out_dim = stack_.widths.back();
    for (int64_t first = 0; first < batch.count; first += s.max_rows) {
      const int64_t rows = std::min(s.max_rows, batch.count - first);
      check_batch(batch, first, rows, s.max_rows);
      sums.loss_sum += dense_stack_forward(s, stack_, params, batch.x.data() + first * in_dim, rows,
                                           targets(batch, first), labels(batch, first));
      if (classification()) sums.correct += count_correct(dense_stack_output(s), labels(batch, first), rows, out_dim);
    }
    sums.count = batch.count;
    return sums;
  }

  // 2 * in * out multiply-adds per layer, plus the bias add, the activation and the loss (a few per output).
  double forward_flops_per_sample() const override {
    double flops = 0.0;
    const double act_flops = stack_.activation == Activation::kRelu ? 1.0 : 10.0;
    for (int64_t l = 0; l < stack_.num_layers(); ++l) {
      const auto in = static_cast<double>(stack_.widths[l]), out = static_cast<double>(stack_.widths[l + 1]);
      flops += 2.0 * in * out + (stack_.bias ? out : 0.0);
      if (l + 1 < stack_.num_layers()) flops += act_flops * out;
    }
    return flops + 4.0 * static_cast<double>(stack_.widths.back());
  }

  // One entry per Linear layer (its weight and bias are contiguous: DenseStack's layout) with its GEMM by shape,
  // [samples, in] x [in, out], and its memory-bound traffic per sample: the bias add and the activation (hidden
  // layers) or the loss (the last) each read and write the layer's fp32 output, 4 x 2 x out bytes a kernel. The
  // forward's FLOPs beyond the GEMM (bias, activation, loss) are left to that traffic. Kernels: the GEMM and one
  // elementwise kernel.
  std::vector<LayerCost> layer_costs() const override {
    std::vector<LayerCost> out;
    for (int64_t l = 0; l < stack_.num_layers(); ++l) {
      const auto in = static_cast<double>(stack_.widths[l]), width = static_cast<double>(stack_.widths[l + 1]);
      LayerCost c;
      c.param_begin = stack_.weight_offset(l);
      c.param_end = stack_.weight_offset(l + 1);
      c.forward_flops_per_sample = 2.0 * in * width;
      c.kernels = 2.0;
      c.gemms = {{1.0, width, in}};
      c.elementwise_bytes_per_sample = 8.0 * width * (stack_.bias ? 2.0 : 1.0);
      c.input_gradient = l > 0;  // the data needs no gradient: the backward stops at layer 0's weight gradient
      out.push_back(c);
    }
    return out;
  }

  // The dense stack's buffers on a GPU (kernels/cuda_dense_mixed.h, as make_dense_scratch): every layer's
  // pre-activation and every hidden layer's activation, kept for the backward, the fp32 input batch and its labels or
  // targets; the two gradient buffers of the widest layer are the backward's working memory. No checkpointing.
  ActivationMemory activation_memory(int64_t samples, double element_bytes, bool) const override {
    const auto rows = static_cast<double>(samples);
    double kept = 0.0, widest = 1.0;
    for (int64_t l = 1; l < static_cast<int64_t>(stack_.widths.size()); ++l) {
      const auto w = static_cast<double>(stack_.widths[static_cast<size_t>(l)]);
      kept += w * (l + 1 < static_cast<int64_t>(stack_.widths.size()) ? 2.0 : 1.0);
      widest = std::max(widest, w);
    }
    const double batch = 4.0 * static_cast<double>(stack_.widths.front()) +
                         (stack_.loss == LossKind::kMse ? 4.0 * static_cast<double>(stack_.widths.back()) : 8.0);
    ActivationMemory m;
    m.stored_bytes = rows * (kept * element_bytes + batch);
    m.working_bytes = 2.0 * rows * widest * element_bytes;
    return m;
  }

 private:
  // Checks rows [first, first + rows) of batch against the model's shapes and the workspace capacity.
  void check_batch(const Batch& batch, int64_t first, int64_t rows, int64_t max_rows) const {
    const int64_t in_dim = stack_.widths.front(), out_dim = stack_.widths.back();
    GS_EXPECT(rows <= max_rows, fmt::format("mlp: batch of {} samples exceeds the workspace's {}", rows, max_rows));
    GS_EXPECT(batch.in_dim == in_dim, fmt::format("mlp: batch in_dim {} != model.layers[0] {}", batch.in_dim, in_dim));
    GS_EXPECT(batch.x.size() >= static_cast<size_t>((first + rows) * in_dim), "mlp: batch.x shorter than count x in_dim");
    if (stack_.loss == LossKind::kMse) {
      GS_EXPECT(batch.out_dim == out_dim,
                fmt::format("mlp: batch out_dim {} != the model's {} outputs (mse)", batch.out_dim, out_dim));
      GS_EXPECT(batch.y.size() >= static_cast<size_t>((first + rows) * out_dim), "mlp: batch.y shorter than count x out_dim");
    } else {
      GS_EXPECT(batch.labels.size() >= static_cast<size_t>(first + rows), "mlp: batch.labels shorter than count");
      for (int64_t r = first; r < first + rows; ++r) {
        const int32_t label = batch.labels[static_cast<size_t>(r)];
        GS_EXPECT(label >= 0 && label < out_dim,
                  fmt::format("mlp: label {} of sample {} outside [0, {})", label, r, out_dim));
      }
    }
  }

  const float* targets(const Batch& batch, int64_t first) const {
    return stack_.loss == LossKind::kMse ? batch.y.data() + first * stack_.widths.back() : nullptr;
  }
  const int32_t* labels(const Batch& batch, int64_t first) const {
    return stack_.loss == LossKind::kCrossEntropy ? batch.labels.data() + first : nullptr;
  }

  DenseStack stack_;
  std::vector<TensorInfo> tensors_;
};

}  // namespace

// Throws gs::Error for bad model.layers / activation / loss, or explicit initial values (kind linear only).
std::unique_ptr<Model> make_mlp(const RunConfig& config) {
  const ModelConfig& m = config.model;
  if (m.kind == "mlp") {
    if (!m.initial_weights.is_null()) throw Error("model.initial_weights: only used by kind linear");
    if (!m.initial_bias.is_null()) throw Error("model.initial_bias: only used by kind linear");
  }
  return std::make_unique<MlpModel>(dense_stack_from_config(m));
}

}  // namespace gs
