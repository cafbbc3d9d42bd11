// Mixed-precision dense stack of dense_mixed.h: the rounding points of torch autocast (fp16/bf16: Linear runs on
// format copies of its input and weight with fp32 accumulation and a format output; the loss runs in fp32 on the
// format's logits; gradients flowing back are format tensors) and of Transformer Engine's fp8 Linear (E4M3 inputs and
// weights, E5M2 output gradients, delayed per-tensor scaling, bf16 elsewhere). New rounding points go here.
#include "kernels/dense_mixed.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "kernels/convert.h"

namespace gs {
namespace {

// n values cast to format f: counted as rounded unless f is fp32 (fp32 under a loss scale takes this stack with no
// cast, so nothing is rounded; its inf/NaN values are still counted).
void count(MixedCounters& c, const RoundingCounts& r, size_t n, FloatFormat f) {
  if (f != FloatFormat::kFp32) c.grad_values += n;
  c.grad_underflow += r.underflow;
  c.grad_nonfinite += r.nonfinite;
}

void round_in_place(FloatFormat f, float* v, size_t n) { round_fp32_through(f, v, v, n); }

// grad[i] += g[i] (fp32 master gradient), or grad[i] = format(grad[i] + g[i]) when gradients live in the format.
void accumulate(float* grad, const float* g, size_t n, const MixedSpec& spec, float multiplier) {
  if (!spec.grad_in_format) {
    for (size_t i = 0; i < n; ++i) grad[i] += multiplier * g[i];
    return;
  }
  // grad holds multiplier x (a format value): add and round at the mean-loss magnitudes (as accumulate_rounded).
  const float inv = 1.0f / multiplier;
  for (size_t i = 0; i < n; ++i) grad[i] = grad[i] * inv + g[i];
  round_in_place(spec.format, grad, n);
  for (size_t i = 0; i < n; ++i) grad[i] *= multiplier;
}

}  // namespace

RoundingCounts fp8_quantize_delayed(float* out, const float* in, size_t n, FloatFormat f, Fp8Scaling& sc,
                                    size_t history_len) {
  RoundingCounts counts;
  const float scale = sc.scale;
  const float scale_inv = 1.0f / scale;
  // amax over the finite values as the largest magnitude bit pattern (non-negative floats order as their bits); the
  // loops below use integer compares so the compiler vectorizes them.
  uint32_t amax_bits = 0;
  constexpr size_t kChunk = 1024;
  float scaled[kChunk];
  uint32_t s_bits[kChunk];
  uint32_t o_bits[kChunk];
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t len = std::min(kChunk, n - start);
    const float* src = in + start;
    for (size_t i = 0; i < len; ++i) scaled[i] = src[i] * scale;
    std::memcpy(s_bits, src, len * sizeof(float));
    for (size_t i = 0; i < len; ++i) {
      const uint32_t a = s_bits[i] & 0x7fffffffu;
      amax_bits = std::max(amax_bits, a < 0x7f800000u ? a : 0u);
    }
    float* o = out + start;
    if (f == FloatFormat::kFp8E4M3) {
      round_fp32_through_fp8_e4m3(o, scaled, len, Fp8Overflow::kSatFinite);
    } else {
      round_fp32_through_fp8_e5m2(o, scaled, len, Fp8Overflow::kSatFinite);
    }
    std::memcpy(s_bits, scaled, len * sizeof(float));
    std::memcpy(o_bits, o, len * sizeof(float));
    uint32_t underflow = 0, nonfinite = 0;
    for (size_t i = 0; i < len; ++i) {
      const uint32_t x = s_bits[i] & 0x7fffffffu;
      const uint32_t r = o_bits[i] & 0x7fffffffu;
      underflow += static_cast<uint32_t>(x != 0u) & static_cast<uint32_t>(x < 0x7f800000u) &
                   static_cast<uint32_t>(r == 0u);
      nonfinite += static_cast<uint32_t>(r >= 0x7f800000u);
    }
    counts.underflow += underflow;
    counts.nonfinite += nonfinite;
    for (size_t i = 0; i < len; ++i) o[i] = o[i] * scale_inv;
  }
  float amax;
  std::memcpy(&amax, &amax_bits, sizeof amax);
  if (sc.history.size() < history_len) {
    sc.history.push_back(amax);
  } else {
    sc.history[sc.next] = amax;
    sc.next = (sc.next + 1) % history_len;
  }
  float hmax = 0.0f;
  for (float a : sc.history) hmax = std::fmax(hmax, a);
  if (hmax > 0.0f && std::isfinite(hmax)) sc.scale = format_max(f) / hmax;
  return counts;
}

MixedScratch make_mixed_scratch(const DenseStack& stack, int64_t max_rows, const MixedSpec& spec) {
  MixedScratch m;
  const int64_t layers = stack.num_layers();
  int64_t widest = 1;
  size_t widest_weight = 1;
  m.a_q.resize(static_cast<size_t>(layers));
  m.w_q.resize(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t in = stack.widths[l], out = stack.widths[l + 1];
    // Layer 0's input always needs a format copy; deeper inputs are the (already rounded) activations, except under
    // fp8 where they are quantized separately.
    if (l == 0 || spec.fp8_gemm) m.a_q[l].assign(static_cast<size_t>(max_rows * in), 0.0f);
    m.w_q[l].assign(static_cast<size_t>(out * in), 0.0f);
    widest = std::max(widest, out);
    widest_weight = std::max(widest_weight, static_cast<size_t>(out * in));
  }
  m.b_q.assign(static_cast<size_t>(widest), 0.0f);
  m.dw.assign(widest_weight, 0.0f);
  if (spec.fp8_gemm) {
    m.dz_q.assign(static_cast<size_t>(max_rows * widest), 0.0f);
    m.fp8.resize(static_cast<size_t>(3 * layers));
  }
  return m;
}

double dense_stack_forward_mixed(DenseScratch<float>& s, MixedScratch& m, const DenseStack& stack, const float* params,
                                 const float* x, int64_t rows, const float* y, const int32_t* labels,
                                 const MixedSpec& spec) {
  if (rows <= 0) return 0.0;
  const FloatFormat f = spec.format;
  const auto hist = static_cast<size_t>(spec.amax_history_len);
  const int64_t layers = stack.num_layers();
  const float* a = x;
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t in = stack.widths[l], out = stack.widths[l + 1];
    const auto na = static_cast<size_t>(rows * in);
    const auto nw = static_cast<size_t>(out * in);
    const float* w = params + stack.weight_offset(l);
    float* wq = m.w_q[l].data();
    const float* a_op = a;  // deeper layers' inputs are activations already in the format (fp16/bf16)
    if (spec.fp8_gemm) {
      fp8_quantize_delayed(m.a_q[l].data(), a, na, FloatFormat::kFp8E4M3, m.fp8[static_cast<size_t>(3 * l)], hist);
      fp8_quantize_delayed(wq, w, nw, FloatFormat::kFp8E4M3, m.fp8[static_cast<size_t>(3 * l + 1)], hist);
      a_op = m.a_q[l].data();
    } else {
      if (l == 0) {
        round_fp32_through(f, m.a_q[0].data(), a, na);
        a_op = m.a_q[0].data();
      }
      round_fp32_through(f, wq, w, nw);
    }
    float* z = s.pre[l].data();
    float beta = 0.0f;
    if (stack.bias) {
      round_fp32_through(f, m.b_q.data(), params + stack.bias_offset(l), static_cast<size_t>(out));
      broadcast_rows(z, m.b_q.data(), rows, out);
      beta = 1.0f;
    }
    gemm(z, a_op, wq, rows, out, in, Transpose::kNo, Transpose::kYes, 1.0f, beta);  // fp32 accumulation
    round_in_place(f, z, static_cast<size_t>(rows * out));                          // the GEMM's format output
    if (l + 1 < layers) {
      float* h = s.post[l].data();
      activation_forward(h, z, rows * out, stack.activation);
      if (stack.activation != Activation::kRelu) round_in_place(f, h, static_cast<size_t>(rows * out));  // relu: exact
      a = h;
    }
  }
  const float* logits = s.pre.back().data();
  const int64_t out_dim = stack.widths.back();
  return stack.loss == LossKind::kCrossEntropy ? softmax_cross_entropy(logits, labels, rows, out_dim)
                                               : mse(logits, y, rows, out_dim);
}

void dense_stack_backward_mixed(float* grad, DenseScratch<float>& s, MixedScratch& m, const DenseStack& stack,
                                const float* params, int64_t rows, const float* y, const int32_t* labels,
                                const MixedSpec& spec, const std::function<void(int64_t layer)>& after_layer) {
  if (rows <= 0) return;
  const FloatFormat f = spec.format;
  const auto hist = static_cast<size_t>(spec.amax_history_len);
  const int64_t layers = stack.num_layers();
  const int64_t out_dim = stack.widths.back();
  float* dz = s.grad_a.data();
  float* da = s.grad_b.data();
  const float* logits = s.pre.back().data();
  // The loss gradient in fp32, times the loss scale, then a format tensor (the gradient of the format's logits).
  if (stack.loss == LossKind::kCrossEntropy) {
    softmax_cross_entropy_backward(dz, logits, labels, rows, out_dim);
  } else {
    mse_backward(dz, logits, y, rows * out_dim);
  }
  const auto n_out = static_cast<size_t>(rows * out_dim);
  // The seed as PyTorch's mean-reduced loss gives it: loss_scale / rows per sample, so the format tensors of the
  // backward hold the magnitudes a GPU run holds (and underflow where it does). Each micro-batch's parameter
  // gradient is multiplied back by rows (a power of two for the usual batch sizes: exact) when it is added to grad,
  // which keeps the gradient of the loss SUM that the strategies divide by S.
  const float seed = spec.loss_scale / static_cast<float>(rows);
  const auto back = static_cast<float>(rows);
  if (seed != 1.0f) {
    for (size_t i = 0; i < n_out; ++i) dz[i] = dz[i] * seed;
  }
  if (spec.fp8_gemm) {
    round_in_place(f, dz, n_out);
  } else {
    count(m.counters, round_fp32_through_counted(f, dz, dz, n_out), n_out, f);
  }
  for (int64_t l = layers - 1; l >= 0; --l) {
    const int64_t in = stack.widths[l], out = stack.widths[l + 1];
    const auto nz = static_cast<size_t>(rows * out);
    const auto nw = static_cast<size_t>(out * in);
    const float* a_op = (spec.fp8_gemm || l == 0) ? m.a_q[l].data() : s.post[l - 1].data();
    const float* dz_op = dz;
    if (spec.fp8_gemm) {
      const RoundingCounts r = fp8_quantize_delayed(m.dz_q.data(), dz, nz, FloatFormat::kFp8E5M2,
                                            m.fp8[static_cast<size_t>(3 * l + 2)], hist);
      count(m.counters, r, nz, FloatFormat::kFp8E5M2);
      dz_op = m.dz_q.data();
    }
    // Weight gradient: dW = dz^T a on format operands, fp32 accumulation; fp16/bf16 give a format result (the
    // gradient of the format weight copy), fp8 keeps the fp32 GEMM output (TE accumulates wgrad in fp32).
    float* dw = m.dw.data();
    gemm(dw, dz_op, a_op, out, in, rows, Transpose::kYes, Transpose::kNo, 1.0f, 0.0f);
    if (spec.fp8_gemm) {
      accumulate(grad + stack.weight_offset(l), dw, nw, spec, back);
    } else {
      count(m.counters, accumulate_rounded(f, grad + stack.weight_offset(l), dw, nw, spec.grad_in_format, back), nw,
            f);
    }
    if (stack.bias) {
      float* db = m.b_q.data();
      bias_grad(db, dz, rows, out);  // the micro-batch's sum first (PyTorch's order), then rounded and accumulated
      if (spec.fp8_gemm) {
        round_in_place(f, db, static_cast<size_t>(out));
      } else {
        count(m.counters, round_fp32_through_counted(f, db, db, static_cast<size_t>(out)), static_cast<size_t>(out),
              f);
      }
      accumulate(grad + stack.bias_offset(l), db, static_cast<size_t>(out), spec, back);
    }
    if (after_layer) after_layer(l);
    if (l == 0) break;
    const auto na = static_cast<size_t>(rows * in);
    gemm(da, dz_op, m.w_q[l].data(), rows, in, out, Transpose::kNo, Transpose::kNo, 1.0f, 0.0f);
    if (spec.fp8_gemm) {
      round_in_place(f, da, na);
    } else {
      count(m.counters, round_fp32_through_counted(f, da, da, na), na, f);
    }
    activation_backward(da, da, s.pre[l - 1].data(), rows * in, stack.activation);
    if (stack.activation != Activation::kRelu) round_in_place(f, da, na);  // relu' is 0 or 1: exact
    std::swap(dz, da);
  }
}

}  // namespace gs
