// The per-rank data loader: a thread that reads, decodes and batches that rank's micro-batches in training order
// (step 0 micro-batch 0..K-1, step 1, ...) into a bounded prefetch queue of data.prefetch micro-batches, counting
// where each sample came from. The rank loop takes micro-batches with next() and times the wait (data stall).
// A new sample source (a cache policy) plugs in through DataCache (data_cache.h), not here.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "sim/config/run_config.h"
#include "sim/model/dataset.h"

namespace gs {

class DataCache;

// Where the samples of one micro-batch (or a sum of them) came from. samples = hits + peer_samples + storage_samples
// for indexable datasets; the others (inline, none) count samples only.
struct DataCounts {
  int64_t samples = 0;
  int64_t hits = 0;             // served from this rank's node cache (its own part, under `partitioned`)
  int64_t peer_samples = 0;     // partitioned: fetched from the rank that caches them
  int64_t storage_samples = 0;  // read from storage (the backing store) and decoded
  double storage_bytes = 0;     // stored (encoded) bytes read from storage
  double peer_bytes = 0;        // decoded bytes received from peers
  int64_t peer_transfers = 0;   // distinct (micro-batch, peer) pairs: one transfer each on the modeled clock

  DataCounts& operator+=(const DataCounts& o) {
    samples += o.samples;
    hits += o.hits;
    peer_samples += o.peer_samples;
    storage_samples += o.storage_samples;
    storage_bytes += o.storage_bytes;
    peer_bytes += o.peer_bytes;
    peer_transfers += o.peer_transfers;
    return *this;
  }
};

// Reads samples indices[s] of an indexable dataset into rows s of out (already shaped by data.shape_batch) with
// `threads` threads (>= 1; the calling thread is one of them): contiguous ranges of rows, at least 16 rows a thread,
// so a small micro-batch is read by fewer threads. Each row is written by data.read_sample alone, so out is bitwise
// the serial read's whatever the thread count. The first range's exception, if any, is rethrown after all joined.
void read_samples(const Dataset& data, const std::vector<int64_t>& indices, int64_t threads, Batch& out);

// Reads micro-batch `micro` of `rank` at `step` into out the way the loader does (through `cache` when not null),
// counting into counts. Indexable datasets read sample by sample (read_sample; data.loader_threads threads through
// read_samples when there is no node cache); the others through micro_batch.
// Thread-safe. The batch is bitwise the one data.micro_batch(step, micro, rank) gives, whatever the cache does.
void load_micro_batch(const Dataset& data, const RunConfig& config, DataCache* cache, int64_t step, int64_t micro,
                      int rank, Batch& out, DataCounts& counts);

class Loader {
 public:
  // prefetch >= 1: a thread produces the micro-batches of steps [0, steps) ahead into a queue of at most `prefetch`
  // finished micro-batches. prefetch 0: no thread; next() reads the micro-batch itself.
  Loader(const Dataset& data, const RunConfig& config, DataCache* cache, int rank, int64_t steps, int64_t prefetch);
  ~Loader();  // stops the thread (also when it waits on a full queue) and joins it
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next micro-batch in training order, swapped into out, with its counts. Blocks until it is ready. When the
  // loader thread threw, rethrows its exception (the message names the file and byte offset for IDX errors).
  void next(Batch& out, DataCounts& counts);
  // Largest number of finished micro-batches the queue ever held (<= prefetch).
  size_t max_queue_depth() const;

 private:
  struct Item {
    Batch batch;
    DataCounts counts;
  };
  void run();

  const Dataset& data_;
  const RunConfig& config_;
  DataCache* cache_;
  const int rank_;
  const int64_t steps_, prefetch_, micro_per_step_;
  int64_t next_step_ = 0, next_micro_ = 0;  // prefetch 0: the next micro-batch to read

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> ready_;
  std::vector<Batch> free_;  // buffers handed back by next(), reused by the thread
  bool stop_ = false;
  bool finished_ = false;
  std::exception_ptr error_;
  size_t max_depth_ = 0;
  std::thread thread_;
};

}  // namespace gs
