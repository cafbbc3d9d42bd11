// The backend seam's element memory on CUDA devices (ElementOps, sim/core/element_ops.h): every operation enqueued
// on its rank's stream through the launchers of kernels/cuda_kernels.h, so host and device compute the same bits. Built
// with the CUDA side only. A new ElementOps operation gets its override here, from a launcher in cuda_kernels.h.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "sim/core/clock.h"
#include "sim/core/compress_ops.h"
#include "sim/core/element_ops.h"

namespace gs {

// The float buffers of `devices.size()` ranks, rank r's in cudaMalloc memory of device devices[r]; every pointer an
// operation takes is a DEVICE pointer of that rank's device (except upload's source and download's destination, host
// memory of any kind). Sizes are in floats (elements).
//
// Stream contract: each rank has one CUDA stream, its own non-blocking stream (created at construction on the rank's
// device) or one given with set_stream (not owned, e.g. the rank loop's compute stream, so the operations order after
// its kernels). Every operation is enqueued on that stream in call order and returns without waiting, except:
// download (synchronizes the stream, then `host` holds the values), upload (cudaMemcpyAsync from host memory: CUDA
// stages a pageable source, so `host` may be reused on return), count_nonfinite / take_nonfinite / scan (read one small
// result back: wait for the stream), settle (synchronizes) and allocate (cudaMalloc; the zeroing cudaMemsetAsync is
// on the stream, so later work on the stream sees zeros). Every method selects the rank's device (cudaSetDevice) in
// the calling thread first, so it may be called from the rank's thread or the thread that builds or ends the run; a
// rank's methods must not run concurrently from two threads (each rank's state is its own, ranks are independent).
//
// Results: zero, copy, add, add_scaled, scale, divide, sgd and adam are the host operations bit for bit (the same
// element math, kernels/optim_math.h, with --fmad=false); the inf/NaN counts are exact; scan's sum of squares is in
// double in the device's fixed order (the same bits every call, the host's to rounding: within 2 gamma_n, u = 2^-53).
//
// Clock: phase_begin records a CUDA event on the rank's stream and returns its mark; phase_end records a second one
// and keeps (start, stop, phase) pending. settle(rank, clock) synchronizes the stream and adds every pending phase's
// cudaEventElapsedTime (ms, / 1000 into seconds) to `clock`, the rank's clock (phase_end's clock argument is not
// kept: the times reach the clock given to settle) and to phase_end's also_s where given. span_end records a stop
// event too and keeps (start, stop) pending without a phase: settle adds its time to span_end's out_s only, never to
// the clock. Marks are valid until the next settle.
//
// Compressors: compress_ops() is this memory itself (CompressOps, sim/core/compress_ops.h): each operation one launcher
// of the compressor kernels of cuda_kernels.h (the host ops' twins) on the rank's stream; those returning a count or a
// size (topk_select, threshold_select, randomk_indices, sign_encode, onebit_encode), sampled_threshold, the
// error-feedback sums (residual_of, mask_sent, sum_squared_difference) and the 1-bit optimizers' ops that return
// totals (onebit_compensate, lamb_frozen_direction) wait for the stream; sign_vote_scaled reads the messages' scales
// back (it waits too) and uploads the pointer array.
// PowerSGD's products go through a cuBLAS handle on the rank's stream (made at first use, again after set_stream).
//
// Errors: every CUDA failure throws gpu::CudaError ("file:line: call: error", a std::runtime_error; an out-of-memory
// cudaMalloc names the bytes asked, free and total); a rank outside [0, ranks) throws gpu::CudaError too. release
// (a FloatBuffer's destructor) never throws.
class CudaElementOps final : public ElementOps, public CompressOps {
 public:
  // Rank r on device devices[r], with a new non-blocking stream of its own there. Throws on a CUDA error.
  explicit CudaElementOps(const std::vector<int>& devices);
  ~CudaElementOps() override;
  CudaElementOps(const CudaElementOps&) = delete;
  CudaElementOps& operator=(const CudaElementOps&) = delete;

  int ranks() const { return static_cast<int>(ranks_.size()); }
  int device(int rank) const;
  // The rank's stream now (its own or the one set).
  cudaStream_t stream(int rank) const;
  // Enqueues the rank's later operations on `stream` (a stream of the rank's device, not owned: it must outlive its
  // use here); nullptr goes back to the rank's own stream. Work already enqueued is not moved: call settle first, or
  // order the streams with an event, when the old stream's work must come before the new one's.
  void set_stream(int rank, cudaStream_t stream);

  bool host() const override { return false; }
  void zero(int rank, float* x, size_t n) override;
  void copy(int rank, float* dst, const float* src, size_t n) override;
  void upload(int rank, float* dst, const float* host, size_t n) override;
  void download(int rank, float* host, const float* src, size_t n) override;
  void add(int rank, float* acc, const float* x, size_t n) override;
  void add_scaled(int rank, float* acc, const float* x, float f, size_t n) override;
  void scale(int rank, float* x, size_t n, float f) override;
  void divide(int rank, float* x, size_t n, float d) override;
  void round_to_fp16(int rank, float* x, size_t n) override;
  size_t count_nonfinite(int rank, const float* x, size_t n) override;
  void tally_nonfinite(int rank, const float* x, size_t n) override;
  size_t take_nonfinite(int rank) override;
  ElementScan scan(int rank, const float* x, size_t n, bool want_norm) override;
  void sgd(int rank, float* w, const float* g, float* buf, size_t n, const SgdScalars& s) override;
  void adam(int rank, float* w, const float* g, float* m, float* v, size_t n, const AdamScalars& s) override;
  double phase_begin(int rank) override;
  void phase_end(int rank, double mark, Phase phase, PhaseClock& clock, double* also_s) override;
  void span_end(int rank, double mark, double* out_s) override;
  void settle(int rank, PhaseClock& clock) override;
  CompressOps* compress_ops() override { return this; }

  // CompressOps
  size_t topk_select(int rank, const float* x, size_t n, size_t k, uint32_t* idx) override;
  size_t threshold_select(int rank, const float* x, size_t n, float tau, uint32_t* idx) override;
  size_t randomk_indices(int rank, uint32_t* idx, size_t n, size_t k, uint64_t seed, uint64_t stream) override;
  float sampled_threshold(int rank, const float* x, size_t n, double ratio, uint64_t seed, uint64_t stream,
                          size_t samples) override;
  void zero_at(int rank, float* x, const uint32_t* idx, size_t k) override;
  void gather(int rank, float* vals, const float* x, const uint32_t* idx, size_t k) override;
  void scatter_add(int rank, float* out, const uint32_t* idx, const float* vals, size_t k) override;
  void qsgd_encode(int rank, uint8_t* out, const float* p, size_t n, int s, uint64_t seed, uint64_t stream) override;
  void qsgd_decode_add(int rank, float* out, const uint8_t* in, size_t n, int s) override;
  void terngrad_encode(int rank, uint8_t* out, const float* p, size_t n, uint64_t seed, uint64_t stream) override;
  void terngrad_decode_add(int rank, float* out, const uint8_t* in, size_t n) override;
  size_t sign_encode(int rank, uint8_t* out, const float* p, size_t n) override;
  void sign_decode_add(int rank, float* out, const uint8_t* in, size_t n) override;
  size_t onebit_encode(int rank, uint8_t* out, const float* p, size_t n) override;
  void onebit_decode_add(int rank, float* out, const uint8_t* in, size_t n) override;
  void sign_vote_scaled(int rank, float* out, const uint8_t* const* msgs, int ranks, size_t n) override;
  void cast_encode(int rank, float* wire, float* own, const float* p, size_t n, FloatFormat f, float bf, double pre,
                   double b) override;
  void add_in_format(int rank, float* acc, const float* x, size_t n, FloatFormat f) override;
  void post_divide_in_format(int rank, float* x, size_t n, FloatFormat f, double post) override;
  void orthogonalize_columns(int rank, float* m, size_t rows, size_t cols, float eps) override;
  void powersgd_p(int rank, float* p, const float* m, const float* q, size_t rows, size_t cols, size_t r) override;
  void powersgd_q(int rank, float* q, const float* m, const float* p, size_t rows, size_t cols, size_t r) override;
  void powersgd_decode(int rank, float* out, const float* p, const float* q, size_t rows, size_t cols,
                       size_t r) override;
  void momentum_feed_in(int rank, float* u, float* e, float* g, size_t n, float m) override;
  double residual_of(int rank, float* e, const float* p, const float* own, size_t n) override;
  double mask_sent(int rank, float* u, float* e, const float* own, size_t n) override;
  void average(int rank, float* out, const float* sum, size_t n, float s) override;
  double sum_squared_difference(int rank, const float* a, const float* b, size_t n) override;
  void deepspeed_first_moment(int rank, float* m, const float* g, size_t n, float b1, float a1) override;
  void deepspeed_second_moment(int rank, float* v, const float* g, size_t n, float b2, float a2) override;
  void deepspeed_update(int rank, float* p, const float* m, const float* v, size_t n, const DeepSpeedUpdate& s,
                        float* accumulated) override;
  OnebitSide onebit_compensate(int rank, float* message, float* x, float* error, size_t count) override;
  void onebit_server_sum(int rank, float* c, const float* messages, int ranks, size_t words, size_t first,
                         size_t count, float inv) override;
  void onebit_decode_chunks(int rank, float* m, size_t n, const float* messages, size_t words, size_t chunk) override;
  void zero_variance_mask(int rank, float* m, const float* v, size_t n) override;
  void zero_one_sync_begin(int rank, float* p, float* cb, const float* v, size_t n, float eps) override;
  void zero_one_sync_end(int rank, float* m, float* p, float* cb, const float* v, size_t n, float lrs,
                         float eps) override;
  void lamb_direction(int rank, float* u, const float* m, const float* v, const float* p, size_t n, float eps,
                      float weight_decay, bool decay) override;
  void lamb_reconstruct(int rank, float* u, const float* m, const float* last, size_t n, float b1, float a1) override;
  LambFrozenTerms lamb_frozen_direction(int rank, float* u, const float* m, const float* v, const float* fresh,
                                        const float* p, size_t n, float eps, float weight_decay, bool decay) override;

 protected:
  float* allocate_zeroed(int rank, size_t n) override;
  void release(int rank, float* p) noexcept override;

 private:
  struct Rank;  // a rank's device, streams, scratch, tally, result buffers and events (cuda_element_ops.cpp)
  Rank& select(int rank) const;  // the rank's state, its device set in this thread
  // The rank's state with its lock held for the operation: the operations that use the rank's scratch, tally,
  // read-back buffers or events hold it, so another thread may run them on the rank (the parameter server's progress
  // points count rank 0's parameters from the worker that completes them) without a race.
  struct Locked {
    std::unique_lock<std::recursive_mutex> hold;
    Rank& rank;
  };
  Locked lock(int rank) const;
  // phase_end's and span_end's stop event, pending until settle (phase Phase::kCount: span_end's, no clock).
  void end_span(int rank, double mark, Phase phase, double* also_s);
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace gs
