// The node cache of decoded training samples (data.cache): one per node, shared by its ranks' loaders, with the
// policies none | lru | static | partitioned. Decisions are made against the cache as it stood after the previous
// optimizer step, and the step's accesses update it in global-batch order once every loader of the node has loaded
// the step (a loader barrier per step), so hit counts are deterministic and never depend on thread timing. The data
// order never depends on the cache. A new policy is one more case in fill() and apply().
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/config/run_config.h"
#include "sim/model/dataset.h"
#include "sim/model/loader.h"
#include "sim/core/barrier.h"

namespace gs {

enum class CachePolicy { kNone, kLru, kStatic, kPartitioned };
// data.cache.policy's string -> enum; throws gs::Error naming data.cache.policy.
CachePolicy parse_cache_policy(const std::string& name);

// Samples a node's cache holds: floor(capacity_bytes / decoded sample bytes) when data.cache.capacity_bytes > 0,
// else floor(capacity_fraction x train_size); never more than train_size. 0 for policy none.
int64_t cache_capacity_samples(const RunConfig& config, const Dataset& data);

class DataCache {
 public:
  // One cache per node of ranks_per_node consecutive ranks (rank r is on node r / ranks_per_node). `data` must be
  // indexable (train_size() > 0). Allocates the decoded-sample memory lazily as it fills.
  DataCache(const Dataset& data, const RunConfig& config, int ranks_per_node);
  ~DataCache();

  // Fills rows of out (shaped) with samples idx (training-set indices of micro-batch `micro` of `rank` at `step`):
  //   lru, static: a sample in the node cache is copied from it (hit); partitioned: from this rank's part (hit) or
  //   from the part of the rank holding it (peer fetch); anything else is read from the backing store and decoded
  //   (storage), and kept for the cache's update at the end of the step when the policy may admit it.
  void fill(const Dataset& data, const std::vector<int64_t>& idx, int64_t step, int64_t micro, int rank, Batch& out,
            DataCounts& counts);
  // Called by every loader of the node after it loaded all micro-batches of `step` (not after the last step):
  // waits for the node's other loaders, then the node's first rank applies the step's accesses in global-batch
  // order (lru: hits move to the front, misses insert and evict the least recently used; static: misses fill free
  // slots, nothing is ever evicted (CoorDL's MinIO); partitioned: a rank's misses fill its own part), then all go
  // on. Throws Aborted after abort().
  void end_step(int rank, int64_t step);
  // Releases every loader waiting in end_step (they throw Aborted); permanent.
  void abort();

  CachePolicy policy() const { return policy_; }
  int64_t capacity_samples() const { return capacity_; }
  // Samples the node of `rank` holds now (tests; call between steps).
  int64_t resident_samples(int rank) const;

 private:
  struct Node;
  CachePolicy policy_;
  int64_t capacity_;
  int ranks_per_node_;
  int64_t in_dim_, out_dim_;
  bool classification_;
  int64_t global_batch_;   // N*K*b: the position of a sample in its step's global batch orders the updates
  int ranks_, batch_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

}  // namespace gs
