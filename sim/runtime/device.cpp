// Device resolution, the backend choice and the communicator that goes with it; the CUDA query lives in
// sim/backend/cuda_probe.cu when CUDA is compiled (cuda_status.cpp's stub otherwise). Extend: what the device
// path learns to run drops out of host_memory_reason (sim/strategy/residency.cpp) or cuda_seam_issue.
#include "sim/runtime/device.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <utility>

#include "sim/core/error.h"
#include "sim/backend/cuda_backend.h"
#include "sim/backend/cuda_probe.h"
#include "sim/strategy/strategy.h"

namespace gs {

std::optional<std::string> backend_issue(const std::string& backend, const CudaProbe& p) {
  if (backend != "cuda") return std::nullopt;
  if (!p.compiled) return std::string("\"cuda\" needs a build with CUDA; this binary was built without CUDA (use "
                                      "\"auto\" or \"host\")");
  if (!cuda_usable(p)) {
    const std::string why =
        p.error.empty() ? std::string("the device query found no device") : "the device query says \"" + p.error + "\"";
    return "\"cuda\" needs a usable GPU, and there is none: " + why + " (use \"auto\" or \"host\")";
  }
  if (!kCudaBackendBuilt)
    return "a run on cuda is not available yet in this version (GPU found, but the cuda backend is not built): "
           "use \"auto\" or \"host\"";
  return std::nullopt;
}

std::optional<std::string> backend_issue(const std::string& backend) { return backend_issue(backend, cuda_status()); }

std::vector<ConfigIssue> cuda_device_issues(const RunConfig& c) {
  if (c.training.mode == "timing") return {};
  const std::optional<std::string> why = cuda_seam_issue(c, host_memory_reason(c));
  if (!why) return {};
  // "PATH: why" (host_memory_reason's and cuda_seam_issue's form) -> the issue at PATH.
  const size_t colon = why->find(": ");
  const std::string path = colon == std::string::npos ? std::string("cluster.backend") : why->substr(0, colon);
  const std::string message = colon == std::string::npos ? *why : why->substr(colon + 2);
  return {{path, message + ": it does not run on cluster.backend \"cuda\" in this version (the cuda backend keeps "
                           "every buffer in GPU memory); use \"host\""}};
}

const char* cuda_path_name(CudaPath path) { return path == CudaPath::kDevice ? "device" : "none"; }

CudaPathChoice choose_cuda_path(const RunConfig& config) {
  CudaPathChoice choice;
  choice.refusals = cuda_device_issues(config);
  choice.path = choice.refusals.empty() ? CudaPath::kDevice : CudaPath::kNone;
  return choice;
}

BackendChoice choose_backend(const RunConfig& config, const CudaProbe& p) {
  const std::string& b = config.cluster.backend;
  if (b == "host") return {BackendKind::kHost, CudaPath::kNone, "cluster.backend \"host\""};
  if (b == "cuda") return {BackendKind::kCuda, choose_cuda_path(config).path, "cluster.backend \"cuda\""};
  if (!p.compiled || !kCudaBackendBuilt)
    return {BackendKind::kHost, CudaPath::kNone, "auto: this binary was built without CUDA"};
  if (!cuda_usable(p))
    return {BackendKind::kHost, CudaPath::kNone,
            "auto: no usable GPU (" +
                (p.error.empty() ? std::string("the device query found no device")
                                 : "the device query says \"" + p.error + "\"") + ")"};
  const std::vector<ConfigIssue> issues = cuda_device_issues(config);
  if (!issues.empty())
    return {BackendKind::kHost, CudaPath::kNone,
            "auto: a GPU is usable, but the cuda backend does not run this configuration: " + issues.front().path +
                ": " + issues.front().message};
  return {BackendKind::kCuda, CudaPath::kDevice,
          "auto: a usable GPU (" + (p.devices.empty() ? std::string("?") : p.devices.front().name) +
              ") and a configuration the cuda backend runs"};
}

BackendChoice choose_backend(const RunConfig& config) { return choose_backend(config, cuda_status()); }

BackendKind resolve_backend(const RunConfig& config) {
  const std::string& b = config.cluster.backend;
  if (b != "auto" && b != "host" && b != "cuda")
    throw Error("cluster.backend: expected \"auto\", \"host\" or \"cuda\", got \"" + b + "\"");
  if (b == "cuda") {
    if (auto why = backend_issue(b)) throw Error("cluster.backend: " + *why);
    const CudaPathChoice path = choose_cuda_path(config);
    if (path.path == CudaPath::kNone)
      throw Error(path.refusals.front().path + ": " + path.refusals.front().message);
  }
  return choose_backend(config).backend;
}

std::optional<std::string> detected_hardware_profile(const std::string& gpu_name, int gpu_count) {
  std::vector<std::string> words;
  std::string w;
  for (char ch : gpu_name + " ") {
    if (ch == ' ' || ch == '-' || ch == '_') {
      if (!w.empty()) words.push_back(w);
      w.clear();
    } else {
      w += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    }
  }
  auto has = [&](const char* word) { return std::find(words.begin(), words.end(), word) != words.end(); };
  // The family's profile for exactly this many GPUs (gpus_per_node = gpu_count), or none: a profile for more GPUs
  // than the machine has would price a node it does not have and let more ranks than GPUs pass unremarked.
  auto of = [&](std::initializer_list<std::pair<int, const char*>> shipped) -> std::optional<std::string> {
    for (const auto& [count, name] : shipped)
      if (count == gpu_count) return std::string(name);
    return std::nullopt;
  };
  if (has("NVL")) return std::nullopt;  // H100 NVL, H200 NVL (PCIe cards with NVLink bridges): no profile shipped
  if (has("H200")) return of({{1, "h200-1"}, {2, "h200-sxm-2"}, {4, "h200-sxm-4"}, {8, "h200-sxm-8"}});
  if (has("H100")) {
    if (has("PCIE")) return of({{8, "h100-pcie-8"}});
    return of({{1, "h100-sxm-1"}, {2, "h100-sxm-2"}, {4, "h100-sxm-4"}, {8, "h100-sxm-8"}});
  }
  if (has("A100") && (has("SXM4") || has("SXM"))) return of({{8, "a100-sxm-8"}});
  return std::nullopt;
}

std::string resolve_hardware(const RunConfig& config) {
  if (config.cluster.hardware != "detect") return config.cluster.hardware;
  const CudaProbe& p = cuda_status();
  if (!cuda_usable(p) || p.devices.empty())
    throw Error("cluster.hardware: \"detect\" takes the profile of this machine's GPU, and no GPU is usable (" +
                (p.error.empty() ? std::string("no device") : p.error) + "): name a profile from `gradsweep list`");
  const std::string& name = p.devices.front().name;
  if (auto profile = detected_hardware_profile(name, p.device_count)) return *profile;
  throw Error("cluster.hardware: \"detect\" found " + std::to_string(p.device_count) + " x \"" + name +
              "\", which no shipped profile describes (detect takes a profile for exactly that many GPUs of that "
              "kind: H200 1, 2, 4, 8; H100 SXM 1, 2, 4, 8; H100 PCIe 8; A100 SXM 8): name a profile from `gradsweep "
              "list` or a profile file");
}

const char* backend_name(BackendKind b) { return b == BackendKind::kCuda ? "cuda" : "host"; }

std::vector<Device> make_devices(const RunConfig& config) {
  BackendKind backend = resolve_backend(config);
  std::vector<Device> devices(static_cast<size_t>(config.cluster.ranks));
  for (auto& d : devices) {
    d.backend = backend;
    d.name = backend_name(backend);
  }
  return devices;
}

}  // namespace gs
