// One run: builds the model, data, communicator and sync strategy of a RunConfig, runs the rank loop on a World,
// and returns what the report needs. The rank loop lives in rank_loop.cpp and nowhere else.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/config/run_config.h"
#include "sim/cost/step_cost.h"
#include "sim/model/loader.h"
#include "sim/model/model.h"
#include "sim/runtime/clock.h"

namespace gs {
struct ParameterRead;
}

namespace gs {

class Dataset;

// One point of the convergence series, recorded after optimizer step `step` (1-based).
struct SeriesPoint {
  int64_t step = 0;
  double measured_s = 0.0;               // training time so far (rank 0's steps; evaluation excluded)
  double modeled_s = 0.0;                // the same on the modeled clock (cost model, cluster.hardware)
  double train_loss = 0.0;               // mean per-sample loss over the step's samples (all ranks, micro-batches)
  std::optional<double> eval_loss;       // at evaluation steps
  std::optional<double> eval_accuracy;   // at evaluation steps, classification only
};

// What the precision section did in a run (report key "precision"; reports/README.md).
struct PrecisionResult {
  std::string mode;                                             // precision.mode
  std::string loss_scale;                                       // resolved: none | static | dynamic
  std::vector<std::pair<int64_t, double>> loss_scale_trajectory;  // (step, scale after it) at changes; (0, initial)
  double final_loss_scale = 1.0;
  std::vector<int64_t> skipped_steps;                           // 1-based optimizer steps skipped by the scaler
  uint64_t grad_values = 0;                                     // gradient values rounded to the gradient format
  uint64_t grad_underflow = 0;                                  // nonzero values that became zero
  uint64_t grad_nonfinite = 0;                                  // values that were or became inf/NaN
  std::vector<std::optional<int64_t>> first_nonfinite_step;     // per rank: first step whose local gradient held inf/NaN
  BytesPerParam bytes;
};

// One rank's data in one optimizer step: where its samples came from and what the loader's work costs on the
// modeled clock (storage reads and peer fetches, before any overlap with compute).
struct DataStepRecord {
  DataCounts counts;
  double fetch_modeled_s = 0.0;
};

// The input pipeline of a run (report key "data"; reports/README.md).
struct DataResult {
  std::string storage;                      // the storage profile's name ("custom" for an object of numbers)
  int64_t prefetch = 0;                     // data.prefetch (micro-batches)
  std::string cache_policy = "none";
  int64_t cache_capacity_samples = 0;       // per node
  int64_t ranks_per_node = 1;
  int64_t steps_per_epoch = 0;              // 0: the dataset has no epochs
  std::vector<int64_t> max_queue_depth;     // per rank: the most finished micro-batches its queue ever held
  std::vector<std::vector<DataStepRecord>> steps;  // [rank][step]
};

struct RunResult {
  std::string disposition = "passed";  // passed | diverged | failed | skipped | interrupted | timeout
  std::string message;
  int64_t divergence_step = 0;          // diverged: the step whose result was the first non-finite quantity
  std::string divergence_quantity;      // diverged: parameters | train_loss | gradient
  int64_t steps_planned = 0;
  int64_t steps_completed = 0;
  double wall_s = 0.0;
  int64_t num_params = 0;
  std::string backend;                        // the device backend the run used ("host" or "cuda")
  std::string backend_reason;                 // why that backend (choose_backend, sim/runtime/device.h)
  // cuda backend: the loop that ran it, "device" (cuda_rank_loop.cpp) or "staged" (the host loop with the GPU model,
  // cuda_model.h); empty on host (report key cuda_path).
  std::string cuda_path;
  // cuda backend: every rank had a GPU of its own (the nccl communicator), so the modeled clock's per-phase relative
  // error is meaningful and reported (timing.model_error); false on host and under the local communicator.
  bool ranks_one_per_gpu = false;
  double samples_trained = 0.0;               // over all ranks and steps
  std::vector<std::vector<StepTimes>> steps;  // [rank][step]
  // Modeled clock (sim/cost/cost_model.h): [rank][step] phase times, and per rank and step the communication hidden
  // behind backward vs exposed; the chains (buckets) of rank 0's first step with their chosen algorithm.
  std::vector<std::vector<StepTimes>> modeled_steps;
  std::vector<std::vector<double>> modeled_exposed_s, modeled_overlapped_s;
  std::vector<CommChain> modeled_chains;
  std::string hardware;  // the profile's name
  std::vector<SeriesPoint> series;
  bool classification = false;
  bool replicas_identical = true;             // the strategy's claim
  json compression;                           // the strategy's compression_report() (null: uncompressed)
  std::vector<float> trace_initial;           // report.trace: parameters before step 1
  std::vector<std::vector<std::vector<float>>> trace;  // report.trace: [step][rank][param] after each step
  std::optional<PrecisionResult> precision;   // filled for every run that started training
  json staleness;  // free-running strategies' staleness_report() (report key "staleness"); null otherwise
  std::optional<DataResult> data;             // filled for every run that started training
};

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
};

// Number of optimizer steps the config asks for (training.steps, or epochs x steps per epoch).
// Throws gs::Error when the data cannot supply one global batch.
int64_t planned_steps(const RunConfig& config, int64_t steps_per_epoch);

// Runs one configuration. Errors inside the run are returned as disposition "failed" with the message. A non-finite
// parameter, training loss or gradient stops the run as "diverged" with the data so far (the step and the first
// non-finite quantity named); training.run_timeout_s > 0 stops it as "timeout" at the first step boundary past the
// limit; hooks.stop as "interrupted".
RunResult run_training(const RunConfig& config, const RunHooks& hooks = {});

// Run outcomes, one wording for the host and cuda loops (every report says a stop or a divergence the same way).
// A stop at the step boundary after `steps_done` of `total` steps: disposition "timeout" (training.run_timeout_s =
// `timeout_s` passed) or "interrupted" (hooks.stop).
void mark_stopped(RunResult& res, int64_t steps_done, int64_t total, bool timed_out, double timeout_s);
// A lock-step loop's divergence found at 0-based `step`: `quantity` is "parameters" (the parameters entering the step,
// i.e. after step's update; at step 0 the initial ones), "gradient" (the reduced gradient) or "train_loss".
// `detail` says how much was non-finite ("12 values over all ranks"); it is left out where empty.
void mark_diverged(RunResult& res, int64_t step, const char* quantity, double train_loss, const std::string& detail);
// The last update's parameters are non-finite although every step's checks passed (the run was "passed").
void mark_final_parameters_nonfinite(RunResult& res);

// The cuda backend's rank loop (sim/runtime/cuda_rank_loop.cpp, built with the CUDA side only): what run_training
// runs when the backend resolves to cuda. Same contract and RunResult fields as the host loop for the configurations
// cuda_loop_issues (device.h) accepts; `reason` goes to RunResult::backend_reason. CUDA and NCCL errors end the run as
// "failed" with the error's message (communicators aborted first, so no rank hangs).
RunResult run_training_cuda(const RunConfig& config, const RunHooks& hooks, const std::string& reason);

}  // namespace gs
