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

// Whether this build has the cuda rank loop (sim/runtime/cuda_rank_loop.cpp: kernels, communicators, per-rank
// streams): every build with the CUDA side. A build without CUDA refuses cluster.backend "cuda" at validation.
#if defined(GRADSWEEP_HAVE_CUDA)
inline constexpr bool kCudaRankLoopBuilt = true;
#else
inline constexpr bool kCudaRankLoopBuilt = false;
#endif

// The process's CUDA probe (cuda_probe(), queried once and kept: the answer does not change during a run).
const CudaProbe& cuda_status();

// A GPU is usable when CUDA is compiled in, the device query succeeded and found at least one device. Any error from
// the query means no GPU: on machines without a driver it fails with "CUDA driver version is insufficient for CUDA
// runtime version", not with "no CUDA-capable device".
bool cuda_usable(const CudaProbe& p);

// Why cluster.backend = `backend` cannot run on this machine and build (a message for the validation issue), or
// nullopt when it can: "cuda" needs a usable GPU (the message names the probe's error) and the cuda rank loop.
std::optional<std::string> backend_issue(const std::string& backend);

// What the cuda rank loop does not run in this version, one issue per JSON path ("... on cluster.backend \"cuda\" in
// this version (...); use \"host\""), empty when it runs the configuration. Pure: needs no GPU. Timing-only runs
// (training.mode "timing") price the schedule on the host whatever the backend, so they have no issue here.
// Supported: model.kind mlp | linear; data.kind fashion_mnist | teacher | inline without a node cache; sync.kind
// allreduce with sync.staleness 0; precision.mode fp32 without a loss scaler; compression.kind none;
// training.clip_grad_norm 0; training.pitfall none; report.trace false.
std::vector<ConfigIssue> cuda_loop_issues(const RunConfig& config);

// The backend a run takes and why (the report's run key `backend_reason`).
struct BackendChoice {
  Backend backend = Backend::kHost;
  std::string reason;
};
// "host" -> host; "auto" -> cuda when CUDA is compiled, a GPU is usable and cuda_loop_issues is empty, else host (the
// reason names what was missing); "cuda" -> cuda (validation refuses it where it cannot run). Never throws.
BackendChoice choose_backend(const RunConfig& config);

// The backend cluster.backend resolves to (choose_backend's), except that "cuda" throws gs::Error with
// backend_issue's message or the first cuda_loop_issues entry when it cannot run (validation refuses it earlier).
Backend resolve_backend(const RunConfig& config);
const char* backend_name(Backend b);

// cluster.hardware "detect": the shipped profile (scenarios/hardware/NAME.json) for `gpu_count` GPUs named
// `gpu_name` (cudaDeviceProp::name, e.g. "NVIDIA H200"), or nullopt when no shipped profile describes that GPU. The
// name is split into words at spaces and dashes: H200 -> h200-1 (one GPU) or h200-sxm-8 (more); H100 -> h100-pcie-8
// with the word PCIe, nullopt with NVL, else h100-sxm-8 (SXM5, "80GB HBM3"); A100 -> a100-sxm-8 with SXM/SXM4 (PCIe:
// nullopt). Other names (GH200, L40S, ...) -> nullopt. Pure.
std::optional<std::string> detected_hardware_profile(const std::string& gpu_name, int gpu_count);

// cluster.hardware resolved: itself, or for "detect" the profile of this machine's GPUs (device 0's name, the device
// count). Throws gs::Error naming cluster.hardware when "detect" finds no usable GPU or a GPU without a profile.
std::string resolve_hardware(const RunConfig& config);

// One device per rank.
std::vector<Device> make_devices(const RunConfig& config);

// The communicator for these devices: host threads share memory (make_host_communicator).
std::unique_ptr<Communicator> make_communicator(const std::vector<Device>& devices);

}  // namespace gs
