// The cuda backend of the seam (backend.h): the host rank loop, its step control and the strategies with every
// parameter, gradient and optimizer-state buffer in GPU memory (CudaElementOps), the GPU model on those buffers
// (make_gpu_model with `resident`) and the GPU communicators (nccl, one rank per GPU; local, ranks sharing GPU 0), the
// control values on a host communicator. What it runs: host_memory_reason's rule (every sync strategy, the parameter
// server with its workers in GPU memory and its server in host memory; every compressor through CudaElementOps'
// CompressOps; sgd / adam / adamw and the 1-bit optimizers; every precision mode, loss scalers, clipping, delayed
// update, pitfalls), model.kind mlp | linear. The measured clock of the compress, communicate and optimizer phases
// (CompressSpan, TimedPhase in the strategies) and of forward and backward (the rank loop's) comes from CUDA events on
// the rank's stream, delivered at ElementOps::settle before each step's end. This is cluster.backend "cuda" (device.h,
// choose_cuda_path; report cuda_path "device"). NOT RUN ON A GPU YET: compiled and linked here and tested on the CPU
// through the tests' sealed memory (tests/unit/test_backend_seam.cpp); its GPU suites (tests/gpu/test_gpu_seam.cpp,
// test_gpu_e2e.cpp) compare it with the host backend at the next GPU loan (tools/device_check.sh).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "sim/backend/backend.h"
#include "sim/config/run_config.h"

namespace gs {

// Why the seam's cuda backend does not run `config` ("PATH: why"), or nullopt: `host_reason` (host_memory_reason's,
// sim/strategy/strategy.h) or a model without a GPU model. Pure.
inline std::optional<std::string> cuda_seam_issue(const RunConfig& config,
                                                  const std::optional<std::string>& host_reason) {
  if (host_reason) return host_reason;
  if (config.model.kind != "mlp" && config.model.kind != "linear")
    return "model.kind: \"" + config.model.kind + "\" has no GPU model (mlp, linear)";
  return std::nullopt;
}

// The cuda backend for `config`'s ranks: rank r on GPU r with NCCL when NCCL is linked and there are at least as many
// GPUs as ranks, else every rank on GPU 0 with the local communicator. Every wait in a collective has the deadline
// wait_deadline_s(training.run_timeout_s). Throws gs::Error without a usable GPU, in a build without CUDA, or on a
// CUDA error.
std::unique_ptr<Backend> make_cuda_backend(const RunConfig& config);

}  // namespace gs
