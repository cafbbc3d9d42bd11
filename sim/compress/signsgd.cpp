// `signsgd`: 1 bit per value scaled by mean |p| (EF-signSGD, Karimireddy et al. 2019, with error_feedback); with vote
// the receivers take the majority vote of the signs (Bernstein et al. 2018). kernels/compress.h sign_pack/sign_vote.
#include <cstring>

#include "kernels/compress.h"
#include "sim/compress/compressor.h"

namespace gs {
namespace {

// Payload: fp32 scale (mean |p|), then ceil(n/8) sign bytes. With vote, the receivers' sum is
// vote_i * (sum over ranks of the scales): the majority sign with the magnitude the scaled-sign sum would have had
// if every rank agreed (sign(0) = 0 on a tie).
class SignSgd final : public Compressor {
 public:
  explicit SignSgd(const CompressionConfig& c) : vote_(c.vote) {}
  WireCollective collective() const override { return WireCollective::kAllGather; }
  void encode(const BucketJob& job, std::vector<uint8_t>& payload) override {
    payload.resize(sizeof(float) + sign_packed_bytes(job.n));
    const float scale = sign_pack(payload.data() + sizeof(float), job.p, job.n);
    std::memcpy(payload.data(), &scale, sizeof scale);
  }
  void decode_add(const BucketJob& job, int, const uint8_t* payload, size_t, float* out) override {
    sign_unpack_add(out, payload + sizeof(float), job.n, get_at<float>(payload, 0));
  }
  bool combine(const BucketJob& job, const std::vector<const uint8_t*>& payloads,
               const std::vector<size_t>&) override {
    if (!vote_) return false;
    std::vector<const uint8_t*> bits(payloads.size());
    float scale_sum = 0.0f;
    for (size_t r = 0; r < payloads.size(); ++r) {
      bits[r] = payloads[r] + sizeof(float);
      scale_sum += get_at<float>(payloads[r], 0);
    }
    sign_vote(job.sum, bits.data(), static_cast<int>(bits.size()), job.n);
    for (size_t i = 0; i < job.n; ++i) job.sum[i] *= scale_sum;
    return true;
  }

 private:
  bool vote_;
};

}  // namespace

std::unique_ptr<Compressor> make_signsgd(const RunConfig& rc, const Model&, int) {
  const CompressionConfig& c = rc.compression;
  return std::make_unique<SignSgd>(c);
}

}  // namespace gs
