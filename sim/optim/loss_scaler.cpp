// LossScaler (torch.amp.GradScaler's update rule, aten/src/ATen/native/cuda/AmpKernels.cu _amp_update_scale_) and the
// unscale / non-finite check / clip-by-global-norm steps of loss_scaler.h. A new scaling rule is one more
// LossScaleKind here and its choice in the precision.loss_scale field.
#include "sim/optim/loss_scaler.h"

#include <cmath>
#include <cstring>

#include "sim/config/run_config.h"
#include "sim/core/error.h"

namespace gs {

LossScalerSettings loss_scaler_settings(const PrecisionConfig& p) {
  LossScalerSettings s;
  if (p.loss_scale == "dynamic" || (p.loss_scale == "auto" && p.mode == "fp16_mixed")) {
    s.kind = LossScaleKind::kDynamic;
  } else if (p.loss_scale == "static") {
    s.kind = LossScaleKind::kStatic;
  } else {
    GS_EXPECT(p.loss_scale == "none" || p.loss_scale == "auto",
              "precision.loss_scale: expected auto, none, static or dynamic, got '" + p.loss_scale + "'");
    s.kind = LossScaleKind::kNone;
  }
  s.initial_scale = p.initial_scale;
  s.growth_factor = p.growth_factor;
  s.backoff_factor = p.backoff_factor;
  s.growth_interval = p.growth_interval;
  return s;
}

LossScaler::LossScaler(const LossScalerSettings& settings)
    : settings_(settings), scale_(settings.kind == LossScaleKind::kNone ? 1.0f : static_cast<float>(settings.initial_scale)) {
  GS_EXPECT(!active() || (std::isfinite(scale_) && scale_ > 0.0f), "loss scale must be finite and > 0");
  GS_EXPECT(settings_.growth_interval >= 1, "loss scaler growth interval must be >= 1");
  trajectory_.emplace_back(0, static_cast<double>(scale_));
}

bool LossScaler::update(bool found_nonfinite, int64_t step, SkipCause cause) {
  if (!active()) return true;
  const float before = scale_;
  if (found_nonfinite) {
    skipped_.push_back(step);
    ++(cause == SkipCause::kLoss ? skipped_loss_ : skipped_gradient_);
  }
  if (settings_.kind == LossScaleKind::kDynamic) {
    if (found_nonfinite) {
      scale_ = scale_ * static_cast<float>(settings_.backoff_factor);
      growth_tracker_ = 0;
    } else {
      const int64_t successful = growth_tracker_ + 1;
      if (successful == settings_.growth_interval) {
        const float grown = scale_ * static_cast<float>(settings_.growth_factor);
        if (std::isfinite(grown)) scale_ = grown;
        growth_tracker_ = 0;
      } else {
        growth_tracker_ = successful;
      }
    }
  }
  if (scale_ != before) trajectory_.emplace_back(step, static_cast<double>(scale_));
  return !found_nonfinite;
}

bool loss_scale_exhausted(LossScaleKind kind, float scale) {
  return kind == LossScaleKind::kDynamic && !std::isfinite(static_cast<float>(1.0 / static_cast<double>(scale)));
}

bool LossScaler::exhausted() const { return loss_scale_exhausted(settings_.kind, scale_); }

GradientScan scan_gradient(const float* g, size_t begin, size_t end, bool want_norm) {
  const ElementScan e = scan_elements(g + begin, end - begin, want_norm);
  GradientScan s;
  s.nonfinite = e.nonfinite > 0;
  s.nonfinite_values = e.nonfinite;
  s.sum_squares = e.sum_squares;
  return s;
}

void scale_gradient(float* g, size_t begin, size_t end, float factor) {
  for (size_t i = begin; i < end; ++i) g[i] = g[i] * factor;
}

float clip_coefficient(float total_norm, double max_norm) {
  // torch: clip_coef = max_norm / (total_norm + 1e-6); clip_coef_clamped = clamp(clip_coef, max=1.0) (float tensors).
  const float coef = static_cast<float>(max_norm) / (total_norm + 1e-6f);
  return coef < 1.0f ? coef : (coef == coef ? 1.0f : coef);  // NaN stays NaN, as torch.clamp
}

GradientStepResult unscale_check_clip(float* g, size_t n, LossScaler& scaler, double max_norm, int64_t step,
                                      bool loss_nonfinite) {
  return unscale_check_clip(host_element_ops(), 0, g, n, scaler, max_norm, step, loss_nonfinite);
}

GradientStepResult unscale_check_clip(ElementOps& ops, int rank, float* g, size_t n, LossScaler& scaler,
                                      double max_norm, int64_t step, bool loss_nonfinite) {
  GradientStepResult r;
  const bool clip = max_norm > 0.0;
  if (!scaler.active() && !clip) return r;  // fp32 without clipping: the gradient is untouched
  if (scaler.active()) {
    // torch: inv_scale = scale.double().reciprocal().float(); grads *= inv_scale.
    const auto inv_scale = static_cast<float>(1.0 / static_cast<double>(scaler.scale()));
    ops.scale(rank, g, n, inv_scale);
  }
  const ElementScan scan = ops.scan(rank, g, n, clip);
  r.nonfinite = scan.nonfinite > 0;
  r.nonfinite_values = scan.nonfinite;
  const bool loss_bad = loss_nonfinite && scaler.active();
  r.applied = scaler.update(r.nonfinite || loss_bad, step, loss_bad ? SkipCause::kLoss : SkipCause::kGradient);
  if (clip) {
    r.grad_norm = static_cast<float>(std::sqrt(scan.sum_squares));
    if (r.applied) ops.scale(rank, g, n, clip_coefficient(r.grad_norm, max_norm));
  }
  return r;
}

}  // namespace gs
