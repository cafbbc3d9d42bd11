// Host optimizers over a flat fp32 buffer: SGD (momentum, Nesterov), Adam, AdamW, with PyTorch's rules; the element
// math is in kernels/optim_math.h. A new optimizer is one class here plus one line in kOptimizers.
#include <string>

#include "kernels/optim_math.h"
#include "sim/core/error.h"
#include "sim/optim/optimizer.h"

namespace gs {
namespace {

// torch.optim.SGD (dampening 0). The momentum buffer is created on the step with t == 1 (not by a flag), so ranges
// of one step applied separately behave like one call.
class Sgd : public Optimizer {
 public:
  Sgd(const OptimizerConfig& c, size_t n) : config_(c) {
    GS_EXPECT(!c.nesterov || c.momentum > 0.0,
              "training.optimizer.nesterov: Nesterov momentum needs training.optimizer.momentum > 0");
    if (c.momentum != 0.0) buf_.assign(n, 0.0f);
  }

  void step(float* params, const float* grad, size_t begin, size_t end, double lr, int64_t t) override {
    GS_EXPECT(t >= 1, "optimizer step count t is 1-based");
    GS_EXPECT(buf_.empty() || end <= buf_.size(), "optimizer range ends past the parameter count");
    SgdScalars s;
    s.lr = static_cast<float>(lr);
    s.momentum = static_cast<float>(config_.momentum);
    s.weight_decay = static_cast<float>(config_.weight_decay);
    s.nesterov = config_.nesterov;
    s.first_step = (t == 1);
    float unused = 0.0f;
    for (size_t i = begin; i < end; ++i) sgd_element(params[i], grad[i], buf_.empty() ? unused : buf_[i], s);
  }

  std::vector<std::vector<float>*> state() override {
    if (buf_.empty()) return {};
    return {&buf_};
  }

 private:
  OptimizerConfig config_;
  std::vector<float> buf_;  // momentum buffer (empty when momentum == 0)
};

// torch.optim.Adam (decoupled = false) and torch.optim.AdamW (decoupled = true); amsgrad off.
class Adam : public Optimizer {
 public:
  Adam(const OptimizerConfig& c, size_t n, bool decoupled) : config_(c), decoupled_(decoupled), m_(n), v_(n) {}

  void step(float* params, const float* grad, size_t begin, size_t end, double lr, int64_t t) override {
    GS_EXPECT(t >= 1, "optimizer step count t is 1-based (Adam's bias correction)");
    GS_EXPECT(end <= m_.size(), "optimizer range ends past the parameter count");
    const AdamScalars s =
        adam_scalars(lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay, decoupled_, t,
                     config_.first_moment == "lerp");
    for (size_t i = begin; i < end; ++i) adam_element(params[i], grad[i], m_[i], v_[i], s);
  }

  std::vector<std::vector<float>*> state() override { return {&m_, &v_}; }

 private:
  OptimizerConfig config_;
  bool decoupled_;
  std::vector<float> m_;  // first moment (exp_avg)
  std::vector<float> v_;  // second moment (exp_avg_sq)
};

// The optimizers on a device's memory (make_optimizer with device ElementOps): Sgd's and Adam's rules, state in that
// memory, the update through the ops' element kernels on the whole range.
class DeviceOptimizer : public Optimizer {
 public:
  DeviceOptimizer(const OptimizerConfig& c, size_t n, ElementOps& ops, int rank)
      : config_(c), ops_(ops), rank_(rank), adam_(c.kind == "adam" || c.kind == "adamw") {
    GS_EXPECT(adam_ || c.kind == "sgd", "training.optimizer.kind: \"" + c.kind + "\" has no device update");
    GS_EXPECT(!c.nesterov || c.momentum > 0.0,
              "training.optimizer.nesterov: Nesterov momentum needs training.optimizer.momentum > 0");
    if (adam_ || c.momentum != 0.0) a_ = ops.allocate(rank, n);
    if (adam_) b_ = ops.allocate(rank, n);
  }

  void step(float* params, const float* grad, size_t begin, size_t end, double lr, int64_t t) override {
    GS_EXPECT(t >= 1, "optimizer step count t is 1-based");
    if (end <= begin) return;
    const size_t n = end - begin;
    if (adam_) {
      const AdamScalars s = adam_scalars(lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay,
                                         config_.kind == "adamw", t, config_.first_moment == "lerp");
      ops_.adam(rank_, params + begin, grad + begin, a_.get() + begin, b_.get() + begin, n, s);
      return;
    }
    SgdScalars s;
    s.lr = static_cast<float>(lr);
    s.momentum = static_cast<float>(config_.momentum);
    s.weight_decay = static_cast<float>(config_.weight_decay);
    s.nesterov = config_.nesterov;
    s.first_step = (t == 1);
    ops_.sgd(rank_, params + begin, grad + begin, a_.get() == nullptr ? nullptr : a_.get() + begin, n, s);
  }

  std::vector<std::vector<float>*> state() override {
    throw Error("optimizer state on a device has no host copy (device-resident strategies do not ask for it)");
  }
  std::vector<float*> state_buffers() override {
    std::vector<float*> out;
    for (FloatBuffer* b : {&a_, &b_})
      if (b->get() != nullptr) out.push_back(b->get());
    return out;
  }

 private:
  OptimizerConfig config_;
  ElementOps& ops_;
  int rank_;
  bool adam_;
  FloatBuffer a_, b_;  // momentum, or Adam's m and v
};

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& c, size_t n) { return std::make_unique<Sgd>(c, n); }
std::unique_ptr<Optimizer> make_adam(const OptimizerConfig& c, size_t n) { return std::make_unique<Adam>(c, n, false); }
std::unique_ptr<Optimizer> make_adamw(const OptimizerConfig& c, size_t n) { return std::make_unique<Adam>(c, n, true); }

// Nesterov momentum needs a momentum.
void sgd_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  if (c.training.optimizer.nesterov && c.training.optimizer.momentum <= 0)
    issues.push_back({"training.optimizer.nesterov", "Nesterov needs training.optimizer.momentum > 0"});
}

}  // namespace

const std::vector<OptimizerEntry>& optimizer_registry() {
  using Options = std::vector<std::string>;
  const Options adam = {"training.optimizer.beta1", "training.optimizer.beta2", "training.optimizer.betas",
                        "training.optimizer.eps", "training.optimizer.first_moment"};
  static const std::vector<OptimizerEntry> kOptimizers = {
      {"sgd", make_sgd, {"training.optimizer.momentum", "training.optimizer.nesterov"}, sgd_issues},
      {"adam", make_adam, adam},
      {"adamw", make_adamw, adam},
  };
  return kOptimizers;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, size_t n) {
  std::string known;
  for (const auto& e : optimizer_registry()) {
    if (config.kind == e.name) return e.make(config, n);
    known += known.empty() ? e.name : std::string(", ") + e.name;
  }
  throw_error(__FILE__, __LINE__, "kind in kOptimizers",
              "training.optimizer.kind: unknown optimizer '" + config.kind + "' (known: " + known + ")");
}

bool optimizer_has_device_update(const OptimizerConfig& config) {
  return config.kind == "sgd" || config.kind == "adam" || config.kind == "adamw";
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, size_t n, ElementOps& ops, int rank) {
  if (ops.host()) return make_optimizer(config, n);
  return std::make_unique<DeviceOptimizer>(config, n, ops, rank);
}

}  // namespace gs
