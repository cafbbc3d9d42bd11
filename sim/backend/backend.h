// The backend seam (docs/design.md, section 6): what differs between the host and a device backend for one run of the
// host rank loop, and nothing else: the memory its parameters, gradients and optimizer state live in (ElementOps, with
// the optimizers' update and the measured clock of work on it), the model that reads parameters from and adds
// gradients into that memory, and the communicator that reduces its buffers. The rank loop, the step control and the
// strategies are the same code on every backend. Extend: a backend is one implementation of Backend (the host's
// here; the cuda backend's in cuda_backend.h; tests' sealed memory in tests/unit/sealed_memory.h).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "sim/comm/communicator.h"
#include "sim/config/run_config.h"
#include "sim/core/element_ops.h"
#include "sim/model/model.h"

namespace gs {

class Backend {
 public:
  virtual ~Backend() = default;
  // The memory of the run's parameters, gradients and optimizer state. Outlives every buffer, model workspace and
  // communicator the run makes from this backend (the run destroys those first).
  virtual ElementOps& memory() = 0;
  // The run's model: forward, backward and evaluate read `params` from memory()'s buffers (the rank's own; for
  // evaluation rank 0's) and backward adds into `grad` in memory(), announcing each layer (Workspace::grad_ready)
  // once its elements there are final in the order of memory()'s operations on that rank (a device: enqueued on the
  // rank's stream before the event, so a communicator started from the event reduces the final values). Batches are
  // host memory (Batch); the model stages them. Throws gs::Error for a model it has no implementation of.
  virtual std::unique_ptr<Model> make_model(const RunConfig& config) = 0;
  // The communicator of `ranks` ranks (one process) over memory()'s buffers.
  virtual std::unique_ptr<Communicator> make_communicator(int ranks) = 0;
  // True where every rank has a device of its own (the cuda backend's nccl ranks): the measured clock is then one
  // GPU's per rank, and the report compares it with the modeled clock (timing.model_error). False on host memory.
  virtual bool one_rank_per_device() const { return false; }
  // Why this backend cannot run `config` (a "PATH: why" message), or nullopt. Default: a device memory runs only
  // strategies whose element work goes through ElementOps (host_memory_reason's rule, given as `host_reason`).
  virtual std::optional<std::string> issue(const RunConfig& config, const std::optional<std::string>& host_reason) {
    (void)config;
    if (memory().host() || !host_reason) return std::nullopt;
    return host_reason;
  }
};

// The host backend: host RAM (host_element_ops), the host model (make_model) and the shared-memory communicator
// (make_host_communicator). Its runs are the bits the host backend always produced. `model`: another model on host
// buffers instead (the GPU tests' staged comparison: the GPU model on host buffers, cuda_model.h).
using ModelFactory = std::unique_ptr<Model> (*)(const RunConfig& config);
std::unique_ptr<Backend> make_host_backend(ModelFactory model = make_model);

}  // namespace gs
