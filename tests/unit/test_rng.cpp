// Tests of kernels/rng.h: Philox4x32-10 known answers (Random123's tests/kat_vectors), the distributions built on it,
// and determinism of the fill helpers. A new draw helper gets a statistics or edge-case test here.
#include <gtest/gtest.h>

#include <Random123/philox.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/rng.h"

namespace gs {
namespace {

// Random123 tests/kat_vectors, the three "philox4x32 10" lines: counter[4] key[2] -> result[4].
struct Kat {
  uint32_t ctr[4];
  uint32_t key[2];
  uint32_t expected[4];
};

const Kat kKats[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

TEST(RngPhilox, KnownAnswersOfRandom123) {
  for (const Kat& k : kKats) {
    r123::Philox4x32 gen;
    r123::Philox4x32::ctr_type ctr = {{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}};
    r123::Philox4x32::key_type key = {{k.key[0], k.key[1]}};
    const auto r = gen(ctr, key);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r[i], k.expected[i]) << "word " << i;
  }
}

// philox_draw maps (seed, purpose, step, rank, index) onto key = (seed lo, seed hi), counter = (purpose, step, rank,
// index); the same vectors must come out through it.
TEST(RngPhilox, DrawUsesSeedAsKeyAndTupleAsCounter) {
  for (const Kat& k : kKats) {
    const uint64_t seed = (static_cast<uint64_t>(k.key[1]) << 32) | k.key[0];
    const Draw4 d = philox_draw(seed, static_cast<Purpose>(k.ctr[0]), k.ctr[1], k.ctr[2], k.ctr[3]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(d.v[i], k.expected[i]) << "word " << i;
  }
}

TEST(RngPhilox, PurposesAreIndependentStreams) {
  const Draw4 a = philox_draw(1, Purpose::kInit, 0, 0, 0);
  const Draw4 b = philox_draw(1, Purpose::kShuffle, 0, 0, 0);
  EXPECT_NE(a.v[0], b.v[0]);
}

TEST(RngNormal, MeanAndStdevOverManyDraws) {
  const int pairs = 50000;  // 1e5 normals
  double sum = 0.0, sum_sq = 0.0;
  for (int i = 0; i < pairs; ++i) {
    const Draw4 d = philox_draw(42, Purpose::kInit, 0, 0, static_cast<uint32_t>(i));
    float z0 = 0.0f, z1 = 0.0f;
    normal_pair(d.v[0], d.v[1], &z0, &z1);
    ASSERT_TRUE(std::isfinite(z0) && std::isfinite(z1));
    sum += z0 + z1;
    sum_sq += static_cast<double>(z0) * z0 + static_cast<double>(z1) * z1;
  }
  const double n = 2.0 * pairs;
  const double mean = sum / n;
  const double stdev = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.015);   // ~5 standard errors (1/sqrt(1e5) = 0.0032)
  EXPECT_NEAR(stdev, 1.0, 0.015);
}

TEST(RngNormal, ExtremeWordsStayFinite) {
  const uint32_t words[] = {0u, 1u, 0x80000000u, 0xfffffffeu, 0xffffffffu};
  for (uint32_t a : words) {
    for (uint32_t b : words) {
      float z0 = 0.0f, z1 = 0.0f;
      normal_pair(a, b, &z0, &z1);
      EXPECT_TRUE(std::isfinite(z0) && std::isfinite(z1)) << a << " " << b;
    }
  }
}

// Every one of the 2^24 values the function can see (the top 24 bits), including the extremes.
TEST(RngUniform, OpenIntervalNeverZeroOrOne) {
  EXPECT_GT(uniform_open01(0u), 0.0f);
  EXPECT_LT(uniform_open01(0xffffffffu), 1.0f) << "uniform_open01(0xffffffff) rounds up to 1.0f";
  int64_t bad = 0;
  for (uint32_t top = 0; top < (1u << 24); ++top) {
    const float u = uniform_open01(top << 8);
    if (!(u > 0.0f && u < 1.0f)) ++bad;
  }
  EXPECT_EQ(bad, 0) << "words whose uniform_open01 is 0 or 1";
}

TEST(RngUniform, FillUniformIsDeterministicAndInRange) {
  std::vector<float> a(1001), b(1001), c(1001);
  fill_uniform(a.data(), a.size(), -2.0f, 3.0f, 7, Purpose::kInit, 3, 1);
  fill_uniform(b.data(), b.size(), -2.0f, 3.0f, 7, Purpose::kInit, 3, 1);
  fill_uniform(c.data(), c.size(), -2.0f, 3.0f, 8, Purpose::kInit, 3, 1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double mean = 0.0;
  for (float v : a) {
    EXPECT_GE(v, -2.0f);
    EXPECT_LT(v, 3.0f);
    mean += v / static_cast<double>(a.size());
  }
  EXPECT_NEAR(mean, 0.5, 0.25);
  // Element i comes from draw index i/4, word i%4: a fill from index_base 1 is the same stream shifted by 4.
  std::vector<float> shifted(997);
  fill_uniform(shifted.data(), shifted.size(), -2.0f, 3.0f, 7, Purpose::kInit, 3, 1, 1);
  for (size_t i = 0; i < shifted.size(); ++i) ASSERT_EQ(shifted[i], a[i + 4]) << i;
}

TEST(RngNormal, FillNormalIsDeterministic) {
  std::vector<float> a(37), b(37);
  fill_normal(a.data(), a.size(), 5, Purpose::kTeacher, 0, 0);
  fill_normal(b.data(), b.size(), 5, Purpose::kTeacher, 0, 0);
  EXPECT_EQ(a, b);
  float z0 = 0.0f, z1 = 0.0f;
  const Draw4 d = philox_draw(5, Purpose::kTeacher, 0, 0, 0);
  normal_pair(d.v[0], d.v[1], &z0, &z1);
  EXPECT_EQ(a[0], z0);
  EXPECT_EQ(a[1], z1);
}

}  // namespace
}  // namespace gs
