// The backend seam end to end (sim/backend/backend.h, RunHooks::make_backend): the host rank loop run on a sealed
// device memory (tests/unit/sealed_memory.h: every float stored bit-complemented, so any loop of the rank loop, the
// step control or a strategy that touches a parameter or gradient element without going through ElementOps computes
// garbage) with a model that reads its parameters from that memory and adds its gradient into it, announcing each
// layer once its elements are final there, and a communicator that reduces started buckets only at the wait. The
// reference is the same run on the host backend (whose bits other suites tie to PyTorch): losses, evaluations,
// parameters, traces and divergence verdicts must be identical. Suite: BackendSeam.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/backend/backend.h"
#include "sim/backend/cuda_backend.h"
#include "sim/compress/compressor.h"
#include "sim/config/scenario.h"
#include "sim/core/error.h"
#include "sim/report/report.h"
#include "sim/runtime/rank_loop.h"
#include "sim/strategy/onebit_adam.h"
#include "sim/strategy/strategy.h"
#include "sim/strategy/zero_one_adam.h"
#include "sim/validate/validate.h"
#include "tests/unit/sealed_memory.h"

namespace gs {
namespace {

using test::SealedCommunicator;
using test::SealedMemory;

// The host model behind sealed parameters and gradients: each call unseals what it reads into host copies of its
// workspace, runs the host model, and seals what it writes; each layer the host backward announces is sealed into the
// caller's gradient before the event goes on (a device model's contract: final in device memory, then announced).
class SealedModel final : public HostShapedModel {
 public:
  SealedModel(std::unique_ptr<Model> host, SealedMemory& memory) : HostShapedModel(std::move(host)), memory_(memory) {}

  std::unique_ptr<Workspace> make_workspace(int64_t max_batch) const override {
    auto ws = std::make_unique<Space>();
    ws->inner = host().make_workspace(max_batch);
    ws->params.resize(num_params());
    ws->grad.resize(num_params());
    return ws;
  }
  double forward(const float* params, const Batch& batch, Workspace& ws, const PrecisionPolicy& p) const override {
    Space& s = space(ws, params, batch.rank);
    const double loss = host().forward(s.params.data(), batch, *s.inner, p);
    ws.precision = s.inner->precision;
    return loss;
  }
  void backward(const float* params, const Batch& batch, Workspace& ws, float* grad,
                const PrecisionPolicy& p) const override {
    Space& s = space(ws, params, batch.rank);
    memory_.download(batch.rank, s.grad.data(), grad, s.grad.size());
    Relay relay{memory_, batch.rank, grad, s.grad.data(), ws.grad_ready};
    s.inner->grad_ready = &relay;
    host().backward(s.params.data(), batch, *s.inner, s.grad.data(), p);
    s.inner->grad_ready = nullptr;
    if (relay.announced == 0) memory_.upload(batch.rank, grad, s.grad.data(), s.grad.size());
    ws.precision = s.inner->precision;
  }
  EvalSums evaluate(const float* params, const Batch& batch, Workspace& ws) const override {
    Space& s = space(ws, params, batch.rank);
    return host().evaluate(s.params.data(), batch, *s.inner);
  }

 private:
  struct Space final : Workspace {
    std::unique_ptr<Workspace> inner;
    std::vector<float> params, grad;  // host copies
  };
  struct Relay final : GradReady {
    SealedMemory& memory;
    int rank;
    float* sealed;
    const float* plain;
    GradReady* next;
    size_t announced = 0;
    Relay(SealedMemory& m, int r, float* s, const float* p, GradReady* n)
        : memory(m), rank(r), sealed(s), plain(p), next(n) {}
    void layer_ready(size_t begin, size_t end) override {
      memory.upload(rank, sealed + begin, plain + begin, end - begin);
      announced += end - begin;
      if (next != nullptr) next->layer_ready(begin, end);
    }
  };
  // The workspace with the parameters unsealed, and the caller's counters carried into the host workspace.
  Space& space(Workspace& ws, const float* params, int rank) const {
    auto& s = dynamic_cast<Space&>(ws);
    memory_.download(rank, s.params.data(), params, s.params.size());
    s.inner->precision = ws.precision;
    return s;
  }

  SealedMemory& memory_;
};

// How the sealed communicator starts buckets: at once (the host's), queued until the wait, or queued with the bucket
// reading as NaN until the wait (a device buffer under an in-place reduction; sealed_memory.h).
enum class Buckets { kSynchronous, kAsynchronous, kPoisoned };

const char* name_of(Buckets b) {
  return b == Buckets::kSynchronous ? " (synchronous)" : b == Buckets::kAsynchronous ? " (asynchronous)" : " (poisoned)";
}

// The sealed backend; the test keeps a share of its memory to read the counts after the run.
class SealedBackend final : public Backend {
 public:
  SealedBackend(std::shared_ptr<SealedMemory> memory, Buckets buckets)
      : memory_(std::move(memory)), buckets_(buckets) {}
  ElementOps& memory() override { return *memory_; }
  std::unique_ptr<Model> make_model(const RunConfig& config) override {
    return std::make_unique<SealedModel>(gs::make_model(config), *memory_);
  }
  std::unique_ptr<Communicator> make_communicator(int ranks) override {
    return std::make_unique<SealedCommunicator>(ranks, buckets_ != Buckets::kSynchronous, buckets_ == Buckets::kPoisoned);
  }

 private:
  std::shared_ptr<SealedMemory> memory_;
  Buckets buckets_;
};

json scenario(const json& extra) {
  json s = {{"name", "seam"},
            {"model", {{"kind", "mlp"}, {"layers", {6, 10, 7, 3}}, {"loss", "cross_entropy"}}},
            {"data",
             {{"kind", "teacher"},
              {"batch_per_rank", 4},
              {"teacher", {{"in_dim", 6}, {"hidden", 8}, {"out_dim", 3}, {"train_samples", 512}, {"eval_samples", 64}}}}},
            {"cluster", {{"ranks", 3}, {"share_identical", false}}},
            {"sync", {{"kind", "allreduce"}, {"bucket_mb", 1e-4}, {"first_bucket_mb", 1e-4}}},
            {"training", {{"steps", 6}, {"eval_every", 2}, {"accumulation_steps", 2},
                          {"optimizer", {{"kind", "sgd"}, {"lr", 0.1}, {"momentum", 0.9}}}}},
            {"report", {{"trace", true}, {"save_weights", "final"}}}};
  s.merge_patch(extra);
  return s;
}

// An mlp (3 -> 4 -> 2, mse) on inline data: per rank K = 2 micro-batches of uneven sizes, rank 2's second one empty
// (the pitfalls that keep micro-batch gradients apart need uneven micro-batches, which only inline data gives).
// `poison` != 0: rank 2's first input starts with that value instead.
json inline_scenario(const std::string& pitfall, double poison = 0.0) {
  json ranks = json::array();
  const int sizes[3][2] = {{3, 1}, {2, 2}, {4, 0}};
  for (int r = 0; r < 3; ++r) {
    json micro = json::array();
    for (int k = 0; k < 2; ++k) {
      json x = json::array(), y = json::array();
      for (int i = 0; i < sizes[r][k]; ++i) {
        const double v = 0.125 * ((r * 7 + k * 5 + i * 3) % 9) - 0.5;
        x.push_back({r == 2 && k == 0 && i == 0 && poison != 0.0 ? poison : v, -v * 0.5, 0.25 + v});
        y.push_back({0.5 * v, -0.25});
      }
      micro.push_back({{"x", x}, {"y", y}});
    }
    ranks.push_back(micro);
  }
  return {{"name", "seam-inline"},
          {"model", {{"kind", "mlp"}, {"layers", {3, 4, 2}}, {"loss", "mse"}}},
          {"data", {{"kind", "inline"}, {"ranks", ranks}}},
          {"cluster", {{"ranks", 3}, {"share_identical", false}}},
          {"sync", {{"kind", "allreduce"}, {"bucket_mb", 1e-5}, {"first_bucket_mb", 1e-5}}},
          {"training", {{"steps", 4}, {"accumulation_steps", 2}, {"eval_every", 0}, {"pitfall", pitfall},
                        {"optimizer", {{"kind", "sgd"}, {"lr", 0.05}}}}},
          {"report", {{"trace", true}, {"save_weights", "final"}}}};
}

RunConfig config_of(const json& s) { return parse_scenario(s.dump(), "<test>").runs.at(0).config; }

struct Pair {
  RunResult host, sealed;
  int64_t allocations = 0, releases = 0, updates = 0;  // the sealed memory's, after the run
};

Pair run_both(const RunConfig& c, Buckets buckets) {
  Pair p;
  p.host = run_training(c);
  auto memory = std::make_shared<SealedMemory>(c.cluster.ranks);
  RunHooks hooks;
  hooks.make_backend = [&](const RunConfig&) { return std::make_unique<SealedBackend>(memory, buckets); };
  p.sealed = run_training(c, hooks);
  p.allocations = memory->allocations.load();
  p.releases = memory->releases.load();
  p.updates = memory->sgd_calls.load() + memory->adam_calls.load();
  return p;
}

// The two runs agree bit for bit on everything the arithmetic decides.
void expect_same(const RunResult& host, const RunResult& sealed, const std::string& what) {
  EXPECT_EQ(sealed.disposition, host.disposition) << what << ": " << sealed.message;
  EXPECT_EQ(sealed.message, host.message) << what;
  EXPECT_EQ(sealed.steps_completed, host.steps_completed) << what;
  ASSERT_EQ(sealed.series.size(), host.series.size()) << what;
  for (size_t i = 0; i < host.series.size(); ++i) {
    const auto& a = host.series[i];
    const auto& b = sealed.series[i];
    EXPECT_TRUE(a.train_loss == b.train_loss || (std::isnan(a.train_loss) && std::isnan(b.train_loss)))
        << what << " point " << i << ": " << a.train_loss << " vs " << b.train_loss;
    EXPECT_EQ(a.eval_loss.has_value(), b.eval_loss.has_value()) << what << " point " << i;
    if (a.eval_loss && b.eval_loss) {
      EXPECT_EQ(*a.eval_loss, *b.eval_loss) << what << " point " << i;
    }
    EXPECT_EQ(a.eval_accuracy, b.eval_accuracy) << what << " point " << i;
  }
  EXPECT_EQ(sealed.final_params, host.final_params) << what;
  EXPECT_EQ(sealed.trace, host.trace) << what;
  EXPECT_EQ(sealed.replicas_identical, host.replicas_identical) << what;
  ASSERT_EQ(sealed.precision.has_value(), host.precision.has_value()) << what;
  if (host.precision) {
    EXPECT_EQ(sealed.precision->skipped_steps, host.precision->skipped_steps) << what;
    EXPECT_EQ(sealed.precision->final_loss_scale, host.precision->final_loss_scale) << what;
    EXPECT_EQ(sealed.precision->first_nonfinite_step, host.precision->first_nonfinite_step) << what;
    EXPECT_EQ(sealed.precision->grad_values, host.precision->grad_values) << what;
    EXPECT_EQ(sealed.precision->grad_underflow, host.precision->grad_underflow) << what;
  }
  EXPECT_EQ(sealed.divergence_quantity, host.divergence_quantity) << what;
}

// SGD with momentum, 3 ranks, 2 micro-batches, every tensor its own bucket (started from the last micro-batch's
// layer events on the asynchronous communicator, at the step on the synchronous one), a trace every step and the
// final weights saved: the host backend's bits.
TEST(BackendSeam, SealedDeviceMemoryRunsTheHostLoopToTheHostBits) {
  const RunConfig c = config_of(scenario(json::object()));
  for (Buckets buckets : {Buckets::kAsynchronous, Buckets::kSynchronous, Buckets::kPoisoned}) {
    const Pair p = run_both(c, buckets);
    ASSERT_TRUE(p.host.is(Disposition::kPassed)) << p.host.message;
    ASSERT_EQ(p.host.trace.size(), 6u);
    ASSERT_FALSE(p.host.final_params.empty());
    expect_same(p.host, p.sealed, name_of(buckets));
    // Every rank's parameters, momentum, step gradient and trace buffer lived in the sealed memory and were freed;
    // each rank updated through it once per step.
    EXPECT_GE(p.allocations, 4 * c.cluster.ranks);
    EXPECT_EQ(p.releases, p.allocations);
    EXPECT_EQ(p.updates, 6 * c.cluster.ranks);
  }
}

// What the seam's memory carries beyond SGD: Adam with clipping, a dynamic loss scale and a delayed update; the
// pitfalls whose accumulation keeps micro-batch gradients apart (mean_of_means: add_scaled) or zeroes the sum
// (zero_grad_in_loop), on inline data with uneven micro-batches and an empty last one; bf16_mixed's and fp8_mixed's
// emulated backward counters.
TEST(BackendSeam, OptimizersPrecisionAndPitfallsMatchTheHostBackend) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"adam, clip, dynamic scale, staleness 1",
       {{"training", {{"optimizer", {{"kind", "adam"}, {"lr", 0.01}, {"momentum", nullptr}}}, {"clip_grad_norm", 0.5}}},
        {"precision", {{"loss_scale", "dynamic"}, {"initial_scale", 1024.0}}},
        {"sync", {{"staleness", 1}}}}},
      {"bf16_mixed", {{"precision", {{"mode", "bf16_mixed"}}}}},
      {"fp8_mixed", {{"precision", {{"mode", "fp8_mixed"}}}}},
      {"fp16_pure, adam, dynamic scale",
       {{"precision", {{"mode", "fp16_pure"}, {"loss_scale", "dynamic"}, {"initial_scale", 1024.0}}},
        {"training", {{"optimizer", {{"kind", "adam"}, {"lr", 0.01}, {"momentum", nullptr}}}}}}},
      {"fp16_pure, sgd momentum, staleness 1", {{"precision", {{"mode", "fp16_pure"}}}, {"sync", {{"staleness", 1}}}}},
      {"inline none", nullptr},
      {"inline mean_of_means", nullptr},
      {"inline zero_grad_in_loop", nullptr},
  };
  for (const auto& [what, extra] : cases) {
    const RunConfig c = config_of(extra.is_null() ? inline_scenario(what.substr(7)) : scenario(extra));
    const Pair p = run_both(c, Buckets::kAsynchronous);
    ASSERT_TRUE(p.host.is(Disposition::kPassed)) << what << ": " << p.host.message;
    expect_same(p.host, p.sealed, what);
  }
}

// Where buckets start asynchronously from the layer events, a reduction may already have run in place when the rank
// counts its gradient after the micro-batches; so the loop tallies each final layer before its event goes out, and the
// whole sum at the last micro-batch's end where no final layer was announced (rank 2's empty last micro-batch;
// mean_of_means, whose micro-batch gradients are kept apart). Rank 2's first input is 1e20, so its gradient overflows
// while ranks 0 and 1 stay finite; under a dynamic loss scale the step is skipped, not a divergence, and each rank's
// first non-finite step is its own count: the host's [none, none, 1]. With the poisoned communicator a count taken
// after the start would see NaN in ranks 0 and 1 too ([1, 1, 1]); without the fallback rank 2 would count none.
TEST(BackendSeam, NonFiniteGradientsAreCountedBeforeTheirBucketsStart) {
  for (const std::string pitfall : {"none", "mean_of_means"}) {
    json s = inline_scenario(pitfall, 1e20);
    s.merge_patch({{"precision", {{"loss_scale", "dynamic"}, {"initial_scale", 1024.0}}}});
    const RunConfig c = config_of(s);
    for (Buckets buckets : {Buckets::kPoisoned, Buckets::kAsynchronous, Buckets::kSynchronous}) {
      const std::string what = pitfall + name_of(buckets);
      const Pair p = run_both(c, buckets);
      ASSERT_TRUE(p.host.precision.has_value()) << what;
      const std::vector<std::optional<int64_t>> own = {std::nullopt, std::nullopt, 1};
      EXPECT_EQ(p.host.precision->first_nonfinite_step, own) << what;
      EXPECT_FALSE(p.host.precision->skipped_steps.empty()) << what;
      expect_same(p.host, p.sealed, what);
    }
  }
}

// A run whose parameters blow up (lr 1e30) diverges at the same step, naming the same first non-finite quantity.
TEST(BackendSeam, DivergenceIsTheHostBackends) {
  const RunConfig c = config_of(scenario({{"training", {{"optimizer", {{"lr", 1e30}}}}}}));
  for (Buckets buckets : {Buckets::kPoisoned, Buckets::kAsynchronous, Buckets::kSynchronous}) {
    const Pair p = run_both(c, buckets);
    EXPECT_TRUE(p.host.is(Disposition::kDiverged)) << p.host.message;
    expect_same(p.host, p.sealed, std::string("diverges") + name_of(buckets));
  }
}

// Local SGD and independent replicas on the seam's memory: local steps, the warm-up's bucketed all-reduce, the
// periodic average of parameters and optimizer state (state_buffers in the memory) through the communicator, each
// rank's own loss scaler, and evaluation between averages (the replicas' average built from downloads): the host
// backend's bits, replicas that differ included (the trace holds every rank's). ZeRO: the reduce-scatter into the
// shard, the shard's update with sharded optimizer state, the all-gather of the parameters; stage 2 reducing every
// micro-batch into the shard's accumulator; the whole-gradient gather that a scaler and clipping need.
TEST(BackendSeam, LocalSgdIndependentAndZeroRunOnDeviceMemory) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"local_sgd H=2, warm-up 2, momentum state averaged",
       {{"sync", {{"kind", "local_sgd"}, {"period", 2}, {"warmup_steps", 2}, {"average_optimizer_state", true}}},
        {"training", {{"steps", 9}, {"eval_every", 1}}}}},
      {"local_sgd H=3, adam, dynamic scale",
       {{"sync", {{"kind", "local_sgd"}, {"period", 3}, {"average_optimizer_state", true}}},
        {"training", {{"optimizer", {{"kind", "adam"}, {"lr", 0.01}, {"momentum", nullptr}}}, {"eval_every", 1}}},
        {"precision", {{"loss_scale", "dynamic"}, {"initial_scale", 1024.0}}}}},
      {"independent", {{"sync", {{"kind", "independent"}}}, {"training", {{"eval_every", 1}}}}},
      {"local_sgd H=2, fp16_pure", {{"sync", {{"kind", "local_sgd"}, {"period", 2}, {"average_optimizer_state", true}}},
                                    {"precision", {{"mode", "fp16_pure"}}}}},
      {"independent, fp16_pure", {{"sync", {{"kind", "independent"}}}, {"precision", {{"mode", "fp16_pure"}}}}},
      {"zero stage 1", {{"sync", {{"kind", "zero"}, {"stage", 1}}}}},
      {"zero stage 1, fp16 cast reduce-scatter, divide split",
       {{"sync", {{"kind", "zero"}, {"stage", 1}}}, {"compression", {{"kind", "fp16"}, {"divide", "split"}}}}},
      {"zero stage 2, bf16 cast, fp32 sum, divide post",
       {{"sync", {{"kind", "zero"}, {"stage", 2}}},
        {"compression", {{"kind", "bf16"}, {"accumulate", "fp32"}, {"divide", "post"}}}}},
      {"zero stage 1, fp16_pure", {{"sync", {{"kind", "zero"}, {"stage", 1}}}, {"precision", {{"mode", "fp16_pure"}}}}},
      {"zero stage 2 every micro-batch, adam, dynamic scale, clip",
       {{"sync", {{"kind", "zero"}, {"stage", 2}, {"reduce_every_microbatch", true}}},
        {"training", {{"optimizer", {{"kind", "adam"}, {"lr", 0.01}, {"momentum", nullptr}}}, {"clip_grad_norm", 0.5}}},
        {"precision", {{"loss_scale", "dynamic"}, {"initial_scale", 1024.0}}}}},
  };
  for (const auto& [what, extra] : cases) {
    json s = scenario(extra);
    s["sync"].erase("bucket_mb");  // local SGD's warm-up buckets: the default sizes
    s["sync"].erase("first_bucket_mb");
    const RunConfig c = config_of(s);
    for (Buckets buckets : {Buckets::kAsynchronous, Buckets::kSynchronous}) {
      const Pair p = run_both(c, buckets);
      ASSERT_TRUE(p.host.is(Disposition::kPassed)) << what << ": " << p.host.message;
      const bool replicated = what.rfind("zero", 0) == 0;  // ZeRO gathers the same parameters on every rank
      EXPECT_EQ(p.host.replicas_identical, replicated) << what;
      expect_same(p.host, p.sealed, what + name_of(buckets));
      EXPECT_GT(p.updates, 0) << what;  // the optimizers' updates ran on the sealed memory
      EXPECT_EQ(p.releases, p.allocations) << what;
    }
  }
}

// The compressed reduction on the seam's memory (CompressOps, sim/core/compress_ops.h): every gather compressor that
// CompressorEntry::element_ops marks (DGC with its velocity in the memory too) and the casts' all-reduce in the wire
// format (every divide placement, the fp32 sum), with the error-feedback placements (gradient, DGC's momentum
// correction and masking, EF21) and measured error, encodes, all-gathers, decodes and feeds back on sealed buffers to
// the host backend's bits: losses, evaluations, parameters, traces, and the report's compression object (payload and
// wire bytes, relative errors, residual norms; not the measured times).
TEST(BackendSeam, GatherCompressorsRunOnDeviceMemory) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"topk, error feedback, measured error",
       {{"kind", "topk"}, {"ratio", 0.3}, {"error_feedback", "gradient"}, {"measure_error", true}}},
      {"topk over the model, momentum correction", {{"kind", "topk"}, {"k", 9}, {"scope", "model"},
                                                     {"error_feedback", "momentum"}}},
      {"randomk shared, unbiased, ef21",
       {{"kind", "randomk"}, {"ratio", 0.5}, {"shared_indices", true}, {"unbiased", true}, {"error_feedback", "ef21"},
        {"measure_error", true}}},
      {"randomk own indices", {{"kind", "randomk"}, {"ratio", 0.4}, {"error_feedback", "gradient"}}},
      {"threshold", {{"kind", "threshold"}, {"tau", 0.004}, {"error_feedback", "gradient"}}},
      {"qsgd", {{"kind", "qsgd"}, {"levels", 4}, {"measure_error", true}}},
      {"terngrad", {{"kind", "terngrad"}}},
      {"signsgd vote", {{"kind", "signsgd"}, {"vote", true}}},
      {"signsgd, error feedback", {{"kind", "signsgd"}, {"error_feedback", "gradient"}, {"measure_error", true}}},
      {"onebit, error feedback", {{"kind", "onebit"}, {"error_feedback", "gradient"}}},
      {"fp16, divide split, error feedback", {{"kind", "fp16"}, {"divide", "split"}, {"error_feedback", "gradient"},
                                              {"measure_error", true}}},
      {"bf16, divide post", {{"kind", "bf16"}, {"divide", "post"}}},
      {"fp8_e4m3, fp32 sum, divide split", {{"kind", "fp8_e4m3"}, {"accumulate", "fp32"}, {"divide", "split"}}},
      {"fp8_e5m2, divide pre", {{"kind", "fp8_e5m2"}, {"divide", "pre"}}},
      {"powersgd rank 2, error feedback", {{"kind", "powersgd"}, {"rank", 2}, {"error_feedback", "gradient"},
                                           {"measure_error", true}}},
      {"powersgd rank 1, from step 2", {{"kind", "powersgd"}, {"rank", 1}, {"start_step", 2}}},
      {"dgc: clipping, momentum correction, warm-up", {{"kind", "dgc"}, {"ratio", 0.2}, {"clip_norm", 0.05},
                                                       {"warmup_steps", 2}, {"measure_error", true}}},
  };
  // The report's compression object without the measured times.
  auto arithmetic = [](json j) {
    j.erase("compress_time");
    j.erase("decompress_time");
    return j;
  };
  for (const auto& [what, compression] : cases) {
    const RunConfig c = config_of(scenario({{"compression", compression}}));
    for (Buckets buckets : {Buckets::kAsynchronous, Buckets::kPoisoned}) {
      const Pair p = run_both(c, buckets);
      ASSERT_TRUE(p.host.is(Disposition::kPassed)) << what << ": " << p.host.message;
      ASSERT_TRUE(p.host.compression.is_object()) << what;
      expect_same(p.host, p.sealed, what + name_of(buckets));
      EXPECT_EQ(arithmetic(p.sealed.compression), arithmetic(p.host.compression)) << what;
      EXPECT_EQ(p.releases, p.allocations) << what;
    }
  }
}

// A device memory runs only what host_memory_reason accepts: 1-bit Adam's compressed all-reduce is host loops, so the
// run fails before any step, naming the setting.
// What a device memory does not run fails before any step, naming the setting: every kind of the registries runs
// there, so the case is an optimizer without a device update set past validation (host_memory_reason's rule).
TEST(BackendSeam, WhatHasNoDeviceFormIsRefusedOnDeviceMemory) {
  RunConfig c = config_of(scenario(json::object()));
  c.training.optimizer.kind = "lion";
  ASSERT_TRUE(host_memory_reason(c).has_value());
  RunHooks hooks;
  hooks.make_backend = [](const RunConfig& config) {
    auto memory = std::make_shared<SealedMemory>(config.cluster.ranks);
    return std::make_unique<SealedBackend>(memory, Buckets::kAsynchronous);
  };
  const RunResult r = run_training(c, hooks);
  EXPECT_TRUE(r.is(Disposition::kFailed));
  EXPECT_NE(r.message.find("training.optimizer.kind: \"lion\" has no device update"), std::string::npos) << r.message;
  EXPECT_EQ(r.steps_completed, 0);
}

// Every compressor runs on device memory under allreduce (and the casts under zero) and under the parameter server
// (whose workers encode their pushes' host copies); a compressor under another strategy is named with it.
TEST(BackendSeam, CompressionOutsideAllreduceAndZeroIsRefusedOnDeviceMemory) {
  for (const CompressorEntry& e : compressor_registry()) EXPECT_TRUE(e.make == nullptr || e.element_ops) << e.name;
  RunConfig ps = config_of(scenario({{"compression", {{"kind", "topk"}, {"ratio", 0.3}}}}));
  EXPECT_EQ(host_memory_reason(ps), std::nullopt);
  ps.sync.kind = "parameter_server";
  EXPECT_EQ(host_memory_reason(ps), std::nullopt);
  ps.sync.kind = "local_sgd";
  EXPECT_NE(host_memory_reason(ps).value_or("").find("under sync.kind \"local_sgd\""), std::string::npos);
}

// cluster.stragglers.inject on the seam (validation allows it on the cuda backend only; set here past validation):
// rank 1, factor 3, sleeps 2 x its measured forward + backward of each step after its micro-batches, counted as
// backward, so its backward time is at least twice its forward time every step; the arithmetic is the run's without
// injection (the host backend's bits).
TEST(BackendSeam, InjectedStragglersSleepWithoutChangingTheBits) {
  const RunConfig plain = config_of(scenario({{"cluster", {{"stragglers", {{"factors", {1.0, 3.0, 1.0}}}}}}}));
  RunConfig injected = plain;
  injected.cluster.stragglers.inject = true;
  const RunResult host = run_training(plain);
  auto memory = std::make_shared<SealedMemory>(plain.cluster.ranks);
  RunHooks hooks;
  hooks.make_backend = [&](const RunConfig&) { return std::make_unique<SealedBackend>(memory, Buckets::kAsynchronous); };
  const RunResult sealed = run_training(injected, hooks);
  ASSERT_TRUE(host.is(Disposition::kPassed)) << host.message;
  expect_same(host, sealed, "injected stragglers");
  ASSERT_EQ(sealed.steps.size(), 3u);
  for (const StepTimes& t : sealed.steps[1]) {
    EXPECT_GE(t.phase_s[static_cast<size_t>(Phase::kBackward)], 2.0 * t.phase_s[static_cast<size_t>(Phase::kForward)]);
  }
}

// A sealed model that throws in rank `thrower`'s backward once that rank has run `after` backwards.
class ThrowingModel final : public HostShapedModel {
 public:
  ThrowingModel(std::unique_ptr<Model> sealed, int thrower, int64_t after, std::atomic<bool>* thrown)
      : HostShapedModel(std::move(sealed)), thrower_(thrower), after_(after), thrown_(thrown) {}
  std::unique_ptr<Workspace> make_workspace(int64_t max_batch) const override { return host().make_workspace(max_batch); }
  double forward(const float* params, const Batch& batch, Workspace& ws, const PrecisionPolicy& p) const override {
    return host().forward(params, batch, ws, p);
  }
  void backward(const float* params, const Batch& batch, Workspace& ws, float* grad,
                const PrecisionPolicy& p) const override {
    if (batch.rank == thrower_ && backwards_++ == after_) {
      thrown_->store(true);
      throw Error("test: backward failed on rank " + std::to_string(thrower_));
    }
    host().backward(params, batch, ws, grad, p);
  }
  EvalSums evaluate(const float* params, const Batch& batch, Workspace& ws) const override {
    return host().evaluate(params, batch, ws);
  }

 private:
  int thrower_;
  int64_t after_;
  std::atomic<bool>* thrown_;
  mutable int64_t backwards_ = 0;  // the thrower's thread only
};

// A sealed backend that sets the test's flags when its model throws and when its communicator is aborted; and what it
// says of one rank per device. The flags outlive the run (the buffers are freed after the model is gone).
struct Probe {
  std::atomic<bool> thrown{false}, aborted{false};
};
class ProbedBackend final : public Backend {
 public:
  ProbedBackend(std::shared_ptr<SealedMemory> memory, bool one_per_device, int thrower, int64_t after, Probe& probe)
      : memory_(std::move(memory)), one_per_device_(one_per_device), thrower_(thrower), after_(after),
        probe_(probe) {}
  ElementOps& memory() override { return *memory_; }
  std::unique_ptr<Model> make_model(const RunConfig& config) override {
    return std::make_unique<ThrowingModel>(std::make_unique<SealedModel>(gs::make_model(config), *memory_), thrower_,
                                           after_, &probe_.thrown);
  }
  std::unique_ptr<Communicator> make_communicator(int ranks) override {
    auto c = std::make_unique<SealedCommunicator>(ranks, true, false);
    c->on_abort = [this] { probe_.aborted.store(true); };
    return c;
  }
  bool one_rank_per_device() const override { return one_per_device_; }

 private:
  std::shared_ptr<SealedMemory> memory_;
  bool one_per_device_;
  int thrower_;
  int64_t after_;
  Probe& probe_;
};

// A rank that throws aborts the communicators before any of its buffers is freed: on a GPU freeing waits for the
// device, where a collective it enqueued may wait for peers that have gone (NCCL's kernels end only at an abort). The
// run fails with the rank's error, and no buffer of the throwing rank is freed between its throw and the abort.
TEST(BackendSeam, ARankThatThrowsAbortsBeforeItsBuffersAreFreed) {
  const RunConfig c = config_of(scenario(json::object()));
  auto memory = std::make_shared<SealedMemory>(c.cluster.ranks);
  Probe probe;
  std::atomic<int64_t> freed_before_abort{0}, freed_after_abort{0};
  memory->on_release = [&](int rank) {
    if (rank != 1 || !probe.thrown.load()) return;
    (probe.aborted.load() ? freed_after_abort : freed_before_abort).fetch_add(1);
  };
  RunHooks hooks;
  hooks.make_backend = [&](const RunConfig&) {
    return std::make_unique<ProbedBackend>(memory, false, 1, 5, probe);  // rank 1's 6th backward: step 3, 2nd micro
  };
  const RunResult r = run_training(c, hooks);
  EXPECT_EQ(r.disposition, Disposition::kFailed);
  EXPECT_NE(r.message.find("test: backward failed on rank 1"), std::string::npos) << r.message;
  EXPECT_EQ(freed_before_abort.load(), 0);
  EXPECT_GT(freed_after_abort.load(), 0) << "the throwing rank's step buffers are freed as it unwinds";
  memory->on_release = nullptr;
}

// timing.model_error (modeled against measured, per phase) is reported only where the backend gives every rank a
// device of its own (the cuda backend's nccl ranks); the host's and shared devices' measured clocks are not one GPU's.
TEST(BackendSeam, ModelErrorOnlyWhereEveryRankHasADevice) {
  const Scenario sc = parse_scenario(scenario(json::object()).dump(), "<test>");
  for (const bool one_per_device : {false, true}) {
    auto memory = std::make_shared<SealedMemory>(sc.runs.at(0).config.cluster.ranks);
    Probe probe;
    RunHooks hooks;
    hooks.make_backend = [&](const RunConfig&) {
      return std::make_unique<ProbedBackend>(memory, one_per_device, -1, 0, probe);
    };
    const RunResult r = run_training(sc.runs.at(0).config, hooks);
    ASSERT_TRUE(r.is(Disposition::kPassed)) << r.message;
    EXPECT_EQ(r.ranks_one_per_gpu, one_per_device);
    const json j = run_to_json(sc.runs.at(0), r);
    EXPECT_EQ(j.at("timing").contains("model_error"), one_per_device) << j.at("timing").dump();
  }
}

// The compressors' encode and decode spans reach the measured clock's compress phase through the memory's clock
// (CompressSpan: on a device, CUDA events): on the host every step of every rank has compress time above zero and its
// phases sum to at most the step; on device memory the spans are timed by the memory (its phase_end with kCompress).
TEST(BackendSeam, CompressionTimeReachesTheCompressPhaseThroughTheMemory) {
  const RunConfig c = config_of(scenario({{"compression", {{"kind", "topk"}, {"ratio", 0.25},
                                                           {"error_feedback", "gradient"}}}}));
  const RunResult host = run_training(c);
  ASSERT_TRUE(host.is(Disposition::kPassed)) << host.message;
  for (const auto& rank_steps : host.steps)
    for (const StepTimes& t : rank_steps) {
      EXPECT_GT(t.phase_s[static_cast<size_t>(Phase::kCompress)], 0.0);
      double sum = 0.0;
      for (double p : t.phase_s) sum += p;
      EXPECT_LE(sum, t.step_s * (1.0 + 1e-9) + 1e-9);
    }
  auto memory = std::make_shared<SealedMemory>(c.cluster.ranks);
  RunHooks hooks;
  hooks.make_backend = [&](const RunConfig&) { return std::make_unique<SealedBackend>(memory, Buckets::kAsynchronous); };
  const RunResult sealed = run_training(c, hooks);
  ASSERT_TRUE(sealed.is(Disposition::kPassed)) << sealed.message;
  // Per rank and step: the error feedback's feed-in and feed-back, each bucket's encode and decode, the average.
  EXPECT_GE(memory->compress_phase_ends.load(), 5 * c.cluster.ranks * c.training.steps);
  for (const auto& rank_steps : sealed.steps)
    for (const StepTimes& t : rank_steps) EXPECT_GT(t.phase_s[static_cast<size_t>(Phase::kCompress)], 0.0);
}

// The report's compress_time / decompress_time on device memory are the memory's span times (on a device CUDA events,
// settled into the step's record), not the host seconds around the calls: on a sealed memory whose every span
// measures exactly 1000 s, each rank-step's encode time is a whole number of spans, the error feedback's feed-in and
// feed-back plus one encode per bucket (B + 2), and its decode time one decode per bucket plus the average (B + 1).
// On host memory the same run's times are the host's (milliseconds here).
TEST(BackendSeam, CompressTimesAreTheMemorysSpanTimes) {
  const RunConfig c = config_of(scenario({{"compression", {{"kind", "topk"}, {"ratio", 0.25},
                                                           {"error_feedback", "gradient"}}}}));
  constexpr double kSpanMs = 1000.0 * 1e3;
  auto memory = std::make_shared<SealedMemory>(c.cluster.ranks);
  memory->span_s = 1000.0;
  RunHooks hooks;
  hooks.make_backend = [&](const RunConfig&) { return std::make_unique<SealedBackend>(memory, Buckets::kAsynchronous); };
  const RunResult r = run_training(c, hooks);
  ASSERT_TRUE(r.is(Disposition::kPassed)) << r.message;
  const json& enc = r.compression.at("compress_time");
  const json& dec = r.compression.at("decompress_time");
  const auto rank_steps = static_cast<double>(c.cluster.ranks * c.training.steps);
  EXPECT_EQ(enc.at("count").get<double>(), rank_steps);
  EXPECT_EQ(dec.at("count").get<double>(), rank_steps);
  const double encode_spans = enc.at("total_ms").get<double>() / kSpanMs / rank_steps;
  const double decode_spans = dec.at("total_ms").get<double>() / kSpanMs / rank_steps;
  EXPECT_GE(decode_spans, 2.0);
  EXPECT_EQ(encode_spans, decode_spans + 1.0);
  EXPECT_EQ(enc.at("p50_ms").get<double>(), encode_spans * kSpanMs);
  EXPECT_EQ(dec.at("p50_ms").get<double>(), decode_spans * kSpanMs);
  const RunResult host = run_training(c);
  ASSERT_TRUE(host.is(Disposition::kPassed)) << host.message;
  EXPECT_GT(host.compression.at("compress_time").at("p50_ms").get<double>(), 0.0);
  EXPECT_LT(host.compression.at("compress_time").at("p50_ms").get<double>(), 1e3);
}

// What the seam's cuda backend runs (cuda_seam_issue, pure): what host_memory_reason accepts on an mlp or linear model
// (injected stragglers too: the rank loop injects them); its refusals name the setting.
TEST(BackendSeam, CudaSeamIssue) {
  RunConfig c = config_of(scenario(json::object()));
  EXPECT_EQ(cuda_seam_issue(c, host_memory_reason(c)), std::nullopt);
  c.sync.kind = "local_sgd";
  EXPECT_EQ(cuda_seam_issue(c, host_memory_reason(c)), std::nullopt);
  c.sync.kind = "parameter_server";
  EXPECT_EQ(cuda_seam_issue(c, host_memory_reason(c)), std::nullopt);
  c.sync.kind = "allreduce";
  c.training.optimizer.kind = "onebit_adam";
  EXPECT_EQ(cuda_seam_issue(c, host_memory_reason(c)), std::nullopt);
  c.training.optimizer.kind = "sgd";
  c.cluster.stragglers.inject = true;
  EXPECT_EQ(cuda_seam_issue(c, std::nullopt), std::nullopt);
  c.cluster.stragglers.inject = false;
  c.model.kind = "quadratic";
  EXPECT_EQ(cuda_seam_issue(c, std::nullopt).value_or("").rfind("model.kind: \"quadratic\"", 0), 0u);
}

// ---- The parameter server on device memory ------------------------------------------------------------------------
// sync.kind "parameter_server" with its workers on the seam's memory (parameter_server.cpp, "Memory"): each worker's
// parameters and gradient sum are sealed buffers of its own rank, its loss scaler and clipping run through the
// memory's operations, a push downloads its gradient into a host staging copy and a pull uploads the server's
// parameters; the server (shards, optimizer, compression, scheduler and staleness bookkeeping) is host memory. The
// reference is the same run on the host backend: losses, evaluations, final weights, precision verdicts, the
// staleness report, the compression report's arithmetic and the modeled steps must be identical.

// The free-running modeled steps (the strategy's own clock) agree field by field.
void expect_same_modeled(const RunResult& host, const RunResult& sealed, const std::string& what) {
  ASSERT_EQ(sealed.modeled_steps.size(), host.modeled_steps.size()) << what;
  for (size_t r = 0; r < host.modeled_steps.size(); ++r) {
    ASSERT_EQ(sealed.modeled_steps[r].size(), host.modeled_steps[r].size()) << what << " rank " << r;
    for (size_t t = 0; t < host.modeled_steps[r].size(); ++t) {
      const StepTimes& a = host.modeled_steps[r][t];
      const StepTimes& b = sealed.modeled_steps[r][t];
      EXPECT_EQ(b.phase_s, a.phase_s) << what << " rank " << r << " step " << t;
      EXPECT_EQ(b.step_s, a.step_s) << what << " rank " << r << " step " << t;
      EXPECT_EQ(b.bytes_sent, a.bytes_sent) << what << " rank " << r << " step " << t;
    }
  }
}

// The report's compression object without the measured times.
json compression_arithmetic(json j) {
  if (j.is_object()) {
    j.erase("compress_time");
    j.erase("decompress_time");
  }
  return j;
}

// BSP, SSP and asynchronous servers; co-located, fewer and dedicated shards; SGD with momentum and Adam; 2 to 4
// workers; each worker's own dynamic loss scale with clipping (on its sealed gradient); bf16_mixed and fp16_pure;
// shared-identical buffers asked for (the workers' stay their own); compressed pushes with error feedback, measured
// error, signSGD's majority vote, a cast and QSGD. The sealed memory held every worker's parameters (allocated per
// rank: SealedMemory checks each operation's pointers are its rank's) and the server's optimizer never ran on it.
TEST(BackendSeam, ParameterServerRunsOnDeviceMemory) {
  const json adam = {{"kind", "adam"}, {"lr", 0.01}, {"momentum", nullptr}};
  const json scaled = {{"loss_scale", "dynamic"}, {"initial_scale", 1024.0}};
  const std::vector<std::pair<std::string, json>> cases = {
      {"BSP, sgd momentum, 3 workers", json::object()},
      {"BSP, 2 shards, adam, 4 workers", {{"sync", {{"shards", 2}}}, {"cluster", {{"ranks", 4}}},
                                          {"training", {{"optimizer", adam}}}}},
      {"BSP, dedicated shard, share_identical", {{"sync", {{"shards", 1}, {"dedicated", true}}},
                                                {"cluster", {{"share_identical", true}}}}},
      {"BSP, dynamic scale, clip", {{"precision", scaled}, {"training", {{"clip_grad_norm", 0.5}}}}},
      {"BSP, fp16_pure", {{"precision", {{"mode", "fp16_pure"}}}}},
      {"SSP 1, adam, 4 workers", {{"sync", {{"staleness", 1}}}, {"cluster", {{"ranks", 4}}},
                                  {"training", {{"optimizer", adam}}}}},
      {"SSP 2, bf16_mixed, dynamic scale, clip", {{"sync", {{"staleness", 2}}}, {"training", {{"clip_grad_norm", 0.5}}},
                                                  {"precision", {{"mode", "bf16_mixed"}, {"loss_scale", "dynamic"},
                                                                 {"initial_scale", 1024.0}}}}},
      {"async, sgd, 2 workers", {{"sync", {{"staleness", "inf"}}}, {"cluster", {{"ranks", 2}}}}},
      {"async, adam, 2 shards", {{"sync", {{"staleness", "inf"}, {"shards", 2}}}, {"training", {{"optimizer", adam}}}}},
      {"BSP, topk, error feedback, measured error",
       {{"compression", {{"kind", "topk"}, {"ratio", 0.3}, {"error_feedback", "gradient"}, {"measure_error", true}}}}},
      {"BSP, signsgd vote", {{"compression", {{"kind", "signsgd"}, {"vote", true}}}}},
      {"BSP, fp16 cast, adam", {{"compression", {{"kind", "fp16"}}}, {"training", {{"optimizer", adam}}}}},
      {"SSP 1, qsgd", {{"sync", {{"staleness", 1}}}, {"compression", {{"kind", "qsgd"}, {"levels", 4}}}}},
      {"async, topk over the model, error feedback, 4 workers",
       {{"sync", {{"staleness", "inf"}}}, {"cluster", {{"ranks", 4}}},
        {"compression", {{"kind", "topk"}, {"k", 9}, {"scope", "model"}, {"error_feedback", "gradient"},
                         {"measure_error", true}}}}},
  };
  for (const auto& [what, extra] : cases) {
    json s = scenario({{"sync", {{"kind", "parameter_server"}}}, {"report", {{"trace", false}}}});
    s.merge_patch(extra);
    const RunConfig c = config_of(s);
    const Pair p = run_both(c, Buckets::kAsynchronous);
    ASSERT_TRUE(p.host.is(Disposition::kPassed)) << what << ": " << p.host.message;
    ASSERT_FALSE(p.host.final_params.empty()) << what;
    ASSERT_TRUE(p.host.staleness.is_object()) << what;
    expect_same(p.host, p.sealed, what);
    EXPECT_EQ(p.sealed.staleness, p.host.staleness) << what;
    EXPECT_EQ(compression_arithmetic(p.sealed.compression), compression_arithmetic(p.host.compression)) << what;
    EXPECT_EQ(p.host.compression.is_object(), s.contains("compression")) << what;
    expect_same_modeled(p.host, p.sealed, what);
    // Every worker's parameters (and rank 0's copy of the server's) lived in the sealed memory and were freed; the
    // server's optimizer ran in host memory.
    EXPECT_GE(p.allocations, c.cluster.ranks + 1) << what;
    EXPECT_EQ(p.releases, p.allocations) << what;
    EXPECT_EQ(p.updates, 0) << what;
  }
}

// A worker whose gradient overflows (rank 2's first input 1e20, inline data with uneven micro-batches) skips its push
// (its own scaler, on its sealed gradient) while the others push: the skip counts and scales per worker are the host
// backend's, under BSP (the clock averages the pushes that arrived) and asynchronous updates. A server whose
// parameters blow up (lr 1e30) diverges at the same progress point on both (counted on rank 0's copy of the server's
// parameters in the sealed memory).
TEST(BackendSeam, ParameterServerSkipsAndDivergesOnDeviceMemoryAsOnTheHost) {
  for (const json& staleness : {json(0), json("inf")}) {
    json s = inline_scenario("none", 1e20);
    s.merge_patch({{"sync", {{"kind", "parameter_server"}, {"staleness", staleness}}},
                   {"precision", {{"loss_scale", "dynamic"}, {"initial_scale", 1024.0}}},
                   {"report", {{"trace", false}}}});
    const std::string what = "skips, staleness " + staleness.dump();
    const Pair p = run_both(config_of(s), Buckets::kAsynchronous);
    ASSERT_TRUE(p.host.is(Disposition::kPassed)) << what << ": " << p.host.message;
    const json& skipped = p.host.staleness.at("skipped_pushes_per_rank");
    EXPECT_EQ(skipped.at(0), 0) << what;
    EXPECT_GT(skipped.at(2).get<int64_t>(), 0) << what;
    expect_same(p.host, p.sealed, what);
    EXPECT_EQ(p.sealed.staleness, p.host.staleness) << what;
  }
  for (const json& staleness : {json(0), json(1)}) {
    const RunConfig c = config_of(scenario({{"sync", {{"kind", "parameter_server"}, {"staleness", staleness}}},
                                            {"training", {{"optimizer", {{"lr", 1e30}}}}},
                                            {"report", {{"trace", false}}}}));
    const std::string what = "diverges, staleness " + staleness.dump();
    Pair p = run_both(c, Buckets::kAsynchronous);
    EXPECT_TRUE(p.host.is(Disposition::kDiverged)) << what << ": " << p.host.message;
    // The final weights hold NaN (never equal as floats): compared as bits, then left out of expect_same.
    auto bits = [](const std::vector<float>& v) {
      std::vector<uint32_t> b(v.size());
      if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
      return b;
    };
    ASSERT_FALSE(p.host.final_params.empty()) << what;
    EXPECT_EQ(bits(p.sealed.final_params), bits(p.host.final_params)) << what;
    p.host.final_params.clear();
    p.sealed.final_params.clear();
    expect_same(p.host, p.sealed, what);
  }
}

// The parameter server times its workers' device work on the memory's clock (phase_begin / phase_end; on the cuda
// backend CUDA events on the rank's stream) and its host work on the host's: on a sealed memory whose every span
// measures exactly 1000 s, far above this run's host time (milliseconds), each phase of a worker's step counts the
// memory's spans in it. BSP, 3 workers, 5 clocks, 2 micro-batches, clipping (the worker's precision step) and top-k
// pushes (encoded on the host). Per rank and step: forward 2 spans and backward 2 (the rank loop's micro-batches);
// optimizer 1 (the clipping; the server's apply is host work); compress 0 (the encode is host work) but above 0 s;
// communicate 2 (the push's download and the pull's upload), 1 on the last clock (the run ends before the pull), and
// once in the run one more (the first push's download of the initial parameters to the server); wait 0.
TEST(BackendSeam, ParameterServerTimesItsDeviceWorkOnTheMemorysClock) {
  const RunConfig c = config_of(scenario({{"sync", {{"kind", "parameter_server"}}},
                                          {"cluster", {{"ranks", 3}}},
                                          {"training", {{"steps", 5}, {"eval_every", 0}, {"clip_grad_norm", 0.5}}},
                                          {"compression", {{"kind", "topk"}, {"ratio", 0.3}}},
                                          {"report", {{"trace", false}}}}));
  constexpr double kSpan = 1000.0;
  auto memory = std::make_shared<SealedMemory>(c.cluster.ranks);
  memory->span_s = kSpan;
  RunHooks hooks;
  hooks.make_backend = [&](const RunConfig&) {
    return std::make_unique<SealedBackend>(memory, Buckets::kAsynchronous);
  };
  const RunResult r = run_training(c, hooks);
  ASSERT_TRUE(r.is(Disposition::kPassed)) << r.message;
  ASSERT_EQ(r.steps.size(), 3u);
  auto spans = [&](const StepTimes& t, Phase p) { return std::lround(t.phase_s[static_cast<size_t>(p)] / kSpan); };
  int64_t initial_downloads = 0;
  for (size_t rank = 0; rank < r.steps.size(); ++rank) {
    ASSERT_EQ(r.steps[rank].size(), 5u) << "rank " << rank;
    for (size_t k = 0; k < 5; ++k) {
      const StepTimes& t = r.steps[rank][k];
      const std::string at = "rank " + std::to_string(rank) + " step " + std::to_string(k);
      EXPECT_EQ(spans(t, Phase::kForward), 2) << at;
      EXPECT_EQ(spans(t, Phase::kBackward), 2) << at;
      EXPECT_EQ(spans(t, Phase::kOptimizer), 1) << at;
      EXPECT_EQ(spans(t, Phase::kCompress), 0) << at;
      EXPECT_GT(t.phase_s[static_cast<size_t>(Phase::kCompress)], 0.0) << at;
      EXPECT_EQ(spans(t, Phase::kWait), 0) << at;
      const long expected = k + 1 < 5 ? 2 : 1;
      const long got = spans(t, Phase::kCommunicate);
      EXPECT_TRUE(got == expected || (k == 0 && got == expected + 1)) << at << ": " << got << " spans";
      if (k == 0) initial_downloads += got - expected;
    }
  }
  EXPECT_EQ(initial_downloads, 1);
}

// ---- The communication-owning optimizers on device memory ----------------------------------------------------------

// 1-bit Adam, 0/1 Adam and 1-bit LAMB (sim/strategy/onebit_adam.h, zero_one_adam.cpp, onebit_lamb.cpp) on the seam's
// memory: their parameters, moments, error buffers and messages are sealed buffers of each rank, the compressed
// all-reduce packs, all-gathers, sums and decodes through CompressOps and the communicator, and every phase of each
// (initialization, warm-up or variance steps, compressed steps, 0/1 Adam's 1-bit gradient, local and sync steps,
// 1-bit LAMB's frozen factors) reaches the host backend's bits on 2 and 4 ranks (and 3 for one): losses, evaluations,
// parameters, traces and the report's compression object (message sizes, error norms, scales' effect; not the
// measured times).
TEST(BackendSeam, CommunicationOwningOptimizersRunOnDeviceMemory) {
  // eps 1e-3: with the variance frozen after two updates, a smaller eps lets m / sqrt(v) of these small runs blow up.
  const json adam = {{"kind", "onebit_adam"}, {"lr", 0.01}, {"eps", 1e-3}, {"momentum", nullptr}, {"freeze_step", 3}};
  json adam_masked = adam;
  adam_masked["exp_avg_mask"] = "zero_variance";
  adam_masked["weight_decay"] = 0.01;
  json adam_split = adam;
  adam_split["uncompressed_tensors"] = {"layer0.bias", "layer2.weight"};
  const json zero_one = {{"kind", "zero_one_adam"}, {"lr", 0.01}, {"eps", 1e-3}, {"momentum", nullptr},
                         {"var_freeze_step", 4},
                         {"var_update_scaler", 2}, {"local_step_scaler", 2}, {"local_step_clipper", 4}};
  json zero_one_decay = zero_one;
  zero_one_decay["weight_decay"] = 0.01;
  const json lamb = {{"kind", "onebit_lamb"}, {"lr", 0.02}, {"eps", 1e-3}, {"momentum", nullptr}, {"freeze_step", 3}};
  json lamb_masked = lamb;
  lamb_masked["exp_avg_mask"] = "zero_variance";
  lamb_masked["weight_decay"] = 0.01;
  struct Case {
    std::string what;
    json optimizer;
    std::vector<int> ranks;
  };
  const std::vector<Case> cases = {
      {"onebit_adam, freeze_step 3", adam, {2, 4}},
      {"onebit_adam, zero_variance mask, weight decay", adam_masked, {2, 3}},
      {"onebit_adam, uncompressed_tensors", adam_split, {2, 4}},
      {"zero_one_adam", zero_one, {2, 4}},
      {"zero_one_adam, weight decay", zero_one_decay, {3}},
      {"onebit_lamb, freeze_step 3", lamb, {2, 4}},
      {"onebit_lamb, zero_variance mask, weight decay", lamb_masked, {2, 3}},
  };
  auto arithmetic = [](json j) {  // the report's compression object without the measured times
    j.erase("compress_time");
    j.erase("decompress_time");
    return j;
  };
  for (const Case& k : cases) {
    for (int ranks : k.ranks) {
      const std::string what = k.what + ", " + std::to_string(ranks) + " ranks";
      const RunConfig c = config_of(scenario({{"cluster", {{"ranks", ranks}}},
                                              {"training", {{"steps", 12}, {"optimizer", k.optimizer}}}}));
      const Pair p = run_both(c, Buckets::kAsynchronous);
      ASSERT_TRUE(p.host.is(Disposition::kPassed)) << what << ": " << p.host.message;
      ASSERT_TRUE(p.host.compression.is_object()) << what;  // compressed steps ran
      expect_same(p.host, p.sealed, what);
      EXPECT_EQ(arithmetic(p.sealed.compression), arithmetic(p.host.compression)) << what;
      EXPECT_GT(p.allocations, 0) << what;
      EXPECT_EQ(p.releases, p.allocations) << what;
      if (k.optimizer["kind"] == "zero_one_adam") {  // every phase of 0/1 Adam's schedule ran
        for (const char* phase : {"variance", "onebit_gradient", "local", "sync"})
          EXPECT_GT(p.host.compression["steps"][phase].get<int64_t>(), 0) << what << ": " << phase;
      }
    }
  }
}

// The report's compress_time / decompress_time of the communication-owning optimizers on device memory are the
// memory's span times (on a device CUDA events, settled into the call's record), not the host seconds around the
// calls: on a sealed memory whose every span measures exactly 1000 s, each compressed all-reduce of each rank has 2
// compress spans (the worker's compensation, the server's sum and compensation) and 1 decompress span (the final
// decoding), and the whole call is the compress phase once (its sub-spans are not added to the clock again). The
// count of calls per rank follows the optimizer's phases: 1-bit Adam's and 1-bit LAMB's compressed steps, 0/1 Adam's
// 1-bit gradient and sync steps (not the initialization step's call, which no report counts).
TEST(BackendSeam, OnebitCompressTimesAreTheMemorysSpanTimes) {
  const json adam = {{"kind", "onebit_adam"}, {"lr", 0.01}, {"eps", 1e-3}, {"momentum", nullptr}, {"freeze_step", 3}};
  json adam_split = adam;
  adam_split["uncompressed_tensors"] = {"layer0.bias", "layer2.weight"};
  const json zero_one = {{"kind", "zero_one_adam"}, {"lr", 0.01}, {"eps", 1e-3}, {"momentum", nullptr},
                         {"var_freeze_step", 4},
                         {"var_update_scaler", 2}, {"local_step_scaler", 2}, {"local_step_clipper", 4}};
  const json lamb = {{"kind", "onebit_lamb"}, {"lr", 0.02}, {"eps", 1e-3}, {"momentum", nullptr}, {"freeze_step", 3}};
  constexpr double kSpanMs = 1000.0 * 1e3;
  constexpr int64_t kSteps = 12;
  for (const json& optimizer : {adam, adam_split, zero_one, lamb}) {
    const RunConfig c = config_of(scenario({{"cluster", {{"ranks", 2}}},
                                            {"training", {{"steps", kSteps}, {"optimizer", optimizer}}}}));
    const std::string what = optimizer.dump();
    int64_t calls = 0;  // compressed all-reduces per rank that the report records
    for (int64_t k = 1; k <= kSteps; ++k) {
      if (optimizer["kind"] == "zero_one_adam") {
        const ZeroOnePhase phase = zero_one_phase(k, zero_one_schedule(c.training.optimizer));
        calls += phase == ZeroOnePhase::kOnebitGradient || phase == ZeroOnePhase::kSync ? 1 : 0;
      } else {
        calls += onebit_phase(k, c.training.optimizer.freeze_step) == OnebitPhase::kCompressed ? 1 : 0;
      }
    }
    ASSERT_GT(calls, 0) << what;
    auto memory = std::make_shared<SealedMemory>(c.cluster.ranks);
    memory->span_s = 1000.0;
    RunHooks hooks;
    hooks.make_backend = [&](const RunConfig&) {
      return std::make_unique<SealedBackend>(memory, Buckets::kAsynchronous);
    };
    const RunResult r = run_training(c, hooks);
    ASSERT_TRUE(r.is(Disposition::kPassed)) << what << ": " << r.message;
    ASSERT_TRUE(r.compression.is_object()) << what;
    const json& enc = r.compression.at("compress_time");
    const json& dec = r.compression.at("decompress_time");
    const auto rank_calls = static_cast<double>(c.cluster.ranks * calls);
    EXPECT_EQ(enc.at("count").get<double>(), rank_calls) << what;
    EXPECT_EQ(dec.at("count").get<double>(), rank_calls) << what;
    EXPECT_EQ(enc.at("total_ms").get<double>(), 2.0 * kSpanMs * rank_calls) << what;
    EXPECT_EQ(dec.at("total_ms").get<double>(), kSpanMs * rank_calls) << what;
    EXPECT_EQ(enc.at("p50_ms").get<double>(), 2.0 * kSpanMs) << what;
    EXPECT_EQ(dec.at("p50_ms").get<double>(), kSpanMs) << what;
    // The compress phase of a compressed step holds the call's one span (its wait moved out), not its sub-spans.
    for (const auto& rank_steps : r.steps)
      for (const StepTimes& t : rank_steps)
        EXPECT_LT(t.phase_s[static_cast<size_t>(Phase::kCompress)], 2.0 * memory->span_s) << what;
  }
  const RunResult host = run_training(config_of(scenario({{"cluster", {{"ranks", 2}}},
                                                          {"training", {{"steps", kSteps}, {"optimizer", adam}}}})));
  ASSERT_TRUE(host.is(Disposition::kPassed)) << host.message;
  EXPECT_GT(host.compression.at("compress_time").at("p50_ms").get<double>(), 0.0);
  EXPECT_LT(host.compression.at("compress_time").at("p50_ms").get<double>(), 1e3);
}

}  // namespace
}  // namespace gs
