// Definitions of kernels/cuda_runtime.h: CUDA/cuBLAS error checks, allocation with out-of-memory messages, RAII
// streams, events and cuBLAS handles. Host C++ linked against cudart and cuBLAS; a new resource adds its pair here.
#include "kernels/cuda_runtime.h"

#include <cublas_v2.h>

#include <mutex>
#include <string>

namespace gs::gpu {

namespace {

std::mutex& sticky_mutex() {
  static std::mutex mu;
  return mu;
}
std::string& sticky_message() {
  static std::string message;
  return message;
}

[[noreturn]] void fail(const char* file, int line, const char* call, const std::string& what) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + ": " + what);
}

std::string mib(size_t bytes) {
  return std::to_string(bytes) + " bytes (" + std::to_string(bytes >> 20) + " MiB)";
}

}  // namespace

void check_cuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so later calls do not report it again
  const std::string what = std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")";
  if (is_sticky_cuda_error(err)) {
    const std::string where = std::string(file) + ":" + std::to_string(line) + ": " + call + ": " + what;
    record_sticky_cuda_error(where);
    fail(file, line, call, what + "; a sticky CUDA error: the GPU context of this process is lost, so every later "
                                  "cuda run of this process fails with it");
  }
  fail(file, line, call, what);
}

bool is_sticky_cuda_error(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorIllegalInstruction:
    case cudaErrorHardwareStackError:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
      return true;
    default:
      return false;
  }
}

std::string sticky_cuda_error() {
  std::lock_guard<std::mutex> lock(sticky_mutex());
  return sticky_message();
}

void record_sticky_cuda_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(sticky_mutex());
  if (sticky_message().empty()) sticky_message() = message;
}

void check_cublas(int status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const auto s = static_cast<cublasStatus_t>(status);
  fail(file, line, call, std::string(cublasGetStatusName(s)) + " (" + cublasGetStatusString(s) + ")");
}

bool device_usable(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) *why = cudaGetErrorString(err);
    (void)cudaGetLastError();
    return false;
  }
  if (count == 0 && why) *why = "no CUDA device";
  return count > 0;
}

std::pair<size_t, size_t> memory_info() {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return {0, 0};
  }
  return {free_bytes, total_bytes};
}

void* device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    const auto [free_bytes, total_bytes] = memory_info();
    throw CudaError(std::string("out of GPU memory: ") + what + " asked for " + mib(bytes) + ", " + mib(free_bytes) +
                " free of " + mib(total_bytes) + " on the device");
  }
  check_cuda(err, "cudaMalloc", __FILE__, __LINE__);
  return p;
}

void device_free(void* p) noexcept {
  if (p) (void)cudaFree(p);  // errors at teardown (e.g. after a sticky fault) cannot be reported from a destructor
}

void* pinned_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw CudaError(std::string("out of pinned host memory: ") + what + " asked for " + mib(bytes));
  }
  check_cuda(err, "cudaMallocHost", __FILE__, __LINE__);
  return p;
}

void pinned_free(void* p) noexcept {
  if (p) (void)cudaFreeHost(p);
}

Stream::Stream() { GS_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (s_) (void)cudaStreamDestroy(s_);
}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_) (void)cudaStreamDestroy(s_);
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}
void Stream::synchronize() const { GS_CUDA_CHECK(cudaStreamSynchronize(s_)); }

Event::Event(bool timing) {
  GS_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (e_) (void)cudaEventDestroy(e_);
}
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (e_) (void)cudaEventDestroy(e_);
    e_ = std::exchange(o.e_, nullptr);
  }
  return *this;
}
void Event::record(cudaStream_t s) const { GS_CUDA_CHECK(cudaEventRecord(e_, s)); }
void Event::synchronize() const { GS_CUDA_CHECK(cudaEventSynchronize(e_)); }
float Event::elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0.0f;
  GS_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, stop.e_));
  return ms;
}

BlasHandle::BlasHandle(cudaStream_t stream) : stream_(stream) {
  cublasHandle_t h = nullptr;
  GS_CUBLAS_CHECK(cublasCreate(&h));
  // A constructor that throws runs no destructor: destroy the handle here when binding it to the stream fails.
  const cublasStatus_t bound = cublasSetStream(h, stream);
  if (bound != CUBLAS_STATUS_SUCCESS) {
    (void)cublasDestroy(h);
    check_cublas(static_cast<int>(bound), "cublasSetStream(h, stream)", __FILE__, __LINE__);
  }
  h_ = h;
}
BlasHandle::~BlasHandle() {
  if (h_) (void)cublasDestroy(static_cast<cublasHandle_t>(h_));
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) GS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void copy_to_device_async(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes) GS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) GS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

}  // namespace gs::gpu
