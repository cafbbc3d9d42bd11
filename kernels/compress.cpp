// Host implementation of the compressor array ops (kernels/compress.h) over kernels/compress_math.h: chunked loops
// the compiler vectorizes, Philox in 64-block batches (AVX-512 / AVX2 / portable, chosen at load), AVX-512/AVX2
// clones of the entry points (GS_CLONES). A new op goes below its family's section, its element math in the header.
#include "kernels/compress.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "kernels/compress_math.h"

// GS_COMPRESS_PORTABLE (compile definition) builds only the portable loops, as on a CPU family without these paths.
#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__) && !defined(__CUDACC__) && \
    !defined(GS_COMPRESS_PORTABLE)
#include <immintrin.h>
#define GS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define GS_HAVE_SSE2 1
#define GS_HAVE_AVX2_DISPATCH 1
#else
#define GS_CLONES
#define GS_HAVE_SSE2 0
#define GS_HAVE_AVX2_DISPATCH 0
#endif

namespace gs {
namespace {

// ---- Helpers ------------------------------------------------------------------------------------------------------

// Per-thread scratch that grows once (rank threads each own one); never shrinks.
template <class T>
T* scratch(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

float float_from_key(uint32_t key) {
  float f;
  std::memcpy(&f, &key, sizeof f);
  return f;
}

void store_u32(uint8_t* dst, uint32_t v) { std::memcpy(dst, &v, sizeof v); }  // little-endian host (x86, arm64)
uint32_t load_u32(const uint8_t* src) {
  uint32_t v;
  std::memcpy(&v, src, sizeof v);
  return v;
}

constexpr int kBatchBlocks = 64;                // one batch: 64 blocks = 256 words (several independent chains)
constexpr int kBatchValues = 4 * kBatchBlocks;
static_assert(kBatchValues == kDrawBatchWords, "compress.h's batch size");

inline void philox_batch_scalar(uint32_t* u, uint64_t seed, uint64_t stream, CompressDraw op, uint32_t block0) {
  uint32_t c0[kBatchBlocks], c1[kBatchBlocks], c2[kBatchBlocks], c3[kBatchBlocks];
  const uint32_t index0 = (static_cast<uint32_t>(op) << kCompressBlockBits) | block0;
  for (int b = 0; b < kBatchBlocks; ++b) {
    c0[b] = static_cast<uint32_t>(Purpose::kCompress);
    c1[b] = static_cast<uint32_t>(stream);
    c2[b] = static_cast<uint32_t>(stream >> 32);
    c3[b] = index0 + static_cast<uint32_t>(b);
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int b = 0; b < kBatchBlocks; ++b) philox_round(c0[b], c1[b], c2[b], c3[b], k0, k1);
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  for (int b = 0; b < kBatchBlocks; ++b) {
    u[4 * b + 0] = c0[b];
    u[4 * b + 1] = c1[b];
    u[4 * b + 2] = c2[b];
    u[4 * b + 3] = c3[b];
  }
}

#if GS_HAVE_AVX2_DISPATCH
// The same 16 blocks with AVX2, 8 blocks per register (GCC 12 does not vectorize the 32x32->64 products of the
// scalar loop). mulhilo of 8 lanes: _mm256_mul_epu32 on the even lanes and on the odd lanes shifted down, blended.
__attribute__((target("avx2"))) inline void mulhilo8(__m256i a, __m256i m, __m256i* hi, __m256i* lo) {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

__attribute__((target("avx2"))) inline void transpose_store8(uint32_t* u, __m256i c0, __m256i c1, __m256i c2,
                                                               __m256i c3) {
  // 4 x 8 transpose: block b's words 0..3 contiguous (u holds 8 blocks = 32 words).
  const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpacklo_epi32(c2, c3);
  const __m256i t2 = _mm256_unpackhi_epi32(c0, c1), t3 = _mm256_unpackhi_epi32(c2, c3);
  const __m256i r0 = _mm256_unpacklo_epi64(t0, t1), r1 = _mm256_unpackhi_epi64(t0, t1);
  const __m256i r2 = _mm256_unpacklo_epi64(t2, t3), r3 = _mm256_unpackhi_epi64(t2, t3);
  __m256i* out = reinterpret_cast<__m256i*>(u);
  _mm256_storeu_si256(out + 0, _mm256_permute2x128_si256(r0, r1, 0x20));
  _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(r2, r3, 0x20));
  _mm256_storeu_si256(out + 2, _mm256_permute2x128_si256(r0, r1, 0x31));
  _mm256_storeu_si256(out + 3, _mm256_permute2x128_si256(r2, r3, 0x31));
}

// 64 blocks as 8 groups of 8 lanes, the groups interleaved in each round so the multiplies' latency overlaps.
__attribute__((target("avx2"))) void philox_batch_avx2(uint32_t* u, uint64_t seed, uint64_t stream, CompressDraw op,
                                                        uint32_t block0) {
  constexpr int kGroups = kBatchBlocks / 8;
  const uint32_t index0 = (static_cast<uint32_t>(op) << kCompressBlockBits) | block0;
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  __m256i c0[kGroups], c1[kGroups], c2[kGroups], c3[kGroups];
  for (int g = 0; g < kGroups; ++g) {
    c0[g] = _mm256_set1_epi32(static_cast<int>(Purpose::kCompress));
    c1[g] = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream)));
    c2[g] = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream >> 32)));
    c3[g] = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(index0 + 8u * static_cast<uint32_t>(g))),
                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m256i key0 = _mm256_set1_epi32(static_cast<int>(k0)), key1 = _mm256_set1_epi32(static_cast<int>(k1));
    for (int g = 0; g < kGroups; ++g) {
      __m256i hi0, lo0, hi1, lo1;
      mulhilo8(c0[g], m0, &hi0, &lo0);
      mulhilo8(c2[g], m1, &hi1, &lo1);
      c0[g] = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[g]), key0);
      c1[g] = lo1;
      c2[g] = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[g]), key1);
      c3[g] = lo0;
    }
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  for (int g = 0; g < kGroups; ++g) transpose_store8(u + 32 * g, c0[g], c1[g], c2[g], c3[g]);
}

// 16 blocks in one AVX-512 register per counter word; the 16 x 4 transpose by two rounds of two-source permutes.
// GCC 12's avx512fintrin.h trips -Wuninitialized on its own _mm512_undefined (GCC bug 105593): silenced here only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
__attribute__((target("avx512f"))) void philox_batch_avx512(uint32_t* u, uint64_t seed, uint64_t stream,
                                                            CompressDraw op, uint32_t block0) {
  constexpr int kGroups = kBatchBlocks / 16;
  const uint32_t index0 = (static_cast<uint32_t>(op) << kCompressBlockBits) | block0;
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  __m512i c0[kGroups], c1[kGroups], c2[kGroups], c3[kGroups];
  for (int g = 0; g < kGroups; ++g) {
    c0[g] = _mm512_set1_epi32(static_cast<int>(Purpose::kCompress));
    c1[g] = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream)));
    c2[g] = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream >> 32)));
    c3[g] = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(index0 + 16u * static_cast<uint32_t>(g))),
                             _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m512i key0 = _mm512_set1_epi32(static_cast<int>(k0)), key1 = _mm512_set1_epi32(static_cast<int>(k1));
    for (int g = 0; g < kGroups; ++g) {
      const __m512i even0 = _mm512_mul_epu32(c0[g], m0), odd0 = _mm512_mul_epu32(_mm512_srli_epi64(c0[g], 32), m0);
      const __m512i even1 = _mm512_mul_epu32(c2[g], m1), odd1 = _mm512_mul_epu32(_mm512_srli_epi64(c2[g], 32), m1);
      const __m512i lo0 = _mm512_mask_blend_epi32(0xAAAA, even0, _mm512_slli_epi64(odd0, 32));
      const __m512i hi0 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even0, 32), odd0);
      const __m512i lo1 = _mm512_mask_blend_epi32(0xAAAA, even1, _mm512_slli_epi64(odd1, 32));
      const __m512i hi1 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even1, 32), odd1);
      c0[g] = _mm512_xor_si512(_mm512_xor_si512(hi1, c1[g]), key0);
      c1[g] = lo1;
      c2[g] = _mm512_xor_si512(_mm512_xor_si512(hi0, c3[g]), key1);
      c3[g] = lo0;
    }
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  // Per group: pairs (c0_b, c1_b) and (c2_b, c3_b) for blocks 0-7 and 8-15, then the 64-bit pairs merged by block.
  const __m512i pair_lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i pair_hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512i quad_lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
  const __m512i quad_hi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  for (int g = 0; g < kGroups; ++g) {
    uint32_t* ug = u + 64 * g;
    const __m512i a_lo = _mm512_permutex2var_epi32(c0[g], pair_lo, c1[g]);
    const __m512i a_hi = _mm512_permutex2var_epi32(c0[g], pair_hi, c1[g]);
    const __m512i b_lo = _mm512_permutex2var_epi32(c2[g], pair_lo, c3[g]);
    const __m512i b_hi = _mm512_permutex2var_epi32(c2[g], pair_hi, c3[g]);
    _mm512_storeu_si512(ug + 0, _mm512_permutex2var_epi64(a_lo, quad_lo, b_lo));
    _mm512_storeu_si512(ug + 16, _mm512_permutex2var_epi64(a_lo, quad_hi, b_lo));
    _mm512_storeu_si512(ug + 32, _mm512_permutex2var_epi64(a_hi, quad_lo, b_hi));
    _mm512_storeu_si512(ug + 48, _mm512_permutex2var_epi64(a_hi, quad_hi, b_hi));
  }
}
#pragma GCC diagnostic pop

// Decided once at load time (__builtin_cpu_init first: this runs in a static initializer).
const DrawIsa kBestDrawIsa = [] {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return DrawIsa::kAvx512;
  if (__builtin_cpu_supports("avx2")) return DrawIsa::kAvx2;
  return DrawIsa::kPortable;
}();
#else
const DrawIsa kBestDrawIsa = DrawIsa::kPortable;
#endif

// Philox4x32-10 for 16 consecutive blocks (compress_draw_blocks without the public entry's ISA choice).
inline void philox_batch_isa(uint32_t* u, uint64_t seed, uint64_t stream, CompressDraw op, uint32_t block0,
                             DrawIsa isa) {
#if GS_HAVE_AVX2_DISPATCH
  if (isa == DrawIsa::kAvx512) return philox_batch_avx512(u, seed, stream, op, block0);
  if (isa == DrawIsa::kAvx2) return philox_batch_avx2(u, seed, stream, op, block0);
#else
  (void)isa;
#endif
  philox_batch_scalar(u, seed, stream, op, block0);
}

inline void philox_batch(uint32_t* u, uint64_t seed, uint64_t stream, CompressDraw op, uint32_t block0) {
  philox_batch_isa(u, seed, stream, op, block0, kBestDrawIsa);
}

// Little-endian bit stream writer/reader of fixed-width codes (width <= 32).
class BitWriter {
 public:
  explicit BitWriter(uint8_t* dst) : dst_(dst) {}
  void put(uint32_t code, int width) {
    acc_ |= static_cast<uint64_t>(code) << bits_;
    bits_ += width;
    if (bits_ >= 32) {
      store_u32(dst_, static_cast<uint32_t>(acc_));
      dst_ += 4;
      acc_ >>= 32;
      bits_ -= 32;
    }
  }
  void flush() {  // the remaining ceil(bits / 8) bytes
    for (int b = 0; b < bits_; b += 8) *dst_++ = static_cast<uint8_t>(acc_ >> b);
  }

 private:
  uint8_t* dst_;
  uint64_t acc_ = 0;
  int bits_ = 0;
};

class BitReader {
 public:
  BitReader(const uint8_t* src, size_t bytes) : src_(src), end_(src + bytes) {}
  uint32_t get(int width) {
    if (bits_ < width) refill();
    const uint32_t code = static_cast<uint32_t>(acc_) & ((1u << width) - 1u);
    acc_ >>= width;
    bits_ -= width;
    return code;
  }

 private:
  void refill() {
    if (end_ - src_ >= 4) {
      acc_ |= static_cast<uint64_t>(load_u32(src_)) << bits_;
      src_ += 4;
      bits_ += 32;
    } else {
      while (src_ < end_) {
        acc_ |= static_cast<uint64_t>(*src_++) << bits_;
        bits_ += 8;
      }
    }
  }
  const uint8_t* src_;
  const uint8_t* end_;
  uint64_t acc_ = 0;
  int bits_ = 0;
};

}  // namespace

// The order is compress_math.h's kQsgdNormChunk / kQsgdNormPartials comment; chunk c's sum goes to partial c mod P as
// it is made, so each partial takes its chunks in order. The chunk loop vectorizes (16 float lanes).
GS_CLONES double qsgd_sum_squares(const float* p, size_t n) {
  double partial[kQsgdNormPartials] = {};
  size_t i = 0, c = 0;
  for (; i + kQsgdNormChunk <= n; i += kQsgdNormChunk, ++c) {
    float lanes[16] = {};
    for (size_t j = 0; j < kQsgdNormChunk; j += 16)
      for (int l = 0; l < 16; ++l) lanes[l] += p[i + j + l] * p[i + j + l];
    double s = 0.0;
    for (float v : lanes) s += v;
    partial[c % kQsgdNormPartials] += s;
  }
  double total = 0.0;
  for (double v : partial) total += v;
  for (; i < n; ++i) total += static_cast<double>(p[i]) * p[i];
  return total;
}

// ---- Draws ----------------------------------------------------------------------------------------------------------

DrawIsa compress_draw_best_isa() { return kBestDrawIsa; }

void compress_draw_blocks(uint32_t* words, uint64_t seed, uint64_t stream, CompressDraw op, uint32_t block0,
                          DrawIsa isa) {
  // kBest, or a request above what the CPU has, runs the best available.
  if (isa == DrawIsa::kBest || static_cast<int>(isa) > static_cast<int>(kBestDrawIsa)) isa = kBestDrawIsa;
  philox_batch_isa(words, seed, stream, op, block0, isa);
}

// ---- Index selection ------------------------------------------------------------------------------------------------

GS_CLONES size_t topk_select(const float* x, size_t n, size_t k, uint32_t* idx) {
  k = std::min(k, n);
  if (k == 0) return 0;
  if (k == n) {
    for (size_t i = 0; i < n; ++i) idx[i] = static_cast<uint32_t>(i);
    return n;
  }
  // Pass 1: histogram of the top 11 bits of the 31-bit key (4 sub-histograms against store-to-load stalls when
  // neighbours share a bucket).
  constexpr int kShift = 20;
  constexpr size_t kBuckets = size_t{1} << (31 - kShift);
  static thread_local std::vector<uint32_t> hist_store;
  uint32_t* hist = scratch(hist_store, 4 * kBuckets);
  std::fill(hist, hist + 4 * kBuckets, 0u);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    ++hist[0 * kBuckets + (magnitude_key(x[i + 0]) >> kShift)];
    ++hist[1 * kBuckets + (magnitude_key(x[i + 1]) >> kShift)];
    ++hist[2 * kBuckets + (magnitude_key(x[i + 2]) >> kShift)];
    ++hist[3 * kBuckets + (magnitude_key(x[i + 3]) >> kShift)];
  }
  for (; i < n; ++i) ++hist[magnitude_key(x[i]) >> kShift];
  // The boundary bucket: the highest bucket b with (count above b) < k <= (count above b) + count(b).
  size_t above = 0;
  uint32_t b = static_cast<uint32_t>(kBuckets);
  size_t in_bucket = 0;
  while (b > 0) {
    --b;
    in_bucket = size_t{hist[b]} + hist[kBuckets + b] + hist[2 * kBuckets + b] + hist[3 * kBuckets + b];
    if (above + in_bucket >= k) break;
    above += in_bucket;
  }
  // Pass 2: the boundary bucket's keys, then the exact k-th key among them. Blocks of 16 values with no key in the
  // bucket (most of them) are skipped after one vectorized test.
  static thread_local std::vector<uint32_t> keys_store;
  uint32_t* keys = scratch(keys_store, in_bucket + 1);
  constexpr size_t kBlock = 16;
  size_t m = 0;
  for (i = 0; i < n; i += kBlock) {
    const size_t count = std::min(kBlock, n - i);
    if (count == kBlock) {
      uint32_t hit = 0;
      for (size_t j = 0; j < kBlock; ++j) hit |= static_cast<uint32_t>((magnitude_key(x[i + j]) >> kShift) == b);
      if (!hit) continue;
    }
    for (size_t j = 0; j < count; ++j) {
      const uint32_t key = magnitude_key(x[i + j]);
      keys[m] = key;
      m += (key >> kShift) == b;
    }
  }
  const size_t need = k - above;  // 1 <= need <= in_bucket
  std::nth_element(keys, keys + (need - 1), keys + m, std::greater<uint32_t>());
  const uint32_t kth = keys[need - 1];
  size_t greater_in_bucket = 0;
  for (size_t j = 0; j < m; ++j) greater_in_bucket += keys[j] > kth;
  size_t ties = k - above - greater_in_bucket;  // keys equal to kth to take, lowest indices first
  // Pass 3: ascending output, the same block skip for blocks without a key >= kth; within a block one by one.
  size_t out = 0;
  for (i = 0; i < n && out < k; i += kBlock) {
    const size_t count = std::min(kBlock, n - i);
    if (count == kBlock) {
      uint32_t hit = 0;
      for (size_t j = 0; j < kBlock; ++j) hit |= static_cast<uint32_t>(magnitude_key(x[i + j]) >= kth);
      if (!hit) continue;
    }
    for (size_t j = 0; j < count && out < k; ++j) {
      const uint32_t key = magnitude_key(x[i + j]);
      if (key > kth || (key == kth && ties > 0)) {
        ties -= key == kth;
        idx[out++] = static_cast<uint32_t>(i + j);
      }
    }
  }
  return out;
}

GS_CLONES size_t threshold_select(const float* x, size_t n, float tau, uint32_t* idx) {
  // Blocks of 16 values with none selected (typical for a threshold near the top 1%) are skipped after one
  // vectorized test; the others are appended branch-free (idx has room: out <= i < n).
  constexpr size_t kBlock = 16;
  size_t out = 0;
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t count = std::min(kBlock, n - i);
    if (count == kBlock) {
      uint32_t hit = 0;
      for (size_t j = 0; j < kBlock; ++j) hit |= static_cast<uint32_t>(threshold_keep(x[i + j], tau));
      if (!hit) continue;
    }
    for (size_t j = 0; j < count; ++j) {
      idx[out] = static_cast<uint32_t>(i + j);
      out += threshold_keep(x[i + j], tau);
    }
  }
  return out;
}

float sampled_threshold(const float* x, size_t n, double ratio, uint64_t seed, uint64_t stream, size_t samples) {
  if (n == 0 || !(ratio > 0.0)) return std::numeric_limits<float>::infinity();
  const size_t m = std::clamp<size_t>(samples, 1, n);
  static thread_local std::vector<uint32_t> keys_store;
  uint32_t* keys = scratch(keys_store, m);
  if (m == n) {
    for (size_t i = 0; i < n; ++i) keys[i] = magnitude_key(x[i]);
  } else {
    // Stratum j = [lo_j, lo_{j+1}), lo_j = floor(j n / m), stepped exactly as q + carry of the remainder.
    const size_t q = n / m, r = n % m;
    size_t lo = 0, carry = 0;
    uint32_t u[kBatchValues];
    for (size_t j0 = 0; j0 < m; j0 += kBatchValues) {
      philox_batch(u, seed, stream, CompressDraw::kSample, static_cast<uint32_t>(j0 / 4));
      const size_t count = std::min<size_t>(kBatchValues, m - j0);
      for (size_t j = 0; j < count; ++j) {
        size_t width = q;
        carry += r;
        if (carry >= m) {
          carry -= m;
          ++width;
        }
        const size_t offset = static_cast<size_t>((static_cast<uint64_t>(u[j]) * width) >> 32);
        keys[j0 + j] = magnitude_key(x[lo + offset]);
        lo += width;
      }
    }
  }
  const double want = std::ceil(std::min(ratio, 1.0) * static_cast<double>(m));
  const size_t kk = std::clamp<size_t>(static_cast<size_t>(want), 1, m);
  std::nth_element(keys, keys + (kk - 1), keys + m, std::greater<uint32_t>());
  return float_from_key(keys[kk - 1]);
}

size_t randomk_indices(uint32_t* idx, size_t n, size_t k, uint64_t seed, uint64_t stream) {
  k = std::min(k, n);
  if (k == 0) return 0;
  if (k == n) {
    for (size_t i = 0; i < n; ++i) idx[i] = static_cast<uint32_t>(i);
    return n;
  }
  static thread_local std::vector<uint64_t> bitmap_store;
  const size_t words = (n + 63) / 64;
  uint64_t* bitmap = scratch(bitmap_store, words);
  std::fill(bitmap, bitmap + words, uint64_t{0});
  const size_t first = n - k;
  Draw4 d{};
  for (size_t t = 0; t < k; ++t) {
    if (t % 2 == 0) d = compress_draw(seed, stream, CompressDraw::kRandomK, static_cast<uint32_t>(t / 2));
    const size_t j = first + t;
    size_t pick = static_cast<size_t>(randomk_pick_from(d, n, k, t));
    if (bitmap[pick / 64] >> (pick % 64) & 1u) pick = j;  // j itself is never taken before step j
    bitmap[pick / 64] |= uint64_t{1} << (pick % 64);
  }
  size_t out = 0;
  for (size_t wi = 0; wi < words; ++wi) {
    uint64_t bits = bitmap[wi];
    while (bits) {
      idx[out++] = static_cast<uint32_t>(wi * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
      bits &= bits - 1;
    }
  }
  return out;
}

// ---- QSGD -----------------------------------------------------------------------------------------------------------

size_t qsgd_encoded_bytes(size_t n, int s) {
  const size_t width = static_cast<size_t>(qsgd_level_bits(s)) + 1;
  return 4 + (n * width + 7) / 8;
}

GS_CLONES void qsgd_encode(uint8_t* out, const float* p, size_t n, int s, uint64_t seed, uint64_t stream) {
  const float norm = static_cast<float>(std::sqrt(qsgd_sum_squares(p, n)));
  std::memcpy(out, &norm, sizeof norm);
  const uint32_t levels = static_cast<uint32_t>(s);
  const int width = qsgd_level_bits(s) + 1;
  const bool usable = norm > 0.0f && std::isfinite(norm);
  const float scale = usable ? static_cast<float>(static_cast<double>(s) / norm) : 0.0f;
  uint8_t* dst = out + 4;
  const uint8_t* end = out + qsgd_encoded_bytes(n, s);
  uint32_t u[kBatchValues];
  uint32_t codes[kBatchValues];
  // Chunks of kBatchValues (256) values; each starts byte-aligned (a multiple of 8 codes).
  for (size_t i0 = 0; i0 < n; i0 += kBatchValues) {
    philox_batch(u, seed, stream, CompressDraw::kQsgd, static_cast<uint32_t>(i0 / 4));
    const size_t count = std::min<size_t>(kBatchValues, n - i0);
    const float* pc = p + i0;
    if (count == kBatchValues) {
      for (int j = 0; j < kBatchValues; ++j)
        codes[j] = qsgd_code(pc[j], qsgd_level(std::fabs(pc[j]), scale, uniform_open01(u[j]), levels));
    } else {
      for (size_t j = 0; j < count; ++j)
        codes[j] = qsgd_code(pc[j], qsgd_level(std::fabs(pc[j]), scale, uniform_open01(u[j]), levels));
    }
    if (width <= 8 && count == kBatchValues) {
      // 8 codes fill exactly `width` bytes: build them in one word, store 8 bytes (the next group overwrites the
      // excess) or exactly `width` at the end of the buffer.
      for (int g = 0; g < kBatchValues / 8; ++g) {
        uint64_t word = 0;
        for (int j = 0; j < 8; ++j) word |= static_cast<uint64_t>(codes[8 * g + j]) << (j * width);
        std::memcpy(dst, &word, end - dst >= 8 ? 8 : static_cast<size_t>(width));
        dst += width;
      }
    } else {
      BitWriter writer(dst);
      for (size_t j = 0; j < count; ++j) writer.put(codes[j], width);
      writer.flush();
      dst += (count * static_cast<size_t>(width) + 7) / 8;
    }
  }
}

GS_CLONES void qsgd_decode_add(float* out, const uint8_t* in, size_t n, int s) {
  float norm;
  std::memcpy(&norm, in, sizeof norm);
  const float unit = norm / static_cast<float>(s);
  const int width = qsgd_level_bits(s) + 1;
  const uint64_t mask = (uint64_t{1} << width) - 1;
  const uint8_t* src = in + 4;
  const uint8_t* end = in + qsgd_encoded_bytes(n, s);
  uint32_t codes[kBatchValues];
  for (size_t i0 = 0; i0 < n; i0 += kBatchValues) {
    const size_t count = std::min<size_t>(kBatchValues, n - i0);
    const size_t bytes = (count * static_cast<size_t>(width) + 7) / 8;
    if (width <= 8 && count == kBatchValues) {
      for (int g = 0; g < kBatchValues / 8; ++g) {
        uint64_t word = 0;
        std::memcpy(&word, src + g * width, end - (src + g * width) >= 8 ? 8 : static_cast<size_t>(width));
        for (int j = 0; j < 8; ++j) codes[8 * g + j] = static_cast<uint32_t>((word >> (j * width)) & mask);
      }
    } else {
      BitReader reader(src, bytes);
      for (size_t j = 0; j < count; ++j) codes[j] = reader.get(width);
    }
    float* oc = out + i0;
    for (size_t j = 0; j < count; ++j) oc[j] += qsgd_decode(codes[j], unit);
    src += bytes;
  }
}

// ---- TernGrad -------------------------------------------------------------------------------------------------------

size_t terngrad_encoded_bytes(size_t n) { return 4 + (n + 3) / 4; }

GS_CLONES void terngrad_encode(uint8_t* out, const float* p, size_t n, uint64_t seed, uint64_t stream) {
  uint32_t max_key = 0;
  for (size_t i = 0; i < n; ++i) max_key = std::max(max_key, magnitude_key(p[i]));
  const float scale = float_from_key(max_key);  // max |p|, NaN if any p is NaN
  std::memcpy(out, &scale, sizeof scale);
  uint8_t* dst = out + 4;
  if (!(scale > 0.0f)) {  // all zeros (or NaN): every code 0; decodes to 0 * scale
    std::memset(dst, 0, (n + 3) / 4);
    return;
  }
  const float inv_scale = 1.0f / scale;
  uint32_t u[kBatchValues];
  uint32_t codes[kBatchValues];
  for (size_t i0 = 0; i0 < n; i0 += kBatchValues) {
    philox_batch(u, seed, stream, CompressDraw::kTernGrad, static_cast<uint32_t>(i0 / 4));
    const size_t count = std::min<size_t>(kBatchValues, n - i0);
    const float* pc = p + i0;
    if (count == kBatchValues) {
      for (int j = 0; j < kBatchValues; ++j) codes[j] = terngrad_code(pc[j], scale, inv_scale, uniform_open01(u[j]));
    } else {
      for (size_t j = 0; j < count; ++j) codes[j] = terngrad_code(pc[j], scale, inv_scale, uniform_open01(u[j]));
      for (size_t j = count; j < static_cast<size_t>(kBatchValues); ++j) codes[j] = 0;
    }
    const size_t bytes = (count + 3) / 4;
    for (size_t b = 0; b < bytes; ++b)
      dst[b] = static_cast<uint8_t>(codes[4 * b] | codes[4 * b + 1] << 2 | codes[4 * b + 2] << 4 |
                                    codes[4 * b + 3] << 6);
    dst += bytes;
  }
}

GS_CLONES void terngrad_decode_add(float* out, const uint8_t* in, size_t n) {
  float scale;
  std::memcpy(&scale, in, sizeof scale);
  const uint8_t* codes = in + 4;
  // One byte = 4 codes -> 4 floats from a 256-entry table (one 4-wide add per byte).
  float table[256][4];
  for (uint32_t b = 0; b < 256; ++b)
    for (int j = 0; j < 4; ++j) table[b][j] = terngrad_decode((b >> (2 * j)) & 3u, scale);
  const size_t full = n / 4;
  for (size_t b = 0; b < full; ++b) {
    const float* t = table[codes[b]];
    for (int j = 0; j < 4; ++j) out[4 * b + j] += t[j];
  }
  for (size_t i = 4 * full; i < n; ++i) out[i] += terngrad_decode((codes[i / 4] >> (2 * (i % 4))) & 3u, scale);
}

// ---- signSGD and 1-bit SGD ------------------------------------------------------------------------------------------

namespace {

// Packs negative_bit(p_i) into `bits` and zero_bit(p_i) into `zeros` (8 values per byte, the last byte's unused bits
// 0) and accumulates, in double, sum |p_i| (abs_sum), and sum and count of the negative values and the count of the
// zeros. One pass over p: each chunk of 1024 values is packed and summed while it is in L1.
struct SignSums {
  double abs_sum = 0.0;
  double negative_sum = 0.0;
  size_t negative_count = 0;
  size_t zero_count = 0;
};

#if GS_HAVE_AVX2_DISPATCH
// The AVX2 body of pack_signs for whole chunks of 1024 values: 8 bits per compare + movemask, counts by popcount of
// the masks, sums in two float accumulators per quantity (flushed to double per chunk). Returns the values done.
template <bool kNegatives>
__attribute__((target("avx2,popcnt"))) size_t pack_signs_avx2(uint8_t* bits, uint8_t* zeros, const float* p,
                                                                size_t n, SignSums* sums) {
  constexpr size_t kChunk = 1024;
  const __m256 zero = _mm256_setzero_ps();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  size_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    __m256 abs0 = zero, abs1 = zero, neg0 = zero, neg1 = zero;
    size_t negatives = 0, zero_count = 0;
    const float* pc = p + i;
    uint8_t* bc = bits + i / 8;
    uint8_t* zc = zeros + i / 8;
    for (size_t j = 0; j < kChunk; j += 16) {
      const __m256 v0 = _mm256_loadu_ps(pc + j), v1 = _mm256_loadu_ps(pc + j + 8);
      const __m256 m0 = _mm256_cmp_ps(v0, zero, _CMP_LT_OQ), m1 = _mm256_cmp_ps(v1, zero, _CMP_LT_OQ);
      const __m256 z0 = _mm256_cmp_ps(v0, zero, _CMP_EQ_OQ), z1 = _mm256_cmp_ps(v1, zero, _CMP_EQ_OQ);
      const int mask = _mm256_movemask_ps(m0) | (_mm256_movemask_ps(m1) << 8);
      const int zmask = _mm256_movemask_ps(z0) | (_mm256_movemask_ps(z1) << 8);
      const uint16_t two = static_cast<uint16_t>(mask), ztwo = static_cast<uint16_t>(zmask);
      std::memcpy(bc + j / 8, &two, 2);
      std::memcpy(zc + j / 8, &ztwo, 2);
      zero_count += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(zmask)));
      abs0 = _mm256_add_ps(abs0, _mm256_and_ps(v0, abs_mask));
      abs1 = _mm256_add_ps(abs1, _mm256_and_ps(v1, abs_mask));
      if constexpr (kNegatives) {
        negatives += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(mask)));
        neg0 = _mm256_add_ps(neg0, _mm256_and_ps(m0, v0));
        neg1 = _mm256_add_ps(neg1, _mm256_and_ps(m1, v1));
      }
    }
    float a[8], ng[8];
    _mm256_storeu_ps(a, _mm256_add_ps(abs0, abs1));
    _mm256_storeu_ps(ng, _mm256_add_ps(neg0, neg1));
    double sa = 0.0, sn = 0.0;
    for (int l = 0; l < 8; ++l) {
      sa += a[l];
      sn += ng[l];
    }
    sums->abs_sum += sa;
    sums->zero_count += zero_count;
    if constexpr (kNegatives) {
      sums->negative_sum += sn;
      sums->negative_count += negatives;
    }
  }
  return i;
}
#endif

template <bool kNegatives>
SignSums pack_signs(uint8_t* bits, uint8_t* zeros, const float* p, size_t n) {
  SignSums sums;
  size_t i = 0;
#if GS_HAVE_AVX2_DISPATCH
  if (kBestDrawIsa != DrawIsa::kPortable) i = pack_signs_avx2<kNegatives>(bits, zeros, p, n, &sums);
#endif
#if GS_HAVE_SSE2
  // Chunks of 1024 values: bits by movemask of (v < 0) and (v == 0), counts by bit counts of the masks, sums in float
  // lanes flushed to double per chunk.
  constexpr size_t kChunk = 1024;
  const __m128 zero = _mm_setzero_ps();
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  for (; i + kChunk <= n; i += kChunk) {
    __m128 abs0 = zero, abs1 = zero, neg0 = zero, neg1 = zero;
    size_t negatives = 0, zero_count = 0;
    const float* pc = p + i;
    uint8_t* bc = bits + i / 8;
    uint8_t* zc = zeros + i / 8;
    for (size_t j = 0; j < kChunk; j += 8) {
      const __m128 v0 = _mm_loadu_ps(pc + j), v1 = _mm_loadu_ps(pc + j + 4);
      const __m128 m0 = _mm_cmplt_ps(v0, zero), m1 = _mm_cmplt_ps(v1, zero);
      const __m128 z0 = _mm_cmpeq_ps(v0, zero), z1 = _mm_cmpeq_ps(v1, zero);
      const uint8_t byte = static_cast<uint8_t>(_mm_movemask_ps(m0) | (_mm_movemask_ps(m1) << 4));
      const uint8_t zbyte = static_cast<uint8_t>(_mm_movemask_ps(z0) | (_mm_movemask_ps(z1) << 4));
      bc[j / 8] = byte;
      zc[j / 8] = zbyte;
      zero_count += static_cast<size_t>(__builtin_popcount(zbyte));
      abs0 = _mm_add_ps(abs0, _mm_and_ps(v0, abs_mask));
      abs1 = _mm_add_ps(abs1, _mm_and_ps(v1, abs_mask));
      if constexpr (kNegatives) {
        negatives += static_cast<size_t>(__builtin_popcount(byte));
        neg0 = _mm_add_ps(neg0, _mm_and_ps(m0, v0));
        neg1 = _mm_add_ps(neg1, _mm_and_ps(m1, v1));
      }
    }
    float a[4], ng[4];
    _mm_storeu_ps(a, _mm_add_ps(abs0, abs1));
    _mm_storeu_ps(ng, _mm_add_ps(neg0, neg1));
    sums.abs_sum += (static_cast<double>(a[0]) + a[1]) + (static_cast<double>(a[2]) + a[3]);
    sums.zero_count += zero_count;
    if constexpr (kNegatives) {
      sums.negative_sum += (static_cast<double>(ng[0]) + ng[1]) + (static_cast<double>(ng[2]) + ng[3]);
      sums.negative_count += negatives;
    }
  }
#endif
  // Tail (and the portable path): one value at a time.
  for (size_t b = i / 8; b < (n + 7) / 8; ++b) bits[b] = zeros[b] = 0;
  for (; i < n; ++i) {
    const float v = p[i];
    bits[i / 8] = static_cast<uint8_t>(bits[i / 8] | negative_bit(v) << (i % 8));
    zeros[i / 8] = static_cast<uint8_t>(zeros[i / 8] | zero_bit(v) << (i % 8));
    sums.abs_sum += std::fabs(v);
    sums.zero_count += zero_bit(v);
    if (v < 0.0f) {
      sums.negative_sum += v;
      ++sums.negative_count;
    }
  }
  return sums;
}

// out[i] += value of (sign bit, zero bit) of value i: v_pos, v_neg, or v_zero. 8 values per byte through 16-entry
// tables of 4-value nibbles (vectorizes as one 4-wide add per nibble); without a zero plane (zeros == nullptr) only
// the sign table is read.
inline void unpack_add(float* out, const uint8_t* bits, const uint8_t* zeros, size_t n, float v_pos, float v_neg,
                       float v_zero) {
  float table[16][4];
  for (int t = 0; t < 16; ++t)
    for (int j = 0; j < 4; ++j) table[t][j] = (t >> j) & 1 ? v_neg : v_pos;
  const size_t full = n / 8;
  if (zeros == nullptr) {
    for (size_t b = 0; b < full; ++b) {
      const uint32_t byte = bits[b];
      float* o = out + 8 * b;
      const float* lo = table[byte & 15u];
      const float* hi = table[byte >> 4];
      for (int j = 0; j < 4; ++j) o[j] += lo[j];
      for (int j = 0; j < 4; ++j) o[4 + j] += hi[j];
    }
    for (size_t i = 8 * full; i < n; ++i) out[i] += (bits[i / 8] >> (i % 8)) & 1u ? v_neg : v_pos;
    return;
  }
  for (size_t b = 0; b < full; ++b) {
    const uint32_t byte = bits[b], zbyte = zeros[b];
    float* o = out + 8 * b;
    if (zbyte == 0) {
      const float* lo = table[byte & 15u];
      const float* hi = table[byte >> 4];
      for (int j = 0; j < 4; ++j) o[j] += lo[j];
      for (int j = 0; j < 4; ++j) o[4 + j] += hi[j];
    } else {
      for (int j = 0; j < 8; ++j) o[j] += (zbyte >> j) & 1u ? v_zero : ((byte >> j) & 1u ? v_neg : v_pos);
    }
  }
  for (size_t i = 8 * full; i < n; ++i)
    out[i] += (zeros[i / 8] >> (i % 8)) & 1u ? v_zero : ((bits[i / 8] >> (i % 8)) & 1u ? v_neg : v_pos);
}

uint32_t message_zero_count(const uint8_t* in, size_t header_bytes) { return load_u32(in + header_bytes - 4); }

}  // namespace

size_t sign_plane_bytes(size_t n) { return (n + 7) / 8; }

size_t sign_encoded_bytes(size_t n, size_t zeros) {
  return kSignHeaderBytes + sign_plane_bytes(n) * (zeros > 0 ? 2 : 1);
}

GS_CLONES size_t sign_encode(uint8_t* out, const float* p, size_t n) {
  const size_t plane = sign_plane_bytes(n);
  const SignSums sums = pack_signs<false>(out + kSignHeaderBytes, out + kSignHeaderBytes + plane, p, n);
  const float scale = n ? static_cast<float>(sums.abs_sum / static_cast<double>(n)) : 0.0f;
  std::memcpy(out, &scale, 4);
  store_u32(out + 4, static_cast<uint32_t>(sums.zero_count));
  return sign_encoded_bytes(n, sums.zero_count);
}

GS_CLONES void sign_decode_add(float* out, const uint8_t* in, size_t n) {
  float scale;
  std::memcpy(&scale, in, 4);
  const uint8_t* bits = in + kSignHeaderBytes;
  const uint8_t* zeros = message_zero_count(in, kSignHeaderBytes) ? bits + sign_plane_bytes(n) : nullptr;
  unpack_add(out, bits, zeros, n, sign_decode(0, 0, scale), sign_decode(1, 0, scale), sign_decode(0, 1, scale));
}

GS_CLONES void sign_vote(float* out, const uint8_t* const* msgs, int ranks, size_t n) {
  // Negative and zero votes per value, counted 8 values at a time: each plane byte expands (table) to 8 one-byte
  // counters in a uint64, added across ranks (no carry between bytes while ranks < 256). Little-endian: byte j of
  // word w is the count of value 8 w + j, so the words read back as a uint8 array.
  static const std::vector<uint64_t> expand = [] {
    std::vector<uint64_t> t(256, 0);
    for (uint32_t b = 0; b < 256; ++b)
      for (int j = 0; j < 8; ++j)
        if (b >> j & 1u) t[b] |= uint64_t{1} << (8 * j);
    return t;
  }();
  const size_t plane = sign_plane_bytes(n);
  std::vector<const uint8_t*> bits(static_cast<size_t>(ranks)), zeros(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    bits[static_cast<size_t>(r)] = msgs[r] + kSignHeaderBytes;
    zeros[static_cast<size_t>(r)] = message_zero_count(msgs[r], kSignHeaderBytes) ? msgs[r] + kSignHeaderBytes + plane
                                                                                   : nullptr;
  }
  constexpr size_t kChunk = 1024;  // values per chunk
  uint64_t words[kChunk / 8], zwords[kChunk / 8];
  uint8_t counts[kChunk], zcounts[kChunk];
  uint16_t wide[kChunk], zwide[kChunk];
  for (size_t i0 = 0; i0 < n; i0 += kChunk) {
    const size_t count = std::min(kChunk, n - i0);
    const size_t bytes = (count + 7) / 8;
    if (ranks < 256) {
      std::fill(words, words + bytes, uint64_t{0});
      std::fill(zwords, zwords + bytes, uint64_t{0});
      for (int r = 0; r < ranks; ++r) {
        const uint8_t* b = bits[static_cast<size_t>(r)] + i0 / 8;
        for (size_t w = 0; w < bytes; ++w) words[w] += expand[b[w]];
        if (const uint8_t* z = zeros[static_cast<size_t>(r)]) {
          z += i0 / 8;
          for (size_t w = 0; w < bytes; ++w) zwords[w] += expand[z[w]];
        }
      }
      std::memcpy(counts, words, bytes * 8);
      std::memcpy(zcounts, zwords, bytes * 8);
      for (size_t j = 0; j < count; ++j) {
        wide[j] = counts[j];
        zwide[j] = zcounts[j];
      }
    } else {
      std::fill(wide, wide + kChunk, uint16_t{0});
      std::fill(zwide, zwide + kChunk, uint16_t{0});
      for (int r = 0; r < ranks; ++r) {
        const uint8_t* b = bits[static_cast<size_t>(r)] + i0 / 8;
        for (size_t j = 0; j < count; ++j) wide[j] = static_cast<uint16_t>(wide[j] + ((b[j / 8] >> (j % 8)) & 1u));
        if (const uint8_t* z = zeros[static_cast<size_t>(r)]) {
          z += i0 / 8;
          for (size_t j = 0; j < count; ++j)
            zwide[j] = static_cast<uint16_t>(zwide[j] + ((z[j / 8] >> (j % 8)) & 1u));
        }
      }
    }
    for (size_t j = 0; j < count; ++j) out[i0 + j] = sign_vote_value(wide[j], zwide[j], ranks);
  }
}

size_t onebit_encoded_bytes(size_t n, size_t zeros) {
  return kOnebitHeaderBytes + sign_plane_bytes(n) * (zeros > 0 ? 2 : 1);
}

GS_CLONES size_t onebit_encode(uint8_t* out, const float* p, size_t n) {
  const size_t plane = sign_plane_bytes(n);
  const SignSums sums = pack_signs<true>(out + kOnebitHeaderBytes, out + kOnebitHeaderBytes + plane, p, n);
  // sum of the positive values = sum |p| + sum of the negatives (|v| = -v there; zeros add nothing to either).
  const size_t positive_count = n - sums.negative_count - sums.zero_count;
  const double positive_sum = sums.abs_sum + sums.negative_sum;
  float mean_positive = positive_count ? static_cast<float>(positive_sum / static_cast<double>(positive_count)) : 0.0f;
  float mean_negative =
      sums.negative_count ? static_cast<float>(sums.negative_sum / static_cast<double>(sums.negative_count)) : 0.0f;
  if (!std::isfinite(sums.abs_sum)) mean_positive = mean_negative = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(out, &mean_positive, 4);
  std::memcpy(out + 4, &mean_negative, 4);
  store_u32(out + 8, static_cast<uint32_t>(sums.zero_count));
  return onebit_encoded_bytes(n, sums.zero_count);
}

GS_CLONES void onebit_decode_add(float* out, const uint8_t* in, size_t n) {
  float mean_positive, mean_negative;
  std::memcpy(&mean_positive, in, 4);
  std::memcpy(&mean_negative, in + 4, 4);
  const uint8_t* bits = in + kOnebitHeaderBytes;
  const uint8_t* zeros = message_zero_count(in, kOnebitHeaderBytes) ? bits + sign_plane_bytes(n) : nullptr;
  unpack_add(out, bits, zeros, n, onebit_decode(0, 0, mean_positive, mean_negative),
             onebit_decode(1, 0, mean_positive, mean_negative), onebit_decode(0, 1, mean_positive, mean_negative));
}

// ---- PowerSGD helpers -----------------------------------------------------------------------------------------------

void orthogonalize_columns(float* m, size_t rows, size_t cols, float eps) {
  thread_local std::vector<float> scratch;
  scratch.resize(rows);
  torch_gram_schmidt(m, rows, cols, eps, scratch.data());
}

namespace {

// c (rows x cols) = a * b, a rows x inner, b inner x cols, element (r, k) of a at a[r * a_row + k * a_col] and (k, j)
// of b at b[k * b_row + j * b_col]: ATen's own loop for small batched products (baddbmm_cpu_kernel): a float
// accumulator from 0, the products added in k order.
void small_matmul(float* c, const float* a, size_t a_row, size_t a_col, const float* b, size_t b_row, size_t b_col,
                  size_t rows, size_t inner, size_t cols) {
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < cols; ++j) {
      float acc = 0.0f;
      for (size_t k = 0; k < inner; ++k) acc = acc + a[r * a_row + k * a_col] * b[k * b_row + j * b_col];
      c[r * cols + j] = acc;
    }
}

// torch.bmm on CPU (1.13: bmm_out_or_baddbmm_ in aten/src/ATen/native/LinearAlgebra.cpp) multiplies with its own loop
// when contraction x result rows x result cols < 400 and calls BLAS sgemm otherwise. All three PowerSGD products
// have rows x cols x rank.
bool torch_small_product(size_t rows, size_t cols, size_t rank) { return rows * cols * rank < 400; }

}  // namespace

void powersgd_p(float* p, const float* m, const float* q, size_t rows, size_t cols, size_t rank) {
  if (rows == 0 || rank == 0) return;
  if (torch_small_product(rows, cols, rank)) {
    small_matmul(p, m, cols, 1, q, rank, 1, rows, cols, rank);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows), static_cast<blasint>(rank),
              static_cast<blasint>(cols), 1.0f, m, static_cast<blasint>(std::max<size_t>(cols, 1)), q,
              static_cast<blasint>(rank), 0.0f, p, static_cast<blasint>(rank));
}

void powersgd_q(float* q, const float* m, const float* p, size_t rows, size_t cols, size_t rank) {
  if (cols == 0 || rank == 0) return;
  if (torch_small_product(rows, cols, rank)) {
    small_matmul(q, m, 1, cols, p, rank, 1, cols, rows, rank);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<blasint>(cols), static_cast<blasint>(rank),
              static_cast<blasint>(rows), 1.0f, m, static_cast<blasint>(cols), p, static_cast<blasint>(rank), 0.0f,
              q, static_cast<blasint>(rank));
}

void powersgd_decode(float* out, const float* p, const float* q, size_t rows, size_t cols, size_t rank) {
  if (rows == 0 || cols == 0) return;
  if (torch_small_product(rows, cols, rank)) {
    small_matmul(out, p, rank, 1, q, 1, rank, rows, rank, cols);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows), static_cast<blasint>(cols),
              static_cast<blasint>(rank), 1.0f, p, static_cast<blasint>(rank), q, static_cast<blasint>(rank), 0.0f,
              out, static_cast<blasint>(cols));
}

}  // namespace gs
