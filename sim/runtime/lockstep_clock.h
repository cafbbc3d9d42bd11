// The modeled clock of a lockstep run of the rank loop (rank_loop.cpp): a ring of per-step, per-rank StepCost records
// and loader fetch times, turned into the report's modeled steps. Extend: a new per-step modeled effect that needs
// every rank's record goes into model_step here.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "sim/comm/process_group.h"
#include "sim/config/run_config.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/step_cost.h"
#include "sim/cost/storage_model.h"
#include "sim/runtime/run_result.h"

namespace gs {

// Each rank records its step t into slot [t % 3][rank] (cost(t, rank), set_fetch_s(t, rank, s)); rank 0 calls
// model_step(t - 1) after its own step t has ended (outside its measured clock), and finish() after the run models
// what is left. Three slots suffice: every rank finished step t - 1 before step t's control all-reduce; a rank may be
// in step t + 1 (slot (t + 1) % 3) then but not in t + 2, which needs rank 0 at the control all-reduce of t + 1.
// model_step(t) per rank r: the data stall of the prefetch recurrence (PrefetchModel, storage_model.h) for the step's
// fetch time goes into the kData phase divided by the straggler factor f(t, r) (CostModel::model_step multiplies all
// compute by f; a slow GPU does not slow the loader), then CostModel::model_step and carry_rank_clocks; the stall
// recurrence advances by each rank's modeled step_s. It appends to res.modeled_steps / modeled_exposed_s /
// modeled_overlapped_s (one entry per rank and step), sets res.modeled_chains from step 0 and
// res.series[t].modeled_s = the sum of rank 0's modeled step_s over steps 0..t (so res.series[t] must exist).
// Not thread-safe beyond that protocol: cost/set_fetch_s touch only (t % 3, rank); model_step is one thread's.
class LockstepModeledClock {
 public:
  // prefetch_steps: the loader queue's depth in optimizer steps (0 = no loader thread), as prefetch_depth_steps.
  LockstepModeledClock(const CostModel& cost_model, int ranks, int64_t prefetch_steps, StragglerConfig stragglers,
                       uint64_t seed, RunResult& res);
  // From a run's config: cluster.ranks, cluster.stragglers, training.seed, prefetch_depth_steps(config).
  LockstepModeledClock(const CostModel& cost_model, const RunConfig& config, RunResult& res);

  // Rank `rank`'s record of step `step` (slot step % 3); the caller clears it at the step's start.
  StepCost& cost(int64_t step, int rank) { return cost_slots_[slot(step)][static_cast<size_t>(rank)]; }
  // The loader work (seconds, storage_read_s + peer transfers) behind rank `rank`'s batch of step `step`.
  void set_fetch_s(int64_t step, int rank, double fetch_s) { fetch_slots_[slot(step)][static_cast<size_t>(rank)] = fetch_s; }
  // Models step `step` (steps must come in order 0, 1, 2, ...; see the class comment).
  void model_step(int64_t step);
  // After the run: models the last completed step if it is not modeled yet (steps_completed >= 1); across
  // processes it shares that step first and only process 0 models.
  void finish(int64_t steps_completed);

  // Across processes (mpirun): this process records ranks first_rank .. first_rank + local_ranks - 1. Each process's
  // first rank calls share(t) where rank 0 calls model_step(t) (before it), and process 0 receives the other
  // processes' records of step t into its slots; one process: nothing to share.
  void spread(ProcessGroup& group, int first_rank, int local_ranks);
  void share(int64_t step);
  int64_t modeled_done() const { return modeled_done_; }

 private:
  static size_t slot(int64_t step) { return static_cast<size_t>(step % 3); }
  const CostModel& cost_model_;
  int ranks_;
  StragglerConfig stragglers_;
  uint64_t seed_;
  RunResult& res_;
  PrefetchModel prefetch_;
  std::array<std::vector<StepCost>, 3> cost_slots_;
  std::array<std::vector<double>, 3> fetch_slots_;
  std::vector<double> rank_clock_s_;  // each rank's modeled time (carry_rank_clocks)
  double modeled_total_s_ = 0.0;      // rank 0's modeled time after the steps modeled so far
  int64_t modeled_done_ = 0;          // steps modeled so far
  ProcessGroup* group_ = nullptr;     // spread: the job's processes
  int first_rank_ = 0;
  int local_ranks_ = 0;
  int64_t shared_ = 0;                // steps shared so far
};

// The loader queue's depth in optimizer steps: data.prefetch micro-batches over training.accumulation_steps K,
// at least 1 when prefetch > 0; 0 when data.prefetch is 0 (no loader thread).
int64_t prefetch_depth_steps(const RunConfig& config);

}  // namespace gs
