// The `inline` dataset: explicit samples per rank and micro-batch written in the scenario (data.ranks, data.eval),
// for tiny exact cases. Micro-batches may differ in size; each rank cycles through its own list. The format is in
// docs/data.md; a new key in a micro-batch object is parsed in parse_micro_batch.
#include <algorithm>
#include <string>

#include "sim/core/count_text.h"
#include "sim/core/error.h"
#include "sim/core/json_io.h"
#include "sim/model/dataset.h"

namespace gs {
namespace {

[[noreturn]] void fail(const std::string& message) { throw_error(__FILE__, __LINE__, "valid inline data", message); }

std::string idx(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

std::string kind_of(const json& j) { return j.type_name(); }

// Dimensions shared by every micro-batch and the eval set, inferred from the first row that shows them; where the rows
// disagree among themselves and the model declares the width (mlp, linear: model.layers), the model's width, so the
// rows that differ from it are the ones named (data that agrees with itself but not with the model is refused later,
// naming model.layers or the sweep axis that set it).
struct Dims {
  int64_t in = -1;       // -1 until a row of "x" is seen (1 when x is never given)
  int64_t out = -1;      // regression: -1 until a row of "y" is seen
  int64_t classes = 0;   // classification: max label + 1
  std::string in_source, out_source;  // where in / out came from when not the first row ("model.layers[0]")
};

void scan_dims(const json& mb, bool classification, Dims& d) {
  if (!mb.is_object()) return;
  if (d.in < 0 && mb.contains("x") && mb["x"].is_array() && !mb["x"].empty() && mb["x"][0].is_array()) {
    d.in = static_cast<int64_t>(mb["x"][0].size());
  }
  if (!classification && d.out < 0 && mb.contains("y") && mb["y"].is_array() && !mb["y"].empty() &&
      mb["y"][0].is_array()) {
    d.out = static_cast<int64_t>(mb["y"][0].size());
  }
}

// Whether every row of `key` ("x" or "y") in every micro-batch and the eval set is a list of `width` values (rows
// that are not lists, e.g. class labels, are passed over: pass 2 names them).
bool rows_agree(const json& ranks, const json& eval, const char* key, int64_t width) {
  auto agree = [&](const json& mb) {
    if (!mb.is_object() || !mb.contains(key) || !mb[key].is_array()) return true;
    for (const json& row : mb[key])
      if (row.is_array() && static_cast<int64_t>(row.size()) != width) return false;
    return true;
  };
  for (const json& rank : ranks)
    if (rank.is_array())
      for (const json& mb : rank)
        if (!agree(mb)) return false;
  return eval.is_null() || agree(eval);
}

std::vector<float> parse_row(const json& row, int64_t width, const std::string& source, const std::string& path) {
  if (!row.is_array() || static_cast<int64_t>(row.size()) != width) {
    fail(path + ": expected " + std::to_string(width) + (width == 1 ? " number" : " numbers") +
         (source.empty() ? "" : " (" + source + ")") +
         (row.is_array() ? ", got " + std::to_string(row.size()) : ", got " + kind_of(row)));
  }
  std::vector<float> out(row.size());
  for (size_t i = 0; i < row.size(); ++i) {
    if (!row[i].is_number()) fail(idx(path, i) + ": expected a number, got " + kind_of(row[i]));
    // Samples are float32: a value past its range would silently become inf.
    const std::string problem = float32_range_problem(row[i].get<double>());
    if (!problem.empty()) fail(idx(path, i) + ": " + problem);
    out[i] = static_cast<float>(row[i].get<double>());
  }
  return out;
}

// {"x": [[...] x count], "y": [[...] x count]} (regression) or "y": [label, ...] (classification). "x" may be
// omitted when the input is 1-dimensional: every sample's input is then [1.0].
Batch parse_micro_batch(const json& mb, bool classification, const Dims& d, const std::string& path, Dims& seen) {
  if (!mb.is_object()) fail(path + ": expected an object {\"x\": [[...], ...], \"y\": [...]}, got " + kind_of(mb));
  for (const auto& item : mb.items()) {
    if (item.key() != "x" && item.key() != "y") fail(path + "." + item.key() + ": unknown key (expected \"x\", \"y\")");
  }
  if (!mb.contains("y")) fail(path + ".y: missing (" + (classification ? "labels" : "regression targets") + ")");
  const json& y = mb["y"];
  if (!y.is_array()) fail(path + ".y: expected a list, got " + kind_of(y));
  Batch b;
  b.count = static_cast<int64_t>(y.size());
  b.in_dim = d.in;
  b.out_dim = classification ? 0 : d.out;

  if (mb.contains("x")) {
    const json& x = mb["x"];
    if (!x.is_array()) fail(path + ".x: expected a list of rows, got " + kind_of(x));
    if (x.size() != y.size()) {
      fail(path + ".y: expected " + count_text(x.size(), "entry", "entries") + " (one per row of x), got " +
           std::to_string(y.size()));
    }
    for (size_t i = 0; i < x.size(); ++i) {
      const std::vector<float> row = parse_row(x[i], d.in, d.in_source, idx(path + ".x", i));
      b.x.insert(b.x.end(), row.begin(), row.end());
    }
  } else {
    if (d.in != 1) {
      fail(path + ".x: missing; it may be omitted only when the input is 1-dimensional (" +
           (d.in_source.empty() ? "other rows have " + std::to_string(d.in) + " numbers"
                                : d.in_source + " is " + std::to_string(d.in)) + ")");
    }
    b.x.assign(y.size(), 1.0f);
  }

  for (size_t i = 0; i < y.size(); ++i) {
    if (classification) {
      if (!y[i].is_number_integer() || y[i].get<int64_t>() < 0 || y[i].get<int64_t>() > INT32_MAX) {
        fail(idx(path + ".y", i) + ": expected a class label (an integer >= 0), got " + bounded_dump(y[i]));
      }
      b.labels.push_back(y[i].get<int32_t>());
      seen.classes = std::max<int64_t>(seen.classes, b.labels.back() + 1);
    } else {
      const std::vector<float> row = parse_row(y[i], d.out, d.out_source, idx(path + ".y", i));
      b.y.insert(b.y.end(), row.begin(), row.end());
    }
  }
  return b;
}

void append(Batch& to, const Batch& from) {
  to.count += from.count;
  to.x.insert(to.x.end(), from.x.begin(), from.x.end());
  to.y.insert(to.y.end(), from.y.begin(), from.y.end());
  to.labels.insert(to.labels.end(), from.labels.begin(), from.labels.end());
}

class InlineData : public Dataset {
 public:
  explicit InlineData(const RunConfig& config) : k_(config.training.accumulation_steps) {
    const json& ranks = config.data.ranks;
    const int64_t n = config.cluster.ranks;
    classification_ = config.model.loss == "cross_entropy";
    GS_EXPECT(k_ >= 1, "training.accumulation_steps: must be >= 1");
    if (!ranks.is_array() || static_cast<int64_t>(ranks.size()) != n) {
      fail(std::string("data.ranks: ") + (ranks.is_null() ? "required by data.kind \"inline\": " : "") +
           "expected a list of " + count_text(n, "row") +
           " (one list of micro-batches per rank, cluster.ranks = " + std::to_string(n) + ")" +
           (ranks.is_null() ? "" : ", got " + (ranks.is_array() ? count_text(ranks.size(), "row") : kind_of(ranks))));
    }
    const json& eval = config.data.eval;
    if (!eval.is_null() && !eval.is_object()) fail("data.eval: expected {\"x\": ..., \"y\": ...} or null");

    // Pass 1: dimensions from the first rows that show them, or the model's where the rows disagree.
    Dims d;
    for (const auto& rank : ranks) {
      if (rank.is_array()) {
        for (const auto& mb : rank) scan_dims(mb, classification_, d);
      }
    }
    if (!eval.is_null()) scan_dims(eval, classification_, d);
    const std::vector<int64_t>& widths = config.model.layers;
    if ((config.model.kind == "mlp" || config.model.kind == "linear") && widths.size() >= 2) {
      if (d.in >= 0 && !rows_agree(ranks, eval, "x", d.in)) {
        d.in = widths.front();
        d.in_source = "model.layers[0]";
      }
      if (!classification_ && d.out >= 0 && !rows_agree(ranks, eval, "y", d.out)) {
        d.out = widths.back();
        d.out_source = "model.layers[" + std::to_string(widths.size() - 1) + "]";
      }
    }
    if (d.in < 0) d.in = 1;
    if (!classification_ && d.out < 0) d.out = 1;

    // Pass 2: parse and check every micro-batch.
    Dims seen;
    batches_.resize(static_cast<size_t>(n));
    for (size_t r = 0; r < ranks.size(); ++r) {
      const std::string path = idx("data.ranks", r);
      if (!ranks[r].is_array() || ranks[r].empty()) {
        fail(path + ": expected a non-empty list of micro-batches, got " +
             (ranks[r].is_array() ? std::string("an empty list") : kind_of(ranks[r])));
      }
      for (size_t m = 0; m < ranks[r].size(); ++m) {
        Batch b = parse_micro_batch(ranks[r][m], classification_, d, idx(path, m), seen);
        b.rank = static_cast<int>(r);
        batches_[r].push_back(std::move(b));
      }
    }

    eval_.in_dim = d.in;
    eval_.out_dim = classification_ ? 0 : d.out;
    if (!eval.is_null()) {
      eval_ = parse_micro_batch(eval, classification_, d, "data.eval", seen);
    } else {
      for (const auto& rank : batches_) {
        for (const auto& b : rank) append(eval_, b);
      }
    }
    eval_.rank = 0;

    in_dim_ = d.in;
    if (classification_) {
      // Classes: the model's output width when it names one, and at least max label + 1.
      const int64_t model_out = config.model.layers.empty() ? 0 : config.model.layers.back();
      out_dim_ = std::max<int64_t>(std::max<int64_t>(seen.classes, model_out), 2);
    } else {
      out_dim_ = d.out;
    }
  }

  int64_t in_dim() const override { return in_dim_; }
  int64_t out_dim() const override { return out_dim_; }
  bool classification() const override { return classification_; }
  int64_t steps_per_epoch() const override { return 0; }

  // Rank r at optimizer step t, micro-batch k: its micro-batch (t*K + k) mod (its list's length).
  void micro_batch(int64_t step, int64_t micro, int rank, Batch& out) const override {
    GS_EXPECT(rank >= 0 && rank < static_cast<int>(batches_.size()), "micro_batch: rank outside [0, cluster.ranks)");
    GS_EXPECT(step >= 0 && micro >= 0 && micro < k_, "micro_batch: step or micro-batch index out of range");
    const auto& list = batches_[static_cast<size_t>(rank)];
    out = list[static_cast<size_t>((step * k_ + micro) % static_cast<int64_t>(list.size()))];
  }

  const Batch& eval_set() const override { return eval_; }

 private:
  int64_t k_;
  bool classification_ = false;
  int64_t in_dim_ = 0;
  int64_t out_dim_ = 0;
  std::vector<std::vector<Batch>> batches_;  // [rank][micro-batch], rank set
  Batch eval_;
};

}  // namespace

std::unique_ptr<Dataset> make_inline(const RunConfig& config) { return std::make_unique<InlineData>(config); }

}  // namespace gs
