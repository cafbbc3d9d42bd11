// Host array conversions between fp32 and the reduced formats of float_formats.h, and fused round trips (the fp32
// value each element would hold in the format: what precision emulation applies around every op). Each function has
// a portable scalar path (the GS_HD definitions, element by element) and an AVX2/F16C path chosen at run time when
// the CPU has it; both give the same bits, NaNs aside (the vector path may keep a NaN's payload instead of the
// canonical NaN). A new format adds one pair here and its kernels in convert.cpp.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/float_formats.h"

namespace gs {

// Which implementation an array conversion uses. kBest: AVX2 (+F16C for fp16) when the CPU has it, else portable.
// kAvx2 on a CPU without it throws std::invalid_argument. Tests pin both to compare them; callers leave the default.
enum class ConvertIsa : uint8_t { kBest, kPortable, kAvx2 };

// True when this CPU runs the AVX2 path (AVX2 and F16C, checked once with __builtin_cpu_supports).
bool convert_avx2_available();

// out[i] = format(in[i]) for i < n; out and in do not overlap. Shapes: n values each; units: none.
void convert_fp32_to_fp16(uint16_t* out, const float* in, size_t n, ConvertIsa isa = ConvertIsa::kBest);
void convert_fp32_to_bf16(uint16_t* out, const float* in, size_t n, ConvertIsa isa = ConvertIsa::kBest);
void convert_fp32_to_fp8_e4m3(uint8_t* out, const float* in, size_t n,
                              Fp8Overflow overflow = Fp8Overflow::kSatFinite, ConvertIsa isa = ConvertIsa::kBest);
void convert_fp32_to_fp8_e5m2(uint8_t* out, const float* in, size_t n, Fp8Overflow overflow = Fp8Overflow::kNoSat,
                              ConvertIsa isa = ConvertIsa::kBest);

// out[i] = fp32(in[i]) for i < n (exact; a NaN becomes fp32's canonical NaN on the portable path).
void convert_fp16_to_fp32(float* out, const uint16_t* in, size_t n, ConvertIsa isa = ConvertIsa::kBest);
void convert_bf16_to_fp32(float* out, const uint16_t* in, size_t n, ConvertIsa isa = ConvertIsa::kBest);
void convert_fp8_e4m3_to_fp32(float* out, const uint8_t* in, size_t n, ConvertIsa isa = ConvertIsa::kBest);
void convert_fp8_e5m2_to_fp32(float* out, const uint8_t* in, size_t n, ConvertIsa isa = ConvertIsa::kBest);

// out[i] = fp32(format(in[i])) for i < n: the fused round trip. out may alias in (in place).
void round_fp32_through_fp16(float* out, const float* in, size_t n, ConvertIsa isa = ConvertIsa::kBest);
void round_fp32_through_bf16(float* out, const float* in, size_t n, ConvertIsa isa = ConvertIsa::kBest);
void round_fp32_through_fp8_e4m3(float* out, const float* in, size_t n,
                                 Fp8Overflow overflow = Fp8Overflow::kSatFinite, ConvertIsa isa = ConvertIsa::kBest);
void round_fp32_through_fp8_e5m2(float* out, const float* in, size_t n, Fp8Overflow overflow = Fp8Overflow::kNoSat,
                                 ConvertIsa isa = ConvertIsa::kBest);

// The round trip for any format (fp8 with its default overflow rule); kFp32 copies (or does nothing in place).
void round_fp32_through(FloatFormat format, float* out, const float* in, size_t n);

// Counts over in[0..n) for the report: values that are nonzero and finite in fp32 but round to zero in `format`
// (underflow), and values that are not finite (inf or NaN) after rounding to `format` (overflow included).
struct RoundingCounts {
  size_t underflow = 0;
  size_t nonfinite = 0;
};
RoundingCounts count_rounding(FloatFormat format, const float* in, size_t n);

// round_fp32_through(format, out, in, n) that also returns count_rounding(format, in, n), in one pass over memory
// (chunks rounded into a stack buffer, counted, then stored). out may alias in.
RoundingCounts round_fp32_through_counted(FloatFormat format, float* out, const float* in, size_t n);

// acc[i] += multiplier * fp32(format(in[i])) for i < n, returning count_rounding(format, in, n): a format gradient
// added into an fp32 accumulator. acc_in_format: the accumulator holds multiplier x (a format value), and
// acc[i] = multiplier * format(acc[i] / multiplier + fp32(format(in[i]))) (multiplier a power of two keeps the
// division exact). acc and in distinct.
RoundingCounts accumulate_rounded(FloatFormat format, float* acc, const float* in, size_t n, bool acc_in_format,
                                  float multiplier = 1.0f);

}  // namespace gs
