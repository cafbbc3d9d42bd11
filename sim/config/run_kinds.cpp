// The enums of run_kinds.h: one table per field (name <-> value), and StepShape from a RunConfig.
#include "sim/config/run_kinds.h"

#include <string>
#include <utility>

#include "sim/core/error.h"

namespace gs {
namespace {

template <class E, size_t N>
E parse_name(const std::pair<E, const char*> (&table)[N], const std::string& name, const char* field) {
  std::string known;
  for (const auto& [value, text] : table) {
    if (name == text) return value;
    known += (known.empty() ? "" : ", ") + std::string(text);
  }
  throw Error(std::string(field) + ": unknown value \"" + name + "\" (known: " + known + ")");
}

template <class E, size_t N>
const char* name_of(const std::pair<E, const char*> (&table)[N], E value) {
  for (const auto& [v, text] : table)
    if (v == value) return text;
  return "unknown";
}

constexpr std::pair<RunMode, const char*> kModes[] = {{RunMode::kTrain, "train"}, {RunMode::kTiming, "timing"}};
constexpr std::pair<Pitfall, const char*> kPitfalls[] = {{Pitfall::kNone, "none"},
                                                         {Pitfall::kZeroGradInLoop, "zero_grad_in_loop"},
                                                         {Pitfall::kMeanOfMeans, "mean_of_means"},
                                                         {Pitfall::kFp16PureUnscaled, "fp16_pure_unscaled"},
                                                         {Pitfall::kDelayAllreduce, "delay_allreduce"}};

}  // namespace

RunMode parse_run_mode(const std::string& name) { return parse_name(kModes, name, "training.mode"); }
Pitfall parse_pitfall(const std::string& name) { return parse_name(kPitfalls, name, "training.pitfall"); }
const char* run_mode_name(RunMode m) { return name_of(kModes, m); }
const char* pitfall_name(Pitfall p) { return name_of(kPitfalls, p); }

StepShape step_shape(const RunConfig& config) {
  StepShape s;
  s.ranks = static_cast<int>(config.cluster.ranks);
  s.micro_batches = config.training.accumulation_steps;
  s.batch_per_rank = config.data.batch_per_rank;
  s.global_batch = config.cluster.ranks * s.micro_batches * s.batch_per_rank;
  return s;
}

}  // namespace gs
