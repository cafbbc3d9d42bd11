// The compressor registry: one line per compressor {name, doc, factory, the fields that apply to it, its cross-field
// rule if it has one}. Add one by writing its file and one line here (README, "Adding a compressor"):
// compression.kind's choices and its fields' kind rules come from this table (sim/validate/kinds.cpp).
#include <cmath>

#include <fmt/format.h>

#include "sim/compress/compressor.h"
#include "sim/core/error.h"

namespace gs {
namespace {

std::vector<std::string> join(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// threshold and dgc keep a share of values that depends on the gradient: timing-only runs price it from
// compression.expected_density, which they need in (0, 1]; training runs measure it.
void expected_density_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  const std::string path = "compression.expected_density";
  const bool timing = c.training.mode == "timing";
  const double density = c.compression.expected_density;
  if (timing && !c.compression.expected_density_given)
    issues.push_back({path, fmt::format("required in timing-only runs (training.mode \"timing\", --timing-only) of "
                                        "compression.kind \"{}\": the share of values it keeps depends on the "
                                        "gradient, which a timing-only run does not compute; expected the fraction "
                                        "kept per bucket in (0, 1] (e.g. 0.001)", c.compression.kind)});
  else if (timing && !(density > 0.0 && density <= 1.0))
    issues.push_back({path, fmt::format("out of range (0, 1], got {}: {} keeps a share of values that depends on the "
                                        "gradient, which a timing-only run does not compute; expected the fraction "
                                        "kept per bucket in (0, 1] (e.g. 0.001)", density, c.compression.kind)});
  if (!timing && density != 0.0)
    issues.push_back({path, fmt::format("a training run measures the share of values {} keeps: remove it (it is for "
                                        "training.mode \"timing\"), got {}", c.compression.kind, density)});
}

// PowerSGD all-reduces its factors between the workers.
void powersgd_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  if (c.sync.kind == "parameter_server")
    issues.push_back({"compression.kind", "powersgd needs all-reduces of its factors between the workers, which a "
                                          "parameter server does not do: with sync.kind \"parameter_server\" use "
                                          "another compressor (e.g. topk)"});
}

}  // namespace

const std::vector<CompressorEntry>& compressor_registry() {
  using Options = std::vector<std::string>;
  // Every lossy kind reports its error; error feedback sits in the reducer for all but dgc (its own residual).
  const Options lossy = {"compression.measure_error", "compression.error_feedback"};
  const Options cast = join(lossy, {"compression.divide", "compression.accumulate"});
  static const std::vector<CompressorEntry> kCompressors = {
      {"none", "gradients cross the wire as they are (the uncompressed all-reduce)", nullptr, {}},
      {"fp16", "cast to IEEE half: all-reduce summed in fp16 in rank order (RNE after every add); `divide`", make_cast,
       cast},
      {"bf16", "cast to bfloat16: all-reduce summed in bf16 in rank order; `divide`", make_cast, cast},
      {"fp8_e4m3", "cast to OCP FP8 E4M3 (saturating): all-reduce summed in E4M3 in rank order; `divide`", make_cast,
       cast},
      {"fp8_e5m2", "cast to OCP FP8 E5M2: all-reduce summed in E5M2 in rank order; `divide`", make_cast, cast},
      {"topk", "k largest |p| per bucket or model (ties: lowest index); all-gather of index+value", make_topk,
       join(lossy, {"compression.ratio", "compression.k", "compression.scope"})},
      {"randomk", "k random indices (Philox; shared_indices, unbiased d/k scale); all-gather", make_randomk,
       join(lossy, {"compression.ratio", "compression.k", "compression.shared_indices", "compression.unbiased"})},
      {"threshold", "values with |p| >= tau; all-gather of index+value", make_threshold,
       join(lossy, {"compression.tau", "compression.expected_density"}), expected_density_issues},
      {"dgc", "Deep Gradient Compression: sampled threshold, momentum correction, clipping, masking, warm-up",
       make_dgc,
       {"compression.measure_error", "compression.ratio", "compression.momentum", "compression.clip_norm",
        "compression.warmup_steps", "compression.sample_ratio", "compression.expected_density"},
       expected_density_issues},
      {"qsgd", "QSGD: s levels, stochastic rounding (unbiased), per-bucket norm, bit-packed; all-gather", make_qsgd,
       join(lossy, {"compression.levels"})},
      {"terngrad", "TernGrad: {-1, 0, 1} x max|p|, stochastic (unbiased), 2 bits per value; all-gather",
       make_terngrad, lossy},
      {"signsgd", "sign bits scaled by mean |p| (EF-signSGD with error_feedback); vote: majority of signs",
       make_signsgd, join(lossy, {"compression.vote"})},
      {"onebit", "1-bit SGD: sign bits with per-bucket positive and negative means; all-gather", make_onebit, lossy},
      {"powersgd", "PowerSGD rank r per matrix: warm-started Q, Gram-Schmidt, two factor all-reduces", make_powersgd,
       join(lossy, {"compression.rank", "compression.start_step", "compression.min_compression_rate",
                    "compression.orthogonalization_epsilon"}),
       powersgd_issues},
  };
  return kCompressors;
}

std::unique_ptr<Compressor> make_compressor(const RunConfig& run, const Model& model, int ranks) {
  const CompressionConfig& config = run.compression;
  std::string known;
  for (const auto& e : compressor_registry()) {
    if (config.kind == e.name) return e.make == nullptr ? nullptr : e.make(run, model, ranks);
    known += (known.empty() ? "" : ", ") + std::string(e.name);
  }
  throw Error(fmt::format("compression.kind: unknown compressor \"{}\"; known: {}", config.kind, known));
}

size_t kept_count(size_t n, double ratio, int64_t k) {
  if (n == 0) return 0;
  size_t c = k > 0 ? static_cast<size_t>(k) : static_cast<size_t>(std::llround(ratio * static_cast<double>(n)));
  return std::min(n, std::max<size_t>(1, c));
}

}  // namespace gs
