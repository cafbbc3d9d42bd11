// Compute costs on one GPU of a hardware profile: a roofline per op plus the launch overhead. A new kind of op is
// priced by giving its FLOPs and HBM bytes to op_time_s.
#pragma once
#include "sim/cost/hardware_profile.h"

namespace gs {

// Roofline time of an op (one or more kernels) on one GPU, in seconds:
// max(flops / (peak_tflops[precision] x achievable_fraction), bytes / (hbm x hbm_achievable_fraction))
//   + launches x launch_overhead.
// flops: floating-point operations (a multiply-add is 2); bytes: HBM traffic (reads + writes).
inline double op_time_s(const HardwareProfile& hw, double flops, double bytes, Precision precision,
                        double launches = 1.0) {
  const double rate = hw.peak_tflops[static_cast<size_t>(precision)] * 1e12 * hw.achievable_fraction;
  const double bw = hw.hbm_TBps * 1e12 * hw.hbm_achievable_fraction;
  const double t_compute = flops / rate;
  const double t_memory = bytes / bw;
  return (t_compute > t_memory ? t_compute : t_memory) + launches * hw.launch_overhead_us * 1e-6;
}

// A memory-bound pass (cast, encode, decode, scale, a top-k selection pass): bytes read + written over HBM.
inline double pass_time_s(const HardwareProfile& hw, double bytes, double launches = 1.0) {
  return op_time_s(hw, 0.0, bytes, Precision::kFp32, launches);
}

}  // namespace gs
