// The CUDA device query (cuda_probe.h), compiled by nvcc on every CUDA build. Any error from the query (e.g.
// "insufficient driver" on machines without one) means no usable GPU. Extend: a new fact is one CudaProbe member and
// its query here.
#include <cuda_runtime.h>
#if defined(GRADSWEEP_HAVE_NCCL)
#include <nccl.h>
#endif

#include "sim/backend/cuda_probe.h"

namespace gs {

CudaProbe cuda_probe() {
  CudaProbe p;
  p.compiled = true;
  p.runtime_header_version = CUDART_VERSION;
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) p.runtime_version = runtime;
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess) p.driver_version = driver;
#if defined(GRADSWEEP_HAVE_NCCL)
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) p.nccl_version = nccl;
  p.nccl_header_version = NCCL_VERSION_CODE;
#endif
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    p.error = cudaGetErrorString(err);
    (void)cudaGetLastError();  // clear the sticky-free error state
    return p;
  }
  p.device_count = count;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    CudaDeviceInfo info;
    info.name = prop.name;
    info.compute_capability = std::to_string(prop.major) + "." + std::to_string(prop.minor);
    info.memory_bytes = static_cast<uint64_t>(prop.totalGlobalMem);
    info.multiprocessors = prop.multiProcessorCount;
    p.devices.push_back(info);
  }
  return p;
}

}  // namespace gs
