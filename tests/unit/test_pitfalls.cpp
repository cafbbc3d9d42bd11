// training.pitfall (docs/pitfalls.md): each known mistake's claimed effect against an independent reference: a run
// of K = 1 on the last micro-batches alone, updates worked out by hand in double on linear models, fp16's format
// math, and the whole communication time from the collective model. A new pitfall adds its test here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "sim/config/run_config.h"
#include "sim/cost/cost_model.h"
#include "sim/strategy/strategy.h"
#include "sim/validate/validate.h"
#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

// One micro-batch of inline regression data: x rows and y rows.
struct MicroBatch {
  std::vector<std::vector<double>> x, y;
  json to_json() const { return {{"x", x}, {"y", y}}; }
};

// Random micro-batch of `size` samples (in -> out), values exact in float.
MicroBatch random_micro_batch(std::mt19937& gen, int size, int in, int out) {
  std::uniform_int_distribution<int> d(-8, 8);
  MicroBatch mb;
  for (int i = 0; i < size; ++i) {
    std::vector<double> x, y;
    for (int j = 0; j < in; ++j) x.push_back(d(gen) / 8.0);
    for (int j = 0; j < out; ++j) y.push_back(d(gen) / 8.0);
    mb.x.push_back(x);
    mb.y.push_back(y);
  }
  return mb;
}

// A linear mse model without bias (W: out x in, row-major) on inline data, 'per_rank' = [[micro-batch, ...] per rank].
json linear_scenario(const std::vector<std::vector<double>>& w0, int ranks, int K, int steps, double lr,
                     const json& per_rank, const std::string& pitfall) {
  const int out = static_cast<int>(w0.size()), in = static_cast<int>(w0[0].size());
  return {{"name", "pitfall"},
          {"model", {{"kind", "linear"}, {"layers", {in, out}}, {"bias", false}, {"loss", "mse"},
                     {"initial_weights", w0}}},
          {"data", {{"kind", "inline"}, {"ranks", per_rank}}},
          {"cluster", {{"ranks", ranks}, {"share_identical", false}}},
          {"training", {{"steps", steps}, {"accumulation_steps", K}, {"eval_every", 0}, {"pitfall", pitfall},
                        {"optimizer", {{"kind", "sgd"}, {"lr", lr}}}}},
          {"report", {{"trace", true}}}};
}

using Matrix = std::vector<std::vector<double>>;

// Sum over the samples of d/dW 0.5 ||W x - y||^2 = (W x - y) x^T, in double.
Matrix gradient_sum(const Matrix& w, const MicroBatch& mb) {
  Matrix g(w.size(), std::vector<double>(w[0].size(), 0.0));
  for (size_t s = 0; s < mb.x.size(); ++s)
    for (size_t o = 0; o < w.size(); ++o) {
      double r = -mb.y[s][o];
      for (size_t i = 0; i < w[o].size(); ++i) r += w[o][i] * mb.x[s][i];
      for (size_t i = 0; i < w[o].size(); ++i) g[o][i] += r * mb.x[s][i];
    }
  return g;
}

// w -= scale * g
void axpy(Matrix& w, double scale, const Matrix& g) {
  for (size_t o = 0; o < w.size(); ++o)
    for (size_t i = 0; i < w[o].size(); ++i) w[o][i] -= scale * g[o][i];
}

double max_abs_diff(const std::vector<float>& a, const Matrix& b) {
  double d = 0.0;
  size_t k = 0;
  for (const auto& row : b)
    for (double v : row) d = std::max(d, std::fabs(static_cast<double>(a.at(k++)) - v));
  return d;
}

// ---- zero_grad_in_loop ------------------------------------------------------------------------------------------

// Two ranks, K = 3, micro-batches of different sizes. Zeroing inside the loop must give exactly the parameters of
// a K = 1 run that sees only the last micro-batch of each window (the same samples, the same divisor: the last
// micro-batches' samples), and the hand recursion w -= lr * (1/b_last) sum_{last} (W x - y) x^T on one rank.
TEST(PitfallZeroGradInLoop, EachUpdateIsTheLastMicroBatchAloneAtTheFullLearningRate) {
  std::mt19937 gen(11);
  const int N = 2, K = 3, steps = 4, in = 3, out = 2;
  const double lr = 0.125;
  const Matrix w0 = {{0.5, -0.25, 0.125}, {0.0, 0.75, -0.5}};
  json all = json::array(), last = json::array();
  std::vector<std::vector<MicroBatch>> batches(N);
  for (int r = 0; r < N; ++r) {
    json row = json::array(), last_row = json::array();
    for (int t = 0; t < steps; ++t)
      for (int k = 0; k < K; ++k) {
        MicroBatch mb = random_micro_batch(gen, 1 + (r + 2 * t + 3 * k) % 4, in, out);
        row.push_back(mb.to_json());
        if (k + 1 == K) last_row.push_back(mb.to_json());
        batches[static_cast<size_t>(r)].push_back(mb);
      }
    all.push_back(row);
    last.push_back(last_row);
  }
  auto pitfall = test::run_scenario_text(linear_scenario(w0, N, K, steps, lr, all, "zero_grad_in_loop").dump());
  auto reference = test::run_scenario_text(linear_scenario(w0, N, 1, steps, lr, last, "none").dump());
  auto correct = test::run_scenario_text(linear_scenario(w0, N, K, steps, lr, all, "none").dump());
  for (size_t s = 0; s < static_cast<size_t>(steps); ++s) {
    for (size_t r = 0; r < static_cast<size_t>(N); ++r) {
      auto a = test::params_after(pitfall[0], s, r);
      auto b = test::params_after(reference[0], s, 0);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "step " << s + 1 << " rank " << r;
    }
  }
  // The real accumulation differs (it uses all K micro-batches).
  auto a = test::params_after(pitfall[0], steps - 1, 0);
  auto c = test::params_after(correct[0], steps - 1, 0);
  double diff = 0.0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(double(a[i]) - c[i]));
  EXPECT_GT(diff, 1e-3);
  // The step's training loss still covers every micro-batch's forward: the same as the correct loop's first step.
  EXPECT_EQ(pitfall[0]["convergence"]["series"][0]["train_loss"], correct[0]["convergence"]["series"][0]["train_loss"]);

  // One rank by hand: the divisor is the last micro-batch's size b_last (the article's mean loss), not K b.
  auto one = test::run_scenario_text(
      linear_scenario(w0, 1, K, steps, lr, json::array({all[0]}), "zero_grad_in_loop").dump());
  Matrix w = w0, w_kb = w0;
  for (int t = 0; t < steps; ++t) {
    const MicroBatch& mb = batches[0][static_cast<size_t>(t * K + K - 1)];
    axpy(w, lr / static_cast<double>(mb.x.size()), gradient_sum(w, mb));
    axpy(w_kb, lr / static_cast<double>(K * mb.x.size()), gradient_sum(w_kb, mb));
    auto got = test::params_after(one[0], static_cast<size_t>(t), 0);
    EXPECT_LT(max_abs_diff(got, w), 1e-6) << "step " << t + 1;
  }
  EXPECT_GT(max_abs_diff(test::params_after(one[0], steps - 1, 0), w_kb), 1e-3) << "divided by K b instead";
}

// ---- mean_of_means ----------------------------------------------------------------------------------------------

// Micro-batches of 1, 2 and 5 samples (K = 3) on one rank, then 2 ranks x K = 2 with sizes {1, 4} and {3, 2}: the
// update is lr * (1/(N K)) sum_r sum_k (1/b_rk) sum_{i in (r,k)} g_i, by hand in double; the sample-weighted mean
// (what pitfall none computes) differs.
TEST(PitfallMeanOfMeans, UpdateIsTheMeanOfPerMicroBatchMeansNotTheSampleWeightedMean) {
  std::mt19937 gen(23);
  const int in = 2, out = 1, steps = 3;
  const double lr = 0.25;
  const Matrix w0 = {{0.5, -0.75}};
  struct Layout {
    int N, K;
    std::vector<std::vector<int>> sizes;  // [rank][k]
  };
  for (const Layout& l : {Layout{1, 3, {{1, 2, 5}}}, Layout{2, 2, {{1, 4}, {3, 2}}}}) {
    std::vector<std::vector<MicroBatch>> mbs(static_cast<size_t>(l.N));
    json per_rank = json::array();
    for (int r = 0; r < l.N; ++r) {
      json row = json::array();
      for (int k = 0; k < l.K; ++k) {
        mbs[static_cast<size_t>(r)].push_back(random_micro_batch(gen, l.sizes[r][k], in, out));
        row.push_back(mbs[static_cast<size_t>(r)].back().to_json());
      }
      per_rank.push_back(row);
    }
    auto pitfall = test::run_scenario_text(linear_scenario(w0, l.N, l.K, steps, lr, per_rank, "mean_of_means").dump());
    auto correct = test::run_scenario_text(linear_scenario(w0, l.N, l.K, steps, lr, per_rank, "none").dump());
    Matrix w_mm = w0, w_sw = w0;
    for (int t = 0; t < steps; ++t) {  // the same K micro-batches every step (inline data cycles)
      Matrix g_mm(1, std::vector<double>(in, 0.0)), g_sw = g_mm;
      double samples = 0.0;
      for (int r = 0; r < l.N; ++r)
        for (int k = 0; k < l.K; ++k) {
          const MicroBatch& mb = mbs[static_cast<size_t>(r)][static_cast<size_t>(k)];
          Matrix gm = gradient_sum(w_mm, mb), gs = gradient_sum(w_sw, mb);
          for (int i = 0; i < in; ++i) {
            g_mm[0][i] += gm[0][i] / static_cast<double>(mb.x.size()) / static_cast<double>(l.N * l.K);
            g_sw[0][i] += gs[0][i];
          }
          samples += static_cast<double>(mb.x.size());
        }
      axpy(w_mm, lr, g_mm);
      axpy(w_sw, lr / samples, g_sw);
      const std::string where = fmt::format("N={} K={} step {}", l.N, l.K, t + 1);
      auto got = test::params_after(pitfall[0], static_cast<size_t>(t), 0);
      EXPECT_LT(max_abs_diff(got, w_mm), 1e-6) << where;
      EXPECT_LT(max_abs_diff(test::params_after(correct[0], static_cast<size_t>(t), 0), w_sw), 1e-6) << where;
      EXPECT_GT(max_abs_diff(got, w_sw), 1e-3) << where << ": the mean of means must differ here";
    }
  }
}

// ---- fp16_pure_unscaled ------------------------------------------------------------------------------------------

// The alias resolves to precision.mode fp16_pure with loss_scale none; conflicting settings are refused by path.
TEST(PitfallFp16PureUnscaled, AliasSetsPureFp16WithoutLossScaling) {
  std::vector<ConfigIssue> issues;
  RunConfig c = config_from_json(json::parse(R"({"model": {"kind": "linear", "layers": [1, 1], "loss": "mse"},
      "data": {"kind": "inline", "ranks": [[{"x": [[1]], "y": [[0]]}]]},
      "training": {"pitfall": "fp16_pure_unscaled"}})"), issues);
  ASSERT_TRUE(issues.empty()) << issues[0].path << ": " << issues[0].message;
  EXPECT_EQ(c.precision.mode, "fp16_pure");
  EXPECT_EQ(c.precision.loss_scale, "none");
  // Round trip: the resolved config reads back unchanged.
  RunConfig again = config_from_json(config_to_json(c), issues);
  ASSERT_TRUE(issues.empty()) << issues[0].path << ": " << issues[0].message;
  EXPECT_EQ(config_to_json(again), config_to_json(c));
  for (const char* bad : {R"({"precision": {"mode": "fp16_mixed"}})", R"({"precision": {"loss_scale": "dynamic"}})"}) {
    json j = json::parse(bad);
    j["training"] = {{"pitfall", "fp16_pure_unscaled"}};
    std::vector<ConfigIssue> found;
    config_from_json(j, found);
    ASSERT_EQ(found.size(), 1u) << bad;
    EXPECT_EQ(found[0].path, j.contains("precision") && j["precision"].contains("mode") ? "precision.mode"
                                                                                           : "precision.loss_scale");
  }
  RunConfig direct;  // a config built in code is checked by validate_config
  direct.training.pitfall = "fp16_pure_unscaled";
  std::vector<ConfigIssue> found;
  validate_config(direct, found);
  bool named = false;
  for (const auto& i : found) named = named || i.path == "training.pitfall";
  EXPECT_TRUE(named);
}

// fp16's smallest subnormal is 2^-24; a gradient below half of it (2^-25) rounds to zero. With x = 2^-13 and
// residual 2^-13 the gradient is 2^-26: lost under the pitfall (the weight stays 0), kept by fp32 (w = -lr 2^-26).
// With x = residual = 2^-12 it is 2^-24 exactly, the smallest subnormal, and survives (w = -2^-24 with lr 1).
TEST(PitfallFp16PureUnscaled, GradientsBelowHalfTheSmallestSubnormalAreLost) {
  auto run = [](double x, const std::string& pitfall) {
    json per_rank = json::array({json::array({{{"x", {{x}}}, {"y", {{-x}}}}})});
    json s = linear_scenario({{0.0}}, 1, 1, 1, 1.0, per_rank, pitfall);
    return test::run_scenario_text(s.dump());
  };
  const double tiny = std::ldexp(1.0, -13), edge = std::ldexp(1.0, -12);
  auto lost = run(tiny, "fp16_pure_unscaled");
  EXPECT_EQ(lost[0]["config"]["precision"]["mode"], "fp16_pure");
  EXPECT_EQ(test::params_after(lost[0], 0, 0)[0], 0.0f) << "2^-26 must flush to zero in fp16";
  EXPECT_GT(lost[0]["precision"]["grad_underflow_fraction"].get<double>(), 0.0);
  auto kept = run(tiny, "none");
  EXPECT_EQ(test::params_after(kept[0], 0, 0)[0], static_cast<float>(-std::ldexp(1.0, -26)));
  auto subnormal = run(edge, "fp16_pure_unscaled");
  EXPECT_EQ(test::params_after(subnormal[0], 0, 0)[0], static_cast<float>(-std::ldexp(1.0, -24)));
}

// ---- delay_allreduce ---------------------------------------------------------------------------------------------

// The alias is sync.overlap false: GPT-2 small on 8 PCIe ranks, timing only. Its exposed communication is the whole
// communication (the sum of every bucket's all-reduce from the collective model), more than with overlap; one step
// of staleness hides it down to the stream bound max(0, D - C).
TEST(PitfallDelayAllreduce, ExposesTheWholeCommunicationAndStalenessHidesIt) {
  auto config = [](const std::string& pitfall, int64_t staleness) {
    json j = {{"name", "delay"},
              {"model", {{"kind", "gpt2-small"}}},
              {"data", {{"kind", "none"}, {"batch_per_rank", 1}}},
              {"cluster", {{"ranks", 8}, {"hardware", "h100-pcie-8"}}},
              {"training", {{"mode", "timing"}, {"steps", 3}, {"pitfall", pitfall}}},
              {"sync", {{"staleness", staleness}}},
              {"precision", {{"mode", "bf16_mixed"}}}};
    std::vector<ConfigIssue> issues;
    RunConfig c = config_from_json(j, issues);
    EXPECT_TRUE(issues.empty()) << issues[0].path << ": " << issues[0].message;
    return c;
  };
  RunConfig delayed = config("delay_allreduce", 0);
  EXPECT_FALSE(delayed.sync.overlap);
  auto model = make_model(delayed);
  CostModel cm(delayed, *model);
  double whole = 0.0;
  for (const Bucket& b : make_buckets(model->tensors(), 1 << 20, 25 << 20))
    whole += cm.collectives().best(CollectiveKind::kAllReduce, 4.0 * static_cast<double>(b.end - b.begin)).time_s;
  RunResult off = run_training(delayed);
  RunResult on = run_training(config("none", 0));
  RunResult stale = run_training(config("delay_allreduce", 1));
  ASSERT_EQ(off.disposition, Disposition::kPassed) << off.message;
  EXPECT_NEAR(off.modeled_exposed_s[0][1], whole, 1e-12 * whole);
  EXPECT_LT(on.modeled_exposed_s[0][1], whole);
  const StepTimes& s = stale.modeled_steps[0][1];
  const double compute = s.phase_s[static_cast<size_t>(Phase::kForward)] +
                         s.phase_s[static_cast<size_t>(Phase::kBackward)] +
                         s.phase_s[static_cast<size_t>(Phase::kOptimizer)];
  EXPECT_NEAR(stale.modeled_exposed_s[0][1], std::max(0.0, whole - compute), 1e-9 * whole);
  EXPECT_LT(stale.modeled_exposed_s[0][1], off.modeled_exposed_s[0][1]);

  // Refused: overlap set true, or another sync kind.
  std::vector<ConfigIssue> issues;
  config_from_json(json{{"training", {{"pitfall", "delay_allreduce"}}}, {"sync", {{"overlap", true}}}}, issues);
  ASSERT_FALSE(issues.empty());
  EXPECT_EQ(issues[0].path, "sync.overlap");
  issues.clear();
  config_from_json(json::parse(R"({"model": {"kind": "quadratic", "a": [[1]], "b": [[0]], "initial_w": [1]},
      "data": {"kind": "none"}, "training": {"pitfall": "delay_allreduce"}, "sync": {"kind": "local_sgd"}})"),
                   issues);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].path, "training.pitfall");
}

// ---- Validation -----------------------------------------------------------------------------------------------------

TEST(PitfallValidation, RefusedWhereTheMistakeHasNoEffectOrIsNotModeled) {
  const json inline_data = {{"kind", "inline"}, {"ranks", json::parse(R"([[{"x": [[1]], "y": [[0]]}]])")}};
  auto issues_of = [&](json j) {
    if (!j.contains("model")) j["model"] = {{"kind", "linear"}, {"layers", {1, 1}}, {"loss", "mse"}};
    if (!j.contains("data")) j["data"] = inline_data;
    std::vector<ConfigIssue> issues;
    config_from_json(j, issues);
    return issues;
  };
  struct Case {
    json j;
    const char* words;
  };
  const std::vector<Case> refused = {
      {{{"training", {{"pitfall", "zero_grad_in_loop"}}}}, "accumulation_steps >= 2"},
      {{{"training", {{"pitfall", "mean_of_means"}, {"accumulation_steps", 2}}},
        {"model", {{"kind", "mlp"}, {"layers", {8, 4}}, {"loss", "mse"}}},
        {"data", {{"kind", "teacher"}, {"teacher", {{"in_dim", 8}, {"out_dim", 4}, {"task", "regression"}}}}}},
       "data.kind \"inline\""},
      {{{"training", {{"pitfall", "mean_of_means"}, {"accumulation_steps", 2}}},
        {"precision", {{"mode", "bf16_mixed"}}}},
       "fp32 only"},
      {{{"training", {{"pitfall", "zero_grad_in_loop"}, {"accumulation_steps", 2}, {"mode", "timing"}}},
        {"model", {{"kind", "gpt2-small"}}},
        {"data", {{"kind", "none"}}}},
       "timing-only"},
      {{{"training", {{"pitfall", "zero_grad_in_loop"}, {"accumulation_steps", 2}}},
        {"sync", {{"kind", "parameter_server"}}}},
       "sync.kind \"allreduce\" only"},
      {{{"training", {{"pitfall", "mean_of_means"}, {"accumulation_steps", 2}}}, {"sync", {{"kind", "local_sgd"}}}},
       "sync.kind \"allreduce\" only"},
  };
  for (const Case& c : refused) {
    auto issues = issues_of(c.j);
    bool found = false;
    for (const auto& i : issues) found = found || (i.path == "training.pitfall" && i.message.find(c.words) != std::string::npos);
    EXPECT_TRUE(found) << c.j.dump() << " -> " << (issues.empty() ? "no issue" : issues[0].path + ": " + issues[0].message);
  }
  EXPECT_TRUE(issues_of({{"training", {{"pitfall", "zero_grad_in_loop"}, {"accumulation_steps", 2}}}}).empty());
  EXPECT_TRUE(issues_of({{"training", {{"pitfall", "mean_of_means"}, {"accumulation_steps", 2}}}}).empty());
  auto unknown = issues_of({{"training", {{"pitfall", "zero_grad"}}}});
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0].path, "training.pitfall");
}

}  // namespace
}  // namespace gs
