// Device: where a rank's tensors live and its ops run. `host` (CPU threads, this version) or `cuda` (one GPU per
// rank, the CUDA-backend issue). The run asks for its devices once, and the communicator follows from them, so the
// CUDA backend plugs in here without touching the rank loop.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/comm/communicator.h"
#include "sim/config/run_config.h"
#include "sim/runtime/cuda_probe.h"

namespace gs {

enum class Backend { kHost, kCuda };

struct Device {
  Backend backend = Backend::kHost;
  int index = 0;          // GPU ordinal (cuda), 0 on the host
  std::string name;       // "host" or the GPU's name
};

// Whether this build has the cuda rank loop (kernels, communicators, per-rank streams). false in this version: a run
// on cuda is refused at validation even where a GPU is usable. The CUDA-backend work sets it when that loop lands.
inline constexpr bool kCudaRankLoopBuilt = false;

// The process's CUDA probe (cuda_probe(), queried once and kept: the answer does not change during a run).
const CudaProbe& cuda_status();

// A GPU is usable when CUDA is compiled in, the device query succeeded and found at least one device. Any error from
// the query means no GPU: on machines without a driver it fails with "CUDA driver version is insufficient for CUDA
// runtime version", not with "no CUDA-capable device".
bool cuda_usable(const CudaProbe& p);

// Why cluster.backend = `backend` cannot run on this machine and build (a message for the validation issue), or
// nullopt when it can: "cuda" needs a usable GPU (the message names the probe's error) and the cuda rank loop.
std::optional<std::string> backend_issue(const std::string& backend);

// The backend cluster.backend resolves to: "host" -> host; "auto" -> cuda when a GPU is usable and the cuda rank loop
// is built, else host; "cuda" -> cuda, or gs::Error with backend_issue's message (validation refuses it earlier).
Backend resolve_backend(const RunConfig& config);
const char* backend_name(Backend b);

// One device per rank.
std::vector<Device> make_devices(const RunConfig& config);

// The communicator for these devices: host threads share memory (make_host_communicator).
std::unique_ptr<Communicator> make_communicator(const std::vector<Device>& devices);

}  // namespace gs
