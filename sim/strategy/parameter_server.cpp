// `parameter_server` (DESIGN.md section 3): the server owns the parameters (sharded over sync.shards shards) and the
// optimizer; each worker computes a gradient on the parameters it last pulled, pushes it, and pulls again.
// sync.staleness 0 = BSP (the server sums a clock's pushes in rank order, divides by their samples, applies once),
// s = SSP (Ho et al. 2013: a worker starts clock c only when every worker has finished clock c - s - 1), "inf" =
// asynchronous (every push applied on arrival, with its own mean gradient at learning rate lr / N: N pushes are one
// step's worth). Budget: the run ends when steps x ranks pushes are applied.
// Every push and pull is one turn of InteractionScheduler (sim/runtime/scheduler.h) at the worker's modeled time, so
// the order, and with it every bit of the result, follows the modeled clock. Extend: a new server rule is a change
// in apply_push / may_start; pricing lives in the constructor and record_step.
//
// Modeled clock of worker r at clock c (starting at t0, the end of its last pull):
//   push applied at t_push = t0 + compute x straggler(c, r) + p2p(push bytes) + apply (optimizer over n / P values,
//   shards apply in parallel; BSP adds the sum of N pushes as one memory pass);
//   pull read at t_pull = max(t_push, the time the SSP/BSP bound is met); next clock starts at t_pull + p2p(pull).
// Co-located shards (default): rank r < P holds shard r, so its own slice does not cross the wire (push and pull
// bytes 4n (P-1)/P); dedicated shards: 4n each way. The arithmetic is the same either way (shards are slices of one
// buffer, updated in scheduler order); only the pricing differs. Server queueing and co-located contention for
// the GPU are not modeled.
#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/optim/optimizer.h"
#include "sim/runtime/scheduler.h"
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

class ParameterServer final : public SyncStrategy {
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
        sched_(s.ranks, parse_ordering(s.config.sync.ordering)) {
    GS_EXPECT(s.cost_model != nullptr, "parameter_server needs the cost model (its order follows the modeled clock)");
    // Shard p holds [p * per, (p + 1) * per) (the last one the rest).
    const size_t per = (n_ + static_cast<size_t>(shards_) - 1) / static_cast<size_t>(shards_);
    for (int p = 0; p < shards_; ++p)
      shard_ranges_.emplace_back(std::min(n_, per * static_cast<size_t>(p)),
                                 std::min(n_, per * static_cast<size_t>(p + 1)));
    const double full_bytes = 4.0 * static_cast<double>(n_);
    const CollectiveModel& coll = s.cost_model->collectives();
    for (int r = 0; r < ranks_; ++r) {
      const bool local_shard = !dedicated_ && r < shards_;
      const double bytes = local_shard ? full_bytes * (shards_ - 1) / shards_ : full_bytes;
      wire_bytes_.push_back(bytes);
      p2p_s_.push_back(bytes > 0 ? coll.p2p_s(bytes) : 0.0);
    }
    StepCost apply = s.cost_model->make_step_cost();
    s.cost_model->add_optimizer(apply, optimizer_config_, static_cast<double>(per));
    if (staleness_ == 0) apply.add_pass(Phase::kOptimizer, 4.0 * (ranks_ + 1) * static_cast<double>(per));
    apply_s_ = apply.compute_s[static_cast<size_t>(Phase::kOptimizer)];
    if (s.timing_only) return;
    worker_.assign(static_cast<size_t>(ranks_), std::vector<float>(n_));
    server_.resize(n_);
    optimizer_ = make_optimizer(optimizer_config_, n_);
    if (staleness_ == 0) {
      pending_.assign(static_cast<size_t>(ranks_), nullptr);
      pending_samples_.assign(static_cast<size_t>(ranks_), 0.0);
      pending_loss_.assign(static_cast<size_t>(ranks_), 0.0);
      aggregate_.resize(n_);
    }
    const size_t R = static_cast<size_t>(ranks_);
    done_rank_.assign(R, 0);
    t_start_.assign(R, 0.0);
    read_version_.assign(R, 0);
    read_clock_.assign(R, 0);
    need_.assign(R, -1);
    wait_s_.assign(R, 0.0);
    applied_by_rank_.assign(R, 0);
    modeled_.assign(R, {});
  }

  float* params(int rank) override { return worker_[static_cast<size_t>(rank)].data(); }
  const float* eval_params() override { return server_.data(); }
  // BSP: every worker pulls the same parameters after each clock; SSP and async workers read different versions.
  bool replicas_identical() const override { return staleness_ == 0; }
  bool lockstep() const override { return false; }
  bool rank_done(int rank) const override { return done_rank_[static_cast<size_t>(rank)] != 0; }
  void set_progress_sink(ProgressSink sink) override { sink_ = std::move(sink); }
  std::vector<std::vector<ModeledStep>> modeled_rank_steps() const override { return modeled_; }
  void abort() override { sched_.abort(); }

  json staleness_report() const override {
    json pushes = json::array(), wait = json::array();
    for (int r = 0; r < ranks_; ++r) {
      pushes.push_back(applied_by_rank_[static_cast<size_t>(r)]);
      wait.push_back(wait_s_[static_cast<size_t>(r)]);
    }
    return {{"ordering", sched_.ordering() == Ordering::kModeled ? "modeled" : "real"},
            {"staleness", staleness_ == kStalenessInf ? json("inf") : json(staleness_)},
            {"shards", shards_},
            {"dedicated", dedicated_},
            {"versions", histogram_json(hist_versions_)},
            {"clocks", histogram_json(hist_clocks_)},
            {"wait_s_per_rank", wait},
            {"pushes_per_rank", pushes},
            {"discarded_pushes", discarded_}};
  }

  // Timing-only (BSP only, refused otherwise at validation): every rank pushes, waits for the slowest (the step is
  // synchronous), the server applies and every rank pulls.
  void price_step(const StepInput& in) const override {
    if (in.cost == nullptr) return;
    const double bytes = wire_bytes_[static_cast<size_t>(in.rank)];
    if (bytes > 0) {
      in.cost->add_p2p(bytes);
      in.cost->add_p2p(bytes);
    }
    in.cost->add_time(Phase::kOptimizer, apply_s_);
    in.cost->synchronous = true;
  }

  void step(const StepInput& in) override {
    const int r = in.rank;
    const size_t ri = static_cast<size_t>(r);
    const int64_t c = in.step;
    PhaseClock& clock = *in.clock;
    const double enter_s = now_s();
    double wait_real_s = 0.0, apply_real_s = 0.0;
    auto turn = [&](double t) {
      const double a = now_s();
      sched_.acquire(r, t);
      wait_real_s += now_s() - a;
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
    const double t_push = t0 + compute_s + p2p_s_[ri] + apply_s_;

    turn(t_push);
    if (done_) {  // the budget was used up while this gradient was computed: dropped
      ++discarded_;
      m.times.phase_s[static_cast<size_t>(Phase::kCommunicate)] = p2p_s_[ri];
      m.times.step_s = t_push - t0 - apply_s_;
      m.times.bytes_sent = static_cast<uint64_t>(wire_bytes_[ri]);
      return finish(r, m, clock, enter_s, wait_real_s, apply_real_s);
    }
    {
      const double a = now_s();
      if (!server_ready_) {  // the first event of the run: every worker still holds the initial parameters
        std::memcpy(server_.data(), worker_[ri].data(), n_ * sizeof(float));
        server_ready_ = true;
      }
      apply_push(in, t_push);
      apply_real_s += now_s() - a;
    }
    sched_.release(r, t_push);

    // Pull for clock c + 1, once every worker has finished clock c - s (BSP: c).
    turn(t_push);
    double t_pull = t_push;
    if (!done_ && !may_start(c + 1)) {
      need_[ri] = c + 1;
      const double a = now_s();
      t_pull = std::max(t_push, sched_.block(r));  // real ordering may wake from a turn modeled earlier
      wait_real_s += now_s() - a;
    }
    const double wait_s = t_pull - t_push;
    wait_s_[ri] += wait_s;
    m.times.phase_s[static_cast<size_t>(Phase::kCommunicate)] = p2p_s_[ri] + (done_ ? 0.0 : p2p_s_[ri]);
    m.times.phase_s[static_cast<size_t>(Phase::kOptimizer)] = apply_s_;
    m.times.phase_s[static_cast<size_t>(Phase::kWait)] = wait_s;
    m.times.bytes_sent = static_cast<uint64_t>(wire_bytes_[ri] * (done_ ? 1.0 : 2.0));  // push (and pull)
    if (done_) {
      m.times.step_s = t_pull - t0;
      return finish(r, m, clock, enter_s, wait_real_s, apply_real_s);
    }
    std::memcpy(worker_[ri].data(), server_.data(), n_ * sizeof(float));
    read_version_[ri] = version_;
    read_clock_[ri] = min_finished_;
    if (on_read_ != nullptr && *on_read_) (*on_read_)(ParameterRead{r, c + 1, applied_by_rank_});
    t_start_[ri] = t_pull + p2p_s_[ri];
    m.times.step_s = t_start_[ri] - t0;
    modeled_[ri].push_back(m);
    clock.add_bytes(m.times.bytes_sent);
    sched_.release(r, t_start_[ri]);
    attribute(clock, enter_s, wait_real_s, apply_real_s);
  }

 private:
  // True when a worker may start clock `next`: every worker has finished clock next - s - 1.
  bool may_start(int64_t next) const {
    if (staleness_ == kStalenessInf) return true;
    return min_finished_ >= next - staleness_;
  }

  // Inside the push turn at modeled time t: the server takes rank in.rank's gradient of clock in.step.
  void apply_push(const StepInput& in, double t) {
    const size_t ri = static_cast<size_t>(in.rank);
    const int64_t c = in.step;
    hist_versions_[version_ - read_version_[ri]] += 1;  // updates applied between this worker's read and now
    hist_clocks_[c - read_clock_[ri]] += 1;             // the writer's clock minus the clock of what it read
    const int64_t budget = in.total_steps * ranks_;
    if (staleness_ == 0) {
      // BSP: keep the pointer (the worker waits in its pull until the clock is applied, so its buffer is intact).
      pending_[ri] = in.grad;
      pending_samples_[ri] = in.local_samples;
      pending_loss_[ri] = in.local_loss_sum;
      if (++clock_pushes_ < ranks_) return;
      // The whole clock is in: sum in rank order and divide by the clock's samples (allreduce's arithmetic, and its
      // control all-reduce's for samples and loss), apply.
      double samples = pending_samples_[0], loss = pending_loss_[0];
      for (int q = 1; q < ranks_; ++q) {
        samples += pending_samples_[static_cast<size_t>(q)];
        loss += pending_loss_[static_cast<size_t>(q)];
      }
      const float s = static_cast<float>(samples);
      const double lr = learning_rate(schedule_, optimizer_config_.lr, c, in.total_steps);
      for (const auto& [lo, hi] : shard_ranges_) {
        for (size_t a = lo; a < hi; a += kTileElems) {
          const size_t e = std::min(hi, a + kTileElems);
          float* out = aggregate_.data();
          const float* g0 = pending_[0];
          for (size_t i = a; i < e; ++i) out[i] = g0[i];
          for (int q = 1; q < ranks_; ++q) {
            const float* g = pending_[static_cast<size_t>(q)];
            for (size_t i = a; i < e; ++i) out[i] += g[i];
          }
          for (size_t i = a; i < e; ++i) out[i] = out[i] / s;
        }
        optimizer_->step(server_.data(), aggregate_.data(), lo, hi, lr, version_ + 1);
      }
      ++version_;
      applied_ += ranks_;
      for (auto& a : applied_by_rank_) a = c + 1;
      min_finished_ = c + 1;
      clock_pushes_ = 0;
      progress(loss, samples, ranks_, t, budget);
      wake_ready(t);
      return;
    }
    // SSP / asynchronous: this push alone, its own mean gradient, at 1/N of the learning rate of the server's current
    // step: N pushes carry one step's worth of gradient, so they move the parameters as far as one synchronous step
    // (exactly so for SGD without staleness) and a staleness sweep compares equal learning-rate budgets.
    if (in.local_samples > 0) {
      const float ls = static_cast<float>(in.local_samples);
      for (size_t i = 0; i < n_; ++i) in.grad[i] = in.grad[i] / ls;
      const double lr = learning_rate(schedule_, optimizer_config_.lr, applied_ / ranks_, in.total_steps) / ranks_;
      for (const auto& [lo, hi] : shard_ranges_) optimizer_->step(server_.data(), in.grad, lo, hi, lr, version_ + 1);
      ++version_;
    }
    ++applied_;
    ++applied_by_rank_[ri];
    min_finished_ = *std::min_element(applied_by_rank_.begin(), applied_by_rank_.end());
    progress(in.local_loss_sum, in.local_samples, 1, t, budget);
    wake_ready(t);
  }

  // Counts `pushes` applied gradients toward the next progress point (every `ranks` of them) and the budget.
  void progress(double loss_sum, double samples, int pushes, double t, int64_t budget) {
    group_loss_ += loss_sum;
    group_samples_ += samples;
    group_pushes_ += pushes;
    if (group_pushes_ >= ranks_) {
      ProgressPoint p;
      p.step = applied_ / ranks_;
      p.modeled_s = t;
      p.train_loss = group_samples_ > 0 ? group_loss_ / group_samples_ : 0.0;
      p.samples = group_samples_;
      p.params = server_.data();
      group_pushes_ = 0;
      group_loss_ = group_samples_ = 0.0;
      if (sink_ && !sink_(p)) done_ = true;
    }
    if (applied_ >= budget) done_ = true;
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

  void finish(int r, const ModeledStep& m, PhaseClock& clock, double enter_s, double wait_real_s,
              double apply_real_s) {
    modeled_[static_cast<size_t>(r)].push_back(m);
    clock.add_bytes(m.times.bytes_sent);
    done_rank_[static_cast<size_t>(r)] = 1;
    sched_.leave(r);
    attribute(clock, enter_s, wait_real_s, apply_real_s);
  }

  // Measured clock: waiting for turns -> wait, the server's arithmetic -> optimizer, the rest (copies) -> communicate.
  static void attribute(PhaseClock& clock, double enter_s, double wait_real_s, double apply_real_s) {
    const double total = now_s() - enter_s;
    clock.add(Phase::kWait, wait_real_s);
    clock.add(Phase::kOptimizer, apply_real_s);
    clock.add(Phase::kCommunicate, std::max(0.0, total - wait_real_s - apply_real_s));
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
  InteractionScheduler sched_;
  std::vector<std::pair<size_t, size_t>> shard_ranges_;
  std::vector<double> wire_bytes_, p2p_s_;  // per rank, each way
  double apply_s_ = 0.0;
  ProgressSink sink_;

  // Each rank's own (written by its thread, inside its turns).
  std::vector<std::vector<float>> worker_;
  std::vector<char> done_rank_;
  std::vector<double> t_start_;
  std::vector<int64_t> read_version_, read_clock_;
  std::vector<double> wait_s_;
  std::vector<std::vector<ModeledStep>> modeled_;
  // Server state: touched only inside turns.
  std::vector<float> server_;
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
  std::vector<double> pending_samples_, pending_loss_;
  int clock_pushes_ = 0;
};

}  // namespace

std::unique_ptr<SyncStrategy> make_parameter_server(const StrategySetup& setup) {
  return std::make_unique<ParameterServer>(setup);
}

}  // namespace gs
