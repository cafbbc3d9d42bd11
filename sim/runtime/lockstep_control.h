// LockstepControl: the default StepControl (sim/strategy/strategy.h) of the host rank loop: ranks step together. Each
// step every rank all-reduces its control values, so all see the same S, train loss, first non-finite quantity and
// stop decision; rank 0 then ends the step in the RunMonitor (series, modeled clock, evaluation, trace, outcome).
// Extend: a new per-step control value is one StepTally field and one slot of the all-reduced array here.
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "sim/comm/communicator.h"
#include "sim/runtime/lockstep_clock.h"
#include "sim/runtime/run_monitor.h"
#include "sim/runtime/run_result.h"
#include "sim/strategy/strategy.h"

namespace gs {

class LockstepControl final : public StepControl {
 public:
  struct Setup {
    Communicator& comm;
    RunMonitor& monitor;
    LockstepModeledClock& modeled;
    SyncStrategy& strategy;
    RunResult& res;              // res.trace (report.trace) and res.steps_completed
    int ranks = 1;
    size_t num_params = 0;
    int64_t total_steps = 0;
    bool trace = false;          // report.trace: every rank's parameters after every step
    bool scaler_active = false;  // a non-finite loss is the loss scaler's (skipped step), not a divergence
    int first_rank = 0;          // this process's first rank (mpirun: the one that shares the modeled clock)
    ElementOps* ops = nullptr;   // the memory of the strategy's parameters (null: host RAM)
  };
  explicit LockstepControl(const Setup& s);

  int64_t loader_steps() const override { return total_; }
  bool runs(int, int64_t step) const override { return step < total_; }
  // Rank 0 reads the stop request and the time limit (all-reduced with the step, so every rank stops together).
  void begin_step(int rank, int64_t step) override;
  // The control all-reduce (waiting for the slowest rank: Phase::kWait) and the step's first non-finite quantity, in
  // the order computed: the parameters entering it, a scaler that cannot recover, the loss, the gradient. Throws
  // gs::Error when no rank had a sample.
  StepVerdict combine(int rank, int64_t step, const StepTally& tally, PhaseClock& clock) override;
  // Rank 0 records the step (RunMonitor::record; the modeled clock models the step before, which each process's
  // first rank shares first); when an evaluation, a trace, a stop or a divergence is due every rank waits at a
  // barrier (under trace every rank's parameters are all-gathered for rank 0) while rank 0 ends the step
  // (RunMonitor::end_step), then its decision to stop is all-reduced, so they all stop or go on together.
  bool end_step(int rank, int64_t step, const StepVerdict& verdict, const PhaseClock& clock) override;
  // Models the last completed step.
  void finish() override;

 private:
  // The per-step control values all-reduced by every rank. kCtlGradSamples is the divisor behind the gradient;
  // kCtlScalerExhausted counts the ranks whose loss scaler cannot recover after the previous step.
  enum : size_t {
    kCtlSamples, kCtlLossSum, kCtlStop, kCtlTimeout, kCtlBadParams, kCtlBadGrad, kCtlGradSamples, kCtlScalerExhausted,
    kControlCount
  };
  struct RankStep {  // one rank's step, written by its own thread only
    std::array<double, kControlCount> ctl{};
    double train_loss = 0.0;
    NonFinite non_finite = NonFinite::kNone;
  };
  StepEnd step_end(int64_t step, const RankStep& s, bool want_eval) const;
  // The first local rank's part of end_step: shares the step before, and on rank 0 records this one and models it.
  void record_step(int rank, int64_t step, const RankStep& s, const PhaseClock& clock);
  // report.trace: every rank's parameters into trace_buf_, rank 0 appends them to res.trace.
  void gather_trace(int rank);

  Communicator& comm_;
  RunMonitor& monitor_;
  LockstepModeledClock& modeled_;
  SyncStrategy& strategy_;
  RunResult& res_;
  int ranks_;
  size_t n_;
  int64_t total_;
  bool trace_;
  bool scaler_active_;
  int first_rank_;
  std::vector<RankStep> rank_;
  std::vector<float> trace_buf_;  // report.trace: [rank][param] of the step (all ranks write their own block)
  // Device memory (ops_ not host RAM): each rank gathers into a [rank][param] buffer of its own there (made at its
  // first trace), rank 0 downloads its copy into trace_buf_.
  ElementOps* ops_ = nullptr;
  std::vector<FloatBuffer> trace_dev_;
  int64_t ended_ = 0;             // steps ended by this process's first rank
  double trained_s_ = 0.0;        // rank 0's cumulative step time (measured clock)
};

}  // namespace gs
