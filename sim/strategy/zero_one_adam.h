// DeepSpeed's 0/1 Adam (training.optimizer.kind "zero_one_adam"; Lu et al. 2022, arXiv 2202.06009; ZeroOneAdam.step,
// deepspeed/runtime/fp16/onebit/zoadam.py): its step schedule, shared by the strategy (zero_one_adam.cpp), its modeled
// clock and the tests; the compressed all-reduce is 1-bit Adam's (onebit_adam.h), on the run's memory.
#pragma once
#include <cstdint>

#include "sim/config/run_config.h"

namespace gs {

// DeepSpeed's fields (OptimizerConfig: var_freeze_step, var_update_scaler, local_step_scaler, local_step_clipper).
struct ZeroOneSchedule {
  int64_t var_freeze_step = 100000;
  int64_t var_update_scaler = 16;
  int64_t local_step_scaler = 32678;
  int64_t local_step_clipper = 16;
};
ZeroOneSchedule zero_one_schedule(const OptimizerConfig& o);

// What 1-based step k (DeepSpeed's state['step']) does:
//   kInit: k = 1, the initialization step: a compressed all-reduce of the (zero) momentum_accumulator, no update;
//   kVariance: a step before the freeze with k % var_interval == 0: the engine's full-precision all-reduce of the
//     gradient, m and v updated from it, the Adam update;
//   kOnebitGradient: a step before the freeze otherwise: the rank's own gradient through the compressed all-reduce,
//     m updated from it (v not), the Adam update;
//   kLocal: a step after the freeze with k % local_step_interval != 0: the rank's own gradient into its own m, the
//     update applied to its own replica and accumulated; no communication;
//   kSync: a step after the freeze with k % local_step_interval == 0: the local step, then the accumulated update
//     goes through the compressed all-reduce and replaces m.
enum class ZeroOnePhase { kInit, kVariance, kOnebitGradient, kLocal, kSync };
ZeroOnePhase zero_one_phase(int64_t k, const ZeroOneSchedule& s);

// The last step before the freeze: DeepSpeed freezes after the first step k >= 2 with k > var_freeze_step (the check
// follows the update of every step but the first), so steps 2 .. max(2, var_freeze_step + 1) keep the variance
// policy and later steps are frozen. The worker and server errors are zeroed once, after this step.
int64_t zero_one_last_unfrozen_step(const ZeroOneSchedule& s);

// state['var_interval'] in effect at step k >= 2 before the freeze: 1 from step 2 on, doubled after every
// var_update_scaler variance updates (steps with k % var_interval == 0). With 16: 2 .. 17 at 1; 18, 20, .., 48 at
// 2; then 52, 56, .. at 4.
int64_t zero_one_var_interval(int64_t k, int64_t var_update_scaler);

// state['local_step_interval'] in effect at a frozen step k: min(local_step_clipper, 2^floor(t / local_step_scaler))
// with t the frozen steps before k (DeepSpeed doubles it, clipped, after every local_step_scaler frozen steps).
int64_t zero_one_local_step_interval(int64_t k, const ZeroOneSchedule& s);

}  // namespace gs
