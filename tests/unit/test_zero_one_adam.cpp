// training.optimizer.kind "zero_one_adam" (sim/strategy/zero_one_adam.cpp): DeepSpeed ZeroOneAdam's schedule (the
// variance-update steps with their doubling interval, the freeze, the local-step interval) worked out by hand and
// against a literal transcription of ZeroOneAdam.step's counters; the memory estimate's buffers; the modeled clock's
// messages per phase; and the refusals. The trajectories against an independent NumPy re-implementation are
// tests/e2e/test_onebit_adam.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "sim/app/memory.h"
#include "sim/comm/communicator.h"
#include "sim/config/scenario.h"
#include "sim/cost/cost_model.h"
#include "sim/runtime/device.h"
#include "sim/strategy/onebit_adam.h"
#include "sim/strategy/strategy.h"
#include "sim/strategy/zero_one_adam.h"
#include "sim/validate/validate.h"

namespace gs {
namespace {

using P = ZeroOnePhase;

ZeroOneSchedule schedule(int64_t var_freeze_step, int64_t var_update_scaler, int64_t local_step_scaler,
                         int64_t local_step_clipper) {
  return {var_freeze_step, var_update_scaler, local_step_scaler, local_step_clipper};
}

std::vector<int64_t> variance_steps(int64_t last, int64_t scaler) {
  std::vector<int64_t> out;
  for (int64_t k = 2; k <= last; ++k)
    if (k % zero_one_var_interval(k, scaler) == 0) out.push_back(k);
  return out;
}

TEST(ZeroOneAdam, VarianceUpdatesDoubleTheirIntervalAfterVarUpdateScalerOfThem) {
  // scaler 16 (DeepSpeed's default): 2 .. 17 at interval 1, then 18, 20, .., 48 at 2, then 52, 56, 60 at 4.
  std::vector<int64_t> want;
  for (int64_t k = 2; k <= 17; ++k) want.push_back(k);
  for (int64_t k = 18; k <= 48; k += 2) want.push_back(k);
  want.insert(want.end(), {52, 56, 60});
  EXPECT_EQ(variance_steps(60, 16), want);
  EXPECT_EQ(zero_one_var_interval(17, 16), 1);
  EXPECT_EQ(zero_one_var_interval(18, 16), 2);
  EXPECT_EQ(zero_one_var_interval(49, 16), 4);  // after the 16th update at interval 2 (step 48)
  // scaler 2: 2, 3 | 4, 6 | 8, 12 | 16, 24 | 32, 48; scaler 3: 2, 3, 4 | 6, 8, 10 | 12, 16, 20 | 24, 32, 40.
  EXPECT_EQ(variance_steps(50, 2), (std::vector<int64_t>{2, 3, 4, 6, 8, 12, 16, 24, 32, 48}));
  EXPECT_EQ(variance_steps(40, 3), (std::vector<int64_t>{2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 32, 40}));
  EXPECT_EQ(variance_steps(6, 1), (std::vector<int64_t>{2, 4}));  // scaler 1: the interval doubles every update
}

TEST(ZeroOneAdam, FreezesAfterTheFirstStepPastVarFreezeStepAndItsLocalIntervalDoublesClipped) {
  EXPECT_EQ(zero_one_last_unfrozen_step(schedule(5, 16, 1, 1)), 6);
  for (int64_t f : {0, 1}) EXPECT_EQ(zero_one_last_unfrozen_step(schedule(f, 16, 1, 1)), 2) << f;
  // var_freeze_step 10, scaler 2: variance steps 2, 3, 4, 6, 8; 5, 7, 9, 10, 11 send the 1-bit gradient; frozen
  // from 12. local_step_scaler 2, clipper 4: frozen steps t = 0, 1 at interval 1, t = 2, 3 at 2, then 4.
  const ZeroOneSchedule s = schedule(10, 2, 2, 4);
  const std::vector<P> want = {P::kInit,           P::kVariance,       P::kVariance,       P::kVariance,
                               P::kOnebitGradient, P::kVariance,       P::kOnebitGradient, P::kVariance,
                               P::kOnebitGradient, P::kOnebitGradient, P::kOnebitGradient,
                               /* 12 */ P::kSync,  P::kSync,           P::kSync,           P::kLocal,
                               /* 16 */ P::kSync,  P::kLocal,          P::kLocal,          P::kLocal,
                               /* 20 */ P::kSync,  P::kLocal};
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(zero_one_phase(static_cast<int64_t>(i) + 1, s), want[i]) << "step " << i + 1;
  EXPECT_EQ(zero_one_local_step_interval(12, s), 1);
  EXPECT_EQ(zero_one_local_step_interval(14, s), 2);
  EXPECT_EQ(zero_one_local_step_interval(16, s), 4);
  EXPECT_EQ(zero_one_local_step_interval(1000, s), 4);  // clipped
  // A clipper that is not a power of two: min(5, 2^j) = 1, 2, 4, 5, 5 (DeepSpeed's min(clipper, 2 interval)).
  const ZeroOneSchedule odd = schedule(0, 16, 1, 5);
  std::vector<int64_t> got;
  for (int64_t k = 3; k <= 7; ++k) got.push_back(zero_one_local_step_interval(k, odd));
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2, 4, 5, 5}));
  EXPECT_EQ(zero_one_local_step_interval(int64_t{1} << 40, schedule(0, 16, 1, 16)), 16);  // no overflow
}

// ZeroOneAdam.step's counters transcribed (per step: the var check, then var_counter / var_interval; after the freeze
// the sync check, then local_step_counter / local_step_interval; the freeze check at the end of every step but the
// first).
std::vector<P> deepspeed_phases(const ZeroOneSchedule& s, int64_t steps) {
  std::vector<P> out = {P::kInit};
  int64_t var_interval = 1, var_counter = 0, local_interval = 1, local_counter = 0;
  bool freeze = false;
  for (int64_t k = 2; k <= steps; ++k) {
    if (!freeze) {
      const bool var = k % var_interval == 0;
      out.push_back(var ? P::kVariance : P::kOnebitGradient);
      if (var && ++var_counter == s.var_update_scaler) {
        var_counter = 0;
        var_interval *= 2;
      }
    } else {
      out.push_back(k % local_interval == 0 ? P::kSync : P::kLocal);
      if (++local_counter == s.local_step_scaler) {
        local_counter = 0;
        local_interval = std::min(s.local_step_clipper, local_interval * 2);
      }
    }
    if (k > s.var_freeze_step) freeze = true;
  }
  return out;
}

TEST(ZeroOneAdam, ScheduleEqualsZeroOneAdamsCountersStepByStep) {
  for (const ZeroOneSchedule& s : {schedule(100, 3, 5, 16), schedule(700, 16, 32, 8), schedule(1, 1, 1, 3),
                                   schedule(0, 2, 7, 16), schedule(333, 5, 3, 6)}) {
    const std::vector<P> want = deepspeed_phases(s, 1500);
    for (int64_t k = 1; k <= 1500; ++k)
      ASSERT_EQ(zero_one_phase(k, s), want[static_cast<size_t>(k - 1)])
          << "step " << k << " var_freeze_step " << s.var_freeze_step << " var_update_scaler " << s.var_update_scaler;
  }
}

RunConfig zero_one_config(int ranks) {
  RunConfig c;
  c.model.kind = "mlp";
  c.model.layers = {8, 16, 4};
  c.data.kind = "teacher";
  c.cluster.ranks = ranks;
  c.training.optimizer.kind = "zero_one_adam";
  return c;
}

TEST(ZeroOneAdam, MemoryCountsTheMomentumAccumulatorAndBothErrorBuffers) {
  // 1000 parameters on 4 ranks: P = 1024, chunk 256. Per rank m, v and the momentum_accumulator (3 x 1000 floats).
  RunConfig c = zero_one_config(4);
  const MemoryEstimate e = estimate_run_memory(c, 1000);
  EXPECT_EQ(e.optimizer_bytes, 4 * 3 * 1000 * 4);
  EXPECT_EQ(e.residuals_bytes, 4 * (1024 + 256) * 4);
  EXPECT_EQ(e.parameters_bytes, (4 + 1) * 1000 * 4);
  c.cluster.hardware = "h100-sxm-8";
  auto model = make_model(c);
  const GpuMemoryEstimate g = estimate_gpu_memory(c, *model);  // 212 parameters: P = 224, chunk 56
  EXPECT_EQ(g.optimizer_bytes, 12 * 212);
  EXPECT_EQ(g.error_feedback_bytes, 4 * (224 + 56));
}

// The wire bytes the modeled clock records for 0-based step `step` of a timing-only strategy, and the step's key.
double priced_wire_bytes(const RunConfig& c, int64_t step, PriceKey* key) {
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
  *key = strategy->price(in);
  double wire = 0.0;
  for (const CommChain& ch : cost.chains) wire += ch.wire_bytes;
  return wire;
}

TEST(ZeroOneAdam, ModeledClockPricesEachPhasesMessages) {
  // 212 parameters on 4 ranks, P = 224; the schedule of test_onebit_adam.py (var_freeze_step 12, scaler 2, local
  // scaler 2, clipper 4). fp32 all-reduce: 2 (N-1)/N x 4n; compressed all-reduce: DeepSpeed's all-to-all as a
  // reduce-scatter of P/8 bytes ((N-1)/N of them on the wire), all-gathers of P/8 signs and of two N scales.
  RunConfig c = zero_one_config(4);
  c.cluster.hardware = "h100-sxm-8";
  c.training.optimizer.var_freeze_step = 12;
  c.training.optimizer.var_update_scaler = 2;
  c.training.optimizer.local_step_scaler = 2;
  c.training.optimizer.local_step_clipper = 4;
  const double n = 212.0, padded = 224.0, N = 4.0;
  const double fp32 = 2.0 * (N - 1) / N * 4.0 * n,
               onebit = 2.0 * (N - 1) / N * padded / 8.0 + 2.0 * (N - 1) / N * 4.0 * N;
  ASSERT_DOUBLE_EQ(onebit_wire_bytes(224, 4), onebit);
  const std::vector<std::pair<int64_t, std::pair<P, double>>> steps = {{1, {P::kInit, fp32 + onebit}},
                                                                       {2, {P::kVariance, fp32}},
                                                                       {5, {P::kOnebitGradient, onebit}},
                                                                       {12, {P::kVariance, fp32}},
                                                                       {13, {P::kOnebitGradient, onebit}},
                                                                       {14, {P::kSync, onebit}},
                                                                       {17, {P::kLocal, 0.0}},
                                                                       {19, {P::kLocal, 0.0}},
                                                                       {20, {P::kSync, onebit}}};
  for (const auto& [k, want] : steps) {
    PriceKey key;
    EXPECT_DOUBLE_EQ(priced_wire_bytes(c, k - 1, &key), want.second) << "step " << k;
    EXPECT_EQ(key.first, static_cast<int64_t>(want.first)) << "step " << k;
  }
  // One rank: no compressed all-reduce (DeepSpeed: size > 1), the variance steps' all-reduce of one rank is free.
  c.cluster.ranks = 1;
  PriceKey key;
  EXPECT_DOUBLE_EQ(priced_wire_bytes(c, 4, &key), 0.0);
}

// The cuda backend runs it (its compressed all-reduce and local steps through the memory's CompressOps).
TEST(ZeroOneAdam, TheCudaBackendRunsIt) {
  EXPECT_TRUE(cuda_device_issues(zero_one_config(2)).empty());
  EXPECT_EQ(choose_cuda_path(zero_one_config(2)).path, CudaPath::kDevice);
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

std::string optimizer(const std::string& fields) {
  return R"("training": {"steps": 3, "optimizer": {"kind": "zero_one_adam")" + fields + "}}";
}

TEST(ZeroOneAdam, RefusesBadFieldsAndWhatItDoesNotCombineWith) {
  const std::string p = "training.optimizer.";
  EXPECT_TRUE(has(issues_of(optimizer(R"(, "var_freeze_step": -1)")), p + "var_freeze_step", ">= 0"));
  for (const char* f : {"var_update_scaler", "local_step_scaler", "local_step_clipper"}) {
    EXPECT_TRUE(has(issues_of(optimizer(std::string(", \"") + f + "\": 0")), p + f, ">= 1"));
    EXPECT_TRUE(has(issues_of(optimizer(std::string(", \"") + f + "\": 2.5")), p + f, "integer"));
    EXPECT_TRUE(has(issues_of(R"("training": {"optimizer": {"kind": "onebit_adam", ")" + std::string(f) + "\": 4}}"),
                    p + f, "only applies when training.optimizer.kind is \"zero_one_adam\""));
  }
  EXPECT_TRUE(has(issues_of(optimizer(R"(, "freeze_step": 5)")), p + "freeze_step", "only applies"));
  EXPECT_TRUE(has(issues_of(optimizer(R"(, "exp_avg_mask": "zero_variance")")), p + "exp_avg_mask", "only applies"));
  EXPECT_TRUE(has(issues_of(optimizer(R"(, "betas": [0.9])")), p + "betas", "two numbers"));
  EXPECT_TRUE(has(issues_of(optimizer(R"(, "eps": 0)")), p + "eps", "> 0"));
  EXPECT_TRUE(has(issues_of(optimizer("") + R"(, "sync": {"kind": "local_sgd"})"), "sync.kind",
                  "training.optimizer.kind \"zero_one_adam\" runs its own all-reduce"));
  EXPECT_TRUE(has(issues_of(optimizer("") + R"(, "compression": {"kind": "onebit"})"), "compression.kind",
                  "expected \"none\", got \"onebit\""));
  EXPECT_TRUE(has(issues_of(optimizer("") + R"(, "precision": {"mode": "fp16_pure"})"), "precision.mode", "fp16_pure"));
}

TEST(ZeroOneAdam, ReadsDeepSpeedsFieldsWithTheirDefaults) {
  const std::string text = R"({"name": "t", "model": {"kind": "mlp", "layers": [8, 4, 3]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "cluster": {"ranks": 2},)";
  const RunConfig d = parse_scenario(text + optimizer("") + "}", "ok.json", {}).runs.at(0).config;
  const OptimizerConfig& o = d.training.optimizer;
  EXPECT_EQ(o.var_freeze_step, 100000);
  EXPECT_EQ(o.var_update_scaler, 16);
  EXPECT_EQ(o.local_step_scaler, 32678);
  EXPECT_EQ(o.local_step_clipper, 16);
  const RunConfig c =
      parse_scenario(text + optimizer(R"(, "var_freeze_step": 7, "local_step_clipper": 2)") + "}", "ok.json", {})
          .runs.at(0)
          .config;
  EXPECT_EQ(c.training.optimizer.var_freeze_step, 7);
  EXPECT_EQ(c.training.optimizer.local_step_clipper, 2);
}

}  // namespace
}  // namespace gs
