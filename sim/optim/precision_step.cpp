// PrecisionStep of precision_step.h: the scaler and clipping on the averaged gradient, fp16 storage after updates.
#include "sim/optim/precision_step.h"

#include "kernels/convert.h"

namespace gs {

PrecisionStep::PrecisionStep(const RunConfig& config)
    : scaler_(loss_scaler_settings(config.precision)),
      clip_grad_norm_(config.training.clip_grad_norm),
      store_fp16_(config.precision.mode == "fp16_pure") {}

GradientStepResult PrecisionStep::before_update(float* g, size_t n, int64_t step) {
  const GradientStepResult r = unscale_check_clip(g, n, scaler_, clip_grad_norm_, step);
  if (r.applied) ++updates_;
  return r;
}

void PrecisionStep::after_update(float* params, Optimizer& optimizer, size_t begin, size_t end) const {
  if (!store_fp16_ || end <= begin) return;
  round_fp32_through_fp16(params + begin, params + begin, end - begin);
  for (std::vector<float>* buf : optimizer.state()) {
    round_fp32_through_fp16(buf->data() + begin, buf->data() + begin, end - begin);
  }
}

}  // namespace gs
