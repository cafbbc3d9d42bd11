// GPU tests of the backend seam's CUDA memory (ctest gpu.element_ops; part of gradsweep_gpu_kernel_tests, whose main
// exits 77 without a GPU): every operation of CudaElementOps (sim/backend/cuda_element_ops.h) against host_element_ops
// on the same inputs over the sizes 0, 1, 1001 and 2^20 + 3, with inf and NaN among the values. Element operations
// and the optimizers bit for bit (NaN equal to NaN, gpu_test_util.h), counts exactly, scan's sum of squares within the
// bound of two summation orders; the phase clock positive and monotone. Its compressor operations (CompressOps,
// sim/core/compress_ops.h) against host_compress_ops: selections and sparse messages exactly, decoders bit for bit on
// the same message, encoders' bits and counts exactly where the host's order is the device's, the norms and means
// accumulated in another order within their bounds; DeepSpeed's 1-bit optimizers' operations likewise (the scale of
// the compressed all-reduce within a few ulps). A new ElementOps or CompressOps operation is one TEST here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/compress.h"
#include "kernels/cuda_runtime.h"
#include "kernels/optim_math.h"
#include "sim/backend/cuda_element_ops.h"
#include "sim/core/clock.h"
#include "sim/core/compress_ops.h"
#include "sim/core/element_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace gs {
namespace {

using test::fresh_rng;

const size_t kSizes[] = {0, 1, 1001, (size_t{1} << 20) + 3};

// Wide values with inf, NaN, +-0 and subnormals sprinkled in (gpu_test_util.h).
std::vector<float> values_with_specials(size_t n, size_t salt) {
  auto rng = fresh_rng(salt);
  auto v = test::wide_values(n, rng, -20, 20);
  test::add_specials(v, rng);
  return v;
}

std::string size_label(size_t n) { return "n " + std::to_string(n); }

class GpuElementOps : public ::testing::Test {
 protected:
  CudaElementOps cuda_{std::vector<int>{0, 0}};  // two ranks on device 0, each with its own stream
  ElementOps& host_ = host_element_ops();

  // A device buffer of rank `rank` holding `v`.
  FloatBuffer up(const std::vector<float>& v, int rank = 0) {
    FloatBuffer b = cuda_.allocate(rank, v.size());
    cuda_.upload(rank, b.get(), v.data(), v.size());
    return b;
  }
  std::vector<float> down(const FloatBuffer& b, int rank = 0) {
    std::vector<float> out(b.size(), std::numeric_limits<float>::quiet_NaN());
    cuda_.download(rank, out.data(), b.get(), b.size());
    return out;
  }
};

// Bit patterns compared exactly, NaN payloads included (a copy must not touch them).
bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_F(GpuElementOps, AllocateZeroCopyUploadDownloadKeepEveryBit) {
  EXPECT_FALSE(cuda_.host());
  for (size_t n : kSizes) {
    const auto v = values_with_specials(n, n + 1);
    FloatBuffer a = cuda_.allocate(0, n);
    ASSERT_EQ(a.size(), n);
    EXPECT_TRUE(same_bytes(down(a), std::vector<float>(n, 0.0f))) << "allocate zeroes (+0.0f) " << size_label(n);
    cuda_.upload(0, a.get(), v.data(), n);
    EXPECT_TRUE(same_bytes(down(a), v)) << "upload / download " << size_label(n);
    FloatBuffer b = cuda_.allocate(0, n);
    cuda_.copy(0, b.get(), a.get(), n);
    EXPECT_TRUE(same_bytes(down(b), v)) << "copy " << size_label(n);
    cuda_.zero(0, a.get(), n);
    EXPECT_TRUE(same_bytes(down(a), std::vector<float>(n, 0.0f))) << "zero " << size_label(n);
    // From pinned memory (the DMA reads the source after the call): overwriting it right after upload is allowed.
    gpu::PinnedBuffer<float> pinned(n);
    if (n != 0) std::memcpy(pinned.get(), v.data(), n * sizeof(float));
    cuda_.upload(1, a.get(), pinned.get(), n);
    for (size_t i = 0; i < n; ++i) pinned[i] = -1.0f;
    EXPECT_TRUE(same_bytes(down(a, 1), v)) << "upload from pinned memory " << size_label(n);
  }
}

TEST_F(GpuElementOps, AddAddScaledScaleDivideMatchHostBitForBit) {
  for (size_t n : kSizes) {
    const auto acc0 = values_with_specials(n, 10 * n + 1);
    const auto x = values_with_specials(n, 10 * n + 2);
    struct Case {
      const char* name;
      void (*run)(ElementOps&, int, float*, const float*, size_t);
    };
    const Case cases[] = {
        {"add", [](ElementOps& o, int r, float* a, const float* y, size_t m) { o.add(r, a, y, m); }},
        {"add_scaled 0.3", [](ElementOps& o, int r, float* a, const float* y, size_t m) {
           o.add_scaled(r, a, y, 0.3f, m);
         }},
        {"add_scaled -1e-7", [](ElementOps& o, int r, float* a, const float* y, size_t m) {
           o.add_scaled(r, a, y, -1e-7f, m);
         }},
        {"scale 0.37", [](ElementOps& o, int r, float* a, const float*, size_t m) { o.scale(r, a, m, 0.37f); }},
        {"scale 1/65536", [](ElementOps& o, int r, float* a, const float*, size_t m) { o.scale(r, a, m, 0x1p-16f); }},
        {"divide 3", [](ElementOps& o, int r, float* a, const float*, size_t m) { o.divide(r, a, m, 3.0f); }},
        {"divide 7", [](ElementOps& o, int r, float* a, const float*, size_t m) { o.divide(r, a, m, 7.0f); }},
        {"divide 0", [](ElementOps& o, int r, float* a, const float*, size_t m) { o.divide(r, a, m, 0.0f); }},
    };
    for (const Case& c : cases) {
      auto want = acc0;
      c.run(host_, 0, want.data(), x.data(), n);
      FloatBuffer d_acc = up(acc0), d_x = up(x);
      c.run(cuda_, 0, d_acc.get(), d_x.get(), n);
      EXPECT_SAME_BITS(down(d_acc), want, std::string(c.name) + " " + size_label(n));
    }
  }
}

// fp16_pure's storage rounding: the host op's bits (RNE, overflow to inf, NaN kept NaN).
TEST_F(GpuElementOps, RoundToFp16MatchesHostBitForBit) {
  for (size_t n : kSizes) {
    const auto v = values_with_specials(n, 41 * n + 7);
    auto want = v;
    host_.round_to_fp16(0, want.data(), n);
    FloatBuffer d = up(v);
    cuda_.round_to_fp16(0, d.get(), n);
    EXPECT_SAME_BITS(down(d), want, "round_to_fp16 " + size_label(n));
  }
}

TEST_F(GpuElementOps, NonfiniteCountsAndTallyMatchHost) {
  for (size_t n : kSizes) {
    const auto v = values_with_specials(n, 100 * n + 3);
    FloatBuffer d = up(v);
    const size_t want = host_.count_nonfinite(0, v.data(), n);
    if (n > 1000) {
      EXPECT_GT(want, 0u) << "the inputs hold inf and NaN";
    }
    EXPECT_EQ(cuda_.count_nonfinite(0, d.get(), n), want) << size_label(n);
    // The tally over three ranges, as a backward's layers: the same count; rank 1's tally is its own.
    const size_t a = n / 3, b = n / 2;
    cuda_.tally_nonfinite(0, d.get(), a);
    cuda_.tally_nonfinite(0, d.get() + a, b - a);
    cuda_.tally_nonfinite(1, d.get(), n);
    cuda_.tally_nonfinite(0, d.get() + b, n - b);
    host_.tally_nonfinite(0, v.data(), a);
    host_.tally_nonfinite(0, v.data() + a, b - a);
    host_.tally_nonfinite(0, v.data() + b, n - b);
    EXPECT_EQ(cuda_.take_nonfinite(0), host_.take_nonfinite(0)) << size_label(n);
    EXPECT_EQ(cuda_.take_nonfinite(0), 0u) << "taken: cleared " << size_label(n);
    EXPECT_EQ(cuda_.take_nonfinite(1), want) << "rank 1 " << size_label(n);
    EXPECT_EQ(cuda_.take_nonfinite(1), 0u);
  }
  // All inf / NaN, and none.
  const std::vector<float> bad = {INFINITY, -INFINITY, NAN, -NAN, 1.0f};
  FloatBuffer d = up(bad);
  EXPECT_EQ(cuda_.count_nonfinite(0, d.get(), bad.size()), 4u);
  EXPECT_EQ(cuda_.count_nonfinite(0, d.get() + 4, 1), 0u);
}

// Host and device sums of squares: the squares are exact in double and non-negative, so each order's sum is within
// gamma_{n-1} S of the exact sum S (gamma_k = k u / (1 - k u), u = 2^-53, Higham, Accuracy and Stability of Numerical
// Algorithms, 2nd ed., eq. 3.5, as the PowerSGD test's float bound with double's u), so the two within 2 gamma_n S.
void expect_sum_squares_close(double got, double want, size_t n, const std::string& what) {
  if (std::isnan(want) || std::isinf(want)) {
    EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : got == want) << what << ": got " << got << " want " << want;
    return;
  }
  const double nu = static_cast<double>(n) * std::ldexp(1.0, -53);
  const double bound = 2.0 * nu / (1.0 - nu) * want;
  EXPECT_LE(std::fabs(got - want), bound) << what << ": got " << got << " want " << want;
}

TEST_F(GpuElementOps, ScanMatchesHostCountExactlyAndNormWithinTheOrderBound) {
  for (size_t n : kSizes) {
    auto rng = fresh_rng(1000 * n + 5);
    const auto finite = test::wide_values(n, rng, -20, 20);
    auto with_inf = finite;
    if (n != 0) with_inf[n / 2] = -INFINITY;
    const auto with_nan = values_with_specials(n, 1000 * n + 6);
    const std::pair<const char*, const std::vector<float>*> inputs[] = {
        {"finite", &finite}, {"an inf", &with_inf}, {"inf and NaN", &with_nan}};
    for (const auto& [name, v] : inputs) {
      const std::string what = std::string(name) + " " + size_label(n);
      FloatBuffer d = up(*v);
      for (bool want_norm : {false, true}) {
        const ElementScan want = host_.scan(0, v->data(), n, want_norm);
        const ElementScan got = cuda_.scan(0, d.get(), n, want_norm);
        EXPECT_EQ(got.nonfinite, want.nonfinite) << what;
        if (!want_norm) {
          EXPECT_EQ(got.sum_squares, 0.0) << what;
          continue;
        }
        expect_sum_squares_close(got.sum_squares, want.sum_squares, n, what);
        // The device's order is fixed: the same bits again.
        const ElementScan again = cuda_.scan(0, d.get(), n, true);
        EXPECT_TRUE(std::memcmp(&again.sum_squares, &got.sum_squares, sizeof(double)) == 0 ||
                    (std::isnan(again.sum_squares) && std::isnan(got.sum_squares)))
            << what;
      }
    }
  }
}

TEST_F(GpuElementOps, SgdMatchesHostBitForBit) {
  struct Case {
    const char* name;
    SgdScalars s;
    bool buffer;
  };
  const Case cases[] = {
      {"plain", {0.1f, 0.0f, 0.0f, false, false}, false},
      {"weight decay", {0.05f, 0.0f, 1e-4f, false, false}, false},
      {"momentum first step", {0.1f, 0.9f, 1e-4f, false, true}, true},
      {"momentum", {0.1f, 0.9f, 1e-4f, false, false}, true},
      {"nesterov", {0.01f, 0.9f, 0.0f, true, false}, true},
  };
  for (size_t n : kSizes) {
    auto rng = fresh_rng(n + 77);
    const auto w0 = test::normals(n, rng), buf0 = test::normals(n, rng);
    const auto g = values_with_specials(n, n + 78);
    for (const Case& c : cases) {
      auto w = w0, buf = buf0;
      host_.sgd(0, w.data(), g.data(), c.buffer ? buf.data() : nullptr, n, c.s);
      FloatBuffer d_w = up(w0), d_g = up(g), d_buf = up(buf0);
      cuda_.sgd(0, d_w.get(), d_g.get(), c.buffer ? d_buf.get() : nullptr, n, c.s);
      const std::string what = std::string("sgd ") + c.name + " " + size_label(n);
      EXPECT_SAME_BITS(down(d_w), w, what + " w");
      EXPECT_SAME_BITS(down(d_buf), buf, what + " momentum buffer");
    }
  }
}

TEST_F(GpuElementOps, AdamMatchesHostBitForBit) {
  struct Case {
    const char* name;
    AdamScalars s;
  };
  const Case cases[] = {
      {"adam t=1 lerp", adam_scalars(1e-3, 0.9, 0.999, 1e-8, 0.0, false, 1)},
      {"adam L2 t=7", adam_scalars(1e-3, 0.9, 0.999, 1e-8, 1e-2, false, 7)},
      {"adamw t=3", adam_scalars(3e-4, 0.9, 0.95, 1e-6, 0.1, true, 3)},
      {"adam 1.13 first moment t=5", adam_scalars(1e-3, 0.8, 0.99, 1e-8, 0.0, false, 5, false)},
  };
  for (size_t n : kSizes) {
    auto rng = fresh_rng(n + 99);
    const auto w0 = test::normals(n, rng), m0 = test::normals(n, rng, 0.1f);
    auto v0 = test::normals(n, rng, 0.1f);
    for (auto& x : v0) x = x * x;  // a second moment is non-negative
    const auto g = values_with_specials(n, n + 100);
    for (const Case& c : cases) {
      auto w = w0, m = m0, v = v0;
      host_.adam(0, w.data(), g.data(), m.data(), v.data(), n, c.s);
      FloatBuffer d_w = up(w0), d_g = up(g), d_m = up(m0), d_v = up(v0);
      cuda_.adam(0, d_w.get(), d_g.get(), d_m.get(), d_v.get(), n, c.s);
      const std::string what = std::string(c.name) + " " + size_label(n);
      EXPECT_SAME_BITS(down(d_w), w, what + " w");
      EXPECT_SAME_BITS(down(d_m), m, what + " m");
      EXPECT_SAME_BITS(down(d_v), v, what + " v");
    }
  }
}

// Events on the rank's stream: nothing reaches the clock before settle; then each phase is positive, at most the wall
// time around it, the totals only grow, and twenty passes over 2^24 floats take longer than one.
TEST_F(GpuElementOps, PhaseTimingIsPositiveAndMonotone) {
  const size_t n = size_t{1} << 24;
  FloatBuffer x = cuda_.allocate(0, n);
  cuda_.scale(0, x.get(), n, 1.0f);  // warm-up (the first launch loads the module)
  PhaseClock clock;
  clock.begin_step();
  cuda_.settle(0, clock);
  const auto seconds = [&](Phase p) { return clock.current().phase_s[static_cast<size_t>(p)]; };
  const double wall0 = now_s();
  {
    TimedPhase t(cuda_, 0, clock, Phase::kOptimizer);
    cuda_.scale(0, x.get(), n, 1.0f);
  }
  EXPECT_EQ(seconds(Phase::kOptimizer), 0.0) << "times reach the clock at settle";
  cuda_.settle(0, clock);
  const double one = seconds(Phase::kOptimizer);
  EXPECT_GT(one, 0.0);
  EXPECT_LE(one, now_s() - wall0);
  {
    TimedPhase t(cuda_, 0, clock, Phase::kOptimizer);
    for (int i = 0; i < 20; ++i) cuda_.scale(0, x.get(), n, 1.0f);
  }
  {
    TimedPhase t(cuda_, 0, clock, Phase::kCommunicate);
    cuda_.add(0, x.get(), x.get(), n);
  }
  cuda_.settle(0, clock);
  const double twenty = seconds(Phase::kOptimizer) - one;
  EXPECT_GT(seconds(Phase::kCommunicate), 0.0);
  EXPECT_GT(twenty, one) << "twenty passes against one";
  EXPECT_LE(seconds(Phase::kOptimizer) + seconds(Phase::kCommunicate), now_s() - wall0);
  // A phase open across a settle keeps its start event; the totals never decrease.
  double last = seconds(Phase::kOptimizer);
  for (int round = 0; round < 3; ++round) {
    const double mark = cuda_.phase_begin(0);
    cuda_.scale(0, x.get(), n, 1.0f);
    cuda_.settle(0, clock);
    double also = 0.0;  // phase_end's also_s: the same seconds, at settle
    cuda_.phase_end(0, mark, Phase::kOptimizer, clock, &also);
    EXPECT_EQ(also, 0.0) << "round " << round << ": not before the settle";
    cuda_.settle(0, clock);
    EXPECT_GT(seconds(Phase::kOptimizer), last) << "round " << round;
    EXPECT_NEAR(also, seconds(Phase::kOptimizer) - last, 1e-9) << "round " << round;
    last = seconds(Phase::kOptimizer);
  }
  // span_end: the span's time reaches its out_s only, at settle, and no phase of the clock (inside a phase too: the
  // phase around it has it once).
  const auto phases_before = clock.current().phase_s;
  double span = 0.0;
  const double span_mark = cuda_.phase_begin(0);
  for (int i = 0; i < 20; ++i) cuda_.scale(0, x.get(), n, 1.0f);
  cuda_.span_end(0, span_mark, &span);
  EXPECT_EQ(span, 0.0) << "not before the settle";
  cuda_.span_end(0, cuda_.phase_begin(0), nullptr);  // ends the span only
  cuda_.settle(0, clock);
  EXPECT_GT(span, 0.0);
  EXPECT_EQ(clock.current().phase_s, phases_before);
  double inner = 0.0;
  {
    TimedPhase t(cuda_, 0, clock, Phase::kOptimizer);
    const double mark = cuda_.phase_begin(0);
    cuda_.scale(0, x.get(), n, 1.0f);
    cuda_.span_end(0, mark, &inner);
  }
  cuda_.settle(0, clock);
  EXPECT_GT(inner, 0.0);
  EXPECT_LE(inner, seconds(Phase::kOptimizer) - phases_before[static_cast<size_t>(Phase::kOptimizer)] + 1e-6);
  // Rank 1's clock is its own stream's: untouched by rank 0's phases.
  PhaseClock other;
  other.begin_step();
  cuda_.settle(1, other);
  EXPECT_EQ(other.current().phase_s[static_cast<size_t>(Phase::kOptimizer)], 0.0);
}

TEST_F(GpuElementOps, ErrorsAreCudaErrors) {
  EXPECT_THROW(cuda_.count_nonfinite(2, nullptr, 0), gpu::CudaError);   // no rank 2
  EXPECT_THROW(cuda_.count_nonfinite(-1, nullptr, 0), gpu::CudaError);
  EXPECT_THROW(cuda_.allocate(0, size_t{1} << 40), gpu::CudaError);   // 4 TiB: out of memory, named
  PhaseClock clock;
  EXPECT_THROW(cuda_.phase_end(0, 12345.0, Phase::kOptimizer, clock, nullptr), gpu::CudaError);  // not a mark of phase_begin
  EXPECT_THROW(cuda_.span_end(0, 12345.0, nullptr), gpu::CudaError);
  SgdScalars momentum;
  momentum.momentum = 0.9f;
  FloatBuffer w = cuda_.allocate(0, 4);
  EXPECT_THROW(cuda_.sgd(0, w.get(), w.get(), nullptr, 4, momentum), gpu::CudaError);
  // The rank still works after the refusals.
  EXPECT_EQ(cuda_.count_nonfinite(0, w.get(), 4), 0u);
}

// ---- CompressOps ----------------------------------------------------------------------------------------------------

// `count` values of type T (uint32 indices, message bytes) from the start of rank 0's buffer d.
template <class T>
std::vector<T> down_as(CudaElementOps& cuda, const float* d, size_t count) {
  std::vector<float> w((count * sizeof(T) + 3) / 4);
  cuda.download(0, w.data(), d, w.size());
  std::vector<T> out(count);
  if (count != 0) std::memcpy(out.data(), w.data(), count * sizeof(T));
  return out;
}

// Top-k, threshold and random-k: the same indices (count and values); gather and scatter_add of those indices the
// host's bits.
TEST_F(GpuElementOps, SparseSelectionsAndMessagesMatchHost) {
  CompressOps& hc = host_compress_ops();
  CompressOps& dc = *cuda_.compress_ops();
  for (size_t n : kSizes) {
    const auto x = values_with_specials(n, 7 * n + 11);
    const auto base = values_with_specials(n, 7 * n + 12);
    FloatBuffer d_x = up(x);
    const size_t k = n / 10 + 1;
    FloatBuffer d_idx = cuda_.allocate(0, n + 1);
    std::vector<uint32_t> idx(n + 1);
    struct Pick {
      const char* name;
      size_t host, device;
    };
    std::vector<Pick> picks;
    picks.push_back({"topk", hc.topk_select(0, x.data(), n, k, idx.data()),
                     dc.topk_select(0, d_x.get(), n, k, reinterpret_cast<uint32_t*>(d_idx.get()))});
    auto check = [&](const Pick& p) {
      const std::string what = std::string(p.name) + " " + size_label(n);
      ASSERT_EQ(p.device, p.host) << what;
      const std::vector<uint32_t> got = down_as<uint32_t>(cuda_, d_idx.get(), p.host);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), idx.begin())) << what;
      // The values at those indices, then added back into a base vector.
      std::vector<float> vals(p.host), want = base;
      hc.gather(0, vals.data(), x.data(), idx.data(), p.host);
      hc.scatter_add(0, want.data(), idx.data(), vals.data(), p.host);
      FloatBuffer d_vals = cuda_.allocate(0, p.host), d_out = up(base);
      dc.gather(0, d_vals.get(), d_x.get(), reinterpret_cast<const uint32_t*>(d_idx.get()), p.host);
      EXPECT_SAME_BITS(down(d_vals), vals, what + " gather");
      dc.scatter_add(0, d_out.get(), reinterpret_cast<const uint32_t*>(d_idx.get()), d_vals.get(), p.host);
      EXPECT_SAME_BITS(down(d_out), want, what + " scatter_add");
      hc.zero_at(0, want.data(), idx.data(), p.host);
      dc.zero_at(0, d_out.get(), reinterpret_cast<const uint32_t*>(d_idx.get()), p.host);
      EXPECT_SAME_BITS(down(d_out), want, what + " zero_at");
    };
    check(picks.back());
    const float tau = n > 1 ? std::fabs(x[n / 2]) : 0.5f;
    picks.push_back({"threshold", hc.threshold_select(0, x.data(), n, tau, idx.data()),
                     dc.threshold_select(0, d_x.get(), n, tau, reinterpret_cast<uint32_t*>(d_idx.get()))});
    check(picks.back());
    // DGC's sampled threshold: exact on both (the same strata and draws, the exact k-th of the samples).
    for (double ratio : {0.01, 0.3}) {
      const size_t samples = n / 7 + 1;
      const float h = hc.sampled_threshold(0, x.data(), n, ratio, 42, 3, samples);
      const float d = dc.sampled_threshold(0, d_x.get(), n, ratio, 42, 3, samples);
      EXPECT_TRUE(std::memcmp(&h, &d, sizeof h) == 0 || (std::isnan(h) && std::isnan(d)))
          << "sampled_threshold " << ratio << " " << size_label(n) << ": " << d << " vs " << h;
    }
    picks.push_back({"randomk", hc.randomk_indices(0, idx.data(), n, k, 42, 7),
                     dc.randomk_indices(0, reinterpret_cast<uint32_t*>(d_idx.get()), n, k, 42, 7)});
    check(picks.back());
  }
}

// QSGD, TernGrad, signSGD, 1-bit SGD: TernGrad's message bit for bit (its scale, a max, is exact); the others' codes or
// planes and zero counts exactly, their norm / scale / means within a relative 1e-6 of the host's (a float of a double
// sum in another order); each decoder the host's bits on the device's own message.
TEST_F(GpuElementOps, QuantizerMessagesMatchHost) {
  CompressOps& hc = host_compress_ops();
  CompressOps& dc = *cuda_.compress_ops();
  for (size_t n : kSizes) {
    auto rng = fresh_rng(31 * n + 3);
    auto p = test::normals(n, rng);
    if (n > 3) p[1] = p[n - 2] = 0.0f;  // exact zeros: the sign messages' zero plane
    const auto base = test::normals(n, rng);
    FloatBuffer d_p = up(p);
    const size_t room = std::max({qsgd_encoded_bytes(n, 4), terngrad_encoded_bytes(n), sign_encoded_bytes(n, n),
                                  onebit_encoded_bytes(n, n)});
    std::vector<uint8_t> msg(room);
    FloatBuffer d_msg = cuda_.allocate(0, (room + 3) / 4);
    auto* d_bytes = reinterpret_cast<uint8_t*>(d_msg.get());
    // The device's message decoded by both: the host's bits.
    using Decode = std::function<void(CompressOps&, float*, const uint8_t*)>;
    auto decoders_agree = [&](size_t bytes, const std::string& what, const Decode& decode) -> std::vector<uint8_t> {
      const std::vector<uint8_t> dev_msg = down_as<uint8_t>(cuda_, d_msg.get(), bytes);
      std::vector<float> want = base;
      decode(hc, want.data(), dev_msg.data());
      FloatBuffer d_out = up(base);
      decode(dc, d_out.get(), d_bytes);
      const std::vector<float> got = down(d_out);
      EXPECT_EQ(test::first_bit_difference(got, want), want.size()) << what << " decode_add";
      return dev_msg;
    };
    const std::string sz = " " + size_label(n);
    // TernGrad: bit for bit.
    hc.terngrad_encode(0, msg.data(), p.data(), n, 5, 9);
    dc.terngrad_encode(0, d_bytes, d_p.get(), n, 5, 9);
    const Decode tern_decode = [n](CompressOps& o, float* out, const uint8_t* m) { o.terngrad_decode_add(0, out, m, n); };
    const auto tern = decoders_agree(terngrad_encoded_bytes(n), "terngrad" + sz, tern_decode);
    EXPECT_TRUE(std::equal(tern.begin(), tern.end(), msg.begin())) << "terngrad message" << sz;
    // signSGD and 1-bit SGD: sizes and planes exactly.
    for (bool onebit : {false, true}) {
      const std::string what = (onebit ? "onebit" : "signsgd") + sz;
      const size_t header = onebit ? kOnebitHeaderBytes : kSignHeaderBytes;
      const size_t hb =
          onebit ? hc.onebit_encode(0, msg.data(), p.data(), n) : hc.sign_encode(0, msg.data(), p.data(), n);
      const size_t db = onebit ? dc.onebit_encode(0, d_bytes, d_p.get(), n) : dc.sign_encode(0, d_bytes, d_p.get(), n);
      ASSERT_EQ(db, hb) << what;
      const auto got = decoders_agree(db, what, [n, onebit](CompressOps& o, float* out, const uint8_t* m) {
        if (onebit) {
          o.onebit_decode_add(0, out, m, n);
        } else {
          o.sign_decode_add(0, out, m, n);
        }
      });
      EXPECT_TRUE(std::equal(got.begin() + static_cast<long>(header - 4), got.end(),
                             msg.begin() + static_cast<long>(header - 4)))
          << what << ": zero count and planes";
      for (size_t off = 0; off + 4 < header; off += 4) {  // the scale or the two means
        float a, b;
        std::memcpy(&a, got.data() + off, 4);
        std::memcpy(&b, msg.data() + off, 4);
        EXPECT_LE(std::fabs(a - b), 1e-6f * std::fabs(b)) << what << " header float at " << off;
      }
    }
    // QSGD: the norm within a relative 1e-6 (float of a double sum in another order); the device's message decodes to
    // the host's bits; with the device's norm given, the codes are the host encoder's (kernels' own suite checks
    // qsgd_encode_with_norm against the host).
    hc.qsgd_encode(0, msg.data(), p.data(), n, 4, 5, 9);
    dc.qsgd_encode(0, d_bytes, d_p.get(), n, 4, 5, 9);
    const Decode qsgd_decode = [n](CompressOps& o, float* out, const uint8_t* m) { o.qsgd_decode_add(0, out, m, n, 4); };
    const auto q = decoders_agree(qsgd_encoded_bytes(n, 4), "qsgd" + sz, qsgd_decode);
    float qa, qb;
    std::memcpy(&qa, q.data(), 4);
    std::memcpy(&qb, msg.data(), 4);
    EXPECT_LE(std::fabs(qa - qb), 1e-6f * std::fabs(qb)) << "qsgd norm" << sz;
  }
}

// The vote over three ranks' device messages: the host's bits on the same messages (the scales summed in rank order).
TEST_F(GpuElementOps, SignVoteScaledMatchesHost) {
  CompressOps& hc = host_compress_ops();
  CompressOps& dc = *cuda_.compress_ops();
  for (size_t n : kSizes) {
    const int ranks = 3;
    std::vector<FloatBuffer> d_msgs;
    std::vector<std::vector<uint8_t>> msgs;
    std::vector<const uint8_t*> d_ptrs, h_ptrs;
    for (int r = 0; r < ranks; ++r) {
      auto rng = fresh_rng(97 * n + static_cast<size_t>(r));
      auto p = test::normals(n, rng);
      if (n > 2) p[static_cast<size_t>(r)] = 0.0f;
      std::vector<uint8_t> m(sign_encoded_bytes(n, n));
      m.resize(hc.sign_encode(0, m.data(), p.data(), n));
      std::vector<float> words((m.size() + 3) / 4, 0.0f);
      std::memcpy(words.data(), m.data(), m.size());
      d_msgs.push_back(up(words));
      msgs.push_back(std::move(m));
    }
    for (int r = 0; r < ranks; ++r) {
      h_ptrs.push_back(msgs[static_cast<size_t>(r)].data());
      d_ptrs.push_back(reinterpret_cast<const uint8_t*>(d_msgs[static_cast<size_t>(r)].get()));
    }
    std::vector<float> want(n, 7.0f);
    hc.sign_vote_scaled(0, want.data(), h_ptrs.data(), ranks, n);
    FloatBuffer d_out = up(std::vector<float>(n, 7.0f));
    dc.sign_vote_scaled(0, d_out.get(), d_ptrs.data(), ranks, n);
    EXPECT_SAME_BITS(down(d_out), want, "sign_vote_scaled " + size_label(n));
  }
}

// The casts' operations in every format and divide placement: bit for bit (the same element math, --fmad=false).
TEST_F(GpuElementOps, CastOperationsMatchHostBitForBit) {
  CompressOps& hc = host_compress_ops();
  CompressOps& dc = *cuda_.compress_ops();
  for (size_t n : kSizes) {
    const auto p = values_with_specials(n, 17 * n + 1);
    const auto x = values_with_specials(n, 17 * n + 2);
    for (FloatFormat f : {FloatFormat::kFp16, FloatFormat::kBf16, FloatFormat::kFp8E4M3, FloatFormat::kFp8E5M2}) {
      for (double pre : {1.0, 2.0, 8.0}) {
        const std::string what = "format " + std::to_string(static_cast<int>(f)) + " pre " + std::to_string(pre) + " " +
                                 size_label(n);
        std::vector<float> wire(n), own(n);
        hc.cast_encode(0, wire.data(), own.data(), p.data(), n, f, 12.0f, pre, 12.0);
        FloatBuffer d_p = up(p), d_wire = cuda_.allocate(0, n), d_own = cuda_.allocate(0, n);
        dc.cast_encode(0, d_wire.get(), d_own.get(), d_p.get(), n, f, 12.0f, pre, 12.0);
        EXPECT_SAME_BITS(down(d_wire), wire, what + " wire");
        EXPECT_SAME_BITS(down(d_own), own, what + " own");
        // The sum in the format (of wire values, as the all-reduce adds them) and the post-division.
        std::vector<float> acc = wire, xw(n), unused(n);
        hc.cast_encode(0, xw.data(), unused.data(), x.data(), n, f, 3.0f, pre, 3.0);
        hc.add_in_format(0, acc.data(), xw.data(), n, f);
        hc.post_divide_in_format(0, acc.data(), n, f, 8.0 / pre);
        FloatBuffer d_xw = up(xw);
        dc.add_in_format(0, d_wire.get(), d_xw.get(), n, f);
        dc.post_divide_in_format(0, d_wire.get(), n, f, 8.0 / pre);
        EXPECT_SAME_BITS(down(d_wire), acc, what + " add_in_format, post_divide_in_format");
      }
    }
  }
}

// PowerSGD's operations: the Gram-Schmidt bit for bit (one device thread in the hook's order), the products through
// cuBLAS within k u sum |a_i b_i| of the host's (fp32 dot products of k terms in two orders; u = 2^-24), checked as a
// relative error under 4 k u against an absolute floor of the operands' scale.
TEST_F(GpuElementOps, PowerSgdOperationsMatchHost) {
  CompressOps& hc = host_compress_ops();
  CompressOps& dc = *cuda_.compress_ops();
  const std::pair<size_t, size_t> shapes[] = {{64, 48}, {1001, 33}, {7, 5}};
  for (const auto& [rows, cols] : shapes) {
    for (size_t r : {size_t{1}, size_t{4}}) {
      const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " rank " + std::to_string(r);
      auto rng = fresh_rng(rows * 131 + cols * 7 + r);
      const auto m = test::normals(rows * cols, rng);
      auto q = test::normals(cols * r, rng);
      std::vector<float> want_q = q;
      hc.orthogonalize_columns(0, want_q.data(), cols, r, 0.0f);
      FloatBuffer d_q = up(q), d_m = up(m);
      dc.orthogonalize_columns(0, d_q.get(), cols, r, 0.0f);
      EXPECT_SAME_BITS(down(d_q), want_q, what + " orthogonalize_columns");
      std::vector<float> p(rows * r), q2(cols * r), out(rows * cols);
      hc.powersgd_p(0, p.data(), m.data(), want_q.data(), rows, cols, r);
      hc.powersgd_q(0, q2.data(), m.data(), p.data(), rows, cols, r);
      hc.powersgd_decode(0, out.data(), p.data(), q2.data(), rows, cols, r);
      FloatBuffer d_p = up(p), d_q2 = cuda_.allocate(0, q2.size()), d_out = cuda_.allocate(0, out.size());
      FloatBuffer d_pp = cuda_.allocate(0, p.size());
      dc.powersgd_p(0, d_pp.get(), d_m.get(), d_q.get(), rows, cols, r);
      dc.powersgd_q(0, d_q2.get(), d_m.get(), d_p.get(), rows, cols, r);  // from the host's p: one product's error
      FloatBuffer d_q2h = up(q2);
      dc.powersgd_decode(0, d_out.get(), d_p.get(), d_q2h.get(), rows, cols, r);
      const double u = std::ldexp(1.0, -24);
      EXPECT_LE(test::max_relative_error(down(d_pp), p, 1.0), 4.0 * static_cast<double>(cols) * u) << what << " p";
      EXPECT_LE(test::max_relative_error(down(d_q2), q2, 1.0), 4.0 * static_cast<double>(rows) * u) << what << " q";
      EXPECT_LE(test::max_relative_error(down(d_out), out, 1.0), 4.0 * static_cast<double>(r) * u) << what << " decode";
    }
  }
}

// Error feedback's operations: the element results bit for bit (the same rounding, --fmad=false), the sums of squares
// within the two orders' bound.
TEST_F(GpuElementOps, ErrorFeedbackOperationsMatchHost) {
  CompressOps& hc = host_compress_ops();
  CompressOps& dc = *cuda_.compress_ops();
  for (size_t n : kSizes) {
    auto rng = fresh_rng(13 * n + 1);
    const auto u0 = test::wide_values(n, rng, -20, 20);
    const auto e0 = test::wide_values(n, rng, -20, 20);
    const auto g0 = test::wide_values(n, rng, -20, 20);
    auto own = test::wide_values(n, rng, -20, 20);
    for (size_t i = 0; i < n; i += 3) own[i] = (i % 2 == 0) ? 0.0f : -0.0f;  // zeros of both signs: not sent
    const std::string sz = " " + size_label(n);
    {  // momentum_feed_in
      auto u = u0, e = e0, g = g0;
      hc.momentum_feed_in(0, u.data(), e.data(), g.data(), n, 0.9f);
      FloatBuffer du = up(u0), de = up(e0), dg = up(g0);
      dc.momentum_feed_in(0, du.get(), de.get(), dg.get(), n, 0.9f);
      EXPECT_SAME_BITS(down(du), u, "momentum_feed_in u" + sz);
      EXPECT_SAME_BITS(down(de), e, "momentum_feed_in e" + sz);
      EXPECT_SAME_BITS(down(dg), g, "momentum_feed_in g" + sz);
    }
    {  // residual_of
      std::vector<float> e(n);
      const double h = hc.residual_of(0, e.data(), g0.data(), own.data(), n);
      FloatBuffer de = cuda_.allocate(0, n), dp = up(g0), down_own = up(own);
      const double d = dc.residual_of(0, de.get(), dp.get(), down_own.get(), n);
      EXPECT_SAME_BITS(down(de), e, "residual_of" + sz);
      expect_sum_squares_close(d, h, n, "residual_of norm" + sz);
    }
    {  // mask_sent
      auto u = u0, e = e0;
      const double h = hc.mask_sent(0, u.data(), e.data(), own.data(), n);
      FloatBuffer du = up(u0), de = up(e0), d_own = up(own);
      const double d = dc.mask_sent(0, du.get(), de.get(), d_own.get(), n);
      EXPECT_SAME_BITS(down(du), u, "mask_sent u" + sz);
      EXPECT_SAME_BITS(down(de), e, "mask_sent e" + sz);
      expect_sum_squares_close(d, h, n, "mask_sent norm" + sz);
    }
    {  // sum_squared_difference, average
      FloatBuffer da = up(u0), db = up(own);
      const double want = hc.sum_squared_difference(0, u0.data(), own.data(), n);
      expect_sum_squares_close(dc.sum_squared_difference(0, da.get(), db.get(), n), want, n,
                               "sum_squared_difference" + sz);
      std::vector<float> avg(n);
      hc.average(0, avg.data(), g0.data(), n, 24.0f);
      FloatBuffer dg = up(g0), dout = cuda_.allocate(0, n);
      dc.average(0, dout.get(), dg.get(), n, 24.0f);
      EXPECT_SAME_BITS(down(dout), avg, "average" + sz);
    }
  }
}

// ---- DeepSpeed's 1-bit optimizers (1-bit Adam, 0/1 Adam, 1-bit LAMB) ------------------------------------------------

// |x| of each value (a variance must not be negative), with exact zeros every seventh (the zero-variance mask).
std::vector<float> variances(size_t n, std::mt19937_64& rng) {
  auto v = test::wide_values(n, rng, -20, 10);
  for (size_t i = 0; i < n; ++i) v[i] = i % 7 == 3 ? 0.0f : std::fabs(v[i]);
  return v;
}

// Adam's moments and update (with weight decay and the accumulated update, and without), the zero-variance mask, 0/1
// Adam's sync passes and 1-bit LAMB's map passes: the host's bits (the same element math, --fmad=false).
TEST_F(GpuElementOps, OnebitOptimizerMapsMatchHostBitForBit) {
  CompressOps& hc = host_compress_ops();
  CompressOps& dc = *cuda_.compress_ops();
  for (size_t n : kSizes) {
    auto rng = fresh_rng(17 * n + 3);
    const auto g = values_with_specials(n, 17 * n + 4);
    const auto m0 = test::wide_values(n, rng, -20, 10);
    const auto v0 = variances(n, rng);
    const auto p0 = test::wide_values(n, rng, -10, 5);
    const auto c0 = test::wide_values(n, rng, -20, 5);
    const std::string sz = " " + size_label(n);
    FloatBuffer dg = up(g), dv0 = up(v0), dp0 = up(p0);
    {  // first and second moment
      auto m = m0, v = v0;
      hc.deepspeed_first_moment(0, m.data(), g.data(), n, 0.9f, 0.1f);
      hc.deepspeed_second_moment(0, v.data(), g.data(), n, 0.999f, 0.001f);
      FloatBuffer dm = up(m0), dv = up(v0);
      dc.deepspeed_first_moment(0, dm.get(), dg.get(), n, 0.9f, 0.1f);
      dc.deepspeed_second_moment(0, dv.get(), dg.get(), n, 0.999f, 0.001f);
      EXPECT_SAME_BITS(down(dm), m, "deepspeed_first_moment" + sz);
      EXPECT_SAME_BITS(down(dv), v, "deepspeed_second_moment" + sz);
    }
    for (bool decay : {false, true}) {  // the update, with the accumulated update when decaying
      const DeepSpeedUpdate s{1e-8f, decay ? 0.01f : 0.0f, -1e-3f, decay};
      auto p = p0, acc = c0;
      hc.deepspeed_update(0, p.data(), m0.data(), v0.data(), n, s, decay ? acc.data() : nullptr);
      FloatBuffer dp = up(p0), dm = up(m0), dacc = up(c0);
      dc.deepspeed_update(0, dp.get(), dm.get(), dv0.get(), n, s, decay ? dacc.get() : nullptr);
      const std::string what = std::string("deepspeed_update") + (decay ? " decay" : "") + sz;
      EXPECT_SAME_BITS(down(dp), p, what);
      EXPECT_SAME_BITS(down(dacc), acc, what + " accumulated");
    }
    {  // zero-variance mask; 0/1 Adam's sync
      auto m = m0, p = p0, cb = c0;
      hc.zero_variance_mask(0, m.data(), v0.data(), n);
      FloatBuffer dm = up(m0), dp = up(p0), dcb = up(c0);
      dc.zero_variance_mask(0, dm.get(), dv0.get(), n);
      EXPECT_SAME_BITS(down(dm), m, "zero_variance_mask" + sz);
      hc.zero_one_sync_begin(0, p.data(), cb.data(), v0.data(), n, 1e-8f);
      dc.zero_one_sync_begin(0, dp.get(), dcb.get(), dv0.get(), n, 1e-8f);
      EXPECT_SAME_BITS(down(dp), p, "zero_one_sync_begin p" + sz);
      EXPECT_SAME_BITS(down(dcb), cb, "zero_one_sync_begin cb" + sz);
      hc.zero_one_sync_end(0, m.data(), p.data(), cb.data(), v0.data(), n, 0.003f, 1e-8f);
      dc.zero_one_sync_end(0, dm.get(), dp.get(), dcb.get(), dv0.get(), n, 0.003f, 1e-8f);
      EXPECT_SAME_BITS(down(dm), m, "zero_one_sync_end m" + sz);
      EXPECT_SAME_BITS(down(dp), p, "zero_one_sync_end p" + sz);
      EXPECT_SAME_BITS(down(dcb), cb, "zero_one_sync_end cb" + sz);
    }
    {  // 1-bit LAMB's warm-up direction and reconstructed gradient
      std::vector<float> u(n), r(n);
      hc.lamb_direction(0, u.data(), m0.data(), v0.data(), p0.data(), n, 1e-6f, 0.01f, true);
      hc.lamb_reconstruct(0, r.data(), m0.data(), c0.data(), n, 0.9f, 0.1f);
      FloatBuffer du = cuda_.allocate(0, n), dr = cuda_.allocate(0, n), dm = up(m0), dc0 = up(c0);
      dc.lamb_direction(0, du.get(), dm.get(), dv0.get(), dp0.get(), n, 1e-6f, 0.01f, true);
      dc.lamb_reconstruct(0, dr.get(), dm.get(), dc0.get(), n, 0.9f, 0.1f);
      EXPECT_SAME_BITS(down(du), u, "lamb_direction" + sz);
      EXPECT_SAME_BITS(down(dr), r, "lamb_reconstruct" + sz);
    }
  }
}

// One side of the compressed all-reduce: x and the packed signs bit for bit; the scale (rounded from a sum of squares
// in another order) within a few float ulps of the host's; the error the host's formula applied with the device's
// scale, bit for bit, and its sum of squares within the two orders' bound. Counts: multiples of 8 (DeepSpeed's
// padding), with zeros of both signs (sign +1).
TEST_F(GpuElementOps, OnebitCompensateMatchesHost) {
  CompressOps& hc = host_compress_ops();
  CompressOps& dc = *cuda_.compress_ops();
  for (size_t count : {size_t{8}, size_t{1008}, size_t{1} << 20}) {
    auto rng = fresh_rng(19 * count + 1);
    auto x0 = test::wide_values(count, rng, -12, 4);
    const auto e0 = test::wide_values(count, rng, -16, 0);
    for (size_t i = 0; i < count; i += 5) x0[i] = -e0[i];  // x + e = 0 (sign +1)
    const size_t words = onebit_message_words(count);
    const std::string sz = " count " + std::to_string(count);
    std::vector<float> x = x0, e = e0, msg(words);
    const OnebitSide h = hc.onebit_compensate(0, msg.data(), x.data(), e.data(), count);
    FloatBuffer dx = up(x0), de = up(e0), dmsg = cuda_.allocate(0, words);
    const OnebitSide d = dc.onebit_compensate(0, dmsg.get(), dx.get(), de.get(), count);
    EXPECT_SAME_BITS(down(dx), x, "onebit_compensate x" + sz);
    EXPECT_NEAR(d.scale, h.scale, 4.0 * std::ldexp(static_cast<double>(h.scale), -23)) << "scale" << sz;
    std::vector<float> got_msg = down(dmsg);
    EXPECT_EQ(got_msg[0], d.scale) << "the message's scale word" << sz;
    got_msg[0] = msg[0];
    EXPECT_SAME_BITS(got_msg, msg, "onebit_compensate signs" + sz);
    std::vector<float> want_e(count);
    double want_ss = 0.0;
    for (size_t i = 0; i < count; ++i) {
      want_e[i] = x[i] - (x[i] < 0.0f ? -d.scale : d.scale);
      want_ss += static_cast<double>(want_e[i]) * want_e[i];
    }
    EXPECT_SAME_BITS(down(de), want_e, "onebit_compensate error" + sz);
    expect_sum_squares_close(d.error_sum_squares, want_ss, count, "onebit_compensate error norm" + sz);
  }
}

// The server's sum over 4 ranks' messages and the final decoding: the host's bits.
TEST_F(GpuElementOps, OnebitServerSumAndDecodeMatchHostBitForBit) {
  CompressOps& hc = host_compress_ops();
  CompressOps& dc = *cuda_.compress_ops();
  const int ranks = 4;
  for (size_t padded : {size_t{32}, size_t{4096}, size_t{1} << 20}) {
    auto rng = fresh_rng(23 * padded + 7);
    const size_t chunk = padded / ranks, w1 = onebit_message_words(padded), w2 = onebit_message_words(chunk);
    const std::string sz = " padded " + std::to_string(padded);
    std::vector<float> workers(w1 * ranks), servers(w2 * ranks);
    std::uniform_int_distribution<uint32_t> bits;
    for (int j = 0; j < ranks; ++j) {  // messages: a positive scale, then random sign words
      workers[j * w1] = std::ldexp(1.0f + 0.1f * static_cast<float>(j), -j);
      servers[j * w2] = std::ldexp(1.5f - 0.1f * static_cast<float>(j), j - 3);
      for (size_t w = 1; w < w1; ++w) {
        const uint32_t b = bits(rng);
        std::memcpy(&workers[j * w1 + w], &b, 4);
      }
      for (size_t w = 1; w < w2; ++w) {
        const uint32_t b = bits(rng);
        std::memcpy(&servers[j * w2 + w], &b, 4);
      }
    }
    FloatBuffer dw = up(workers), ds = up(servers);
    const auto inv = static_cast<float>(1.0 / ranks);
    for (size_t q = 0; q < static_cast<size_t>(ranks); ++q) {
      std::vector<float> c(chunk);
      hc.onebit_server_sum(0, c.data(), workers.data(), ranks, w1, q * chunk, chunk, inv);
      FloatBuffer dcnk = cuda_.allocate(0, chunk);
      dc.onebit_server_sum(0, dcnk.get(), dw.get(), ranks, w1, q * chunk, chunk, inv);
      EXPECT_SAME_BITS(down(dcnk), c, "onebit_server_sum chunk " + std::to_string(q) + sz);
    }
    const size_t n = padded - 5;  // the padding cut off
    std::vector<float> m(n);
    hc.onebit_decode_chunks(0, m.data(), n, servers.data(), w2, chunk);
    FloatBuffer dm = cuda_.allocate(0, n);
    dc.onebit_decode_chunks(0, dm.get(), n, ds.get(), w2, chunk);
    EXPECT_SAME_BITS(down(dm), m, "onebit_decode_chunks" + sz);
  }
}

// 1-bit LAMB's frozen update: the update bit for bit, the max ratio exactly (a max is exact in any order), the NaN
// flag (a negative fresh variance makes one ratio NaN), the sum of the prelim update's squares within the bound.
TEST_F(GpuElementOps, LambFrozenDirectionMatchesHost) {
  CompressOps& hc = host_compress_ops();
  CompressOps& dc = *cuda_.compress_ops();
  for (size_t n : {size_t{1}, size_t{1001}, (size_t{1} << 20) + 3}) {
    for (bool with_nan : {false, true}) {
      auto rng = fresh_rng(29 * n + (with_nan ? 1 : 0));
      const auto m = test::wide_values(n, rng, -20, 5);
      const auto v = variances(n, rng), p = test::wide_values(n, rng, -10, 5);
      auto fresh = variances(n, rng);
      if (with_nan) fresh[n / 2] = -1.0f;
      const std::string what = "lamb_frozen_direction " + size_label(n) + (with_nan ? " with NaN" : "");
      for (bool decay : {false, true}) {
        std::vector<float> u(n);
        const LambFrozenTerms h =
            hc.lamb_frozen_direction(0, u.data(), m.data(), v.data(), fresh.data(), p.data(), n, 1e-6f, 0.01f, decay);
        FloatBuffer du = cuda_.allocate(0, n), dm = up(m), dv = up(v), dfresh = up(fresh), dp = up(p);
        const LambFrozenTerms d = dc.lamb_frozen_direction(0, du.get(), dm.get(), dv.get(), dfresh.get(), dp.get(), n,
                                                           1e-6f, 0.01f, decay);
        EXPECT_SAME_BITS(down(du), u, what);
        EXPECT_EQ(d.nan, h.nan) << what;
        EXPECT_EQ(h.nan, with_nan) << what;
        if (!h.nan) {
          EXPECT_EQ(d.max_ratio, h.max_ratio) << what;
        }
        expect_sum_squares_close(d.pre_sum_squares, h.pre_sum_squares, n, what + " sum of squares");
      }
    }
  }
}

}  // namespace
}  // namespace gs
