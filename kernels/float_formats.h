// The reduced number formats (fp16, bf16, fp8 E4M3, fp8 E5M2): the one definition of every conversion to and from
// fp32, on bit patterns, as GS_HD inline functions shared by host code and CUDA kernels. A new format adds its
// encode/decode pair here, one FloatFormat value, and its rows in the format tables below; array versions in convert.h.
//
// Conventions (as NVIDIA GPUs convert; cuda_fp16.hpp, cuda_bf16.hpp, cuda_fp8.hpp of CUDA 13):
// - fp32 -> format: round to nearest, ties to even (RNE), subnormals of the format produced (never flushed), fp32
//   subnormal inputs honoured (they round to zero in every format here except bf16, where they stay subnormal).
// - Overflow: fp16, bf16 and E5M2 round past their largest finite value to +-inf (IEEE overflow under RNE: fp16 at
//   |x| >= 65520, E5M2 at |x| >= 61440). E4M3 (OCP FP8, no infinity) SATURATES by default: |x| > 464 (448 + half an
//   ulp), inf included, gives +-448, as `cvt.rn.satfinite.e4m3x2.f32` and CUDA's `__nv_fp8_e4m3(float)` constructor
//   do (Transformer Engine's casts). Fp8Overflow::kNoSat gives the OCP non-saturating result instead: NaN (0x7f) for
//   E4M3, +-inf for E5M2 (as PyTorch's float8_e4m3fn cast). E5M2 defaults to kNoSat (inf); kSatFinite gives +-57344.
// - NaN -> the canonical NaN of the format, sign dropped: fp16 0x7fff, bf16 0x7fff, E4M3 0x7f, E5M2 0x7f (NVIDIA's
//   canonical NaNs). Format -> fp32 is exact for every non-NaN pattern; a NaN decodes to fp32's canonical 0x7fffffff.
// - Sources: IEEE 754-2008 binary16; bfloat16 = the top 16 bits of binary32; OCP 8-bit Floating Point Specification
//   (OFP8) rev 1.0, 2023: E4M3 bias 7, max 448, NaN S.1111.111; E5M2 bias 15, max 57344, inf S.11111.00.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GS_HD __host__ __device__
#else
#define GS_HD
#endif

namespace gs {

// The formats a value can be stored or sent in. Append only (values are stable).
enum class FloatFormat : uint8_t { kFp32 = 0, kFp16 = 1, kBf16 = 2, kFp8E4M3 = 3, kFp8E5M2 = 4 };

// What an fp8 conversion does with a finite value past the format's largest one (and with +-inf).
enum class Fp8Overflow : uint8_t {
  kSatFinite,  // +-max finite (448 for E4M3, 57344 for E5M2); NVIDIA's .satfinite
  kNoSat,      // E4M3: NaN (no infinity in E4M3); E5M2: +-inf
};

// Storage bytes of one value.
GS_HD constexpr int format_bytes(FloatFormat f) {
  return f == FloatFormat::kFp32 ? 4 : (f == FloatFormat::kFp16 || f == FloatFormat::kBf16) ? 2 : 1;
}

// Largest finite value, smallest normal and smallest subnormal (positive), as fp32.
GS_HD constexpr float format_max(FloatFormat f) {
  return f == FloatFormat::kFp32   ? 3.4028234663852886e38f
         : f == FloatFormat::kFp16 ? 65504.0f
         : f == FloatFormat::kBf16 ? 3.3895313892515355e38f
         : f == FloatFormat::kFp8E4M3 ? 448.0f
                                      : 57344.0f;
}
GS_HD constexpr float format_min_normal(FloatFormat f) {
  return f == FloatFormat::kFp32 || f == FloatFormat::kBf16 ? 1.1754943508222875e-38f
         : f == FloatFormat::kFp16                          ? 6.103515625e-05f       // 2^-14
         : f == FloatFormat::kFp8E4M3                       ? 0.015625f              // 2^-6
                                                            : 6.103515625e-05f;      // 2^-14
}
GS_HD constexpr float format_min_subnormal(FloatFormat f) {
  return f == FloatFormat::kFp32 || f == FloatFormat::kBf16
             ? (f == FloatFormat::kFp32 ? 1.4012984643248171e-45f : 9.183549615799121e-41f)  // 2^-149, 2^-133
         : f == FloatFormat::kFp16    ? 5.960464477539063e-08f                                   // 2^-24
         : f == FloatFormat::kFp8E4M3 ? 0.001953125f                                             // 2^-9
                                      : 1.52587890625e-05f;                                      // 2^-16
}

// ---- Bit casts ---------------------------------------------------------------------------------------------------

GS_HD inline uint32_t fp32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

GS_HD inline float fp32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

constexpr uint32_t kFp32CanonicalNan = 0x7fffffffu;
constexpr uint16_t kFp16CanonicalNan = 0x7fffu;
constexpr uint16_t kBf16CanonicalNan = 0x7fffu;
constexpr uint8_t kFp8CanonicalNan = 0x7fu;  // E4M3 and E5M2

namespace detail {

// Round a finite fp32 magnitude (sign bit clear) to a binary format with `kExpBits` exponent bits (IEEE bias) and
// `kManBits` stored mantissa bits, RNE, subnormals included. Returns the magnitude's bit pattern (exponent and
// mantissa fields); a value past the format's range carries into larger exponent fields, which the caller clamps.
template <int kExpBits, int kManBits>
GS_HD inline uint32_t encode_magnitude_rne(uint32_t abs_bits) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr uint32_t kMinNormalExp32 = 127 + 1 - kBias;  // fp32 biased exponent of the format's smallest normal
  const uint32_t e32 = abs_bits >> 23;
  if (e32 >= kMinNormalExp32) {
    constexpr int kShift = 23 - kManBits;
    const uint32_t r = abs_bits - (static_cast<uint32_t>(127 - kBias) << 23);  // rebias the exponent field
    return (r + ((1u << (kShift - 1)) - 1u) + ((r >> kShift) & 1u)) >> kShift;
  }
  // Subnormal in the format: significand (implicit bit included) times 2^(e32-150) in units of 2^(1-bias-man).
  const uint32_t shift = static_cast<uint32_t>(151 - kBias - kManBits) - e32;  // >= 24 - kManBits
  if (shift >= 25) return 0u;  // below half the smallest subnormal (or exactly half at 24 handled below)
  const uint32_t m24 = (abs_bits & 0x7fffffu) | 0x800000u;
  return (m24 + ((1u << (shift - 1)) - 1u) + ((m24 >> shift) & 1u)) >> shift;
}

// Decode a finite magnitude pattern of such a format (sign clear, not inf/NaN) to fp32 bits. Exact.
template <int kExpBits, int kManBits>
GS_HD inline uint32_t decode_magnitude(uint32_t bits) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  const uint32_t e = bits >> kManBits;
  const uint32_t m = bits & ((1u << kManBits) - 1u);
  if (e != 0) return ((e + 127u - kBias) << 23) | (m << (23 - kManBits));
  if (m == 0) return 0u;
  // Subnormal: m * 2^(1-bias-man), exact in fp32 (m < 2^kManBits, and the result is an fp32 normal).
  constexpr float kUnit = static_cast<float>(1.0 / static_cast<double>(1ull << (kBias - 1 + kManBits)));
  return fp32_bits(static_cast<float>(m) * kUnit);
}

}  // namespace detail

// ---- fp16 (IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits) ----------------------------------------

GS_HD inline uint16_t fp32_to_fp16(float x) {
  const uint32_t u = fp32_bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs_bits = u & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return kFp16CanonicalNan;
  if (abs_bits >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 (and inf) -> inf
  return static_cast<uint16_t>(sign | detail::encode_magnitude_rne<5, 10>(abs_bits));
}

GS_HD inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t abs_bits = h & 0x7fffu;
  if (abs_bits >= 0x7c00u) return fp32_from_bits(abs_bits == 0x7c00u ? (sign | 0x7f800000u) : kFp32CanonicalNan);
  return fp32_from_bits(sign | detail::decode_magnitude<5, 10>(abs_bits));
}

// ---- bf16 (1 sign, 8 exponent (bias 127), 7 mantissa bits: the top half of fp32) -----------------------------------

GS_HD inline uint16_t fp32_to_bf16(float x) {
  const uint32_t u = fp32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return kBf16CanonicalNan;
  // RNE on the low 16 bits; a carry out of the mantissa bumps the exponent, past the largest finite value into inf.
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

GS_HD inline float bf16_to_fp32(uint16_t b) {
  if ((b & 0x7fffu) > 0x7f80u) return fp32_from_bits(kFp32CanonicalNan);
  return fp32_from_bits(static_cast<uint32_t>(b) << 16);
}

// ---- fp8 E4M3 (OCP: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no inf; NaN = S.1111.111; max 448) ---------------

GS_HD inline uint8_t fp32_to_fp8_e4m3(float x, Fp8Overflow overflow = Fp8Overflow::kSatFinite) {
  const uint32_t u = fp32_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t abs_bits = u & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return kFp8CanonicalNan;
  if (abs_bits > 0x43e80000u) {  // > 464 = 448 + half an ulp (inf included)
    return static_cast<uint8_t>(overflow == Fp8Overflow::kSatFinite ? (sign | 0x7eu) : kFp8CanonicalNan);
  }
  return static_cast<uint8_t>(sign | detail::encode_magnitude_rne<4, 3>(abs_bits));
}

GS_HD inline float fp8_e4m3_to_fp32(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t abs_bits = v & 0x7fu;
  if (abs_bits == 0x7fu) return fp32_from_bits(kFp32CanonicalNan);
  return fp32_from_bits(sign | detail::decode_magnitude<4, 3>(abs_bits));
}

// ---- fp8 E5M2 (OCP: 1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-like inf and NaN; max 57344) --------------

GS_HD inline uint8_t fp32_to_fp8_e5m2(float x, Fp8Overflow overflow = Fp8Overflow::kNoSat) {
  const uint32_t u = fp32_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t abs_bits = u & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return kFp8CanonicalNan;
  if (abs_bits >= 0x47700000u) {  // >= 61440 = 57344 + half an ulp (ties to the even 65536: overflow); inf included
    return static_cast<uint8_t>(sign | (overflow == Fp8Overflow::kSatFinite ? 0x7bu : 0x7cu));
  }
  return static_cast<uint8_t>(sign | detail::encode_magnitude_rne<5, 2>(abs_bits));
}

GS_HD inline float fp8_e5m2_to_fp32(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t abs_bits = v & 0x7fu;
  if (abs_bits >= 0x7cu) return fp32_from_bits(abs_bits == 0x7cu ? (sign | 0x7f800000u) : kFp32CanonicalNan);
  return fp32_from_bits(sign | detail::decode_magnitude<5, 2>(abs_bits));
}

// ---- Round trips (what emulation uses: the fp32 value a format would hold) --------------------------------------

GS_HD inline float round_through_fp16(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }
GS_HD inline float round_through_bf16(float x) { return bf16_to_fp32(fp32_to_bf16(x)); }
GS_HD inline float round_through_fp8_e4m3(float x, Fp8Overflow overflow = Fp8Overflow::kSatFinite) {
  return fp8_e4m3_to_fp32(fp32_to_fp8_e4m3(x, overflow));
}
GS_HD inline float round_through_fp8_e5m2(float x, Fp8Overflow overflow = Fp8Overflow::kNoSat) {
  return fp8_e5m2_to_fp32(fp32_to_fp8_e5m2(x, overflow));
}

// x rounded to TF32 (fp32's 8 exponent bits, 10 stored mantissa bits: what a tensor core multiplies under TF32 math),
// RNE on the low 13 bits, held in fp32. Overflow past the largest TF32 value (2^128 (1 - 2^-11)) gives inf; NaN
// gives fp32's canonical NaN. Hardware may truncate instead (round toward zero); tests bound both. Not a storage
// format (no FloatFormat value): tf32 runs keep fp32 storage.
GS_HD inline float round_through_tf32(float x) {
  const uint32_t u = fp32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return fp32_from_bits(kFp32CanonicalNan);
  return fp32_from_bits((u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u);
}

// x rounded to format f (fp8 with its default overflow rule); fp32 returns x unchanged.
GS_HD inline float round_through(FloatFormat f, float x) {
  switch (f) {
    case FloatFormat::kFp16: return round_through_fp16(x);
    case FloatFormat::kBf16: return round_through_bf16(x);
    case FloatFormat::kFp8E4M3: return round_through_fp8_e4m3(x);
    case FloatFormat::kFp8E5M2: return round_through_fp8_e5m2(x);
    case FloatFormat::kFp32: break;
  }
  return x;
}

// True when x is nonzero and finite but rounds to (signed) zero in format f: an underflow.
GS_HD inline bool underflows_in(FloatFormat f, float x) { return x != 0.0f && round_through(f, x) == 0.0f; }

// ---- Addition in a format (what a GPU reduction in that format computes) ------------------------------------------
// a + b of two values held in the format, rounded to the format: the fp32 sum of the decoded values, then RNE. This
// equals the correctly rounded sum in the format, since fp32 has p = 24 >= 2p' + 2 bits for every format here
// (p' = 11, 8, 4, 3), so the double rounding is innocuous (Figueroa, "When is double rounding innocuous?", 1995).
// Rank-order sums chain these calls: s = add(add(g0, g1), g2) ...

GS_HD inline uint16_t fp16_add(uint16_t a, uint16_t b) { return fp32_to_fp16(fp16_to_fp32(a) + fp16_to_fp32(b)); }
GS_HD inline uint16_t bf16_add(uint16_t a, uint16_t b) { return fp32_to_bf16(bf16_to_fp32(a) + bf16_to_fp32(b)); }
GS_HD inline uint8_t fp8_e4m3_add(uint8_t a, uint8_t b, Fp8Overflow overflow = Fp8Overflow::kSatFinite) {
  return fp32_to_fp8_e4m3(fp8_e4m3_to_fp32(a) + fp8_e4m3_to_fp32(b), overflow);
}
GS_HD inline uint8_t fp8_e5m2_add(uint8_t a, uint8_t b, Fp8Overflow overflow = Fp8Overflow::kNoSat) {
  return fp32_to_fp8_e5m2(fp8_e5m2_to_fp32(a) + fp8_e5m2_to_fp32(b), overflow);
}

// The same on values already representable in f (e.g. earlier results of round_through): round_through(f, a + b).
// For fp32 it is the plain fp32 add.
GS_HD inline float add_in_format(FloatFormat f, float a, float b) { return round_through(f, a + b); }

}  // namespace gs
