// The compressor registry: one line per compressor. Add one by writing its file, one line here and its name in the
// compression.kind choices (and kind-specific rules) of sim/config/run_config.cpp.
#include <cmath>

#include <fmt/format.h>

#include "sim/compress/compressor.h"
#include "sim/core/error.h"

namespace gs {

const std::vector<CompressorEntry>& compressor_registry() {
  static const std::vector<CompressorEntry> kCompressors = {
      {"none", "gradients cross the wire as they are (the uncompressed all-reduce)", nullptr},
      {"fp16", "cast to IEEE half: all-reduce summed in fp16 in rank order (RNE after every add); `divide`", make_cast},
      {"bf16", "cast to bfloat16: all-reduce summed in bf16 in rank order; `divide`", make_cast},
      {"fp8_e4m3", "cast to OCP FP8 E4M3 (saturating): all-reduce summed in E4M3 in rank order; `divide`", make_cast},
      {"fp8_e5m2", "cast to OCP FP8 E5M2: all-reduce summed in E5M2 in rank order; `divide`", make_cast},
      {"topk", "k largest |p| per bucket or model (ties: lowest index); all-gather of index+value", make_topk},
      {"randomk", "k random indices (Philox; shared_indices, unbiased d/k scale); all-gather", make_randomk},
      {"threshold", "values with |p| >= tau; all-gather of index+value", make_threshold},
      {"dgc", "Deep Gradient Compression: sampled threshold, momentum correction, clipping, masking, warm-up",
       make_dgc},
      {"qsgd", "QSGD: s levels, stochastic rounding (unbiased), per-bucket norm, bit-packed; all-gather", make_qsgd},
      {"terngrad", "TernGrad: {-1, 0, 1} x max|p|, stochastic (unbiased), 2 bits per value; all-gather",
       make_terngrad},
      {"signsgd", "sign bits scaled by mean |p| (EF-signSGD with error_feedback); vote: majority of signs",
       make_signsgd},
      {"onebit", "1-bit SGD: sign bits with per-bucket positive and negative means; all-gather", make_onebit},
      {"powersgd", "PowerSGD rank r per matrix: warm-started Q, Gram-Schmidt, two factor all-reduces", make_powersgd},
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
