// The GPU mixed-precision dense stack (kernels/cuda_dense_mixed.h) against its host twin (kernels/dense_mixed.h) for
// bf16_mixed, fp16_mixed, fp16_pure and fp8_mixed: forward (loss, logits), backward (gradient over micro-batches),
// the rounding counts and fp8's delayed scalings; the fp8 quantize kernel alone, and TF32 GEMMs. Part of gradsweep_gpu_kernel_tests (ctest gpu.kernels; main exits 77 without a GPU). A new
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
  std::vector<std::vector<float>> logits_of;  // of every micro-batch
  std::vector<float> grad;
  MixedCounters counters;
  std::vector<Fp8Scaling> fp8;  // fp8: the delayed scalings after the last backward
};

// K micro-batches of `rows` rows (x, y / labels hold K x rows samples) through the host twin.
Outcome run_host(const DenseStack& stack, const MixedSpec& spec, int64_t rows, const std::vector<float>& params,
                 const std::vector<float>& x, const std::vector<float>& y, const std::vector<int32_t>& labels,
                 int64_t K = 2) {
  auto s = make_dense_scratch<float>(stack, rows);
  MixedScratch m = make_mixed_scratch(stack, rows, spec);
  Outcome o;
  o.grad.assign(params.size(), 0.0f);
  const int64_t in = stack.widths.front(), out = stack.widths.back();
  for (int64_t k = 0; k < K; ++k) {
    const float* xk = x.data() + k * rows * in;
    const float* yk = y.data() + k * rows * out;
    const int32_t* lk = labels.data() + k * rows;
    o.loss.push_back(dense_stack_forward_mixed(s, m, stack, params.data(), xk, rows, yk, lk, spec));
    o.logits.assign(s.pre.back().begin(), s.pre.back().begin() + rows * out);
    o.logits_of.push_back(o.logits);
    dense_stack_backward_mixed(o.grad.data(), s, m, stack, params.data(), rows, yk, lk, spec);
  }
  o.counters = m.counters;
  o.fp8 = m.fp8;
  return o;
}

Outcome run_host(const DenseStack& stack, FloatFormat f, float loss_scale, int64_t rows,
                 const std::vector<float>& params, const std::vector<float>& x, const std::vector<float>& y,
                 const std::vector<int32_t>& labels) {
  MixedSpec spec;
  spec.format = f;
  spec.loss_scale = loss_scale;
  return run_host(stack, spec, rows, params, x, y, labels);
}

// The same on the GPU, with every output poisoned (NaN) before the calls.
Outcome run_gpu(const DenseStack& stack, const MixedSpec& spec, int64_t rows, const std::vector<float>& params,
                const std::vector<float>& x, const std::vector<float>& y, const std::vector<int32_t>& labels,
                int64_t K = 2) {
  gpu::Stream stream;
  gpu::BlasHandle blas(stream.get());
  auto s = gpu::make_dense_scratch_gpu(stack, rows);
  auto m = gpu::make_mixed_scratch_gpu(stack, rows, spec, K);
  for (auto& pre : s.pre) GS_CUDA_CHECK(cudaMemset(pre.get(), 0xff, pre.bytes()));
  GS_CUDA_CHECK(cudaDeviceSynchronize());
  Dev<float> d_params(params), d_x(x), d_y(y), d_grad(std::vector<float>(params.size(), 0.0f));
  Dev<int32_t> d_labels(labels);
  Dev<double> d_loss(static_cast<size_t>(K));
  gpu::reset_counts(m, stream.get());
  const int64_t in = stack.widths.front(), out = stack.widths.back();
  Outcome o;
  std::vector<int64_t> layers_done;
  for (int64_t k = 0; k < K; ++k) {
    const float* xk = d_x.get() + k * rows * in;
    const float* yk = d_y.get() + k * rows * out;
    const int32_t* lk = d_labels.get() + k * rows;
    gpu::dense_stack_forward_mixed_gpu(blas, s, m, stack, d_params.get(), xk, rows, yk, lk, d_loss.get() + k);
    stream.synchronize();
    o.logits.resize(static_cast<size_t>(rows * out));
    gpu::copy_to_host(o.logits.data(), s.pre.back().get(), o.logits.size() * sizeof(float));
    o.logits_of.push_back(o.logits);
    gpu::dense_stack_backward_mixed_gpu(blas, d_grad.get(), s, m, stack, rows, yk, lk, spec.loss_scale,
                                        [&](int64_t l) { layers_done.push_back(l); });
  }
  gpu::counters_to_host(m, o.counters, stream.get());
  o.fp8 = gpu::fp8_scalings_to_host(m, stream.get());
  stream.synchronize();
  o.loss = d_loss.host();
  o.grad = d_grad.host();
  // The per-layer callback: last layer first, once per backward.
  std::vector<int64_t> want;
  for (int64_t k = 0; k < K; ++k)
    for (int64_t l = stack.num_layers() - 1; l >= 0; --l) want.push_back(l);
  EXPECT_EQ(layers_done, want);
  return o;
}

Outcome run_gpu(const DenseStack& stack, FloatFormat f, float loss_scale, int64_t rows,
                const std::vector<float>& params, const std::vector<float>& x, const std::vector<float>& y,
                const std::vector<int32_t>& labels) {
  MixedSpec spec;
  spec.format = f;
  spec.loss_scale = loss_scale;
  return run_gpu(stack, spec, rows, params, x, y, labels);
}

// The delayed scalings are equal field by field (history, ring position, scale: exact).
void expect_same_scalings(const std::vector<Fp8Scaling>& g, const std::vector<Fp8Scaling>& h, const std::string& what) {
  ASSERT_EQ(g.size(), h.size()) << what;
  for (size_t i = 0; i < h.size(); ++i) {
    EXPECT_SAME_BITS(g[i].history, h[i].history, what + " history of operand " + std::to_string(i));
    EXPECT_EQ(g[i].next, h[i].next) << what << " operand " << i;
    EXPECT_EQ(test::first_bit_difference(std::vector<float>{g[i].scale}, std::vector<float>{h[i].scale}), 1u)
        << what << " operand " << i << ": scale " << g[i].scale << " vs " << h[i].scale;
  }
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

// Shapes of the exact tests: (widths, rows). Each keeps every GEMM sum exact in fp32 on k/4 data (|k| <= 2) in any
// order (the spans below stay far under 24 bits: forward z1 <= 0.5 + in/4 in 2^-4 units, z2 <= 0.5 + hidden
// (0.5 + in/4) / 2 in 2^-6 units; backward with seed 1 the output gradient stays below 60 in 2^-6 units, weight
// gradient sums below rows x 60 x 4.5 in 2^-10 units), so any two correct implementations round equal values
// equally: bit-exact results. Rows 1, odd 7 (the multiplier 7: grad / 7 in fp32, the same on both) and a wider stack.
struct ExactShape {
  std::vector<int64_t> widths;
  int64_t rows;
};
const std::vector<ExactShape>& exact_shapes() {
  static const std::vector<ExactShape> shapes = {{{8, 16, 4}, 1}, {{8, 16, 4}, 7}, {{16, 24, 10}, 16}};
  return shapes;
}

std::string shape_name(const ExactShape& sh) {
  std::string out;
  for (int64_t w : sh.widths) out += (out.empty() ? "" : "-") + std::to_string(w);
  return out + " x " + std::to_string(sh.rows) + " rows";
}

// fp16_pure (MixedSpec.grad_in_format: the parameter gradient held in fp16 at the mean-loss magnitude, grad = rows x
// fp16(grad / rows + dW)) against the host twin over 2 micro-batches, relu MLPs with MSE and bias, loss scale = rows
// (seed 1: the gradients stay dyadic). Every operation is the same fp32 operation on equal values on both sides and
// every GEMM sum is exact (exact_shapes), so logits, gradient and counts are BIT-EXACT; loss sums within 1e-6.
TEST(GpuMixedDense, Fp16PureStackIsBitExactOnDyadicData) {
  for (const ExactShape& sh : exact_shapes()) {
    DenseStack stack;
    stack.widths = sh.widths;
    stack.activation = Activation::kRelu;
    stack.loss = LossKind::kMse;
    stack.bias = true;
    MixedSpec spec;
    spec.format = FloatFormat::kFp16;
    spec.grad_in_format = true;
    spec.loss_scale = static_cast<float>(sh.rows);
    auto rng = test::fresh_rng(41 + static_cast<size_t>(sh.rows));
    const int64_t in = sh.widths.front(), out = sh.widths.back();
    const auto params = quarters(stack.num_params(), rng);
    const auto x = quarters(static_cast<size_t>(2 * sh.rows * in), rng);
    const auto y = quarters(static_cast<size_t>(2 * sh.rows * out), rng);
    const std::vector<int32_t> labels(static_cast<size_t>(2 * sh.rows), 0);
    const Outcome h = run_host(stack, spec, sh.rows, params, x, y, labels);
    const Outcome g = run_gpu(stack, spec, sh.rows, params, x, y, labels);
    const std::string what = "fp16_pure " + shape_name(sh);
    for (size_t k = 0; k < 2; ++k) EXPECT_SAME_BITS(g.logits_of[k], h.logits_of[k], what + " logits");
    EXPECT_SAME_BITS(g.grad, h.grad, what + " gradient");
    for (size_t k = 0; k < 2; ++k) EXPECT_NEAR(g.loss[k], h.loss[k], 1e-6 * std::fabs(h.loss[k]) + 1e-30) << what;
    EXPECT_EQ(g.counters.grad_values, h.counters.grad_values) << what;
    EXPECT_EQ(g.counters.grad_underflow, h.counters.grad_underflow) << what;
    EXPECT_EQ(g.counters.grad_nonfinite, h.counters.grad_nonfinite) << what;
    // The gradient is held in fp16 (times rows): every entry / rows is an fp16 value, and it is not all zero.
    size_t nonzero = 0;
    for (float v : g.grad) {
      const float held = v / static_cast<float>(sh.rows);
      EXPECT_EQ(round_through_fp16(held), held) << what;
      nonzero += v != 0.0f;
    }
    EXPECT_GT(nonzero, g.grad.size() / 8) << what;
  }
}

// fp8_mixed, ONE micro-batch: every delayed scale is still 1 (the starting scale), so the E4M3 / E5M2 quantizations
// are plain roundings of equal values, every GEMM alpha is 1 x 1 and every GEMM sum is exact (fp8 values are coarser
// than the k/4 data: exact_shapes' spans hold). Logits, gradient, counts (the E5M2 output gradients) and the delayed
// scalings after the step (history = each operand's amax, new scale = fmax / amax) are BIT-EXACT with the host twin.
TEST(GpuMixedDense, Fp8StackFirstMicroBatchIsBitExact) {
  for (const ExactShape& sh : exact_shapes()) {
    DenseStack stack;
    stack.widths = sh.widths;
    stack.activation = Activation::kRelu;
    stack.loss = LossKind::kMse;
    stack.bias = true;
    MixedSpec spec;
    spec.format = FloatFormat::kBf16;
    spec.fp8_gemm = true;
    spec.amax_history_len = 4;
    spec.loss_scale = static_cast<float>(sh.rows);
    auto rng = test::fresh_rng(53 + static_cast<size_t>(sh.rows));
    const int64_t in = sh.widths.front(), out = sh.widths.back();
    const auto params = quarters(stack.num_params(), rng);
    const auto x = quarters(static_cast<size_t>(sh.rows * in), rng);
    const auto y = quarters(static_cast<size_t>(sh.rows * out), rng);
    const std::vector<int32_t> labels(static_cast<size_t>(sh.rows), 0);
    const Outcome h = run_host(stack, spec, sh.rows, params, x, y, labels, 1);
    const Outcome g = run_gpu(stack, spec, sh.rows, params, x, y, labels, 1);
    const std::string what = "fp8 " + shape_name(sh);
    EXPECT_SAME_BITS(g.logits, h.logits, what + " logits");
    EXPECT_SAME_BITS(g.grad, h.grad, what + " gradient");
    EXPECT_NEAR(g.loss[0], h.loss[0], 1e-6 * std::fabs(h.loss[0]) + 1e-30) << what;
    EXPECT_EQ(g.counters.grad_values, h.counters.grad_values) << what;
    EXPECT_EQ(g.counters.grad_underflow, h.counters.grad_underflow) << what;
    EXPECT_EQ(g.counters.grad_nonfinite, h.counters.grad_nonfinite) << what;
    // fp8 counts the E5M2 output gradients only: rows x width per layer.
    uint64_t want_values = 0;
    for (size_t l = 1; l < sh.widths.size(); ++l) want_values += static_cast<uint64_t>(sh.rows * sh.widths[l]);
    EXPECT_EQ(g.counters.grad_values, want_values) << what;
    expect_same_scalings(g.fp8, h.fp8, what);
    // Layer 0's weight scaling by hand: its amax is the largest |w| (0.5 or 0.25 for k/4 data), scale 448 / amax.
    ASSERT_EQ(g.fp8.size(), 3 * (sh.widths.size() - 1));
    float wmax = 0.0f;
    for (int64_t i = 0; i < sh.widths[1] * in; ++i)
      wmax = std::max(wmax, std::fabs(params[stack.weight_offset(0) + static_cast<size_t>(i)]));
    ASSERT_EQ(g.fp8[1].history.size(), 1u);
    EXPECT_EQ(g.fp8[1].history[0], wmax);
    EXPECT_EQ(g.fp8[1].scale, 448.0f / wmax);
  }
}

// fp8_mixed over 2 micro-batches of a linear layer (bias, MSE), so the second micro-batch runs on real delayed scales
// (448 / 0.5 = 896 for inputs and weights, 57344 / amax(dz_1) for the output gradient) and the alpha of each GEMM is
// the product of two fp32 reciprocals. Data: x, w, b in {0, 1/4, 1/2} with a 1/2 in every tensor (so every amax is
// 1/2 and x * 896 is exactly 224 or 448: q / 896 is x and w exactly), targets in {-1/2, -1/4}.
// Then the exact logit z = b + sum x w is positive, dyadic with <= 8 significant bits (in = 32: <= 136 units of
// 2^-4): both sides compute it within 2^-20 relative (host: fp32 products of dequantized fp32 operands, GPU: alpha x
// an exact sum) and round it to bf16 to the same exact value, so logits, dz = z - y (seed 1), its E5M2 quantization,
// the bias gradient, the counts and every scaling are BIT-EXACT. Only the weight gradient of micro-batch 2 differs:
// host sum_r fl(q_dz i_dz) fl(q_x i_x), GPU fl(i_dz i_x) sum_r q_dz q_x, all terms positive, so each is within
// (rows + 2) u32 (host) and 2 rows u32 (GPU, allowing a truncating accumulator) of the exact value, so the
// accumulated gradient is within ((1.5 rows + 1) 2^-23 + 2^-24) |grad| of the host's (the micro-batch 1 part is
// exact, one fp32 add rounds): bound (2 rows + 4) 2^-23 relative, far below one E5M2 ulp (2^-2 relative).
TEST(GpuMixedDense, Fp8SecondMicroBatchRunsOnDelayedScales) {
  const std::pair<int64_t, int64_t> shapes[] = {{4, 1}, {16, 7}, {32, 33}};  // (in, rows); out = 6
  for (const auto& [in, rows] : shapes) {
    DenseStack stack;
    stack.widths = {in, 6};
    stack.loss = LossKind::kMse;
    stack.bias = true;
    const int64_t out = 6;
    MixedSpec spec;
    spec.format = FloatFormat::kBf16;
    spec.fp8_gemm = true;
    spec.amax_history_len = 16;
    spec.loss_scale = static_cast<float>(rows);
    auto rng = test::fresh_rng(67 + static_cast<size_t>(in));
    std::uniform_int_distribution<int> k(0, 2);
    auto nonneg = [&](size_t n, int64_t block) {
      std::vector<float> v(n);
      for (auto& e : v) e = static_cast<float>(k(rng)) / 4.0f;
      for (size_t b = 0; b < n; b += static_cast<size_t>(block)) v[b] = 0.5f;  // every micro-batch / tensor has 1/2
      return v;
    };
    std::vector<float> params = nonneg(stack.num_params(), static_cast<int64_t>(stack.num_params()));
    params[stack.weight_offset(0)] = 0.5f;  // the weight's amax
    for (int64_t j = 0; j < out; ++j) params[stack.bias_offset(0) + static_cast<size_t>(j)] = 0.25f;
    const auto x = nonneg(static_cast<size_t>(2 * rows * in), rows * in);
    std::vector<float> y(static_cast<size_t>(2 * rows * out));
    for (auto& e : y) e = -static_cast<float>(1 + k(rng) % 2) / 4.0f;
    const std::vector<int32_t> labels(static_cast<size_t>(2 * rows), 0);
    const Outcome h = run_host(stack, spec, rows, params, x, y, labels, 2);
    const Outcome g = run_gpu(stack, spec, rows, params, x, y, labels, 2);
    const std::string what = "fp8 linear " + std::to_string(in) + " x " + std::to_string(rows) + " rows";
    for (size_t mb = 0; mb < 2; ++mb) EXPECT_SAME_BITS(g.logits_of[mb], h.logits_of[mb], what + " logits");
    EXPECT_EQ(g.counters.grad_values, h.counters.grad_values) << what;
    EXPECT_EQ(g.counters.grad_underflow, h.counters.grad_underflow) << what;
    EXPECT_EQ(g.counters.grad_nonfinite, h.counters.grad_nonfinite) << what;
    expect_same_scalings(g.fp8, h.fp8, what);
    ASSERT_EQ(h.fp8.size(), 3u);
    EXPECT_EQ(h.fp8[0].history, (std::vector<float>{0.5f, 0.5f})) << what;
    EXPECT_EQ(h.fp8[1].scale, 896.0f) << what;
    const double bound = (2.0 * static_cast<double>(rows) + 4.0) * 0x1p-23;
    size_t bad = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const double d = std::fabs(static_cast<double>(g.grad[i]) - h.grad[i]);
      bad += !(d <= bound * std::fabs(h.grad[i]));
    }
    EXPECT_EQ(bad, 0u) << what;
    // The bias gradient is bit-exact (sums of equal bf16 values in the same row order).
    for (int64_t j = 0; j < out; ++j) {
      const size_t i = stack.bias_offset(0) + static_cast<size_t>(j);
      EXPECT_EQ(g.grad[i], h.grad[i]) << what << " bias " << j;
    }
    // The weight gradient is not all zero (the bound is relative): every output's row sums to a positive value.
    for (int64_t j = 0; j < out; ++j) {
      double row = 0.0;
      for (int64_t c = 0; c < in; ++c) row += h.grad[stack.weight_offset(0) + static_cast<size_t>(j * in + c)];
      EXPECT_GT(row, 0.0) << what << " output " << j;
    }
  }
}

// Zero rows (an empty micro-batch): as the host twin, forward writes a loss sum of 0 and quantizes nothing, backward
// changes nothing: the gradient keeps its values and every fp8 scaling stays at scale 1 with an empty history, for
// fp16_pure and fp8_mixed.
TEST(GpuMixedDense, ZeroRowsChangeNothing) {
  DenseStack stack;
  stack.widths = {8, 16, 4};
  stack.loss = LossKind::kMse;
  for (const bool fp8 : {false, true}) {
    MixedSpec spec;
    spec.format = fp8 ? FloatFormat::kBf16 : FloatFormat::kFp16;
    spec.fp8_gemm = fp8;
    spec.grad_in_format = !fp8;
    gpu::Stream stream;
    gpu::BlasHandle blas(stream.get());
    auto s = gpu::make_dense_scratch_gpu(stack, 4);
    auto m = gpu::make_mixed_scratch_gpu(stack, 4, spec, 1);
    auto rng = test::fresh_rng(71);
    const auto params = quarters(stack.num_params(), rng);
    const auto grad0 = quarters(stack.num_params(), rng);
    Dev<float> d_params(params), d_grad(grad0), d_x(std::vector<float>(32, 0.5f)), d_y(std::vector<float>(16, 0.0f));
    Dev<double> d_loss(1);  // poisoned
    gpu::reset_counts(m, stream.get());
    gpu::dense_stack_forward_mixed_gpu(blas, s, m, stack, d_params.get(), d_x.get(), 0, d_y.get(), nullptr,
                                       d_loss.get());
    gpu::dense_stack_backward_mixed_gpu(blas, d_grad.get(), s, m, stack, 0, d_y.get(), nullptr, 1.0f);
    MixedCounters c;
    gpu::counters_to_host(m, c, stream.get());
    stream.synchronize();
    EXPECT_EQ(d_loss.host(1)[0], 0.0) << fp8;
    EXPECT_SAME_BITS(d_grad.host(grad0.size()), grad0, std::string("gradient, fp8 ") + (fp8 ? "on" : "off"));
    EXPECT_EQ(c.grad_values, 0u);
    const std::vector<Fp8Scaling> sc = gpu::fp8_scalings_to_host(m, stream.get());
    ASSERT_EQ(sc.size(), fp8 ? 6u : 0u);
    for (const Fp8Scaling& f : sc) {
      EXPECT_TRUE(f.history.empty());
      EXPECT_EQ(f.scale, 1.0f);
    }
  }
}

// The fp8 quantization kernel and its delayed scaling (gpu::fp8_quantize_delayed) against the host's
// fp8_quantize_delayed, called 6 times in a row per format and size with a history of 3 (the ring wraps) on values
// spanning 2^-30..2^20 with specials (inf, NaN, subnormals): the quantized values (decoded and multiplied by the
// scale_inv the GPU recorded, as the host dequantizes), the counts, the history, the ring position and the scale are
// BIT-EXACT (the amax is a max of bit patterns, the scale one fp32 division: no order dependence). Outputs poisoned.
TEST(GpuMixedDense, Fp8QuantizeAndDelayedScalingMatchHostExactly) {
  constexpr uint32_t kHistory = 3;
  for (FloatFormat f : {FloatFormat::kFp8E4M3, FloatFormat::kFp8E5M2}) {
    // Empty, one value, odd, and past the kernel's 1024 x 256-thread grid (grid-stride loop, several blocks' amax).
    for (size_t n : {size_t{0}, size_t{1}, size_t{1001}, (size_t{1} << 20) + 3}) {
      gpu::Stream stream;
      gpu::DeviceBuffer<gpu::Fp8ScalingState> state(1);
      gpu::DeviceBuffer<float> history(kHistory);
      gpu::fp8_scaling_init(state.get(), 1, stream.get());
      Dev<unsigned long long> counts(2);
      Fp8Scaling host;
      for (int call = 0; call < 6; ++call) {
        auto rng = test::fresh_rng(n * 7 + static_cast<size_t>(call));
        // Magnitudes move between calls (so the scale changes, and the ring drops the largest amax later).
        std::vector<float> in = test::wide_values(n, rng, -30 + 4 * call, 20 - 3 * call);
        if (call % 2 == 1) test::add_specials(in, rng);
        Dev<float> d_in(in);
        Dev<uint16_t> q(n);  // poisoned
        counts.poison();
        gpu::fp8_quantize_delayed(f, q.get(), d_in.get(), n, state.get(), history.get(), kHistory, counts.get(),
                                  stream.get());
        stream.synchronize();
        std::vector<float> want(n);
        const RoundingCounts rc = fp8_quantize_delayed(want.data(), in.data(), n, f, host, kHistory);
        gpu::Fp8ScalingState st{};
        gpu::copy_to_host(&st, state.get(), sizeof st);
        const std::vector<uint16_t> qh = q.host(n);
        std::vector<float> got(n);
        for (size_t i = 0; i < n; ++i) got[i] = bf16_to_fp32(qh[i]) * st.scale_inv;
        const std::string what = std::string(f == FloatFormat::kFp8E4M3 ? "E4M3" : "E5M2") + " n " +
                                 std::to_string(n) + " call " + std::to_string(call);
        // Bit for bit; a NaN may keep its payload on the host's vector path (convert.h), so NaN matches NaN.
        size_t differ = 0;
        for (size_t i = 0; i < n; ++i)
          differ += !(fp32_bits(got[i]) == fp32_bits(want[i]) || (std::isnan(got[i]) && std::isnan(want[i])));
        EXPECT_EQ(differ, 0u) << what;
        const std::vector<unsigned long long> c = counts.host(2);
        EXPECT_EQ(c[0], rc.underflow) << what;
        EXPECT_EQ(c[1], rc.nonfinite) << what;
        expect_same_scalings({gpu::fp8_scaling_to_host(state.get(), history.get())}, {host}, what);
        EXPECT_EQ(st.amax_bits, 0u) << what;  // reset for the next use
      }
      EXPECT_EQ(host.history.size(), kHistory);  // the ring wrapped
    }
  }
}

// TF32 tensor-op math (gpu::set_tf32_math) on cuBLAS fp32 GEMMs against a double reference, over shapes (m, n, k)
// from 1 x 1 x 1 to 65 x 48 x 257, every transpose pair. With A, B the fp32 inputs and S = sum_k |a||b|:
// - inputs already exact in TF32 (10 mantissa bits): the products are exact in fp32 whatever rounding the unit
//   applies to its inputs, so only the fp32 accumulation errs: |C - C_exact| <= 2 (k + 2) u32 S (u32 = 2^-24; twice
//   the textbook gamma_k for a unit that aligns by truncation);
// - any fp32 inputs: each input moves by < 2^-10 relative (2^-11 under round-to-nearest, 2^-10 if the unit
//   truncates), each product by < 2^-9 + 2^-20: |C - C_exact| <= (2^-9 + 2^-19 + 2 (k + 2) u32) S against the exact
//   product of the fp32 inputs (the host's fp32 GEMM up to its own gamma_k);
// - TF32 off again: the fp32 bound 2 (k + 2) u32 S. Outputs poisoned before each call.
TEST(GpuMixedDense, Tf32GemmWithinTf32Bounds) {
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape sh : {Shape{1, 1, 1}, Shape{7, 5, 33}, Shape{65, 48, 257}}) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        auto rng = test::fresh_rng(static_cast<size_t>(sh.m * 1000 + sh.k));
        std::vector<float> a = test::normals(static_cast<size_t>(sh.m * sh.k), rng);
        std::vector<float> b = test::normals(static_cast<size_t>(sh.k * sh.n), rng);
        std::vector<float> a32(a.size()), b32(b.size());
        for (size_t i = 0; i < a.size(); ++i) a32[i] = round_through_tf32(a[i]);
        for (size_t i = 0; i < b.size(); ++i) b32[i] = round_through_tf32(b[i]);
        // Row-major op(A) is m x k: element (i, p) at a[i k + p] (no transpose) or a[p m + i] (transposed).
        auto at = [&](const std::vector<float>& v, int64_t i, int64_t p) {
          return static_cast<double>(ta == Transpose::kNo ? v[static_cast<size_t>(i * sh.k + p)]
                                                          : v[static_cast<size_t>(p * sh.m + i)]);
        };
        auto bt = [&](const std::vector<float>& v, int64_t p, int64_t j) {
          return static_cast<double>(tb == Transpose::kNo ? v[static_cast<size_t>(p * sh.n + j)]
                                                          : v[static_cast<size_t>(j * sh.k + p)]);
        };
        gpu::Stream stream;
        gpu::BlasHandle blas(stream.get());
        auto run = [&](const std::vector<float>& ha, const std::vector<float>& hb, bool tf32) {
          gpu::set_tf32_math(blas, tf32);
          Dev<float> da(ha), db(hb), dc(static_cast<size_t>(sh.m * sh.n));
          gpu::gemm(blas, dc.get(), da.get(), db.get(), sh.m, sh.n, sh.k, ta, tb, 1.0f, 0.0f);
          stream.synchronize();
          return dc.host(static_cast<size_t>(sh.m * sh.n));
        };
        auto check = [&](const std::vector<float>& c, const std::vector<float>& ha, const std::vector<float>& hb,
                         double rel, const char* what) {
          size_t bad = 0;
          for (int64_t i = 0; i < sh.m; ++i) {
            for (int64_t j = 0; j < sh.n; ++j) {
              double exact = 0.0, mag = 0.0;
              for (int64_t p = 0; p < sh.k; ++p) {
                exact += at(ha, i, p) * bt(hb, p, j);
                mag += std::fabs(at(ha, i, p) * bt(hb, p, j));
              }
              bad += !(std::fabs(c[static_cast<size_t>(i * sh.n + j)] - exact) <= rel * mag);
            }
          }
          EXPECT_EQ(bad, 0u) << what << " " << sh.m << "x" << sh.n << "x" << sh.k << " ta " << (ta == Transpose::kYes)
                             << " tb " << (tb == Transpose::kYes);
        };
        const double gamma = 2.0 * (static_cast<double>(sh.k) + 2.0) * kU32;
        check(run(a32, b32, true), a32, b32, gamma, "tf32 on tf32-exact inputs");
        check(run(a, b, true), a, b, 0x1p-9 + 0x1p-19 + gamma, "tf32 on fp32 inputs");
        check(run(a, b, false), a, b, gamma, "fp32 after tf32 off");
      }
    }
  }
}

}  // namespace
}  // namespace gs
