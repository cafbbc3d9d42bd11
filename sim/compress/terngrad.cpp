// `terngrad`: TernGrad (Wen et al., NeurIPS 2017): {-1, 0, 1} x max |p| per bucket, stochastic (unbiased), 2 bits per
// value plus the fp32 scale (kernels/compress.h terngrad_encode); payloads all-gathered, decoded, summed.
#include "kernels/compress.h"
#include "sim/compress/compressor.h"

namespace gs {
namespace {

class TernGrad final : public Compressor {
 public:
  WireCollective collective() const override { return WireCollective::kAllGather; }
  size_t max_payload_bytes(size_t n) const override { return terngrad_encoded_bytes(n); }
  size_t encode_into(const BucketJob& job, uint8_t* out) override {
    job.compress_ops().terngrad_encode(job.rank, out, job.p, job.n, job.seed, job.stream());
    return terngrad_encoded_bytes(job.n);
  }
  void decode_add(const BucketJob& job, int, const uint8_t* payload, size_t, float* out) override {
    job.compress_ops().terngrad_decode_add(job.rank, out, payload, job.n);
  }
};

std::unique_ptr<Compressor> make(const RunConfig&, const Model&, int) { return std::make_unique<TernGrad>(); }

double payload_bytes(const CompressionConfig&, size_t n) { return static_cast<double>(terngrad_encoded_bytes(n)); }

}  // namespace

CompressorEntry terngrad_compressor() {
  return {"terngrad", "TernGrad: {-1, 0, 1} x max|p|, stochastic (unbiased), 2 bits per value; all-gather", make,
          lossy_options(), nullptr, payload_bytes, true};
}

}  // namespace gs
