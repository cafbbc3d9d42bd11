// `parameter_server` (docs/design.md, section 2): the ParameterServer strategy (server shards own the parameters and
// the optimizer; workers push gradients and pull parameters; BSP, SSP, asynchronous) and its free-running step
// control (FreeRunningControl).
// Memory, as practice runs a parameter server with GPU workers (the classic PS, BytePS's CPU servers): the SERVER
// side (its shards, one host buffer; its optimizer and state; decoding compressed pushes; the scheduler's order and
// the staleness bookkeeping) is host memory on every backend. The WORKER side lives in the run's memory
// (StrategySetup::memory(): host RAM, or a backend's device memory): each worker's parameters (params(r), rank r's
// buffer) and its gradient sum, on which its loss scaler and clipping run through ElementOps. A push downloads the
// worker's gradient into a host staging buffer (ElementOps::download, rank r) and hands that to the host code, which
// encodes it there when compressed (BytePS's workers compress on the CPU after the copy); a pull uploads the server's
// parameters into the worker's buffer (ElementOps::upload, inside the pull's turn). The copies are in the step's
// measured communicate phase, on the memory's clock (step). On host memory the push reads the rank's gradient in
// place (no staging copy) and the pull's upload is the memcpy it always was, so the host backend's bits are
// unchanged. eval_params and the progress points hand the rank loop rank 0's copy of the server's parameters on a
// device memory (server_view).
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "sim/compress/compressor.h"
#include "sim/compress/modeled.h"
#include "sim/core/error.h"
#include "sim/optim/optimizer.h"
#include "sim/core/summary.h"
#include "sim/comm/scheduler.h"
#include "sim/cost/ps_cost.h"
#include "sim/strategy/strategy.h"

namespace gs {
namespace {

constexpr size_t kTileElems = 4096;

json histogram_json(const std::map<int64_t, int64_t>& h) {
  json values = json::array(), counts = json::array();
  double sum = 0.0, total = 0.0;
  int64_t max = 0;
  for (const auto& [v, c] : h) {
    values.push_back(v);
    counts.push_back(c);
    sum += static_cast<double>(v) * static_cast<double>(c);
    total += static_cast<double>(c);
    max = std::max(max, v);
  }
  return {{"values", values},
          {"counts", counts},
          {"mean", total > 0 ? json(sum / total) : json(nullptr)},
          {"max", total > 0 ? json(max) : json(nullptr)}};
}

// The server owns the parameters (sharded over sync.shards shards) and the optimizer; each worker computes a gradient
// on the parameters it last pulled, pushes it, and pulls again. Extend: a new consistency model is a rule in may_start;
// the workers' step control is FreeRunningControl at the end.
// sync.staleness 0 = BSP (the server sums a clock's pushes in rank order, divides by their samples, applies once),
// s = SSP (Ho et al. 2013: a worker starts clock c only when every worker has finished clock c - s - 1), "inf" =
// asynchronous (every push applied on arrival, with its own mean gradient at learning rate lr / N: N pushes are one
// step's worth). Budget: the run ends when steps x ranks pushes are applied.
// Every push and pull is one turn of InteractionScheduler (sim/comm/scheduler.h) at the worker's modeled time, so
// the order, and with it every bit of the result, follows the modeled clock. Extend: a new server rule is a change
// in apply_push / may_start; pricing lives in the constructor and record_step.
//
// Modeled clock of worker r at clock c (starting at t0, the end of its last pull), priced by sim/cost/ps_cost.h:
//   push handed over at t_issue = t0 + compute x straggler(c, r): one message per shard, queued on the worker's and
//   the shard hosts' links with every other worker's pushes and pulls in modeled order; applied at t_push = its last
//   part's arrival + apply (optimizer over n / P values on each shard's device, shards in parallel; BSP adds the sum
//   of N pushes as one memory pass; SSP/async: each shard's steps queue on its device in arrival order);
//   pull read at t_pull = max(t_push, the time the SSP/BSP bound is met); next clock starts when the pull's messages
//   from every shard are in (queued on the hosts' send links).
// Co-located shards (default): rank r < P holds shard r, so its own slice does not cross the wire (push and pull
// bytes 4n (P-1)/P); dedicated shards: 4n each way, on devices of their own. The arithmetic is the same either way
// (shards are slices of one buffer, updated in scheduler order); only the pricing differs. Not modeled: a co-located
// shard's optimizer work slowing its host worker's own compute (the report flags such runs as a lower bound,
// parameter_server_bound).
// Bytes per rank and step (communication.bytes_sent_per_rank_per_step) count what the rank sends, as for a collective:
// its push, plus, on a rank hosting co-located shard r, the pulls of the other N - 1 workers, 4n / P each (the pull a
// worker receives is counted by the rank that sends it; a dedicated server is no rank). With one co-located shard
// rank 0 sends (N - 1) x 4n and the others 4n each; with N co-located shards every rank sends 2 (N - 1)/N x 4n, ring
// all-reduce's count. Each push and pull is counted once, so the sum over ranks is the traffic between ranks.
//
// Compressed pushes (compression.kind other than "none" and "powersgd"): each worker encodes its pushed gradient with
// its own compressor instance, bucket by bucket (the all-reduce's buckets, or the whole model for scope "model"; a
// cast encodes the worker's mean gradient, its sum / its samples, as the all-reduce's casts and DDP's
// fp16_compress_hook do, and decodes it times those samples, so the server still sums gradient sums), with error
// feedback kept per worker (p = g + e; e = p - decode(C(p))); the server decodes every payload and sums in fp32 in
// rank order (BSP: the whole clock's payloads, or signSGD's majority vote over them; SSP/async: the push
// alone), divides by the samples and applies as above. Pulls stay dense fp32: the pull carries parameters, not
// gradients, and a lossy pull would leave each worker's copy off the server's with no residual to correct it
// (Li et al., OSDI 2014: workers push gradients and pull weights; BytePS compresses both ways because its server only
// sums gradients and the workers run the optimizer). Modeled clock: encode as memory passes (error feedback read 2,
// write 1; the compressor's passes over p; the payload written), the push's p2p at the payload bytes (co-located: the
// (P-1)/P share not bound for the worker's own shard), the server's decode as a pass over the payload and the dense
// slice it writes (4n / P), then the optimizer.
//
// fp16_pure (no master weights, the common mistake): pushes and pulls carry fp16 values (2 bytes each), the server
// rounds the averaged gradient to fp16 and stores its parameters and optimizer state in fp16.
// Mixed precision (bf16_mixed, fp16_mixed): the server holds fp32 master weights; each worker computes in the format
// and keeps its OWN loss scaler (docs/design.md, section 2), which unscales and checks the worker's gradient before the
// push. A worker whose loss or gradient has an inf/NaN skips its push (it sends an 8-byte notice instead, so clocks and
// the budget still count it) and backs off only its own scale (a worker's scaler that cannot recover,
// LossScaler::exhausted, ends the run as diverged); the server averages the pushes that arrived over their samples
// (BSP) or applies nothing for it (SSP/async). The staleness report counts skipped pushes per worker.
// Gradient clipping (training.clip_grad_norm) is per worker, before the push, on the worker's own mean gradient
// (after unscaling), as local clipping in DGC (Lin et al. 2018); it is not the clipping of the averaged gradient that
// allreduce does.
class ParameterServer final : public SyncStrategy {
  struct PushRecord;  // one compressed push (below)

 public:
  explicit ParameterServer(const StrategySetup& s)
      : ranks_(s.ranks),
        n_(s.model.num_params()),
        staleness_(s.config.sync.staleness),
        shards_(s.config.sync.shards > 0 ? static_cast<int>(s.config.sync.shards) : s.ranks),
        dedicated_(s.config.sync.dedicated),
        optimizer_config_(s.config.training.optimizer),
        schedule_(s.config.training.schedule),
        stragglers_(s.config.cluster.stragglers),
        seed_(static_cast<uint64_t>(s.config.training.seed)),
        on_read_(s.on_read),
        compression_(s.config.compression),
        cost_model_(s.cost_model),
        tensors_(&s.model.tensors()),
        server_precision_(s.config),
        timing_only_(s.timing_only),
        memory_(s.memory()),
        sched_(s.ranks, parse_ordering(s.config.sync.ordering)) {
    // BSP: every worker pulls the same parameters after each clock; SSP and async workers read different versions.
    s.claim_replicas_identical(staleness_ == 0);
    for (int r = 0; r < ranks_; ++r) precision_.emplace_back(s.config);  // each worker its own loss scaler
    scaled_ = precision_.front().scaler().active();
    clip_ = s.config.training.clip_grad_norm > 0;
    GS_EXPECT(s.cost_model != nullptr, "parameter_server needs the cost model (its order follows the modeled clock)");
    // Shard p holds [p * per, (p + 1) * per) (the last one the rest).
    const size_t per = (n_ + static_cast<size_t>(shards_) - 1) / static_cast<size_t>(shards_);
    for (int p = 0; p < shards_; ++p)
      shard_ranges_.emplace_back(std::min(n_, per * static_cast<size_t>(p)),
                                 std::min(n_, per * static_cast<size_t>(p + 1)));
    const double full_bytes = gradient_wire_bytes(s.config) * static_cast<double>(n_);  // fp16_pure: 2 per value
    full_bytes_ = full_bytes;
    for (int r = 0; r < ranks_; ++r) {
      const bool local_shard = !dedicated_ && r < shards_;
      const double bytes = local_shard ? full_bytes * (shards_ - 1) / shards_ : full_bytes;
      wire_bytes_.push_back(bytes);
      served_bytes_.push_back(local_shard ? full_bytes * (ranks_ - 1) / shards_ : 0.0);
    }
    links_.emplace(s.cost_model->collectives(), ranks_, shards_, dedicated_);
    compressed_ = compression_.kind != "none";
    StepCost apply = s.cost_model->make_step_cost();
    s.cost_model->add_optimizer(apply, optimizer_config_, static_cast<double>(per));
    // BSP sums N dense pushes in one pass (N read, one written, each at the gradient's size: fp16 under fp16_pure);
    // compressed pushes are decoded push by push instead (decode_s).
    if (staleness_ == 0 && !compressed_)
      apply.add_pass(Phase::kOptimizer, gradient_wire_bytes(s.config) * (ranks_ + 1) * static_cast<double>(per));
    apply_s_ = apply.compute_s[static_cast<size_t>(Phase::kOptimizer)];
    shard_elems_ = static_cast<double>(per);
    skipped_by_rank_.assign(static_cast<size_t>(ranks_), 0);
    // Compressed pushes go bucket by bucket: the model's tensors cut as the all-reduce cuts them (a whole-model
    // compressor, top-k with scope "model": one bucket over the gradient).
    std::vector<std::pair<size_t, size_t>> tensor_buckets;
    if (compressed_)
      for (const Bucket& b : make_buckets(s.model.tensors(),
                                          static_cast<size_t>(s.config.sync.first_bucket_mb * 1048576.0),
                                          static_cast<size_t>(s.config.sync.bucket_mb * 1048576.0)))
        tensor_buckets.emplace_back(b.begin, b.end);
    if (s.timing_only) {
      // Priced from the buckets' shapes (sim/compress/modeled.h), as the all-reduce's timing-only runs price theirs.
      if (compressed_) timing_reduction_ = modeled_reduction(compression_, tensor_buckets, n_, ranks_, tensors_);
      return;
    }
    if (compressed_) {
      codec_.resize(static_cast<size_t>(ranks_));
      server_comp_ = make_compressor(s.config, s.model, ranks_);
      GS_EXPECT(server_comp_ != nullptr, "compressed parameter server without a compressor");
      if (server_comp_->whole_model())
        buckets_.emplace_back(0, n_);
      else
        buckets_ = std::move(tensor_buckets);
      for (PushCodec& w : codec_) {
        w.comp = make_compressor(s.config, s.model, ranks_);
        // error_feedback "gradient" (validate_config refuses the other placements here).
        if (compression_.error_feedback != "none" && !w.comp->own_feedback()) w.residual.assign(n_, 0.0f);
        w.own.resize(n_);
        w.payload.resize(buckets_.size());
        if (compression_.measure_error) w.raw.resize(n_);
      }
      decoded_.resize(n_);
    }
    // The workers' parameters in the run's memory, each in its own rank's; on a device memory also each worker's
    // host staging buffer for its pushes and rank 0's copy of the server's parameters (eval_params, progress points).
    for (int r = 0; r < ranks_; ++r) worker_.push_back(memory_.allocate(r, n_));
    if (!memory_.host()) {
      staged_.assign(static_cast<size_t>(ranks_), std::vector<float>(n_));
      server_view_ = memory_.allocate(0, n_);
    }
    server_.resize(n_);
    optimizer_ = make_optimizer(optimizer_config_, n_);
    if (staleness_ == 0) {
      pending_.assign(static_cast<size_t>(ranks_), nullptr);
      pending_samples_.assign(static_cast<size_t>(ranks_), 0.0);
      pending_all_samples_.assign(static_cast<size_t>(ranks_), 0.0);
      pending_loss_.assign(static_cast<size_t>(ranks_), 0.0);
      aggregate_.resize(n_);
    }
    const size_t R = static_cast<size_t>(ranks_);
    skipped_.assign(R, 0);
    done_rank_.assign(R, 0);
    t_start_.assign(R, 0.0);
    read_version_.assign(R, 0);
    read_clock_.assign(R, 0);
    need_.assign(R, -1);
    wait_s_.assign(R, 0.0);
    applied_by_rank_.assign(R, 0);
    modeled_.assign(R, {});
  }

  float* params(int rank) override { return worker_[static_cast<size_t>(rank)].get(); }
  const float* eval_params() override { return server_view(); }
  float loss_scale(int rank) const override { return precision_[static_cast<size_t>(rank)].loss_scale(); }
  // The report's precision section follows worker 0's scaler; every worker's skips are in the staleness report. A
  // timing-only run (no workers) reports nothing of its own.
  StrategyReport report(const ReportContext&) const override {
    StrategyReport r;
    if (timing_only_) return r;
    r.precision = &precision_[0];
    r.compression = compression_report();
    r.staleness = staleness_report();
    r.modeled_rank_steps = modeled_;
    return r;
  }
  bool rank_done(int rank) const { return done_rank_[static_cast<size_t>(rank)] != 0; }
  void abort() { sched_.abort(); }  // wakes workers blocked in the scheduler
  // Free-running: workers do not step together (FreeRunningControl below).
  std::unique_ptr<StepControl> make_control(const ControlSetup& setup) override;

  // The report's "compression" object (reports/README.md), from the workers' pushes: collective "push", bytes per
  // push (payload; on the wire: what crossed to other devices, push plus the dense pull after it, whose bytes a
  // co-located shard host sends, so the mean equals the mean over ranks of communication.bytes_sent_per_rank_per_step;
  // a dedicated server's pull is sent by no rank and left out), error of each decoded push against the raw gradient.
  json compression_report() const {
    if (!compressed_) return nullptr;
    std::vector<double> payload, wire, enc, dec, err, res;
    for (const PushCodec& w : codec_) {
      for (const PushRecord& r : w.records) {
        payload.push_back(static_cast<double>(r.payload_bytes));
        wire.push_back(r.wire_bytes + (dedicated_ ? 0.0 : r.pull_bytes));  // a dedicated server's pull: no rank's
        enc.push_back(r.compress_s);
        if (!std::isnan(r.relative_error)) err.push_back(r.relative_error);
        res.push_back(r.residual_norm);
      }
      dec.insert(dec.end(), w.decode_s.begin(), w.decode_s.end());
    }
    auto mean = [](const std::vector<double>& v) {
      double a = 0.0;
      for (double x : v) a += x;
      return v.empty() ? 0.0 : a / static_cast<double>(v.size());
    };
    auto ms = [](const std::vector<double>& v) {
      const Summary q = summarize(v);
      return json{{"count", q.count}, {"p50_ms", q.p50 * 1e3}, {"mean_ms", q.mean * 1e3}, {"total_ms", q.total * 1e3}};
    };
    auto dist = [](const std::vector<double>& v) -> json {
      if (v.empty()) return nullptr;
      const Summary q = summarize(v);
      auto num = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
      return {{"count", q.count}, {"min", num(q.min)}, {"p50", num(q.p50)}, {"p95", num(q.p95)},
              {"max", num(q.max)}, {"mean", num(q.mean)}, {"last", num(v.back())}};
    };
    const double dense = 4.0 * static_cast<double>(n_);
    const double pay = mean(payload);
    const Compressor& comp = *server_comp_;
    json j;
    j["kind"] = compression_.kind;
    j["collective"] = "push";
    j["error_feedback"] = comp.own_feedback() ? "own" : (compression_.error_feedback != "none" ? "plain" : "none");
    j["dense_bytes_per_rank_per_step"] = dense;
    j["payload_bytes_per_rank_per_step"] = pay;
    j["wire_bytes_per_rank_per_step"] = mean(wire);
    j["compression_ratio"] = pay > 0 ? json(dense / pay) : json(nullptr);
    j["compress_time"] = ms(enc);
    j["decompress_time"] = ms(dec);
    j["relative_error"] = dist(err);
    j["residual_norm"] = dist(res);
    return j;
  }

  json staleness_report() const {
    json pushes = json::array(), wait = json::array(), skipped = json::array(), scales = json::array();
    for (int r = 0; r < ranks_; ++r) {
      pushes.push_back(applied_by_rank_[static_cast<size_t>(r)]);
      wait.push_back(wait_s_[static_cast<size_t>(r)]);
      skipped.push_back(skipped_by_rank_[static_cast<size_t>(r)]);
      scales.push_back(precision_[static_cast<size_t>(r)].loss_scale());
    }
    return {{"ordering", sched_.ordering() == Ordering::kModeled ? "modeled" : "real"},
            {"staleness", staleness_ == kStalenessInf ? json("inf") : json(staleness_)},
            {"shards", shards_},
            {"dedicated", dedicated_},
            {"versions", histogram_json(hist_versions_)},
            {"clocks", histogram_json(hist_clocks_)},
            {"wait_s_per_rank", wait},
            {"pushes_per_rank", pushes},
            {"discarded_pushes", discarded_},
            {"skipped_pushes_per_rank", skipped},
            {"loss_scale_per_rank", scales}};
  }

  // Timing-only (BSP only, refused otherwise at validation): every rank pushes, waits for the slowest (the step is
  // synchronous), the server applies and every rank pulls.
  bool price_depends_on_rank() const {
    for (size_t r = 0; r < wire_bytes_.size(); ++r)
      if (wire_bytes_[r] != wire_bytes_.front() || served_bytes_[r] != served_bytes_.front()) return true;
    return false;
  }

  // Key: the compression's price class of the step (powersgd before start_step, dgc's warm-up steps; 0 uncompressed)
  // and the rank when its price differs from the others' (fewer co-located shards than ranks), else one for all.
  PriceKey price(const StepInput& in) const override {
    const int64_t price_class = compressed_ ? compression_price_class(compression_, in.step) : 0;
    const PriceKey key{price_class, price_depends_on_rank() ? in.rank : 0};
    if (in.cost == nullptr) return key;
    if (compressed_) {
      price_compressed(in);
      return key;
    }
    const double bytes = wire_bytes_[static_cast<size_t>(in.rank)];
    if (bytes > 0) {
      // One BSP clock with every worker's push handed to the links at once (ps_cost.h): the pushes and the pulls
      // queue on the shard hosts' links; every rank waits for the last pull (the step is synchronous).
      const BspClockPrice clock = price_bsp_clock(cost_model_->collectives(), shards_, dedicated_,
                                                  std::vector<double>(static_cast<size_t>(ranks_), full_bytes_),
                                                  full_bytes_, apply_s_);
      const double pull_s = *std::max_element(clock.pull_s.begin(), clock.pull_s.end());
      in.cost->add_p2p_time(clock.pushes_s + pull_s, bytes, 2.0 * bytes);  // push and pull (its sender counts it)
    }
    // A co-located shard sends the other workers' pulls (their time is in the receivers' pulls, queued on its link).
    in.cost->add_served_bytes(served_bytes_[static_cast<size_t>(in.rank)]);
    in.cost->add_time(Phase::kOptimizer, apply_s_);
    in.cost->synchronous = true;
    return key;
  }

  // Bytes a worker's encode of one bucket of n fp32 values moves: error feedback's 3 passes (p = g + e read and
  // written, e read), the compressor's passes over p (encode_passes: the all-reduce's modeled price,
  // sim/compress/modeled.h) and the payload written.
  double bucket_encode_bytes(size_t n, bool error_feedback, double payload_bytes) const {
    const double dense = 4.0 * static_cast<double>(n);
    return (error_feedback ? 3.0 * dense : 0.0) + encode_passes(compression_.kind).passes * dense + payload_bytes;
  }
  // Modeled seconds of a push's encode on its worker (encode_bytes moved), and of its decode on the server: each
  // shard reads its part of the payload and writes its fp32 sum.
  double encode_model_s(double encode_bytes) const {
    StepCost enc = cost_model_->make_step_cost();
    enc.add_pass(Phase::kCompress, encode_bytes);
    return enc.compute_s[static_cast<size_t>(Phase::kCompress)];
  }
  double decode_model_s(double payload_bytes) const {
    StepCost dec = cost_model_->make_step_cost();
    dec.add_pass(Phase::kCompress, payload_bytes / shards_ + 4.0 * shard_elems_);
    return dec.compute_s[static_cast<size_t>(Phase::kCompress)];
  }

  // A timing-only BSP clock of compressed pushes, priced as a training run's clock with every worker's push handed
  // over at once (step(): encode_push and price_push): each worker encodes its buckets (the encode passes of
  // encode_passes, error feedback's 3 passes, the payload written; modeled payload of price_compressed_bucket) and
  // pushes its payload (a co-located shard's part stays); the server decodes each push (payload / shards read, the
  // shard's fp32 sum written) and applies; every worker pulls the dense parameters.
  void price_compressed(const StepInput& in) const {
    const size_t ri = static_cast<size_t>(in.rank);
    double payload = 0.0, encode_bytes = 0.0;
    for (const auto& b : timing_reduction_.buckets) {
      const BucketShape shape = modeled_shape(timing_reduction_, in.step, b);
      const double bucket_payload = price_compressed_bucket(compression_, shape).payload_bytes;
      encode_bytes += bucket_encode_bytes(shape.n(), shape.error_feedback, bucket_payload);
      payload += bucket_payload;
    }
    const bool local_shard = !dedicated_ && in.rank < shards_;
    const double push_wire = local_shard ? payload * (shards_ - 1) / shards_ : payload;
    const double encode_s = encode_model_s(encode_bytes), decode_s = decode_model_s(payload);
    const BspClockPrice clock = price_bsp_clock(cost_model_->collectives(), shards_, dedicated_,
                                                std::vector<double>(static_cast<size_t>(ranks_), payload), full_bytes_,
                                                apply_s_ + decode_s);
    const double pull_s = *std::max_element(clock.pull_s.begin(), clock.pull_s.end());
    if (push_wire + wire_bytes_[ri] > 0)
      in.cost->add_p2p_time(clock.pushes_s + pull_s, push_wire, push_wire + wire_bytes_[ri]);
    in.cost->add_served_bytes(served_bytes_[ri]);
    in.cost->add_time(Phase::kCompress, encode_s + decode_s);
    in.cost->add_time(Phase::kOptimizer, apply_s_);
    in.cost->synchronous = true;
  }

  // Measured clock of a worker's step (docs/design.md, section 3, "The parameter server's measured phases"): each
  // piece of work is timed on the clock of the memory that runs it (timed_on): the worker's loss scaler and clipping
  // (optimizer) and its copies, the push's download and the pull's upload (communicate), on the run's memory (a
  // device's: CUDA events on the rank's stream); the push's encode (compress) and the server's arithmetic (optimizer)
  // on host memory, where they run on every backend (the steady clock). Waiting for turns is a host wait (wait); the
  // progress points (the series, divergence check, evaluation and hooks, on the thread of the worker that completes
  // one) are in no phase; the rest of the step (turns and link pricing: the exchange's host bookkeeping) is
  // communicate on the host clock (attribute).
  void step(const StepInput& in) override {
    const int r = in.rank;
    const size_t ri = static_cast<size_t>(r);
    const int64_t c = in.step;
    PhaseClock& clock = *in.clock;
    StepSeconds secs;
    auto turn = [&](double t) {
      const double a = now_s();
      sched_.acquire(r, t);
      secs.wait_s += now_s() - a;
    };

    // This clock's modeled compute (the rank loop priced its micro-batches into in.cost).
    const auto& cs = in.cost->compute_s;
    const double f = straggler_factor(stragglers_, seed_, c, r);
    ModeledStep m;
    for (Phase p : {Phase::kData, Phase::kForward, Phase::kBackward, Phase::kCompress})
      m.times.phase_s[static_cast<size_t>(p)] = cs[static_cast<size_t>(p)] * f;
    double compute_s = 0.0;
    for (double x : m.times.phase_s) compute_s += x;
    const double t0 = t_start_[ri];
    // The worker's own loss scaler and clipping (worker_precision); an inf/NaN gradient is not pushed.
    bool skip = false;
    if (scaled_ || clip_) {
      timed_on(memory_, r, clock, Phase::kOptimizer, secs, [&] { skip = !worker_precision(in); });
      StepCost unscale = cost_model_->make_step_cost();
      precision_[ri].price(unscale, static_cast<double>(n_));
      const double unscale_s = unscale.compute_s[static_cast<size_t>(Phase::kOptimizer)];
      compute_s += unscale_s;
      m.times.phase_s[static_cast<size_t>(Phase::kOptimizer)] += unscale_s;
    }
    skipped_[ri] = skip ? 1 : 0;  // read by the aggregating turn (after this worker's push turn)
    if (skip) ++skipped_by_rank_[ri];
    // The push: dense fp32, or this worker's encoded payload (encoded here, outside the turn: worker-local state),
    // from the pushed gradient's host copy (pushed_gradient).
    float* pushed = nullptr;
    if (!skip) timed_on(memory_, r, clock, Phase::kCommunicate, secs, [&] { pushed = pushed_gradient(in); });
    double push_bytes = wire_bytes_[ri], payload_bytes = full_bytes_, server_s = apply_s_;
    if (skip) {  // an 8-byte notice (no gradient), so the server still counts this worker's clock
      push_bytes = payload_bytes = 8.0;
    } else if (compressed_) {
      const PushRecord* encoded = nullptr;
      timed_on(host_element_ops(), r, clock, Phase::kCompress, secs, [&] { encoded = &encode_push(in, pushed); });
      const PushRecord& rec = *encoded;
      push_bytes = rec.wire_bytes;
      payload_bytes = static_cast<double>(rec.payload_bytes);
      server_s += rec.decode_model_s;
      m.times.phase_s[static_cast<size_t>(Phase::kCompress)] += rec.encode_model_s + rec.decode_model_s;
      compute_s += rec.encode_model_s;
    }
    const double t_push = price_push(r, t0 + compute_s, payload_bytes, server_s, turn);
    const double push_p2p_s = t_push - server_s - (t0 + compute_s);  // until the server starts applying it

    turn(t_push);
    if (done_) {  // the budget was used up while this gradient was computed: dropped
      ++discarded_;
      m.times.phase_s[static_cast<size_t>(Phase::kCommunicate)] = push_p2p_s;
      m.exposed_s = push_p2p_s;  // nothing of a push overlaps compute (see below)
      m.times.step_s = t_push - t0 - server_s;
      m.times.bytes_sent = static_cast<uint64_t>(push_bytes);
      return finish(r, m, clock, secs);
    }
    // Inside the turn: a worker whose scaler cannot recover (its own thread updated it before the turn) ends the run
    // at the next progress point.
    if (exhausted_rank_ < 0 && precision_[ri].scaler().exhausted()) exhausted_rank_ = r;
    if (!server_ready_) {  // the first event of the run: every worker still holds the initial parameters
      timed_on(memory_, r, clock, Phase::kCommunicate, secs,
               [&] { memory_.download(r, server_.data(), worker_[ri].get(), n_); });
      server_ready_ = true;
    }
    std::optional<Applied> applied;
    timed_on(host_element_ops(), r, clock, Phase::kOptimizer, secs, [&] { applied = apply_push(in, pushed); });
    if (applied) {
      const double a = now_s();
      progress(*applied, t_push);
      secs.timed_s += now_s() - a;  // in no phase (the progress point's evaluation and hooks)
      wake_ready(t_push);
    }
    sched_.release(r, t_push);

    // Pull for clock c + 1, once every worker has finished clock c - s (BSP: c).
    turn(t_push);
    double t_pull = t_push;
    if (!done_ && !may_start(c + 1)) {
      need_[ri] = c + 1;
      const double a = now_s();
      t_pull = std::max(t_push, sched_.block(r));  // real ordering may wake from a turn modeled earlier
      secs.wait_s += now_s() - a;
    }
    const double wait_s = t_pull - t_push;
    wait_s_[ri] += wait_s;
    // The pull's messages queue on the shard hosts' send links and this worker's receive link (ps_cost.h).
    const double pull_s = done_ ? 0.0 : links_->pull(r, t_pull, full_bytes_) - t_pull;
    m.times.phase_s[static_cast<size_t>(Phase::kCommunicate)] = push_p2p_s + pull_s;
    // Exposed communication: the push starts after the whole backward and the next clock's compute starts after the
    // pull, so every second of both is on this worker's critical path (none overlapped; the wait is not counted).
    m.exposed_s = m.times.phase_s[static_cast<size_t>(Phase::kCommunicate)];
    m.overlapped_s = 0.0;
    m.times.phase_s[static_cast<size_t>(Phase::kOptimizer)] += apply_s_;
    m.times.phase_s[static_cast<size_t>(Phase::kWait)] = wait_s;
    // Sent: the push, and on a shard host the other workers' pulls of this clock (none after the end of the run).
    m.times.bytes_sent = static_cast<uint64_t>(push_bytes + (done_ ? 0.0 : served_bytes_[ri]));
    if (done_) {
      m.times.step_s = t_pull - t0;
      return finish(r, m, clock, secs);
    }
    // The pull: inside the turn, server_ is stable.
    timed_on(memory_, r, clock, Phase::kCommunicate, secs,
             [&] { memory_.upload(r, worker_[ri].get(), server_.data(), n_); });
    if (compressed_ && !skip) codec_[ri].records.back().pull_bytes = wire_bytes_[ri];
    read_version_[ri] = version_;
    read_clock_[ri] = min_finished_;
    if (on_read_ != nullptr && *on_read_) (*on_read_)(ParameterRead{r, c + 1, applied_by_rank_});
    t_start_[ri] = t_pull + pull_s;
    m.times.step_s = t_start_[ri] - t0;
    modeled_[ri].push_back(m);
    clock.add_bytes(m.times.bytes_sent);
    sched_.release(r, t_start_[ri]);
    attribute(clock, secs);
  }

 private:
  // Modeled price of a push (ps_cost.h) handed to the links at t_issue: its messages queue on the links in modeled
  // order (a turn at t_issue); under SSP and asynchronous updates its optimizer step then queues on each shard's
  // device in order of arrival (a turn at its arrival). Returns when the server has applied it (BSP: the last part's
  // arrival + server_s; the clock is applied by the last push). Leaves the turn released.
  template <class Turn>
  double price_push(int r, double t_issue, double payload_bytes, double server_s, Turn& turn) {
    turn(t_issue);
    const std::vector<double> arrived = links_->push(r, t_issue, payload_bytes);
    const double t_arrived = *std::max_element(arrived.begin(), arrived.end());
    double t_push = t_arrived + server_s;
    if (staleness_ != 0) {
      sched_.release(r, t_arrived);
      turn(t_arrived);
      if (!done_) t_push = links_->apply(arrived, server_s);
    }
    sched_.release(r, t_push);
    return t_push;
  }

  // The worker's own loss scaler (unscale and check: an inf/NaN gradient is not pushed and its scale backs off) and
  // clipping of its own mean gradient (sum / its samples), on its gradient in.grad where it lives (the run's memory,
  // through ElementOps; step times it as optimizer work on that memory). Returns false when the push is skipped.
  bool worker_precision(const StepInput& in) {
    const int r = in.rank;
    PrecisionStep& precision = precision_[static_cast<size_t>(r)];
    if (!clip_ || in.local_samples <= 0)
      return precision.before_update(memory_, r, in.grad, n_, in.step + 1, in.local_loss_nonfinite()).applied;
    const float ls = static_cast<float>(in.local_samples);
    memory_.divide(r, in.grad, n_, ls);
    const bool applied =
        precision.before_update(memory_, r, in.grad, n_, in.step + 1, in.local_loss_nonfinite()).applied;
    memory_.scale(r, in.grad, n_, ls);
    return applied;
  }

  // The pushed gradient (rank in.rank's sum in.grad, n floats, after its scaler and clipping) in host memory, where
  // the server and the encode read it: on host memory in.grad itself; on a device memory downloaded into the worker's
  // staging buffer (the push's device-to-host copy, which step times into communicate on the memory's clock). The
  // worker's own thread, outside any turn; the copy stays intact until its next step (BSP's aggregating turn reads it).
  float* pushed_gradient(const StepInput& in) {
    if (memory_.host()) return in.grad;
    std::vector<float>& staged = staged_[static_cast<size_t>(in.rank)];
    memory_.download(in.rank, staged.data(), in.grad, n_);
    return staged.data();
  }

  // The server's parameters (n floats) in rank 0's memory, where the rank loop counts and evaluates them
  // (eval_params, progress points): server_ itself on host memory; on a device memory uploaded into rank 0's copy,
  // server_view_. Inside a turn (a progress point, on the thread of the worker that completes it) or after the run.
  const float* server_view() {
    if (memory_.host()) return server_.data();
    memory_.upload(0, server_view_.get(), server_.data(), n_);
    return server_view_.get();
  }

  // True when a worker may start clock `next`: every worker has finished clock next - s - 1.
  bool may_start(int64_t next) const {
    if (staleness_ == kStalenessInf) return true;
    return min_finished_ >= next - staleness_;
  }

  // What an applied push hands to the progress points (progress): its loss sum and samples (BSP: the clock's), the
  // gradients applied (BSP: ranks) and the run's budget of them.
  struct Applied {
    double loss_sum = 0.0;
    double samples = 0.0;
    int pushes = 0;
    int64_t budget = 0;
  };

  // Inside the push turn: the server takes rank in.rank's gradient of clock in.step, `pushed` (its host copy, n
  // floats; null for a skipped push). Returns what the caller hands to progress and then wakes the ready workers
  // for, or nothing (BSP, before the clock's last push).
  std::optional<Applied> apply_push(const StepInput& in, float* pushed) {
    const size_t ri = static_cast<size_t>(in.rank);
    const int64_t c = in.step;
    hist_versions_[version_ - read_version_[ri]] += 1;  // updates applied between this worker's read and now
    hist_clocks_[c - read_clock_[ri]] += 1;             // the writer's clock minus the clock of what it read
    const int64_t budget = in.total_steps * ranks_;
    if (staleness_ == 0) {
      // BSP: keep the pointer (the worker waits in its pull until the clock is applied, so its host copy is intact).
      // A skipped push (the worker's scaler found inf/NaN) brings no gradient and no samples to average over.
      const bool skip = skipped_[ri] != 0;
      pending_[ri] = skip ? nullptr : pushed;
      pending_samples_[ri] = skip ? 0.0 : in.local_samples;
      pending_all_samples_[ri] = in.local_samples;
      pending_loss_[ri] = in.local_loss_sum;
      if (++clock_pushes_ < ranks_) return std::nullopt;
      // The whole clock is in: sum in rank order and divide by the clock's samples (allreduce's arithmetic, and its
      // control all-reduce's for samples and loss), apply. Without skips q0 = 0 and this is exactly that sum.
      double samples = pending_samples_[0], all_samples = pending_all_samples_[0], loss = pending_loss_[0];
      for (int q = 1; q < ranks_; ++q) {
        samples += pending_samples_[static_cast<size_t>(q)];
        all_samples += pending_all_samples_[static_cast<size_t>(q)];
        loss += pending_loss_[static_cast<size_t>(q)];
      }
      int q0 = 0;
      while (q0 < ranks_ && pending_[static_cast<size_t>(q0)] == nullptr) ++q0;
      const float s = static_cast<float>(samples);
      const double lr = learning_rate(schedule_, optimizer_config_.lr, c, in.total_steps);
      if (q0 < ranks_) {  // at least one push arrived
        if (compressed_) decode_clock(c, s);
        for (const auto& [lo, hi] : shard_ranges_) {
          if (compressed_) {
            server_apply(aggregate_.data(), lo, hi, lr);
            continue;
          }
          for (size_t a = lo; a < hi; a += kTileElems) {
            const size_t e = std::min(hi, a + kTileElems);
            float* out = aggregate_.data();
            const float* g0 = pending_[static_cast<size_t>(q0)];
            for (size_t i = a; i < e; ++i) out[i] = g0[i];
            for (int q = q0 + 1; q < ranks_; ++q) {
              const float* g = pending_[static_cast<size_t>(q)];
              if (g == nullptr) continue;
              for (size_t i = a; i < e; ++i) out[i] += g[i];
            }
            for (size_t i = a; i < e; ++i) out[i] = out[i] / s;
          }
          server_apply(aggregate_.data(), lo, hi, lr);
        }
        ++version_;
      }
      applied_ += ranks_;
      for (auto& a : applied_by_rank_) a = c + 1;
      min_finished_ = c + 1;
      clock_pushes_ = 0;
      return Applied{loss, all_samples, ranks_, budget};
    }
    // SSP / asynchronous: this push alone, its own mean gradient, at 1/N of the learning rate of the server's current
    // step: N pushes carry one step's worth of gradient, so they move the parameters as far as one synchronous step
    // (exactly so for SGD without staleness) and a staleness sweep compares equal learning-rate budgets.
    if (in.local_samples > 0 && skipped_[ri] == 0) {
      const float ls = static_cast<float>(in.local_samples);
      float* g = pushed;
      if (compressed_) {  // the push as the server decodes it
        g = decoded_.data();
        std::fill(decoded_.begin(), decoded_.end(), 0.0f);
        decode_push(in.rank, c, g);
      }
      for (size_t i = 0; i < n_; ++i) g[i] = g[i] / ls;
      const double lr = learning_rate(schedule_, optimizer_config_.lr, applied_ / ranks_, in.total_steps) / ranks_;
      for (const auto& [lo, hi] : shard_ranges_) server_apply(g, lo, hi, lr);
      ++version_;
    }
    ++applied_;
    ++applied_by_rank_[ri];
    min_finished_ = *std::min_element(applied_by_rank_.begin(), applied_by_rank_.end());
    return Applied{in.local_loss_sum, in.local_samples, 1, budget};
  }

  // The server's optimizer on [lo, hi) with gradient g. Under fp16_pure there are no master weights: the averaged
  // gradient is rounded to fp16 first and the parameters and optimizer state are stored in fp16 after (PrecisionStep;
  // no-ops in every other mode).
  void server_apply(float* g, size_t lo, size_t hi, double lr) {
    server_precision_.round_gradient(g, lo, hi);
    optimizer_->step(server_.data(), g, lo, hi, lr, version_ + 1);
    server_precision_.after_update(server_.data(), *optimizer_, lo, hi);
  }

  // One bucket's job for worker `rank` at clock c (the compressors' stream is keyed by (clock, rank, bucket)).
  BucketJob job_for(int rank, int64_t c, size_t b, CompressTally* tally) const {
    BucketJob job;
    job.rank = rank;
    job.ranks = ranks_;
    job.step = c;
    job.bucket = static_cast<uint32_t>(b);
    job.seed = static_cast<uint64_t>(seed_);
    job.offset = buckets_[b].first;
    job.n = buckets_[b].second - buckets_[b].first;
    job.tensors = tensors_;
    job.tally = tally;
    return job;
  }

  // Worker side (its own thread, outside any turn): p = g + e in `p` (the pushed gradient's host copy,
  // pushed_gradient: n floats), every bucket encoded into the worker's payloads, own = decode(C(p)), e = p - own.
  // Prices encode and the server's decode on the modeled clock.
  const PushRecord& encode_push(const StepInput& in, float* p) {
    PushCodec& w = codec_[static_cast<size_t>(in.rank)];
    if (!w.raw.empty()) std::copy(p, p + n_, w.raw.begin());
    const bool ef = !w.residual.empty();
    if (ef)
      for (size_t i = 0; i < n_; ++i) p[i] += w.residual[i];
    const double a = now_s();
    CompressTally tally;
    uint64_t payload = 0;
    double encode_bytes = 0.0;
    std::fill(w.own.begin(), w.own.end(), 0.0f);
    w.samples = in.local_samples;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      BucketJob job = job_for(in.rank, in.step, b, &tally);
      job.p = p + job.offset;
      job.own_decoded = w.own.data() + job.offset;
      job.divisor = in.local_samples;
      w.comp->encode(job, w.payload[b]);
      w.comp->decode_add(job, in.rank, w.payload[b].data(), w.payload[b].size(), job.own_decoded);
      encode_bytes += bucket_encode_bytes(job.n, ef, static_cast<double>(w.payload[b].size()));
      payload += w.payload[b].size();
    }
    PushRecord rec;
    double norm2 = 0.0;
    if (ef) {
      for (size_t i = 0; i < n_; ++i) {
        const float e = p[i] - w.own[i];
        w.residual[i] = e;
        norm2 += static_cast<double>(e) * e;
      }
    } else if (const float* v = w.comp->own_residual()) {  // host memory (the server's jobs)
      for (size_t i = 0; i < n_; ++i) norm2 += static_cast<double>(v[i]) * v[i];
    }
    rec.compress_s = now_s() - a;
    rec.residual_norm = std::sqrt(norm2);
    if (!w.raw.empty()) {
      double d2 = 0.0, x2 = 0.0;
      for (size_t i = 0; i < n_; ++i) {
        const double d = static_cast<double>(w.own[i]) - w.raw[i];
        d2 += d * d;
        x2 += static_cast<double>(w.raw[i]) * w.raw[i];
      }
      rec.relative_error = x2 > 0 ? std::sqrt(d2 / x2) : (d2 > 0 ? INFINITY : 0.0);
    }
    rec.payload_bytes = payload;
    const bool local_shard = !dedicated_ && in.rank < shards_;
    const double payload_bytes = static_cast<double>(payload);
    rec.wire_bytes = local_shard ? payload_bytes * (shards_ - 1) / shards_ : payload_bytes;
    rec.encode_model_s = encode_model_s(encode_bytes);
    rec.decode_model_s = decode_model_s(payload_bytes);
    w.records.push_back(rec);
    return w.records.back();
  }

  // Server side, inside a turn: out[0..n) += decode of worker `rank`'s payloads of clock c.
  void decode_push(int rank, int64_t c, float* out) {
    PushCodec& w = codec_[static_cast<size_t>(rank)];
    const double a = now_s();
    CompressTally tally;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      BucketJob job = job_for(rank, c, b, &tally);
      job.divisor = w.samples;  // the pushing worker's samples, as at its encode
      server_comp_->decode_add(job, rank, w.payload[b].data(), w.payload[b].size(), out + job.offset);
    }
    w.decode_s.push_back(now_s() - a);
  }

  // BSP, inside the aggregating turn: aggregate_ = (decoded pushes of clock c summed in rank order, or the
  // compressor's own combination of them: signSGD's majority vote) / S.
  void decode_clock(int64_t c, float S) {
    std::fill(aggregate_.begin(), aggregate_.end(), 0.0f);
    std::vector<const uint8_t*> ptrs(static_cast<size_t>(ranks_));
    std::vector<size_t> sizes(static_cast<size_t>(ranks_));
    bool combined_all = true;
    CompressTally tally;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      ptrs.clear();
      sizes.clear();
      for (int q = 0; q < ranks_; ++q) {
        if (skipped_[static_cast<size_t>(q)] != 0) continue;
        const std::vector<uint8_t>& pl = codec_[static_cast<size_t>(q)].payload[b];
        ptrs.push_back(pl.data());
        sizes.push_back(pl.size());
      }
      BucketJob job = job_for(0, c, b, &tally);
      job.sum = aggregate_.data() + job.offset;
      if (!server_comp_->combine(job, ptrs, sizes)) combined_all = false;
    }
    if (!combined_all) {
      std::fill(aggregate_.begin(), aggregate_.end(), 0.0f);
      for (int q = 0; q < ranks_; ++q)
        if (skipped_[static_cast<size_t>(q)] == 0) decode_push(q, c, aggregate_.data());
    }
    for (size_t i = 0; i < n_; ++i) aggregate_[i] = aggregate_[i] / S;
  }

  // Counts a.pushes applied gradients toward the next progress point (every `ranks` of them) and the budget, at
  // modeled time t.
  void progress(const Applied& a, double t) {
    group_loss_ += a.loss_sum;
    group_samples_ += a.samples;
    group_pushes_ += a.pushes;
    if (group_pushes_ >= ranks_) {
      ProgressPoint p;
      p.step = applied_ / ranks_;
      p.modeled_s = t;
      p.train_loss = group_samples_ > 0 ? group_loss_ / group_samples_ : 0.0;
      p.samples = group_samples_;
      p.params = server_view();
      p.scaler_exhausted_rank = exhausted_rank_;
      group_pushes_ = 0;
      group_loss_ = group_samples_ = 0.0;
      if (sink_ && !sink_(p)) done_ = true;
    }
    if (applied_ >= a.budget) done_ = true;
  }

  // Wakes every blocked worker whose bound is now met (or all of them once the run is done), at modeled time t.
  void wake_ready(double t) {
    for (int q = 0; q < ranks_; ++q) {
      int64_t& need = need_[static_cast<size_t>(q)];
      if (need < 0 || !(done_ || may_start(need))) continue;
      need = -1;
      sched_.wake(q, t);
    }
  }

  // Host seconds of a worker's step (step's measured clock): since it began, waiting for turns, and the host time of
  // the work timed into phases on its memory's clock (timed_on) or left out of every phase (progress points).
  struct StepSeconds {
    double enter_s = now_s();
    double wait_s = 0.0;
    double timed_s = 0.0;
  };

  void finish(int r, const ModeledStep& m, PhaseClock& clock, const StepSeconds& secs) {
    modeled_[static_cast<size_t>(r)].push_back(m);
    clock.add_bytes(m.times.bytes_sent);
    done_rank_[static_cast<size_t>(r)] = 1;
    sched_.leave(r);
    attribute(clock, secs);
  }

  // Runs f(), work on memory `ops` for worker r, timed into `phase` of its clock on that memory's clock (TimedPhase:
  // the steady clock on host memory; a device memory's events on the rank's stream, added at its settle); adds f's
  // host seconds to secs.timed_s, so the step's host remainder (attribute) leaves it out.
  template <class F>
  static void timed_on(ElementOps& ops, int r, PhaseClock& clock, Phase phase, StepSeconds& secs, F&& f) {
    const double a = now_s();
    {
      TimedPhase span(ops, r, clock, phase);
      f();
    }
    secs.timed_s += now_s() - a;
  }

  // The end of a worker's step on the measured clock: waiting for turns -> wait; the rest of the step's host time
  // that no memory timed and no phase leaves out (turns, link pricing) -> communicate. On host memory communicate is
  // then the step's host time less its wait, its compress and optimizer work and its progress points.
  static void attribute(PhaseClock& clock, const StepSeconds& secs) {
    const double total = now_s() - secs.enter_s;
    clock.add(Phase::kWait, secs.wait_s);
    clock.add(Phase::kCommunicate, std::max(0.0, total - secs.wait_s - secs.timed_s));
  }

  const int ranks_;
  const size_t n_;
  const int64_t staleness_;
  const int shards_;
  const bool dedicated_;
  const OptimizerConfig optimizer_config_;
  const ScheduleConfig schedule_;
  const StragglerConfig stragglers_;
  const uint64_t seed_;
  const std::function<void(const ParameterRead&)>* on_read_;
  const CompressionConfig compression_;
  const CostModel* cost_model_;
  const std::vector<TensorInfo>* tensors_;
  const PrecisionStep server_precision_;  // fp16_pure: the server's fp16 storage (no scaler runs on the server)
  const bool timing_only_;                // training.mode "timing": priced only, no workers or buffers
  ElementOps& memory_;                    // the run's memory: the workers' parameters and gradients live there
  InteractionScheduler sched_;
  std::vector<std::pair<size_t, size_t>> shard_ranges_;
  std::vector<double> wire_bytes_;  // per rank, each way: the part of a dense push or pull that crosses the wire
  double full_bytes_ = 0.0;         // a dense push or pull of every shard (4n; fp16_pure 2n)
  // The modeled price of pushes, pulls and server steps (ps_cost.h): used inside turns only, so in modeled order.
  std::optional<ParameterServerLinks> links_;
  std::vector<double> served_bytes_;         // per rank and clock: the pulls its co-located shard sends to others
  double apply_s_ = 0.0;
  double shard_elems_ = 0.0;  // elements per shard
  ModeledReduction timing_reduction_;  // timing-only compressed pushes: the buckets priced (price_compressed)
  ProgressSink sink_;
  int exhausted_rank_ = -1;  // the first worker whose loss scaler cannot recover (written and read inside turns)

  // Compressed pushes. One record per push of a worker.
  struct PushRecord {
    uint64_t payload_bytes = 0;   // the encoded message
    double wire_bytes = 0.0;      // the part that crosses to other devices (co-located: (P-1)/P of it)
    double pull_bytes = 0.0;      // the dense pull that followed it (0 when the run ended first)
    double compress_s = 0.0;      // measured encode (and error feedback)
    double encode_model_s = 0.0;  // modeled encode on the worker
    double decode_model_s = 0.0;  // modeled decode on the server
    double relative_error = std::nan("");  // ||decode(C(g + e)) - g|| / ||g|| (measure_error)
    double residual_norm = 0.0;
  };
  // A worker's compressor, residual and last payloads (per bucket; BSP: read by the aggregating turn while the
  // worker waits in its pull, so they are intact).
  struct PushCodec {
    std::unique_ptr<Compressor> comp;
    std::vector<float> residual, own, raw;
    std::vector<std::vector<uint8_t>> payload;
    std::vector<PushRecord> records;
    std::vector<double> decode_s;  // measured server decode of this worker's pushes (written inside turns)
    double samples = 0.0;          // the samples of the payload's push (casts push the mean; the server rescales)
  };
  bool compressed_ = false;
  std::vector<PushCodec> codec_;
  // Precision: one loss scaler per worker (used by its own thread); skipped_[r]: worker r's current push was skipped.
  std::vector<PrecisionStep> precision_;
  bool scaled_ = false;
  bool clip_ = false;  // training.clip_grad_norm > 0: each worker clips its mean gradient before pushing
  std::vector<char> skipped_;
  std::vector<int64_t> skipped_by_rank_;
  std::unique_ptr<Compressor> server_comp_;  // decodes inside turns (the workers' instances encode outside them)
  std::vector<std::pair<size_t, size_t>> buckets_;
  std::vector<float> decoded_;  // SSP / async: the push being applied

  // Each rank's own (written by its thread, inside its turns). worker_[r]: its parameters in rank r's memory;
  // staged_[r] (device memory only): the host copy of its pushed gradient.
  std::vector<FloatBuffer> worker_;
  std::vector<std::vector<float>> staged_;
  std::vector<char> done_rank_;
  std::vector<double> t_start_;
  std::vector<int64_t> read_version_, read_clock_;
  std::vector<double> wait_s_;
  std::vector<std::vector<ModeledStep>> modeled_;
  // Server state (host memory): touched only inside turns. server_view_ (device memory only): rank 0's copy of
  // server_ for the rank loop (server_view).
  std::vector<float> server_;
  FloatBuffer server_view_;
  std::unique_ptr<Optimizer> optimizer_;
  bool server_ready_ = false;
  bool done_ = false;
  int64_t version_ = 0;         // optimizer updates applied
  int64_t applied_ = 0;         // gradients applied (BSP: ranks per clock)
  int64_t min_finished_ = 0;    // clocks every worker has finished
  std::vector<int64_t> applied_by_rank_;
  std::vector<int64_t> need_;   // blocked worker: the clock it waits to start; -1 otherwise
  int64_t discarded_ = 0;
  std::map<int64_t, int64_t> hist_versions_, hist_clocks_;
  double group_loss_ = 0.0, group_samples_ = 0.0;
  int group_pushes_ = 0;
  // BSP: the current clock's pushes.
  std::vector<const float*> pending_;
  std::vector<float> aggregate_;
  std::vector<double> pending_samples_, pending_all_samples_, pending_loss_;
  int clock_pushes_ = 0;
};

// The parameter server's step control: no per-step control all-reduce (StepInput.global_samples is the worker's own
// samples, the loss its own); each worker runs until the server says it is done (a fast worker computes more than
// `total` steps), and the series comes from the server's progress points (ControlSetup::progress).
class FreeRunningControl final : public StepControl {
 public:
  FreeRunningControl(ParameterServer& ps, int64_t total, int ranks) : ps_(ps), total_(total), ranks_(ranks) {}
  // The run ends on the budget of total x ranks pushes, so a worker's loader may serve that many steps.
  int64_t loader_steps() const override { return total_ * static_cast<int64_t>(ranks_); }
  bool runs(int, int64_t) const override { return true; }
  StepVerdict combine(int, int64_t, const StepTally& tally, PhaseClock&) override {
    StepVerdict v;
    v.global_samples = tally.grad_samples;
    v.loss_nonfinite = !std::isfinite(tally.loss_sum);  // the worker's own loss
    return v;
  }
  bool end_step(int rank, int64_t, const StepVerdict&, const PhaseClock&) override { return !ps_.rank_done(rank); }
  void abort() override { ps_.abort(); }

 private:
  ParameterServer& ps_;
  int64_t total_;
  int ranks_;
};

std::unique_ptr<StepControl> ParameterServer::make_control(const ControlSetup& setup) {
  sink_ = setup.progress;
  return std::make_unique<FreeRunningControl>(*this, setup.total_steps, setup.ranks);
}

std::unique_ptr<SyncStrategy> make(const StrategySetup& setup) { return std::make_unique<ParameterServer>(setup); }

// The parameter server: what this version supports (docs/design.md, section 2; sim/strategy/parameter_server.cpp).
void parameter_server_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, msg}); };
  const SyncConfig& sy = c.sync;
  const bool timing = c.training.mode == "timing";
  if (!sy.dedicated && sy.shards > c.cluster.ranks)
    add("sync.shards", fmt::format("co-located shards live on the workers: at most cluster.ranks ({}), got {} (or set "
                                   "sync.dedicated true)", c.cluster.ranks, sy.shards));
  const std::string& mode = c.precision.mode;
  if (mode != "fp32" && mode != "bf16_mixed" && mode != "fp16_mixed" && mode != "fp16_pure")
    add("precision.mode", fmt::format("sync.kind \"parameter_server\" supports \"fp32\", \"bf16_mixed\", "
                                      "\"fp16_mixed\" (fp32 master weights on the server, each worker its own loss "
                                      "scaler) and \"fp16_pure\" in this version, got \"{}\"", mode));
  if (c.report.trace)
    add("report.trace", "sync.kind \"parameter_server\" has no per-step snapshot of every rank (ranks do not step "
                        "together): use false");
  if (timing && sy.staleness != 0)
    add("training.mode", "timing-only runs of sync.kind \"parameter_server\" price BSP (sync.staleness 0) only: SSP "
                         "and asynchronous schedules need the event order of a training run");
}

}  // namespace

StrategyEntry parameter_server_strategy() {
  return {"parameter_server", "parameters sharded over server shards that own the optimizer; workers push gradients "
                              "and pull parameters; sync.staleness 0 = BSP, s = SSP, \"inf\" = asynchronous, in "
                              "modeled-time order",
          make, join_options({"sync.staleness", "sync.shards", "sync.dedicated", "sync.ordering"}, kBucketOptions),
          parameter_server_issues};
}

}  // namespace gs
