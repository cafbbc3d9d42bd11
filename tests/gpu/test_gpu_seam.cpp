// The cuda backend's device path (sim/backend/cuda_backend.h: the rank loop with parameters, gradients and optimizer
// state in GPU memory, the GPU model on them, the GPU communicators) against the host backend and against the staged
// path (host buffers, the GPU model) on the same runs. Part of gradsweep_gpu_kernel_tests (ctest gpu.seam), whose main
// exits 77 without a GPU; the compressors too (their CompressOps on the device). NOT YET RUN ON A GPU: written and
// compiled with the backend, it runs at the next loan (tools/device_check.sh step gpu_seam). Bounds:
// the forward / backward GEMMs are cuBLAS's (k <= 32 terms, relative error below 32 x 2^-24 per output), the element
// operations and the local communicator's rank-order sums are the host's bits, so over 20 SGD steps the losses stay
// within 1e-4 relative of the host's (the staged suite's bound for the same runs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "sim/backend/backend.h"
#include "sim/backend/cuda_backend.h"
#include "sim/runtime/rank_loop.h"
#include "tests/gpu/gpu_test_util.h"

namespace gs {
namespace {

double relative(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

// `c` through make_cuda_backend whatever path its plan takes (to show what the device path refuses).
RunResult run_on_device(const RunConfig& c) {
  RunHooks hooks;
  hooks.make_backend = [](const RunConfig& config) { return make_cuda_backend(config); };
  return run_training(c, hooks);
}

void expect_close(const RunResult& got, const RunResult& want, double tol, const std::string& what) {
  EXPECT_EQ(got.disposition, want.disposition) << what << ": " << got.message;
  EXPECT_EQ(got.steps_completed, want.steps_completed) << what;
  ASSERT_EQ(got.series.size(), want.series.size()) << what;
  for (size_t i = 0; i < want.series.size(); ++i) {
    EXPECT_LE(relative(got.series[i].train_loss, want.series[i].train_loss), tol)
        << what << " step " << want.series[i].step << ": " << got.series[i].train_loss << " vs "
        << want.series[i].train_loss;
    if (want.series[i].eval_loss && got.series[i].eval_loss) {
      EXPECT_LE(relative(*got.series[i].eval_loss, *want.series[i].eval_loss), tol) << what;
    }
    EXPECT_EQ(got.series[i].eval_loss.has_value(), want.series[i].eval_loss.has_value()) << what;
  }
}

// One configuration on the host backend, cluster.backend "cuda" (its device path) and the staged path (`what` names it).
struct Trio {
  std::string what;
  RunResult host, device, staged;
};

Trio run_three(const std::vector<std::string>& sets) {
  Trio t;
  for (const std::string& s : sets) t.what += s + " ";
  std::vector<std::string> host_sets = sets, cuda_sets = sets;
  host_sets.push_back("cluster.backend=host");
  cuda_sets.push_back("cluster.backend=cuda");
  t.host = run_training(test::small_mlp_config(host_sets));
  t.device = run_training(test::small_mlp_config(cuda_sets));
  EXPECT_EQ(t.device.cuda_path, "device") << t.what << t.device.backend_reason;
  t.staged = test::run_staged(test::small_mlp_config(cuda_sets));
  return t;
}

// Each configuration the device path runs: against the host backend and the staged path.
TEST(GpuSeam, RunsMatchTheHostBackendAndTheStagedPath) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"training.optimizer.kind=adam", "training.optimizer.lr=0.01", "training.clip_grad_norm=0.05"},
      {"precision.loss_scale=dynamic", "precision.initial_scale=1024", "sync.staleness=1"},
      {"training.pitfall=zero_grad_in_loop"},
      {"report.trace=true"},
      {"precision.mode=bf16_mixed"},
      {"sync.kind=local_sgd", "sync.period=4", "sync.warmup_steps=2", "sync.average_optimizer_state=true"},
      {"sync.kind=independent"},
      {"sync.kind=zero", "sync.stage=2", "sync.reduce_every_microbatch=true"},
  };
  for (const std::vector<std::string>& sets : cases) {
    const Trio t = run_three(sets);
    const std::string& what = t.what;
    const RunResult &host = t.host, &staged = t.staged, &seam = t.device;
    ASSERT_EQ(host.disposition, Disposition::kPassed) << what << host.message;
    EXPECT_EQ(seam.backend, "cuda") << what;
    const double tol = sets.size() == 1 && sets[0] == "precision.mode=bf16_mixed" ? 1e-2 : 1e-4;
    expect_close(seam, host, tol, what + "(device vs host)");
    expect_close(seam, staged, tol, what + "(device vs staged)");
    if (!host.trace.empty()) {
      ASSERT_EQ(seam.trace.size(), host.trace.size()) << what;
      EXPECT_TRUE(seam.replicas_identical) << what;
    }
  }
}

// The compressors on GPU memory (CompressOps of CudaElementOps: the compressor kernels; every error-feedback
// placement), ZeRO's cast reduce-scatter and fp16_pure, against the host backend and the staged path (which runs the
// host compressors): losses within 1e-2 relative (the GEMMs' rounding can move a selection or a
// stochastic rounding at its boundary, which a lossy step then carries), and the payload bytes of the kinds whose size
// does not depend on the values exactly the host's.
TEST(GpuSeam, CompressorsZeroCastsAndFp16PureMatchTheHostBackend) {
  const std::vector<std::vector<std::string>> cases = {
      {"compression.kind=topk", "compression.ratio=0.1", "compression.error_feedback=gradient"},
      {"compression.kind=randomk", "compression.ratio=0.25", "compression.shared_indices=true",
       "compression.unbiased=true"},
      {"compression.kind=threshold", "compression.tau=0.001", "compression.error_feedback=gradient"},
      {"compression.kind=qsgd", "compression.levels=16"},
      {"compression.kind=terngrad"},
      {"compression.kind=signsgd", "compression.vote=true"},
      {"compression.kind=onebit", "compression.error_feedback=gradient", "compression.measure_error=true"},
      {"compression.kind=dgc", "compression.ratio=0.1", "compression.clip_norm=1", "compression.warmup_steps=2"},
      {"compression.kind=fp16", "compression.divide=split"},
      {"compression.kind=powersgd", "compression.rank=2", "compression.error_feedback=gradient"},
      {"compression.kind=bf16", "compression.accumulate=fp32", "compression.error_feedback=gradient"},
      {"compression.kind=topk", "compression.ratio=0.1", "compression.error_feedback=momentum"},
      {"compression.kind=randomk", "compression.ratio=0.25", "compression.error_feedback=ef21"},
      {"sync.kind=zero", "sync.stage=1", "compression.kind=fp16", "compression.divide=split"},
      {"sync.kind=zero", "sync.stage=2", "compression.kind=bf16", "compression.accumulate=fp32",
       "compression.divide=post"},
      {"precision.mode=fp16_pure", "precision.loss_scale=dynamic", "precision.initial_scale=1024"},
      {"sync.kind=local_sgd", "sync.period=2", "precision.mode=fp16_pure"},
      {"sync.kind=zero", "sync.stage=1", "precision.mode=fp16_pure"},
  };
  for (const std::vector<std::string>& sets : cases) {
    const Trio t = run_three(sets);
    const std::string& what = t.what;
    const RunResult &host = t.host, &staged = t.staged, &seam = t.device;
    ASSERT_EQ(host.disposition, Disposition::kPassed) << what << host.message;
    expect_close(seam, host, 1e-2, what + "(device vs host)");
    expect_close(seam, staged, 1e-2, what + "(device vs staged)");
    if (sets[0].rfind("compression.kind=", 0) != 0) continue;  // fp16_pure and ZeRO runs: no payload check
    ASSERT_TRUE(seam.compression.is_object()) << what;
    const std::string kind = sets[0].substr(sets[0].find('=') + 1);
    const bool fixed_size = kind == "topk" || kind == "randomk" || kind == "qsgd" || kind == "terngrad" ||
                            kind == "fp16" || kind == "bf16";
    const char* payload = "payload_bytes_per_rank_per_step";
    if (fixed_size) {
      EXPECT_EQ(seam.compression[payload], host.compression[payload]) << what;
    }
  }
}

// The measured clock on the device path: forward, backward, communicate and optimizer times come from CUDA events on the
// rank's stream (ElementOps::settle at each step's end), so every step of every rank has forward, backward and
// optimizer time above zero and none above the step's wall time.
TEST(GpuSeam, PhaseTimesComeFromTheRanksStream) {
  const RunResult r = run_training(test::small_mlp_config({"cluster.backend=cuda"}));
  ASSERT_EQ(r.disposition, Disposition::kPassed) << r.message;
  ASSERT_EQ(r.steps.size(), 2u);
  for (const auto& rank_steps : r.steps) {
    ASSERT_EQ(rank_steps.size(), 20u);
    for (const StepTimes& s : rank_steps) {
      for (Phase p : {Phase::kForward, Phase::kBackward, Phase::kOptimizer}) {
        const double t = s.phase_s[static_cast<size_t>(p)];
        EXPECT_GT(t, 0.0) << "phase " << static_cast<int>(p);
        EXPECT_LE(t, s.step_s) << "phase " << static_cast<int>(p);
      }
      // Communicate: the events' time less the wait for the other ranks, which the strategy moves to kWait at once
      // (before settle delivers the events), so it may come out at zero (or a rounding below) on an uneven step.
      EXPECT_GE(s.phase_s[static_cast<size_t>(Phase::kCommunicate)] + s.phase_s[static_cast<size_t>(Phase::kWait)], 0.0);
    }
  }
}

// The parameter server (workers in GPU memory, the server in host memory) and the 1-bit optimizers (their compressed
// all-reduce through CudaElementOps' CompressOps) on the device path, against the host backend and the staged
// comparison. Bounds: the PS's pushes and pulls are copies and its server the host's code, so the GEMMs' rounding is
// the only difference (1e-4, as above); the 1-bit optimizers' scale ||x|| / sqrt(n) is a block sum on the device
// (a few ulp from the host's order), and each sign decision the GEMMs move near zero is carried by the error
// feedback, so 1e-2 (the compressors' bound).
TEST(GpuSeam, ParameterServerAndOnebitOptimizersMatchTheHostBackend) {
  const std::vector<std::string> onebit = {"training.optimizer.momentum=null", "training.optimizer.eps=1e-3",
                                           "training.optimizer.lr=0.01", "training.steps=12"};
  auto with = [&](std::vector<std::string> sets, bool one_bit) {  // the shared settings first: a case's own win
    if (one_bit) sets.insert(sets.begin(), onebit.begin(), onebit.end());
    return sets;
  };
  struct Case {
    std::vector<std::string> sets;
    double tol;
  };
  const std::vector<Case> cases = {
      {{"sync.kind=parameter_server", "cluster.ranks=3"}, 1e-4},
      {{"sync.kind=parameter_server", "sync.staleness=1", "training.optimizer.kind=adam",
        "training.optimizer.momentum=null", "training.optimizer.lr=0.01"}, 1e-4},
      {{"sync.kind=parameter_server", "sync.staleness=inf"}, 1e-4},
      {{"sync.kind=parameter_server", "precision.loss_scale=dynamic", "precision.initial_scale=1024"}, 1e-4},
      {{"sync.kind=parameter_server", "compression.kind=topk", "compression.ratio=0.1",
        "compression.error_feedback=true"}, 1e-2},
      {{"sync.kind=parameter_server", "precision.mode=fp16_pure"}, 2e-2},
      {with({"training.optimizer.kind=onebit_adam", "training.optimizer.freeze_step=3"}, true), 1e-2},
      {with({"training.optimizer.kind=onebit_adam", "training.optimizer.freeze_step=3", "cluster.ranks=4",
             "training.optimizer.exp_avg_mask=zero_variance", "training.optimizer.weight_decay=0.01"}, true), 1e-2},
      {with({"training.optimizer.kind=zero_one_adam", "training.optimizer.var_freeze_step=4",
             "training.optimizer.var_update_scaler=2", "training.optimizer.local_step_scaler=2",
             "training.optimizer.local_step_clipper=4"}, true), 1e-2},
      {with({"training.optimizer.kind=onebit_lamb", "training.optimizer.freeze_step=3", "training.optimizer.lr=0.02"},
            true), 1e-2},
  };
  for (const Case& k : cases) {
    const Trio t = run_three(k.sets);
    ASSERT_EQ(t.host.disposition, Disposition::kPassed) << t.what << t.host.message;
    expect_close(t.device, t.host, k.tol, t.what + "(device vs host)");
    expect_close(t.device, t.staged, k.tol, t.what + "(device vs staged)");
  }
}

// What the cuda backend does not run fails before any step, naming the setting: a model without a GPU model (run
// through make_cuda_backend directly: validation and the plan refuse it before that).
TEST(GpuSeam, ModelsWithoutAGpuModelAreRefused) {
  RunConfig c = test::small_mlp_config({"cluster.backend=cuda"});
  c.model.kind = "quadratic";
  const RunResult r = run_on_device(c);
  EXPECT_EQ(r.disposition, Disposition::kFailed);
  EXPECT_NE(r.message.find("model.kind: \"quadratic\""), std::string::npos) << r.message;
  EXPECT_EQ(r.steps_completed, 0);
}

}  // namespace
}  // namespace gs
