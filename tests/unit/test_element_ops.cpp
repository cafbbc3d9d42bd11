// The backend seam's memory (sim/core/element_ops.h) on the CPU: the host operations against their definitions, and
// everything that runs through ElementOps (the device optimizer, the unscale / check / clip step, the all-reduce
// strategy's replicated path with its buckets started from the gradient-ready events) on SealedMemory, a memory whose
// floats no host loop can read (tests/unit/sealed_memory.h). Expected values come from the update rules written out
// here (docs/design.md section 2) or from the same computation on host memory; never from the code's own output alone.
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/optim_math.h"
#include "sim/core/element_ops.h"
#include "sim/core/error.h"
#include "sim/model/model.h"
#include "sim/optim/loss_scaler.h"
#include "sim/optim/optimizer.h"
#include "sim/strategy/strategy.h"
#include "tests/unit/sealed_memory.h"

namespace gs {
namespace {

using test::SealedCommunicator;
using test::SealedMemory;

std::vector<float> download(ElementOps& ops, int rank, const float* p, size_t n) {
  std::vector<float> out(n);
  ops.download(rank, out.data(), p, n);
  return out;
}

TEST(ElementOps, HostOperationsFollowTheirDefinitions) {
  ElementOps& ops = host_element_ops();
  EXPECT_TRUE(ops.host());
  FloatBuffer b = ops.allocate(0, 4);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(b.get()[i], 0.0f);  // zeroed
  const float x[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  ops.upload(0, b.get(), x, 4);
  ops.add(0, b.get(), x, 4);  // 2x
  EXPECT_EQ(download(ops, 0, b.get(), 4), (std::vector<float>{2.0f, -4.0f, 1.0f, 6.0f}));
  ops.add_scaled(0, b.get(), x, 0.5f, 4);  // 2.5x
  ops.scale(0, b.get(), 4, 2.0f);          // 5x
  ops.divide(0, b.get(), 4, 5.0f);         // x
  EXPECT_EQ(download(ops, 0, b.get(), 4), (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f}));
  // Sum of squares 1 + 4 + 0.25 + 9, in double.
  ElementScan s = ops.scan(0, b.get(), 4, true);
  EXPECT_EQ(s.nonfinite, 0u);
  EXPECT_EQ(s.sum_squares, 14.25);
  b.get()[1] = std::numeric_limits<float>::infinity();
  b.get()[3] = std::nanf("");
  EXPECT_EQ(ops.count_nonfinite(0, b.get(), 4), 2u);
  EXPECT_EQ(ops.scan(0, b.get(), 4, false).nonfinite, 2u);
  ops.tally_nonfinite(0, b.get(), 2);      // one (the inf)
  ops.tally_nonfinite(0, b.get() + 2, 2);  // one (the NaN)
  EXPECT_EQ(ops.take_nonfinite(0), 2u);
  EXPECT_EQ(ops.take_nonfinite(0), 0u);  // taken: cleared
  FloatBuffer c = ops.allocate(0, 4);
  ops.copy(0, c.get(), x, 4);
  ops.zero(0, c.get(), 2);
  EXPECT_EQ(download(ops, 0, c.get(), 4), (std::vector<float>{0.0f, 0.0f, 0.5f, 3.0f}));
}

TEST(ElementOps, SealedMemoryHidesItsValuesFromHostLoops) {
  SealedMemory ops(1);
  EXPECT_FALSE(ops.host());
  {
    FloatBuffer b = ops.allocate(0, 3);
    EXPECT_NE(b.get()[0], 0.0f);  // a zeroed sealed buffer does not hold zeros where a host loop would read them
    const float x[3] = {1.0f, 2.0f, 3.0f};
    ops.upload(0, b.get(), x, 3);
    EXPECT_NE(b.get()[0], 1.0f);
    EXPECT_EQ(download(ops, 0, b.get(), 3), (std::vector<float>{1.0f, 2.0f, 3.0f}));
    FloatBuffer moved = std::move(b);  // one owner: released once
  }
  EXPECT_EQ(ops.allocations.load(), 1);
  EXPECT_EQ(ops.releases.load(), 1);
}

// The device optimizer (make_optimizer with device ElementOps) against the host optimizers over three steps: the
// same element math and scalars, so the same bits; its state has no host copy.
TEST(ElementOps, DeviceOptimizerMatchesTheHostOptimizers) {
  const size_t n = 5;
  const std::vector<float> w0{0.5f, -1.0f, 2.0f, 0.25f, -0.75f};
  std::vector<OptimizerConfig> configs(5);
  configs[0].kind = "sgd";
  configs[1].kind = "sgd";
  configs[1].momentum = 0.9;
  configs[1].weight_decay = 0.01;
  configs[2].kind = "sgd";
  configs[2].momentum = 0.9;
  configs[2].nesterov = true;
  configs[3].kind = "adam";
  configs[4].kind = "adamw";
  configs[4].weight_decay = 0.1;
  for (const OptimizerConfig& c : configs) {
    SCOPED_TRACE(c.kind + (c.nesterov ? " nesterov" : "") + (c.momentum != 0 ? " momentum" : ""));
    ASSERT_TRUE(optimizer_has_device_update(c));
    SealedMemory ops(1);
    std::unique_ptr<Optimizer> host = make_optimizer(c, n);
    std::unique_ptr<Optimizer> device = make_optimizer(c, n, ops, 0);
    std::vector<float> wh = w0;
    FloatBuffer wd = ops.allocate(0, n), gd = ops.allocate(0, n);
    ops.upload(0, wd.get(), w0.data(), n);
    for (int64_t t = 1; t <= 3; ++t) {
      std::vector<float> g(n);
      for (size_t i = 0; i < n; ++i) g[i] = 0.1f * static_cast<float>(t) - 0.05f * static_cast<float>(i);
      host->step(wh.data(), g.data(), 0, n, 0.1, t);
      ops.upload(0, gd.get(), g.data(), n);
      device->step(wd.get(), gd.get(), 0, 2, 0.1, t);  // two ranges of one step: the same as one call
      device->step(wd.get(), gd.get(), 2, n, 0.1, t);
    }
    EXPECT_EQ(download(ops, 0, wd.get(), n), wh);
    EXPECT_THROW(device->state(), Error);
  }
  OptimizerConfig lamb;
  lamb.kind = "lamb";
  EXPECT_FALSE(optimizer_has_device_update(lamb));
}

// Plain SGD written out: w <- w - lr * g (one rounding: fma(-lr, g, w)).
TEST(ElementOps, DeviceSgdIsTheUpdateRule) {
  SealedMemory ops(1);
  OptimizerConfig c;
  c.kind = "sgd";
  std::unique_ptr<Optimizer> opt = make_optimizer(c, 2, ops, 0);
  FloatBuffer w = ops.allocate(0, 2), g = ops.allocate(0, 2);
  const float w0[2] = {1.0f, -2.0f}, g0[2] = {0.5f, 4.0f};
  ops.upload(0, w.get(), w0, 2);
  ops.upload(0, g.get(), g0, 2);
  opt->step(w.get(), g.get(), 0, 2, 0.25, 1);
  EXPECT_EQ(download(ops, 0, w.get(), 2), (std::vector<float>{0.875f, -3.0f}));
  EXPECT_EQ(ops.sgd_calls.load(), 1);
}

// unscale_check_clip on device memory: the unscale and the clipping through the ops, the check and the norm through
// scan. Gradient (3, 4) * 8 under a static scale of 8: unscaled (3, 4), norm 5, clipped to max_norm 1: (0.6, 0.8)
// up to clip_coefficient's epsilon (torch: max_norm / (norm + 1e-6)).
TEST(ElementOps, UnscaleCheckClipRunsOnDeviceMemory) {
  SealedMemory ops(1);
  LossScalerSettings settings;
  settings.kind = LossScaleKind::kStatic;
  settings.initial_scale = 8.0;
  LossScaler scaler(settings);
  FloatBuffer g = ops.allocate(0, 2);
  const float g0[2] = {24.0f, 32.0f};
  ops.upload(0, g.get(), g0, 2);
  const GradientStepResult r = unscale_check_clip(ops, 0, g.get(), 2, scaler, 1.0, 1);
  EXPECT_TRUE(r.applied);
  EXPECT_FALSE(r.nonfinite);
  EXPECT_EQ(r.grad_norm, 5.0f);
  const std::vector<float> got = download(ops, 0, g.get(), 2);
  const float coef = 1.0f / (5.0f + 1e-6f);  // torch: max_norm / (total_norm + 1e-6) in float
  EXPECT_EQ(got[0], 3.0f * coef);
  EXPECT_EQ(got[1], 4.0f * coef);
  // An inf under a dynamic scaler: skipped, the scale backs off by half, nothing clipped.
  settings.kind = LossScaleKind::kDynamic;
  LossScaler dynamic(settings);
  const float bad[2] = {std::numeric_limits<float>::infinity(), 1.0f};
  ops.upload(0, g.get(), bad, 2);
  const GradientStepResult s = unscale_check_clip(ops, 0, g.get(), 2, dynamic, 1.0, 1);
  EXPECT_FALSE(s.applied);
  EXPECT_TRUE(s.nonfinite);
  EXPECT_EQ(s.nonfinite_values, 1u);
  EXPECT_EQ(dynamic.scale(), 4.0f);
}

// One all-reduce run of `steps` steps on `ranks` rank threads; every rank's parameters after it (host copies).
struct AllReduceRun {
  RunConfig config;
  int ranks = 2;
  std::vector<std::vector<std::vector<float>>> grads;  // [step][rank]: each rank's local gradient sum
  double samples_per_rank = 4.0;

  std::vector<std::vector<float>> run(ElementOps* ops, Communicator& comm, bool announce_layers,
                                      SealedCommunicator* counted = nullptr,
                                      std::vector<int64_t>* started_by_events = nullptr) const {
    std::unique_ptr<Model> model = make_model(config);
    const size_t n = model->num_params();
    GradientHooks hooks;
    StrategySetup setup{config, *model, comm, ranks};
    setup.total_steps = static_cast<int64_t>(grads.size());
    setup.gradients = &hooks;
    setup.ops = ops;
    std::unique_ptr<SyncStrategy> strategy = make_strategy(setup);
    ElementOps& mem = setup.memory();
    std::vector<float> init(n);
    model->init_params(init.data(), 7);
    for (int r = 0; r < ranks; ++r) mem.upload(r, strategy->params(r), init.data(), n);
    std::vector<std::vector<float>> out(static_cast<size_t>(ranks));
    if (started_by_events != nullptr) started_by_events->assign(static_cast<size_t>(ranks), 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        PhaseClock clock;
        FloatBuffer grad = mem.allocate(r, n);
        for (size_t step = 0; step < grads.size(); ++step) {
          clock.begin_step();
          mem.upload(r, grad.get(), grads[step][static_cast<size_t>(r)].data(), n);
          if (announce_layers) {  // the last micro-batch's backward, last layer first, into the step's sum
            LayerReady e;
            e.rank = r;
            e.grad = grad.get();
            e.final = true;
            const std::vector<TensorInfo>& t = model->tensors();
            for (size_t i = t.size(); i >= 2; i -= 2) {  // each layer: its weight and bias
              e.begin = t[i - 2].offset;
              e.end = t[i - 1].offset + t[i - 1].count;
              hooks.layer_ready(e);
              if (counted != nullptr && i == t.size() && started_by_events != nullptr)
                (*started_by_events)[static_cast<size_t>(r)] = counted->started(r);
            }
          }
          StepInput in;
          in.rank = r;
          in.step = static_cast<int64_t>(step);
          in.grad = grad.get();
          in.local_samples = samples_per_rank;
          in.global_samples = samples_per_rank * ranks;
          in.lr = config.training.optimizer.lr;
          in.total_steps = static_cast<int64_t>(grads.size());
          in.clock = &clock;
          strategy->step(in);
          clock.end_step();
        }
        out[static_cast<size_t>(r)] = download(mem, r, strategy->params(r), n);
      });
    }
    for (std::thread& t : threads) t.join();
    return out;
  }
};

// A 4 -> 3 -> 2 mlp (23 parameters in four tensors: 12 + 3 + 6 + 2), one bucket per tensor.
AllReduceRun small_run(int steps) {
  AllReduceRun a;
  a.config.model.kind = "mlp";
  a.config.model.layers = {4, 3, 2};
  a.config.cluster.ranks = a.ranks;
  a.config.cluster.share_identical = false;
  a.config.sync.bucket_mb = a.config.sync.first_bucket_mb = 1e-9;  // every tensor its own bucket
  a.config.training.optimizer.lr = 0.1;
  for (int s = 0; s < steps; ++s) {
    a.grads.emplace_back();
    for (int r = 0; r < a.ranks; ++r) {
      std::vector<float> g(23);
      for (size_t i = 0; i < g.size(); ++i)
        g[i] = 0.25f * static_cast<float>(r + 1) - 0.125f * static_cast<float>(i % 5) + 0.5f * static_cast<float>(s);
      a.grads.back().push_back(g);
    }
  }
  return a;
}

// Device-resident all-reduce with SGD, by the rule: sum in rank order, divide by S, w <- fma(-lr, g, w). The buckets
// of the last layer start when its gradient-ready event says it is final; the others in step().
TEST(ElementOpsAllReduce, SealedReplicatedStepIsTheSgdRuleWithBucketsStartedByTheEvents) {
  const AllReduceRun a = small_run(1);
  SealedMemory ops(a.ranks);
  SealedCommunicator comm(a.ranks, true);
  std::vector<int64_t> started_by_last_layer;
  const auto got = a.run(&ops, comm, true, &comm, &started_by_last_layer);
  std::unique_ptr<Model> model = make_model(a.config);
  std::vector<float> w(model->num_params());
  model->init_params(w.data(), 7);
  const float S = static_cast<float>(a.samples_per_rank * a.ranks);
  for (size_t i = 0; i < w.size(); ++i) {
    const float g = (a.grads[0][0][i] + a.grads[0][1][i]) / S;
    w[i] = std::fmaf(-0.1f, g, w[i]);
  }
  for (int r = 0; r < a.ranks; ++r) {
    EXPECT_EQ(got[static_cast<size_t>(r)], w) << "rank " << r;
    EXPECT_EQ(started_by_last_layer[static_cast<size_t>(r)], 2) << "the last layer's weight and bias buckets";
    EXPECT_EQ(comm.started(r), 4) << "every bucket once";
  }
  EXPECT_EQ(ops.sgd_calls.load(), a.ranks);  // one update per rank, through the device ops
}

// Adam, a dynamic loss scale, clipping and a delayed update (staleness 1), device-resident, against the same run on
// host memory (the host backend's loops): bit-identical parameters on every rank.
TEST(ElementOpsAllReduce, SealedAdamScaledClippedDelayedRunMatchesHostMemory) {
  for (int64_t staleness : {0, 1}) {
    AllReduceRun a = small_run(3);
    a.config.training.optimizer.kind = "adam";
    a.config.training.optimizer.lr = 0.01;
    a.config.training.clip_grad_norm = 0.5;
    a.config.precision.loss_scale = "dynamic";
    a.config.precision.initial_scale = 4.0;
    a.config.sync.staleness = staleness;
    a.grads[1][1][3] = std::numeric_limits<float>::infinity();  // step 2 is skipped (and the scale halves)
    SealedMemory ops(a.ranks);
    SealedCommunicator sealed(a.ranks, false);
    auto comm = make_host_communicator(a.ranks);
    const auto device = a.run(&ops, sealed, false);
    const auto host = a.run(nullptr, *comm, false);
    for (int r = 0; r < a.ranks; ++r)
      EXPECT_EQ(device[static_cast<size_t>(r)], host[static_cast<size_t>(r)]) << "staleness " << staleness;
    EXPECT_EQ(ops.adam_calls.load(), a.ranks * (staleness == 0 ? 2 : 1)) << "staleness " << staleness;
  }
}

TEST(ElementOpsAllReduce, HostMemoryReasonNamesWhatKeepsAStrategyOffTheDevice) {
  RunConfig c;
  EXPECT_EQ(host_memory_reason(c), std::nullopt);  // allreduce, sgd, fp32
  c.training.optimizer.kind = "adamw";
  c.precision.mode = "fp16_mixed";
  c.training.clip_grad_norm = 1.0;
  c.sync.staleness = 2;
  EXPECT_EQ(host_memory_reason(c), std::nullopt);
  auto starts_with = [](const std::optional<std::string>& why, const std::string& path) {
    return why.has_value() && why->rfind(path + ": ", 0) == 0;
  };
  RunConfig d = c;
  d.precision.mode = "fp16_pure";  // its fp16 rounding through ElementOps::round_to_fp16, its wire the fp16 cast
  EXPECT_EQ(host_memory_reason(d), std::nullopt);
  d.sync.kind = "zero";  // ZeRO's fp16 reduce-scatter through CompressOps too
  EXPECT_EQ(host_memory_reason(d), std::nullopt);
  // Every compressor runs through CompressOps under allreduce; an unknown kind is named.
  for (const char* kind : {"fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "topk", "randomk", "threshold", "dgc", "qsgd",
                           "terngrad", "signsgd", "onebit", "powersgd"}) {
    d = c;
    d.compression.kind = kind;
    EXPECT_EQ(host_memory_reason(d), std::nullopt) << kind;
  }
  d = c;
  d.compression.kind = "no_such_kind";
  EXPECT_TRUE(starts_with(host_memory_reason(d), "compression.kind")) << host_memory_reason(d).value_or("");
  // Their steps are element operations (the parameter server's workers; its server is host memory by design).
  for (const char* kind : {"local_sgd", "independent", "zero", "parameter_server"}) {
    d = c;
    d.sync.kind = kind;
    EXPECT_EQ(host_memory_reason(d), std::nullopt) << kind;
  }
  // The communication-owning optimizers run their compressed all-reduce and updates through CompressOps.
  for (const char* kind : {"onebit_adam", "zero_one_adam", "onebit_lamb"}) {
    d = RunConfig();
    d.training.optimizer.kind = kind;
    EXPECT_EQ(host_memory_reason(d), std::nullopt) << kind;
  }
  d = RunConfig();
  d.training.optimizer.kind = "no_such_optimizer";  // an optimizer without a device update is named
  EXPECT_TRUE(starts_with(host_memory_reason(d), "training.optimizer.kind")) << host_memory_reason(d).value_or("");
}

}  // namespace
}  // namespace gs
