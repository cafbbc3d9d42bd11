// `allreduce`: bulk-synchronous data parallelism (docs/design.md, section 2): the AllReduce strategy (bucketed
// all-reduce of the gradient sums, divided by S, the same optimizer step on every rank), with its shared-buffer fast
// path, compressed reductions and delayed updates (sync.staleness).
#include <algorithm>

#include <fmt/format.h>

#include "kernels/nvtx.h"
#include "sim/compress/modeled.h"
#include "sim/compress/reduce.h"

#include "sim/core/element_ops.h"
#include "sim/core/error.h"
#include "sim/optim/optimizer.h"
#include "sim/strategy/strategy.h"

namespace gs {
namespace {

constexpr size_t kTileElems = 4096;

// Extend: a new wire encoding is a compressor (sim/compress/registry.cpp); a new rule for applying the averaged
// gradient goes into apply_update.
// With cluster.share_identical (host backend) the ranks hold one shared parameter buffer and optimizer: each rank
// reduces its 1/N slice of the gradients straight into a shared buffer (same order, same bits) and updates that slice,
// so the N identical copies and N identical optimizer passes are done once. Results are bit-for-bit the same.
// With compression (compression.kind other than "none") the communication is CompressedReduction's
// (sim/compress/reduce.cpp) and the shared fast path is off: lossy compressors keep per-rank residuals and state.
// Delayed update (sync.staleness s > 0): the step-t update applies the averaged gradient of step t - s, kept in a ring
// of s averaged gradients (with the rank's own gradient buffer, s + 1 buffers); steps t < s apply nothing and the last
// s gradients are never applied. The gradient of a step is reduced, then unscaled, checked and clipped (PrecisionStep)
// in that step, with the loss scale its backward used; the scaler's skip drops that gradient from the ring, and the
// optimizer later applies it at the step's learning rate with t = updates applied so far. Error feedback and other
// compressor state work on what is sent, so they are unchanged by when the result is applied. The shared fast path
// keeps one shared ring. sync.overlap false changes the modeled clock only (no bucket overlaps backward).
// Memory: the replicated path (uncompressed) runs every element operation through the run's ElementOps
// (StrategySetup::memory(): host loops, or a backend's device memory when host_memory_reason is empty: parameters,
// gradients, ring and optimizer state on the device, the communicator reducing device buffers); the shared fast path
// is host loops and runs on host memory only; the compressed reduction runs on the same memory through its
// CompressOps for the kinds whose CompressorEntry::element_ops is true (the others: host memory only).
// On the host a collective blocks its rank thread, so the buckets are reduced after the micro-batches; where the
// communicator starts them asynchronously (a device) the strategy subscribes to the gradient-ready events and starts
// each bucket as the last micro-batch's backward finishes its layers (as DDP; not with sync.overlap false or injected
// stragglers, whose delay comes before the rank's communication). The modeled clock prices the overlap either way.
class AllReduce final : public SyncStrategy, private GradientSubscriber {
 public:
  explicit AllReduce(const StrategySetup& s)
      : comm_(s.comm),
        ops_(s.memory()),
        ranks_(s.ranks),
        n_(s.model.num_params()),
        shared_(ops_.host() && s.config.cluster.share_identical && !PrecisionStep(s.config).needs_whole_gradient() &&
                wire_config(s.config).compression.kind == "none"),
        staleness_(static_cast<size_t>(s.config.sync.staleness)),
        overlap_(s.config.sync.overlap),
        cost_model_(s.cost_model),
        wire_bytes_(gradient_wire_bytes(s.config)),
        optimizer_(update_optimizer(s.config)),
        buckets_(make_buckets(s.model.tensors(), static_cast<size_t>(s.config.sync.first_bucket_mb * 1048576.0),
                              static_cast<size_t>(s.config.sync.bucket_mb * 1048576.0))) {
    wire_config_ = wire_config(s.config);
    s.claim_replicas_identical(true);  // every rank applies the same averaged gradient
    if (s.timing_only) {  // timing-only: price alone, no buffers (one precision step prices its passes)
      precision_.emplace_back(s.config);
      std::vector<std::pair<size_t, size_t>> ranges;
      for (const Bucket& b : buckets_) ranges.emplace_back(b.begin, b.end);
      modeled_ = modeled_reduction(wire_config_.compression, ranges, n_, ranks_, &s.model.tensors());
      return;
    }
    if (wire_config_.compression.kind != "none") {
      std::vector<std::pair<size_t, size_t>> ranges;
      for (const Bucket& b : buckets_) ranges.emplace_back(b.begin, b.end);
      compressed_ = std::make_unique<CompressedReduction>(wire_config_, s.model, s.comm, s.ranks, ranges, ops_);
    }
    // One buffer set per optimizer: one shared (rank 0's memory), or one per rank.
    const int owners = shared_ ? 1 : ranks_;
    for (int r = 0; r < owners; ++r) {
      params_.push_back(ops_.allocate(r, n_));
      optimizers_.push_back(make_optimizer(update_optimizer(s.config), n_, ops_, r));
    }
    if (shared_) {
      grads_.assign(static_cast<size_t>(ranks_), nullptr);
      if (staleness_ == 0) reduced_.resize(n_);
    }
    // The ring of delayed gradients: one per optimizer (one shared, or one per rank).
    ring_.resize(staleness_ == 0 ? 0 : optimizers_.size());
    for (size_t r = 0; r < ring_.size(); ++r) {
      for (size_t k = 0; k < staleness_; ++k) ring_[r].grad.push_back(ops_.allocate(static_cast<int>(r), n_));
      ring_[r].skipped.assign(staleness_, 0);
    }
    // One loss scale for all ranks: each rank keeps a copy that sees the same reduced gradient, so all copies take
    // the same decisions (one shared copy in shared mode, where no scaler or clipping runs).
    for (size_t r = 0; r < optimizers_.size(); ++r) precision_.emplace_back(s.config);
    started_.assign(static_cast<size_t>(ranks_), 0);
    if (s.gradients != nullptr && comm_.starts_asynchronously() && overlap_ && !compressed_ && !shared_ &&
        !s.config.cluster.stragglers.inject)
      s.gradients->subscribe(*this);
  }

  float* params(int rank) override { return params_[shared_ ? 0 : static_cast<size_t>(rank)].get(); }
  const float* eval_params() override { return params_[0].get(); }
  float loss_scale(int rank) const override { return precision_[shared_ ? 0 : static_cast<size_t>(rank)].loss_scale(); }
  // The report follows rank 0's precision step (under all-reduce every rank's decides alike). Compression: what the
  // reduction measured, or in timing-only runs (no CompressedReduction) the buckets' modeled prices over the steps
  // (sim/compress/modeled.h).
  StrategyReport report(const ReportContext& context) const override {
    StrategyReport r;
    r.precision = &precision_[0];
    const CompressionConfig& cc = wire_config_.compression;
    if (compressed_) {
      r.compression = compressed_->report();
    } else if (cc.kind != "none") {
      r.compression = modeled_compression_report(cc, modeled_, context.steps);
    }
    return r;
  }

  // Across processes: the compressed reduction's per-rank records (the uncompressed path keeps none).
  void gather_ranks(ProcessGroup& group, int first_rank, int local_ranks) override {
    if (compressed_) compressed_->gather_ranks(group, first_rank, local_ranks);
  }

  void step(const StepInput& in) override {
    price(in);
    if (shared_) {
      if (staleness_ == 0) {
        step_shared(in);
      } else {
        step_shared_delayed(in);
      }
    } else {
      step_replicated(in);
    }
  }

 private:
  // The modeled step: one all-reduce per bucket (fp32 gradients), overlapped with backward, then the optimizer.
  PriceKey price(const StepInput& in) const override {
    const CompressionConfig& cc = wire_config_.compression;
    // Steps whose buckets price differently (PowerSGD's dense steps before its start_step) price apart.
    const PriceKey key{compression_price_class(cc, in.step), 0};
    if (in.cost == nullptr) return key;
    in.cost->overlap_backward = overlap_;
    in.cost->deferred_steps = static_cast<int64_t>(staleness_);
    if (compressed_) {
      // Training runs: CompressedReduction prices each bucket while it reduces it (price_compressed_bucket).
    } else if (cc.kind != "none") {
      // Timing-only runs: every bucket priced from its shape alone, as CompressedReduction prices it.
      add_modeled_reduction(*in.cost, cc, modeled_, in.step);
    } else {
      for (const Bucket& b : buckets_)
        in.cost->add_collective(CollectiveKind::kAllReduce, wire_bytes_ * static_cast<double>(b.end - b.begin),
                                GradRange{b.begin, b.end});
    }
    if (cost_model_ != nullptr) cost_model_->add_optimizer(*in.cost, optimizer_, static_cast<double>(n_));
    precision_[precision_.size() == 1 ? 0 : static_cast<size_t>(in.rank)].price(*in.cost, static_cast<double>(n_));
    return key;
  }

  // Bytes a ring all-reduce of the whole gradient puts on the wire per rank (nccl-tests: 2(n-1)/n * size).
  uint64_t allreduce_bytes() const {
    return ranks_ <= 1 ? 0 : static_cast<uint64_t>(2.0 * (ranks_ - 1) / ranks_ * static_cast<double>(n_) * 4.0);
  }

  // A bucket of the step's gradient sum `grad` starts its all-reduce (in place).
  void start_bucket(int rank, float* grad, const Bucket& b) {
    GS_NVTX_RANGE_BYTES(kCommunicate, (b.end - b.begin) * sizeof(float));
    comm_.all_reduce_sum_start(rank, grad + b.begin, b.end - b.begin);
  }

  // Subscribed where buckets start asynchronously: every bucket whose elements the last micro-batch's backward has
  // finished starts now (buckets run from the last layers to the first, as the layers are announced).
  void layer_ready(const LayerReady& e) override {
    if (!e.final) return;
    size_t& next = started_[static_cast<size_t>(e.rank)];
    for (; next < buckets_.size() && buckets_[next].begin >= e.begin; ++next) start_bucket(e.rank, e.grad, buckets_[next]);
  }

  // The bucket all-reduces of the step not started during backward (all of them on the host), then their wait;
  // `communicate` from the end of the micro-batches (the exposed part), this rank's wait for the others moved out of
  // it, its wire bytes counted.
  void reduce_buckets(const StepInput& in) {
    PhaseClock& clock = *in.clock;
    size_t& next = started_[static_cast<size_t>(in.rank)];
    {
      TimedPhase t(ops_, in.rank, clock, Phase::kCommunicate);
      comm_.group_begin(in.rank);
      for (; next < buckets_.size(); ++next) start_bucket(in.rank, in.grad, buckets_[next]);
      comm_.group_end(in.rank);
      comm_.all_reduce_wait(in.rank);
    }
    next = 0;
    const CommStats st = comm_.take_stats(in.rank);
    clock.move(Phase::kCommunicate, Phase::kWait, st.wait_s);
    clock.add_bytes(st.bytes_sent);
  }

  void step_replicated(const StepInput& in) {
    PhaseClock& clock = *in.clock;
    if (compressed_) {
      // Compressed communication: in.grad becomes the average over the step's samples.
      // The precision step (loss-scale unscale/check/skip, clipping) runs on that average as without compression;
      // error-feedback residuals stay in the loss-scaled units of the step that made them.
      compressed_->reduce(in.rank, in.step, in.grad, in.global_samples, clock, in.cost);
      GS_NVTX_RANGE(kOptimizer);
      TimedPhase t(ops_, in.rank, clock, Phase::kOptimizer);
      deliver(in.rank, in.grad, in.lr, in.step, in.loss_nonfinite);
      return;
    }
    reduce_buckets(in);
    GS_NVTX_RANGE(kOptimizer);
    TimedPhase t(ops_, in.rank, clock, Phase::kOptimizer);
    ops_.divide(in.rank, in.grad, n_, static_cast<float>(in.global_samples));
    deliver(in.rank, in.grad, in.lr, in.step, in.loss_nonfinite);
  }

  // The averaged gradient g of `step` has arrived on `rank`: applied now (s = 0), or checked now and applied s steps
  // later through the ring.
  // loss_nonfinite: the step's training loss (every rank's) was inf/NaN: an active scaler skips it as a non-finite
  // gradient.
  void deliver(int rank, float* g, double lr, int64_t step, bool loss_nonfinite) {
    if (staleness_ == 0) return apply_update(rank, g, lr, step, loss_nonfinite);
    PrecisionStep& ps = precision_[static_cast<size_t>(rank)];
    // Unscale / check / clip with this step's loss scale; the scaler decides now whether this gradient counts.
    const bool ok = ps.before_update(ops_, rank, g, n_, step + 1, loss_nonfinite).applied;
    Ring& ring = ring_[static_cast<size_t>(rank)];
    const size_t slot = static_cast<size_t>(step) % staleness_;  // holds the gradient of step - s
    float* old = ring.grad[slot].get();
    if (static_cast<size_t>(step) >= staleness_ && ring.skipped[slot] == 0) {
      Optimizer& opt = *optimizers_[static_cast<size_t>(rank)];
      ++ring.applied;
      opt.step(params(rank), old, 0, n_, lr, ring.applied);
      ps.after_update(ops_, rank, params(rank), opt, 0, n_);
    }
    ops_.copy(rank, old, g, n_);
    ring.skipped[slot] = ok ? 0 : 1;
  }

  // The optimizer-update part of a replicated step on the averaged gradient g: loss-scale unscale / check / skip and
  // clipping (PrecisionStep), then the rank's optimizer, then fp16 storage rounding (fp16_pure).
  void apply_update(int rank, float* g, double lr, int64_t step, bool loss_nonfinite) {
    PrecisionStep& ps = precision_[static_cast<size_t>(rank)];
    if (!ps.before_update(ops_, rank, g, n_, step + 1, loss_nonfinite).applied) return;  // skipped: inf/NaN, scaler
    Optimizer& opt = *optimizers_[static_cast<size_t>(rank)];
    opt.step(params(rank), g, 0, n_, lr, ps.update_count());
    ps.after_update(ops_, rank, params(rank), opt, 0, n_);
  }

  void step_shared(const StepInput& in) {
    PhaseClock& clock = *in.clock;
    grads_[static_cast<size_t>(in.rank)] = in.grad;
    // One range over the fused reduce-and-update of this rank's slice (the whole gradient is one bucket here; the
    // optimizer update runs inside it, tile by tile).
    GS_NVTX_RANGE_BYTES(kCommunicate, n_ * sizeof(float));
    double t0 = now_s();
    comm_.barrier(in.rank);  // every rank's gradient is published
    double t1 = now_s();
    clock.add(Phase::kWait, t1 - t0);
    // This rank's slice, aligned to 16 floats.
    size_t per = ((n_ + static_cast<size_t>(ranks_) - 1) / static_cast<size_t>(ranks_) + 15) / 16 * 16;
    size_t lo = std::min(n_, per * static_cast<size_t>(in.rank));
    size_t hi = std::min(n_, lo + per);
    const float s = static_cast<float>(in.global_samples);
    double comm_s = 0.0, opt_s = 0.0;
    for (size_t a = lo; a < hi; a += kTileElems) {
      size_t e = std::min(hi, a + kTileElems);
      double ta = now_s();
      float* out = reduced_.data();
      const float* g0 = grads_[0];
      for (size_t i = a; i < e; ++i) out[i] = g0[i];
      for (int r = 1; r < ranks_; ++r) {
        const float* g = grads_[static_cast<size_t>(r)];
        for (size_t i = a; i < e; ++i) out[i] += g[i];
      }
      for (size_t i = a; i < e; ++i) out[i] = out[i] / s;
      double tb = now_s();
      precision_[0].round_gradient(out, a, e);  // fp16_pure: the averaged gradient in fp16
      optimizers_[0]->step(params_[0].get(), out, a, e, in.lr, in.step + 1);
      precision_[0].after_update(params_[0].get(), *optimizers_[0], a, e);  // fp16_pure storage (no scaler here)
      double tc = now_s();
      comm_s += tb - ta;
      opt_s += tc - tb;
    }
    clock.add(Phase::kCommunicate, comm_s);
    clock.add(Phase::kOptimizer, opt_s);
    clock.add_bytes(allreduce_bytes());
    double t2 = now_s();
    comm_.barrier(in.rank);  // every slice is updated before anyone reads the parameters again
    clock.add(Phase::kWait, now_s() - t2);
    comm_.take_stats(in.rank);  // barriers are bookkeeping here, not traffic
  }

  // step_shared with staleness s > 0: each rank, on its slice, first applies the shared ring's gradient of step t - s
  // (from t = s on), then writes the averaged gradient of step t into the same ring slot (same sum order and bits as
  // the replicated path; no scaler or clipping runs here, so nothing is skipped and the optimizer's t is t - s + 1).
  void step_shared_delayed(const StepInput& in) {
    PhaseClock& clock = *in.clock;
    grads_[static_cast<size_t>(in.rank)] = in.grad;
    GS_NVTX_RANGE_BYTES(kCommunicate, n_ * sizeof(float));  // fused with the update, as in step_shared
    double t0 = now_s();
    comm_.barrier(in.rank);  // every rank's gradient is published
    clock.add(Phase::kWait, now_s() - t0);
    size_t per = ((n_ + static_cast<size_t>(ranks_) - 1) / static_cast<size_t>(ranks_) + 15) / 16 * 16;
    size_t lo = std::min(n_, per * static_cast<size_t>(in.rank));
    size_t hi = std::min(n_, lo + per);
    const float s = static_cast<float>(in.global_samples);
    float* slot = ring_[0].grad[static_cast<size_t>(in.step) % staleness_].get();
    const bool apply = static_cast<size_t>(in.step) >= staleness_;
    const int64_t t = in.step - static_cast<int64_t>(staleness_) + 1;  // updates applied including this one
    double comm_s = 0.0, opt_s = 0.0;
    for (size_t a = lo; a < hi; a += kTileElems) {
      size_t e = std::min(hi, a + kTileElems);
      double ta = now_s();
      if (apply) {
        optimizers_[0]->step(params_[0].get(), slot, a, e, in.lr, t);
        precision_[0].after_update(params_[0].get(), *optimizers_[0], a, e);
      }
      double tb = now_s();
      const float* g0 = grads_[0];
      for (size_t i = a; i < e; ++i) slot[i] = g0[i];
      for (int r = 1; r < ranks_; ++r) {
        const float* g = grads_[static_cast<size_t>(r)];
        for (size_t i = a; i < e; ++i) slot[i] += g[i];
      }
      for (size_t i = a; i < e; ++i) slot[i] = slot[i] / s;
      precision_[0].round_gradient(slot, a, e);  // fp16_pure: the averaged gradient in fp16
      double tc = now_s();
      opt_s += tb - ta;
      comm_s += tc - tb;
    }
    clock.add(Phase::kCommunicate, comm_s);
    clock.add(Phase::kOptimizer, opt_s);
    clock.add_bytes(allreduce_bytes());
    double t2 = now_s();
    comm_.barrier(in.rank);  // every slice is updated before anyone reads the parameters again
    clock.add(Phase::kWait, now_s() - t2);
    comm_.take_stats(in.rank);
  }

  // The configuration the reduction follows: under fp16_pure without a compressor the gradients are fp16 already, so
  // the wire is the fp16 cast (sum in fp16 in rank order, docs/design.md, section 2); otherwise the run's own.
  static RunConfig wire_config(const RunConfig& c) {
    RunConfig w = c;
    if (w.precision.mode == "fp16_pure" && w.compression.kind == "none") w.compression.kind = "fp16";
    return w;
  }

  // Delayed gradients of one optimizer: slot t % s holds the averaged gradient of step t - s between steps.
  struct Ring {
    std::vector<FloatBuffer> grad;
    std::vector<char> skipped;  // the loss scaler skipped that gradient (inf/NaN): it is never applied
    int64_t applied = 0;        // updates applied so far (the optimizer's t)
  };

  Communicator& comm_;
  ElementOps& ops_;  // the memory of params_, ring_ and the optimizers' state (host, or a device's)
  int ranks_;
  size_t n_;
  bool shared_;
  size_t staleness_;  // sync.staleness
  bool overlap_;      // sync.overlap (modeled clock only)
  const CostModel* cost_model_;
  double wire_bytes_;  // bytes per gradient element on the wire (precision: 2 under fp16_pure)
  OptimizerConfig optimizer_;
  std::vector<Bucket> buckets_;
  std::vector<FloatBuffer> params_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;
  std::vector<PrecisionStep> precision_;  // one per optimizer: loss scaler, clipping, fp16 storage
  std::vector<float*> grads_;   // shared mode: each rank's gradient of the current step
  std::vector<float> reduced_;  // shared mode: the averaged gradient
  std::vector<Ring> ring_;      // staleness > 0: one per optimizer
  std::vector<size_t> started_;  // per rank: buckets of the step started so far (during backward, then in step)
  RunConfig wire_config_;                            // read by compressed_ (it keeps a reference)
  std::unique_ptr<CompressedReduction> compressed_;  // compression.kind != "none" (or fp16_pure's fp16 wire)
  ModeledReduction modeled_;                         // timing-only runs: what price_compressed_bucket prices
};

std::unique_ptr<SyncStrategy> make(const StrategySetup& setup) { return std::make_unique<AllReduce>(setup); }

// A delayed all-reduce applies its first update at step staleness + 1: it must come within the run.
void allreduce_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  const SyncConfig& sy = c.sync;
  if (sy.staleness > 0 && sy.staleness != kStalenessInf && c.training.epochs == 0 && sy.staleness >= c.training.steps)
    issues.push_back({"sync.staleness", fmt::format("expected fewer than training.steps ({}): with staleness {} the "
                                                    "first update is applied at step {}, so the run would never "
                                                    "update the parameters",
                                                    c.training.steps, sy.staleness, sy.staleness + 1)});
}

}  // namespace

StrategyEntry allreduce_strategy() {
  return {"allreduce", "bulk-synchronous data parallel: bucketed all-reduce (sum) of gradients, divided by the step's "
                       "sample count; replicas stay bit-identical",
          make, join_options({"sync.staleness", "sync.overlap"}, kBucketOptions, kCastOptions), allreduce_issues};
}

}  // namespace gs
