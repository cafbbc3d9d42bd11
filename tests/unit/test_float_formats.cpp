// Number formats (kernels/float_formats.h, kernels/convert.h) against references built here from the formats' bit-field
// definitions (IEEE 754 binary16, bfloat16, OCP OFP8 E4M3/E5M2): exhaustive decode tables, round trips of every
// pattern, halfway cases, overflow rules, canonical NaNs, sums in a format (case BC05), and vector == portable path.
#include <gtest/gtest.h>

#include "tests/unit/cases.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/convert.h"
#include "kernels/float_formats.h"

namespace gs {
namespace {

// ---- Independent reference: a format as its bit-field definition ---------------------------------------------------

struct FormatSpec {
  int exp_bits;
  int man_bits;
  bool ieee_special;  // true: exponent all ones is inf (mantissa 0) or NaN; false (OCP E4M3): only S.1111.111 is NaN
};
constexpr FormatSpec kFp16Spec{5, 10, true};
constexpr FormatSpec kBf16Spec{8, 7, true};
constexpr FormatSpec kE4M3Spec{4, 3, false};
constexpr FormatSpec kE5M2Spec{5, 2, true};

uint32_t pattern_count(const FormatSpec& f) { return 1u << (1 + f.exp_bits + f.man_bits); }
uint32_t sign_bit(const FormatSpec& f) { return 1u << (f.exp_bits + f.man_bits); }

bool spec_is_nan(const FormatSpec& f, uint32_t p) {
  const uint32_t e = (p >> f.man_bits) & ((1u << f.exp_bits) - 1);
  const uint32_t m = p & ((1u << f.man_bits) - 1);
  const uint32_t e_max = (1u << f.exp_bits) - 1;
  const uint32_t m_max = (1u << f.man_bits) - 1;
  return f.ieee_special ? (e == e_max && m != 0) : (e == e_max && m == m_max);
}

// Value of a pattern by the definition: (-1)^S 2^(E-bias) (1 + M/2^m) for E > 0, (-1)^S 2^(1-bias) M/2^m for E = 0;
// IEEE-like formats: E all ones and M = 0 is infinity. Computed in double (exact for every format here).
double spec_value(const FormatSpec& f, uint32_t p) {
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const bool neg = (p & sign_bit(f)) != 0;
  const int e = static_cast<int>((p >> f.man_bits) & ((1u << f.exp_bits) - 1));
  const int m = static_cast<int>(p & ((1u << f.man_bits) - 1));
  double v;
  if (spec_is_nan(f, p)) return std::numeric_limits<double>::quiet_NaN();
  if (f.ieee_special && e == (1 << f.exp_bits) - 1) {
    v = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - bias - f.man_bits);
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.man_bits), e - bias);
  }
  return neg ? -v : v;
}

// The finite non-negative values of a format in increasing order with their patterns (pattern order = value order).
struct ValueTable {
  FormatSpec spec;
  std::vector<double> values;
  std::vector<uint32_t> patterns;
};

ValueTable value_table(const FormatSpec& f) {
  ValueTable t{f, {}, {}};
  for (uint32_t p = 0; p < sign_bit(f); ++p) {
    const double v = spec_value(f, p);
    if (std::isfinite(v)) {
      t.values.push_back(v);
      t.patterns.push_back(p);
    }
  }
  return t;
}

// Round-to-nearest-even of a finite or infinite double x into the format, by search in the table. Overflow: |x| at or
// beyond max + half an ulp of max rounds past max (a tie at exactly that point goes to the even neighbour: the
// inf pattern for IEEE-like formats, max itself for E4M3, whose max has an even mantissa 110); `past_max` is the
// pattern (without sign) given then. NaN is not handled here.
uint32_t spec_round(const ValueTable& t, double x, uint32_t past_max, bool past_max_signed) {
  const bool neg = std::signbit(x);
  const double a = std::fabs(x);
  const uint32_t sign = neg ? sign_bit(t.spec) : 0u;
  const size_t last = t.values.size() - 1;
  const double max = t.values[last];
  const double half_ulp_max = (max - t.values[last - 1]) / 2.0;
  const double threshold = max + half_ulp_max;
  const bool tie_goes_up = (t.patterns[last] & 1u) != 0;  // max odd -> the next pattern is the even one
  if (a > threshold || (a == threshold && tie_goes_up)) return past_max | (past_max_signed ? sign : 0u);
  if (a >= max) return sign | t.patterns[last];
  const size_t hi = static_cast<size_t>(std::upper_bound(t.values.begin(), t.values.end(), a) - t.values.begin());
  const size_t lo = hi - 1;  // values[lo] <= a < values[hi]
  const double d_lo = a - t.values[lo];
  const double d_hi = t.values[hi] - a;
  uint32_t p;
  if (d_lo < d_hi) {
    p = t.patterns[lo];
  } else if (d_hi < d_lo) {
    p = t.patterns[hi];
  } else {
    p = (t.patterns[lo] & 1u) == 0 ? t.patterns[lo] : t.patterns[hi];
  }
  return sign | p;
}

const ValueTable& fp16_table() {
  static const ValueTable t = value_table(kFp16Spec);
  return t;
}
const ValueTable& bf16_table() {
  static const ValueTable t = value_table(kBf16Spec);
  return t;
}
const ValueTable& e4m3_table() {
  static const ValueTable t = value_table(kE4M3Spec);
  return t;
}
const ValueTable& e5m2_table() {
  static const ValueTable t = value_table(kE5M2Spec);
  return t;
}

// References of each conversion (NaN inputs excluded by the callers).
uint32_t ref_fp16(double x) { return spec_round(fp16_table(), x, 0x7c00u, true); }
uint32_t ref_bf16(double x) { return spec_round(bf16_table(), x, 0x7f80u, true); }
uint32_t ref_e4m3(double x, Fp8Overflow o) {
  return o == Fp8Overflow::kSatFinite ? spec_round(e4m3_table(), x, 0x7eu, true) : spec_round(e4m3_table(), x, 0x7fu, false);
}
uint32_t ref_e5m2(double x, Fp8Overflow o) {
  return spec_round(e5m2_table(), x, o == Fp8Overflow::kSatFinite ? 0x7bu : 0x7cu, true);
}

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Random fp32 inputs weighted toward the interesting ranges: every bit pattern, plus values with exponents near the
// formats' ranges (subnormals, normals, overflow) and signs.
std::vector<float> random_inputs(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_int_distribution<int> exponent(-30, 20);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (i % 3 == 0) {
      v[i] = float_of(any_bits(gen));
    } else {
      const double m = mantissa(gen) * ((any_bits(gen) & 1u) ? -1.0 : 1.0);
      v[i] = static_cast<float>(std::ldexp(m, exponent(gen)));
    }
  }
  return v;
}

// Edge inputs: zeros, infinities, NaNs, boundaries of each format and their fp32 neighbours.
std::vector<float> edge_inputs() {
  std::vector<float> base = {0.0f, 65504.0f, 65519.996f, 65520.0f, 65536.0f, 448.0f, 464.0f, 480.0f, 57344.0f,
                             61440.0f, 61439.996f, 6.103515625e-05f, 5.960464477539063e-08f, 2.9802322387695312e-08f,
                             0.001953125f, 0.0009765625f, 0.015625f, 1.52587890625e-05f, 7.62939453125e-06f,
                             3.4028234663852886e38f, 1.1754943508222875e-38f, 1.0e-45f, 1.0f, 1.5f, 3.0f};
  std::vector<float> out;
  for (float b : base) {
    for (float x : {b, std::nextafter(b, 0.0f), std::nextafter(b, std::numeric_limits<float>::infinity())}) {
      out.push_back(x);
      out.push_back(-x);
    }
  }
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fffffffu, 0xff812345u, 0x7fa00000u}) {
    out.push_back(float_of(nan));
  }
  out.push_back(std::numeric_limits<float>::infinity());
  out.push_back(-std::numeric_limits<float>::infinity());
  return out;
}

// ---- Exhaustive tables ---------------------------------------------------------------------------------------------

TEST(Fp16, EveryPatternDecodesByDefinitionAndRoundTrips) {
  int nans = 0;
  for (uint32_t p = 0; p < pattern_count(kFp16Spec); ++p) {
    const auto h = static_cast<uint16_t>(p);
    const float x = fp16_to_fp32(h);
    if (spec_is_nan(kFp16Spec, p)) {
      ++nans;
      EXPECT_TRUE(std::isnan(x)) << p;
      EXPECT_EQ(fp32_to_fp16(x), 0x7fffu) << p;
      continue;
    }
    const double expected = spec_value(kFp16Spec, p);
    EXPECT_EQ(static_cast<double>(x), expected) << p;
    EXPECT_EQ(std::signbit(x), (p & 0x8000u) != 0) << p;
    EXPECT_EQ(fp32_to_fp16(x), p) << p;
  }
  EXPECT_EQ(nans, 2 * 1023);
}

TEST(Bf16, EveryPatternDecodesByDefinitionAndRoundTrips) {
  int nans = 0;
  for (uint32_t p = 0; p < pattern_count(kBf16Spec); ++p) {
    const auto b = static_cast<uint16_t>(p);
    const float x = bf16_to_fp32(b);
    if (spec_is_nan(kBf16Spec, p)) {
      ++nans;
      EXPECT_TRUE(std::isnan(x)) << p;
      EXPECT_EQ(fp32_to_bf16(x), 0x7fffu) << p;
      continue;
    }
    EXPECT_EQ(static_cast<double>(x), spec_value(kBf16Spec, p)) << p;
    EXPECT_EQ(std::signbit(x), (p & 0x8000u) != 0) << p;
    EXPECT_EQ(fp32_to_bf16(x), p) << p;
  }
  EXPECT_EQ(nans, 2 * 127);
}

TEST(Fp8E4M3, All256PatternsMatchTheOcpTable) {
  int nans = 0;
  for (uint32_t p = 0; p < 256; ++p) {
    const auto v = static_cast<uint8_t>(p);
    const float x = fp8_e4m3_to_fp32(v);
    if (spec_is_nan(kE4M3Spec, p)) {
      ++nans;
      EXPECT_TRUE(std::isnan(x)) << p;
      EXPECT_EQ(fp32_to_fp8_e4m3(x), 0x7fu);
      continue;
    }
    EXPECT_EQ(static_cast<double>(x), spec_value(kE4M3Spec, p)) << p;
    EXPECT_EQ(fp32_to_fp8_e4m3(x, Fp8Overflow::kSatFinite), p) << p;
    EXPECT_EQ(fp32_to_fp8_e4m3(x, Fp8Overflow::kNoSat), p) << p;
  }
  EXPECT_EQ(nans, 2);  // 0x7f and 0xff (OCP: S.1111.111)
  // Landmarks from the OCP spec's table: max normal 448 = S.1111.110, min normal 2^-6, min subnormal 2^-9.
  EXPECT_EQ(fp8_e4m3_to_fp32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_fp32(0x08), 0.015625f);
  EXPECT_EQ(fp8_e4m3_to_fp32(0x01), 0.001953125f);
  EXPECT_EQ(fp8_e4m3_to_fp32(0x78), 256.0f);  // exponent 1111 is a normal binade in E4M3
}

TEST(Fp8E5M2, All256PatternsMatchTheOcpTable) {
  int nans = 0;
  for (uint32_t p = 0; p < 256; ++p) {
    const auto v = static_cast<uint8_t>(p);
    const float x = fp8_e5m2_to_fp32(v);
    if (spec_is_nan(kE5M2Spec, p)) {
      ++nans;
      EXPECT_TRUE(std::isnan(x)) << p;
      EXPECT_EQ(fp32_to_fp8_e5m2(x), 0x7fu);
      continue;
    }
    EXPECT_EQ(static_cast<double>(x), spec_value(kE5M2Spec, p)) << p;
    EXPECT_EQ(fp32_to_fp8_e5m2(x), p) << p;
  }
  EXPECT_EQ(nans, 6);  // S.11111.{01,10,11}
  EXPECT_EQ(fp8_e5m2_to_fp32(0x7b), 57344.0f);
  EXPECT_EQ(fp8_e5m2_to_fp32(0x7c), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp8_e5m2_to_fp32(0x01), 1.52587890625e-05f);  // 2^-16
  // E5M2 is fp16 with the low 8 bits cut: every E5M2 value equals the fp16 pattern (v << 8).
  for (uint32_t p = 0; p < 256; ++p) {
    if (!spec_is_nan(kE5M2Spec, p)) {
      EXPECT_EQ(fp8_e5m2_to_fp32(static_cast<uint8_t>(p)), fp16_to_fp32(static_cast<uint16_t>(p << 8)));
    }
  }
}

// ---- Rounding ------------------------------------------------------------------------------------------------------

// Every midpoint between neighbouring finite values (exact in fp32: it has one bit more than the format) rounds to
// the neighbour with the even pattern, and its fp32 neighbours round to the nearer side.
template <class Encode>
void check_halfway_cases(const ValueTable& t, Encode encode) {
  for (size_t k = 0; k + 1 < t.values.size(); ++k) {
    const double mid = (t.values[k] + t.values[k + 1]) / 2.0;
    const auto mid_f = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(mid_f), mid);
    const uint32_t even = (t.patterns[k] & 1u) == 0 ? t.patterns[k] : t.patterns[k + 1];
    EXPECT_EQ(encode(mid_f), even) << "midpoint " << mid;
    EXPECT_EQ(encode(std::nextafter(mid_f, 0.0f)), t.patterns[k]) << mid;
    EXPECT_EQ(encode(std::nextafter(mid_f, std::numeric_limits<float>::infinity())), t.patterns[k + 1]) << mid;
    EXPECT_EQ(encode(-mid_f), even | sign_bit(t.spec)) << mid;
  }
}

TEST(Fp16, HalfwayCasesRoundToEven) {
  check_halfway_cases(fp16_table(), [](float x) { return static_cast<uint32_t>(fp32_to_fp16(x)); });
  EXPECT_EQ(fp32_to_fp16(2.9802322387695312e-08f), 0x0000u);  // 2^-25: half the min subnormal -> 0 (even)
  EXPECT_EQ(fp32_to_fp16(std::nextafter(2.9802322387695312e-08f, 1.0f)), 0x0001u);
  EXPECT_EQ(fp32_to_fp16(-1e-30f), 0x8000u);                    // underflow keeps the sign
  EXPECT_EQ(fp32_to_fp16(65519.996f), 0x7bffu);                 // just below max + half ulp
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00u);                   // tie -> even -> inf
  EXPECT_EQ(fp32_to_fp16(-1e10f), 0xfc00u);
  EXPECT_EQ(fp32_to_fp16(1.0f + 1.0f / 2048.0f), 0x3c00u);     // 1 + half ulp -> 1 (even)
  EXPECT_EQ(fp32_to_fp16(1.0f + 3.0f / 2048.0f), 0x3c02u);     // 1 + 3 half ulps -> 1 + 2 ulps (even)
}

TEST(Bf16, HalfwayCasesRoundToEven) {
  check_halfway_cases(bf16_table(), [](float x) { return static_cast<uint32_t>(fp32_to_bf16(x)); });
  EXPECT_EQ(fp32_to_bf16(3.4028234663852886e38f), 0x7f80u);  // FLT_MAX is past bf16's max + half ulp: inf
  EXPECT_EQ(fp32_to_bf16(1.0e-45f), 0x0000u);                // fp32 min subnormal rounds to 0 in bf16
  EXPECT_EQ(fp32_to_bf16(float_of(0x00008000u)), 0x0000u);   // half of bf16's min subnormal: tie -> 0
  EXPECT_EQ(fp32_to_bf16(float_of(0x00018000u)), 0x0002u);   // 1.5 min subnormals: tie -> 2 (even)
}

// TF32 (10 stored mantissa bits, fp32's exponent): ulp of 1 is 2^-10; halfway cases go to the even neighbour; the
// result keeps fp32's layout with the low 13 bits clear.
TEST(Tf32, RoundsToTenMantissaBitsHalfwayToEven) {
  EXPECT_EQ(round_through_tf32(1.0f + 0x1p-11f), 1.0f);                  // 1 + half ulp -> 1 (even)
  EXPECT_EQ(round_through_tf32(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);    // 1 + 3 half ulps -> 1 + 2 ulps (even)
  EXPECT_EQ(round_through_tf32(1.0f + 0x1p-11f + 0x1p-23f), 1.0f + 0x1p-10f);  // past half: up
  EXPECT_EQ(round_through_tf32(-(1.0f + 0x1p-11f + 0x1p-23f)), -(1.0f + 0x1p-10f));
  EXPECT_EQ(round_through_tf32(1.0f + 0x1p-10f), 1.0f + 0x1p-10f);       // representable: unchanged
  EXPECT_EQ(round_through_tf32(3.4028234663852886e38f), INFINITY);       // FLT_MAX is past TF32's max + half ulp
  EXPECT_EQ(round_through_tf32(-INFINITY), -INFINITY);
  EXPECT_EQ(fp32_bits(round_through_tf32(NAN)), kFp32CanonicalNan);
  EXPECT_EQ(fp32_bits(round_through_tf32(float_of(0x00001000u))), 0u);   // half of TF32's min subnormal: tie -> 0
  EXPECT_EQ(fp32_bits(round_through_tf32(float_of(0x00003000u))), 0x00004000u);  // 1.5 of them: tie -> 2 (even)
  // Every result has its low 13 bits clear and is within half a TF32 ulp (2^-11 relative) of the input.
  uint32_t u = 0x3f800001u;
  for (int i = 0; i < 100000; ++i, u = u * 1664525u + 1013904223u) {
    const float x = float_of(u & 0x7f7fffffu);  // finite, non-negative
    const float r = round_through_tf32(x);
    EXPECT_EQ(fp32_bits(r) & 0x1fffu, 0u);
    if (x >= 1e-37f && r < INFINITY) {
      ASSERT_LE(std::fabs(static_cast<double>(r) - x), 0x1p-11 * x) << x;
    }
  }
}

TEST(Fp8E4M3, HalfwayCasesAndSaturation) {
  check_halfway_cases(e4m3_table(), [](float x) { return static_cast<uint32_t>(fp32_to_fp8_e4m3(x)); });
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fp32_to_fp8_e4m3(464.0f), 0x7eu);  // tie between 448 (even) and 480 (not representable) -> 448
  EXPECT_EQ(fp32_to_fp8_e4m3(std::nextafter(464.0f, inf)), 0x7eu);
  EXPECT_EQ(fp32_to_fp8_e4m3(std::nextafter(464.0f, inf), Fp8Overflow::kNoSat), 0x7fu);
  EXPECT_EQ(fp32_to_fp8_e4m3(464.0f, Fp8Overflow::kNoSat), 0x7eu);
  EXPECT_EQ(fp32_to_fp8_e4m3(1e6f), 0x7eu);
  EXPECT_EQ(fp32_to_fp8_e4m3(-1e6f), 0xfeu);
  EXPECT_EQ(fp32_to_fp8_e4m3(inf), 0x7eu);
  EXPECT_EQ(fp32_to_fp8_e4m3(-inf), 0xfeu);
  EXPECT_EQ(fp32_to_fp8_e4m3(inf, Fp8Overflow::kNoSat), 0x7fu);
  EXPECT_EQ(fp32_to_fp8_e4m3(-inf, Fp8Overflow::kNoSat), 0x7fu);
  EXPECT_EQ(fp32_to_fp8_e4m3(0.0009765625f), 0x00u);  // 2^-10: half the min subnormal -> 0
  EXPECT_EQ(fp32_to_fp8_e4m3(0.0029296875f), 0x02u);  // 1.5 x 2^-9 -> 2 x 2^-9 (even)
}

TEST(Fp8E5M2, HalfwayCasesAndOverflow) {
  check_halfway_cases(e5m2_table(), [](float x) { return static_cast<uint32_t>(fp32_to_fp8_e5m2(x)); });
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fp32_to_fp8_e5m2(61440.0f), 0x7cu);  // tie between 57344 (odd mantissa 11) and 65536 -> inf
  EXPECT_EQ(fp32_to_fp8_e5m2(std::nextafter(61440.0f, 0.0f)), 0x7bu);
  EXPECT_EQ(fp32_to_fp8_e5m2(-61440.0f), 0xfcu);
  EXPECT_EQ(fp32_to_fp8_e5m2(61440.0f, Fp8Overflow::kSatFinite), 0x7bu);
  EXPECT_EQ(fp32_to_fp8_e5m2(-inf, Fp8Overflow::kSatFinite), 0xfbu);
  EXPECT_EQ(fp32_to_fp8_e5m2(inf), 0x7cu);
  EXPECT_EQ(fp32_to_fp8_e5m2(7.62939453125e-06f), 0x00u);  // 2^-17: half the min subnormal -> 0
}

TEST(FloatFormats, NanBecomesTheCanonicalNanOfEachFormat) {
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fffffffu, 0xff812345u, 0x7fa00000u}) {
    const float x = float_of(nan);
    EXPECT_EQ(fp32_to_fp16(x), 0x7fffu);
    EXPECT_EQ(fp32_to_bf16(x), 0x7fffu);
    EXPECT_EQ(fp32_to_fp8_e4m3(x), 0x7fu);
    EXPECT_EQ(fp32_to_fp8_e4m3(x, Fp8Overflow::kNoSat), 0x7fu);
    EXPECT_EQ(fp32_to_fp8_e5m2(x), 0x7fu);
    EXPECT_EQ(fp32_to_fp8_e5m2(x, Fp8Overflow::kSatFinite), 0x7fu);
    EXPECT_TRUE(std::isnan(round_through_fp16(x)));
    EXPECT_TRUE(std::isnan(round_through_bf16(x)));
  }
}

// Random fp32 inputs against the search reference for every conversion.
TEST(FloatFormats, RandomInputsMatchTheReference) {
  const std::vector<float> inputs = random_inputs(300000, 7);
  for (float x : inputs) {
    if (std::isnan(x)) continue;
    const double d = x;
    ASSERT_EQ(fp32_to_fp16(x), ref_fp16(d)) << x;
    ASSERT_EQ(fp32_to_bf16(x), ref_bf16(d)) << x;
    ASSERT_EQ(fp32_to_fp8_e4m3(x), ref_e4m3(d, Fp8Overflow::kSatFinite)) << x;
    ASSERT_EQ(fp32_to_fp8_e4m3(x, Fp8Overflow::kNoSat), ref_e4m3(d, Fp8Overflow::kNoSat)) << x;
    ASSERT_EQ(fp32_to_fp8_e5m2(x), ref_e5m2(d, Fp8Overflow::kNoSat)) << x;
    ASSERT_EQ(fp32_to_fp8_e5m2(x, Fp8Overflow::kSatFinite), ref_e5m2(d, Fp8Overflow::kSatFinite)) << x;
  }
}

// ---- Sums in a format ------------------------------------------------------------------------------------------------

// fp32 add then round == the exactly rounded sum (double rounding is innocuous): every fp8 pair exhaustively, random
// fp16 pairs (exact sums in double: fp16 spans 40 binary orders, double holds 53 bits).
TEST(FloatFormats, AddInFormatIsTheCorrectlyRoundedSum) {
  for (uint32_t a = 0; a < 256; ++a) {
    for (uint32_t b = 0; b < 256; ++b) {
      const auto pa = static_cast<uint8_t>(a);
      const auto pb = static_cast<uint8_t>(b);
      if (!spec_is_nan(kE4M3Spec, a) && !spec_is_nan(kE4M3Spec, b)) {
        const double exact = spec_value(kE4M3Spec, a) + spec_value(kE4M3Spec, b);
        ASSERT_EQ(fp8_e4m3_add(pa, pb), ref_e4m3(exact, Fp8Overflow::kSatFinite)) << a << " " << b;
      }
      if (!spec_is_nan(kE5M2Spec, a) && !spec_is_nan(kE5M2Spec, b)) {
        const double exact = spec_value(kE5M2Spec, a) + spec_value(kE5M2Spec, b);
        if (std::isnan(exact)) continue;  // inf + -inf
        ASSERT_EQ(fp8_e5m2_add(pa, pb), ref_e5m2(exact, Fp8Overflow::kNoSat)) << a << " " << b;
      }
    }
  }
  std::mt19937 gen(11);
  std::uniform_int_distribution<uint32_t> pattern(0, 0xffff);
  int checked = 0;
  while (checked < 200000) {
    const uint32_t a = pattern(gen);
    const uint32_t b = pattern(gen);
    if (spec_is_nan(kFp16Spec, a) || spec_is_nan(kFp16Spec, b)) continue;
    const double exact = spec_value(kFp16Spec, a) + spec_value(kFp16Spec, b);
    if (std::isnan(exact)) continue;
    ASSERT_EQ(fp16_add(static_cast<uint16_t>(a), static_cast<uint16_t>(b)), ref_fp16(exact)) << a << " " << b;
    ++checked;
  }
}

float case_number(const nlohmann::json& v) {
  if (v.is_string() && v.get<std::string>() == "inf") return std::numeric_limits<float>::infinity();
  return v.get<float>();
}

// Case BC05: N = 8 ranks sum fp16 gradients with fp16 adds in rank order; dividing by N only after overflows, only
// before underflows, split (2 before, 4 after) keeps both. Here the arithmetic of fp16_add alone.
TEST(FloatFormats, CaseBC05Fp16RankOrderSums) {
  const nlohmann::json c = load_case("BC05");
  ASSERT_FALSE(c.is_null()) << "case BC05 not found";
  const int n = c["input"]["N"].get<int>();
  const auto grads = c["input"]["per_rank_fp16_grad"];
  auto sum_in_fp16 = [n](float g, float pre, float post) {
    const uint16_t x = fp32_to_fp16(g / pre);  // each rank's value, divided before sending (exact by powers of 2)
    uint16_t s = x;
    for (int r = 1; r < n; ++r) s = fp16_add(s, x);
    return fp16_to_fp32(fp32_to_fp16(fp16_to_fp32(s) / post));
  };
  for (size_t i = 0; i < grads.size(); ++i) {
    const float g = grads[i].get<float>();
    EXPECT_EQ(sum_in_fp16(g, 1.0f, static_cast<float>(n)), case_number(c["wrong_value"]["post_divide_only"][i]));
    EXPECT_EQ(sum_in_fp16(g, static_cast<float>(n), 1.0f), case_number(c["wrong_value"]["pre_divide_only"][i]));
    EXPECT_EQ(sum_in_fp16(g, 2.0f, 4.0f), case_number(c["expected"]["split_pre2_post4"][i]));
  }
}

// ---- Array conversions: vector path == portable path == element definition -------------------------------------

std::vector<float> array_inputs() {
  std::vector<float> v = random_inputs(100003, 5);  // odd length: vector blocks and a scalar tail
  const std::vector<float> edges = edge_inputs();
  v.insert(v.begin(), edges.begin(), edges.end());
  // Every fp16 and every bf16 value and their midpoints, as fp32.
  for (uint32_t p = 0; p < 0x10000; ++p) {
    v.push_back(fp16_to_fp32(static_cast<uint16_t>(p)));
    v.push_back(bf16_to_fp32(static_cast<uint16_t>(p)));
    v.push_back(float_of((p << 16) | 0x8000u));
  }
  return v;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(Convert, ArrayPathsGiveTheElementDefinitionsBits) {
  const std::vector<float> in = array_inputs();
  const size_t n = in.size();
  std::vector<ConvertIsa> isas = {ConvertIsa::kPortable};
  if (convert_avx2_available()) isas.push_back(ConvertIsa::kAvx2);
  // Expected bits from the GS_HD element functions.
  std::vector<uint16_t> e16(n), eb16(n);
  std::vector<uint8_t> e43s(n), e43n(n), e52n(n), e52s(n);
  std::vector<float> r16(n), rb16(n), r43s(n), r43n(n), r52n(n), r52s(n);
  for (size_t i = 0; i < n; ++i) {
    e16[i] = fp32_to_fp16(in[i]);
    eb16[i] = fp32_to_bf16(in[i]);
    e43s[i] = fp32_to_fp8_e4m3(in[i], Fp8Overflow::kSatFinite);
    e43n[i] = fp32_to_fp8_e4m3(in[i], Fp8Overflow::kNoSat);
    e52n[i] = fp32_to_fp8_e5m2(in[i], Fp8Overflow::kNoSat);
    e52s[i] = fp32_to_fp8_e5m2(in[i], Fp8Overflow::kSatFinite);
    r16[i] = round_through_fp16(in[i]);
    rb16[i] = round_through_bf16(in[i]);
    r43s[i] = round_through_fp8_e4m3(in[i], Fp8Overflow::kSatFinite);
    r43n[i] = round_through_fp8_e4m3(in[i], Fp8Overflow::kNoSat);
    r52n[i] = round_through_fp8_e5m2(in[i], Fp8Overflow::kNoSat);
    r52s[i] = round_through_fp8_e5m2(in[i], Fp8Overflow::kSatFinite);
  }
  for (ConvertIsa isa : isas) {
    SCOPED_TRACE(isa == ConvertIsa::kAvx2 ? "avx2" : "portable");
    std::vector<uint16_t> o16(n);
    std::vector<uint8_t> o8(n);
    std::vector<float> of(n);
    convert_fp32_to_fp16(o16.data(), in.data(), n, isa);
    EXPECT_TRUE(same_bits(o16, e16));
    convert_fp16_to_fp32(of.data(), o16.data(), n, isa);
    EXPECT_TRUE(same_bits(of, r16));
    convert_fp32_to_bf16(o16.data(), in.data(), n, isa);
    EXPECT_TRUE(same_bits(o16, eb16));
    convert_bf16_to_fp32(of.data(), o16.data(), n, isa);
    EXPECT_TRUE(same_bits(of, rb16));
    convert_fp32_to_fp8_e4m3(o8.data(), in.data(), n, Fp8Overflow::kSatFinite, isa);
    EXPECT_TRUE(same_bits(o8, e43s));
    convert_fp8_e4m3_to_fp32(of.data(), o8.data(), n, isa);
    EXPECT_TRUE(same_bits(of, r43s));
    convert_fp32_to_fp8_e4m3(o8.data(), in.data(), n, Fp8Overflow::kNoSat, isa);
    EXPECT_TRUE(same_bits(o8, e43n));
    convert_fp32_to_fp8_e5m2(o8.data(), in.data(), n, Fp8Overflow::kNoSat, isa);
    EXPECT_TRUE(same_bits(o8, e52n));
    convert_fp8_e5m2_to_fp32(of.data(), o8.data(), n, isa);
    EXPECT_TRUE(same_bits(of, r52n));
    convert_fp32_to_fp8_e5m2(o8.data(), in.data(), n, Fp8Overflow::kSatFinite, isa);
    EXPECT_TRUE(same_bits(o8, e52s));
    round_fp32_through_fp16(of.data(), in.data(), n, isa);
    EXPECT_TRUE(same_bits(of, r16));
    round_fp32_through_bf16(of.data(), in.data(), n, isa);
    EXPECT_TRUE(same_bits(of, rb16));
    round_fp32_through_fp8_e4m3(of.data(), in.data(), n, Fp8Overflow::kSatFinite, isa);
    EXPECT_TRUE(same_bits(of, r43s));
    round_fp32_through_fp8_e4m3(of.data(), in.data(), n, Fp8Overflow::kNoSat, isa);
    EXPECT_TRUE(same_bits(of, r43n));
    round_fp32_through_fp8_e5m2(of.data(), in.data(), n, Fp8Overflow::kNoSat, isa);
    EXPECT_TRUE(same_bits(of, r52n));
    round_fp32_through_fp8_e5m2(of.data(), in.data(), n, Fp8Overflow::kSatFinite, isa);
    EXPECT_TRUE(same_bits(of, r52s));
    // In place.
    of = in;
    round_fp32_through_bf16(of.data(), of.data(), n, isa);
    EXPECT_TRUE(same_bits(of, rb16));
  }
  if (!convert_avx2_available()) GTEST_SKIP() << "no AVX2/F16C on this CPU: only the portable path was checked";
}

TEST(Convert, CountRoundingCountsUnderflowAndNonFinite) {
  // fp16: 1e-8 underflows (< 2^-25), 3e-8 does not (> 2^-25 rounds to 2^-24); 1e5 overflows to inf; 0 is not counted.
  const std::vector<float> in = {1e-8f, -1e-8f, 3e-8f, 0.0f, 1e5f, 1.0f, std::numeric_limits<float>::quiet_NaN()};
  const RoundingCounts fp16 = count_rounding(FloatFormat::kFp16, in.data(), in.size());
  EXPECT_EQ(fp16.underflow, 2u);
  EXPECT_EQ(fp16.nonfinite, 2u);
  const RoundingCounts bf16 = count_rounding(FloatFormat::kBf16, in.data(), in.size());
  EXPECT_EQ(bf16.underflow, 0u);
  EXPECT_EQ(bf16.nonfinite, 1u);
  const RoundingCounts e4m3 = count_rounding(FloatFormat::kFp8E4M3, in.data(), in.size());
  EXPECT_EQ(e4m3.underflow, 3u);  // 3e-8 < 2^-10 as well
  EXPECT_EQ(e4m3.nonfinite, 1u);  // 1e5 saturates to 448

  // acc += fp16(in): 1e-8 adds 0, 3e-8 adds 2^-24; in the format, 1 + 2^-24 rounds back to 1 (half ulp is 2^-11).
  std::vector<float> acc = {0.5f, 0.0f, 1.0f};
  const std::vector<float> g = {1e-8f, 3e-8f, 3e-8f};
  const RoundingCounts r = accumulate_rounded(FloatFormat::kFp16, acc.data(), g.data(), 3, false);
  EXPECT_EQ(r.underflow, 1u);
  EXPECT_EQ(acc, (std::vector<float>{0.5f, 5.960464477539063e-08f, 1.0f + 5.960464477539063e-08f}));
  std::vector<float> acc16 = {0.5f, 0.0f, 1.0f};
  accumulate_rounded(FloatFormat::kFp16, acc16.data(), g.data(), 3, true);
  EXPECT_EQ(acc16, (std::vector<float>{0.5f, 5.960464477539063e-08f, 1.0f}));
}

}  // namespace
}  // namespace gs
