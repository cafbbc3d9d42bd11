// Training semantics end to end (docs/design.md, section 2): N ranks x K micro-batches x b samples equals one rank with
// one batch of N*K*b samples; replicas stay bit-identical; sharing identical state changes nothing; runs reproduce
// bit for bit; divergence and failures end runs cleanly.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <future>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "sim/comm/communicator.h"
#include "sim/runtime/world.h"
#include "sim/strategy/strategy.h"
#include "sim/validate/validate.h"
#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

// ||a - b|| / ||b||
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

json teacher_mlp(int ranks, int K, int b, int steps) {
  return {{"name", "equiv"},
          {"model", {{"kind", "mlp"}, {"layers", {8, 16, 4}}, {"loss", "cross_entropy"}, {"activation", "gelu"}}},
          {"data", {{"kind", "teacher"}, {"batch_per_rank", b},
                    {"teacher", {{"in_dim", 8}, {"hidden", 12}, {"out_dim", 4}, {"train_samples", 4096},
                                 {"eval_samples", 64}}}}},
          {"cluster", {{"ranks", ranks}, {"share_identical", false}}},
          {"training", {{"steps", steps}, {"accumulation_steps", K}, {"eval_every", 0}, {"seed", 7},
                        {"optimizer", {{"kind", "sgd"}, {"lr", 0.1}, {"momentum", 0.9}}}}},
          {"report", {{"trace", true}}}};
}

TEST(TrainingEquivalence, RanksTimesMicroBatchesEqualsOneBigBatch) {
  const int b = 3, steps = 5;
  for (int N : {1, 2, 3, 4}) {
    for (int K : {1, 2, 4}) {
      auto split = test::run_scenario_text(teacher_mlp(N, K, b, steps).dump());
      auto whole = test::run_scenario_text(teacher_mlp(1, 1, N * K * b, steps).dump());
      for (int s = 0; s < steps; ++s) {
        auto a = test::params_after(split[0], static_cast<size_t>(s), 0);
        auto ref = test::params_after(whole[0], static_cast<size_t>(s), 0);
        EXPECT_LT(rel_error(a, ref), 1e-5) << fmt::format("N={} K={} step {}", N, K, s + 1);
      }
      // And the same samples were seen: the step losses agree too.
      EXPECT_NEAR(split[0]["convergence"]["series"][4]["train_loss"].get<double>(),
                  whole[0]["convergence"]["series"][4]["train_loss"].get<double>(), 1e-5);
    }
  }
}

// Uneven micro-batch sizes (including empty ones): inline samples dealt to N ranks x K micro-batches with varying
// sizes must train exactly like one rank holding all of them in one batch.
TEST(TrainingEquivalence, UnevenMicroBatchesEqualOneBigBatch) {
  std::mt19937 gen(5);
  std::normal_distribution<double> nd(0.0, 1.0);
  const int in = 3, out = 2, steps = 5;
  for (int N : {1, 2, 3, 4}) {
    for (int K : {1, 2, 4}) {
      json ranks = json::array();
      json all_x = json::array(), all_y = json::array();
      int total = 0;
      for (int r = 0; r < N; ++r) {
        json row = json::array();
        for (int k = 0; k < K; ++k) {
          int size = (r * 7 + k * 3) % 5;  // 0..4 samples, uneven
          if (r == 0 && k == 0) size = std::max(size, 1);
          json x = json::array(), y = json::array();
          for (int i = 0; i < size; ++i) {
            json xi = json::array(), yi = json::array();
            for (int d = 0; d < in; ++d) xi.push_back(nd(gen));
            for (int d = 0; d < out; ++d) yi.push_back(nd(gen));
            x.push_back(xi);
            y.push_back(yi);
            all_x.push_back(xi);
            all_y.push_back(yi);
          }
          total += size;
          row.push_back({{"x", x}, {"y", y}});
        }
        ranks.push_back(row);
      }
      auto make = [&](int n, int k, const json& data) {
        return json{{"name", "uneven"},
                    {"model", {{"kind", "mlp"}, {"layers", {in, 5, out}}, {"loss", "mse"}}},
                    {"data", {{"kind", "inline"}, {"batch_per_rank", 4}, {"ranks", data}}},
                    {"cluster", {{"ranks", n}, {"share_identical", false}}},
                    {"training", {{"steps", steps}, {"accumulation_steps", k}, {"eval_every", 0},
                                  {"optimizer", {{"kind", "sgd"}, {"lr", 0.05}, {"momentum", 0.9}}}}},
                    {"report", {{"trace", true}}}}
            .dump();
      };
      auto split = test::run_scenario_text(make(N, K, ranks));
      json one = json::array({json::array({{{"x", all_x}, {"y", all_y}}})});
      auto whole = test::run_scenario_text(make(1, 1, one));
      for (int s = 0; s < steps; ++s) {
        auto a = test::params_after(split[0], static_cast<size_t>(s), 0);
        auto ref = test::params_after(whole[0], static_cast<size_t>(s), 0);
        EXPECT_LT(rel_error(a, ref), 1e-5) << fmt::format("N={} K={} samples={} step {}", N, K, total, s + 1);
      }
    }
  }
}

TEST(TrainingReplicas, BitIdenticalAfterEveryStepAndSharingChangesNothing) {
  json cfg = teacher_mlp(3, 2, 5, 6);
  auto separate = test::run_scenario_text(cfg.dump());
  cfg["cluster"]["share_identical"] = true;
  auto shared = test::run_scenario_text(cfg.dump());
  const json& trace = separate[0]["trace"]["params"];
  ASSERT_EQ(trace.size(), 6u);
  for (size_t s = 0; s < trace.size(); ++s) {
    auto r0 = test::params_after(separate[0], s, 0);
    for (size_t r = 1; r < 3; ++r) {
      auto rr = test::params_after(separate[0], s, r);
      ASSERT_EQ(0, std::memcmp(r0.data(), rr.data(), r0.size() * sizeof(float))) << "step " << s + 1 << " rank " << r;
    }
    auto sh = test::params_after(shared[0], s, 2);
    ASSERT_EQ(0, std::memcmp(r0.data(), sh.data(), r0.size() * sizeof(float))) << "sharing changed step " << s + 1;
  }
  for (size_t i = 0; i < 6; ++i)
    EXPECT_EQ(separate[0]["convergence"]["series"][i]["train_loss"], shared[0]["convergence"]["series"][i]["train_loss"]);
}

TEST(TrainingDeterminism, SameScenarioAndSeedGiveTheSameBits) {
  json cfg = teacher_mlp(2, 2, 4, 8);
  cfg["training"]["eval_every"] = 4;
  auto a = test::run_scenario_text(cfg.dump());
  auto b = test::run_scenario_text(cfg.dump());
  ASSERT_EQ(a[0]["convergence"]["series"].size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    const json& pa = a[0]["convergence"]["series"][i];
    const json& pb = b[0]["convergence"]["series"][i];
    EXPECT_EQ(pa["train_loss"], pb["train_loss"]);
    EXPECT_EQ(pa["eval_loss"], pb["eval_loss"]);
    EXPECT_EQ(pa["eval_accuracy"], pb["eval_accuracy"]);
  }
  EXPECT_EQ(a[0]["trace"], b[0]["trace"]);
  // A different seed is a different run.
  cfg["training"]["seed"] = 8;
  auto c = test::run_scenario_text(cfg.dump());
  EXPECT_NE(a[0]["trace"]["params"].back(), c[0]["trace"]["params"].back());
}

TEST(TrainingStrategies, IndependentReplicasDrift) {
  json cfg = teacher_mlp(2, 1, 4, 4);
  cfg["sync"] = {{"kind", "independent"}};
  auto runs = test::run_scenario_text(cfg.dump());
  auto r0 = test::params_after(runs[0], 3, 0), r1 = test::params_after(runs[0], 3, 1);
  EXPECT_NE(r0, r1) << "ranks see different shards, so their replicas must differ";
  EXPECT_EQ(runs[0]["communication"]["bytes_sent_per_rank_per_step"][0].get<double>(), 0.0);
  // With one rank there is nothing to agree on: independent equals allreduce bit for bit.
  json one = teacher_mlp(1, 2, 4, 4);
  auto ar = test::run_scenario_text(one.dump());
  one["sync"] = {{"kind", "independent"}};
  auto ind = test::run_scenario_text(one.dump());
  EXPECT_EQ(ar[0]["trace"]["params"], ind[0]["trace"]["params"]);
}

TEST(TrainingStrategies, AllReduceBytesFollowTheRingFormula) {
  json cfg = teacher_mlp(4, 1, 4, 3);
  auto runs = test::run_scenario_text(cfg.dump());
  const double n_params = runs[0]["num_params"];
  for (const auto& b : runs[0]["communication"]["bytes_sent_per_rank_per_step"])
    EXPECT_NEAR(b.get<double>(), 2.0 * 3 / 4 * n_params * 4, 1.0);
}

TEST(TrainingDispositions, NonFiniteLossStopsTheRunAsDiverged) {
  // Linear regression with a huge learning rate: |w| grows by ~lr each step until the loss overflows.
  json s = {{"name", "diverge"},
            {"model", {{"kind", "linear"}, {"layers", {1, 1}}, {"bias", false}, {"loss", "mse"},
                       {"initial_weights", {{1.0}}}}},
            {"data", {{"kind", "inline"}, {"ranks", {{{{"y", {{0.0}}}}}}}}},
            {"training", {{"steps", 200}, {"eval_every", 0}, {"optimizer", {{"kind", "sgd"}, {"lr", 1e6}}}}}};
  Scenario sc = parse_scenario(s.dump(), "<test>");
  RunResult r = run_training(sc.runs[0].config);
  EXPECT_EQ(r.disposition, Disposition::kDiverged);
  EXPECT_LT(r.steps_completed, 200);
  EXPECT_GT(r.steps_completed, 1);
  ASSERT_EQ(static_cast<int64_t>(r.series.size()), r.steps_completed);
  EXPECT_FALSE(std::isfinite(r.series.back().train_loss));
  EXPECT_TRUE(std::isfinite(r.series.front().train_loss));
}

TEST(TrainingWorld, FailingRankWakesTheOthersAndTheRunFails) {
  for (int ranks : {2, 4, 8}) {
    auto fut = std::async(std::launch::async, [ranks] {
      World world(ranks);
      auto comm = make_host_communicator(ranks);
      std::vector<float> buf(1000);
      std::string message;
      try {
        world.run(
            [&](int rank) {
              for (int i = 0; i < 5; ++i) {
                if (rank == ranks - 1 && i == 3) throw Error("boom on purpose");
                comm->all_reduce_sum(rank, buf.data() + 0, 10);
              }
            },
            [&] { comm->abort(); });
      } catch (const Error& e) {
        message = e.what();
      }
      return message;
    });
    ASSERT_EQ(fut.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "the world hung";
    std::string m = fut.get();
    EXPECT_NE(m.find(fmt::format("rank {}", ranks - 1)), std::string::npos) << m;
    EXPECT_NE(m.find("boom on purpose"), std::string::npos) << m;
  }
}

TEST(TrainingWorld, AFailedRunIsReportedNotThrown) {
  // Inline data whose sample count the model cannot take is caught at validation; a run-time failure is simulated
  // with a missing dataset path that passes the scenario check only because validation is bypassed here.
  RunConfig c;
  c.model.layers = {784, 10};
  c.data.kind = "fashion_mnist";
  c.data.path = "/nonexistent/folder";
  c.training.steps = 2;
  RunResult r = run_training(c);
  EXPECT_EQ(r.disposition, Disposition::kFailed);
  EXPECT_NE(r.message.find("/nonexistent/folder"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace gs

namespace gs {
namespace {

TEST(TrainingBuckets, ReverseLayerOrderFirstBucketSmall) {
  // Tensors of 300k, 1k, 300k, 10 floats (1.2 MB, 4 KB, 1.2 MB, 40 B); caps 1 MiB first, then 2 MiB.
  std::vector<TensorInfo> t = {{"l0.w", {300000}, 0, 300000},
                               {"l0.b", {1000}, 300000, 1000},
                               {"l1.w", {300000}, 301000, 300000},
                               {"l1.b", {10}, 601000, 10}};
  auto b = make_buckets(t, 1u << 20, 2u << 20);
  // Last layer first: l1.b + l1.w reach 1 MiB -> bucket 0; then l0.b + l0.w (1.204 MB < 2 MiB) close at the end.
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].begin, 301000u);
  EXPECT_EQ(b[0].end, 601010u);
  EXPECT_EQ(b[1].begin, 0u);
  EXPECT_EQ(b[1].end, 301000u);
  // Small caps: one tensor per bucket, still covering everything exactly once in reverse order.
  auto tiny = make_buckets(t, 4, 4);
  ASSERT_EQ(tiny.size(), 4u);
  EXPECT_EQ(tiny[0].begin, 601000u);
  EXPECT_EQ(tiny[3].end, 300000u);
}

}  // namespace
}  // namespace gs
