// The cuda backend against the host backend: the GPU model's forward / backward / evaluate (sim/backend/cuda_model.h,
// on host buffers) against the host model on one batch, then one run per feature on cluster.backend "cuda" (the
// device path, every buffer in GPU memory) and on the staged comparison (the GPU model on host buffers: the staged
// cuda path that passed on an H200 before the device path replaced it). Part of gradsweep_gpu_kernel_tests (ctest
// gpu.staged), whose main exits 77 without a GPU. A new feature is one TEST here calling expect_cuda_paths_match_host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "sim/config/scenario.h"
#include "sim/model/model.h"
#include "sim/backend/cuda_model.h"
#include "sim/runtime/device.h"
#include "sim/runtime/rank_loop.h"
#include "sim/validate/validate.h"
#include "tests/gpu/gpu_test_util.h"

namespace gs {
namespace {

double relative(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

// ||a - b|| / ||b|| over two equal-length vectors.
double norm_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0.0, n = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    n += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(d) / std::max(std::sqrt(n), 1e-30);
}

RunConfig model_config(const std::vector<std::string>& sets) {
  const char* kScenario = R"({"name": "g", "model": {"kind": "mlp", "layers": [16, 32, 4]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 16, "hidden": 24, "out_dim": 4}}, "training": {"steps": 1}})";
  std::vector<std::string> s = sets;
  s.emplace_back("cluster.backend=host");
  return parse_scenario(kScenario, "g.json", s).runs.at(0).config;
}

// A batch of `rows` normal inputs with labels (classification) or targets (mse).
Batch random_batch(int64_t rows, int64_t in_dim, int64_t out_dim, bool classification, int rank, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Batch b;
  b.rank = rank;
  b.count = rows;
  b.in_dim = in_dim;
  b.out_dim = classification ? 0 : out_dim;
  b.x.resize(static_cast<size_t>(rows * in_dim));
  for (float& v : b.x) v = normal(rng);
  if (classification) {
    std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(out_dim - 1));
    for (int64_t r = 0; r < rows; ++r) b.labels.push_back(label(rng));
  } else {
    b.y.resize(static_cast<size_t>(rows * out_dim));
    for (float& v : b.y) v = normal(rng);
  }
  return b;
}

// One micro-batch through both models from the same parameters and the same nonzero starting gradient (backward
// ACCUMULATES). Bounds: the only difference in fp32 is the GEMMs' summation order (cuBLAS vs CBLAS) and the loss sum's
// (device fixed order vs host loop), each a relative error below k u = 32 x 2^-24 ~ 2e-6 per GEMM output for the k <= 32
// terms summed here; through two layers, the softmax / mse and the loss sum that stays below 1e-5 relative for the loss
// and the gradient's norm. bf16_mixed rounds at the same points on both; a GEMM output a few ulp apart in fp32 may
// round to the neighbouring bf16 (2^-8 relative), so its bound is 1e-2 for the loss and 5e-2 for the gradient, and
// the count of rounded gradient values is shape-only: exactly equal.
void expect_model_matches_host(const std::vector<std::string>& sets, const PrecisionPolicy& policy, int rank,
                               double loss_tol, double grad_tol) {
  const RunConfig config = model_config(sets);
  std::unique_ptr<Model> host = make_model(config);
  std::unique_ptr<Model> gpu = make_gpu_model(config);
  ASSERT_EQ(gpu->num_params(), host->num_params());
  const size_t n = host->num_params();
  std::vector<float> params(n), params_gpu(n);
  host->init_params(params.data(), 7);
  gpu->init_params(params_gpu.data(), 7);
  EXPECT_EQ(params, params_gpu) << "init is the host model's";
  const int64_t in_dim = config.model.layers.front(), out_dim = config.model.layers.back();
  const bool cls = host->classification();
  const Batch batch = random_batch(8, in_dim, out_dim, cls, rank, 11);
  std::vector<float> grad_host(n), grad_gpu(n);
  for (size_t i = 0; i < n; ++i) grad_host[i] = grad_gpu[i] = 0.01f * static_cast<float>(i % 7);
  auto ws_host = host->make_workspace(8);
  auto ws_gpu = gpu->make_workspace(8);
  const double loss_host = host->forward(params.data(), batch, *ws_host, policy);
  const double loss_gpu = gpu->forward(params.data(), batch, *ws_gpu, policy);
  host->backward(params.data(), batch, *ws_host, grad_host.data(), policy);
  gpu->backward(params.data(), batch, *ws_gpu, grad_gpu.data(), policy);
  EXPECT_GT(loss_host, 0.0);
  EXPECT_LE(relative(loss_gpu, loss_host), loss_tol) << "gpu " << loss_gpu << " host " << loss_host;
  EXPECT_LE(norm_relative(grad_gpu, grad_host), grad_tol);
  EXPECT_EQ(ws_gpu->precision.grad_values, ws_host->precision.grad_values);
  EXPECT_EQ(ws_gpu->precision.grad_nonfinite, 0u);
  // A second micro-batch accumulates into the same gradient.
  const Batch second = random_batch(5, in_dim, out_dim, cls, rank, 12);
  host->forward(params.data(), second, *ws_host, policy);
  gpu->forward(params.data(), second, *ws_gpu, policy);
  host->backward(params.data(), second, *ws_host, grad_host.data(), policy);
  gpu->backward(params.data(), second, *ws_gpu, grad_gpu.data(), policy);
  EXPECT_LE(norm_relative(grad_gpu, grad_host), grad_tol);
  // Evaluation: 100 samples through workspaces of 32 rows (4 chunks), fp32 whatever the policy.
  const Batch eval = random_batch(100, in_dim, out_dim, cls, 0, 13);
  auto es_host = host->make_workspace(32);
  auto es_gpu = gpu->make_workspace(32);
  const EvalSums eh = host->evaluate(params.data(), eval, *es_host);
  const EvalSums eg = gpu->evaluate(params.data(), eval, *es_gpu);
  EXPECT_EQ(eg.count, 100);
  EXPECT_LE(relative(eg.loss_sum, eh.loss_sum), 1e-5);
  if (cls) {
    EXPECT_LE(std::abs(eg.correct - eh.correct), 1) << "a near tie may flip one argmax, not more";
  }
}

TEST(GpuStagedModel, Fp32GeluMlpMatchesHostModel) {
  expect_model_matches_host({"model.activation=gelu"}, PrecisionPolicy{}, 0, 1e-5, 1e-5);
}

TEST(GpuStagedModel, Fp32LinearMseOnRankOneMatchesHostModel) {
  expect_model_matches_host({"model.kind=linear", "model.layers=[16, 4]", "model.loss=mse",
                             "data.teacher.task=regression"},
                            PrecisionPolicy{}, 1, 1e-5, 1e-5);
}

// fp32 under a static loss scale 1024 (a power of two: scaling is exact on both sides): the gradient of 1024 x the sum.
TEST(GpuStagedModel, Fp32UnderALossScaleMatchesHostModel) {
  PrecisionPolicy p;
  p.loss_scale = 1024.0f;
  expect_model_matches_host({}, p, 0, 1e-5, 1e-5);
}

TEST(GpuStagedModel, Bf16MixedMatchesHostEmulation) {
  PrecisionPolicy p;
  p.mode = PrecisionMode::kBf16Mixed;
  expect_model_matches_host({"precision.mode=bf16_mixed"}, p, 0, 1e-2, 5e-2);
}

// fp16_pure (gradient held and accumulated in fp16) and fp8_mixed (first use: every delayed scale 1 on both, E4M3
// operands, bf16 elsewhere) round at the host twin's points; fp16's 2^-11 and the bf16 tensors' 2^-8 relative steps
// give the bf16 bounds again.
TEST(GpuStagedModel, Fp16PureAndFp8MixedMatchHostEmulation) {
  PrecisionPolicy pure;
  pure.mode = PrecisionMode::kFp16Pure;
  expect_model_matches_host({"precision.mode=fp16_pure"}, pure, 0, 1e-2, 5e-2);
  PrecisionPolicy fp8;
  fp8.mode = PrecisionMode::kFp8Mixed;
  expect_model_matches_host({"precision.mode=fp8_mixed"}, fp8, 0, 1e-2, 5e-2);
}

// ---- Runs -----------------------------------------------------------------------------------------------------------

// test::small_mlp_config: 2 ranks, 2 micro-batches of 8 per step, a small MLP, 20 SGD steps (the model and length of
// GpuEndToEnd's 8-rank test). Host and staged cuda run the same loop and strategy code on host buffers; only forward / backward differ, by
// the GEMMs' summation order (a relative 2e-6 per GEMM output, see expect_model_matches_host). Over 20 steps at lr 0.1
// with momentum 0.9 those differences stay below 1e-4 relative in the train loss (the bound GpuEndToEnd uses for
// the same model and steps between backends); a lost micro-batch, a skipped strategy step or a wrong scale moves it
// by far more than 1e-2.

struct Pair {
  RunResult host, cuda, staged;  // cuda: cluster.backend "cuda" (the path its plan takes); staged: the staged path forced
};

// One run against the host's on each path.
void expect_matches_host(const RunResult& got, const RunResult& host, double tol, const std::string& what) {
  EXPECT_EQ(got.disposition, Disposition::kPassed) << what << ": " << got.message;
  EXPECT_EQ(got.backend, "cuda") << what;
  EXPECT_EQ(got.series.size(), host.series.size()) << what;
  for (size_t i = 0; i < std::min(got.series.size(), host.series.size()); ++i)
    EXPECT_LE(relative(got.series[i].train_loss, host.series[i].train_loss), tol)
        << what << " step " << host.series[i].step << ": cuda " << got.series[i].train_loss << " host "
        << host.series[i].train_loss;
  if (!got.series.empty() && !host.series.empty() && host.series.back().eval_loss) {
    EXPECT_TRUE(got.series.back().eval_loss.has_value()) << what;
    if (got.series.back().eval_loss) {
      EXPECT_LE(relative(*got.series.back().eval_loss, *host.series.back().eval_loss), tol) << what;
    }
  }
  EXPECT_EQ(got.replicas_identical, host.replicas_identical) << what;
  EXPECT_EQ(got.steps_completed, host.steps_completed) << what;
}

// The cuda runs of `cuda_sets` (cluster.backend "cuda", its device path, and the staged comparison: the GPU model on
// host buffers) against the host run of `host_sets` (the same settings unless a mode the host does not run, tf32,
// stands against its fp32).
Pair expect_cuda_paths_match_host(const std::vector<std::string>& cuda_sets,
                                  const std::vector<std::string>& host_sets, double tol) {
  auto make = [&](const std::string& backend, const std::vector<std::string>& sets) {
    std::vector<std::string> s = sets;
    s.push_back("cluster.backend=" + backend);
    return test::small_mlp_config(s);
  };
  Pair p{run_training(make("host", host_sets)), run_training(make("cuda", cuda_sets)),
         test::run_staged(make("cuda", cuda_sets))};
  EXPECT_EQ(p.host.disposition, Disposition::kPassed) << p.host.message;
  EXPECT_EQ(p.cuda.cuda_path, "device") << p.cuda.backend_reason;
  expect_matches_host(p.cuda, p.host, tol, "cuda (device)");
  expect_matches_host(p.staged, p.host, tol, "staged");
  return p;
}

Pair expect_cuda_paths_match_host(const std::vector<std::string>& sets, double tol) {
  return expect_cuda_paths_match_host(sets, sets, tol);
}

// Top-k 10% with error feedback: the selected indices are a function of the gradient, so a near tie at the k-th
// magnitude (values 2e-6 apart) may pick another index of nearly the same magnitude on one backend; the residual keeps
// what was not sent, so such a swap moves the loss by about lr x that value's share: 1e-3 relative.
TEST(GpuStaged, AllReduceTopKWithErrorFeedbackMatchesHost) {
  const Pair p = expect_cuda_paths_match_host(
      {"compression.kind=topk", "compression.ratio=0.1", "compression.error_feedback=true"}, 1e-3);
  EXPECT_FALSE(p.cuda.compression.is_null());
}

TEST(GpuStaged, LocalSgdMatchesHost) {
  const Pair p = expect_cuda_paths_match_host({"sync.kind=local_sgd", "sync.period=4"}, 1e-4);
  EXPECT_FALSE(p.cuda.replicas_identical) << "period 4 on 2 ranks: replicas differ between averages";
}

TEST(GpuStaged, ParameterServerBspMatchesHost) {
  expect_cuda_paths_match_host({"sync.kind=parameter_server", "sync.staleness=0"}, 1e-4);
}

TEST(GpuStaged, DelayedUpdateMatchesHost) { expect_cuda_paths_match_host({"sync.staleness=1"}, 1e-4); }

TEST(GpuStaged, GradientClippingMatchesHost) { expect_cuda_paths_match_host({"training.clip_grad_norm=0.05"}, 1e-4); }

TEST(GpuStaged, Fp32StaticLossScaleMatchesHost) {
  const Pair p =
      expect_cuda_paths_match_host({"precision.loss_scale=static", "precision.initial_scale=1024"}, 1e-4);
  ASSERT_TRUE(p.cuda.precision.has_value());
  EXPECT_EQ(p.cuda.precision->loss_scale, "static");
  EXPECT_EQ(p.cuda.precision->final_loss_scale, 1024.0);
  EXPECT_TRUE(p.cuda.precision->skipped_steps.empty());
  EXPECT_EQ(p.cuda.precision->grad_nonfinite, 0u);
}

TEST(GpuStaged, PitfallZeroGradInLoopMatchesHost) {
  expect_cuda_paths_match_host({"training.pitfall=zero_grad_in_loop"}, 1e-4);
}

// The trace holds every rank's parameters after every step; all-reduce keeps the replicas identical (checked bit for
// bit against the trace), and each step's parameters are within the loss bound of the host's.
TEST(GpuStaged, TraceHasIdenticalReplicasAndFollowsHost) {
  const Pair p = expect_cuda_paths_match_host({"report.trace=true"}, 1e-4);
  EXPECT_TRUE(p.cuda.replicas_identical);
  EXPECT_EQ(p.cuda.trace_initial, p.host.trace_initial);
  ASSERT_EQ(p.cuda.trace.size(), p.host.trace.size());
  for (size_t s = 0; s < p.cuda.trace.size(); ++s) {
    ASSERT_EQ(p.cuda.trace[s].size(), 2u);
    EXPECT_LE(norm_relative(p.cuda.trace[s][0], p.host.trace[s][0]), 1e-4) << "step " << s + 1;
  }
}

// The node cache is the host loader's: the same hits and misses on both backends, step for step.
TEST(GpuStaged, NodeCacheMatchesHost) {
  const Pair p = expect_cuda_paths_match_host({"data.cache.policy=lru", "data.cache.capacity_fraction=0.5"}, 1e-4);
  ASSERT_TRUE(p.cuda.data && p.host.data);
  EXPECT_EQ(p.cuda.data->cache_policy, "lru");
  EXPECT_EQ(p.cuda.data->cache_capacity_samples, p.host.data->cache_capacity_samples);
  ASSERT_EQ(p.cuda.data->steps.size(), p.host.data->steps.size());
  for (size_t r = 0; r < p.cuda.data->steps.size(); ++r) {
    ASSERT_EQ(p.cuda.data->steps[r].size(), p.host.data->steps[r].size());
    for (size_t s = 0; s < p.cuda.data->steps[r].size(); ++s) {
      EXPECT_EQ(p.cuda.data->steps[r][s].counts.storage_samples, p.host.data->steps[r][s].counts.storage_samples);
      EXPECT_EQ(p.cuda.data->steps[r][s].counts.hits, p.host.data->steps[r][s].counts.hits);
    }
  }
}

// fp16_pure: fp16 weights and gradients, the strategies' fp16 wire. Its rounding steps are 2^-11 relative, finer than bf16's, so GpuEndToEnd's bf16 bound of
// 2e-2 per step holds a fortiori; the counted gradient values depend on shapes only: equal.
TEST(GpuStaged, Fp16PureMatchesHost) {
  const Pair p = expect_cuda_paths_match_host({"precision.mode=fp16_pure"}, 2e-2);
  ASSERT_TRUE(p.cuda.precision && p.host.precision);
  EXPECT_EQ(p.cuda.precision->mode, "fp16_pure");
  EXPECT_EQ(p.cuda.precision->grad_values, p.host.precision->grad_values);
  EXPECT_GT(p.cuda.precision->grad_values, 0u);
}

// tf32 under a static loss scale; the host skips tf32, so it stands against the host's fp32 with the same scale: TF32 rounds GEMM inputs to 10 mantissa bits
// (2^-11 relative, 2^-10 if the unit truncates), GpuEndToEnd.Fp8AndTf32OnCudaMatchHost's bound 2e-2 per step.
TEST(GpuStaged, Tf32WithALossScaleFollowsHostFp32) {
  const Pair p = expect_cuda_paths_match_host({"precision.mode=tf32", "precision.loss_scale=static",
                                             "precision.initial_scale=1024"},
                                            {"precision.mode=fp32", "precision.loss_scale=static",
                                             "precision.initial_scale=1024"},
                                            2e-2);
  ASSERT_TRUE(p.cuda.precision.has_value());
  EXPECT_EQ(p.cuda.precision->mode, "tf32");
  EXPECT_EQ(p.cuda.precision->loss_scale, "static");
}

// fp8_mixed with local SGD: delayed scalings per rank workspace as on
// the host; a flipped bf16 rounding may change an amax and every later scale, so GpuEndToEnd's fp8 bound 1e-1.
TEST(GpuStaged, Fp8MixedLocalSgdMatchesHost) {
  const Pair p = expect_cuda_paths_match_host({"precision.mode=fp8_mixed", "sync.kind=local_sgd", "sync.period=2"}, 1e-1);
  ASSERT_TRUE(p.cuda.precision && p.host.precision);
  EXPECT_EQ(p.cuda.precision->grad_values, p.host.precision->grad_values);
  EXPECT_LT(p.cuda.series.back().train_loss, p.cuda.series.front().train_loss) << "it trains";
}

}  // namespace
}  // namespace gs
