// `independent`: no communication at all; every rank applies its own local mean gradient to its own replica (the
// H = infinity limit of local SGD). The smallest SyncStrategy: copy it to start a new one (README, "Adding a sync
// strategy").
#include "kernels/nvtx.h"
#include "sim/optim/optimizer.h"
#include "sim/strategy/strategy.h"

namespace gs {
namespace {

// Memory: its parameters and optimizer state live in the run's ElementOps memory (host, or a device's).
class Independent final : public SyncStrategy {
 public:
  explicit Independent(const StrategySetup& s)
      : ops_(s.memory()), n_(s.model.num_params()), cost_model_(s.cost_model), optimizer_(s.config.training.optimizer) {
    s.claim_replicas_identical(false);  // every replica follows its own data
    for (int r = 0; r < s.ranks; ++r) precision_.emplace_back(s.config);  // each rank its own loss scaler
    if (s.timing_only) return;  // timing-only: price alone, no buffers
    for (int r = 0; r < s.ranks; ++r) {
      params_.push_back(ops_.allocate(r, n_));
      optimizers_.push_back(make_optimizer(s.config.training.optimizer, n_, ops_, r));
    }
  }
  float* params(int rank) override { return params_[static_cast<size_t>(rank)].get(); }
  PriceKey price(const StepInput& in) const override {
    if (in.cost != nullptr && cost_model_ != nullptr)
      cost_model_->add_optimizer(*in.cost, optimizer_, static_cast<double>(n_));
    if (in.cost != nullptr) precision_[static_cast<size_t>(in.rank)].price(*in.cost, static_cast<double>(n_));
    return {};
  }
  void step(const StepInput& in) override {
    price(in);
    GS_NVTX_RANGE(kOptimizer);
    TimedPhase t(ops_, in.rank, *in.clock, Phase::kOptimizer);
    if (in.local_samples <= 0) return;  // nothing to learn from
    ops_.divide(in.rank, in.grad, n_, static_cast<float>(in.local_samples));
    PrecisionStep& ps = precision_[static_cast<size_t>(in.rank)];
    if (!ps.before_update(ops_, in.rank, in.grad, n_, in.step + 1, in.local_loss_nonfinite()).applied)
      return;  // skips (own scaler)
    Optimizer& opt = *optimizers_[static_cast<size_t>(in.rank)];
    opt.step(params(in.rank), in.grad, 0, n_, in.lr, ps.update_count());
    ps.after_update(ops_, in.rank, params(in.rank), opt, 0, n_);
  }
  const float* eval_params() override { return params(0); }
  float loss_scale(int rank) const override { return precision_[static_cast<size_t>(rank)].loss_scale(); }
  StrategyReport report(const ReportContext&) const override {
    StrategyReport r;
    r.precision = &precision_[0];  // rank 0's scaler
    return r;
  }

 private:
  ElementOps& ops_;  // the memory of params_ and the optimizers' state
  size_t n_;
  const CostModel* cost_model_;
  OptimizerConfig optimizer_;
  std::vector<FloatBuffer> params_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;
  std::vector<PrecisionStep> precision_;
};

std::unique_ptr<SyncStrategy> make(const StrategySetup& setup) { return std::make_unique<Independent>(setup); }

}  // namespace

StrategyEntry independent_strategy() {
  return {"independent", "no communication: every rank trains its own replica (local SGD with H = infinity)", make,
          {}};
}

}  // namespace gs
