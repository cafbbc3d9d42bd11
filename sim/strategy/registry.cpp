// The sync-strategy registry: one line per strategy {name, doc, factory, the fields that apply to it}. Add a strategy
// by writing its file and one line here: sync.kind's choices and its fields' kind rules come from this table
// (sim/validate/kinds.cpp). The optimizers that run as strategies of their own have a table of their own.
#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/strategy/strategy.h"

namespace gs {
namespace {

// The options of a registry line from its groups.
std::vector<std::string> join(std::vector<std::string> a, const std::vector<std::string>& b,
                              const std::vector<std::string>& c = {}) {
  a.insert(a.end(), b.begin(), b.end());
  a.insert(a.end(), c.begin(), c.end());
  return a;
}

}  // namespace

const std::vector<StrategyEntry>& strategy_registry() {
  using Options = std::vector<std::string>;
  const Options buckets = {"sync.bucket_mb", "sync.first_bucket_mb"};
  const Options casts = {"compression.divide", "compression.accumulate"};  // the cast all-reduce's (reduce-scatter's)
  static const std::vector<StrategyEntry> kStrategies = {
      {"allreduce", "bulk-synchronous data parallel: bucketed all-reduce (sum) of gradients, divided by the step's "
                    "sample count; replicas stay bit-identical",
       make_allreduce, join({"sync.staleness", "sync.overlap"}, buckets, casts)},
      {"independent", "no communication: every rank trains its own replica (local SGD with H = infinity)",
       make_independent, {}},
      {"local_sgd", "local SGD: local optimizer steps, parameters averaged every sync.period steps (optionally the "
                    "optimizer state), after sync.warmup_steps of synchronous all-reduce (post-local SGD)",
       make_local_sgd, join({"sync.period", "sync.average_optimizer_state", "sync.warmup_steps"}, buckets)},
      {"parameter_server", "parameters sharded over server shards that own the optimizer; workers push gradients and "
                           "pull parameters; sync.staleness 0 = BSP, s = SSP, \"inf\" = asynchronous, in modeled-time "
                           "order",
       make_parameter_server, join({"sync.staleness", "sync.shards", "sync.dedicated", "sync.ordering"}, buckets)},
      {"zero", "ZeRO / FSDP: gradients reduce-scattered, each rank updates its 1/N shard (optimizer state sharded; "
               "sync.stage 2 and 3 also shard gradients and parameters), parameters all-gathered; bit-identical to "
               "allreduce, GPU memory and modeled clock per stage",
       make_zero, join({"sync.stage", "sync.reduce_every_microbatch"}, buckets, casts)},
  };
  return kStrategies;
}

const std::vector<StrategyEntry>& optimizer_strategy_registry() {
  using Options = std::vector<std::string>;
  const Options betas = {"training.optimizer.beta1", "training.optimizer.beta2", "training.optimizer.betas",
                         "training.optimizer.eps"};
  static const std::vector<StrategyEntry> kOptimizerStrategies = {
      {"onebit_adam", "DeepSpeed's 1-bit Adam: uncompressed Adam while the variance updates, then the momentum "
                      "all-reduced 1-bit compressed with error feedback",
       make_onebit_adam, join(betas, {"training.optimizer.freeze_step", "training.optimizer.exp_avg_mask"})},
      {"zero_one_adam", "DeepSpeed's 0/1 Adam: adaptive variance freezing, 1-bit compressed all-reduces and local "
                        "steps between syncs",
       make_zero_one_adam,
       join(betas, {"training.optimizer.var_freeze_step", "training.optimizer.var_update_scaler",
                    "training.optimizer.local_step_scaler", "training.optimizer.local_step_clipper"})},
  };
  return kOptimizerStrategies;
}

std::unique_ptr<SyncStrategy> make_strategy(const StrategySetup& setup) {
  // An optimizer that owns its communication replaces the all-reduce.
  if (owns_communication(setup.config.training.optimizer)) {
    if (setup.config.sync.kind != "allreduce")
      throw Error(fmt::format("sync.kind: training.optimizer.kind \"{}\" runs its own all-reduce: expected "
                              "\"allreduce\", got \"{}\"", setup.config.training.optimizer.kind,
                              setup.config.sync.kind));
    for (const auto& e : optimizer_strategy_registry())
      if (setup.config.training.optimizer.kind == e.name) return e.make(setup);
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
