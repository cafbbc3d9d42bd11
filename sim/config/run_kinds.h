// The choices of a validated RunConfig as enums (run mode, pitfall) and the StepShape of its optimizer step
// (N ranks x K micro-batches x b samples). Parsed once into the run's plan (sim/runtime/run_plan.h); components read
// these, not the strings. Extend: a new choice of one of these fields is one enum value plus its row in run_kinds.cpp.
#pragma once
#include <cstdint>

#include "sim/config/run_config.h"

namespace gs {

// training.mode: "train" (arithmetic) | "timing" (the schedule alone is priced on the modeled clock).
enum class RunMode { kTrain, kTiming };
// sync.kind is no enum: the plan holds its registry line (RunPlan::strategy), so a new strategy is its file and one
// registry line (sim/strategy/registry.cpp).
// training.pitfall (docs/pitfalls.md). fp16_pure_unscaled and delay_allreduce are aliases of other fields' settings
// (applied at load): the rank loop changes nothing for them; zero_grad_in_loop and mean_of_means change what the
// micro-batch loop accumulates.
enum class Pitfall { kNone, kZeroGradInLoop, kMeanOfMeans, kFp16PureUnscaled, kDelayAllreduce };

// Parse a validated field's string; throw gs::Error naming the field and the known values otherwise.
RunMode parse_run_mode(const std::string& name);
Pitfall parse_pitfall(const std::string& name);
const char* run_mode_name(RunMode m);    // "train" | "timing"
const char* pitfall_name(Pitfall p);     // "none" | "zero_grad_in_loop" | ...

// The shape of one optimizer step: N ranks, K micro-batches per rank, b samples per micro-batch per rank, and the
// global batch N*K*b (samples per optimizer step over all ranks, before an epoch's short last batch).
struct StepShape {
  int ranks = 1;                  // N (cluster.ranks)
  int64_t micro_batches = 1;      // K (training.accumulation_steps)
  int64_t batch_per_rank = 1;     // b (data.batch_per_rank)
  int64_t global_batch = 1;       // N*K*b
  int64_t samples_per_rank() const { return micro_batches * batch_per_rank; }  // K*b
};
StepShape step_shape(const RunConfig& config);

}  // namespace gs
