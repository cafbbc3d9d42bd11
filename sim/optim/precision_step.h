// What a sync strategy runs between its reduction and its optimizer for the precision section and gradient clipping:
// the loss scaler's unscale / non-finite check / skip (loss_scaler.h), clipping after unscaling, and fp16_pure's
// rounding of parameters and optimizer state to fp16 after the update. One PrecisionStep per scaler scope.
#pragma once
#include <cstddef>
#include <cstdint>

#include "sim/config/run_config.h"
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
  // GradScaler.step does not call optimizer.step()).
  GradientStepResult before_update(float* g, size_t n, int64_t step);
  int64_t update_count() const { return updates_; }

  // After the optimizer updated [begin, end): under fp16_pure the parameters and every optimizer state buffer are
  // rounded to fp16 (they are stored in fp16); a no-op otherwise.
  void after_update(float* params, Optimizer& optimizer, size_t begin, size_t end) const;

  const LossScaler& scaler() const { return scaler_; }

 private:
  LossScaler scaler_;
  double clip_grad_norm_;
  bool store_fp16_;
  int64_t updates_ = 0;
};

}  // namespace gs
