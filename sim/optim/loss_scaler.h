// Loss scaling for mixed precision (torch.amp.GradScaler's rule) and the gradient steps that go with it: unscale,
// non-finite check, clipping by global norm after unscaling. One LossScaler per scope (shared under all-reduce, per
// worker or rank elsewhere); a sync strategy calls these between its reduction and its optimizer step.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/core/element_ops.h"

namespace gs {

struct PrecisionConfig;

enum class LossScaleKind { kNone, kStatic, kDynamic };

// What a scaler does. Defaults are torch.amp.GradScaler's (init_scale 2^16, growth 2, backoff 0.5, interval 2000).
struct LossScalerSettings {
  LossScaleKind kind = LossScaleKind::kNone;
  double initial_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// The settings of a run's precision section (loss_scale auto|none|static|dynamic, initial_scale, growth_*,
// backoff_*); auto is dynamic under fp16_mixed and none otherwise.
LossScalerSettings loss_scaler_settings(const PrecisionConfig& precision);
// True when a scaler of `kind` at `scale` cannot recover (LossScaler::exhausted): dynamic, and 1 / scale overflows
// float.
bool loss_scale_exhausted(LossScaleKind kind, float scale);

// Why a scaler skipped an accumulation window: its training loss was inf/NaN (checked first: the forward comes
// before the backward), or its averaged gradient held an inf/NaN.
enum class SkipCause { kLoss, kGradient };

// The loss scale and its schedule. kind none: scale 1, never skips. static: the initial scale forever; a step with
// a non-finite loss or gradient is skipped (DeepSpeed's static scale). dynamic: GradScaler's _amp_update_scale_:
//   non-finite -> scale *= backoff, growth tracker = 0, step skipped;
//   finite     -> tracker += 1; when tracker == growth_interval: scale *= growth (kept only if finite), tracker = 0.
// One update() per optimizer step (torch.amp: one scaler.update() per effective batch, however many micro-batches).
// A non-finite loss is handled like a non-finite gradient (torch's backward of an inf loss gives inf/NaN gradients,
// which its found_inf check sees): skipped, backed off, tracker reset.
// The scaler cannot recover once a dynamic scale has backed off below 2^-128: torch's unscale factor
// float(1 / double(scale)) is then inf, so every later gradient unscales to inf/NaN, every step is skipped and the
// scale only backs off further (to 0). exhausted() says so, and the run diverges there. A static scale never changes,
// so it never gives up: every non-finite window is skipped, and the report counts them.
// Not thread-safe: one owner calls update() once per optimizer step.
class LossScaler {
 public:
  explicit LossScaler(const LossScalerSettings& settings);

  bool active() const { return settings_.kind != LossScaleKind::kNone; }
  // The factor the loss (and so every gradient) is multiplied by in backward; 1 when inactive. Always a float (the
  // scale of a run is a power of two unless initial_scale is not).
  float scale() const { return scale_; }

  // Records the outcome of optimizer step `step` (1-based): found_nonfinite = the window's loss or (reduced)
  // gradient held an inf or NaN, `cause` which of them (kLoss when both). Returns true when the optimizer step is to
  // be applied, false when it is skipped. Updates the scale.
  bool update(bool found_nonfinite, int64_t step, SkipCause cause = SkipCause::kGradient);

  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t skipped_steps() const { return static_cast<int64_t>(skipped_.size()); }
  int64_t skipped_for_loss() const { return skipped_loss_; }          // windows skipped for a non-finite loss
  int64_t skipped_for_gradient() const { return skipped_gradient_; }  // ... for a non-finite gradient (finite loss)
  // True when the dynamic scale has backed off so far that its reciprocal overflows float (scale < 2^-128, or 0):
  // no later step can be applied, so the run cannot recover.
  bool exhausted() const;
  const std::vector<int64_t>& skipped_step_list() const { return skipped_; }  // 1-based, increasing
  // (step, scale after that step) at each change, starting with (0, initial scale).
  const std::vector<std::pair<int64_t, double>>& trajectory() const { return trajectory_; }

 private:
  LossScalerSettings settings_;
  float scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_loss_ = 0;
  int64_t skipped_gradient_ = 0;
  std::vector<int64_t> skipped_;
  std::vector<std::pair<int64_t, double>> trajectory_;
};

// ---- Gradient steps between the reduction and the optimizer ------------------------------------------------------

// What a scan of a gradient range found: any inf/NaN (and how many), and the sum of squares (in double) of its values.
struct GradientScan {
  bool nonfinite = false;
  size_t nonfinite_values = 0;
  double sum_squares = 0.0;
};

// Scans g[begin, end) for inf/NaN and, when want_norm, sums the squares.
GradientScan scan_gradient(const float* g, size_t begin, size_t end, bool want_norm = true);

// g[i] *= factor for i in [begin, end) (float multiply, as torch's unscale: grad * inv_scale).
void scale_gradient(float* g, size_t begin, size_t end, float factor);

// torch.nn.utils.clip_grad_norm_'s coefficient: total_norm and 1e-6 and max_norm in float,
// coef = max_norm / (total_norm + 1e-6), clamped to at most 1. The caller multiplies the gradient by it.
float clip_coefficient(float total_norm, double max_norm);

// What one optimizer step's gradient pipeline did (for the report and tests).
struct GradientStepResult {
  bool applied = true;      // false: skipped (non-finite loss or gradient under a scaler)
  bool nonfinite = false;   // the gradient held an inf or NaN
  size_t nonfinite_values = 0;  // how many of its values (after unscaling)
  float grad_norm = 0.0f;   // global L2 norm after unscaling (before clipping); 0 when not computed
};

// The pipeline on a whole, already averaged gradient g[0, n) that every participant holds identically (all-reduce):
// unscale by 1/scale (if the scaler is active), check for inf/NaN, clip to max_norm (> 0) by global norm, update the
// scaler. When the result says applied, the caller runs its optimizer on g. Order as torch's recipe:
// scaler.unscale_(opt); clip_grad_norm_(params, max_norm); scaler.step(opt); scaler.update().
// loss_nonfinite: the window's training loss (over the scaler's scope) was inf/NaN; under an active scaler the step is
// then skipped like one with a non-finite gradient (SkipCause::kLoss). Without a scaler it is ignored here (the rank
// loop counts such a loss as a divergence before any update).
GradientStepResult unscale_check_clip(float* g, size_t n, LossScaler& scaler, double max_norm, int64_t step,
                                      bool loss_nonfinite = false);
// The same on rank `rank`'s buffer g of `ops`' memory (a device-resident strategy): the unscale and the clipping's
// scaling through ops.scale, the check and the norm through ops.scan (on a device the norm's sum is in the device's
// order, so the clipping coefficient agrees with the host's to rounding only).
GradientStepResult unscale_check_clip(ElementOps& ops, int rank, float* g, size_t n, LossScaler& scaler,
                                      double max_norm, int64_t step, bool loss_nonfinite = false);

}  // namespace gs
