// model.init.from: a model whose initial parameters come from a .safetensors or .npz file (tensor_file.h). The
// wrapper forwards everything to the model it wraps except init_params, which copies the file's tensors into the
// flat buffer by the table's file names (TensorInfo::file_name: torch's state_dict names, docs/models.md).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sim/core/error.h"
#include "sim/model/model.h"
#include "sim/model/tensor_file.h"

namespace gs {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

class InitFromFile final : public Model {
 public:
  InitFromFile(std::unique_ptr<Model> inner, std::vector<float> initial)
      : inner_(std::move(inner)), initial_(std::move(initial)) {}

  const std::vector<TensorInfo>& tensors() const override { return inner_->tensors(); }
  bool classification() const override { return inner_->classification(); }
  // The file's values (read and checked when the model was made); the seed is not used.
  void init_params(float* params, uint64_t) const override { std::copy(initial_.begin(), initial_.end(), params); }
  std::unique_ptr<Workspace> make_workspace(int64_t max_batch) const override { return inner_->make_workspace(max_batch); }
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
  std::vector<LayerCost> layer_costs() const override { return inner_->layer_costs(); }
  bool shape_only() const override { return inner_->shape_only(); }
  ActivationMemory activation_memory(int64_t samples, double element_bytes, bool checkpointing) const override {
    return inner_->activation_memory(samples, element_bytes, checkpointing);
  }

 private:
  std::unique_ptr<Model> inner_;
  std::vector<float> initial_;
};

// The flat initial buffer of `model` from `file`, or every problem found (each naming its tensor).
std::vector<float> match_tensors(const Model& model, const TensorFile& file, std::vector<std::string>& problems) {
  std::vector<float> flat(model.num_params(), 0.0f);
  std::vector<bool> used(file.tensors.size(), false);
  // The model's tensors for the message: the first kListed, then how many there are in all (a preset's or a deep
  // model's whole list ran to thousands of characters).
  constexpr size_t kListed = 6;
  std::string expected;
  const auto& tensors = model.tensors();
  for (size_t i = 0; i < tensors.size() && i < kListed; ++i)
    expected += fmt::format("{}{} {}", i ? ", " : "", tensors[i].file_name(), shape_text(tensors[i].shape));
  if (tensors.size() > kListed) expected += fmt::format(", ... ({} tensors in all)", tensors.size());
  bool names_wrong = false;
  for (const TensorInfo& t : model.tensors()) {
    size_t k = 0;
    while (k < file.tensors.size() && file.tensors[k].name != t.file_name()) ++k;
    if (k == file.tensors.size()) {
      problems.push_back(fmt::format("tensor \"{}\" (shape {}) is missing", t.file_name(), shape_text(t.shape)));
      names_wrong = true;
      continue;
    }
    used[k] = true;
    const FileTensor& f = file.tensors[k];
    if (f.shape != t.shape) {
      problems.push_back(fmt::format("tensor \"{}\" has shape {} in the file, the model's is {}", t.file_name(),
                                     shape_text(f.shape), shape_text(t.shape)));
      continue;
    }
    for (size_t i = 0; i < f.values.size(); ++i) {
      if (!std::isfinite(f.values[i])) {
        problems.push_back(fmt::format("tensor \"{}\" element {} is {} as float32 ({} in the file)", t.file_name(), i,
                                       format_number(f.values[i]), f.dtype));
        break;
      }
    }
    std::copy(f.values.begin(), f.values.end(), flat.begin() + static_cast<std::ptrdiff_t>(t.offset));
  }
  for (size_t k = 0; k < file.tensors.size(); ++k) {
    if (used[k]) continue;
    problems.push_back(fmt::format("tensor \"{}\" (shape {}) is not a parameter of the model",
                                   file.tensors[k].name, shape_text(file.tensors[k].shape)));
    names_wrong = true;
  }
  if (names_wrong) problems.push_back("the model's tensors are " + expected + " (docs/models.md)");
  return flat;
}

}  // namespace

std::unique_ptr<Model> with_initial_file(std::unique_ptr<Model> inner, const std::string& path) {
  if (inner->shape_only())  // a shape preset holds no parameters: said once, without reading the file
    throw Error("model.init.from: " + path + ": expected a model with parameters (mlp, linear, quadratic); a shape "
                "preset has none to load");
  TensorFile file;
  try {
    file = read_tensor_file(path);
  } catch (const Error& e) {
    throw Error(std::string("model.init.from: ") + e.what());
  }
  std::vector<std::string> problems;
  std::vector<float> flat = match_tensors(*inner, file, problems);
  if (!problems.empty()) {
    constexpr size_t kShown = 6;
    std::string names;  // the list of the model's tensors, when a name is wrong: kept whatever is cut
    if (problems.back().rfind("the model's tensors are", 0) == 0) {
      names = "; " + problems.back();
      problems.pop_back();
    }
    std::string text;
    for (size_t i = 0; i < problems.size() && i < kShown; ++i) text += (i ? "; " : "") + problems[i];
    if (problems.size() > kShown) text += fmt::format("; and {} more", problems.size() - kShown);
    throw Error(fmt::format("model.init.from: {}: {}{}", path, text, names));
  }
  return std::make_unique<InitFromFile>(std::move(inner), std::move(flat));
}

}  // namespace gs
