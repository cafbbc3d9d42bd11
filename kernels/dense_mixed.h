// Mixed-precision forward/backward of the dense stack (kernels/dense.h), emulated on the host in fp32 buffers: every
// GEMM operand and elementwise result is rounded to the mode's format (RNE, kernels/float_formats.h), GEMMs accumulate
// in fp32 as tensor cores do, fp8 GEMM operands are per-tensor scaled from a delayed amax history. The fp32 stack
// (dense_stack_forward/backward) is untouched. A new format choice goes into MixedSpec and the rounding points here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/convert.h"
#include "kernels/dense.h"
#include "kernels/float_formats.h"

namespace gs {

// What the arithmetic of a precision mode needs (the model maps precision.mode to it).
struct MixedSpec {
  FloatFormat format = FloatFormat::kBf16;  // activations, weight copies, activation gradients (fp8: the non-GEMM tensors)
  bool fp8_gemm = false;             // GEMM operands per-tensor scaled: E4M3 forward (inputs, weights), E5M2 gradients
  bool grad_in_format = false;       // parameter gradients held and accumulated in `format` (fp16_pure), else fp32
  float loss_scale = 1.0f;           // multiplies the loss gradient before it is rounded (backward's seed)
  int64_t amax_history_len = 1024;   // fp8: steps (micro-batches) of amax history per operand
};

// Delayed per-tensor scaling of one fp8 GEMM operand (Transformer Engine's DelayedScaling recipe with
// amax_compute_algo "max" and margin 0): the scale used now is fmax / max(amax history); the amax seen now joins the
// history afterwards. Starts at scale 1 with an empty history; a zero or non-finite amax leaves the scale unchanged.
struct Fp8Scaling {
  std::vector<float> history;  // ring of the last amax_history_len amaxes
  size_t next = 0;
  float scale = 1.0f;
};

// Delayed-scaling quantization of one fp8 GEMM operand (what the mixed stack runs per operand and use): out[i] =
// fp32(q * (1 / sc.scale)) with q = fp8(in[i] * sc.scale) (format f: kFp8E4M3 or kFp8E5M2, saturating as TE's casts);
// then the amax of the finite |in[i]| joins sc's history (history_len entries at most, a ring once full) and sc.scale
// becomes format_max(f) / max(history) when that is > 0 and finite. Returns the underflow / non-finite counts of the
// scaled values' quantization. out may alias in. The GPU twin is gpu::fp8_quantize_delayed (kernels/cuda_kernels.h).
RoundingCounts fp8_quantize_delayed(float* out, const float* in, size_t n, FloatFormat f, Fp8Scaling& sc,
                                    size_t history_len);

// Counts of the gradient values rounded to the mode's gradient format (fp16/bf16: activation, weight and bias
// gradients; fp8: the E5M2-quantized output gradients of each layer): values cast to the format (none when the format
// is fp32: fp32 under a loss scale casts nothing), nonzero values that became zero (underflow), values that were or
// became inf/NaN (counted in fp32 too).
struct MixedCounters {
  uint64_t grad_values = 0;
  uint64_t grad_underflow = 0;
  uint64_t grad_nonfinite = 0;
};

// Per-rank state of the mixed stack for batches of up to max_rows samples (made once; never resized by the ops).
struct MixedScratch {
  std::vector<std::vector<float>> a_q;  // a_q[l]: layer l's input as its GEMMs see it (rows x widths[l])
  std::vector<std::vector<float>> w_q;  // w_q[l]: layer l's weight as its GEMMs see it (out x in)
  std::vector<float> b_q;               // one bias in the format (widest layer)
  std::vector<float> dw;                // the widest weight gradient (out x in), fp32 GEMM result
  std::vector<float> dz_q;              // fp8: the quantized output gradient (rows x widest)
  std::vector<Fp8Scaling> fp8;          // fp8: 3 per layer (input, weight, output gradient)
  MixedCounters counters;
};

MixedScratch make_mixed_scratch(const DenseStack& stack, int64_t max_rows, const MixedSpec& spec);

// Forward of rows samples in the mixed mode; same contract as dense_stack_forward (returns the unscaled loss SUM,
// computed in double from the format's logits, as autocast runs the loss in fp32). Keeps what backward needs.
double dense_stack_forward_mixed(DenseScratch<float>& s, MixedScratch& m, const DenseStack& stack, const float* params,
                                 const float* x, int64_t rows, const float* y, const int32_t* labels,
                                 const MixedSpec& spec);

// After dense_stack_forward_mixed on the same batch: grad += gradient of (loss_scale x loss sum). The backward runs
// at the magnitudes of PyTorch's mean-reduced loss (seed loss_scale / rows), each micro-batch's parameter gradient
// rounded to the format (fp16/bf16 modes), then multiplied by rows and added in fp32, or (grad_in_format) added and
// rounded in the format at the mean-loss magnitude (grad = rows x format(grad / rows + dW)). Counts into m.counters.
// after_layer as in dense_stack_backward.
void dense_stack_backward_mixed(float* grad, DenseScratch<float>& s, MixedScratch& m, const DenseStack& stack,
                                const float* params, int64_t rows, const float* y, const int32_t* labels,
                                const MixedSpec& spec, const std::function<void(int64_t layer)>& after_layer = {});

}  // namespace gs
