// The memory a run will need, estimated before it starts from its configuration alone, and the check that skips a run
// that does not fit the memory available. A new component (a compressor's buffers, a device backend) is one more
// term in estimate_run_memory (memory.cpp), documented in docs/benchmarks.md with the benchmark that checks it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "sim/config/run_config.h"
#include "sim/model/model.h"

namespace gs {

// Bytes by component on the run's backend (host: process memory). Formulas in memory.cpp; checked against a child's
// peak resident memory by tools/bench_memory.py (within 25%, docs/benchmarks.md).
struct MemoryEstimate {
  int64_t dataset_bytes = 0;        // samples held in memory (decoded Fashion-MNIST, teacher weights and eval set,
                                    // inline batches) and the shuffled sample order
  int64_t parameters_bytes = 0;     // parameter replicas (one when allreduce shares them) and the initial copy
  int64_t gradients_bytes = 0;      // one gradient sum per rank (and the shared averaged gradient)
  int64_t optimizer_bytes = 0;      // momentum / Adam moments per replica
  int64_t residuals_bytes = 0;      // error-feedback residuals, one per rank, when compression.kind is not none
  int64_t activations_bytes = 0;    // per rank: the micro-batch and the model's forward/backward buffers; rank 0's
                                    // evaluation chunk
  int64_t communication_bytes = 0;  // collective staging buffers (and the 1-bit optimizers' compressed all-reduce
                                    // workspace and messages)
  int64_t records_bytes = 0;        // per-step timings of every rank, the convergence series, the trace
  int64_t total_bytes() const;
  json to_json() const;  // {"total_bytes", "<component>_bytes"...}
};

// Bytes per rank on one GPU of the modeled node (cluster.hardware), whatever backend runs the run: the question is
// whether the configuration fits the GPU it models, not this machine. Formulas and their sources in memory.cpp and
// docs/memory.md (checked there against DeepSpeed's and Hugging Face's published per-parameter figures and, for
// the activations, against what PyTorch's autograd saves: tools/torch_activation_memory.py).
struct GpuMemoryEstimate {
  std::string hardware;              // the profile's name ("" when it cannot be read: nothing is judged)
  std::string gpu;                   // its GPU, e.g. "NVIDIA H100 SXM5 80GB"
  int64_t weights_bytes = 0;         // the weights the model computes with, in the mode's format
  int64_t master_weights_bytes = 0;  // fp32 master weights of mixed modes; a co-located parameter-server shard
  int64_t gradients_bytes = 0;       // the gradient (and a delayed update's ring of averaged gradients)
  int64_t optimizer_bytes = 0;       // momentum / Adam moments (parameter server: of the shard the rank hosts)
  int64_t activations_bytes = 0;     // one micro-batch's (Model::activation_memory)
  int64_t communication_bytes = 0;   // DDP's bucket buffers (a copy of the gradient in the wire format), a push buffer
  int64_t compression_bytes = 0;     // the compressor's payloads (own and gathered) and state (PowerSGD's P, Q); the
                                     // 1-bit optimizers' compressed all-reduce workspace and messages
  int64_t error_feedback_bytes = 0;  // error-feedback residual (DGC: velocity and accumulation)
  int64_t capacity_bytes = 0;        // one GPU's memory (memory.capacity_GiB)
  int64_t usable_bytes = 0;          // capacity x memory.usable_fraction
  ActivationMemory activations;      // the activations' detail
  double activation_element_bytes = 4.0;
  int64_t model_states_bytes() const {
    return weights_bytes + master_weights_bytes + gradients_bytes + optimizer_bytes;
  }
  int64_t total_bytes() const;
  bool known() const { return !hardware.empty(); }
  bool fits() const { return !known() || total_bytes() <= usable_bytes; }
  json to_json() const;  // reports/README.md, "memory.gpu"
};

// The GPU estimate of one run on config.cluster.hardware ("detect" is resolved; a profile that cannot be read
// leaves hardware empty).
GpuMemoryEstimate estimate_gpu_memory(const RunConfig& config, const Model& model);

// "" when the run fits one GPU of its profile; otherwise the skip message: the estimate by component, the capacity
// and the usable part, and the largest data.batch_per_rank that fits (or that training.activation_checkpointing
// would let fit, or that the model states alone do not fit), and the built-in profiles whose GPU would hold it.
std::string gpu_memory_skip_reason(const RunConfig& config, const Model& model);

// Estimate for one run. num_params is the model's parameter count (Model::num_params()).
MemoryEstimate estimate_run_memory(const RunConfig& config, int64_t num_params);

// Memory available for a run in bytes: GRADSWEEP_MEMORY_AVAILABLE_BYTES when set (tests), else MemAvailable of
// /proc/meminfo; nullopt when neither can be read (then nothing is skipped).
std::optional<int64_t> available_memory_bytes();

// False for runs that allocate no model memory (timing-only runs of the modeled clock, training.mode "timing"):
// their estimate holds only the per-step records (which grow with steps x ranks), so a very long one is still
// skipped rather than exhausting memory.
bool run_does_arithmetic(const RunConfig& config);

// "" when the run fits available_bytes; otherwise the skip message: the estimate by component, the memory available,
// and the largest setting that would fit (cluster.ranks, else data.batch_per_rank, else training.steps).
std::string memory_skip_reason(const RunConfig& config, int64_t num_params, int64_t available_bytes);

// bytes as the messages print them: in the largest of GiB, MiB and KiB (powers of 1024) of which it holds at least
// one, with `decimals` decimals, else in whole bytes ("24.0 MiB" for 25165824, "1.50 GiB" for 1610612736 at 2).
std::string binary_size_text(double bytes, int decimals);

}  // namespace gs
