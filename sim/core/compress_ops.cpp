// host_compress_ops (compress_ops.h): the host ops of kernels/compress.h and the compressed reduction's error-feedback
// loops, as the host backend always ran them (built with -ffp-contract=off).
#include "sim/core/compress_ops.h"

#include <cstring>

#include "kernels/compress.h"
#include "kernels/compress_math.h"

namespace gs {
namespace {

class HostCompressOps final : public CompressOps {
 public:
  size_t topk_select(int, const float* x, size_t n, size_t k, uint32_t* idx) override {
    return gs::topk_select(x, n, k, idx);
  }
  size_t threshold_select(int, const float* x, size_t n, float tau, uint32_t* idx) override {
    return gs::threshold_select(x, n, tau, idx);
  }
  size_t randomk_indices(int, uint32_t* idx, size_t n, size_t k, uint64_t seed, uint64_t stream) override {
    return gs::randomk_indices(idx, n, k, seed, stream);
  }
  float sampled_threshold(int, const float* x, size_t n, double ratio, uint64_t seed, uint64_t stream,
                          size_t samples) override {
    return gs::sampled_threshold(x, n, ratio, seed, stream, samples);
  }
  void zero_at(int, float* x, const uint32_t* idx, size_t k) override {
    for (size_t j = 0; j < k; ++j) x[idx[j]] = 0.0f;
  }
  void gather(int, float* vals, const float* x, const uint32_t* idx, size_t k) override {
    for (size_t j = 0; j < k; ++j) vals[j] = x[idx[j]];
  }
  void scatter_add(int, float* out, const uint32_t* idx, const float* vals, size_t k) override {
    for (size_t j = 0; j < k; ++j) out[idx[j]] += vals[j];
  }
  void qsgd_encode(int, uint8_t* out, const float* p, size_t n, int s, uint64_t seed, uint64_t stream) override {
    gs::qsgd_encode(out, p, n, s, seed, stream);
  }
  void qsgd_decode_add(int, float* out, const uint8_t* in, size_t n, int s) override {
    gs::qsgd_decode_add(out, in, n, s);
  }
  void terngrad_encode(int, uint8_t* out, const float* p, size_t n, uint64_t seed, uint64_t stream) override {
    gs::terngrad_encode(out, p, n, seed, stream);
  }
  void terngrad_decode_add(int, float* out, const uint8_t* in, size_t n) override {
    gs::terngrad_decode_add(out, in, n);
  }
  size_t sign_encode(int, uint8_t* out, const float* p, size_t n) override { return gs::sign_encode(out, p, n); }
  void sign_decode_add(int, float* out, const uint8_t* in, size_t n) override { gs::sign_decode_add(out, in, n); }
  size_t onebit_encode(int, uint8_t* out, const float* p, size_t n) override { return gs::onebit_encode(out, p, n); }
  void onebit_decode_add(int, float* out, const uint8_t* in, size_t n) override { gs::onebit_decode_add(out, in, n); }
  void sign_vote_scaled(int, float* out, const uint8_t* const* msgs, int ranks, size_t n) override {
    float scale_sum = 0.0f;
    for (int r = 0; r < ranks; ++r) {
      float s;
      std::memcpy(&s, msgs[r], sizeof s);  // the message's fp32 scale (its first four bytes)
      scale_sum += s;
    }
    gs::sign_vote(out, msgs, ranks, n);
    for (size_t i = 0; i < n; ++i) out[i] *= scale_sum;
  }
  void cast_encode(int, float* wire, float* own, const float* p, size_t n, FloatFormat f, float bf, double pre,
                   double b) override {
    for (size_t i = 0; i < n; ++i) {
      const float w = cast_wire_value(f, p[i], bf, pre);
      wire[i] = w;
      if (own != nullptr) own[i] = static_cast<float>(static_cast<double>(w) * pre * b);
    }
  }
  void add_in_format(int, float* acc, const float* x, size_t n, FloatFormat f) override {
    for (size_t i = 0; i < n; ++i) acc[i] = gs::add_in_format(f, acc[i], x[i]);
  }
  void post_divide_in_format(int, float* x, size_t n, FloatFormat f, double post) override {
    for (size_t i = 0; i < n; ++i) x[i] = cast_post_divide(f, x[i], post);
  }
  void orthogonalize_columns(int, float* m, size_t rows, size_t cols, float eps) override {
    gs::orthogonalize_columns(m, rows, cols, eps);
  }
  void powersgd_p(int, float* p, const float* m, const float* q, size_t rows, size_t cols, size_t r) override {
    gs::powersgd_p(p, m, q, rows, cols, r);
  }
  void powersgd_q(int, float* q, const float* m, const float* p, size_t rows, size_t cols, size_t r) override {
    gs::powersgd_q(q, m, p, rows, cols, r);
  }
  void powersgd_decode(int, float* out, const float* p, const float* q, size_t rows, size_t cols, size_t r) override {
    gs::powersgd_decode(out, p, q, rows, cols, r);
  }
  void momentum_feed_in(int, float* u, float* e, float* g, size_t n, float m) override {
    for (size_t i = 0; i < n; ++i) {
      u[i] = u[i] * m + g[i];
      e[i] += u[i];
      g[i] = e[i];
    }
  }
  double residual_of(int, float* e, const float* p, const float* own, size_t n) override {
    double norm2 = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const float r = p[i] - own[i];
      e[i] = r;
      norm2 += static_cast<double>(r) * r;
    }
    return norm2;
  }
  double mask_sent(int, float* u, float* e, const float* own, size_t n) override {
    double norm2 = 0.0;
    for (size_t i = 0; i < n; ++i) {
      if (own[i] != 0.0f) u[i] = e[i] = 0.0f;
      norm2 += static_cast<double>(e[i]) * e[i];
    }
    return norm2;
  }
  void average(int, float* out, const float* sum, size_t n, float s) override {
    for (size_t i = 0; i < n; ++i) out[i] = sum[i] / s;
  }
  double sum_squared_difference(int, const float* a, const float* b, size_t n) override {
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(a[i]) - b[i];
      sum += d * d;
    }
    return sum;
  }
};

}  // namespace

CompressOps& host_compress_ops() {
  static HostCompressOps ops;
  return ops;
}

}  // namespace gs
