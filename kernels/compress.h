// Host array ops of the gradient compressors (sim/compress/ calls them): top-k, threshold, DGC sampled threshold,
// random-k, QSGD, TernGrad, signSGD + vote, 1-bit SGD, PowerSGD helpers. A new op is declared here, defined in
// compress.cpp (element math in compress_math.h), tested in tests/unit/test_compress_kernels.cpp, timed in bench/.
//
// Conventions: destination first, op(out, in..., n, ...); n counts fp32 values and must be < 2^30 for the ops with
// per-element draws (QSGD, TernGrad) and < 2^32 for index outputs (uint32 indices); index arrays come out ascending.
// Random draws are keyed by (seed, stream) through compress_draw (kernels/compress_math.h); build the stream with
// compress_stream(step, rank, bucket). Ops do not allocate per call except where noted (a per-thread scratch that
// grows once). Encoded buffers are little-endian bit streams: value i's code sits at bit offset i * width.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/compress_math.h"

namespace gs {

// ---- Draws ----------------------------------------------------------------------------------------------------------

// The 256 words of Philox blocks block0 .. block0+63 of (seed, stream, op): words[4 b + j] = compress_draw(seed,
// stream, op, block0 + b).v[j]; the encoders draw through it with kBest (AVX-512 or AVX2 when the CPU has it,
// checked once). Tests pin each ISA to compare it with compress_draw; one the CPU lacks runs the best it has.
enum class DrawIsa : uint8_t { kPortable = 0, kAvx2 = 1, kAvx512 = 2, kBest = 3 };
constexpr int kDrawBatchWords = 256;
void compress_draw_blocks(uint32_t* words, uint64_t seed, uint64_t stream, CompressDraw op, uint32_t block0,
                          DrawIsa isa = DrawIsa::kBest);
// The ISA kBest resolves to on this CPU.
DrawIsa compress_draw_best_isa();

// ---- Index selection ------------------------------------------------------------------------------------------------

// Top-k by magnitude: writes to idx[0..k) the indices of the k largest |x[i]|, ascending; returns k clamped to n.
// Ties at the k-th magnitude go to the lowest indices (deterministic). Ordered by magnitude_key (|x|'s bit pattern):
// +0 == -0, NaNs rank above +inf. Exact: a radix select on the 31-bit key in three passes over x (histogram of the
// top 11 bits; the boundary bucket's keys collected and the k-th selected exactly; ascending output). Scratch:
// per-thread, grows to the size of the boundary bucket. k < 2^32 and n < 2^32.
size_t topk_select(const float* x, size_t n, size_t k, uint32_t* idx);

// Threshold: writes the indices i with threshold_keep(x[i], tau) (compress_math.h: nonzero and |x| >= tau, or NaN),
// ascending, and returns their count. idx must have room for n entries (the loop writes one slot ahead of the count,
// branch-free). Exact zeros are never selected (tau 0 selects the nonzeros), NaN and inf values always are (tau NaN
// selects only NaNs).
size_t threshold_select(const float* x, size_t n, float tau, uint32_t* idx);

// DGC's sampled threshold (Lin et al., ICLR 2018, "Deep Gradient Compression", section 3.1 / appendix: "sample 0.1% to
// 1% of the gradients, top-k on the samples"): the magnitude of the ceil(ratio * m)-th largest |x| among m stratified
// samples (m = clamp(samples, 1, n); sample j is uniform in [j*n/m, (j+1)*n/m), drawn from Philox). With m == n it is
// the exact top-(ratio) threshold. ratio in (0, 1]; returns +inf for n == 0 or ratio <= 0 (nothing selected).
// Feed the result to threshold_select. Scratch: per-thread, m keys (4 bytes each).
float sampled_threshold(const float* x, size_t n, double ratio, uint64_t seed, uint64_t stream, size_t samples);

// Random-k: writes k distinct indices drawn uniformly from [0, n) (every k-subset equally likely), ascending.
// k > n is clamped to n (returns the count written); k < 2^29 (Philox blocks). Floyd's algorithm (Bentley & Floyd,
// CACM 1987, "A sample of brilliance"): for j = n-k .. n-1 draw t uniform in [0, j] (draw j-(n-k) uses words 0-1 /
// 2-3 of Philox block (j-(n-k))/2 as one 64-bit word, uniform_below); insert t, or j if t is taken. Membership in
// a per-thread bitmap of n bits, read out in index order. Same (seed, stream, n, k) -> same indices on every rank
// (shared_indices).
size_t randomk_indices(uint32_t* idx, size_t n, size_t k, uint64_t seed, uint64_t stream);

// ---- QSGD (Alistarh et al. 2017) ------------------------------------------------------------------------------------

// Bytes of one QSGD encoding of n values with s levels: 4 (fp32 norm) + ceil(n * (qsgd_level_bits(s) + 1) / 8).
size_t qsgd_encoded_bytes(size_t n, int s);

// ||p||^2 of p[0..n) in double, in the order of compress_math.h's kQsgdNormChunk / kQsgdNormPartials comment (16
// float lanes per chunk of 1024 values, 256 strided partials of the chunk sums, then the tail): the sum whose sqrt,
// rounded to float, is qsgd_encode's norm. The CUDA qsgd_encode adds in the same order (the same bits).
double qsgd_sum_squares(const float* p, size_t n);

// Encodes p[0..n) with s >= 1 levels into out[0..qsgd_encoded_bytes(n, s)): the fp32 norm ||p||_2
// (float(sqrt(qsgd_sum_squares(p, n)))), then per value the code level << 1 | sign (compress_math.h qsgd_level /
// qsgd_code) of width qsgd_level_bits(s) + 1, level = floor(s |p_i| / norm + u_i) with u_i from draw (kQsgd, block
// i/4, word i%4). A zero (or non-finite) norm encodes all levels 0. Unbiased: E[decoded] = p;
// Var_i = (norm/s)^2 r_i (1 - r_i), r_i = frac(s |p_i| / norm).
void qsgd_encode(uint8_t* out, const float* p, size_t n, int s, uint64_t seed, uint64_t stream);

// out[i] += decoded value i of a QSGD encoding (sign * level * norm / s).
void qsgd_decode_add(float* out, const uint8_t* in, size_t n, int s);

// ---- TernGrad (Wen et al. 2017) -------------------------------------------------------------------------------------

// Bytes of one TernGrad encoding: 4 (fp32 scale = max |p|) + ceil(n / 4) (2-bit codes, 4 per byte).
size_t terngrad_encoded_bytes(size_t n);

// Encodes p[0..n): scale = max |p_i|; code i (terngrad_code: 0 zero, 1 +scale, 2 -scale) keeps p_i's sign with
// probability |p_i| / scale, u_i from draw (kTernGrad, block i/4, word i%4). Unbiased: E[decoded] = p,
// Var_i = |p_i| (scale - |p_i|). scale 0 encodes all zeros; a NaN or inf in p makes scale non-finite and every
// decoded value NaN (the overflow shows instead of vanishing).
void terngrad_encode(uint8_t* out, const float* p, size_t n, uint64_t seed, uint64_t stream);

// out[i] += decoded value i of a TernGrad encoding.
void terngrad_decode_add(float* out, const uint8_t* in, size_t n);

// ---- signSGD (Bernstein et al., ICML 2018) and 1-bit SGD (Seide et al., Interspeech 2014): ternary sign messages ---
//
// sign(0) = 0: an exact zero (+0 or -0) sends neither sign, decodes to 0 and does not vote. A message is
//   header | sign plane | zero plane (present only when the header's zero count is > 0)
// with each plane ceil(n / 8) bytes, bit i % 8 of byte i / 8 for value i (unused high bits of the last byte 0): the
// sign plane holds negative_bit(p_i) (1 for p < 0), the zero plane zero_bit(p_i) (1 for p == 0). So a bucket
// without exact zeros costs 1 bit per value, one with zeros 2 bits per value (compress_math.h for the element math).
// Headers, little-endian: signSGD fp32 scale, uint32 zero count (kSignHeaderBytes); 1-bit SGD fp32 mean of the
// positive values, fp32 mean of the negative values, uint32 zero count (kOnebitHeaderBytes). A NaN is neither
// negative nor zero (its sign bit is 0) and makes the scale, or both means, NaN: every value of the bucket then
// decodes to a non-finite value (so a loss scaler or the divergence check sees it); an inf does the same.
// The encoders write both planes into `out` (room for the *_encoded_bytes(n, n) maximum) and return the message's
// bytes; the zero plane's bytes past the returned size are written but are not part of the message.

// Bytes of one bit plane of n values: ceil(n / 8).
size_t sign_plane_bytes(size_t n);

// Bytes of a signSGD message of n values of which `zeros` are exact zeros: 8 + plane (+ plane when zeros > 0).
size_t sign_encoded_bytes(size_t n, size_t zeros);

// Encodes p[0..n): scale = mean |p_i| over all n values (accumulated in double; 0 when n == 0), the scaled-sign
// compressor (||p||_1 / d) sign(p) of EF-signSGD (Karimireddy et al., ICML 2019), with sign(0) = 0. Returns the bytes.
size_t sign_encode(uint8_t* out, const float* p, size_t n);

// out[i] += decoded value i of a signSGD message (sign_decode: -scale, +scale, or 0 * scale for a zero).
void sign_decode_add(float* out, const uint8_t* in, size_t n);

// Majority vote of `ranks` signSGD messages (msgs[r]; Bernstein et al. 2018, Algorithm 2): out[i] = +1 when more
// ranks sent + than -, -1 when more sent -, 0 on a tie; zeros do not vote (sign_vote_value). Overwrites out (it does
// not add); the caller applies the learning rate / scale.
void sign_vote(float* out, const uint8_t* const* msgs, int ranks, size_t n);

// Bytes of a 1-bit SGD message: 12 + plane (+ plane when zeros > 0).
size_t onebit_encoded_bytes(size_t n, size_t zeros);

// Encodes p[0..n) as the mean of the positive values (p > 0, and NaN), the mean of the negative values (p < 0),
// accumulated in double (an empty group's mean is 0; both NaN when the bucket holds a NaN or inf), the zero count and
// the planes. Seide et al. quantize at threshold 0 and reconstruct each group by its mean (per column there; here one
// pair per tensor or bucket); exact zeros form a third group that decodes to 0. Returns the bytes.
size_t onebit_encode(uint8_t* out, const float* p, size_t n);

// out[i] += decoded value i of a 1-bit message (onebit_decode).
void onebit_decode_add(float* out, const uint8_t* in, size_t n);

// ---- PowerSGD helpers (Vogels et al., NeurIPS 2019, Algorithm 1) ----------------------------------------------------

// Orthonormalizes the columns of m (rows x cols, row-major) in place as PyTorch's powerSGD_hook
// _orthogonalize_gram_schmidt (modified Gram-Schmidt, column by column: col /= ||col||, or ||col|| + eps when eps > 0,
// then the later columns lose their projection on it), bit for bit in float32: torch_gram_schmidt
// (compress_math.h). eps is PowerSGDState's orthogonalization_epsilon (compression.orthogonalization_epsilon): with
// eps 0, torch's default, a zero column becomes NaN as in torch.
void orthogonalize_columns(float* m, size_t rows, size_t cols, float eps);

// The PowerSGD products in torch.bmm's arithmetic (powerSGD_hook, CPU): ATen's own float loop when rows x cols x rank
// < 400, else cblas_sgemm with the operands and transposes ATen passes to BLAS, so the bits are the hook's with the
// same BLAS library. All row-major.
// p (rows x rank) = m (rows x cols) * q (cols x rank).
void powersgd_p(float* p, const float* m, const float* q, size_t rows, size_t cols, size_t rank);

// q (cols x rank) = m^T * p, m rows x cols, p rows x rank.
void powersgd_q(float* q, const float* m, const float* p, size_t rows, size_t cols, size_t rank);

// out (rows x cols) = p (rows x rank) * q^T, q cols x rank: the decoded matrix.
void powersgd_decode(float* out, const float* p, const float* q, size_t rows, size_t cols, size_t rank);

}  // namespace gs
