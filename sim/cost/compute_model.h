// Compute costs on one GPU of a hardware profile. An op's time is its GEMM time plus its memory-bound time (not
// their max: a layer's norms, activations, residuals and casts run as kernels of their own, after its GEMMs),
// plus its launches:
//   GEMM       flops / (peak[p] x gemm_efficiency[p] x falloff x sustained)
//              falloff = F / (F + gemm_half_gflop x r) x I / (I + gemm_half_intensity x r), F the GEMM's GFLOP,
//              I its FLOP per byte of operands and result, r = peak[p] / peak[bf16] (the half points are given at the
//              16-bit rate: a fixed overhead is more FLOPs at a faster rate); small and skinny GEMMs reach less of
//              the peak; fitted to published cuBLAS shape sweeps (docs/cost-model.md)
//   attention  flops / (peak[p] x attention_efficiency x sustained) (fused FlashAttention-style kernels: no
//              attention-matrix bytes)
//   memory     bytes / (hbm x hbm_achievable_fraction x sustained)
//   launches   launches x launch_overhead_us
// flops: floating-point operations (a multiply-add is 2); bytes: HBM traffic (reads + writes). A new kind of op is
// priced by giving its FLOPs and bytes to one of these.
#pragma once
#include "sim/cost/hardware_profile.h"

namespace gs {

// Element size (bytes) of an operand at a compute precision: fp32 and tf32 4, bf16 and fp16 2, fp8 1.
inline double precision_bytes(Precision p) {
  return p == Precision::kFp8 ? 1.0 : (p == Precision::kBf16 || p == Precision::kFp16) ? 2.0 : 4.0;
}

// Fraction of peak_tflops[p] a GEMM of `flops` reaching `intensity` FLOP per byte gets (gemm_efficiency x falloff,
// before sustained_fraction). intensity <= 0: no skinny falloff.
inline double gemm_efficiency(const HardwareProfile& hw, double flops, double intensity, Precision p) {
  double e = hw.gemm_efficiency[static_cast<size_t>(p)];
  const double r = hw.peak_tflops[static_cast<size_t>(p)] / hw.peak_tflops[static_cast<size_t>(Precision::kBf16)];
  const double gflop = flops * 1e-9;
  if (hw.gemm_half_gflop > 0) e *= gflop / (gflop + hw.gemm_half_gflop * r);
  if (hw.gemm_half_intensity > 0 && intensity > 0) e *= intensity / (intensity + hw.gemm_half_intensity * r);
  return e;
}

// One GEMM C[m, n] = A[m, k] B[k, n] at precision p, seconds (no launch).
inline double gemm_shape_time_s(const HardwareProfile& hw, double m, double n, double k, Precision p) {
  const double flops = 2.0 * m * n * k;
  if (flops <= 0) return 0.0;
  const double bytes = precision_bytes(p) * (m * k + k * n + m * n);
  const double rate = hw.peak_tflops[static_cast<size_t>(p)] * 1e12 * hw.sustained_fraction *
                      gemm_efficiency(hw, flops, flops / bytes, p);
  return flops / rate;
}

// GEMM work of `flops` whose operands and result are `operand_bytes` (shape unknown), seconds (no launch).
inline double gemm_time_s(const HardwareProfile& hw, double flops, double operand_bytes, Precision p) {
  if (flops <= 0) return 0.0;
  const double intensity = operand_bytes > 0 ? flops / operand_bytes : 0.0;
  return flops / (hw.peak_tflops[static_cast<size_t>(p)] * 1e12 * hw.sustained_fraction *
                  gemm_efficiency(hw, flops, intensity, p));
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
