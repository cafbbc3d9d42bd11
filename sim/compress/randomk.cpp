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
  size_t max_payload_bytes(size_t n) const override { return (shared_ ? 4 : 8) * kept_count(n, ratio_, k_); }
  size_t encode_into(const BucketJob& job, uint8_t* out) override {
    // Own indices in place before the values; shared ones (implied, not sent) in the index scratch.
    uint32_t* idx = shared_ ? scratch(job) : reinterpret_cast<uint32_t*>(out);
    const size_t k = draw(job, job.rank, idx);
    const float scale = unbiased_ ? static_cast<float>(static_cast<double>(job.n) / static_cast<double>(k)) : 1.0f;
    return encode_sparse(job, idx, k, scale, shared_, out);
  }
  void decode_add(const BucketJob& job, int src, const uint8_t* payload, size_t bytes, float* out) override {
    if (shared_) {
      uint32_t* idx = scratch(job);
      draw(job, src, idx);
      decode_sparse_add(job, payload, bytes, idx, out);
    } else {
      decode_sparse_add(job, payload, bytes, nullptr, out);
    }
  }

 private:
  // The index set of rank `rank` in this job (the shared one when shared_indices) into idx (room for k); returns k.
  size_t draw(const BucketJob& job, int rank, uint32_t* idx) const {
    const uint64_t stream = job.stream_for(shared_ ? kSharedRank : static_cast<uint32_t>(rank));
    return job.compress_ops().randomk_indices(job.rank, idx, job.n, kept_count(job.n, ratio_, k_), job.seed, stream);
  }
  // Room for k indices in the job's memory: the reducer's index scratch, or (host memory without one: a
  // parameter-server push) a per-thread host buffer.
  uint32_t* scratch(const BucketJob& job) const {
    const size_t k = kept_count(job.n, ratio_, k_);
    if (job.space != nullptr)
      return reinterpret_cast<uint32_t*>(CompressSpace::room(job.ops(), job.rank, job.space->indices, k));
    thread_local std::vector<uint32_t> idx;
    idx.resize(k);
    return idx.data();
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
          nullptr, payload_bytes, true};
}

}  // namespace gs
