// `qsgd`: QSGD (Alistarh et al., NeurIPS 2017): s levels, stochastic rounding (unbiased), one fp32 norm per bucket,
// per value a bit-packed level + sign (kernels/compress.h qsgd_encode); payloads all-gathered, decoded, summed.
#include "kernels/compress.h"
#include "sim/compress/compressor.h"

namespace gs {
namespace {

class Qsgd final : public Compressor {
 public:
  explicit Qsgd(const CompressionConfig& c) : s_(static_cast<int>(c.levels)) {}
  WireCollective collective() const override { return WireCollective::kAllGather; }
  void encode(const BucketJob& job, std::vector<uint8_t>& payload) override {
    payload.resize(qsgd_encoded_bytes(job.n, s_));
    qsgd_encode(payload.data(), job.p, job.n, s_, job.seed, job.stream());
  }
  void decode_add(const BucketJob& job, int, const uint8_t* payload, size_t, float* out) override {
    qsgd_decode_add(out, payload, job.n, s_);
  }

 private:
  int s_;
};

std::unique_ptr<Compressor> make(const RunConfig& rc, const Model&, int) { return std::make_unique<Qsgd>(rc.compression); }

double payload_bytes(const CompressionConfig& c, size_t n) {
  return static_cast<double>(qsgd_encoded_bytes(n, static_cast<int>(c.levels)));
}

}  // namespace

CompressorEntry qsgd_compressor() {
  return {"qsgd", "QSGD: s levels, stochastic rounding (unbiased), per-bucket norm, bit-packed; all-gather", make,
          lossy_options({"compression.levels"}), nullptr, payload_bytes};
}

}  // namespace gs
