// LockstepModeledClock (lockstep_clock.h): the modeled clock's slot ring and per-step bookkeeping for lockstep runs of
// both rank loops. A new per-step modeled effect is one more term in model_step.
#include "sim/runtime/lockstep_clock.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "sim/core/error.h"

namespace gs {

namespace {

// One rank's record of one step as bytes for process 0 (LockstepModeledClock::share): a fixed header, then its
// chains (plain data).
struct CostHeader {
  std::array<double, kPhaseCount> compute_s{};
  std::array<double, kPhaseCount> chain_compute_s{};
  double last_backward_s = 0.0;
  double served_bytes = 0.0;
  double fetch_s = 0.0;
  int64_t micro_batches = 0;
  int64_t deferred_steps = 0;
  uint64_t chains = 0;
  bool synchronous = false;
  bool overlap_backward = true;
};
static_assert(std::is_trivially_copyable_v<CommChain>, "chains travel as bytes");

void append_cost(std::vector<char>& out, const StepCost& c, double fetch_s) {
  const CostHeader h{c.compute_s,    c.chain_compute_s, c.last_backward_s, c.served_bytes,      fetch_s,
                     c.micro_batches, c.deferred_steps, c.chains.size(),   c.synchronous, c.overlap_backward};
  const char* hp = reinterpret_cast<const char*>(&h);
  out.insert(out.end(), hp, hp + sizeof h);
  const char* cp = reinterpret_cast<const char*>(c.chains.data());
  out.insert(out.end(), cp, cp + c.chains.size() * sizeof(CommChain));
}

const char* read_cost(const char* at, StepCost& c, double& fetch_s) {
  CostHeader h;
  std::memcpy(&h, at, sizeof h);
  at += sizeof h;
  c.compute_s = h.compute_s;
  c.chain_compute_s = h.chain_compute_s;
  c.last_backward_s = h.last_backward_s;
  c.served_bytes = h.served_bytes;
  c.micro_batches = h.micro_batches;
  c.deferred_steps = h.deferred_steps;
  c.synchronous = h.synchronous;
  c.overlap_backward = h.overlap_backward;
  c.chains.resize(h.chains);
  std::memcpy(static_cast<void*>(c.chains.data()), at, h.chains * sizeof(CommChain));
  fetch_s = h.fetch_s;
  return at + h.chains * sizeof(CommChain);
}

}  // namespace

int64_t prefetch_depth_steps(const RunConfig& config) {
  const int64_t K = std::max<int64_t>(1, config.training.accumulation_steps);
  return config.data.prefetch == 0 ? 0 : std::max<int64_t>(1, config.data.prefetch / K);
}

LockstepModeledClock::LockstepModeledClock(const CostModel& cost_model, int ranks, int64_t prefetch_steps,
                                           StragglerConfig stragglers, uint64_t seed, RunResult& res)
    : cost_model_(cost_model),
      ranks_(ranks),
      stragglers_(std::move(stragglers)),
      seed_(seed),
      res_(res),
      prefetch_(ranks, prefetch_steps),
      rank_clock_s_(static_cast<size_t>(ranks), 0.0) {
  for (auto& s : cost_slots_) s.assign(static_cast<size_t>(ranks), cost_model.make_step_cost());
  for (auto& s : fetch_slots_) s.assign(static_cast<size_t>(ranks), 0.0);
  res_.modeled_steps.assign(static_cast<size_t>(ranks), {});
  res_.modeled_exposed_s.assign(static_cast<size_t>(ranks), {});
  res_.modeled_overlapped_s.assign(static_cast<size_t>(ranks), {});
}

LockstepModeledClock::LockstepModeledClock(const CostModel& cost_model, const RunConfig& config, RunResult& res)
    : LockstepModeledClock(cost_model, static_cast<int>(config.cluster.ranks), prefetch_depth_steps(config),
                           config.cluster.stragglers, static_cast<uint64_t>(config.training.seed), res) {}

void LockstepModeledClock::model_step(int64_t step) {
  GS_EXPECT(step == modeled_done_, "modeled clock: steps must be modeled in order");
  GS_EXPECT(static_cast<size_t>(step) < res_.series.size(), "modeled clock: the step has no series point yet");
  std::vector<StepCost>& costs = cost_slots_[slot(step)];
  const std::vector<double>& fetch = fetch_slots_[slot(step)];
  std::vector<const StepCost*> recs;
  recs.reserve(costs.size());
  for (StepCost& c : costs) recs.push_back(&c);
  // Data stall: what the loader could not finish before the step began. model_step multiplies compute by the
  // straggler factor, which does not apply to the loader, so it is divided out here.
  std::vector<std::pair<double, double>> fetch_span(static_cast<size_t>(ranks_));
  for (int r = 0; r < ranks_; ++r) {
    const double stall = prefetch_.stall_s(r, fetch[static_cast<size_t>(r)]);
    fetch_span[static_cast<size_t>(r)] = prefetch_.last_fetch_s(r);
    const double f = straggler_factor(stragglers_, seed_, step, r);
    costs[static_cast<size_t>(r)].add_time(Phase::kData, f > 0 ? stall / f : stall);
  }
  std::vector<ModeledStep> m = cost_model_.model_step(recs, step);
  carry_rank_clocks(m, rank_clock_s_);
  if (cost_model_.record_layouts()) {  // report.timeline: the layouts, with the loader's work when there is a loader
    res_.modeled_layouts.resize(static_cast<size_t>(ranks_));
    for (size_t r = 0; r < m.size(); ++r) {
      if (!m[r].layout) continue;
      if (prefetch_.depth() > 0 && fetch[r] > 0) {
        m[r].layout->fetch_begin_s = fetch_span[r].first;
        m[r].layout->fetch_end_s = fetch_span[r].second;
      }
      res_.modeled_layouts[r].push_back(std::move(*m[r].layout));
    }
  }
  for (int r = 0; r < ranks_; ++r) prefetch_.end_step(r, m[static_cast<size_t>(r)].times.step_s);
  for (size_t r = 0; r < m.size(); ++r) {
    res_.modeled_steps[r].push_back(m[r].times);
    res_.modeled_exposed_s[r].push_back(m[r].exposed_s);
    res_.modeled_overlapped_s[r].push_back(m[r].overlapped_s);
  }
  if (step == 0) res_.modeled_chains = with_modeled_slots(costs[0].chains, m[0].unshard_slots);
  modeled_total_s_ += m[0].times.step_s;
  res_.series[static_cast<size_t>(step)].modeled_s = modeled_total_s_;
  modeled_done_ = step + 1;
}

void LockstepModeledClock::finish(int64_t steps_completed) {
  if (group_ != nullptr && shared_ < steps_completed) share(steps_completed - 1);
  if (group_ != nullptr && group_->rank() != 0) return;
  if (modeled_done_ < steps_completed) model_step(steps_completed - 1);
}

void LockstepModeledClock::spread(ProcessGroup& group, int first_rank, int local_ranks) {
  if (group.size() <= 1) return;
  group_ = &group;
  first_rank_ = first_rank;
  local_ranks_ = local_ranks;
}

void LockstepModeledClock::share(int64_t step) {
  if (group_ == nullptr) return;
  std::vector<double>& fetch = fetch_slots_[slot(step)];
  std::vector<char> mine;
  for (int r = first_rank_; r < first_rank_ + local_ranks_; ++r)
    append_cost(mine, cost(step, r), fetch[static_cast<size_t>(r)]);
  const std::vector<std::vector<char>> all = group_->gather_to_root(mine);
  shared_ = step + 1;
  for (size_t p = 1; p < all.size(); ++p) {
    const char* at = all[p].data();
    for (int r = static_cast<int>(p) * local_ranks_; r < static_cast<int>(p + 1) * local_ranks_; ++r)
      at = read_cost(at, cost(step, r), fetch[static_cast<size_t>(r)]);
  }
}

}  // namespace gs
