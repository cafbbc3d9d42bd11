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
  void encode(const BucketJob& job, std::vector<uint8_t>& payload) override {
    payload.resize(sign_encoded_bytes(job.n, job.n));
    payload.resize(sign_encode(payload.data(), job.p, job.n));
  }
  void decode_add(const BucketJob& job, int, const uint8_t* payload, size_t, float* out) override {
    sign_decode_add(out, payload, job.n);
  }
  bool combine(const BucketJob& job, const std::vector<const uint8_t*>& payloads,
               const std::vector<size_t>&) override {
    if (!vote_) return false;
    float scale_sum = 0.0f;
    for (const uint8_t* m : payloads) scale_sum += get_at<float>(m, 0);
    sign_vote(job.sum, payloads.data(), static_cast<int>(payloads.size()), job.n);
    for (size_t i = 0; i < job.n; ++i) job.sum[i] *= scale_sum;
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
          lossy_options({"compression.vote"}), nullptr, payload_bytes};
}

}  // namespace gs
