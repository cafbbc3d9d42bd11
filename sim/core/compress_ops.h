// The gradient compressors' element operations on the buffers of one memory (host RAM, or a backend's device memory):
// what the gather compressors (top-k, random-k, threshold, DGC, QSGD, TernGrad, signSGD, 1-bit SGD), the casts' wire
// all-reduce, PowerSGD's factors, the compressed reduction's error feedback and DeepSpeed's 1-bit optimizers (1-bit
// Adam, 0/1 Adam, 1-bit LAMB: their updates and compressed all-reduce) do with their buffers, so that the same
// compressor code runs on the host and on a GPU (docs/design.md, section 6, "The backend seam"). A memory offers them
// through ElementOps::compress_ops(). The host's are the host ops of kernels/compress.h (the loops the host backend
// always ran, so its bits do not change); the cuda backend's are the launchers of kernels/cuda_kernels.h, the host ops'
// twins (tested against them in the GPU suites). Extend: a new operation is one virtual here, its host twin in
// compress_ops.cpp and its twin in every device memory (the cuda backend's CudaElementOps and the tests' SealedMemory).
//
// Conventions: `rank` selects the rank's memory (and, on a device, its stream: the operation is ordered after the
// rank's earlier ones and may return before the device ran it, except those that return a count or a size); every
// pointer is that memory's, except the array of message pointers sign_vote_scaled takes (a host array of the
// memory's pointers). n counts fp32 values; index arrays are uint32 and ascending; an encoded message is the byte
// layout kernels/compress.h documents (the same bytes in every memory, up to the values its comments name as
// accumulated in another order on a device: QSGD's norm, signSGD's scale, 1-bit SGD's means).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/compress_math.h"
#include "kernels/float_formats.h"

namespace gs {

// What one side of DeepSpeed's compressed all-reduce measured (CompressOps::onebit_compensate).
struct OnebitSide {
  float scale = 0.0f;              // ||x|| / sqrt(count) of the compensated values
  double error_sum_squares = 0.0;  // sum of the new error's squares in double (its L2 norm squared)
};

// What 1-bit LAMB's frozen-variance update needs of one tensor besides its update (CompressOps::lamb_frozen_direction).
struct LambFrozenTerms {
  double pre_sum_squares = 0.0;  // sum of update_prelim[i]^2 in double (update_prelim = m / (sqrt(v) + eps))
  float max_ratio = 0.0f;        // max over i of (sqrt(v) + eps) / (sqrt(v_fresh) + eps), when no ratio is NaN
  bool nan = false;              // some ratio is NaN (then DeepSpeed's max is NaN)
};

class CompressOps {
 public:
  virtual ~CompressOps() = default;

  // ---- Index selection (kernels/compress.h topk_select, threshold_select, randomk_indices) ----
  // idx[0..min(k, n)) = the k largest |x| (ties: lowest index), ascending; returns min(k, n).
  virtual size_t topk_select(int rank, const float* x, size_t n, size_t k, uint32_t* idx) = 0;
  // idx = the ascending indices with threshold_keep(x[i], tau); returns their count. idx has room for n entries.
  virtual size_t threshold_select(int rank, const float* x, size_t n, float tau, uint32_t* idx) = 0;
  // k distinct indices drawn by (seed, stream), ascending; returns min(k, n).
  virtual size_t randomk_indices(int rank, uint32_t* idx, size_t n, size_t k, uint64_t seed, uint64_t stream) = 0;
  // DGC's threshold: the ceil(ratio m)-th largest |x| among m stratified samples (kernels/compress.h
  // sampled_threshold, exact on both memories). Waits for the device.
  virtual float sampled_threshold(int rank, const float* x, size_t n, double ratio, uint64_t seed, uint64_t stream,
                                  size_t samples) = 0;

  // ---- Sparse messages ----
  // vals[j] = x[idx[j]] for j < k.
  virtual void gather(int rank, float* vals, const float* x, const uint32_t* idx, size_t k) = 0;
  // out[idx[j]] += vals[j] for j < k, in j order (distinct indices).
  virtual void scatter_add(int rank, float* out, const uint32_t* idx, const float* vals, size_t k) = 0;
  // x[idx[j]] = 0 for j < k (DGC's masking of the sent coordinates).
  virtual void zero_at(int rank, float* x, const uint32_t* idx, size_t k) = 0;

  // ---- Quantizers (kernels/compress.h; out has room for the kind's *_encoded_bytes) ----
  virtual void qsgd_encode(int rank, uint8_t* out, const float* p, size_t n, int s, uint64_t seed,
                           uint64_t stream) = 0;
  virtual void qsgd_decode_add(int rank, float* out, const uint8_t* in, size_t n, int s) = 0;
  virtual void terngrad_encode(int rank, uint8_t* out, const float* p, size_t n, uint64_t seed, uint64_t stream) = 0;
  virtual void terngrad_decode_add(int rank, float* out, const uint8_t* in, size_t n) = 0;
  // signSGD / 1-bit SGD: out has room for sign_encoded_bytes(n, n) / onebit_encoded_bytes(n, n); returns the
  // message's bytes (the zero plane present only when the bucket holds an exact zero).
  virtual size_t sign_encode(int rank, uint8_t* out, const float* p, size_t n) = 0;
  virtual void sign_decode_add(int rank, float* out, const uint8_t* in, size_t n) = 0;
  virtual size_t onebit_encode(int rank, uint8_t* out, const float* p, size_t n) = 0;
  virtual void onebit_decode_add(int rank, float* out, const uint8_t* in, size_t n) = 0;
  // signSGD with vote: out[i] = sign_vote(msgs)[i] * s, s = the fp32 sum of the messages' scales in rank order
  // (kernels/compress.h sign_vote; Bernstein et al. 2018, Algorithm 2). msgs: a host array of `ranks` pointers.
  virtual void sign_vote_scaled(int rank, float* out, const uint8_t* const* msgs, int ranks, size_t n) = 0;

  // ---- Casts (sim/compress/cast.cpp; element math kernels/compress_math.h, float_formats.h) ----
  // wire[i] = cast_wire_value(f, p[i], bf, pre) (the mean p / bf cast to f, divided by pre in f), own[i] =
  // float(double(wire[i]) * pre * b) (what the others will reconstruct, in the units of p; own may be nullptr, and
  // wire may be p).
  virtual void cast_encode(int rank, float* wire, float* own, const float* p, size_t n, FloatFormat f, float bf,
                           double pre, double b) = 0;
  // acc[i] = add_in_format(f, acc[i], x[i]) (the sum in the wire format, rounded after the add).
  virtual void add_in_format(int rank, float* acc, const float* x, size_t n, FloatFormat f) = 0;
  // x[i] = cast_post_divide(f, x[i], post) (x / post rounded to f).
  virtual void post_divide_in_format(int rank, float* x, size_t n, FloatFormat f, double post) = 0;

  // ---- PowerSGD (sim/compress/powersgd.cpp; kernels/compress.h), row-major ----
  // The columns of m (rows x cols) orthonormalized in place, as PyTorch's powerSGD_hook (bit for bit on both).
  virtual void orthogonalize_columns(int rank, float* m, size_t rows, size_t cols, float eps) = 0;
  // p (rows x r) = m (rows x cols) q (cols x r); q (cols x r) = m^T p; out (rows x cols) = p q^T. Host: ATen's
  // arithmetic (kernels/compress.h powersgd_p / _q / _decode); a device: its BLAS (cuBLAS SGEMM, fp32 compute), the
  // host's to rounding.
  virtual void powersgd_p(int rank, float* p, const float* m, const float* q, size_t rows, size_t cols, size_t r) = 0;
  virtual void powersgd_q(int rank, float* q, const float* m, const float* p, size_t rows, size_t cols, size_t r) = 0;
  virtual void powersgd_decode(int rank, float* out, const float* p, const float* q, size_t rows, size_t cols,
                               size_t r) = 0;

  // ---- Error feedback (sim/compress/reduce.h), each one pass ----
  // Momentum correction (Lin et al. 2018): u[i] = u[i] * m + g[i] (product and sum rounded apart), e[i] += u[i],
  // g[i] = e[i].
  virtual void momentum_feed_in(int rank, float* u, float* e, float* g, size_t n, float m) = 0;
  // e[i] = p[i] - own[i]; returns the sum of e[i]^2 in double. The three sums here are in index order on the host and
  // in a fixed order of a device's own (the host's to rounding); each waits for the device.
  virtual double residual_of(int rank, float* e, const float* p, const float* own, size_t n) = 0;
  // Momentum factor masking: u[i] = e[i] = 0 where own[i] != 0 (the sent coordinates); returns the sum of e[i]^2.
  virtual double mask_sent(int rank, float* u, float* e, const float* own, size_t n) = 0;
  // sum over i of (double(a[i]) - b[i])^2 (EF21's unsent norm).
  virtual double sum_squared_difference(int rank, const float* a, const float* b, size_t n) = 0;
  // out[i] = sum[i] / s (IEEE division): the step's average from the decoded sum.
  virtual void average(int rank, float* out, const float* sum, size_t n, float s) = 0;

  // ---- DeepSpeed's 1-bit optimizers (sim/strategy/onebit_adam.h; element math kernels/compress_math.h) ----
  // 1-bit Adam, 0/1 Adam and 1-bit LAMB (deepspeed/runtime/fp16/onebit/adam.py, zoadam.py, lamb.py). The sums of
  // squares returned are in double, in index order on the host and in a fixed order of a device's own (the host's to
  // rounding; the scale rounded from one may then differ in its last bit); each op that returns waits for the device.
  // m[i] = deepspeed_first_moment_value(m[i], g[i], b1, a1) (exp_avg.mul_(b1).add_(1 - b1, g)); b1 = float(beta1),
  // a1 = float(1 - beta1).
  virtual void deepspeed_first_moment(int rank, float* m, const float* g, size_t n, float b1, float a1) = 0;
  // v[i] = deepspeed_second_moment_value(v[i], g[i], b2, a2) (exp_avg_sq.mul_(b2).addcmul_(1 - b2, g, g)).
  virtual void deepspeed_second_moment(int rank, float* v, const float* g, size_t n, float b2, float a2) = 0;
  // u = deepspeed_direction(m[i], v[i], p[i], ...); p[i] = p[i] + neg_lr u; accumulated[i] = accumulated[i] +
  // neg_lr u when accumulated is not null (0/1 Adam's momentum_accumulator). The product rounded apart from the sums.
  virtual void deepspeed_update(int rank, float* p, const float* m, const float* v, size_t n, const DeepSpeedUpdate& s,
                                float* accumulated) = 0;
  // One side of DeepSpeed's compressed_allreduce (NcclBackend.compressed_allreduce, deepspeed/runtime/comm/nccl.py)
  // over count values: x[i] = x[i] + error[i] (buffer_m.add_(worker_error)); s = onebit_scale(sum of x[i]^2, count);
  // error[i] = x[i] - (onebit_sign_bit(x[i]) ? s : -s); message (onebit_message_words(count) 4-byte words of this
  // memory) = s as a float in word 0, then the packed onebit_sign_bit(x[i]) (numpy packbits order), the rest of the
  // last word zero. Returns s and the new error's sum of squares.
  virtual OnebitSide onebit_compensate(int rank, float* message, float* x, float* error, size_t count) = 0;
  // The server's chunk from every rank's worker message (messages: `ranks` messages of `words` words each, in rank
  // order): c[i] = sum over ranks j in order of (bit first + i of message j ? s_j inv : -(s_j inv)) for i < count,
  // s_j its scale (word 0); the first term assigned, the others added (DeepSpeed's cupy unpack, mul and sum over
  // ranks; inv = float(1 / N)).
  virtual void onebit_server_sum(int rank, float* c, const float* messages, int ranks, size_t words, size_t first,
                                 size_t count, float inv) = 0;
  // The all-reduced values from every rank's server message (chunk values each, `words` words each, in rank order):
  // m[i] = bit i - q chunk of message q ? s_q : -s_q, q = i / chunk, for i < n.
  virtual void onebit_decode_chunks(int rank, float* m, size_t n, const float* messages, size_t words,
                                    size_t chunk) = 0;
  // exp_avg.mul_(exp_avg_mask) with the mask of exp_avg_mask "zero_variance": m[i] = m[i] * (v[i] == 0 ? 0 : 1).
  virtual void zero_variance_mask(int rank, float* m, const float* v, size_t n) = 0;
  // 0/1 Adam's sync (ZeroOneAdam.step): before the compressed all-reduce p[i] = p[i] - cb[i]; cb[i] = cb[i] *
  // (sqrt(v[i]) + eps); after it (end) m[i] = 0 - cb[i] / lrs; p[i] = p[i] + cb[i] / (sqrt(v[i]) + eps); cb[i] = 0.
  virtual void zero_one_sync_begin(int rank, float* p, float* cb, const float* v, size_t n, float eps) = 0;
  virtual void zero_one_sync_end(int rank, float* m, float* p, float* cb, const float* v, size_t n, float lrs,
                                 float eps) = 0;
  // 1-bit LAMB (OnebitLamb.step): the warm-up's update u[i] = deepspeed_direction(m[i], v[i], p[i], eps, wd, decay);
  // the reconstructed gradient u[i] = (m[i] - last[i] * b1) / a1; and the frozen-variance update u[i] = pre (+ wd
  // p[i] when decay), pre = m[i] / (sqrt(v[i]) + eps), returning the sum of pre^2, the max of (sqrt(v) + eps) /
  // (sqrt(fresh) + eps) and whether one of those is NaN.
  virtual void lamb_direction(int rank, float* u, const float* m, const float* v, const float* p, size_t n, float eps,
                              float weight_decay, bool decay) = 0;
  virtual void lamb_reconstruct(int rank, float* u, const float* m, const float* last, size_t n, float b1,
                                float a1) = 0;
  virtual LambFrozenTerms lamb_frozen_direction(int rank, float* u, const float* m, const float* v, const float* fresh,
                                                const float* p, size_t n, float eps, float weight_decay,
                                                bool decay) = 0;
};

// The host memory's (kernels/compress.h); ElementOps::compress_ops() of host_element_ops() returns it.
CompressOps& host_compress_ops();

}  // namespace gs
