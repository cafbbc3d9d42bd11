// What a sync strategy runs between its reduction and its optimizer for the precision section and gradient clipping:
// the loss scaler's unscale / non-finite check / skip (loss_scaler.h), clipping after unscaling, and fp16_pure's
// rounding of parameters and optimizer state to fp16 after the update. One PrecisionStep per scaler scope.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

#include "sim/config/run_config.h"
#include "sim/core/element_ops.h"
#include "sim/cost/step_cost.h"
#include "sim/model/model.h"
#include "sim/optim/loss_scaler.h"
#include "sim/optim/optimizer.h"

namespace gs {

class PrecisionStep {
 public:
  explicit PrecisionStep(const RunConfig& config);

  // The loss scale the next backward multiplies the loss by (1 without a scaler).
  float loss_scale() const { return scaler_.scale(); }
  // True when an optimizer step needs the whole averaged gradient before any parameter moves (a scaler decides to
  // skip, or clipping needs the global norm), so per-slice fused updates cannot be used.
  bool needs_whole_gradient() const { return scaler_.active() || clip_grad_norm_ > 0.0; }

  // On the averaged gradient g[0, n) that every participant of the scope holds identically: unscale, non-finite
  // check, clip, scaler update (step = 1-based optimizer step). The caller applies its optimizer only when the result
  // says applied, with t = update_count() (updates applied so far including this one: skipped steps do not count, as
  // GradScaler.step does not call optimizer.step()). loss_nonfinite: the window's training loss over the scope was
  // inf/NaN; an active scaler skips the step for it (SkipCause::kLoss), as for a non-finite gradient.
  GradientStepResult before_update(float* g, size_t n, int64_t step, bool loss_nonfinite = false);
  // The same on rank `rank`'s buffer g of `ops`' memory (unscale_check_clip's ops form). fp16_pure's rounding has
  // host loops only (GS_EXPECT: ops.host() when storing fp16).
  GradientStepResult before_update(ElementOps& ops, int rank, float* g, size_t n, int64_t step,
                                   bool loss_nonfinite = false);
  int64_t update_count() const { return updates_; }
  // What the checks of before_update found in the averaged gradient (after unscaling): inf/NaN values summed over
  // every check, and the first (1-based) step whose averaged gradient held one. Checked where a scaler or clipping
  // runs; the report's averaged_grad_nonfinite_values / first_nonfinite_averaged_step.
  uint64_t averaged_nonfinite_values() const { return averaged_nonfinite_values_; }
  std::optional<int64_t> first_nonfinite_averaged_step() const { return first_nonfinite_averaged_; }

  // fp16_pure: the averaged gradient g[begin, end) becomes an fp16 tensor (the host all-reduce summed fp32 copies of
  // the ranks' fp16 gradients in rank order; the sum divided by S is rounded to fp16 here). A no-op otherwise.
  // before_update does this for the whole gradient; a per-slice update calls it on its slice.
  void round_gradient(float* g, size_t begin, size_t end) const;

  // After the optimizer updated [begin, end): under fp16_pure the parameters and every optimizer state buffer are
  // rounded to fp16 (they are stored in fp16); a no-op otherwise.
  void after_update(float* params, Optimizer& optimizer, size_t begin, size_t end) const;
  // The same on rank `rank`'s buffers of `ops`' memory (ElementOps::round_to_fp16 on the parameters and on
  // optimizer.state_buffers()).
  void after_update(ElementOps& ops, int rank, float* params, Optimizer& optimizer, size_t begin, size_t end) const;

  const LossScaler& scaler() const { return scaler_; }

  // Modeled clock: the passes before_update adds over n gradient elements (unscale + inf/NaN check: read and write;
  // clipping: the norm's read, then the scaling's read and write), in the optimizer phase, at 4 bytes an element (2
  // under fp16_pure, whose gradient is fp16). fp16_pure's rounding to fp16 adds no pass: on a GPU the gradient, the
  // weights and the optimizer state are fp16 tensors (model.half()), which the optimizer reads and writes as such
  // (CostModel::add_optimizer prices it at fp16 sizes); the host rounds fp32 copies only to emulate that.
  void price(StepCost& cost, double n) const;

 private:
  LossScaler scaler_;
  double clip_grad_norm_;
  bool store_fp16_;
  int64_t updates_ = 0;
  uint64_t averaged_nonfinite_values_ = 0;
  std::optional<int64_t> first_nonfinite_averaged_;
};

// The loss-scale decisions of a loop that unscales and checks the averaged gradient where it lives and decides on
// the host (the cuda rank loop: the device multiplies by unscale_factor() and runs gpu::find_nonfinite, every rank
// sees the same all-reduced flag): GradScaler's rule through the shared LossScaler (skip and back off on inf/NaN,
// grow after growth_interval clean steps), the applied-update count (the optimizer's t: skipped steps do not count)
// and the first step whose averaged gradient held an inf/NaN. One per rank; all ranks decide alike.
class ScaledUpdate {
 public:
  explicit ScaledUpdate(const PrecisionConfig& precision);
  // The loss scale the next backward multiplies the loss by (1 without a scaler).
  float loss_scale() const { return scaler_.scale(); }
  // torch's unscale factor float(1 / double(scale)) with an active scaler, else 1 (no unscale pass).
  float unscale_factor() const;
  // True when an inf/NaN in the averaged gradient is handled here, not a divergence: an emulated mode or an active
  // scaler (as the host loop's check_nonfinite). Without a scaler such a step is applied as it is.
  bool handles_nonfinite() const { return handles_nonfinite_; }
  // After the check of 1-based optimizer step `step`: whether the optimizer runs. Updates the scaler (if active),
  // the update count and the first non-finite step. nonfinite: the averaged gradient held an inf/NaN;
  // loss_nonfinite: the step's training loss (every rank's) was inf/NaN, which an active scaler skips for
  // (SkipCause::kLoss) as PrecisionStep::before_update does.
  bool decide(bool nonfinite, int64_t step, bool loss_nonfinite = false);
  int64_t update_count() const { return updates_; }
  std::optional<int64_t> first_nonfinite_step() const { return first_nonfinite_; }
  const LossScaler& scaler() const { return scaler_; }

 private:
  LossScaler scaler_;
  bool handles_nonfinite_;
  int64_t updates_ = 0;
  std::optional<int64_t> first_nonfinite_;
};

// Modeled clock: the format conversions one micro-batch of an emulated mode adds over a model of `params` parameters,
// as memory passes (read + write bytes): mixed modes cast the fp32 weights to the format for the forward
// (4 + format bytes per parameter) and add the format weight gradient into the fp32 gradient in the backward
// (format bytes + 8); fp8 casts with an amax reduction in the same pass; fp16_pure casts nothing (its weights and
// gradients are fp16 already). Activations are cast by the GEMM epilogues and are not priced separately.
void price_precision_micro_batch(StepCost& cost, PrecisionMode mode, double params);

// Bytes per gradient element on the all-reduce's wire without a compressor: 2 under fp16_pure (its gradients are
// fp16), else 4.
double gradient_wire_bytes(const RunConfig& config);

}  // namespace gs
