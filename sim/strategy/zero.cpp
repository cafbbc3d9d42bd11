// `zero`: ZeRO / FSDP sharded data parallelism (Rajbhandari et al. 2020; docs/strategies.md, "zero"), sync.stage
// 1-3: the Zero strategy (reduce-scatter, sharded update, all-gather; each micro-batch reduced as it ends under
// sync.reduce_every_microbatch) and zero_partition.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "kernels/compress_math.h"
#include "kernels/float_formats.h"
#include "kernels/nvtx.h"
#include "sim/comm/process_group.h"
#include "sim/compress/reduce.h"
#include "sim/optim/optimizer.h"
#include "sim/strategy/strategy.h"

namespace gs {

size_t zero_partition(size_t n, int ranks) {
  size_t per =
      (n + static_cast<size_t>(ranks) - 1) / static_cast<size_t>(ranks);
  return (per + 15) / 16 * 16;
}

namespace {

// Bytes of one parameter element as the stage-3 and post-step all-gathers move
// it: the format the model computes in (2 under the 16-bit and fp8 modes, whose
// gathered weights are bf16/fp16 copies), 4 under fp32 and tf32.
double parameter_wire_bytes(const RunConfig &c) {
  const Precision p = compute_precision(c.precision.mode);
  return p == Precision::kFp32 || p == Precision::kTf32 ? 4.0 : 2.0;
}

// Partitioning (DeepSpeed's equal padded partitions): the flat parameter vector of n elements is padded to N x per
// elements, per = ceil(n / N) rounded up to 16 floats (64 bytes); rank r owns [r per, min(n, (r+1) per)). Host
// arithmetic, the same for every stage (the stages differ in GPU memory and on the modeled clock):
//   1. the rank's gradient sum is reduce-scattered (Communicator::reduce_scatter_sum: element i summed over ranks
//      0..N-1 in rank order, the host all-reduce's order), then divided by S on the shard; under a cast compressor
//      (compression.kind fp16 / bf16, communication_data_type) each rank casts its mean gradient as the cast
//      all-reduce does (sim/compress/cast.cpp) and the owner sums its shard in the format (or in fp32 with
//      compression.accumulate "fp32") in rank order, with the same pre / post division;
//   2. the precision step (loss-scale unscale and check, clipping): element-wise on the shard when neither a scaler
//      nor clipping runs; otherwise the shards are all-gathered on the host so the decision (skip, clip coefficient)
//      is taken on the whole averaged gradient, with the bits all-reduce takes it with (DeepSpeed all-reduces an
//      overflow flag and the squared norm: the modeled clock prices those two scalars, not the gather);
//   3. the rank's optimizer updates its shard only; its state (momentum, Adam's m and v) is allocated for the shard;
//      under mixed precision the fp32 master weights updated are the shard's;
//   4. the updated shards are all-gathered into every rank's full parameters (fp32 on the host: the forward casts
//      them to the mode's format element by element, so gathering the cast values gives the same bits).
// So the parameters are bit-identical to sync.kind allreduce with the same optimizer (tests/unit/test_zero.cpp).
// Memory: uncast, every element operation goes through the run's ElementOps (StrategySetup::memory(): host loops or a
// backend's device memory) and the communicator's reduce-scatter / all-gather; the cast reduce-scatter is host loops
// (host_memory_reason names its compression.kind or fp16_pure).
// Accumulation (K micro-batches per step): by default the rank's gradient is summed over its micro-batches and
// reduced once per step (after the last micro-batch), at every stage, so the whole gradient is held until then.
// sync.reduce_every_microbatch (stage 2 or 3, K > 1; DeepSpeed stage 2, FSDP without no_sync) reduce-scatters each
// micro-batch's gradient as its backward ends (a subscriber of the rank loop's micro-batch ends, GradientHooks,
// micro_batch_end) and keeps only the shard's sum: shard = sum over k in order of (sum over ranks in rank order of
// the ranks' micro-batch-k gradients), then steps 2-4 as above. Not the bits of allreduce in general (another order
// of the same sums).
class Zero final : public SyncStrategy, public GradientSubscriber {
public:
  explicit Zero(const StrategySetup &s)
      : comm_(s.comm), ops_(s.memory()), ranks_(s.ranks), n_(s.model.num_params()),
        per_(zero_partition(s.model.num_params(), s.ranks)),
        stage_(static_cast<int>(s.config.sync.stage)),
        k_(std::max<int64_t>(1, s.config.training.accumulation_steps)),
        every_micro_(s.config.sync.reduce_every_microbatch && stage_ >= 2 &&
                     k_ > 1),
        cost_model_(s.cost_model), optimizer_(update_optimizer(s.config)),
        layers_(s.model.layer_costs()),
        param_bytes_(parameter_wire_bytes(s.config)),
        buckets_(make_buckets(
            s.model.tensors(),
            static_cast<size_t>(s.config.sync.first_bucket_mb * 1048576.0),
            static_cast<size_t>(s.config.sync.bucket_mb * 1048576.0))) {
    const RunConfig w = wire_config(s.config);
    cast_ = w.compression.kind != "none";
    if (cast_) {
      format_ = w.compression.kind == "bf16" ? FloatFormat::kBf16
                                             : FloatFormat::kFp16;
      divide_ = w.compression.divide;
      fp32_sum_ = w.compression.accumulate == "fp32";
    }
    grad_bytes_ = cast_ ? 2.0 : 4.0;
    s.claim_replicas_identical(true);  // every rank gathers the same updated shards
    if (s.timing_only) {
      precision_.emplace_back(s.config);
      return;
    }
    if (every_micro_) {  // each micro-batch's own gradient, reduce-scattered as it ends (micro_batch_end)
      GS_EXPECT(s.gradients != nullptr, "sync.reduce_every_microbatch: the strategy runs without gradient events");
      s.gradients->subscribe(*this, GradientHooks::Gradient::kEachMicroBatch);
    }
    for (int r = 0; r < ranks_; ++r) {
      params_.push_back(ops_.allocate(r, per_ * static_cast<size_t>(ranks_)));
      gpad_.push_back(ops_.allocate(r, per_ * static_cast<size_t>(ranks_)));
      shard_.push_back(ops_.allocate(r, per_));
      if (every_micro_)
        acc_.push_back(ops_.allocate(r, per_));
      const auto [lo, hi] = range(r);
      optimizers_.push_back(make_optimizer(optimizer_, hi - lo, ops_, r));
      precision_.emplace_back(s.config);
    }
    wires_.assign(static_cast<size_t>(ranks_), nullptr);
    gathered_.resize(static_cast<size_t>(ranks_));
  }

  float *params(int rank) override {
    return params_[static_cast<size_t>(rank)].get();
  }
  const float *eval_params() override { return params_[0].get(); }
  float loss_scale(int rank) const override {
    return precision_[static_cast<size_t>(rank)].loss_scale();
  }

  // sync.reduce_every_microbatch: micro-batch k's gradient reduce-scattered at
  // once, the shard summed into the rank's accumulator in micro-batch order.
  void micro_batch_end(const MicroBatchEnd &e) override {
    const size_t r = static_cast<size_t>(e.rank);
    PhaseClock &clock = *e.clock;
    {
      TimedPhase t(ops_, e.rank, clock, Phase::kCommunicate);
      GS_NVTX_RANGE_BYTES(kCommunicate, n_ * sizeof(float));
      ops_.copy(e.rank, gpad_[r].get(), e.grad, n_);
      float *acc = acc_[r].get();
      float *out = e.micro_batch == 0 ? acc : shard_[r].get();
      comm_.reduce_scatter_sum(e.rank, out, gpad_[r].get(), per_);
      if (e.micro_batch > 0)
        ops_.add(e.rank, acc, out, per_);
    }
    account(e.rank, clock, true);
  }

  StrategyReport report(const ReportContext &) const override {
    StrategyReport r;
    r.precision = &precision_[0];
    return r;
  }

  void step(const StepInput &in) override {
    price(in);
    PhaseClock &clock = *in.clock;
    const size_t r = static_cast<size_t>(in.rank);
    const auto [lo, hi] = range(in.rank);
    const size_t len = hi - lo;
    float *shard = shard_[r].get();
    {
      TimedPhase t(ops_, in.rank, clock, Phase::kCommunicate);
      GS_NVTX_RANGE_BYTES(kCommunicate, n_ * sizeof(float));
      if (every_micro_) { // reduced micro-batch by micro-batch (micro_batch_end)
        ops_.copy(in.rank, shard, acc_[r].get(), per_);
      } else {
        ops_.copy(in.rank, gpad_[r].get(), in.grad, n_);
        if (cast_)
          reduce_scatter_cast(in, shard);
        else
          comm_.reduce_scatter_sum(in.rank, shard, gpad_[r].get(), per_);
      }
    }
    account(in.rank, clock, true);
    PrecisionStep &ps = precision_[r];
    bool applied = true;
    {
      GS_NVTX_RANGE(kOptimizer);
      TimedPhase t(ops_, in.rank, clock, Phase::kOptimizer);
      if (!cast_)
        ops_.divide(in.rank, shard, len, static_cast<float>(in.global_samples));
      if (!ps.needs_whole_gradient())
        applied = ps.before_update(ops_, in.rank, shard, len, in.step + 1,
                                   in.loss_nonfinite)
                      .applied;
    }
    if (ps.needs_whole_gradient()) {
      // The whole averaged gradient for the scaler's and clipping's decision
      // (see the file comment): gathered on the host, not counted on the wire.
      float *full = gpad_[r].get();
      comm_.all_gather(in.rank, full, shard, per_);
      account(in.rank, clock, false);
      TimedPhase t(ops_, in.rank, clock, Phase::kOptimizer);
      applied = ps.before_update(ops_, in.rank, full, n_, in.step + 1,
                                 in.loss_nonfinite)
                    .applied;
      ops_.copy(in.rank, shard, full + lo, len);
    }
    if (applied) {
      GS_NVTX_RANGE(kOptimizer);
      TimedPhase t(ops_, in.rank, clock, Phase::kOptimizer);
      Optimizer &opt = *optimizers_[r];
      float *p = params_[r].get() + lo;
      opt.step(p, shard, 0, len, in.lr, ps.update_count());
      ps.after_update(ops_, in.rank, p, opt, 0, len);
    }
    {
      TimedPhase t(ops_, in.rank, clock, Phase::kCommunicate);
      float *p = params_[r].get();
      comm_.all_gather(in.rank, p, p + static_cast<size_t>(in.rank) * per_,
                       per_);
    }
    account(in.rank, clock, true);
  }

  // The modeled step (docs/strategies.md, "zero"): one reduce-scatter per
  // bucket (the gradient's wire format), overlapped with backward as DDP's
  // buckets are; the optimizer and the precision passes over the rank's n / N
  // elements; stages 1 and 2: one all-gather of the updated parameters (n
  // elements in the compute format) after the optimizer, not overlapped; stage
  // 3: no post-step gather, but every micro-batch all-gathers each layer's
  // parameters before its forward and again before its backward, each gather
  // its own collective on the unshard stream (add_gathers).
  PriceKey price(const StepInput &in) const override {
    if (in.cost == nullptr)
      return {};
    StepCost &cost = *in.cost;
    // reduce_every_microbatch: every micro-batch's buckets, each ready during
    // its own backward (GradRange::micro_batch); else the step's sum's.
    for (int64_t k = every_micro_ ? 0 : -1; k < (every_micro_ ? k_ : 0); ++k)
      for (const Bucket &b : buckets_)
        cost.add_collective(CollectiveKind::kReduceScatter,
                            grad_bytes_ * static_cast<double>(b.end - b.begin),
                            GradRange{b.begin, b.end, k});
    const double shard = static_cast<double>(per_);
    if (cost_model_ != nullptr)
      cost_model_->add_optimizer(cost, optimizer_, shard);
    const PrecisionStep &ps =
        precision_[precision_.size() == 1 ? 0 : static_cast<size_t>(in.rank)];
    ps.price(cost, shard);
    if (ps.needs_whole_gradient())
      cost.add_collective(CollectiveKind::kAllReduce,
                          8.0); // overflow flag, norm^2
    if (ranks_ <= 1)
      return {};
    if (stage_ < 3) {
      cost.add_collective(CollectiveKind::kAllGather,
                          param_bytes_ * static_cast<double>(n_));
      return {};
    }
    add_gathers(cost);
    return {};
  }

private:
  // [lo, hi) of the parameters rank `rank` owns.
  std::pair<size_t, size_t> range(int rank) const {
    const size_t lo = std::min(n_, per_ * static_cast<size_t>(rank));
    return {lo, std::min(n_, lo + per_)};
  }

  // Stage 3's FSDP units: the model's layers (LayerCost), each with its
  // parameters [begin, end) and its share of a pass's compute by declared
  // FLOPs (parameters when none declare FLOPs); one unit of the whole model
  // when there are no layers.
  struct Unit {
    size_t begin = 0, end = 0;
    double share = 0.0; // fraction of the pass's compute
  };
  std::vector<Unit> units() const {
    std::vector<Unit> u;
    bool flops = false;
    for (const LayerCost &l : layers_)
      flops = flops || l.forward_flops_per_sample > 0;
    double total = 0.0;
    for (const LayerCost &l : layers_) {
      const double len = static_cast<double>(l.param_end - l.param_begin);
      u.push_back({l.param_begin, l.param_end,
                   flops ? l.forward_flops_per_sample : len});
      total += u.back().share;
    }
    if (u.empty() || total <= 0)
      return {Unit{0, n_, 1.0}};
    for (Unit &x : u)
      x.share /= total;
    return u;
  }

  // Stage 3, every micro-batch: the forward's and the backward's parameter
  // all-gathers, one per unit (layer) with parameters, each priced at its own
  // size on the unshard stream (StepCost::add_unshard_gather; FSDP's unshard
  // stream; this schedule alone prices the link as its own: the modeled clock
  // re-places each gather sharing the link with the reduce-scatters, CostModel
  // share_link). Unit i's compute is its
  // share of the micro-batch's forward (backward). Rule (FSDP forward_prefetch /
  // backward_prefetch BACKWARD_PRE with limit_all_gathers, one unit ahead): the
  // gather of unit i+1 starts when unit i's compute starts and the previous
  // gather is done; unit i computes once its gather is done and unit i-1 is
  // computed; the compute stream's wait for it is the gather's exposed part
  // (UnshardSlot::stall_s), the rest of its time runs under compute. The
  // backward runs the units in reverse. Straggler factor 1 here (the modeled
  // clock re-places the gathers at the rank's factor).
  void add_gathers(StepCost &cost) const {
    const CollectiveModel &coll = cost.collectives();
    const std::vector<Unit> u = units();
    std::vector<double> ag;
    for (const Unit &x : u) {
      const double len = static_cast<double>(x.end - x.begin);
      ag.push_back(
          len > 0 ? coll.best(CollectiveKind::kAllGather, param_bytes_ * len)
                        .time_s
                  : 0.0);
    }
    const int64_t k = std::max<int64_t>(1, cost.micro_batches);
    const double kd = static_cast<double>(k);
    const double pass_s[2] = {
        cost.compute_s[static_cast<size_t>(Phase::kForward)] / kd,
        cost.compute_s[static_cast<size_t>(Phase::kBackward)] / kd};
    for (int64_t mb = 0; mb < k; ++mb)
      for (const bool backward : {false, true}) {
        const size_t m = u.size();
        double comp_end = 0.0, ag_end = 0.0, prev_start = 0.0, done = 0.0,
               issue_after = 0.0;
        for (size_t j = 0; j < m; ++j) {
          const size_t i = backward ? m - 1 - j : j;
          UnshardSlot slot;
          slot.backward = backward;
          slot.unit = i;
          slot.compute_before = done;
          slot.issue_after = issue_after;
          // Issued when unit j-1 started (unit 0: at once) and gather j-1 is done.
          slot.start_s = std::max(ag_end, prev_start);
          ag_end = slot.start_s + ag[i];
          const double start = std::max(comp_end, ag_end);
          slot.stall_s = start - comp_end;
          prev_start = start;
          comp_end = start + pass_s[backward ? 1 : 0] * u[i].share;
          issue_after = done;  // the next gather is issued when this unit starts
          done += u[i].share;
          if (u[i].end > u[i].begin)
            cost.add_unshard_gather(
                param_bytes_ * static_cast<double>(u[i].end - u[i].begin),
                GradRange{u[i].begin, u[i].end, mb}, slot);
        }
      }
  }

  // The cast reduce-scatter: every rank casts its mean gradient
  // (cast_wire_value, as the cast all-reduce does) into its padded buffer and
  // publishes it; the owner of each shard sums its elements over ranks 0..N-1
  // in the format (or fp32), then post-divides: the cast all-reduce's bits on
  // the shard. Across processes (mpirun) the other processes' buffers are not
  // in this one: every rank all-gathers every rank's cast buffer instead (N x
  // the padded gradient per rank; bookkeeping: the bytes counted are the same).
  // A device memory takes the all-gather path too (a rank cannot read another
  // device's buffer); every element operation goes through the memory
  // (CompressOps::cast_encode, add_in_format, post_divide_in_format).
  void reduce_scatter_cast(const StepInput &in, float *shard) {
    const size_t r = static_cast<size_t>(in.rank);
    const double N = static_cast<double>(ranks_);
    const auto [pre, post] = cast_divisors(divide_, ranks_);
    const float bf = static_cast<float>(in.global_samples / N);
    CompressOps &cops = compress_ops_of(ops_);
    float *wire = gpad_[r].get();
    cops.cast_encode(in.rank, wire, nullptr, wire, n_, format_, bf, pre, 0.0);
    std::vector<const float *> wires(static_cast<size_t>(ranks_));
    const bool gather = across_processes_ || !ops_.host();
    if (gather) {
      const size_t padded = gpad_[r].size();
      FloatBuffer &all = gathered_[r];
      if (all.size() < padded * static_cast<size_t>(ranks_))
        all = ops_.allocate(in.rank, padded * static_cast<size_t>(ranks_));
      comm_.all_gather(in.rank, all.get(), wire, padded);
      for (size_t q = 0; q < wires.size(); ++q)
        wires[q] = all.get() + q * padded;
    } else {
      wires_[r] = wire;
      comm_.barrier(in.rank);
      for (size_t q = 0; q < wires.size(); ++q)
        wires[q] = wires_[q];
    }
    // The shard's elements summed over ranks 0..N-1 as the cast all-reduce
    // sums them.
    const auto [lo, hi] = range(in.rank);
    for (const float *&w : wires)
      w += lo;
    sum_cast_wires(ops_, in.rank, shard, wires, hi - lo, format_, fp32_sum_,
                   post);
    if (!gather)
      comm_.barrier(in.rank); // every owner has read the buffers
    comm_.take_stats(in.rank);
    in.clock->add_bytes(static_cast<uint64_t>((N - 1) / N * 2.0 *
                                              static_cast<double>(per_) * N));
  }

  void account(int rank, PhaseClock &clock, bool count_bytes) {
    CommStats st = comm_.take_stats(rank);
    clock.move(Phase::kCommunicate, Phase::kWait, st.wait_s);
    if (count_bytes)
      clock.add_bytes(st.bytes_sent);
  }

  // Under fp16_pure without a compressor the gradients are fp16 already: the
  // wire is the fp16 cast (as allreduce).
  static RunConfig wire_config(const RunConfig &c) {
    RunConfig w = c;
    if (w.precision.mode == "fp16_pure" && w.compression.kind == "none")
      w.compression.kind = "fp16";
    return w;
  }

  Communicator &comm_;
  ElementOps &ops_; // the memory of the buffers below and the optimizers' state
  int ranks_;
  size_t n_;
  size_t per_; // elements per partition (padded)
  int stage_;
  int64_t k_;          // micro-batches per step
  bool every_micro_;   // sync.reduce_every_microbatch in effect (stage >= 2, K > 1)
  const CostModel *cost_model_;
  OptimizerConfig optimizer_;
  std::vector<LayerCost> layers_;
  double param_bytes_;
  double grad_bytes_ = 4.0;
  std::vector<Bucket> buckets_;
  bool cast_ = false;
  FloatFormat format_ = FloatFormat::kFp16;
  std::string divide_ = "pre";
  bool fp32_sum_ = false;
  std::vector<FloatBuffer>
      params_; // per rank: the gathered parameters (padded to N x per)
  std::vector<FloatBuffer>
      gpad_; // per rank: the padded gradient (and the cast wire values)
  std::vector<FloatBuffer>
      shard_; // per rank: its averaged gradient shard
  std::vector<FloatBuffer>
      acc_; // reduce_every_microbatch, per rank: its shard's sum so far
  std::vector<std::unique_ptr<Optimizer>>
      optimizers_; // per rank: state for its shard only
  std::vector<PrecisionStep> precision_;
  std::vector<float *> wires_; // cast: each rank's published wire buffer
  bool across_processes_ = process_group().size() > 1; // mpirun
  std::vector<FloatBuffer> gathered_; // cast across processes or on a device: [rank] every rank's buffer
};

std::unique_ptr<SyncStrategy> make(const StrategySetup& setup) { return std::make_unique<Zero>(setup); }

// ZeRO reduce-scatters in fp32 or a cast format (no other compressor, no error feedback); reducing every micro-batch
// needs sharded gradients (stage 2 or 3), reduced in fp32.
void zero_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  if (c.sync.reduce_every_microbatch) {
    const std::string path = "sync.reduce_every_microbatch";
    if (c.sync.stage < 2)
      issues.push_back({path, "true needs sharded gradients, sync.stage 2 or 3 (stage 1 keeps the whole gradient on "
                              "every rank and reduces it once per accumulation window, as DeepSpeed's stage 1 does), "
                              "got sync.stage 1"});
    if (c.compression.kind != "none")
      issues.push_back({path, fmt::format("true reduce-scatters each micro-batch in fp32; with compression.kind "
                                          "\"{}\" use false (one cast reduce-scatter per step)", c.compression.kind)});
    else if (c.precision.mode == "fp16_pure")
      issues.push_back({path, "true reduce-scatters each micro-batch in fp32; precision.mode \"fp16_pure\" sends "
                              "fp16 gradients: use false (one fp16 reduce-scatter per step)"});
  }
  const CompressionConfig& cp = c.compression;
  if (cp.kind != "none" && cp.kind != "fp16" && cp.kind != "bf16")
    issues.push_back({"compression.kind", fmt::format("sync.kind \"zero\" reduce-scatters its gradients in fp32 or in "
                                                      "a cast format (communication_data_type): use \"none\", "
                                                      "\"fp16\" or \"bf16\" (it is \"{}\")", cp.kind)});
  else if (cp.error_feedback != "none")
    issues.push_back({"compression.error_feedback", fmt::format("\"{}\": sync.kind \"zero\" casts without error "
                                                                "feedback (use \"none\")", cp.error_feedback)});
}

}  // namespace

StrategyEntry zero_strategy() {
  return {"zero", "ZeRO / FSDP: gradients reduce-scattered, each rank updates its 1/N shard (optimizer state sharded; "
                  "sync.stage 2 and 3 also shard gradients and parameters), parameters all-gathered; bit-identical to "
                  "allreduce, GPU memory and modeled clock per stage",
          make, join_options({"sync.stage", "sync.reduce_every_microbatch"}, kBucketOptions, kCastOptions), zero_issues};
}

} // namespace gs
