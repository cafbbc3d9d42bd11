// Device: where a rank's tensors live and its ops run, `host` (CPU threads) or `cuda` (a GPU per rank), and which
// backend and cuda path a configuration takes (choose_backend). Extend: a new backend is one BackendKind value, its
// refusals (cuda_device_issues-style) and its Backend (sim/backend/backend.h: memory, model, communicator).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/comm/communicator.h"
#include "sim/config/run_config.h"
#include "sim/backend/cuda_probe.h"

namespace gs {

enum class BackendKind { kHost, kCuda };

struct Device {
  BackendKind backend = BackendKind::kHost;
  int index = 0;          // GPU ordinal (cuda), 0 on the host
  std::string name;       // "host" or the GPU's name
};

// Whether this build has the cuda backend (sim/backend/: its GPU memory, model and communicators): every build with
// the CUDA side. A build without CUDA refuses cluster.backend "cuda" at
// validation.
#if defined(GRADSWEEP_HAVE_CUDA)
inline constexpr bool kCudaBackendBuilt = true;
#else
inline constexpr bool kCudaBackendBuilt = false;
#endif

// Why cluster.backend = `backend` cannot run on this machine and build (a message for the validation issue), or
// nullopt when it can: "cuda" needs a usable GPU (the message names the probe's error) and the cuda backend. The
// overload with a probe is pure (tests); the other asks cuda_status().
std::optional<std::string> backend_issue(const std::string& backend, const CudaProbe& probe);
std::optional<std::string> backend_issue(const std::string& backend);

// What the cuda backend does not run: the rank loop and the strategies with every parameter, gradient and
// optimizer-state buffer in GPU memory (sim/backend/cuda_backend.h, cuda_seam_issue: host_memory_reason's rule,
// sim/strategy/strategy.h, which every strategy, compressor and optimizer of the registries passes, and the models
// with a GPU model, mlp and linear). One issue at the JSON path of the setting ("... does not run on cluster.backend
// \"cuda\" in this version ...; use \"host\""), empty when it runs the configuration. Pure: needs no GPU. Timing-only
// runs (training.mode "timing") price the schedule on the host and have no issue here (cluster.backend "cuda" still
// needs a usable GPU: backend_issue).
std::vector<ConfigIssue> cuda_device_issues(const RunConfig& config);

// The path a configuration takes on cluster.backend "cuda": the device path (the one rank loop in GPU memory) when
// cuda_device_issues is empty, else none (refused at validation). Report run key `cuda_path` ("device"; older reports
// also hold "staged", the host-buffer path the device path replaced, and "seam").
enum class CudaPath { kNone, kDevice };
const char* cuda_path_name(CudaPath path);  // "none" | "device"

struct CudaPathChoice {
  CudaPath path = CudaPath::kNone;
  std::vector<ConfigIssue> refusals;  // kNone: cuda_device_issues (what to report at validation); else empty
};
// Pure: a function of the configuration only (no GPU query).
CudaPathChoice choose_cuda_path(const RunConfig& config);

// The backend a run takes and why (the report's run keys `backend_reason` and `cuda_path`).
struct BackendChoice {
  BackendKind backend = BackendKind::kHost;
  CudaPath cuda_path = CudaPath::kNone;  // on cuda: the path that runs it (kNone: refused; validation says why)
  std::string reason;
};
// "host" -> host; "auto" -> cuda (device path) when CUDA is compiled, a GPU is usable and the cuda backend runs the
// configuration, else host, the reason naming what was missing; "cuda" -> cuda with choose_cuda_path's path
// (validation refuses it where it cannot run). Never throws. The overload with a probe is pure (tests).
BackendChoice choose_backend(const RunConfig& config, const CudaProbe& probe);
BackendChoice choose_backend(const RunConfig& config);

// The backend cluster.backend resolves to (choose_backend's), except that "cuda" throws gs::Error with
// backend_issue's message or the first cuda_device_issues entry when the cuda backend does not run the configuration
// (validation refuses it earlier).
BackendKind resolve_backend(const RunConfig& config);
const char* backend_name(BackendKind b);

// cluster.hardware "detect": the shipped profile (scenarios/hardware/NAME.json) for exactly `gpu_count` GPUs named
// `gpu_name` (cudaDeviceProp::name, e.g. "NVIDIA H200"), or nullopt when no shipped profile describes that many of
// that GPU (a profile of more GPUs would price a node the machine does not have). The name is split into words at
// spaces and dashes: H200 -> h200-1, h200-sxm-2, h200-sxm-4, h200-sxm-8 (1, 2, 4, 8 GPUs; 2 and 4 are partitions of
// an HGX board on its NVSwitch); H100 with the word PCIe -> h100-pcie-8 (8 GPUs), other H100 (SXM5, "80GB HBM3") ->
// h100-sxm-1/2/4/8; A100 with SXM/SXM4 -> a100-sxm-8 (8 GPUs); the word NVL (H100 NVL, H200 NVL), other counts and
// other names (GH200, L40S, A100 PCIe, ...) -> nullopt. Pure.
std::optional<std::string> detected_hardware_profile(const std::string& gpu_name, int gpu_count);

// cluster.hardware resolved: itself, or for "detect" the profile of this machine's GPUs (device 0's name, the device
// count). Throws gs::Error naming cluster.hardware when "detect" finds no usable GPU or a GPU without a profile.
std::string resolve_hardware(const RunConfig& config);

// One device per rank.
std::vector<Device> make_devices(const RunConfig& config);

}  // namespace gs
