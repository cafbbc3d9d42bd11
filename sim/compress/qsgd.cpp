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
  size_t max_payload_bytes(size_t n) const override { return qsgd_encoded_bytes(n, s_); }
  size_t encode_into(const BucketJob& job, uint8_t* out) override {
    job.compress_ops().qsgd_encode(job.rank, out, job.p, job.n, s_, job.seed, job.stream());
    return qsgd_encoded_bytes(job.n, s_);
  }
  void decode_add(const BucketJob& job, int, const uint8_t* payload, size_t, float* out) override {
    job.compress_ops().qsgd_decode_add(job.rank, out, payload, job.n, s_);
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
          lossy_options({"compression.levels"}), nullptr, payload_bytes, true};
}

}  // namespace gs
