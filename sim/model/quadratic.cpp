// The `quadratic` model: rank r's objective f_r(w) = 0.5 * sum_i a_ri (w_i - b_ri)^2, one "sample" per rank and
// micro-batch (docs/design.md, section 2). It ignores x and y and uses Batch::rank and Batch::count. A test bed for sync
// strategies with closed-form answers (e.g. the minimizer of sum_r f_r is the a-weighted mean of the b_r).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/core/json_io.h"
#include "sim/model/model.h"

namespace gs {
namespace {

double number_at(const json& v, const std::string& path) {
  if (!v.is_number()) throw Error(fmt::format("{}: expected a number, got {}", path, bounded_dump(v)));
  return v.get<double>();
}

// A flat list of numbers at `path` (a bare number counts as a list of one).
std::vector<double> parse_row(const json& j, const std::string& path) {
  if (j.is_number()) return {j.get<double>()};
  if (!j.is_array()) throw Error(fmt::format("{}: expected a list of numbers, got {}", path, bounded_dump(j)));
  std::vector<double> row;
  for (size_t i = 0; i < j.size(); ++i) row.push_back(number_at(j[i], fmt::format("{}[{}]", path, i)));
  return row;
}

// model.a / model.b: one flat row [..] used by every rank, or rows [[..], ...], 1 or `ranks` of them, each of d
// numbers.
std::vector<std::vector<double>> parse_rows(const json& j, const std::string& path, size_t d, int64_t ranks) {
  const std::string expected =
      fmt::format("expected a list of {} numbers (the length of model.initial_w), or 1 or {} such lists (one per rank)",
                  d, ranks);
  if (j.is_null()) throw Error(fmt::format("{}: required by model.kind \"quadratic\": {}", path, expected));
  std::vector<std::vector<double>> rows;
  if (j.is_array() && !j.empty() && j[0].is_array()) {
    if (j.size() != 1 && static_cast<int64_t>(j.size()) != ranks) {
      throw Error(fmt::format("{}: {}; got {} lists", path, expected, j.size()));
    }
    for (size_t r = 0; r < j.size(); ++r) rows.push_back(parse_row(j[r], fmt::format("{}[{}]", path, r)));
  } else {
    rows.push_back(parse_row(j, path));
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].size() != d) {
      const std::string at = j.is_array() && !j.empty() && j[0].is_array() ? fmt::format("{}[{}]", path, r) : path;
      throw Error(fmt::format("{}: expected {} numbers (the length of model.initial_w), got {}", at, d,
                              rows[r].size()));
    }
  }
  return rows;
}

class QuadraticModel final : public Model {
 public:
  // split: the sizes of the tensors w0, w1, ... (summing to the length of w0); empty: one tensor w.
  QuadraticModel(std::vector<double> w0, std::vector<std::vector<double>> a, std::vector<std::vector<double>> b,
                 const std::vector<int64_t>& split)
      : w0_(std::move(w0)), a_(std::move(a)), b_(std::move(b)) {
    if (split.empty()) tensors_.push_back({"w", {static_cast<int64_t>(w0_.size())}, 0, w0_.size()});
    size_t offset = 0;
    for (size_t t = 0; t < split.size(); ++t) {
      tensors_.push_back({fmt::format("w{}", t), {split[t]}, offset, static_cast<size_t>(split[t])});
      offset += static_cast<size_t>(split[t]);
    }
  }

  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  bool classification() const override { return false; }

  // w = model.initial_w on every rank; the seed is not used.
  void init_params(float* params, uint64_t seed) const override {
    for (size_t i = 0; i < w0_.size(); ++i) params[i] = static_cast<float>(w0_[i]);
  }

  std::unique_ptr<Workspace> make_workspace(int64_t max_batch) const override {
    return std::make_unique<Workspace>();
  }

  // count * f_rank(w), in double.
  double forward(const float* params, const Batch& batch, Workspace& ws, const PrecisionPolicy& p) const override {
    const auto& a = row(a_, batch.rank, "a");
    const auto& b = row(b_, batch.rank, "b");
    double f = 0.0;
    for (size_t i = 0; i < w0_.size(); ++i) {
      const double d = static_cast<double>(params[i]) - b[i];
      f += a[i] * d * d;
    }
    return static_cast<double>(batch.count) * 0.5 * f;
  }

  // grad += count * a_rank * (w - b_rank); then every tensor announced as a layer, the last first.
  void backward(const float* params, const Batch& batch, Workspace& ws, float* grad,
                const PrecisionPolicy& p) const override {
    const auto& a = row(a_, batch.rank, "a");
    const auto& b = row(b_, batch.rank, "b");
    const auto count = static_cast<double>(batch.count);
    for (size_t i = 0; i < w0_.size(); ++i) {
      grad[i] += static_cast<float>(count * a[i] * (static_cast<double>(params[i]) - b[i]));
    }
    for (size_t t = tensors_.size(); t-- > 0;)
      announce_layer(ws, tensors_[t].offset, tensors_[t].offset + tensors_[t].count);
  }

  EvalSums evaluate(const float* params, const Batch& batch, Workspace& ws) const override {
    EvalSums sums;
    sums.loss_sum = forward(params, batch, ws, PrecisionPolicy{});
    sums.count = batch.count;
    return sums;
  }

  // Per sample: a subtraction, two multiplications and an addition per coordinate.
  double forward_flops_per_sample() const override { return 4.0 * static_cast<double>(w0_.size()); }

 private:
  static const std::vector<double>& row(const std::vector<std::vector<double>>& rows, int rank, const char* name) {
    if (rows.size() == 1) return rows[0];
    GS_EXPECT(rank >= 0 && static_cast<size_t>(rank) < rows.size(),
              fmt::format("quadratic: batch rank {} has no row of model.{} ({} rows)", rank, name, rows.size()));
    return rows[static_cast<size_t>(rank)];
  }

  std::vector<double> w0_;
  std::vector<std::vector<double>> a_, b_;
  std::vector<TensorInfo> tensors_;
};

}  // namespace

// Throws gs::Error for a missing or malformed model.initial_w, model.a or model.b (the message names the path).
std::unique_ptr<Model> make_quadratic(const RunConfig& config) {
  const ModelConfig& m = config.model;
  if (m.initial_w.is_null())
    throw Error("model.initial_w: required by model.kind \"quadratic\": expected a list of numbers (the starting point)");
  std::vector<double> w0 = parse_row(m.initial_w, "model.initial_w");
  if (w0.empty()) throw Error("model.initial_w: expected at least 1 number, got []");
  for (size_t i = 0; i < w0.size(); ++i) {  // the parameters are float32 (a, b stay double: the gradient's math)
    const std::string problem = float32_range_problem(w0[i]);
    if (!problem.empty())
      throw Error(fmt::format("model.initial_w{}: {}", m.initial_w.is_array() ? fmt::format("[{}]", i) : "", problem));
  }
  const int64_t ranks = config.cluster.ranks;
  auto a = parse_rows(m.a, "model.a", w0.size(), ranks);
  auto b = parse_rows(m.b, "model.b", w0.size(), ranks);
  int64_t total = 0;
  for (int64_t size : m.split) total += size;
  if (!m.split.empty() && total != static_cast<int64_t>(w0.size()))
    throw Error(fmt::format("model.split: expected sizes that sum to {} (the length of model.initial_w), got {} "
                            "(sum {})", w0.size(), json(m.split).dump(), total));
  return std::make_unique<QuadraticModel>(std::move(w0), std::move(a), std::move(b), m.split);
}

}  // namespace gs
