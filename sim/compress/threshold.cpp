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
  void encode(const BucketJob& job, std::vector<uint8_t>& payload) override {
    thread_local std::vector<uint32_t> idx;
    idx.resize(job.n);
    const size_t got = threshold_select(job.p, job.n, tau_, idx.data());
    encode_sparse(job.p, idx.data(), got, 1.0f, false, payload);
  }
  void decode_add(const BucketJob&, int, const uint8_t* payload, size_t bytes, float* out) override {
    decode_sparse_add(payload, bytes, nullptr, out);
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
          lossy_options({"compression.tau", "compression.expected_density"}), expected_density_issues};
}

}  // namespace gs
