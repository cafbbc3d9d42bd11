// `dgc`: Deep Gradient Compression (Lin et al., ICLR 2018). Per rank and bucket: local gradient clipping (scale g to
// L2 norm <= clip_norm), momentum correction u = m u + g, velocity v = v + u, a threshold estimated from a Philox
// sample of |v| (kernels/compress.h sampled_threshold) at this step's ratio, the values |v| >= threshold sent as
// index + value pairs, then momentum factor masking: u and v zeroed where sent. The ratio warms up exponentially
// (dgc_density_at): ratio_t = ratio^((t+1)/(W+1)) for t < W (0.25 -> 0.0625 -> ... for ratio 0.001, W = 4, as the
// paper's schedule).
// DGC keeps its own residual (v); its invariant: sum of sent + v == sum over steps of u.
#include <algorithm>
#include <cmath>

#include "kernels/compress.h"
#include "sim/compress/compressor.h"

namespace gs {
namespace {

class Dgc final : public Compressor {
 public:
  Dgc(const CompressionConfig& c, size_t n)
      : ratio_(c.ratio), momentum_(static_cast<float>(c.momentum)), clip_(c.clip_norm), warmup_(c.warmup_steps),
        sample_ratio_(c.sample_ratio), n_(n) {}
  WireCollective collective() const override { return WireCollective::kAllGather; }
  bool own_feedback() const override { return true; }
  const float* own_residual() const override { return v_.get(); }

  // Room for n indices (threshold_select's) and up to n values after the kept ones.
  size_t max_payload_bytes(size_t n) const override { return 8 * n; }
  // Every element operation through the job's memory: u and v live there (allocated at the first job).
  size_t encode_into(const BucketJob& job, uint8_t* out) override {
    ElementOps& ops = job.ops();
    CompressOps& cops = job.compress_ops();
    if (v_.get() == nullptr) {
      u_ = ops.allocate(job.rank, n_);
      v_ = ops.allocate(job.rank, n_);
    }
    const size_t n = job.n;
    float* u = u_.get() + job.offset;
    float* v = v_.get() + job.offset;
    float clip = 1.0f;
    if (clip_ > 0) {
      const double norm = std::sqrt(ops.scan(job.rank, job.p, n, true).sum_squares);
      if (norm > clip_) clip = static_cast<float>(clip_ / norm);
    }
    // u = m u + clip p (each product rounded, then the sum), v += u.
    ops.scale(job.rank, u, n, momentum_);
    ops.add_scaled(job.rank, u, job.p, clip, n);
    ops.add(job.rank, v, u, n);
    const double ratio = dgc_density_at(ratio_, warmup_, job.step);
    const size_t samples = std::max<size_t>(1, static_cast<size_t>(std::ceil(sample_ratio_ * static_cast<double>(n))));
    const float thr = cops.sampled_threshold(job.rank, v, n, ratio, job.seed, job.stream(), samples);
    auto* idx = reinterpret_cast<uint32_t*>(out);  // the indices in place, the values after the kept ones
    const size_t got = cops.threshold_select(job.rank, v, n, thr, idx);
    cops.gather(job.rank, reinterpret_cast<float*>(out + got * sizeof(uint32_t)), v, idx, got);
    cops.zero_at(job.rank, u, idx, got);
    cops.zero_at(job.rank, v, idx, got);
    return got * (sizeof(uint32_t) + sizeof(float));
  }
  void decode_add(const BucketJob& job, int, const uint8_t* payload, size_t bytes, float* out) override {
    decode_sparse_add(job, payload, bytes, nullptr, out);
  }

 private:
  double ratio_;
  float momentum_;
  double clip_;
  int64_t warmup_;
  double sample_ratio_;
  size_t n_;
  FloatBuffer u_, v_;  // momentum and velocity, the model's n floats each
};

std::unique_ptr<Compressor> make(const RunConfig& rc, const Model& m, int) {
  return std::make_unique<Dgc>(rc.compression, m.num_params());
}

}  // namespace

double dgc_density_at(double target, int64_t warmup, int64_t step) {
  if (step >= warmup) return target;
  return std::pow(target, static_cast<double>(step + 1) / static_cast<double>(warmup + 1));
}

CompressorEntry dgc_compressor() {
  // Its own residual (the velocity), not the reducer's error feedback: compression.error_feedback does not apply.
  return {"dgc", "Deep Gradient Compression: sampled threshold, momentum correction, clipping, masking, warm-up", make,
          {"compression.measure_error", "compression.ratio", "compression.momentum", "compression.clip_norm",
           "compression.warmup_steps", "compression.sample_ratio", "compression.expected_density"},
          expected_density_issues, nullptr, true};
}

}  // namespace gs
