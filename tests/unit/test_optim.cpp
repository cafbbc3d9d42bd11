// Tests of sim/optim: SGD (momentum, Nesterov, weight decay), Adam, AdamW against values worked out by hand from
// PyTorch's formulas, sub-range application, and the learning-rate schedules. A new optimizer or schedule adds a
// hand-computed case here and joins the sub-range test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/rng.h"
#include "sim/core/error.h"
#include "sim/optim/optimizer.h"

namespace gs {
namespace {

OptimizerConfig sgd(double lr, double momentum, bool nesterov = false, double wd = 0.0) {
  OptimizerConfig c;
  c.kind = "sgd";
  c.lr = lr;
  c.momentum = momentum;
  c.nesterov = nesterov;
  c.weight_decay = wd;
  return c;
}

OptimizerConfig adam(const std::string& kind, double lr, double wd = 0.0) {
  OptimizerConfig c;
  c.kind = kind;
  c.lr = lr;
  c.weight_decay = wd;
  return c;
}

// Applies grads g_1, g_2, ... (one scalar parameter) and returns w after each step.
std::vector<float> run_scalar(const OptimizerConfig& c, float w0, const std::vector<float>& grads) {
  auto opt = make_optimizer(c, 1);
  float w = w0;
  std::vector<float> out;
  for (size_t t = 0; t < grads.size(); ++t) {
    opt->step(&w, &grads[t], 0, 1, c.lr, static_cast<int64_t>(t + 1));
    out.push_back(w);
  }
  return out;
}

TEST(OptimSgd, MomentumByHand) {
  // buf = 1, 0.9*1 + 2 = 2.9, 0.9*2.9 + 3 = 5.61; w = 1 - 0.1*buf each step.
  auto opt = make_optimizer(sgd(0.1, 0.9), 1);
  float w = 1.0f;
  const float grads[] = {1.0f, 2.0f, 3.0f};
  const float bufs[] = {1.0f, 2.9f, 5.61f};
  const float ws[] = {0.9f, 0.61f, 0.049f};
  for (int t = 0; t < 3; ++t) {
    opt->step(&w, &grads[t], 0, 1, 0.1, t + 1);
    EXPECT_NEAR((*opt->state()[0])[0], bufs[t], 1e-6) << "step " << t + 1;
    EXPECT_NEAR(w, ws[t], 1e-6) << "step " << t + 1;
  }
}

TEST(OptimSgd, NesterovByHand) {
  // d = g + 0.9*buf: 1 + 0.9 = 1.9, 2 + 2.61 = 4.61, 3 + 5.049 = 8.049.
  const auto w = run_scalar(sgd(0.1, 0.9, true), 1.0f, {1.0f, 2.0f, 3.0f});
  EXPECT_NEAR(w[0], 1.0 - 0.19, 1e-6);
  EXPECT_NEAR(w[1], 1.0 - 0.19 - 0.461, 1e-6);
  EXPECT_NEAR(w[2], 1.0 - 0.19 - 0.461 - 0.8049, 1e-6);
}

TEST(OptimSgd, PlainAndWeightDecayByHand) {
  // No momentum: w -= lr*g; no state. Weight decay adds wd*w to g before momentum: 1 + 0.1*2 = 1.2.
  EXPECT_NEAR(run_scalar(sgd(0.5, 0.0), 1.0f, {2.0f})[0], 0.0, 1e-7);
  EXPECT_TRUE(make_optimizer(sgd(0.5, 0.0), 4)->state().empty());
  EXPECT_NEAR(run_scalar(sgd(0.1, 0.0, false, 0.1), 2.0f, {1.0f})[0], 2.0 - 0.12, 1e-6);
  // With momentum the decayed gradient enters the buffer: buf1 = 1.2, w1 = 1.88; g2 = 1 + 0.188, buf2 = 1.08 + 1.188.
  const auto w = run_scalar(sgd(0.1, 0.9, false, 0.1), 2.0f, {1.0f, 1.0f});
  EXPECT_NEAR(w[1], 1.88 - 0.1 * (0.9 * 1.2 + 1.188), 1e-6);
}

TEST(OptimSgd, NesterovWithoutMomentumIsAnError) {
  EXPECT_THROW(make_optimizer(sgd(0.1, 0.0, true), 1), Error);
}

TEST(OptimAdam, FirstStepMovesByAboutLrTimesSign) {
  // m_hat = g, v_hat = g^2 after one step, so the update is lr * g / (|g| + eps).
  const std::vector<float> g = {1e-3f, 5.0f, -2.0f, -7e-2f};
  std::vector<float> w(g.size(), 0.5f);
  for (const char* kind : {"adam", "adamw"}) {
    std::vector<float> p = w;
    auto opt = make_optimizer(adam(kind, 0.01), p.size());
    opt->step(p.data(), g.data(), 0, p.size(), 0.01, 1);
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_NEAR(p[i] - w[i], -0.01 * (g[i] > 0 ? 1 : -1), 0.01 * 1e-4) << kind << " element " << i;
    }
  }
}

TEST(OptimAdam, TwoStepsByHand) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  const double g[] = {1.0, -2.0};
  double m = 0, v = 0, w = 0.3;
  auto opt = make_optimizer(adam("adam", lr), 1);
  float wf = 0.3f;
  for (int t = 1; t <= 2; ++t) {
    m = b1 * m + (1 - b1) * g[t - 1];
    v = b2 * v + (1 - b2) * g[t - 1] * g[t - 1];
    w -= lr * (m / (1 - std::pow(b1, t))) / (std::sqrt(v / (1 - std::pow(b2, t))) + eps);
    const auto gf = static_cast<float>(g[t - 1]);
    opt->step(&wf, &gf, 0, 1, lr, t);
    EXPECT_NEAR(wf, w, 1e-6) << "step " << t;
    EXPECT_NEAR((*opt->state()[0])[0], m, 1e-7);
    EXPECT_NEAR((*opt->state()[1])[0], v, 1e-9);
  }
}

TEST(OptimAdam, AdamWDecaysDecoupledAdamAddsL2) {
  // g = 0: AdamW only decays, w *= 1 - lr*wd (m = v = 0, the Adam part moves nothing).
  float w = 2.0f;
  const float zero = 0.0f;
  auto adamw = make_optimizer(adam("adamw", 0.1, 0.5), 1);
  adamw->step(&w, &zero, 0, 1, 0.1, 1);
  EXPECT_FLOAT_EQ(w, 2.0f * 0.95f);
  // Adam with L2: g_eff = wd*w = 1 > 0, so the first step moves by about lr.
  w = 2.0f;
  auto adam_l2 = make_optimizer(adam("adam", 0.1, 0.5), 1);
  adam_l2->step(&w, &zero, 0, 1, 0.1, 1);
  EXPECT_NEAR(w, 1.9, 1e-6);
}

// Ranges of one step applied separately (in any order) equal one call over everything, bit for bit.
TEST(OptimAll, SubRangesEqualWholeBitwise) {
  const size_t n = 1000;
  const std::vector<OptimizerConfig> configs = {sgd(0.1, 0.0), sgd(0.1, 0.9), sgd(0.05, 0.9, true, 0.01),
                                                adam("adam", 0.01, 0.1), adam("adamw", 0.01, 0.1)};
  for (const auto& c : configs) {
    std::vector<float> whole(n), parts(n), g(n);
    fill_normal(whole.data(), n, 3, Purpose::kInit, 0, 0);
    parts = whole;
    auto a = make_optimizer(c, n);
    auto b = make_optimizer(c, n);
    for (int64_t t = 1; t <= 5; ++t) {
      fill_normal(g.data(), n, 3, Purpose::kInit, static_cast<uint32_t>(t), 1);
      a->step(whole.data(), g.data(), 0, n, c.lr, t);
      b->step(parts.data(), g.data(), 301, n, c.lr, t);
      b->step(parts.data(), g.data(), 300, 301, c.lr, t);
      b->step(parts.data(), g.data(), 0, 300, c.lr, t);
      b->step(parts.data(), g.data(), 7, 7, c.lr, t);  // empty range: no effect
    }
    EXPECT_EQ(std::memcmp(whole.data(), parts.data(), n * sizeof(float)), 0) << c.kind;
    const auto sa = a->state(), sb = b->state();
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t i = 0; i < sa.size(); ++i) {
      EXPECT_EQ(std::memcmp(sa[i]->data(), sb[i]->data(), n * sizeof(float)), 0) << c.kind << " state " << i;
    }
  }
}

TEST(OptimAll, UnknownKindNamesThePath) {
  OptimizerConfig c;
  c.kind = "lamb";
  try {
    make_optimizer(c, 3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training.optimizer.kind"), std::string::npos) << e.what();
  }
}

TEST(OptimSchedule, ConstantAndStep) {
  ScheduleConfig s;
  EXPECT_DOUBLE_EQ(learning_rate(s, 0.3, 0, 100), 0.3);
  EXPECT_DOUBLE_EQ(learning_rate(s, 0.3, 99, 100), 0.3);
  s.kind = "step";
  s.step_size = 10;
  s.gamma = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 9, 100), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 10, 100), 0.1);
  EXPECT_NEAR(learning_rate(s, 1.0, 25, 100), 0.01, 1e-15);
}

TEST(OptimSchedule, WarmupCosine) {
  ScheduleConfig s;
  s.kind = "warmup_cosine";
  s.warmup_steps = 10;
  s.min_lr = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 0, 110), 0.1);   // (0+1)/10
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 4, 110), 0.5);   // (4+1)/10
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 9, 110), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 10, 110), 1.0);  // p = 0
  EXPECT_NEAR(learning_rate(s, 1.0, 60, 110), 0.55, 1e-12);  // p = 0.5
  EXPECT_NEAR(learning_rate(s, 1.0, 110, 110), 0.1, 1e-12);  // p = 1
  EXPECT_NEAR(learning_rate(s, 1.0, 500, 110), 0.1, 1e-12);  // past the end: stays at min_lr
  s.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 0, 100), 1.0);
}

TEST(OptimSchedule, UnknownKindNamesThePath) {
  ScheduleConfig s;
  s.kind = "cyclic";
  try {
    learning_rate(s, 1.0, 0, 10);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training.schedule.kind"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gs
