// Delayed all-reduce (sync.staleness, sync.overlap) and local SGD (docs/design.md, section 2): the delayed
// recursion on a quadratic, exact; case BC16 of tests/data/strategy_cases.json; local SGD with H = 1 against all-reduce; post-local
// SGD's warm-up; validation of the new fields; the modeled clock of deferred and non-overlapped communication.
// Reference values come from recursions written here (in double, with their exactness checked), never from the code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include <fmt/format.h>

#include "sim/config/scenario.h"
#include "sim/cost/cost_model.h"
#include "sim/strategy/strategy.h"
#include "sim/validate/validate.h"
#include "tests/unit/cases.h"
#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

// True when x is a float exactly (so float arithmetic that produces it is exact).
bool is_float(double x) { return static_cast<double>(static_cast<float>(x)) == x; }

// A quadratic scenario: rank r's f_r(w) = 0.5 sum_i a_ri (w_i - b_ri)^2, one sample per rank and step.
json quadratic(int ranks, const json& a, const json& b, const json& w0, double lr, int steps) {
  return {{"name", "quad"},
          {"model", {{"kind", "quadratic"}, {"a", a}, {"b", b}, {"initial_w", w0}}},
          {"data", {{"kind", "none"}}},
          {"cluster", {{"ranks", ranks}}},
          {"training", {{"steps", steps}, {"eval_every", 0}, {"optimizer", {{"kind", "sgd"}, {"lr", lr}}}}},
          {"report", {{"trace", true}}}};
}

json teacher_mlp(int ranks, int steps, double momentum) {
  return {{"name", "mlp"},
          {"model", {{"kind", "mlp"}, {"layers", {8, 16, 4}}, {"loss", "cross_entropy"}}},
          {"data", {{"kind", "teacher"}, {"batch_per_rank", 4},
                    {"teacher", {{"in_dim", 8}, {"hidden", 12}, {"out_dim", 4}, {"train_samples", 4096},
                                 {"eval_samples", 64}}}}},
          {"cluster", {{"ranks", ranks}, {"share_identical", false}}},
          {"training", {{"steps", steps}, {"eval_every", 0}, {"seed", 3},
                        {"optimizer", {{"kind", "sgd"}, {"lr", 0.1}, {"momentum", momentum}}}}},
          {"report", {{"trace", true}}}};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- Delayed all-reduce: x_{t+1} = x_t for t < s, x_{t+1} = x_t - lr * g(x_{t-s}) after -------------------------

// Two ranks, two coordinates; every value below is a short binary fraction, so float arithmetic is exact and the
// simulator must reproduce the double recursion bit for bit (checked: every reference value is a float).
TEST(DelayedAllReduce, QuadraticFollowsTheDelayedRecursionExactly) {
  const std::vector<std::vector<double>> a = {{1.0, 0.5}, {3.0, 1.5}}, b = {{0.0, 4.0}, {2.0, -4.0}};
  const std::vector<double> w0 = {1.0, 2.0};
  const double lr = 0.125;
  const int T = 6;
  // The averaged gradient at x: (1/N) sum_r a_r (x - b_r).
  auto grad = [&](const std::vector<double>& x) {
    std::vector<double> g(2, 0.0);
    for (size_t i = 0; i < 2; ++i) {
      for (size_t r = 0; r < 2; ++r) {
        const double gr = a[r][i] * (x[i] - b[r][i]);
        EXPECT_TRUE(is_float(gr)) << gr;
        g[i] += gr;
      }
      g[i] /= 2.0;
      EXPECT_TRUE(is_float(lr * g[i])) << g[i];
    }
    return g;
  };
  std::vector<std::vector<std::vector<double>>> expected_by_s;
  for (int s : {0, 1, 2}) {
    std::vector<std::vector<double>> x = {w0};  // x[t] = parameters entering step t
    for (int t = 0; t < T; ++t) {
      std::vector<double> next = x[static_cast<size_t>(t)];
      if (t >= s) {
        const std::vector<double> g = grad(x[static_cast<size_t>(t - s)]);
        for (size_t i = 0; i < 2; ++i) next[i] -= lr * g[i];
      }
      for (double v : next) ASSERT_TRUE(is_float(v)) << "the reference left float range: " << v;
      x.push_back(next);
    }
    expected_by_s.push_back(x);
  }
  // The delayed trajectories really differ from the synchronous one (the test can fail).
  EXPECT_NE(expected_by_s[1][3], expected_by_s[0][3]);
  EXPECT_NE(expected_by_s[2][3], expected_by_s[1][3]);
  EXPECT_EQ(expected_by_s[2][2], expected_by_s[2][0]);  // the pipeline fills: nothing applied at steps 0 and 1
  for (int s : {0, 1, 2}) {
    for (bool share : {true, false}) {
      json cfg = quadratic(2, a, b, w0, lr, T);
      cfg["sync"] = {{"staleness", s}};
      cfg["cluster"]["share_identical"] = share;
      auto runs = test::run_scenario_text(cfg.dump());
      for (int t = 0; t < T; ++t) {
        for (size_t r = 0; r < 2; ++r) {
          auto p = test::params_after(runs[0], static_cast<size_t>(t), r);
          ASSERT_EQ(p.size(), 2u);
          for (size_t i = 0; i < 2; ++i)
            EXPECT_EQ(static_cast<double>(p[i]), expected_by_s[static_cast<size_t>(s)][static_cast<size_t>(t + 1)][i])
                << fmt::format("s={} share={} after step {} rank {} coordinate {}", s, share, t + 1, r, i);
        }
      }
    }
  }
}

// A cast compressor on the wire: fp16 holds these gradients exactly, so the delayed recursion is still exact (the
// compressed reduction delivers into the ring like the plain one).
TEST(DelayedAllReduce, CompressedWireFollowsTheSameRecursion) {
  const double lr = 0.25;
  const int T = 5, s = 1;
  json cfg = quadratic(2, {{1.0}, {2.0}}, {{0.0}, {2.0}}, {0.0}, lr, T);
  cfg["sync"] = {{"staleness", s}};
  cfg["compression"] = {{"kind", "fp16"}};
  auto runs = test::run_scenario_text(cfg.dump());
  // g(x) = (x + 2 (x - 2)) / 2 = 1.5 x - 2.
  std::vector<double> x = {0.0};
  for (int t = 0; t < T; ++t) {
    double next = x.back();
    if (t >= s) next -= lr * (1.5 * x[static_cast<size_t>(t - s)] - 2.0);
    ASSERT_TRUE(is_float(next));
    x.push_back(next);
    EXPECT_EQ(static_cast<double>(test::params_after(runs[0], static_cast<size_t>(t), 1)[0]), next) << "step " << t + 1;
  }
}

// A static power-of-two loss scale is exact: each gradient must be unscaled with the scale its own backward used, so a
// delayed run with the scale equals the delayed run without it bit for bit.
TEST(DelayedAllReduce, LossScaledGradientsAreUnscaledWhenTheyArrive) {
  json cfg = teacher_mlp(2, 6, 0.9);
  cfg["sync"] = {{"staleness", 2}};
  auto plain = test::run_scenario_text(cfg.dump());
  cfg["precision"] = {{"loss_scale", "static"}, {"initial_scale", 1024.0}};
  auto scaled = test::run_scenario_text(cfg.dump());
  EXPECT_EQ(plain[0]["trace"]["params"], scaled[0]["trace"]["params"]);
}

// Dynamic loss scaling from a scale far too high: the first k gradients overflow in fp16 and the scaler skips them
// (halving the scale each time). Under a delayed update a skipped gradient is dropped from the ring, never applied:
// the parameters stay at their initial values through step k + s (k skipped, then the pipeline's s steps of fill),
// and move at step k + s + 1.
TEST(DelayedAllReduce, GradientsTheScalerSkipsAreNeverApplied) {
  for (int s : {1, 2}) {
    json cfg = teacher_mlp(2, 14, 0.0);
    cfg["sync"] = {{"staleness", s}};
    cfg["precision"] = {{"mode", "fp16_mixed"}, {"loss_scale", "dynamic"}, {"initial_scale", 16777216.0}};
    auto runs = test::run_scenario_text(cfg.dump());
    const json& skipped = runs[0]["precision"]["skipped_step_list"];
    size_t k = 0;
    while (k < skipped.size() && skipped[k].get<size_t>() == k + 1) ++k;
    ASSERT_GE(k, 1u) << "the scale must overflow at first: " << skipped.dump();
    ASSERT_LT(k + static_cast<size_t>(s), 13u) << skipped.dump();
    auto init = runs[0]["trace"]["initial"].get<std::vector<float>>();
    for (size_t t = 0; t < k + static_cast<size_t>(s); ++t)
      EXPECT_TRUE(same_bits(test::params_after(runs[0], t, 0), init)) << "s=" << s << " k=" << k << " step " << t + 1;
    auto moved = test::params_after(runs[0], k + static_cast<size_t>(s), 0);
    EXPECT_FALSE(same_bits(moved, init)) << "s=" << s << " k=" << k;
    for (float v : moved) ASSERT_TRUE(std::isfinite(v));
  }
}

// The shared fast path also serves s > 0 (one shared ring): the same bits as one ring per rank, and every replica
// equal after every step.
TEST(DelayedAllReduce, SharedRingEqualsPerRankRingsBitForBit) {
  for (int s : {1, 3}) {
    json cfg = teacher_mlp(3, 7, 0.9);
    cfg["sync"] = {{"staleness", s}};
    auto separate = test::run_scenario_text(cfg.dump());
    cfg["cluster"]["share_identical"] = true;
    auto shared = test::run_scenario_text(cfg.dump());
    for (size_t t = 0; t < 7; ++t) {
      auto r0 = test::params_after(separate[0], t, 0);
      EXPECT_TRUE(same_bits(r0, test::params_after(separate[0], t, 2))) << "s=" << s << " step " << t + 1;
      EXPECT_TRUE(same_bits(r0, test::params_after(shared[0], t, 1))) << "s=" << s << " step " << t + 1;
    }
    // Nothing moves while the pipeline fills.
    auto init = separate[0]["trace"]["initial"].get<std::vector<float>>();
    EXPECT_TRUE(same_bits(test::params_after(separate[0], static_cast<size_t>(s) - 1, 0), init));
    EXPECT_FALSE(same_bits(test::params_after(separate[0], static_cast<size_t>(s), 0), init));
  }
}

// sync.overlap false changes the modeled clock only: the parameters are the same bits.
TEST(DelayedAllReduce, OverlapOffKeepsTheArithmetic) {
  for (int s : {0, 1}) {
    json cfg = teacher_mlp(2, 5, 0.9);
    cfg["sync"] = {{"staleness", s}};
    auto on = test::run_scenario_text(cfg.dump());
    cfg["sync"]["overlap"] = false;
    auto off = test::run_scenario_text(cfg.dump());
    EXPECT_EQ(on[0]["trace"]["params"], off[0]["trace"]["params"]) << "s=" << s;
  }
}

// ---- Modeled clock -------------------------------------------------------------------------------------------------

TEST(DeferredChains, ExposedIsWhatDoesNotFitTheWindowOrTheStream) {
  // Backward ends at 10, one step's compute is 12; chains ready at 2, 5, 8.
  // Light: durations 3 each end at 11 (1 exposed in the step alone); one step later it all fits.
  OverlapResult light = schedule_chains(10.0, {2.0, 5.0, 8.0}, {3.0, 3.0, 3.0});
  EXPECT_EQ(light.exposed_s, 1.0);
  OverlapResult l1 = defer_chains(light, 10.0, 12.0, 1);
  EXPECT_EQ(l1.exposed_s, 0.0);
  EXPECT_EQ(l1.overlapped_s, 9.0);
  // Heavy: durations 10 each end at 12, 22, 32 (22 exposed alone). With s = 1 the window ends at 22: the latency
  // bound exposes 10, the stream carries 30 s of communication per 12 s step: 18 exposed; s = 2 leaves the stream's 18.
  OverlapResult heavy = schedule_chains(10.0, {2.0, 5.0, 8.0}, {10.0, 10.0, 10.0});
  EXPECT_EQ(heavy.exposed_s, 22.0);
  EXPECT_EQ(defer_chains(heavy, 10.0, 12.0, 1).exposed_s, 18.0);
  EXPECT_EQ(defer_chains(heavy, 10.0, 12.0, 2).exposed_s, 18.0);
  EXPECT_EQ(defer_chains(heavy, 10.0, 12.0, 2).overlapped_s, 12.0);
  // s = 0 is the step alone.
  EXPECT_EQ(defer_chains(heavy, 10.0, 12.0, 0).exposed_s, 22.0);
}

// GPT-2 small on 8 ranks, timing only. Communication-heavy: one sample per rank at the bf16 tensor-core rate on PCIe
// (the all-reduce takes about 3x a step's compute); compute-heavy: 32 samples at fp32 on NVLink.
RunConfig timing_config(const std::string& hardware, int64_t staleness, bool overlap, bool communication_heavy = true) {
  RunConfig c;
  c.model.kind = "gpt2-small";
  c.data.kind = "none";
  c.data.batch_per_rank = communication_heavy ? 1 : 32;
  c.precision.mode = communication_heavy ? "bf16_mixed" : "fp32";
  c.training.mode = "timing";
  c.training.steps = 3;
  c.cluster.ranks = 8;
  c.cluster.hardware = hardware;
  c.sync.staleness = staleness;
  c.sync.overlap = overlap;
  return c;
}

// The whole communication of a step, from the buckets and the collective model: sum of each bucket's all-reduce.
double whole_communication_s(const RunConfig& c) {
  auto model = make_model(c);
  CostModel cm(c, *model);
  double total = 0.0;
  for (const Bucket& b : make_buckets(model->tensors(), 1 << 20, 25 << 20))
    total += cm.collectives().best(CollectiveKind::kAllReduce, 4.0 * static_cast<double>(b.end - b.begin)).time_s;
  return total;
}

// One step's compute stream on the modeled clock (no stragglers): forward + backward + optimizer.
double step_compute_s(const StepTimes& s) {
  return s.phase_s[static_cast<size_t>(Phase::kForward)] + s.phase_s[static_cast<size_t>(Phase::kBackward)] +
         s.phase_s[static_cast<size_t>(Phase::kOptimizer)];
}

TEST(DelayedAllReduceClock, OverlapOffExposesTheWholeCommunication) {
  for (const char* hw : {"h100-pcie-8", "h100-sxm-8"}) {
    RunResult off = run_training(timing_config(hw, 0, false));
    RunResult on = run_training(timing_config(hw, 0, true));
    ASSERT_EQ(off.disposition, Disposition::kPassed) << off.message;
    ASSERT_EQ(on.disposition, Disposition::kPassed) << on.message;
    const double whole = whole_communication_s(timing_config(hw, 0, false));
    for (size_t r = 0; r < 8; ++r) {
      EXPECT_NEAR(off.modeled_exposed_s[r][1], whole, 1e-12 * whole) << hw;
      EXPECT_NEAR(off.modeled_overlapped_s[r][1], 0.0, 1e-12 * whole) << hw;
      EXPECT_LT(on.modeled_exposed_s[r][1], whole) << hw << ": with overlap some communication hides in backward";
    }
    // The step is compute + the whole communication.
    const StepTimes& s = off.modeled_steps[0][1];
    EXPECT_NEAR(s.step_s, step_compute_s(s) + whole, 1e-12 * s.step_s) << hw;
  }
}

// Communication-heavy: the communication D is larger than a step's compute C. Deferring by s >= 1 removes the
// exposed tail down to the stream bound max(0, D - C), which no staleness removes.
TEST(DelayedAllReduceClock, ExposedCommunicationFallsWithStaleness) {
  const std::string hw = "h100-pcie-8";
  const double D = whole_communication_s(timing_config(hw, 0, true));
  std::vector<double> exposed;
  for (int64_t s : {0, 1, 2, 4}) {
    RunResult r = run_training(timing_config(hw, s, true));
    ASSERT_EQ(r.disposition, Disposition::kPassed) << r.message;
    exposed.push_back(r.modeled_exposed_s[0][1]);
    const double C = step_compute_s(r.modeled_steps[0][1]);
    if (s == 0) {
      ASSERT_GT(D, 1.2 * C) << "the configuration is communication-heavy (the stream bound D - C is well above 0)";
      EXPECT_GT(exposed[0], D - C) << "the synchronous step exposes more than the stream bound";
    } else {
      EXPECT_NEAR(exposed.back(), std::max(0.0, D - C), 1e-9 * D) << "s=" << s;
    }
    EXPECT_NEAR(r.modeled_steps[0][1].step_s, C + exposed.back(), 1e-9 * D) << "s=" << s;
  }
  EXPECT_LT(exposed[1], exposed[0]);
  EXPECT_LE(exposed[2], exposed[1]);
  EXPECT_LE(exposed[3], exposed[2]);
  // Without overlap the whole communication is exposed at s = 0, and one step of delay hides all of it that fits.
  RunResult off0 = run_training(timing_config("h100-sxm-8", 0, false, false));
  RunResult off1 = run_training(timing_config("h100-sxm-8", 1, false, false));
  const double d_nvlink = whole_communication_s(timing_config("h100-sxm-8", 0, false, false));
  const double c_nvlink = step_compute_s(off1.modeled_steps[0][1]);
  ASSERT_LT(d_nvlink, c_nvlink) << "NVLink: the communication fits in a step's compute";
  EXPECT_NEAR(off0.modeled_exposed_s[0][1], d_nvlink, 1e-12 * d_nvlink);
  EXPECT_EQ(off1.modeled_exposed_s[0][1], 0.0);
}

// ---- Local SGD -----------------------------------------------------------------------------------------------------

json bc16_scenario(const json& c) {
  const json& in = c["input"];
  const int P = in["param_tensors"].get<int>();
  const double x0 = in["x0"].get<double>();
  // worker_losses: 0.5*1*(x-0)^2 and 0.5*2*(x-2)^2 on every coordinate.
  json a = {std::vector<double>(static_cast<size_t>(P), 1.0), std::vector<double>(static_cast<size_t>(P), 2.0)};
  json b = {std::vector<double>(static_cast<size_t>(P), 0.0), std::vector<double>(static_cast<size_t>(P), 2.0)};
  json s = quadratic(in["workers"].get<int>(), a, b, std::vector<double>(static_cast<size_t>(P), x0),
                     in["lr"].get<double>(), in["T"].get<int>());
  s["sync"] = {{"kind", "local_sgd"}, {"period", in["H"].get<int>()}};
  s["training"]["eval_every"] = 1;
  return s;
}

TEST(CasesBC16, LocalSgdAveragesAfterStepsHAnd2H) {
  json c = load_case("BC16");
  ASSERT_FALSE(c.is_null()) << "strategy_cases.json not found";
  auto runs = test::run_scenario_text(bc16_scenario(c).dump());
  const json& e = c["expected"]["trace"];
  const size_t P = c["input"]["param_tensors"].get<size_t>();
  auto all_equal = [&](size_t step, size_t rank, double v) {
    auto p = test::params_after(runs[0], step, rank);
    ASSERT_EQ(p.size(), P);
    for (size_t i = 0; i < P; ++i) EXPECT_EQ(static_cast<double>(p[i]), v) << "step " << step + 1 << " rank " << rank;
  };
  all_equal(0, 0, e["t1"][0].get<double>());
  all_equal(0, 1, e["t1"][1].get<double>());
  all_equal(1, 0, e["t2_after_avg"].get<double>());
  all_equal(1, 1, e["t2_after_avg"].get<double>());
  all_equal(2, 0, e["t3"][0].get<double>());
  all_equal(2, 1, e["t3"][1].get<double>());
  for (size_t r = 0; r < 2; ++r) all_equal(3, r, c["expected"]["final_all_tensors_both_workers"].get<double>());
  // The wrong conventions give other numbers (the test can tell them apart).
  EXPECT_NE(c["wrong_value"]["note_pytorch_convention_after_steps_1_1plusH"]["worker0"].get<double>(),
            c["expected"]["final_all_tensors_both_workers"].get<double>());
  // Evaluation between averages uses the replicas' average: after step 3 rank 0's f_0 = 0.5 * 1 * x^2 per coordinate
  // at x = (t3[0] + t3[1]) / 2, not at rank 0's own replica.
  const double avg = (e["t3"][0].get<double>() + e["t3"][1].get<double>()) / 2.0;
  const auto& series = runs[0]["convergence"]["series"];
  EXPECT_DOUBLE_EQ(series[2]["eval_loss"].get<double>(), 0.5 * static_cast<double>(P) * avg * avg);
  // After an averaging step the replicas are the average.
  const double t4 = c["expected"]["final_all_tensors_both_workers"].get<double>();
  EXPECT_DOUBLE_EQ(series[3]["eval_loss"].get<double>(), 0.5 * static_cast<double>(P) * t4 * t4);
  EXPECT_FALSE(runs[0]["replicas_identical"].get<bool>());
}

// H = 1 with plain SGD: (1/N) sum_r (w - lr g_r / b) = w - lr (sum_r g_r) / (N b) in exact arithmetic, so local SGD
// equals all-reduce; in floats the parameters are rounded after each rank's update and then summed, while all-reduce
// rounds the gradient sum first, so the two agree to rounding, not bit for bit (a few ulps per step, relative error far
// below 1e-5 over these steps).
TEST(LocalSgd, PeriodOneWithPlainSgdEqualsAllReduceToRounding) {
  const int steps = 6;
  json cfg = teacher_mlp(4, steps, 0.0);
  auto ar = test::run_scenario_text(cfg.dump());
  cfg["sync"] = {{"kind", "local_sgd"}, {"period", 1}};
  auto local = test::run_scenario_text(cfg.dump());
  EXPECT_TRUE(local[0]["replicas_identical"].get<bool>());
  bool any_bit_differs = false;
  for (size_t t = 0; t < steps; ++t) {
    auto ref = test::params_after(ar[0], t, 0);
    auto p0 = test::params_after(local[0], t, 0);
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      num += (double(p0[i]) - ref[i]) * (double(p0[i]) - ref[i]);
      den += double(ref[i]) * ref[i];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-6) << "step " << t + 1;
    any_bit_differs = any_bit_differs || !same_bits(p0, ref);
    for (size_t r = 1; r < 4; ++r) EXPECT_TRUE(same_bits(p0, test::params_after(local[0], t, r))) << "step " << t + 1;
  }
  // And the difference is real (so "to rounding" is the right claim for this data).
  EXPECT_TRUE(any_bit_differs);
}

// Post-local SGD: the warm-up steps are the synchronous all-reduce (same sums in the same order: the same bits); the
// local phase then lets replicas drift until its H-th step.
TEST(LocalSgd, WarmupStepsAreTheAllReduceBitForBit) {
  const int steps = 7;
  json cfg = teacher_mlp(3, steps, 0.9);
  auto ar = test::run_scenario_text(cfg.dump());
  cfg["sync"] = {{"kind", "local_sgd"}, {"period", 3}, {"warmup_steps", 2}};
  auto local = test::run_scenario_text(cfg.dump());
  for (size_t t = 0; t < 2; ++t)
    for (size_t r = 0; r < 3; ++r)
      EXPECT_TRUE(same_bits(test::params_after(local[0], t, r), test::params_after(ar[0], t, 0))) << t + 1;
  // Local steps 3, 4 differ between ranks; step 5 (the third after the warm-up) averages.
  EXPECT_FALSE(same_bits(test::params_after(local[0], 2, 0), test::params_after(local[0], 2, 1)));
  EXPECT_FALSE(same_bits(test::params_after(local[0], 3, 0), test::params_after(local[0], 3, 2)));
  EXPECT_TRUE(same_bits(test::params_after(local[0], 4, 0), test::params_after(local[0], 4, 2)));
  EXPECT_FALSE(same_bits(test::params_after(local[0], 5, 0), test::params_after(local[0], 5, 1)));
}

// Momentum with and without averaging the optimizer state, against a reference local SGD written here (torch SGD
// momentum: buf = mu buf + g, w -= lr buf) on a two-rank quadratic.
TEST(LocalSgd, OptimizerStateAveragedOrKeptPerRank) {
  const double lr = 0.1, mu = 0.5;
  const int H = 2, T = 6;
  const std::vector<double> a = {1.0, 3.0}, b = {0.0, 2.0};
  std::vector<double> final_by_setting;
  for (bool average_state : {false, true}) {
    std::vector<double> w = {0.5, 0.5}, m = {0.0, 0.0};
    std::vector<std::vector<double>> ref;  // ref[t][r]
    for (int t = 0; t < T; ++t) {
      for (size_t r = 0; r < 2; ++r) {
        const double g = a[r] * (w[r] - b[r]);
        m[r] = t == 0 ? g : mu * m[r] + g;
        w[r] -= lr * m[r];
      }
      if ((t + 1) % H == 0) {
        w[0] = w[1] = (w[0] + w[1]) / 2.0;
        if (average_state) m[0] = m[1] = (m[0] + m[1]) / 2.0;
      }
      ref.push_back(w);
    }
    json cfg = quadratic(2, {{a[0]}, {a[1]}}, {{b[0]}, {b[1]}}, {0.5}, lr, T);
    cfg["training"]["optimizer"]["momentum"] = mu;
    cfg["sync"] = {{"kind", "local_sgd"}, {"period", H}, {"average_optimizer_state", average_state}};
    auto runs = test::run_scenario_text(cfg.dump());
    for (size_t t = 0; t < static_cast<size_t>(T); ++t)
      for (size_t r = 0; r < 2; ++r)
        EXPECT_NEAR(test::params_after(runs[0], t, r)[0], ref[t][r], 1e-6)
            << fmt::format("average_state={} step {} rank {}", average_state, t + 1, r);
    final_by_setting.push_back(ref[T - 1][0]);
  }
  // The two settings part after the first average (so the test can tell them apart).
  EXPECT_GT(std::fabs(final_by_setting[0] - final_by_setting[1]), 1e-3);
}

// Communication only on averaging steps: bytes on the measured and modeled clocks, and in timing-only runs.
TEST(LocalSgd, CommunicatesOnlyOnAveragingSteps) {
  const int H = 3, steps = 7;
  json cfg = teacher_mlp(2, steps, 0.0);
  cfg["sync"] = {{"kind", "local_sgd"}, {"period", H}};
  Scenario sc = parse_scenario(cfg.dump(), "<test>");
  RunResult r = run_training(sc.runs[0].config);
  ASSERT_EQ(r.disposition, Disposition::kPassed) << r.message;
  const double n = static_cast<double>(r.num_params);
  for (size_t t = 0; t < steps; ++t) {
    const bool avg = (t + 1) % H == 0;
    // A ring all-reduce of the parameters: 2(N-1)/N * 4n bytes per rank.
    EXPECT_EQ(r.steps[0][t].bytes_sent, avg ? static_cast<uint64_t>(4.0 * n) : 0u) << "step " << t + 1;
    EXPECT_EQ(r.modeled_steps[1][t].bytes_sent, avg ? static_cast<uint64_t>(4.0 * n) : 0u) << "step " << t + 1;
  }
  RunConfig timing;
  timing.model.kind = "gpt2-small";
  timing.data.kind = "none";
  timing.training.mode = "timing";
  timing.training.steps = steps;
  timing.cluster.ranks = 8;
  timing.sync.kind = "local_sgd";
  timing.sync.period = H;
  timing.sync.warmup_steps = 1;
  RunResult tr = run_training(timing);
  ASSERT_EQ(tr.disposition, Disposition::kPassed) << tr.message;
  const double params = static_cast<double>(tr.num_params);
  for (size_t t = 0; t < steps; ++t) {
    const double bytes = static_cast<double>(tr.modeled_steps[0][t].bytes_sent);
    // Per rank on the wire: a ring all-reduce's 2(N-1)/N = 7/4 of the 4n-byte buffer on 8 ranks.
    if (t == 0) {
      EXPECT_NEAR(bytes, 1.75 * 4.0 * params, 64.0);  // the warm-up all-reduces the gradient (bucket sums rounded down)
    } else {
      EXPECT_EQ(bytes, t % H == 0 ? 1.75 * 4.0 * params : 0.0) << "step " << t + 1;
    }
  }
}

// A warm-up covering the whole run makes every step a synchronous all-reduce step, so the report claims identical
// replicas (and the trace, which the report checks the claim against, agrees); one local step at the end breaks it.
TEST(LocalSgd, WarmupCoveringTheRunReportsIdenticalReplicas) {
  const int steps = 5;
  for (int warmup : {steps, steps + 3, steps - 1}) {
    json cfg = teacher_mlp(3, steps, 0.9);
    cfg["sync"] = {{"kind", "local_sgd"}, {"period", 4}, {"warmup_steps", warmup}};
    const json run = test::run_scenario_text(cfg.dump())[0];
    const bool all_sync = warmup >= steps;
    EXPECT_EQ(run["replicas_identical"], all_sync) << "warmup " << warmup;
    const bool last_equal = same_bits(test::params_after(run, steps - 1, 0), test::params_after(run, steps - 1, 2));
    EXPECT_EQ(last_equal, all_sync) << "warmup " << warmup;
  }
}

// Averaging with sync.average_optimizer_state issues one all-reduce of 4n bytes per buffer (the parameters, then
// each state buffer), one after the other after the optimizer: the averaging step's exposed communication on the
// modeled clock is buffers x the collective model's time for 4n bytes (SGD with momentum: 2 buffers; Adam: 3; state
// not averaged: 1).
TEST(LocalSgdClock, AveragingPricesOneAllReducePerBuffer) {
  struct Case {
    std::string optimizer;
    double momentum;
    bool average_state;
    int buffers;
  };
  for (const Case& k : {Case{"sgd", 0.9, true, 2}, Case{"adam", 0.0, true, 3}, Case{"adam", 0.0, false, 1}}) {
    RunConfig c;
    c.model.kind = "gpt2-small";
    c.data.kind = "none";
    c.training.mode = "timing";
    c.training.steps = 4;
    c.training.optimizer.kind = k.optimizer;
    c.training.optimizer.momentum = k.momentum;
    c.cluster.ranks = 8;
    c.sync.kind = "local_sgd";
    c.sync.period = 2;
    c.sync.average_optimizer_state = k.average_state;
    RunResult r = run_training(c);
    ASSERT_EQ(r.disposition, Disposition::kPassed) << r.message;
    auto model = make_model(c);
    CostModel cm(c, *model);
    const double one = cm.collectives().best(CollectiveKind::kAllReduce, 4.0 * static_cast<double>(r.num_params)).time_s;
    EXPECT_NEAR(r.modeled_exposed_s[0][1], k.buffers * one, 1e-12 * k.buffers * one) << k.optimizer;
    EXPECT_EQ(r.modeled_exposed_s[0][0], 0.0) << "a local step communicates nothing";
    // Each buffer's ring all-reduce puts 2(N-1)/N = 7/4 of its 4n bytes on the wire per rank (8 ranks).
    EXPECT_EQ(r.modeled_steps[0][1].bytes_sent, static_cast<uint64_t>(k.buffers * 1.75 * 4.0 * r.num_params))
        << k.optimizer;
  }
}

// Local SGD under a persistent straggler (rank 1 at 2x): between averages rank 0 runs ahead; the averaging step waits
// for rank 1's whole lag (three local steps of it), not only for that step's difference.
TEST(LocalSgdClock, AveragingWaitsForTheLagOfEveryLocalStep) {
  RunConfig c;
  c.model.kind = "gpt2-small";
  c.data.kind = "none";
  c.training.mode = "timing";
  c.training.steps = 8;
  c.cluster.ranks = 2;
  c.cluster.stragglers.factors = json::array({1.0, 2.0});
  c.sync.kind = "local_sgd";
  c.sync.period = 4;
  RunResult r = run_training(c);
  ASSERT_EQ(r.disposition, Disposition::kPassed) << r.message;
  const double C0 = r.modeled_steps[0][0].step_s;  // a local step: compute only
  const double C1 = r.modeled_steps[1][0].step_s;
  EXPECT_NEAR(C1, 2.0 * C0, 1e-12 * C1);
  const double avg1 = r.modeled_steps[1][3].step_s;  // rank 1's averaging step: it is last, so it has no lag
  const double wait0 = r.modeled_steps[0][3].phase_s[static_cast<size_t>(Phase::kWait)];
  EXPECT_GE(wait0, 3.0 * (C1 - C0) + (C1 - C0) * (1.0 - 1e-12)) << "three local steps of lag and this step's own";
  // Rank 0's clock (the series) at step 4 is rank 1's: three slow local steps and the averaging step.
  EXPECT_NEAR(r.series[3].modeled_s, 3.0 * 2.0 * C0 + avg1, 1e-9 * r.series[3].modeled_s);
  EXPECT_NEAR(r.series[7].modeled_s, 2.0 * (3.0 * 2.0 * C0 + avg1), 1e-9 * r.series[7].modeled_s);
  // The averaging steps are synchronous, the local ones are not (each rank's own time).
  EXPECT_NEAR(r.modeled_steps[0][1].step_s, C0, 1e-12 * C0);
}

// ---- Validation ----------------------------------------------------------------------------------------------------

std::vector<ConfigIssue> issues_of(const json& sync) {
  json s = quadratic(2, {1.0}, {0.0}, {1.0}, 0.1, 3);
  s["sync"] = sync;
  try {
    parse_scenario(s.dump(), "bad.json");
  } catch (const ScenarioError& e) {
    return e.issues();
  }
  ADD_FAILURE() << "accepted: " << sync.dump();
  return {};
}

bool has_issue(const std::vector<ConfigIssue>& issues, const std::string& path, const std::string& fragment) {
  for (const auto& i : issues)
    if (i.path == path && i.message.find(fragment) != std::string::npos) return true;
  return false;
}

TEST(StalenessConfig, BadValuesAreRefusedWithTheirPath) {
  EXPECT_TRUE(has_issue(issues_of({{"staleness", -1}}), "sync.staleness", "an integer >= 0"));
  EXPECT_TRUE(has_issue(issues_of({{"staleness", 1.5}}), "sync.staleness", "an integer"));
  EXPECT_TRUE(has_issue(issues_of({{"staleness", "inf"}}), "sync.staleness", "an integer"));
  EXPECT_TRUE(has_issue(issues_of({{"staleness", 100000}}), "sync.staleness", "<= 1024"));
  EXPECT_TRUE(has_issue(issues_of({{"overlap", "no"}}), "sync.overlap", "true or false"));
  // The run has 3 steps: a delay of 3 would never apply an update (found by QA: it ran and "passed" untrained).
  EXPECT_TRUE(has_issue(issues_of({{"staleness", 3}}), "sync.staleness", "fewer than training.steps (3)"));
  EXPECT_TRUE(has_issue(issues_of({{"kind", "local_sgd"}, {"period", 0}}), "sync.period", "an integer >= 1"));
  EXPECT_TRUE(has_issue(issues_of({{"kind", "local_sgd"}, {"period", 2.5}}), "sync.period", "an integer"));
  EXPECT_TRUE(has_issue(issues_of({{"kind", "local_sgd"}, {"warmup_steps", -3}}), "sync.warmup_steps", ">= 0"));
  EXPECT_TRUE(has_issue(issues_of({{"kind", "local_sgd"}, {"average_optimizer_state", 1}}),
                        "sync.average_optimizer_state", "true or false"));
  // Fields of one strategy are refused under another, not ignored.
  EXPECT_TRUE(has_issue(issues_of({{"period", 4}}), "sync.period", "sync.kind is \"local_sgd\""));
  EXPECT_TRUE(has_issue(issues_of({{"kind", "local_sgd"}, {"staleness", 1}}), "sync.staleness",
                        "sync.kind is \"allreduce\""));
  EXPECT_TRUE(has_issue(issues_of({{"kind", "independent"}, {"overlap", false}}), "sync.overlap",
                        "sync.kind is \"allreduce\""));
}

}  // namespace
}  // namespace gs
