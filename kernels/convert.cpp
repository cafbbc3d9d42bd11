// Host array conversions of convert.h: the portable path applies float_formats.h element by element; the AVX2 path
// (x86-64, chosen at run time with __builtin_cpu_supports, compiled with target attributes) does the same integer
// math eight lanes at a time (F16C's vcvtps2ph/vcvtph2ps for fp16, whose RNE, subnormals and overflow are IEEE).
// NaNs are made canonical on both paths, so the two give identical bits. A new format adds a kernel pair here.
#include "kernels/convert.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GS_CONVERT_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define GS_CONVERT_X86 0
#endif

namespace gs {

bool convert_avx2_available() {
#if GS_CONVERT_X86
  static const bool available = [] {
    __builtin_cpu_init();
    // F16C from CPUID leaf 1 (ECX bit 29): clang 14, which builds the fuzz target, has no "f16c" feature string.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    return __builtin_cpu_supports("avx2") && f16c;
  }();
  return available;
#else
  return false;
#endif
}

namespace {

bool use_avx2(ConvertIsa isa) {
  switch (isa) {
    case ConvertIsa::kPortable: return false;
    case ConvertIsa::kAvx2:
      if (!convert_avx2_available()) throw std::invalid_argument("convert: AVX2/F16C path requested on a CPU without it");
      return true;
    case ConvertIsa::kBest: break;
  }
  return convert_avx2_available();
}

// ---- Portable path -------------------------------------------------------------------------------------------------

template <class Out, class In, class F>
void map_portable(Out* out, const In* in, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) out[i] = f(in[i]);
}

#if GS_CONVERT_X86
#define GS_AVX2 __attribute__((target("avx2,f16c,fma")))

// ---- AVX2 helpers ------------------------------------------------------------------------------------------------

// Lanes of fp32 bits whose magnitude is a NaN.
GS_AVX2 inline __m256i nan_mask(__m256i abs_bits) {
  return _mm256_cmpgt_epi32(abs_bits, _mm256_set1_epi32(0x7f800000));
}

// encode_magnitude_rne<E, M> of float_formats.h on 8 lanes (finite magnitudes; other lanes are blended later).
template <int kExpBits, int kManBits>
GS_AVX2 inline __m256i encode_magnitude_avx2(__m256i abs_bits) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr int kMinNormalExp32 = 127 + 1 - kBias;
  constexpr int kShift = 23 - kManBits;
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i e32 = _mm256_srli_epi32(abs_bits, 23);
  // Normal: rebias, round away kShift bits (RNE).
  const __m256i r = _mm256_sub_epi32(abs_bits, _mm256_set1_epi32((127 - kBias) << 23));
  const __m256i r_lsb = _mm256_and_si256(_mm256_srli_epi32(r, kShift), one);
  const __m256i normal = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(r, _mm256_set1_epi32((1 << (kShift - 1)) - 1)), r_lsb), kShift);
  // Subnormal: variable right shift of the 24-bit significand; shift counts >= 32 give 0 (vpsrlvd), as wanted.
  const __m256i shift = _mm256_sub_epi32(_mm256_set1_epi32(151 - kBias - kManBits), e32);
  const __m256i m24 = _mm256_or_si256(_mm256_and_si256(abs_bits, _mm256_set1_epi32(0x7fffff)),
                                      _mm256_set1_epi32(0x800000));
  const __m256i half_minus_1 = _mm256_sub_epi32(_mm256_sllv_epi32(one, _mm256_sub_epi32(shift, one)), one);
  const __m256i m_lsb = _mm256_and_si256(_mm256_srlv_epi32(m24, shift), one);
  const __m256i subnormal = _mm256_srlv_epi32(_mm256_add_epi32(_mm256_add_epi32(m24, half_minus_1), m_lsb), shift);
  const __m256i is_normal = _mm256_cmpgt_epi32(e32, _mm256_set1_epi32(kMinNormalExp32 - 1));
  return _mm256_blendv_epi8(subnormal, normal, is_normal);
}

// decode_magnitude<E, M> on 8 lanes (finite magnitude patterns) -> fp32 bits.
template <int kExpBits, int kManBits>
GS_AVX2 inline __m256i decode_magnitude_avx2(__m256i mag) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  const __m256i e = _mm256_srli_epi32(mag, kManBits);
  const __m256i m = _mm256_and_si256(mag, _mm256_set1_epi32((1 << kManBits) - 1));
  const __m256i normal = _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127 - kBias)), 23),
                                         _mm256_slli_epi32(m, 23 - kManBits));
  constexpr float kUnit = static_cast<float>(1.0 / static_cast<double>(1ull << (kBias - 1 + kManBits)));
  const __m256i subnormal = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(kUnit)));
  const __m256i is_sub = _mm256_cmpeq_epi32(e, _mm256_setzero_si256());
  return _mm256_blendv_epi8(normal, subnormal, is_sub);
}

// The fp8 encode of 8 lanes: sign | magnitude with the format's overflow and NaN rules, as 32-bit lanes.
template <int kExpBits, int kManBits>
GS_AVX2 inline __m256i fp8_encode_lanes(__m256i u, Fp8Overflow overflow) {
  const bool e4m3 = kExpBits == 4;
  const __m256i abs_bits = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  __m256i mag = encode_magnitude_avx2<kExpBits, kManBits>(abs_bits);
  // Overflow threshold: E4M3 |x| > 464, E5M2 |x| >= 61440 (> 61440 - ulp).
  const __m256i ovf =
      _mm256_cmpgt_epi32(abs_bits, _mm256_set1_epi32(e4m3 ? 0x43e80000 : 0x47700000 - 1));
  const int ovf_mag = e4m3 ? 0x7e : (overflow == Fp8Overflow::kSatFinite ? 0x7b : 0x7c);
  mag = _mm256_blendv_epi8(mag, _mm256_set1_epi32(ovf_mag), ovf);
  __m256i res = _mm256_or_si256(mag, sign);
  __m256i nan = nan_mask(abs_bits);
  if (e4m3 && overflow == Fp8Overflow::kNoSat) nan = _mm256_or_si256(nan, ovf);
  return _mm256_blendv_epi8(res, _mm256_set1_epi32(kFp8CanonicalNan), nan);
}

// The fp8 round trip of 8 lanes: fp32 bits of the value the format holds.
template <int kExpBits, int kManBits>
GS_AVX2 inline __m256i fp8_round_lanes(__m256i u, Fp8Overflow overflow) {
  const bool e4m3 = kExpBits == 4;
  const __m256i abs_bits = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i sign = _mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256i mag = encode_magnitude_avx2<kExpBits, kManBits>(abs_bits);
  __m256i res = decode_magnitude_avx2<kExpBits, kManBits>(mag);
  const __m256i ovf =
      _mm256_cmpgt_epi32(abs_bits, _mm256_set1_epi32(e4m3 ? 0x43e80000 : 0x47700000 - 1));
  const float ovf_value = e4m3 ? 448.0f : (overflow == Fp8Overflow::kSatFinite ? 57344.0f : __builtin_inff());
  res = _mm256_blendv_epi8(res, _mm256_castps_si256(_mm256_set1_ps(ovf_value)), ovf);
  res = _mm256_or_si256(res, sign);
  __m256i nan = nan_mask(abs_bits);
  if (e4m3 && overflow == Fp8Overflow::kNoSat) nan = _mm256_or_si256(nan, ovf);
  return _mm256_blendv_epi8(res, _mm256_set1_epi32(static_cast<int>(kFp32CanonicalNan)), nan);
}

// Packs 4 x 8 lanes of byte values (0..255 in 32-bit lanes) into 32 bytes in order.
GS_AVX2 inline __m256i pack_bytes(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  const __m256i p01 = _mm256_packus_epi32(v0, v1);
  const __m256i p23 = _mm256_packus_epi32(v2, v3);
  const __m256i b = _mm256_packus_epi16(p01, p23);
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Packs 2 x 8 lanes of 16-bit values (in 32-bit lanes) into 16 uint16 in order.
GS_AVX2 inline __m256i pack_words(__m256i v0, __m256i v1) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(v0, v1), 0xd8);
}

GS_AVX2 inline __m256i load8(const float* p) { return _mm256_castps_si256(_mm256_loadu_ps(p)); }

// ---- AVX2 kernels ------------------------------------------------------------------------------------------------

GS_AVX2 size_t fp32_to_fp16_avx2(uint16_t* out, const float* in, size_t n) {
  size_t i = 0;
  const __m256i canonical = _mm256_set1_epi16(static_cast<short>(kFp16CanonicalNan));
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(in + i);
    const __m256 b = _mm256_loadu_ps(in + i + 8);
    const __m128i ha = _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT);
    const __m128i hb = _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT);
    __m256i h = _mm256_set_m128i(hb, ha);
    // NaN lanes -> canonical NaN: a half is NaN when (h & 0x7fff) > 0x7c00 (16-bit signed compare is fine there).
    const __m256i nan = _mm256_cmpgt_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7c00));
    h = _mm256_blendv_epi8(h, canonical, nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  return i;
}

GS_AVX2 size_t fp16_to_fp32_avx2(float* out, const uint16_t* in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
    const __m256i r = _mm256_blendv_epi8(_mm256_castps_si256(f),
                                         _mm256_set1_epi32(static_cast<int>(kFp32CanonicalNan)), nan);
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(r));
  }
  return i;
}

GS_AVX2 size_t round_through_fp16_avx2(float* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(in + i);
    const __m256 f = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256i r = _mm256_blendv_epi8(_mm256_castps_si256(f),
                                         _mm256_set1_epi32(static_cast<int>(kFp32CanonicalNan)), nan);
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(r));
  }
  return i;
}

// bf16 RNE on 8 lanes, result in the low 16 bits of each lane (NaN -> canonical).
GS_AVX2 inline __m256i bf16_encode_lanes(__m256i u) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = nan_mask(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)));
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(kBf16CanonicalNan), nan);
}

GS_AVX2 size_t fp32_to_bf16_avx2(uint16_t* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_encode_lanes(load8(in + i));
    const __m256i b = bf16_encode_lanes(load8(in + i + 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), pack_words(a, b));
  }
  return i;
}

GS_AVX2 size_t bf16_to_fp32_avx2(float* out, const uint16_t* in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u =
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))), 16);
    const __m256i nan = nan_mask(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)));
    const __m256i r = _mm256_blendv_epi8(u, _mm256_set1_epi32(static_cast<int>(kFp32CanonicalNan)), nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), r);
  }
  return i;
}

GS_AVX2 size_t round_through_bf16_avx2(float* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = load8(in + i);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb),
                                       _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
    const __m256i nan = nan_mask(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm256_blendv_epi8(r, _mm256_set1_epi32(static_cast<int>(kFp32CanonicalNan)), nan));
  }
  return i;
}

template <int kExpBits, int kManBits>
GS_AVX2 size_t fp32_to_fp8_avx2(uint8_t* out, const float* in, size_t n, Fp8Overflow overflow) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i v0 = fp8_encode_lanes<kExpBits, kManBits>(load8(in + i), overflow);
    const __m256i v1 = fp8_encode_lanes<kExpBits, kManBits>(load8(in + i + 8), overflow);
    const __m256i v2 = fp8_encode_lanes<kExpBits, kManBits>(load8(in + i + 16), overflow);
    const __m256i v3 = fp8_encode_lanes<kExpBits, kManBits>(load8(in + i + 24), overflow);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), pack_bytes(v0, v1, v2, v3));
  }
  return i;
}

template <int kExpBits, int kManBits>
GS_AVX2 size_t round_through_fp8_avx2(float* out, const float* in, size_t n, Fp8Overflow overflow) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        fp8_round_lanes<kExpBits, kManBits>(load8(in + i), overflow));
  }
  return i;
}

// fp8 -> fp32 through a 256-entry table of the scalar definition (a gather of 8 lanes at a time).
GS_AVX2 size_t fp8_to_fp32_avx2(float* out, const uint8_t* in, size_t n, const float* table) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t bytes;
    std::memcpy(&bytes, in + i, sizeof bytes);
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(bytes)));
    _mm256_storeu_ps(out + i, _mm256_i32gather_ps(table, idx, 4));
  }
  return i;
}

#undef GS_AVX2
#endif  // GS_CONVERT_X86

struct Fp8Tables {
  float e4m3[256];
  float e5m2[256];
};

const Fp8Tables& fp8_tables() {
  static const Fp8Tables tables = [] {
    Fp8Tables t{};
    for (int v = 0; v < 256; ++v) {
      t.e4m3[v] = fp8_e4m3_to_fp32(static_cast<uint8_t>(v));
      t.e5m2[v] = fp8_e5m2_to_fp32(static_cast<uint8_t>(v));
    }
    return t;
  }();
  return tables;
}

}  // namespace

// ---- Public entry points: the vector kernel for the leading blocks, the portable definition for the rest -----------

void convert_fp32_to_fp16(uint16_t* out, const float* in, size_t n, ConvertIsa isa) {
  size_t done = 0;
#if GS_CONVERT_X86
  if (use_avx2(isa)) done = fp32_to_fp16_avx2(out, in, n);
#else
  use_avx2(isa);
#endif
  map_portable(out + done, in + done, n - done, [](float x) { return fp32_to_fp16(x); });
}

void convert_fp16_to_fp32(float* out, const uint16_t* in, size_t n, ConvertIsa isa) {
  size_t done = 0;
#if GS_CONVERT_X86
  if (use_avx2(isa)) done = fp16_to_fp32_avx2(out, in, n);
#else
  use_avx2(isa);
#endif
  map_portable(out + done, in + done, n - done, [](uint16_t h) { return fp16_to_fp32(h); });
}

void convert_fp32_to_bf16(uint16_t* out, const float* in, size_t n, ConvertIsa isa) {
  size_t done = 0;
#if GS_CONVERT_X86
  if (use_avx2(isa)) done = fp32_to_bf16_avx2(out, in, n);
#else
  use_avx2(isa);
#endif
  map_portable(out + done, in + done, n - done, [](float x) { return fp32_to_bf16(x); });
}

void convert_bf16_to_fp32(float* out, const uint16_t* in, size_t n, ConvertIsa isa) {
  size_t done = 0;
#if GS_CONVERT_X86
  if (use_avx2(isa)) done = bf16_to_fp32_avx2(out, in, n);
#else
  use_avx2(isa);
#endif
  map_portable(out + done, in + done, n - done, [](uint16_t b) { return bf16_to_fp32(b); });
}

void convert_fp32_to_fp8_e4m3(uint8_t* out, const float* in, size_t n, Fp8Overflow overflow, ConvertIsa isa) {
  size_t done = 0;
#if GS_CONVERT_X86
  if (use_avx2(isa)) done = fp32_to_fp8_avx2<4, 3>(out, in, n, overflow);
#else
  use_avx2(isa);
#endif
  map_portable(out + done, in + done, n - done, [overflow](float x) { return fp32_to_fp8_e4m3(x, overflow); });
}

void convert_fp32_to_fp8_e5m2(uint8_t* out, const float* in, size_t n, Fp8Overflow overflow, ConvertIsa isa) {
  size_t done = 0;
#if GS_CONVERT_X86
  if (use_avx2(isa)) done = fp32_to_fp8_avx2<5, 2>(out, in, n, overflow);
#else
  use_avx2(isa);
#endif
  map_portable(out + done, in + done, n - done, [overflow](float x) { return fp32_to_fp8_e5m2(x, overflow); });
}

void convert_fp8_e4m3_to_fp32(float* out, const uint8_t* in, size_t n, ConvertIsa isa) {
  size_t done = 0;
#if GS_CONVERT_X86
  if (use_avx2(isa)) done = fp8_to_fp32_avx2(out, in, n, fp8_tables().e4m3);
#else
  use_avx2(isa);
#endif
  map_portable(out + done, in + done, n - done, [](uint8_t v) { return fp8_e4m3_to_fp32(v); });
}

void convert_fp8_e5m2_to_fp32(float* out, const uint8_t* in, size_t n, ConvertIsa isa) {
  size_t done = 0;
#if GS_CONVERT_X86
  if (use_avx2(isa)) done = fp8_to_fp32_avx2(out, in, n, fp8_tables().e5m2);
#else
  use_avx2(isa);
#endif
  map_portable(out + done, in + done, n - done, [](uint8_t v) { return fp8_e5m2_to_fp32(v); });
}

void round_fp32_through_fp16(float* out, const float* in, size_t n, ConvertIsa isa) {
  size_t done = 0;
#if GS_CONVERT_X86
  if (use_avx2(isa)) done = round_through_fp16_avx2(out, in, n);
#else
  use_avx2(isa);
#endif
  map_portable(out + done, in + done, n - done, [](float x) { return round_through_fp16(x); });
}

void round_fp32_through_bf16(float* out, const float* in, size_t n, ConvertIsa isa) {
  size_t done = 0;
#if GS_CONVERT_X86
  if (use_avx2(isa)) done = round_through_bf16_avx2(out, in, n);
#else
  use_avx2(isa);
#endif
  map_portable(out + done, in + done, n - done, [](float x) { return round_through_bf16(x); });
}

void round_fp32_through_fp8_e4m3(float* out, const float* in, size_t n, Fp8Overflow overflow, ConvertIsa isa) {
  size_t done = 0;
#if GS_CONVERT_X86
  if (use_avx2(isa)) done = round_through_fp8_avx2<4, 3>(out, in, n, overflow);
#else
  use_avx2(isa);
#endif
  map_portable(out + done, in + done, n - done, [overflow](float x) { return round_through_fp8_e4m3(x, overflow); });
}

void round_fp32_through_fp8_e5m2(float* out, const float* in, size_t n, Fp8Overflow overflow, ConvertIsa isa) {
  size_t done = 0;
#if GS_CONVERT_X86
  if (use_avx2(isa)) done = round_through_fp8_avx2<5, 2>(out, in, n, overflow);
#else
  use_avx2(isa);
#endif
  map_portable(out + done, in + done, n - done, [overflow](float x) { return round_through_fp8_e5m2(x, overflow); });
}

void round_fp32_through(FloatFormat format, float* out, const float* in, size_t n) {
  switch (format) {
    case FloatFormat::kFp16: round_fp32_through_fp16(out, in, n); return;
    case FloatFormat::kBf16: round_fp32_through_bf16(out, in, n); return;
    case FloatFormat::kFp8E4M3: round_fp32_through_fp8_e4m3(out, in, n); return;
    case FloatFormat::kFp8E5M2: round_fp32_through_fp8_e5m2(out, in, n); return;
    case FloatFormat::kFp32: break;
  }
  if (out != in && n > 0) std::memmove(out, in, n * sizeof(float));
}

namespace {

enum class Store { kNone, kCopy, kAdd, kAddRound };

// Rounds in chunks (vector path) into a stack buffer, counts with integer compares on the bit patterns (a loop the
// compiler vectorizes), and stores: nothing, a copy, or out[i] += rounded (then out rounded again for kAddRound).
RoundingCounts round_and_count(FloatFormat format, float* out, const float* in, size_t n, Store store,
                               float multiplier = 1.0f) {
  RoundingCounts counts;
  constexpr size_t kChunk = 1024;
  float rounded[kChunk];
  uint32_t in_bits[kChunk];
  uint32_t r_bits[kChunk];
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t len = std::min(kChunk, n - start);
    round_fp32_through(format, rounded, in + start, len);
    std::memcpy(in_bits, in + start, len * sizeof(float));
    std::memcpy(r_bits, rounded, len * sizeof(float));
    uint32_t underflow = 0, nonfinite = 0;
    for (size_t i = 0; i < len; ++i) {
      const uint32_t x = in_bits[i] & 0x7fffffffu;
      const uint32_t r = r_bits[i] & 0x7fffffffu;
      underflow += static_cast<uint32_t>(x != 0u) & static_cast<uint32_t>(x < 0x7f800000u) &
                   static_cast<uint32_t>(r == 0u);
      nonfinite += static_cast<uint32_t>(r >= 0x7f800000u);
    }
    counts.underflow += underflow;
    counts.nonfinite += nonfinite;
    float* o = out + start;
    switch (store) {
      case Store::kNone: break;
      case Store::kCopy: std::memcpy(o, rounded, len * sizeof(float)); break;
      case Store::kAdd:
        if (multiplier == 1.0f) {
          for (size_t i = 0; i < len; ++i) o[i] += rounded[i];
        } else {
          for (size_t i = 0; i < len; ++i) o[i] += multiplier * rounded[i];
        }
        break;
      case Store::kAddRound: {
        // The accumulator holds multiplier x (a format value): add and round in that domain.
        const float inv = 1.0f / multiplier;
        for (size_t i = 0; i < len; ++i) o[i] = o[i] * inv + rounded[i];
        round_fp32_through(format, o, o, len);
        if (multiplier != 1.0f) {
          for (size_t i = 0; i < len; ++i) o[i] *= multiplier;
        }
        break;
      }
    }
  }
  return counts;
}

}  // namespace

RoundingCounts count_rounding(FloatFormat format, const float* in, size_t n) {
  return round_and_count(format, nullptr, in, n, Store::kNone);
}

RoundingCounts round_fp32_through_counted(FloatFormat format, float* out, const float* in, size_t n) {
  return round_and_count(format, out, in, n, Store::kCopy);
}

RoundingCounts accumulate_rounded(FloatFormat format, float* acc, const float* in, size_t n, bool acc_in_format,
                                  float multiplier) {
  return round_and_count(format, acc, in, n, acc_in_format ? Store::kAddRound : Store::kAdd, multiplier);
}

}  // namespace gs
