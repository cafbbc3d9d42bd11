// The memory a run will need, estimated before it starts from its configuration alone, and the check that skips a run
// that does not fit the memory available. A new component (a compressor's buffers, a device backend) is one more
// term in estimate_run_memory (memory.cpp), documented in docs/benchmarks.md with the benchmark that checks it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "sim/config/run_config.h"

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
  int64_t communication_bytes = 0;  // collective staging buffers
  int64_t records_bytes = 0;        // per-step timings of every rank, the convergence series, the trace
  int64_t total_bytes() const;
  json to_json() const;  // {"total_bytes", "<component>_bytes"...}
};

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

}  // namespace gs
