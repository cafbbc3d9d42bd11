// What one run produced, as the report reads it (RunResult and its parts): plain data, no behaviour. The rank loops
// fill it (sim/runtime/rank_loop.h), the report writes it (sim/report/report.h). A new report field of a run is one
// member here plus its line in report.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/core/clock.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/step_cost.h"
#include "sim/model/loader.h"
#include "sim/model/model.h"

namespace gs {

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
  int64_t skipped_nonfinite_loss = 0;      // of those, windows whose training loss was inf/NaN
  int64_t skipped_nonfinite_gradient = 0;  // ... whose loss was finite and averaged gradient held an inf/NaN
  uint64_t averaged_grad_nonfinite = 0;    // inf/NaN values the scaler's checks found in the averaged gradient
  std::optional<int64_t> first_nonfinite_averaged_step;  // first step whose averaged gradient held an inf/NaN
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

// How a run ended (report key "disposition"). The rank loops set it through set_disposition; the driver and the
// report compare the enum; only the report's text has its name (disposition_name), and what reads a report back
// turns the name into the enum (parse_disposition).
enum class Disposition { kPassed, kDiverged, kFailed, kSkipped, kInterrupted, kTimeout };
// "passed" | "diverged" | "failed" | "skipped" | "interrupted" | "timeout"
inline const char* disposition_name(Disposition d) {
  switch (d) {
    case Disposition::kPassed: return "passed";
    case Disposition::kDiverged: return "diverged";
    case Disposition::kFailed: return "failed";
    case Disposition::kSkipped: return "skipped";
    case Disposition::kInterrupted: return "interrupted";
    case Disposition::kTimeout: return "timeout";
  }
  return "failed";
}
inline std::ostream& operator<<(std::ostream& os, Disposition d) { return os << disposition_name(d); }
// The disposition a report names (disposition_name's inverse); nullopt for any other text.
inline std::optional<Disposition> parse_disposition(const std::string& name) {
  for (Disposition d : {Disposition::kPassed, Disposition::kDiverged, Disposition::kFailed, Disposition::kSkipped,
                        Disposition::kInterrupted, Disposition::kTimeout})
    if (name == disposition_name(d)) return d;
  return std::nullopt;
}

struct RunResult {
  Disposition disposition = Disposition::kPassed;
  bool is(Disposition d) const { return disposition == d; }
  void set_disposition(Disposition d, std::string why) {
    disposition = d;
    message = std::move(why);
  }
  std::string message;
  int64_t divergence_step = 0;          // diverged: the step whose result was the first non-finite quantity
  std::string divergence_quantity;      // diverged: parameters | loss_scale | train_loss | gradient
  int64_t steps_planned = 0;
  int64_t steps_completed = 0;
  double wall_s = 0.0;
  int64_t num_params = 0;
  std::string backend;                        // the device backend the run used ("host" or "cuda")
  std::string backend_reason;                 // why that backend (choose_backend, sim/runtime/device.h)
  // cuda backend: the path that ran it, "device" (the rank loop with every buffer in GPU memory, cuda_backend.h);
  // empty on host (report key cuda_path).
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
  std::vector<std::vector<StepLayout>> modeled_layouts;  // report.timeline: [rank][step] (lockstep runs)
  std::string hardware;  // the profile's name
  std::vector<SeriesPoint> series;
  bool classification = false;
  bool replicas_identical = true;             // the strategy's claim
  json compression;                           // the strategy's report: its compression object (null: uncompressed)
  std::vector<float> trace_initial;           // report.trace: parameters before step 1
  std::vector<std::vector<std::vector<float>>> trace;  // report.trace: [step][rank][param] after each step
  // report.save_weights: the parameters before step 1 (as every rank starts) and after the last step (the strategy's
  // evaluation parameters: every replica's under all-reduce, their average under local SGD, the server's); empty
  // when not asked for.
  std::vector<float> initial_params, final_params;
  std::optional<PrecisionResult> precision;   // filled for every run that started training
  json staleness;  // the strategy's report: a free-running strategy's staleness object (key "staleness"); or null
  std::optional<DataResult> data;             // filled for every run that started training
};

}  // namespace gs
