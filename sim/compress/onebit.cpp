// `onebit`: 1-bit SGD (Seide et al. 2014): sign bits with the bucket's positive and negative means as the two
// reconstruction values, exact zeros a third group that decodes to 0 (kernels/compress.h onebit_encode: 1 bit per
// value, 2 when the bucket holds exact zeros); payloads all-gathered, decoded, summed.
#include "kernels/compress.h"
#include "sim/compress/compressor.h"

namespace gs {
namespace {

class OneBit final : public Compressor {
 public:
  WireCollective collective() const override { return WireCollective::kAllGather; }
  size_t max_payload_bytes(size_t n) const override { return onebit_encoded_bytes(n, n); }
  size_t encode_into(const BucketJob& job, uint8_t* out) override {
    return job.compress_ops().onebit_encode(job.rank, out, job.p, job.n);
  }
  void decode_add(const BucketJob& job, int, const uint8_t* payload, size_t, float* out) override {
    job.compress_ops().onebit_decode_add(job.rank, out, payload, job.n);
  }
};

std::unique_ptr<Compressor> make(const RunConfig&, const Model&, int) { return std::make_unique<OneBit>(); }

// One bit plane: a bucket without exact zeros (a measured one with zeros sends a second plane).
double payload_bytes(const CompressionConfig&, size_t n) { return static_cast<double>(onebit_encoded_bytes(n, 0)); }

}  // namespace

CompressorEntry onebit_compressor() {
  return {"onebit", "1-bit SGD: sign bits with per-bucket positive and negative means; all-gather", make,
          lossy_options(), nullptr, payload_bytes, true};
}

}  // namespace gs
