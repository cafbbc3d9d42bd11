// The compression pipeline (sim/compress/): cases BC05, BC10, BC11, BC13, BC14 of tests/data/strategy_cases.json
// through CompressedReduction on real rank threads; the error-feedback invariant for every lossy compressor; DGC's
// own invariant against an independent re-computation; PowerSGD on a low-rank gradient; bytes on the wire; config
// refusals; the 4-rank convergence sweep. Expected values come from the cases, from math, or from a reference
// computed here in double.
#include <gtest/gtest.h>

#include "tests/unit/cases.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <thread>

#include "kernels/rng.h"
#include "sim/compress/reduce.h"
#include "sim/strategy/strategy.h"
#include "sim/validate/validate.h"
#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

float case_value(const json& v) {
  if (v.is_string()) return v.get<std::string>() == "inf" ? std::numeric_limits<float>::infinity() : NAN;
  return static_cast<float>(v.get<double>());
}

// A CompressedReduction over `ranks` rank threads for a linear model [in, out] (bias optional); one bucket.
struct Harness {
  RunConfig cfg;
  std::unique_ptr<Model> model;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<CompressedReduction> red;
  size_t n = 0;

  Harness(const json& compression, int ranks, int64_t in, int64_t out, bool bias, int64_t seed = 1) {
    std::vector<ConfigIssue> issues;
    json j = {{"model", {{"kind", "linear"}, {"layers", {in, out}}, {"bias", bias}, {"loss", "mse"}}},
              {"data", {{"kind", "inline"}, {"ranks", json::array({json::array({{{"y", {{0.0}}}}})})}}},
              {"compression", compression}};
    cfg = config_from_json(j, issues);
    // data.ranks / model sizes are not checked here: only the compression section matters.
    cfg.cluster.ranks = ranks;
    cfg.training.seed = seed;
    model = make_model(cfg);
    n = model->num_params();
    comm = make_host_communicator(ranks);
    red = std::make_unique<CompressedReduction>(cfg, *model, *comm, ranks,
                                                std::vector<std::pair<size_t, size_t>>{{0, n}});
  }

  // One step: grads[r] (n each) are rank r's gradient sums; returns every rank's averaged gradient.
  std::vector<std::vector<float>> step(std::vector<std::vector<float>> grads, double S, int64_t t) {
    std::vector<std::thread> th;
    std::vector<PhaseClock> clocks(grads.size());
    for (size_t r = 0; r < grads.size(); ++r) {
      th.emplace_back([&, r] {
        clocks[r].begin_step();
        red->reduce(static_cast<int>(r), t, grads[r].data(), S, clocks[r]);
        clocks[r].end_step();
      });
    }
    for (auto& x : th) x.join();
    return grads;
  }
};

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// ---- BC05: fp16 all-reduce with divide pre | post | split ----------------------------------------------------------

TEST(CompressCases, BC05Fp16DivideModes) {
  json c = load_case("BC05");
  ASSERT_FALSE(c.is_null());
  const int N = c["input"]["N"].get<int>();
  std::vector<float> g;
  for (const auto& v : c["input"]["per_rank_fp16_grad"]) g.push_back(case_value(v));
  const std::map<std::string, json> expected = {{"split", c["expected"]["split_pre2_post4"]},
                                                {"post", c["wrong_value"]["post_divide_only"]},
                                                {"pre", c["wrong_value"]["pre_divide_only"]}};
  for (const auto& [mode, want] : expected) {
    Harness h({{"kind", "fp16"}, {"divide", mode}, {"measure_error", false}}, N, 2, 1, false);
    // One sample per rank: S = N, so the division is the case's division by N.
    auto out = h.step(std::vector<std::vector<float>>(static_cast<size_t>(N), g), N, 0);
    for (int r = 0; r < N; ++r)
      for (size_t i = 0; i < 2; ++i)
        EXPECT_EQ(bits(out[static_cast<size_t>(r)][i]), bits(case_value(want[i])))
            << "divide " << mode << " rank " << r << " element " << i << ": " << out[static_cast<size_t>(r)][i];
  }
  // The fp32 reference of the case: the split result equals it.
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(case_value(c["expected"]["split_pre2_post4"][i]), case_value(c["expected"]["reference_fp32_accumulate"][i]));
}

// ---- Casts send each rank's mean gradient (DDP's fp16_compress_hook) -------------------------------------------

// Two ranks of b = 16 samples (S = 32), every per-sample gradient 8000 in element 0: the rank's sum 128000 is past
// fp16's 65504, its mean 8000 is not. fp16_compress_hook casts the mean (8000), divides by N = 2 in fp16 (4000) and
// sums (8000): the all-reduced mean is 8000, finite, in every divide mode (post: 8000 + 8000 = 16000, / 2). Element
// 1: a mean of 1.25 * 2^-24 (an fp16 subnormal between 2^-24 and 2 * 2^-24): the hook rounds it to 2^-24, halves it
// to 2^-25, a tie that rounds to the even 0, so the mean is 0 (pre); casting the sum 20 * 2^-24 (exact in fp16) and
// dividing by 32 would give 2^-24 per rank instead. Element 2: 3 * 2^-24, exact, halved: 1.5 * 2^-24 ties to 2^-23;
// summed: 2^-22. (Checked with torch 1.13: `m.to(torch.float16).div_(2)` gives [4000, 0, 2^-23].)
TEST(CompressCast, CastsTheRankMeanNotItsSum) {
  const float tiny = std::ldexp(1.0f, -24);
  const std::vector<float> mean = {8000.0f, 1.25f * tiny, 3.0f * tiny};
  std::vector<float> sum(3);
  for (size_t i = 0; i < 3; ++i) sum[i] = 16.0f * mean[i];  // exact: a power of two
  const std::map<std::string, std::vector<float>> want = {
      {"pre", {8000.0f, 0.0f, 4.0f * tiny}},
      // post: the mean cast (1.25 -> 1 unit; 3 units exact), summed (2, 6 units), divided by 2 (1, 3 units).
      {"post", {8000.0f, tiny, 3.0f * tiny}},
      {"split", {8000.0f, tiny, 3.0f * tiny}}};  // N = 2: split is 2^0 before, 2 after, as post
  for (const auto& [mode, w] : want) {
    Harness h({{"kind", "fp16"}, {"divide", mode}, {"measure_error", false}}, 2, 3, 1, false);
    auto out = h.step({sum, sum}, 32.0, 0);
    for (int r = 0; r < 2; ++r)
      for (size_t i = 0; i < 3; ++i)
        EXPECT_EQ(bits(out[static_cast<size_t>(r)][i]), bits(w[i]))
            << "divide " << mode << " rank " << r << " element " << i << ": " << out[static_cast<size_t>(r)][i];
  }
}

// The same 8000 x 16 case as a training run: a linear model whose per-sample gradient is 8000 in its one weight, two
// ranks of 16 samples, fp16 wire. The step-1 gradient is finite (the run passes), and the weight moves by lr * 8000.
TEST(CompressCast, Fp16RunWithLargeMeanGradientStaysFinite) {
  // MSE 0.5 (w x - y)^2 with w = 0, x = 1, y = -8000: dL/dw = (w x - y) x = 8000 for every sample.
  json y = json::array();
  for (int i = 0; i < 16; ++i) y.push_back({-8000.0});
  const json rank = json::array({{{"y", y}}});  // one micro-batch of 16 samples
  json s = {{"name", "cast_mean"},
            {"model", {{"kind", "linear"}, {"layers", {1, 1}}, {"bias", false}, {"loss", "mse"},
                       {"initial_weights", {{0.0}}}}},
            {"data", {{"kind", "inline"}, {"ranks", {rank, rank}}}},
            {"cluster", {{"ranks", 2}}},
            {"training", {{"steps", 1}, {"eval_every", 0}, {"optimizer", {{"kind", "sgd"}, {"lr", 1e-6}}}}},
            {"compression", {{"kind", "fp16"}}},
            {"report", {{"trace", true}}}};
  auto runs = test::run_scenario_text(s.dump());  // expects "passed" (before: diverged, an inf gradient)
  ASSERT_EQ(runs.size(), 1u);
  // w1 = 0 - lr * 8000, one fp32 rounding (SGD: w = fma(-lr, d, w)).
  EXPECT_EQ(test::params_after(runs[0], 0, 0)[0], std::fma(-1e-6f, 8000.0f, 0.0f));
}

// ---- compression.accumulate: the cast all-reduce's sum in the wire format or in fp32 -------------------------------

// bf16, four ranks of one sample (S = N = 4). Element 0: rank 0 sends 256, ranks 1-3 send 1. divide post, wire sum:
// 256 + 1 = 257 is a tie between the bf16 neighbours 256 and 258 (8 significand bits: spacing 2 at 256) and rounds
// to the even 256, at every hop: 256 / 4 = 64. divide pre, wire: 64 + 0.25 = 64.25 ties between 64 and 64.5 (spacing
// 0.5) and rounds to 64, at every hop: 64. accumulate fp32 keeps the ones: (256 + 3) / 4 = 64.75 in both modes.
// Element 1: every rank 1, mean 1 everywhere. (Checked with torch 1.13 bfloat16 adds.) The exact fp32 mean is 64.75,
// so the wire sum's max relative error is 0.75 / 64.75 and its L2 relative error 0.75 / sqrt(64.75^2 + 1); fp32: 0.
// Bytes for n = 2, N = 4: wire (ring all-reduce of 4 bytes) 2 x 3/4 x 4 = 6 per rank; fp32 (reduce-scatter of the
// 4 cast bytes, all-gather of the 8 fp32 bytes) 3/4 x 4 + 3/4 x 8 = 9.
TEST(CompressCast, Fp32AccumulationKeepsWhatTheWireSumSwamps) {
  const std::vector<std::vector<float>> g = {{256.0f, 1.0f}, {1.0f, 1.0f}, {1.0f, 1.0f}, {1.0f, 1.0f}};
  for (const char* divide : {"pre", "post"}) {
    for (const char* acc : {"wire", "fp32"}) {
      const bool fp32 = std::string(acc) == "fp32";
      Harness h({{"kind", "bf16"}, {"divide", divide}, {"accumulate", acc}}, 4, 2, 1, false);
      auto out = h.step(g, 4.0, 0);
      const std::string at = std::string("divide ") + divide + ", accumulate " + acc;
      for (size_t r = 0; r < 4; ++r) {
        EXPECT_EQ(out[r][0], fp32 ? 64.75f : 64.0f) << at << " rank " << r;
        EXPECT_EQ(out[r][1], 1.0f) << at << " rank " << r;
      }
      const json rep = h.red->report();
      EXPECT_EQ(rep["accumulate"], acc) << at;
      EXPECT_EQ(rep["wire_bytes_per_rank_per_step"].get<double>(), fp32 ? 9.0 : 6.0) << at;
      EXPECT_EQ(rep["payload_bytes_per_rank_per_step"].get<double>(), 4.0) << at;
      EXPECT_NEAR(rep["max_relative_error"]["max"].get<double>(), fp32 ? 0.0 : 0.75 / 64.75, 1e-12) << at;
      EXPECT_NEAR(rep["relative_error"]["max"].get<double>(), fp32 ? 0.0 : 0.75 / std::sqrt(64.75 * 64.75 + 1.0),
                  1e-9) << at;
    }
  }
}

// The modeled clock prices what fp32 accumulation sends: a reduce-scatter at the cast size, then an fp32 all-gather.
TEST(CompressCast, Fp32AccumulationPricesReduceScatterAndAllGather) {
  for (const char* acc : {"wire", "fp32"}) {
    json s = {{"name", "acc"},
              {"model", {{"kind", "mlp"}, {"layers", {8, 12, 4}}}},
              {"data", {{"kind", "teacher"}, {"batch_per_rank", 8},
                        {"teacher", {{"in_dim", 8}, {"hidden", 12}, {"out_dim", 4}, {"train_samples", 256},
                                     {"eval_samples", 64}}}}},
              {"cluster", {{"ranks", 2}}},
              {"training", {{"steps", 2}, {"eval_every", 0}}},
              {"compression", {{"kind", "bf16"}, {"accumulate", acc}}}};
    auto runs = test::run_scenario_text(s.dump());
    ASSERT_EQ(runs.size(), 1u);
    // 8*12 + 12 + 12*4 + 4 = 160 parameters, one bucket, N = 2: wire 2 x 1/2 x 320 = 320 bytes per rank;
    // fp32 1/2 x 320 + 1/2 x 640 = 480.
    const json& c = runs[0]["compression"];
    EXPECT_EQ(c["wire_bytes_per_rank_per_step"].get<double>(), std::string(acc) == "fp32" ? 480.0 : 320.0) << acc;
    EXPECT_EQ(runs[0]["config"]["compression"]["accumulate"], acc);
  }
}

// ---- compression.error_feedback placements: momentum (DGC's momentum correction) and ef21 -------------------------

// Two ranks, top-k k = 1 of n = 2, one sample per rank (S = 2), SGD momentum m = 0.5, error_feedback "momentum"
// (Lin et al. 2018: u = m u + g, v = v + u, send top-k of v, zero u and v where sent). By hand:
//   step 1: rank 0 g [4, 1]: u [4, 1], v [4, 1], sends v0 = 4; masked: u [0, 1], v [0, 1].
//           rank 1 g [1, 2]: u [1, 2], v [1, 2], sends v1 = 2; masked: u [1, 0], v [1, 0].  update [4, 2] / 2 = [2, 1]
//   step 2: rank 0 g [2, 3]: u [2, 3.5], v [2, 4.5], sends v1 = 4.5; u [2, 0], v [2, 0].
//           rank 1 g [1, 1]: u [1.5, 1], v [2.5, 1], sends v0 = 2.5; u [0, 1], v [0, 1].  update [2.5, 4.5] / 2
//   step 3: rank 0 g [1, 0]: u [2, 0], v [4, 0], sends v0 = 4; u, v [0, 0].
//           rank 1 g [0, 1]: u [0, 1.5], v [0, 2.5], sends v1 = 2.5; u, v [0, 0].  update [4, 2.5] / 2
TEST(CompressErrorFeedback, MomentumCorrectionByHand) {
  Harness h({{"kind", "topk"}, {"k", 1}, {"error_feedback", "momentum"}, {"measure_error", false}}, 2, 2, 1, false);
  h.cfg.training.optimizer.momentum = 0.5;  // read by the reduction at every step
  const std::vector<std::vector<std::vector<float>>> g = {{{4, 1}, {1, 2}}, {{2, 3}, {1, 1}}, {{1, 0}, {0, 1}}};
  const std::vector<std::vector<float>> update = {{2, 1}, {1.25f, 2.25f}, {2, 1.25f}};
  const std::vector<std::vector<std::vector<float>>> u = {{{0, 1}, {1, 0}}, {{2, 0}, {0, 1}}, {{0, 0}, {0, 0}}};
  const std::vector<std::vector<std::vector<float>>> v = {{{0, 1}, {1, 0}}, {{2, 0}, {0, 1}}, {{0, 0}, {0, 0}}};
  for (size_t t = 0; t < 3; ++t) {
    auto out = h.step(g[t], 2.0, static_cast<int64_t>(t));
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(out[static_cast<size_t>(r)], update[t]) << "step " << t + 1 << " rank " << r;
      EXPECT_EQ(h.red->velocity(r), u[t][static_cast<size_t>(r)]) << "u, step " << t + 1 << " rank " << r;
      EXPECT_EQ(h.red->residual(r), v[t][static_cast<size_t>(r)]) << "v, step " << t + 1 << " rank " << r;
    }
  }
  EXPECT_EQ(h.red->report()["error_feedback"], "momentum");
}

// EF21 (Richtarik et al. 2021): rank r sends c = top-1(g - h_r), h_r += c, the update is G += mean of the c (= the
// mean of the h_r). Same ranks and k as above, S = 2. By hand:
//   step 1: rank 0 p [4, 1] -> c [4, 0], h0 [4, 0]; rank 1 p [1, 2] -> c [0, 2], h1 [0, 2]; G [2, 1].
//   step 2: rank 0 g [2, 3]: p [-2, 3] -> c [0, 3], h0 [4, 3]; rank 1 g [1, 0.5]: p [1, -1.5] -> c [0, -1.5],
//           h1 [0, 0.5]; G += [0, 1.5] / 2: [2, 1.75] = (h0 + h1) / 2.
//   step 3: rank 0 g [1, 1]: p [-3, -2] -> c [-3, 0], h0 [1, 3]; rank 1 g [0, 1]: p [0, 0.5] -> c [0, 0.5],
//           h1 [0, 1]; G += [-3, 0.5] / 2: [0.5, 2] = (h0 + h1) / 2.
TEST(CompressErrorFeedback, Ef21ByHand) {
  Harness h({{"kind", "topk"}, {"k", 1}, {"error_feedback", "ef21"}, {"measure_error", false}}, 2, 2, 1, false);
  const std::vector<std::vector<std::vector<float>>> g = {{{4, 1}, {1, 2}}, {{2, 3}, {1, 0.5f}}, {{1, 1}, {0, 1}}};
  const std::vector<std::vector<float>> update = {{2, 1}, {2, 1.75f}, {0.5f, 2}};
  const std::vector<std::vector<std::vector<float>>> hr = {{{4, 0}, {0, 2}}, {{4, 3}, {0, 0.5f}}, {{1, 3}, {0, 1}}};
  for (size_t t = 0; t < 3; ++t) {
    auto out = h.step(g[t], 2.0, static_cast<int64_t>(t));
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(out[static_cast<size_t>(r)], update[t]) << "step " << t + 1 << " rank " << r;
      EXPECT_EQ(h.red->residual(r), hr[t][static_cast<size_t>(r)]) << "h, step " << t + 1 << " rank " << r;
    }
  }
  EXPECT_EQ(h.red->report()["error_feedback"], "ef21");
}

// "gradient" is the placement `true` has always meant; `false` is "none".
TEST(CompressErrorFeedback, BooleansMeanGradientAndNone) {
  std::vector<ConfigIssue> issues;
  EXPECT_EQ(config_from_json({{"compression", {{"kind", "topk"}, {"error_feedback", true}}}}, issues)
                .compression.error_feedback, "gradient");
  EXPECT_EQ(config_from_json({{"compression", {{"kind", "topk"}, {"error_feedback", false}}}}, issues)
                .compression.error_feedback, "none");
  // `--set compression.error_feedback=true` gives a string field the text "true": the same alias.
  EXPECT_EQ(config_from_json({{"compression", {{"kind", "topk"}, {"error_feedback", "true"}}}}, issues)
                .compression.error_feedback, "gradient");
  // false is the default: accepted under kind "none", as before.
  config_from_json({{"compression", {{"kind", "none"}, {"error_feedback", false}}}}, issues);
  EXPECT_TRUE(issues.empty()) << issues.front().path << ": " << issues.front().message;
  Harness b({{"kind", "topk"}, {"k", 1}, {"error_feedback", true}, {"measure_error", false}}, 1, 2, 1, false);
  Harness s({{"kind", "topk"}, {"k", 1}, {"error_feedback", "gradient"}, {"measure_error", false}}, 1, 2, 1, false);
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(b.step({{3, 2}}, 1.0, t), s.step({{3, 2}}, 1.0, t)) << "step " << t;
    EXPECT_EQ(b.red->residual(0), s.red->residual(0)) << "step " << t;
  }
  // By hand: e after step 1 [0, 2]; step 2 p [3, 4] sends 4: e [3, 0]; step 3 p [6, 2] sends 6: e [0, 2].
  EXPECT_EQ(s.red->residual(0), (std::vector<float>{0, 2}));
}

// At full density momentum correction masks every coordinate every step, so the velocity never carries over: the
// run is plain SGD without momentum (Lin et al. 2018: the optimizer applies the sparse update without its own
// momentum). A run with SGD momentum 0.9 and error_feedback "momentum" at top-k ratio 1 gives the same parameters,
// bit for bit, as an uncompressed run with momentum 0; with error_feedback "gradient" it is momentum SGD and differs.
TEST(CompressErrorFeedback, MomentumCorrectionReplacesTheOptimizersMomentum) {
  auto run = [](double momentum, const json& compression) {
    json s = {{"name", "mc"},
              {"model", {{"kind", "mlp"}, {"layers", {6, 5, 3}}}},
              {"data", {{"kind", "teacher"}, {"batch_per_rank", 4},
                        {"teacher", {{"in_dim", 6}, {"hidden", 5}, {"out_dim", 3}, {"train_samples", 64},
                                     {"eval_samples", 16}}}}},
              {"cluster", {{"ranks", 2}, {"share_identical", false}}},
              {"training", {{"steps", 4}, {"eval_every", 0},
                            {"optimizer", {{"kind", "sgd"}, {"lr", 0.1}, {"momentum", momentum}}}}},
              {"compression", compression},
              {"report", {{"trace", true}}}};
    return test::run_scenario_text(s.dump())[0];
  };
  const json plain = run(0.0, {{"kind", "none"}});
  const json corrected = run(0.9, {{"kind", "topk"}, {"ratio", 1.0}, {"error_feedback", "momentum"}});
  const json heavy = run(0.9, {{"kind", "topk"}, {"ratio", 1.0}, {"error_feedback", "gradient"}});
  for (size_t t = 0; t < 4; ++t) {
    EXPECT_EQ(test::params_after(corrected, t, 0), test::params_after(plain, t, 0)) << "step " << t + 1;
    EXPECT_EQ(test::params_after(corrected, t, 1), test::params_after(plain, t, 0)) << "step " << t + 1;
  }
  EXPECT_NE(test::params_after(heavy, 3, 0), test::params_after(plain, 3, 0));
}

TEST(CompressErrorFeedback, PlacementsRefusedWhereTheyDoNotApply) {
  auto issues_of = [](const json& j) {
    std::vector<ConfigIssue> issues;
    config_from_json(j, issues);
    return issues;
  };
  auto has = [](const std::vector<ConfigIssue>& iss, const std::string& path, const std::string& text) {
    for (const auto& i : iss)
      if (i.path == path && i.message.find(text) != std::string::npos) return true;
    return false;
  };
  const json sgd = {{"optimizer", {{"kind", "sgd"}, {"momentum", 0.9}}}};
  auto iss = issues_of({{"compression", {{"kind", "topk"}, {"error_feedback", "residual"}}}});
  EXPECT_TRUE(has(iss, "compression.error_feedback", "one of \"none\", \"gradient\", \"momentum\", \"ef21\""));
  iss = issues_of({{"compression", {{"kind", "qsgd"}, {"error_feedback", "momentum"}}}, {"training", sgd}});
  EXPECT_TRUE(has(iss, "compression.error_feedback", "needs compression.kind \"topk\", \"randomk\" or \"threshold\""));
  iss = issues_of({{"compression", {{"kind", "topk"}, {"error_feedback", "momentum"}}},
                   {"training", {{"optimizer", {{"kind", "adam"}}}}}});
  EXPECT_TRUE(has(iss, "training.optimizer.kind", "it needs \"sgd\", got \"adam\""));
  iss = issues_of({{"compression", {{"kind", "topk"}, {"error_feedback", "momentum"}}},
                   {"training", {{"optimizer", {{"kind", "sgd"}, {"momentum", 0.9}, {"nesterov", true}}}}}});
  EXPECT_TRUE(has(iss, "training.optimizer.nesterov", "Nesterov is not modeled"));
  iss = issues_of({{"compression", {{"kind", "topk"}, {"error_feedback", "ef21"}}},
                   {"sync", {{"kind", "parameter_server"}}}});
  EXPECT_TRUE(has(iss, "compression.error_feedback", "applies to sync.kind \"allreduce\""));
  EXPECT_TRUE(has(iss, "compression.error_feedback", "a parameter server's pushes take"));
  // At its own path the message starts with the value, not the path again; the server's clause only for a server.
  EXPECT_TRUE(has(iss, "compression.error_feedback", "\"ef21\" applies to"));
  EXPECT_FALSE(has(iss, "compression.error_feedback", "compression.error_feedback \"ef21\""));
  iss = issues_of({{"compression", {{"kind", "topk"}, {"error_feedback", "ef21"}}}, {"sync", {{"kind", "local_sgd"}}}});
  EXPECT_TRUE(has(iss, "compression.error_feedback", "applies to sync.kind \"allreduce\" (it is \"local_sgd\")"));
  EXPECT_FALSE(has(iss, "compression.error_feedback", "parameter server"));
  iss = issues_of({{"compression", {{"kind", "dgc"}, {"error_feedback", "momentum"}}}});
  EXPECT_TRUE(has(iss, "compression.error_feedback", "only applies when compression.kind"));
  EXPECT_TRUE(issues_of({{"compression", {{"kind", "randomk"}, {"error_feedback", "momentum"}}}, {"training", sgd}})
                  .empty());
  EXPECT_TRUE(issues_of({{"compression", {{"kind", "qsgd"}, {"error_feedback", "ef21"}}}}).empty());
}

// ---- BC10: top-k ranks by magnitude; error feedback keeps the rest -------------------------------------------------

TEST(CompressCases, BC10TopKErrorFeedback) {
  json c = load_case("BC10");
  ASSERT_FALSE(c.is_null());
  const auto g = c["input"]["g_each_step"].get<std::vector<float>>();
  Harness h({{"kind", "topk"}, {"k", c["input"]["k"]}, {"error_feedback", true}}, 1, 5, 1, false);
  ASSERT_EQ(h.n, g.size());
  for (const char* step : {"step1", "step2"}) {
    auto out = h.step({g}, 1.0, step[4] - '1')[0];  // S = 1: the output is what was sent
    const json& e = c["expected"][step];
    std::vector<size_t> idx;
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != 0.0f) idx.push_back(i);
    EXPECT_EQ(json(idx), e["indices"]) << step;
    const auto& res = h.red->residual(0);
    double norm2 = 0.0;
    for (size_t i = 0; i < res.size(); ++i) {
      EXPECT_EQ(res[i], static_cast<float>(e["residual"][i].get<double>())) << step << " residual " << i;
      norm2 += static_cast<double>(res[i]) * res[i];
    }
    EXPECT_NEAR(norm2, e["residual_norm2"].get<double>(), 1e-6 * e["residual_norm2"].get<double>()) << step;
    EXPECT_NE(json(idx), c["wrong_value"]["step1"]["indices"]);
    if (e.contains("sent")) {
      for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], static_cast<float>(e["sent"][i].get<double>()));
    }
    if (e.contains("p")) {  // p = g + e: what top-k ranked; the sent values are p's at the chosen indices
      for (size_t i : idx) EXPECT_EQ(out[i], static_cast<float>(e["p"][i].get<double>()));
    }
  }
}

// ---- BC11: EF-signSGD feeds the error back --------------------------------------------------------------------------

TEST(CompressCases, BC11SignSgdErrorFeedback) {
  json c = load_case("BC11");
  ASSERT_FALSE(c.is_null());
  const auto g = c["input"]["g_each_step"].get<std::vector<float>>();
  Harness h({{"kind", "signsgd"}, {"error_feedback", true}}, 1, 4, 1, false);
  std::vector<double> sum_sent(4, 0.0);
  for (int t = 0; t < c["input"]["steps"].get<int>(); ++t) {
    auto out = h.step({g}, 1.0, t)[0];
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(out[i], c["expected"]["sent"][t][i].get<float>()) << "step " << t << " i " << i;
      EXPECT_EQ(h.red->residual(0)[i], c["expected"]["memory"][t][i].get<float>()) << "step " << t << " i " << i;
      sum_sent[i] += out[i];
    }
  }
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(sum_sent[i], c["expected"]["sum_sent"][i].get<double>());
    EXPECT_NE(sum_sent[i], c["wrong_value"]["memory_unused_sum_sent"][i].get<double>());
    EXPECT_EQ(sum_sent[i] + h.red->residual(0)[i], 3.0 * g[i]);  // the invariant: sum_sent + memory == sum_grads
  }
}

// ---- BC13: QSGD levels and unbiasedness through the pipeline --------------------------------------------------------

TEST(CompressCases, BC13QsgdLevelsAndMean) {
  json c = load_case("BC13");
  ASSERT_FALSE(c.is_null());
  const auto v = c["input"]["v"].get<std::vector<float>>();
  const int s = c["input"]["s"].get<int>();
  Harness h({{"kind", "qsgd"}, {"levels", s}, {"measure_error", false}}, 1, 2, 1, false);
  const int T = 20000;
  std::vector<double> mean(2, 0.0);
  std::vector<int> ups(2, 0);
  for (int t = 0; t < T; ++t) {
    auto out = h.step({v}, 1.0, t)[0];
    for (size_t i = 0; i < 2; ++i) {
      const auto& oc = c["expected"]["outcomes"][i];  // [[p_up, up value], [p_down, down value]]
      const float up = oc[0][1].get<float>(), down = oc[1][1].get<float>();
      ASSERT_TRUE(out[i] == up || out[i] == down) << "element " << i << " decoded " << out[i];
      ups[i] += out[i] == up;
      mean[i] += out[i] / T;
    }
  }
  // The variance formula: sum over elements of (norm/s)^2 p(1-p) is the case's 0.625; the empirical variance (one
  // more pass with the same draws) agrees within 5 standard errors of a sample variance, sqrt((mu4 - var^2) / T).
  {
    Harness again({{"kind", "qsgd"}, {"levels", s}, {"measure_error", false}}, 1, 2, 1, false);
    double var_formula = 0.0, emp = 0.0, se2 = 0.0;
    for (size_t i = 0; i < 2; ++i) {
      const double p = c["expected"]["p_up"][i].get<double>(), u = 5.0 / s;
      const double var = u * u * p * (1 - p);
      const double mu4 = std::pow(u, 4) * p * (1 - p) * (p * p * p + std::pow(1 - p, 3));
      var_formula += var;
      se2 += (mu4 - var * var) / T;
    }
    EXPECT_NEAR(var_formula, c["expected"]["variance"].get<double>(), 1e-12);
    for (int t = 0; t < T; ++t) {
      auto out = again.step({v}, 1.0, t)[0];
      for (size_t i = 0; i < 2; ++i) emp += (out[i] - v[i]) * (out[i] - v[i]) / T;
    }
    EXPECT_NEAR(emp, var_formula, 5 * std::sqrt(se2)) << "empirical variance";
    EXPECT_GT(std::fabs(emp - c["wrong_value"]["p_up_swapped"]["variance"].get<double>()), 5 * std::sqrt(se2));
  }
  // Mean within 5 standard errors (variance of element i: (norm/s)^2 p(1-p)); the up frequency likewise.
  const double unit = 5.0 / s;
  for (size_t i = 0; i < 2; ++i) {
    const double p = c["expected"]["p_up"][i].get<double>();
    const double se = unit * std::sqrt(p * (1 - p) / T);
    EXPECT_NEAR(mean[i], c["expected"]["E"][i].get<double>(), 5 * se) << i;
    EXPECT_NEAR(static_cast<double>(ups[i]) / T, p, 5 * std::sqrt(p * (1 - p) / T)) << i;
  }
}

// ---- BC14: random-k needs d/k; top-k must not get it -----------------------------------------------------------------

TEST(CompressCases, BC14RandomKUnbiasedScale) {
  json c = load_case("BC14");
  ASSERT_FALSE(c.is_null());
  const auto x = c["input"]["x"].get<std::vector<float>>();
  const int k = c["input"]["k"].get<int>();
  Harness h({{"kind", "randomk"}, {"k", k}, {"unbiased", true}, {"measure_error", false}}, 1, 4, 1, false);
  std::map<std::vector<float>, int> seen;
  const int T = 6000;
  for (int t = 0; t < T; ++t) seen[h.step({x}, 1.0, t)[0]] += 1;
  ASSERT_EQ(seen.size(), 6u) << "every 2-subset of 4 indices appears";
  // Over the 6 equally likely outcomes (enumerated): E = x and Var = (d/k - 1) ||x||^2, exactly.
  std::vector<double> E(4, 0.0);
  for (const auto& [o, cnt] : seen) {
    int kept = 0;
    for (size_t i = 0; i < 4; ++i) {
      if (o[i] != 0) {
        ++kept;
        EXPECT_EQ(o[i], 2.0f * x[i]);  // scaled by d/k = 2
      }
      E[i] += o[i] / 6.0;
    }
    EXPECT_EQ(kept, k);
    EXPECT_NEAR(static_cast<double>(cnt) / T, 1.0 / 6, 5 * std::sqrt(5.0 / 36 / T));  // uniform over subsets
  }
  double var = 0.0;
  for (const auto& [o, cnt] : seen)
    for (size_t i = 0; i < 4; ++i) var += (o[i] - x[i]) * (o[i] - x[i]) / 6.0;
  for (size_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(E[i], c["expected"]["E_scaled"][i].get<double>());
  EXPECT_DOUBLE_EQ(var, c["expected"]["variance_scaled"].get<double>());
  // Top-k keeps the two largest unscaled.
  Harness top({{"kind", "topk"}, {"k", k}}, 1, 4, 1, false);
  auto out = top.step({x}, 1.0, 0)[0];
  EXPECT_EQ(out, (std::vector<float>{0, 0, 3, 4}));
  EXPECT_NE(json(out), c["wrong_value"]["topk_with_d_over_k"]);
}

// ---- Error feedback: sum of what was sent + residual == sum of the gradients -----------------------------------------

TEST(CompressErrorFeedback, InvariantForEveryLossyCompressor) {
  const std::vector<json> kinds = {
      {{"kind", "fp16"}},          {{"kind", "bf16"}},       {{"kind", "fp8_e4m3"}},
      {{"kind", "fp8_e5m2"}},      {{"kind", "topk"}, {"ratio", 0.1}},
      {{"kind", "topk"}, {"ratio", 0.1}, {"scope", "model"}},
      {{"kind", "randomk"}, {"ratio", 0.2}, {"unbiased", true}},
      {{"kind", "threshold"}, {"tau", 0.8}}, {{"kind", "qsgd"}, {"levels", 4}},
      {{"kind", "terngrad"}},      {{"kind", "signsgd"}},    {{"kind", "onebit"}},
      {{"kind", "powersgd"}, {"rank", 1}}};
  const int T = 6;
  for (json k : kinds) {
    k["error_feedback"] = true;
    Harness h(k, 1, 12, 5, true);
    std::vector<double> sum_g(h.n, 0.0), sum_sent(h.n, 0.0);
    double scale = 0.0;
    for (int t = 0; t < T; ++t) {
      std::vector<float> g(h.n);
      fill_normal(g.data(), h.n, 99, Purpose::kInit, static_cast<uint32_t>(t), 0);
      for (size_t i = 0; i < h.n; ++i) {
        sum_g[i] += g[i];
        scale = std::max(scale, std::fabs(static_cast<double>(g[i])));
      }
      auto out = h.step({g}, 1.0, t)[0];  // one rank, S = 1: the output is the decoded message
      for (size_t i = 0; i < h.n; ++i) sum_sent[i] += out[i];
    }
    const auto& e = h.red->residual(0);
    ASSERT_EQ(e.size(), h.n);
    double resid2 = 0.0;
    for (size_t i = 0; i < h.n; ++i) {
      // Exact in real arithmetic; float rounding of p = g + e and e = p - sent per step bounds the gap.
      EXPECT_NEAR(sum_sent[i] + e[i], sum_g[i], 4 * T * scale * 6e-8 * 8) << k.dump() << " element " << i;
      resid2 += static_cast<double>(e[i]) * e[i];
    }
    EXPECT_GT(resid2, 0.0) << k.dump() << ": a lossy compressor leaves a residual";
  }
}

// Without error feedback nothing is kept.
TEST(CompressErrorFeedback, OffKeepsNoResidual) {
  Harness h({{"kind", "topk"}, {"k", 1}}, 1, 3, 1, false);
  h.step({{1.0f, -3.0f, 2.0f}}, 1.0, 0);
  auto out = h.step({{1.0f, -3.0f, 2.0f}}, 1.0, 1)[0];
  EXPECT_EQ(out, (std::vector<float>{0, -3, 0}));  // with feedback step 2 would send p = [2, -3, 4] -> 4
  EXPECT_TRUE(h.red->residual(0).empty());
}

// ---- DGC: momentum correction, masking; invariant sum(sent) + v == sum over steps of u ------------------------------

TEST(CompressDgc, VelocityInvariantAgainstIndependentRecurrence) {
  const double m = 0.9;
  Harness h({{"kind", "dgc"}, {"ratio", 0.25}, {"momentum", m}, {"sample_ratio", 1.0}}, 1, 16, 4, false);
  const int T = 8;
  std::vector<double> u(h.n, 0.0), v(h.n, 0.0), sum_u(h.n, 0.0), sum_sent(h.n, 0.0);
  for (int t = 0; t < T; ++t) {
    std::vector<float> g(h.n);
    fill_normal(g.data(), h.n, 7, Purpose::kInit, static_cast<uint32_t>(t), 0);
    auto out = h.step({g}, 1.0, t)[0];
    size_t sent = 0;
    for (size_t i = 0; i < h.n; ++i) {
      u[i] = m * u[i] + g[i];
      v[i] += u[i];
      sum_u[i] += u[i];
      if (out[i] != 0.0f) {
        ++sent;
        EXPECT_NEAR(out[i], v[i], 1e-4 * (1 + std::fabs(v[i]))) << "sent value is the velocity";
        sum_sent[i] += out[i];
        u[i] = 0.0;  // momentum factor masking
        v[i] = 0.0;
      }
    }
    // sample_ratio 1: the threshold is the exact top-25% magnitude (ties aside), so 16 of 64 are sent.
    EXPECT_EQ(sent, h.n / 4) << "step " << t;
  }
  const auto& vel = h.red->residual(0);
  ASSERT_EQ(vel.size(), h.n);
  for (size_t i = 0; i < h.n; ++i) {
    EXPECT_NEAR(vel[i], v[i], 1e-4 * (1 + std::fabs(v[i])));
    EXPECT_NEAR(sum_sent[i] + vel[i], sum_u[i], 1e-4 * (1 + std::fabs(sum_u[i])));
  }
}

// ---- PowerSGD: exact on a gradient of rank <= r ------------------------------------------------------------------

TEST(CompressPowerSgd, ExactOnLowRankGradient) {
  const int N = 3, rows = 6, cols = 8, r = 2;
  Harness h({{"kind", "powersgd"}, {"rank", r}}, N, cols, rows, true);
  ASSERT_EQ(h.n, static_cast<size_t>(rows * cols + rows));
  std::vector<float> U(rows * r), V(cols * r);
  fill_normal(U.data(), U.size(), 5, Purpose::kInit, 0, 0);
  fill_normal(V.data(), V.size(), 5, Purpose::kInit, 1, 0);
  for (int t = 0; t < 3; ++t) {
    std::vector<std::vector<float>> g(N, std::vector<float>(h.n));
    std::vector<double> exact(h.n, 0.0);
    for (int q = 0; q < N; ++q) {
      // Rank q's weight gradient U diag(c_q) V^T (rank 2, same spaces on every rank); its bias is anything.
      float c0 = 1.0f + q + t, c1 = 0.5f - q;
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j)
          g[q][i * cols + j] = U[i * r] * c0 * V[j * r] + U[i * r + 1] * c1 * V[j * r + 1];
      for (int i = 0; i < rows; ++i) g[q][rows * cols + i] = 0.1f * (i - q);
      for (size_t i = 0; i < h.n; ++i) exact[i] += g[q][i];
    }
    const double S = 6.0;
    auto out = h.step(g, S, t);
    double scale = 0.0;
    for (double x : exact) scale = std::max(scale, std::fabs(x / S));
    for (size_t i = 0; i < h.n; ++i) EXPECT_NEAR(out[0][i], exact[i] / S, 2e-5 * scale) << "step " << t << " i " << i;
    EXPECT_EQ(out[0], out[N - 1]) << "every rank holds the same bits";
  }
  // Bytes: P (rows x r) + Q (cols x r) + the bias, fp32, against the dense rows*cols + rows.
  json rep = h.red->report();
  EXPECT_EQ(rep["payload_bytes_per_rank_per_step"].get<double>(), 4.0 * (rows * r + cols * r + rows));
  EXPECT_EQ(rep["collective"], "all_reduce");
}

// A full-rank gradient is approximated, not reproduced (the test above is not vacuous).
TEST(CompressPowerSgd, FullRankGradientIsApproximated) {
  Harness h({{"kind", "powersgd"}, {"rank", 1}}, 1, 8, 6, false);
  std::vector<float> g(h.n);
  fill_normal(g.data(), h.n, 3, Purpose::kInit, 0, 0);
  auto out = h.step({g}, 1.0, 0)[0];
  double d2 = 0.0;
  for (size_t i = 0; i < h.n; ++i) d2 += (out[i] - g[i]) * (out[i] - g[i]);
  EXPECT_GT(d2, 1e-3);
}

// ---- Bytes on the wire and the report --------------------------------------------------------------------------------

TEST(CompressReport, BytesRatioAndCollectivePerKind) {
  // 2 ranks, linear 10 -> 4 with bias: n = 44 parameters in one bucket.
  struct K {
    json c;
    double payload_bytes;
    const char* collective;
  };
  const double n = 44;
  const std::vector<K> kinds = {
      {{{"kind", "fp16"}}, 2 * n, "all_reduce"},
      {{{"kind", "fp8_e4m3"}}, n, "all_reduce"},
      {{{"kind", "topk"}, {"k", 5}}, 5 * 8, "all_gather"},
      {{{"kind", "randomk"}, {"k", 5}, {"shared_indices", true}}, 5 * 4, "all_gather"},
      {{{"kind", "qsgd"}, {"levels", 4}}, 4 + std::ceil(n * 4 / 8), "all_gather"},  // 3 level bits + sign
      {{{"kind", "terngrad"}}, 4 + std::ceil(n / 4), "all_gather"},
      // Ternary sign messages (kernels/compress.h): header (scale + zero count; 1-bit: two means + zero count) and one
      // bit plane, as the gradient below has no exact zero.
      {{{"kind", "signsgd"}}, 8 + std::ceil(n / 8), "all_gather"},
      {{{"kind", "onebit"}}, 12 + std::ceil(n / 8), "all_gather"},
  };
  for (const auto& k : kinds) {
    Harness h(k.c, 2, 10, 4, true);
    std::vector<float> g(h.n, 1.0f);
    h.step({g, g}, 2.0, 0);
    json rep = h.red->report();
    EXPECT_EQ(rep["payload_bytes_per_rank_per_step"].get<double>(), k.payload_bytes) << k.c.dump();
    EXPECT_DOUBLE_EQ(rep["compression_ratio"].get<double>(), 4 * n / k.payload_bytes) << k.c.dump();
    EXPECT_EQ(rep["collective"], k.collective) << k.c.dump();
    // Ring conventions: all-reduce 2(N-1)/N of the payload, all-gather (N-1)/N of both ranks' payloads; with N = 2
    // and equal payloads both are one payload.
    EXPECT_EQ(rep["wire_bytes_per_rank_per_step"].get<double>(), k.payload_bytes) << k.c.dump();
  }
  // With exact zeros the sign messages carry the zero plane too: 2 bits per value, counted.
  for (const auto& [kind, header] : std::vector<std::pair<std::string, double>>{{"signsgd", 8}, {"onebit", 12}}) {
    Harness h({{"kind", kind}}, 2, 10, 4, true);
    std::vector<float> g(h.n, 1.0f);
    g[3] = 0.0f;
    h.step({g, g}, 2.0, 0);
    EXPECT_EQ(h.red->report()["payload_bytes_per_rank_per_step"].get<double>(), header + 2 * std::ceil(n / 8)) << kind;
  }
}

// ---- sign(0) = 0 through the pipeline: a coordinate with an exact zero gradient does not move ------------------------

TEST(CompressSignZeros, ZerosNeitherMoveNorOutvote) {
  // 3 ranks, 3 coordinates: (0, 0, -2) on coordinate 0, all zeros on coordinate 1, +1 everywhere on coordinate 2.
  // Majority vote: coordinate 0 is -1 (the two zeros do not vote; 1-bit codes sent them as + and won 2 to 1),
  // coordinate 1 is 0, coordinate 2 is +1; times the summed scales sum_r mean |g_r|.
  const std::vector<std::vector<float>> g = {{0, 0, 1}, {0, 0, 1}, {-2, 0, 1}};
  Harness vote({{"kind", "signsgd"}, {"vote", true}, {"measure_error", false}}, 3, 3, 1, false);
  auto out = vote.step(g, 1.0, 0);
  const float scales = 1.0f / 3 + 1.0f / 3 + 1.0f;
  EXPECT_EQ(out[0], (std::vector<float>{-scales, 0.0f, scales}));
  // Without vote the decoded messages are summed: coordinate 1 stays exactly 0, coordinate 0 gets only rank 2's -1.
  Harness sum({{"kind", "signsgd"}, {"measure_error", false}}, 3, 3, 1, false);
  out = sum.step(g, 1.0, 0);
  EXPECT_EQ(out[0], (std::vector<float>{-1.0f, 0.0f, 1.0f / 3 + 1.0f / 3 + 1.0f}));
  // 1-bit SGD: zeros decode to 0 and stay out of the positive mean (rank 0: mean of {1} is 1, not (0 + 0 + 1) / 3).
  Harness one({{"kind", "onebit"}, {"measure_error", false}}, 3, 3, 1, false);
  out = one.step(g, 1.0, 0);
  EXPECT_EQ(out[0], (std::vector<float>{-2.0f, 0.0f, 3.0f}));
  // EF-signSGD on one rank over 3 steps: the zero coordinate sends 0, keeps a zero residual, never drifts.
  Harness ef({{"kind", "signsgd"}, {"error_feedback", true}, {"measure_error", false}}, 1, 3, 1, false);
  for (int t = 0; t < 3; ++t) {
    auto o = ef.step({{0.0f, 3.0f, -1.0f}}, 1.0, t)[0];
    EXPECT_EQ(o[0], 0.0f) << "step " << t;
    EXPECT_EQ(ef.red->residual(0)[0], 0.0f) << "step " << t;
  }
}

TEST(CompressReport, RunReportCarriesCompressionSection) {
  json s = {{"name", "cr"},
            {"model", {{"kind", "mlp"}, {"layers", {8, 12, 4}}}},
            {"data", {{"kind", "teacher"}, {"batch_per_rank", 8},
                      {"teacher", {{"in_dim", 8}, {"hidden", 12}, {"out_dim", 4}, {"train_samples", 1024},
                                   {"eval_samples", 256}}}}},
            {"cluster", {{"ranks", 2}}},
            {"training", {{"steps", 5}, {"eval_every", 0}}},
            {"compression", {{"kind", "topk"}, {"k", 3}, {"error_feedback", true}}}};
  auto runs = test::run_scenario_text(s.dump());
  ASSERT_EQ(runs.size(), 1u);
  const json& c = runs[0]["compression"];
  ASSERT_TRUE(c.is_object()) << runs[0].dump();
  // Parameters: 8*12 + 12 + 12*4 + 4 = 160, one bucket (first bucket 1 MiB): k = 3 kept.
  EXPECT_EQ(c["dense_bytes_per_rank_per_step"].get<double>(), 640.0);
  EXPECT_EQ(c["payload_bytes_per_rank_per_step"].get<double>(), 24.0);
  EXPECT_EQ(runs[0]["communication"]["bytes_sent_per_rank_per_step"][0].get<double>(), 24.0);  // (2-1)/2 * 48
  EXPECT_EQ(c["relative_error"]["count"].get<int>(), 5);
  EXPECT_GT(c["relative_error"]["p50"].get<double>(), 0.0);
  // Step 1 has no residual yet: top-k of the exact gradients keeps part of the norm, so its error is below 1.
  EXPECT_LT(c["relative_error"]["min"].get<double>(), 1.0);
  EXPECT_EQ(c["error_feedback"], "plain");
  EXPECT_GT(c["residual_norm"]["last"].get<double>(), 0.0);
}

// ---- Config: kind-specific fields refused where they do not apply ---------------------------------------------------

TEST(CompressConfig, KindSpecificFieldsRefused) {
  auto issues_of = [](const json& j) {
    std::vector<ConfigIssue> issues;
    config_from_json(j, issues);
    return issues;
  };
  auto iss = issues_of({{"compression", {{"kind", "fp16"}, {"ratio", 0.1}}}});
  ASSERT_FALSE(iss.empty());
  EXPECT_EQ(iss[0].path, "compression.ratio");
  EXPECT_NE(iss[0].message.find("\"topk\""), std::string::npos) << iss[0].message;
  EXPECT_NE(iss[0].message.find("\"fp16\""), std::string::npos) << iss[0].message;
  iss = issues_of({{"compression", {{"kind", "topk"}, {"divide", "post"}}}});
  ASSERT_FALSE(iss.empty());
  EXPECT_EQ(iss[0].path, "compression.divide");
  iss = issues_of({{"compression", {{"kind", "dgc"}, {"error_feedback", true}}}});
  ASSERT_FALSE(iss.empty());
  EXPECT_EQ(iss[0].path, "compression.error_feedback");
  // accumulate: casts and all-reduce only, "wire" or "fp32".
  iss = issues_of({{"compression", {{"kind", "topk"}, {"accumulate", "fp32"}}}});
  ASSERT_FALSE(iss.empty());
  EXPECT_EQ(iss[0].path, "compression.accumulate");
  EXPECT_NE(iss[0].message.find("only applies when compression.kind is \"fp16\""), std::string::npos) << iss[0].message;
  iss = issues_of({{"compression", {{"kind", "bf16"}, {"accumulate", "fp64"}}}});
  ASSERT_FALSE(iss.empty());
  EXPECT_EQ(iss[0].path, "compression.accumulate");
  EXPECT_NE(iss[0].message.find("one of \"wire\", \"fp32\""), std::string::npos) << iss[0].message;
  iss = issues_of({{"sync", {{"kind", "parameter_server"}}}, {"compression", {{"kind", "bf16"}, {"accumulate", "fp32"}}}});
  ASSERT_FALSE(iss.empty());
  EXPECT_EQ(iss[0].path, "compression.accumulate");
  EXPECT_TRUE(issues_of({{"compression", {{"kind", "fp8_e5m2"}, {"accumulate", "fp32"}}}}).empty());
  iss = issues_of({{"compression", {{"kind", "zip"}}}});
  ASSERT_FALSE(iss.empty());
  EXPECT_EQ(iss[0].path, "compression.kind");
  iss = issues_of({{"sync", {{"kind", "independent"}}}, {"compression", {{"kind", "fp16"}}},
                   {"model", {{"kind", "quadratic"}, {"a", {{1.0}}}, {"b", {{0.0}}}, {"initial_w", {1.0}}}},
                   {"data", {{"kind", "none"}}}});
  ASSERT_FALSE(iss.empty());
  EXPECT_EQ(iss[0].path, "compression.kind");
  // k above the model's parameter count (2 here) is refused, not silently clamped; k equal to it is fine.
  const json quadratic = {{"kind", "quadratic"}, {"a", {{1.0, 2.0}}}, {"b", {{0.0, 0.0}}}, {"initial_w", {1.0, 1.0}}};
  iss = issues_of({{"compression", {{"kind", "topk"}, {"k", 3}}}, {"model", quadratic}, {"data", {{"kind", "none"}}}});
  ASSERT_EQ(iss.size(), 1u);
  EXPECT_EQ(iss[0].path, "compression.k");
  EXPECT_NE(iss[0].message.find("at most the model's 2 parameters, got 3"), std::string::npos) << iss[0].message;
  EXPECT_TRUE(issues_of({{"compression", {{"kind", "randomk"}, {"k", 2}}}, {"model", quadratic},
                         {"data", {{"kind", "none"}}}})
                  .empty());
}

}  // namespace
}  // namespace gs

namespace gs {
namespace {

// ---- Convergence: the compressors that should track uncompressed training do (4 ranks, same step budget) ----------

TEST(CompressConvergence, FourRankSweepWithinTwoPointsOfUncompressed) {
  json s = {{"name", "conv"},
            {"model", {{"kind", "mlp"}, {"layers", {16, 32, 4}}}},
            {"data", {{"kind", "teacher"}, {"batch_per_rank", 16},
                      {"teacher", {{"in_dim", 16}, {"hidden", 32}, {"out_dim", 4}, {"noise", 0.0},
                                   {"train_samples", 8192}, {"eval_samples", 2048}}}}},
            {"cluster", {{"ranks", 4}}},
            {"training", {{"steps", 400}, {"eval_every", 0},
                          {"optimizer", {{"kind", "sgd"}, {"lr", 0.1}, {"momentum", 0.9}}}}},
            {"sweep", {{"zip", {{"compression.kind", {"none", "fp16", "topk", "powersgd"}},
                                {"compression.ratio", {0.01, 0.01, 0.1, 0.01}},
                                {"compression.error_feedback", {false, false, true, true}}}}}}};
  auto runs = test::run_scenario_text(s.dump());
  ASSERT_EQ(runs.size(), 4u);
  const double base = runs[0]["convergence"]["final"]["eval_accuracy"].get<double>();
  EXPECT_GT(base, 0.6) << "the uncompressed run learns the teacher (else the comparison says nothing)";
  for (size_t i = 1; i < runs.size(); ++i) {
    const double acc = runs[i]["convergence"]["final"]["eval_accuracy"].get<double>();
    EXPECT_NEAR(acc, base, 0.02) << runs[i]["id"];
    EXPECT_GT(runs[i]["compression"]["compression_ratio"].get<double>(), 1.0) << runs[i]["id"];
  }
}

}  // namespace
}  // namespace gs

namespace gs {
namespace {

// ---- Modeled clock: encode/decode priced as passes, the collective at the real payload size ----------------------

TEST(CompressModeled, BucketCollectiveCarriesThePayloadBytes) {
  json s = {{"name", "cm"},
            {"model", {{"kind", "mlp"}, {"layers", {8, 12, 4}}}},
            {"data", {{"kind", "teacher"}, {"batch_per_rank", 8},
                      {"teacher", {{"in_dim", 8}, {"hidden", 12}, {"out_dim", 4}, {"train_samples", 1024},
                                   {"eval_samples", 256}}}}},
            {"cluster", {{"ranks", 4}}},
            {"training", {{"steps", 3}, {"eval_every", 0}}},
            {"sweep", {{"zip", {{"compression.kind", {"none", "fp16", "topk"}}, {"compression.k", {0, 0, 3}}}}}}};
  auto runs = test::run_scenario_text(s.dump());
  ASSERT_EQ(runs.size(), 3u);
  auto bucket_bytes = [](const json& run) {
    return run["timing"]["modeled"]["communication"]["buckets"][0]["bytes"].get<double>();
  };
  auto compress_ms = [](const json& run) {
    return run["timing"]["modeled"]["phases"]["compress"]["all"]["p50_ms"].get<double>();
  };
  // 160 parameters in one bucket. none: the fp32 all-reduce; fp16: the all-reduce of 2-byte values; topk k = 3:
  // all-gather of 4 ranks x (3 indices + 3 values), NCCL's nBytes being the whole gathered output.
  EXPECT_EQ(bucket_bytes(runs[0]), 640.0);
  EXPECT_EQ(bucket_bytes(runs[1]), 320.0);
  EXPECT_EQ(bucket_bytes(runs[2]), 4.0 * 24.0);
  EXPECT_EQ(compress_ms(runs[0]), 0.0);
  EXPECT_GT(compress_ms(runs[1]), 0.0);
  EXPECT_GT(compress_ms(runs[2]), 0.0);
}

}  // namespace
}  // namespace gs

namespace gs {
namespace {

// ---- signSGD majority vote, PowerSGD start_step, DGC warm-up ---------------------------------------------------------

TEST(CompressSignVote, MajorityOfSignsTimesSummedScales) {
  // 3 ranks, 4 values; rank r's scale is mean |g_r|. Votes: +,+,- -> +; -,-,+ -> -; and so on.
  const std::vector<std::vector<float>> g = {{1, -2, 3, -4}, {2, -2, -1, -1}, {-3, 2, -1, 1}};
  Harness h({{"kind", "signsgd"}, {"vote", true}, {"measure_error", false}}, 3, 4, 1, false);
  auto out = h.step(g, 1.0, 0);
  const float scales = 2.5f + 1.5f + 1.75f;  // means of |g_r|
  const std::vector<float> want = {scales, -scales, -scales, -scales};
  EXPECT_EQ(out[0], want);
  EXPECT_EQ(out[2], want);
  // Two ranks disagreeing everywhere: sign(0) = 0.
  Harness tie({{"kind", "signsgd"}, {"vote", true}, {"measure_error", false}}, 2, 2, 1, false);
  auto t = tie.step({{1, -1}, {-1, 1}}, 1.0, 0);
  EXPECT_EQ(t[0], (std::vector<float>{0, 0}));
}

TEST(CompressPowerSgd, DenseBeforeStartStep) {
  Harness h({{"kind", "powersgd"}, {"rank", 1}, {"start_step", 2}}, 2, 8, 6, false);
  for (int t = 0; t < 3; ++t) {
    std::vector<std::vector<float>> g(2, std::vector<float>(h.n));
    fill_normal(g[0].data(), h.n, 11, Purpose::kInit, static_cast<uint32_t>(t), 0);
    fill_normal(g[1].data(), h.n, 11, Purpose::kInit, static_cast<uint32_t>(t), 1);
    auto out = h.step(g, 2.0, t);
    double d2 = 0.0;
    for (size_t i = 0; i < h.n; ++i) {
      const float avg = (g[0][i] + g[1][i]) / 2.0f;  // the fp32 all-reduce sum, divided by S
      d2 += (out[0][i] - avg) * (out[0][i] - avg);
    }
    if (t < 2) {
      EXPECT_EQ(d2, 0.0) << "step " << t << " is the dense all-reduce";
    } else {
      EXPECT_GT(d2, 1e-3) << "step " << t << " is rank-1 compressed";
    }
  }
}

TEST(CompressDgc, RatioWarmsUpExponentially) {
  // ratio 1/16, 1 warm-up step: step 0 keeps (1/16)^(1/2) = 1/4 of 64 values, step 1 keeps 1/16.
  Harness h({{"kind", "dgc"}, {"ratio", 0.0625}, {"warmup_steps", 1}, {"sample_ratio", 1.0}, {"momentum", 0.0}}, 1,
            16, 4, false);
  for (int t = 0; t < 3; ++t) {
    std::vector<float> g(h.n);
    fill_normal(g.data(), h.n, 5, Purpose::kInit, static_cast<uint32_t>(t), 0);
    auto out = h.step({g}, 1.0, t)[0];
    size_t sent = 0;
    for (float x : out) sent += x != 0.0f;
    EXPECT_EQ(sent, t == 0 ? 16u : 4u) << "step " << t;
  }
}

TEST(CompressDgc, LocalClippingBoundsTheFirstMessage) {
  // momentum 0, every value sent (ratio 1): the first message is g scaled to norm clip_norm.
  Harness h({{"kind", "dgc"}, {"ratio", 1.0}, {"clip_norm", 0.5}, {"sample_ratio", 1.0}, {"momentum", 0.0}}, 1, 4,
            1, false);
  const std::vector<float> g = {3, 4, 0, 0};  // norm 5
  auto out = h.step({g}, 1.0, 0)[0];
  EXPECT_FLOAT_EQ(out[0], 0.3f);
  EXPECT_FLOAT_EQ(out[1], 0.4f);
}

}  // namespace
}  // namespace gs

namespace gs {
namespace {

// ---- the registry's payload sizes against the encoders -------------------------------------------------------------

// A registry line's payload_bytes (what timing-only runs and the memory estimate price) is the size of the payload its
// own encoder writes for a bucket without exact zeros, for every gather compressor and a few settings each; and every
// line without one is a kind whose wire modeled.cpp prices itself (so a new gather compressor cannot leave it out).
TEST(CompressorRegistry, PayloadBytesAreTheEncodedPayloads) {
  const std::set<std::string> priced_elsewhere = {"none", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2",
                                                  "threshold", "dgc", "powersgd"};
  const std::map<std::string, std::vector<json>> settings = {
      {"topk", {{{"ratio", 0.1}}, {{"k", 7}}}},
      {"randomk", {{{"k", 9}, {"shared_indices", true}}, {{"ratio", 0.25}, {"shared_indices", false}}}},
      {"qsgd", {{{"levels", 1}}, {{"levels", 15}}, {{"levels", 255}}}},
  };
  std::set<std::string> checked;
  for (const CompressorEntry& e : compressor_registry()) {
    if (e.payload_bytes == nullptr) {
      EXPECT_TRUE(priced_elsewhere.count(e.name)) << e.name << ": a gather compressor needs payload_bytes";
      continue;
    }
    std::vector<json> cases = {json::object()};
    if (auto it = settings.find(e.name); it != settings.end()) cases = it->second;
    for (json c : cases) {
      c["kind"] = e.name;
      Harness h(c, 2, 37, 5, true);  // 190 parameters: not a multiple of 8 or 32
      std::unique_ptr<Compressor> comp = make_compressor(h.cfg, *h.model, 2);
      ASSERT_NE(comp, nullptr) << e.name;
      std::vector<float> p(h.n);
      for (size_t i = 0; i < h.n; ++i) p[i] = (i % 3 == 0 ? -1.0f : 1.0f) * (0.25f + 0.01f * static_cast<float>(i));
      std::vector<float> own(h.n), sum(h.n);
      BucketJob job;
      job.rank = 1;
      job.ranks = 2;
      job.seed = 5;
      job.n = h.n;
      job.p = p.data();
      job.own_decoded = own.data();
      job.sum = sum.data();
      std::vector<uint8_t> payload;
      comp->encode(job, payload);
      EXPECT_EQ(e.payload_bytes(h.cfg.compression, h.n), static_cast<double>(payload.size())) << c.dump();
      checked.insert(e.name);
    }
  }
  // The built-in gather compressors at least (one added by a registry line is checked above too).
  for (const char* kind : {"topk", "randomk", "qsgd", "terngrad", "signsgd", "onebit"})
    EXPECT_TRUE(checked.count(kind)) << kind << " has no payload_bytes";
}

}  // namespace
}  // namespace gs
