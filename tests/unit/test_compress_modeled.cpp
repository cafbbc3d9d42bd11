// The modeled price of a compressed bucket (sim/compress/modeled.h): bytes on the wire per collective for every
// compressor from its wire format's arithmetic, the encode / decode kernels, the same price from a training run's
// CompressedReduction and from the shape alone, timing-only runs priced like training runs, and the refusals of
// compression.expected_density. Expected values are worked out by hand from the wire formats in the comments.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>

#include "kernels/rng.h"
#include "sim/app/memory.h"
#include "sim/compress/modeled.h"
#include "sim/compress/reduce.h"
#include "sim/config/scenario.h"
#include "sim/cost/cost_model.h"
#include "sim/validate/validate.h"
#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

CompressionConfig compression(const json& j) {
  std::vector<ConfigIssue> issues;
  RunConfig c = config_from_json({{"compression", j}}, issues);
  return c.compression;
}

BucketPrice price_of(const json& j, size_t n, int ranks, bool ef = false) {
  BucketShape b;
  b.begin = 0;
  b.end = n;
  b.ranks = ranks;
  b.error_feedback = ef;
  return price_compressed_bucket(compression(j), b);
}

using Calls = std::vector<std::pair<WireCollective, double>>;
constexpr WireCollective kAG = WireCollective::kAllGather;
constexpr WireCollective kAR = WireCollective::kAllReduce;
constexpr WireCollective kRS = WireCollective::kReduceScatter;

// (collective, nBytes) of each call.
Calls calls_of(const BucketPrice& p) {
  Calls out;
  for (const WireCall& c : p.calls) out.emplace_back(c.kind, c.bytes);
  return out;
}

// n = 1000 fp32 values on 4 ranks. A gather's nBytes is the whole output: 4 ranks x the payload padded to 4 bytes.
TEST(CompressModeledBytes, EveryCompressorFromItsWireFormat) {
  const size_t n = 1000;
  // top-k ratio 0.01: k = round(0.01 x 1000) = 10 pairs of uint32 index + fp32 value = 80 bytes per rank.
  BucketPrice p = price_of({{"kind", "topk"}, {"ratio", 0.01}}, n, 4);
  EXPECT_EQ(p.payload_bytes, 80.0);
  EXPECT_EQ(calls_of(p), (Calls{{kAG, 320.0}}));
  // k = 7 given: 56 bytes per rank.
  EXPECT_EQ(calls_of(price_of({{"kind", "topk"}, {"k", 7}}, n, 4)), (Calls{{kAG, 224.0}}));
  // random-k k = 5: pairs (40 bytes); shared indices send the 5 values only (20 bytes).
  EXPECT_EQ(calls_of(price_of({{"kind", "randomk"}, {"k", 5}}, n, 4)), (Calls{{kAG, 160.0}}));
  p = price_of({{"kind", "randomk"}, {"k", 5}, {"shared_indices", true}}, n, 4);
  EXPECT_EQ(p.payload_bytes, 20.0);
  EXPECT_EQ(calls_of(p), (Calls{{kAG, 80.0}}));
  // threshold at expected density 0.02: 20 pairs; dgc at 0.001: 1 pair.
  EXPECT_EQ(calls_of(price_of({{"kind", "threshold"}, {"expected_density", 0.02}}, n, 4)), (Calls{{kAG, 640.0}}));
  EXPECT_EQ(calls_of(price_of({{"kind", "dgc"}, {"expected_density", 0.001}}, n, 4)), (Calls{{kAG, 32.0}}));
  // QSGD s = 16: levels 0..16 need 5 bits, + sign = 6 bits per value: 4 (norm) + 6000 / 8 = 754 bytes, padded 756.
  p = price_of({{"kind", "qsgd"}, {"levels", 16}}, n, 4);
  EXPECT_EQ(p.payload_bytes, 754.0);
  EXPECT_EQ(calls_of(p), (Calls{{kAG, 3024.0}}));
  // TernGrad: 4 (scale) + 2 bits x 1000 = 254 bytes, padded 256.
  EXPECT_EQ(calls_of(price_of({{"kind", "terngrad"}}, n, 4)), (Calls{{kAG, 1024.0}}));
  // signSGD: 8 (scale, zero count) + one sign plane of 125 bytes = 133, padded 136; 1-bit SGD: 12 + 125 = 137 -> 140.
  p = price_of({{"kind", "signsgd"}}, n, 4);
  EXPECT_EQ(p.payload_bytes, 133.0);
  EXPECT_EQ(calls_of(p), (Calls{{kAG, 544.0}}));
  EXPECT_EQ(calls_of(price_of({{"kind", "onebit"}}, n, 4)), (Calls{{kAG, 560.0}}));
  // Casts: the all-reduce of 2 (fp16, bf16) or 1 (fp8) bytes per value; fp32 accumulation: a reduce-scatter at the
  // cast size, then an all-gather of the fp32 sums.
  EXPECT_EQ(calls_of(price_of({{"kind", "fp16"}}, n, 4)), (Calls{{kAR, 2000.0}}));
  EXPECT_EQ(calls_of(price_of({{"kind", "fp8_e5m2"}}, n, 4)), (Calls{{kAR, 1000.0}}));
  EXPECT_EQ(calls_of(price_of({{"kind", "bf16"}, {"accumulate", "fp32"}}, n, 4)),
            (Calls{{kRS, 2000.0}, {kAG, 4000.0}}));
}

TEST(CompressModeledBytes, PowerSgdFactorsAndDenseRemainder) {
  // A [16, 8] weight (128 values, offset 0) and a [16] bias (offset 128): rank 2, (16 + 8) x 2 = 48 < 128, so the
  // weight is compressed. Calls: the bias dense (16 x 4 = 64 bytes), P (16 x 2 x 4 = 128), Q (8 x 2 x 4 = 64).
  std::vector<TensorInfo> tensors(2);
  tensors[0].offset = 0;
  tensors[0].count = 128;
  tensors[0].shape = {16, 8};
  tensors[1].offset = 128;
  tensors[1].count = 16;
  tensors[1].shape = {16};
  BucketShape b;
  b.end = 144;
  b.ranks = 4;
  b.tensors = &tensors;
  b.step = 3;
  const CompressionConfig c = compression({{"kind", "powersgd"}, {"rank", 2}, {"start_step", 2}});
  BucketPrice p = price_compressed_bucket(c, b);
  EXPECT_EQ(calls_of(p), (Calls{{kAR, 64.0}, {kAR, 128.0}, {kAR, 64.0}}));
  EXPECT_EQ(p.payload_bytes, 256.0);
  // Encode: P = M Q, Q = M^T P, P Q_r^T (2 x 128 x 2 each) and Gram-Schmidt of P and Q (2 x (16 + 8) x 2^2)
  // = 1536 + 192 FLOPs;
  // decode P Q^T = 512. Launches: 1 + 3 per matrix, 1 + 1 per matrix.
  EXPECT_EQ(p.encode.flops, 1728.0);
  EXPECT_EQ(p.decode.flops, 512.0);
  EXPECT_EQ(p.encode.launches, 4.0);
  EXPECT_EQ(p.decode.launches, 2.0);
  // Before start_step: the whole bucket all-reduced dense in fp32 (144 x 4 bytes).
  b.step = 1;
  p = price_compressed_bucket(c, b);
  EXPECT_EQ(calls_of(p), (Calls{{kAR, 576.0}}));
  EXPECT_EQ(p.encode.flops, 0.0);
  // min_compression_rate 3: 48 x 3 = 144 >= 128, sent dense.
  b.step = 3;
  p = price_compressed_bucket(compression({{"kind", "powersgd"}, {"rank", 2}, {"min_compression_rate", 3}}), b);
  EXPECT_EQ(calls_of(p), (Calls{{kAR, 576.0}}));
}

TEST(CompressModeledKernels, TopKIsTorchMultiBlockRadixSelect) {
  // n = 1000, k = 10, no error feedback. Encode: |p| written (read 4000 + write 4000), 4 radix passes and the gather
  // pass read p (5 x 4000), the 80-byte payload written: 28080 bytes in 21 launches. Decode: the 320 gathered bytes
  // read and the 4000-byte sum written.
  BucketPrice p = price_of({{"kind", "topk"}, {"k", 10}}, 1000, 4);
  EXPECT_EQ(p.encode.bytes, 28080.0);
  EXPECT_EQ(p.encode.launches, 21.0);
  EXPECT_EQ(p.decode.bytes, 4320.0);
  EXPECT_EQ(p.decode.launches, 1.0);
  // Error feedback adds p = g + e (read 2, write 1: 12000 bytes) before and e = p - own after.
  BucketPrice e = price_of({{"kind", "topk"}, {"k", 10}}, 1000, 4, true);
  EXPECT_EQ(e.encode.bytes, 40080.0);
  EXPECT_EQ(e.decode.bytes, 16320.0);
  // A memory-bound compressor: one read of p plus the payload (QSGD: 4000 + 754).
  EXPECT_EQ(price_of({{"kind", "qsgd"}, {"levels", 16}}, 1000, 4).encode.bytes, 4754.0);
  EXPECT_EQ(price_of({{"kind", "qsgd"}, {"levels", 16}}, 1000, 4).encode.launches, 1.0);
}

TEST(CompressModeledBytes, ThresholdWithoutDensityOrMeasurementIsRefused) {
  try {
    price_of({{"kind", "threshold"}}, 1000, 4);
    FAIL() << "priced without a density";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("compression.expected_density"), std::string::npos) << e.what();
  }
  // A measured payload needs no density: this rank's 24 bytes, the largest rank's 40 (the all-gather pads to it).
  BucketShape b;
  b.end = 1000;
  b.ranks = 4;
  b.measured_own_bytes = 24.0;
  b.measured_max_bytes = 40.0;
  BucketPrice p = price_compressed_bucket(compression({{"kind", "threshold"}}), b);
  EXPECT_EQ(p.payload_bytes, 24.0);
  EXPECT_EQ(calls_of(p), (Calls{{kAG, 160.0}}));
}

// ---- A training run's CompressedReduction prices a bucket as the shape alone does -----------------------------------

RunConfig linear_config(const json& comp, int ranks) {
  std::vector<ConfigIssue> issues;
  return config_from_json(
      {{"model", {{"kind", "linear"}, {"layers", {8, 16}}, {"bias", true}, {"loss", "mse"}}},
       {"data", {{"kind", "teacher"}, {"teacher", {{"task", "regression"}, {"in_dim", 8}, {"out_dim", 16}}}}},
       {"cluster", {{"ranks", ranks}}},
       {"compression", comp}},
      issues);
}

struct Reduced {
  std::vector<CommChain> chains;  // rank 0's modeled step
  json report;
};

// One step of CompressedReduction over `ranks` threads of a linear model [8, 16] with bias (144 values, one bucket),
// rank r's gradient g(r, i); every rank's modeled step recorded.
Reduced reduce_once(const json& comp, int ranks, const std::function<float(int, size_t)>& g) {
  const RunConfig cfg = linear_config(comp, ranks);
  auto model = make_model(cfg);
  const size_t n = model->num_params();
  CostModel cm(cfg, *model);
  auto comm = make_host_communicator(ranks);
  CompressedReduction red(cfg, *model, *comm, ranks, {{0, n}});
  std::vector<StepCost> costs(static_cast<size_t>(ranks), cm.make_step_cost());
  std::vector<std::thread> th;
  for (int r = 0; r < ranks; ++r) {
    th.emplace_back([&, r] {
      std::vector<float> grad(n);
      for (size_t i = 0; i < n; ++i) grad[i] = g(r, i);
      PhaseClock clock;
      clock.begin_step();
      red.reduce(r, 0, grad.data(), static_cast<double>(ranks), clock, &costs[static_cast<size_t>(r)]);
    });
  }
  for (auto& t : th) t.join();
  return {costs[0].chains, red.report()};
}

// The same bucket priced from its shape alone, as a timing-only run does.
std::vector<CommChain> modeled_once(const json& comp, int ranks) {
  const RunConfig cfg = linear_config(comp, ranks);
  auto model = make_model(cfg);
  CostModel cm(cfg, *model);
  StepCost cost = cm.make_step_cost();
  BucketShape b;
  b.end = model->num_params();
  b.ranks = ranks;
  b.error_feedback = cfg.compression.error_feedback != "none" && cfg.compression.kind != "dgc";
  b.tensors = &model->tensors();
  add_bucket_price(cost, price_compressed_bucket(cfg.compression, b), 0, b.end);
  return cost.chains;
}

TEST(CompressModeledEquality, TrainingRunPricesTheBucketAsItsShapeAlone) {
  // Normal gradients: no exact zeros (the sign compressors send one plane), every rank's top-k keeps k.
  auto normal = [](int r, size_t i) {
    float x[4];
    fill_normal(x, 4, 3, Purpose::kInit, static_cast<uint32_t>(i), static_cast<uint32_t>(r));
    return x[0];
  };
  // threshold tau 2: exactly 9 values per rank are >= 2 in magnitude (3 + i + r for i < 9, 0.5 elsewhere): 9 / 144.
  auto nine_large = [](int r, size_t i) { return i < 9 ? 3.0f + static_cast<float>(i + r) : 0.5f; };
  struct Case {
    json train, timing;
    std::function<float(int, size_t)> g;
  };
  const std::vector<Case> cases = {
      {{{"kind", "fp16"}}, {}, normal},
      {{{"kind", "bf16"}, {"accumulate", "fp32"}}, {}, normal},
      {{{"kind", "topk"}, {"k", 5}}, {}, normal},
      {{{"kind", "topk"}, {"ratio", 0.1}, {"error_feedback", "gradient"}}, {}, normal},
      {{{"kind", "randomk"}, {"k", 6}, {"shared_indices", true}}, {}, normal},
      {{{"kind", "qsgd"}, {"levels", 4}}, {}, normal},
      {{{"kind", "terngrad"}}, {}, normal},
      {{{"kind", "signsgd"}, {"error_feedback", "gradient"}}, {}, normal},
      {{{"kind", "onebit"}}, {}, normal},
      {{{"kind", "powersgd"}, {"rank", 2}}, {}, normal},
      {{{"kind", "threshold"}, {"tau", 2.0}},
       {{"kind", "threshold"}, {"tau", 2.0}, {"expected_density", 9.0 / 144.0}},
       nine_large},
  };
  for (const Case& c : cases) {
    const std::string at = c.train.dump();
    const Reduced trained = reduce_once(c.train, 3, c.g);
    const std::vector<CommChain> modeled = modeled_once(c.timing.is_null() ? c.train : c.timing, 3);
    ASSERT_EQ(trained.chains.size(), 1u) << at;
    ASSERT_EQ(modeled.size(), 1u) << at;
    EXPECT_EQ(trained.chains[0].pre_s, modeled[0].pre_s) << at;
    EXPECT_EQ(trained.chains[0].comm_s, modeled[0].comm_s) << at;
    EXPECT_EQ(trained.chains[0].post_s, modeled[0].post_s) << at;
    EXPECT_EQ(trained.chains[0].bytes, modeled[0].bytes) << at;
    EXPECT_EQ(trained.chains[0].wire_bytes, modeled[0].wire_bytes) << at;
    EXPECT_GT(modeled[0].pre_s, 0.0) << at;
  }
  // What the training run really encoded: top-k k = 5 sends 5 pairs (40 bytes), signSGD 8 + 18 bytes for 144 values.
  EXPECT_EQ(reduce_once({{"kind", "topk"}, {"k", 5}}, 3, normal).report["payload_bytes_per_rank_per_step"], 40.0);
  EXPECT_EQ(reduce_once({{"kind", "signsgd"}}, 3, normal).report["payload_bytes_per_rank_per_step"], 26.0);
}

// A timing-only run (training.mode "timing") of a compressed MLP is priced like the training run of the same shape:
// the same bucket collectives and the same modeled compute, compress and exposed communication (the step differs by
// the training run's data phase).
TEST(CompressModeledEquality, TimingOnlyRunMatchesTrainingRun) {
  auto scenario = [](const std::string& mode, const json& comp) {
    json s = {{"name", "eq"},
              {"model", {{"kind", "mlp"}, {"layers", {8, 32, 4}}}},
              {"cluster", {{"ranks", 4}}},
              {"training", {{"steps", 2}, {"eval_every", 0}, {"mode", mode}}},
              {"compression", comp}};
    if (mode == "train") {
      s["data"] = {{"kind", "teacher"},
                   {"batch_per_rank", 8},
                   {"teacher", {{"in_dim", 8}, {"hidden", 12}, {"out_dim", 4}, {"train_samples", 256},
                                {"eval_samples", 64}}}};
    } else {
      s["data"] = {{"kind", "none"}, {"batch_per_rank", 8}};
    }
    return test::run_scenario_text(s.dump()).at(0);
  };
  for (const json& comp : {json{{"kind", "topk"}, {"k", 9}}, json{{"kind", "powersgd"}, {"rank", 2}},
                           json{{"kind", "fp16"}}, json{{"kind", "qsgd"}}}) {
    const json train = scenario("train", comp), timing = scenario("timing", comp);
    const json& a = train["timing"]["modeled"];
    const json& b = timing["timing"]["modeled"];
    EXPECT_EQ(a["communication"]["buckets"], b["communication"]["buckets"]) << comp.dump();
    // The same terms, summed into the phase in another order: equal to the last bits.
    EXPECT_DOUBLE_EQ(a["phases"]["compress"]["all"]["p50_ms"].get<double>(),
                     b["phases"]["compress"]["all"]["p50_ms"].get<double>())
        << comp.dump();
    for (const char* phase : {"forward", "backward", "communicate"})
      EXPECT_DOUBLE_EQ(a["phases"][phase]["all"]["p50_ms"].get<double>(),
                       b["phases"][phase]["all"]["p50_ms"].get<double>())
          << comp.dump() << " " << phase;
    EXPECT_GT(b["phases"]["compress"]["all"]["p50_ms"].get<double>(), 0.0) << comp.dump();
  }
}

// ---- The report's compression object of a timing-only run ---------------------------------------------------------

// A timing-only GPT-2 small run (8 ranks, h100-sxm-8) with compression `comp`; its report entry.
json gpt2_small_timing(const json& comp, const json& sync = {{"kind", "allreduce"}}, int steps = 3) {
  const json s = {{"name", "t"},
                  {"model", {{"kind", "gpt2-small"}}},
                  {"data", {{"kind", "none"}, {"batch_per_rank", 1}}},
                  {"cluster", {{"ranks", 8}, {"hardware", "h100-sxm-8"}}},
                  {"training", {{"mode", "timing"}, {"steps", steps}, {"eval_every", 0}}},
                  {"sync", sync},
                  {"compression", comp}};
  return test::run_scenario_text(s.dump()).at(0);
}

// GPT-2 small (Radford et al. 2019: 12 layers, d = 768, d_ff = 3072, vocab 50257, context 1024, tied head):
// embeddings 50257 x 768 + 1024 x 768; per layer two LayerNorms (2 x 768 each), qkv 2304 x 768 + 2304, proj
// 768 x 768 + 768, fc 3072 x 768 + 3072, proj 768 x 3072 + 768; the final LayerNorm 2 x 768.
constexpr double kGpt2SmallParams = 50257.0 * 768 + 1024.0 * 768 +
                                    12.0 * (4 * 768 + 2304.0 * 768 + 2304 + 768.0 * 768 + 768 + 3072.0 * 768 + 3072 +
                                            768.0 * 3072 + 768) +
                                    2 * 768;

TEST(CompressModeledReport, TimingOnlyTopKWritesTheWireFormatsBytes) {
  // One top-k over the whole model at 1%: k = round(0.01 x 124,439,808) = 1,244,398 (index + value pairs, 8 bytes):
  // 9,955,184 payload bytes; the all-gather of 8 such payloads puts 7/8 of 8 x 9,955,184 on the wire per rank.
  ASSERT_EQ(kGpt2SmallParams, 124439808.0);
  const double k = 1244398.0, payload = 8.0 * k;
  for (const json& comp : {json{{"kind", "topk"}, {"ratio", 0.01}, {"scope", "model"}},
                           json{{"kind", "topk"}, {"ratio", 0.01}, {"error_feedback", "gradient"}}}) {
    // The second: per bucket, one bucket holding the whole gradient (sync.bucket_mb larger than its 475 MiB).
    const json run = gpt2_small_timing(comp, {{"kind", "allreduce"}, {"bucket_mb", 1024}, {"first_bucket_mb", 1024}});
    ASSERT_EQ(run["num_params"], kGpt2SmallParams);
    const json& c = run["compression"];
    ASSERT_TRUE(c.is_object()) << run.dump().substr(0, 400);
    EXPECT_EQ(c["kind"], "topk");
    EXPECT_EQ(c["collective"], "all_gather");
    EXPECT_EQ(c["modeled"], true);
    EXPECT_EQ(c["error_feedback"], comp.contains("error_feedback") ? "plain" : "none");
    EXPECT_EQ(c["dense_bytes_per_rank_per_step"], 4.0 * kGpt2SmallParams);
    EXPECT_EQ(c["payload_bytes_per_rank_per_step"], payload);
    EXPECT_DOUBLE_EQ(c["wire_bytes_per_rank_per_step"].get<double>(), 7.0 / 8.0 * 8.0 * payload);
    EXPECT_EQ(c["collectives_per_rank_per_step"], 1.0);
    EXPECT_DOUBLE_EQ(c["compression_ratio"].get<double>(), 4.0 * kGpt2SmallParams / payload);
    for (const char* key : {"compress_time", "decompress_time", "relative_error", "max_relative_error",
                            "residual_norm"})
      EXPECT_TRUE(c[key].is_null()) << key;
    // The same bytes the modeled clock put on the wire.
    EXPECT_DOUBLE_EQ(run["communication"]["bytes_sent_per_rank_per_step"][0].get<double>(),
                     c["wire_bytes_per_rank_per_step"].get<double>());
  }
}

TEST(CompressModeledReport, TimingOnlyPowerSgdWritesFactorsAndDenseRest) {
  // Rank 4: every matrix [rows, cols] of GPT-2 small has (rows + cols) x 4 x 2 < rows x cols, so each sends P and Q,
  // (rows + cols) x 4 fp32 values: wte (50257 + 768) 4, wpe (1024 + 768) 4, per layer qkv (2304 + 768) 4, proj
  // (768 + 768) 4, fc and mlp proj (3072 + 768) 4 each; the biases and LayerNorms go dense (9984 per layer + 1536).
  const double factors = (50257.0 + 768) * 4 + (1024.0 + 768) * 4 +
                         12.0 * ((2304.0 + 768) * 4 + (768.0 + 768) * 4 + 2 * (3072.0 + 768) * 4);
  const double dense = 12.0 * (4 * 768 + 2304 + 768 + 3072 + 768) + 2 * 768;
  const double payload = 4.0 * (factors + dense);
  ASSERT_EQ(payload, 3689744.0);
  // start_step 1 of 3 steps: step 0 all-reduces the dense fp32 gradient (4 x 124,439,808 bytes), steps 1 and 2 the
  // payload; the ring all-reduce puts 2 x 7/8 of each on the wire.
  const json run = gpt2_small_timing({{"kind", "powersgd"}, {"rank", 4}, {"start_step", 1}});
  const json& c = run["compression"];
  ASSERT_TRUE(c.is_object());
  EXPECT_EQ(c["collective"], "all_reduce");
  const double mean_payload = (4.0 * kGpt2SmallParams + 2.0 * payload) / 3.0;
  EXPECT_DOUBLE_EQ(c["payload_bytes_per_rank_per_step"].get<double>(), mean_payload);
  EXPECT_DOUBLE_EQ(c["wire_bytes_per_rank_per_step"].get<double>(), 2.0 * 7.0 / 8.0 * mean_payload);
  // From step 1 on alone (start_step 0): the compressed steps only.
  const json c0 = gpt2_small_timing({{"kind", "powersgd"}, {"rank", 4}})["compression"];
  EXPECT_DOUBLE_EQ(c0["payload_bytes_per_rank_per_step"].get<double>(), payload);
  EXPECT_DOUBLE_EQ(c0["compression_ratio"].get<double>(), 4.0 * kGpt2SmallParams / payload);
}

// DGC's warm-up (Lin et al. 2018, section 3.4; docs/strategies.md): over W steps the density rises exponentially to its
// target, d_t = d^((t + 1) / (W + 1)) for t < W, then d. A timing-only run's target is compression.expected_density.
TEST(CompressModeledDgcWarmup, BucketBytesFollowTheScheduleEndingAtTheExpectedDensity) {
  // n = 1,000,000 on 4 ranks, d = 0.001, W = 4: 0.001^(1/5) = 0.2512 -> 251,189 kept, 0.001^(2/5) = 0.0631 -> 63,096,
  // 0.001^(3/5) = 0.01585 -> 15,849, 0.001^(4/5) = 0.003981 -> 3,981, then 1,000 (8 bytes each).
  const json comp = {{"kind", "dgc"}, {"expected_density", 0.001}, {"warmup_steps", 4}};
  const double kept[] = {251189, 63096, 15849, 3981, 1000, 1000};
  BucketShape b;
  b.end = 1000000;
  b.ranks = 4;
  for (int64_t t = 0; t < 6; ++t) {
    b.step = t;
    const BucketPrice p = price_compressed_bucket(compression(comp), b);
    EXPECT_EQ(p.payload_bytes, 8.0 * kept[t]) << "step " << t;
    EXPECT_EQ(calls_of(p), (Calls{{kAG, 4 * 8.0 * kept[t]}})) << "step " << t;
    const double d = t < 4 ? std::pow(0.001, (t + 1) / 5.0) : 0.001;
    EXPECT_EQ(kept[t], std::max(1.0, std::round(d * 1e6))) << "step " << t;
  }
  // Without a warm-up every step keeps the target.
  b.step = 0;
  EXPECT_EQ(price_compressed_bucket(compression({{"kind", "dgc"}, {"expected_density", 0.001}}), b).payload_bytes,
            8000.0);
}

TEST(CompressModeledDgcWarmup, TimingOnlyRunReportsEveryWarmupStep) {
  // GPT-2 small in one bucket, 8 ranks, d = 0.01, W = 3, 5 steps: steps 0..2 keep round(n 0.01^((t + 1) / 4)), steps
  // 3 and 4 round(0.01 n) = 1,244,398.
  const json run = gpt2_small_timing({{"kind", "dgc"}, {"expected_density", 0.01}, {"warmup_steps", 3}},
                                     {{"kind", "allreduce"}, {"bucket_mb", 1024}, {"first_bucket_mb", 1024}}, 5);
  const json& c = run["compression"];
  ASSERT_TRUE(c.is_object());
  EXPECT_EQ(c["error_feedback"], "own");
  EXPECT_EQ(c["expected_density"], 0.01);
  double sum = 0.0;
  for (int64_t t = 0; t < 3; ++t) {
    const double d = std::pow(0.01, (t + 1) / 4.0);
    const double payload = 8.0 * std::round(d * kGpt2SmallParams);
    sum += payload;
    const json& w = c["warmup"].at(static_cast<size_t>(t));
    EXPECT_EQ(w["step"], t);
    EXPECT_DOUBLE_EQ(w["density"].get<double>(), d);
    EXPECT_EQ(w["payload_bytes_per_rank"], payload) << t;
    EXPECT_DOUBLE_EQ(w["wire_bytes_per_rank"].get<double>(), 7.0 * payload) << t;  // 7/8 of 8 payloads
  }
  EXPECT_EQ(c["warmup"].size(), 3u);
  sum += 2 * 8.0 * 1244398.0;
  EXPECT_DOUBLE_EQ(c["payload_bytes_per_rank_per_step"].get<double>(), sum / 5.0);
  EXPECT_DOUBLE_EQ(run["communication"]["bytes_sent_per_rank_per_step"][0].get<double>(), 7.0 * sum / 5.0);
}

// The GPU memory estimate holds the largest payload of the run: DGC's step 0, 0.01^(1/4) of the bucket, its own and
// the 8 gathered (docs/memory.md, compression buffers).
TEST(CompressModeledDgcWarmup, CompressionBuffersHoldTheFirstWarmupStep) {
  const json s = {{"name", "t"},
                  {"model", {{"kind", "gpt2-small"}}},
                  {"data", {{"kind", "none"}, {"batch_per_rank", 1}}},
                  {"cluster", {{"ranks", 8}, {"hardware", "h100-sxm-8"}}},
                  {"training", {{"mode", "timing"}, {"steps", 5}}},
                  {"sync", {{"kind", "allreduce"}, {"bucket_mb", 1024}, {"first_bucket_mb", 1024}}},
                  {"compression", {{"kind", "dgc"}, {"expected_density", 0.01}, {"warmup_steps", 3}}}};
  const RunConfig c = parse_scenario(s.dump(), "t.json", {}).runs.at(0).config;
  const GpuMemoryEstimate e = estimate_gpu_memory(c, *make_model(c));
  EXPECT_EQ(e.compression_bytes,
            static_cast<int64_t>(9.0 * 8.0 * std::round(std::pow(0.01, 1.0 / 4.0) * kGpt2SmallParams)));
}

// An uncompressed timing-only run still writes null.
TEST(CompressModeledReport, UncompressedTimingOnlyRunWritesNull) {
  EXPECT_TRUE(gpt2_small_timing({{"kind", "none"}})["compression"].is_null());
}

// ---- compression.expected_density and the timing-only refusals ------------------------------------------------------

std::vector<ConfigIssue> issues_of(const json& j) {
  try {
    parse_scenario(j.dump(), "bad.json", {});
  } catch (const ScenarioError& e) {
    return e.issues();
  }
  ADD_FAILURE() << "scenario was accepted: " << j.dump();
  return {};
}

json timing_scenario(const json& comp, const std::string& sync = "allreduce") {
  return {{"name", "t"},
          {"model", {{"kind", "gpt2-small"}}},
          {"data", {{"kind", "none"}, {"batch_per_rank", 4}}},
          {"cluster", {{"ranks", 8}, {"hardware", "h100-sxm-8"}}},
          {"training", {{"mode", "timing"}, {"steps", 2}}},
          {"sync", {{"kind", sync}}},
          {"compression", comp}};
}

TEST(CompressModeledConfig, ExpectedDensityIsRequiredInTimingOnlyAndRefusedInTraining) {
  auto is = issues_of(timing_scenario({{"kind", "dgc"}}));
  ASSERT_EQ(is.size(), 1u);
  EXPECT_EQ(is[0].path, "compression.expected_density");
  EXPECT_NE(is[0].message.find("expected the fraction kept per bucket in (0, 1]"), std::string::npos) << is[0].message;
  is = issues_of(timing_scenario({{"kind", "threshold"}, {"expected_density", 1.5}}));
  ASSERT_EQ(is.size(), 1u);
  EXPECT_EQ(is[0].path, "compression.expected_density");
  // A compressor whose payload does not depend on the values takes no density.
  is = issues_of(timing_scenario({{"kind", "topk"}, {"expected_density", 0.01}}));
  ASSERT_EQ(is.size(), 1u);
  EXPECT_EQ(is[0].path, "compression.expected_density");
  EXPECT_EQ(is[0].message, "only applies when compression.kind is \"threshold\" or \"dgc\" (it is \"topk\")");
  // A training run measures it.
  is = issues_of({{"name", "t"},
                  {"model", {{"kind", "mlp"}, {"layers", {8, 4, 3}}}},
                  {"data", {{"kind", "teacher"}, {"teacher", {{"in_dim", 8}, {"out_dim", 3}}}}},
                  {"training", {{"steps", 3}}},
                  {"compression", {{"kind", "threshold"}, {"expected_density", 0.01}}}});
  ASSERT_EQ(is.size(), 1u);
  EXPECT_EQ(is[0].path, "compression.expected_density");
  EXPECT_NE(is[0].message.find("a training run measures"), std::string::npos) << is[0].message;
  // The parameter server's timing-only runs price compressed pushes too.
  EXPECT_NO_THROW(parse_scenario(timing_scenario({{"kind", "topk"}}, "parameter_server").dump(), "ps.json", {}));
  // Accepted: every compressor on the all-reduce, threshold and dgc with a density.
  for (const json& ok : {json{{"kind", "topk"}}, json{{"kind", "powersgd"}}, json{{"kind", "signsgd"}},
                         json{{"kind", "dgc"}, {"expected_density", 0.001}}}) {
    EXPECT_NO_THROW(parse_scenario(timing_scenario(ok).dump(), "ok.json", {})) << ok.dump();
  }
}

// A timing-only parameter server with compressed pushes prices each BSP clock as a training run of the same scenario
// prices it with the payloads its workers really encoded: the modeled step, communicate, compress and optimizer
// medians agree to 1e-9 for every compressor whose payload size does not depend on the gradient's values; signSGD and
// 1-bit add a zero plane when a bucket holds exact zeros (the trained gradient of a ReLU MLP does), which timing-only
// leaves out (modeled.h: "a bucket without exact zeros"), so there timing-only is at most the trained price and
// within 1% of it. Before this, timing-only refused compression under sync.kind "parameter_server".
TEST(CompressModeledConfig, ParameterServerTimingOnlyPricesCompressedPushesAsTraining) {
  const json base = {{"name", "psc"},
                     {"model", {{"kind", "mlp"}, {"layers", {64, 256, 256, 10}}, {"loss", "cross_entropy"}}},
                     {"data", {{"kind", "teacher"}, {"batch_per_rank", 32},
                               {"teacher", {{"in_dim", 64}, {"out_dim", 10}, {"train_samples", 4096},
                                            {"eval_samples", 64}}}}},
                     {"cluster", {{"ranks", 4}, {"backend", "host"}, {"hardware", "h100-pcie-8"}}},
                     {"training", {{"steps", 4}, {"eval_every", 0}}},
                     {"sync", {{"kind", "parameter_server"}}}};  // a co-located shard per worker
  auto p50 = [](const json& run, const char* phase) {
    const json& m = run["timing"]["modeled"];
    return (phase == nullptr ? m["step"] : m["phases"][phase])["all"]["p50_ms"].get<double>();
  };
  for (const char* kind : {"topk", "randomk", "qsgd", "terngrad", "fp16", "bf16", "signsgd", "onebit"}) {
    json doc = base;
    doc["compression"] = {{"kind", kind}};
    const json trained = test::run_scenario_text(doc.dump())[0];
    doc["training"]["mode"] = "timing";
    const json timing = test::run_scenario_text(doc.dump())[0];
    ASSERT_EQ(trained["disposition"], "passed") << kind;
    ASSERT_EQ(timing["disposition"], "passed") << kind;
    const bool zero_plane = std::string(kind) == "signsgd" || std::string(kind) == "onebit";
    for (const char* phase : {static_cast<const char*>(nullptr), "communicate", "compress", "optimizer"}) {
      const double t = p50(timing, phase), r = p50(trained, phase);
      const std::string what = std::string(kind) + " " + (phase == nullptr ? "step" : phase);
      if (zero_plane) {
        EXPECT_LE(t, r * (1 + 1e-9)) << what;
        EXPECT_NEAR(t, r, 0.01 * r) << what;
      } else {
        EXPECT_NEAR(t, r, 1e-9 * r) << what;
      }
    }
  }
}

}  // namespace
}  // namespace gs
