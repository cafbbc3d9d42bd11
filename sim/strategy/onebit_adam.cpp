// training.optimizer.kind "onebit_adam": the OnebitAdam strategy (DeepSpeed's 1-bit Adam as a sync strategy, because
// it owns the communication) and the pieces onebit_adam.h declares (compressed all-reduce, pricing, report, Adam), on
// the buffers of the run's memory through its ElementOps and CompressOps (host loops or a device's kernels).
#include "sim/strategy/onebit_adam.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "kernels/nvtx.h"
#include "sim/compress/compressor.h"
#include "sim/core/clock.h"
#include "sim/core/error.h"
#include "sim/core/summary.h"
#include "sim/strategy/bucket_all_reduce.h"
#include "sim/strategy/strategy.h"

namespace gs {

size_t onebit_padded_elements(size_t n, int ranks) {
  const size_t size = static_cast<size_t>(std::max(1, ranks));
  const size_t divider = size * 8 / std::gcd(size, static_cast<size_t>(8));
  const size_t unit = size * divider;
  return n % unit == 0 ? n : n + (unit - n % unit);
}

bool onebit_non_freeze(const OptimizerConfig& o, const TensorInfo& t) {
  if (!o.uncompressed_tensors.is_array()) return false;
  for (const nlohmann::json& x : o.uncompressed_tensors)
    if (x.is_string() && (x.get<std::string>() == t.name || x.get<std::string>() == t.file_name())) return true;
  return false;
}

OnebitPhase onebit_phase(int64_t step_1based, int64_t freeze_step) {
  if (step_1based <= 1) return OnebitPhase::kInit;
  return step_1based <= std::max<int64_t>(freeze_step, 2) ? OnebitPhase::kWarmup : OnebitPhase::kCompressed;
}

double onebit_wire_bytes(size_t padded, int ranks) {
  if (ranks <= 1) return 0.0;
  const double N = ranks, bits = static_cast<double>(padded) / 8.0;
  return 2.0 * (N - 1.0) / N * bits + 2.0 * (N - 1.0) * 4.0;
}

void OnebitBuffers::make_errors(ElementOps& memory, int rank, size_t padded, int ranks) {
  worker_error = memory.allocate(rank, padded);
  server_error = memory.allocate(rank, padded / static_cast<size_t>(ranks));
}

void timed_onebit_compressed_allreduce(Communicator& comm, ElementOps& memory, PhaseClock& clock, int rank, int ranks,
                                       float* m, size_t n, size_t padded, OnebitBuffers& b, OnebitNorms* norms) {
  if (!b.has_errors()) b.make_errors(memory, rank, padded, ranks);
  {
    GS_NVTX_RANGE(kCompress);
    TimedPhase t(memory, rank, clock, Phase::kCompress);
    onebit_compressed_allreduce(comm, memory, rank, m, n, b, norms);
  }
  const CommStats st = comm.take_stats(rank);
  clock.move(Phase::kCompress, Phase::kWait, st.wait_s);
  clock.add_bytes(static_cast<uint64_t>(onebit_wire_bytes(padded, ranks)));
}

namespace {

// A buffer of `n` floats of `memory` for rank `rank`, made when missing (the compressed all-reduce's workspace).
float* room(ElementOps& memory, int rank, FloatBuffer& b, size_t n) {
  if (b.size() != n) b = memory.allocate(rank, n);
  return b.get();
}

nlohmann::json summary(const std::vector<double>& v) {
  const Summary s = summarize(v);
  return {{"count", s.count}, {"p50", s.p50}, {"max", s.max}, {"mean", s.mean}, {"last", v.back()}};
}

nlohmann::json ms_summary(const std::vector<double>& seconds) {
  const Summary s = summarize(seconds);
  return {{"count", s.count}, {"p50_ms", s.p50 * 1e3}, {"mean_ms", s.mean * 1e3}, {"total_ms", s.total * 1e3}};
}

}  // namespace

void onebit_compressed_allreduce(Communicator& comm, ElementOps& memory, int rank, float* m, size_t n,
                                 OnebitBuffers& b, OnebitNorms* norms) {
  const int N = comm.size();
  const size_t P = b.worker_error.size();
  GS_EXPECT(P == onebit_padded_elements(n, N) && b.server_error.size() == P / static_cast<size_t>(N),
            "onebit_compressed_allreduce: error buffers of DeepSpeed's padded sizes");
  const size_t C = P / static_cast<size_t>(N);
  const size_t w1 = onebit_message_words(P), w2 = onebit_message_words(C);
  CompressOps& ops = compress_ops_of(memory);
  float* x = room(memory, rank, b.x, P);
  float* c = room(memory, rank, b.chunk, C);
  float* send = room(memory, rank, b.worker_message, w1);
  float* recv = room(memory, rank, b.worker_messages, w1 * static_cast<size_t>(N));
  float* send2 = room(memory, rank, b.server_message, w2);
  float* recv2 = room(memory, rank, b.server_messages, w2 * static_cast<size_t>(N));
  // The spans of the report's times (ElementOps::span_end: into `norms` only, the compress phase has the call).
  double* const compress_s = norms != nullptr ? &norms->compress_s : nullptr;
  double* const decompress_s = norms != nullptr ? &norms->decompress_s : nullptr;
  const double t0 = memory.phase_begin(rank);
  // Worker side: x = pad(m) + worker_error (buffer_m.add_(worker_error)), its scale, its new error, its signs.
  memory.copy(rank, x, m, n);
  memory.zero(rank, x + n, P - n);
  const OnebitSide worker = ops.onebit_compensate(rank, send, x, b.worker_error.get(), P);
  memory.span_end(rank, t0, compress_s);
  // Phase 1 (DeepSpeed: all-to-all of the sign chunks and all-gather of the scales): one all-gather of the scale and
  // all packed signs; rank q reads chunk q of every rank.
  comm.all_gather(rank, recv, send, w1);
  const double t1 = memory.phase_begin(rank);
  // Server side of chunk `rank`: c = sum_j sign_j * (s_j * float(1/N)), in rank order, + server_error.
  ops.onebit_server_sum(rank, c, recv, N, w1, static_cast<size_t>(rank) * C, C, static_cast<float>(1.0 / N));
  const OnebitSide server = ops.onebit_compensate(rank, send2, c, b.server_error.get(), C);
  memory.span_end(rank, t1, compress_s);
  // Phase 2: all-gather of the server scales and signs; m = every chunk decoded, cut to n.
  comm.all_gather(rank, recv2, send2, w2);
  const double t2 = memory.phase_begin(rank);
  ops.onebit_decode_chunks(rank, m, n, recv2, w2, C);
  memory.span_end(rank, t2, decompress_s);
  if (norms != nullptr) {
    norms->worker_error = std::sqrt(worker.error_sum_squares);
    norms->server_error = std::sqrt(server.error_sum_squares);
    norms->worker_scale = worker.scale;
    norms->server_scale = server.scale;
    norms->done = true;
  }
}

// The compressed all-reduce over padded P (chunk C = P / N): worker x = m + e, its norm, e and the packed signs
// (read m, e; write x; read x twice; write e; write P/8), the server's unpack-and-sum of N chunks, + its error,
// norm, error and packing, and the final unpack (read P/8 bits, write 4 P).
void onebit_price_compressed(StepCost& cost, size_t padded, int ranks) {
  const double P = static_cast<double>(padded), N = ranks, C = P / N;
  cost.add_pass(Phase::kCompress, 24.0 * P + P / 8.0);
  cost.add_collective(CollectiveKind::kReduceScatter, P / 8.0);  // DeepSpeed's all-to-all of the signs
  cost.add_collective(CollectiveKind::kAllGather, 4.0 * N);      // worker scales
  cost.add_pass(Phase::kCompress, C * (N / 8.0 + 4.0) + 24.0 * C + C / 8.0);
  cost.add_collective(CollectiveKind::kAllGather, P / 8.0);  // server signs
  cost.add_collective(CollectiveKind::kAllGather, 4.0 * N);  // server scales
  cost.add_pass(Phase::kCompress, P / 8.0 + 4.0 * P);
}

// residual_norm: the worker error; server_error_norm: the server error of each rank's chunk.
nlohmann::json onebit_compression_report(const std::vector<const OnebitCalls*>& calls, size_t n, size_t padded,
                                         const std::string& kind) {
  if (calls.empty() || onebit_returned_calls(*calls[0]) == 0) return nullptr;
  const auto ranks = static_cast<int>(calls.size());
  std::vector<double> enc, dec, worker, server;
  for (const auto* rank_calls : calls)
    for (size_t t = 0; t < onebit_returned_calls(*rank_calls); ++t) {
      enc.push_back((*rank_calls)[t].compress_s);
      dec.push_back((*rank_calls)[t].decompress_s);
    }
  for (size_t t = 0; t < onebit_returned_calls(*calls[0]); ++t) {
    double w = 0.0, v = 0.0;
    for (const auto* rank_calls : calls) {
      if (t >= onebit_returned_calls(*rank_calls)) continue;  // a rank that ended early (a failed run)
      w += (*rank_calls)[t].worker_error;
      v += (*rank_calls)[t].server_error;
    }
    worker.push_back(w / ranks);
    server.push_back(v / ranks);
  }
  const double P = static_cast<double>(padded), N = ranks;
  const double dense = 4.0 * static_cast<double>(n), payload = P / 8.0 + 4.0 + P / (8.0 * N) + 4.0;
  nlohmann::json j;
  j["kind"] = kind;
  j["collective"] = "all_gather";
  j["error_feedback"] = "own";
  j["dense_bytes_per_rank_per_step"] = dense;
  j["payload_bytes_per_rank_per_step"] = payload;  // the rank's sign message of each phase, with its scale
  j["wire_bytes_per_rank_per_step"] = onebit_wire_bytes(padded, ranks);
  j["compression_ratio"] = dense / payload;
  j["compress_time"] = ms_summary(enc);
  j["decompress_time"] = ms_summary(dec);
  j["relative_error"] = nullptr;
  j["residual_norm"] = summary(worker);
  j["server_error_norm"] = summary(server);
  j["padded_elements"] = padded;
  return j;
}

void deepspeed_first_moment(CompressOps& ops, int rank, float* m, const float* g, size_t n, double beta1) {
  ops.deepspeed_first_moment(rank, m, g, n, static_cast<float>(beta1), static_cast<float>(1.0 - beta1));
}

void deepspeed_second_moment(CompressOps& ops, int rank, float* v, const float* g, size_t n, double beta2) {
  ops.deepspeed_second_moment(rank, v, g, n, static_cast<float>(beta2), static_cast<float>(1.0 - beta2));
}

void deepspeed_update(CompressOps& ops, int rank, float* p, const float* m, const float* v, size_t n,
                      const OptimizerConfig& o, double lr, float* accumulated) {
  DeepSpeedUpdate s;
  s.eps = static_cast<float>(o.eps);
  s.weight_decay = static_cast<float>(o.weight_decay);
  s.neg_lr = static_cast<float>(-lr);
  s.decay = o.weight_decay > 0.0;
  ops.deepspeed_update(rank, p, m, v, n, s, accumulated);
}

namespace {

// DeepSpeed's 1-bit Adam (Tang et al. 2021, arXiv 2102.02888; DeepSpeed OnebitAdam.step,
// deepspeed/runtime/fp16/onebit/adam.py) as a sync strategy, because it owns the communication: during the warm-up the
// gradient is all-reduced (DeepSpeed's engine, enable_backward_allreduce) and after it only the momentum travels,
// through the compressed all-reduce (onebit_adam.h). Per 1-based step k (state['step']):
//   k = 1: DeepSpeed's initialization step: the error buffers are made and the (zero) momentum goes through one
//          compressed all-reduce; no parameter moves and the buffers are dropped after it (the gradient is still
//          all-reduced by the engine);
//   2 <= k <= max(freeze_step, 2): g = all-reduced gradient / S;
//          m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2 (exp_avg.mul_(b1).add_(1 - b1, g), exp_avg_sq.mul_(b2)
//          .addcmul_(1 - b2, g, g): torch's CPU kernels fuse each add, kernels/optim_math.h);
//   later: v frozen; each rank's m = b1 m + (1 - b1) g_r with its local mean gradient g_r (the all-reduce is off),
//          then m = compressed_allreduce(m) with fresh worker and server error buffers at the first such step.
// Every step that moves: u = m / (sqrt(v) + eps) (no bias correction: OnebitAdam never applies it), u += wd p when
// weight_decay > 0, p += (-lr) u. With one rank nothing is compressed (DeepSpeed: `if self.size > 1`).
// The flat parameter buffer is one tensor: DeepSpeed runs 1-bit Adam under FP16_Optimizer, which flattens each
// parameter group into one fp32 master (deepspeed/runtime/fp16/fused_optimizer.py), so one compressed all-reduce
// covers the whole model. DeepSpeed's exp_avg_mask: training.optimizer.exp_avg_mask "zero_variance" (a mask made
// from the frozen variance). DeepSpeed's non-freeze parameter group (a group with non_freeze True; its momentum
// updated in place since DeepSpeed PR 1278): training.optimizer.uncompressed_tensors names its tensors. After the
// freeze they take the `non_freeze` branch of OnebitAdam.step: g = all_reduce(g_r) * float(1 / N) of the ranks' own
// mean gradients, m and v both updated (their variance is never frozen), the same update; the other tensors form the
// compressed group, one flat buffer of their values in table order (FP16_Optimizer's flat master of that group),
// padded and compressed as above. The exp_avg_mask applies to the compressed group only.
class OnebitAdam final : public SyncStrategy {
 public:
  explicit OnebitAdam(const StrategySetup& s)
      : comm_(s.comm),
        memory_(s.memory()),
        ops_(compress_ops_of(memory_)),
        ranks_(s.ranks),
        n_(s.model.num_params()),
        cost_model_(s.cost_model),
        opt_(s.config.training.optimizer),
        mask_zero_variance_(opt_.exp_avg_mask == "zero_variance"),
        buckets_(make_buckets(s.model.tensors(), static_cast<size_t>(s.config.sync.first_bucket_mb * 1048576.0),
                              static_cast<size_t>(s.config.sync.bucket_mb * 1048576.0))) {
    GS_EXPECT(opt_.kind == "onebit_adam", "the onebit_adam strategy runs training.optimizer.kind \"onebit_adam\"");
    split_groups(s.model.tensors());
    // Every rank applies the same all-reduced gradient (warm-up) or the same decompressed momentum (after it) with the
    // same frozen variance.
    s.claim_replicas_identical(true);
    if (s.timing_only) return;
    ranks_state_.resize(static_cast<size_t>(ranks_));
    for (int q = 0; q < ranks_; ++q) {
      RankState& r = ranks_state_[static_cast<size_t>(q)];
      r.params = memory_.allocate(q, n_);
      r.m = memory_.allocate(q, n_);
      r.v = memory_.allocate(q, n_);
    }
  }

  float* params(int rank) override { return ranks_state_[static_cast<size_t>(rank)].params.get(); }
  const float* eval_params() override { return ranks_state_[0].params.get(); }

  // State of rank `rank`, buffers of the run's memory: m (exp_avg), v (exp_avg_sq), the compressed all-reduce's
  // buffers (the worker and server errors empty outside the compressed stage).
  struct RankState {
    FloatBuffer params, m, v;
    FloatBuffer flat;                // uncompressed_tensors: the compressed group's momentum, flat
    OnebitBuffers onebit;
    OnebitCalls steps;  // every compressed step's (not the initialization step's)
  };

  // The report's "compression" object (reports/README.md) over the compressed steps: DeepSpeed's message sizes, the
  // compression and decoding times of every rank, and the error-feedback norms per step averaged over the ranks
  // (residual_norm: the worker error; server_error_norm: the server error of each rank's chunk). Null before the
  // first compressed step and on one rank (nothing is compressed).
  // Across processes: every rank's compressed-call records to process 0 (the report's times and norms).
  void gather_ranks(ProcessGroup& group, int first_rank, int local_ranks) override {
    gather_onebit_calls(group, ranks_state_, &RankState::steps, first_rank, local_ranks);
  }

  StrategyReport report(const ReportContext&) const override {
    StrategyReport rep;
    if (ranks_state_.empty()) return rep;
    std::vector<const OnebitCalls*> calls;
    for (const RankState& r : ranks_state_) calls.push_back(&r.steps);
    rep.compression = onebit_compression_report(calls, compressed_n_, padded_, "onebit_adam");
    if (rep.compression.is_null()) return rep;
    rep.compression["freeze_step"] = opt_.freeze_step;
    rep.compression["compressed_steps"] = onebit_returned_calls(ranks_state_[0].steps);
    return rep;
  }

  void step(const StepInput& in) override {
    price(in);
    RankState& r = ranks_state_[static_cast<size_t>(in.rank)];
    const OnebitPhase phase = onebit_phase(in.step + 1, opt_.freeze_step);
    if (phase == OnebitPhase::kCompressed) return compressed_step(in, r);
    all_reduce_gradient(in);
    if (phase == OnebitPhase::kInit) return init_step(in, r);
    GS_NVTX_RANGE(kOptimizer);
    TimedPhase t(memory_, in.rank, *in.clock, Phase::kOptimizer);
    memory_.divide(in.rank, in.grad, n_, static_cast<float>(in.global_samples));
    deepspeed_first_moment(ops_, in.rank, r.m.get(), in.grad, n_, opt_.beta1);
    deepspeed_second_moment(ops_, in.rank, r.v.get(), in.grad, n_, opt_.beta2);
    deepspeed_update(ops_, in.rank, r.params.get(), r.m.get(), r.v.get(), n_, opt_, in.lr);
  }

  const RankState& rank_state(int rank) const { return ranks_state_[static_cast<size_t>(rank)]; }

 private:
  // Step 1: the zero momentum of the compressed group through the compressed all-reduce (the buffers are dropped
  // after it). The non-freeze group takes its branch already (OnebitAdam sets adam_freeze_key for the initialization
  // step, and that branch has no `if self.initialize`): the engine-averaged gradient all-reduced again and multiplied
  // by 1/N goes into its m and v. No parameter moves.
  void init_step(const StepInput& in, RankState& r) {
    if (ranks_ > 1) {
      compressed(in, r, nullptr);  // makes the error buffers zero (no record: the report counts compressed steps)
      r.onebit.drop_errors();
    }
    if (plain_.empty()) return;
    {
      TimedPhase t(memory_, in.rank, *in.clock, Phase::kOptimizer);
      const float s = static_cast<float>(in.global_samples);
      for (const Bucket& b : plain_) memory_.divide(in.rank, in.grad + b.begin, b.end - b.begin, s);
    }
    non_freeze_moments(in, r);
  }

  // OnebitAdam.step's non_freeze branch over the uncompressed tensors: dist.all_reduce(grad); grad.mul_(1 / N);
  // exp_avg and exp_avg_sq updated in place (DeepSpeed PR 1278) from that gradient.
  void non_freeze_moments(const StepInput& in, RankState& r) {
    all_reduce_buckets(comm_, in.rank, in.grad, plain_, *in.clock);
    GS_NVTX_RANGE(kOptimizer);
    TimedPhase t(memory_, in.rank, *in.clock, Phase::kOptimizer);
    const auto inv = static_cast<float>(1.0 / ranks_);
    for (const Bucket& b : plain_) {
      const size_t count = b.end - b.begin;
      memory_.scale(in.rank, in.grad + b.begin, count, inv);
      deepspeed_first_moment(ops_, in.rank, r.m.get() + b.begin, in.grad + b.begin, count, opt_.beta1);
      deepspeed_second_moment(ops_, in.rank, r.v.get() + b.begin, in.grad + b.begin, count, opt_.beta2);
    }
  }

  void compressed_step(const StepInput& in, RankState& r) {
    {
      GS_NVTX_RANGE(kOptimizer);
      TimedPhase t(memory_, in.rank, *in.clock, Phase::kOptimizer);
      // The rank's own mean gradient (DeepSpeed: the engine's all-reduce is off; each rank's loss is its mean).
      if (in.local_samples > 0) memory_.divide(in.rank, in.grad, n_, static_cast<float>(in.local_samples));
      else memory_.zero(in.rank, in.grad, n_);
      for (const Bucket& b : compressed_)
        deepspeed_first_moment(ops_, in.rank, r.m.get() + b.begin, in.grad + b.begin, b.end - b.begin, opt_.beta1);
    }
    if (!plain_.empty()) non_freeze_moments(in, r);
    if (ranks_ > 1) {
      // the error buffers made at the first compressed step (state['worker_error'] not in state)
      compressed(in, r, &r.steps.emplace_back());
    }
    GS_NVTX_RANGE(kOptimizer);
    TimedPhase t(memory_, in.rank, *in.clock, Phase::kOptimizer);
    // exp_avg.mul_(exp_avg_mask) with the mask of exp_avg_mask "zero_variance" (0 where the frozen variance is
    // exactly 0: v is the same on every rank, so every rank's mask is), on the group that has the mask: the
    // compressed one.
    if (mask_zero_variance_)
      for (const Bucket& b : compressed_)
        ops_.zero_variance_mask(in.rank, r.m.get() + b.begin, r.v.get() + b.begin, b.end - b.begin);
    deepspeed_update(ops_, in.rank, r.params.get(), r.m.get(), r.v.get(), n_, opt_, in.lr);
  }

  // The compressed group (every tensor not in uncompressed_tensors, skipping empty ones as DeepSpeed's
  // filter_empty_parameters) and the non-freeze group as ranges of the flat buffer, adjacent tensors merged.
  void split_groups(const std::vector<TensorInfo>& tensors) {
    for (const TensorInfo& t : tensors) {
      if (t.count == 0) continue;
      const bool plain = onebit_non_freeze(opt_, t);
      std::vector<Bucket>& group = plain ? plain_ : compressed_;
      if (!group.empty() && group.back().end == t.offset) group.back().end = t.offset + t.count;
      else group.push_back({t.offset, t.offset + t.count});
      if (!plain) compressed_n_ += t.count;
    }
    if (plain_.empty()) {  // one group: the whole flat buffer
      compressed_ = {{0, n_}};
      compressed_n_ = n_;
    }
    padded_ = onebit_padded_elements(compressed_n_, ranks_);
  }

  // The modeled step by phase: the engine's bucketed all-reduce after backward (DeepSpeed's non-ZeRO engine reduces
  // after the backward) and the Adam update; the compressed stage's momentum update, worker and server compression,
  // its four collectives (the all-to-all priced as a reduce-scatter of the same bytes) and the update.
  PriceKey price(const StepInput& in) const override {
    const OnebitPhase phase = onebit_phase(in.step + 1, opt_.freeze_step);
    const PriceKey key{static_cast<int64_t>(phase), 0};
    if (in.cost == nullptr) return key;
    StepCost& cost = *in.cost;
    cost.overlap_backward = false;
    const double n = static_cast<double>(n_);
    if (phase != OnebitPhase::kCompressed)
      for (const Bucket& b : buckets_)
        cost.add_collective(CollectiveKind::kAllReduce, 4.0 * static_cast<double>(b.end - b.begin),
                            GradRange{b.begin, b.end});
    if (phase == OnebitPhase::kWarmup && cost_model_ != nullptr) cost_model_->add_optimizer(cost, opt_, n);
    if (phase == OnebitPhase::kWarmup) return key;
    for (const Bucket& b : plain_)  // the non-freeze group's all-reduce (steps 1 and after the freeze)
      cost.add_collective(CollectiveKind::kAllReduce, 4.0 * static_cast<double>(b.end - b.begin));
    if (ranks_ > 1) onebit_price_compressed(cost, padded_, ranks_);
    if (phase == OnebitPhase::kCompressed) {
      cost.add_pass(Phase::kOptimizer, 8.0 * n + 12.0 * n);  // g / local samples; m = b1 m + (1 - b1) g
      cost.add_pass(Phase::kOptimizer, 16.0 * n);            // p += -lr m / (sqrt(v) + eps): read p, m, v, write p
    }
    return key;
  }

  void all_reduce_gradient(const StepInput& in) {
    PhaseClock& clock = *in.clock;
    all_reduce_buckets(comm_, in.rank, in.grad, buckets_, clock);
  }

  // The compressed group's momentum through the compressed all-reduce; `norms` (null: none) its record, which must
  // stay valid until the rank's next settle (OnebitNorms).
  void compressed(const StepInput& in, RankState& r, OnebitNorms* norms) {
    if (plain_.empty())
      return timed_onebit_compressed_allreduce(comm_, memory_, *in.clock, in.rank, ranks_, r.m.get(), n_, padded_,
                                               r.onebit, norms);
    // The compressed group's flat momentum (its tensors in table order), then back in place.
    if (r.flat.size() != compressed_n_) r.flat = memory_.allocate(in.rank, compressed_n_);
    size_t o = 0;
    for (const Bucket& b : compressed_) {
      memory_.copy(in.rank, r.flat.get() + o, r.m.get() + b.begin, b.end - b.begin);
      o += b.end - b.begin;
    }
    timed_onebit_compressed_allreduce(comm_, memory_, *in.clock, in.rank, ranks_, r.flat.get(), compressed_n_, padded_,
                                      r.onebit, norms);
    o = 0;
    for (const Bucket& b : compressed_) {
      memory_.copy(in.rank, r.m.get() + b.begin, r.flat.get() + o, b.end - b.begin);
      o += b.end - b.begin;
    }
  }

  Communicator& comm_;
  ElementOps& memory_;  // the memory of every buffer here (host, or a device's)
  CompressOps& ops_;    // its compressor operations (the 1-bit optimizers' element math)
  int ranks_;
  size_t n_;
  size_t compressed_n_ = 0;  // the compressed group's values (n_ without uncompressed_tensors)
  size_t padded_ = 0;        // onebit_padded_elements(compressed_n_, ranks_)
  const CostModel* cost_model_;
  OptimizerConfig opt_;
  bool mask_zero_variance_;
  std::vector<Bucket> buckets_;
  std::vector<Bucket> compressed_;  // the compressed group's ranges of the flat buffer, in table order
  std::vector<Bucket> plain_;       // the non-freeze group's (uncompressed_tensors), in table order
  std::vector<RankState> ranks_state_;
};

std::unique_ptr<SyncStrategy> make(const StrategySetup& setup) { return std::make_unique<OnebitAdam>(setup); }

}  // namespace

// training.optimizer.kind "onebit_adam" (onebit_adam.cpp), "zero_one_adam" (zero_one_adam.cpp) and "onebit_lamb"
// (onebit_lamb.cpp) own the gradient's communication: the full-precision all-reduce of the steps that update the
// variance and DeepSpeed's compressed all-reduce of the momentum (or, for 0/1 Adam, of the gradient and of the
// accumulated update). Settings that would change either are refused.
void onebit_adam_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  const std::string by = "training.optimizer.kind \"" + c.training.optimizer.kind + "\" ";
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, by + msg}); };
  if (c.sync.kind != "allreduce")
    add("sync.kind", "runs its own all-reduce (uncompressed while the variance updates, DeepSpeed's compressed "
                     "all-reduce otherwise); it replaces sync.kind \"allreduce\" and combines with no other strategy "
                     "(DeepSpeed refuses it under ZeRO too): expected \"allreduce\", got \"" + c.sync.kind + "\"");
  if (c.compression.kind != "none")
    add("compression.kind", "compresses what it sends itself (1 bit per value with error feedback on worker and "
                            "server): expected \"none\", got \"" + c.compression.kind + "\"");
  if (c.sync.kind == "allreduce" && c.sync.staleness != 0)
    add("sync.staleness", "applies every step's momentum in that step: expected 0, got " +
                              fmt::format("{}", c.sync.staleness));
  if (c.precision.mode == "fp16_pure")
    add("precision.mode", "keeps fp32 parameters and state here (fp16_pure's fp16 storage is not modeled for it): "
                          "expected another mode, got \"fp16_pure\"");
  else if (c.precision.loss_scale == "static" || c.precision.loss_scale == "dynamic" ||
           (c.precision.loss_scale == "auto" && c.precision.mode == "fp16_mixed"))
    add("precision.loss_scale", "runs without a loss scaler here (DeepSpeed's FP16_Optimizer scaler is not modeled "
                                "for it): expected \"none\" (or \"auto\" outside fp16_mixed), got \"" +
                                    c.precision.loss_scale + "\"");
  if (c.training.clip_grad_norm > 0)
    add("training.clip_grad_norm", fmt::format("does not clip (DeepSpeed's OnebitAdam, ZeroOneAdam and OnebitLamb "
                                               "keep max_grad_norm but never apply it): expected 0, got {}",
                                               c.training.clip_grad_norm));
  if (c.training.pitfall != "none")
    add("training.pitfall", "is modeled without the pitfalls (they change the divisors of the plain all-reduce): "
                            "expected \"none\", got \"" + c.training.pitfall + "\"");
  // 1-bit Adam's non-freeze group: a list of distinct names (the model's table is checked in validate_config).
  const json& names = c.training.optimizer.uncompressed_tensors;
  if (c.training.optimizer.kind != "onebit_adam" || names.is_null()) return;
  const std::string path = "training.optimizer.uncompressed_tensors";
  if (!names.is_array())
    return issues.push_back({path, "expected null or a list of tensor names (docs/models.md), got " + names.dump()});
  for (size_t i = 0; i < names.size(); ++i) {
    if (!names[i].is_string() || names[i].get<std::string>().empty()) {
      issues.push_back({fmt::format("{}[{}]", path, i), "expected a tensor name, got " + names[i].dump()});
      continue;
    }
    for (size_t j = 0; j < i; ++j)
      if (names[j] == names[i])
        issues.push_back({fmt::format("{}[{}]", path, i), "names " + names[i].dump() + " a second time"});
  }
}

StrategyEntry onebit_adam_strategy() {
  return {"onebit_adam", "DeepSpeed's 1-bit Adam: uncompressed Adam while the variance updates, then the momentum "
                         "all-reduced 1-bit compressed with error feedback",
          make,
          join_options(kAdamBetaOptions, {"training.optimizer.freeze_step", "training.optimizer.exp_avg_mask",
                                          "training.optimizer.uncompressed_tensors"}),
          onebit_adam_issues};
}

}  // namespace gs
