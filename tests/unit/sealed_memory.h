// A device memory stand-in for CPU tests of the backend seam (sim/core/element_ops.h): SealedMemory stores every
// float bit-complemented (~bits), so any code that reads or writes one of its buffers with a host loop instead of
// through ElementOps (or SealedCommunicator) computes on garbage and the test that compares it with host memory
// fails. Its operations are written here from the element math (kernels/optim_math.h) and the definitions in
// element_ops.h, not from host_element_ops, so a test of host_element_ops against it compares two implementations
// (except DeepSpeed's 1-bit optimizers' CompressOps, which run host_compress_ops' op on unsealed copies: their seam
// tests catch host loops in the strategies, not a wrong host op).
// SealedCommunicator reduces sealed buffers through a host communicator; with `asynchronous` its starts only queue
// the bucket and the sums happen at all_reduce_wait (a device communicator's contract: nothing touches a started
// bucket before the wait); with `poison` too, a started bucket reads as NaN until the wait (which puts its values back
// and sums them), as a device buffer under an in-place reduction that is running or has run: code that reads a started
// bucket before the wait sees values that are not the rank's own, and a write into one before the wait is a test
// failure (found at the wait). A communicator destroyed with buckets started and not waited for is a test failure too
// (a device would free memory a reduction still uses).
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/compress.h"
#include "kernels/optim_math.h"
#include "sim/comm/communicator.h"
#include "sim/core/clock.h"
#include "sim/core/compress_ops.h"
#include "sim/core/element_ops.h"

namespace gs::test {

inline float seal(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u = ~u;
  float y;
  std::memcpy(&y, &u, sizeof y);
  return y;
}
inline float unseal(float x) { return seal(x); }  // the complement is its own inverse

inline void seal_all(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = seal(x[i]);
}

// Bytes in sealed memory (a compressor's messages and indices): stored as the sealed memory's 32-bit words (each word
// complemented), from a 4-byte aligned start. unseal_bytes reads the words covering [0, bytes); seal_bytes writes
// them (the last word's bytes past `bytes` zero before sealing).
inline std::vector<uint8_t> unseal_bytes(const void* sealed, size_t bytes) {
  std::vector<uint8_t> out((bytes + 3) / 4 * 4);
  const auto* w = static_cast<const uint32_t*>(sealed);
  for (size_t i = 0; i < out.size() / 4; ++i) {
    const uint32_t u = ~w[i];
    std::memcpy(out.data() + 4 * i, &u, 4);
  }
  out.resize(bytes);
  return out;
}
inline void seal_bytes(void* sealed, const uint8_t* plain, size_t bytes) {
  auto* w = static_cast<uint32_t*>(sealed);
  for (size_t i = 0; i < (bytes + 3) / 4; ++i) {
    uint32_t u = 0;
    std::memcpy(&u, plain + 4 * i, std::min<size_t>(4, bytes - 4 * i));
    w[i] = ~u;
  }
}

// The compressor operations (sim/core/compress_ops.h) on sealed buffers: each unseals what it reads, runs the host
// op of kernels/compress.h (or the element rule compress_ops.h states), and seals what it writes.
class SealedCompressOps : public CompressOps {
 protected:
  // Which rank's buffer each allocation is (SealedMemory registers them), so that every operation can check that
  // the pointers it is given are its rank's: on a device with one GPU per rank another rank's buffer is another
  // GPU's memory, which a kernel on this rank's stream must not touch. A failure is a test failure.
  void own(const float* p, size_t n, int rank) {
    std::lock_guard<std::mutex> lock(owners_mutex_);
    owners_[reinterpret_cast<uintptr_t>(p)] = {reinterpret_cast<uintptr_t>(p + n), rank};
  }
  void disown(const float* p) {
    std::lock_guard<std::mutex> lock(owners_mutex_);
    owners_.erase(reinterpret_cast<uintptr_t>(p));
  }
  // Every non-null pointer of `ptrs` lies in (or just past the end of) one of rank `rank`'s buffers.
  template <class... P>
  void mine(int rank, const char* op, const P*... ptrs) const {
    std::lock_guard<std::mutex> lock(owners_mutex_);
    for (const void* q : {static_cast<const void*>(ptrs)...}) {
      if (q == nullptr) continue;
      const auto a = reinterpret_cast<uintptr_t>(q);
      auto it = owners_.upper_bound(a);
      if (it == owners_.begin() || a > std::prev(it)->second.first) {
        ADD_FAILURE() << op << " on rank " << rank << ": a pointer outside every buffer of this memory";
      } else if (std::prev(it)->second.second != rank) {
        ADD_FAILURE() << op << " on rank " << rank << ": a pointer into rank " << std::prev(it)->second.second
                      << "'s buffer";
      }
    }
  }

 public:
  size_t topk_select(int rank, const float* x, size_t n, size_t k, uint32_t* idx) override {
    mine(rank, "topk_select", x, idx);
    std::vector<uint32_t> got(std::min(k, n));
    const size_t count = gs::topk_select(plain(x, n).data(), n, k, got.data());
    seal_words(idx, got.data(), count);
    return count;
  }
  size_t threshold_select(int rank, const float* x, size_t n, float tau, uint32_t* idx) override {
    mine(rank, "threshold_select", x, idx);
    std::vector<uint32_t> got(n);
    const size_t count = gs::threshold_select(plain(x, n).data(), n, tau, got.data());
    seal_words(idx, got.data(), count);
    return count;
  }
  size_t randomk_indices(int rank, uint32_t* idx, size_t n, size_t k, uint64_t seed, uint64_t stream) override {
    mine(rank, "randomk_indices", idx);
    std::vector<uint32_t> got(std::min(k, n));
    const size_t count = gs::randomk_indices(got.data(), n, k, seed, stream);
    seal_words(idx, got.data(), count);
    return count;
  }
  float sampled_threshold(int rank, const float* x, size_t n, double ratio, uint64_t seed, uint64_t stream,
                          size_t samples) override {
    mine(rank, "sampled_threshold", x);
    return gs::sampled_threshold(plain(x, n).data(), n, ratio, seed, stream, samples);
  }
  void zero_at(int rank, float* x, const uint32_t* idx, size_t k) override {
    mine(rank, "zero_at", x, idx);
    for (size_t j = 0; j < k; ++j) x[~idx[j]] = seal(0.0f);
  }
  void gather(int rank, float* vals, const float* x, const uint32_t* idx, size_t k) override {
    mine(rank, "gather", vals, x, idx);
    for (size_t j = 0; j < k; ++j) vals[j] = x[~idx[j]];  // a sealed value moves as it is
  }
  void scatter_add(int rank, float* out, const uint32_t* idx, const float* vals, size_t k) override {
    mine(rank, "scatter_add", out, idx, vals);
    for (size_t j = 0; j < k; ++j) {
      float& o = out[~idx[j]];
      o = seal(unseal(o) + unseal(vals[j]));
    }
  }
  void qsgd_encode(int rank, uint8_t* out, const float* p, size_t n, int s, uint64_t seed, uint64_t stream) override {
    mine(rank, "qsgd_encode", out, p);
    std::vector<uint8_t> msg(qsgd_encoded_bytes(n, s));
    gs::qsgd_encode(msg.data(), plain(p, n).data(), n, s, seed, stream);
    seal_bytes(out, msg.data(), msg.size());
  }
  void qsgd_decode_add(int rank, float* out, const uint8_t* in, size_t n, int s) override {
    mine(rank, "qsgd_decode_add", out, in);
    const std::vector<uint8_t> msg = unseal_bytes(in, qsgd_encoded_bytes(n, s));
    decode_into(out, n, [&](float* o) { gs::qsgd_decode_add(o, msg.data(), n, s); });
  }
  void terngrad_encode(int rank, uint8_t* out, const float* p, size_t n, uint64_t seed, uint64_t stream) override {
    mine(rank, "terngrad_encode", out, p);
    std::vector<uint8_t> msg(terngrad_encoded_bytes(n));
    gs::terngrad_encode(msg.data(), plain(p, n).data(), n, seed, stream);
    seal_bytes(out, msg.data(), msg.size());
  }
  void terngrad_decode_add(int rank, float* out, const uint8_t* in, size_t n) override {
    mine(rank, "terngrad_decode_add", out, in);
    const std::vector<uint8_t> msg = unseal_bytes(in, terngrad_encoded_bytes(n));
    decode_into(out, n, [&](float* o) { gs::terngrad_decode_add(o, msg.data(), n); });
  }
  size_t sign_encode(int rank, uint8_t* out, const float* p, size_t n) override {
    mine(rank, "sign_encode", out, p);
    return encode_sealed(out, p, n, sign_encoded_bytes(n, n), gs::sign_encode);
  }
  void sign_decode_add(int rank, float* out, const uint8_t* in, size_t n) override {
    mine(rank, "sign_decode_add", out, in);
    decode_into(out, n, [&](float* o) { gs::sign_decode_add(o, sign_message(in, n).data(), n); });
  }
  size_t onebit_encode(int rank, uint8_t* out, const float* p, size_t n) override {
    mine(rank, "onebit_encode", out, p);
    return encode_sealed(out, p, n, onebit_encoded_bytes(n, n), gs::onebit_encode);
  }
  void onebit_decode_add(int rank, float* out, const uint8_t* in, size_t n) override {
    mine(rank, "onebit_decode_add", out, in);
    uint32_t zeros;
    std::memcpy(&zeros, unseal_bytes(in, 12).data() + 8, 4);
    const std::vector<uint8_t> msg = unseal_bytes(in, onebit_encoded_bytes(n, zeros));
    decode_into(out, n, [&](float* o) { gs::onebit_decode_add(o, msg.data(), n); });
  }
  // Written from compress_ops.h's definition: the fp32 sum of the scales in rank order times the vote.
  void sign_vote_scaled(int rank, float* out, const uint8_t* const* msgs, int ranks, size_t n) override {
    mine(rank, "sign_vote_scaled", out);
    for (int r = 0; r < ranks; ++r) mine(rank, "sign_vote_scaled message", msgs[r]);
    std::vector<std::vector<uint8_t>> plain_msgs;
    std::vector<const uint8_t*> ptrs;
    float scale_sum = 0.0f;
    for (int r = 0; r < ranks; ++r) {
      plain_msgs.push_back(sign_message(msgs[r], n));
      float s;
      std::memcpy(&s, plain_msgs.back().data(), 4);
      scale_sum += s;
    }
    for (const auto& m : plain_msgs) ptrs.push_back(m.data());
    std::vector<float> vote(n);
    gs::sign_vote(vote.data(), ptrs.data(), ranks, n);
    for (size_t i = 0; i < n; ++i) out[i] = seal(vote[i] * scale_sum);
  }
  void cast_encode(int rank, float* wire, float* own, const float* p, size_t n, FloatFormat f, float bf, double pre,
                   double b) override {
    mine(rank, "cast_encode", wire, own, p);
    for (size_t i = 0; i < n; ++i) {
      const float w = cast_wire_value(f, unseal(p[i]), bf, pre);
      wire[i] = seal(w);
      if (own != nullptr) own[i] = seal(static_cast<float>(static_cast<double>(w) * pre * b));
    }
  }
  void add_in_format(int rank, float* acc, const float* x, size_t n, FloatFormat f) override {
    mine(rank, "add_in_format", acc, x);
    for (size_t i = 0; i < n; ++i) acc[i] = seal(gs::add_in_format(f, unseal(acc[i]), unseal(x[i])));
  }
  void post_divide_in_format(int rank, float* x, size_t n, FloatFormat f, double post) override {
    mine(rank, "post_divide_in_format", x);
    for (size_t i = 0; i < n; ++i) x[i] = seal(cast_post_divide(f, unseal(x[i]), post));
  }
  void orthogonalize_columns(int rank, float* m, size_t rows, size_t cols, float eps) override {
    mine(rank, "orthogonalize_columns", m);
    std::vector<float> v = plain(m, rows * cols);
    gs::orthogonalize_columns(v.data(), rows, cols, eps);
    for (size_t i = 0; i < v.size(); ++i) m[i] = seal(v[i]);
  }
  void powersgd_p(int rank, float* p, const float* m, const float* q, size_t rows, size_t cols, size_t r) override {
    mine(rank, "powersgd_p", p, m, q);
    std::vector<float> out(rows * r);
    gs::powersgd_p(out.data(), plain(m, rows * cols).data(), plain(q, cols * r).data(), rows, cols, r);
    for (size_t i = 0; i < out.size(); ++i) p[i] = seal(out[i]);
  }
  void powersgd_q(int rank, float* q, const float* m, const float* p, size_t rows, size_t cols, size_t r) override {
    mine(rank, "powersgd_q", q, m, p);
    std::vector<float> out(cols * r);
    gs::powersgd_q(out.data(), plain(m, rows * cols).data(), plain(p, rows * r).data(), rows, cols, r);
    for (size_t i = 0; i < out.size(); ++i) q[i] = seal(out[i]);
  }
  void powersgd_decode(int rank, float* out, const float* p, const float* q, size_t rows, size_t cols,
                       size_t r) override {
    mine(rank, "powersgd_decode", out, p, q);
    std::vector<float> o(rows * cols);
    gs::powersgd_decode(o.data(), plain(p, rows * r).data(), plain(q, cols * r).data(), rows, cols, r);
    for (size_t i = 0; i < o.size(); ++i) out[i] = seal(o[i]);
  }
  void momentum_feed_in(int rank, float* u, float* e, float* g, size_t n, float m) override {
    mine(rank, "momentum_feed_in", u, e, g);
    for (size_t i = 0; i < n; ++i) {
      const volatile float product = unseal(u[i]) * m;  // rounded apart from the sum
      const float ui = product + unseal(g[i]);
      const float ei = unseal(e[i]) + ui;
      u[i] = seal(ui);
      e[i] = seal(ei);
      g[i] = seal(ei);
    }
  }
  double residual_of(int rank, float* e, const float* p, const float* own, size_t n) override {
    mine(rank, "residual_of", e, p, own);
    double norm2 = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const float r = unseal(p[i]) - unseal(own[i]);
      e[i] = seal(r);
      norm2 += static_cast<double>(r) * r;
    }
    return norm2;
  }
  double mask_sent(int rank, float* u, float* e, const float* own, size_t n) override {
    mine(rank, "mask_sent", u, e, own);
    double norm2 = 0.0;
    for (size_t i = 0; i < n; ++i) {
      if (unseal(own[i]) != 0.0f) u[i] = e[i] = seal(0.0f);
      const double v = unseal(e[i]);
      norm2 += v * v;
    }
    return norm2;
  }
  void average(int rank, float* out, const float* sum, size_t n, float s) override {
    mine(rank, "average", out, sum);
    for (size_t i = 0; i < n; ++i) out[i] = seal(unseal(sum[i]) / s);
  }
  double sum_squared_difference(int rank, const float* a, const float* b, size_t n) override {
    mine(rank, "sum_squared_difference", a, b);
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(unseal(a[i])) - unseal(b[i]);
      sum += d * d;
    }
    return sum;
  }

  // DeepSpeed's 1-bit optimizers: each op unseals copies of what it reads, runs the host op (host_compress_ops(), the
  // loops the host backend runs) on them, and seals what it writes back.
  void deepspeed_first_moment(int rank, float* m, const float* g, size_t n, float b1, float a1) override {
    mine(rank, "deepspeed_first_moment", m, g);
    std::vector<float> pm = plain(m, n);
    host_compress_ops().deepspeed_first_moment(rank, pm.data(), plain(g, n).data(), n, b1, a1);
    seal_into(m, pm);
  }
  void deepspeed_second_moment(int rank, float* v, const float* g, size_t n, float b2, float a2) override {
    mine(rank, "deepspeed_second_moment", v, g);
    std::vector<float> pv = plain(v, n);
    host_compress_ops().deepspeed_second_moment(rank, pv.data(), plain(g, n).data(), n, b2, a2);
    seal_into(v, pv);
  }
  void deepspeed_update(int rank, float* p, const float* m, const float* v, size_t n, const DeepSpeedUpdate& s,
                        float* accumulated) override {
    mine(rank, "deepspeed_update", p, m, v, accumulated);
    std::vector<float> pp = plain(p, n), pa = accumulated != nullptr ? plain(accumulated, n) : std::vector<float>();
    host_compress_ops().deepspeed_update(rank, pp.data(), plain(m, n).data(), plain(v, n).data(), n, s,
                                         accumulated != nullptr ? pa.data() : nullptr);
    seal_into(p, pp);
    if (accumulated != nullptr) seal_into(accumulated, pa);
  }
  OnebitSide onebit_compensate(int rank, float* message, float* x, float* error, size_t count) override {
    mine(rank, "onebit_compensate", message, x, error);
    const size_t words = onebit_message_words(count);
    std::vector<float> pm(words), px = plain(x, count), pe = plain(error, count);
    const OnebitSide side = host_compress_ops().onebit_compensate(rank, pm.data(), px.data(), pe.data(), count);
    seal_into(message, pm);
    seal_into(x, px);
    seal_into(error, pe);
    return side;
  }
  void onebit_server_sum(int rank, float* c, const float* messages, int ranks, size_t words, size_t first,
                         size_t count, float inv) override {
    mine(rank, "onebit_server_sum", c, messages);
    std::vector<float> pc(count);
    host_compress_ops().onebit_server_sum(rank, pc.data(), plain(messages, words * static_cast<size_t>(ranks)).data(),
                                          ranks, words, first, count, inv);
    seal_into(c, pc);
  }
  void onebit_decode_chunks(int rank, float* m, size_t n, const float* messages, size_t words, size_t chunk) override {
    mine(rank, "onebit_decode_chunks", m, messages);
    std::vector<float> pm(n);
    const size_t ranks = chunk == 0 ? 0 : (n + chunk - 1) / chunk;
    host_compress_ops().onebit_decode_chunks(rank, pm.data(), n, plain(messages, words * ranks).data(), words, chunk);
    seal_into(m, pm);
  }
  void zero_variance_mask(int rank, float* m, const float* v, size_t n) override {
    mine(rank, "zero_variance_mask", m, v);
    std::vector<float> pm = plain(m, n);
    host_compress_ops().zero_variance_mask(rank, pm.data(), plain(v, n).data(), n);
    seal_into(m, pm);
  }
  void zero_one_sync_begin(int rank, float* p, float* cb, const float* v, size_t n, float eps) override {
    mine(rank, "zero_one_sync_begin", p, cb, v);
    std::vector<float> pp = plain(p, n), pc = plain(cb, n);
    host_compress_ops().zero_one_sync_begin(rank, pp.data(), pc.data(), plain(v, n).data(), n, eps);
    seal_into(p, pp);
    seal_into(cb, pc);
  }
  void zero_one_sync_end(int rank, float* m, float* p, float* cb, const float* v, size_t n, float lrs,
                         float eps) override {
    mine(rank, "zero_one_sync_end", m, p, cb, v);
    std::vector<float> pm = plain(m, n), pp = plain(p, n), pc = plain(cb, n);
    host_compress_ops().zero_one_sync_end(rank, pm.data(), pp.data(), pc.data(), plain(v, n).data(), n, lrs, eps);
    seal_into(m, pm);
    seal_into(p, pp);
    seal_into(cb, pc);
  }
  void lamb_direction(int rank, float* u, const float* m, const float* v, const float* p, size_t n, float eps,
                      float weight_decay, bool decay) override {
    mine(rank, "lamb_direction", u, m, v, p);
    std::vector<float> pu(n);
    host_compress_ops().lamb_direction(rank, pu.data(), plain(m, n).data(), plain(v, n).data(), plain(p, n).data(), n,
                                       eps, weight_decay, decay);
    seal_into(u, pu);
  }
  void lamb_reconstruct(int rank, float* u, const float* m, const float* last, size_t n, float b1,
                        float a1) override {
    mine(rank, "lamb_reconstruct", u, m, last);
    std::vector<float> pu(n);
    host_compress_ops().lamb_reconstruct(rank, pu.data(), plain(m, n).data(), plain(last, n).data(), n, b1, a1);
    seal_into(u, pu);
  }
  LambFrozenTerms lamb_frozen_direction(int rank, float* u, const float* m, const float* v, const float* fresh,
                                        const float* p, size_t n, float eps, float weight_decay,
                                        bool decay) override {
    mine(rank, "lamb_frozen_direction", u, m, v, fresh, p);
    std::vector<float> pu(n);
    const LambFrozenTerms t = host_compress_ops().lamb_frozen_direction(
        rank, pu.data(), plain(m, n).data(), plain(v, n).data(), plain(fresh, n).data(), plain(p, n).data(), n, eps,
        weight_decay, decay);
    seal_into(u, pu);
    return t;
  }

 private:
  static std::vector<float> plain(const float* x, size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = unseal(x[i]);
    return v;
  }
  static void seal_into(float* dst, const std::vector<float>& v) {
    for (size_t i = 0; i < v.size(); ++i) dst[i] = seal(v[i]);
  }
  // A sign message (encode: signSGD's or 1-bit SGD's host encoder) of the unsealed p into room bytes, sealed into out.
  static size_t encode_sealed(uint8_t* out, const float* p, size_t n, size_t room,
                              size_t (*encode)(uint8_t*, const float*, size_t)) {
    std::vector<uint8_t> msg(room);
    const size_t bytes = encode(msg.data(), plain(p, n).data(), n);
    seal_bytes(out, msg.data(), bytes);
    return bytes;
  }
  mutable std::mutex owners_mutex_;
  std::map<uintptr_t, std::pair<uintptr_t, int>> owners_;  // start -> (end, rank)

  static void seal_words(uint32_t* dst, const uint32_t* src, size_t k) {
    for (size_t j = 0; j < k; ++j) dst[j] = ~src[j];
  }
  // out[0, n) unsealed, changed by f, sealed again.
  template <class F>
  static void decode_into(float* out, size_t n, F f) {
    std::vector<float> o = plain(out, n);
    f(o.data());
    for (size_t i = 0; i < n; ++i) out[i] = seal(o[i]);
  }
  // A signSGD message read to its own length (its header's zero count says whether the zero plane is there).
  static std::vector<uint8_t> sign_message(const uint8_t* in, size_t n) {
    uint32_t zeros;
    std::memcpy(&zeros, unseal_bytes(in, 8).data() + 4, 4);
    return unseal_bytes(in, sign_encoded_bytes(n, zeros));
  }
};

class SealedMemory final : public ElementOps, public SealedCompressOps {
 public:
  explicit SealedMemory(int ranks) : tally_(static_cast<size_t>(ranks)) {}
  // Tests: called with the rank before each buffer of that rank is freed (must not throw).
  std::function<void(int rank)> on_release;
  bool host() const override { return false; }
  void zero(int rank, float* x, size_t n) override {
    mine(rank, "zero", x);
    for (size_t i = 0; i < n; ++i) x[i] = seal(0.0f);
  }
  void copy(int rank, float* dst, const float* src, size_t n) override {
    mine(rank, "copy", dst, src);
    std::memmove(dst, src, n * sizeof(float));
  }
  void upload(int rank, float* dst, const float* host, size_t n) override {
    mine(rank, "upload", dst);
    for (size_t i = 0; i < n; ++i) dst[i] = seal(host[i]);
  }
  void download(int rank, float* host, const float* src, size_t n) override {
    mine(rank, "download", src);
    for (size_t i = 0; i < n; ++i) host[i] = unseal(src[i]);
  }
  void add(int rank, float* acc, const float* x, size_t n) override {
    mine(rank, "add", acc, x);
    for (size_t i = 0; i < n; ++i) acc[i] = seal(unseal(acc[i]) + unseal(x[i]));
  }
  void add_scaled(int rank, float* acc, const float* x, float f, size_t n) override {
    mine(rank, "add_scaled", acc, x);
    for (size_t i = 0; i < n; ++i) {
      const volatile float product = f * unseal(x[i]);  // rounded apart from the sum
      acc[i] = seal(unseal(acc[i]) + product);
    }
  }
  void scale(int rank, float* x, size_t n, float f) override {
    mine(rank, "scale", x);
    for (size_t i = 0; i < n; ++i) x[i] = seal(unseal(x[i]) * f);
  }
  void divide(int rank, float* x, size_t n, float d) override {
    mine(rank, "divide", x);
    for (size_t i = 0; i < n; ++i) x[i] = seal(unseal(x[i]) / d);
  }
  void round_to_fp16(int rank, float* x, size_t n) override {
    mine(rank, "round_to_fp16", x);
    for (size_t i = 0; i < n; ++i) x[i] = seal(round_through_fp16(unseal(x[i])));
  }
  size_t count_nonfinite(int rank, const float* x, size_t n) override {
    mine(rank, "count_nonfinite", x);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += std::isfinite(unseal(x[i])) ? 0 : 1;
    return bad;
  }
  void tally_nonfinite(int rank, const float* x, size_t n) override {
    mine(rank, "tally_nonfinite", x);
    tally_[static_cast<size_t>(rank)] += count_nonfinite(rank, x, n);
  }
  size_t take_nonfinite(int rank) override { return std::exchange(tally_[static_cast<size_t>(rank)], 0); }
  ElementScan scan(int rank, const float* x, size_t n, bool want_norm) override {
    mine(rank, "scan", x);
    ElementScan s;
    s.nonfinite = count_nonfinite(rank, x, n);
    if (want_norm) {
      for (size_t i = 0; i < n; ++i) s.sum_squares += static_cast<double>(unseal(x[i])) * unseal(x[i]);
    }
    return s;
  }
  void sgd(int rank, float* w, const float* g, float* buf, size_t n, const SgdScalars& s) override {
    mine(rank, "sgd", w, g, buf);
    ++sgd_calls;
    for (size_t i = 0; i < n; ++i) {
      float wi = unseal(w[i]), bi = buf == nullptr ? 0.0f : unseal(buf[i]);
      sgd_element(wi, unseal(g[i]), bi, s);
      w[i] = seal(wi);
      if (buf != nullptr) buf[i] = seal(bi);
    }
  }
  void adam(int rank, float* w, const float* g, float* m, float* v, size_t n, const AdamScalars& s) override {
    mine(rank, "adam", w, g, m, v);
    ++adam_calls;
    for (size_t i = 0; i < n; ++i) {
      float wi = unseal(w[i]), mi = unseal(m[i]), vi = unseal(v[i]);
      adam_element(wi, unseal(g[i]), mi, vi, s);
      w[i] = seal(wi);
      m[i] = seal(mi);
      v[i] = seal(vi);
    }
  }
  double phase_begin(int) override { return now_s(); }
  // also_s receives its seconds at the rank's next settle, as on a device (the clock at once: the same by the time a
  // step ends), so the reducer's records must outlive the span until then.
  void phase_end(int rank, double mark, Phase phase, PhaseClock& clock, double* also_s) override {
    if (phase == Phase::kCompress) ++compress_phase_ends;
    const double seconds = span_s >= 0.0 ? span_s : now_s() - mark;
    clock.add(phase, seconds);
    add_at_settle(rank, also_s, seconds);
  }
  // span_end: the same seconds (span_s where set) to out_s only, at the rank's next settle.
  void span_end(int rank, double mark, double* out_s) override {
    add_at_settle(rank, out_s, span_s >= 0.0 ? span_s : now_s() - mark);
  }
  void settle(int rank, PhaseClock&) override {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    for (const auto& [also_s, seconds] : pending_[rank]) *also_s += seconds;
    pending_[rank].clear();
  }
  std::atomic<int64_t> compress_phase_ends{0};  // spans timed on this memory into the compress phase
  // Tests (set before the run): when >= 0, every span timed on this memory (phase_begin to phase_end or span_end)
  // measures exactly span_s seconds, a clock of the memory's own that host timing cannot produce (as a device's events
  // time its stream, not the host); below 0, the steady clock.
  double span_s = -1.0;
  CompressOps* compress_ops() override { return this; }

  std::atomic<int64_t> allocations{0}, releases{0}, sgd_calls{0}, adam_calls{0};

 protected:
  float* allocate_zeroed(int rank, size_t n) override {
    if (n == 0) return nullptr;
    ++allocations;
    float* p = new float[n];
    for (size_t i = 0; i < n; ++i) p[i] = seal(0.0f);
    own(p, n, rank);
    return p;
  }
  void release(int rank, float* p) noexcept override {
    if (p == nullptr) return;
    if (on_release) on_release(rank);
    mine(rank, "release", p);
    disown(p);
    ++releases;
    delete[] p;
  }

 private:
  // `seconds` into *out (null: nowhere) at the rank's next settle.
  void add_at_settle(int rank, double* out, double seconds) {
    if (out == nullptr) return;
    std::lock_guard<std::mutex> lock(pending_mutex_);
    pending_[rank].emplace_back(out, seconds);
  }
  std::vector<size_t> tally_;  // per rank (each rank's own thread writes its entry)
  std::mutex pending_mutex_;
  // per rank: phase_end's also_s and span_end's out_s, until settle
  std::map<int, std::vector<std::pair<double*, double>>> pending_;
};

// The collectives of a host communicator on sealed buffers (each rank's buffers are its own, so each is unsealed in
// place around the host collective and sealed again). The double all-reduce (control values) is host memory.
class SealedCommunicator final : public Communicator {
 public:
  ~SealedCommunicator() override {
    if (aborted_.load()) return;  // an aborted run leaves started buckets behind
    for (size_t r = 0; r < pending_.size(); ++r)
      if (!pending_[r].empty())
        ADD_FAILURE() << "rank " << r << " has " << pending_[r].size() << " bucket(s) started and never waited for";
  }
  SealedCommunicator(int ranks, bool asynchronous, bool poison = false)
      : inner_(make_host_communicator(ranks)), asynchronous_(asynchronous), poison_(poison),
        pending_(static_cast<size_t>(ranks)), saved_(static_cast<size_t>(ranks)), started_(static_cast<size_t>(ranks)) {}
  int size() const override { return inner_->size(); }
  void all_reduce_sum(int rank, float* buf, size_t count) override {
    seal_all(buf, count);
    inner_->all_reduce_sum(rank, buf, count);
    seal_all(buf, count);
  }
  void all_reduce_sum(int rank, double* buf, size_t count) override { inner_->all_reduce_sum(rank, buf, count); }
  void all_gather(int rank, float* out, const float* in, size_t count) override {
    std::vector<float> plain(in, in + count);
    seal_all(plain.data(), count);
    inner_->all_gather(rank, out, plain.data(), count);
    seal_all(out, count * static_cast<size_t>(size()));
  }
  void reduce_scatter_sum(int rank, float* out, const float* in, size_t count) override {
    std::vector<float> plain(in, in + count * static_cast<size_t>(size()));
    seal_all(plain.data(), plain.size());
    inner_->reduce_scatter_sum(rank, out, plain.data(), count);
    seal_all(out, count);
  }
  void broadcast(int rank, float* buf, size_t count, int root) override {
    seal_all(buf, count);
    inner_->broadcast(rank, buf, count, root);
    seal_all(buf, count);
  }
  void barrier(int rank) override { inner_->barrier(rank); }
  void all_reduce_sum_start(int rank, float* buf, size_t count) override {
    ++started_[static_cast<size_t>(rank)];
    if (!asynchronous_) return all_reduce_sum(rank, buf, count);
    pending_[static_cast<size_t>(rank)].emplace_back(buf, count);
    if (poison_) {
      saved_[static_cast<size_t>(rank)].emplace_back(buf, buf + count);
      for (size_t i = 0; i < count; ++i) buf[i] = seal(std::nanf(""));
    }
  }
  void all_reduce_wait(int rank) override {
    auto pending = std::exchange(pending_[static_cast<size_t>(rank)], {});
    auto saved = std::exchange(saved_[static_cast<size_t>(rank)], {});
    for (size_t b = 0; b < pending.size(); ++b) {
      auto [buf, count] = pending[b];
      if (poison_) {
        const float nan = seal(std::nanf(""));
        for (size_t i = 0; i < count; ++i)
          if (std::memcmp(&buf[i], &nan, sizeof nan) != 0) {
            ADD_FAILURE() << "rank " << rank << ": element " << i << " of a started bucket was written before its wait";
            break;
          }
        std::memcpy(buf, saved[b].data(), count * sizeof(float));
      }
      all_reduce_sum(rank, buf, count);
    }
  }
  bool starts_asynchronously() const override { return asynchronous_; }
  void abort() override {
    aborted_.store(true);
    if (on_abort) on_abort();
    inner_->abort();
  }
  // Tests: called at each abort, before the host communicator's.
  std::function<void()> on_abort;
  CommStats take_stats(int rank) override { return inner_->take_stats(rank); }
  // Buckets rank `rank` has started (all_reduce_sum_start) so far.
  int64_t started(int rank) const { return started_[static_cast<size_t>(rank)]; }

 private:
  std::atomic<bool> aborted_{false};
  std::unique_ptr<Communicator> inner_;
  bool asynchronous_;
  bool poison_;
  std::vector<std::vector<std::pair<float*, size_t>>> pending_;  // per rank: started, not yet reduced
  std::vector<std::vector<std::vector<float>>> saved_;            // poison: their values at the start
  std::vector<int64_t> started_;
};

}  // namespace gs::test
