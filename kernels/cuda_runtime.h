// RAII owners of CUDA resources (device buffers from cudaMalloc, pinned host buffers, streams, events, cuBLAS
// handles) and the error checks that turn CUDA, cuBLAS and NCCL failures into CudaError. Host C++ (no nvcc needed);
// defined in kernels/cuda_runtime.cpp, built only with the CUDA side. A new resource type gets one class here.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace gs::gpu {

// Every CUDA, cuBLAS and NCCL failure and every failed GS_EXPECT_GPU on the CUDA side: what() is the user-facing
// message ("file:line: call: error"). kernels/ includes nothing of sim/, so this is its own type; callers catch
// std::exception (a run ends "failed" with the message).
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws CudaError "file:line: call: cudaErrorName (error string)" when err != cudaSuccess; clears the error state
// first so the next call does not see a stale non-sticky error. A sticky error (is_sticky_cuda_error) is recorded
// for the process (sticky_cuda_error) and its message says that the GPU context is lost.
void check_cuda(cudaError_t err, const char* call, const char* file, int line);

// True for the CUDA errors that corrupt the context for the rest of the process (CUDA Runtime API, cudaError_t: "the
// process is left in an inconsistent state and any further CUDA work will return the same error"): an illegal or
// misaligned address, a launch failure, an illegal instruction or PC, a hardware stack error, a device assert, a
// launch timeout, an uncorrectable ECC or NVLink error. Pure.
bool is_sticky_cuda_error(cudaError_t err);
// The first sticky error this process met ("file:line: call: cudaErrorName (...)"), or "" when none. Thread-safe.
std::string sticky_cuda_error();
// Records `message` as the process's sticky error unless one is recorded already (check_cuda calls it).
void record_sticky_cuda_error(const std::string& message);
// The same for cuBLAS status codes (cublasStatus_t passed as int so this header needs no cuBLAS include).
void check_cublas(int status, const char* call, const char* file, int line);

// True when a CUDA device is usable: cudaGetDeviceCount succeeds with at least one device. Any error (no driver,
// "insufficient driver", no device) means false; `why` (optional) gets the error string.
bool device_usable(std::string* why = nullptr);

// Bytes free and total on the current device (cudaMemGetInfo); {0, 0} when the query fails.
std::pair<size_t, size_t> memory_info();

// Allocates `bytes` on the current device with cudaMalloc (never managed memory). Out of memory throws gpu::CudaError
// naming the bytes asked for, the bytes free and the total, and `what` (the buffer's purpose).
void* device_alloc(size_t bytes, const char* what);
void device_free(void* p) noexcept;
// Pinned (page-locked) host memory via cudaMallocHost, for asynchronous copies of batches.
void* pinned_alloc(size_t bytes, const char* what);
void pinned_free(void* p) noexcept;

// A device array of n elements of T. Move-only; freed with cudaFree. Contents uninitialized.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n, const char* what = "device buffer")
      : ptr_(n ? static_cast<T*>(device_alloc(n * sizeof(T), what)) : nullptr), n_(n) {}
  ~DeviceBuffer() { device_free(ptr_); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      device_free(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  // Grows (discarding the contents) when fewer than n elements are held; never shrinks.
  void reserve(size_t n, const char* what = "device buffer") {
    if (n > n_) *this = DeviceBuffer(n, what);
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

// A pinned host array of n elements of T (cudaMallocHost). Move-only.
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t n, const char* what = "pinned buffer")
      : ptr_(n ? static_cast<T*>(pinned_alloc(n * sizeof(T), what)) : nullptr), n_(n) {}
  ~PinnedBuffer() { pinned_free(ptr_); }
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      pinned_free(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  T* get() const { return ptr_; }
  T& operator[](size_t i) const { return ptr_[i]; }
  size_t size() const { return n_; }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

// A non-blocking CUDA stream (cudaStreamNonBlocking: no implicit sync with the legacy default stream).
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

// A CUDA event; timing enabled unless `timing` is false (cudaEventDisableTiming is cheaper for pure ordering).
class Event {
 public:
  explicit Event(bool timing = true);
  ~Event();
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t s) const;
  void synchronize() const;
  // Milliseconds between two recorded, completed events (cudaEventElapsedTime).
  static float elapsed_ms(const Event& start, const Event& stop);

 private:
  cudaEvent_t e_ = nullptr;
};

// A cuBLAS handle bound to one stream (cublasCreate / cublasSetStream); default math mode (no TF32 unless the
// environment asks). The handle is an opaque pointer here so this header needs no cuBLAS include.
class BlasHandle {
 public:
  explicit BlasHandle(cudaStream_t stream);
  ~BlasHandle();
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;
  void* get() const { return h_; }
  cudaStream_t stream() const { return stream_; }

 private:
  void* h_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// Copies (synchronous on the legacy default stream; for tests and setup, not the step loop). A non-blocking stream
// (Stream) does not wait for them: data read on such a stream goes up with copy_to_device_async on that stream.
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
// Host-to-device copy ordered on `stream` (cudaMemcpyAsync; from pageable memory the source may be reused once this
// returns, CUDA stages it).
void copy_to_device_async(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace gs::gpu

// GS_CUDA_CHECK(call): runs a CUDA runtime call and throws gpu::CudaError naming the call and CUDA's error string.
#define GS_CUDA_CHECK(call) ::gs::gpu::check_cuda((call), #call, __FILE__, __LINE__)
// GS_EXPECT_GPU(cond, message): throws gpu::CudaError "file:line: cond: message" (the CUDA side's GS_EXPECT; it
// does not depend on the sim library).
#define GS_EXPECT_GPU(cond, message)                                                                         \
  do {                                                                                                       \
    if (!(cond))                                                                                             \
      throw ::gs::gpu::CudaError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #cond ": " +  \
                                 (message));                                                                 \
  } while (0)
// GS_CUBLAS_CHECK(call): the same for cuBLAS.
#define GS_CUBLAS_CHECK(call) ::gs::gpu::check_cublas(static_cast<int>(call), #call, __FILE__, __LINE__)
