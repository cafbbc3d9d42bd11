// What the CUDA side can see: compiled in or not, device count and properties, versions (header and runtime), or the
// query's error. A new fact is one member here, its query in cuda_probe.cu and its key in report.cpp's context.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gs {

struct CudaDeviceInfo {
  std::string name;                // cudaDeviceProp::name, e.g. "NVIDIA H200"
  std::string compute_capability;  // "major.minor", e.g. "9.0"
  uint64_t memory_bytes = 0;       // cudaDeviceProp::totalGlobalMem
  int multiprocessors = 0;         // cudaDeviceProp::multiProcessorCount
};

struct CudaProbe {
  bool compiled = false;       // false when built without CUDA
  int device_count = 0;        // usable devices (0 on any query error)
  std::string error;           // the query's error ("" when it succeeded)
  int runtime_version = 0;         // cudaRuntimeGetVersion, e.g. 13000 (= 13.0); 0 when unknown
  int runtime_header_version = 0;  // CUDART_VERSION the binary was compiled against; 0 without CUDA
  int driver_version = 0;          // cudaDriverGetVersion: newest CUDA the driver supports; 0 when no driver
  int nccl_version = 0;            // ncclGetVersion (the loaded library), e.g. 22703 (= 2.27.3); 0 when not linked
  int nccl_header_version = 0;     // NCCL_VERSION_CODE of nccl.h at compile time; 0 when not linked
  std::vector<CudaDeviceInfo> devices;
};

// Queries devices (cuda_probe.cu); without CUDA returns {compiled=false} (cuda_status.cpp). Each call queries again;
// cuda_status() keeps the first answer for the process.
CudaProbe cuda_probe();

// The process's CUDA probe (cuda_probe(), queried once and kept: the answer does not change during a run).
const CudaProbe& cuda_status();

// A GPU is usable when CUDA is compiled in, the device query succeeded and found at least one device. Any error from
// the query means no GPU: on machines without a driver it fails with "CUDA driver version is insufficient for CUDA
// runtime version", not with "no CUDA-capable device".
bool cuda_usable(const CudaProbe& p);

}  // namespace gs
