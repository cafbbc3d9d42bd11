// Optimizers over a flat fp32 parameter buffer (PyTorch's update rules, torch.optim.SGD/Adam/AdamW), and learning
// rate schedules. One Optimizer per rank (it owns that rank's state); a sync strategy calls it. Element math lives in
// kernels/optim_math.h so host and CUDA share it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/config/run_config.h"
#include "sim/core/element_ops.h"

namespace gs {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Applies one update to params[begin, end) from grad[begin, end) (the averaged gradient) with learning rate lr.
  // `t` is the 1-based count of updates applied so far including this one (Adam's bias correction). Ranges of one
  // step may be applied separately (per bucket or shard); the result equals one call over [0, n).
  virtual void step(float* params, const float* grad, size_t begin, size_t end, double lr, int64_t t) = 0;
  // State buffers (each n floats), e.g. momentum, Adam's m and v, as host vectors (host optimizers; checks, fp16_pure
  // storage). A device optimizer has none and throws gs::Error.
  virtual std::vector<std::vector<float>*> state() = 0;
  // The same buffers' elements in the optimizer's memory (host RAM or a device's, ElementOps), for what reduces them
  // through a communicator (local SGD's averaging of the optimizer state). Default: state()'s data.
  virtual std::vector<float*> state_buffers() {
    std::vector<float*> out;
    for (std::vector<float>* b : state()) out.push_back(b->data());
    return out;
  }
};

struct OptimizerEntry {
  const char* name;
  std::unique_ptr<Optimizer> (*make)(const OptimizerConfig& config, size_t n);
  // The fields that apply under this kind: training.optimizer.kind's choices (these, then the optimizers that run as
  // sync strategies of their own: optimizer_strategy_registry, sim/strategy/strategy.h), its fields' kind rules and
  // the kinds at the start of their docs are derived from them (sim/validate/kinds.cpp).
  std::vector<std::string> options;
  KindIssues issues = nullptr;  // its cross-field rule beyond the options (sim/validate: validate_config)
};

// The optimizers of optimizer.cpp, in listing order (a new one: its class and one line there).
const std::vector<OptimizerEntry>& optimizer_registry();

// n = number of parameters. Throws gs::Error for an unknown kind.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, size_t n);

// The optimizer of rank `rank` over n parameters in `ops`' memory: on host memory make_optimizer's; on a device's its
// state in buffers of that memory, its update through ops.sgd / ops.adam (the same element math and scalars), and
// state() throws (no host copy of the state: what needs one runs on host memory). Kinds with a device update: sgd,
// adam, adamw (optimizer_has_device_update); others throw gs::Error naming training.optimizer.kind.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, size_t n, ElementOps& ops, int rank);
bool optimizer_has_device_update(const OptimizerConfig& config);

// Learning rate at optimizer step `step` (0-based) of `total_steps`:
// constant: base; step: base * gamma^floor(step / step_size);
// warmup_cosine: base * (step+1)/warmup for step < warmup, then min + 0.5*(base-min)*(1+cos(pi*p)),
// p = (step - warmup) / max(1, total - warmup).
double learning_rate(const ScheduleConfig& schedule, double base_lr, int64_t step, int64_t total_steps);

}  // namespace gs
