// sync.kind "zero" (sim/strategy/zero.cpp): reduce-scatter, sharded optimizer
// update and all-gather give the bits of sync.kind "allreduce" with the same
// optimizer after every step, for every stage, with accumulation, mixed
// precision (sharded master weights), a loss scaler with clipping, and the cast
// wire formats; and the modeled wire bytes of the reduce-scatter + all-gather
// equal the ring all-reduce's 2(N-1)/N x 4n (Rajbhandari et al. 2020, section
// 7: stages 1 and 2 move what all-reduce moves; stage 3 1.5x).
#include <gtest/gtest.h>

#include <cstring>

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "sim/app/memory.h"
#include "sim/comm/communicator.h"
#include "sim/config/scenario.h"
#include "sim/cost/collective_model.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/hardware_profile.h"
#include "sim/strategy/strategy.h"
#include "sim/model/dataset.h"
#include "sim/model/model.h"
#include "sim/report/timeline.h"
#include "sim/validate/validate.h"
#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

json mlp(int ranks, int K, const json &optimizer) {
  // 8*13+13*4 ... parameters: n = 8*13 + 13 + 13*4 + 4 = 173, not a multiple of
  // 3 x 16: the last partition is padded.
  return {{"name", "zero"},
          {"model",
           {{"kind", "mlp"},
            {"layers", {8, 13, 4}},
            {"loss", "cross_entropy"},
            {"activation", "gelu"}}},
          {"data",
           {{"kind", "teacher"},
            {"batch_per_rank", 5},
            {"teacher",
             {{"in_dim", 8},
              {"hidden", 12},
              {"out_dim", 4},
              {"train_samples", 2048},
              {"eval_samples", 64}}}}},
          {"cluster", {{"ranks", ranks}}},
          {"training",
           {{"steps", 5},
            {"accumulation_steps", K},
            {"eval_every", 0},
            {"seed", 11},
            {"optimizer", optimizer}}},
          {"report", {{"trace", true}}}};
}

// Every step's parameters of every rank under zero (stage `stage`) equal rank
// 0's under allreduce, bit for bit.
void expect_bit_identical(json cfg, int stage) {
  const std::vector<json> ref = test::run_scenario_text(cfg.dump());
  cfg["sync"]["kind"] = "zero";
  cfg["sync"]["stage"] = stage;
  const std::vector<json> z = test::run_scenario_text(cfg.dump());
  ASSERT_EQ(z[0]["disposition"], "passed") << z[0].dump().substr(0, 600);
  const size_t steps = ref[0]["trace"]["params"].size();
  ASSERT_EQ(steps, 5u);
  const int ranks = cfg["cluster"]["ranks"].get<int>();
  for (size_t s = 0; s < steps; ++s) {
    const std::vector<float> a = test::params_after(ref[0], s, 0);
    for (int r = 0; r < ranks; ++r) {
      const std::vector<float> b =
          test::params_after(z[0], s, static_cast<size_t>(r));
      ASSERT_EQ(a.size(), b.size());
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
          << "stage " << stage << " step " << s + 1 << " rank " << r;
    }
  }
  // And the model moved (a test that compares two frozen runs proves nothing).
  EXPECT_NE(test::params_after(z[0], 4, 0), test::params_after(z[0], 0, 0));
}

TEST(ZeroBits, SgdEveryStage) {
  for (int stage : {1, 2, 3})
    expect_bit_identical(mlp(3, 1, {{"kind", "sgd"}, {"lr", 0.1}}), stage);
}

TEST(ZeroBits, SgdMomentumWithAccumulation) {
  expect_bit_identical(mlp(3, 2,
                           {{"kind", "sgd"},
                            {"lr", 0.1},
                            {"momentum", 0.9},
                            {"nesterov", true}}),
                       2);
}

TEST(ZeroBits, AdamAndAdamW) {
  expect_bit_identical(mlp(4, 1, {{"kind", "adam"}, {"lr", 0.01}}), 1);
  expect_bit_identical(
      mlp(3, 2, {{"kind", "adamw"}, {"lr", 0.01}, {"weight_decay", 0.1}}), 3);
}

TEST(ZeroBits, MixedPrecisionMasterWeightsSharded) {
  json c = mlp(3, 1, {{"kind", "adamw"}, {"lr", 0.01}});
  c["precision"] = {{"mode", "bf16_mixed"}};
  expect_bit_identical(c, 2);
}

TEST(ZeroBits, LossScalerAndClippingDecideOnTheWholeGradient) {
  json c = mlp(3, 1, {{"kind", "adam"}, {"lr", 0.01}});
  c["precision"] = {{"mode", "fp16_mixed"}};
  c["training"]["clip_grad_norm"] = 0.05;
  expect_bit_identical(c, 3);
}

TEST(ZeroBits, CastCommunicationDataType) {
  json c = mlp(4, 1, {{"kind", "sgd"}, {"lr", 0.1}, {"momentum", 0.9}});
  c["compression"] = {{"kind", "fp16"}};
  expect_bit_identical(c, 1);
  c["compression"] = {
      {"kind", "bf16"}, {"divide", "split"}, {"accumulate", "fp32"}};
  expect_bit_identical(c, 2);
  c["compression"] = {{"kind", "fp16"}, {"divide", "post"}};
  expect_bit_identical(c, 3);
}

TEST(ZeroCost, StagesOneAndTwoMoveWhatAllReduceMoves) {
  // Timing-only gpt2-small on 8 ranks: reduce-scatter (N-1)/N x 4n + all-gather
  // (N-1)/N x 4n of fp32 = the ring all-reduce's 2(N-1)/N x 4n per step; stage
  // 3 adds two gathers per micro-batch: 3(N-1)/N x 4n in all.
  json c = {{"name", "zc"},
            {"model", {{"kind", "gpt2-small"}}},
            {"data", {{"kind", "none"}, {"batch_per_rank", 4}}},
            {"cluster", {{"ranks", 8}, {"hardware", "h100-sxm-8"}}},
            {"training", {{"steps", 2}, {"mode", "timing"}}}};
  auto bytes_of = [&](const std::string &kind, int stage) {
    json x = c;
    x["sync"] = {{"kind", kind}};
    if (kind == "zero")
      x["sync"]["stage"] = stage;
    const std::vector<json> r = test::run_scenario_text(x.dump());
    EXPECT_EQ(r[0]["disposition"], "passed") << r[0].dump().substr(0, 400);
    return r[0]["communication"]["bytes_sent_per_rank_per_step"][0]
        .get<double>();
  };
  const double ar = bytes_of("allreduce", 0);
  EXPECT_NEAR(bytes_of("zero", 1) / ar, 1.0, 1e-3);
  EXPECT_NEAR(bytes_of("zero", 2) / ar, 1.0, 1e-3);
  EXPECT_NEAR(bytes_of("zero", 3) / ar, 1.5, 1e-3);
}

// The ZeRO paper's model states per GPU (Rajbhandari et al. 2020, section 5.1,
// Figure 1) with gradsweep's mixed precision (bf16 weights 2 bytes, fp32
// gradients 4, AdamW's fp32 master + m + v: K = 12): plain DP 18 Psi; stage 1:
// 2 Psi + 4 Psi + 12 Psi / N; stage 2: 2 Psi + 16 Psi / N; stage 3: 18 Psi / N,
// Psi = LLaMA-7B's 6,738,415,616 parameters, N = 8 (Psi / N is exact, so the
// partition's ceil changes nothing). DeepSpeed's
// estimate_zero2_model_states_mem_needs (gpu = 4 Psi + 16 Psi / N, its
// gradients fp16) differs by the gradient's two extra bytes, which gradsweep
// keeps in fp32 (as torch AMP does).
TEST(ZeroMemory, Llama7bModelStatesFollowTheZeroPaper) {
  RunConfig c;
  c.model.kind = "llama-7b";
  c.data.kind = "none";
  c.data.batch_per_rank = 1;
  c.training.mode = "timing";
  c.training.optimizer.kind = "adamw";
  c.precision.mode = "bf16_mixed";
  c.cluster.hardware = "h100-sxm-8";
  c.cluster.ranks = 8;
  const double psi = 6738415616.0, n = 8.0;
  auto model = make_model(c);
  ASSERT_EQ(static_cast<double>(model->num_params()), psi);
  const GpuMemoryEstimate dp = estimate_gpu_memory(c, *model);
  EXPECT_EQ(dp.model_states_bytes(), static_cast<int64_t>(18 * psi));
  EXPECT_FALSE(dp.fits());
  c.sync.kind = "zero";
  const double want[] = {2 * psi + 4 * psi + 12 * psi / n,
                         2 * psi + 16 * psi / n, 18 * psi / n};
  for (int stage = 1; stage <= 3; ++stage) {
    c.sync.stage = stage;
    const GpuMemoryEstimate e = estimate_gpu_memory(c, *model);
    EXPECT_EQ(e.model_states_bytes(), static_cast<int64_t>(want[stage - 1]))
        << "stage " << stage;
  }
  // Stage 3 on 8 x H100 80 GB: 15.2 GB of model states per GPU: fits where
  // plain DP (121 GB) is skipped.
  c.sync.stage = 3;
  EXPECT_TRUE(estimate_gpu_memory(c, *model).fits());
}

// ---- sync.reduce_every_microbatch ---------------------------------------------------------------------------------

// The reference of reduce_every_microbatch, computed here from the model's forward and backward and the dataset's
// micro-batches (not from the strategy): at parameters w (every rank's, identical), rank r's gradient of micro-batch
// k of step t is the backward of that micro-batch alone into zeros; per micro-batch the ranks' gradients are summed
// in rank order (the host reduce-scatter's order), then those sums over micro-batches in order; divided by S
// and applied with plain SGD as kernels/optim_math.h writes it (w = fma(-lr, g / S, w)), S the step's samples.
std::vector<float> reduce_every_reference(const RunConfig &c, const Model &m, const Dataset &d,
                                          const std::vector<float> &w, int64_t t) {
  const int N = static_cast<int>(c.cluster.ranks);
  const int64_t K = c.training.accumulation_steps;
  const size_t n = m.num_params();
  const PrecisionPolicy policy = precision_policy(c.precision);
  auto ws = m.make_workspace(c.data.batch_per_rank);
  std::vector<float> acc(n, 0.0f), sum(n), g(n);
  double samples = 0.0;
  for (int64_t k = 0; k < K; ++k) {
    for (int r = 0; r < N; ++r) {
      Batch b;
      d.micro_batch(t, k, r, b);
      std::fill(g.begin(), g.end(), 0.0f);
      samples += static_cast<double>(b.count);
      if (b.count > 0) {  // an empty micro-batch adds zeros
        m.forward(w.data(), b, *ws, policy);
        m.backward(w.data(), b, *ws, g.data(), policy);
      }
      for (size_t i = 0; i < n; ++i) sum[i] = r == 0 ? g[i] : sum[i] + g[i];
    }
    for (size_t i = 0; i < n; ++i) acc[i] = k == 0 ? sum[i] : acc[i] + sum[i];
  }
  const float S = static_cast<float>(samples);
  const float lr = static_cast<float>(c.training.optimizer.lr);
  std::vector<float> out = w;
  for (size_t i = 0; i < n; ++i) out[i] = std::fma(-lr, acc[i] / S, out[i]);
  return out;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Stage 2 and 3, 3 ranks, K = 3 micro-batches of 5 samples, plain SGD: every step's parameters on every rank equal
// the reference above bit for bit (from the run's own parameters before the step, so each step is checked alone),
// and the run is not the reduce-once run's bits (one sum per rank over its micro-batches, then over ranks: another
// order of the same additions, which rounds differently somewhere in 173 parameters x 5 steps), though within
// float rounding of it.
TEST(ZeroReduceEveryMicrobatch, EqualsThePerMicroBatchReferenceAndNotReduceOnce) {
  for (int stage : {2, 3}) {
    json cfg = mlp(3, 3, {{"kind", "sgd"}, {"lr", 0.1}});
    cfg["sync"] = {{"kind", "zero"}, {"stage", stage}};
    const std::vector<json> once = test::run_scenario_text(cfg.dump());
    cfg["sync"]["reduce_every_microbatch"] = true;
    const std::vector<json> every = test::run_scenario_text(cfg.dump());
    ASSERT_EQ(every[0]["disposition"], "passed") << every[0].dump().substr(0, 600);
    const RunConfig c = parse_scenario(cfg.dump(), "<test>").runs.at(0).config;
    const auto model = make_model(c);
    const auto data = make_dataset(c);
    std::vector<float> w = every[0]["trace"]["initial"].get<std::vector<float>>();
    bool differs = false;
    double worst = 0.0;
    for (size_t t = 0; t < 5; ++t) {
      const std::vector<float> want = reduce_every_reference(c, *model, *data, w, static_cast<int64_t>(t));
      for (size_t r = 0; r < 3; ++r)
        ASSERT_TRUE(same_bits(want, test::params_after(every[0], t, r))) << "stage " << stage << " step " << t + 1
                                                                          << " rank " << r;
      const std::vector<float> o = test::params_after(once[0], t, 0);
      differs = differs || !same_bits(o, want);
      w = want;
      for (size_t i = 0; i < w.size(); ++i) {
        const double a = w[i], b = o[i];
        worst = std::max(worst, std::fabs(a - b) / std::max(1e-3, std::fabs(a)));
      }
    }
    EXPECT_TRUE(differs) << "stage " << stage << ": reduce-every equals reduce-once bit for bit";
    EXPECT_LT(worst, 1e-4) << "stage " << stage;
    EXPECT_NE(w, every[0]["trace"]["initial"].get<std::vector<float>>());  // the model moved
  }
}

// Micro-batches of different sizes, one of them empty (inline data: rank 1's second micro-batch has no samples): every
// rank still reduce-scatters every micro-batch (an empty one as zeros), and the bits are the reference's with S the
// step's 4 samples.
TEST(ZeroReduceEveryMicrobatch, AnEmptyMicroBatchIsReducedAsZeros) {
  const json cfg = {
      {"name", "zi"},
      {"model", {{"kind", "linear"}, {"layers", {2, 1}}, {"loss", "mse"}}},
      {"data",
       {{"kind", "inline"},
        {"ranks",
         {{{{"x", {{1.0, 2.0}, {3.0, 4.0}}}, {"y", {{1.0}, {2.0}}}}, {{"x", {{0.5, 1.0}}}, {"y", {{0.3}}}}},
          {{{"x", {{2.0, 1.0}}}, {"y", {{1.5}}}}, {{"x", json::array()}, {"y", json::array()}}}}}}},
      {"cluster", {{"ranks", 2}}},
      {"sync", {{"kind", "zero"}, {"stage", 2}, {"reduce_every_microbatch", true}}},
      {"training",
       {{"steps", 3}, {"accumulation_steps", 2}, {"eval_every", 0}, {"optimizer", {{"kind", "sgd"}, {"lr", 0.05}}}}},
      {"report", {{"trace", true}}}};
  const std::vector<json> run = test::run_scenario_text(cfg.dump());
  ASSERT_EQ(run[0]["disposition"], "passed") << run[0].dump().substr(0, 600);
  const RunConfig c = parse_scenario(cfg.dump(), "<test>").runs.at(0).config;
  const auto model = make_model(c);
  const auto data = make_dataset(c);
  std::vector<float> w = run[0]["trace"]["initial"].get<std::vector<float>>();
  for (size_t t = 0; t < 3; ++t) {
    w = reduce_every_reference(c, *model, *data, w, static_cast<int64_t>(t));
    for (size_t r = 0; r < 2; ++r)
      ASSERT_TRUE(same_bits(w, test::params_after(run[0], t, r))) << "step " << t + 1 << " rank " << r;
  }
  EXPECT_NE(w, run[0]["trace"]["initial"].get<std::vector<float>>());
}

// Timing-only gpt2-small on 8 ranks, K = 4, stage 2: the modeled wire bytes per rank and step are K reduce-scatters
// of the fp32 gradient plus one all-gather of the fp32 weights, each (N-1)/N of its size (nccl-tests' bus-bandwidth
// factor for reduce-scatter and all-gather): (K + 1) (N-1)/N 4n; reduce-once sends 2 (N-1)/N 4n.
TEST(ZeroReduceEveryMicrobatch, ModelsKReduceScattersPerStep) {
  json c = {{"name", "zr"},
            {"model", {{"kind", "gpt2-small"}}},
            {"data", {{"kind", "none"}, {"batch_per_rank", 2}}},
            {"cluster", {{"ranks", 8}, {"hardware", "h100-sxm-8"}}},
            {"sync", {{"kind", "zero"}, {"stage", 2}}},
            {"training", {{"steps", 2}, {"mode", "timing"}, {"accumulation_steps", 4}}}};
  const RunConfig rc = parse_scenario(c.dump(), "<test>").runs.at(0).config;
  const double n = static_cast<double>(make_model(rc)->num_params()), N = 8, K = 4;
  auto run = [&](bool every) {
    json x = c;
    x["sync"]["reduce_every_microbatch"] = every;
    const std::vector<json> r = test::run_scenario_text(x.dump());
    EXPECT_EQ(r[0]["disposition"], "passed") << r[0].dump().substr(0, 400);
    return r[0];
  };
  auto bytes = [](const json &r) { return r["communication"]["bytes_sent_per_rank_per_step"][0].get<double>(); };
  const json every = run(true), once = run(false);
  const double rs = (N - 1) / N * 4.0 * n;
  EXPECT_NEAR(bytes(every), K * rs + rs, 1e-6 * K * rs);
  EXPECT_NEAR(bytes(once), 2.0 * rs, 1e-6 * rs);
  // The report's chains: every bucket of the reduce-once step once per micro-batch, labelled 0..K-1 in launch order.
  const json &be = every["timing"]["modeled"]["communication"]["buckets"];
  const json &bo = once["timing"]["modeled"]["communication"]["buckets"];
  ASSERT_EQ(be.size(), 4 * (bo.size() - 1) + 1);  // both end with the untied all-gather of the weights
  const size_t per = bo.size() - 1;
  for (size_t i = 0; i + 1 < be.size(); ++i) {
    EXPECT_EQ(be[i]["micro_batch"], static_cast<int64_t>(i / per)) << i;
    EXPECT_EQ(be[i]["grad_begin"], bo[i % per]["grad_begin"]) << i;
  }
  EXPECT_FALSE(bo[0].contains("micro_batch"));
}

// docs/memory.md, ZeRO: the gradient term at stage 2 and 3 is 4 ceil(n / N) (fp32, bf16_mixed) when the gradient is
// reduced every micro-batch or there is one micro-batch, and the whole gradient 4n when K > 1 micro-batches are
// reduced once (the rank accumulates all of it until the last); at stage 1 always 4n.
TEST(ZeroReduceEveryMicrobatch, GpuMemoryHoldsAShardedGradientAccumulator) {
  RunConfig c;
  c.model.kind = "llama-7b";
  c.data.kind = "none";
  c.data.batch_per_rank = 1;
  c.training.mode = "timing";
  c.training.optimizer.kind = "adamw";
  c.precision.mode = "bf16_mixed";
  c.cluster.hardware = "h100-sxm-8";
  c.cluster.ranks = 8;
  c.sync.kind = "zero";
  const double psi = 6738415616.0, part = std::ceil(psi / 8);
  auto model = make_model(c);
  auto grad = [&](int64_t stage, int64_t K, bool every) {
    c.sync.stage = stage;
    c.training.accumulation_steps = K;
    c.sync.reduce_every_microbatch = every;
    return estimate_gpu_memory(c, *model).gradients_bytes;
  };
  for (int64_t stage : {2, 3}) {
    EXPECT_EQ(grad(stage, 4, true), static_cast<int64_t>(4 * part)) << stage;
    EXPECT_EQ(grad(stage, 4, false), static_cast<int64_t>(4 * psi)) << stage;
    EXPECT_EQ(grad(stage, 1, false), static_cast<int64_t>(4 * part)) << stage;
  }
  EXPECT_EQ(grad(1, 4, false), static_cast<int64_t>(4 * psi));
  // A plain DP run with K = 4 that does not fit: the hint's stage 2 reduces every micro-batch (sharded accumulator)
  // and says so; its estimate is 2 Psi + 4 part + 12 part + one 25 MiB fp32 reduce bucket + one micro-batch's
  // activations (their formula is checked in test_gpu_memory.cpp).
  c.sync.kind = "allreduce";
  c.sync.stage = 1;
  c.sync.reduce_every_microbatch = false;
  c.training.accumulation_steps = 4;
  const double act = static_cast<double>(estimate_gpu_memory(c, *model).activations_bytes);
  const double stage2 = 2 * psi + 16 * part + 25.0 * 1048576 + act;
  const std::string m = gpu_memory_skip_reason(c, *model);
  EXPECT_NE(m.find(fmt::format("the smallest sync.stage that fits is 2 with sync.reduce_every_microbatch true ({:.1f} "
                               "GiB per rank)", stage2 / 1073741824.0)),
            std::string::npos)
      << m;
}

// The host memory estimate of a zero run (what this machine holds; strategy/zero.cpp's buffers): 1000 parameters on
// 4 ranks, partition ceil(1000 / 4) = 250 rounded up to 16 floats: 256, padded 1024. Per rank the gathered parameters
// (1024) and the initial copy (1000 once); the rank loop's gradient sum (1000), the padded gradient copy (1024) and
// the shard (256); Adam's m and v for the shard only: 2 x 1000 over all ranks, not 2 x 1000 per rank. With
// reduce_every_microbatch (stage 2, K = 2) also the shard's running sum (256) and one micro-batch's gradient (1000).
TEST(ZeroMemory, HostEstimateCountsShardedOptimizerStateAndPaddedBuffers) {
  RunConfig c;
  c.cluster.ranks = 4;
  c.sync.kind = "zero";
  c.sync.stage = 2;
  c.training.optimizer.kind = "adam";
  MemoryEstimate e = estimate_run_memory(c, 1000);
  EXPECT_EQ(e.parameters_bytes, (4 * 1024 + 1000) * 4);
  EXPECT_EQ(e.gradients_bytes, 4 * (1000 + 1024 + 256) * 4);
  EXPECT_EQ(e.optimizer_bytes, 2 * 1000 * 4);
  c.training.accumulation_steps = 2;
  c.sync.reduce_every_microbatch = true;
  e = estimate_run_memory(c, 1000);
  EXPECT_EQ(e.gradients_bytes, 4 * (1000 + 1024 + 256 + 256 + 1000) * 4);
  EXPECT_EQ(e.optimizer_bytes, 2 * 1000 * 4);
}

// ---- Stage 3's parameter all-gathers on the modeled clock, by hand --------------------------------------------------

// Three layers of 1, 4 and 1 million parameters with forward FLOPs 1 : 2 : 1, for the cost model's layer split.
class ThreeLayers final : public Model {
 public:
  ThreeLayers() {
    size_t at = 0;
    for (size_t i = 0; i < 3; ++i) {
      tensors_.push_back({"layer" + std::to_string(i), {static_cast<int64_t>(kLen[i])}, at, kLen[i]});
      layers_.push_back({at, at + kLen[i], kFlops[i], 0.0, 1.0});
      at += kLen[i];
    }
  }
  static constexpr size_t kLen[3] = {1000000, 4000000, 1000000};
  static constexpr double kFlops[3] = {1e6, 2e6, 1e6};
  const std::vector<TensorInfo> &tensors() const override { return tensors_; }
  bool classification() const override { return false; }
  void init_params(float *, uint64_t) const override {}
  std::unique_ptr<Workspace> make_workspace(int64_t) const override { return std::make_unique<Workspace>(); }
  double forward(const float *, const Batch &, Workspace &, const PrecisionPolicy &) const override { return 0.0; }
  void backward(const float *, const Batch &, Workspace &, float *, const PrecisionPolicy &) const override {}
  EvalSums evaluate(const float *, const Batch &, Workspace &) const override { return {}; }
  double forward_flops_per_sample() const override { return 4e6; }
  std::vector<LayerCost> layer_costs() const override { return layers_; }
  bool shape_only() const override { return true; }

 private:
  std::vector<TensorInfo> tensors_;
  std::vector<LayerCost> layers_;
};

// A curve below whose first size every call costs exactly alpha + bytes / beta (collective_model.cpp: below the
// table, the latency and bandwidth of its first two points), at sizes 1 and 2 GB, busbw = size f / time.
BusbwCurve alpha_beta_curve(double alpha_s, double beta_Bps, double f) {
  BusbwCurve c;
  for (double b : {1e9, 2e9}) {
    c.bytes.push_back(b);
    c.busbw_GBps.push_back(b * f / ((alpha_s + b / beta_Bps) * 1e9));
  }
  return c;
}

// FSDP FULL_SHARD's prefetch one unit ahead (forward_prefetch, BACKWARD_PRE, limit_all_gathers: at most two units
// gathered) on 4 ranks, fp32 weights (4 bytes), the all-gather at alpha 10 us + bytes / 100 GB/s: gathers of
// 4, 16, 4 MB take a = 50, 170, 50 us. Forward 400 us split 1 : 2 : 1 by FLOPs (c = 100, 200, 100), backward 800 us
// (200, 400, 200), one micro-batch. Gather i+1 is issued when unit i's compute starts (and gather i is done); unit i
// computes once its gather is done and unit i-1 is computed:
//   forward:  g0 [0, 50]  c0 [50, 150]  g1 [50, 220]  c1 [220, 420]  g2 [220, 270]  c2 [420, 520]: waits 50, 70, 0
//   backward: g2 [0, 50]  c2 [50, 250]  g1 [50, 220]  c1 [250, 650]  g0 [250, 300]  c0 [650, 850]: waits 50, 0, 0
// so 170 us of gathers are exposed per micro-batch (the compute stream's waits), and of their 540 us on the unshard
// stream 370 run under compute (overlapped). Each gather is its own collective: layer i's bytes 4 x len_i (NCCL's
// nBytes of the gathered layer), on the wire (N-1)/N of that, its own time a_i, so its busbw = 3/4 x 4 len_i / a_i
// (below the curve's 75 GB/s). The gradient's reduce-scatter (one bucket of all 6 M fp32 values, 24 MB at 10 us +
// bytes / 100 GB/s = 250 us) is ready when the backward ends, which the waits delay to 1370 us, and runs to 1620:
// 1620 us before the optimizer, 420 us exposed communication. With K = 2 micro-batches of the same per-micro-batch
// compute, every micro-batch gathers each layer again: twice the gathers, the waits and the overlap.
TEST(ZeroStage3Prefetch, PerLayerGathersExposedAndOverlappedOfAThreeLayerToyByHand) {
  HardwareProfile hw = *load_hardware_profile("h100-sxm-8");
  for (auto &per : hw.curves)
    for (auto &c : per) c = BusbwCurve{};
  const int N = 4;
  const double f = 3.0 / 4.0;  // nccl-tests' (n-1)/n for all-gather and reduce-scatter
  hw.curves[static_cast<size_t>(CollectiveKind::kAllGather)][kCurveDefault] = alpha_beta_curve(10e-6, 100e9, f);
  hw.curves[static_cast<size_t>(CollectiveKind::kReduceScatter)][kCurveDefault] = alpha_beta_curve(10e-6, 100e9, f);
  ThreeLayers model;
  CostModel cm(std::make_shared<const HardwareProfile>(hw), N, model.layer_costs(), StragglerConfig{}, 0);
  cm.set_record_layouts(true);
  const double gather_s[3] = {50e-6, 170e-6, 50e-6};
  const double wait_fwd[3] = {50e-6, 70e-6, 0.0}, wait_bwd[3] = {0.0, 0.0, 50e-6};  // by layer
  for (int64_t K : {1, 2}) {
    RunConfig c;
    c.cluster.ranks = N;
    c.sync.kind = "zero";
    c.sync.stage = 3;
    c.sync.bucket_mb = c.sync.first_bucket_mb = 1000;  // one bucket
    c.training.accumulation_steps = K;
    c.training.mode = "timing";
    auto comm = make_host_communicator(N);
    StrategySetup setup{c, model, *comm, N, &cm, true};
    auto zero = make_strategy(setup);
    StepCost cost = cm.make_step_cost();
    const double k = static_cast<double>(K);
    cost.add_time(Phase::kForward, k * 400e-6);
    cost.add_time(Phase::kBackward, k * 800e-6);
    cost.micro_batches = K;
    cost.last_backward_s = 800e-6;
    StepInput in;
    in.cost = &cost;
    in.global_samples = 4.0;
    zero->price(in);
    double rs = -1.0;
    int gathers = 0;
    std::vector<int> seen(static_cast<size_t>(2 * 3 * K), 0);  // (micro-batch, pass, layer)
    for (const CommChain &ch : cost.chains) {
      if (!ch.range.empty() && ch.kind == CollectiveKind::kReduceScatter) rs = ch.comm_s;
      EXPECT_FALSE(ch.range.empty() && ch.kind == CollectiveKind::kAllGather) << "no aggregate gather chain";
      if (!ch.unshard) continue;
      ++gathers;
      const size_t i = ch.slot.unit;
      ASSERT_LT(i, 3u);
      ASSERT_GE(ch.range.micro_batch, 0);
      ASSERT_LT(ch.range.micro_batch, K);
      ++seen[static_cast<size_t>(ch.range.micro_batch * 6 + (ch.slot.backward ? 3 : 0)) + i];
      const double len = static_cast<double>(ThreeLayers::kLen[i]);
      EXPECT_EQ(ch.range.end - ch.range.begin, ThreeLayers::kLen[i]);
      EXPECT_EQ(ch.kind, CollectiveKind::kAllGather);
      EXPECT_TRUE(ch.has_collective);
      EXPECT_DOUBLE_EQ(ch.bytes, 4.0 * len) << "layer " << i;
      EXPECT_DOUBLE_EQ(ch.wire_bytes, 4.0 * len * f) << "layer " << i;
      EXPECT_NEAR(ch.comm_s, gather_s[i], 1e-12) << "layer " << i;
      EXPECT_NEAR(ch.wire_bytes / ch.comm_s, 4.0 * len * f / gather_s[i], 1e-3) << "busbw from its own time";
      EXPECT_LT(ch.wire_bytes / ch.comm_s, 75e9) << "below the link's 100 GB/s x 3/4";
      EXPECT_NEAR(ch.slot.stall_s, ch.slot.backward ? wait_bwd[i] : wait_fwd[i], 1e-12)
          << "layer " << i << (ch.slot.backward ? " backward" : " forward");
    }
    EXPECT_EQ(gathers, 2 * 3 * K) << "one gather per layer, pass and micro-batch";
    for (int s : seen) EXPECT_EQ(s, 1);
    EXPECT_NEAR(rs, 250e-6, 1e-12) << "K " << K;
    const UnshardTotals u = unshard_totals(cost);
    EXPECT_NEAR(u.time_s, k * 540e-6, 1e-12);
    EXPECT_NEAR(u.wait_s, k * 170e-6, 1e-12);
    const std::vector<const StepCost *> ranks(N, &cost);
    const ModeledStep m = cm.model_step(ranks, 0)[0];
    const double before_optimizer = m.times.step_s - m.times.phase_s[static_cast<size_t>(Phase::kOptimizer)];
    EXPECT_NEAR(before_optimizer, k * 1200e-6 + 250e-6 + k * 170e-6, 1e-12) << "K " << K;
    EXPECT_NEAR(m.times.phase_s[static_cast<size_t>(Phase::kCommunicate)], 250e-6 + k * 170e-6, 1e-12) << "K " << K;
    EXPECT_NEAR(m.exposed_s, 250e-6 + k * 170e-6, 1e-12) << "K " << K;
    EXPECT_NEAR(m.overlapped_s, k * 370e-6, 1e-12) << "K " << K;
    EXPECT_GT(m.times.phase_s[static_cast<size_t>(Phase::kOptimizer)], 0.0);
    // The timeline (report.timeline): one slice per layer gather on the rank's unshard track, where the prefetch
    // schedule puts it (K = 1: the forward's at 0, 50, 220 us; the backward starts at 520 us, after the forward's
    // 400 us and its 120 us of waits, its gathers at 520, 570, 770), each as long as the gather; the compute
    // track's waits for them are communicate slices (2 in the forward, 1 in the backward of each micro-batch).
    ASSERT_NE(m.layout, nullptr);
    RunResult res;
    res.hardware = "toy";
    res.modeled_steps.assign(1, {m.times});
    res.modeled_layouts.assign(1, {*m.layout});
    const json trace = json::parse(timeline_text("toy", res).text);
    std::vector<json> gather_slices, waits;
    for (const json &e : trace["traceEvents"]) {
      if (e["ph"] != "X") continue;
      if (e["tid"] == timeline_tid(0, TimelineTrack::kUnshard)) gather_slices.push_back(e);
      const bool compute = e["tid"] == timeline_tid(0, TimelineTrack::kCompute);
      if (compute && e["name"] == "wait for parameter all-gather (exposed)") waits.push_back(e);
    }
    ASSERT_EQ(gather_slices.size(), static_cast<size_t>(2 * 3 * K)) << "one slice per layer gather";
    double wait_us = 0.0;
    for (const json &w : waits) wait_us += w["dur"].get<double>();
    EXPECT_EQ(waits.size(), static_cast<size_t>(3 * K));
    EXPECT_NEAR(wait_us, k * 170.0, 1e-3);
    for (const json &g : gather_slices) {
      const size_t layer = g["args"]["layer"].get<size_t>();
      EXPECT_EQ(g["name"], "all_gather");
      EXPECT_NEAR(g["dur"].get<double>(), gather_s[layer] * 1e6, 1e-3);
      EXPECT_EQ(g["args"]["bytes"].get<double>(), 4.0 * static_cast<double>(ThreeLayers::kLen[layer]));
    }
    if (K == 1) {
      const double at[6] = {0.0, 50.0, 220.0, 520.0, 570.0, 770.0};
      for (size_t j = 0; j < 6; ++j) EXPECT_NEAR(gather_slices[j]["ts"].get<double>(), at[j], 1e-3) << j;
    }
  }
}

// Stage 3 on a real preset (timing-only GPT-2 small, bf16_mixed, 8 ranks, K = 2 micro-batches): every layer with
// parameters is gathered once before its forward and once before its backward in every micro-batch, each gather
// its own collective of the layer's parameters in the compute format (NCCL's nBytes 2 len), (N-1)/N of that on the
// wire, priced at its own size (the collective model's all-gather of those bytes), so its busbw is the curve's at
// that size and never above the profile's link (450 GB/s per direction on h100-sxm-8, 64 on h100-pcie-8); the
// report lists each with its layer, pass and exposed part, and the run's busbw is taken over their whole time.
TEST(ZeroStage3Prefetch, Gpt2GathersEveryLayerTwicePerMicroBatchAtItsOwnSizeAndPrice) {
  for (const char *hardware : {"h100-sxm-8", "h100-pcie-8"}) {
    const json doc = {{"name", "z3"},
                      {"model", {{"kind", "gpt2-small"}}},
                      {"data", {{"kind", "none"}, {"batch_per_rank", 1}}},
                      {"cluster", {{"ranks", 8}, {"hardware", hardware}}},
                      {"precision", {{"mode", "bf16_mixed"}}},
                      {"sync", {{"kind", "zero"}, {"stage", 3}}},
                      {"training", {{"steps", 2}, {"mode", "timing"}, {"accumulation_steps", 2}}}};
    const Scenario s = parse_scenario(doc.dump(), "<test>");
    ASSERT_EQ(s.runs.size(), 1u);
    const RunConfig &c = s.runs[0].config;
    const RunResult r = run_training(c);
    ASSERT_EQ(r.disposition, Disposition::kPassed) << r.message;
    const auto hw = load_hardware_profile(hardware);
    const CollectiveModel coll(*hw, 8);
    std::vector<LayerCost> layers;
    for (const LayerCost &l : make_model(c)->layer_costs())
      if (l.param_end > l.param_begin) layers.push_back(l);
    ASSERT_GT(layers.size(), 10u);
    size_t gathers = 0;
    double wire = 0.0, queue = 0.0;  // queue: the reduce-scatters' time, which a gather may wait behind on the link
    for (const CommChain &ch : r.modeled_chains)
      if (!ch.unshard) queue += ch.comm_s;
    for (const CommChain &ch : r.modeled_chains) {
      if (!ch.unshard) continue;
      ++gathers;
      ASSERT_LT(ch.slot.unit, make_model(c)->layer_costs().size());
      const double len = static_cast<double>(ch.range.end - ch.range.begin);
      EXPECT_DOUBLE_EQ(ch.bytes, 2.0 * len);
      EXPECT_DOUBLE_EQ(ch.wire_bytes, 2.0 * len * 7.0 / 8.0);
      EXPECT_DOUBLE_EQ(ch.comm_s, coll.best(CollectiveKind::kAllGather, 2.0 * len).time_s);
      EXPECT_GE(ch.slot.stall_s, 0.0);
      EXPECT_LE(ch.slot.stall_s, ch.comm_s + queue + 1e-15)
          << "a wait is at most the gather it waits for and what is ahead of it on the shared link";
      EXPECT_LE(ch.wire_bytes / ch.comm_s / 1e9, hw->link_GBps_per_direction) << hardware;
      wire += ch.wire_bytes;
    }
    EXPECT_EQ(gathers, 2 * 2 * layers.size()) << "K x (forward + backward) x layers";
    // Every parameter gathered 2K times: 2K x (N-1)/N x 2n bytes on the wire.
    EXPECT_NEAR(wire / (4.0 * 7.0 / 8.0 * 2.0 * static_cast<double>(r.num_params)), 1.0, 1e-12);
    const json report = run_to_json(s.runs[0], r);
    size_t listed = 0;
    for (const json &b : report["timing"]["modeled"]["communication"]["buckets"])
      if (b.value("stream", "") == "unshard") {
        ++listed;
        EXPECT_TRUE(b["pass"] == "forward" || b["pass"] == "backward");
        EXPECT_LE(b["exposed_ms"].get<double>(), b["comm_ms"].get<double>() + queue * 1e3 + 1e-12);
      }
    EXPECT_EQ(listed, gathers);
    EXPECT_LE(report["communication"]["busbw_GBps"].get<double>(), hw->link_GBps_per_direction) << hardware;
    EXPECT_GT(report["timing"]["modeled"]["communication"]["overlapped"]["all"]["total_ms"].get<double>(), 0.0);
  }
}

// sync.reduce_every_microbatch at stage 2 on the same toy, K = 2 micro-batches of forward 400 us and backward 800 us:
// micro-batch 0's reduce-scatter (one bucket, 250 us) is ready when its backward ends (1200 us) and runs under
// micro-batch 1 (to 1450); micro-batch 1's is ready at 2400 and ends at 2650; the post-step all-gather of the fp32
// weights (24 MB, 250 us) follows: 2900 us before the optimizer, 500 us exposed.
TEST(ZeroStage3Prefetch, ReduceEveryMicrobatchHidesTheEarlierReduceScattersByHand) {
  HardwareProfile hw = *load_hardware_profile("h100-sxm-8");
  for (auto &per : hw.curves)
    for (auto &c : per) c = BusbwCurve{};
  const int N = 4;
  for (auto kind : {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter})
    hw.curves[static_cast<size_t>(kind)][kCurveDefault] = alpha_beta_curve(10e-6, 100e9, 3.0 / 4.0);
  ThreeLayers model;
  CostModel cm(std::make_shared<const HardwareProfile>(hw), N, model.layer_costs(), StragglerConfig{}, 0);
  RunConfig c;
  c.cluster.ranks = N;
  c.sync.kind = "zero";
  c.sync.stage = 2;
  c.sync.reduce_every_microbatch = true;
  c.sync.bucket_mb = c.sync.first_bucket_mb = 1000;
  c.training.accumulation_steps = 2;
  c.training.mode = "timing";
  auto comm = make_host_communicator(N);
  StrategySetup setup{c, model, *comm, N, &cm, true};
  auto zero = make_strategy(setup);
  StepCost cost = cm.make_step_cost();
  cost.add_time(Phase::kForward, 800e-6);
  cost.add_time(Phase::kBackward, 1600e-6);
  cost.micro_batches = 2;
  cost.last_backward_s = 800e-6;
  StepInput in;
  in.cost = &cost;
  in.global_samples = 8.0;
  zero->price(in);
  ASSERT_EQ(cost.chains.size(), 3u);  // two reduce-scatters, one all-gather
  const std::vector<const StepCost *> ranks(N, &cost);
  const ModeledStep m = cm.model_step(ranks, 0)[0];
  EXPECT_NEAR(m.times.step_s - m.times.phase_s[static_cast<size_t>(Phase::kOptimizer)], 2900e-6, 1e-12);
  EXPECT_NEAR(m.exposed_s, 500e-6, 1e-12);
  EXPECT_NEAR(m.overlapped_s, 250e-6, 1e-12);
}

} // namespace
} // namespace gs
