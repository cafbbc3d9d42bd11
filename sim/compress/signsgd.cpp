// `signsgd`: ternary signs scaled by mean |p| (EF-signSGD, Karimireddy et al. 2019, with error feedback); with vote
// the receivers take the majority vote of the signs (Bernstein et al. 2018). sign(0) = 0: an exact zero sends neither
// sign (kernels/compress.h sign_encode / sign_vote: 1 bit per value, 2 when the bucket holds exact zeros).
#include "kernels/compress.h"
#include "sim/compress/compressor.h"

namespace gs {
namespace {

// Payload: the message of kernels/compress.h (fp32 scale, uint32 zero count, sign plane, zero plane if any zero).
// With vote, the receivers' sum is vote_i * (sum over ranks of the scales): the majority sign with the magnitude the
// scaled-sign sum would have had if every rank agreed (0 on a tie, zeros not voting).
class SignSgd final : public Compressor {
 public:
  explicit SignSgd(const CompressionConfig& c) : vote_(c.vote) {}
  WireCollective collective() const override { return WireCollective::kAllGather; }
  size_t max_payload_bytes(size_t n) const override { return sign_encoded_bytes(n, n); }
  size_t encode_into(const BucketJob& job, uint8_t* out) override {
    return job.compress_ops().sign_encode(job.rank, out, job.p, job.n);
  }
  void decode_add(const BucketJob& job, int, const uint8_t* payload, size_t, float* out) override {
    job.compress_ops().sign_decode_add(job.rank, out, payload, job.n);
  }
  bool combine(const BucketJob& job, const std::vector<const uint8_t*>& payloads,
               const std::vector<size_t>&) override {
    if (!vote_) return false;
    job.compress_ops().sign_vote_scaled(job.rank, job.sum, payloads.data(), static_cast<int>(payloads.size()), job.n);
    return true;
  }

 private:
  bool vote_;
};

std::unique_ptr<Compressor> make(const RunConfig& rc, const Model&, int) {
  return std::make_unique<SignSgd>(rc.compression);
}

// One bit plane: a bucket without exact zeros (a measured one with zeros sends a second plane).
double payload_bytes(const CompressionConfig&, size_t n) { return static_cast<double>(sign_encoded_bytes(n, 0)); }

}  // namespace

CompressorEntry signsgd_compressor() {
  return {"signsgd", "sign bits scaled by mean |p| (EF-signSGD with error_feedback); vote: majority of signs", make,
          lossy_options({"compression.vote"}), nullptr, payload_bytes, true};
}

}  // namespace gs
