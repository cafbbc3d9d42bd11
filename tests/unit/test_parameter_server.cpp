// The modeled-time scheduler and the parameter server (docs/design.md, section 2): turns in modeled-time order
// whatever the threads do; BSP equals all-reduce; the SSP bound on every read; bit-identical asynchronous runs under
// random thread delays; asynchrony beats a synchronous all-reduce with a straggler. Suites start with "Strategy" so
// tools/sanitize.sh tsan runs them.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "sim/config/run_config.h"
#include "sim/comm/scheduler.h"
#include "sim/config/scenario.h"
#include "sim/runtime/rank_loop.h"
#include "sim/runtime/world.h"
#include "sim/strategy/strategy.h"
#include "sim/validate/validate.h"
#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

// Every rank posts its own increasing event times (random, with ties across ranks) and sleeps a random real time
// before each; the turns must come out in (time, rank) order, the order std::sort gives the same events.
TEST(StrategyScheduler, TurnsFollowModeledTimeThenRankWhateverTheThreadTiming) {
  const int ranks = 4, events = 40;
  std::vector<std::vector<double>> times(ranks);
  std::mt19937 gen(5);
  std::vector<std::tuple<double, int>> expected;
  for (int r = 0; r < ranks; ++r) {
    double t = 0;
    for (int e = 0; e < events; ++e) {
      t += static_cast<double>(gen() % 4);  // steps of 0..3: many ties within and across ranks
      times[r].push_back(t);
      expected.emplace_back(t, r);
    }
  }
  std::sort(expected.begin(), expected.end());
  for (int rep = 0; rep < 3; ++rep) {
    InteractionScheduler sched(ranks, Ordering::kModeled);
    std::vector<std::tuple<double, int>> log;
    World world(ranks);
    world.run(
        [&](int r) {
          std::mt19937 delay(static_cast<unsigned>(r * 1000 + rep));
          for (double t : times[r]) {
            std::this_thread::sleep_for(std::chrono::microseconds(delay() % 200));
            sched.acquire(r, t);
            log.emplace_back(t, r);  // inside the turn: no other rank writes
            sched.release(r, t);
          }
          sched.leave(r);
        },
        [&] { sched.abort(); });
    EXPECT_EQ(log, expected) << "repetition " << rep;
  }
}

// A blocked rank resumes at the time of the turn that woke it, after that turn, and before later events.
TEST(StrategyScheduler, BlockedRankResumesAtTheWakersTime) {
  InteractionScheduler sched(2, Ordering::kModeled);
  std::vector<std::pair<int, double>> log;
  World world(2);
  world.run(
      [&](int r) {
        if (r == 0) {
          sched.acquire(0, 1.0);
          log.emplace_back(0, 1.0);
          const double t = sched.block(0);  // woken by rank 1 at 5
          log.emplace_back(0, t);
          sched.release(0, t);
          sched.leave(0);
        } else {
          sched.acquire(1, 5.0);
          log.emplace_back(1, 5.0);
          sched.wake(0, 5.0);
          sched.release(1, 9.0);
          sched.acquire(1, 9.0);
          log.emplace_back(1, 9.0);
          sched.release(1, 9.0);
          sched.leave(1);
        }
      },
      [&] { sched.abort(); });
  const std::vector<std::pair<int, double>> expected = {{0, 1.0}, {1, 5.0}, {0, 5.0}, {1, 9.0}};
  EXPECT_EQ(log, expected);
}

json ps_run(int ranks, int steps, const json& sync, const json& stragglers = nullptr) {
  json j = {{"name", "ps"},
            {"model", {{"kind", "mlp"}, {"layers", {8, 16, 4}}, {"loss", "cross_entropy"}, {"activation", "gelu"}}},
            {"data", {{"kind", "teacher"}, {"batch_per_rank", 5},
                      {"teacher", {{"in_dim", 8}, {"hidden", 12}, {"out_dim", 4}, {"train_samples", 4096},
                                   {"eval_samples", 64}}}}},
            {"cluster", {{"ranks", ranks}, {"share_identical", false}}},
            {"training", {{"steps", steps}, {"eval_every", 1}, {"seed", 11},
                          {"optimizer", {{"kind", "sgd"}, {"lr", 0.1}, {"momentum", 0.9}}}}},
            {"sync", sync}};
  if (!stragglers.is_null()) j["cluster"]["stragglers"] = stragglers;
  return j;
}

// BSP: the server sums the clock's pushes in rank order and divides by the clock's samples in float, as the host
// all-reduce does (sum in rank order, then / S), and applies the same optimizer element by element on each shard
// (Optimizer::step on [lo, hi) equals one call over [0, n)); the samples and losses are summed in rank order as the
// control all-reduce does. So every step's parameters, hence every evaluation and training loss, are bit-identical
// (stronger than "to rounding"), whatever the shards. Plain SGD and momentum SGD.
TEST(StrategyParameterServer, BspEqualsAllReduceBitForBit) {
  const int ranks = 3, steps = 6;
  for (double momentum : {0.0, 0.9}) {
    json ar = ps_run(ranks, steps, {{"kind", "allreduce"}});
    ar["training"]["optimizer"]["momentum"] = momentum;
    const json ref = test::run_scenario_text(ar.dump())[0];
    for (const json& sync : {json{{"kind", "parameter_server"}, {"staleness", 0}},
                             json{{"kind", "parameter_server"}, {"staleness", 0}, {"shards", 2}},
                             json{{"kind", "parameter_server"}, {"staleness", 0}, {"shards", 5}, {"dedicated", true}}}) {
      json c = ps_run(ranks, steps, sync);
      c["training"]["optimizer"]["momentum"] = momentum;
      const json run = test::run_scenario_text(c.dump())[0];
      ASSERT_EQ(run["steps_completed"], steps) << sync.dump();
      const json& a = run["convergence"]["series"];
      const json& b = ref["convergence"]["series"];
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i]["step"], b[i]["step"]);
        EXPECT_EQ(a[i]["train_loss"].get<double>(), b[i]["train_loss"].get<double>()) << sync.dump() << " step " << i;
        EXPECT_EQ(a[i]["eval_loss"].get<double>(), b[i]["eval_loss"].get<double>()) << sync.dump() << " step " << i;
      }
      // BSP reads are never stale.
      EXPECT_EQ(run["staleness"]["versions"]["values"], json::array({0}));
      EXPECT_EQ(run["staleness"]["clocks"]["values"], json::array({0}));
      EXPECT_EQ(run["staleness"]["pushes_per_rank"], json::array({steps, steps, steps}));
    }
  }
}

// SSP (Ho et al. 2013), checked on every read of a long randomized run with stragglers: a worker about to start clock
// c has read parameters holding every update of clocks <= c - s - 1, i.e. at least c - s pushes of every rank. The
// bound is also reached (the run really is stale), and the asynchronous run breaks it (the check can fail).
TEST(StrategyParameterServer, SspBoundHoldsOnEveryRead) {
  const json stragglers = {{"factors", {1.0, 1.8, 1.0, 0.6}}, {"noise", {{"kind", "lognormal"}, {"sigma", 0.6}}}};
  for (int s : {1, 3}) {
    int64_t reads = 0, violations = 0, at_bound = 0;
    RunHooks hooks;
    hooks.on_read = [&](const ParameterRead& r) {
      ++reads;
      const int64_t least = *std::min_element(r.applied_per_rank.begin(), r.applied_per_rank.end());
      if (least < r.clock - s) ++violations;
      if (least == r.clock - s) ++at_bound;
    };
    json c = ps_run(4, 150, {{"kind", "parameter_server"}, {"staleness", s}}, stragglers);
    c["training"]["eval_every"] = 0;
    Scenario sc = parse_scenario(c.dump(), "<test>");
    RunResult r = run_training(sc.runs[0].config, hooks);
    ASSERT_EQ(r.disposition, Disposition::kPassed) << r.message;
    EXPECT_GT(reads, 4 * 140);
    EXPECT_EQ(violations, 0) << "staleness " << s;
    EXPECT_GT(at_bound, 0) << "staleness " << s << ": the bound was never reached";
    EXPECT_LE(r.staleness["clocks"]["max"].get<int64_t>(), s);
  }
  int64_t violations = 0;
  RunHooks hooks;
  hooks.on_read = [&](const ParameterRead& r) {
    const int64_t least = *std::min_element(r.applied_per_rank.begin(), r.applied_per_rank.end());
    if (least < r.clock - 1) ++violations;
  };
  json c = ps_run(4, 150, {{"kind", "parameter_server"}, {"staleness", "inf"}}, stragglers);
  Scenario sc = parse_scenario(c.dump(), "<test>");
  RunResult r = run_training(sc.runs[0].config, hooks);
  ASSERT_EQ(r.disposition, Disposition::kPassed) << r.message;
  EXPECT_GT(violations, 0) << "an asynchronous run with a 3x speed spread should read beyond staleness 1";
}

// The report without what the measured clock decides (wall and measured times, throughput and bandwidth from them).
json without_measured(json run) {
  run.erase("wall_s");
  run["timing"].erase("measured");
  run["throughput"].erase("samples_per_s");
  run.erase("communication");
  for (auto& pt : run["convergence"]["series"]) pt.erase("measured_s");
  if (run.contains("data") && run["data"].is_object()) {  // the input pipeline's measured stall and queue depth
    json& d = run["data"];
    d.erase("max_queue_depth");
    for (const char* k : {"stall_measured_s", "stall_share_measured"}) d["totals"].erase(k);
    for (auto& rank : d["per_rank"])
      for (auto& e : rank["epochs"])
        for (const char* k : {"stall_measured_s", "step_measured_s", "stall_share_measured"}) e.erase(k);
  }
  return run;
}

// 20 repetitions of an asynchronous run with random real delays before every turn give the same report bits (the
// measured clock aside); the order is the modeled clock's.
TEST(StrategyParameterServer, AsyncRunIsBitIdenticalUnderRandomThreadDelays) {
  json c = ps_run(4, 25, {{"kind", "parameter_server"}, {"staleness", "inf"}},
                  {{"factors", {1.0, 1.3, 1.0, 0.7}}, {"noise", {{"kind", "lognormal"}, {"sigma", 0.5}}}});
  c["training"]["eval_every"] = 5;
  const std::string text = c.dump();
  const std::string first = without_measured(test::run_scenario_text(text)[0]).dump();
  InteractionScheduler::set_test_delay_us(300);
  for (int rep = 0; rep < 20; ++rep) {
    const std::string again = without_measured(test::run_scenario_text(text)[0]).dump();
    ASSERT_EQ(again, first) << "repetition " << rep;
  }
  InteractionScheduler::set_test_delay_us(0);
  EXPECT_NE(first.find("\"ordering\":\"modeled\""), std::string::npos);
}

// One 2x straggler out of 4 ranks, the same gradient budget (steps x ranks): the synchronous all-reduce waits for it
// every step (about 2 compute times per step), while asynchronous workers keep pushing (3 fast workers at 1 + 1 slow
// at 1/2 = 3.5 gradients per compute time, against 4 per 2 compute times): asynchronous finishes sooner on the
// modeled clock, and its reads are stale by varying amounts.
TEST(StrategyParameterServer, AsyncFinishesSoonerThanAllReduceWithAStraggler) {
  const json stragglers = {{"factors", {1.0, 1.0, 1.0, 2.0}}};
  auto big = [&](const json& sync) {
    json c = ps_run(4, 40, sync, stragglers);
    c["model"]["layers"] = {64, 128, 10};
    c["data"]["batch_per_rank"] = 64;
    c["data"]["teacher"]["in_dim"] = 64;
    c["data"]["teacher"]["out_dim"] = 10;
    c["training"]["eval_every"] = 0;
    return test::run_scenario_text(c.dump())[0];
  };
  const json ar = big({{"kind", "allreduce"}});
  const json ps = big({{"kind", "parameter_server"}, {"staleness", "inf"}});
  ASSERT_EQ(ps["steps_completed"], 40);
  const double t_ar = ar["convergence"]["series"].back()["modeled_s"].get<double>();
  const double t_ps = ps["convergence"]["series"].back()["modeled_s"].get<double>();
  EXPECT_LT(t_ps, t_ar);
  EXPECT_GE(ps["staleness"]["versions"]["values"].size(), 2u) << ps["staleness"].dump();
  EXPECT_GE(ps["staleness"]["clocks"]["values"].size(), 2u) << ps["staleness"].dump();
  // Fast workers contributed more than the straggler.
  const json& pushes = ps["staleness"]["pushes_per_rank"];
  EXPECT_GT(pushes[0].get<int64_t>(), pushes[3].get<int64_t>());
  int64_t total = 0;
  for (const auto& p : pushes) total += p.get<int64_t>();
  EXPECT_EQ(total, 40 * 4);
  std::printf("modeled time: all-reduce %.6g s, asynchronous parameter server %.6g s (ratio %.3f)\n", t_ar, t_ps,
              t_ps / t_ar);
}

// Real ordering runs (threads race) and says so.
TEST(StrategyParameterServer, RealOrderingRunsAndIsReported) {
  json c = ps_run(3, 10, {{"kind", "parameter_server"}, {"staleness", 1}, {"ordering", "real"}});
  const json run = test::run_scenario_text(c.dump())[0];
  EXPECT_EQ(run["staleness"]["ordering"], "real");
  EXPECT_EQ(run["steps_completed"], 10);
}

// The measured clock's phases of a worker's step are disjoint parts of it: their sum never exceeds the step's
// measured time. The push's encoding (compress) and the worker's loss-scale check (optimizer) are timed into their
// own phases, so the remainder the step attributes to communicate leaves them out (counting them twice put the sum
// above the step by the encode time: a 64 x 512 x 512 x 10 MLP's top-k encode is milliseconds). Every rank and step,
// BSP and asynchronous.
TEST(StrategyParameterServer, MeasuredPhasesPartitionTheStep) {
  for (const json& staleness : {json(0), json("inf")}) {
    json c = ps_run(2, 6, {{"kind", "parameter_server"}, {"staleness", staleness}});
    c["model"]["layers"] = {8, 512, 512, 4};
    c["compression"] = {{"kind", "topk"}, {"ratio", 0.01}, {"error_feedback", true}};
    c["precision"] = {{"loss_scale", "dynamic"}};
    c["training"]["eval_every"] = 0;
    const RunConfig config = parse_scenario(c.dump(), "<test>").runs.at(0).config;
    const RunResult r = run_training(config);
    ASSERT_TRUE(r.is(Disposition::kPassed)) << r.message;
    for (size_t rank = 0; rank < r.steps.size(); ++rank) {
      ASSERT_FALSE(r.steps[rank].empty());
      for (size_t k = 0; k < r.steps[rank].size(); ++k) {
        const StepTimes& t = r.steps[rank][k];
        double sum = 0.0;
        for (double p : t.phase_s) sum += p;
        EXPECT_LE(sum, t.step_s * (1.0 + 1e-9) + 1e-9)
            << staleness.dump() << " rank " << rank << " step " << k << ": phases " << sum << " s, step " << t.step_s
            << " s (compress " << t.phase_s[static_cast<size_t>(Phase::kCompress)] << " s)";
      }
    }
  }
}

// A progress point (the series point, the divergence check, the evaluation when due, the run's hooks) runs inside the
// turn of the worker whose push completes it, on that worker's thread, and is in none of its measured phases: it is
// not the worker's work (the lockstep strategies' evaluations are outside their steps too). A hook that sleeps 250 ms
// at each of the 4 progress points of a 2-worker BSP run: each clock has a step that took at least the 250 ms (the
// completing worker's), and no rank-step's compress, communicate or optimizer phase holds 250 ms (the run's own work
// is well under a millisecond per step, some milliseconds under TSan; 250 ms, not 50, leaves room for a loaded
// machine's scheduling delays inside a phase).
TEST(StrategyParameterServer, ProgressPointsAreInNoMeasuredPhase) {
  constexpr double kSleep = 0.25;
  json c = ps_run(2, 4, {{"kind", "parameter_server"}, {"staleness", 0}});
  const RunConfig config = parse_scenario(c.dump(), "<test>").runs.at(0).config;
  RunHooks hooks;
  int64_t points = 0;
  hooks.on_step = [&](int64_t, int64_t, double) {
    ++points;  // inside the scheduler's turns: one thread at a time
    std::this_thread::sleep_for(std::chrono::duration<double>(kSleep));
  };
  const RunResult r = run_training(config, hooks);
  ASSERT_TRUE(r.is(Disposition::kPassed)) << r.message;
  EXPECT_EQ(points, 4);
  ASSERT_EQ(r.steps.size(), 2u);
  for (size_t k = 0; k < 4; ++k) {
    double longest = 0.0;
    for (size_t rank = 0; rank < 2; ++rank) {
      ASSERT_EQ(r.steps[rank].size(), 4u);
      const StepTimes& t = r.steps[rank][k];
      longest = std::max(longest, t.step_s);
      for (Phase p : {Phase::kCompress, Phase::kCommunicate, Phase::kOptimizer})
        EXPECT_LT(t.phase_s[static_cast<size_t>(p)], kSleep)
            << kPhaseNames[static_cast<size_t>(p)] << ", rank " << rank << " step " << k;
    }
    EXPECT_GE(longest, kSleep) << "step " << k;
  }
}

TEST(StrategyParameterServerConfig, InfRoundTripsAndIsRefusedOutsideTheParameterServer) {
  std::vector<ConfigIssue> issues;
  RunConfig c = config_from_json({{"sync", {{"kind", "parameter_server"}, {"staleness", "inf"}}}}, issues);
  ASSERT_TRUE(issues.empty());
  EXPECT_EQ(c.sync.staleness, kStalenessInf);
  EXPECT_EQ(config_to_json(c)["sync"]["staleness"], "inf");
  validate_config(c, issues);
  for (const auto& i : issues) EXPECT_NE(i.path, "sync.staleness") << i.message;

  issues.clear();
  config_from_json({{"sync", {{"staleness", "infinite"}}}}, issues);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].path, "sync.staleness");
  EXPECT_NE(issues[0].message.find("or \"inf\""), std::string::npos) << issues[0].message;

  issues.clear();
  RunConfig a = config_from_json({{"sync", {{"kind", "independent"}, {"staleness", "inf"}}}}, issues);
  validate_config(a, issues);
  bool named = false;
  for (const auto& i : issues) named = named || (i.path == "sync.staleness" && i.message.find("parameter_server") !=
                                                                                   std::string::npos);
  EXPECT_TRUE(named);

  // The node cache's per-step barrier assumes ranks step together: refused under free-running ranks.
  issues.clear();
  RunConfig cached = config_from_json({{"sync", {{"kind", "parameter_server"}}},
                                       {"data", {{"cache", {{"policy", "static"}, {"capacity_fraction", 0.5}}}}}},
                                      issues);
  validate_config(cached, issues);
  bool cache_named = false;
  for (const auto& i : issues) cache_named = cache_named || i.path == "data.cache.policy";
  EXPECT_TRUE(cache_named);

  issues.clear();
  config_from_json({{"sync", {{"kind", "allreduce"}, {"ordering", "real"}}}}, issues);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].path, "sync.ordering");
}

}  // namespace
}  // namespace gs
