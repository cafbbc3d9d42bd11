// What the CUDA side can see: compiled in or not, device count and properties, versions, or the query's error.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gs {

struct CudaDeviceInfo {
  std::string name;
  std::string compute_capability;
  uint64_t memory_bytes = 0;
};

struct CudaProbe {
  bool compiled = false;       // false when built without CUDA
  int device_count = 0;        // usable devices (0 on any query error)
  std::string error;           // the query's error ("" when it succeeded)
  int runtime_version = 0;     // e.g. 13000
  int driver_version = 0;      // 0 when no driver
  int nccl_version = 0;        // runtime NCCL version code, 0 when not linked
  std::vector<CudaDeviceInfo> devices;
};

// Queries devices (cuda_probe.cu); without CUDA returns {compiled=false} (device.cpp).
CudaProbe cuda_probe();

}  // namespace gs
