// `randomk`: k indices drawn uniformly without replacement (kernels/compress.h randomk_indices, Philox keyed by the
// job's stream). shared_indices: every rank draws the same set (stream of rank kSharedRank), so only values travel.
// unbiased: values scaled by d/k (d = bucket size), which makes E[decoded] = p (case BC14).
#include "kernels/compress.h"
#include "sim/compress/compressor.h"

namespace gs {
namespace {

class RandomK final : public Compressor {
 public:
  explicit RandomK(const CompressionConfig& c)
      : ratio_(c.ratio), k_(c.k), shared_(c.shared_indices), unbiased_(c.unbiased) {}
  WireCollective collective() const override { return WireCollective::kAllGather; }
  void encode(const BucketJob& job, std::vector<uint8_t>& payload) override {
    thread_local std::vector<uint32_t> idx;
    const size_t k = draw(job, job.rank, idx);
    const float scale = unbiased_ ? static_cast<float>(static_cast<double>(job.n) / static_cast<double>(k)) : 1.0f;
    encode_sparse(job.p, idx.data(), k, scale, shared_, payload);
  }
  void decode_add(const BucketJob& job, int src, const uint8_t* payload, size_t bytes, float* out) override {
    thread_local std::vector<uint32_t> idx;
    if (shared_) {
      draw(job, src, idx);
      decode_sparse_add(payload, bytes, idx.data(), out);
    } else {
      decode_sparse_add(payload, bytes, nullptr, out);
    }
  }

 private:
  // The index set of rank `rank` in this job (the shared one when shared_indices); returns k.
  size_t draw(const BucketJob& job, int rank, std::vector<uint32_t>& idx) const {
    const size_t k = kept_count(job.n, ratio_, k_);
    idx.resize(k);
    const uint64_t stream = job.stream_for(shared_ ? kSharedRank : static_cast<uint32_t>(rank));
    return randomk_indices(idx.data(), job.n, k, job.seed, stream);
  }
  double ratio_;
  int64_t k_;
  bool shared_;
  bool unbiased_;
};

std::unique_ptr<Compressor> make(const RunConfig& rc, const Model&, int) {
  return std::make_unique<RandomK>(rc.compression);
}

double payload_bytes(const CompressionConfig& c, size_t n) {  // shared indices: the values only
  return (c.shared_indices ? 4.0 : 8.0) * static_cast<double>(kept_count(n, c.ratio, c.k));
}

}  // namespace

CompressorEntry randomk_compressor() {
  return {"randomk", "k random indices (Philox; shared_indices, unbiased d/k scale); all-gather", make,
          lossy_options({"compression.ratio", "compression.k", "compression.shared_indices", "compression.unbiased"}),
          nullptr, payload_bytes};
}

}  // namespace gs
