// `threshold`: every value with |p| >= tau (kernels/compress.h threshold_select), sent as index + value pairs; the
// payload size varies per rank and step.
#include "kernels/compress.h"
#include "sim/compress/compressor.h"

namespace gs {
namespace {

class Threshold final : public Compressor {
 public:
  explicit Threshold(const CompressionConfig& c) : tau_(static_cast<float>(c.tau)) {}
  WireCollective collective() const override { return WireCollective::kAllGather; }
  // Room for n indices (threshold_select's) and up to n values after the kept ones.
  size_t max_payload_bytes(size_t n) const override { return 8 * n; }
  size_t encode_into(const BucketJob& job, uint8_t* out) override {
    auto* idx = reinterpret_cast<uint32_t*>(out);  // the indices in place, the values after the kept ones
    const size_t got = job.compress_ops().threshold_select(job.rank, job.p, job.n, tau_, idx);
    return encode_sparse(job, idx, got, 1.0f, false, out);
  }
  void decode_add(const BucketJob& job, int, const uint8_t* payload, size_t bytes, float* out) override {
    decode_sparse_add(job, payload, bytes, nullptr, out);
  }

 private:
  float tau_;
};

std::unique_ptr<Compressor> make(const RunConfig& rc, const Model&, int) {
  return std::make_unique<Threshold>(rc.compression);
}

}  // namespace

CompressorEntry threshold_compressor() {
  return {"threshold", "values with |p| >= tau; all-gather of index+value", make,
          lossy_options({"compression.tau", "compression.expected_density"}), expected_density_issues, nullptr, true};
}

}  // namespace gs
