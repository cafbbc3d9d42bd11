// host_element_ops (element_ops.h): the host backend's loops, as the rank loop and the strategies always ran them
// (built with -ffp-contract=off: a product and a sum round apart).
#include "sim/core/element_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/convert.h"

namespace gs {

ElementScan scan_elements(const float* x, size_t n, bool want_norm) {
  ElementScan s;
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    bad |= static_cast<uint32_t>((u & 0x7fffffffu) >= 0x7f800000u);  // inf or NaN (a loop the compiler vectorizes)
  }
  if (bad != 0) {  // the count, only when there is something to count (a second pass over a bad buffer)
    for (size_t i = 0; i < n; ++i) s.nonfinite += !std::isfinite(x[i]);
  }
  if (want_norm) {
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double v = x[i];
      sum += v * v;
    }
    s.sum_squares = sum;
  }
  return s;
}

namespace {

size_t count_non_finite(const float* x, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += !std::isfinite(x[i]);
  return bad;
}

class HostElementOps final : public ElementOps {
 public:
  bool host() const override { return true; }
  void zero(int, float* x, size_t n) override { std::fill(x, x + n, 0.0f); }
  void copy(int, float* dst, const float* src, size_t n) override { std::copy(src, src + n, dst); }
  void upload(int, float* dst, const float* host, size_t n) override { std::memcpy(dst, host, n * sizeof(float)); }
  void download(int, float* host, const float* src, size_t n) override { std::memcpy(host, src, n * sizeof(float)); }
  void add(int, float* acc, const float* x, size_t n) override {
    for (size_t i = 0; i < n; ++i) acc[i] += x[i];
  }
  void add_scaled(int, float* acc, const float* x, float f, size_t n) override {
    for (size_t i = 0; i < n; ++i) acc[i] += f * x[i];
  }
  void scale(int, float* x, size_t n, float f) override {
    for (size_t i = 0; i < n; ++i) x[i] = x[i] * f;
  }
  void divide(int, float* x, size_t n, float d) override {
    for (size_t i = 0; i < n; ++i) x[i] = x[i] / d;
  }
  void round_to_fp16(int, float* x, size_t n) override { round_fp32_through_fp16(x, x, n); }
  size_t count_nonfinite(int, const float* x, size_t n) override { return count_non_finite(x, n); }
  void tally_nonfinite(int, const float* x, size_t n) override { tally_ += count_non_finite(x, n); }
  size_t take_nonfinite(int) override { return std::exchange(tally_, 0); }
  ElementScan scan(int, const float* x, size_t n, bool want_norm) override { return scan_elements(x, n, want_norm); }
  void sgd(int, float* w, const float* g, float* buf, size_t n, const SgdScalars& s) override {
    float unused = 0.0f;
    for (size_t i = 0; i < n; ++i) sgd_element(w[i], g[i], buf == nullptr ? unused : buf[i], s);
  }
  void adam(int, float* w, const float* g, float* m, float* v, size_t n, const AdamScalars& s) override {
    for (size_t i = 0; i < n; ++i) adam_element(w[i], g[i], m[i], v[i], s);
  }
  double phase_begin(int) override { return now_s(); }
  void phase_end(int, double mark, Phase phase, PhaseClock& clock, double* also_s) override {
    const double seconds = now_s() - mark;
    clock.add(phase, seconds);
    if (also_s != nullptr) *also_s += seconds;
  }
  void span_end(int, double mark, double* out_s) override {
    if (out_s != nullptr) *out_s += now_s() - mark;
  }
  CompressOps* compress_ops() override { return &host_compress_ops(); }

 protected:
  float* allocate_zeroed(int, size_t n) override { return n == 0 ? nullptr : new float[n](); }
  void release(int, float* p) noexcept override { delete[] p; }

 private:
  static thread_local size_t tally_;  // per rank thread: a rank's tally is its own thread's
};

thread_local size_t HostElementOps::tally_ = 0;

}  // namespace

ElementOps& host_element_ops() {
  static HostElementOps ops;
  return ops;
}

}  // namespace gs
