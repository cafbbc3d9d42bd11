// training.optimizer.kind "onebit_lamb": DeepSpeed's 1-bit LAMB (Li et al. 2021, "1-bit LAMB: Communication Efficient
// Large-Scale Large-Batch Training with LAMB's Convergence Speed", arXiv 2104.06069; DeepSpeed OnebitLamb.step in
// deepspeed/runtime/fp16/onebit/lamb.py, read at commit edaa7221267243c7be7fb49c5d5f5c4fb97b4641) as a sync strategy,
// because it owns the communication. The compressed all-reduce, its message sizes, its price and the report's
// compression object are 1-bit Adam's (onebit_adam.h). Its buffers are the run's memory's (host or device): the
// per-tensor norms come back through ElementOps::scan, the element passes are ElementOps and CompressOps
// (lamb_direction, lamb_reconstruct, lamb_frozen_direction), the coefficients and factors are host scalars.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/nvtx.h"
#include "sim/compress/compressor.h"
#include "sim/core/clock.h"
#include "sim/core/error.h"
#include "sim/strategy/bucket_all_reduce.h"
#include "sim/strategy/onebit_adam.h"
#include "sim/strategy/strategy.h"

namespace gs {
namespace {

// DeepSpeed's 1-bit LAMB, per 1-based step k (state['step']); m, v, v_fresh (exp_avg_sq_fresh) start at 0, and per
// tensor (each parameter of the model's table) the frozen coefficient f = 0 (lamb_coeff_freeze) and last_factor = 1:
//   k = 1: the engine all-reduces the gradient; the zero momentum goes through one compressed all-reduce with fresh
//          error buffers, which are dropped; nothing moves (as 1-bit Adam's initialization step);
//   2 <= k <= max(freeze_step, 2), LAMB: g = all-reduced gradient / S; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2)
//          g^2; v_fresh = v at k == freeze_step; per tensor u = m / (sqrt(v) + eps) (+ wd w), c = ||w|| / ||u||
//          clipped to [min_coeff, max_coeff] (1 when either norm is 0), f = coeff_beta f + (1 - coeff_beta) c when
//          c != 1, w -= lr c u;
//   later: at the first such step each tensor's scaling_coeff = mean_t(rms(m_t)) / rms(m_t) (rms: ||m_t|| /
//          sqrt(numel)); m_last = m; each rank m_r = (b1 m + (1 - b1) g_r) * scaling (its own mean gradient: the
//          engine's all-reduce is off); m = compressed_allreduce(m_r) / scaling (exp_avg_mask after it);
//          per tensor g' = (m - b1 m_last) / (1 - b1); v_fresh = b2 v_fresh + (1 - b2) g'^2; u_pre = m / (sqrt(v) +
//          eps), u = u_pre (+ wd w); factor = max(denom / (sqrt(v_fresh) + eps)), with wd > 0 mixed with r =
//          min(1, ||u_pre|| / ||u||) as factor r + 1 - r; clipped to [factor_min, factor_max], then to
//          last_factor (1 -+ factor_threshold); last_factor = factor; w -= lr (f factor) u.
// No bias correction (OnebitLamb stores the flag and never applies it). Element-wise arithmetic in float32 as torch's
// CPU kernels (onebit_adam.h: deepspeed_first_moment, deepspeed_second_moment); the coefficients, factors and their
// clipping in double as the Python floats they are; a tensor divided by a Python float divides by float(x).
class OnebitLamb final : public SyncStrategy {
 public:
  explicit OnebitLamb(const StrategySetup& s)
      : comm_(s.comm),
        memory_(s.memory()),
        ops_(compress_ops_of(memory_)),
        ranks_(s.ranks),
        n_(s.model.num_params()),
        padded_(onebit_padded_elements(n_, s.ranks)),
        cost_model_(s.cost_model),
        opt_(s.config.training.optimizer),
        buckets_(make_buckets(s.model.tensors(), static_cast<size_t>(s.config.sync.first_bucket_mb * 1048576.0),
                              static_cast<size_t>(s.config.sync.bucket_mb * 1048576.0))) {
    GS_EXPECT(opt_.kind == "onebit_lamb", "the onebit_lamb strategy runs training.optimizer.kind \"onebit_lamb\"");
    for (const TensorInfo& t : s.model.tensors())
      if (t.count > 0) tensors_.push_back(t);  // DeepSpeed's filter_empty_parameters
    // Every rank applies the same all-reduced gradient (warm-up) or the same decompressed momentum, frozen variance
    // and coefficients (after it).
    s.claim_replicas_identical(true);
    if (s.timing_only) return;
    ranks_state_.resize(static_cast<size_t>(ranks_));
    for (int q = 0; q < ranks_; ++q) {
      RankState& r = ranks_state_[static_cast<size_t>(q)];
      for (FloatBuffer* b : {&r.params, &r.m, &r.v, &r.fresh, &r.last, &r.update}) *b = memory_.allocate(q, n_);
      r.tensors.resize(tensors_.size());
    }
  }

  float* params(int rank) override { return ranks_state_[static_cast<size_t>(rank)].params.get(); }
  const float* eval_params() override { return ranks_state_[0].params.get(); }

  // DeepSpeed's per-parameter state beyond the moments, per tensor of the table.
  struct TensorState {
    double coeff_freeze = 0.0;   // state['lamb_coeff_freeze']
    double last_factor = 1.0;    // state['last_factor']
    double scaling_coeff = 0.0;  // state['scaling_coeff'] (0 until the first compressed step)
    double lamb_coeff = 0.0;     // the coefficient of the last update (get_lamb_coeffs)
  };
  // One rank's state: buffers of the run's memory, and its per-tensor scalars on the host.
  struct RankState {
    FloatBuffer params, m, v, fresh, last, update;  // fresh: exp_avg_sq_fresh; last: exp_avg_last_step
    OnebitBuffers onebit;                           // the compressed all-reduce's error buffers and workspace
    std::vector<TensorState> tensors;
    bool scaled = false;             // scaling_coeff made
    OnebitCalls steps;  // every compressed step's
  };

  StrategyReport report(const ReportContext&) const override;
  // Across processes: every rank's compressed-call records to process 0 (the report's times and norms).
  void gather_ranks(ProcessGroup& group, int first_rank, int local_ranks) override {
    gather_onebit_calls(group, ranks_state_, &RankState::steps, first_rank, local_ranks);
  }

  void step(const StepInput& in) override {
    price(in);
    RankState& r = ranks_state_[static_cast<size_t>(in.rank)];
    const int64_t k = in.step + 1;
    switch (onebit_phase(k, opt_.freeze_step)) {
      case OnebitPhase::kInit:
        all_reduce_buckets(comm_, in.rank, in.grad, buckets_, *in.clock);
        if (ranks_ > 1) {  // the zero momentum through the compressed all-reduce; the buffers are dropped after it
          compressed(in, r, nullptr);  // makes the error buffers zero (no record: not a compressed step)
          r.onebit.drop_errors();
        }
        return;
      case OnebitPhase::kWarmup:
        return warmup_step(in, r, k);
      case OnebitPhase::kCompressed:
        return compressed_step(in, r);
    }
  }

  PriceKey price(const StepInput& in) const override;

 private:
  void warmup_step(const StepInput& in, RankState& r, int64_t k) {
    all_reduce_buckets(comm_, in.rank, in.grad, buckets_, *in.clock);
    GS_NVTX_RANGE(kOptimizer);
    TimedPhase t(memory_, in.rank, *in.clock, Phase::kOptimizer);
    memory_.divide(in.rank, in.grad, n_, static_cast<float>(in.global_samples));
    deepspeed_first_moment(ops_, in.rank, r.m.get(), in.grad, n_, opt_.beta1);
    deepspeed_second_moment(ops_, in.rank, r.v.get(), in.grad, n_, opt_.beta2);
    if (k == opt_.freeze_step)  // exp_avg_sq_fresh.data = exp_avg_sq.detach().clone()
      memory_.copy(in.rank, r.fresh.get(), r.v.get(), n_);
    const auto eps = static_cast<float>(opt_.eps), wd = static_cast<float>(opt_.weight_decay);
    for (size_t j = 0; j < tensors_.size(); ++j) {
      const size_t o = tensors_[j].offset, c = tensors_[j].count;
      float* p = r.params.get() + o;
      float* u = r.update.get() + o;
      const float weight_norm = norm32(in.rank, p, c);
      ops_.lamb_direction(in.rank, u, r.m.get() + o, r.v.get() + o, p, c, eps, wd, opt_.weight_decay > 0.0);
      const float update_norm = norm32(in.rank, u, c);
      double coeff = 1.0;
      if (weight_norm != 0.0f && update_norm != 0.0f) {
        coeff = static_cast<double>(weight_norm / update_norm);
        if (coeff > opt_.max_coeff) coeff = opt_.max_coeff;
        if (coeff < opt_.min_coeff) coeff = opt_.min_coeff;
      }
      TensorState& ts = r.tensors[j];
      if (coeff != 1.0) ts.coeff_freeze = opt_.coeff_beta * ts.coeff_freeze + (1.0 - opt_.coeff_beta) * coeff;
      ts.lamb_coeff = coeff;
      add_scaled(in.rank, p, u, c, -in.lr * coeff);
    }
  }

  // ||x|| of a float32 tensor of the run's memory (torch's x.pow(2).sum().sqrt(), vector_norm): the squares summed in
  // double (ElementOps::scan: in index order on the host, a fixed order of its own on a device), the root rounded to
  // float, as onebit_adam.cpp's norms (torch sums in float32 in its own order: within float32 rounding).
  float norm32(int rank, const float* x, size_t n) const {
    return static_cast<float>(std::sqrt(memory_.scan(rank, x, n, true).sum_squares));
  }

  // p.add_(-lr * lamb_coeff * update): the Python scalar (-lr * coeff, a double) rounded to float, times the update,
  // added to p (ElementOps::add_scaled: the product rounded apart from the sum).
  void add_scaled(int rank, float* p, const float* u, size_t n, double scalar) const {
    memory_.add_scaled(rank, p, u, static_cast<float>(scalar), n);
  }

  // At the end of the warm-up: scaling_coeff = united_scale / momentum_scale of each tensor, momentum_scale =
  // (||m_t|| / float(sqrt(numel))).item(), united_scale their mean (Python's sum in table order over the count).
  void make_scaling(int rank, RankState& r) const {
    std::vector<double> scales;
    double sum = 0.0;
    for (const TensorInfo& t : tensors_) {
      const auto root = static_cast<float>(std::sqrt(static_cast<double>(t.count)));
      scales.push_back(static_cast<double>(norm32(rank, r.m.get() + t.offset, t.count) / root));
      sum += scales.back();
    }
    const double united = sum / static_cast<double>(tensors_.size());
    for (size_t j = 0; j < tensors_.size(); ++j) {
      if (scales[j] == 0.0)
        throw Error(fmt::format("training.optimizer.kind \"onebit_lamb\": tensor \"{}\" has a zero momentum at the "
                                "end of the warm-up, so its scaling coefficient united_scale / 0 is undefined "
                                "(DeepSpeed's OnebitLamb.step raises ZeroDivisionError there)",
                                tensors_[j].name));
      r.tensors[j].scaling_coeff = united / scales[j];
    }
    r.scaled = true;
  }

  // Multiplies (or divides) each tensor's momentum by its scaling coefficient, rounded to float.
  void scale_momentum(int rank, RankState& r, bool divide) const {
    for (size_t j = 0; j < tensors_.size(); ++j) {
      const auto s = static_cast<float>(r.tensors[j].scaling_coeff);
      float* m = r.m.get() + tensors_[j].offset;
      if (divide) memory_.divide(rank, m, tensors_[j].count, s);
      else memory_.scale(rank, m, tensors_[j].count, s);
    }
  }

  void compressed_step(const StepInput& in, RankState& r) {
    {
      GS_NVTX_RANGE(kOptimizer);
      TimedPhase t(memory_, in.rank, *in.clock, Phase::kOptimizer);
      memory_.copy(in.rank, r.last.get(), r.m.get(), n_);  // exp_avg_last_step
      if (!r.scaled) make_scaling(in.rank, r);
      // The rank's own mean gradient (the engine's all-reduce is off; each rank's loss is its mean).
      if (in.local_samples > 0) memory_.divide(in.rank, in.grad, n_, static_cast<float>(in.local_samples));
      else memory_.zero(in.rank, in.grad, n_);
      deepspeed_first_moment(ops_, in.rank, r.m.get(), in.grad, n_, opt_.beta1);
      scale_momentum(in.rank, r, false);
    }
    if (ranks_ > 1) {
      compressed(in, r, &r.steps.emplace_back());  // the error buffers made zero at the first compressed step
    }
    GS_NVTX_RANGE(kOptimizer);
    TimedPhase t(memory_, in.rank, *in.clock, Phase::kOptimizer);
    scale_momentum(in.rank, r, true);
    // exp_avg.mul_(group['exp_avg_mask']), the mask from the frozen v (the same at every compressed step)
    if (opt_.exp_avg_mask == "zero_variance") ops_.zero_variance_mask(in.rank, r.m.get(), r.v.get(), n_);
    for (size_t j = 0; j < tensors_.size(); ++j) frozen_update(in.rank, r, j, in.lr);
  }

  // One tensor's update after the freeze, as OnebitLamb.step's last loop.
  void frozen_update(int rank, RankState& r, size_t j, double lr) const {
    const size_t o = tensors_[j].offset, c = tensors_[j].count;
    const auto eps = static_cast<float>(opt_.eps), wd = static_cast<float>(opt_.weight_decay);
    float* u = r.update.get() + o;
    ops_.lamb_reconstruct(rank, u, r.m.get() + o, r.last.get() + o, c, static_cast<float>(opt_.beta1),
                          static_cast<float>(1.0 - opt_.beta1));  // grad_reconstruct
    deepspeed_second_moment(ops_, rank, r.fresh.get() + o, u, c, opt_.beta2);
    const LambFrozenTerms terms = ops_.lamb_frozen_direction(rank, u, r.m.get() + o, r.v.get() + o,
                                                             r.fresh.get() + o, r.params.get() + o, c, eps, wd,
                                                             opt_.weight_decay > 0.0);
    const float update_norm = norm32(rank, u, c);
    double factor = terms.nan ? std::nan("") : static_cast<double>(terms.max_ratio);
    if (opt_.weight_decay > 0.0) {
      const auto ratio32 = static_cast<double>(static_cast<float>(std::sqrt(terms.pre_sum_squares)) / update_norm);
      const double ratio = ratio32 < 1.0 ? ratio32 : 1.0;  // Python's min(1.0, x)
      factor = factor * ratio + (1.0 - ratio);
    }
    TensorState& ts = r.tensors[j];
    if (factor > opt_.factor_max) factor = opt_.factor_max;
    if (factor < opt_.factor_min) factor = opt_.factor_min;
    if (factor > ts.last_factor * (1.0 + opt_.factor_threshold)) factor = ts.last_factor * (1.0 + opt_.factor_threshold);
    if (factor < ts.last_factor * (1.0 - opt_.factor_threshold)) factor = ts.last_factor * (1.0 - opt_.factor_threshold);
    ts.last_factor = factor;
    ts.lamb_coeff = ts.coeff_freeze * factor;
    add_scaled(rank, r.params.get() + o, u, c, -lr * ts.lamb_coeff);
  }

  // The momentum through the compressed all-reduce, timed; its wait moved out; DeepSpeed's message bytes counted;
  // `norms` (null: none) its record, valid until the rank's next settle (OnebitNorms).
  void compressed(const StepInput& in, RankState& r, OnebitNorms* norms) {
    timed_onebit_compressed_allreduce(comm_, memory_, *in.clock, in.rank, ranks_, r.m.get(), n_, padded_, r.onebit,
                                      norms);
  }

  Communicator& comm_;
  ElementOps& memory_;  // the memory of every buffer here (host, or a device's)
  CompressOps& ops_;    // its compressor operations (the 1-bit optimizers' element math)
  int ranks_;
  size_t n_;
  size_t padded_;
  const CostModel* cost_model_;
  OptimizerConfig opt_;
  std::vector<Bucket> buckets_;
  std::vector<TensorInfo> tensors_;
  std::vector<RankState> ranks_state_;
};

// 1-bit Adam's compression object over the compressed steps (null before the first and on one rank), with
// freeze_step, compressed_steps and, per tensor, rank 0's frozen coefficient, scaling coefficient, last factor and
// last coefficient applied.
StrategyReport OnebitLamb::report(const ReportContext&) const {
  StrategyReport rep;
  if (ranks_state_.empty()) return rep;
  std::vector<const OnebitCalls*> calls;
  for (const RankState& r : ranks_state_) calls.push_back(&r.steps);
  rep.compression = onebit_compression_report(calls, n_, padded_, "onebit_lamb");
  if (rep.compression.is_null()) return rep;
  rep.compression["freeze_step"] = opt_.freeze_step;
  rep.compression["compressed_steps"] = onebit_returned_calls(ranks_state_[0].steps);
  nlohmann::json lamb = nlohmann::json::array();
  for (size_t j = 0; j < tensors_.size(); ++j) {
    const TensorState& ts = ranks_state_[0].tensors[j];
    lamb.push_back({{"tensor", tensors_[j].name}, {"lamb_coeff_freeze", ts.coeff_freeze},
                    {"scaling_coeff", ts.scaling_coeff}, {"last_factor", ts.last_factor},
                    {"lamb_coeff", ts.lamb_coeff}});
  }
  rep.compression["lamb"] = lamb;
  return rep;
}

// The modeled step by phase: step 1 and the warm-up as 1-bit Adam's (the engine's bucketed all-reduce after the
// backward; step 1's compressed exchange of zeros; the Adam update) plus, in the warm-up, LAMB's per-tensor passes
// (||w||, the update written and its norm, w += c u); a compressed step: the momentum update and scaling, the
// compressed all-reduce (onebit_price_compressed), the unscaling, the reconstruction into v_fresh, the update, its
// norms and the factor, w += c u. Per-tensor passes are one launch per tensor, as OnebitLamb's loop over parameters.
PriceKey OnebitLamb::price(const StepInput& in) const {
  const OnebitPhase phase = onebit_phase(in.step + 1, opt_.freeze_step);
  const PriceKey key{static_cast<int64_t>(phase), 0};
  if (in.cost == nullptr) return key;
  StepCost& cost = *in.cost;
  cost.overlap_backward = false;
  const double n = static_cast<double>(n_), launches = static_cast<double>(std::max<size_t>(1, tensors_.size()));
  if (phase != OnebitPhase::kCompressed)
    for (const Bucket& b : buckets_)
      cost.add_collective(CollectiveKind::kAllReduce, 4.0 * static_cast<double>(b.end - b.begin),
                          GradRange{b.begin, b.end});
  if (phase == OnebitPhase::kInit) {
    if (ranks_ > 1) onebit_price_compressed(cost, padded_, ranks_);
    return key;
  }
  if (phase == OnebitPhase::kWarmup) {
    if (cost_model_ != nullptr) cost_model_->add_optimizer(cost, opt_, n);
    cost.add_pass(Phase::kOptimizer, 4.0 * n + 12.0 * n + 4.0 * n, {}, 2.0 * launches);  // ||w||; u; ||u||
    cost.add_pass(Phase::kOptimizer, 12.0 * n, {}, launches);                            // w += c u
    return key;
  }
  cost.add_pass(Phase::kOptimizer, 8.0 * n + 12.0 * n + 8.0 * n);   // g / local samples; m; m_last = m
  cost.add_pass(Phase::kOptimizer, 8.0 * n, {}, launches);           // m *= scaling
  if (ranks_ > 1) onebit_price_compressed(cost, padded_, ranks_);
  cost.add_pass(Phase::kOptimizer, 8.0 * n, {}, launches);           // m /= scaling
  cost.add_pass(Phase::kOptimizer, 16.0 * n, {}, launches);          // g' and v_fresh: read m, m_last, v_fresh
  cost.add_pass(Phase::kOptimizer, 24.0 * n, {}, 2.0 * launches);    // u: read m, v, w, write u; factor: v_fresh
  cost.add_pass(Phase::kOptimizer, 4.0 * n + 12.0 * n, {}, 2.0 * launches);  // ||u||; w += c u
  return key;
}

std::unique_ptr<SyncStrategy> make(const StrategySetup& setup) { return std::make_unique<OnebitLamb>(setup); }

// 1-bit LAMB: 1-bit Adam's refusals, and bounds that are ordered.
void onebit_lamb_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  onebit_adam_issues(c, issues);
  const OptimizerConfig& o = c.training.optimizer;
  if (o.min_coeff > o.max_coeff)
    issues.push_back({"training.optimizer.min_coeff", fmt::format("expected at most training.optimizer.max_coeff "
                                                                  "({}), got {}", o.max_coeff, o.min_coeff)});
  if (o.factor_min > o.factor_max)
    issues.push_back({"training.optimizer.factor_min", fmt::format("expected at most training.optimizer.factor_max "
                                                                   "({}), got {}", o.factor_max, o.factor_min)});
}

}  // namespace

StrategyEntry onebit_lamb_strategy() {
  return {"onebit_lamb", "DeepSpeed's 1-bit LAMB: uncompressed LAMB while the variance updates, then the momentum "
                         "all-reduced 1-bit compressed with error feedback and the frozen per-tensor LAMB coefficients",
          make,
          join_options(kAdamBetaOptions,
                       {"training.optimizer.freeze_step", "training.optimizer.exp_avg_mask",
                        "training.optimizer.max_coeff", "training.optimizer.min_coeff", "training.optimizer.coeff_beta",
                        "training.optimizer.factor_max", "training.optimizer.factor_min",
                        "training.optimizer.factor_threshold"}),
          onebit_lamb_issues};
}

}  // namespace gs
