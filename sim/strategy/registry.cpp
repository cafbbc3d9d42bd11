// The sync-strategy registry: the order of the strategies, one line each; each strategy's line (name, doc, factory,
// the fields that apply to it, its rule) is `StrategyEntry <name>_strategy()` in its own file. Add a strategy by
// writing sim/strategy/<name>.cpp and one GS_STRATEGY line here (README, "Adding a sync strategy"): sync.kind's
// choices and its fields' kind rules come from this table (sim/validate/kinds.cpp). The optimizers that run as
// strategies of their own have a table of their own.
#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/strategy/strategy.h"

namespace gs {

// The line of strategy `name`: `StrategyEntry name_strategy()`, defined in sim/strategy/<name>.cpp and declared here
// (at block scope, in namespace gs), so that a new strategy adds nothing outside its file but this line.
#define GS_STRATEGY(name)                     \
  [] {                                        \
    extern StrategyEntry name##_strategy();   \
    return name##_strategy();                 \
  }()

const std::vector<StrategyEntry>& strategy_registry() {
  static const std::vector<StrategyEntry> kStrategies = {
      GS_STRATEGY(allreduce),
      GS_STRATEGY(independent),
      GS_STRATEGY(local_sgd),
      GS_STRATEGY(parameter_server),
      GS_STRATEGY(zero),
  };
  return kStrategies;
}

const std::vector<StrategyEntry>& optimizer_strategy_registry() {
  static const std::vector<StrategyEntry> kOptimizerStrategies = {
      GS_STRATEGY(onebit_adam),
      GS_STRATEGY(zero_one_adam),
      GS_STRATEGY(onebit_lamb),
  };
  return kOptimizerStrategies;
}

#undef GS_STRATEGY

bool owns_communication(const OptimizerConfig& optimizer) {
  for (const auto& e : optimizer_strategy_registry())
    if (optimizer.kind == e.name) return true;
  return false;
}

const StrategyEntry& find_strategy(const RunConfig& config) {
  // An optimizer that owns its communication replaces the all-reduce.
  if (owns_communication(config.training.optimizer)) {
    if (config.sync.kind != "allreduce")
      throw Error(fmt::format("sync.kind: training.optimizer.kind \"{}\" runs its own all-reduce: expected "
                              "\"allreduce\", got \"{}\"", config.training.optimizer.kind, config.sync.kind));
    for (const auto& e : optimizer_strategy_registry())
      if (config.training.optimizer.kind == e.name) return e;
  }
  std::string known;
  for (const auto& e : strategy_registry()) {
    if (config.sync.kind == e.name) return e;
    known += (known.empty() ? "" : ", ") + std::string(e.name);
  }
  throw Error(fmt::format("sync.kind: unknown strategy \"{}\"; known: {}", config.sync.kind, known));
}

std::unique_ptr<SyncStrategy> make_strategy(const StrategySetup& setup) {
  return find_strategy(setup.config).make(setup);
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
