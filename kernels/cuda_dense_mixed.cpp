// Definitions of kernels/cuda_dense_mixed.h: dense_stack_forward_mixed / dense_stack_backward_mixed
// (kernels/dense_mixed.cpp: fp16/bf16 with an fp32 or in-format gradient, fp8 with delayed scaling) step for step on
// the GPU. Host C++; a change to the host twin's rounding points is mirrored here.
#include "kernels/cuda_dense_mixed.h"

#include <algorithm>
#include <utility>

namespace gs::gpu {
namespace {

constexpr Fp8Overflow kUnused = Fp8Overflow::kSatFinite;  // the overflow rule only matters for fp8 formats

void round_in_place(FloatFormat f, float* v, int64_t n, cudaStream_t st) {
  round_through_format(f, v, v, static_cast<size_t>(n), kUnused, st);
}

// Counts, then rounds v[0, n) to the format in place (host twin round_fp32_through_counted).
void round_counted(MixedScratchGpu& m, int64_t& slot, float* v, int64_t n, cudaStream_t st) {
  GS_EXPECT_GPU(slot < static_cast<int64_t>(m.counts.size() / 2), "mixed stack: more backwards than micro-batches");
  count_rounding(m.format, v, static_cast<size_t>(n), m.counts.get() + 2 * slot, st);
  ++slot;
  m.grad_values += static_cast<uint64_t>(n);
  round_in_place(m.format, v, n, st);
}

// grad[i] += multiplier * g[i] (g already in the format; the product rounds, then the sum: the host's
// `acc[i] += multiplier * r` with contraction off), or under grad_in_format grad[i] = multiplier x
// format(grad[i] / multiplier + g[i]) (the host's accumulate_rounded / accumulate). g may be overwritten.
void accumulate(const MixedScratchGpu& m, float* grad, float* g, int64_t n, float multiplier, cudaStream_t st) {
  if (m.spec.grad_in_format) {
    accumulate_in_format(m.format, grad, g, static_cast<size_t>(n), multiplier, st);
    return;
  }
  scale(g, static_cast<size_t>(n), multiplier, st);
  add_into(grad, g, static_cast<size_t>(n), st);
}

// Operand `which` (0 input, 1 weight, 2 output gradient) of layer l: its scaling state and history.
Fp8ScalingState* fp8_state(MixedScratchGpu& m, int64_t l, int which) {
  return m.fp8_state.get() + 3 * l + which;
}
float* fp8_history(MixedScratchGpu& m, int64_t l, int which) {
  return m.fp8_history.get() + static_cast<size_t>(3 * l + which) * static_cast<size_t>(m.spec.amax_history_len);
}
void fp8_quantize(MixedScratchGpu& m, int64_t l, int which, uint16_t* q, const float* in, int64_t n,
                  unsigned long long* counts, cudaStream_t st) {
  fp8_quantize_delayed(which == 2 ? FloatFormat::kFp8E5M2 : FloatFormat::kFp8E4M3, q, in, static_cast<size_t>(n),
                       fp8_state(m, l, which), fp8_history(m, l, which),
                       static_cast<uint32_t>(m.spec.amax_history_len), counts, st);
}
// The output of an fp8 GEMM with beta = 0, zeroed first: in device pointer mode cuBLAS cannot see on the host that
// beta is 0, and beta x C over a C that holds NaN or inf (uninitialised memory, or a previous step's overflow) would
// be NaN. One write of the output, on the stream of the GEMM.
void zero_fp8_gemm_output(float* c, int64_t count, cudaStream_t st) {
  if (count > 0) GS_CUDA_CHECK(cudaMemsetAsync(c, 0, static_cast<size_t>(count) * sizeof(float), st));
}

// alpha/beta of GEMM `gemm` (0 forward, 1 weight gradient, 2 input gradient) of layer l from operands a and b.
const float* fp8_scalars(MixedScratchGpu& m, int64_t l, int gemm, int a, int b, float beta, cudaStream_t st) {
  float* ab = m.fp8_scalars.get() + 2 * (3 * l + gemm);
  fp8_gemm_scalars(ab, fp8_state(m, l, a), fp8_state(m, l, b), beta, st);
  return ab;
}

}  // namespace

int64_t count_slots(const DenseStack& stack) {
  const int64_t layers = stack.num_layers();
  return 1 + layers * (stack.bias ? 2 : 1) + (layers - 1);
}

MixedScratchGpu make_mixed_scratch_gpu(const DenseStack& stack, int64_t max_rows, FloatFormat format,
                                       int64_t micro_batches) {
  GS_EXPECT_GPU(format == FloatFormat::kBf16 || format == FloatFormat::kFp16,
                "mixed stack on the GPU: format fp16 or bf16");
  MixedSpec spec;
  spec.format = format;
  return make_mixed_scratch_gpu(stack, max_rows, spec, micro_batches);
}

MixedScratchGpu make_mixed_scratch_gpu(const DenseStack& stack, int64_t max_rows, const MixedSpec& spec,
                                       int64_t micro_batches) {
  GS_EXPECT_GPU(spec.format == FloatFormat::kBf16 || spec.format == FloatFormat::kFp16,
                "mixed stack on the GPU: format fp16 or bf16");
  GS_EXPECT_GPU(!spec.fp8_gemm || (spec.format == FloatFormat::kBf16 && !spec.grad_in_format),
                "mixed stack on the GPU: fp8 GEMMs with bf16 tensors and an fp32 gradient (fp8_mixed)");
  GS_EXPECT_GPU(!spec.fp8_gemm || (spec.amax_history_len >= 1 && spec.amax_history_len <= (int64_t{1} << 30)),
                "mixed stack on the GPU: fp8 amax history length in [1, 2^30]");
  MixedScratchGpu m;
  m.format = spec.format;
  m.spec = spec;
  m.micro_batches = std::max<int64_t>(micro_batches, 1);
  const int64_t layers = stack.num_layers();
  int64_t widest = 1;
  size_t widest_weight = 1;
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t in = stack.widths[l], out = stack.widths[l + 1];
    m.a_enc.emplace_back(static_cast<size_t>(std::max<int64_t>(max_rows * in, 1)), "format layer inputs");
    m.w_enc.emplace_back(static_cast<size_t>(out * in), "format weights");
    widest = std::max(widest, out);
    widest_weight = std::max(widest_weight, static_cast<size_t>(out * in));
  }
  m.dz_enc = DeviceBuffer<uint16_t>(static_cast<size_t>(std::max<int64_t>(max_rows, 1) * widest),
                                    "format output gradient");
  m.b_q = DeviceBuffer<float>(static_cast<size_t>(widest), "format bias");
  m.dw = DeviceBuffer<float>(widest_weight, "weight gradient");
  m.counts = DeviceBuffer<unsigned long long>(static_cast<size_t>(2 * count_slots(stack) * m.micro_batches),
                                              "rounding counts");
  if (spec.fp8_gemm) {
    const auto operands = static_cast<size_t>(3 * layers);
    m.fp8_state = DeviceBuffer<Fp8ScalingState>(operands, "fp8 scaling states");
    m.fp8_history = DeviceBuffer<float>(operands * static_cast<size_t>(spec.amax_history_len), "fp8 amax histories");
    m.fp8_scalars = DeviceBuffer<float>(2 * operands, "fp8 GEMM scalars");
    fp8_scaling_init(m.fp8_state.get(), operands, nullptr);
    GS_CUDA_CHECK(cudaDeviceSynchronize());  // the legacy stream's init before the caller's non-blocking streams
  }
  return m;
}

Fp8Scaling fp8_scaling_to_host(const Fp8ScalingState* state, const float* history) {
  Fp8ScalingState s{};
  copy_to_host(&s, state, sizeof s);
  Fp8Scaling h;
  h.history.resize(s.size);
  if (s.size > 0) copy_to_host(h.history.data(), history, s.size * sizeof(float));
  h.next = s.next;
  h.scale = s.scale;
  return h;
}

std::vector<Fp8Scaling> fp8_scalings_to_host(const MixedScratchGpu& m, cudaStream_t stream) {
  std::vector<Fp8Scaling> out;
  if (!m.spec.fp8_gemm) return out;
  GS_CUDA_CHECK(cudaStreamSynchronize(stream));
  const size_t operands = m.fp8_state.size();
  for (size_t i = 0; i < operands; ++i) {
    out.push_back(fp8_scaling_to_host(m.fp8_state.get() + i,
                                      m.fp8_history.get() + i * static_cast<size_t>(m.spec.amax_history_len)));
  }
  return out;
}

void reset_counts(MixedScratchGpu& m, cudaStream_t stream) {
  GS_CUDA_CHECK(cudaMemsetAsync(m.counts.get(), 0, m.counts.bytes(), stream));
  m.backward_index = 0;
  m.grad_values = 0;
}

void counters_to_host(MixedScratchGpu& m, MixedCounters& c, cudaStream_t stream) {
  std::vector<unsigned long long> h(m.counts.size());
  GS_CUDA_CHECK(cudaMemcpyAsync(h.data(), m.counts.get(), m.counts.bytes(), cudaMemcpyDeviceToHost, stream));
  GS_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    c.grad_underflow += h[i];
    c.grad_nonfinite += h[i + 1];
  }
  c.grad_values += m.grad_values;
}

void dense_stack_forward_mixed_gpu(const BlasHandle& blas, DenseScratchGpu& s, MixedScratchGpu& m,
                                   const DenseStack& stack, const float* params, const float* x, int64_t rows,
                                   const float* y, const int32_t* labels, double* loss_sum) {
  GS_EXPECT_GPU(rows <= s.max_rows, "dense_stack_forward_mixed_gpu: rows <= max_rows");
  cudaStream_t st = blas.stream();
  if (rows <= 0) {
    sum_to_double(loss_sum, s.row_loss.get(), 0, s.scratch, st);
    return;
  }
  const FloatFormat f = m.format;
  const int64_t layers = stack.num_layers();
  const float* a = x;
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t in = stack.widths[l], out = stack.widths[l + 1];
    const float* w = params + stack.weight_offset(l);
    if (m.spec.fp8_gemm) {
      // E4M3 input and weight with their delayed scales (as bf16 patterns of the fp8 values).
      fp8_quantize(m, l, 0, m.a_enc[l].get(), a, rows * in, nullptr, st);
      fp8_quantize(m, l, 1, m.w_enc[l].get(), w, out * in, nullptr, st);
    } else {
      // The GEMM operands in the format: layer 0's input is rounded here; deeper inputs are format activations
      // already (their encoding is exact); the weight copy is rounded from the fp32 master.
      encode_format(f, m.a_enc[l].get(), a, static_cast<size_t>(rows * in), kUnused, st);
      encode_format(f, m.w_enc[l].get(), w, static_cast<size_t>(out * in), kUnused, st);
    }
    float* z = s.pre[l].get();
    float beta = 0.0f;
    if (stack.bias) {
      round_through_format(f, m.b_q.get(), params + stack.bias_offset(l), static_cast<size_t>(out), kUnused, st);
      broadcast_rows(z, m.b_q.get(), rows, out, st);
      beta = 1.0f;
    }
    if (m.spec.fp8_gemm) {
      if (beta == 0.0f) zero_fp8_gemm_output(z, rows * out, st);
      gemm_mixed_scaled(blas, FloatFormat::kBf16, z, m.a_enc[l].get(), m.w_enc[l].get(), rows, out, in,
                        Transpose::kNo, Transpose::kYes, fp8_scalars(m, l, 0, 0, 1, beta, st));
    } else {
      gemm_mixed(blas, f, z, m.a_enc[l].get(), m.w_enc[l].get(), rows, out, in, Transpose::kNo, Transpose::kYes, 1.0f,
                 beta);
    }
    round_in_place(f, z, rows * out, st);  // the GEMM's format output
    if (l + 1 < layers) {
      float* h = s.post[l].get();
      activation_forward(h, z, rows * out, stack.activation, st);
      if (stack.activation != Activation::kRelu) round_in_place(f, h, rows * out, st);  // relu: exact
      a = h;
    }
  }
  const float* logits = s.pre.back().get();
  const int64_t out_dim = stack.widths.back();
  if (stack.loss == LossKind::kCrossEntropy) {
    softmax_cross_entropy_rows(s.row_loss.get(), logits, labels, rows, out_dim, st);
  } else {
    mse_rows(s.row_loss.get(), logits, y, rows, out_dim, st);
  }
  sum_to_double(loss_sum, s.row_loss.get(), static_cast<size_t>(rows), s.scratch, st);
}

void dense_stack_backward_mixed_gpu(const BlasHandle& blas, float* grad, DenseScratchGpu& s, MixedScratchGpu& m,
                                    const DenseStack& stack, int64_t rows, const float* y, const int32_t* labels,
                                    float loss_scale, const std::function<void(int64_t layer)>& after_layer) {
  if (rows <= 0) return;
  cudaStream_t st = blas.stream();
  const FloatFormat f = m.format;
  const int64_t layers = stack.num_layers();
  const int64_t out_dim = stack.widths.back();
  int64_t slot = m.backward_index * count_slots(stack);
  ++m.backward_index;
  float* dz = s.grad_a.get();
  float* da = s.grad_b.get();
  const float* logits = s.pre.back().get();
  if (stack.loss == LossKind::kCrossEntropy) {
    softmax_cross_entropy_backward(dz, logits, labels, rows, out_dim, st);
  } else {
    mse_backward(dz, logits, y, rows * out_dim, st);
  }
  // Seed loss_scale / rows (PyTorch's mean-reduced loss); each parameter gradient is multiplied back by rows.
  const float seed = loss_scale / static_cast<float>(rows);
  const auto back = static_cast<float>(rows);
  if (seed != 1.0f) scale(dz, static_cast<size_t>(rows * out_dim), seed, st);
  const bool fp8 = m.spec.fp8_gemm;
  if (fp8) {
    round_in_place(f, dz, rows * out_dim, st);  // fp8: the bf16 loss gradient (counted when quantized to E5M2)
  } else {
    round_counted(m, slot, dz, rows * out_dim, st);
  }
  for (int64_t l = layers - 1; l >= 0; --l) {
    const int64_t in = stack.widths[l], out = stack.widths[l + 1];
    float* dw = m.dw.get();
    if (fp8) {
      // The E5M2 output gradient with its delayed scale (counted), dW = dz_q^T a_q with fp32 accumulation and an
      // fp32 result (TE keeps wgrad in fp32).
      GS_EXPECT_GPU(slot < static_cast<int64_t>(m.counts.size() / 2), "mixed stack: more backwards than micro-batches");
      fp8_quantize(m, l, 2, m.dz_enc.get(), dz, rows * out, m.counts.get() + 2 * slot, st);
      ++slot;
      m.grad_values += static_cast<uint64_t>(rows * out);
      zero_fp8_gemm_output(dw, out * in, st);
      gemm_mixed_scaled(blas, FloatFormat::kBf16, dw, m.dz_enc.get(), m.a_enc[l].get(), out, in, rows,
                        Transpose::kYes, Transpose::kNo, fp8_scalars(m, l, 1, 2, 0, 0.0f, st));
    } else {
      encode_format(f, m.dz_enc.get(), dz, static_cast<size_t>(rows * out), kUnused, st);  // exact: dz is in the format
      // dW = dz^T a on format operands (a_enc[l] from the forward), fp32 accumulation, format result.
      gemm_mixed(blas, f, dw, m.dz_enc.get(), m.a_enc[l].get(), out, in, rows, Transpose::kYes, Transpose::kNo, 1.0f,
                 0.0f);
      round_counted(m, slot, dw, out * in, st);
    }
    accumulate(m, grad + stack.weight_offset(l), dw, out * in, back, st);
    if (stack.bias) {
      float* db = m.b_q.get();
      bias_grad(db, dz, rows, out, st);  // the micro-batch's sum first (PyTorch's order), then rounded and accumulated
      if (fp8) {
        round_in_place(f, db, out, st);
      } else {
        round_counted(m, slot, db, out, st);
      }
      accumulate(m, grad + stack.bias_offset(l), db, out, back, st);
    }
    if (after_layer) after_layer(l);
    if (l == 0) break;
    if (fp8) {
      zero_fp8_gemm_output(da, rows * in, st);
      gemm_mixed_scaled(blas, FloatFormat::kBf16, da, m.dz_enc.get(), m.w_enc[l].get(), rows, in, out,
                        Transpose::kNo, Transpose::kNo, fp8_scalars(m, l, 2, 2, 1, 0.0f, st));
      round_in_place(f, da, rows * in, st);
    } else {
      gemm_mixed(blas, f, da, m.dz_enc.get(), m.w_enc[l].get(), rows, in, out, Transpose::kNo, Transpose::kNo, 1.0f,
                 0.0f);
      round_counted(m, slot, da, rows * in, st);
    }
    activation_backward(da, da, s.pre[l - 1].get(), rows * in, stack.activation, st);
    if (stack.activation != Activation::kRelu) round_in_place(f, da, rows * in, st);  // relu' is 0 or 1: exact
    std::swap(dz, da);
  }
}

}  // namespace gs::gpu
