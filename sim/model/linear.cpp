// The `linear` model: y_hat = W x (+ b), layers [in, out], loss from model.loss; the one-layer mlp (mlp.cpp) with
// tensors named "weight" {out, in} and "bias" {out}, and optional explicit initial values (model.initial_weights,
// model.initial_bias) for tiny exact cases.
#include <algorithm>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sim/core/error.h"
#include "sim/core/json_io.h"
#include "sim/model/model.h"

namespace gs {
namespace {

// The explicit initial values are float32 parameters: a value past float32's range is refused (it would be inf).
float number_at(const json& v, const std::string& path) {
  if (!v.is_number()) throw Error(fmt::format("{}: expected a number, got {}", path, bounded_dump(v)));
  const std::string problem = float32_range_problem(v.get<double>());
  if (!problem.empty()) throw Error(fmt::format("{}: {}", path, problem));
  return static_cast<float>(v.get<double>());
}

// model.initial_weights: `out` rows of `in` numbers ([[w_00, ..., w_0,in-1], ...]); a bare number when in = out = 1.
std::vector<float> parse_weights(const json& j, int64_t in, int64_t out) {
  const std::string path = "model.initial_weights";
  if (j.is_number() && in == 1 && out == 1) return {number_at(j, path)};
  const std::string expected = fmt::format("expected {} row{} of {} number{} (layers [{}, {}])", out,
                                           out == 1 ? "" : "s", in, in == 1 ? "" : "s", in, out);
  if (!j.is_array() || static_cast<int64_t>(j.size()) != out) {
    throw Error(fmt::format("{}: {}, got {}", path, expected, bounded_dump(j)));
  }
  std::vector<float> w;
  w.reserve(static_cast<size_t>(in * out));
  for (size_t r = 0; r < j.size(); ++r) {
    const json& row = j[r];
    if (!row.is_array() || static_cast<int64_t>(row.size()) != in) {
      throw Error(fmt::format("{}: {}; row {} is {}", path, expected, r, bounded_dump(row)));
    }
    for (size_t c = 0; c < row.size(); ++c) w.push_back(number_at(row[c], fmt::format("{}[{}][{}]", path, r, c)));
  }
  return w;
}

// model.initial_bias: `out` numbers; a bare number when out = 1.
std::vector<float> parse_bias(const json& j, int64_t out) {
  const std::string path = "model.initial_bias";
  if (j.is_number() && out == 1) return {number_at(j, path)};
  if (!j.is_array() || static_cast<int64_t>(j.size()) != out) {
    throw Error(fmt::format("{}: expected {} number{} (the last width of model.layers), got {}", path, out,
                            out == 1 ? "" : "s", bounded_dump(j)));
  }
  std::vector<float> b;
  for (size_t i = 0; i < j.size(); ++i) b.push_back(number_at(j[i], fmt::format("{}[{}]", path, i)));
  return b;
}

class LinearModel final : public Model {
 public:
  LinearModel(std::unique_ptr<Model> inner, std::optional<std::vector<float>> weights,
              std::optional<std::vector<float>> bias)
      : inner_(std::move(inner)), weights_(std::move(weights)), bias_(std::move(bias)), tensors_(inner_->tensors()) {
    tensors_[0].name = "weight";
    if (tensors_.size() > 1) tensors_[1].name = "bias";
  }

  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  bool classification() const override { return inner_->classification(); }

  // Explicit values where given; otherwise the mlp's seeded init (torch.nn.Linear default, mlp.cpp). When the
  // weights are explicit and model.initial_bias is null, the bias starts at zero (a fully known starting point).
  void init_params(float* params, uint64_t seed) const override {
    inner_->init_params(params, seed);
    if (weights_) std::copy(weights_->begin(), weights_->end(), params + tensors_[0].offset);
    if (tensors_.size() > 1) {
      float* b = params + tensors_[1].offset;
      if (bias_) {
        std::copy(bias_->begin(), bias_->end(), b);
      } else if (weights_) {
        std::fill(b, b + tensors_[1].count, 0.0f);
      }
    }
  }

  std::unique_ptr<Workspace> make_workspace(int64_t max_batch) const override {
    return inner_->make_workspace(max_batch);
  }
  double forward(const float* params, const Batch& batch, Workspace& ws, const PrecisionPolicy& p) const override {
    return inner_->forward(params, batch, ws, p);
  }
  void backward(const float* params, const Batch& batch, Workspace& ws, float* grad,
                const PrecisionPolicy& p) const override {
    inner_->backward(params, batch, ws, grad, p);
  }
  EvalSums evaluate(const float* params, const Batch& batch, Workspace& ws) const override {
    return inner_->evaluate(params, batch, ws);
  }
  double forward_flops_per_sample() const override { return inner_->forward_flops_per_sample(); }
  // Priced as the one-layer mlp it runs: its GEMM shape, and a backward without an input gradient (the data's).
  std::vector<LayerCost> layer_costs() const override { return inner_->layer_costs(); }
  ActivationMemory activation_memory(int64_t samples, double element_bytes, bool checkpointing) const override {
    return inner_->activation_memory(samples, element_bytes, checkpointing);
  }

 private:
  std::unique_ptr<Model> inner_;
  std::optional<std::vector<float>> weights_;
  std::optional<std::vector<float>> bias_;
  std::vector<TensorInfo> tensors_;
};

}  // namespace

// Throws gs::Error when model.layers is not [in, out] or the explicit initial values have the wrong shape.
std::unique_ptr<Model> make_linear(const RunConfig& config) {
  const ModelConfig& m = config.model;
  if (m.layers.size() != 2) {
    throw Error(fmt::format("model.layers: linear expects [in, out], got [{}]", fmt::join(m.layers, ", ")));
  }
  auto inner = make_mlp(config);  // checks widths and loss
  const int64_t in = m.layers[0], out = m.layers[1];
  std::optional<std::vector<float>> weights, bias;
  if (!m.initial_weights.is_null()) weights = parse_weights(m.initial_weights, in, out);
  if (!m.initial_bias.is_null()) {
    if (!m.bias) throw Error("model.initial_bias: given, but model.bias is false");
    bias = parse_bias(m.initial_bias, out);
  }
  return std::make_unique<LinearModel>(std::move(inner), std::move(weights), std::move(bias));
}

}  // namespace gs
