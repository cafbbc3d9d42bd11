// training.optimizer.kind "zero_one_adam": the ZeroOneAdam strategy (DeepSpeed's 0/1 Adam as a sync strategy,
// because it owns the communication) and its step schedule (zero_one_adam.h). Its buffers are the run's memory's and
// its element work ElementOps and CompressOps (1-bit Adam's pieces, onebit_adam.h; the sync's two passes), so it runs
// on host or device memory alike.
#include "sim/strategy/zero_one_adam.h"

#include <algorithm>
#include <cmath>

#include "kernels/nvtx.h"
#include "sim/compress/compressor.h"
#include "sim/core/clock.h"
#include "sim/core/error.h"
#include "sim/strategy/bucket_all_reduce.h"
#include "sim/strategy/onebit_adam.h"
#include "sim/strategy/strategy.h"

namespace gs {

ZeroOneSchedule zero_one_schedule(const OptimizerConfig& o) {
  return {o.var_freeze_step, o.var_update_scaler, o.local_step_scaler, o.local_step_clipper};
}

int64_t zero_one_last_unfrozen_step(const ZeroOneSchedule& s) { return std::max<int64_t>(2, s.var_freeze_step + 1); }

int64_t zero_one_var_interval(int64_t k, int64_t var_update_scaler) {
  // Updates of one interval I: var_update_scaler consecutive multiples of I from `first`; the next interval's first
  // update is the first multiple of 2I after the last of them.
  const int64_t s = std::max<int64_t>(1, var_update_scaler);
  int64_t interval = 1, first = 2;
  while (true) {
    if (k < first || (k - first + interval - 1) / interval <= s - 1) return interval;
    const int64_t last = first + (s - 1) * interval;  // < k: no overflow
    interval *= 2;
    first = (last / interval + 1) * interval;
  }
}

int64_t zero_one_local_step_interval(int64_t k, const ZeroOneSchedule& s) {
  const int64_t frozen_before = std::max<int64_t>(0, k - zero_one_last_unfrozen_step(s) - 1);
  const int64_t doublings = frozen_before / std::max<int64_t>(1, s.local_step_scaler);
  const int64_t clipper = std::max<int64_t>(1, s.local_step_clipper);
  return doublings >= 62 ? clipper : std::min(clipper, int64_t{1} << doublings);
}

ZeroOnePhase zero_one_phase(int64_t k, const ZeroOneSchedule& s) {
  if (k <= 1) return ZeroOnePhase::kInit;
  if (k <= zero_one_last_unfrozen_step(s))
    return k % zero_one_var_interval(k, s.var_update_scaler) == 0 ? ZeroOnePhase::kVariance
                                                                  : ZeroOnePhase::kOnebitGradient;
  return k % zero_one_local_step_interval(k, s) == 0 ? ZeroOnePhase::kSync : ZeroOnePhase::kLocal;
}

namespace {

// DeepSpeed's 0/1 Adam (Lu et al. 2022, arXiv 2202.06009; DeepSpeed ZeroOneAdam.step,
// deepspeed/runtime/fp16/onebit/zoadam.py) as a sync strategy, because it owns the communication: the engine's
// full-precision all-reduce of the gradient runs only on the steps that update the variance
// (enable_backward_allreduce), every other exchange is 1-bit Adam's compressed all-reduce (onebit_adam.h), and the
// local steps after the freeze exchange nothing. Per 1-based step k (zero_one_phase, zero_one_adam.h):
//   k = 1: the zero momentum_accumulator goes through one compressed all-reduce; nothing moves; the error buffers are
//          dropped (and made again, zero, at step 2);
//   variance step: g = all-reduced gradient / S; v = b2 v + (1 - b2) g^2; m = b1 m + (1 - b1) g;
//   1-bit gradient step: g = compressed_allreduce(the rank's mean gradient); m = b1 m + (1 - b1) g (one rank: DeepSpeed
//          skips the whole branch, m does not change);
//   both: u = m / (sqrt(v) + eps) (+ wd p); p += (-lr) u.
//   After the last unfrozen step the worker and server errors are zeroed once. Frozen steps (the rank's own gradient):
//   m = b1 m + (1 - b1) g_r; lrs += lr; u as above; p += (-lr) u; cb += (-lr) u; and at a sync step
//   p -= cb; cb *= sqrt(v) + eps; cb = compressed_allreduce(cb); m = -(cb / lrs); p += cb / (sqrt(v) + eps);
//   cb = 0; lrs = 0.
// The scalars are rounded to float as torch does with Python floats (lrs is summed in double, a Python float). As for
// 1-bit Adam the flat parameter buffer is one tensor (DeepSpeed's FP16_Optimizer flattens each group); exp_avg_mask
// and bias_correction (ZeroOneAdam never applies it) are not modeled.
class ZeroOneAdam final : public SyncStrategy {
 public:
  explicit ZeroOneAdam(const StrategySetup& s)
      : comm_(s.comm),
        memory_(s.memory()),
        ops_(compress_ops_of(memory_)),
        ranks_(s.ranks),
        n_(s.model.num_params()),
        padded_(onebit_padded_elements(n_, s.ranks)),
        cost_model_(s.cost_model),
        opt_(s.config.training.optimizer),
        schedule_(zero_one_schedule(opt_)),
        buckets_(make_buckets(s.model.tensors(), static_cast<size_t>(s.config.sync.first_bucket_mb * 1048576.0),
                              static_cast<size_t>(s.config.sync.bucket_mb * 1048576.0))) {
    GS_EXPECT(opt_.kind == "zero_one_adam",
              "the zero_one_adam strategy runs training.optimizer.kind \"zero_one_adam\"");
    // Identical while every step applies one all-reduced value: up to the last unfrozen step, or on one rank.
    s.claim_replicas_identical(ranks_ == 1 || s.total_steps <= zero_one_last_unfrozen_step(schedule_));
    if (s.timing_only) return;
    ranks_state_.resize(static_cast<size_t>(ranks_));
    for (int q = 0; q < ranks_; ++q) {
      RankState& r = ranks_state_[static_cast<size_t>(q)];
      r.params = memory_.allocate(q, n_);
      r.m = memory_.allocate(q, n_);
      r.v = memory_.allocate(q, n_);
      r.cb = memory_.allocate(q, n_);
    }
  }

  float* params(int rank) override { return ranks_state_[static_cast<size_t>(rank)].params.get(); }
  // Evaluation reads rank 0's replica (what a DeepSpeed user evaluating on rank 0 sees): after the freeze the
  // replicas differ between syncs, and by rounding after them too (p - cb is not bit for bit the synced point).
  const float* eval_params() override { return ranks_state_[0].params.get(); }

  // One rank's state, buffers of the run's memory.
  struct RankState {
    FloatBuffer params, m, v, cb;  // cb: DeepSpeed's momentum_accumulator
    OnebitBuffers onebit;          // the compressed all-reduce's error buffers and workspace
    double lrs = 0.0;              // state['lrs']: the lrs since the last sync
    OnebitCalls calls;                    // every compressed all-reduce after the first step's
    int64_t counts[5] = {0, 0, 0, 0, 0};  // steps per ZeroOnePhase
  };

  // The report's "compression" object over the compressed all-reduces after the first step (of the gradient before
  // the freeze, of the accumulated update at the syncs), per call; null on one rank and before the first such call.
  // Across processes: every rank's compressed-call records to process 0 (the report's times and norms).
  void gather_ranks(ProcessGroup& group, int first_rank, int local_ranks) override {
    gather_onebit_calls(group, ranks_state_, &RankState::calls, first_rank, local_ranks);
  }

  StrategyReport report(const ReportContext&) const override {
    StrategyReport rep;
    if (ranks_state_.empty()) return rep;
    std::vector<const OnebitCalls*> calls;
    for (const RankState& r : ranks_state_) calls.push_back(&r.calls);
    rep.compression = onebit_compression_report(calls, n_, padded_, "zero_one_adam");
    if (rep.compression.is_null()) return rep;
    const int64_t* c = ranks_state_[0].counts;
    nlohmann::json& j = rep.compression;
    j["var_freeze_step"] = opt_.var_freeze_step;
    j["compressed_calls"] = onebit_returned_calls(ranks_state_[0].calls);
    j["steps"] = {{"init", c[0]}, {"variance", c[1]}, {"onebit_gradient", c[2]}, {"local", c[3]}, {"sync", c[4]}};
    return rep;
  }

  void step(const StepInput& in) override {
    price(in);
    RankState& r = ranks_state_[static_cast<size_t>(in.rank)];
    const int64_t k = in.step + 1;
    const ZeroOnePhase phase = zero_one_phase(k, schedule_);
    ++r.counts[static_cast<int>(phase)];
    switch (phase) {
      case ZeroOnePhase::kInit:
        return init_step(in, r);
      case ZeroOnePhase::kVariance:
        variance_step(in, r);
        break;
      case ZeroOnePhase::kOnebitGradient:
        onebit_gradient_step(in, r);
        break;
      case ZeroOnePhase::kLocal:
      case ZeroOnePhase::kSync:
        frozen_step(in, r, phase == ZeroOnePhase::kSync);
        break;
    }
    if (k == zero_one_last_unfrozen_step(schedule_)) zero_errors(in.rank, r);  // reinitial_error_buffer
  }

  PriceKey price(const StepInput& in) const override;

 private:
  // Step 1: the engine still all-reduces the gradient (enable_backward_allreduce starts true) and the optimizer
  // returns before using it; the zero momentum_accumulator through the compressed all-reduce with fresh error
  // buffers, which step 2 makes again (zero).
  void init_step(const StepInput& in, RankState& r) {
    all_reduce_buckets(comm_, in.rank, in.grad, buckets_, *in.clock);
    if (ranks_ > 1) {
      compressed(in, r, r.cb.get(), nullptr);  // makes the error buffers zero (no record: not a counted call)
      zero_errors(in.rank, r);
    }
  }

  // The worker and server errors made zero (when they are made).
  void zero_errors(int rank, RankState& r) {
    if (!r.onebit.has_errors()) return;
    memory_.zero(rank, r.onebit.worker_error.get(), r.onebit.worker_error.size());
    memory_.zero(rank, r.onebit.server_error.get(), r.onebit.server_error.size());
  }

  void variance_step(const StepInput& in, RankState& r) {
    all_reduce_buckets(comm_, in.rank, in.grad, buckets_, *in.clock);
    GS_NVTX_RANGE(kOptimizer);
    TimedPhase t(memory_, in.rank, *in.clock, Phase::kOptimizer);
    memory_.divide(in.rank, in.grad, n_, static_cast<float>(in.global_samples));
    deepspeed_second_moment(ops_, in.rank, r.v.get(), in.grad, n_, opt_.beta2);
    deepspeed_first_moment(ops_, in.rank, r.m.get(), in.grad, n_, opt_.beta1);
    deepspeed_update(ops_, in.rank, r.params.get(), r.m.get(), r.v.get(), n_, opt_, in.lr);
  }

  // The rank's own mean gradient (the engine's all-reduce is off; each rank's loss is its mean).
  void local_mean(const StepInput& in) const {
    if (in.local_samples > 0) memory_.divide(in.rank, in.grad, n_, static_cast<float>(in.local_samples));
    else memory_.zero(in.rank, in.grad, n_);
  }

  void onebit_gradient_step(const StepInput& in, RankState& r) {
    {
      TimedPhase t(memory_, in.rank, *in.clock, Phase::kOptimizer);
      local_mean(in);
    }
    if (ranks_ > 1) {
      compressed(in, r, in.grad, &r.calls.emplace_back());
    }
    GS_NVTX_RANGE(kOptimizer);
    TimedPhase t(memory_, in.rank, *in.clock, Phase::kOptimizer);
    if (ranks_ > 1) deepspeed_first_moment(ops_, in.rank, r.m.get(), in.grad, n_, opt_.beta1);
    deepspeed_update(ops_, in.rank, r.params.get(), r.m.get(), r.v.get(), n_, opt_, in.lr);
  }

  void frozen_step(const StepInput& in, RankState& r, bool sync) {
    const auto eps = static_cast<float>(opt_.eps);
    {
      GS_NVTX_RANGE(kOptimizer);
      TimedPhase t(memory_, in.rank, *in.clock, Phase::kOptimizer);
      local_mean(in);
      deepspeed_first_moment(ops_, in.rank, r.m.get(), in.grad, n_, opt_.beta1);
      r.lrs += in.lr;
      deepspeed_update(ops_, in.rank, r.params.get(), r.m.get(), r.v.get(), n_, opt_, in.lr, r.cb.get());
      if (!sync) return;
      ops_.zero_one_sync_begin(in.rank, r.params.get(), r.cb.get(), r.v.get(), n_, eps);
    }
    if (ranks_ > 1) {
      compressed(in, r, r.cb.get(), &r.calls.emplace_back());
    }
    GS_NVTX_RANGE(kOptimizer);
    TimedPhase t(memory_, in.rank, *in.clock, Phase::kOptimizer);
    ops_.zero_one_sync_end(in.rank, r.m.get(), r.params.get(), r.cb.get(), r.v.get(), n_, static_cast<float>(r.lrs),
                           eps);
    r.lrs = 0.0;
  }

  // One compressed all-reduce of x[0, n) in place, timed, its wait moved out of the compress phase, DeepSpeed's
  // message bytes on the wire; `norms` (null: none) its record, valid until the rank's next settle (OnebitNorms).
  void compressed(const StepInput& in, RankState& r, float* x, OnebitNorms* norms) {
    timed_onebit_compressed_allreduce(comm_, memory_, *in.clock, in.rank, ranks_, x, n_, padded_, r.onebit, norms);
  }

  Communicator& comm_;
  ElementOps& memory_;  // the memory of every buffer here (host, or a device's)
  CompressOps& ops_;    // its compressor operations (the 1-bit optimizers' element math)
  int ranks_;
  size_t n_;
  size_t padded_;
  const CostModel* cost_model_;
  OptimizerConfig opt_;
  ZeroOneSchedule schedule_;
  std::vector<Bucket> buckets_;
  std::vector<RankState> ranks_state_;
};

// The modeled step by phase: the engine's bucketed fp32 all-reduce after backward on the first step and the
// variance steps; the compressed all-reduce (onebit_price_compressed) on the first step, the 1-bit gradient steps and
// the syncs; no communication on the local steps; the element-wise passes of each.
PriceKey ZeroOneAdam::price(const StepInput& in) const {
  const ZeroOnePhase phase = zero_one_phase(in.step + 1, schedule_);
  const PriceKey key{static_cast<int64_t>(phase), 0};
  if (in.cost == nullptr) return key;
  StepCost& cost = *in.cost;
  cost.overlap_backward = false;
  const double n = static_cast<double>(n_);
  if (phase == ZeroOnePhase::kInit || phase == ZeroOnePhase::kVariance)
    for (const Bucket& b : buckets_)
      cost.add_collective(CollectiveKind::kAllReduce, 4.0 * static_cast<double>(b.end - b.begin),
                          GradRange{b.begin, b.end});
  if (phase == ZeroOnePhase::kVariance && cost_model_ != nullptr) cost_model_->add_optimizer(cost, opt_, n);
  const bool compresses =
      phase == ZeroOnePhase::kInit || phase == ZeroOnePhase::kOnebitGradient || phase == ZeroOnePhase::kSync;
  if (compresses && ranks_ > 1) onebit_price_compressed(cost, padded_, ranks_);
  if (phase == ZeroOnePhase::kOnebitGradient) {
    cost.add_pass(Phase::kOptimizer, 8.0 * n + 12.0 * n);  // g / local samples; m = b1 m + (1 - b1) g
    cost.add_pass(Phase::kOptimizer, 16.0 * n);            // p += -lr m / (sqrt(v) + eps): read p, m, v, write p
  }
  if (phase == ZeroOnePhase::kLocal || phase == ZeroOnePhase::kSync) {
    cost.add_pass(Phase::kOptimizer, 8.0 * n + 12.0 * n);  // g / local samples; m
    cost.add_pass(Phase::kOptimizer, 28.0 * n);            // the update into p and cb: read p, m, v, cb, write p, cb
  }
  if (phase == ZeroOnePhase::kSync) {
    cost.add_pass(Phase::kOptimizer, 24.0 * n);  // p -= cb; cb *= sqrt(v) + eps: read p, cb, v, write p, cb
    cost.add_pass(Phase::kOptimizer, 28.0 * n);  // m = -cb / lrs; p += cb / (sqrt(v) + eps); cb = 0
  }
  return key;
}

std::unique_ptr<SyncStrategy> make(const StrategySetup& setup) { return std::make_unique<ZeroOneAdam>(setup); }

}  // namespace

StrategyEntry zero_one_adam_strategy() {
  return {"zero_one_adam", "DeepSpeed's 0/1 Adam: adaptive variance freezing, 1-bit compressed all-reduces and local "
                           "steps between syncs",
          make,
          join_options(kAdamBetaOptions, {"training.optimizer.var_freeze_step", "training.optimizer.var_update_scaler",
                                          "training.optimizer.local_step_scaler",
                                          "training.optimizer.local_step_clipper"}),
          onebit_adam_issues};
}

}  // namespace gs
