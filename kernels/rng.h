// The one random generator: Philox4x32-10 (Random123, Salmon et al. SC'11), counter-based and keyed by
// (seed, purpose, step, rank, index), so host and CUDA code draw identical numbers in any order. Header-only.
#pragma once
#include <Random123/philox.h>

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define GS_HD __host__ __device__
#else
#define GS_HD
#endif

namespace gs {

// What a draw is for; part of the counter so different uses never share a stream. Append only (values are stable).
enum class Purpose : uint32_t {
  kInit = 1,          // parameter initialization
  kShuffle = 2,       // per-epoch data shuffling
  kTeacher = 3,       // teacher network weights
  kTeacherData = 4,   // teacher dataset inputs and noise (train)
  kTeacherEval = 5,   // teacher dataset inputs and noise (eval)
  kStraggler = 6,     // straggler noise (cost-model issue)
  kCompress = 7,      // stochastic compressors (compression issue)
  kDropout = 8,
};

struct Draw4 {
  uint32_t v[4];
};

// Four 32-bit words for (seed, purpose, step, rank, index). Key = seed (64 bits); counter = (purpose, step, rank,
// index). Each (purpose, step, rank, index) tuple is an independent draw.
GS_HD inline Draw4 philox_draw(uint64_t seed, Purpose purpose, uint32_t step, uint32_t rank, uint32_t index) {
  r123::Philox4x32 gen;
  r123::Philox4x32::key_type key = {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  r123::Philox4x32::ctr_type ctr = {{static_cast<uint32_t>(purpose), step, rank, index}};
  auto r = gen(ctr, key);
  return Draw4{{r[0], r[1], r[2], r[3]}};
}

// Uniform in (0, 1) from 23 random bits, never 0 or 1: (u + 0.5) * 2^-23, largest 1 - 2^-24 (24 bits would round
// (2^24 - 0.5) up to 2^24 and return exactly 1).
GS_HD inline float uniform_open01(uint32_t word) { return (static_cast<float>(word >> 9) + 0.5f) * 1.1920929e-7f; }

// Uniform in [lo, hi) as float (from 24 bits).
GS_HD inline float uniform_range(uint32_t word, float lo, float hi) {
  return lo + (hi - lo) * (static_cast<float>(word >> 8) * 5.9604645e-8f);
}

// Two standard normals from two words (Box-Muller, in double for accuracy, rounded to float).
GS_HD inline void normal_pair(uint32_t w0, uint32_t w1, float* z0, float* z1) {
  double u1 = (static_cast<double>(w0) + 0.5) * 2.3283064365386963e-10;
  double u2 = (static_cast<double>(w1) + 0.5) * 2.3283064365386963e-10;
  double r = std::sqrt(-2.0 * std::log(u1));
  double t = 6.283185307179586 * u2;
  *z0 = static_cast<float>(r * std::cos(t));
  *z1 = static_cast<float>(r * std::sin(t));
}

// Fills out[0..n) with uniform [lo,hi) floats, element i from draw index i/4 word i%4.
inline void fill_uniform(float* out, uint64_t n, float lo, float hi, uint64_t seed, Purpose purpose, uint32_t step,
                         uint32_t rank, uint32_t index_base = 0) {
  for (uint64_t i = 0; i < n; i += 4) {
    Draw4 d = philox_draw(seed, purpose, step, rank, index_base + static_cast<uint32_t>(i / 4));
    for (uint64_t j = 0; j < 4 && i + j < n; ++j) out[i + j] = uniform_range(d.v[j], lo, hi);
  }
}

// Fills out[0..n) with standard normals (Box-Muller pairs from each draw's words 0,1 and 2,3).
inline void fill_normal(float* out, uint64_t n, uint64_t seed, Purpose purpose, uint32_t step, uint32_t rank,
                        uint32_t index_base = 0) {
  for (uint64_t i = 0; i < n; i += 4) {
    Draw4 d = philox_draw(seed, purpose, step, rank, index_base + static_cast<uint32_t>(i / 4));
    float z[4];
    normal_pair(d.v[0], d.v[1], &z[0], &z[1]);
    normal_pair(d.v[2], d.v[3], &z[2], &z[3]);
    for (uint64_t j = 0; j < 4 && i + j < n; ++j) out[i + j] = z[j];
  }
}

}  // namespace gs
