// `dgc`: Deep Gradient Compression (Lin et al., ICLR 2018). Per rank and bucket: local gradient clipping (scale g to
// L2 norm <= clip_norm), momentum correction u = m u + g, velocity v = v + u, a threshold estimated from a Philox
// sample of |v| (kernels/compress.h sampled_threshold) at this step's ratio, the values |v| >= threshold sent as
// index + value pairs, then momentum factor masking: u and v zeroed where sent. The ratio warms up exponentially
// (dgc_density_at): ratio_t = ratio^((t+1)/(W+1)) for t < W (0.25 -> 0.0625 -> ... for ratio 0.001, W = 4, as the
// paper's schedule).
// DGC keeps its own residual (v); its invariant: sum of sent + v == sum over steps of u.
#include <cmath>

#include "kernels/compress.h"
#include "sim/compress/compressor.h"

namespace gs {
namespace {

class Dgc final : public Compressor {
 public:
  Dgc(const CompressionConfig& c, size_t n)
      : ratio_(c.ratio), momentum_(static_cast<float>(c.momentum)), clip_(c.clip_norm), warmup_(c.warmup_steps),
        sample_ratio_(c.sample_ratio), u_(n, 0.0f), v_(n, 0.0f) {}
  WireCollective collective() const override { return WireCollective::kAllGather; }
  bool own_feedback() const override { return true; }
  const std::vector<float>* own_residual() const override { return &v_; }

  // Host memory only (its velocity and momentum are host vectors): the indices in place, the values after the kept
  // ones.
  size_t max_payload_bytes(size_t n) const override { return 8 * n; }
  size_t encode_into(const BucketJob& job, uint8_t* out) override {
    auto* idx = reinterpret_cast<uint32_t*>(out);
    const size_t n = job.n;
    float* u = u_.data() + job.offset;
    float* v = v_.data() + job.offset;
    float clip = 1.0f;
    if (clip_ > 0) {
      double g2 = 0.0;
      for (size_t i = 0; i < n; ++i) g2 += static_cast<double>(job.p[i]) * job.p[i];
      const double norm = std::sqrt(g2);
      if (norm > clip_) clip = static_cast<float>(clip_ / norm);
    }
    for (size_t i = 0; i < n; ++i) {
      u[i] = momentum_ * u[i] + clip * job.p[i];
      v[i] += u[i];
    }
    const double ratio = dgc_density_at(ratio_, warmup_, job.step);
    const size_t samples = std::max<size_t>(1, static_cast<size_t>(std::ceil(sample_ratio_ * static_cast<double>(n))));
    const float thr = sampled_threshold(v, n, ratio, job.seed, job.stream(), samples);
    const size_t got = threshold_select(v, n, thr, idx);
    auto* vals = reinterpret_cast<float*>(out + got * sizeof(uint32_t));
    for (size_t j = 0; j < got; ++j) vals[j] = v[idx[j]];
    for (size_t j = 0; j < got; ++j) {
      u[idx[j]] = 0.0f;
      v[idx[j]] = 0.0f;
    }
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
  std::vector<float> u_, v_;
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
          expected_density_issues};
}

}  // namespace gs
