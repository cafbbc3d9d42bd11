// The GPU mixed-precision dense stack (kernels/cuda_dense_mixed.h) against its host twin (kernels/dense_mixed.h) for
// bf16_mixed and fp16_mixed: forward (loss, logits), backward (fp32 master gradient over two micro-batches) and the
// rounding counts. Part of gradsweep_gpu_kernel_tests (ctest gpu.kernels; main exits 77 without a GPU). A new
// rounding point of the stack gets a case here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/convert.h"
#include "kernels/cuda_dense.h"
#include "kernels/cuda_dense_mixed.h"
#include "kernels/dense.h"
#include "kernels/dense_mixed.h"
#include "tests/gpu/gpu_test_util.h"

namespace gs {
namespace {

using test::Dev;

constexpr double kU32 = 0x1p-24;  // fp32 unit roundoff

// Unit roundoff of the format: bf16 2^-8 (8 significant bits), fp16 2^-11 (11).
double unit_roundoff(FloatFormat f) { return f == FloatFormat::kBf16 ? 0x1p-8 : 0x1p-11; }

// k / 4 for k uniform in [-2, 2]: every value, product and sum of the small shapes below is exact in fp32 (see
// MixedStackIsBitExactOnDyadicData).
std::vector<float> quarters(size_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> k(-2, 2);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(k(rng)) / 4.0f;
  return v;
}

struct Outcome {
  std::vector<double> loss;  // per micro-batch
  std::vector<float> logits;  // of the last micro-batch
  std::vector<float> grad;
  MixedCounters counters;
};

// Two micro-batches of `rows` rows (x, y / labels hold 2 x rows samples) through the host twin.
Outcome run_host(const DenseStack& stack, FloatFormat f, float loss_scale, int64_t rows, const std::vector<float>& params,
                 const std::vector<float>& x, const std::vector<float>& y, const std::vector<int32_t>& labels) {
  MixedSpec spec;
  spec.format = f;
  spec.loss_scale = loss_scale;
  auto s = make_dense_scratch<float>(stack, rows);
  MixedScratch m = make_mixed_scratch(stack, rows, spec);
  Outcome o;
  o.grad.assign(params.size(), 0.0f);
  const int64_t in = stack.widths.front(), out = stack.widths.back();
  for (int64_t k = 0; k < 2; ++k) {
    const float* xk = x.data() + k * rows * in;
    const float* yk = y.data() + k * rows * out;
    const int32_t* lk = labels.data() + k * rows;
    o.loss.push_back(dense_stack_forward_mixed(s, m, stack, params.data(), xk, rows, yk, lk, spec));
    o.logits.assign(s.pre.back().begin(), s.pre.back().begin() + rows * out);
    dense_stack_backward_mixed(o.grad.data(), s, m, stack, params.data(), rows, yk, lk, spec);
  }
  o.counters = m.counters;
  return o;
}

Outcome run_gpu(const DenseStack& stack, FloatFormat f, float loss_scale, int64_t rows, const std::vector<float>& params,
                const std::vector<float>& x, const std::vector<float>& y, const std::vector<int32_t>& labels) {
  gpu::Stream stream;
  gpu::BlasHandle blas(stream.get());
  auto s = gpu::make_dense_scratch_gpu(stack, rows);
  auto m = gpu::make_mixed_scratch_gpu(stack, rows, f, 2);
  Dev<float> d_params(params), d_x(x), d_y(y), d_grad(std::vector<float>(params.size(), 0.0f));
  Dev<int32_t> d_labels(labels);
  Dev<double> d_loss(2);
  gpu::reset_counts(m, stream.get());
  const int64_t in = stack.widths.front(), out = stack.widths.back();
  Outcome o;
  std::vector<int64_t> layers_done;
  for (int64_t k = 0; k < 2; ++k) {
    const float* xk = d_x.get() + k * rows * in;
    const float* yk = d_y.get() + k * rows * out;
    const int32_t* lk = d_labels.get() + k * rows;
    gpu::dense_stack_forward_mixed_gpu(blas, s, m, stack, d_params.get(), xk, rows, yk, lk, d_loss.get() + k);
    if (k == 1) {
      stream.synchronize();
      o.logits.resize(static_cast<size_t>(rows * out));
      gpu::copy_to_host(o.logits.data(), s.pre.back().get(), o.logits.size() * sizeof(float));
    }
    gpu::dense_stack_backward_mixed_gpu(blas, d_grad.get(), s, m, stack, rows, yk, lk, loss_scale,
                                        [&](int64_t l) { layers_done.push_back(l); });
  }
  gpu::counters_to_host(m, o.counters, stream.get());
  stream.synchronize();
  o.loss = d_loss.host();
  o.grad = d_grad.host();
  // The per-layer callback: last layer first, once per backward.
  std::vector<int64_t> want;
  for (int k = 0; k < 2; ++k)
    for (int64_t l = stack.num_layers() - 1; l >= 0; --l) want.push_back(l);
  EXPECT_EQ(layers_done, want);
  return o;
}

const char* name(FloatFormat f) { return f == FloatFormat::kBf16 ? "bf16" : "fp16"; }

// MLP 8-16-4, relu, bias, MSE, 8 rows x 2 micro-batches, inputs / weights / biases / targets k/4 with |k| <= 2. Every
// GEMM sum is exact in fp32 in any order, even with truncating alignment (products of format values are exact; the
// sums of their magnitudes stay within 24 bits of their unit: forward z1 <= 2.5 in units of 2^-4, z2 <= 20.5 in
// 2^-6; backward bf16 (seed 1/8): dz <= 2.6 in 2^-9 units, dW2 sums <= 52 in 2^-13 units; fp16 (loss scale 64, seed 8):
// dz <= 168 in 2^-3 units, dW2 sums <= 3360 in 2^-7 units; dh and dW1 smaller), the roundings of equal fp32 values are equal, relu is exact, and the seed (loss_scale / 8) and the
// multiplier 8 are powers of two. So the GPU's logits, gradient and counts equal the host's BIT FOR BIT (bound 0);
// the loss sums differ at most by the per-row fp32 sums of 4 squares (4 u32 each; 1e-6 relative).
TEST(GpuMixedDense, MixedStackIsBitExactOnDyadicData) {
  for (FloatFormat f : {FloatFormat::kBf16, FloatFormat::kFp16}) {
    const float loss_scale = f == FloatFormat::kFp16 ? 64.0f : 1.0f;
    DenseStack stack;
    stack.widths = {8, 16, 4};
    stack.activation = Activation::kRelu;
    stack.loss = LossKind::kMse;
    stack.bias = true;
    const int64_t rows = 8;
    auto rng = test::fresh_rng(17 + static_cast<size_t>(f));
    const auto params = quarters(stack.num_params(), rng);
    const auto x = quarters(static_cast<size_t>(2 * rows * 8), rng);
    const auto y = quarters(static_cast<size_t>(2 * rows * 4), rng);
    const std::vector<int32_t> labels(static_cast<size_t>(2 * rows), 0);
    const Outcome h = run_host(stack, f, loss_scale, rows, params, x, y, labels);
    const Outcome g = run_gpu(stack, f, loss_scale, rows, params, x, y, labels);
    EXPECT_SAME_BITS(g.logits, h.logits, std::string(name(f)) + " logits");
    EXPECT_SAME_BITS(g.grad, h.grad, std::string(name(f)) + " gradient");
    for (size_t k = 0; k < 2; ++k) EXPECT_NEAR(g.loss[k], h.loss[k], 1e-6 * std::fabs(h.loss[k]) + 1e-30) << name(f);
    EXPECT_EQ(g.counters.grad_values, h.counters.grad_values) << name(f);
    EXPECT_EQ(g.counters.grad_underflow, h.counters.grad_underflow) << name(f);
    EXPECT_EQ(g.counters.grad_nonfinite, h.counters.grad_nonfinite) << name(f);
    // grad_values by hand: per backward dz (8 x 4), dW2 (4 x 16), db2 (4), dh (8 x 16), dW1 (16 x 8), db1 (16).
    EXPECT_EQ(g.counters.grad_values, 2u * (32 + 64 + 4 + 128 + 128 + 16)) << name(f);
  }
}

// One linear layer (32 -> 10, bias, cross-entropy), 16 rows x 2 micro-batches, dyadic inputs and weights (so the
// logits are exact and equal, as above), bf16 with loss scale 1 and fp16 with loss scale 1024. Only the softmax's exp
// differs (host libm vs CUDA expf, each within 2 ulp; the sum of 10 terms and the division: each side's p within
// 16 u32 of the exact softmax, so within 32 u32 of each other). Bounds from the unit
// roundoffs u_f (format) and u32, per element, with p, dz, a the host's values, seed = scale / rows:
//   dz = format(seed (p - onehot)):  |dz_gpu - dz_host| <= seed 32 u32 p + 2 u_f |dz|  (one format ulp at a tie flip)
//   dW_jk = rows format(sum_r dz_rj a_rk) (fp32 sums in other orders: 2 rows u32 sum |dz a|, then one flip 2 u_f):
//   |delta| <= rows (1 + u_f) [sum_r (seed 32 u32 p_rj + 2 u_f |dz_rj|) |a_rk| + (2 rows u32 + 2 u_f) sum_r |dz_rj a_rk|]
//   and the same with a_rk = 1 for the bias; over two micro-batches the bounds add (plus one fp32 add: u32 |grad|).
// The loss sums: the same logits, per-row losses through different exp/log (within 8 u32 of each row's loss +
// 8 u32 of the log-sum-exp's magnitude): 1e-5 relative + 1e-5 absolute per row is above that.
TEST(GpuMixedDense, MixedCrossEntropyGradientWithinUnitRoundoffBounds) {
  for (FloatFormat f : {FloatFormat::kBf16, FloatFormat::kFp16}) {
    const double uf = unit_roundoff(f);
    const float loss_scale = f == FloatFormat::kFp16 ? 1024.0f : 1.0f;
    DenseStack stack;
    stack.widths = {32, 10};
    stack.loss = LossKind::kCrossEntropy;
    stack.bias = true;
    const int64_t rows = 16, in = 32, out = 10;
    auto rng = test::fresh_rng(29 + static_cast<size_t>(f));
    const auto params = quarters(stack.num_params(), rng);
    const auto x = quarters(static_cast<size_t>(2 * rows * in), rng);
    const std::vector<float> y(static_cast<size_t>(2 * rows * out), 0.0f);
    std::vector<int32_t> labels(static_cast<size_t>(2 * rows));
    for (auto& l : labels) l = static_cast<int32_t>(rng() % out);
    const Outcome h = run_host(stack, f, loss_scale, rows, params, x, y, labels);
    const Outcome g = run_gpu(stack, f, loss_scale, rows, params, x, y, labels);
    EXPECT_SAME_BITS(g.logits, h.logits, std::string(name(f)) + " logits (exact sums)");
    for (size_t k = 0; k < 2; ++k)
      EXPECT_NEAR(g.loss[k], h.loss[k], 1e-5 * std::fabs(h.loss[k]) + 1e-5 * rows) << name(f) << " micro-batch " << k;
    // The bound per parameter from the host's softmax (double) of the exact logits, recomputed per micro-batch.
    const double seed = static_cast<double>(loss_scale) / rows;
    std::vector<double> bound(params.size(), 0.0);
    for (int64_t k = 0; k < 2; ++k) {
      std::vector<float> xq(static_cast<size_t>(rows * in));  // x in the format (exact here: dyadic)
      round_fp32_through(f, xq.data(), x.data() + k * rows * in, xq.size());
      for (int64_t r = 0; r < rows; ++r) {
        // logits of this row: the forward's GEMM is exact, so recompute them in double from the format operands.
        std::vector<double> z(static_cast<size_t>(out));
        double zmax = -INFINITY;
        for (int64_t j = 0; j < out; ++j) {
          double acc = params[stack.bias_offset(0) + static_cast<size_t>(j)];
          for (int64_t c = 0; c < in; ++c)
            acc += static_cast<double>(xq[static_cast<size_t>(r * in + c)]) *
                   params[stack.weight_offset(0) + static_cast<size_t>(j * in + c)];
          z[static_cast<size_t>(j)] = acc;
          zmax = std::max(zmax, acc);
        }
        double denom = 0.0;
        for (double v : z) denom += std::exp(v - zmax);
        const int32_t label = labels[static_cast<size_t>(k * rows + r)];
        for (int64_t j = 0; j < out; ++j) {
          const double p = std::exp(z[static_cast<size_t>(j)] - zmax) / denom;
          const double dz = std::fabs(seed * (p - (j == label ? 1.0 : 0.0))) * (1.0 + uf);
          const double e = seed * 32 * kU32 * p + 2 * uf * dz + (2.0 * rows * kU32 + 2 * uf) * dz;
          for (int64_t c = 0; c < in; ++c) {
            const double a = std::fabs(xq[static_cast<size_t>(r * in + c)]);
            bound[stack.weight_offset(0) + static_cast<size_t>(j * in + c)] += rows * (1.0 + uf) * e * a;
          }
          bound[stack.bias_offset(0) + static_cast<size_t>(j)] += rows * (1.0 + uf) * e;
        }
      }
    }
    size_t bad = 0, first_bad = params.size();
    for (size_t i = 0; i < params.size(); ++i) {
      const double limit = bound[i] + kU32 * std::fabs(h.grad[i]);
      if (!(std::fabs(static_cast<double>(g.grad[i]) - h.grad[i]) <= limit)) {
        ++bad;
        first_bad = std::min(first_bad, i);
      }
    }
    EXPECT_EQ(bad, 0u) << name(f) << ": first at " << first_bad;
    // The gradient is not trivially inside the bound: some entries are far larger than their bound.
    size_t big = 0;
    for (size_t i = 0; i < params.size(); ++i) big += std::fabs(h.grad[i]) > 4 * bound[i];
    EXPECT_GT(big, params.size() / 4) << name(f);
    EXPECT_EQ(g.counters.grad_values, h.counters.grad_values) << name(f);
    EXPECT_EQ(g.counters.grad_nonfinite, 0u) << name(f);
  }
}

}  // namespace
}  // namespace gs
