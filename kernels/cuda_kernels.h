// CUDA twins of the host array ops (kernels/convert.h, dense.h, compress.h, sim/optim's element loops) and the
// reductions of the `local` communicator. Every function takes DEVICE pointers, enqueues on `stream` and returns
// without synchronizing unless it says so; element math comes from the shared GS_HD headers (float_formats.h,
// optim_math.h, dense_math.h, compress_math.h), so host and GPU compute the same values. Defined in
// kernels/cuda_kernels.cu (compiled with --fmad=false so products and sums round as on the host). A new op is
// declared here beside the host op it twins, defined in cuda_kernels.cu and tested in tests/gpu/test_gpu_kernels.cpp.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda_runtime.h"
#include "kernels/dense.h"  // Transpose, Activation
#include "kernels/float_formats.h"
#include "kernels/optim_math.h"
#include "kernels/compress_math.h"

namespace gs::gpu {

// Scratch memory of the multi-pass ops (top-k, thresholds, reductions): one per stream, grows on demand and never
// shrinks. Growing frees the old block (cudaFree synchronizes the device), so keep one alive across steps.
class Scratch {
 public:
  // A device block of at least `bytes` bytes (256-byte aligned; contents undefined).
  void* get(size_t bytes);

 private:
  DeviceBuffer<uint8_t> buf_;
};

// ---- Precision conversions (host twins: kernels/convert.h) --------------------------------------------------------

// The default fp8 overflow rule of a format (E4M3 saturates, E5M2 goes to inf; see float_formats.h).
inline Fp8Overflow default_fp8_overflow(FloatFormat f) {
  return f == FloatFormat::kFp8E5M2 ? Fp8Overflow::kNoSat : Fp8Overflow::kSatFinite;
}
// out[i] = format(in[i]) as bit patterns (uint16 for fp16/bf16, uint8 for fp8, float for fp32), i < n.
void encode_format(FloatFormat f, void* out, const float* in, size_t n, Fp8Overflow overflow, cudaStream_t stream);
// out[i] = fp32(in[i]) (exact; NaN -> canonical NaN), i < n.
void decode_format(FloatFormat f, float* out, const void* in, size_t n, cudaStream_t stream);
// out[i] = fp32(format(in[i])) (round_through); out may alias in; fp32 copies.
void round_through_format(FloatFormat f, float* out, const float* in, size_t n, Fp8Overflow overflow,
                          cudaStream_t stream);
// counts[0] = values nonzero and finite that round to zero in f (underflow), counts[1] = values not finite after
// rounding to f; counts (device, 2 x uint64) are overwritten. Host twin: count_rounding.
void count_rounding(FloatFormat f, const float* in, size_t n, unsigned long long* counts, cudaStream_t stream);
// *flag = 1 when some x[i] (i < n) is inf or NaN, else 0 (device int, overwritten): the loss scaler's check.
// accumulate: *flag is not reset first, so several ranges OR into one flag (set it to 0 once before them).
void find_nonfinite(const float* x, size_t n, int* flag, cudaStream_t stream, bool accumulate = false);
// x[i] *= factor (the loss scaler's unscale; host twin scale_gradient).
void scale(float* x, size_t n, float factor, cudaStream_t stream);
// x[i] = x[i] / divisor (IEEE division: the all-reduce strategy's averaging by the step's sample count S, host twin
// the loop `grad[i] / s` in sim/strategy/allreduce.cpp).
void divide(float* x, size_t n, float divisor, cudaStream_t stream);
// acc[i] = acc[i] + f * x[i], the product and the sum rounded apart (--fmad=false), i < n: ElementOps::add_scaled
// (host twin: host_element_ops' loop in sim/core/element_ops.cpp, built with -ffp-contract=off).
void add_scaled_into(float* acc, const float* x, float f, size_t n, cudaStream_t stream);

// What scan_elements found in a range (device plain data; read back with one copy of sizeof(ElementTotals) bytes).
struct ElementTotals {
  unsigned long long nonfinite;  // inf and NaN values
  double sum_squares;            // sum of x[i]^2 in double; 0 unless asked for
};
// The inf/NaN count of x[0, n) and, with want_norm, the sum of its squares in double, by block reductions: a fixed
// grid of per-block partials (cub::BlockReduce), then one block over the partials, so the same bits on every call;
// the squares are exact in double, only the order of the sum differs from the host's index order (scan_elements in
// sim/core/element_ops.cpp; within 2 gamma_n of it, u = 2^-53). A NaN makes the sum NaN, an inf (no NaN) +inf, as on
// the host. *out is overwritten, or with accumulate its nonfinite is increased and sum_squares is increased when
// want_norm (several ranges into one tally; zero it once first, e.g. cudaMemsetAsync). n = 0 gives zeros. scratch
// holds the partials (a few KiB; enqueue-ordered on `stream`, so one Scratch per stream).
void scan_elements(const float* x, size_t n, bool want_norm, ElementTotals* out, Scratch& scratch, cudaStream_t stream,
                   bool accumulate = false);

// acc[i] = multiplier * round_through(f, acc[i] * (1 / multiplier) + g[i]) for i < n: a gradient held in the format
// (fp16_pure) at the mean-loss magnitude, g already in the format. Host twin: accumulate_rounded with acc_in_format
// (kernels/convert.h), the same operations in the same order (1 / multiplier in fp32, no contraction).
void accumulate_in_format(FloatFormat f, float* acc, const float* g, size_t n, float multiplier, cudaStream_t stream);

// ---- fp8 delayed per-tensor scaling (host twin: fp8_quantize_delayed and Fp8Scaling, kernels/dense_mixed.h) --------

// The device state of one fp8 operand's Fp8Scaling; its amax history is a separate device array of history_len
// floats (entries [0, size) in use, as Fp8Scaling::history). Plain data, read back with cudaMemcpy.
struct Fp8ScalingState {
  float scale;         // the scale the next quantization multiplies by (Fp8Scaling::scale); starts at 1
  float scale_inv;     // 1 / the scale the LAST quantization used, fp32 division: the GEMM's dequantization factor
  uint32_t amax_bits;  // amax of the quantization in flight (bits of a finite non-negative float); 0 between uses
  uint32_t size;       // history entries in use (<= history_len)
  uint32_t next;       // ring position once the history is full (Fp8Scaling::next)
};
// count states at scale 1 with empty histories (scale_inv 1, amax 0).
void fp8_scaling_init(Fp8ScalingState* states, size_t count, cudaStream_t stream);
// Delayed-scaling quantization of in[0, n) to f (kFp8E4M3 or kFp8E5M2, both saturating: kSatFinite, as the host twin):
// q[i] = bf16 bit pattern of fp8(in[i] * state->scale) (every E4M3 / E5M2 value is exact in bf16, so q feeds
// gemm_mixed_scaled's bf16 GEMM), then the amax of the finite |in[i]| joins the history (pushed while
// size < history_len, else written at next, next advancing mod history_len), scale_inv = 1 / the scale used, and
// scale = format_max(f) / max(history) when that max is > 0 and finite. counts (optional, 2 x uint64, overwritten):
// [0] values nonzero and finite after the scaling that became zero, [1] fp8 results not finite (NaN inputs). The
// dequantized value the host twin writes is fp32(decode(q[i]) * state->scale_inv). history_len >= 1.
void fp8_quantize_delayed(FloatFormat f, uint16_t* q, const float* in, size_t n, Fp8ScalingState* state, float* history,
                          uint32_t history_len, unsigned long long* counts, cudaStream_t stream);
// alpha_beta[0] = a->scale_inv * b->scale_inv (fp32 product), alpha_beta[1] = beta: the scalars of a GEMM of two
// fp8-quantized operands (device, 2 floats, for gemm_mixed_scaled).
void fp8_gemm_scalars(float* alpha_beta, const Fp8ScalingState* a, const Fp8ScalingState* b, float beta,
                      cudaStream_t stream);

// ---- Optimizers (element math: kernels/optim_math.h) --------------------------------------------------------------

// sgd_element on w[i], g[i], buf[i] for i < n (buf unused and may be null when momentum == 0).
void sgd_update(float* w, const float* g, float* buf, size_t n, const SgdScalars& s, cudaStream_t stream);
// adam_element on w[i], g[i], m[i], v[i] for i < n.
void adam_update(float* w, const float* g, float* m, float* v, size_t n, const AdamScalars& s, cudaStream_t stream);

// ---- Dense ops (host twins: kernels/dense.h; element math dense_math.h) -------------------------------------------

// Row-major c (m x n) = alpha op(a) op(b) + beta c through cuBLAS (cublasSgemm on the transposed problem), fp32
// in and out, fp32 compute (no TF32: default math mode). Shapes as gs::gemm.
void gemm(const BlasHandle& blas, float* c, const float* a, const float* b, int64_t m, int64_t n, int64_t k,
          Transpose trans_a, Transpose trans_b, float alpha, float beta);
// The same with a and b held in `storage` (fp16 or bf16 bit patterns, as encode_format writes them) and c in fp32,
// fp32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F): what tensor cores compute for mixed precision. fp8 GEMMs
// through cuBLASLt are not done: fp8 operands run here as their exact bf16 values (gemm_mixed_scaled).
void gemm_mixed(const BlasHandle& blas, FloatFormat storage, float* c, const void* a, const void* b, int64_t m,
                int64_t n, int64_t k, Transpose trans_a, Transpose trans_b, float alpha, float beta);
// gemm_mixed with alpha and beta read from the device (alpha_beta[0], alpha_beta[1]; cuBLAS pointer mode device for
// this call): the fp8 GEMMs, whose dequantization factor (fp8_gemm_scalars) lives on the device. storage kBf16 or kFp16.
void gemm_mixed_scaled(const BlasHandle& blas, FloatFormat storage, float* c, const void* a, const void* b, int64_t m,
                       int64_t n, int64_t k, Transpose trans_a, Transpose trans_b, const float* alpha_beta);
// TF32 tensor-op math for the fp32 GEMMs (gemm) of this handle: on (cublasSetMathMode CUBLAS_TF32_TENSOR_OP_MATH:
// inputs rounded to 10 mantissa bits inside the tensor core, fp32 accumulation; precision.mode tf32) or off (the
// default math mode, IEEE fp32).
void set_tf32_math(const BlasHandle& blas, bool on);
// y[r, :] = row[:] for r < rows (y is rows x cols).
void broadcast_rows(float* y, const float* row, int64_t rows, int64_t cols, cudaStream_t stream);
// *correct (device uint64, overwritten) = rows whose first maximal logit is at the label (host twin count_correct).
void count_correct(unsigned long long* correct, const float* logits, const int32_t* labels, int64_t rows,
                   int64_t classes, cudaStream_t stream);
// y[r, :] += bias[:] (rows x cols).
void add_bias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);
// db[j] = sum_r dy[r, j] in PyTorch's CPU order (torch_column_sum, as the host's bias_grad); db is overwritten.
void bias_grad(float* db, const float* dy, int64_t rows, int64_t cols, cudaStream_t stream);
// grad_bias[j] += that sum: the micro-batch summed first, then added (as the host's add_bias_grad).
void add_bias_grad(float* grad_bias, const float* dy, int64_t rows, int64_t cols, cudaStream_t stream);
// out[i] = act(in[i]); out may alias in.
void activation_forward(float* out, const float* in, int64_t n, Activation act, cudaStream_t stream);
// dx[i] = dy[i] * act'(x[i]); dx may alias dy.
void activation_backward(float* dx, const float* dy, const float* x, int64_t n, Activation act, cudaStream_t stream);
// row_loss[r] = softmax_cross_entropy_row(logits row r, labels[r]) (rows x classes; labels in [0, classes)).
void softmax_cross_entropy_rows(float* row_loss, const float* logits, const int32_t* labels, int64_t rows,
                                int64_t classes, cudaStream_t stream);
// dlogits[r, :] = softmax(logits[r, :]) - onehot(labels[r]); dlogits may alias logits.
void softmax_cross_entropy_backward(float* dlogits, const float* logits, const int32_t* labels, int64_t rows,
                                    int64_t classes, cudaStream_t stream);
// row_loss[r] = 0.5 ||y_hat_r - y_r||^2 (rows x cols).
void mse_rows(float* row_loss, const float* y_hat, const float* y, int64_t rows, int64_t cols, cudaStream_t stream);
// dy_hat[i] = y_hat[i] - y[i]; dy_hat may alias y_hat.
void mse_backward(float* dy_hat, const float* y_hat, const float* y, int64_t n, cudaStream_t stream);
// *out = sum of x[0..n) accumulated in double, in a fixed order (the same bits on every call; not the host's order:
// compare with a relative bound). out is a device double.
void sum_to_double(double* out, const float* x, size_t n, Scratch& scratch, cudaStream_t stream);

// ---- Compressors (host twins: kernels/compress.h; element math compress_math.h) ----------------------------------

// Top-k by magnitude, exactly as gs::topk_select: idx[0..min(k, n)) = the indices of the k largest magnitude_key,
// ties at the k-th key to the lowest indices, ascending. Radix select on the 31-bit key in three digit passes
// (11, 12, 8 bits; histograms in shared memory), then one tiled compaction (per-tile counts, a scan over tiles, a
// block scan inside each tile). Returns min(k, n) (known without synchronizing). k, n < 2^32.
size_t topk_select(const float* x, size_t n, size_t k, uint32_t* idx, Scratch& scratch, cudaStream_t stream);
// Threshold: idx = the ascending indices i with threshold_keep(x[i], tau) (as gs::threshold_select: nonzero and
// |x| >= tau, or NaN); *count (device uint32) = their number. idx has room for n entries.
void threshold_select(const float* x, size_t n, float tau, uint32_t* idx, uint32_t* count, Scratch& scratch,
                      cudaStream_t stream);
// DGC's sampled threshold, exactly as gs::sampled_threshold (same strata, same Philox draws, exact k-th of the
// samples): *tau (device float) = the magnitude of the ceil(ratio m)-th largest sampled |x|; +inf when n == 0 or
// ratio <= 0.
void sampled_threshold(float* tau, const float* x, size_t n, double ratio, uint64_t seed, uint64_t stream_id,
                       size_t samples, Scratch& scratch, cudaStream_t stream);
// Random-k, exactly as gs::randomk_indices (Floyd's algorithm with the same draws, the same set), in the parallel
// form of compress_math.h (randomk_pick, randomk_sorted_dup, randomk_collided): grid-stride launches of kThreads
// (256) threads per block, at most 65535 blocks: a thread per step draws its pick; a CUB stable radix sort of the
// k (pick, step) pairs on ceil(log2 n) key bits; a thread per sorted position marks the steps whose pick an earlier
// step drew; a thread per step resolves its collision chain and sets its pick (and j_t when it collided) in an n-bit
// bitmap (atomicOr); a thread per 64-bit word counts, a CUB scan, a thread per word reads the indices out
// ascending. Returns min(k, n) (known without synchronizing); n <= 2^32, k < 2^29. Scratch: 16 ceil(n / 64) bytes
// (bitmap, counts, offsets) + 17 k bytes (picks, steps, their sorted copies, duplicate flags) + the larger of CUB's
// sort and scan temporaries (the sort's: about 8 k bytes + a few KiB), each part rounded up to 256 bytes.
size_t randomk_indices(uint32_t* idx, size_t n, size_t k, uint64_t seed, uint64_t stream_id, Scratch& scratch,
                       cudaStream_t stream);
// vals[j] = x[idx[j]] for j < k (the values a sparse compressor sends).
void gather(float* vals, const float* x, const uint32_t* idx, size_t k, cudaStream_t stream);
// out[idx[j]] += vals[j] for j < k (distinct indices: decoding one sparse message).
void scatter_add(float* out, const uint32_t* idx, const float* vals, size_t k, cudaStream_t stream);
// x[idx[j]] = 0 for j < k (error feedback: what was sent leaves the residual).
void zero_at(float* x, const uint32_t* idx, size_t k, cudaStream_t stream);
// acc[i] += x[i] (error feedback: the residual joins the new gradient).
void add_into(float* acc, const float* x, size_t n, cudaStream_t stream);
// Error feedback in one pass each, as gs::CompressOps' host twins (sim/core/compress_ops.cpp): momentum correction
// u = u m + g, e += u, g = e; e = p - own with *out (device double) = sum e^2; u = e = 0 where own != 0 with *out =
// sum e^2 (the sums in double in a fixed order: the same bits every call, the host's to rounding); out = sum / s.
void momentum_feed_in(float* u, float* e, float* g, size_t n, float m, cudaStream_t stream);
void residual_of(double* out, float* e, const float* p, const float* own, size_t n, Scratch& scratch,
                 cudaStream_t stream);
void mask_sent(double* out, float* u, float* e, const float* own, size_t n, Scratch& scratch, cudaStream_t stream);
void average(float* out, const float* sum, size_t n, float s, cudaStream_t stream);
// The cast compressors (gs::CompressOps::cast_encode, add_in_format, post_divide_in_format on the host; element math
// kernels/compress_math.h cast_wire_value / cast_post_divide, float_formats.h add_in_format): the wire value of each
// element and its decoded value in the units of p (own may be nullptr; wire may be p); acc += x rounded to f; x / post
// rounded to f.
void cast_encode(FloatFormat f, float* wire, float* own, const float* p, size_t n, float bf, double pre, double b,
                 cudaStream_t stream);
void add_in_format_into(FloatFormat f, float* acc, const float* x, size_t n, cudaStream_t stream);
void post_divide_in_format(FloatFormat f, float* x, size_t n, double post, cudaStream_t stream);
// *out (device double) = sum of (double(a[i]) - b[i])^2 in a fixed order (the same bits every call; the host's index
// order to rounding): ef21's unsent norm.
void sum_squared_difference(double* out, const float* a, const float* b, size_t n, Scratch& scratch,
                            cudaStream_t stream);

// DeepSpeed's 1-bit optimizers, as gs::CompressOps' host twins (sim/core/compress_ops.cpp; element math
// kernels/compress_math.h): Adam's moments and update (accumulated may be nullptr) bit for bit; one side of the
// compressed all-reduce (x += error, the scale from the sum of x^2 in double in a fixed order, the new error and the
// message: scale word then packed signs) with *out (device) = {the new error's sum of squares, the scale}; the
// server's sum of the ranks' sign messages and the final decoding (bit for bit); the zero-variance mask; 0/1 Adam's
// sync passes; 1-bit LAMB's update directions and the frozen update's terms (*terms, device: the sum of the
// prelim update's squares in a fixed order, the max ratio, the NaN count). The sums: the same bits every call, the
// host's to rounding.
struct OnebitSideTotals {
  double error_sum_squares;
  float scale;
};
struct LambTermTotals {
  double pre_sum_squares;
  float max_ratio;
  unsigned nan;
};
void deepspeed_first_moment(float* m, const float* g, size_t n, float b1, float a1, cudaStream_t stream);
void deepspeed_second_moment(float* v, const float* g, size_t n, float b2, float a2, cudaStream_t stream);
void deepspeed_update(float* p, const float* m, const float* v, size_t n, const DeepSpeedUpdate& s,
                      float* accumulated, cudaStream_t stream);
void onebit_compensate(OnebitSideTotals* out, float* message, float* x, float* error, size_t count, Scratch& scratch,
                       cudaStream_t stream);
void onebit_server_sum(float* c, const float* messages, int ranks, size_t words, size_t first, size_t count,
                       float inv, cudaStream_t stream);
void onebit_decode_chunks(float* m, size_t n, const float* messages, size_t words, size_t chunk, cudaStream_t stream);
void zero_variance_mask(float* m, const float* v, size_t n, cudaStream_t stream);
void zero_one_sync_begin(float* p, float* cb, const float* v, size_t n, float eps, cudaStream_t stream);
void zero_one_sync_end(float* m, float* p, float* cb, const float* v, size_t n, float lrs, float eps,
                       cudaStream_t stream);
void lamb_direction(float* u, const float* m, const float* v, const float* p, size_t n, float eps, float weight_decay,
                    bool decay, cudaStream_t stream);
void lamb_reconstruct(float* u, const float* m, const float* last, size_t n, float b1, float a1, cudaStream_t stream);
void lamb_frozen_direction(LambTermTotals* terms, float* u, const float* m, const float* v, const float* fresh,
                           const float* p, size_t n, float eps, float weight_decay, bool decay, Scratch& scratch,
                           cudaStream_t stream);

// QSGD encode into out (device, qsgd_encoded_bytes(n, s) bytes, as gs::qsgd_encode, bit for bit): the fp32 norm,
// then the codes. The norm's sum of squares follows gs::qsgd_sum_squares' order (compress_math.h kQsgdNormChunk,
// kQsgdNormPartials): norm_chunks_kernel, ceil(chunks / 16) blocks of 256 threads (16 lanes per 1024-value chunk),
// writes the n / 1024 chunk sums; norm_final_kernel, one block of kQsgdNormPartials (256) threads, adds them as 256
// strided partials, then the partials and the tail; then one thread per 32-bit code word. Scratch: 8 max(n / 1024, 1)
// bytes. qsgd_encode_with_norm takes the norm as given (so the codes can be compared bit for bit on their own).
void qsgd_encode(uint8_t* out, const float* p, size_t n, int s, uint64_t seed, uint64_t stream_id, Scratch& scratch,
                 cudaStream_t stream);
void qsgd_encode_with_norm(uint8_t* out, const float* p, size_t n, int s, float norm, uint64_t seed,
                           uint64_t stream_id, cudaStream_t stream);
// out[i] += decoded value i of a QSGD encoding (device bytes).
void qsgd_decode_add(float* out, const uint8_t* in, size_t n, int s, cudaStream_t stream);
// TernGrad encode / decode-add, as gs::terngrad_encode / terngrad_decode_add (bit for bit: scale = max |p| is exact).
void terngrad_encode(uint8_t* out, const float* p, size_t n, uint64_t seed, uint64_t stream_id, Scratch& scratch,
                     cudaStream_t stream);
void terngrad_decode_add(float* out, const uint8_t* in, size_t n, cudaStream_t stream);
// signSGD message as gs::sign_encode into out (device, room for sign_encoded_bytes(n, n)): header (scale = mean |p|
// accumulated in double in another order than the host's: compare within a relative bound; the zero count exact)
// and both planes bit for bit (the zero plane written whether or not the count is 0, as the host does).
void sign_encode(uint8_t* out, const float* p, size_t n, Scratch& scratch, cudaStream_t stream);
// out[i] += decoded value i of a signSGD message (device bytes), as gs::sign_decode_add.
void sign_decode_add(float* out, const uint8_t* in, size_t n, cudaStream_t stream);
// Majority vote as gs::sign_vote; msgs is a DEVICE array of `ranks` device pointers to signSGD messages.
void sign_vote(float* out, const uint8_t* const* msgs, int ranks, size_t n, cudaStream_t stream);
// 1-bit SGD encode / decode-add as gs::onebit_encode / onebit_decode_add (planes and zero count bit for bit; means in
// double in another order; both NaN when the bucket holds a NaN or inf).
void onebit_encode(uint8_t* out, const float* p, size_t n, Scratch& scratch, cudaStream_t stream);
void onebit_decode_add(float* out, const uint8_t* in, size_t n, cudaStream_t stream);

// PowerSGD's orthogonalization, as gs::orthogonalize_columns bit for bit (torch_gram_schmidt of compress_math.h on
// one device thread: PyTorch's float orders are sequential; scratch holds rows floats of products). The products
// P = M Q and Q = M^T P go through gemm().
void orthogonalize_columns(float* m, size_t rows, size_t cols, float eps, Scratch& scratch, cudaStream_t stream);

// ---- Reductions of the `local` communicator (several ranks on one GPU) --------------------------------------------

// outs[r][i] = ((ins[0][i] + ins[1][i]) + ins[2][i]) + ... (ranks 0..N-1 in order, every element), for every r:
// the host communicator's sum bit for bit. ins/outs are DEVICE arrays of `ranks` device pointers; an out may alias
// its in (each element is read by the thread that writes it).
void sum_in_rank_order(float* const* outs, const float* const* ins, int ranks, size_t count, cudaStream_t stream);
void sum_in_rank_order(double* const* outs, const double* const* ins, int ranks, size_t count, cudaStream_t stream);
// outs[r][i] = sum over q in order of ins[q][r * count + i] (reduce-scatter; ins have ranks * count elements).
void reduce_scatter_in_rank_order(float* const* outs, const float* const* ins, int ranks, size_t count,
                                  cudaStream_t stream);

}  // namespace gs::gpu
