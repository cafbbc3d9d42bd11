// Tests of the compressor array ops (kernels/compress.h) against brute-force references, chi-square uniformity, the
// papers' mean/variance formulas with bounds derived from them, bit-pack round trips, and cases BC10/11/13/14.
// A new op gets a reference-based test here (also run against the portable build: gradsweep_compress_portable_tests).
#include <gtest/gtest.h>

#include "tests/unit/cases.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/compress.h"
#include "kernels/compress_math.h"

namespace gs {
namespace {

using json = nlohmann::json;

// Deterministic test inputs (not the code under test's generator path): normals from fill_normal.
std::vector<float> normals(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  fill_normal(v.data(), n, seed, Purpose::kInit, 0, 0);
  return v;
}

// Inputs with many exact ties: values in {-3..3} * 0.5 (including -0.0 and +0.0).
std::vector<float> tied(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  fill_uniform(v.data(), n, 0.0f, 1.0f, seed, Purpose::kInit, 1, 0);
  for (float& x : v) {
    const int level = static_cast<int>(x * 7.0f) - 3;  // -3..3
    x = level == 0 ? (x < 0.5f ? -0.0f : 0.0f) : 0.5f * static_cast<float>(level);
  }
  return v;
}

// Chi-square quantile at upper tail 1e-6 (Wilson-Hilferty: q = df (1 - 2/(9 df) + z sqrt(2/(9 df)))^3, z = 4.753).
double chi2_bound(int df) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + 4.753 * std::sqrt(a), 3);
}

constexpr double kZ = 5.0;  // |z| bound of a mean test (two-sided tail 5.7e-7 per coordinate)

// ---- Draws ----------------------------------------------------------------------------------------------------------

TEST(CompressDraws, BatchesEqualPhiloxDrawWordForWord) {
  // Both the portable and the SIMD path against Random123's Philox through compress_draw (and one Random123
  // counter spelled out, so the keying itself is pinned).
  for (DrawIsa simd : {DrawIsa::kPortable, DrawIsa::kAvx2, DrawIsa::kAvx512, DrawIsa::kBest}) {
    for (uint32_t block0 : {0u, 64u, 12345u, (1u << 28) - 64u}) {
      uint32_t words[kDrawBatchWords];
      compress_draw_blocks(words, 0x123456789abcdefull, compress_stream(7, 3, 2), CompressDraw::kTernGrad, block0,
                           simd);
      for (int b = 0; b < kDrawBatchWords / 4; ++b) {
        const Draw4 d = compress_draw(0x123456789abcdefull, compress_stream(7, 3, 2), CompressDraw::kTernGrad,
                                      block0 + static_cast<uint32_t>(b));
        for (int j = 0; j < 4; ++j)
          ASSERT_EQ(words[4 * b + j], d.v[j]) << static_cast<int>(simd) << " " << block0 << " " << b;
      }
    }
  }
  const Draw4 d = compress_draw(5, compress_stream(9, 1, 4), CompressDraw::kQsgd, 11);
  const Draw4 e = philox_draw(5, Purpose::kCompress, 9, (1u << 16) | 4u, (3u << 28) | 11u);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(d.v[j], e.v[j]);
}

// ---- Top-k ----------------------------------------------------------------------------------------------------------

// Brute force: indices ordered by |x| descending then index ascending (std::stable_sort), first k, ascending.
std::vector<uint32_t> topk_reference(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  order.resize(std::min(k, x.size()));
  std::sort(order.begin(), order.end());
  return order;
}

TEST(CompressTopk, MatchesBruteForceWithTiesLowestIndexFirst) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{100003}}) {
    for (int kind = 0; kind < 2; ++kind) {
      const std::vector<float> x = kind == 0 ? normals(n, 11 + n) : tied(n, 12 + n);
      for (size_t k : {size_t{0}, size_t{1}, n / 100, n / 3, n / 2, n - (n > 0), n, n + 5}) {
        std::vector<uint32_t> idx(std::min(k, n) + 1, 0xdeadbeef);
        const size_t got = topk_select(x.data(), n, k, idx.data());
        const std::vector<uint32_t> want = topk_reference(x, k);
        ASSERT_EQ(got, want.size()) << "n " << n << " k " << k;
        EXPECT_TRUE(std::equal(want.begin(), want.end(), idx.begin())) << "n " << n << " k " << k << " kind " << kind;
        EXPECT_EQ(idx[got], 0xdeadbeefu) << "wrote past k";
      }
    }
  }
}

TEST(CompressTopk, LargeInputAndExtremeValues) {
  std::vector<float> x = normals(1 << 20, 5);
  x[17] = std::numeric_limits<float>::infinity();
  x[99] = -std::numeric_limits<float>::infinity();
  x[500] = std::numeric_limits<float>::quiet_NaN();
  const size_t k = 10486;
  std::vector<uint32_t> idx(k);
  ASSERT_EQ(topk_select(x.data(), x.size(), k, idx.data()), k);
  // NaN ranks above inf (documented); replace it by a huge value for the brute-force reference.
  std::vector<float> ref = x;
  ref[500] = std::numeric_limits<float>::max();
  EXPECT_EQ(idx, topk_reference(ref, k));
  // Top-3 of this input are exactly the NaN and the two infinities, ascending.
  std::vector<uint32_t> top3(3);
  topk_select(x.data(), x.size(), 3, top3.data());
  EXPECT_EQ(top3, (std::vector<uint32_t>{17, 99, 500}));
}

TEST(CompressTopk, CaseBC10RanksByMagnitude) {
  json c = load_case("BC10");
  ASSERT_FALSE(c.is_null());
  std::vector<float> g;
  for (double v : c["input"]["g_each_step"]) g.push_back(static_cast<float>(v));
  std::vector<uint32_t> idx(2);
  ASSERT_EQ(topk_select(g.data(), g.size(), c["input"]["k"].get<size_t>(), idx.data()), 2u);
  EXPECT_EQ(idx, c["expected"]["step1"]["indices"].get<std::vector<uint32_t>>());
}

// ---- Threshold and sampled threshold --------------------------------------------------------------------------------

TEST(CompressThreshold, SelectsMagnitudesAtOrAboveTau) {
  const std::vector<float> x = tied(5000, 3);
  for (float tau : {0.0f, 0.5f, 1.0f, 1.5f, 2.0f}) {
    std::vector<uint32_t> idx(x.size());
    const size_t got = threshold_select(x.data(), x.size(), tau, idx.data());
    std::vector<uint32_t> want;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] != 0.0f && std::fabs(x[i]) >= tau) want.push_back(static_cast<uint32_t>(i));  // zeros never sent
    ASSERT_EQ(got, want.size());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), idx.begin()));
  }
  // tau = 1.5 on {-1.5..1.5} in steps of 0.5: exactly the +-1.5 values.
  const float small[] = {1.5f, -1.5f, 1.0f, -0.0f, 1.4999999f};
  uint32_t idx[5];
  ASSERT_EQ(threshold_select(small, 5, 1.5f, idx), 2u);
  EXPECT_EQ(idx[0], 0u);
  EXPECT_EQ(idx[1], 1u);
  // tau 0 selects the nonzeros (a zero carries nothing), an all-zero input selects nothing; NaN and inf are always
  // selected (so a non-finite gradient shows in the reduced gradient), a subnormal is a nonzero.
  const float odd[] = {0.0f, -0.0f, 1e-45f, std::numeric_limits<float>::quiet_NaN(),
                       -std::numeric_limits<float>::infinity(), 0.25f};
  uint32_t oi[6];
  ASSERT_EQ(threshold_select(odd, 6, 0.0f, oi), 4u);
  EXPECT_EQ(oi[0], 2u);
  EXPECT_EQ(oi[1], 3u);
  ASSERT_EQ(threshold_select(odd, 6, 1.0f, oi), 2u);
  EXPECT_EQ(oi[0], 3u);
  EXPECT_EQ(oi[1], 4u);
  const std::vector<float> zero(40, 0.0f);
  std::vector<uint32_t> zi(40);
  EXPECT_EQ(threshold_select(zero.data(), 40, 0.0f, zi.data()), 0u);
}

TEST(CompressSampledThreshold, AllSamplesGiveTheExactQuantile) {
  const std::vector<float> x = normals(10007, 21);
  std::vector<float> mags(x.size());
  for (size_t i = 0; i < x.size(); ++i) mags[i] = std::fabs(x[i]);
  std::sort(mags.begin(), mags.end(), std::greater<float>());
  for (double ratio : {0.001, 0.01, 0.1, 0.5, 1.0}) {
    const size_t k = static_cast<size_t>(std::ceil(ratio * x.size()));
    EXPECT_EQ(sampled_threshold(x.data(), x.size(), ratio, 1, 2, x.size()), mags[k - 1]) << ratio;
  }
  EXPECT_EQ(sampled_threshold(x.data(), 0, 0.1, 1, 2, 10), std::numeric_limits<float>::infinity());
}

TEST(CompressSampledThreshold, EstimateWithinTheSampleQuantileError) {
  // |x| uniform on [0, 1) (a permuted grid), so the true top-1% threshold is 0.99. The sample quantile of m samples
  // has standard deviation sqrt(q (1 - q) / m) / density = sqrt(0.01 * 0.99 / m) (density 1); stratification only
  // lowers it.
  const size_t n = 1 << 20, m = 10000;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t j = (i * 2654435761u) % n;  // a permutation of the grid (odd multiplier, n a power of 2)
    x[i] = (static_cast<float>(j) + 0.5f) / static_cast<float>(n) * (i % 2 ? -1.0f : 1.0f);
  }
  const double sd = std::sqrt(0.01 * 0.99 / static_cast<double>(m));
  for (uint64_t stream = 0; stream < 5; ++stream) {
    const float t = sampled_threshold(x.data(), n, 0.01, 7, stream, m);
    EXPECT_NEAR(t, 0.99, kZ * sd) << stream;
    EXPECT_EQ(t, sampled_threshold(x.data(), n, 0.01, 7, stream, m)) << "deterministic";
  }
}

// ---- Random-k -------------------------------------------------------------------------------------------------------

TEST(CompressRandomk, DistinctAscendingAndClamped) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{100003}}) {
    for (size_t k : {size_t{0}, size_t{1}, n / 10, n / 2, n, n + 3}) {
      std::vector<uint32_t> idx(std::min(k, n) + 1, 0xdeadbeef);
      const size_t got = randomk_indices(idx.data(), n, k, 9, n * 31 + k);
      ASSERT_EQ(got, std::min(k, n));
      for (size_t i = 0; i < got; ++i) ASSERT_LT(idx[i], n);
      for (size_t i = 1; i < got; ++i) ASSERT_LT(idx[i - 1], idx[i]) << "strictly ascending = distinct";
      EXPECT_EQ(idx[got], 0xdeadbeefu);
    }
  }
  // Same key -> same indices (shared_indices); another stream -> another set.
  std::vector<uint32_t> a(50), b(50), c(50);
  randomk_indices(a.data(), 1000, 50, 4, 8);
  randomk_indices(b.data(), 1000, 50, 4, 8);
  randomk_indices(c.data(), 1000, 50, 4, 9);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(CompressRandomk, IndexFrequenciesAreUniform) {
  // Each index is chosen with probability k/n; chi-square of the counts over T draws against T k / n, df = n - 1.
  const size_t n = 50, k = 7, trials = 20000;
  std::vector<double> count(n, 0.0);
  std::vector<uint32_t> idx(k);
  for (size_t t = 0; t < trials; ++t) {
    randomk_indices(idx.data(), n, k, 1234, t);
    for (uint32_t i : idx) count[i] += 1.0;
  }
  const double expected = static_cast<double>(trials * k) / n;
  double chi2 = 0.0;
  for (double c : count) chi2 += (c - expected) * (c - expected) / expected;
  // The counts of one draw are dependent (exactly k chosen), which scales the statistic by (n - k) / (n - 1) < 1, so
  // the df = n - 1 bound is conservative.
  EXPECT_LT(chi2, chi2_bound(static_cast<int>(n - 1)));
  EXPECT_GT(chi2, 5.0) << "suspiciously perfect";
}

TEST(CompressRandomk, CaseBC14AllSubsetsEquallyLikelyAndScaledMeanUnbiased) {
  json c = load_case("BC14");
  ASSERT_FALSE(c.is_null());
  const std::vector<double> x = c["input"]["x"].get<std::vector<double>>();
  const size_t d = c["input"]["d"], k = c["input"]["k"];
  const size_t trials = 60000;
  std::vector<double> subset_count(16, 0.0), sum(d, 0.0);
  double sq_err = 0.0;
  std::vector<uint32_t> idx(k);
  for (size_t t = 0; t < trials; ++t) {
    randomk_indices(idx.data(), d, k, 77, t);
    unsigned mask = 0;
    std::vector<double> scaled(d, 0.0);
    for (uint32_t i : idx) {
      mask |= 1u << i;
      scaled[i] = x[i] * static_cast<double>(d) / static_cast<double>(k);
    }
    subset_count[mask] += 1.0;
    for (size_t i = 0; i < d; ++i) {
      sum[i] += scaled[i];
      sq_err += (scaled[i] - x[i]) * (scaled[i] - x[i]);
    }
  }
  // "all 6 equally likely": chi-square over the 6 subsets, df = 5.
  double chi2 = 0.0;
  int subsets = 0;
  for (unsigned mask = 0; mask < 16; ++mask) {
    if (__builtin_popcount(mask) != static_cast<int>(k)) {
      EXPECT_EQ(subset_count[mask], 0.0);
      continue;
    }
    ++subsets;
    const double e = trials / 6.0;
    chi2 += (subset_count[mask] - e) * (subset_count[mask] - e) / e;
  }
  EXPECT_EQ(subsets, 6);
  EXPECT_LT(chi2, chi2_bound(5));
  // E_scaled = x: coordinate i has variance x_i^2 (d/k - 1) (case derivation), so the mean of T draws is within
  // kZ * sqrt(var / T).
  const std::vector<double> e_scaled = c["expected"]["E_scaled"].get<std::vector<double>>();
  for (size_t i = 0; i < d; ++i) {
    const double var = x[i] * x[i] * (static_cast<double>(d) / k - 1.0);
    EXPECT_NEAR(sum[i] / trials, e_scaled[i], kZ * std::sqrt(var / trials)) << i;
  }
  // Total variance 30: the squared error ||scaled - x||^2 takes one value per subset pair (x_a^2 + x_b^2 ...); its
  // standard deviation over the 6 subsets bounds the error of the mean.
  const double var_total = c["expected"]["variance_scaled"].get<double>();
  // ||s - x||^2 for subset {a, b} = sum over kept (x_i)^2 (2-1)^2 + sum over dropped x_i^2 = ||x||^2 = 30 always.
  EXPECT_NEAR(sq_err / trials, var_total, 1e-9);
}

// ---- Random-k: the parallel form of Floyd's algorithm (compress_math.h; the CUDA random-k's element math) --------

__extension__ typedef unsigned __int128 U128;  // the test's own multiply-shift (not uniform_below's 32-bit halves)

// Floyd's algorithm transcribed from Bentley & Floyd (CACM 1987) with a std::set, for 0 < k < n: step t (j = n - k + t)
// takes the 64-bit word of words 2 (t % 2) (low) and 2 (t % 2) + 1 (high) of draw (kRandomK, block t / 2), draws
// floor(w (j + 1) / 2^64) by a 128-bit product, and inserts it, or j when it is present. The set, ascending.
std::vector<uint32_t> floyd_by_set(size_t n, size_t k, uint64_t seed, uint64_t stream) {
  std::set<uint64_t> s;
  for (size_t t = 0; t < k; ++t) {
    const Draw4 d = compress_draw(seed, stream, CompressDraw::kRandomK, static_cast<uint32_t>(t / 2));
    const uint64_t w = uint64_t{d.v[2 * (t % 2) + 1]} << 32 | d.v[2 * (t % 2)];
    const uint64_t j = n - k + t;
    const auto pick = static_cast<uint64_t>((static_cast<U128>(w) * (j + 1)) >> 64);
    if (!s.insert(pick).second) {
      EXPECT_TRUE(s.insert(j).second) << "Floyd: j is never taken before step j";
    }
  }
  return {s.begin(), s.end()};
}

// How the parallel form resolved the steps: by a duplicate pick, through a chain (pick = j of a collided step), and
// through a chain of two or more links (so a test shows it exercised each case).
struct ChainCounts {
  size_t dup = 0, via_chain = 0, deep = 0;
};

// The CUDA random-k's phases (kernels/cuda_kernels.cu RandomkPickOp, the stable radix sort, RandomkDupOp,
// RandomkSetOp, the bitmap read-out) on the host over compress_math.h's GS_HD functions, each phase's threads in
// reverse order (a phase's result must not depend on its threads' order). The sort is std::sort of (pick, step)
// pairs: the order a stable sort by pick gives. For 0 < k < n.
std::vector<uint32_t> randomk_parallel_form(size_t n, size_t k, uint64_t seed, uint64_t stream, ChainCounts& counts) {
  std::vector<uint32_t> picks(k, 0xdeadbeef);
  for (size_t t = k; t-- > 0;) picks[t] = static_cast<uint32_t>(randomk_pick(seed, stream, n, k, t));
  std::vector<std::pair<uint32_t, uint32_t>> pairs(k);
  for (size_t t = 0; t < k; ++t) pairs[t] = {picks[t], static_cast<uint32_t>(t)};
  std::sort(pairs.begin(), pairs.end());
  std::vector<uint32_t> sorted(k);
  for (size_t i = 0; i < k; ++i) sorted[i] = pairs[i].first;
  std::vector<uint8_t> dup(k, 0xab);  // poison: each entry must be written once
  for (size_t i = k; i-- > 0;) dup[pairs[i].second] = randomk_sorted_dup(sorted.data(), i) ? 1 : 0;
  std::vector<uint64_t> bitmap((n + 63) / 64, 0);
  const uint64_t first = n - k;
  for (size_t t = k; t-- > 0;) {
    EXPECT_LE(dup[t], 1);
    bitmap[picks[t] / 64] |= uint64_t{1} << (picks[t] % 64);
    if (!randomk_collided(t, first, picks.data(), dup.data())) continue;
    bitmap[(first + t) / 64] |= uint64_t{1} << ((first + t) % 64);
    if (dup[t]) {
      ++counts.dup;
    } else {
      ++counts.via_chain;
      if (!dup[picks[t] - first]) ++counts.deep;
    }
  }
  std::vector<uint32_t> out;
  for (size_t i = 0; i < n; ++i)
    if (bitmap[i / 64] >> (i % 64) & 1u) out.push_back(static_cast<uint32_t>(i));
  return out;
}

TEST(CompressRandomk, CollisionChainsByHand) {
  // n = 10, k = 5 (first = 5, j_t = 5 + t), picks 3, 3, 5, 6, 8. The sequential walk: S = {3}; 3 is taken, so
  // j_1 = 6: {3, 6}; 5 is free: {3, 5, 6}; 6 is taken, j_3 = 8: {3, 5, 6, 8}; 8 is taken, j_4 = 9: {3, 5, 6, 8, 9}.
  // So steps 1, 3, 4 collided: step 1 by a duplicate, step 3 through step 1 (6 = j_1), step 4 through step 3 then
  // step 1 (two links); step 2's pick 5 = j_0 is free because step 0 did not collide.
  uint32_t picks[] = {3, 3, 5, 6, 8};
  const uint32_t sorted[] = {3, 3, 5, 6, 8};
  const uint8_t dup[] = {0, 1, 0, 0, 0};
  for (uint64_t i = 0; i < 5; ++i) EXPECT_EQ(randomk_sorted_dup(sorted, i), i == 1) << i;
  const bool collided[] = {false, true, false, true, true};
  for (uint64_t t = 0; t < 5; ++t) EXPECT_EQ(randomk_collided(t, 5, picks, dup), collided[t]) << t;
  // Step 4 drawing 9 = j_4 itself (never taken before step 4): no collision; drawing 4 (< first, no duplicate): none.
  picks[4] = 9;
  EXPECT_FALSE(randomk_collided(4, 5, picks, dup));
  picks[4] = 4;
  EXPECT_FALSE(randomk_collided(4, 5, picks, dup));
}

TEST(CompressRandomk, ParallelFormSelectsTheSequentialWalksSet) {
  ChainCounts counts;
  size_t cases = 0;
  for (size_t n : {size_t{2}, size_t{3}, size_t{5}, size_t{17}, size_t{63}, size_t{64}, size_t{65}, size_t{127},
                   size_t{1000}, size_t{4099}, size_t{100003}}) {
    for (size_t k : {size_t{1}, size_t{2}, n / 64 + 1, n / 2, n - n / 16, n - 2, n - 1}) {
      if (k == 0 || k >= n) continue;
      for (uint64_t seed : {uint64_t{0}, uint64_t{9}, uint64_t{0x9E3779B97F4A7C15}}) {
        for (uint64_t stream : {uint64_t{0}, compress_stream(3, 1, 2), compress_stream(0xffffffffu, 65535, 65535)}) {
          if (n > 5000 && (seed != 9 || stream != 0)) continue;  // the large n once per k
          std::vector<uint32_t> host(k);
          ASSERT_EQ(randomk_indices(host.data(), n, k, seed, stream), k);
          const std::vector<uint32_t> parallel = randomk_parallel_form(n, k, seed, stream, counts);
          const std::string what = "n " + std::to_string(n) + " k " + std::to_string(k) + " seed " +
                                   std::to_string(seed) + " stream " + std::to_string(stream);
          ASSERT_EQ(parallel, host) << what;
          ASSERT_EQ(floyd_by_set(n, k, seed, stream), host) << what;
          ++cases;
        }
      }
    }
  }
  // One larger draw, half of a million (n not a multiple of 64).
  std::vector<uint32_t> host(500001);
  ASSERT_EQ(randomk_indices(host.data(), 1000003, 500001, 5, 77), 500001u);
  EXPECT_EQ(randomk_parallel_form(1000003, 500001, 5, 77, counts), host);
  EXPECT_GT(cases, 300u);
  // Every kind of resolution happened many times (k close to n makes long chains).
  EXPECT_GT(counts.dup, 1000u);
  EXPECT_GT(counts.via_chain, 1000u);
  EXPECT_GT(counts.deep, 100u);
}

// ---- QSGD -----------------------------------------------------------------------------------------------------------

// Decodes one encoding into a fresh vector.
std::vector<float> qsgd_round(const std::vector<float>& p, int s, uint64_t seed, uint64_t stream) {
  std::vector<uint8_t> wire(qsgd_encoded_bytes(p.size(), s));
  qsgd_encode(wire.data(), p.data(), p.size(), s, seed, stream);
  std::vector<float> out(p.size(), 0.0f);
  qsgd_decode_add(out.data(), wire.data(), p.size(), s);
  return out;
}

TEST(CompressQsgd, LevelBitsAndWireBytes) {
  for (int s : {1, 2, 3, 4, 7, 8, 15, 16, 127, 255, 256}) {
    const int bits = static_cast<int>(std::ceil(std::log2(static_cast<double>(s) + 1.0)));
    EXPECT_EQ(qsgd_level_bits(s), bits) << s;
    EXPECT_EQ(qsgd_encoded_bytes(1001, s), 4 + (1001 * static_cast<size_t>(bits + 1) + 7) / 8) << s;
  }
  EXPECT_EQ(qsgd_encoded_bytes(2, 4), 5u);  // norm + 2 values x (3 level bits + sign) = 1 byte
}

TEST(CompressQsgd, CaseBC13LevelChoice) {
  json c = load_case("BC13");
  ASSERT_FALSE(c.is_null());
  const std::vector<double> v = c["input"]["v"].get<std::vector<double>>();
  const int s = c["input"]["s"];
  const float norm = static_cast<float>(std::hypot(v[0], v[1]));
  const float scale = static_cast<float>(s / static_cast<double>(norm));
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t l = c["expected"]["l"][i];
    const double p_up = c["expected"]["p_up"][i];
    // Exact level choice over every one of the 2^23 values of u: the fraction that rounds up is p_up, to the
    // resolution of u (2^-23) plus the float rounding of r = |v| s / norm (one ulp of 2.4 or 3.2, below 2^-21).
    size_t up = 0;
    for (uint32_t w = 0; w < (1u << 23); ++w) {
      const uint32_t got = qsgd_level(static_cast<float>(v[i]), scale, uniform_open01(w << 9), s);
      ASSERT_TRUE(got == l || got == l + 1) << got;
      up += got == l + 1;
    }
    EXPECT_NEAR(static_cast<double>(up) / (1u << 23), p_up, std::ldexp(1.0, -21)) << i;
    // The two outcomes decode to the case's values exactly (norm/s = 1.25 is exact).
    const double out_hi = c["expected"]["outcomes"][i][0][1], out_lo = c["expected"]["outcomes"][i][1][1];
    EXPECT_EQ(qsgd_decode(qsgd_code(1.0f, l + 1), norm / s), static_cast<float>(out_hi));
    EXPECT_EQ(qsgd_decode(qsgd_code(1.0f, l), norm / s), static_cast<float>(out_lo));
  }
}

TEST(CompressQsgd, CaseBC13MonteCarloMeanAndVariance) {
  json c = load_case("BC13");
  ASSERT_FALSE(c.is_null());
  const std::vector<float> p = {static_cast<float>(c["input"]["v"][0].get<double>()),
                                static_cast<float>(c["input"]["v"][1].get<double>())};
  const int s = c["input"]["s"];
  const size_t trials = 100000;
  std::vector<double> sum(2, 0.0);
  double sq = 0.0;
  for (size_t t = 0; t < trials; ++t) {
    const std::vector<float> q = qsgd_round(p, s, 5, t);
    for (size_t i = 0; i < 2; ++i) {
      const double o0 = c["expected"]["outcomes"][i][0][1], o1 = c["expected"]["outcomes"][i][1][1];
      ASSERT_TRUE(q[i] == static_cast<float>(o0) || q[i] == static_cast<float>(o1)) << q[i];
      sum[i] += q[i];
      sq += (q[i] - p[i]) * (q[i] - p[i]);
    }
  }
  // Per-coordinate variance unit^2 p_up (1 - p_up) (case: total 0.625); mean within kZ standard errors.
  const double unit = 5.0 / s;
  double var_total = 0.0, fourth = 0.0;
  for (size_t i = 0; i < 2; ++i) {
    const double f = c["expected"]["p_up"][i];
    const double var = unit * unit * f * (1 - f);
    var_total += var;
    // Two-point distribution: E[(X - mu)^4] = unit^4 f (1 - f) ((1 - f)^3 + f^3).
    fourth += std::pow(unit, 4) * f * (1 - f) * (std::pow(1 - f, 3) + std::pow(f, 3)) - var * var;
    EXPECT_NEAR(sum[i] / trials, c["expected"]["E"][i].get<double>(), kZ * std::sqrt(var / trials)) << i;
  }
  EXPECT_NEAR(var_total, c["expected"]["variance"].get<double>(), 1e-12);
  EXPECT_NEAR(sq / trials, var_total, kZ * std::sqrt(fourth / trials));
}

TEST(CompressQsgd, RandomVectorUnbiasedWithThePapersVariance) {
  const size_t n = 257, trials = 20000;
  const int s = 8;
  const std::vector<float> p = normals(n, 42);
  double norm2 = 0.0;
  for (float v : p) norm2 += static_cast<double>(v) * v;
  const float norm = static_cast<float>(std::sqrt(norm2));
  const double unit = static_cast<double>(norm) / s;
  std::vector<double> sum(n, 0.0);
  double sq = 0.0;
  for (size_t t = 0; t < trials; ++t) {
    const std::vector<float> q = qsgd_round(p, s, 6, t);
    for (size_t i = 0; i < n; ++i) {
      sum[i] += q[i];
      sq += (static_cast<double>(q[i]) - p[i]) * (static_cast<double>(q[i]) - p[i]);
    }
  }
  double var_total = 0.0, fourth = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double r = std::fabs(p[i]) / unit;
    const double f = r - std::floor(r);
    const double var = unit * unit * f * (1 - f);  // Alistarh et al. Lemma 3.1's per-coordinate variance
    var_total += var;
    fourth += std::pow(unit, 4) * f * (1 - f) * (std::pow(1 - f, 3) + std::pow(f, 3)) - var * var;
    // Mean within kZ standard errors (plus the float rounding of the decode, 1e-6 relative).
    EXPECT_NEAR(sum[i] / trials, p[i], kZ * std::sqrt(var / trials) + 1e-6 * std::fabs(p[i])) << i;
  }
  EXPECT_NEAR(sq / trials, var_total, kZ * std::sqrt(fourth / trials) + 1e-6 * var_total);
  // The paper's bound: E||Q(v) - v||^2 <= min(n / s^2, sqrt(n) / s) ||v||^2.
  EXPECT_LE(var_total, std::min(n / double(s * s), std::sqrt(double(n)) / s) * norm2);
}

TEST(CompressQsgd, WireMatchesAReferenceEncoding) {
  // Reference: the norm, then per value the code (level << 1 | sign) with u from compress_draw, packed bit by bit.
  for (int s : {1, 3, 4, 255}) {
    for (size_t n : {size_t{1}, size_t{13}, size_t{64}, size_t{1000}}) {
      const std::vector<float> p = normals(n, 100 + n);
      double norm2 = 0.0;
      for (float v : p) norm2 += static_cast<double>(v) * v;
      const float norm = static_cast<float>(std::sqrt(norm2));
      const float scale = static_cast<float>(s / static_cast<double>(norm));
      const int width = static_cast<int>(std::ceil(std::log2(s + 1.0))) + 1;
      std::vector<uint8_t> want(4 + (n * width + 7) / 8, 0);
      std::memcpy(want.data(), &norm, 4);
      for (size_t i = 0; i < n; ++i) {
        const Draw4 d = compress_draw(3, 4, CompressDraw::kQsgd, static_cast<uint32_t>(i / 4));
        const float u = (static_cast<float>(d.v[i % 4] >> 9) + 0.5f) * std::ldexp(1.0f, -23);
        uint32_t level = static_cast<uint32_t>(std::floor(std::fabs(p[i]) * scale + u));
        level = std::min<uint32_t>(level, s);
        const uint32_t code = level << 1 | (p[i] < 0 ? 1u : 0u);
        for (int b = 0; b < width; ++b)
          if (code >> b & 1u) want[4 + (i * width + b) / 8] |= static_cast<uint8_t>(1u << ((i * width + b) % 8));
      }
      std::vector<uint8_t> got(want.size(), 0xff);
      qsgd_encode(got.data(), p.data(), n, s, 3, 4);
      EXPECT_EQ(got, want) << "s " << s << " n " << n;
      // Decode: sign * level * norm / s.
      std::vector<float> out(n, 1.0f);
      qsgd_decode_add(out.data(), got.data(), n, s);
      for (size_t i = 0; i < n; ++i) {
        uint32_t code = 0;
        for (int b = 0; b < width; ++b) code |= ((want[4 + (i * width + b) / 8] >> ((i * width + b) % 8)) & 1u) << b;
        const float v = static_cast<float>(code >> 1) * (norm / static_cast<float>(s));
        ASSERT_EQ(out[i], 1.0f + ((code & 1u) ? -v : v)) << i;
      }
    }
  }
}

TEST(CompressQsgd, ZeroVectorAndOverflowedNorm) {
  const std::vector<float> zero(10, 0.0f);
  for (float v : qsgd_round(zero, 4, 1, 1)) EXPECT_EQ(v, 0.0f);
  std::vector<float> big(4, 3e38f);  // ||p|| overflows float: inf norm decodes to NaN (0 * inf), not to silent zeros
  for (float v : qsgd_round(big, 4, 1, 1)) EXPECT_TRUE(std::isnan(v));
}

// qsgd_sum_squares' documented order (compress_math.h), transcribed with literal sizes: per chunk of 1024 values 16
// float lanes (value i of the chunk to lane i mod 16), the lanes added in double; 256 strided partials of the chunk
// sums, each from 0.0, added in order from 0.0; then the tail's double squares in order. rotate and reverse give
// wrong orders, for tests that show an input tells them apart: chunk c into partial (c + rotate) mod 256, the
// partials added last first.
double strided_norm_reference(const std::vector<float>& p, size_t rotate = 0, bool reverse = false) {
  const size_t n = p.size(), chunks = n / 1024;
  std::vector<double> chunk(chunks);
  for (size_t c = 0; c < chunks; ++c) {
    float lane[16] = {};
    for (size_t i = 0; i < 1024; ++i) {
      const float v = p[c * 1024 + i];
      lane[i % 16] = lane[i % 16] + v * v;
    }
    double sum = 0.0;
    for (float l : lane) sum += static_cast<double>(l);
    chunk[c] = sum;
  }
  std::vector<double> partial(256, 0.0);
  for (size_t c = 0; c < chunks; ++c) partial[(c + rotate) % 256] += chunk[c];
  double total = 0.0;
  for (size_t q = 0; q < 256; ++q) total += partial[reverse ? 255 - q : q];
  for (size_t i = chunks * 1024; i < n; ++i) total += static_cast<double>(p[i]) * p[i];
  return total;
}

TEST(CompressQsgd, NormSumsTheChunksInStridedPartials) {
  uint64_t got_bits = 0, want_bits = 0;
  for (size_t n : {size_t{0}, size_t{1}, size_t{1023}, size_t{1024}, size_t{1025}, size_t{256 * 1024},
                   size_t{257 * 1024 + 3}, size_t{700 * 1024 + 999}}) {
    const std::vector<float> p = normals(n, 40 + n);
    const double got = qsgd_sum_squares(p.data(), n), want = strided_norm_reference(p);
    std::memcpy(&got_bits, &got, 8);
    std::memcpy(&want_bits, &want, 8);
    EXPECT_EQ(got_bits, want_bits) << "n " << n;
    std::vector<uint8_t> wire(qsgd_encoded_bytes(n, 4));
    qsgd_encode(wire.data(), p.data(), n, 4, 1, 2);
    float norm;
    std::memcpy(&norm, wire.data(), 4);
    EXPECT_EQ(norm, static_cast<float>(std::sqrt(want))) << "n " << n;
  }
  // An order the sum can see: 1025 chunks and a tail of 77. Chunk 0 holds 2^13 (square 2^26, 64 per lane: 2^32 per
  // lane, 2^36 per chunk), the others 2^-14 (chunk sum 2^-18, a quarter of an ulp of 2^36: lost when added to it).
  // In chunk order every small sum is lost: 2^36. In the strided order partial 0 (chunks 0, 256, ..., 1024) is 2^36,
  // partials 1..255 are 4 x 2^-18 = 2^-16 (one ulp of 2^36) each, exactly kept: 2^36 + 255 x 2^-16. The tail's
  // squares (2^-28) are lost.
  std::vector<float> p(1025 * 1024 + 77, std::ldexp(1.0f, -14));
  std::fill(p.begin(), p.begin() + 1024, std::ldexp(1.0f, 13));
  const double want = std::ldexp(1.0, 36) + 255.0 * std::ldexp(1.0, -16);
  EXPECT_EQ(qsgd_sum_squares(p.data(), p.size()), want);
  EXPECT_NE(want, std::ldexp(1.0, 36));
  EXPECT_EQ(strided_norm_reference(p), want);
}

// An input where the order of the chunk sums shows: 700 chunks and a tail of normals scaled per chunk by 2^e_c,
// e_c in [-30, 20] by a fixed rule, so the chunk sums span about 2^-50 to 2^50 and the additions round. The documented
// order equals qsgd_sum_squares' bits; chunk c into partial (c + 1) mod 256, or the partials added last first, give
// other bits on this input (checked, so the case tells those orders apart).
TEST(CompressQsgd, NormOrderShowsOnChunksOfManyMagnitudes) {
  const size_t chunks = 700, n = chunks * 1024 + 333;
  std::vector<float> p = normals(n, 77);
  for (size_t i = 0; i < n; ++i) p[i] = std::ldexp(p[i], static_cast<int>((i / 1024 * 37 + 11) % 51) - 30);
  const double want = strided_norm_reference(p);
  EXPECT_EQ(qsgd_sum_squares(p.data(), n), want);
  EXPECT_NE(strided_norm_reference(p, 1, false), want);
  EXPECT_NE(strided_norm_reference(p, 0, true), want);
}

// ---- TernGrad -------------------------------------------------------------------------------------------------------

TEST(CompressTernGrad, UnbiasedWithBernoulliVariance) {
  const size_t n = 301, trials = 20000;  // one full 256-value chunk and a partial one
  std::vector<float> p = normals(n, 8);
  p[5] = 0.0f;
  float scale = 0.0f;
  for (float v : p) scale = std::max(scale, std::fabs(v));
  ASSERT_EQ(terngrad_encoded_bytes(n), 4 + 76u);  // ceil(301 / 4)
  std::vector<uint8_t> wire(terngrad_encoded_bytes(n));
  std::vector<double> sum(n, 0.0);
  double sq = 0.0;
  for (size_t t = 0; t < trials; ++t) {
    terngrad_encode(wire.data(), p.data(), n, 2, t);
    std::vector<float> q(n, 0.0f);
    terngrad_decode_add(q.data(), wire.data(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(q[i] == 0.0f || q[i] == (p[i] < 0 ? -scale : scale)) << q[i];
      sum[i] += q[i];
      sq += (static_cast<double>(q[i]) - p[i]) * (static_cast<double>(q[i]) - p[i]);
    }
  }
  double var_total = 0.0, fourth = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double a = std::fabs(p[i]), f = a / scale;
    const double var = a * (scale - a);  // Bernoulli(|p|/s) times s: s^2 f (1 - f)
    var_total += var;
    fourth += std::pow(scale, 4) * f * (1 - f) * (std::pow(1 - f, 3) + std::pow(f, 3)) - var * var;
    EXPECT_NEAR(sum[i] / trials, p[i], kZ * std::sqrt(var / trials) + 1e-6 * scale) << i;
  }
  EXPECT_NEAR(sq / trials, var_total, kZ * std::sqrt(fourth / trials));
  EXPECT_EQ(sum[5], 0.0) << "a zero is never sent";
}

TEST(CompressTernGrad, ZerosAndNonFiniteScale) {
  // All zeros: scale 0, every value decodes to exactly 0 (odd n exercises the partial last byte).
  const std::vector<float> zero(7, 0.0f);
  std::vector<uint8_t> wire(terngrad_encoded_bytes(7), 0xff);
  terngrad_encode(wire.data(), zero.data(), 7, 1, 1);
  std::vector<float> out(7, 0.5f);
  terngrad_decode_add(out.data(), wire.data(), 7);
  for (float v : out) EXPECT_EQ(v, 0.5f);
  // An inf in the input: scale inf, and every decoded value NaN (0 * inf), so the overflow is visible downstream.
  std::vector<float> p = {1.0f, std::numeric_limits<float>::infinity(), -2.0f, 0.0f, 3.0f};
  std::vector<uint8_t> w2(terngrad_encoded_bytes(p.size()));
  terngrad_encode(w2.data(), p.data(), p.size(), 1, 1);
  std::vector<float> o2(p.size(), 0.0f);
  terngrad_decode_add(o2.data(), w2.data(), p.size());
  for (size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(std::isnan(o2[i]) || std::isinf(o2[i])) << i;
  EXPECT_TRUE(std::isnan(o2[3])) << "a zero decodes to 0 * inf";
}

// ---- signSGD, majority vote, 1-bit (ternary: sign(0) = 0) ----------------------------------------------------------

// Reference decoding of value i of a message, bit by bit from the layout documented in compress.h.
struct SignRef {
  uint32_t neg, zero;
};
SignRef sign_bits_at(const uint8_t* msg, size_t header, size_t n, size_t i) {
  uint32_t zeros;
  std::memcpy(&zeros, msg + header - 4, 4);
  const size_t plane = (n + 7) / 8;
  return {(msg[header + i / 8] >> (i % 8)) & 1u, zeros ? (msg[header + plane + i / 8] >> (i % 8)) & 1u : 0u};
}

TEST(CompressSign, TernaryRoundTripScaleAndHonestBytes) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{1023}, size_t{1024}, size_t{1025},
                   size_t{5001}}) {
    for (bool with_zeros : {false, true}) {
      std::vector<float> p = normals(n, 30 + n);
      size_t zeros = 0;
      if (with_zeros && n > 3) {
        p[0] = 0.0f;
        p[1] = -0.0f;
        p[2] = 1e-45f;  // the smallest subnormal: not zero, it sends +
        p[n - 1] = 0.0f;
        zeros = 3;
      }
      std::vector<uint8_t> msg(sign_encoded_bytes(n, n) + 1, 0xee);
      ASSERT_EQ(sign_encoded_bytes(n, n), 8 + 2 * ((n + 7) / 8));
      const size_t bytes = sign_encode(msg.data(), p.data(), n);
      // Honest bytes: one plane without zeros, two with.
      EXPECT_EQ(bytes, 8 + (zeros ? 2 : 1) * ((n + 7) / 8)) << n;
      uint32_t zc;
      std::memcpy(&zc, msg.data() + 4, 4);
      EXPECT_EQ(zc, zeros) << n;
      float scale;
      std::memcpy(&scale, msg.data(), 4);
      double abs_sum = 0.0;
      for (float v : p) abs_sum += std::fabs(v);
      EXPECT_NEAR(scale, n ? abs_sum / n : 0.0, 1e-6 * (n ? abs_sum / n : 1.0));
      for (size_t i = 0; i < n; ++i) {
        const SignRef r = sign_bits_at(msg.data(), 8, n, i);
        ASSERT_EQ(r.neg, p[i] < 0 ? 1u : 0u) << i;
        ASSERT_EQ(r.zero, p[i] == 0 ? 1u : 0u) << i;
      }
      if (n % 8) {
        EXPECT_EQ(msg[8 + n / 8] >> (n % 8), 0) << "unused bits are 0";
      }
      EXPECT_EQ(msg[sign_encoded_bytes(n, n)], 0xee) << "wrote past the end";
      std::vector<float> out(n, 0.25f);
      sign_decode_add(out.data(), msg.data(), n);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(out[i], p[i] == 0 ? 0.25f : (p[i] < 0 ? 0.25f - scale : 0.25f + scale)) << i;
    }
  }
}

TEST(CompressSign, ZeroAllZeroAndNonFiniteInputs) {
  // An exact zero decodes to 0 (the old 1-bit code sent it as +scale); an all-zero bucket decodes to zeros.
  const float p[] = {2.0f, 0.0f, -4.0f, -0.0f};
  std::vector<uint8_t> msg(sign_encoded_bytes(4, 4));
  sign_encode(msg.data(), p, 4);
  std::vector<float> out(4, 0.0f);
  sign_decode_add(out.data(), msg.data(), 4);
  EXPECT_EQ(out, (std::vector<float>{1.5f, 0.0f, -1.5f, 0.0f}));  // scale = (2 + 4) / 4
  const std::vector<float> zero(9, 0.0f);
  std::vector<uint8_t> zmsg(sign_encoded_bytes(9, 9));
  EXPECT_EQ(sign_encode(zmsg.data(), zero.data(), 9), 8u + 2 * 2);
  std::vector<float> zout(9, 0.0f);
  sign_decode_add(zout.data(), zmsg.data(), 9);
  for (float v : zout) EXPECT_EQ(v, 0.0f);
  // NaN or inf anywhere: every decoded value is non-finite (zeros too: 0 * scale).
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    const float q[] = {1.0f, bad, 0.0f, -1.0f};
    sign_encode(msg.data(), q, 4);
    std::vector<float> o(4, 0.0f);
    sign_decode_add(o.data(), msg.data(), 4);
    for (float v : o) EXPECT_FALSE(std::isfinite(v)) << bad;
  }
}

TEST(CompressSign, CaseBC11ErrorFeedbackSignSgd) {
  // p = g + e; sent = mean|p| sign(p); e = p - sent, with the kernels doing the compression.
  json c = load_case("BC11");
  ASSERT_FALSE(c.is_null());
  const std::vector<float> g = c["input"]["g_each_step"].get<std::vector<float>>();
  const size_t d = g.size();
  std::vector<float> e(d, 0.0f);
  for (size_t step = 0; step < c["input"]["steps"].get<size_t>(); ++step) {
    std::vector<float> p(d);
    for (size_t i = 0; i < d; ++i) p[i] = g[i] + e[i];
    std::vector<uint8_t> msg(sign_encoded_bytes(d, d));
    sign_encode(msg.data(), p.data(), d);
    std::vector<float> sent(d, 0.0f);
    sign_decode_add(sent.data(), msg.data(), d);
    for (size_t i = 0; i < d; ++i) {
      EXPECT_EQ(sent[i], c["expected"]["sent"][step][i].get<float>()) << step << " " << i;
      e[i] = p[i] - sent[i];
    }
  }
}

TEST(CompressSign, MajorityVoteTiesAndZerosThatDoNotVote) {
  // Rank r's values are normals with a pattern of exact zeros; the reference counts +, - and zero votes.
  const size_t n = 2100;
  for (int ranks : {1, 2, 3, 4, 5, 8}) {
    std::vector<std::vector<float>> p(ranks, std::vector<float>(n));
    std::vector<std::vector<uint8_t>> msgs(ranks, std::vector<uint8_t>(sign_encoded_bytes(n, n)));
    std::vector<const uint8_t*> ptrs;
    for (int r = 0; r < ranks; ++r) {
      p[r] = normals(n, 500 + r);
      if (r % 2 == 1)
        for (size_t i = r; i < n; i += 5) p[r][i] = 0.0f;  // odd ranks have zeros
      sign_encode(msgs[r].data(), p[r].data(), n);
      ptrs.push_back(msgs[r].data());
    }
    std::vector<float> out(n, 7.0f);
    sign_vote(out.data(), ptrs.data(), ranks, n);
    size_t ties = 0;
    for (size_t i = 0; i < n; ++i) {
      int votes = 0;
      for (int r = 0; r < ranks; ++r) votes += p[r][i] < 0 ? -1 : (p[r][i] > 0 ? 1 : 0);
      ASSERT_EQ(out[i], votes > 0 ? 1.0f : (votes < 0 ? -1.0f : 0.0f)) << ranks << " " << i;
      ties += votes == 0;
    }
    if (ranks >= 2) {
      EXPECT_GT(ties, 0u) << "zeros not voting (or an even split) give sign(0) = 0 somewhere";
    }
  }
  // A rank with nothing to say does not outvote the others: ranks {0, 0, -1} vote -1 (with 1-bit codes the two
  // zeros sent + and won 2 to 1); {0, 0} is a tie, 0.
  {
    const float z[] = {0.0f}, m[] = {-1.0f};
    std::vector<std::vector<uint8_t>> b(3, std::vector<uint8_t>(sign_encoded_bytes(1, 1)));
    sign_encode(b[0].data(), z, 1);
    sign_encode(b[1].data(), z, 1);
    sign_encode(b[2].data(), m, 1);
    const uint8_t* three[] = {b[0].data(), b[1].data(), b[2].data()};
    float o = 7.0f;
    sign_vote(&o, three, 3, 1);
    EXPECT_EQ(o, -1.0f);
    sign_vote(&o, three, 2, 1);
    EXPECT_EQ(o, 0.0f);
  }
  // 300 ranks (the wide-counter path): value i negative on ranks r < (i % 301), zero on the last (i % 7) ranks, so
  // the vote compares neg = i % 301 with pos = 300 - neg - zeros (zeros taken from the positive ranks' end).
  {
    const size_t m = 1500;
    const int many = 300;
    std::vector<std::vector<uint8_t>> b(many, std::vector<uint8_t>(sign_encoded_bytes(m, m)));
    std::vector<const uint8_t*> ptrs;
    for (int r = 0; r < many; ++r) {
      std::vector<float> v(m);
      for (size_t i = 0; i < m; ++i) {
        const size_t neg = i % 301, zeros = std::min<size_t>(i % 7, many - neg);
        v[i] = static_cast<size_t>(r) < neg ? -1.0f : (static_cast<size_t>(r) >= many - zeros ? 0.0f : 1.0f);
      }
      sign_encode(b[r].data(), v.data(), m);
      ptrs.push_back(b[r].data());
    }
    std::vector<float> out(m);
    sign_vote(out.data(), ptrs.data(), many, m);
    for (size_t i = 0; i < m; ++i) {
      const long neg = static_cast<long>(i % 301);
      const long zeros = std::min<long>(static_cast<long>(i % 7), many - neg);
      const long pos = many - neg - zeros;
      ASSERT_EQ(out[i], pos > neg ? 1.0f : (pos < neg ? -1.0f : 0.0f)) << i;
    }
  }
}

TEST(CompressOnebit, GroupMeansZerosAndRoundTrip) {
  // Exact zeros are their own group: they decode to 0 and stay out of the positive mean.
  const float p[] = {1.0f, 3.0f, -2.0f, 0.0f, -4.0f};
  std::vector<uint8_t> wire(onebit_encoded_bytes(5, 5));
  ASSERT_EQ(wire.size(), 14u);
  EXPECT_EQ(onebit_encode(wire.data(), p, 5), 14u);  // 12 header + 2 planes of 1 byte
  std::vector<float> out(5, 0.0f);
  onebit_decode_add(out.data(), wire.data(), 5);
  const float pos = 2.0f, neg = -3.0f;  // means of {1, 3} and {-2, -4}
  const std::vector<float> want = {pos, pos, neg, 0.0f, neg};
  EXPECT_EQ(out, want);
  // Large input against double references of the two group means (the sum of the decoded vector equals the sum of
  // the input up to rounding: means preserve each group's sum).
  for (size_t n : {size_t{1}, size_t{1024}, size_t{100001}}) {
    std::vector<float> x = normals(n, 77 + n);
    for (size_t i = 3; i < n; i += 11) x[i] = (i % 2) ? 0.0f : -0.0f;
    std::vector<uint8_t> w(onebit_encoded_bytes(n, n));
    const size_t bytes = onebit_encode(w.data(), x.data(), n);
    double sp = 0, sn = 0;
    size_t cp = 0, cn = 0, cz = 0;
    for (float v : x) {
      if (v < 0) {
        sn += v;
        ++cn;
      } else if (v > 0) {
        sp += v;
        ++cp;
      } else {
        ++cz;
      }
    }
    EXPECT_EQ(bytes, 12 + (cz ? 2 : 1) * ((n + 7) / 8)) << n;
    std::vector<float> y(n, 0.0f);
    onebit_decode_add(y.data(), w.data(), n);
    const double mp = cp ? sp / cp : 0.0, mn = cn ? sn / cn : 0.0;
    for (size_t i = 0; i < n; ++i) {
      if (x[i] == 0) {
        ASSERT_EQ(y[i], 0.0f) << i;
      } else {
        ASSERT_NEAR(y[i], x[i] < 0 ? mn : mp, 1e-6 * std::fabs(x[i] < 0 ? mn : mp)) << i;
      }
    }
  }
  // All-positive input: the negative mean is 0 (empty group); all-zero input: both 0, everything decodes to 0.
  const float pos_only[] = {2.0f, 4.0f};
  EXPECT_EQ(onebit_encode(wire.data(), pos_only, 2), 13u);
  float means[2];
  std::memcpy(means, wire.data(), 8);
  EXPECT_EQ(means[0], 3.0f);
  EXPECT_EQ(means[1], 0.0f);
  const float zeros[] = {0.0f, -0.0f, 0.0f};
  onebit_encode(wire.data(), zeros, 3);
  std::vector<float> zo(3, 0.0f);
  onebit_decode_add(zo.data(), wire.data(), 3);
  for (float v : zo) EXPECT_EQ(v, 0.0f);
  // NaN or inf: both means NaN, every value (zeros included) decodes non-finite.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    const float q[] = {1.0f, bad, 0.0f, -1.0f};
    onebit_encode(wire.data(), q, 4);
    std::vector<float> o(4, 0.0f);
    onebit_decode_add(o.data(), wire.data(), 4);
    for (float v : o) EXPECT_FALSE(std::isfinite(v)) << bad;
  }
}

// ---- PowerSGD helpers -----------------------------------------------------------------------------------------------

TEST(CompressPowerSgd, GramSchmidtOrthonormalAndSpanPreserving) {
  const size_t rows = 37, cols = 4;
  const std::vector<float> m0 = normals(rows * cols, 61);
  std::vector<float> q = m0;
  orthogonalize_columns(q.data(), rows, cols, 0.0f);
  for (size_t a = 0; a < cols; ++a)
    for (size_t b = 0; b < cols; ++b) {
      double dot = 0;
      for (size_t r = 0; r < rows; ++r) dot += double(q[r * cols + a]) * q[r * cols + b];
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5) << a << " " << b;
    }
  // Span: R = Q^T M0 is upper triangular and Q R = M0 (Gram-Schmidt's QR factorization).
  for (size_t a = 0; a < cols; ++a)
    for (size_t b = 0; b < a; ++b) {
      double dot = 0;
      for (size_t r = 0; r < rows; ++r) dot += double(q[r * cols + a]) * m0[r * cols + b];
      EXPECT_NEAR(dot, 0.0, 1e-5) << a << " " << b;
    }
  // A zero column: with eps > 0 it stays zero (0 / eps) and the others stay finite; with eps 0 (torch's default) it
  // becomes 0 / 0 = NaN, as torch's col /= norm does.
  std::vector<float> z = m0;
  for (size_t r = 0; r < rows; ++r) z[r * cols + 1] = 0.0f;
  std::vector<float> z0 = z;
  orthogonalize_columns(z.data(), rows, cols, 1e-8f);
  for (size_t r = 0; r < rows; ++r) EXPECT_EQ(z[r * cols + 1], 0.0f);
  for (float v : z) EXPECT_TRUE(std::isfinite(v));
  orthogonalize_columns(z0.data(), rows, cols, 0.0f);
  for (size_t r = 0; r < rows; ++r) EXPECT_TRUE(std::isnan(z0[r * cols + 1]));
  for (size_t r = 0; r < rows; ++r) EXPECT_TRUE(std::isfinite(z0[r * cols]));
}

// One column by hand: [3, 4] has the norm 5 exactly, so eps 0 gives [0.6, 0.8] (float division) and eps 1 divides
// by 6; two columns [3, 4], [1, 0]: the second loses (0.6 * 1 + 0.8 * 0) [0.6, 0.8] = [0.36, 0.48], leaving
// [0.64, -0.48], whose norm is 0.8: [0.8, -0.6] in exact arithmetic.
TEST(CompressPowerSgd, GramSchmidtByHand) {
  std::vector<float> a = {3.0f, 4.0f};
  orthogonalize_columns(a.data(), 2, 1, 0.0f);
  EXPECT_EQ(a, (std::vector<float>{3.0f / 5.0f, 4.0f / 5.0f}));
  a = {3.0f, 4.0f};
  orthogonalize_columns(a.data(), 2, 1, 1.0f);
  EXPECT_EQ(a, (std::vector<float>{3.0f / 6.0f, 4.0f / 6.0f}));
  std::vector<float> b = {3.0f, 1.0f, 4.0f, 0.0f};  // rows x cols = 2 x 2, row-major
  orthogonalize_columns(b.data(), 2, 2, 0.0f);
  EXPECT_EQ(b[0], 0.6f);
  EXPECT_EQ(b[2], 0.8f);
  EXPECT_NEAR(b[1], 0.8, 1e-6);
  EXPECT_NEAR(b[3], -0.6, 1e-6);
}

// Both paths (rows cols rank < 400: torch's own loop; else BLAS) against double sums.
TEST(CompressPowerSgd, FactorProductsMatchNaiveLoops) {
  for (auto [rows, cols, rank] : {std::array<size_t, 3>{9, 6, 2}, std::array<size_t, 3>{33, 20, 2}}) {
    const std::vector<float> m = normals(rows * cols, 1), q = normals(cols * rank, 2), pin = normals(rows * rank, 3);
    std::vector<float> p(rows * rank), qt(cols * rank), d(rows * cols);
    powersgd_p(p.data(), m.data(), q.data(), rows, cols, rank);
    powersgd_q(qt.data(), m.data(), pin.data(), rows, cols, rank);
    powersgd_decode(d.data(), pin.data(), q.data(), rows, cols, rank);
    for (size_t r = 0; r < rows; ++r)
      for (size_t j = 0; j < rank; ++j) {
        double s = 0;
        for (size_t c = 0; c < cols; ++c) s += double(m[r * cols + c]) * q[c * rank + j];
        EXPECT_NEAR(p[r * rank + j], s, 1e-5) << rows;
      }
    for (size_t c = 0; c < cols; ++c)
      for (size_t j = 0; j < rank; ++j) {
        double s = 0;
        for (size_t r = 0; r < rows; ++r) s += double(m[r * cols + c]) * pin[r * rank + j];
        EXPECT_NEAR(qt[c * rank + j], s, 1e-5) << rows;
      }
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) {
        double s = 0;
        for (size_t j = 0; j < rank; ++j) s += double(pin[r * rank + j]) * q[c * rank + j];
        EXPECT_NEAR(d[r * cols + c], s, 1e-5) << rows;
      }
  }
}

}  // namespace
}  // namespace gs
