// Precision modes and loss scaling: cases BC07 (clip after unscaling) and BC08 (GradScaler schedule) of
// tests/data/strategy_cases.json, a run with a forced overflow at a known step, accumulation with a non-finite
// micro-batch, and the rounding points of the emulated modes on tiny linear models whose results follow from the
// formats' definitions (fp16 underflow without a scale, bf16 input rounding, fp16_pure updates that vanish, fp8 scaling).
#include <gtest/gtest.h>

#include "tests/unit/cases.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <utility>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/dense_mixed.h"
#include "sim/cost/hardware_profile.h"
#include "sim/cost/step_cost.h"
#include "sim/optim/loss_scaler.h"
#include "sim/optim/optimizer.h"
#include "sim/optim/precision_step.h"
#include "sim/validate/validate.h"
#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

// ---- BC08: the dynamic scaler's schedule -----------------------------------------------------------------------

TEST(CasesBC08, DynamicLossScalerFollowsGradScalersSchedule) {
  const json c = load_case("BC08");
  ASSERT_FALSE(c.is_null()) << "case BC08 not found";
  LossScalerSettings s;
  s.kind = LossScaleKind::kDynamic;
  s.initial_scale = c["input"]["init_scale"].get<double>();
  s.growth_factor = c["input"]["growth_factor"].get<double>();
  s.backoff_factor = c["input"]["backoff_factor"].get<double>();
  s.growth_interval = c["input"]["growth_interval"].get<int64_t>();
  LossScaler scaler(s);
  const std::vector<bool> flags = c["input"]["overflow_flags"].get<std::vector<bool>>();
  const std::vector<double> expected = c["expected"]["scale_after_each_update"].get<std::vector<double>>();
  const std::vector<double> wrong = c["wrong_value"]["tracker_not_reset_on_overflow"].get<std::vector<double>>();
  ASSERT_EQ(flags.size(), expected.size());
  int applied = 0;
  bool differs_from_wrong = false;
  for (size_t i = 0; i < flags.size(); ++i) {
    const bool apply = scaler.update(flags[i], static_cast<int64_t>(i) + 1);
    applied += apply ? 1 : 0;
    EXPECT_EQ(apply, !flags[i]) << "step " << i + 1;
    EXPECT_EQ(static_cast<double>(scaler.scale()), expected[i]) << "after step " << i + 1;
    differs_from_wrong |= static_cast<double>(scaler.scale()) != wrong[i];
  }
  EXPECT_TRUE(differs_from_wrong);
  EXPECT_EQ(applied, c["expected"]["optimizer_steps_applied"].get<int>());
  EXPECT_EQ(scaler.skipped_step_list(), c["expected"]["skipped_steps_1based"].get<std::vector<int64_t>>());
  // The trajectory lists the changes: initial, then each step where the scale moved.
  std::vector<std::pair<int64_t, double>> changes = {{0, s.initial_scale}};
  double prev = s.initial_scale;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] != prev) changes.emplace_back(static_cast<int64_t>(i) + 1, expected[i]);
    prev = expected[i];
  }
  EXPECT_EQ(scaler.trajectory(), changes);
}

TEST(LossScaler, StaticSkipsWithoutChangingNoneNeverSkipsGrowthStaysFinite) {
  LossScalerSettings st;
  st.kind = LossScaleKind::kStatic;
  st.initial_scale = 1024.0;
  LossScaler fixed(st);
  EXPECT_FALSE(fixed.update(true, 1));
  EXPECT_TRUE(fixed.update(false, 2));
  EXPECT_EQ(fixed.scale(), 1024.0f);
  EXPECT_EQ(fixed.skipped_steps(), 1);

  LossScaler none(LossScalerSettings{});
  EXPECT_TRUE(none.update(true, 1));
  EXPECT_EQ(none.scale(), 1.0f);
  EXPECT_EQ(none.skipped_steps(), 0);

  LossScalerSettings big;
  big.kind = LossScaleKind::kDynamic;
  big.initial_scale = 2.0e38;  // x2 would overflow fp32: GradScaler keeps the old scale
  big.growth_interval = 1;
  LossScaler grow(big);
  EXPECT_TRUE(grow.update(false, 1));
  EXPECT_EQ(grow.scale(), 2.0e38f);
  EXPECT_EQ(grow.growth_tracker(), 0);
}

// ScaledUpdate (the cuda loop's host-side scaler decisions): GradScaler's rule by hand. fp16_mixed, dynamic, init
// 1024, growth_interval 2, growth 2, backoff 0.5; flags F F F T F F T T:
//   1 F: tracker 1, applied (t 1)      2 F: tracker 2 -> scale 2048, applied (t 2)   3 F: tracker 1, applied (t 3)
//   4 T: scale 1024, skipped           5 F: tracker 1, applied (t 4)                 6 F: -> 2048, applied (t 5)
//   7 T: 1024, skipped                 8 T: 512, skipped.
// The unscale factor is 1 / the scale in force for the step (1/1024 before step 2's growth, 1/2048 after it).
TEST(LossScaler, ScaledUpdateFollowsGradScalerAndCountsOnlyAppliedUpdates) {
  PrecisionConfig pc;
  pc.mode = "fp16_mixed";
  pc.loss_scale = "dynamic";
  pc.initial_scale = 1024.0;
  pc.growth_interval = 2;
  ScaledUpdate u(pc);
  EXPECT_TRUE(u.handles_nonfinite());
  EXPECT_EQ(u.loss_scale(), 1024.0f);
  EXPECT_EQ(u.unscale_factor(), 1.0f / 1024.0f);
  const bool flags[] = {false, false, false, true, false, false, true, true};
  const bool applied[] = {true, true, true, false, true, true, false, false};
  const float scale_after[] = {1024, 2048, 2048, 1024, 1024, 2048, 1024, 512};
  const int64_t updates_after[] = {1, 2, 3, 3, 4, 5, 5, 5};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(u.decide(flags[i], i + 1), applied[i]) << "step " << i + 1;
    EXPECT_EQ(u.loss_scale(), scale_after[i]) << "step " << i + 1;
    EXPECT_EQ(u.update_count(), updates_after[i]) << "step " << i + 1;
  }
  EXPECT_EQ(u.unscale_factor(), 1.0f / 512.0f);
  EXPECT_EQ(u.first_nonfinite_step(), std::optional<int64_t>(4));
  EXPECT_EQ(u.scaler().skipped_step_list(), (std::vector<int64_t>{4, 7, 8}));
  const std::vector<std::pair<int64_t, double>> traj = {{0, 1024}, {2, 2048}, {4, 1024}, {6, 2048}, {7, 1024}, {8, 512}};
  EXPECT_EQ(u.scaler().trajectory(), traj);

  // bf16_mixed with auto (= none): no unscale, an inf/NaN step is applied as it is (it is recorded, not a
  // divergence of the gradient: the parameters turn non-finite and the next step diverges, as on the host).
  PrecisionConfig bf;
  bf.mode = "bf16_mixed";
  ScaledUpdate b(bf);
  EXPECT_TRUE(b.handles_nonfinite());
  EXPECT_EQ(b.unscale_factor(), 1.0f);
  EXPECT_TRUE(b.decide(false, 1));
  EXPECT_TRUE(b.decide(true, 2));
  EXPECT_EQ(b.update_count(), 2);
  EXPECT_EQ(b.first_nonfinite_step(), std::optional<int64_t>(2));
  // fp32 without a scaler: a non-finite gradient is a divergence, not the scaler's.
  EXPECT_FALSE(ScaledUpdate(PrecisionConfig{}).handles_nonfinite());
  // static: skips without changing the scale.
  PrecisionConfig st = pc;
  st.loss_scale = "static";
  ScaledUpdate s(st);
  EXPECT_FALSE(s.decide(true, 1));
  EXPECT_TRUE(s.decide(false, 2));
  EXPECT_EQ(s.loss_scale(), 1024.0f);
  EXPECT_EQ(s.update_count(), 1);
}

// ---- BC07: clipping after unscaling ----------------------------------------------------------------------------

TEST(CasesBC07, ClippingRunsOnTheUnscaledGradient) {
  const json c = load_case("BC07");
  ASSERT_FALSE(c.is_null()) << "case BC07 not found";
  const double scale = c["input"]["loss_scale"].get<double>();
  const double max_norm = c["input"]["max_norm"].get<double>();
  LossScalerSettings s;
  s.kind = LossScaleKind::kStatic;
  s.initial_scale = scale;
  for (const char* name : {"a", "b"}) {
    SCOPED_TRACE(name);
    const json& exp = c["expected"][std::string("case_") + name];
    const auto truth = c["input"][std::string("case_") + name + "_true_grad"].get<std::vector<double>>();
    LossScaler scaler(s);
    std::vector<float> g;
    for (double v : truth) g.push_back(static_cast<float>(v * scale));  // the scaled gradient backward produced
    const GradientStepResult r = unscale_check_clip(g.data(), g.size(), scaler, max_norm, 1);
    EXPECT_TRUE(r.applied);
    EXPECT_NEAR(r.grad_norm, exp["reported_norm"].get<double>(), 1e-6 * exp["reported_norm"].get<double>());
    const auto clipped = exp["clipped_grad"].get<std::vector<double>>();
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], clipped[i], 1e-6 * std::fabs(clipped[i]));
    // The buggy order's value (clip before unscale) is far away.
    const auto wrong = c["wrong_value"][std::string("case_") + name]["grad"].get<std::vector<double>>();
    EXPECT_GT(std::fabs(g[0] - wrong[0]), 0.1);
  }
}

// A one-step run of the linear model y_hat = w x (x = 1, no bias, two outputs), mse; per-sample gradient w - y.
std::string linear_run(const json& w0, const json& precision, double clip, double lr, int ranks,
                       int K, int steps, const json& per_rank) {
  json s = {{"name", "prec"},
            {"model", {{"kind", "linear"}, {"layers", {1, static_cast<int>(w0.size())}}, {"bias", false},
                       {"loss", "mse"}, {"initial_weights", w0}}},
            {"data", {{"kind", "inline"}, {"ranks", per_rank}}},
            {"cluster", {{"ranks", ranks}, {"share_identical", false}}},
            {"training", {{"steps", steps}, {"accumulation_steps", K}, {"eval_every", 0}, {"clip_grad_norm", clip},
                          {"optimizer", {{"kind", "sgd"}, {"lr", lr}}}}},
            {"precision", precision},
            {"report", {{"trace", true}}}};
  return s.dump();
}

// One micro-batch of one sample with x = 1 (or the given x) and targets y.
json sample(std::vector<double> y, double x = 1.0) {
  json row = json::array();
  for (double v : y) row.push_back(v);
  return {{"x", {{x}}}, {"y", {row}}};
}

TEST(CasesBC07, ScenarioWithStaticScaleAndClippingAppliesTheCasesUpdate) {
  const json c = load_case("BC07");
  ASSERT_FALSE(c.is_null());
  const double lr = c["input"]["lr"].get<double>();
  const auto truth = c["input"]["case_a_true_grad"].get<std::vector<double>>();
  // Gradient w - y at w = 0 equals the case's true gradient when y = -g.
  json ranks = json::array({json::array({sample({-truth[0], -truth[1]})})});
  const json precision = {{"mode", "fp32"}, {"loss_scale", "static"},
                          {"initial_scale", c["input"]["loss_scale"].get<double>()}};
  auto runs = test::run_scenario_text(linear_run({{0.0}, {0.0}}, precision,
                                                 c["input"]["max_norm"].get<double>(), lr, 1, 1, 1, ranks));
  ASSERT_EQ(runs.size(), 1u);
  const std::vector<float> w1 = test::params_after(runs[0], 0, 0);
  const auto update = c["expected"]["case_a"]["update"].get<std::vector<double>>();
  ASSERT_EQ(w1.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(w1[i], update[i], 1e-6 * std::fabs(update[i]));
  EXPECT_EQ(runs[0]["precision"]["skipped_steps"].get<int>(), 0);
}

// ---- Skips: a forced overflow at a known step ---------------------------------------------------------------------

TEST(LossScaling, ForcedOverflowSkipsExactlyThatStepOnEveryRankAndBacksOffOnce) {
  // 2 ranks, fp16_mixed, dynamic scale 1024. At step 3 rank 0's target is 100: its scaled loss gradient
  // (w - 100) * 1024 ~ -1e5 exceeds fp16's 65504 and becomes -inf; every other gradient stays finite.
  json r0 = json::array(), r1 = json::array();
  for (int step = 1; step <= 5; ++step) {
    r0.push_back(sample({step == 3 ? 100.0 : 1.0}));
    r1.push_back(sample({1.0}));
  }
  const json precision = {{"mode", "fp16_mixed"}, {"loss_scale", "dynamic"}, {"initial_scale", 1024.0},
                          {"growth_interval", 1000}};
  auto runs = test::run_scenario_text(linear_run({{0.0}}, precision, 0.0, 0.1, 2, 1, 5, {r0, r1}));
  ASSERT_EQ(runs.size(), 1u);
  const json& p = runs[0]["precision"];
  EXPECT_EQ(p["loss_scale"], "dynamic");
  EXPECT_EQ(p["skipped_steps"].get<int>(), 1);
  EXPECT_EQ(p["skipped_step_list"], json::array({3}));
  EXPECT_EQ(p["loss_scale_trajectory"], json::parse("[[0, 1024.0], [3, 512.0]]"));
  EXPECT_EQ(p["first_nonfinite_step"], json::parse("[3, null]"));
  EXPECT_GT(p["grad_nonfinite_values"].get<int>(), 0);
  for (size_t rank = 0; rank < 2; ++rank) {
    // Steps 1, 2, 4, 5 move w toward 1; step 3 leaves it where step 2 put it.
    const float w2 = test::params_after(runs[0], 1, rank)[0];
    const float w3 = test::params_after(runs[0], 2, rank)[0];
    const float w4 = test::params_after(runs[0], 3, rank)[0];
    EXPECT_GT(w2, test::params_after(runs[0], 0, rank)[0]);
    EXPECT_EQ(w3, w2) << "rank " << rank;
    EXPECT_GT(w4, w3);
    EXPECT_EQ(w4, test::params_after(runs[0], 3, 0)[0]);  // replicas stay identical
  }
}

TEST(LossScaling, NonFiniteMicroBatchSkipsTheWholeAccumulatedStep) {
  // K = 2 micro-batches per step; step 2's second micro-batch overflows: one skip, one backoff.
  json r0 = json::array({sample({1.0}), sample({1.0}), sample({1.0}), sample({100.0}), sample({1.0}), sample({1.0})});
  const json precision = {{"mode", "fp16_mixed"}, {"loss_scale", "dynamic"}, {"initial_scale", 1024.0}};
  auto runs = test::run_scenario_text(linear_run({{0.0}}, precision, 0.0, 0.1, 1, 2, 3, json::array({r0})));
  const json& p = runs[0]["precision"];
  EXPECT_EQ(p["skipped_step_list"], json::array({2}));
  EXPECT_EQ(p["loss_scale_trajectory"], json::parse("[[0, 1024.0], [2, 512.0]]"));
  EXPECT_EQ(test::params_after(runs[0], 1, 0)[0], test::params_after(runs[0], 0, 0)[0]);
}

// ---- A non-finite loss under a loss scaler: the window is skipped, as for a non-finite gradient (torch.amp) ---------

// The windows of these runs: linear y_hat = w x (x = 1, one output, no bias), mse (per-sample gradient w - y), SGD lr
// 0.5, w0 = 0, 2 ranks x K = 2 micro-batches of one sample with y = 1, 4 steps. Rank 0's second micro-batch of step
// 2 has y = 3e19: its loss 0.5 (w - y)^2 = 4.5e38 overflows float to inf, while its scaled gradient (w - y) x 1024 =
// -3.1e22 stays finite in fp32, so only the loss tells the scaler. Every value below is exact in float (powers of two).
constexpr double kHugeTarget = 3e19;

json inf_loss_ranks(int ranks, int steps, int K, int bad_rank, std::vector<int> bad_steps) {
  json out = json::array();
  for (int r = 0; r < ranks; ++r) {
    json row = json::array();
    for (int t = 1; t <= steps; ++t)
      for (int k = 0; k < K; ++k) {
        const bool bad = r == bad_rank && k == K - 1 &&
                         std::find(bad_steps.begin(), bad_steps.end(), t) != bad_steps.end();
        row.push_back(sample({bad ? kHugeTarget : 1.0}));
      }
    out.push_back(row);
  }
  return out;
}

// The scenario of inf_loss_ranks with a sync section and precision (dynamic scale 1024, growth every 2 clean steps).
json inf_loss_scenario(const json& sync, const json& precision, int steps = 4, std::vector<int> bad_steps = {2}) {
  json s = json::parse(linear_run({{0.0}}, precision, 0.0, 0.5, 2, 2, steps, inf_loss_ranks(2, steps, 2, 0, bad_steps)));
  s["sync"] = sync;
  s["data"]["eval"] = sample({1.0});  // eval loss 0.5 (w - 1)^2: the final w of free-running runs, which have no trace
  return s;
}

const json kDynamic1024 = {{"mode", "fp32"}, {"loss_scale", "dynamic"}, {"initial_scale", 1024.0},
                           {"growth_interval", 2}};

// Synchronous (every rank skips step 2 together): GradScaler with growth_interval 2 gives scale 1024 (step 1: tracker
// 1), 512 at step 2 (skip: backoff, tracker 0), step 3 tracker 1, 1024 at step 4 (tracker 2 -> growth). A tracker
// not reset by the skip would grow at step 3 instead. Updates (mean gradient g = w - 1 over the 4 samples):
// w1 = 0 - 0.5 (-1) = 0.5; w2 = w1 (skipped); w3 = 0.5 - 0.5 (-0.5) = 0.75; w4 = 0.75 - 0.5 (-0.25) = 0.875.
void expect_synchronous_skip(const json& run, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(run["disposition"], "passed") << run["message"];
  const json& p = run["precision"];
  EXPECT_EQ(p["skipped_steps"].get<int>(), 1);
  EXPECT_EQ(p["skipped_step_list"], json::array({2}));
  EXPECT_EQ(p["skipped_nonfinite_loss"].get<int>(), 1);
  EXPECT_EQ(p["skipped_nonfinite_gradient"].get<int>(), 0);
  EXPECT_EQ(p["loss_scale_trajectory"], json::parse("[[0, 1024.0], [2, 512.0], [4, 1024.0]]"));
  EXPECT_EQ(p["averaged_grad_nonfinite_values"].get<int>(), 0);  // the gradient itself stayed finite
  EXPECT_TRUE(p["first_nonfinite_averaged_step"].is_null());
  EXPECT_TRUE(run["convergence"]["series"][1]["train_loss"].is_null());  // inf in the series (JSON null)
  const float expected[4] = {0.5f, 0.5f, 0.75f, 0.875f};
  for (size_t step = 0; step < 4; ++step)
    for (size_t rank = 0; rank < 2; ++rank)
      EXPECT_EQ(test::params_after(run, step, rank)[0], expected[step]) << "step " << step + 1 << " rank " << rank;
}

json run_one(const json& scenario) {
  Scenario sc = parse_scenario(scenario.dump(), "<test>", {});
  EXPECT_EQ(sc.runs.size(), 1u);
  return run_to_json(sc.runs[0], run_training(sc.runs[0].config));
}

TEST(NonFiniteLoss, SkipsTheWindowUnderEverySynchronousStrategy) {
  expect_synchronous_skip(run_one(inf_loss_scenario({{"kind", "allreduce"}}, kDynamic1024)), "allreduce");
  // bf16 wire: every gradient here (powers of two, and -3.1e22) is a bf16 value, so the cast changes nothing.
  json bf16 = inf_loss_scenario({{"kind", "allreduce"}}, kDynamic1024);
  bf16["compression"] = {{"kind", "bf16"}};
  expect_synchronous_skip(run_one(bf16), "allreduce, bf16 cast compression");
  // local SGD whose warm-up covers the run: every step is a synchronous all-reduce step on per-rank scalers.
  expect_synchronous_skip(
      run_one(inf_loss_scenario({{"kind", "local_sgd"}, {"period", 2}, {"warmup_steps", 4}}, kDynamic1024)),
      "local_sgd warm-up");
  // fp16_mixed: the huge target's fp16 gradient overflows too; the loss is checked first, so it counts as a loss skip.
  json fp16 = inf_loss_scenario({{"kind", "allreduce"}}, {{"mode", "fp16_mixed"}, {"loss_scale", "dynamic"},
                                                           {"initial_scale", 1024.0}, {"growth_interval", 2}});
  const json r16 = run_one(fp16);
  EXPECT_EQ(r16["disposition"], "passed") << r16["message"];
  EXPECT_EQ(r16["precision"]["skipped_nonfinite_loss"].get<int>(), 1);
  EXPECT_EQ(r16["precision"]["skipped_nonfinite_gradient"].get<int>(), 0);
  EXPECT_EQ(r16["precision"]["first_nonfinite_averaged_step"].get<int>(), 2);
  EXPECT_EQ(test::params_after(r16, 1, 0)[0], test::params_after(r16, 0, 0)[0]);
}

// Delayed all-reduce (staleness 1): the step-t update applies step t - 1's averaged gradient, and the skip drops the
// gradient of step 2 from the ring. Steps: 1 applies nothing (w = 0), 2 applies step 1's g = -1 (w = 0.5), 3 would
// apply step 2's (skipped: w stays 0.5), 4 applies step 3's gradient, computed at w2 = 0.5: g = -0.5, w = 0.75.
TEST(NonFiniteLoss, DelayedAllReduceDropsTheSkippedGradientFromTheRing) {
  const json run = run_one(inf_loss_scenario({{"kind", "allreduce"}, {"staleness", 1}}, kDynamic1024));
  EXPECT_EQ(run["disposition"], "passed") << run["message"];
  EXPECT_EQ(run["precision"]["skipped_step_list"], json::array({2}));
  EXPECT_EQ(run["precision"]["skipped_nonfinite_loss"].get<int>(), 1);
  const float expected[4] = {0.0f, 0.5f, 0.5f, 0.75f};
  for (size_t step = 0; step < 4; ++step) EXPECT_EQ(test::params_after(run, step, 1)[0], expected[step]) << step + 1;
}

// Per-rank scalers: only rank 0's loss is inf, so only rank 0 skips; rank 1 goes on with its own data (g = w - 1).
// independent: rank 0: 0.5, 0.5, 0.75, 0.875 (scales 1024, 512, 512, 1024); rank 1: 0.5, 0.75, 0.875, 0.9375.
// local SGD (no warm-up, period 2): the same until the average after step 2: (0.5 + 0.75) / 2 = 0.625 on both; step 3:
// g = -0.375, w = 0.8125; step 4: g = -0.1875, w = 0.90625, averaged (equal).
TEST(NonFiniteLoss, PerRankScalersSkipOnlyTheRankWhoseLossIsNonFinite) {
  const json ind = run_one(inf_loss_scenario({{"kind", "independent"}}, kDynamic1024));
  EXPECT_EQ(ind["disposition"], "passed") << ind["message"];
  EXPECT_EQ(ind["precision"]["skipped_step_list"], json::array({2}));  // rank 0's scaler
  EXPECT_EQ(ind["precision"]["skipped_nonfinite_loss"].get<int>(), 1);
  const float r0[4] = {0.5f, 0.5f, 0.75f, 0.875f}, r1[4] = {0.5f, 0.75f, 0.875f, 0.9375f};
  for (size_t step = 0; step < 4; ++step) {
    EXPECT_EQ(test::params_after(ind, step, 0)[0], r0[step]) << "independent rank 0 step " << step + 1;
    EXPECT_EQ(test::params_after(ind, step, 1)[0], r1[step]) << "independent rank 1 step " << step + 1;
  }
  const json local = run_one(inf_loss_scenario({{"kind", "local_sgd"}, {"period", 2}}, kDynamic1024));
  EXPECT_EQ(local["disposition"], "passed") << local["message"];
  const float avg[4] = {0.5f, 0.625f, 0.8125f, 0.90625f};
  for (size_t step = 0; step < 4; ++step)
    for (size_t rank = 0; rank < 2; ++rank)
      EXPECT_EQ(test::params_after(local, step, rank)[0], avg[step]) << "local_sgd step " << step + 1 << " rank " << rank;
}

// Parameter server (BSP, 2 workers): worker 0 skips its push of clock 2; the server averages the push
// that arrived (worker 1's, g = 0.5 - 1): w = 0.75, then 0.875, 0.9375. The final eval loss 0.5 (w - 1)^2 = 2^-9.
TEST(NonFiniteLoss, ParameterServerWorkerSkipsItsPushAndTheRunGoesOn) {
  json s = inf_loss_scenario({{"kind", "parameter_server"}, {"staleness", 0}}, kDynamic1024);
  s["report"]["trace"] = false;
  const json run = run_one(s);
  EXPECT_EQ(run["disposition"], "passed") << run["message"];
  EXPECT_EQ(run["staleness"]["skipped_pushes_per_rank"], json::array({1, 0}));
  EXPECT_EQ(run["precision"]["skipped_nonfinite_loss"].get<int>(), 1);
  EXPECT_EQ(run["convergence"]["final"]["eval_loss"].get<double>(), std::ldexp(1.0, -9));
}

// A static scale skips the window too and never gives up; without a scaler the inf loss is a divergence (message
// with "inf"). A NaN loss prints "NaN": cross-entropy of the logits [inf, 0] (x = 3e38, w = [[2], [0]]) is
// logsumexp - z_0 with z - max(z) = [inf - inf, -inf], a NaN whose sign bit x86 sets (printed "-nan" before).
TEST(NonFiniteLoss, StaticScaleSkipsAndNoScalerDivergesWithTheLossPrinted) {
  const json st = run_one(inf_loss_scenario({{"kind", "allreduce"}},
                                            {{"mode", "fp32"}, {"loss_scale", "static"}, {"initial_scale", 1024.0}}));
  EXPECT_EQ(st["disposition"], "passed") << st["message"];
  EXPECT_EQ(st["precision"]["skipped_step_list"], json::array({2}));
  EXPECT_EQ(st["precision"]["loss_scale_trajectory"], json::parse("[[0, 1024.0]]"));
  const json none = run_one(inf_loss_scenario({{"kind", "allreduce"}}, {{"mode", "fp32"}, {"loss_scale", "none"}}));
  EXPECT_EQ(none["disposition"], "diverged");
  EXPECT_EQ(none["divergence"], json::parse(R"({"step": 2, "quantity": "train_loss"})"));
  EXPECT_NE(none["message"].get<std::string>().find("training loss (inf;"), std::string::npos) << none["message"];

  json nan = json::parse(linear_run({{2.0}, {0.0}}, {{"mode", "fp32"}}, 0.0, 0.5, 1, 1, 1,
                                    json::array({json::array({json{{"x", {{3e38}}}, {"y", {0}}}})})));
  nan["model"]["loss"] = "cross_entropy";
  const json r = run_one(nan);
  EXPECT_EQ(r["disposition"], "diverged");
  const std::string m = r["message"].get<std::string>();
  EXPECT_NE(m.find("training loss (NaN;"), std::string::npos) << m;
  EXPECT_EQ(m.find("nan"), std::string::npos) << m;
}

// The scaler cannot recover once the dynamic scale's reciprocal overflows float (torch's unscale factor
// float(1 / double(scale)) is then inf, so every later gradient unscales to inf/NaN and every step is skipped): from
// 2^-125 with backoff 0.5, steps 2, 3, 4 (inf loss on rank 0 from step 2 on) back it off to 2^-126, 2^-127, 2^-128,
// and 2^128 is past float's largest value (2^128 - 2^104). The run diverges with quantity loss_scale at step 4 (seen
// by step 5's control values, before any update there).
TEST(NonFiniteLoss, DivergesWhenTheDynamicScaleCanNoLongerBeUnscaled) {
  json precision = {{"mode", "fp32"}, {"loss_scale", "dynamic"}, {"initial_scale", std::ldexp(1.0, -125)}};
  const json run = run_one(inf_loss_scenario({{"kind", "allreduce"}}, precision, 6, {2, 3, 4, 5, 6}));
  EXPECT_EQ(run["disposition"], "diverged") << run["message"];
  EXPECT_EQ(run["divergence"], json::parse(R"({"step": 4, "quantity": "loss_scale"})"));
  EXPECT_EQ(run["precision"]["skipped_step_list"], json::array({2, 3, 4}));
  EXPECT_EQ(run["precision"]["skipped_nonfinite_loss"].get<int>(), 3);
  EXPECT_EQ(run["precision"]["final_loss_scale"].get<double>(), std::ldexp(1.0, -128));
  EXPECT_EQ(test::params_after(run, 3, 0)[0], 0.5f);  // step 1's update only
  EXPECT_NE(run["message"].get<std::string>().find("cannot recover"), std::string::npos) << run["message"];
  // The same run's last skip at the last step: found after the run.
  const json last = run_one(inf_loss_scenario({{"kind", "allreduce"}}, precision, 4, {2, 3, 4}));
  EXPECT_EQ(last["disposition"], "diverged") << last["message"];
  EXPECT_EQ(last["divergence"], json::parse(R"({"step": 4, "quantity": "loss_scale"})"));
}

// LossScaler's cause counts and exhaustion by hand (GradScaler's rule): a loss skip and a gradient skip back off alike.
TEST(LossScaler, CountsSkipsByCauseAndIsExhaustedWhenItsReciprocalOverflows) {
  LossScalerSettings s;
  s.kind = LossScaleKind::kDynamic;
  s.initial_scale = std::ldexp(1.0, -126);
  LossScaler scaler(s);
  EXPECT_FALSE(scaler.update(true, 1, SkipCause::kLoss));
  EXPECT_EQ(scaler.scale(), std::ldexp(1.0f, -127));
  EXPECT_FALSE(scaler.exhausted());  // 1 / 2^-127 = 2^127 is a float
  EXPECT_FALSE(scaler.update(true, 2, SkipCause::kGradient));
  EXPECT_EQ(scaler.scale(), std::ldexp(1.0f, -128));
  EXPECT_TRUE(scaler.exhausted());  // 2^128 is not
  EXPECT_EQ(scaler.skipped_for_loss(), 1);
  EXPECT_EQ(scaler.skipped_for_gradient(), 1);
  LossScalerSettings st = s;
  st.kind = LossScaleKind::kStatic;
  LossScaler fixed(st);
  fixed.update(true, 1, SkipCause::kLoss);
  EXPECT_FALSE(fixed.exhausted());  // a static scale never gives up
  // unscale_check_clip: a finite gradient with a non-finite loss is skipped for the loss, the gradient untouched
  // but unscaled (x 1/1024).
  LossScalerSettings d;
  d.kind = LossScaleKind::kDynamic;
  d.initial_scale = 1024.0;
  LossScaler dyn(d);
  std::vector<float> g = {2048.0f, -1024.0f};
  const GradientStepResult r = unscale_check_clip(g.data(), g.size(), dyn, 0.0, 1, true);
  EXPECT_FALSE(r.applied);
  EXPECT_FALSE(r.nonfinite);
  EXPECT_EQ(g, (std::vector<float>{2.0f, -1.0f}));
  EXPECT_EQ(dyn.skipped_for_loss(), 1);
  EXPECT_EQ(dyn.scale(), 512.0f);
  // ScaledUpdate (the cuda loop's decisions) takes the loss the same way.
  PrecisionConfig pc;
  pc.mode = "fp16_mixed";
  pc.loss_scale = "dynamic";
  pc.initial_scale = 1024.0;
  ScaledUpdate u(pc);
  EXPECT_FALSE(u.decide(false, 1, true));
  EXPECT_EQ(u.loss_scale(), 512.0f);
  EXPECT_EQ(u.scaler().skipped_for_loss(), 1);
  EXPECT_EQ(u.update_count(), 0);
}

// ---- Rounding points of the emulated modes --------------------------------------------------------------------------

// fp16 without a loss scale: a gradient of 2^-26 (below half of fp16's smallest subnormal 2^-24) rounds to zero and
// the weight does not move; with a static scale 2^16 it is 2^-10 in fp16, survives, and the update is lr * 2^-26.
TEST(PrecisionModes, Fp16UnderflowWithoutScaleAndItsRescueByAScale) {
  const double g = std::ldexp(1.0, -26);
  json ranks = json::array({json::array({sample({-g})})});
  const double lr = 0.5;
  auto unscaled = test::run_scenario_text(
      linear_run({{0.0}}, {{"mode", "fp16_mixed"}, {"loss_scale", "none"}}, 0.0, lr, 1, 1, 1, ranks));
  EXPECT_EQ(test::params_after(unscaled[0], 0, 0)[0], 0.0f);
  const json& p = unscaled[0]["precision"];
  EXPECT_GT(p["grad_underflow_fraction"].get<double>(), 0.0);
  auto scaled = test::run_scenario_text(linear_run(
      {{0.0}}, {{"mode", "fp16_mixed"}, {"loss_scale", "static"}, {"initial_scale", 65536.0}}, 0.0, lr, 1,
      1, 1, ranks));
  EXPECT_EQ(test::params_after(scaled[0], 0, 0)[0], static_cast<float>(-lr * g));
  EXPECT_EQ(scaled[0]["precision"]["grad_underflow_fraction"].get<double>(), 0.0);
}

// bf16_mixed rounds the input: x = 1 + 2^-8 is halfway between bf16's 1 and 1 + 2^-7 and rounds to 1 (even), so the
// loss 0.5 (w x)^2 at w = 1 is exactly 0.5 (fp32 gives 0.5 (1 + 2^-8)^2).
TEST(PrecisionModes, Bf16MixedRoundsGemmOperands) {
  const double x = 1.0 + std::ldexp(1.0, -8);
  json ranks = json::array({json::array({sample({0.0}, x)})});
  auto bf16 = test::run_scenario_text(linear_run({{1.0}}, {{"mode", "bf16_mixed"}}, 0.0, 0.1, 1, 1, 1, ranks));
  EXPECT_EQ(bf16[0]["convergence"]["series"][0]["train_loss"].get<double>(), 0.5);
  auto fp32 = test::run_scenario_text(linear_run({{1.0}}, {{"mode", "fp32"}}, 0.0, 0.1, 1, 1, 1, ranks));
  const float xf = static_cast<float>(x);
  EXPECT_EQ(fp32[0]["convergence"]["series"][0]["train_loss"].get<double>(), 0.5 * double(xf * xf));
}

// fp16_pure holds the weight in fp16: an update of 2^-13 to w = 1 (below half an ulp of 1, 2^-11) vanishes, while
// fp16_mixed keeps the fp32 master weight and moves it to 1 - 2^-13.
TEST(PrecisionModes, Fp16PureLosesUpdatesBelowHalfAnUlp) {
  // Gradient w - y = 2^-3 at w = 1 with y = 1 - 2^-3; lr 2^-10: update 2^-13.
  const double lr = std::ldexp(1.0, -10);
  json ranks = json::array({json::array({sample({1.0 - 0.125})})});
  auto pure = test::run_scenario_text(
      linear_run({{1.0}}, {{"mode", "fp16_pure"}, {"loss_scale", "none"}}, 0.0, lr, 1, 1, 1, ranks));
  EXPECT_EQ(test::params_after(pure[0], 0, 0)[0], 1.0f);
  auto mixed = test::run_scenario_text(
      linear_run({{1.0}}, {{"mode", "fp16_mixed"}, {"loss_scale", "none"}}, 0.0, lr, 1, 1, 1, ranks));
  EXPECT_EQ(test::params_after(mixed[0], 0, 0)[0], static_cast<float>(1.0 - std::ldexp(1.0, -13)));
  const json& bytes = pure[0]["precision"]["bytes_per_param"];
  EXPECT_EQ(bytes["held_bytes"].get<double>(), 4.0);  // fp16 weight + fp16 gradient, plain SGD (no state)
  EXPECT_EQ(bytes["wire_bytes"].get<double>(), 2.0);
}

// fp8_mixed's delayed scaling: the first use of an operand quantizes with scale 1; afterwards the scale is
// 448 / amax(history) for E4M3 operands (Transformer Engine's DelayedScaling, margin 0).
TEST(PrecisionModes, Fp8DelayedScalingFromAmaxHistory) {
  DenseStack stack;
  stack.widths = {2, 2};
  stack.bias = false;
  stack.loss = LossKind::kMse;
  MixedSpec spec;
  spec.fp8_gemm = true;
  spec.format = FloatFormat::kBf16;
  spec.amax_history_len = 2;
  DenseScratch<float> s = make_dense_scratch<float>(stack, 1);
  MixedScratch m = make_mixed_scratch(stack, 1, spec);
  const std::vector<float> w = {0.5f, -3.0f, 0.25f, 1.0f};  // amax 3
  const std::vector<float> x = {0.1f, 0.2f};                // amax 0.2
  const std::vector<float> y = {0.0f, 0.0f};
  dense_stack_forward_mixed(s, m, stack, w.data(), x.data(), 1, y.data(), nullptr, spec);
  // Weight operand: scale 1 at first use; E4M3 holds 0.5, -3, 0.25, 1 exactly.
  EXPECT_EQ(m.w_q[0], w);
  EXPECT_EQ(m.fp8[1].scale, 448.0f / 3.0f);
  EXPECT_EQ(m.fp8[0].scale, 448.0f / 0.2f);
  // Input at scale 1: 0.1 in E4M3 (3 mantissa bits, 2^-4 binade step 2^-7) is 13 x 2^-7 = 0.1015625.
  EXPECT_EQ(m.a_q[0][0], 0.1015625f);
  dense_stack_forward_mixed(s, m, stack, w.data(), x.data(), 1, y.data(), nullptr, spec);
  // Second use at scale 448/0.2 = 2240: 0.1 * 2240 = 224 is exact in E4M3, so the input comes back as 224/2240.
  EXPECT_EQ(m.a_q[0][0], 224.0f * (1.0f / (448.0f / 0.2f)));
}

// fp8_quantize_delayed (the host twin of gpu::fp8_quantize_delayed): the history is a ring of the last
// amax_history_len amaxes (finite values only), the scale used now is the one from before this call, and a zero
// history max leaves the scale unchanged. History length 2, E4M3 (max 448), six calls worked out by hand.
TEST(PrecisionModes, Fp8HistoryIsARingOfTheLastAmaxes) {
  Fp8Scaling sc;
  std::vector<float> out(2);
  auto call = [&](std::vector<float> in) {
    out.assign(in.size(), -1.0f);
    return fp8_quantize_delayed(out.data(), in.data(), in.size(), FloatFormat::kFp8E4M3, sc, 2);
  };
  RoundingCounts c = call({1.0f, -0.5f});  // scale 1: both exact in E4M3
  EXPECT_EQ(out, (std::vector<float>{1.0f, -0.5f}));
  EXPECT_EQ(sc.history, (std::vector<float>{1.0f}));
  EXPECT_EQ(sc.scale, 448.0f);
  c = call({4.0f, NAN});  // 4 x 448 saturates to 448; NaN is not an amax, it stays NaN and is counted
  EXPECT_EQ(out[0], 448.0f * (1.0f / 448.0f));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(c.nonfinite, 1u);
  EXPECT_EQ(sc.history, (std::vector<float>{1.0f, 4.0f}));
  EXPECT_EQ(sc.scale, 112.0f);  // 448 / 4
  c = call({2.0f});  // 2 x 112 = 224 exact; the ring is full: slot 0 takes the new amax
  EXPECT_EQ(out[0], 224.0f * (1.0f / 112.0f));
  EXPECT_EQ(sc.history, (std::vector<float>{2.0f, 4.0f}));
  EXPECT_EQ(sc.next, 1u);
  EXPECT_EQ(sc.scale, 112.0f);  // 4 is still in the history
  c = call({0.5f, 1e-6f});  // 1e-6 x 112 is below half of E4M3's smallest subnormal (2^-10): an underflow
  EXPECT_EQ(c.underflow, 1u);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(sc.history, (std::vector<float>{2.0f, 0.5f}));
  EXPECT_EQ(sc.next, 0u);
  EXPECT_EQ(sc.scale, 224.0f);  // 4 dropped out: 448 / 2
  call({0.0f, -0.0f});  // amax 0 joins
  EXPECT_EQ(sc.history, (std::vector<float>{0.0f, 0.5f}));
  EXPECT_EQ(sc.scale, 896.0f);
  call({});  // empty: amax 0 again, the history max is 0: the scale stays
  EXPECT_EQ(sc.history, (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(sc.scale, 896.0f);
}

TEST(PrecisionModes, Tf32OnTheHostIsSkippedWithItsReason) {
  Scenario sc = parse_scenario(linear_run({{0.0}}, {{"mode", "tf32"}}, 0.0, 0.1, 1, 1, 1,
                                          json::array({json::array({sample({1.0})})})),
                               "<test>", {});
  RunResult r = run_training(sc.runs[0].config);
  EXPECT_EQ(r.disposition, Disposition::kSkipped);
  EXPECT_NE(r.message.find("GPU"), std::string::npos);
  EXPECT_EQ(r.steps_completed, 0);
}

// grad_values_rounded counts the gradient values a backward casts to the mode's format. MLP [w0, w1, w2] = [8, 16, 4]
// with bias, b = 8 rows per micro-batch; per micro-batch the mixed backward casts the output gradient (b w2), each
// layer's weight and bias gradients (w1 w0 + w1 + w2 w1 + w2) and the hidden layer's input gradient (b w1):
// 32 + 144 + 68 + 128 = 372 values, times K = 2 micro-batches x 3 ranks x 2 steps = 4464. fp32 under a static loss
// scale takes the same stack to apply the scale but casts nothing (fp32 to fp32): 0, and no underflow fraction.
TEST(PrecisionModes, GradValuesRoundedCountsCastsAndIsZeroInFp32) {
  const std::string base = R"({"name": "p", "model": {"kind": "mlp", "layers": [8, 16, 4]},
    "data": {"kind": "teacher", "batch_per_rank": 8, "teacher": {"in_dim": 8, "out_dim": 4, "train_samples": 256,
    "eval_samples": 64}}, "cluster": {"ranks": 3},
    "training": {"steps": 2, "accumulation_steps": 2, "eval_every": 0, "optimizer": {"kind": "sgd", "lr": 0.1}}})";
  const int64_t b = 8, w0 = 8, w1 = 16, w2 = 4, K = 2, ranks = 3, steps = 2;
  const int64_t per_micro_batch = b * w2 + (w1 * w0 + w1) + (w2 * w1 + w2) + b * w1;
  auto bf16 = test::run_scenario_text(base, {"precision.mode=bf16_mixed"});
  ASSERT_EQ(bf16.size(), 1u);
  EXPECT_EQ(bf16[0]["precision"]["grad_values_rounded"].get<int64_t>(), per_micro_batch * K * ranks * steps);
  auto fp32 = test::run_scenario_text(base, {"precision.mode=fp32", "precision.loss_scale=static",
                                             "precision.initial_scale=1024"});
  ASSERT_EQ(fp32.size(), 1u);
  const json& p = fp32[0]["precision"];
  EXPECT_EQ(p["loss_scale"], "static");
  EXPECT_EQ(p["grad_values_rounded"].get<int64_t>(), 0);
  EXPECT_TRUE(p["grad_underflow_fraction"].is_null());
  EXPECT_EQ(p["grad_nonfinite_values"].get<int64_t>(), 0);
}

// Shared and replicated all-reduce give the same bits in an emulated mode (the fp16 storage rounding runs per slice).
TEST(PrecisionModes, SharedAndReplicatedStateAgreeUnderFp16Pure) {
  const std::string base = R"({"name": "p", "model": {"kind": "mlp", "layers": [8, 16, 4]},
    "data": {"kind": "teacher", "batch_per_rank": 8, "teacher": {"in_dim": 8, "out_dim": 4, "train_samples": 256,
    "eval_samples": 64}}, "cluster": {"ranks": 3},
    "training": {"steps": 6, "eval_every": 0, "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9}},
    "precision": {"mode": "fp16_pure", "loss_scale": "none"}, "report": {"trace": true}})";
  auto shared = test::run_scenario_text(base, {"cluster.share_identical=true"});
  auto replicated = test::run_scenario_text(base, {"cluster.share_identical=false"});
  for (size_t step = 0; step < 6; ++step) {
    const std::vector<float> a = test::params_after(shared[0], step, 0);
    EXPECT_EQ(a, test::params_after(replicated[0], step, 2)) << "step " << step + 1;
    for (float v : a) EXPECT_EQ(v, round_through_fp16(v));  // every weight is an fp16 value
  }
}

// fp16_pure's all-reduce sums fp16 in rank order (the fp16 cast's wire, divided by S before the sum): 4 ranks send
// 0.5, 2^-12, 2^-12, 0; in fp16, 0.5 + 2^-12 is a tie that rounds to 0.5 (even) twice, so the average is 0.5, where
// an fp32 sum would give 0.5 + 2^-11 (an fp16 value). With lr 1 from w = 0 the update shows which.
TEST(PrecisionModes, Fp16PureAllReduceSumsInFp16InRankOrder) {
  const double tiny = std::ldexp(1.0, -10);
  json ranks = json::array({json::array({sample({-2.0})}), json::array({sample({-tiny})}),
                            json::array({sample({-tiny})}), json::array({sample({0.0})})});
  auto runs = test::run_scenario_text(
      linear_run({{0.0}}, {{"mode", "fp16_pure"}, {"loss_scale", "none"}}, 0.0, 1.0, 4, 1, 1, ranks));
  for (size_t r = 0; r < 4; ++r) EXPECT_EQ(test::params_after(runs[0], 0, r)[0], -0.5f) << "rank " << r;
  EXPECT_EQ(runs[0]["precision"]["bytes_per_param"]["wire_bytes"].get<double>(), 2.0);
}

// Modeled clock: the scaler's unscale/check pass (8 bytes per parameter; 4 under fp16_pure), clipping (12; 6) and the
// mixed modes' per micro-batch casts ((4 + format bytes) forward, (format bytes + 8) backward) are memory passes on the profile.
TEST(PrecisionModes, ModeledClockPricesScalerClippingAndCastsAsMemoryPasses) {
  const auto hw = load_hardware_profile("h100-sxm-8");
  const CollectiveModel coll(*hw, 4);
  const double n = 1e6;
  RunConfig c;
  c.precision.mode = "fp16_mixed";
  c.precision.loss_scale = "dynamic";
  c.training.clip_grad_norm = 1.0;
  StepCost cost(hw.get(), &coll);
  const PrecisionStep scaled_step(c);
  scaled_step.price(cost, n);
  EXPECT_DOUBLE_EQ(cost.compute_s[static_cast<size_t>(Phase::kOptimizer)], pass_time_s(*hw, 20.0 * n));
  StepCost none(hw.get(), &coll);
  const RunConfig fp32_config;
  const PrecisionStep fp32_step(fp32_config);
  fp32_step.price(none, n);  // fp32, no scaler, no clipping: nothing added
  EXPECT_EQ(none.compute_s[static_cast<size_t>(Phase::kOptimizer)], 0.0);
  // fp16_pure: the same passes over an fp16 gradient (2 + 2 and 2 + 2 + 2 bytes), and no rounding pass: without a
  // scaler or clipping nothing is added (its fp16 storage is priced in the optimizer's own bytes).
  RunConfig pure_config = c;
  pure_config.precision.mode = "fp16_pure";
  StepCost pure_scaled(hw.get(), &coll);
  PrecisionStep(pure_config).price(pure_scaled, n);
  EXPECT_DOUBLE_EQ(pure_scaled.compute_s[static_cast<size_t>(Phase::kOptimizer)], pass_time_s(*hw, 10.0 * n));
  pure_config.precision.loss_scale = "none";
  pure_config.training.clip_grad_norm = 0.0;
  StepCost pure_plain(hw.get(), &coll);
  PrecisionStep(pure_config).price(pure_plain, n);
  EXPECT_EQ(pure_plain.compute_s[static_cast<size_t>(Phase::kOptimizer)], 0.0);
  StepCost casts(hw.get(), &coll);
  price_precision_micro_batch(casts, PrecisionMode::kBf16Mixed, n);
  EXPECT_DOUBLE_EQ(casts.compute_s[static_cast<size_t>(Phase::kForward)], pass_time_s(*hw, 6.0 * n));
  EXPECT_DOUBLE_EQ(casts.compute_s[static_cast<size_t>(Phase::kBackward)], pass_time_s(*hw, 10.0 * n));
  StepCost fp8(hw.get(), &coll);
  price_precision_micro_batch(fp8, PrecisionMode::kFp8Mixed, n);
  EXPECT_DOUBLE_EQ(fp8.compute_s[static_cast<size_t>(Phase::kForward)], pass_time_s(*hw, 5.0 * n));
  StepCost pure(hw.get(), &coll);
  price_precision_micro_batch(pure, PrecisionMode::kFp16Pure, n);  // weights already fp16: no cast
  EXPECT_EQ(pure.compute_s[static_cast<size_t>(Phase::kForward)], 0.0);
}

// ---- Convergence (Fashion-MNIST; skipped where the Debian dataset is not installed) ----------------------------------

bool fashion_mnist_installed() {
  return std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

std::string quickstart_text() {
  std::ifstream in(std::string(GRADSWEEP_SOURCE_DIR) + "/scenarios/quickstart.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double mean_train_loss_of_last(const json& run, size_t count) {
  const json& series = run["convergence"]["series"];
  double sum = 0.0;
  for (size_t i = series.size() - count; i < series.size(); ++i) sum += series[i]["train_loss"].get<double>();
  return sum / static_cast<double>(count);
}

// The quickstart model (784-256-256-10, 4 ranks, SGD 0.05 momentum 0.9, 300 steps): fp16_mixed with GradScaler's
// dynamic scale ends within one point of fp32's accuracy on the whole test split.
TEST(PrecisionConvergence, Fp16MixedWithDynamicScalingWithinOnePointOfFp32OnQuickstart) {
  if (!fashion_mnist_installed()) GTEST_SKIP() << "Fashion-MNIST not installed (Debian: dataset-fashion-mnist)";
  const std::vector<std::string> base = {"training.accumulation_steps=1", "cluster.ranks=4"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> sets = base;
    sets.insert(sets.end(), extra.begin(), extra.end());
    return sets;
  };
  auto fp32 = test::run_scenario_text(quickstart_text(), with({"precision.mode=fp32"}));
  auto fp16 = test::run_scenario_text(quickstart_text(),
                                      with({"precision.mode=fp16_mixed", "precision.loss_scale=dynamic"}));
  ASSERT_EQ(fp32.size(), 1u);
  ASSERT_EQ(fp16.size(), 1u);
  const double acc32 = fp32[0]["convergence"]["final"]["eval_accuracy"].get<double>();
  const double acc16 = fp16[0]["convergence"]["final"]["eval_accuracy"].get<double>();
  EXPECT_GT(acc32, 0.75);  // the run learned (quickstart reaches about 0.83)
  EXPECT_LE(std::fabs(acc16 - acc32), 0.01) << "fp32 " << acc32 << ", fp16_mixed " << acc16;
  const json& p = fp16[0]["precision"];
  EXPECT_EQ(p["loss_scale"], "dynamic");
  EXPECT_GT(p["grad_values_rounded"].get<double>(), 0.0);  // the fp16 arithmetic ran
}

// fp16_pure without a loss scale on the quickstart model with a small learning rate (SGD 0.005, no momentum): small
// gradient values flush to zero in fp16 and updates below half an ulp of the fp16 weights vanish. Against fp16_mixed
// with dynamic scaling (fp32 master weights), the underflow fraction is measurably higher and the loss worse.
TEST(PrecisionConvergence, Fp16PureWithoutScalingUnderflowsAndTrainsWorse) {
  if (!fashion_mnist_installed()) GTEST_SKIP() << "Fashion-MNIST not installed (Debian: dataset-fashion-mnist)";
  const std::string text = R"({"name": "underflow",
    "model": {"kind": "mlp", "layers": [784, 256, 256, 10], "activation": "relu", "loss": "cross_entropy"},
    "data": {"kind": "fashion_mnist", "batch_per_rank": 32, "eval_samples": 1000},
    "cluster": {"ranks": 2}, "training": {"steps": 200, "optimizer": {"kind": "sgd", "lr": 0.005}, "eval_every": 0}})";
  auto pure = test::run_scenario_text(text, {"precision.mode=fp16_pure", "precision.loss_scale=none"});
  auto mixed = test::run_scenario_text(text, {"precision.mode=fp16_mixed", "precision.loss_scale=dynamic"});
  const double u_pure = pure[0]["precision"]["grad_underflow_fraction"].get<double>();
  const double u_mixed = mixed[0]["precision"]["grad_underflow_fraction"].get<double>();
  EXPECT_GT(u_pure, 1e-6);
  EXPECT_GT(u_pure, 10.0 * u_mixed) << "fp16_pure " << u_pure << ", fp16_mixed " << u_mixed;
  const double loss_pure = mean_train_loss_of_last(pure[0], 50);
  const double loss_mixed = mean_train_loss_of_last(mixed[0], 50);
  EXPECT_GT(loss_pure, loss_mixed + 0.005) << "fp16_pure " << loss_pure << ", fp16_mixed " << loss_mixed;
}

}  // namespace
}  // namespace gs
