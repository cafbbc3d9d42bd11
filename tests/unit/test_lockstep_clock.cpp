// Tests of LockstepModeledClock (sim/runtime/lockstep_clock.h), the modeled clock both rank loops share: a 2-rank,
// 3-step run with a persistent straggler, a loader slower than compute and one step without a collective, driven in
// the loops' order (step t recorded before step t - 1 is modeled). Expected values are worked out by hand below.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "sim/core/error.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/hardware_profile.h"
#include "sim/runtime/lockstep_clock.h"
#include "sim/runtime/rank_loop.h"

namespace gs {
namespace {

double phase(const StepTimes& t, Phase p) { return t.phase_s[static_cast<size_t>(p)]; }

// Rank 0: factor 1, compute 3 ms (forward 1, backward 2), loader work 1 ms per batch.
// Rank 1: factor 2, the same record (6 ms on the modeled clock), loader work 10 ms per batch.
// Loader queue depth 1 (PrefetchModel): begin_i = max(done_{i-1}, taken_{i-1}), done_i = begin_i + fetch,
// stall_i = max(0, done_i - start_i), taken_i = start_i + stall_i, start_{i+1} = start_i + step_i.
// The stall enters the data phase; a straggler does not slow the loader, so rank 1's step is 2 x 3 ms + stall.
// Steps 0 and 2 are synchronous (all-reduce), step 1 is not (ranks drift apart, as local SGD between averages).
//  step 0: r0 stall 1 (done 1) -> 4 ms; r1 stall 10 (done 10, taken 10) -> 6 + 10 = 16 ms; synchronous: both 16,
//          r0 waits 12. Clocks 16, 16.
//  step 1: r0 begin max(1, 1) = 1, done 2, stall 0 -> 3 ms; r1 begin max(10, 10), done 20, stall 20 - 16 = 4,
//          taken 20 -> 10 ms. Not synchronous: no wait. Clocks 19, 26.
//  step 2: r0 begin max(2, 16) = 16, done 17, stall max(0, 17 - 19) = 0 -> 3 ms; r1 begin max(20, 20), done 30,
//          stall 30 - 26 = 4 -> 10 ms. Synchronous: the step lasts 10 for both, r0 waits 7; r0 also arrived 7 ms
//          ahead of r1 (19 vs 26), carried into its wait: 17 ms, wait 14. Clocks 36, 36.
// Rank 0's modeled series: 16, 19, 36 (ms). Had the stall not been divided by the factor, rank 1's step 0 would
// be 2 x (3 + 10) = 26 ms.
TEST(LockstepModeledClock, TwoRanksStragglerAndDataStallByHand) {
  StragglerConfig s;
  s.factors = json::array({1.0, 2.0});
  CostModel cost_model(load_hardware_profile("h100-sxm-8"), 2, {}, s, 1);
  RunResult res;
  LockstepModeledClock clock(cost_model, 2, 1, s, 1, res);
  const double ms = 1e-3;
  const double fetch_ms[2] = {1.0, 10.0};
  auto record = [&](int64_t step) {
    for (int r = 0; r < 2; ++r) {
      StepCost& c = clock.cost(step, r);
      c.clear();
      c.add_time(Phase::kForward, 1 * ms);
      c.add_time(Phase::kBackward, 2 * ms);
      c.synchronous = step != 1;
      clock.set_fetch_s(step, r, fetch_ms[r] * ms);
    }
    res.series.emplace_back();  // rank 0's series point of the step, as the loops push it before modeling
  };
  record(0);
  record(1);
  clock.model_step(0);
  EXPECT_EQ(clock.modeled_done(), 1);
  record(2);
  clock.model_step(1);
  clock.finish(3);
  EXPECT_EQ(clock.modeled_done(), 3);
  clock.finish(3);  // nothing left: no fourth step
  ASSERT_EQ(res.modeled_steps.size(), 2u);
  ASSERT_EQ(res.modeled_steps[0].size(), 3u);
  ASSERT_EQ(res.modeled_steps[1].size(), 3u);
  const double tol = 1e-12;
  const double step_ms[2][3] = {{16, 3, 17}, {16, 10, 10}};
  const double data_ms[2][3] = {{1, 0, 0}, {10, 4, 4}};
  const double wait_ms[2][3] = {{12, 0, 14}, {0, 0, 0}};
  const double compute_ms[2] = {1, 2};  // forward per factor unit; backward is twice it
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t < 3; ++t) {
      const StepTimes& m = res.modeled_steps[static_cast<size_t>(r)][static_cast<size_t>(t)];
      EXPECT_NEAR(m.step_s, step_ms[r][t] * ms, tol) << "rank " << r << " step " << t;
      EXPECT_NEAR(phase(m, Phase::kData), data_ms[r][t] * ms, tol) << "rank " << r << " step " << t;
      EXPECT_NEAR(phase(m, Phase::kWait), wait_ms[r][t] * ms, tol) << "rank " << r << " step " << t;
      EXPECT_NEAR(phase(m, Phase::kForward), compute_ms[r] * ms, tol);
      EXPECT_NEAR(phase(m, Phase::kBackward), 2 * compute_ms[r] * ms, tol);
      EXPECT_EQ(res.modeled_exposed_s[static_cast<size_t>(r)][static_cast<size_t>(t)], 0.0);  // no collectives
    }
  ASSERT_EQ(res.series.size(), 3u);
  EXPECT_NEAR(res.series[0].modeled_s, 16 * ms, tol);
  EXPECT_NEAR(res.series[1].modeled_s, 19 * ms, tol);
  EXPECT_NEAR(res.series[2].modeled_s, 36 * ms, tol);
}

// Steps are modeled in order and only after their series point exists (the loops' protocol).
TEST(LockstepModeledClock, RefusesOutOfOrderSteps) {
  CostModel cost_model(load_hardware_profile("h100-sxm-8"), 1, {}, StragglerConfig{}, 1);
  RunResult res;
  LockstepModeledClock clock(cost_model, 1, 0, StragglerConfig{}, 1, res);
  res.series.resize(2);
  EXPECT_THROW(clock.model_step(1), Error);
  clock.model_step(0);
  EXPECT_NEAR(res.series[0].modeled_s, 0.0, 0.0);  // an empty record: no compute, no stall
  EXPECT_THROW(clock.model_step(2), Error);
}

// data.prefetch micro-batches over K per optimizer step, at least one step when prefetching; 0 = no loader thread.
TEST(LockstepModeledClock, PrefetchDepthInSteps) {
  RunConfig c;
  c.training.accumulation_steps = 2;
  c.data.prefetch = 4;
  EXPECT_EQ(prefetch_depth_steps(c), 2);
  c.data.prefetch = 1;
  EXPECT_EQ(prefetch_depth_steps(c), 1);
  c.data.prefetch = 0;
  EXPECT_EQ(prefetch_depth_steps(c), 0);
}

}  // namespace
}  // namespace gs
