// PrecisionStep of precision_step.h: the scaler and clipping on the averaged gradient, fp16 storage after updates.
#include "sim/optim/precision_step.h"

#include "sim/core/error.h"

namespace gs {

PrecisionStep::PrecisionStep(const RunConfig& config)
    : scaler_(loss_scaler_settings(config.precision)),
      clip_grad_norm_(config.training.clip_grad_norm),
      store_fp16_(config.precision.mode == "fp16_pure") {}

GradientStepResult PrecisionStep::before_update(float* g, size_t n, int64_t step, bool loss_nonfinite) {
  return before_update(host_element_ops(), 0, g, n, step, loss_nonfinite);
}

GradientStepResult PrecisionStep::before_update(ElementOps& ops, int rank, float* g, size_t n, int64_t step,
                                                bool loss_nonfinite) {
  if (store_fp16_ && n > 0) ops.round_to_fp16(rank, g, n);  // fp16_pure: the averaged gradient in fp16
  const GradientStepResult r = unscale_check_clip(ops, rank, g, n, scaler_, clip_grad_norm_, step, loss_nonfinite);
  if (r.applied) ++updates_;
  averaged_nonfinite_values_ += r.nonfinite_values;
  if (r.nonfinite && !first_nonfinite_averaged_) first_nonfinite_averaged_ = step;
  return r;
}

void PrecisionStep::round_gradient(float* g, size_t begin, size_t end) const {
  if (store_fp16_ && end > begin) host_element_ops().round_to_fp16(0, g + begin, end - begin);
}

void PrecisionStep::after_update(ElementOps& ops, int rank, float* params, Optimizer& optimizer, size_t begin,
                                 size_t end) const {
  if (!store_fp16_ || end <= begin) return;
  ops.round_to_fp16(rank, params + begin, end - begin);
  for (float* buf : optimizer.state_buffers()) ops.round_to_fp16(rank, buf + begin, end - begin);
}

void PrecisionStep::after_update(float* params, Optimizer& optimizer, size_t begin, size_t end) const {
  after_update(host_element_ops(), 0, params, optimizer, begin, end);
}

}  // namespace gs

namespace gs {

ScaledUpdate::ScaledUpdate(const PrecisionConfig& precision)
    : scaler_(loss_scaler_settings(precision)),
      handles_nonfinite_(precision_policy(precision).emulated() || scaler_.active()) {}

float ScaledUpdate::unscale_factor() const {
  return scaler_.active() ? static_cast<float>(1.0 / static_cast<double>(scaler_.scale())) : 1.0f;
}

bool ScaledUpdate::decide(bool nonfinite, int64_t step, bool loss_nonfinite) {
  if (nonfinite && handles_nonfinite_ && !first_nonfinite_) first_nonfinite_ = step;
  const bool loss_bad = loss_nonfinite && scaler_.active();
  const bool applied = scaler_.active() ? scaler_.update(nonfinite || loss_bad, step,
                                                         loss_bad ? SkipCause::kLoss : SkipCause::kGradient)
                                        : true;
  if (applied) ++updates_;
  return applied;
}

void PrecisionStep::price(StepCost& cost, double n) const {
  const double g = store_fp16_ ? 2.0 : 4.0;  // bytes per gradient element: fp16_pure's gradient is fp16
  double bytes = 0.0;
  if (scaler_.active()) bytes += 2.0 * g * n;        // unscale in place, with the inf/NaN check fused
  if (clip_grad_norm_ > 0.0) bytes += 3.0 * g * n;  // norm (read), then scale (read + write)
  if (bytes > 0.0) cost.add_pass(Phase::kOptimizer, bytes);
}

void price_precision_micro_batch(StepCost& cost, PrecisionMode mode, double params) {
  double format_bytes = 0.0;
  switch (mode) {
    case PrecisionMode::kBf16Mixed:
    case PrecisionMode::kFp16Mixed: format_bytes = 2.0; break;
    case PrecisionMode::kFp8Mixed: format_bytes = 1.0; break;
    case PrecisionMode::kFp32:
    case PrecisionMode::kTf32:
    case PrecisionMode::kFp16Pure: return;
  }
  cost.add_pass(Phase::kForward, (4.0 + format_bytes) * params);   // weight cast fp32 -> format
  cost.add_pass(Phase::kBackward, (format_bytes + 8.0) * params);  // format weight gradient added into fp32
}

double gradient_wire_bytes(const RunConfig& config) { return config.precision.mode == "fp16_pure" ? 2.0 : 4.0; }

}  // namespace gs
