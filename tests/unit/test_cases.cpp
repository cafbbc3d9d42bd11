// Cases BC01, BC02, BC04 of tests/data/strategy_cases.json as scenario-level tests: inline data, the linear
// model (per-sample loss 0.5*(w*x - y)^2, x = 1), one SGD step, and the parameter trace. Expected values are the
// cases' own; "wrong_value"s are the numbers a buggy normalization gives.
#include <gtest/gtest.h>

#include "tests/unit/cases.h"

#include <cmath>
#include <fstream>

#include <fmt/format.h>

#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

// A one-step scenario of the scalar linear model with explicit per-rank micro-batches.
std::string scalar_scenario(double w0, double lr, int ranks, int K, const json& per_rank, bool share) {
  json s = {{"name", "case"},
            {"model", {{"kind", "linear"}, {"layers", {1, 1}}, {"bias", false}, {"loss", "mse"},
                       {"initial_weights", {{w0}}}}},
            {"data", {{"kind", "inline"}, {"ranks", per_rank}}},
            {"cluster", {{"ranks", ranks}, {"share_identical", share}}},
            {"training", {{"steps", 1}, {"accumulation_steps", K}, {"eval_every", 0},
                          {"optimizer", {{"kind", "sgd"}, {"lr", lr}}}}},
            {"report", {{"trace", true}}}};
  return s.dump();
}

// Micro-batch of samples with x = 1 and the given targets.
json mb(std::initializer_list<double> ys) {
  json y = json::array();
  for (double v : ys) y.push_back({v});
  return {{"y", y}};
}

TEST(CasesBC01, AccumulationWeightsMicroBatchesByTokenCount) {
  json c = load_case("BC01");
  ASSERT_FALSE(c.is_null()) << "strategy_cases.json not found";
  const double w0 = c["input"]["w0"], lr = c["input"]["lr"];
  // Micro-batch A: one token y=3; B: three tokens y=0 (uneven sizes), K = 2 on one rank.
  json ranks = json::array({json::array({mb({3.0}), mb({0.0, 0.0, 0.0})})});
  for (bool share : {false, true}) {
    auto runs = test::run_scenario_text(scalar_scenario(w0, lr, 1, 2, ranks, share));
    ASSERT_EQ(runs.size(), 1u);
    const json& run = runs[0];
    // Loss: mean over all 4 tokens = 3.5 / 4 (exact in binary).
    EXPECT_EQ(run["convergence"]["series"][0]["train_loss"].get<double>(), c["expected"]["loss"].get<double>());
    float w1 = test::params_after(run, 0, 0)[0];
    EXPECT_EQ(w1, static_cast<float>(c["expected"]["w1"].get<double>()));
    EXPECT_NE(w1, static_cast<float>(c["wrong_value"]["mean_of_microbatch_means"]["w1"].get<double>()));
    // The gradient the step applied: (w0 - w1) / lr = 0.25 (to float rounding of lr * g).
    EXPECT_NEAR((w0 - w1) / lr, c["expected"]["grad"].get<double>(), 1e-6);
  }
}

TEST(CasesBC02, AccumulatedGradientIsSyncedOnceAndIdenticalOnEveryRank) {
  json c = load_case("BC02");
  ASSERT_FALSE(c.is_null());
  const double w0 = c["input"]["w0"], lr = c["input"]["lr"];
  // Per-sample gradient of 0.5*(w - y)^2 at w = 0 is -y: targets -g give the case's micro-batch gradients g.
  json ranks = json::array();
  for (const char* r : {"rank0", "rank1"}) {
    json row = json::array();
    for (double g : c["input"]["microbatch_grads"][r]) row.push_back(mb({-g}));
    ranks.push_back(row);
  }
  for (bool share : {false, true}) {
    auto runs = test::run_scenario_text(scalar_scenario(w0, lr, 2, 2, ranks, share));
    const json& run = runs[0];
    float w1_r0 = test::params_after(run, 0, 0)[0];
    float w1_r1 = test::params_after(run, 0, 1)[0];
    const float expected = static_cast<float>(c["expected"]["w1_all_ranks"].get<double>());
    EXPECT_EQ(w1_r0, expected) << "share_identical=" << share;
    EXPECT_EQ(w1_r1, expected) << "share_identical=" << share;
    EXPECT_NEAR((w0 - w1_r0) / lr, c["expected"]["grad_rank0"].get<double>(), 1e-6);
    EXPECT_NE(w1_r0, static_cast<float>(c["wrong_value"]["sync_on_first_microbatch"]["w1_rank0"].get<double>()));
  }
}

TEST(CasesBC04, MeanOverWorkersAndPassesIsTheSameForEverySplit) {
  json c = load_case("BC04");
  ASSERT_FALSE(c.is_null());
  const std::vector<double> y = c["input"]["y"];
  const double w0 = c["input"]["w0"], lr = c["input"]["lr"];
  const double expected_w1 = c["expected"]["w1_all_configs"];
  std::vector<float> results;
  for (const auto& cfg : c["input"]["configs_N_K_b"]) {
    const int N = cfg[0], K = cfg[1], b = cfg[2];
    // Contiguous, equal sharding: rank r holds samples [r*K*b, (r+1)*K*b), micro-batch k the k-th b of them.
    json ranks = json::array();
    for (int r = 0; r < N; ++r) {
      json row = json::array();
      for (int k = 0; k < K; ++k) {
        json ys = json::array();
        for (int i = 0; i < b; ++i) ys.push_back({y[static_cast<size_t>((r * K + k) * b + i)]});
        row.push_back({{"y", ys}});
      }
      ranks.push_back(row);
    }
    auto runs = test::run_scenario_text(scalar_scenario(w0, lr, N, K, ranks, false));
    const json& run = runs[0];
    // Loss: mean of 0.5*y^2 over the 8 samples = 0.5 * 204 / 8 = 12.75 exactly.
    EXPECT_EQ(run["convergence"]["series"][0]["train_loss"].get<double>(), 12.75) << fmt::format("N{} K{}", N, K);
    for (int r = 0; r < N; ++r) {
      float w1 = test::params_after(run, 0, static_cast<size_t>(r))[0];
      // The gradient -4.5 is exact; w1 = -lr * g is 0.45 up to the float rounding of lr * g (one ulp).
      EXPECT_NEAR(w1, expected_w1, 6e-8) << fmt::format("N{} K{} b{} rank {}", N, K, b, r);
      results.push_back(w1);
    }
  }
  for (float w : results) EXPECT_EQ(w, results.front()) << "every split must give the same bits";
  EXPECT_GT(std::fabs(results.front() - c["wrong_value"]["N2_K2_sum_passes_avg_workers"]["w1"].get<double>()), 0.4);
}

}  // namespace
}  // namespace gs
