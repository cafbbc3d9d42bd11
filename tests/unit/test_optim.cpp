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

// PyTorch's rounding, op by op, as an independent reference: every op rounds its exact result once to float; the
// fused ones (add_ with alpha, addcmul_, lerp_) round a*b + c once. The exact values are formed in long double (a
// float product is exact in its 64-bit mantissa; the sum rounds there first, which differs from one rounding only
// at an exact float midpoint, a case these random inputs do not hit).
float fused(float a, float b, float c) {
  return static_cast<float>(static_cast<long double>(a) * static_cast<long double>(b) + static_cast<long double>(c));
}
float twice(float a, float b, float c) {
  const float p = a * b;
  return p + c;
}

struct SgdRef {
  float w, buf;
};
// torch 1.13/2.x _single_tensor_sgd on one element; `fma` chooses the reference's rounding of the fused ops.
SgdRef sgd_reference(float w, float g, float buf, float lr, float momentum, float wd, bool nesterov, bool first,
                     float (*fma)(float, float, float)) {
  float d = wd != 0.0f ? fma(wd, w, g) : g;
  if (momentum != 0.0f) {
    if (first) {
      buf = d;
    } else {
      const float m = buf * momentum;
      buf = m + d;  // .add_(d, alpha=1): the product by 1 is exact, one rounding either way
    }
    d = nesterov ? fma(momentum, buf, d) : buf;
  }
  return {fma(-lr, d, w), buf};
}

// Every element of a random SGD step equals the one-rounding reference, and the test tells the forms apart: the
// twice-rounded reference differs in some elements (else the inputs could not catch a regression).
TEST(OptimSgd, RoundsOnceWherePyTorchFuses) {
  const size_t n = 20000;
  std::vector<float> w(n), g(n), buf(n);
  fill_normal(w.data(), n, 11, Purpose::kInit, 0, 0);
  fill_normal(g.data(), n, 11, Purpose::kInit, 1, 0);
  fill_normal(buf.data(), n, 11, Purpose::kInit, 2, 0);
  struct Case { double lr, momentum, wd; bool nesterov; };
  for (const Case c : {Case{0.1, 0.0, 0.0, false}, Case{0.1, 0.9, 0.0, false}, Case{0.03, 0.9, 0.01, true},
                       Case{0.7, 0.5, 0.3, false}}) {
    for (int64_t t : {1, 2}) {
      auto opt = make_optimizer(sgd(c.lr, c.momentum, c.nesterov, c.wd), n);
      if (c.momentum != 0.0 && t == 2) *opt->state()[0] = buf;  // a buffer from an earlier step
      std::vector<float> p = w;
      opt->step(p.data(), g.data(), 0, n, c.lr, t);
      size_t differ_from_twice = 0;
      for (size_t i = 0; i < n; ++i) {
        const float b0 = t == 2 ? buf[i] : 0.0f;
        const SgdRef once = sgd_reference(w[i], g[i], b0, static_cast<float>(c.lr), static_cast<float>(c.momentum),
                                          static_cast<float>(c.wd), c.nesterov, t == 1, fused);
        const SgdRef two = sgd_reference(w[i], g[i], b0, static_cast<float>(c.lr), static_cast<float>(c.momentum),
                                         static_cast<float>(c.wd), c.nesterov, t == 1, twice);
        ASSERT_EQ(p[i], once.w) << "lr " << c.lr << " momentum " << c.momentum << " t " << t << " element " << i;
        if (c.momentum != 0.0) {
          ASSERT_EQ((*opt->state()[0])[i], once.buf) << "element " << i;
        }
        differ_from_twice += p[i] != two.w;
      }
      EXPECT_GT(differ_from_twice, n / 100) << "lr " << c.lr << ": the inputs do not tell one rounding from two";
    }
  }
}

// Adam and AdamW, both first-moment forms (lerp: PyTorch >= 2.0; mul_add: 1.13), against the op-by-op reference.
TEST(OptimAdam, RoundsOnceWherePyTorchFusesInBothForms) {
  const size_t n = 20000;
  std::vector<float> w(n), g(n), m0(n), v0(n);
  fill_normal(w.data(), n, 12, Purpose::kInit, 0, 0);
  fill_normal(g.data(), n, 12, Purpose::kInit, 1, 0);
  fill_normal(m0.data(), n, 12, Purpose::kInit, 2, 0);
  fill_normal(v0.data(), n, 12, Purpose::kInit, 3, 0);
  for (float& x : m0) x *= 0.1f;
  for (float& x : v0) x = x * x * 0.01f;
  const double lr = 0.003, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.02;
  const int64_t t = 3;
  for (const char* kind : {"adam", "adamw"}) {
    for (const char* form : {"lerp", "mul_add"}) {
      OptimizerConfig c = adam(kind, lr, wd);
      c.first_moment = form;
      auto opt = make_optimizer(c, n);
      *opt->state()[0] = m0;
      *opt->state()[1] = v0;
      std::vector<float> p = w;
      opt->step(p.data(), g.data(), 0, n, lr, t);
      const bool decoupled = std::string(kind) == "adamw";
      const auto bc1 = 1.0 - std::pow(b1, 3.0), bc2 = 1.0 - std::pow(b2, 3.0);
      const auto neg_step = static_cast<float>(-(lr / bc1));
      const auto bc2_sqrt = static_cast<float>(std::sqrt(bc2));
      size_t differ_from_twice = 0;
      for (size_t i = 0; i < n; ++i) {
        auto ref = [&](float (*fma)(float, float, float)) {
          float wi = w[i], gi = g[i], m = m0[i], v = v0[i];
          if (decoupled) wi = wi * static_cast<float>(1.0 - lr * wd);
          else gi = fma(static_cast<float>(wd), wi, gi);
          if (std::string(form) == "lerp") {  // weight 0.1 < 0.5: self + weight*(end - self)
            m = fma(static_cast<float>(1.0 - b1), gi - m, m);
          } else {
            m = fma(static_cast<float>(1.0 - b1), gi, m * static_cast<float>(b1));
          }
          v = fma(static_cast<float>(1.0 - b2) * gi, gi, v * static_cast<float>(b2));
          const float denom = std::sqrt(v) / bc2_sqrt + static_cast<float>(eps);
          wi = wi + (neg_step * m) / denom;
          return std::vector<float>{wi, m, v};
        };
        const auto once = ref(fused), two = ref(twice);
        ASSERT_EQ(p[i], once[0]) << kind << " " << form << " element " << i;
        ASSERT_EQ((*opt->state()[0])[i], once[1]) << kind << " " << form << " m, element " << i;
        ASSERT_EQ((*opt->state()[1])[i], once[2]) << kind << " " << form << " v, element " << i;
        differ_from_twice += (*opt->state()[0])[i] != two[1] || (*opt->state()[1])[i] != two[2];
      }
      EXPECT_GT(differ_from_twice, n / 100) << kind << " " << form;
    }
  }
}

// PyTorch's lerp is exact at both ends and takes its second form for weights >= 0.5.
TEST(OptimAdam, LerpFormsAndEnds) {
  auto opt_state = [](double beta1, float m, float g) {
    OptimizerConfig c = adam("adam", 0.001);
    c.beta1 = beta1;
    auto opt = make_optimizer(c, 1);
    (*opt->state()[0])[0] = m;
    float w = 0.0f;
    opt->step(&w, &g, 0, 1, 0.001, 1);
    return (*opt->state()[0])[0];
  };
  EXPECT_EQ(opt_state(0.0, 3.0f, -7.25f), -7.25f);  // weight 1: the end exactly
  // weight 1 - 0.3 = 0.7 >= 0.5: end - (end - self)*(1 - weight), one rounding: fma(-(g - m), 0.3f, g).
  const float m = 0.1f, g = 1.3f;
  const float expected = fused(-(g - m), 1.0f - static_cast<float>(1.0 - 0.3), g);
  EXPECT_EQ(opt_state(0.3, m, g), expected);
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
