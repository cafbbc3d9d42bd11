// `local_sgd`: the LocalSgd strategy: local optimizer steps with periodic parameter averaging (docs/design.md,
// section 2), after an optional synchronous warm-up (post-local SGD, Lin et al. 2020).
#include "kernels/nvtx.h"
#include "sim/comm/process_group.h"
#include "sim/comm/rank_gather.h"
#include "sim/optim/optimizer.h"
#include "sim/strategy/bucket_all_reduce.h"
#include "sim/strategy/strategy.h"

namespace gs {
namespace {

// Extend here: another averaging rule (e.g. a schedule of periods) is a change to averages_after(); another thing to
// average is one more all-reduce in average().
//
// Steps t < sync.warmup_steps (0-based) are synchronous all-reduce steps: the gradient sum is all-reduced, divided by
// the step's sample count S, and every rank applies the same update to its replica. After the warm-up each rank
// divides its gradient by its own sample count and applies its own optimizer with its own loss scaler; after local
// steps H, 2H, ... (H = sync.period, counted from the end of the warm-up: the step counter ticks once per optimizer
// step, case BC16) the parameters are averaged over ranks (rank-order sum, then / N, so every rank holds the same
// bits), and with sync.average_optimizer_state also every optimizer state buffer (momentum, Adam moments). Adam's step
// count stays per rank. Evaluation between averages uses the replicas' average, computed for evaluation only.
// Memory: every element operation on parameters, gradients and optimizer state goes through the run's ElementOps
// (StrategySetup::memory(): host loops, or a backend's device memory), so the strategy runs device-resident.
class LocalSgd final : public SyncStrategy {
 public:
  explicit LocalSgd(const StrategySetup& s)
      : comm_(s.comm),
        ops_(s.memory()),
        ranks_(s.ranks),
        n_(s.model.num_params()),
        period_(s.config.sync.period),
        warmup_(s.config.sync.warmup_steps),
        average_state_(s.config.sync.average_optimizer_state),
        eval_every_(s.config.training.eval_every),
        across_processes_(process_group().size() > 1),
        cost_model_(s.cost_model),
        optimizer_(s.config.training.optimizer),
        buckets_(make_buckets(s.model.tensors(), static_cast<size_t>(s.config.sync.first_bucket_mb * 1048576.0),
                              static_cast<size_t>(s.config.sync.bucket_mb * 1048576.0))) {
    // Identical after every step only when every step ends with an average (H = 1), there is one rank, or the
    // warm-up covers the whole run (every step is a synchronous all-reduce step).
    s.claim_replicas_identical(period_ == 1 || ranks_ == 1 || warmup_ >= s.total_steps);
    for (int r = 0; r < s.ranks; ++r) precision_.emplace_back(s.config);  // each rank its own loss scaler
    const OptimizerConfig& o = s.config.training.optimizer;
    state_buffers_ = o.kind == "sgd" ? (o.momentum != 0.0 ? 1 : 0) : 2;
    if (s.timing_only) return;  // timing-only: price alone, no buffers
    for (int r = 0; r < s.ranks; ++r) {
      params_.push_back(ops_.allocate(r, n_));
      optimizers_.push_back(make_optimizer(s.config.training.optimizer, n_, ops_, r));
    }
    eval_copies_.resize(static_cast<size_t>(s.ranks));
  }

  float* params(int rank) override { return params_[static_cast<size_t>(rank)].get(); }
  float loss_scale(int rank) const override { return precision_[static_cast<size_t>(rank)].loss_scale(); }
  StrategyReport report(const ReportContext&) const override {
    StrategyReport r;
    r.precision = &precision_[0];  // rank 0's scaler
    return r;
  }

  // Between averages the replicas differ: evaluation reads their average (rank-order sum / N, the bits the next
  // average would give), computed into a buffer of rank 0's memory; right after a synchronous or averaging step every
  // replica holds that average already. The sum is taken on host copies (each replica downloaded from its rank's
  // memory, which may be another device's), then uploaded: bookkeeping for the evaluation, off both clocks.
  const float* eval_params() override {
    if (synced_ || ranks_ == 1) return params(0);
    if (eval_.size() == 0) eval_ = ops_.allocate(0, n_);
    if (eval_all_reduced_) return eval_.get();  // across processes: average_for_evaluation's
    std::vector<float> sum(n_), replica(n_);
    ops_.download(0, sum.data(), params(0), n_);
    for (int r = 1; r < ranks_; ++r) {
      ops_.download(r, replica.data(), params(r), n_);
      for (size_t i = 0; i < n_; ++i) sum[i] += replica[i];
    }
    const float inv_n = static_cast<float>(ranks_);
    for (size_t i = 0; i < n_; ++i) sum[i] = sum[i] / inv_n;
    ops_.upload(0, eval_.get(), sum.data(), n_);
    return eval_.get();
  }

  // Modeled clock: warm-up steps all-reduce the gradient by buckets overlapped with backward, as `allreduce` does;
  // local steps communicate nothing; averaging steps all-reduce the parameters and, when averaged, each optimizer
  // state buffer: one all-reduce of 4n bytes per buffer, one after the other, after the optimizer, not overlapped
  // (what average() issues).
  // Key: warm-up, averaging and local steps price differently.
  PriceKey price(const StepInput& in) const override {
    const PriceKey key{in.step < warmup_ ? 0 : averages_after(in.step) ? 1 : 2, 0};
    if (in.cost == nullptr) return key;
    if (in.step < warmup_) {
      for (const Bucket& b : buckets_)
        in.cost->add_collective(CollectiveKind::kAllReduce, 4.0 * static_cast<double>(b.end - b.begin),
                                GradRange{b.begin, b.end});
    } else if (averages_after(in.step)) {
      const int buffers = 1 + (average_state_ ? state_buffers_ : 0);
      for (int b = 0; b < buffers; ++b)
        in.cost->add_collective(CollectiveKind::kAllReduce, 4.0 * static_cast<double>(n_));
      in.cost->add_pass(Phase::kOptimizer, 8.0 * buffers * static_cast<double>(n_));  // the division by N
    }
    if (cost_model_ != nullptr) cost_model_->add_optimizer(*in.cost, optimizer_, static_cast<double>(n_));
    precision_[static_cast<size_t>(in.rank)].price(*in.cost, static_cast<double>(n_));
    return key;
  }

  void step(const StepInput& in) override {
    price(in);
    PhaseClock& clock = *in.clock;
    const bool warmup = in.step < warmup_;
    if (warmup) {
      all_reduce_buckets(comm_, in.rank, in.grad, buckets_, clock);
      GS_NVTX_RANGE(kOptimizer);
      TimedPhase t(ops_, in.rank, clock, Phase::kOptimizer);
      ops_.divide(in.rank, in.grad, n_, static_cast<float>(in.global_samples));
      apply(in.rank, in.grad, in.lr, in.step, in.loss_nonfinite);  // every rank's loss: all ranks skip together
    } else if (in.local_samples > 0) {  // a rank without samples this step has nothing to learn from
      GS_NVTX_RANGE(kOptimizer);
      TimedPhase t(ops_, in.rank, clock, Phase::kOptimizer);
      ops_.divide(in.rank, in.grad, n_, static_cast<float>(in.local_samples));
      apply(in.rank, in.grad, in.lr, in.step, in.local_loss_nonfinite());  // a local step: this rank's own loss
    }
    const bool average = !warmup && averages_after(in.step);
    if (average) this->average(in.rank, clock);
    const bool synced = warmup || average;
    const bool for_eval = across_processes_ && !synced && ranks_ > 1 &&
                          evaluation_due(in.step + 1, in.total_steps, eval_every_);
    if (for_eval) average_for_evaluation(in.rank);
    if (in.rank == 0) {  // read by eval_params on rank 0's thread
      synced_ = synced;
      eval_all_reduced_ = for_eval;
    }
  }

  // Across processes: every rank's replica to process 0, whose eval_params averages them after the run.
  // (Across processes the run's memory is host RAM.)
  void gather_ranks(ProcessGroup& group, int first_rank, int local_ranks) override {
    if (params_.empty()) return;  // timing-only
    std::vector<std::vector<float>> rows(params_.size(), std::vector<float>(n_));
    for (int r = first_rank; r < first_rank + local_ranks; ++r)
      ops_.download(r, rows[static_cast<size_t>(r)].data(), params(r), n_);
    gather_rank_rows(group, rows, first_rank, local_ranks);
    for (int r = 0; r < ranks_; ++r) ops_.upload(r, params(r), rows[static_cast<size_t>(r)].data(), n_);
    eval_all_reduced_ = false;  // process 0 holds every replica now
  }

 private:
  // True when the parameters are averaged after 0-based step t: local steps H, 2H, ... after the warm-up.
  bool averages_after(int64_t t) const { return t >= warmup_ && (t + 1 - warmup_) % period_ == 0; }

  void apply(int rank, float* g, double lr, int64_t step, bool loss_nonfinite) {
    PrecisionStep& ps = precision_[static_cast<size_t>(rank)];
    if (!ps.before_update(ops_, rank, g, n_, step + 1, loss_nonfinite).applied) return;  // this rank's scaler skips
    Optimizer& opt = *optimizers_[static_cast<size_t>(rank)];
    opt.step(params(rank), g, 0, n_, lr, ps.update_count());
    ps.after_update(ops_, rank, params(rank), opt, 0, n_);
  }

  // Rank-order sum over ranks, then / N, of the parameters (and state buffers): the same bits on every rank.
  void average(int rank, PhaseClock& clock) {
    Optimizer& opt = *optimizers_[static_cast<size_t>(rank)];
    std::vector<float*> bufs = {params(rank)};
    if (average_state_)
      for (float* b : opt.state_buffers()) bufs.push_back(b);
    {
      TimedPhase t(ops_, rank, clock, Phase::kCommunicate);
      for (float* b : bufs) {
        GS_NVTX_RANGE_BYTES(kCommunicate, n_ * sizeof(float));
        comm_.all_reduce_sum(rank, b, n_);
      }
    }
    account(rank, clock);
    GS_NVTX_RANGE(kOptimizer);  // the division by N of the averaged buffers
    TimedPhase t(ops_, rank, clock, Phase::kOptimizer);
    for (float* b : bufs) ops_.divide(rank, b, n_, static_cast<float>(ranks_));
    precision_[static_cast<size_t>(rank)].after_update(ops_, rank, params(rank), opt, 0, n_);  // fp16_pure storage
  }

  // Across processes the other processes' replicas are not in this one: on a step that ends between averages and is
  // evaluated (evaluation_due), every rank all-reduces a copy of its replica and rank 0 keeps sum / N for eval_params,
  // the bits of the in-process average (a rank-order sum). Bookkeeping for the evaluation: not in the bytes nor on the
  // modeled clock (it lengthens the measured step).
  void average_for_evaluation(int rank) {
    FloatBuffer& copy = eval_copies_[static_cast<size_t>(rank)];
    if (copy.size() == 0) copy = ops_.allocate(rank, n_);
    ops_.copy(rank, copy.get(), params(rank), n_);
    comm_.all_reduce_sum(rank, copy.get(), n_);
    comm_.take_stats(rank);
    if (rank != 0) return;
    if (eval_.size() == 0) eval_ = ops_.allocate(0, n_);
    ops_.copy(0, eval_.get(), copy.get(), n_);
    ops_.divide(0, eval_.get(), n_, static_cast<float>(ranks_));
  }

  void account(int rank, PhaseClock& clock) {
    CommStats st = comm_.take_stats(rank);
    clock.move(Phase::kCommunicate, Phase::kWait, st.wait_s);
    clock.add_bytes(st.bytes_sent);
  }

  Communicator& comm_;
  ElementOps& ops_;  // the memory of params_, the optimizers' state and the evaluation buffers
  int ranks_;
  size_t n_;
  int64_t period_;
  int64_t warmup_;
  bool average_state_;
  int64_t eval_every_;
  bool across_processes_;  // mpirun: the other processes' ranks' replicas live there
  int state_buffers_ = 0;
  const CostModel* cost_model_;
  OptimizerConfig optimizer_;
  std::vector<Bucket> buckets_;
  std::vector<FloatBuffer> params_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;
  std::vector<PrecisionStep> precision_;
  FloatBuffer eval_;  // the replicas' average for evaluation (rank 0's memory)
  bool synced_ = true;       // the last step ended with every replica equal (the initial parameters are)
  bool eval_all_reduced_ = false;               // eval_ holds average_for_evaluation's result of the last step
  std::vector<FloatBuffer> eval_copies_;         // [rank]: the replica's copy all-reduced for evaluation
};

std::unique_ptr<SyncStrategy> make(const StrategySetup& setup) { return std::make_unique<LocalSgd>(setup); }

}  // namespace

StrategyEntry local_sgd_strategy() {
  return {"local_sgd", "local SGD: local optimizer steps, parameters averaged every sync.period steps (optionally the "
                       "optimizer state), after sync.warmup_steps of synchronous all-reduce (post-local SGD)",
          make, join_options({"sync.period", "sync.average_optimizer_state", "sync.warmup_steps"}, kBucketOptions)};
}

}  // namespace gs
