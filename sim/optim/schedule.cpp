// Learning-rate schedules (formulas in optimizer.h): constant, step (torch.optim.lr_scheduler.StepLR), warmup_cosine
// (linear warm-up, then CosineAnnealingLR's closed form). A new schedule is one function plus one line in kSchedules.
#include <algorithm>
#include <cmath>
#include <string>

#include "sim/core/error.h"
#include "sim/optim/optimizer.h"

namespace gs {
namespace {

double constant_lr(const ScheduleConfig&, double base, int64_t, int64_t) { return base; }

// StepLR: base * gamma^floor(step / step_size).
double step_lr(const ScheduleConfig& s, double base, int64_t step, int64_t) {
  GS_EXPECT(s.step_size > 0, "training.schedule.step_size: must be > 0");
  return base * std::pow(s.gamma, static_cast<double>(step / s.step_size));
}

// Linear warm-up over warmup_steps ((step+1)/warmup of base), then min + 0.5*(base-min)*(1+cos(pi*p)),
// p = (step - warmup) / max(1, total - warmup), clamped to [0, 1].
double warmup_cosine_lr(const ScheduleConfig& s, double base, int64_t step, int64_t total) {
  GS_EXPECT(s.warmup_steps >= 0, "training.schedule.warmup_steps: must be >= 0");
  if (step < s.warmup_steps) return base * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  const double span = static_cast<double>(std::max<int64_t>(1, total - s.warmup_steps));
  const double p = std::clamp(static_cast<double>(step - s.warmup_steps) / span, 0.0, 1.0);
  const double pi = 3.14159265358979323846;
  return s.min_lr + 0.5 * (base - s.min_lr) * (1.0 + std::cos(pi * p));
}

struct ScheduleEntry {
  const char* name;
  double (*lr)(const ScheduleConfig& schedule, double base_lr, int64_t step, int64_t total_steps);
};

const ScheduleEntry kSchedules[] = {
    {"constant", constant_lr},
    {"step", step_lr},
    {"warmup_cosine", warmup_cosine_lr},
};

}  // namespace

double learning_rate(const ScheduleConfig& schedule, double base_lr, int64_t step, int64_t total_steps) {
  std::string known;
  for (const auto& e : kSchedules) {
    if (schedule.kind == e.name) return e.lr(schedule, base_lr, step, total_steps);
    known += known.empty() ? e.name : std::string(", ") + e.name;
  }
  throw_error(__FILE__, __LINE__, "kind in kSchedules",
              "training.schedule.kind: unknown schedule '" + schedule.kind + "' (known: " + known + ")");
}

}  // namespace gs
