// GPU smoke test: queries the CUDA devices through the CUDA side. Exits 77 (ctest's SKIP_RETURN_CODE) when no GPU is
// usable, which is every machine without a driver; on a GPU machine it checks the query's answers.
#include <cstdio>

#include "sim/backend/cuda_probe.h"
#include "sim/runtime/device.h"

int main() {
  gs::CudaProbe p = gs::cuda_probe();
  if (!p.compiled) {
    std::printf("SKIP: built without CUDA\n");
    return 77;
  }
  if (!gs::cuda_usable(p)) {  // any error from the device query means no GPU (device.h)
    std::printf("SKIP: no usable GPU (%s)\n", p.error.c_str());
    return 77;
  }
  int failures = 0;
  for (const auto& d : p.devices) {
    std::printf("GPU %s, compute capability %s, %llu bytes\n", d.name.c_str(), d.compute_capability.c_str(),
                static_cast<unsigned long long>(d.memory_bytes));
    if (d.name.empty() || d.memory_bytes == 0) ++failures;
  }
  if (static_cast<int>(p.devices.size()) != p.device_count) ++failures;
  if (p.runtime_version <= 0 || p.driver_version < p.runtime_version / 1000 * 1000 - 1000) {
    std::printf("unexpected versions: runtime %d driver %d\n", p.runtime_version, p.driver_version);
  }
  std::printf("%s\n", failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
