// The parameter server's price (sim/cost/link_model.h, sim/cost/ps_cost.h): messages queue on each device's link
// (per direction), so N pushes into one shard host take alpha + N B / W, not alpha + B / W; per-shard messages and
// their counts; the shards' optimizer queues; the lock-step BSP clock; where the model is a bound; and a whole run
// whose modeled push, pull and server step follow the formulas (expected values from the formulas with the profile's
// constants, never from the code under test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "sim/config/run_config.h"
#include "sim/core/error.h"
#include "sim/cost/collective_model.h"
#include "sim/cost/hardware_profile.h"
#include "sim/cost/link_model.h"
#include "sim/cost/ps_cost.h"
#include "sim/runtime/rank_loop.h"
#include "sim/validate/validate.h"
#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

constexpr double kW = 1e9;     // bytes per second per direction
constexpr double kA = 1e-5;    // latency, seconds
constexpr double kB = 2.5e5;   // bytes: B / W = 250 us

// Two workers (devices 1, 2) push B bytes each to one shard host (device 0) at time 0: the host's receive link carries
// them one after the other, so the first lands at a + B/W and the second at a + 2B/W (not a + B/W).
TEST(LinkQueues, SecondPushIntoOneHostWaitsForTheFirst) {
  LinkQueues q(3, kW, kA);
  EXPECT_DOUBLE_EQ(q.transfer(1, 0, 0.0, kB), kA + kB / kW);
  EXPECT_DOUBLE_EQ(q.transfer(2, 0, 0.0, kB), kA + 2.0 * kB / kW);
  EXPECT_DOUBLE_EQ(q.recv_busy_until_s(0), 2.0 * kB / kW);
  EXPECT_EQ(q.messages(), 2);
}

// Full duplex: the host sending while it receives does not queue; a message handed over after the link is idle again
// starts at once; one handed over while the sender's link is busy waits for it; 0 bytes queue nothing.
TEST(LinkQueues, DirectionsAreApartAndIdleLinksDoNotDelay) {
  LinkQueues q(3, kW, kA);
  EXPECT_DOUBLE_EQ(q.transfer(1, 0, 0.0, kB), kA + kB / kW);
  EXPECT_DOUBLE_EQ(q.transfer(0, 1, 0.0, kB), kA + kB / kW);  // the other direction of both links
  EXPECT_DOUBLE_EQ(q.transfer(1, 2, 0.0, kB), kA + 2.0 * kB / kW);  // device 1's send link is busy for B/W
  EXPECT_DOUBLE_EQ(q.transfer(2, 0, 1.0, kB), 1.0 + kA + kB / kW);  // idle again by t = 1 s
  EXPECT_DOUBLE_EQ(q.transfer(2, 1, 5.0, 0.0), 5.0);
  EXPECT_EQ(q.messages(), 4);
}

TEST(LinkQueues, RefusesBadDevicesAndParameters) {
  LinkQueues q(2, kW, kA);
  EXPECT_THROW(q.transfer(0, 0, 0.0, kB), Error);
  EXPECT_THROW(q.transfer(0, 2, 0.0, kB), Error);
  EXPECT_THROW(q.transfer(-1, 1, 0.0, kB), Error);
  EXPECT_THROW(q.transfer(0, 1, 0.0, -1.0), Error);
  EXPECT_THROW(LinkQueues(0, kW, kA), Error);
  EXPECT_THROW(LinkQueues(2, 0.0, kA), Error);
  EXPECT_THROW(LinkQueues(2, kW, -1.0), Error);
}

struct PcieTerms {
  std::shared_ptr<const HardwareProfile> hw = load_hardware_profile("h100-pcie-8");
  CollectiveModel coll{*hw, 8};
  double a = hw->p2p_latency_us * 1e-6;                              // nccl.p2p_latency_us
  double W = hw->nccl_links * hw->nccl_link_bw_GBps * 1e9;           // links x per-link bandwidth
};

double latest(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

// One worker alone (idle links): a shard host's push is S-1 messages of B/S (its own shard stays), alpha + (S-1)B/(SW),
// another worker's S messages, alpha + B/W; dedicated shards: S messages, alpha + B/W. One alpha per push: the
// messages are handed over together and only their bytes queue.
TEST(ParameterServerLinks, LonePushIsOneMessagePerRemoteShard) {
  PcieTerms t;
  const double B = 4.0 * 101770;
  for (int S : {1, 2, 4, 8}) {
    ParameterServerLinks host(t.coll, 8, S, false);
    EXPECT_EQ(host.remote_shards(0), S - 1);
    EXPECT_NEAR(latest(host.push(0, 0.0, B)), S == 1 ? 0.0 : t.a + (S - 1) * B / (S * t.W), 1e-15) << S;
    EXPECT_EQ(host.links().messages(), S - 1);
    if (S < 8) {
      ParameterServerLinks other(t.coll, 8, S, false);
      EXPECT_EQ(other.remote_shards(7), S);
      EXPECT_NEAR(latest(other.push(7, 0.0, B)), t.a + B / t.W, 1e-15) << S;
      EXPECT_EQ(other.links().messages(), S);
    }
    ParameterServerLinks ded(t.coll, 8, S, true);
    EXPECT_EQ(ded.remote_shards(0), S);
    EXPECT_NEAR(latest(ded.push(0, 0.0, B)), t.a + B / t.W, 1e-15) << S;
    EXPECT_NEAR(ded.pull(0, 1.0, B), 1.0 + t.a + B / t.W, 1e-12) << S;
  }
}

// N = 8 workers push B at once. Each link carries its bytes in turn, so the last part lands at alpha + the busiest
// link's bytes / W: co-located, a host's receive link carries N-1 parts of B/S and a non-host's send link B (a host's
// (S-1)B/S); dedicated, a server's receive link N B/S, a worker's send link B. Messages: N S less the S own shards.
TEST(ParameterServerLinks, SimultaneousPushesQueueOnTheBusiestLink) {
  PcieTerms t;
  const int N = 8;
  const double B = 4.0 * 101770;
  for (int S : {1, 2, 4, 8}) {
    for (bool dedicated : {false, true}) {
      ParameterServerLinks ps(t.coll, N, S, dedicated);
      double last = 0.0;
      for (int w = 0; w < N; ++w) last = std::max(last, latest(ps.push(w, 0.0, B)));
      const double load = dedicated ? std::max(static_cast<double>(N) / S, 1.0)
                                    : std::max((N - 1.0) / S, N > S ? 1.0 : (S - 1.0) / S);
      EXPECT_NEAR(last, t.a + load * B / t.W, 1e-12) << "S=" << S << " dedicated=" << dedicated;
      EXPECT_EQ(ps.links().messages(), dedicated ? N * S : N * S - S) << S;
    }
  }
}

// One co-located shard on worker 0: with N workers pushing at once worker k's push lands at alpha + k B/W (rank order);
// after the apply every pull leaves host 0's send link in turn: worker k has it at T + alpha + k B/W.
TEST(ParameterServerLinks, OneShardHostServesEveryWorkerInTurn) {
  PcieTerms t;
  const int N = 4;
  const double B = 1e6;
  ParameterServerLinks ps(t.coll, N, 1, false);
  for (int k = 0; k < N; ++k)
    EXPECT_NEAR(latest(ps.push(k, 0.0, B)), k == 0 ? 0.0 : t.a + k * B / t.W, 1e-15) << k;
  const double T = 1.0;
  for (int k = 0; k < N; ++k) EXPECT_NEAR(ps.pull(k, T, B), k == 0 ? T : T + t.a + k * B / t.W, 1e-12) << k;
  const BspClockPrice clock = price_bsp_clock(t.coll, 1, false, std::vector<double>(N, B), B, 2e-6);
  EXPECT_NEAR(clock.pushes_s, t.a + (N - 1) * B / t.W, 1e-15);
  ASSERT_EQ(clock.pull_s.size(), static_cast<size_t>(N));
  for (int k = 0; k < N; ++k) EXPECT_NEAR(clock.pull_s[static_cast<size_t>(k)], k == 0 ? 0.0 : t.a + k * B / t.W, 1e-12);
}

// The server's steps (SSP, asynchronous): shard p applies a push from max(its part's arrival, its previous step's
// end); two pushes arriving together at a shard are done at t + s and t + 2s; a later one after an idle gap at its own
// arrival + s.
TEST(ParameterServerLinks, ServerStepsQueueOnEachShard) {
  PcieTerms t;
  ParameterServerLinks ps(t.coll, 4, 2, false);
  const double s = 3e-6;
  EXPECT_DOUBLE_EQ(ps.apply({1e-3, 1e-3}, s), 1e-3 + s);
  EXPECT_DOUBLE_EQ(ps.apply({1e-3, 0.5e-3}, s), 1e-3 + 2.0 * s);
  EXPECT_DOUBLE_EQ(ps.apply({2e-3, 2e-3}, s), 2e-3 + s);
  EXPECT_THROW(ps.apply({1e-3}, s), Error);
  EXPECT_THROW(ParameterServerLinks(t.coll, 2, 3, false), Error);  // more co-located shards than workers
}

RunConfig ps_config(const json& sync, const json& extra = json::object()) {
  json j = {{"model", {{"kind", "linear"}, {"layers", {16, 4}}, {"loss", "mse"}}},
            {"data", {{"kind", "teacher"}, {"batch_per_rank", 4},
                      {"teacher", {{"task", "regression"}, {"in_dim", 16}, {"out_dim", 4}}}}},
            {"cluster", {{"ranks", 3}, {"hardware", "h100-pcie-8"}}},
            {"training", {{"steps", 2}, {"eval_every", 0}, {"optimizer", {{"kind", "sgd"}, {"lr", 0.1},
                                                                         {"momentum", 0.9}}}}},
            {"sync", sync}};
  j.merge_patch(extra);
  std::vector<ConfigIssue> issues;
  RunConfig c = config_from_json(j, issues);
  EXPECT_TRUE(issues.empty()) << issues[0].message;
  return c;
}

// Where the model is a bound: co-located SSP and asynchronous servers (the shard's steps share the host's GPU) are a
// lower bound; timing-only runs with stragglers an upper one; BSP, dedicated servers and other strategies none.
TEST(ParameterServerBound, NamesTheRunsWhoseModelIsABound) {
  EXPECT_FALSE(parameter_server_bound(ps_config({{"kind", "allreduce"}})).has_value());
  EXPECT_FALSE(parameter_server_bound(ps_config({{"kind", "parameter_server"}, {"staleness", 0}})).has_value());
  const auto async = parameter_server_bound(ps_config({{"kind", "parameter_server"}, {"staleness", "inf"}}));
  ASSERT_TRUE(async.has_value());
  EXPECT_EQ(async->kind, "lower");
  EXPECT_NE(async->reason.find("co-located"), std::string::npos);
  EXPECT_EQ(parameter_server_bound(ps_config({{"kind", "parameter_server"}, {"staleness", 2}}))->kind, "lower");
  EXPECT_FALSE(parameter_server_bound(ps_config({{"kind", "parameter_server"}, {"staleness", "inf"},
                                                 {"dedicated", true}})).has_value());
  const json straggler = {{"cluster", {{"stragglers", {{"factors", {1, 1, 1.5}}}}}}, {"training", {{"mode", "timing"}}}};
  const auto timing = parameter_server_bound(ps_config({{"kind", "parameter_server"}, {"staleness", 0}}, straggler));
  ASSERT_TRUE(timing.has_value());
  EXPECT_EQ(timing->kind, "upper");
}

// A whole BSP run, 3 workers, one shard co-located on worker 0, no stragglers (every worker's compute is the same C):
// at clock 0 workers 1 and 2 push B = 4n bytes into host 0 at C: worker 1's lands at C + a + B/W, worker 2's at
// C + a + 2B/W (queued behind it). The server applies after the last (s: SGD with momentum over n values, 28 bytes
// and 5 FLOPs a value, 2 launches, plus the sum of N pushes, 4 (N+1) bytes a value, 1 launch). Pulls leave host 0 in
// turn: worker 1 has it after a + B/W, worker 2 after a + 2B/W. So per rank: communicate 0, 2a + 2B/W, 2a + 4B/W;
// optimizer s on every rank; steps C + a + 2B/W + s + {0, a + B/W, a + 2B/W}.
TEST(ParameterServerLinks, BspRunQueuesPushesAndPullsOnTheShardHost) {
  const RunConfig c = ps_config({{"kind", "parameter_server"}, {"staleness", 0}, {"shards", 1}});
  const RunResult r = run_training(c);
  ASSERT_EQ(r.disposition, Disposition::kPassed) << r.message;
  const auto hw = load_hardware_profile("h100-pcie-8");
  const double n = static_cast<double>(r.num_params), N = 3.0;
  const double a = hw->p2p_latency_us * 1e-6, W = hw->nccl_links * hw->nccl_link_bw_GBps * 1e9, B = 4.0 * n;
  const double hbm = hw->hbm_TBps * 1e12 * hw->hbm_achievable_fraction * hw->sustained_fraction;
  const double fp32 = hw->peak_tflops[0] * 1e12 * hw->gemm_efficiency[0] * hw->sustained_fraction;
  const double L = hw->launch_overhead_us * 1e-6;
  const double s = 5.0 * n / fp32 + 28.0 * n / hbm + 2.0 * L + 4.0 * (N + 1.0) * n / hbm + L;
  const std::vector<double> comm = {0.0, 2.0 * a + 2.0 * B / W, 2.0 * a + 4.0 * B / W};
  const std::vector<double> pull = {0.0, a + B / W, a + 2.0 * B / W};
  const auto comm_of = [&](int rank) {
    return r.modeled_steps[static_cast<size_t>(rank)][0].phase_s[static_cast<size_t>(Phase::kCommunicate)];
  };
  for (int q = 0; q < 3; ++q) {
    const StepTimes& st = r.modeled_steps[static_cast<size_t>(q)][0];
    EXPECT_NEAR(comm_of(q), comm[static_cast<size_t>(q)], 1e-12) << "rank " << q;
    EXPECT_NEAR(st.phase_s[static_cast<size_t>(Phase::kOptimizer)], s, 1e-12) << "rank " << q;
    double C = 0.0;  // the worker's compute: data, forward, backward
    for (Phase p : {Phase::kData, Phase::kForward, Phase::kBackward, Phase::kCompress})
      C += st.phase_s[static_cast<size_t>(p)];
    EXPECT_NEAR(st.step_s, C + a + 2.0 * B / W + s + pull[static_cast<size_t>(q)], 1e-12) << "rank " << q;
  }
}

// Timing-only BSP (price_bsp_clock): the same 3 workers and one co-located shard, every push handed over at once:
// the pushes are in at a + 2B/W, the last pull takes a + 2B/W, and every rank's step waits for it, so workers 1 and 2
// expose 2a + 4B/W of communication each; worker 0 hosts the shard and sends nothing itself (its time is wait), and
// every rank's modeled step is the same.
TEST(ParameterServerLinks, TimingOnlyBspClockQueuesOnTheShardHost) {
  const RunConfig c = ps_config({{"kind", "parameter_server"}, {"staleness", 0}, {"shards", 1}},
                                {{"training", {{"mode", "timing"}, {"steps", 3}}}});
  const RunResult r = run_training(c);
  ASSERT_EQ(r.disposition, Disposition::kPassed) << r.message;
  const auto hw = load_hardware_profile("h100-pcie-8");
  const double n = static_cast<double>(r.num_params);
  const double a = hw->p2p_latency_us * 1e-6, W = hw->nccl_links * hw->nccl_link_bw_GBps * 1e9, B = 4.0 * n;
  ASSERT_EQ(r.modeled_exposed_s.size(), 3u);
  for (size_t q = 0; q < 3; ++q)
    for (size_t t = 0; t < 3; ++t) {
      const double comm = q == 0 ? 0.0 : 2.0 * a + 4.0 * B / W;
      EXPECT_NEAR(r.modeled_exposed_s[q][t], comm, 1e-12) << "rank " << q << " step " << t;
      EXPECT_NEAR(r.modeled_steps[q][t].phase_s[static_cast<size_t>(Phase::kCommunicate)], comm, 1e-12);
      EXPECT_NEAR(r.modeled_steps[q][t].step_s, r.modeled_steps[2][t].step_s, 1e-15);
    }
  const auto& w0 = r.modeled_steps[0][0].phase_s;
  EXPECT_NEAR(w0[static_cast<size_t>(Phase::kWait)], 2.0 * a + 4.0 * B / W, 1e-12);
}

// The report carries the bound: timing.modeled.bound and bound_reason on a co-located asynchronous server's run, not
// on an all-reduce run of the same scenario.
TEST(ParameterServerBound, ReportWritesTheBoundAndItsReason) {
  json j = {{"name", "bound"},
            {"model", {{"kind", "linear"}, {"layers", {16, 4}}, {"loss", "mse"}}},
            {"data", {{"kind", "teacher"}, {"batch_per_rank", 4},
                      {"teacher", {{"task", "regression"}, {"in_dim", 16}, {"out_dim", 4}}}}},
            {"cluster", {{"ranks", 2}}},
            {"training", {{"steps", 2}, {"eval_every", 0}}},
            {"sync", {{"kind", "allreduce"}}},
            {"sweep", {{"zip", {{"sync.kind", {"allreduce", "parameter_server"}}, {"sync.staleness", {0, "inf"}}}}}}};
  const std::vector<json> runs = test::run_scenario_text(j.dump());
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_FALSE(runs[0]["timing"]["modeled"].contains("bound"));
  EXPECT_FALSE(runs[0]["timing"]["modeled"].contains("bound_reason"));
  EXPECT_EQ(runs[1]["timing"]["modeled"]["bound"], "lower");
  EXPECT_EQ(runs[1]["timing"]["modeled"]["bound_reason"], parameter_server_bound(ps_config(
      {{"kind", "parameter_server"}, {"staleness", "inf"}}))->reason);
}

}  // namespace
}  // namespace gs
