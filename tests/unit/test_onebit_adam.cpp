// training.optimizer.kind "onebit_adam" (sim/strategy/onebit_adam.cpp): DeepSpeed's padding, the compressed
// all-reduce on a two-rank example worked out by hand, the step phases, the memory estimate's buffers counted by
// hand, the modeled clock's collectives, and the refusals of settings it does not combine with. The trajectories
// against an independent NumPy re-implementation of DeepSpeed are tests/e2e/test_onebit_adam.py.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "sim/app/memory.h"
#include "sim/comm/communicator.h"
#include "sim/config/scenario.h"
#include "sim/cost/cost_model.h"
#include "sim/runtime/device.h"
#include "sim/strategy/onebit_adam.h"
#include "sim/strategy/strategy.h"
#include "sim/validate/validate.h"
#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

TEST(OnebitAdam, PadsAsDeepSpeedToSizeTimesLcmOfSizeAnd8) {
  // corrected_tensor_size: a multiple of size * lcm(size, 8): 16 on 2 ranks, 24 * 3 = 72 on 3, 32 on 4, 8 on 1.
  EXPECT_EQ(onebit_padded_elements(37, 2), 48u);
  EXPECT_EQ(onebit_padded_elements(48, 2), 48u);
  EXPECT_EQ(onebit_padded_elements(37, 3), 72u);
  EXPECT_EQ(onebit_padded_elements(37, 4), 64u);
  EXPECT_EQ(onebit_padded_elements(100, 6), 144u);  // lcm(6, 8) = 24, unit 144
  EXPECT_EQ(onebit_padded_elements(9, 1), 16u);
}

TEST(OnebitAdam, PhasesFollowDeepSpeedsFreezeCheckAfterEachWarmupStep) {
  EXPECT_EQ(onebit_phase(1, 5), OnebitPhase::kInit);
  for (int k = 2; k <= 5; ++k) EXPECT_EQ(onebit_phase(k, 5), OnebitPhase::kWarmup) << k;  // freeze_step - 1 of them
  EXPECT_EQ(onebit_phase(6, 5), OnebitPhase::kCompressed);
  // freeze_step 0, 1 and 2: step 1 returns before the check, step 2 is the one warm-up step.
  for (int f : {0, 1, 2}) {
    EXPECT_EQ(onebit_phase(2, f), OnebitPhase::kWarmup) << f;
    EXPECT_EQ(onebit_phase(3, f), OnebitPhase::kCompressed) << f;
  }
}

// Runs `body(rank)` on N threads over one host communicator.
void on_ranks(int ranks, const std::function<void(Communicator&, int)>& body) {
  auto comm = make_host_communicator(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { body(*comm, r); });
  for (auto& t : threads) t.join();
}

TEST(OnebitAdam, CompressedAllReduceMatchesATwoRankExampleByHand) {
  // n = 2 padded to 16, chunk 8. x_0 = [4, -2, 0 x 14], x_1 = [-2, -2, 0 x 14] (zero errors).
  // s_0 = sqrt(20)/4, s_1 = sqrt(8)/4; signs: sign(0) = +1.
  // chunk 0: c = [s0/2 - s1/2, -s0/2 - s1/2, (s0/2 + s1/2) x 6]; chunk 1: (s0/2 + s1/2) x 8, so its server error is 0.
  const double s0 = std::sqrt(20.0) / 4.0, s1 = std::sqrt(8.0) / 4.0;
  const double c0 = s0 / 2 - s1 / 2, c1 = -s0 / 2 - s1 / 2, c2 = s0 / 2 + s1 / 2;
  const double ss0 = std::sqrt(c0 * c0 + c1 * c1 + 6 * c2 * c2) / std::sqrt(8.0);
  std::vector<std::vector<float>> m = {{4.0f, -2.0f}, {-2.0f, -2.0f}};
  std::vector<std::vector<float>> we(2), se(2);
  std::vector<OnebitNorms> norms(2);
  on_ranks(2, [&](Communicator& comm, int r) {
    ElementOps& memory = host_element_ops();
    OnebitBuffers b;
    b.make_errors(memory, r, 16, 2);
    onebit_compressed_allreduce(comm, memory, r, m[r].data(), 2, b, &norms[r]);
    we[r].assign(b.worker_error.get(), b.worker_error.get() + 16);
    se[r].assign(b.server_error.get(), b.server_error.get() + 8);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(m[r][0], ss0, 1e-6) << r;
    EXPECT_NEAR(m[r][1], -ss0, 1e-6) << r;
  }
  EXPECT_NEAR(we[0][0], 4 - s0, 1e-6);
  EXPECT_NEAR(we[0][1], -2 + s0, 1e-6);
  EXPECT_NEAR(we[0][5], -s0, 1e-6);  // padding: 0 - s_0 * (+1)
  EXPECT_NEAR(we[1][0], -2 + s1, 1e-6);
  EXPECT_NEAR(se[0][0], c0 - ss0, 1e-6);
  EXPECT_NEAR(se[0][1], c1 + ss0, 1e-6);
  EXPECT_NEAR(se[0][7], c2 - ss0, 1e-6);
  for (float e : se[1]) EXPECT_NEAR(e, 0.0, 1e-6);
  EXPECT_NEAR(norms[0].worker_scale, s0, 1e-6);
  EXPECT_NEAR(norms[1].server_scale, c2, 1e-6);
  double we0 = 0.0;
  for (float e : we[0]) we0 += static_cast<double>(e) * e;
  EXPECT_NEAR(norms[0].worker_error, std::sqrt(we0), 1e-9);
  for (const OnebitNorms& s : norms) {  // host memory: the host seconds, added before the call returns
    EXPECT_TRUE(s.done);
    EXPECT_GT(s.compress_s, 0.0);
    EXPECT_GE(s.decompress_s, 0.0);
  }
}

// A record is made before its call (it must stay in place until the rank's next settle, OnebitNorms), so a call that
// threw (a failed run's rank) leaves a last record not done: the report counts the calls that returned, as before.
TEST(OnebitAdam, ReportCountsTheCallsThatReturned) {
  OnebitCalls returned(2), threw(2);
  for (OnebitNorms* s : {&returned[0], &returned[1], &threw[0]}) {
    s->done = true;
    s->compress_s = 2e-3;
    s->worker_error = 4.0;
  }
  const nlohmann::json j = onebit_compression_report({&returned, &threw}, 16, 16, "onebit_adam");
  EXPECT_EQ(j.at("compress_time").at("count").get<int64_t>(), 3);
  EXPECT_EQ(j.at("residual_norm").at("count").get<int64_t>(), 2);
  EXPECT_EQ(j.at("residual_norm").at("last").get<double>(), 2.0);  // the rank that threw adds nothing to the mean
  EXPECT_EQ(onebit_returned_calls(threw), 1u);
  EXPECT_EQ(onebit_compression_report({&threw, &returned}, 16, 16, "onebit_adam").at("residual_norm").at("count"), 1);
  OnebitCalls none(1);
  EXPECT_TRUE(onebit_compression_report({&none, &returned}, 16, 16, "onebit_adam").is_null());
}

TEST(OnebitAdam, WireBytesAreDeepSpeedsMessages) {
  // 4 ranks, 64 padded: all-to-all 3/4 x 8 bytes, all-gather of 4-byte scales (3 x 4), server signs 3/4 x 8,
  // server scales 3 x 4.
  EXPECT_DOUBLE_EQ(onebit_wire_bytes(64, 4), 6.0 + 12.0 + 6.0 + 12.0);
  EXPECT_DOUBLE_EQ(onebit_wire_bytes(64, 1), 0.0);
}

RunConfig onebit_config(int ranks) {
  RunConfig c;
  c.model.kind = "mlp";
  c.model.layers = {8, 16, 4};
  c.data.kind = "teacher";
  c.cluster.ranks = ranks;
  c.training.optimizer.kind = "onebit_adam";
  return c;
}

// The wire bytes the modeled clock records for step `step` (0-based) of a timing-only strategy.
double priced_wire_bytes(const RunConfig& c, int64_t step, PriceKey* key = nullptr) {
  auto model = make_model(c);
  CostModel cost_model(c, *model);
  const int ranks = static_cast<int>(c.cluster.ranks);
  auto comm = make_host_communicator(ranks);
  StrategySetup setup{c, *model, *comm, ranks, &cost_model, true};
  auto strategy = make_strategy(setup);
  StepCost cost = cost_model.make_step_cost();
  StepInput in;
  in.step = step;
  in.cost = &cost;
  const PriceKey k = strategy->price(in);
  if (key != nullptr) *key = k;
  double wire = 0.0;
  for (const CommChain& ch : cost.chains) wire += ch.wire_bytes;
  return wire;
}

TEST(OnebitAdam, ModeledClockPricesEachPhasesMessages) {
  RunConfig c = onebit_config(4);
  c.cluster.hardware = "h100-sxm-8";
  c.training.optimizer.freeze_step = 3;
  const double n = 212.0, P = 224.0, N = 4.0;
  PriceKey key;
  // Steps 1-3 (0-based 0-2): the fp32 all-reduce, 2 (N-1)/N x 4n; step 1 adds the compressed exchange of zeros.
  EXPECT_DOUBLE_EQ(priced_wire_bytes(c, 1, &key), 2.0 * (N - 1) / N * 4.0 * n);
  EXPECT_EQ(key.first, static_cast<int64_t>(OnebitPhase::kWarmup));
  EXPECT_DOUBLE_EQ(priced_wire_bytes(c, 0), 2.0 * (N - 1) / N * 4.0 * n + onebit_wire_bytes(224, 4));
  // Compressed: the all-to-all as a reduce-scatter of P/8 bytes, all-gathers of P/8 bytes and of two N scales.
  EXPECT_DOUBLE_EQ(priced_wire_bytes(c, 3, &key), 2.0 * (N - 1) / N * P / 8.0 + 2.0 * (N - 1) / N * 4.0 * N);
  EXPECT_EQ(key.first, static_cast<int64_t>(OnebitPhase::kCompressed));
  EXPECT_DOUBLE_EQ(onebit_wire_bytes(224, 4), 2.0 * (N - 1) / N * P / 8.0 + 2.0 * (N - 1) / N * 4.0 * N);
}

TEST(OnebitAdam, HostMemoryCountsEveryRanksStateAndBothErrorBuffers) {
  // 1000 parameters on 4 ranks: P = 1024 (a multiple of 32), chunk 256. Per rank m and v (2 x 1000 floats, no shared
  // replica), worker error 1024 and server error 256 floats.
  RunConfig c = onebit_config(4);
  const MemoryEstimate e = estimate_run_memory(c, 1000);
  EXPECT_EQ(e.optimizer_bytes, 4 * 2 * 1000 * 4);
  EXPECT_EQ(e.residuals_bytes, 4 * (1024 + 256) * 4);
  EXPECT_EQ(e.parameters_bytes, (4 + 1) * 1000 * 4);  // a replica per rank and the initial copy
  c.training.optimizer.kind = "adam";                 // the shared all-reduce keeps one replica and one optimizer state
  EXPECT_EQ(estimate_run_memory(c, 1000).optimizer_bytes, 1 * 2 * 1000 * 4);
  EXPECT_EQ(estimate_run_memory(c, 1000).residuals_bytes, 0);
}

TEST(OnebitAdam, GpuMemoryCountsAdamStateAndTheErrorBuffers) {
  RunConfig c = onebit_config(4);
  c.cluster.hardware = "h100-sxm-8";
  auto model = make_model(c);
  const auto n = static_cast<double>(model->num_params());  // 8*16+16 + 16*4+4 = 212 -> P = 224, chunk 56
  ASSERT_EQ(n, 212.0);
  const GpuMemoryEstimate e = estimate_gpu_memory(c, *model);
  EXPECT_EQ(e.optimizer_bytes, static_cast<int64_t>(8.0 * n));  // fp32 m and v
  EXPECT_EQ(e.error_feedback_bytes, 4 * (224 + 56));
}

// The compressed all-reduce's workspace per rank, counted by hand from the buffers onebit_compressed_allreduce makes
// (OnebitBuffers): x (P floats), chunk (C = P / N), the worker's message (scale word + ceil(P / 8) bytes of signs in
// whole words) and the N gathered, the server's message (scale + ceil(C / 8) bytes in words) and the N gathered; 1-bit
// Adam with uncompressed_tensors also its flat compressed group. The same buffers for 0/1 Adam and 1-bit LAMB.
TEST(OnebitAdam, MemoryCountsTheCompressedAllReduceWorkspace) {
  // GPU: the 8-16-4 mlp, n = 212 on 4 ranks: P = 224, C = 56; worker message 1 + 224/32 = 8 words, server message
  // 1 + ceil(7 bytes / 4) = 3 words; 4 x (224 + 56 + (4 + 1) x (8 + 3)) = 4 x 335 = 1340 bytes.
  RunConfig c = onebit_config(4);
  c.cluster.hardware = "h100-sxm-8";
  auto model = make_model(c);
  ASSERT_EQ(model->num_params(), 212u);
  for (const char* kind : {"onebit_adam", "zero_one_adam", "onebit_lamb"}) {
    c.training.optimizer.kind = kind;
    EXPECT_EQ(estimate_gpu_memory(c, *model).compression_bytes, 1340) << kind;
  }
  c.cluster.ranks = 1;  // one rank communicates nothing
  EXPECT_EQ(estimate_gpu_memory(c, *model).compression_bytes, 0);

  // Host, n = 1000 on 4 ranks: P = 1024, C = 256; messages 1 + 32 = 33 and 1 + 8 = 9 words; per rank
  // 4 x (1024 + 256 + 5 x 42) = 5960 bytes, 4 ranks 23840 bytes above plain Adam's communication term.
  RunConfig h = onebit_config(4);
  const int64_t onebit = estimate_run_memory(h, 1000).communication_bytes;
  h.training.optimizer.kind = "adam";
  EXPECT_EQ(onebit - estimate_run_memory(h, 1000).communication_bytes, 23840);

  // 1-bit Adam with uncompressed_tensors: a quadratic model of tensors w0 (40) and w1 (60) with w1 left out on 4
  // ranks: m = 40, P = 64, C = 16; messages 1 + 2 = 3 and 1 + 1 = 2 words; the flat copy 40 floats:
  // 4 x (64 + 16 + 5 x (3 + 2) + 40) = 4 x 145 = 580 bytes.
  RunConfig q = test::two_tensor_onebit_adam(4);
  q.training.optimizer.uncompressed_tensors = {"w1"};
  EXPECT_EQ(estimate_gpu_memory(q, *make_model(q)).compression_bytes, 580);
}

// The cuda backend runs it (its compressed all-reduce through the memory's CompressOps: residency.cpp).
TEST(OnebitAdam, TheCudaBackendRunsIt) {
  EXPECT_TRUE(cuda_device_issues(onebit_config(2)).empty());
  EXPECT_EQ(choose_cuda_path(onebit_config(2)).path, CudaPath::kDevice);
}

std::vector<ConfigIssue> issues_of(const std::string& extra) {
  const std::string text = R"({"name": "t", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "cluster": {"ranks": 2},)" +
                           extra + "}";
  try {
    parse_scenario(text, "bad.json", {});
  } catch (const ScenarioError& e) {
    return e.issues();
  }
  ADD_FAILURE() << "scenario was accepted: " << text;
  return {};
}

bool has(const std::vector<ConfigIssue>& issues, const std::string& path, const std::string& fragment) {
  for (const auto& i : issues)
    if (i.path == path && i.message.find(fragment) != std::string::npos) return true;
  std::string all;
  for (const auto& i : issues) all += i.path + ": " + i.message + "\n";
  ADD_FAILURE() << "no issue at " << path << " with \"" << fragment << "\" in:\n" << all;
  return false;
}

TEST(OnebitAdam, RefusesWhatItDoesNotCombineWith) {
  const std::string onebit = R"("training": {"steps": 3, "optimizer": {"kind": "onebit_adam", "freeze_step": 2}})";
  EXPECT_TRUE(has(issues_of(onebit + R"(, "sync": {"kind": "parameter_server"})"), "sync.kind",
                  "expected \"allreduce\", got \"parameter_server\""));
  EXPECT_TRUE(has(issues_of(onebit + R"(, "sync": {"kind": "local_sgd"})"), "sync.kind", "\"onebit_adam\""));
  EXPECT_TRUE(has(issues_of(onebit + R"(, "sync": {"kind": "zero"})"), "sync.kind", "ZeRO"));
  EXPECT_TRUE(has(issues_of(onebit + R"(, "compression": {"kind": "signsgd"})"), "compression.kind",
                  "expected \"none\", got \"signsgd\""));
  EXPECT_TRUE(has(issues_of(onebit + R"(, "sync": {"staleness": 1})"), "sync.staleness", "expected 0"));
  EXPECT_TRUE(has(issues_of(onebit + R"(, "precision": {"mode": "fp16_mixed"})"), "precision.loss_scale",
                  "without a loss scaler"));
  EXPECT_TRUE(has(issues_of(onebit + R"(, "precision": {"mode": "fp16_pure"})"), "precision.mode", "fp16_pure"));
  const std::string clip = R"("training": {"steps": 3, "clip_grad_norm": 1.0, "optimizer": {"kind": "onebit_adam"}})";
  EXPECT_TRUE(has(issues_of(clip), "training.clip_grad_norm", "expected 0, got 1"));
  // Its own field: only under onebit_adam, a count >= 0; Adam's first_moment does not apply to it.
  EXPECT_TRUE(has(issues_of(R"("training": {"optimizer": {"kind": "adam", "freeze_step": 5}})"),
                  "training.optimizer.freeze_step", "only applies when training.optimizer.kind is \"onebit_adam\""));
  EXPECT_TRUE(has(issues_of(R"("training": {"optimizer": {"kind": "onebit_adam", "freeze_step": -1}})"),
                  "training.optimizer.freeze_step", ">= 0"));
  EXPECT_TRUE(has(issues_of(R"("training": {"optimizer": {"kind": "onebit_adam", "first_moment": "mul_add"}})"),
                  "training.optimizer.first_moment", "only applies"));
  EXPECT_TRUE(has(issues_of(R"("training": {"optimizer": {"kind": "onebit_adam", "momentum": 0.9}})"),
                  "training.optimizer.momentum", "only applies"));
  EXPECT_TRUE(has(issues_of(R"("training": {"optimizer": {"kind": "adam", "exp_avg_mask": "zero_variance"}})"),
                  "training.optimizer.exp_avg_mask", "only applies"));
  EXPECT_TRUE(has(issues_of(R"("training": {"optimizer": {"kind": "onebit_adam", "exp_avg_mask": "auto"}})"),
                  "training.optimizer.exp_avg_mask", "zero_variance"));
}

RunConfig parsed(const std::string& optimizer) {
  const std::string text = R"({"name": "t", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "cluster": {"ranks": 2},
    "training": {"steps": 3, "optimizer": )" + optimizer + "}}";
  return parse_scenario(text, "ok.json", {}).runs.at(0).config;
}

TEST(OnebitAdam, AcceptsDeepSpeedsBetasListAsBeta1AndBeta2) {
  const RunConfig c = parsed(R"({"kind": "onebit_adam", "betas": [0.8, 0.95]})");
  EXPECT_EQ(c.training.optimizer.beta1, 0.8);
  EXPECT_EQ(c.training.optimizer.beta2, 0.95);
  EXPECT_TRUE(c.training.optimizer.betas.is_null());  // the resolved config writes beta1 and beta2
  const json written = config_to_json(c)["training"]["optimizer"];
  EXPECT_EQ(written["beta1"], 0.8);
  EXPECT_TRUE(written["betas"].is_null());
  EXPECT_EQ(parsed(R"({"kind": "adam", "betas": [0, 0.5]})").training.optimizer.beta2, 0.5);
}

TEST(OnebitAdam, RefusesBetasWithBeta1OrBeta2OrOfTheWrongShape) {
  auto opt = [](const std::string& o) { return R"("training": {"optimizer": )" + o + "}"; };
  const std::string p = "training.optimizer.betas";
  EXPECT_TRUE(has(issues_of(opt(R"({"kind": "onebit_adam", "betas": [0.8, 0.9], "beta1": 0.8})")), p,
                  "not both: training.optimizer.beta1 is given too"));
  EXPECT_TRUE(has(issues_of(opt(R"({"kind": "adam", "betas": [0.8, 0.9], "beta2": 0.9})")), p, "beta2 is given"));
  EXPECT_TRUE(has(issues_of(opt(R"({"kind": "onebit_adam", "betas": [0.8]})")), p,
                  "expected a list of two numbers [beta1, beta2], each >= 0 and < 1, got [0.8]"));
  EXPECT_TRUE(has(issues_of(opt(R"({"kind": "onebit_adam", "betas": 0.9})")), p, "a list of two numbers"));
  EXPECT_TRUE(has(issues_of(opt(R"({"kind": "onebit_adam", "betas": [0.8, 0.9, 0.99]})")), p, "two numbers"));
  EXPECT_TRUE(has(issues_of(opt(R"({"kind": "onebit_adam", "betas": [0.9, 1.0]})")), p + "[1]",
                  "expected a number >= 0 and < 1 (beta2), got 1.0"));
  EXPECT_TRUE(has(issues_of(opt(R"({"kind": "onebit_adam", "betas": [-0.1, 0.9]})")), p + "[0]", "(beta1)"));
  EXPECT_TRUE(has(issues_of(opt(R"({"kind": "onebit_adam", "betas": ["0.9", 0.9]})")), p + "[0]", "got \"0.9\""));
  EXPECT_TRUE(has(issues_of(opt(R"({"kind": "sgd", "betas": [0.9, 0.9]})")), p, "only applies"));
}

}  // namespace
}  // namespace gs
