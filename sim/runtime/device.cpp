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

const CudaProbe& cuda_status() {
  static const CudaProbe probe = cuda_probe();
  return probe;
}

bool cuda_usable(const CudaProbe& p) { return p.compiled && p.error.empty() && p.device_count > 0; }

std::optional<std::string> backend_issue(const std::string& backend) {
  if (backend != "cuda") return std::nullopt;
  const CudaProbe& p = cuda_status();
  if (!p.compiled) return std::string("\"cuda\" needs a build with CUDA; this binary was built without CUDA (use "
                                      "\"auto\" or \"host\")");
  if (!cuda_usable(p)) {
    const std::string why =
        p.error.empty() ? std::string("the device query found no device") : "the device query says \"" + p.error + "\"";
    return "\"cuda\" needs a usable GPU, and there is none: " + why + " (use \"auto\" or \"host\")";
  }
  if (!kCudaRankLoopBuilt)
    return "a run on cuda is not available yet in this version (GPU found, but the cuda rank loop is not built): "
           "use \"auto\" or \"host\"";
  return std::nullopt;
}

Backend resolve_backend(const RunConfig& config) {
  const std::string& b = config.cluster.backend;
  if (b == "host") return Backend::kHost;
  if (b == "auto") return kCudaRankLoopBuilt && cuda_usable(cuda_status()) ? Backend::kCuda : Backend::kHost;
  if (b == "cuda") {
    if (auto why = backend_issue(b)) throw Error("cluster.backend: " + *why);
    return Backend::kCuda;
  }
  throw Error("cluster.backend: expected \"auto\", \"host\" or \"cuda\", got \"" + b + "\"");
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
