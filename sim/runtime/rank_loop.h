// One run: run_training resolves a RunConfig into its RunPlan and runs it (the rank loop on the plan's backend, or
// timing-only),
// returning what the report needs. Extend: a new test or driver hook is one RunHooks member.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/config/run_config.h"
#include "sim/runtime/run_result.h"

namespace gs {
class Backend;
class GradientHooks;
class LossScaler;
struct PrecisionCounters;
struct ParameterRead;
struct RunPlan;
}

namespace gs {

class Dataset;

struct RunHooks {
  // Called by rank 0 after every optimizer step (step is 1-based).
  std::function<void(int64_t step, int64_t total, double train_loss)> on_step;
  // When set and true, the run stops at the next step boundary with disposition "interrupted".
  const std::atomic<bool>* stop = nullptr;
  // Tests: called on every read of a parameter server's parameters (sim/strategy/strategy.h, ParameterRead), from
  // inside the strategy's serialized section.
  std::function<void(const ParameterRead&)> on_read;
  // When set, builds the run's dataset instead of the registry (tests: a dataset whose reads fail mid-run).
  std::function<std::unique_ptr<Dataset>(const RunConfig&)> make_dataset;
  // Tests: subscribes listeners of their own to the host rank loop's gradient-ready events (sim/strategy/strategy.h,
  // GradientHooks), after the strategy's; events come on the rank threads.
  std::function<void(GradientHooks&)> subscribe_gradients;
  // Tests: the run's backend (sim/backend/backend.h: its memory, model and communicator) in place of the one the plan
  // chose (the host's or the cuda backend's; the GPU tests' staged comparison: host memory with the GPU model). Not
  // timing-only runs, not across processes. A backend whose memory is not host RAM runs only what its issue() accepts
  // (host_memory_reason's rule; else the run fails naming why, before any step).
  std::function<std::unique_ptr<Backend>(const RunConfig&)> make_backend;
};

// The report's precision object, for the host and the cuda rank loops: the run's mode, loss-scaling kind and bytes per
// parameter; rank 0's `scaler` (its trajectory and skips) with the averaged gradient's non-finite checks (nullptr:
// no precision step, both left out); the counters summed over ranks; every rank's first local non-finite step.
PrecisionResult precision_result(const RunConfig& config, const LossScaler* scaler, uint64_t averaged_nonfinite,
                                 std::optional<int64_t> first_nonfinite_averaged,
                                 const std::vector<PrecisionCounters>& counters,
                                 const std::vector<std::optional<int64_t>>& first_nonfinite);

// Number of optimizer steps the config asks for (training.steps, or epochs x steps per epoch).
// Throws gs::Error when the data cannot supply one global batch.
int64_t planned_steps(const RunConfig& config, int64_t steps_per_epoch);

// Runs one configuration. Errors inside the run are returned as disposition "failed" with the message. A non-finite
// parameter, training loss or gradient stops the run as "diverged" with the data so far (the step and the first
// non-finite quantity named); training.run_timeout_s > 0 stops it as "timeout" at the first step boundary past the
// limit; hooks.stop as "interrupted".
RunResult run_training(const RunConfig& config, const RunHooks& hooks = {});

}  // namespace gs
