// Compute costs on one GPU of a hardware profile. An op's time is its GEMM time plus its memory-bound time (not
// their max: a layer's norms, activations, residuals and casts run as kernels of their own, after its GEMMs),
// plus its launches:
//   GEMM       flops / (peak[p] x gemm_efficiency[p] x sustained) + t_fixed + bytes[p] / B_skinny
//              t_fixed  = gemm_half_gflop x 1e9 / (peak[bf16] x gemm_efficiency[bf16] x sustained)
//              B_skinny = peak[bf16] x gemm_efficiency[bf16] x sustained / gemm_half_intensity (bytes per second)
//              bytes[p] = precision_bytes(p) x (m k + k n + m n), the operands and the result at precision p.
//              A fixed cost per GEMM (the time of gemm_half_gflop GFLOP at the 16-bit rate: a bf16 GEMM of that
//              size reaches half of gemm_efficiency) and a cost per byte of operands and result (a bf16 GEMM of
//              gemm_half_intensity FLOP per byte reaches half of it), added to the FLOP time. Each term is
//              nondecreasing in m, n and k, so more work never costs less, and t_fixed does not depend on the
//              precision; a narrower precision moves fewer bytes, so it is never slower where its peak x
//              efficiency is at least the wider one's. It is the first-order expansion, at the 16-bit rate, of the
//              product form used before, falloff = F / (F + gemm_half_gflop r) x I / (I + gemm_half_intensity r)
//              (F GFLOP, I FLOP per byte, r = peak[p] / peak[bf16]), without its cross term
//              gemm_half_gflop gemm_half_intensity r^2 / (F I): that term grows as 1/(F I), so far below the fitted
//              shapes (cuBLAS sweeps from 1024^3) it dominated, a small GEMM got cheaper as it grew and fp32 (small
//              r) priced below bf16. On large GEMMs the two agree (at 8192^3: 0.03% in bf16, under 1% at every
//              precision). Fitted to published cuBLAS shape sweeps (sim/cost/calibrate.cpp fits this form;
//              docs/cost-model.md)
//   attention  flops / (peak[p] x attention_efficiency x sustained) (fused FlashAttention-style kernels: no
//              attention-matrix bytes)
//   memory     bytes / (hbm x hbm_achievable_fraction x sustained)
//   launches   launches x launch_overhead_us
// flops: floating-point operations (a multiply-add is 2); bytes: HBM traffic (reads + writes). A new kind of op is
// priced by giving its FLOPs and bytes to one of these.
#pragma once
#include <algorithm>

#include "sim/cost/hardware_profile.h"

namespace gs {

// Element size (bytes) of an operand at a compute precision: fp32 and tf32 4, bf16 and fp16 2, fp8 1.
inline double precision_bytes(Precision p) {
  return p == Precision::kFp8 ? 1.0 : (p == Precision::kBf16 || p == Precision::kFp16) ? 2.0 : 4.0;
}

// The fixed cost of one GEMM (seconds, at sustained_fraction): gemm_half_gflop GFLOP at the 16-bit GEMM rate.
// The same at every precision.
inline double gemm_fixed_s(const HardwareProfile& hw) {
  const size_t b = static_cast<size_t>(Precision::kBf16);
  return hw.gemm_half_gflop * 1e9 / (hw.peak_tflops[b] * 1e12 * hw.gemm_efficiency[b] * hw.sustained_fraction);
}

// The cost of one GEMM's operand and result bytes (seconds per byte, at sustained_fraction): gemm_half_intensity
// FLOP at the 16-bit GEMM rate per byte (1 / B_skinny). 0 where the profile has no skinny falloff.
inline double gemm_skinny_s_per_byte(const HardwareProfile& hw) {
  const size_t b = static_cast<size_t>(Precision::kBf16);
  return hw.gemm_half_intensity / (hw.peak_tflops[b] * 1e12 * hw.gemm_efficiency[b] * hw.sustained_fraction);
}

// GEMM work of `flops` with `operand_bytes` of operands and result at precision p, seconds (no launch): its FLOP
// time at gemm_efficiency[p] plus the fixed cost plus the bytes' cost (the header's formula). operand_bytes <= 0:
// no bytes term.
inline double gemm_work_time_s(const HardwareProfile& hw, double flops, double operand_bytes, Precision p) {
  if (flops <= 0) return 0.0;
  const size_t i = static_cast<size_t>(p);
  return flops / (hw.peak_tflops[i] * 1e12 * hw.gemm_efficiency[i] * hw.sustained_fraction) + gemm_fixed_s(hw) +
         std::max(0.0, operand_bytes) * gemm_skinny_s_per_byte(hw);
}

// Fraction of peak_tflops[p] a GEMM of `flops` reaching `intensity` FLOP per byte gets, before sustained_fraction:
// flops / (peak[p] x its time at sustained 1), i.e. 1 / (1/gemm_efficiency[p] + (r / gemm_efficiency[bf16]) x
// (gemm_half_gflop / F + gemm_half_intensity / I)), F its GFLOP, r = peak[p] / peak[bf16]. intensity <= 0: no
// bytes term.
inline double gemm_efficiency(const HardwareProfile& hw, double flops, double intensity, Precision p) {
  const size_t i = static_cast<size_t>(p), b = static_cast<size_t>(Precision::kBf16);
  if (flops <= 0) return hw.gemm_efficiency[i];
  const double r = hw.peak_tflops[i] / hw.peak_tflops[b];
  double inv = 1.0 / hw.gemm_efficiency[i] + r / hw.gemm_efficiency[b] * hw.gemm_half_gflop / (flops * 1e-9);
  if (intensity > 0) inv += r / hw.gemm_efficiency[b] * hw.gemm_half_intensity / intensity;
  return 1.0 / inv;
}

// One GEMM C[m, n] = A[m, k] B[k, n] at precision p, seconds (no launch).
inline double gemm_shape_time_s(const HardwareProfile& hw, double m, double n, double k, Precision p) {
  const double flops = 2.0 * m * n * k;
  if (flops <= 0) return 0.0;
  return gemm_work_time_s(hw, flops, precision_bytes(p) * (m * k + k * n + m * n), p);
}

// GEMM work of `flops` whose operands and result are `operand_bytes` (shape unknown), seconds (no launch).
inline double gemm_time_s(const HardwareProfile& hw, double flops, double operand_bytes, Precision p) {
  return gemm_work_time_s(hw, flops, operand_bytes, p);
}

// Fused attention (QK^T, softmax, AV) of `flops`, seconds (no launch).
inline double attention_time_s(const HardwareProfile& hw, double flops, Precision p) {
  if (flops <= 0) return 0.0;
  return flops / (hw.peak_tflops[static_cast<size_t>(p)] * 1e12 * hw.attention_efficiency * hw.sustained_fraction);
}

// Memory-bound traffic of `bytes` (read + written), seconds (no launch).
inline double memory_time_s(const HardwareProfile& hw, double bytes) {
  if (bytes <= 0) return 0.0;
  return bytes / (hw.hbm_TBps * 1e12 * hw.hbm_achievable_fraction * hw.sustained_fraction);
}

// A kernel (or a few) of `flops` arithmetic at precision's GEMM rate and `bytes` of HBM traffic: GEMM time (shape
// unknown: no falloff) plus memory time plus launches x launch_overhead.
inline double op_time_s(const HardwareProfile& hw, double flops, double bytes, Precision precision,
                        double launches = 1.0) {
  const double compute = flops > 0 ? flops / (hw.peak_tflops[static_cast<size_t>(precision)] * 1e12 *
                                              hw.gemm_efficiency[static_cast<size_t>(precision)] *
                                              hw.sustained_fraction)
                                   : 0.0;
  return compute + memory_time_s(hw, bytes) + launches * hw.launch_overhead_us * 1e-6;
}

// A memory-bound pass (cast, encode, decode, scale, a top-k selection pass): bytes read + written over HBM.
inline double pass_time_s(const HardwareProfile& hw, double bytes, double launches = 1.0) {
  return memory_time_s(hw, bytes) + launches * hw.launch_overhead_us * 1e-6;
}

}  // namespace gs
