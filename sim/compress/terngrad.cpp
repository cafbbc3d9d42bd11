// `terngrad`: TernGrad (Wen et al., NeurIPS 2017): {-1, 0, 1} x max |p| per bucket, stochastic (unbiased), 2 bits per
// value plus the fp32 scale (kernels/compress.h terngrad_encode); payloads all-gathered, decoded, summed.
#include "kernels/compress.h"
#include "sim/compress/compressor.h"

namespace gs {
namespace {

class TernGrad final : public Compressor {
 public:
  WireCollective collective() const override { return WireCollective::kAllGather; }
  void encode(const BucketJob& job, std::vector<uint8_t>& payload) override {
    payload.resize(terngrad_encoded_bytes(job.n));
    terngrad_encode(payload.data(), job.p, job.n, job.seed, job.stream());
  }
  void decode_add(const BucketJob& job, int, const uint8_t* payload, size_t, float* out) override {
    terngrad_decode_add(out, payload, job.n);
  }
};

std::unique_ptr<Compressor> make(const RunConfig&, const Model&, int) { return std::make_unique<TernGrad>(); }

double payload_bytes(const CompressionConfig&, size_t n) { return static_cast<double>(terngrad_encoded_bytes(n)); }

}  // namespace

CompressorEntry terngrad_compressor() {
  return {"terngrad", "TernGrad: {-1, 0, 1} x max|p|, stochastic (unbiased), 2 bits per value; all-gather", make,
          lossy_options(), nullptr, payload_bytes};
}

}  // namespace gs
