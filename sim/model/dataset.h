// Dataset interface and registry: where a rank's micro-batches and the evaluation set come from. Datasets are
// immutable after construction and shared by all rank threads. A new dataset is one file plus one line in
// kDatasets (dataset_registry.cpp).
//
// Sampling (every indexable dataset): optimizer step t uses the global batch of G = N*K*b samples at positions
// [t'*G, (t'+1)*G) of the current epoch's order (t' = t mod steps_per_epoch; epoch e = t / steps_per_epoch), where
// the order is a permutation of the training set drawn from (seed, Purpose::kShuffle, epoch) when shuffling, else the
// identity. Inside the global batch, micro-batch k of rank r is positions [(k*N + r)*b, (k*N + r + 1)*b). The last
// partial global batch of an epoch is dropped. So N ranks x K micro-batches see exactly the samples of one batch of
// N*K*b.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "sim/config/run_config.h"
#include "sim/model/model.h"

namespace gs {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t in_dim() const = 0;
  // Classes (classification) or regression outputs per sample.
  virtual int64_t out_dim() const = 0;
  virtual bool classification() const = 0;
  // Optimizer steps per epoch (0 when the dataset has no epochs, e.g. inline data cycling its micro-batches).
  virtual int64_t steps_per_epoch() const = 0;
  // Fills out (resizing its vectors) with micro-batch `micro` (0..K-1) of `rank` at optimizer step `step`
  // (0-based). Thread-safe.
  virtual void micro_batch(int64_t step, int64_t micro, int rank, Batch& out) const = 0;
  // The evaluation set.
  virtual const Batch& eval_set() const = 0;

  // Indexable datasets (fashion_mnist, teacher): a training set of train_size() samples addressed by index, which the
  // loader (loader.h) reads sample by sample through a cache. 0 for the others (inline, none): the loader then calls
  // micro_batch and nothing is priced as storage.
  virtual int64_t train_size() const { return 0; }
  // Bytes one training sample occupies on storage in its encoded form (fashion_mnist: 784 pixel bytes + 1 label
  // byte), the unit the storage profile prices.
  virtual int64_t stored_sample_bytes() const { return 0; }
  // Bytes of one decoded sample in memory (x, then y or the label): what a cache holds and a peer sends.
  int64_t decoded_sample_bytes() const {
    return (in_dim() + (classification() ? 1 : out_dim())) * static_cast<int64_t>(sizeof(float));
  }
  // Sizes out for `count` samples of `rank` (x, y or labels). Indexable datasets only.
  virtual void shape_batch(Batch& out, int64_t count, int rank) const;
  // Reads training sample i from the backing store (the stand-in for storage) and decodes it into row `row` of out
  // (shaped by shape_batch). Thread-safe. micro_batch(step, k, rank) equals shape_batch + read_sample of
  // micro_batch_indices(...) row by row, bit for bit.
  virtual void read_sample(int64_t i, Batch& out, int64_t row) const;
};

struct DatasetEntry {
  const char* name;
  const char* doc;
  std::unique_ptr<Dataset> (*make)(const RunConfig& config);
  // The fields (or sections) that apply under this kind (data.kind's choices and rules: sim/validate/kinds.cpp).
  std::vector<std::string> options;
  KindIssues issues = nullptr;  // its cross-field rule beyond the options (sim/validate: validate_config)
};

const std::vector<DatasetEntry>& dataset_registry();
// Throws gs::Error naming the problem (unknown kind, missing file, ...).
std::unique_ptr<Dataset> make_dataset(const RunConfig& config);

std::unique_ptr<Dataset> make_fashion_mnist(const RunConfig& config);
std::unique_ptr<Dataset> make_teacher(const RunConfig& config);
std::unique_ptr<Dataset> make_inline(const RunConfig& config);
std::unique_ptr<Dataset> make_no_data(const RunConfig& config);  // "none": one empty sample per micro-batch

// Position p of epoch e's order over n samples (a permutation from (seed, Purpose::kShuffle, e), or identity when
// shuffle is false). Shared by every indexable dataset.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

// The sampling rule above for a dataset of train_size samples: optimizer steps per epoch (the last partial global
// batch dropped; throws gs::Error naming data.batch_per_rank when one global batch exceeds the set), and the
// training-set indices of micro-batch `micro` of `rank` at optimizer step `step`.
int64_t indexed_steps_per_epoch(const RunConfig& config, int64_t train_size);
std::vector<int64_t> micro_batch_indices(const RunConfig& config, int64_t train_size, int64_t step, int64_t micro,
                                         int rank);

}  // namespace gs
