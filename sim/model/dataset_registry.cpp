// The dataset registry table (one line per dataset: name, doc, factory, the fields that apply to it, its cross-field
// rule), the shared sampling rule of dataset.h (epoch orders and the sample indices of a micro-batch), and the "none"
// dataset. A new dataset is one file plus one line in kDatasets: data.kind's choices and its fields' kind rules come
// from the table (sim/validate/kinds.cpp).
#include <algorithm>
#include <cstdio>
#include <list>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "kernels/rng.h"
#include "sim/config/run_kinds.h"
#include "sim/core/error.h"
#include "sim/model/dataset.h"

namespace gs {

namespace {

// "none": the quadratic model's data. Each micro-batch is one empty sample of its rank.
class NoData : public Dataset {
 public:
  NoData() { fill(eval_, 0); }
  int64_t in_dim() const override { return 0; }
  int64_t out_dim() const override { return 0; }
  bool classification() const override { return false; }
  int64_t steps_per_epoch() const override { return 0; }
  void micro_batch(int64_t, int64_t, int rank, Batch& out) const override { fill(out, rank); }
  const Batch& eval_set() const override { return eval_; }

 private:
  static void fill(Batch& b, int rank) {
    b.rank = rank;
    b.count = 1;
    b.in_dim = 0;
    b.out_dim = 0;
    b.x.clear();
    b.y.clear();
    b.labels.clear();
  }
  Batch eval_;
};


// Process-wide cache of recent epoch orders, so a rank's micro-batch costs O(b), not a shuffle of the training set.
struct OrderKey {
  int64_t n;
  uint64_t seed;
  int64_t epoch;
  bool operator==(const OrderKey& o) const { return n == o.n && seed == o.seed && epoch == o.epoch; }
};

constexpr size_t kOrderCacheEntries = 8;

std::shared_ptr<const std::vector<int64_t>> cached_shuffled_order(int64_t n, uint64_t seed, int64_t epoch) {
  static std::mutex mutex;
  static std::list<std::pair<OrderKey, std::shared_ptr<const std::vector<int64_t>>>> recent;  // most recent first
  const OrderKey key{n, seed, epoch};
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = recent.begin(); it != recent.end(); ++it) {
    if (it->first == key) {
      recent.splice(recent.begin(), recent, it);
      return recent.front().second;
    }
  }
  auto order = std::make_shared<const std::vector<int64_t>>(epoch_order(n, seed, epoch, true));
  recent.emplace_front(key, order);
  if (recent.size() > kOrderCacheEntries) recent.pop_back();
  return order;
}

void add(std::vector<ConfigIssue>& issues, const std::string& path, const std::string& message) {
  issues.push_back({path, message});
}

// A model with layers (every kind but quadratic) against the data: its first and last widths, its loss.
bool has_layers(const ModelConfig& m) { return m.kind != "quadratic" && m.layers.size() >= 2; }

// Data without epochs (inline, none): training.epochs has nothing to count.
void no_epochs(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  if (c.training.epochs > 0) add(issues, "training.epochs", "inline and none data have no epochs: use training.steps");
}

// Fashion-MNIST: 784 inputs, 10 classes, the four IDX files in data.path (or Debian's package folder).
void fashion_mnist_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  const ModelConfig& m = c.model;
  if (has_layers(m)) {
    const int64_t in = m.layers.front(), out = m.layers.back();
    if (in != 784) add(issues, "model.layers[0]", fmt::format("fashion_mnist has 784 inputs, got {}", in));
    if (m.loss != "cross_entropy")
      add(issues, "model.loss", "fashion_mnist is classification: expected \"cross_entropy\"");
    else if (out != 10)
      add(issues, "model.layers", fmt::format("fashion_mnist has 10 classes: last width 10, got {}", out));
  }
  const std::string& path = c.data.path;
  const std::string dir = path.empty() ? "/usr/share/datasets/fashion-mnist" : path;
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                        "t10k-labels-idx1-ubyte.gz"}) {
    const std::string file = dir + "/" + f;
    if (FILE* fp = std::fopen(file.c_str(), "rb")) {
      std::fclose(fp);
    } else {
      add(issues, path.empty() ? "data.kind" : "data.path",
          "missing " + file + (path.empty() ? " (install Debian's dataset-fashion-mnist: tools/setup.sh)" : ""));
      break;
    }
  }
}

// The teacher: a label-flip probability for classification, and the model's shape and loss to match its task.
void teacher_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  const TeacherConfig& t = c.data.teacher;
  if (t.task == "classification" && t.noise > 1)
    add(issues, "data.teacher.noise",
        fmt::format("classification: a label-flip probability, expected <= 1, got {}", t.noise));
  const ModelConfig& m = c.model;
  if (!has_layers(m)) return;
  const int64_t in = m.layers.front(), out = m.layers.back();
  if (in != t.in_dim)
    add(issues, "model.layers[0]", fmt::format("must equal data.teacher.in_dim ({}), got {}", t.in_dim, in));
  if (out != t.out_dim)
    add(issues, "model.layers", fmt::format("last width must equal data.teacher.out_dim ({}), got {}", t.out_dim, out));
  if ((t.task == "classification") != (m.loss == "cross_entropy"))
    add(issues, "model.loss", fmt::format("data.teacher.task \"{}\" needs model.loss \"{}\"", t.task,
                                          t.task == "classification" ? "cross_entropy" : "mse"));
}

// "none" is the quadratic model's data, or a timing-only run's.
void no_data_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  if (c.model.kind != "quadratic" && c.training.mode != "timing")
    add(issues, "data.kind", "\"none\" is only for the quadratic model or timing-only runs (model.kind is \"" +
                                 c.model.kind + "\")");
  no_epochs(c, issues);
}

}  // namespace

const std::vector<DatasetEntry>& dataset_registry() {
  static const std::vector<DatasetEntry> kDatasets = {
      {"fashion_mnist", "Fashion-MNIST (gzip IDX files in data.path or /usr/share/datasets/fashion-mnist); 10 classes",
       make_fashion_mnist, {"data.path", "data.eval_samples"}, fashion_mnist_issues},
      {"teacher", "Gaussian inputs labelled by a fixed random teacher network (data.teacher.*)", make_teacher,
       {"data.teacher"}, teacher_issues},
      {"inline", "explicit samples per rank and micro-batch in the scenario (data.ranks, data.eval)", make_inline,
       {"data.ranks", "data.eval"}, no_epochs},
      {"none", "no samples: one empty sample per micro-batch (the quadratic model)", make_no_data, {},
       no_data_issues},
  };
  return kDatasets;
}

std::unique_ptr<Dataset> make_dataset(const RunConfig& config) {
  std::string known;
  for (const auto& e : dataset_registry()) {
    if (config.data.kind == e.name) return e.make(config);
    known += known.empty() ? e.name : std::string(", ") + e.name;
  }
  throw_error(__FILE__, __LINE__, "kind in kDatasets",
              "data.kind: unknown dataset '" + config.data.kind + "' (known: " + known + ")");
}

std::unique_ptr<Dataset> make_no_data(const RunConfig&) { return std::make_unique<NoData>(); }

void Dataset::shape_batch(Batch&, int64_t, int) const {
  throw_error(__FILE__, __LINE__, "an indexable dataset", "shape_batch: this dataset has no indexed training set");
}
void Dataset::read_sample(int64_t, Batch&, int64_t) const {
  throw_error(__FILE__, __LINE__, "an indexable dataset", "read_sample: this dataset has no indexed training set");
}

// Fisher-Yates (Knuth's Algorithm P) from the top: for i = n-1..1, j = r_i mod (i+1) with r_i the 64 bits of
// words 0,1 of philox_draw(seed, kShuffle, step = epoch, rank = 0, index = i); swap positions i and j.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  GS_EXPECT(n >= 0 && n <= static_cast<int64_t>(UINT32_MAX), "epoch_order: training set size out of range");
  GS_EXPECT(epoch >= 0 && epoch <= static_cast<int64_t>(UINT32_MAX), "epoch_order: epoch out of range");
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  for (int64_t i = n - 1; i > 0; --i) {
    const Draw4 d = philox_draw(seed, Purpose::kShuffle, static_cast<uint32_t>(epoch), 0, static_cast<uint32_t>(i));
    const uint64_t r = (static_cast<uint64_t>(d.v[0]) << 32) | d.v[1];
    const auto j = static_cast<int64_t>(r % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

// floor(train_size / G), G = N*K*b; throws when one global batch needs more samples than the training set has.
int64_t indexed_steps_per_epoch(const RunConfig& config, int64_t train_size) {
  const int64_t n = config.cluster.ranks, k = config.training.accumulation_steps, b = config.data.batch_per_rank;
  GS_EXPECT(n >= 1, "cluster.ranks: must be >= 1");
  GS_EXPECT(k >= 1, "training.accumulation_steps: must be >= 1");
  GS_EXPECT(b >= 1, "data.batch_per_rank: must be >= 1");
  const int64_t global = step_shape(config).global_batch;
  GS_EXPECT(global <= train_size,
            "data.batch_per_rank: one global batch (ranks x accumulation_steps x batch_per_rank = " +
                std::to_string(global) + " samples) exceeds the training set (" + std::to_string(train_size) +
                " samples)");
  return train_size / global;
}

// The b training-set indices of micro-batch `micro` of `rank` at optimizer step `step` (dataset.h's rule).
std::vector<int64_t> micro_batch_indices(const RunConfig& config, int64_t train_size, int64_t step, int64_t micro,
                                         int rank) {
  const int64_t n = config.cluster.ranks, k = config.training.accumulation_steps, b = config.data.batch_per_rank;
  const int64_t per_epoch = indexed_steps_per_epoch(config, train_size);
  GS_EXPECT(step >= 0, "micro_batch: step must be >= 0");
  GS_EXPECT(micro >= 0 && micro < k, "micro_batch: micro-batch index outside [0, accumulation_steps)");
  GS_EXPECT(rank >= 0 && rank < n, "micro_batch: rank outside [0, cluster.ranks)");
  const int64_t epoch = step / per_epoch;
  const int64_t first = (step % per_epoch) * step_shape(config).global_batch + (micro * n + rank) * b;
  std::vector<int64_t> idx(static_cast<size_t>(b));
  if (!config.data.shuffle) {
    std::iota(idx.begin(), idx.end(), first);
    return idx;
  }
  const auto order = cached_shuffled_order(train_size, static_cast<uint64_t>(config.training.seed), epoch);
  std::copy(order->begin() + first, order->begin() + first + b, idx.begin());
  return idx;
}

}  // namespace gs
