// host_compress_ops (compress_ops.h): the host ops of kernels/compress.h and the compressed reduction's error-feedback
// loops, as the host backend always ran them (built with -ffp-contract=off).
#include "sim/core/compress_ops.h"

#include <cmath>
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
  void deepspeed_first_moment(int, float* m, const float* g, size_t n, float b1, float a1) override {
    for (size_t i = 0; i < n; ++i) m[i] = deepspeed_first_moment_value(m[i], g[i], b1, a1);
  }
  void deepspeed_second_moment(int, float* v, const float* g, size_t n, float b2, float a2) override {
    for (size_t i = 0; i < n; ++i) v[i] = deepspeed_second_moment_value(v[i], g[i], b2, a2);
  }
  void deepspeed_update(int, float* p, const float* m, const float* v, size_t n, const DeepSpeedUpdate& s,
                        float* accumulated) override {
    for (size_t i = 0; i < n; ++i) {
      const float step = s.neg_lr * deepspeed_direction(m[i], v[i], p[i], s.eps, s.weight_decay, s.decay);
      p[i] = p[i] + step;
      if (accumulated != nullptr) accumulated[i] = accumulated[i] + step;
    }
  }
  OnebitSide onebit_compensate(int, float* message, float* x, float* error, size_t count) override {
    for (size_t i = 0; i < count; ++i) x[i] = x[i] + error[i];
    const float s = onebit_scale(sum_squares(x, count), count);
    for (size_t i = 0; i < count; ++i) error[i] = x[i] - (x[i] < 0.0f ? -s : s);
    message[0] = s;
    auto* bytes = reinterpret_cast<uint8_t*>(message + 1);
    std::memset(bytes, 0, (onebit_message_words(count) - 1) * sizeof(float));
    for (size_t i = 0; i < count; ++i)
      if (onebit_sign_bit(x[i])) bytes[i / 8] = static_cast<uint8_t>(bytes[i / 8] | (0x80u >> (i % 8)));
    return {s, sum_squares(error, count)};
  }
  void onebit_server_sum(int, float* c, const float* messages, int ranks, size_t words, size_t first, size_t count,
                         float inv) override {
    for (int j = 0; j < ranks; ++j) {
      const float* msg = messages + static_cast<size_t>(j) * words;
      const auto* signs = reinterpret_cast<const uint8_t*>(msg + 1);
      const float sj = msg[0] * inv;
      for (size_t i = 0; i < count; ++i) {
        const float v = onebit_message_bit(signs, first + i) ? sj : -sj;
        c[i] = j == 0 ? v : c[i] + v;
      }
    }
  }
  void onebit_decode_chunks(int, float* m, size_t n, const float* messages, size_t words, size_t chunk) override {
    for (size_t i = 0; i < n; ++i) {
      const size_t q = i / chunk;
      const float* msg = messages + q * words;
      m[i] = onebit_message_bit(reinterpret_cast<const uint8_t*>(msg + 1), i - q * chunk) ? msg[0] : -msg[0];
    }
  }
  void zero_variance_mask(int, float* m, const float* v, size_t n) override {
    for (size_t i = 0; i < n; ++i) m[i] = m[i] * (v[i] == 0.0f ? 0.0f : 1.0f);
  }
  void zero_one_sync_begin(int, float* p, float* cb, const float* v, size_t n, float eps) override {
    for (size_t i = 0; i < n; ++i) {
      p[i] = p[i] - cb[i];
      cb[i] = cb[i] * (std::sqrt(v[i]) + eps);
    }
  }
  void zero_one_sync_end(int, float* m, float* p, float* cb, const float* v, size_t n, float lrs,
                         float eps) override {
    for (size_t i = 0; i < n; ++i) {
      m[i] = 0.0f - cb[i] / lrs;  // exp_avg.zero_().add_(comm_buffer / lrs, alpha=-1)
      p[i] = p[i] + cb[i] / (std::sqrt(v[i]) + eps);
      cb[i] = 0.0f;
    }
  }
  void lamb_direction(int, float* u, const float* m, const float* v, const float* p, size_t n, float eps,
                      float weight_decay, bool decay) override {
    for (size_t i = 0; i < n; ++i) u[i] = deepspeed_direction(m[i], v[i], p[i], eps, weight_decay, decay);
  }
  void lamb_reconstruct(int, float* u, const float* m, const float* last, size_t n, float b1, float a1) override {
    for (size_t i = 0; i < n; ++i) u[i] = (m[i] - last[i] * b1) / a1;  // grad_reconstruct
  }
  LambFrozenTerms lamb_frozen_direction(int, float* u, const float* m, const float* v, const float* fresh,
                                        const float* p, size_t n, float eps, float weight_decay,
                                        bool decay) override {
    LambFrozenTerms t;
    for (size_t i = 0; i < n; ++i) {
      const float denom = std::sqrt(v[i]) + eps;
      const float pre = m[i] / denom;
      t.pre_sum_squares += static_cast<double>(pre) * static_cast<double>(pre);
      u[i] = decay ? pre + weight_decay * p[i] : pre;
      const float q = denom / (std::sqrt(fresh[i]) + eps);  // denom / denom_real
      t.nan = t.nan || std::isnan(q);
      if (i == 0 || q > t.max_ratio) t.max_ratio = q;
    }
    return t;
  }

 private:
  // sum of x[i]^2 in double in index order.
  static double sum_squares(const float* x, size_t n) {
    double ss = 0.0;
    for (size_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return ss;
  }
};

}  // namespace

CompressOps& host_compress_ops() {
  static HostCompressOps ops;
  return ops;
}

}  // namespace gs
