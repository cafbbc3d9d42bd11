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
  void encode(const BucketJob& job, std::vector<uint8_t>& payload) override {
    thread_local std::vector<uint32_t> idx;
    const size_t k = kept_count(job.n, ratio_, k_);
    idx.resize(k);
    const size_t got = topk_select(job.p, job.n, k, idx.data());
    encode_sparse(job.p, idx.data(), got, 1.0f, false, payload);
  }
  void decode_add(const BucketJob&, int, const uint8_t* payload, size_t bytes, float* out) override {
    decode_sparse_add(payload, bytes, nullptr, out);
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
          lossy_options({"compression.ratio", "compression.k", "compression.scope"}), nullptr, payload_bytes};
}

}  // namespace gs
