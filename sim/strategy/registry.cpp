// The sync-strategy registry: one line per strategy. Add a strategy by writing its file and one line here (and its
// name in the `sync.kind` choices of sim/config/run_config.cpp).
#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/strategy/strategy.h"

namespace gs {

const std::vector<StrategyEntry>& strategy_registry() {
  static const std::vector<StrategyEntry> kStrategies = {
      {"allreduce", "bulk-synchronous data parallel: bucketed all-reduce (sum) of gradients, divided by the step's "
                    "sample count; replicas stay bit-identical",
       make_allreduce},
      {"independent", "no communication: every rank trains its own replica (local SGD with H = infinity)",
       make_independent},
      {"local_sgd", "local SGD: local optimizer steps, parameters averaged every sync.period steps (optionally the "
                    "optimizer state), after sync.warmup_steps of synchronous all-reduce (post-local SGD)",
       make_local_sgd},
      {"parameter_server", "parameters sharded over server shards that own the optimizer; workers push gradients and "
                           "pull parameters; sync.staleness 0 = BSP, s = SSP, \"inf\" = asynchronous, in modeled-time "
                           "order",
       make_parameter_server},
      {"zero", "ZeRO / FSDP: gradients reduce-scattered, each rank updates its 1/N shard (optimizer state sharded; "
               "sync.stage 2 and 3 also shard gradients and parameters), parameters all-gathered; bit-identical to "
               "allreduce, GPU memory and modeled clock per stage",
       make_zero},
  };
  return kStrategies;
}

std::unique_ptr<SyncStrategy> make_strategy(const StrategySetup& setup) {
  // An optimizer that owns its communication replaces the all-reduce.
  if (owns_communication(setup.config.training.optimizer)) {
    if (setup.config.sync.kind != "allreduce")
      throw Error(fmt::format("sync.kind: training.optimizer.kind \"{}\" runs its own all-reduce: expected "
                              "\"allreduce\", got \"{}\"", setup.config.training.optimizer.kind,
                              setup.config.sync.kind));
    if (setup.config.training.optimizer.kind == "zero_one_adam") return make_zero_one_adam(setup);
    return make_onebit_adam(setup);
  }
  std::string known;
  for (const auto& e : strategy_registry()) {
    if (setup.config.sync.kind == e.name) return e.make(setup);
    known += (known.empty() ? "" : ", ") + std::string(e.name);
  }
  throw Error(fmt::format("sync.kind: unknown strategy \"{}\"; known: {}", setup.config.sync.kind, known));
}

std::vector<Bucket> make_buckets(const std::vector<TensorInfo>& tensors, size_t first_bucket_bytes,
                                 size_t bucket_bytes) {
  std::vector<Bucket> buckets;
  Bucket cur;
  bool open = false;
  for (size_t i = tensors.size(); i-- > 0;) {
    const TensorInfo& t = tensors[i];
    if (t.count == 0) continue;
    if (!open) {
      cur = Bucket{t.offset, t.offset + t.count};
      open = true;
    } else {
      GS_EXPECT(t.offset + t.count == cur.begin, "tensor table must be contiguous");
      cur.begin = t.offset;
    }
    size_t cap = buckets.empty() ? first_bucket_bytes : bucket_bytes;
    if ((cur.end - cur.begin) * sizeof(float) >= cap) {
      buckets.push_back(cur);
      open = false;
    }
  }
  if (open) buckets.push_back(cur);
  return buckets;
}

}  // namespace gs
