// CudaElementOps (cuda_element_ops.h): each ElementOps operation as one launcher of kernels/cuda_kernels.h or one
// CUDA runtime call on the rank's stream. A new operation is one override here calling its launcher.
#include "sim/backend/cuda_element_ops.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/compress.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_runtime.h"
#include "kernels/nvtx.h"

namespace gs {

// One rank's CUDA state, created with its device current.
struct CudaElementOps::Rank {
  // A phase timed by phase_begin / phase_end (or a span by phase_begin / span_end), waiting for settle: indices into
  // `events`.
  struct Pending {
    size_t start;
    size_t stop;
    Phase phase;     // Phase::kCount: span_end's (the seconds reach also_s only, not the clock)
    double* also_s;  // phase_end's: receives the seconds too (null: none); span_end's out_s
  };

  explicit Rank(int d)
      : device(d), stream(own.get()), totals(2, "element ops totals"), readback(1, "element ops readback"),
        words(1, "compress ops count"), norm(1, "compress ops norm"), small(4, "compress ops readback"),
        onebit_side(1, "onebit side totals"), lamb_terms(1, "lamb frozen terms") {
    GS_CUDA_CHECK(cudaMemsetAsync(totals.get(), 0, totals.bytes(), stream));
    own.synchronize();
  }

  // The index of an event of the pool not in use since the last settle (the pool grows on demand).
  size_t next_event() {
    if (events_used == events.size()) events.emplace_back(true);
    return events_used++;
  }

  // Copies the device totals at `src` into the pinned readback, waits for the stream, returns them.
  gpu::ElementTotals read(const gpu::ElementTotals* src) {
    GS_CUDA_CHECK(cudaMemcpyAsync(readback.get(), src, sizeof(gpu::ElementTotals), cudaMemcpyDeviceToHost, stream));
    GS_CUDA_CHECK(cudaStreamSynchronize(stream));
    return readback[0];
  }

  int device;
  gpu::Stream own;
  cudaStream_t stream;  // own.get(), or the stream set_stream gave
  gpu::Scratch scratch;  // the scans' block partials
  gpu::DeviceBuffer<gpu::ElementTotals> totals;  // [0] a scan's result, [1] the nonfinite tally
  gpu::PinnedBuffer<gpu::ElementTotals> readback;  // one result on its way to the host
  std::vector<gpu::Event> events;  // timing events; [0, events_used) recorded since the last settle
  size_t events_used = 0;
  size_t open = 0;  // phases begun and not yet ended (their start events must survive a settle)
  std::vector<Pending> pending;
  // The compressor operations' small results: a device count, a device double, and their way to the host.
  gpu::DeviceBuffer<uint32_t> words;
  gpu::DeviceBuffer<double> norm;
  gpu::PinnedBuffer<double> small;  // 32 bytes of readback
  gpu::DeviceBuffer<const uint8_t*> messages;  // sign_vote_scaled's pointer array (grown)
  gpu::PinnedBuffer<float> scales;              // sign_vote_scaled's message scales on their way to the host (grown)
  std::unique_ptr<gpu::BlasHandle> blas;         // PowerSGD's products, on `stream`
  std::recursive_mutex mu;                       // held by lock() across an operation
  gpu::DeviceBuffer<gpu::OnebitSideTotals> onebit_side;  // onebit_compensate's scale and error norm
  gpu::DeviceBuffer<gpu::LambTermTotals> lamb_terms;     // lamb_frozen_direction's terms

  const gpu::BlasHandle& blas_on_stream() {
    if (blas == nullptr || blas->stream() != stream) blas = std::make_unique<gpu::BlasHandle>(stream);
    return *blas;
  }

  // `bytes` (<= 32) at device address src, on the host once the stream has run up to here.
  const void* read_small(const void* src, size_t bytes) {
    GS_CUDA_CHECK(cudaMemcpyAsync(small.get(), src, bytes, cudaMemcpyDeviceToHost, stream));
    GS_CUDA_CHECK(cudaStreamSynchronize(stream));
    return small.get();
  }
  uint32_t read_u32(const void* src) {
    uint32_t v;
    std::memcpy(&v, read_small(src, sizeof v), sizeof v);
    return v;
  }
  // The device double `norm` (a sum just enqueued), on the host.
  double read_norm() {
    double v;
    std::memcpy(&v, read_small(norm.get(), sizeof v), sizeof v);
    return v;
  }
};

CudaElementOps::CudaElementOps(const std::vector<int>& devices) {
  ranks_.reserve(devices.size());
  for (int d : devices) {
    GS_CUDA_CHECK(cudaSetDevice(d));
    ranks_.push_back(std::make_unique<Rank>(d));
    // Nsight Systems' name of the rank's stream (docs/profiling.md).
    nvtx_name_stream(ranks_.back()->stream, ("rank " + std::to_string(ranks_.size() - 1) + " compute").c_str());
  }
}

CudaElementOps::~CudaElementOps() {
  for (auto& r : ranks_) {
    (void)cudaSetDevice(r->device);  // free each rank's memory and stream with its device current
    r.reset();
  }
}

CudaElementOps::Rank& CudaElementOps::select(int rank) const {
  GS_EXPECT_GPU(rank >= 0 && static_cast<size_t>(rank) < ranks_.size(),
                "rank " + std::to_string(rank) + " of " + std::to_string(ranks_.size()) + " (CudaElementOps)");
  Rank& r = *ranks_[static_cast<size_t>(rank)];
  GS_CUDA_CHECK(cudaSetDevice(r.device));
  return r;
}

CudaElementOps::Locked CudaElementOps::lock(int rank) const {
  Rank& r = select(rank);
  return Locked{std::unique_lock<std::recursive_mutex>(r.mu), r};
}

int CudaElementOps::device(int rank) const { return select(rank).device; }
cudaStream_t CudaElementOps::stream(int rank) const { return select(rank).stream; }

void CudaElementOps::set_stream(int rank, cudaStream_t stream) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  r.stream = stream != nullptr ? stream : r.own.get();
}

void CudaElementOps::zero(int rank, float* x, size_t n) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  if (n != 0) GS_CUDA_CHECK(cudaMemsetAsync(x, 0, n * sizeof(float), r.stream));  // all-zero bits: +0.0f
}

void CudaElementOps::copy(int rank, float* dst, const float* src, size_t n) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  if (n != 0) GS_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, r.stream));
}

void CudaElementOps::upload(int rank, float* dst, const float* host, size_t n) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  if (n == 0) return;
  GS_CUDA_CHECK(cudaMemcpyAsync(dst, host, n * sizeof(float), cudaMemcpyHostToDevice, r.stream));
  // From pageable memory CUDA has staged the source when the call returns; from pinned (or managed) memory the DMA
  // reads it later, so wait: upload's contract is that `host` may be reused on return.
  cudaPointerAttributes attributes{};
  GS_CUDA_CHECK(cudaPointerGetAttributes(&attributes, host));
  if (attributes.type != cudaMemoryTypeUnregistered) GS_CUDA_CHECK(cudaStreamSynchronize(r.stream));
}

void CudaElementOps::download(int rank, float* host, const float* src, size_t n) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  if (n == 0) return;
  GS_CUDA_CHECK(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, r.stream));
  GS_CUDA_CHECK(cudaStreamSynchronize(r.stream));
}

void CudaElementOps::add(int rank, float* acc, const float* x, size_t n) {
  gpu::add_into(acc, x, n, select(rank).stream);
}

void CudaElementOps::add_scaled(int rank, float* acc, const float* x, float f, size_t n) {
  gpu::add_scaled_into(acc, x, f, n, select(rank).stream);
}

void CudaElementOps::scale(int rank, float* x, size_t n, float f) { gpu::scale(x, n, f, select(rank).stream); }

void CudaElementOps::divide(int rank, float* x, size_t n, float d) { gpu::divide(x, n, d, select(rank).stream); }

void CudaElementOps::round_to_fp16(int rank, float* x, size_t n) {
  gpu::round_through_format(FloatFormat::kFp16, x, x, n, gpu::default_fp8_overflow(FloatFormat::kFp16),
                            select(rank).stream);
}

size_t CudaElementOps::count_nonfinite(int rank, const float* x, size_t n) {
  return scan(rank, x, n, false).nonfinite;
}

void CudaElementOps::tally_nonfinite(int rank, const float* x, size_t n) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  gpu::scan_elements(x, n, false, r.totals.get() + 1, r.scratch, r.stream, /*accumulate=*/true);
}

size_t CudaElementOps::take_nonfinite(int rank) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  const gpu::ElementTotals tally = r.read(r.totals.get() + 1);
  GS_CUDA_CHECK(cudaMemsetAsync(r.totals.get() + 1, 0, sizeof(gpu::ElementTotals), r.stream));
  return static_cast<size_t>(tally.nonfinite);
}

ElementScan CudaElementOps::scan(int rank, const float* x, size_t n, bool want_norm) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  gpu::scan_elements(x, n, want_norm, r.totals.get(), r.scratch, r.stream);
  const gpu::ElementTotals t = r.read(r.totals.get());
  ElementScan s;
  s.nonfinite = static_cast<size_t>(t.nonfinite);
  s.sum_squares = want_norm ? t.sum_squares : 0.0;
  return s;
}

void CudaElementOps::sgd(int rank, float* w, const float* g, float* buf, size_t n, const SgdScalars& s) {
  GS_EXPECT_GPU(buf != nullptr || s.momentum == 0.0f || n == 0, "SGD with momentum needs its momentum buffer");
  gpu::sgd_update(w, g, buf, n, s, select(rank).stream);
}

void CudaElementOps::adam(int rank, float* w, const float* g, float* m, float* v, size_t n, const AdamScalars& s) {
  gpu::adam_update(w, g, m, v, n, s, select(rank).stream);
}

double CudaElementOps::phase_begin(int rank) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  const size_t start = r.next_event();
  r.events[start].record(r.stream);
  ++r.open;
  return static_cast<double>(start);  // an index of the pool: exact in a double
}

void CudaElementOps::phase_end(int rank, double mark, Phase phase, PhaseClock& clock, double* also_s) {
  (void)clock;  // the time reaches the clock given to settle (the rank's clock)
  end_span(rank, mark, phase, also_s);
}

void CudaElementOps::span_end(int rank, double mark, double* out_s) { end_span(rank, mark, Phase::kCount, out_s); }

void CudaElementOps::end_span(int rank, double mark, Phase phase, double* also_s) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  const auto start = static_cast<size_t>(mark);
  GS_EXPECT_GPU(mark >= 0.0 && start < r.events_used && static_cast<double>(start) == mark,
                "a phase_end or span_end mark from this rank's phase_begin since its last settle");
  if (r.open > 0) --r.open;
  if (phase == Phase::kCount && also_s == nullptr) return;  // a span_end with nowhere to put its time: no event
  const size_t stop = r.next_event();
  r.events[stop].record(r.stream);
  r.pending.push_back(Rank::Pending{start, stop, phase, also_s});
}

void CudaElementOps::settle(int rank, PhaseClock& clock) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  GS_CUDA_CHECK(cudaStreamSynchronize(r.stream));
  for (const Rank::Pending& p : r.pending) {
    r.events[p.stop].synchronize();  // recorded on an earlier stream when set_stream changed it in between
    const double seconds = static_cast<double>(gpu::Event::elapsed_ms(r.events[p.start], r.events[p.stop])) / 1000.0;
    if (p.phase != Phase::kCount) clock.add(p.phase, seconds);
    if (p.also_s != nullptr) *p.also_s += seconds;
  }
  r.pending.clear();
  if (r.open == 0) r.events_used = 0;  // a phase still open keeps its start event (the pool grows instead)
}

float* CudaElementOps::allocate_zeroed(int rank, size_t n) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  if (n == 0) return nullptr;
  auto* p = static_cast<float*>(gpu::device_alloc(n * sizeof(float), "element ops buffer"));
  const cudaError_t err = cudaMemsetAsync(p, 0, n * sizeof(float), r.stream);
  if (err != cudaSuccess) {
    gpu::device_free(p);
    gpu::check_cuda(err, "cudaMemsetAsync(p, 0, n * sizeof(float), r.stream)", __FILE__, __LINE__);
  }
  return p;
}

void CudaElementOps::release(int rank, float* p) noexcept {
  if (p == nullptr) return;
  if (rank >= 0 && static_cast<size_t>(rank) < ranks_.size()) {
    (void)cudaSetDevice(ranks_[static_cast<size_t>(rank)]->device);
  }
  gpu::device_free(p);  // cudaFree waits for the device's work on p
}

// ---- CompressOps: the compressor kernels of cuda_kernels.h (twins of kernels/compress.h) ----

size_t CudaElementOps::topk_select(int rank, const float* x, size_t n, size_t k, uint32_t* idx) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  return gpu::topk_select(x, n, k, idx, r.scratch, r.stream);
}

size_t CudaElementOps::threshold_select(int rank, const float* x, size_t n, float tau, uint32_t* idx) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  if (n == 0) return 0;
  gpu::threshold_select(x, n, tau, idx, r.words.get(), r.scratch, r.stream);
  return r.read_u32(r.words.get());
}

size_t CudaElementOps::randomk_indices(int rank, uint32_t* idx, size_t n, size_t k, uint64_t seed, uint64_t stream) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  return gpu::randomk_indices(idx, n, k, seed, stream, r.scratch, r.stream);
}

float CudaElementOps::sampled_threshold(int rank, const float* x, size_t n, double ratio, uint64_t seed,
                                        uint64_t stream, size_t samples) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  auto* tau = reinterpret_cast<float*>(r.words.get());  // the count's word holds the float here
  gpu::sampled_threshold(tau, x, n, ratio, seed, stream, samples, r.scratch, r.stream);
  float v;
  std::memcpy(&v, r.read_small(tau, sizeof v), sizeof v);
  return v;
}

void CudaElementOps::zero_at(int rank, float* x, const uint32_t* idx, size_t k) {
  gpu::zero_at(x, idx, k, select(rank).stream);
}

void CudaElementOps::gather(int rank, float* vals, const float* x, const uint32_t* idx, size_t k) {
  gpu::gather(vals, x, idx, k, select(rank).stream);
}

void CudaElementOps::scatter_add(int rank, float* out, const uint32_t* idx, const float* vals, size_t k) {
  gpu::scatter_add(out, idx, vals, k, select(rank).stream);
}

void CudaElementOps::qsgd_encode(int rank, uint8_t* out, const float* p, size_t n, int s, uint64_t seed,
                                 uint64_t stream) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  gpu::qsgd_encode(out, p, n, s, seed, stream, r.scratch, r.stream);
}

void CudaElementOps::qsgd_decode_add(int rank, float* out, const uint8_t* in, size_t n, int s) {
  gpu::qsgd_decode_add(out, in, n, s, select(rank).stream);
}

void CudaElementOps::terngrad_encode(int rank, uint8_t* out, const float* p, size_t n, uint64_t seed,
                                     uint64_t stream) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  gpu::terngrad_encode(out, p, n, seed, stream, r.scratch, r.stream);
}

void CudaElementOps::terngrad_decode_add(int rank, float* out, const uint8_t* in, size_t n) {
  gpu::terngrad_decode_add(out, in, n, select(rank).stream);
}

// The message's size from its header's zero count (kernels/compress.h: signSGD's at byte 4, 1-bit SGD's at byte 8).
size_t CudaElementOps::sign_encode(int rank, uint8_t* out, const float* p, size_t n) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  gpu::sign_encode(out, p, n, r.scratch, r.stream);
  return gs::sign_encoded_bytes(n, r.read_u32(out + 4));
}

void CudaElementOps::sign_decode_add(int rank, float* out, const uint8_t* in, size_t n) {
  gpu::sign_decode_add(out, in, n, select(rank).stream);
}

size_t CudaElementOps::onebit_encode(int rank, uint8_t* out, const float* p, size_t n) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  gpu::onebit_encode(out, p, n, r.scratch, r.stream);
  return gs::onebit_encoded_bytes(n, r.read_u32(out + 8));
}

void CudaElementOps::onebit_decode_add(int rank, float* out, const uint8_t* in, size_t n) {
  gpu::onebit_decode_add(out, in, n, select(rank).stream);
}

// The scales summed in fp32 in rank order on the host (each message's first four bytes: every copy enqueued, then one
// wait), the vote on the device, then out = out * sum: the host op's bits.
void CudaElementOps::sign_vote_scaled(int rank, float* out, const uint8_t* const* msgs, int ranks, size_t n) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  const auto count = static_cast<size_t>(ranks);
  if (r.scales.size() < count) r.scales = gpu::PinnedBuffer<float>(count, "sign vote scales");
  for (size_t q = 0; q < count; ++q)
    GS_CUDA_CHECK(cudaMemcpyAsync(r.scales.get() + q, msgs[q], sizeof(float), cudaMemcpyDeviceToHost, r.stream));
  GS_CUDA_CHECK(cudaStreamSynchronize(r.stream));
  float scale_sum = 0.0f;
  for (size_t q = 0; q < count; ++q) scale_sum += r.scales[q];
  if (r.messages.size() < count)
    r.messages = gpu::DeviceBuffer<const uint8_t*>(static_cast<size_t>(ranks), "sign vote messages");
  // From pageable memory: staged when the call returns (upload's rule), so msgs may go away after it.
  GS_CUDA_CHECK(cudaMemcpyAsync(r.messages.get(), msgs, static_cast<size_t>(ranks) * sizeof(const uint8_t*),
                                cudaMemcpyHostToDevice, r.stream));
  gpu::sign_vote(out, r.messages.get(), ranks, n, r.stream);
  gpu::scale(out, n, scale_sum, r.stream);
}

void CudaElementOps::cast_encode(int rank, float* wire, float* own, const float* p, size_t n, FloatFormat f, float bf,
                                 double pre, double b) {
  gpu::cast_encode(f, wire, own, p, n, bf, pre, b, select(rank).stream);
}

void CudaElementOps::add_in_format(int rank, float* acc, const float* x, size_t n, FloatFormat f) {
  gpu::add_in_format_into(f, acc, x, n, select(rank).stream);
}

void CudaElementOps::post_divide_in_format(int rank, float* x, size_t n, FloatFormat f, double post) {
  gpu::post_divide_in_format(f, x, n, post, select(rank).stream);
}

void CudaElementOps::orthogonalize_columns(int rank, float* m, size_t rows, size_t cols, float eps) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  gpu::orthogonalize_columns(m, rows, cols, eps, r.scratch, r.stream);
}

// Row-major products through gpu::gemm (c (m x n) = op(a) op(b), k the inner size).
void CudaElementOps::powersgd_p(int rank, float* p, const float* m, const float* q, size_t rows, size_t cols,
                                size_t r) {
  Locked held = lock(rank);
  const gpu::BlasHandle& blas = held.rank.blas_on_stream();
  gpu::gemm(blas, p, m, q, static_cast<int64_t>(rows), static_cast<int64_t>(r), static_cast<int64_t>(cols),
            Transpose::kNo, Transpose::kNo, 1.0f, 0.0f);
}

void CudaElementOps::powersgd_q(int rank, float* q, const float* m, const float* p, size_t rows, size_t cols,
                                size_t r) {
  Locked held = lock(rank);
  const gpu::BlasHandle& blas = held.rank.blas_on_stream();
  gpu::gemm(blas, q, m, p, static_cast<int64_t>(cols), static_cast<int64_t>(r), static_cast<int64_t>(rows),
            Transpose::kYes, Transpose::kNo, 1.0f, 0.0f);
}

void CudaElementOps::powersgd_decode(int rank, float* out, const float* p, const float* q, size_t rows, size_t cols,
                                     size_t r) {
  Locked held = lock(rank);
  const gpu::BlasHandle& blas = held.rank.blas_on_stream();
  gpu::gemm(blas, out, p, q, static_cast<int64_t>(rows), static_cast<int64_t>(cols), static_cast<int64_t>(r),
            Transpose::kNo, Transpose::kYes, 1.0f, 0.0f);
}

void CudaElementOps::momentum_feed_in(int rank, float* u, float* e, float* g, size_t n, float m) {
  gpu::momentum_feed_in(u, e, g, n, m, select(rank).stream);
}

double CudaElementOps::residual_of(int rank, float* e, const float* p, const float* own, size_t n) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  if (n == 0) return 0.0;
  gpu::residual_of(r.norm.get(), e, p, own, n, r.scratch, r.stream);
  return r.read_norm();
}

double CudaElementOps::mask_sent(int rank, float* u, float* e, const float* own, size_t n) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  if (n == 0) return 0.0;
  gpu::mask_sent(r.norm.get(), u, e, own, n, r.scratch, r.stream);
  return r.read_norm();
}

void CudaElementOps::average(int rank, float* out, const float* sum, size_t n, float s) {
  gpu::average(out, sum, n, s, select(rank).stream);
}

double CudaElementOps::sum_squared_difference(int rank, const float* a, const float* b, size_t n) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  if (n == 0) return 0.0;
  gpu::sum_squared_difference(r.norm.get(), a, b, n, r.scratch, r.stream);
  return r.read_norm();
}

// ---- DeepSpeed's 1-bit optimizers: map kernels, and the two that return read their totals back (one wait each) ----

void CudaElementOps::deepspeed_first_moment(int rank, float* m, const float* g, size_t n, float b1, float a1) {
  gpu::deepspeed_first_moment(m, g, n, b1, a1, select(rank).stream);
}

void CudaElementOps::deepspeed_second_moment(int rank, float* v, const float* g, size_t n, float b2, float a2) {
  gpu::deepspeed_second_moment(v, g, n, b2, a2, select(rank).stream);
}

void CudaElementOps::deepspeed_update(int rank, float* p, const float* m, const float* v, size_t n,
                                      const DeepSpeedUpdate& s, float* accumulated) {
  gpu::deepspeed_update(p, m, v, n, s, accumulated, select(rank).stream);
}

OnebitSide CudaElementOps::onebit_compensate(int rank, float* message, float* x, float* error, size_t count) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  gpu::onebit_compensate(r.onebit_side.get(), message, x, error, count, r.scratch, r.stream);
  gpu::OnebitSideTotals t;
  std::memcpy(&t, r.read_small(r.onebit_side.get(), sizeof t), sizeof t);
  return {t.scale, t.error_sum_squares};
}

void CudaElementOps::onebit_server_sum(int rank, float* c, const float* messages, int ranks, size_t words,
                                       size_t first, size_t count, float inv) {
  gpu::onebit_server_sum(c, messages, ranks, words, first, count, inv, select(rank).stream);
}

void CudaElementOps::onebit_decode_chunks(int rank, float* m, size_t n, const float* messages, size_t words,
                                         size_t chunk) {
  gpu::onebit_decode_chunks(m, n, messages, words, chunk, select(rank).stream);
}

void CudaElementOps::zero_variance_mask(int rank, float* m, const float* v, size_t n) {
  gpu::zero_variance_mask(m, v, n, select(rank).stream);
}

void CudaElementOps::zero_one_sync_begin(int rank, float* p, float* cb, const float* v, size_t n, float eps) {
  gpu::zero_one_sync_begin(p, cb, v, n, eps, select(rank).stream);
}

void CudaElementOps::zero_one_sync_end(int rank, float* m, float* p, float* cb, const float* v, size_t n, float lrs,
                                       float eps) {
  gpu::zero_one_sync_end(m, p, cb, v, n, lrs, eps, select(rank).stream);
}

void CudaElementOps::lamb_direction(int rank, float* u, const float* m, const float* v, const float* p, size_t n,
                                    float eps, float weight_decay, bool decay) {
  gpu::lamb_direction(u, m, v, p, n, eps, weight_decay, decay, select(rank).stream);
}

void CudaElementOps::lamb_reconstruct(int rank, float* u, const float* m, const float* last, size_t n, float b1,
                                      float a1) {
  gpu::lamb_reconstruct(u, m, last, n, b1, a1, select(rank).stream);
}

LambFrozenTerms CudaElementOps::lamb_frozen_direction(int rank, float* u, const float* m, const float* v,
                                                      const float* fresh, const float* p, size_t n, float eps,
                                                      float weight_decay, bool decay) {
  Locked held = lock(rank);
  Rank& r = held.rank;
  if (n == 0) return {};
  gpu::lamb_frozen_direction(r.lamb_terms.get(), u, m, v, fresh, p, n, eps, weight_decay, decay, r.scratch, r.stream);
  gpu::LambTermTotals t;
  std::memcpy(&t, r.read_small(r.lamb_terms.get(), sizeof t), sizeof t);
  return {t.pre_sum_squares, t.max_ratio, t.nan != 0};
}

}  // namespace gs
