// Compressed pushes and per-worker loss scalers on the parameter server (sim/strategy/parameter_server.cpp): an
// identity-like compressor gives the uncompressed run's bits, top-k with error feedback applies the hand-computed
// top-k of (g + e), the bytes on the wire follow the message formula and are priced through the cost model's p2p
// term; a worker whose gradient overflows skips its push and halves only its own scale. Suites start with "Strategy"
// so tools/sanitize.sh tsan runs them. Extend: one TEST per claim, expected values from math.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "sim/comm/communicator.h"
#include "sim/config/run_config.h"
#include "sim/cost/cost_model.h"
#include "sim/strategy/strategy.h"
#include "sim/validate/validate.h"
#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

json ps_run(int ranks, int steps, const json& sync, const json& compression) {
  return {{"name", "psc"},
          {"model", {{"kind", "mlp"}, {"layers", {8, 16, 4}}, {"loss", "cross_entropy"}, {"activation", "gelu"}}},
          {"data", {{"kind", "teacher"}, {"batch_per_rank", 5},
                    {"teacher", {{"in_dim", 8}, {"hidden", 12}, {"out_dim", 4}, {"train_samples", 4096},
                                 {"eval_samples", 64}}}}},
          {"cluster", {{"ranks", ranks}, {"share_identical", false}}},
          {"training", {{"steps", steps}, {"eval_every", 1}, {"seed", 11},
                        {"optimizer", {{"kind", "sgd"}, {"lr", 0.1}, {"momentum", 0.9}}}}},
          {"sync", sync},
          {"compression", compression}};
}

// The mlp 8-16-4 has 8*16 + 16 + 16*4 + 4 = 212 parameters, all in the first (1 MiB) bucket.
constexpr int64_t kMlpParams = 212;

// Top-k with k = every value of the bucket sends p exactly; the server decodes into zeros and adds the pushes in rank
// order (0 + g_0 = g_0 exactly, then + g_1, ...), which is the uncompressed server's sum, then divides by the same S.
// With error feedback the residual is p - p = 0. So every loss of the series is bit-identical to the uncompressed
// BSP run.
TEST(StrategyPsCompression, TopkKeepingEveryValueEqualsUncompressedBspBitForBit) {
  const int ranks = 3, steps = 6;
  const json sync = {{"kind", "parameter_server"}, {"staleness", 0}};
  const json ref = test::run_scenario_text(ps_run(ranks, steps, sync, {{"kind", "none"}}).dump())[0];
  for (bool ef : {false, true}) {
    const json run = test::run_scenario_text(
        ps_run(ranks, steps, sync, {{"kind", "topk"}, {"k", kMlpParams}, {"error_feedback", ef}}).dump())[0];
    ASSERT_EQ(run["steps_completed"], steps);
    const json& a = run["convergence"]["series"];
    const json& b = ref["convergence"]["series"];
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i]["train_loss"].get<double>(), b[i]["train_loss"].get<double>()) << "ef " << ef << " step " << i;
      EXPECT_EQ(a[i]["eval_loss"].get<double>(), b[i]["eval_loss"].get<double>()) << "ef " << ef << " step " << i;
    }
    EXPECT_EQ(run["compression"]["collective"], "push");
    EXPECT_EQ(run["compression"]["relative_error"]["max"].get<double>(), 0.0);
    if (ef) {
      EXPECT_EQ(run["compression"]["residual_norm"]["max"].get<double>(), 0.0);
    }
  }
}

// One worker, a linear model of 8 weights (one bucket), SGD lr 0.5, top-k k = 2 with error feedback, gradient sums
// of 2 samples fed by hand. By hand (w0 = 0, e0 = 0; sent = top2(g + e), e' = g + e - sent, w' = w - 0.5 * sent / 2):
//   g1 = [1, -3, .5, 2, 0, 0, -1, .25]   p1 = g1                        sent = [0, -3, 0, 2, 0, 0, 0, 0]
//        e1 = [1, 0, .5, 0, 0, 0, -1, .25]                              w1 = [0, .75, 0, -.5, 0, 0, 0, 0]
//   g2 = [.5, 1, 0, -.5, 2, 0, -1.5, 0]  p2 = [1.5, 1, .5, -.5, 2, 0, -2.5, .25]  sent = [0, 0, 0, 0, 2, 0, -2.5, 0]
//        e2 = [1.5, 1, .5, -.5, 0, 0, 0, .25]                           w2 = [0, .75, 0, -.5, -.5, 0, .625, 0]
//   g3 = [.5, -1, 0, 0, 0, 1.5, 0, 0]    p3 = [2, 0, .5, -.5, 0, 1.5, 0, .25]     sent = [2, 0, 0, 0, 0, 1.5, 0, 0]
//        e3 = [0, 0, .5, -.5, 0, 0, 0, .25] (norm .75)                  w3 = [-.5, .75, 0, -.5, -.5, -.375, .625, 0]
// Every value is a short binary fraction, so float arithmetic is exact and the comparison is exact.
// Bytes (dedicated server): a push is 2 x (4-byte index + 4-byte value) = 16 bytes, sent by the worker; a pull 8 x 4 =
// 32 bytes, sent by the server (no rank); the modeled communication of a step is the cost model's p2p(16) + p2p(32)
// (the last step pulls nothing).
TEST(StrategyPsCompression, TopkWithErrorFeedbackAppliesTheHandComputedUpdate) {
  std::vector<ConfigIssue> issues;
  RunConfig c = config_from_json(
      {{"model", {{"kind", "linear"}, {"layers", {4, 2}}, {"bias", false}, {"loss", "mse"}}},
       {"data", {{"kind", "teacher"}, {"teacher", {{"task", "regression"}, {"in_dim", 4}, {"out_dim", 2}}}}},
       {"cluster", {{"ranks", 1}}},
       {"training", {{"steps", 3}, {"optimizer", {{"kind", "sgd"}, {"lr", 0.5}}}}},
       {"sync", {{"kind", "parameter_server"}, {"staleness", 0}, {"dedicated", true}}},
       {"compression", {{"kind", "topk"}, {"k", 2}, {"error_feedback", true}, {"measure_error", false}}}},
      issues);
  ASSERT_TRUE(issues.empty()) << issues[0].message;
  auto model = make_model(c);
  ASSERT_EQ(model->num_params(), 8u);
  CostModel cm(c, *model);
  auto comm = make_host_communicator(1);
  StrategySetup setup{c, *model, *comm, 1, &cm};
  auto ps = make_strategy(setup);
  std::fill(ps->params(0), ps->params(0) + 8, 0.0f);
  const std::vector<std::vector<float>> g = {{1, -3, .5f, 2, 0, 0, -1, .25f},
                                             {.5f, 1, 0, -.5f, 2, 0, -1.5f, 0},
                                             {.5f, -1, 0, 0, 0, 1.5f, 0, 0}};
  const std::vector<std::vector<float>> w = {{0, .75f, 0, -.5f, 0, 0, 0, 0},
                                             {0, .75f, 0, -.5f, -.5f, 0, .625f, 0},
                                             {-.5f, .75f, 0, -.5f, -.5f, -.375f, .625f, 0}};
  for (int t = 0; t < 3; ++t) {
    std::vector<float> grad = g[static_cast<size_t>(t)];
    PhaseClock clock;
    clock.begin_step();
    StepCost cost = cm.make_step_cost();
    StepInput in;
    in.rank = 0;
    in.step = t;
    in.grad = grad.data();
    in.local_samples = in.global_samples = 2.0;
    in.lr = 0.5;
    in.total_steps = 3;
    in.clock = &clock;
    in.cost = &cost;
    ps->step(in);
    const float* server = ps->eval_params();
    EXPECT_EQ(std::vector<float>(server, server + 8), w[static_cast<size_t>(t)]) << "after step " << t + 1;
  }
  const auto steps = ps->report({}).modeled_rank_steps;
  ASSERT_EQ(steps[0].size(), 3u);
  const CollectiveModel& coll = cm.collectives();
  for (size_t t = 0; t < 3; ++t) {
    const bool pulls = t < 2;
    EXPECT_EQ(steps[0][t].times.bytes_sent, 16u) << t;  // the push; the dedicated server sends the pull
    EXPECT_DOUBLE_EQ(steps[0][t].times.phase_s[static_cast<size_t>(Phase::kCommunicate)],
                     coll.p2p_s(16) + (pulls ? coll.p2p_s(32) : 0.0)) << t;
  }
  const json rep = ps->report({}).compression;
  EXPECT_EQ(rep["payload_bytes_per_rank_per_step"].get<double>(), 16.0);
  EXPECT_EQ(rep["dense_bytes_per_rank_per_step"].get<double>(), 32.0);
  EXPECT_EQ(rep["compression_ratio"].get<double>(), 2.0);
  EXPECT_EQ(rep["residual_norm"]["last"].get<double>(), 0.75);
}

// Bytes of a push from the message formula, 3 workers with co-located shards (P = 3: (P - 1)/P of a message leaves
// the worker): top-k ratio 0.1 keeps round(0.1 x 212) = 21 values = 168 bytes (index + value); an fp16 cast is
// 2 x 212 = 424 bytes; the dense message (and every pull) is 4 x 212 = 848 bytes. The payload holds under BSP, SSP and
// asynchronous runs (every push has the same size). On the wire per step (BSP, 8 clocks: 8 pushes and 7 pulls, the
// run ends before the last pull): (8 x payload + 7 x 848) x 2/3 / 8.
TEST(StrategyPsCompression, PushBytesFollowTheMessageFormula) {
  struct Case {
    json compression;
    double payload;
  };
  for (const Case& k : {Case{{{"kind", "topk"}, {"ratio", 0.1}, {"error_feedback", true}}, 168.0},
                        Case{{{"kind", "fp16"}}, 424.0}}) {
    for (const json& staleness : {json(0), json(2), json("inf")}) {
      const json run = test::run_scenario_text(
          ps_run(3, 8, {{"kind", "parameter_server"}, {"staleness", staleness}}, k.compression).dump())[0];
      ASSERT_EQ(run["steps_completed"], 8) << k.compression.dump() << staleness;
      const json& cj = run["compression"];
      EXPECT_EQ(cj["payload_bytes_per_rank_per_step"].get<double>(), k.payload) << k.compression.dump();
      if (staleness == json(0)) {
        const double wire = (8 * k.payload + 7 * 848.0) * 2.0 / 3.0 / 8.0;
        EXPECT_NEAR(cj["wire_bytes_per_rank_per_step"].get<double>(), wire, 1e-9);
        // The same mean over ranks of what each sends (its pushes, and the pulls its shard sends to the other 2
        // workers, 848 / 3 each), to the whole bytes each step is rounded down to.
        double sent = 0.0;
        for (const auto& b : run["communication"]["bytes_sent_per_rank_per_step"]) sent += b.get<double>() / 3.0;
        EXPECT_NEAR(sent, wire, 1.0) << k.compression.dump();
      }
      EXPECT_EQ(cj["dense_bytes_per_rank_per_step"].get<double>(), 848.0);
      EXPECT_EQ(cj["compression_ratio"].get<double>(), 848.0 / k.payload);
      int64_t pushes = 0;
      for (const auto& p : run["staleness"]["pushes_per_rank"]) pushes += p.get<int64_t>();
      EXPECT_EQ(pushes, 8 * 3);
    }
  }
}

// A fp16 push is the gradient rounded to fp16 (RNE), widened exactly on the server and summed in fp32. Two workers,
// SGD lr 1, S = 1 + 1: worker 0 sends 1 + 2^-11 (a tie between 1 and 1 + 2^-10: rounds to even, 1), worker 1 sends
// 3 x 2^-12 (exact in fp16). Server: w = 0 - (1 + 3 x 2^-12) / 2.
TEST(StrategyPsCompression, Fp16PushIsRoundedOnTheWorkerAndSummedInFp32) {
  std::vector<ConfigIssue> issues;
  RunConfig c = config_from_json(
      {{"model", {{"kind", "linear"}, {"layers", {1, 1}}, {"bias", false}, {"loss", "mse"}}},
       {"data", {{"kind", "teacher"}, {"teacher", {{"task", "regression"}, {"in_dim", 1}, {"out_dim", 1}}}}},
       {"cluster", {{"ranks", 2}}},
       {"training", {{"steps", 1}, {"optimizer", {{"kind", "sgd"}, {"lr", 1.0}}}}},
       {"sync", {{"kind", "parameter_server"}, {"staleness", 0}}},
       {"compression", {{"kind", "fp16"}}}},
      issues);
  ASSERT_TRUE(issues.empty()) << issues[0].message;
  auto model = make_model(c);
  CostModel cm(c, *model);
  auto comm = make_host_communicator(2);
  StrategySetup setup{c, *model, *comm, 2, &cm};
  auto ps = make_strategy(setup);
  const float sent[2] = {1.0f + std::ldexp(1.0f, -11), 3.0f * std::ldexp(1.0f, -12)};
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r) {
    ps->params(r)[0] = 0.0f;
    th.emplace_back([&, r] {
      float grad = sent[r];
      PhaseClock clock;
      clock.begin_step();
      StepCost cost = cm.make_step_cost();
      StepInput in;
      in.rank = r;
      in.grad = &grad;
      in.local_samples = in.global_samples = 1.0;
      in.lr = 1.0;
      in.total_steps = 1;
      in.clock = &clock;
      in.cost = &cost;
      ps->step(in);
    });
  }
  for (auto& t : th) t.join();
  EXPECT_EQ(ps->eval_params()[0], -(1.0f + 3.0f * std::ldexp(1.0f, -12)) / 2.0f);
}

// One step of a 1-weight linear model on a parameter server with fp16 pushes, SGD lr 1, w0 = 0: worker r pushes the
// gradient sum sums[r] over samples[r] samples; returns the server's weight after the step.
float ps_fp16_step(const json& sync, const std::vector<float>& sums, const std::vector<double>& samples) {
  const int ranks = static_cast<int>(sums.size());
  std::vector<ConfigIssue> issues;
  RunConfig c = config_from_json(
      {{"model", {{"kind", "linear"}, {"layers", {1, 1}}, {"bias", false}, {"loss", "mse"}}},
       {"data", {{"kind", "teacher"}, {"teacher", {{"task", "regression"}, {"in_dim", 1}, {"out_dim", 1}}}}},
       {"cluster", {{"ranks", ranks}}},
       {"training", {{"steps", 1}, {"optimizer", {{"kind", "sgd"}, {"lr", 1.0}}}}},
       {"sync", sync},
       {"compression", {{"kind", "fp16"}}}},
      issues);
  EXPECT_TRUE(issues.empty()) << issues[0].message;
  auto model = make_model(c);
  CostModel cm(c, *model);
  auto comm = make_host_communicator(ranks);
  StrategySetup setup{c, *model, *comm, ranks, &cm};
  auto ps = make_strategy(setup);
  double total = 0.0;
  for (double b : samples) total += b;
  std::vector<std::thread> th;
  for (int r = 0; r < ranks; ++r) {
    ps->params(r)[0] = 0.0f;
    th.emplace_back([&, r] {
      float grad = sums[static_cast<size_t>(r)];
      PhaseClock clock;
      clock.begin_step();
      StepCost cost = cm.make_step_cost();
      StepInput in;
      in.rank = r;
      in.grad = &grad;
      in.local_samples = samples[static_cast<size_t>(r)];
      in.global_samples = total;
      in.lr = 1.0;
      in.total_steps = 1;
      in.clock = &clock;
      in.cost = &cost;
      ps->step(in);
    });
  }
  for (auto& t : th) t.join();
  return ps->eval_params()[0];
}

// A cast push is the worker's MEAN gradient (its sum / its samples) in fp16, as DDP's fp16_compress_hook casts the
// bucket of mean gradients; the server rescales each push by its worker's samples, so the update is the uncompressed
// server's in exact arithmetic. A per-sample gradient of 8000 over 16 samples: the sum 128000 is past fp16's 65504
// (it would push inf), the mean 8000 is exact in fp16 (a multiple of its spacing 4 in [4096, 8192)): w1 = -8000.
// A mean of 8001 rounds to 8000 in fp16 (torch 1.13: torch.tensor(8001.).half() is 8000): w1 = -8000, the exact
// mean to fp16 rounding. Unequal samples (16 of mean 8000, 4 of mean 6000, exact in fp16): the server's average is
// (16 x 8000 + 4 x 6000) / 20 = 7600, every step exact in fp32. Asynchronous (one push applied alone at lr / N):
// one worker, w1 = -8000.
TEST(StrategyPsCompression, Fp16PushCastsTheWorkersMeanGradientNotItsSum) {
  const json bsp = {{"kind", "parameter_server"}, {"staleness", 0}};
  EXPECT_EQ(ps_fp16_step(bsp, {16.0f * 8000.0f, 16.0f * 8000.0f}, {16, 16}), -8000.0f);
  EXPECT_EQ(ps_fp16_step(bsp, {16.0f * 8001.0f, 16.0f * 8001.0f}, {16, 16}), -8000.0f);
  EXPECT_EQ(ps_fp16_step(bsp, {16.0f * 8000.0f, 4.0f * 6000.0f}, {16, 4}), -7600.0f);
  EXPECT_EQ(ps_fp16_step({{"kind", "parameter_server"}, {"staleness", "inf"}}, {16.0f * 8000.0f}, {16}), -8000.0f);
}

// fp16_mixed, three BSP workers with their own dynamic scalers (initial scale 2^16, backoff 0.5), SGD lr 1, one
// sample each, w0 = 0. The gradients fed are loss-scaled sums: clock 1: worker 0 sends 2^16 x 1, worker 1 overflows
// (inf), worker 2 sends 2^16 x 3. Worker 1 skips its push and halves its scale to 2^15; the others keep 2^16; the
// server averages the two pushes that arrived: w1 = -(1 + 3) / 2 = -2. Clock 2: worker 1 scales by 2^15 and sends
// 2^15 x 2, the others 2^16 x 1 and 2^16 x 3: w2 = -2 - (1 + 2 + 3) / 3 = -4. Skipped pushes [0, 1, 0].
TEST(StrategyPsPrecision, OverflowingWorkerSkipsItsPushAndHalvesOnlyItsOwnScale) {
  std::vector<ConfigIssue> issues;
  RunConfig c = config_from_json(
      {{"model", {{"kind", "linear"}, {"layers", {1, 1}}, {"bias", false}, {"loss", "mse"}}},
       {"data", {{"kind", "teacher"}, {"teacher", {{"task", "regression"}, {"in_dim", 1}, {"out_dim", 1}}}}},
       {"cluster", {{"ranks", 3}}},
       {"precision", {{"mode", "fp16_mixed"}}},
       {"training", {{"steps", 2}, {"optimizer", {{"kind", "sgd"}, {"lr", 1.0}}}}},
       {"sync", {{"kind", "parameter_server"}, {"staleness", 0}}}},
      issues);
  ASSERT_TRUE(issues.empty()) << issues[0].message;
  validate_config(c, issues);
  ASSERT_TRUE(issues.empty()) << issues[0].message;
  auto model = make_model(c);
  CostModel cm(c, *model);
  auto comm = make_host_communicator(3);
  StrategySetup setup{c, *model, *comm, 3, &cm};
  auto ps = make_strategy(setup);
  const float s16 = 65536.0f;
  for (int r = 0; r < 3; ++r) EXPECT_EQ(ps->loss_scale(r), s16);
  // Unscaled gradients per clock and worker (inf: overflow).
  const float unscaled[2][3] = {{1.0f, INFINITY, 3.0f}, {1.0f, 2.0f, 3.0f}};
  const float expected_w[2] = {-2.0f, -4.0f};
  for (int t = 0; t < 2; ++t) {
    std::vector<std::thread> th;
    for (int r = 0; r < 3; ++r) {
      th.emplace_back([&, r] {
        float grad = unscaled[t][r] * ps->loss_scale(r);  // the backward of a loss scaled by this worker's scale
        PhaseClock clock;
        clock.begin_step();
        StepCost cost = cm.make_step_cost();
        StepInput in;
        in.rank = r;
        in.step = t;
        in.grad = &grad;
        in.local_samples = in.global_samples = 1.0;
        in.lr = 1.0;
        in.total_steps = 2;
        in.clock = &clock;
        in.cost = &cost;
        ps->step(in);
      });
    }
    for (auto& x : th) x.join();
    EXPECT_EQ(ps->eval_params()[0], expected_w[t]) << "after clock " << t + 1;
    if (t == 0) {
      EXPECT_EQ(ps->loss_scale(0), s16);
      EXPECT_EQ(ps->loss_scale(1), s16 / 2);
      EXPECT_EQ(ps->loss_scale(2), s16);
    }
  }
  const json st = ps->report({}).staleness;
  EXPECT_EQ(st["skipped_pushes_per_rank"], json::array({0, 1, 0}));
  EXPECT_EQ(st["loss_scale_per_rank"], json::array({s16, s16 / 2, s16}));
}

// bf16_mixed, fp16_mixed and fp16_pure run end to end on BSP and asynchronous servers (with a compressor too), and BSP under
// bf16_mixed (no loss scaler: nothing to unscale) gives the bits of the all-reduce under bf16_mixed.
TEST(StrategyPsPrecision, MixedModesRunAndBf16BspEqualsAllReduce) {
  const json none = {{"kind", "none"}};
  json ar = ps_run(3, 5, {{"kind", "allreduce"}}, none);
  ar["precision"] = {{"mode", "bf16_mixed"}};
  const json ref = test::run_scenario_text(ar.dump())[0];
  json bsp = ps_run(3, 5, {{"kind", "parameter_server"}, {"staleness", 0}}, none);
  bsp["precision"] = {{"mode", "bf16_mixed"}};
  const json run = test::run_scenario_text(bsp.dump())[0];
  const json& a = run["convergence"]["series"];
  const json& b = ref["convergence"]["series"];
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["eval_loss"].get<double>(), b[i]["eval_loss"].get<double>());
  for (const char* mode : {"bf16_mixed", "fp16_mixed", "fp16_pure"}) {
    for (const json& staleness : {json(0), json("inf")}) {
      json cfg = ps_run(3, 5, {{"kind", "parameter_server"}, {"staleness", staleness}},
                        {{"kind", "topk"}, {"ratio", 0.25}, {"error_feedback", true}});
      cfg["precision"] = {{"mode", mode}};
      const json r = test::run_scenario_text(cfg.dump())[0];
      EXPECT_EQ(r["steps_completed"], 5) << mode;
      EXPECT_EQ(r["precision"]["mode"], mode);
      EXPECT_EQ(r["staleness"]["skipped_pushes_per_rank"].size(), 3u);
    }
  }
}

// Per-worker clipping before the push, two BSP workers, fp32, SGD lr 1, clip norm 1, one sample each, w0 = 0:
// worker 0's gradient [3, 4] (norm 5) is clipped to [0.6, 0.8]; worker 1's [0.3, 0.4] (norm 0.5) is kept. The server
// averages: w = -[0.45, 0.6]. (Clipping the average [1.65, 2.2] instead would give -[0.6, 0.8].) torch's
// clip_grad_norm_ scales by max_norm / (norm + 1e-6), hence the tolerance.
TEST(StrategyPsPrecision, EachWorkerClipsItsOwnGradientBeforeItsPush) {
  std::vector<ConfigIssue> issues;
  RunConfig c = config_from_json(
      {{"model", {{"kind", "linear"}, {"layers", {2, 1}}, {"bias", false}, {"loss", "mse"}}},
       {"data", {{"kind", "teacher"}, {"teacher", {{"task", "regression"}, {"in_dim", 2}, {"out_dim", 1}}}}},
       {"cluster", {{"ranks", 2}}},
       {"training", {{"steps", 1}, {"clip_grad_norm", 1.0}, {"optimizer", {{"kind", "sgd"}, {"lr", 1.0}}}}},
       {"sync", {{"kind", "parameter_server"}, {"staleness", 0}}}},
      issues);
  ASSERT_TRUE(issues.empty()) << issues[0].message;
  validate_config(c, issues);
  ASSERT_TRUE(issues.empty()) << issues[0].message;
  auto model = make_model(c);
  CostModel cm(c, *model);
  auto comm = make_host_communicator(2);
  StrategySetup setup{c, *model, *comm, 2, &cm};
  auto ps = make_strategy(setup);
  const float g[2][2] = {{3.0f, 4.0f}, {0.3f, 0.4f}};
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r) {
    std::fill(ps->params(r), ps->params(r) + 2, 0.0f);
    th.emplace_back([&, r] {
      float grad[2] = {g[r][0], g[r][1]};
      PhaseClock clock;
      clock.begin_step();
      StepCost cost = cm.make_step_cost();
      StepInput in;
      in.rank = r;
      in.grad = grad;
      in.local_samples = in.global_samples = 1.0;
      in.lr = 1.0;
      in.total_steps = 1;
      in.clock = &clock;
      in.cost = &cost;
      ps->step(in);
    });
  }
  for (auto& x : th) x.join();
  EXPECT_NEAR(ps->eval_params()[0], -0.45f, 1e-6);
  EXPECT_NEAR(ps->eval_params()[1], -0.6f, 1e-6);
}

// fp16_pure on the server (no master weights), one worker, SGD lr 1, one sample, dedicated server, w0 = 1:
// a gradient of 1e-4 would give 0.9999 in fp32, but fp16 next to 1 is spaced 2^-11 below it, so the server's fp16
// parameter rounds back to 1: the update is lost (the pitfall). A gradient of 2^-10 (exact in fp16) moves it to
// 1 - 2^-10 exactly. Pushes and pulls carry 2 bytes per value: the worker sends its 2-byte push per step (the
// dedicated server sends the pull).
TEST(StrategyPsPrecision, Fp16PureServerStoresFp16AndLosesSmallUpdates) {
  std::vector<ConfigIssue> issues;
  RunConfig c = config_from_json(
      {{"model", {{"kind", "linear"}, {"layers", {1, 1}}, {"bias", false}, {"loss", "mse"}}},
       {"data", {{"kind", "teacher"}, {"teacher", {{"task", "regression"}, {"in_dim", 1}, {"out_dim", 1}}}}},
       {"cluster", {{"ranks", 1}}},
       {"precision", {{"mode", "fp16_pure"}}},
       {"training", {{"steps", 2}, {"optimizer", {{"kind", "sgd"}, {"lr", 1.0}}}}},
       {"sync", {{"kind", "parameter_server"}, {"staleness", 0}, {"dedicated", true}}}},
      issues);
  validate_config(c, issues);
  ASSERT_TRUE(issues.empty()) << issues[0].message;
  auto model = make_model(c);
  CostModel cm(c, *model);
  auto comm = make_host_communicator(1);
  StrategySetup setup{c, *model, *comm, 1, &cm};
  auto ps = make_strategy(setup);
  ps->params(0)[0] = 1.0f;
  const float grads[2] = {1e-4f, std::ldexp(1.0f, -10)};
  const float expected[2] = {1.0f, 1.0f - std::ldexp(1.0f, -10)};
  for (int t = 0; t < 2; ++t) {
    float grad = grads[t];
    PhaseClock clock;
    clock.begin_step();
    StepCost cost = cm.make_step_cost();
    StepInput in;
    in.rank = 0;
    in.step = t;
    in.grad = &grad;
    in.local_samples = in.global_samples = 1.0;
    in.lr = 1.0;
    in.total_steps = 2;
    in.clock = &clock;
    in.cost = &cost;
    ps->step(in);
    EXPECT_EQ(ps->eval_params()[0], expected[t]) << "step " << t + 1;
  }
  EXPECT_EQ(ps->report({}).modeled_rank_steps[0][0].times.bytes_sent, 2u);  // its push; the dedicated server sends the pull
}

TEST(StrategyPsCompressionConfig, PowerSgdIsRefusedOnTheParameterServerOthersAreAccepted) {
  for (const char* kind : {"topk", "fp16", "qsgd", "signsgd", "dgc", "powersgd"}) {
    std::vector<ConfigIssue> issues;
    RunConfig c = config_from_json({{"sync", {{"kind", "parameter_server"}}}, {"compression", {{"kind", kind}}}},
                                   issues);
    validate_config(c, issues);
    bool refused = false;
    for (const auto& i : issues) {
      if (i.path != "compression.kind") continue;
      refused = true;
      EXPECT_NE(i.message.find("powersgd"), std::string::npos) << i.message;
    }
    for (const auto& i : issues) EXPECT_EQ(i.path, "compression.kind") << kind << ": " << i.message;
    EXPECT_EQ(refused, std::string(kind) == "powersgd") << kind;
  }
}

}  // namespace
}  // namespace gs
