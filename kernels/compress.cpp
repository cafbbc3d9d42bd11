// Host implementation of the compressor array ops (kernels/compress.h) over the element math of
// kernels/compress_math.h. Hot loops work on fixed-size chunks (Philox in batches of 16 blocks, sums in lanes) so the
// compiler vectorizes them; a few entry points get an AVX2 clone picked at load time (GS_CLONES).
#include "kernels/compress.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "kernels/compress_math.h"

#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__) && !defined(__CUDACC__)
#include <emmintrin.h>
#define GS_CLONES __attribute__((target_clones("avx2", "default")))
#define GS_HAVE_SSE2 1
#else
#define GS_CLONES
#define GS_HAVE_SSE2 0
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

// Philox4x32-10 for 16 consecutive blocks (block0 .. block0+15) of one (seed, stream, op): word j of block b lands in
// u[4 * b + j], exactly philox_draw's words (tested), computed lane-parallel so the rounds vectorize.
constexpr int kBatchBlocks = 16;
constexpr int kBatchValues = 4 * kBatchBlocks;  // 64 words per batch

inline void philox_batch(uint32_t* u, uint64_t seed, uint64_t stream, CompressDraw op, uint32_t block0) {
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

// sum of p[i]^2 in double, in float lanes over chunks of 1024 values (vectorizes; error bounded by the chunk).
double sum_squares(const float* p, size_t n) {
  double total = 0.0;
  constexpr size_t kChunk = 1024;
  size_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    float lanes[16] = {};
    for (size_t j = 0; j < kChunk; j += 16)
      for (int l = 0; l < 16; ++l) lanes[l] += p[i + j + l] * p[i + j + l];
    double s = 0.0;
    for (float v : lanes) s += v;
    total += s;
  }
  for (; i < n; ++i) total += static_cast<double>(p[i]) * p[i];
  return total;
}

}  // namespace

// ---- Index selection ------------------------------------------------------------------------------------------------

size_t topk_select(const float* x, size_t n, size_t k, uint32_t* idx) {
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
  // Pass 2: the boundary bucket's keys (branch-free append), then the exact k-th key among them.
  static thread_local std::vector<uint32_t> keys_store;
  uint32_t* keys = scratch(keys_store, in_bucket + 1);
  size_t m = 0;
  for (i = 0; i < n; ++i) {
    const uint32_t key = magnitude_key(x[i]);
    keys[m] = key;
    m += (key >> kShift) == b;
  }
  const size_t need = k - above;  // 1 <= need <= in_bucket
  std::nth_element(keys, keys + (need - 1), keys + m, std::greater<uint32_t>());
  const uint32_t kth = keys[need - 1];
  size_t greater_in_bucket = 0;
  for (size_t j = 0; j < m; ++j) greater_in_bucket += keys[j] > kth;
  size_t ties = k - above - greater_in_bucket;  // keys equal to kth to take, lowest indices first
  // Pass 3: ascending output; branch-free while at least a block of room is left, then one by one.
  size_t out = 0;
  constexpr size_t kBlock = 64;
  for (i = 0; i < n && out < k;) {
    if (k - out >= kBlock && i + kBlock <= n) {
      for (size_t j = 0; j < kBlock; ++j, ++i) {
        const uint32_t key = magnitude_key(x[i]);
        const bool tie = key == kth && ties > 0;
        idx[out] = static_cast<uint32_t>(i);
        out += (key > kth) | tie;
        ties -= tie;
      }
    } else {
      const uint32_t key = magnitude_key(x[i]);
      if (key > kth || (key == kth && ties > 0)) {
        ties -= key == kth;
        idx[out++] = static_cast<uint32_t>(i);
      }
      ++i;
    }
  }
  return out;
}

GS_CLONES size_t threshold_select(const float* x, size_t n, float tau, uint32_t* idx) {
  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    idx[out] = static_cast<uint32_t>(i);  // idx has room: out <= i < n
    out += std::fabs(x[i]) >= tau;
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
    const size_t w = 2 * (t % 2);
    const uint64_t word = (static_cast<uint64_t>(d.v[w + 1]) << 32) | d.v[w];
    const size_t j = first + t;
    size_t pick = static_cast<size_t>(uniform_below(word, static_cast<uint64_t>(j) + 1));
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
  const float norm = static_cast<float>(std::sqrt(sum_squares(p, n)));
  store_u32(out, 0);
  std::memcpy(out, &norm, sizeof norm);
  const uint32_t levels = static_cast<uint32_t>(s);
  const int width = qsgd_level_bits(s) + 1;
  const bool usable = norm > 0.0f && std::isfinite(norm);
  const float scale = usable ? static_cast<float>(static_cast<double>(s) / norm) : 0.0f;
  BitWriter writer(out + 4);
  uint32_t u[kBatchValues];
  uint32_t codes[kBatchValues];
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
    for (size_t j = 0; j < count; ++j) writer.put(codes[j], width);
  }
  writer.flush();
}

GS_CLONES void qsgd_decode_add(float* out, const uint8_t* in, size_t n, int s) {
  float norm;
  std::memcpy(&norm, in, sizeof norm);
  const float unit = norm / static_cast<float>(s);
  const int width = qsgd_level_bits(s) + 1;
  BitReader reader(in + 4, qsgd_encoded_bytes(n, s) - 4);
  for (size_t i = 0; i < n; ++i) out[i] += qsgd_decode(reader.get(width), unit);
}

// ---- TernGrad -------------------------------------------------------------------------------------------------------

size_t terngrad_encoded_bytes(size_t n) { return 4 + (n + 3) / 4; }

GS_CLONES void terngrad_encode(uint8_t* out, const float* p, size_t n, uint64_t seed, uint64_t stream) {
  uint32_t max_key = 0;
  for (size_t i = 0; i < n; ++i) max_key = std::max(max_key, magnitude_key(p[i]));
  const float scale = float_from_key(max_key);  // max |p|, NaN if any p is NaN
  std::memcpy(out, &scale, sizeof scale);
  const float inv_scale = scale > 0.0f ? 1.0f / scale : 0.0f;
  uint8_t* dst = out + 4;
  uint32_t u[kBatchValues];
  uint32_t codes[kBatchValues];
  for (size_t i0 = 0; i0 < n; i0 += kBatchValues) {
    philox_batch(u, seed, stream, CompressDraw::kTernGrad, static_cast<uint32_t>(i0 / 4));
    const size_t count = std::min<size_t>(kBatchValues, n - i0);
    const float* pc = p + i0;
    for (size_t j = 0; j < count; ++j) codes[j] = terngrad_code(pc[j], scale, inv_scale, uniform_open01(u[j]));
    for (size_t j = count; j < static_cast<size_t>(kBatchValues); ++j) codes[j] = 0;
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
  const float table[4] = {0.0f, scale, -scale, 0.0f};
  for (size_t i = 0; i < n; ++i) out[i] += table[(codes[i / 4] >> (2 * (i % 4))) & 3u];
}

// ---- signSGD and 1-bit SGD -------------------------------------------------------------------------------------------

namespace {

// Packs negative_bit(p_i) into bits (8 values per byte, the last byte's unused bits 0) and accumulates, in double,
// sum |p_i| (abs_sum), and sum and count of the negative values (when wanted). One pass over p: each chunk of 1024
// values is packed and summed while it is in L1.
struct SignSums {
  double abs_sum = 0.0;
  double negative_sum = 0.0;
  size_t negative_count = 0;
};

inline uint32_t pack8(const float* p) {
#if GS_HAVE_SSE2
  const __m128 zero = _mm_setzero_ps();
  const int lo = _mm_movemask_ps(_mm_cmplt_ps(_mm_loadu_ps(p), zero));
  const int hi = _mm_movemask_ps(_mm_cmplt_ps(_mm_loadu_ps(p + 4), zero));
  return static_cast<uint32_t>(lo | (hi << 4));
#else
  uint32_t byte = 0;
  for (int j = 0; j < 8; ++j) byte |= negative_bit(p[j]) << j;
  return byte;
#endif
}

template <bool kNegatives>
SignSums pack_signs(uint8_t* bits, const float* p, size_t n) {
  SignSums sums;
  constexpr size_t kChunk = 1024;
  size_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    const float* pc = p + i;
    for (size_t b = 0; b < kChunk / 8; ++b) bits[i / 8 + b] = static_cast<uint8_t>(pack8(pc + 8 * b));
    float abs_lanes[16] = {}, neg_lanes[16] = {};
    uint32_t neg_count[16] = {};
    for (size_t j = 0; j < kChunk; j += 16) {
      for (int l = 0; l < 16; ++l) {
        const float v = pc[j + l];
        abs_lanes[l] += std::fabs(v);
        if constexpr (kNegatives) {
          neg_lanes[l] += v < 0.0f ? v : 0.0f;
          neg_count[l] += v < 0.0f ? 1u : 0u;
        }
      }
    }
    double a = 0.0, s = 0.0;
    for (int l = 0; l < 16; ++l) {
      a += abs_lanes[l];
      s += neg_lanes[l];
      sums.negative_count += neg_count[l];
    }
    sums.abs_sum += a;
    sums.negative_sum += s;
  }
  // Tail (fewer than 1024 values): one value at a time.
  for (size_t b = i / 8; b < (n + 7) / 8; ++b) bits[b] = 0;
  for (; i < n; ++i) {
    const float v = p[i];
    bits[i / 8] = static_cast<uint8_t>(bits[i / 8] | negative_bit(v) << (i % 8));
    sums.abs_sum += std::fabs(v);
    if (v < 0.0f) {
      sums.negative_sum += v;
      ++sums.negative_count;
    }
  }
  return sums;
}

// out[i] += value[bit i] for two values, 8 per byte through a 16-entry table of 4-value nibbles (vectorizes as one
// 4-wide add per nibble).
inline void unpack_add(float* out, const uint8_t* bits, size_t n, float v0, float v1) {
  float table[16][4];
  for (int t = 0; t < 16; ++t)
    for (int j = 0; j < 4; ++j) table[t][j] = (t >> j) & 1 ? v1 : v0;
  const size_t full = n / 8;
  for (size_t b = 0; b < full; ++b) {
    const uint32_t byte = bits[b];
    float* o = out + 8 * b;
    const float* lo = table[byte & 15u];
    const float* hi = table[byte >> 4];
    for (int j = 0; j < 4; ++j) o[j] += lo[j];
    for (int j = 0; j < 4; ++j) o[4 + j] += hi[j];
  }
  for (size_t i = 8 * full; i < n; ++i) out[i] += (bits[i / 8] >> (i % 8)) & 1u ? v1 : v0;
}

}  // namespace

size_t sign_packed_bytes(size_t n) { return (n + 7) / 8; }

GS_CLONES float sign_pack(uint8_t* bits, const float* p, size_t n) {
  if (n == 0) return 0.0f;
  const SignSums sums = pack_signs<false>(bits, p, n);
  return static_cast<float>(sums.abs_sum / static_cast<double>(n));
}

GS_CLONES void sign_unpack_add(float* out, const uint8_t* bits, size_t n, float scale) {
  unpack_add(out, bits, n, scale, -scale);
}

GS_CLONES void sign_vote(float* out, const uint8_t* const* bits, int ranks, size_t n) {
  constexpr size_t kChunk = 1024;  // values per chunk; counts of negative votes in uint16 (ranks < 65536)
  uint16_t negatives[kChunk];
  for (size_t i0 = 0; i0 < n; i0 += kChunk) {
    const size_t count = std::min(kChunk, n - i0);
    std::fill(negatives, negatives + kChunk, uint16_t{0});
    for (int r = 0; r < ranks; ++r) {
      const uint8_t* b = bits[r] + i0 / 8;
      if (count == kChunk) {
        for (size_t j = 0; j < kChunk; ++j)
          negatives[j] = static_cast<uint16_t>(negatives[j] + ((b[j / 8] >> (j % 8)) & 1u));
      } else {
        for (size_t j = 0; j < count; ++j)
          negatives[j] = static_cast<uint16_t>(negatives[j] + ((b[j / 8] >> (j % 8)) & 1u));
      }
    }
    for (size_t j = 0; j < count; ++j) {
      const int twice = 2 * static_cast<int>(negatives[j]);
      out[i0 + j] = twice > ranks ? -1.0f : (twice < ranks ? 1.0f : 0.0f);
    }
  }
}

size_t onebit_encoded_bytes(size_t n) { return 8 + (n + 7) / 8; }

GS_CLONES void onebit_encode(uint8_t* out, const float* p, size_t n) {
  const SignSums sums = pack_signs<true>(out + 8, p, n);
  // sum of the values >= 0 = sum |p| + sum of the negatives (|v| = -v there).
  const size_t positive_count = n - sums.negative_count;
  const double positive_sum = sums.abs_sum + sums.negative_sum;
  const float mean_positive = positive_count ? static_cast<float>(positive_sum / positive_count) : 0.0f;
  const float mean_negative = sums.negative_count ? static_cast<float>(sums.negative_sum / sums.negative_count) : 0.0f;
  std::memcpy(out, &mean_positive, 4);
  std::memcpy(out + 4, &mean_negative, 4);
}

GS_CLONES void onebit_decode_add(float* out, const uint8_t* in, size_t n) {
  float mean_positive, mean_negative;
  std::memcpy(&mean_positive, in, 4);
  std::memcpy(&mean_negative, in + 4, 4);
  unpack_add(out, in + 8, n, mean_positive, mean_negative);
}

// ---- PowerSGD helpers -------------------------------------------------------------------------------------------------

void orthogonalize_columns(float* m, size_t rows, size_t cols) {
  constexpr double kEps = 1e-8;
  for (size_t c = 0; c < cols; ++c) {
    double sq = 0.0;
    for (size_t r = 0; r < rows; ++r) sq += static_cast<double>(m[r * cols + c]) * m[r * cols + c];
    const float inv = static_cast<float>(1.0 / (std::sqrt(sq) + kEps));
    for (size_t r = 0; r < rows; ++r) m[r * cols + c] *= inv;
    for (size_t c2 = c + 1; c2 < cols; ++c2) {
      double dot = 0.0;
      for (size_t r = 0; r < rows; ++r) dot += static_cast<double>(m[r * cols + c]) * m[r * cols + c2];
      const float d = static_cast<float>(dot);
      for (size_t r = 0; r < rows; ++r) m[r * cols + c2] -= d * m[r * cols + c];
    }
  }
}

void powersgd_p(float* p, const float* m, const float* q, size_t rows, size_t cols, size_t rank) {
  if (rows == 0 || rank == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows), static_cast<blasint>(rank),
              static_cast<blasint>(cols), 1.0f, m, static_cast<blasint>(std::max<size_t>(cols, 1)), q,
              static_cast<blasint>(rank), 0.0f, p, static_cast<blasint>(rank));
}

void powersgd_q(float* q, const float* m, const float* p, size_t rows, size_t cols, size_t rank) {
  if (cols == 0 || rank == 0) return;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<blasint>(cols), static_cast<blasint>(rank),
              static_cast<blasint>(rows), 1.0f, m, static_cast<blasint>(cols), p, static_cast<blasint>(rank), 0.0f,
              q, static_cast<blasint>(rank));
}

}  // namespace gs
