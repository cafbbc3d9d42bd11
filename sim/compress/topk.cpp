// `topk`: the k largest |p| of each bucket (scope "bucket") or of the whole model (scope "model"), ties broken by the
// lowest index (kernels/compress.h topk_select); sent as index + value pairs, all-gathered, scatter-added in rank
// order. No d/k rescale (top-k is biased by design; error feedback carries the rest).
#include "kernels/compress.h"
#include "sim/compress/compressor.h"

namespace gs {
namespace {

class TopK final : public Compressor {
 public:
  explicit TopK(const CompressionConfig& c) : ratio_(c.ratio), k_(c.k), whole_(c.scope == "model") {}
  WireCollective collective() const override { return WireCollective::kAllGather; }
  bool whole_model() const override { return whole_; }
  size_t max_payload_bytes(size_t n) const override { return 8 * kept_count(n, ratio_, k_); }
  size_t encode_into(const BucketJob& job, uint8_t* out) override {
    auto* idx = reinterpret_cast<uint32_t*>(out);  // the indices in place, the values after them
    const size_t got = job.compress_ops().topk_select(job.rank, job.p, job.n, kept_count(job.n, ratio_, k_), idx);
    return encode_sparse(job, idx, got, 1.0f, false, out);
  }
  void decode_add(const BucketJob& job, int, const uint8_t* payload, size_t bytes, float* out) override {
    decode_sparse_add(job, payload, bytes, nullptr, out);
  }

 private:
  double ratio_;
  int64_t k_;
  bool whole_;
};

std::unique_ptr<Compressor> make(const RunConfig& rc, const Model&, int) { return std::make_unique<TopK>(rc.compression); }

double payload_bytes(const CompressionConfig& c, size_t n) {
  return 8.0 * static_cast<double>(kept_count(n, c.ratio, c.k));  // uint32 index + fp32 value
}

}  // namespace

CompressorEntry topk_compressor() {
  return {"topk", "k largest |p| per bucket or model (ties: lowest index); all-gather of index+value", make,
          lossy_options({"compression.ratio", "compression.k", "compression.scope"}), nullptr, payload_bytes, true};
}

}  // namespace gs
