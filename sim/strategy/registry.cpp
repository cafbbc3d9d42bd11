// The sync-strategy registry: one line per strategy {name, doc, factory, the fields that apply to it, its rule}. Add
// a strategy by writing its file and one line here: sync.kind's choices and its fields' kind rules come from this
// table (sim/validate/kinds.cpp). The optimizers that run as strategies of their own have a table of their own.
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

// A delayed all-reduce applies its first update at step staleness + 1: it must come within the run.
void allreduce_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  const SyncConfig& sy = c.sync;
  if (sy.staleness > 0 && sy.staleness != kStalenessInf && c.training.epochs == 0 && sy.staleness >= c.training.steps)
    issues.push_back({"sync.staleness", fmt::format("expected fewer than training.steps ({}): with staleness {} the "
                                                    "first update is applied at step {}, so the run would never "
                                                    "update the parameters",
                                                    c.training.steps, sy.staleness, sy.staleness + 1)});
}

// ZeRO reduce-scatters in fp32 or a cast format (no other compressor, no error feedback); reducing every micro-batch
// needs sharded gradients (stage 2 or 3), reduced in fp32.
void zero_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  if (c.sync.reduce_every_microbatch) {
    const std::string path = "sync.reduce_every_microbatch";
    if (c.sync.stage < 2)
      issues.push_back({path, "true needs sharded gradients, sync.stage 2 or 3 (stage 1 keeps the whole gradient on "
                              "every rank and reduces it once per accumulation window, as DeepSpeed's stage 1 does), "
                              "got sync.stage 1"});
    if (c.compression.kind != "none")
      issues.push_back({path, fmt::format("true reduce-scatters each micro-batch in fp32; with compression.kind "
                                          "\"{}\" use false (one cast reduce-scatter per step)", c.compression.kind)});
    else if (c.precision.mode == "fp16_pure")
      issues.push_back({path, "true reduce-scatters each micro-batch in fp32; precision.mode \"fp16_pure\" sends "
                              "fp16 gradients: use false (one fp16 reduce-scatter per step)"});
  }
  const CompressionConfig& cp = c.compression;
  if (cp.kind != "none" && cp.kind != "fp16" && cp.kind != "bf16")
    issues.push_back({"compression.kind", fmt::format("sync.kind \"zero\" reduce-scatters its gradients in fp32 or in "
                                                      "a cast format (communication_data_type): use \"none\", "
                                                      "\"fp16\" or \"bf16\" (it is \"{}\")", cp.kind)});
  else if (cp.error_feedback != "none")
    issues.push_back({"compression.error_feedback", fmt::format("\"{}\": sync.kind \"zero\" casts without error "
                                                                "feedback (use \"none\")", cp.error_feedback)});
}

// The parameter server: what this version supports (docs/design.md, section 2; sim/strategy/parameter_server.cpp).
void parameter_server_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, msg}); };
  const SyncConfig& sy = c.sync;
  const bool timing = c.training.mode == "timing";
  if (!sy.dedicated && sy.shards > c.cluster.ranks)
    add("sync.shards", fmt::format("co-located shards live on the workers: at most cluster.ranks ({}), got {} (or set "
                                   "sync.dedicated true)", c.cluster.ranks, sy.shards));
  const std::string& mode = c.precision.mode;
  if (mode != "fp32" && mode != "bf16_mixed" && mode != "fp16_mixed" && mode != "fp16_pure")
    add("precision.mode", fmt::format("sync.kind \"parameter_server\" supports \"fp32\", \"bf16_mixed\", "
                                      "\"fp16_mixed\" (fp32 master weights on the server, each worker its own loss "
                                      "scaler) and \"fp16_pure\" in this version, got \"{}\"", mode));
  if (c.report.trace)
    add("report.trace", "sync.kind \"parameter_server\" has no per-step snapshot of every rank (ranks do not step "
                        "together): use false");
  if (timing && sy.staleness != 0)
    add("training.mode", "timing-only runs of sync.kind \"parameter_server\" price BSP (sync.staleness 0) only: SSP "
                         "and asynchronous schedules need the event order of a training run");
}

// training.optimizer.kind "onebit_adam" (onebit_adam.cpp), "zero_one_adam" (zero_one_adam.cpp) and "onebit_lamb"
// (onebit_lamb.cpp) own the gradient's communication: the full-precision all-reduce of the steps that update the
// variance and DeepSpeed's compressed all-reduce of the momentum (or, for 0/1 Adam, of the gradient and of the
// accumulated update). Settings that would change either are refused.
void onebit_adam_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  const std::string by = "training.optimizer.kind \"" + c.training.optimizer.kind + "\" ";
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, by + msg}); };
  if (c.sync.kind != "allreduce")
    add("sync.kind", "runs its own all-reduce (uncompressed while the variance updates, DeepSpeed's compressed "
                     "all-reduce otherwise); it replaces sync.kind \"allreduce\" and combines with no other strategy "
                     "(DeepSpeed refuses it under ZeRO too): expected \"allreduce\", got \"" + c.sync.kind + "\"");
  if (c.compression.kind != "none")
    add("compression.kind", "compresses what it sends itself (1 bit per value with error feedback on worker and "
                            "server): expected \"none\", got \"" + c.compression.kind + "\"");
  if (c.sync.kind == "allreduce" && c.sync.staleness != 0)
    add("sync.staleness", "applies every step's momentum in that step: expected 0, got " +
                              fmt::format("{}", c.sync.staleness));
  if (c.precision.mode == "fp16_pure")
    add("precision.mode", "keeps fp32 parameters and state here (fp16_pure's fp16 storage is not modeled for it): "
                          "expected another mode, got \"fp16_pure\"");
  else if (c.precision.loss_scale == "static" || c.precision.loss_scale == "dynamic" ||
           (c.precision.loss_scale == "auto" && c.precision.mode == "fp16_mixed"))
    add("precision.loss_scale", "runs without a loss scaler here (DeepSpeed's FP16_Optimizer scaler is not modeled "
                                "for it): expected \"none\" (or \"auto\" outside fp16_mixed), got \"" +
                                    c.precision.loss_scale + "\"");
  if (c.training.clip_grad_norm > 0)
    add("training.clip_grad_norm", fmt::format("does not clip (DeepSpeed's OnebitAdam, ZeroOneAdam and OnebitLamb "
                                               "keep max_grad_norm but never apply it): expected 0, got {}",
                                               c.training.clip_grad_norm));
  if (c.training.pitfall != "none")
    add("training.pitfall", "is modeled without the pitfalls (they change the divisors of the plain all-reduce): "
                            "expected \"none\", got \"" + c.training.pitfall + "\"");
  // 1-bit Adam's non-freeze group: a list of distinct names (the model's table is checked in validate_config).
  const json& names = c.training.optimizer.uncompressed_tensors;
  if (c.training.optimizer.kind != "onebit_adam" || names.is_null()) return;
  const std::string path = "training.optimizer.uncompressed_tensors";
  if (!names.is_array())
    return issues.push_back({path, "expected null or a list of tensor names (docs/models.md), got " + names.dump()});
  for (size_t i = 0; i < names.size(); ++i) {
    if (!names[i].is_string() || names[i].get<std::string>().empty()) {
      issues.push_back({fmt::format("{}[{}]", path, i), "expected a tensor name, got " + names[i].dump()});
      continue;
    }
    for (size_t j = 0; j < i; ++j)
      if (names[j] == names[i])
        issues.push_back({fmt::format("{}[{}]", path, i), "names " + names[i].dump() + " a second time"});
  }
}

// 1-bit LAMB: 1-bit Adam's refusals, and bounds that are ordered.
void onebit_lamb_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  onebit_adam_issues(c, issues);
  const OptimizerConfig& o = c.training.optimizer;
  if (o.min_coeff > o.max_coeff)
    issues.push_back({"training.optimizer.min_coeff", fmt::format("expected at most training.optimizer.max_coeff "
                                                                  "({}), got {}", o.max_coeff, o.min_coeff)});
  if (o.factor_min > o.factor_max)
    issues.push_back({"training.optimizer.factor_min", fmt::format("expected at most training.optimizer.factor_max "
                                                                   "({}), got {}", o.factor_max, o.factor_min)});
}

}  // namespace

const std::vector<StrategyEntry>& strategy_registry() {
  using Options = std::vector<std::string>;
  const Options buckets = {"sync.bucket_mb", "sync.first_bucket_mb"};
  const Options casts = {"compression.divide", "compression.accumulate"};  // the cast all-reduce's (reduce-scatter's)
  static const std::vector<StrategyEntry> kStrategies = {
      {"allreduce", "bulk-synchronous data parallel: bucketed all-reduce (sum) of gradients, divided by the step's "
                    "sample count; replicas stay bit-identical",
       make_allreduce, join({"sync.staleness", "sync.overlap"}, buckets, casts), allreduce_issues},
      {"independent", "no communication: every rank trains its own replica (local SGD with H = infinity)",
       make_independent, {}},
      {"local_sgd", "local SGD: local optimizer steps, parameters averaged every sync.period steps (optionally the "
                    "optimizer state), after sync.warmup_steps of synchronous all-reduce (post-local SGD)",
       make_local_sgd, join({"sync.period", "sync.average_optimizer_state", "sync.warmup_steps"}, buckets)},
      {"parameter_server", "parameters sharded over server shards that own the optimizer; workers push gradients and "
                           "pull parameters; sync.staleness 0 = BSP, s = SSP, \"inf\" = asynchronous, in modeled-time "
                           "order",
       make_parameter_server, join({"sync.staleness", "sync.shards", "sync.dedicated", "sync.ordering"}, buckets),
       parameter_server_issues},
      {"zero", "ZeRO / FSDP: gradients reduce-scattered, each rank updates its 1/N shard (optimizer state sharded; "
               "sync.stage 2 and 3 also shard gradients and parameters), parameters all-gathered; bit-identical to "
               "allreduce, GPU memory and modeled clock per stage",
       make_zero, join({"sync.stage", "sync.reduce_every_microbatch"}, buckets, casts), zero_issues},
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
       make_onebit_adam,
       join(betas, {"training.optimizer.freeze_step", "training.optimizer.exp_avg_mask",
                    "training.optimizer.uncompressed_tensors"}),
       onebit_adam_issues},
      {"zero_one_adam", "DeepSpeed's 0/1 Adam: adaptive variance freezing, 1-bit compressed all-reduces and local "
                        "steps between syncs",
       make_zero_one_adam,
       join(betas, {"training.optimizer.var_freeze_step", "training.optimizer.var_update_scaler",
                    "training.optimizer.local_step_scaler", "training.optimizer.local_step_clipper"}),
       onebit_adam_issues},
      {"onebit_lamb", "DeepSpeed's 1-bit LAMB: uncompressed LAMB while the variance updates, then the momentum "
                      "all-reduced 1-bit compressed with error feedback and the frozen per-tensor LAMB coefficients",
       make_onebit_lamb,
       join(betas, {"training.optimizer.freeze_step", "training.optimizer.exp_avg_mask", "training.optimizer.max_coeff",
                    "training.optimizer.min_coeff", "training.optimizer.coeff_beta", "training.optimizer.factor_max",
                    "training.optimizer.factor_min", "training.optimizer.factor_threshold"}),
       onebit_lamb_issues},
  };
  return kOptimizerStrategies;
}

bool owns_communication(const OptimizerConfig& optimizer) {
  for (const auto& e : optimizer_strategy_registry())
    if (optimizer.kind == e.name) return true;
  return false;
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
