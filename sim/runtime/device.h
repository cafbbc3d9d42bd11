// Device: where a rank's tensors live and its ops run. `host` (CPU threads, this version) or `cuda` (one GPU per
// rank, the CUDA-backend issue). The run asks for its devices once, and the communicator follows from them, so the
// CUDA backend plugs in here without touching the rank loop.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "sim/comm/communicator.h"
#include "sim/config/run_config.h"

namespace gs {

enum class Backend { kHost, kCuda };

struct Device {
  Backend backend = Backend::kHost;
  int index = 0;          // GPU ordinal (cuda), 0 on the host
  std::string name;       // "host" or the GPU's name
};

// The backend cluster.backend resolves to: "host" -> host; "auto" -> host in this version (it will take cuda when a
// GPU is usable once the cuda backend exists); "cuda" -> throws gs::Error (not built yet).
Backend resolve_backend(const RunConfig& config);
const char* backend_name(Backend b);

// One device per rank.
std::vector<Device> make_devices(const RunConfig& config);

// The communicator for these devices: host threads share memory (make_host_communicator).
std::unique_ptr<Communicator> make_communicator(const std::vector<Device>& devices);

}  // namespace gs
