// Element operations on the float buffers of one memory (host RAM, or a backend's device memory): everything the rank
// loop and a device-resident strategy do with parameters, gradients and optimizer state, so that the same code runs
// on the host and on a GPU without touching an element (docs/design.md, section 6, "The backend seam"). The host's
// (host_element_ops) are the loops the host backend always ran, so its bits do not change; a backend with device
// memory implements them on its device (sim/backend/). Extend: a new operation is one virtual here, its host loop in
// element_ops.cpp and its twin in every device memory (the cuda backend's and the tests' sealed memory).
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/optim_math.h"
#include "sim/core/clock.h"
#include "sim/core/compress_ops.h"

namespace gs {

class ElementOps;

// n floats of one rank's memory, from ElementOps::allocate (zeroed) and freed by it. Move-only.
class FloatBuffer {
 public:
  FloatBuffer() = default;
  FloatBuffer(ElementOps* ops, int rank, float* data, size_t n) : ops_(ops), rank_(rank), data_(data), n_(n) {}
  ~FloatBuffer();
  FloatBuffer(FloatBuffer&& o) noexcept
      : ops_(o.ops_), rank_(o.rank_), data_(std::exchange(o.data_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  FloatBuffer& operator=(FloatBuffer&& o) noexcept;
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;
  float* get() const { return data_; }
  size_t size() const { return n_; }

 private:
  ElementOps* ops_ = nullptr;
  int rank_ = 0;
  float* data_ = nullptr;
  size_t n_ = 0;
};

// What a scan of a buffer found: its inf/NaN values and, when asked, the sum of its squares in double (the loss
// scaler's check and clipping's norm).
struct ElementScan {
  size_t nonfinite = 0;
  double sum_squares = 0.0;
};

// The operations on rank `rank`'s buffers of one memory. On a device each is ordered after the rank's earlier
// operations (its stream) and may return before the device has run it, except those that return a value, download,
// and settle. Every method may be called from the rank's own thread; allocate, upload, download, count_nonfinite and
// the buffers' release also from the thread that builds or ends the run (they select the rank's device themselves),
// and from another rank's thread where the strategy serializes its ranks (the parameter server's progress points and
// its server's view on rank 0): a device memory keeps each rank's operations that share its scratch apart.
class ElementOps {
 public:
  virtual ~ElementOps() = default;
  // True for host RAM: code that only has host loops (compressors, the shared fast path, ...) may run on it.
  virtual bool host() const = 0;
  // n floats of the rank's memory, zeroed.
  FloatBuffer allocate(int rank, size_t n) { return FloatBuffer(this, rank, allocate_zeroed(rank, n), n); }
  virtual void zero(int rank, float* x, size_t n) = 0;
  virtual void copy(int rank, float* dst, const float* src, size_t n) = 0;
  // From / to host memory: upload returns once `host` may be reused, download once `host` holds the values.
  virtual void upload(int rank, float* dst, const float* host, size_t n) = 0;
  virtual void download(int rank, float* host, const float* src, size_t n) = 0;
  // acc[i] = acc[i] + x[i]; acc[i] = acc[i] + f * x[i] (the product and the sum rounded apart); x[i] = x[i] * f;
  // x[i] = x[i] / d (IEEE division).
  virtual void add(int rank, float* acc, const float* x, size_t n) = 0;
  virtual void add_scaled(int rank, float* acc, const float* x, float f, size_t n) = 0;
  virtual void scale(int rank, float* x, size_t n, float f) = 0;
  virtual void divide(int rank, float* x, size_t n, float d) = 0;
  // x[i] rounded to IEEE half (RNE, overflow to inf) and held in fp32 (kernels/convert.h round_fp32_through_fp16:
  // fp16_pure's storage of weights, gradients and optimizer state).
  virtual void round_to_fp16(int rank, float* x, size_t n) = 0;
  // The inf/NaN values of x[0, n) (waits for the device).
  virtual size_t count_nonfinite(int rank, const float* x, size_t n) = 0;
  // The same, added to the rank's tally without waiting (several ranges, e.g. a backward's layers as they finish);
  // take_nonfinite returns the tally and clears it (waits for the device).
  virtual void tally_nonfinite(int rank, const float* x, size_t n) = 0;
  virtual size_t take_nonfinite(int rank) = 0;
  // inf/NaN count and, with want_norm, the sum of squares in double (host: in index order; a device: in a fixed
  // order of its own, so clipping's norm agrees with the host's to rounding only). Waits for the device.
  virtual ElementScan scan(int rank, const float* x, size_t n, bool want_norm) = 0;
  // The optimizers' element math (kernels/optim_math.h) on elements [0, n) of the given pointers.
  virtual void sgd(int rank, float* w, const float* g, float* buf, size_t n, const SgdScalars& s) = 0;
  virtual void adam(int rank, float* w, const float* g, float* m, float* v, size_t n, const AdamScalars& s) = 0;
  // The measured clock of work on this memory (TimedPhase): host, the steady clock around the call; a device, events
  // on the rank's stream, whose times reach the clock at settle (the rank loop calls it before each step's end).
  // also_s, when not null, has the same seconds added when they reach the clock (a figure kept beside the phase, as
  // the report's compress_time): on a device at settle, so it must stay valid until the rank's next settle.
  virtual double phase_begin(int rank) = 0;
  virtual void phase_end(int rank, double mark, Phase phase, PhaseClock& clock, double* also_s) = 0;
  // A span from phase_begin's mark timed on the same clock into *out_s only, never into a phase: a part of a phase
  // already timed as a whole (the 1-bit compressed all-reduce's worker, server and decoding spans inside its compress
  // phase). Host: now_s() - mark added at once; a device: at settle, so out_s must stay valid until the rank's next
  // settle. A null out_s only ends the span.
  virtual void span_end(int rank, double mark, double* out_s) = 0;
  virtual void settle(int rank, PhaseClock& clock) {
    (void)rank;
    (void)clock;
  }
  // The gradient compressors' operations on this memory (sim/core/compress_ops.h), or nullptr where it has none.
  virtual CompressOps* compress_ops() { return nullptr; }

 protected:
  virtual float* allocate_zeroed(int rank, size_t n) = 0;
  virtual void release(int rank, float* p) noexcept = 0;
  friend class FloatBuffer;
};

inline FloatBuffer::~FloatBuffer() {
  if (data_ != nullptr) ops_->release(rank_, data_);
}

inline FloatBuffer& FloatBuffer::operator=(FloatBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) ops_->release(rank_, data_);
    ops_ = o.ops_;
    rank_ = o.rank_;
    data_ = std::exchange(o.data_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

// Adds the time of the work between construction and destruction to one phase of a rank's clock, on the clock of
// `ops`' memory (PhaseTimer's twin: on host memory the same steady-clock seconds).
class TimedPhase {
 public:
  TimedPhase(ElementOps& ops, int rank, PhaseClock& clock, Phase phase)
      : ops_(ops), rank_(rank), clock_(clock), phase_(phase), mark_(ops.phase_begin(rank)) {}
  ~TimedPhase() { ops_.phase_end(rank_, mark_, phase_, clock_, nullptr); }
  TimedPhase(const TimedPhase&) = delete;
  TimedPhase& operator=(const TimedPhase&) = delete;

 private:
  ElementOps& ops_;
  int rank_;
  PhaseClock& clock_;
  Phase phase_;
  double mark_;
};

// Host RAM: the loops of the host backend (one instance for the process; the tally is per thread).
ElementOps& host_element_ops();

// The host scan (scan_gradient's): inf/NaN by a vectorizable pass, counted only when there is one; the squares summed
// in double in index order.
ElementScan scan_elements(const float* x, size_t n, bool want_norm);

}  // namespace gs
