// The model registry: one line per model {name, one-line doc, factory, the fields that apply to it, its cross-field
// rule}, in listing order, plus make_model and Model::num_params. A new model is one file with its factory (declared
// in model.h) and one line in kModels: model.kind's choices and its fields' kind rules come from this table
// (sim/validate/kinds.cpp).
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/model/model.h"

namespace gs {
namespace {

void add(std::vector<ConfigIssue>& issues, const std::string& path, const std::string& message) {
  issues.push_back({path, message});
}

void mlp_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  if (c.model.layers.size() < 2)
    add(issues, "model.layers", fmt::format("expected at least 2 widths [in, ..., out], got {}", c.model.layers.size()));
}

void linear_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  if (c.model.layers.size() != 2)
    add(issues, "model.layers", fmt::format("linear: expected [in, out], got {} widths", c.model.layers.size()));
}

// The quadratic model computes in fp32, without loss scaling, and takes no data.
void quadratic_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  if (c.precision.mode != "fp32" && c.precision.mode != "tf32")
    add(issues, "precision.mode", "the quadratic model computes in fp32 only: expected \"fp32\" (reduced precision is "
                                  "emulated by the mlp and linear models), got \"" + c.precision.mode + "\"");
  if (c.precision.loss_scale == "static" || c.precision.loss_scale == "dynamic")
    add(issues, "precision.loss_scale", "the quadratic model has no loss scaling: expected \"auto\" or \"none\", got "
                                        "\"" + c.precision.loss_scale + "\"");
  if (c.data.kind != "none")
    add(issues, "data.kind", "the quadratic model takes no data: expected \"none\", got \"" + c.data.kind + "\"");
}

// A transformer preset is a shape for timing-only runs: no arithmetic, no data.
void preset_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  if (c.training.mode != "timing")
    add(issues, "training.mode",
        "model.kind \"" + c.model.kind + "\" is a shape preset: expected \"timing\" (--timing-only)");
  if (c.data.kind != "none")
    add(issues, "data.kind",
        "a shape preset reads no data: expected \"none\" (samples per micro-batch: data.batch_per_rank)");
}

}  // namespace

const std::vector<ModelEntry>& model_registry() {
  using Options = std::vector<std::string>;
  const Options preset = {"model.sequence_length", "training.activation_checkpointing"};
  static const std::vector<ModelEntry> kModels = {
      {"mlp", "fully connected layers [in, h1, ..., out], relu|gelu, cross_entropy|mse; torch.nn.Linear init",
       make_mlp, {"model.layers", "model.activation", "model.bias", "model.init.from"}, mlp_issues},
      {"linear", "y = W x (+ b), layers [in, out]; optional explicit initial_weights / initial_bias", make_linear,
       {"model.layers", "model.bias", "model.initial_weights", "model.initial_bias", "model.init.from"},
       linear_issues},
      {"quadratic", "per-rank f_r(w) = 0.5 * sum_i a_ri (w_i - b_ri)^2 from model.a, model.b, model.initial_w",
       make_quadratic, {"model.a", "model.b", "model.initial_w", "model.split", "model.init.from"}, quadratic_issues},
      {"gpt2-small", "timing-only shape preset: GPT-2 small, 124M parameters, 12 layers, d 768, context 1024",
       make_transformer_preset, preset, preset_issues},
      {"gpt2-xl", "timing-only shape preset: GPT-2 XL, 1.56B parameters, 48 layers, d 1600, context 1024",
       make_transformer_preset, preset, preset_issues},
      {"llama-7b", "timing-only shape preset: LLaMA-7B, 6.74B parameters, 32 layers, d 4096, context 2048",
       make_transformer_preset, preset, preset_issues},
      {"mpt-125m", "timing-only shape preset: MosaicML MPT-125M, 12 layers, d 768, vocab 50368, context 2048",
       make_transformer_preset, preset, preset_issues},
      {"mpt-350m", "timing-only shape preset: MPT-350M, 24 layers, d 1024, context 2048", make_transformer_preset,
       preset, preset_issues},
      {"mpt-760m", "timing-only shape preset: MPT-760M, 24 layers, d 1536, context 2048", make_transformer_preset,
       preset, preset_issues},
      {"mpt-1b", "timing-only shape preset: MPT-1B, 24 layers, d 2048, context 2048", make_transformer_preset, preset,
       preset_issues},
      {"mpt-3b", "timing-only shape preset: MPT-3B, 32 layers, d 2560, context 2048", make_transformer_preset, preset,
       preset_issues},
      {"mpt-7b", "timing-only shape preset: MPT-7B, 32 layers, d 4096, context 2048", make_transformer_preset, preset,
       preset_issues},
  };
  return kModels;
}

std::unique_ptr<Model> make_model(const RunConfig& config) {
  std::string known;
  for (const ModelEntry& e : model_registry()) {
    if (config.model.kind == e.name) {
      std::unique_ptr<Model> model = e.make(config);
      // model.init.from: the initial parameters from a file, for every kind (the presets are refused by validation).
      if (!config.model.init_from.empty()) return with_initial_file(std::move(model), config.model.init_from);
      return model;
    }
    known += known.empty() ? e.name : fmt::format(", {}", e.name);
  }
  throw Error(fmt::format("model.kind: unknown model '{}' (known: {})", config.model.kind, known));
}

size_t Model::num_params() const {
  size_t n = 0;
  for (const TensorInfo& t : tensors()) n = std::max(n, t.offset + t.count);
  return n;
}

std::vector<LayerCost> Model::layer_costs() const {
  const double total = static_cast<double>(num_params());
  const double flops = forward_flops_per_sample();
  std::vector<LayerCost> out;
  for (const TensorInfo& t : tensors()) {
    LayerCost l;
    l.param_begin = t.offset;
    l.param_end = t.offset + t.count;
    l.forward_flops_per_sample = total > 0 ? flops * static_cast<double>(t.count) / total : 0.0;
    out.push_back(l);
  }
  return out;
}

ActivationMemory Model::activation_memory(int64_t, double, bool) const { return {}; }

}  // namespace gs
