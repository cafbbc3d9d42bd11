// Element math of the gradient compressors, shared by the host array ops (kernels/compress.cpp) and later CUDA twins:
// magnitude keys for top-k, the Philox keying of every compressor draw, QSGD / TernGrad stochastic rounding and the
// bit codes. Header-only GS_HD inline functions (plain C++ without nvcc); a new compressor adds its element math here.
#pragma once
#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/dense_math.h"     // torch_column_sum
#include "kernels/float_formats.h"  // FloatFormat, round_through
#include "kernels/rng.h"  // GS_HD, philox_draw, Purpose::kCompress

namespace gs {

// ---- Magnitude keys -----------------------------------------------------------------------------------------------

// The IEEE-754 bit pattern of |x| (sign bit cleared) as an unsigned key. For non-NaN floats key order equals |x|
// order (+0 and -0 share key 0); a NaN's key is above +inf's (0x7f800000), so NaNs rank as the largest magnitudes.
GS_HD inline uint32_t magnitude_key(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits & 0x7fffffffu;
}

// Threshold selection of one value (the threshold compressor and DGC): kept when it is not an exact zero and
// |x| >= tau, and always when it is NaN. So an exact zero is never sent (it carries nothing: an all-zero bucket sends
// an empty message whatever tau is) and a non-finite value always is (inf passes any finite tau; NaN compares false,
// so it is kept explicitly): the overflow shows in the reduced gradient instead of hiding in a residual.
GS_HD inline bool threshold_keep(float x, float tau) {
  return x != 0.0f && (fabsf(x) >= tau || magnitude_key(x) > 0x7f800000u);
}

// ---- Casts (fp16, bf16, fp8: sim/compress/cast.cpp) -----------------------------------------------------------------

// The wire value of one element of a cast all-reduce, in the order of DDP's fp16_compress_hook
// (torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py: the bucket holds each rank's mean gradient;
// `buffer.to(torch.float16).div_(world_size)`): the rank's mean m = p / b in fp32 (p: the rank's gradient sum over
// its b samples), cast to f, then divided by pre_divisor in f (1: no division). So the cast sees the mean, not the
// sum: an fp16 wire overflows where the mean does (|m| > 65504), not b times earlier. The quotient is taken in double
// and rounded to fp32, then to f: double rounding through a format with at least 2p + 2 significand bits is
// innocuous (Figueroa, SIGNUM 1995), so each step is the correctly rounded operation in f.
GS_HD inline float cast_wire_value(FloatFormat f, float p, float b, double pre_divisor) {
  const float h = round_through(f, p / b);
  return pre_divisor == 1.0 ? h : round_through(f, static_cast<float>(static_cast<double>(h) / pre_divisor));
}

// x / post_divisor rounded to f (the post-division of a cast all-reduce's sum; 1: x unchanged), as above.
GS_HD inline float cast_post_divide(FloatFormat f, float x, double post_divisor) {
  return post_divisor == 1.0 ? x : round_through(f, static_cast<float>(static_cast<double>(x) / post_divisor));
}

// ---- Draws --------------------------------------------------------------------------------------------------------

// Which compressor op a draw belongs to; the top 4 bits of Philox's index word, so two ops never share numbers even
// with the same (seed, stream). Append only (values are stable).
enum class CompressDraw : uint32_t {
  kRandomK = 1,    // random-k index selection (Floyd's algorithm)
  kSample = 2,     // DGC's sampled threshold (one draw per stratum)
  kQsgd = 3,       // QSGD stochastic rounding
  kTernGrad = 4,   // TernGrad stochastic rounding
};

constexpr uint32_t kCompressBlockBits = 28;  // blocks per (op, seed, stream): 2^28 draws of 4 words (n <= 2^30)

// The 64-bit stream of one compressor call: the training step in the low 32 bits, then rank (16 bits) and bucket
// (16 bits). rank and bucket must be < 65536 (not checked here; the pipeline validates ranks).
GS_HD inline uint64_t compress_stream(uint32_t step, uint32_t rank, uint32_t bucket) {
  return static_cast<uint64_t>(step) | (static_cast<uint64_t>(rank & 0xffffu) << 48) |
         (static_cast<uint64_t>(bucket & 0xffffu) << 32);
}

// Four words for block `block` (< 2^28) of op `op`: Philox4x32-10 with key = seed and counter
// (Purpose::kCompress, stream low 32 bits, stream high 32 bits, op << 28 | block). Element i of a per-element op
// uses word i % 4 of block i / 4, so any thread (host or GPU) can draw element i's number on its own.
GS_HD inline Draw4 compress_draw(uint64_t seed, uint64_t stream, CompressDraw op, uint32_t block) {
  return philox_draw(seed, Purpose::kCompress, static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32),
                     (static_cast<uint32_t>(op) << kCompressBlockBits) | block);
}

// One Philox4x32 round on a counter (c0..c3) with key (k0, k1) (Random123's philox4x32round): the building block of
// the host's vectorized batches of draws, which must equal philox_draw word for word (tested).
GS_HD inline void philox_round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0, uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
  const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  c0 = hi1 ^ c1 ^ k0;
  c1 = lo1;
  c2 = hi0 ^ c3 ^ k1;
  c3 = lo0;
}
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // Weyl key increments between rounds (Random123)
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

// Uniform integer in [0, range) from a 64-bit word by multiply-shift (Lemire 2019): floor(w * range / 2^64). Each
// value has probability within range / 2^64 of 1/range (below 2^-32 relative for range < 2^32).
GS_HD inline uint64_t uniform_below(uint64_t word, uint64_t range) {
  // High 64 bits of the 128-bit product from 32-bit halves (no __int128: -Wpedantic, and the same on GPUs).
  const uint64_t a_lo = word & 0xffffffffu, a_hi = word >> 32, b_lo = range & 0xffffffffu, b_hi = range >> 32;
  const uint64_t p0 = a_lo * b_lo, p1 = a_lo * b_hi, p2 = a_hi * b_lo, p3 = a_hi * b_hi;
  const uint64_t mid = (p0 >> 32) + (p1 & 0xffffffffu) + (p2 & 0xffffffffu);
  return p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
}

// ---- Random-k: Floyd's sampler in a parallel form ------------------------------------------------------------------
// Floyd's algorithm (Bentley & Floyd, CACM 1987) for k of n (0 < k < n), as gs::randomk_indices runs it: step t < k
// has j_t = first + t (first = n - k) and pick_t = uniform_below(w_t, j_t + 1); it adds pick_t to the set S unless
// pick_t is in S_{t-1} already ("collided_t"), else j_t. Whether it adds pick_t or j_t, pick_t is in S_t, so
// S_{t-1} = {pick_u : u < t} u {j_u : u < t, collided_u}, hence
//   collided_t = dup_t || (first <= pick_t < j_t && collided_{pick_t - first}),
// dup_t: some u < t has pick_u == pick_t; and the final set is {pick_t : t < k} u {j_t : collided_t}. Each pick is
// one counter-based draw and each chain goes to strictly smaller steps, so all k steps resolve independently (the
// CUDA random-k, kernels/cuda_kernels.cu), to the same set as the sequential walk.

// pick_t of Floyd's step t (t < k < n, n <= 2^32) from d, the draw (kRandomK, block t / 2) (two steps per draw: the
// sequential walk draws once per pair): words 2 (t % 2) (low half) and 2 (t % 2) + 1 (high half) as one 64-bit word,
// uniform_below(word, first + t + 1). A value in [0, n - k + t].
GS_HD inline uint64_t randomk_pick_from(const Draw4& d, uint64_t n, uint64_t k, uint64_t t) {
  const uint64_t w = 2 * (t % 2);
  const uint64_t word = (static_cast<uint64_t>(d.v[w + 1]) << 32) | d.v[w];
  return uniform_below(word, n - k + t + 1);
}

// pick_t drawing its own block (a thread per step).
GS_HD inline uint64_t randomk_pick(uint64_t seed, uint64_t stream, uint64_t n, uint64_t k, uint64_t t) {
  return randomk_pick_from(compress_draw(seed, stream, CompressDraw::kRandomK, static_cast<uint32_t>(t / 2)), n, k, t);
}

// dup_t from the picks sorted stably by value (sorted[i]: the pick of the i-th (pick, t) pair in (pick, t) order):
// the pair at position i has an earlier step with the same pick iff its predecessor has the same pick.
GS_HD inline bool randomk_sorted_dup(const uint32_t* sorted, uint64_t i) {
  return i > 0 && sorted[i] == sorted[i - 1];
}

// collided_t (above) from picks[u] = pick_u and dup[u] = dup_u (0 or 1) for u <= t: follows the chain
// t -> pick_t - first while the pick is a j of an earlier step, stopping at a duplicate (true) or a pick below first or
// at least j_t (false). Each link goes to a smaller step, so at most t + 1 links (expected O(log t)).
GS_HD inline bool randomk_collided(uint64_t t, uint64_t first, const uint32_t* picks, const uint8_t* dup) {
  for (;;) {
    if (dup[t]) return true;
    const uint64_t p = picks[t];
    if (p < first || p >= first + t) return false;
    t = p - first;
  }
}

// ---- QSGD (Alistarh et al., NeurIPS 2017, "QSGD: Communication-Efficient SGD via Gradient Quantization") -----------

// The order of QSGD's norm sum ||p||^2 in double (gs::qsgd_encode and the CUDA qsgd_encode, bit for bit): chunks of
// kQsgdNormChunk values, each summed in 16 float lanes (lane l: the squares of elements l, l + 16, ... in order,
// float multiply and add), the lanes added in double in lane order; then kQsgdNormPartials strided partials in double
// (partial q: the chunk sums c = q, q + P, q + 2P, ... in order, from 0.0), the partials added in order from 0.0;
// then the tail (n mod kQsgdNormChunk values) element by element, double(p_i) * p_i, in order. With at most P chunks
// each partial is one chunk sum, so the sum is the plain chunk-order sum. P is the device's final-kernel block size.
constexpr size_t kQsgdNormChunk = 1024;
constexpr size_t kQsgdNormPartials = 256;

// Bits of one QSGD level in [0, s]: ceil(log2(s + 1)); s >= 1.
GS_HD inline int qsgd_level_bits(int s) {
  int b = 0;
  while ((1u << b) < static_cast<uint32_t>(s) + 1u) ++b;
  return b;
}

// Level of one value: l = floor(a * scale + u), a = |p_i|, scale = s / ||p||_2, u uniform in (0, 1); clamped to
// [0, s] (float rounding can put a * scale a hair above s). With r = a * scale this is floor(r) + 1 with probability
// frac(r) (to the 2^-23 resolution of u) and floor(r) otherwise, so E[l] = r: unbiased stochastic rounding (paper
// eq. 1).
GS_HD inline uint32_t qsgd_level(float a, float scale, float u, uint32_t s) {
  const float r = a * scale + u;
  const uint32_t l = static_cast<uint32_t>(r);  // r >= 0: truncation is floor
  return l < s ? l : s;
}

// The wire code of one QSGD value: level << 1 | sign (sign = 1 for p < 0); (level bits + 1) bits wide.
GS_HD inline uint32_t qsgd_code(float p, uint32_t level) { return (level << 1) | (p < 0.0f ? 1u : 0u); }

// Decoded value of one code: +-level * unit with unit = ||p||_2 / s.
GS_HD inline float qsgd_decode(uint32_t code, float unit) {
  const float v = static_cast<float>(code >> 1) * unit;
  return (code & 1u) ? -v : v;
}

// ---- TernGrad (Wen et al., NeurIPS 2017, "TernGrad: Ternary Gradients to Reduce Communication") --------------------

// 2-bit code of one value: 0 = zero, 1 = +scale, 2 = -scale (3 unused). The value is kept with probability
// |p| / scale, scale = max |p| > 0 (always when |p| >= scale, else when u < |p| * inv_scale, u uniform in (0, 1)), so
// E[decoded] = p to the 2^-23 resolution of u (paper eq. 2: ternarize with a Bernoulli of |g| / s_t). A zero is
// never kept. The caller handles scale == 0 (all codes 0). Written as one chain of selects so the host loop
// vectorizes (the keep decision is random: a branch would mispredict).
GS_HD inline uint32_t terngrad_code(float p, float scale, float inv_scale, float u) {
  const float a = fabsf(p);
  const float t = a >= scale ? 2.0f : a * inv_scale;
  return u < t ? (p < 0.0f ? 2u : 1u) : 0u;
}

// Decoded value of one code; 0 * scale for code 0, so a non-finite scale (NaN or inf in the input) decodes to NaN.
GS_HD inline float terngrad_decode(uint32_t code, float scale) {
  return code == 1u ? scale : (code == 2u ? -scale : 0.0f * scale);
}

// ---- Sign and 1-bit (ternary: sign(0) = 0) ------------------------------------------------------------------------

// Header bytes of the ternary sign messages (kernels/compress.h): signSGD fp32 scale + uint32 zero count; 1-bit SGD
// fp32 positive mean + fp32 negative mean + uint32 zero count. The planes follow.
constexpr size_t kSignHeaderBytes = 8;
constexpr size_t kOnebitHeaderBytes = 12;

// Sign plane bit of one value (signSGD and 1-bit SGD): 1 when p < 0, else 0 (+0, -0 and NaN give 0).
GS_HD inline uint32_t negative_bit(float p) { return p < 0.0f ? 1u : 0u; }

// Zero plane bit of one value: 1 for an exact zero (+0 or -0; a subnormal is not zero), else 0. A value with its zero
// bit set sends neither sign: sign(0) = 0 (it decodes to 0 and does not vote).
GS_HD inline uint32_t zero_bit(float p) { return p == 0.0f ? 1u : 0u; }

// Decoded signSGD value: -scale, +scale, or 0 * scale for a zero (0, or NaN when the scale is non-finite: a NaN or
// inf anywhere in the bucket makes every decoded value non-finite, so the overflow shows).
GS_HD inline float sign_decode(uint32_t negative, uint32_t zero, float scale) {
  return zero ? 0.0f * scale : (negative ? -scale : scale);
}

// Decoded 1-bit SGD value: the negative group's mean, the positive group's mean, or 0 * mean_positive for a zero (0
// for finite means; the encoder makes both means NaN when the bucket holds a NaN or inf).
GS_HD inline float onebit_decode(uint32_t negative, uint32_t zero, float mean_positive, float mean_negative) {
  return zero ? 0.0f * mean_positive : (negative ? mean_negative : mean_positive);
}

// Majority vote of one value over `ranks` ternary signs (Bernstein et al. 2018, Algorithm 2, with sign(0) = 0):
// negatives ranks sent -, zeros sent nothing, the rest sent +; +1, -1, or 0 on a tie (all zeros included).
GS_HD inline float sign_vote_value(int negatives, int zeros, int ranks) {
  const int positives = ranks - negatives - zeros;
  return positives > negatives ? 1.0f : (positives < negatives ? -1.0f : 0.0f);
}

// ---- DeepSpeed's 1-bit optimizers (1-bit Adam, 0/1 Adam, 1-bit LAMB: sim/strategy/onebit_adam.h) --------------------
// Their element math in float32 as torch's CPU kernels run DeepSpeed's tensor ops (deepspeed/runtime/fp16/onebit/
// adam.py, zoadam.py, lamb.py): add_(x, alpha=a) and addcmul_ fuse (one rounding, fmaf); mul_, div_, sqrt and add_
// without alpha round each operation. The scalars are Python floats rounded to float by the caller.

// exp_avg.mul_(beta1).add_(1 - beta1, grad): m b1 rounded, then one fused multiply-add.
GS_HD inline float deepspeed_first_moment_value(float m, float g, float b1, float a1) { return fmaf(a1, g, m * b1); }

// exp_avg_sq.mul_(beta2).addcmul_(1 - beta2, grad, grad): v b2 rounded, (1 - b2) g rounded, then fused.
GS_HD inline float deepspeed_second_moment_value(float v, float g, float b2, float a2) {
  return fmaf(a2 * g, g, v * b2);
}

// The scalars of DeepSpeed's Adam update (OnebitAdam.step, ZeroOneAdam.step): eps, weight_decay and -lr as float;
// decay: weight_decay > 0 (the update adds wd p only then).
struct DeepSpeedUpdate {
  float eps = 0.0f;
  float weight_decay = 0.0f;
  float neg_lr = 0.0f;
  bool decay = false;
};

// update = exp_avg / (exp_avg_sq.sqrt() + eps), update += weight_decay * p when decay (the update before -lr).
GS_HD inline float deepspeed_direction(float m, float v, float p, float eps, float weight_decay, bool decay) {
  const float u = m / (sqrtf(v) + eps);
  return decay ? u + weight_decay * p : u;
}

// DeepSpeed's compressed_allreduce (deepspeed/runtime/comm/nccl.py): the bit a value sends, 1 where !(x < 0)
// (x.sign().add_(1).bool(): +1 for 0 and -0 too, unlike signSGD's sign(0) = 0).
GS_HD inline bool onebit_sign_bit(float x) { return !(x < 0.0f); }

// The scale of `count` compensated values with sum of squares ss: torch.linalg.norm(x) / np.sqrt(numel), the norm
// summed in double and rounded to float, divided by sqrt(count) rounded to float.
GS_HD inline float onebit_scale(double sum_squares, size_t count) {
  return static_cast<float>(sqrt(sum_squares)) / static_cast<float>(sqrt(static_cast<double>(count)));
}

// The 4-byte words of one compressed message of `count` values: the scale, then the packed signs (count / 8 bytes,
// first value in the most significant bit: numpy / cupy packbits), the last word's unused bytes zero.
GS_HD inline size_t onebit_message_words(size_t count) { return 1 + ((count + 7) / 8 + 3) / 4; }

// Bit i of a message's packed signs (`signs`: the bytes after its scale word).
GS_HD inline bool onebit_message_bit(const uint8_t* signs, size_t i) {
  return (signs[i / 8] & (0x80u >> (i % 8))) != 0;
}

// ---- PowerSGD: Gram-Schmidt in PyTorch 1.13's float reductions --------------------------------------------------
// powerSGD_hook._orthogonalize_gram_schmidt (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py) on a
// matrix [rows, cols] row-major, in float32 and in the orders of ATen's CPU kernels (the AVX2 kernels torch 1.13
// runs on x86-64: 8 float lanes, FMA), so gradsweep's factors are the hook's bit for bit (tests/parity/).

// Float lanes of ATen's Vectorized<float> in its AVX2 kernels.
constexpr size_t kTorchFloatLanes = 8;

// sum x[i s]^2 over i < n as torch.linalg.vector_norm(ord 2) accumulates it before the square root. A contiguous
// column (s = 1: ATen's last-dim norm kernel) sums 8 lanes by FMA (lane l takes i = l mod 8 up to the last whole
// group of 8), adds the lanes in order, then the tail of n mod 8 values in order: a first group of 4 as rounded
// squares added one by one (the compiler's in-order vectorization of that loop: no FMA), the rest by FMA. A strided
// column (s > 1: NormTwoOps in binary_kernel_reduce, contracted to FMA in the AVX2 build) is one FMA chain in index
// order. Both orders were measured against torch 1.13 (tests/parity/test_torch_rounding.py).
GS_HD inline float torch_sum_squares(const float* x, size_t n, size_t s) {
  if (s != 1) {
    float acc = 0.0f;
    for (size_t i = 0; i < n; ++i) acc = fmaf(x[i * s], x[i * s], acc);
    return acc;
  }
  float lane[kTorchFloatLanes] = {};
  const size_t whole = n - n % kTorchFloatLanes;
  size_t i = 0;
  for (; i < whole; i += kTorchFloatLanes)
    for (size_t l = 0; l < kTorchFloatLanes; ++l) lane[l] = fmaf(x[i + l], x[i + l], lane[l]);
  float acc = lane[0];
  for (size_t l = 1; l < kTorchFloatLanes; ++l) acc = acc + lane[l];
  if (n - i >= 4)
    for (const size_t end = i + 4; i < end; ++i) acc = acc + x[i] * x[i];
  for (; i < n; ++i) acc = fmaf(x[i], x[i], acc);
  return acc;
}

// Orthonormalizes the columns of m (rows x cols, row-major) in place as the hook's _orthogonalize_gram_schmidt:
// column by column, col /= ||col|| (col /= ||col|| + eps when eps > 0: the state's orthogonalization_epsilon; with
// eps 0 a zero column becomes NaN, as in torch), then every later column loses torch.sum(col * rest) * col: the
// rounded products (written to scratch, rows floats) summed in ATen's cascade order (torch_column_sum of one
// contiguous column, kernels/dense_math.h), times col, subtracted. PyTorch runs this for rank <= 2 (rank >= 3:
// torch.linalg.qr); the column of a rank-1 matrix is contiguous, wider ones are strided (torch_sum_squares).
GS_HD inline void torch_gram_schmidt(float* m, size_t rows, size_t cols, float eps, float* scratch) {
  for (size_t c = 0; c < cols; ++c) {
    float* col = m + c;
    const float norm = sqrtf(torch_sum_squares(col, rows, cols));
    const float divisor = eps == 0.0f ? norm : norm + eps;
    for (size_t r = 0; r < rows; ++r) col[r * cols] = col[r * cols] / divisor;
    for (size_t c2 = c + 1; c2 < cols; ++c2) {
      float* rest = m + c2;
      for (size_t r = 0; r < rows; ++r) scratch[r] = col[r * cols] * rest[r * cols];
      const float dot = torch_column_sum(scratch, static_cast<int64_t>(rows), int64_t{1}, int64_t{0});
      for (size_t r = 0; r < rows; ++r) rest[r * cols] = rest[r * cols] - dot * col[r * cols];
    }
  }
}

}  // namespace gs
