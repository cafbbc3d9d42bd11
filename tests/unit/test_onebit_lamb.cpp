// training.optimizer.kind "onebit_lamb" (sim/strategy/onebit_lamb.cpp): a two-rank, four-step run of DeepSpeed's
// OnebitLamb worked out by hand (the initialization step, one LAMB warm-up step, two compressed steps: the scaling
// coefficients, the compressed momentum, both error buffers' norms, the frozen coefficient and the factor), the memory
// terms, the modeled clock's messages per phase and the validation of its fields. The trajectories against an
// independent NumPy re-implementation of DeepSpeed are tests/e2e/test_onebit_lamb.py.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "sim/app/memory.h"
#include "sim/comm/communicator.h"
#include "sim/config/scenario.h"
#include "sim/cost/cost_model.h"
#include "sim/strategy/onebit_adam.h"
#include "sim/strategy/strategy.h"
#include "sim/validate/validate.h"
#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

// Two ranks, the quadratic model as two tensors of one value (w0 = 3, w1 = 4), lr 0.1, betas (0.5, 0.75),
// freeze_step 2, factor_threshold 0.2; the gradients are handed to step() directly.
RunConfig lamb_config(const json& extra = json::object()) {
  json optimizer = {{"kind", "onebit_lamb"}, {"lr", 0.1},         {"betas", {0.5, 0.75}},
                    {"freeze_step", 2},      {"factor_threshold", 0.2}};
  optimizer.update(extra);
  std::vector<ConfigIssue> issues;
  RunConfig c = config_from_json({{"model",
                                   {{"kind", "quadratic"},
                                    {"a", {{1.0, 1.0}}},
                                    {"b", {{0.0, 0.0}}},
                                    {"initial_w", {3.0, 4.0}},
                                    {"split", {1, 1}}}},
                                  {"data", {{"kind", "none"}}},
                                  {"cluster", {{"ranks", 2}}},
                                  {"training", {{"steps", 4}, {"optimizer", optimizer}}}},
                                 issues);
  EXPECT_TRUE(issues.empty()) << issues[0].path << ": " << issues[0].message;
  return c;
}

// One step on both ranks; grads[r] is rank r's gradient sum over its one sample.
void step_both(SyncStrategy& s, int64_t step, std::vector<std::vector<float>> grads) {
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      PhaseClock clock;
      clock.begin_step();
      StepInput in;
      in.rank = r;
      in.step = step;
      in.grad = grads[static_cast<size_t>(r)].data();
      in.local_samples = 1.0;
      in.global_samples = 2.0;
      in.lr = 0.1;
      in.total_steps = 4;
      in.clock = &clock;
      s.step(in);
    });
  for (auto& t : th) t.join();
}

double norm(const std::vector<double>& x) {
  double ss = 0.0;
  for (double e : x) ss += e * e;
  return std::sqrt(ss);
}

double sign(double x) { return x < 0.0 ? -1.0 : 1.0; }  // DeepSpeed's: 0 is +1

// DeepSpeed's compressed all-reduce of two ranks' two values (padded to 16, chunk 8) in double, the error buffers
// updated: the worker's x = pad(m) + e, s = ||x|| / 4, e = x - s sign(x); server q's c = sum_j sign_j (s_j / 2) + e_q
// over its chunk, t = ||c|| / sqrt(8), e_q = c - t sign(c); the result t_0 sign(c_0) over the two values (chunk 0).
std::vector<double> compressed2(const std::vector<std::vector<double>>& m, std::vector<std::vector<double>>& we,
                                std::vector<std::vector<double>>& se) {
  std::vector<std::vector<double>> x(2, std::vector<double>(16, 0.0));
  std::vector<double> s(2);
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 16; ++i) x[r][i] = (i < 2 ? m[r][i] : 0.0) + we[r][i];
    s[r] = norm(x[r]) / 4.0;
    for (int i = 0; i < 16; ++i) we[r][i] = x[r][i] - s[r] * sign(x[r][i]);
  }
  std::vector<double> out(2);
  for (int q = 0; q < 2; ++q) {
    std::vector<double> c(8);
    for (int i = 0; i < 8; ++i)
      c[i] = sign(x[0][8 * q + i]) * s[0] / 2 + sign(x[1][8 * q + i]) * s[1] / 2 + se[q][i];
    const double t = norm(c) / std::sqrt(8.0);
    for (int i = 0; i < 8; ++i) se[q][i] = c[i] - t * sign(c[i]);
    if (q == 0) out = {t * sign(c[0]), t * sign(c[1])};
  }
  return out;
}

double mean_norm(const std::vector<std::vector<double>>& e) { return (norm(e[0]) + norm(e[1])) / 2.0; }

TEST(OnebitLamb, TwoRanksFourStepsByHand) {
  const RunConfig c = lamb_config();
  auto model = make_model(c);
  CostModel cm(c, *model);
  auto comm = make_host_communicator(2);
  StrategySetup setup{c, *model, *comm, 2, &cm};
  auto s = make_strategy(setup);
  for (int r = 0; r < 2; ++r) {
    s->params(r)[0] = 3.0f;
    s->params(r)[1] = 4.0f;
  }
  auto lamb = [&](size_t t) { return s->report({}).compression.at("lamb").at(t); };
  // Step 1: DeepSpeed's initialization step; nothing moves and nothing is reported yet.
  step_both(*s, 0, {{5.0f, 7.0f}, {-1.0f, 2.0f}});
  EXPECT_EQ(s->params(0)[0], 3.0f);
  EXPECT_EQ(s->params(1)[1], 4.0f);
  EXPECT_TRUE(s->report({}).compression.is_null());
  // Step 2, LAMB on the mean gradient g = [2, -4]: m = 0.5 g = [1, -2], v = 0.25 g^2 = [1, 4], u = m / sqrt(v) =
  // [1, -1] (eps 1e-8 vanishes in float32); c_t = ||w_t|| / ||u_t|| = 3 and 4 (within [0.01, 10]); the frozen
  // coefficient f = 0.9 x 0 + 0.1 c = 0.3 and 0.4; w = [3 - 0.1 x 3, 4 + 0.1 x 4] = [2.7, 4.4]. v_fresh = v (k = 2).
  step_both(*s, 1, {{2.0f, -4.0f}, {2.0f, -4.0f}});
  for (int r = 0; r < 2; ++r) {
    EXPECT_FLOAT_EQ(s->params(r)[0], 2.7f);
    EXPECT_FLOAT_EQ(s->params(r)[1], 4.4f);
  }
  // Step 3, the first compressed step. scaling_coeff = mean(rms) / rms_t with rms = |m_t| = 1, 2: [1.5, 0.75].
  // Each rank's m_r = 0.5 m + 0.5 g_r, scaled: rank 0 (g = [3, -2]) [2, -2] -> [3, -1.5]; rank 1 (g = [-3, -2])
  // [-1, -2] -> [-1.5, -1.5].
  std::vector<std::vector<double>> we(2, std::vector<double>(16, 0.0)), se(2, std::vector<double>(8, 0.0));
  step_both(*s, 2, {{3.0f, -2.0f}, {-3.0f, -2.0f}});
  const double s0 = std::sqrt(11.25) / 4.0, s1 = std::sqrt(4.5) / 4.0;  // the worker scales
  const double c0 = s0 / 2 - s1 / 2, c1 = -s0 / 2 - s1 / 2, c2 = s0 / 2 + s1 / 2;
  const double t0 = std::sqrt(c0 * c0 + c1 * c1 + 6 * c2 * c2) / std::sqrt(8.0);  // server 0's scale
  // Worker errors x - s sign(x); server 0's c - t0 sign(c); server 1's chunk holds padding only: c = c2 = t1, error 0.
  std::vector<double> e0 = {3 - s0, -1.5 + s0}, e1 = {-1.5 + s1, -1.5 + s1}, es = {c0 - t0, c1 + t0};
  for (int i = 0; i < 14; ++i) {
    e0.push_back(-s0);
    e1.push_back(-s1);
  }
  for (int i = 0; i < 6; ++i) es.push_back(c2 - t0);
  const double worker = (norm(e0) + norm(e1)) / 2.0, server = norm(es) / 2.0;
  const json rep3 = s->report({}).compression;
  EXPECT_NEAR(rep3.at("residual_norm").at("last").get<double>(), worker, 1e-6);
  EXPECT_NEAR(rep3.at("server_error_norm").at("last").get<double>(), server, 1e-6);
  // The same numbers from the double helper (checked here against the closed forms), kept for step 4.
  const std::vector<double> out3 = compressed2({{3.0, -1.5}, {-1.5, -1.5}}, we, se);
  EXPECT_NEAR(out3[0], t0, 1e-12);
  EXPECT_NEAR(out3[1], -t0, 1e-12);
  EXPECT_NEAR(mean_norm(we), worker, 1e-12);
  EXPECT_NEAR(mean_norm(se), server, 1e-12);
  // m = [t0 / 1.5, -t0 / 0.75] after unscaling; g' = (m - 0.5 m_last) / 0.5 with m_last = [1, -2];
  // v_fresh = 0.75 v_fresh + 0.25 g'^2; u = m / sqrt(v) = [m0, m1 / 2]; factor = sqrt(v) / sqrt(v_fresh), within
  // [0.5, 4] and within 1 -+ 0.2 of last_factor 1; w -= 0.1 f factor u.
  std::vector<double> m = {t0 / 1.5, -t0 / 0.75}, fresh = {1.0, 4.0}, f = {0.1 * 3.0, 0.1 * 4.0}, last = {1.0, 1.0};
  const std::vector<double> sqrt_v = {1.0, 2.0};
  std::vector<double> w = {2.7, 4.4};
  const std::vector<double> m_last = {1.0, -2.0};
  auto frozen = [&](size_t t) {
    const double g = (m[t] - 0.5 * m_last[t]) / 0.5;
    fresh[t] = 0.75 * fresh[t] + 0.25 * g * g;
    double factor = std::min(4.0, std::max(0.5, sqrt_v[t] / std::sqrt(fresh[t])));
    factor = std::min(last[t] * 1.2, std::max(last[t] * 0.8, factor));
    last[t] = factor;
    w[t] -= 0.1 * f[t] * factor * (m[t] / sqrt_v[t]);
  };
  frozen(0);
  frozen(1);
  EXPECT_GT(last[0], 1.15);  // 1 / sqrt(0.75 + 0.25 (2 t0 / 1.5 - 1)^2), about 1.1508: inside both bounds
  EXPECT_LT(last[0], 1.2);
  for (size_t t = 0; t < 2; ++t) {
    EXPECT_NEAR(lamb(t).at("lamb_coeff_freeze").get<double>(), f[t], 1e-12) << t;
    EXPECT_NEAR(lamb(t).at("scaling_coeff").get<double>(), t == 0 ? 1.5 : 0.75, 1e-12) << t;
    EXPECT_NEAR(lamb(t).at("last_factor").get<double>(), last[t], 1e-6) << t;
    EXPECT_NEAR(lamb(t).at("lamb_coeff").get<double>(), f[t] * last[t], 1e-6) << t;
    for (int r = 0; r < 2; ++r) EXPECT_NEAR(s->params(r)[t], w[t], 2e-6) << t << " " << r;
  }
  // Step 4: the momentum of step 3 (m_last), each rank's own gradient, the error buffers of step 3.
  const std::vector<double> m3 = m;
  const std::vector<std::vector<float>> g4 = {{1.0f, -1.0f}, {2.0f, -3.0f}};
  step_both(*s, 3, g4);
  std::vector<std::vector<double>> scaled(2);
  for (size_t r = 0; r < 2; ++r)
    scaled[r] = {(0.5 * m3[0] + 0.5 * g4[r][0]) * 1.5, (0.5 * m3[1] + 0.5 * g4[r][1]) * 0.75};
  const std::vector<double> out4 = compressed2(scaled, we, se);
  m = {out4[0] / 1.5, out4[1] / 0.75};
  const std::vector<double> m_last4 = m3;
  for (size_t t = 0; t < 2; ++t) {
    const double g = (m[t] - 0.5 * m_last4[t]) / 0.5;
    fresh[t] = 0.75 * fresh[t] + 0.25 * g * g;
    double factor = std::min(4.0, std::max(0.5, sqrt_v[t] / std::sqrt(fresh[t])));
    factor = std::min(last[t] * 1.2, std::max(last[t] * 0.8, factor));
    last[t] = factor;
    w[t] -= 0.1 * f[t] * factor * (m[t] / sqrt_v[t]);
  }
  const json rep4 = s->report({}).compression;
  EXPECT_EQ(rep4.at("compressed_steps"), 2);
  EXPECT_NEAR(rep4.at("residual_norm").at("last").get<double>(), mean_norm(we), 1e-6);
  EXPECT_NEAR(rep4.at("server_error_norm").at("last").get<double>(), mean_norm(se), 1e-6);
  for (size_t t = 0; t < 2; ++t) {
    EXPECT_NEAR(lamb(t).at("lamb_coeff_freeze").get<double>(), f[t], 1e-12) << t;  // frozen after the warm-up
    EXPECT_NEAR(lamb(t).at("last_factor").get<double>(), last[t], 1e-6) << t;
    for (int r = 0; r < 2; ++r) EXPECT_NEAR(s->params(r)[t], w[t], 2e-6) << t << " " << r;
  }
}

TEST(OnebitLamb, FactorIsHeldWithinItsThresholdOfTheLastFactor) {
  // factor_threshold 0.01: step 3's factor (1.15 unclipped) is held to 1.01, and step 4's to 1.01 x 1.01 at most.
  const RunConfig c = lamb_config({{"factor_threshold", 0.01}});
  auto model = make_model(c);
  CostModel cm(c, *model);
  auto comm = make_host_communicator(2);
  StrategySetup setup{c, *model, *comm, 2, &cm};
  auto s = make_strategy(setup);
  for (int r = 0; r < 2; ++r) {
    s->params(r)[0] = 3.0f;
    s->params(r)[1] = 4.0f;
  }
  step_both(*s, 0, {{0.0f, 0.0f}, {0.0f, 0.0f}});
  step_both(*s, 1, {{2.0f, -4.0f}, {2.0f, -4.0f}});
  step_both(*s, 2, {{3.0f, -2.0f}, {-3.0f, -2.0f}});
  const json lamb = s->report({}).compression.at("lamb");
  EXPECT_DOUBLE_EQ(lamb.at(0).at("last_factor").get<double>(), 1.0 * (1.0 + 0.01));
  EXPECT_DOUBLE_EQ(lamb.at(0).at("lamb_coeff").get<double>(), (0.9 * 0.0 + (1 - 0.9) * 3.0) * 1.01);
}

TEST(OnebitLamb, MemoryCountsItsStateAndTheErrorBuffers) {
  // Host: per rank m, v, v_fresh, m_last and the update (5 x n floats), worker error P and server error P / N.
  RunConfig c = lamb_config();
  c.cluster.ranks = 4;
  const MemoryEstimate e = estimate_run_memory(c, 1000);
  EXPECT_EQ(e.optimizer_bytes, 4 * 5 * 1000 * 4);
  EXPECT_EQ(e.residuals_bytes, 4 * (1024 + 256) * 4);
  // Device: Adam's m and v plus v_fresh and m_last (fp32), the error buffers of the padded two values.
  c.cluster.hardware = "h100-sxm-8";
  auto model = make_model(c);
  const GpuMemoryEstimate g = estimate_gpu_memory(c, *model);
  EXPECT_EQ(g.optimizer_bytes, 16 * 2);
  EXPECT_EQ(g.error_feedback_bytes, 4 * (32 + 8));  // P = 32 on 4 ranks
}

// The wire bytes the modeled clock records for 0-based step `step` of a timing-only strategy.
double priced_wire_bytes(const RunConfig& c, int64_t step) {
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
  strategy->price(in);
  double wire = 0.0;
  for (const CommChain& ch : cost.chains) wire += ch.wire_bytes;
  return wire;
}

TEST(OnebitLamb, ModeledClockPricesEachPhasesMessages) {
  RunConfig c = lamb_config({{"freeze_step", 3}});
  c.cluster.hardware = "h100-sxm-8";
  const double n = 2.0, N = 2.0, P = 16.0;
  const double fp32 = 2.0 * (N - 1) / N * 4.0 * n, onebit = 2.0 * (N - 1) / N * P / 8.0 + 2.0 * (N - 1) / N * 4.0 * N;
  EXPECT_DOUBLE_EQ(onebit_wire_bytes(16, 2), onebit);
  EXPECT_DOUBLE_EQ(priced_wire_bytes(c, 0), fp32 + onebit);  // init: the all-reduce and the exchange of zeros
  EXPECT_DOUBLE_EQ(priced_wire_bytes(c, 2), fp32);           // warm-up (k = 3 = freeze_step)
  EXPECT_DOUBLE_EQ(priced_wire_bytes(c, 3), onebit);         // compressed
}

std::vector<ConfigIssue> issues_of(const json& optimizer, const json& model_extra = json::object()) {
  json model = {{"kind", "quadratic"}, {"a", {{1.0, 1.0, 1.0}}}, {"b", {{0.0, 0.0, 0.0}}}, {"initial_w", {1, 2, 3}}};
  model.update(model_extra);
  const json s = {{"name", "t"},
                  {"model", model},
                  {"data", {{"kind", "none"}}},
                  {"cluster", {{"ranks", 2}}},
                  {"training", {{"steps", 3}, {"optimizer", optimizer}}}};
  try {
    parse_scenario(s.dump(), "bad.json", {});
  } catch (const ScenarioError& e) {
    return e.issues();
  }
  ADD_FAILURE() << "scenario was accepted: " << s.dump();
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

TEST(OnebitLamb, ValidatesEveryFieldWithItsPath) {
  const std::string p = "training.optimizer.";
  auto lamb = [](const json& extra) {
    json o = {{"kind", "onebit_lamb"}};
    if (extra.is_object()) o.update(extra);
    return o;
  };
  EXPECT_TRUE(has(issues_of(lamb({{"max_coeff", 0}})), p + "max_coeff", "> 0"));
  EXPECT_TRUE(has(issues_of(lamb({{"min_coeff", -1}})), p + "min_coeff", ">= 0"));
  EXPECT_TRUE(has(issues_of(lamb({{"min_coeff", 20}})), p + "min_coeff", "expected at most training.optimizer.max_coeff"));
  EXPECT_TRUE(has(issues_of(lamb({{"coeff_beta", 1.0}})), p + "coeff_beta", "< 1"));
  EXPECT_TRUE(has(issues_of(lamb({{"coeff_beta", "x"}})), p + "coeff_beta", "number"));
  EXPECT_TRUE(has(issues_of(lamb({{"factor_max", 0}})), p + "factor_max", "> 0"));
  EXPECT_TRUE(has(issues_of(lamb({{"factor_min", 0}})), p + "factor_min", "> 0"));
  EXPECT_TRUE(has(issues_of(lamb({{"factor_min", 5}})), p + "factor_min", "expected at most training.optimizer.factor_max"));
  EXPECT_TRUE(has(issues_of(lamb({{"factor_threshold", -0.1}})), p + "factor_threshold", ">= 0"));
  EXPECT_TRUE(has(issues_of(lamb({{"freeze_step", -1}})), p + "freeze_step", ">= 0"));
  EXPECT_TRUE(has(issues_of(lamb({{"exp_avg_mask", "auto"}})), p + "exp_avg_mask", "zero_variance"));
  EXPECT_TRUE(has(issues_of(lamb({{"momentum", 0.9}})), p + "momentum", "only applies"));
  EXPECT_TRUE(has(issues_of(lamb({{"uncompressed_tensors", {"w"}}})), p + "uncompressed_tensors", "only applies"));
  EXPECT_TRUE(has(issues_of(lamb({{"var_freeze_step", 3}})), p + "var_freeze_step", "only applies"));
  // Its fields under another kind.
  EXPECT_TRUE(has(issues_of({{"kind", "adam"}, {"max_coeff", 5}}), p + "max_coeff",
                  "only applies when training.optimizer.kind is \"onebit_lamb\""));
  EXPECT_TRUE(has(issues_of({{"kind", "onebit_adam"}, {"factor_threshold", 0.2}}), p + "factor_threshold",
                  "only applies"));
  // 1-bit Adam's refusals.
  EXPECT_TRUE(has(issues_of(lamb({{"betas", {0.9, 1.0}}})), p + "betas[1]", "(beta2)"));
  // model.split: positive sizes that sum to the length of model.initial_w.
  EXPECT_TRUE(has(issues_of(lamb(json::object()), {{"split", {1, 1}}}), "model.split", "expected sizes that sum to 3"));
  EXPECT_TRUE(has(issues_of(lamb(json::object()), {{"split", {3, 0}}}), "model.split[1]", ">= 1"));
}

TEST(OnebitLamb, OneBitAdamsNonFreezeGroupNamesTensorsOfTheModel) {
  const std::string p = "training.optimizer.uncompressed_tensors";
  const json split = {{"split", {2, 1}}};
  EXPECT_TRUE(has(issues_of({{"kind", "onebit_adam"}, {"uncompressed_tensors", {"w9"}}}, split), p + "[0]",
                  "model.kind \"quadratic\" has no tensor \"w9\"; its tensors: w0, w1"));
  EXPECT_TRUE(has(issues_of({{"kind", "onebit_adam"}, {"uncompressed_tensors", {"w0", "w1"}}}, split), p,
                  "names every tensor of the model"));
  EXPECT_TRUE(has(issues_of({{"kind", "onebit_adam"}, {"uncompressed_tensors", {"w1", "w1"}}}, split), p + "[1]",
                  "a second time"));
  // A tensor's name and its file name (the PyTorch state_dict key) are two strings for one tensor: named once.
  const std::string mlp = R"({"name": "t", "model": {"kind": "mlp", "layers": [4, 3, 2]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 4, "out_dim": 2}}, "cluster": {"ranks": 2},
    "training": {"steps": 3, "optimizer": {"kind": "onebit_adam", "uncompressed_tensors": )";
  std::vector<ConfigIssue> twice;
  try {
    parse_scenario(mlp + R"(["layer0.weight", "0.weight"]}}})", "bad.json", {});
  } catch (const ScenarioError& e) {
    twice = e.issues();
  }
  EXPECT_TRUE(has(twice, p + "[1]", "\"0.weight\" is tensor layer0.weight, which entry [0] already names"));
  EXPECT_NO_THROW(parse_scenario(mlp + R"(["layer0.weight", "2.weight"]}}})", "good.json", {}));
  EXPECT_TRUE(has(issues_of({{"kind", "onebit_adam"}, {"uncompressed_tensors", "w1"}}, split), p,
                  "expected null or a list of tensor names"));
  EXPECT_TRUE(has(issues_of({{"kind", "onebit_adam"}, {"uncompressed_tensors", {3}}}, split), p + "[0]",
                  "expected a tensor name, got 3"));
}

TEST(OnebitLamb, OneBitAdamsErrorBuffersCoverOnlyItsCompressedGroup) {
  RunConfig c = test::two_tensor_onebit_adam(4);
  auto model = make_model(c);
  EXPECT_EQ(estimate_gpu_memory(c, *model).error_feedback_bytes, 4 * (128 + 32));  // all 100: P = 128
  c.training.optimizer.uncompressed_tensors = {"w1"};
  EXPECT_EQ(estimate_gpu_memory(c, *model).error_feedback_bytes, 4 * (64 + 16));  // w0's 40: P = 64
}

}  // namespace
}  // namespace gs
