// The compressor registry: the order of the compressors, one line each; each compressor's line (name, doc, factory,
// the fields that apply to it, its cross-field rule, its payload size) is `CompressorEntry <name>_compressor()` in its
// own file. Add one by writing sim/compress/<name>.cpp and one GS_COMPRESSOR line here (README, "Adding a compressor"):
// compression.kind's choices and its fields' kind rules come from this table (sim/validate/kinds.cpp).
#include <cmath>

#include <fmt/format.h>

#include "sim/compress/compressor.h"
#include "sim/core/error.h"

namespace gs {

std::vector<std::string> lossy_options(std::vector<std::string> more) {
  more.insert(more.begin(), {"compression.measure_error", "compression.error_feedback"});
  return more;
}

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

// The line of compressor `name`: `CompressorEntry name_compressor()`, defined in sim/compress/<file>.cpp and declared
// here (at block scope, in namespace gs), so that a new compressor adds nothing outside its file but this line.
#define GS_COMPRESSOR(name)                \
  [] {                                     \
    extern CompressorEntry name##_compressor(); \
    return name##_compressor();            \
  }()

const std::vector<CompressorEntry>& compressor_registry() {
  static const std::vector<CompressorEntry> kCompressors = {
      {"none", "gradients cross the wire as they are (the uncompressed all-reduce)", nullptr, {}},
      GS_COMPRESSOR(fp16),       // sim/compress/cast.cpp
      GS_COMPRESSOR(bf16),       // sim/compress/cast.cpp
      GS_COMPRESSOR(fp8_e4m3),   // sim/compress/cast.cpp
      GS_COMPRESSOR(fp8_e5m2),   // sim/compress/cast.cpp
      GS_COMPRESSOR(topk),
      GS_COMPRESSOR(randomk),
      GS_COMPRESSOR(threshold),
      GS_COMPRESSOR(dgc),
      GS_COMPRESSOR(qsgd),
      GS_COMPRESSOR(terngrad),
      GS_COMPRESSOR(signsgd),
      GS_COMPRESSOR(onebit),
      GS_COMPRESSOR(powersgd),
  };
  return kCompressors;
}

#undef GS_COMPRESSOR

const CompressorEntry* find_compressor(const std::string& kind) {
  for (const auto& e : compressor_registry())
    if (kind == e.name) return &e;
  return nullptr;
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
