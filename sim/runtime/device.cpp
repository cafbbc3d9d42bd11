// Device resolution and the communicator that goes with it; the CUDA query lives in cuda_probe.cu when CUDA is
// compiled (a stub below otherwise).
#include "sim/runtime/device.h"

#include "sim/core/error.h"
#include "sim/runtime/cuda_probe.h"

namespace gs {

#if !defined(GRADSWEEP_HAVE_CUDA)
CudaProbe cuda_probe() {
  CudaProbe p;
  p.error = "built without CUDA";
  return p;
}
#endif

Backend resolve_backend(const RunConfig& config) {
  const std::string& b = config.cluster.backend;
  if (b == "host" || b == "auto") return Backend::kHost;
  throw Error("cluster.backend: \"" + b + "\" is not available in this version (use \"host\" or \"auto\")");
}

const char* backend_name(Backend b) { return b == Backend::kCuda ? "cuda" : "host"; }

std::vector<Device> make_devices(const RunConfig& config) {
  Backend backend = resolve_backend(config);
  std::vector<Device> devices(static_cast<size_t>(config.cluster.ranks));
  for (auto& d : devices) {
    d.backend = backend;
    d.name = backend_name(backend);
  }
  return devices;
}

std::unique_ptr<Communicator> make_communicator(const std::vector<Device>& devices) {
  GS_EXPECT(!devices.empty(), "a run needs at least one device");
  GS_EXPECT(devices.front().backend == Backend::kHost, "only host communicators exist in this version");
  return make_host_communicator(static_cast<int>(devices.size()));
}

}  // namespace gs
