// The gradient-ready events (sim/model/model.h GradReady, sim/strategy/strategy.h GradientHooks): each model's
// backward announces its layers last first with the tensor ranges of its table, without changing a bit of the
// gradient; the host rank loop relays them with the rank and micro-batch, ends every micro-batch once (also one
// without samples), and hands an each-micro-batch subscriber every micro-batch's gradient alone. Expected ranges come
// from the model's tensor table and expected gradients from the model's own backward of the dataset's micro-batches.
// Suites are named GradientReady*.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "sim/config/scenario.h"
#include "sim/model/dataset.h"
#include "sim/model/model.h"
#include "sim/runtime/rank_loop.h"
#include "sim/strategy/strategy.h"
#include "sim/validate/validate.h"

namespace gs {
namespace {

using Range = std::pair<size_t, size_t>;

// One backward's layer events, in order.
struct LayerLog final : GradReady {
  std::vector<Range> got;
  void layer_ready(size_t begin, size_t end) override { got.emplace_back(begin, end); }
};

// A dense stack's layers from its tensor table, last layer first: layer l is tensor l (no bias) or tensors 2l and
// 2l + 1 (weight, bias), which the table lays out contiguously.
std::vector<Range> dense_layers_last_first(const std::vector<TensorInfo>& t, bool bias) {
  std::vector<Range> out;
  const size_t per = bias ? 2 : 1;
  for (size_t l = t.size() / per; l-- > 0;) {
    const TensorInfo& first = t[per * l];
    const TensorInfo& last = t[per * l + per - 1];
    out.emplace_back(first.offset, last.offset + last.count);
  }
  return out;
}

RunConfig config_of(const json& scenario) { return parse_scenario(scenario.dump(), "<test>").runs.at(0).config; }

json mlp_scenario(bool bias, const std::string& precision) {
  return {{"name", "hooks"},
          {"model", {{"kind", "mlp"}, {"layers", {6, 10, 7, 3}}, {"loss", "cross_entropy"}, {"bias", bias}}},
          {"data",
           {{"kind", "teacher"},
            {"batch_per_rank", 4},
            {"teacher", {{"in_dim", 6}, {"hidden", 8}, {"out_dim", 3}, {"train_samples", 512}, {"eval_samples", 32}}}}},
          {"precision", {{"mode", precision}}},
          {"training", {{"steps", 1}, {"eval_every", 0}}}};
}

// The backward of the dataset's first micro-batch at the model's initial parameters, into zeros, with `listener` as
// the workspace's grad_ready.
std::vector<float> one_backward(const RunConfig& c, const Model& m, GradReady* listener) {
  const auto data = make_dataset(c);
  Batch b;
  data->micro_batch(0, 0, 0, b);
  std::vector<float> w(m.num_params()), g(m.num_params(), 0.0f);
  m.init_params(w.data(), static_cast<uint64_t>(c.training.seed));
  const PrecisionPolicy policy = precision_policy(c.precision);
  auto ws = m.make_workspace(b.count);
  ws->grad_ready = listener;
  m.forward(w.data(), b, *ws, policy);
  m.backward(w.data(), b, *ws, g.data(), policy);
  return g;
}

TEST(GradientReadyModel, MlpAnnouncesEachLayerLastFirstWithItsTensors) {
  for (bool bias : {true, false})
    for (const std::string precision : {"fp32", "bf16_mixed", "fp16_mixed"}) {  // fp32 and the mixed stack
      const RunConfig c = config_of(mlp_scenario(bias, precision));
      const auto model = make_model(c);
      ASSERT_EQ(model->tensors().size(), bias ? 6u : 3u);
      LayerLog log;
      one_backward(c, *model, &log);
      EXPECT_EQ(log.got, dense_layers_last_first(model->tensors(), bias)) << "bias " << bias << " " << precision;
      ASSERT_EQ(log.got.size(), 3u);
      EXPECT_EQ(log.got.back().first, 0u);
      EXPECT_EQ(log.got.front().second, model->num_params());
    }
}

TEST(GradientReadyModel, ListeningChangesNoBitOfTheGradient) {
  for (const std::string precision : {"fp32", "bf16_mixed"}) {
    const RunConfig c = config_of(mlp_scenario(true, precision));
    const auto model = make_model(c);
    LayerLog log;
    const std::vector<float> heard = one_backward(c, *model, &log);
    const std::vector<float> alone = one_backward(c, *model, nullptr);
    ASSERT_EQ(heard.size(), alone.size());
    EXPECT_EQ(0, std::memcmp(heard.data(), alone.data(), heard.size() * sizeof(float))) << precision;
    EXPECT_NE(alone, std::vector<float>(alone.size(), 0.0f));
  }
}

TEST(GradientReadyModel, LinearAndQuadraticAnnounceTheirOneLayer) {
  json lin = mlp_scenario(true, "fp32");
  lin["model"] = {{"kind", "linear"}, {"layers", {6, 3}}, {"loss", "cross_entropy"}};
  const RunConfig lc = config_of(lin);
  const auto linear = make_model(lc);
  LayerLog lin_log;
  one_backward(lc, *linear, &lin_log);
  const std::vector<TensorInfo>& t = linear->tensors();
  ASSERT_EQ(t.size(), 2u);  // weight, bias
  EXPECT_EQ(lin_log.got, (std::vector<Range>{{t[0].offset, t[1].offset + t[1].count}}));

  const json quad = {{"name", "q"},
                     {"model", {{"kind", "quadratic"}, {"initial_w", {1.0, 2.0, 3.0}}, {"a", {1.0, 1.0, 1.0}},
                                {"b", {0.0, 0.0, 0.0}}}},
                     {"data", {{"kind", "none"}}},
                     {"training", {{"steps", 1}, {"eval_every", 0}}}};
  const RunConfig qc = config_of(quad);
  const auto q = make_model(qc);
  LayerLog q_log;
  Batch b;
  b.count = 1;
  std::vector<float> w = {1, 2, 3}, g(3, 0.0f);
  auto ws = q->make_workspace(1);
  ws->grad_ready = &q_log;
  q->backward(w.data(), b, *ws, g.data(), PrecisionPolicy{});
  EXPECT_EQ(q_log.got, (std::vector<Range>{{0, q->tensors().at(0).count}}));
}

// What one rank's subscriber saw, in order: a layer event ("L", k, begin, end) or a micro-batch end ("E", k, last).
struct Event {
  char kind;
  int64_t k;
  size_t begin, end;
  bool operator==(const Event& o) const { return kind == o.kind && k == o.k && begin == o.begin && end == o.end; }
};
std::ostream& operator<<(std::ostream& os, const Event& e) {
  return os << e.kind << "(k " << e.k << ", " << e.begin << ", " << e.end << ")";
}

// Records every rank's events (each rank writes its own row on its own thread) and, when it asked for them, copies
// of each micro-batch's own gradient.
class Recorder final : public GradientSubscriber {
 public:
  Recorder(int ranks, size_t n) : events(static_cast<size_t>(ranks)), grads(static_cast<size_t>(ranks)), n_(n) {}
  void layer_ready(const LayerReady& e) override {
    // 'F': final (the last micro-batch's backward into the step's sum), 'L' any other layer event.
    events[static_cast<size_t>(e.rank)].push_back({e.final ? 'F' : 'L', e.micro_batch, e.begin, e.end});
    EXPECT_NE(e.grad, nullptr);
  }
  void micro_batch_end(const MicroBatchEnd& e) override {
    events[static_cast<size_t>(e.rank)].push_back({'E', e.micro_batch, e.last ? 1u : 0u, 0});
    EXPECT_NE(e.clock, nullptr);
    auto& g = grads[static_cast<size_t>(e.rank)];
    g.push_back(e.grad == nullptr ? std::vector<float>() : std::vector<float>(e.grad, e.grad + n_));
  }
  std::vector<std::vector<Event>> events;
  std::vector<std::vector<std::vector<float>>> grads;  // [rank][step * K + k]

 private:
  size_t n_;
};

TEST(GradientReadyRankLoop, EventsArriveInBackwardOrderThenEachMicroBatchEndsOnce) {
  json s = mlp_scenario(true, "fp32");
  const int ranks = 2, steps = 2, K = 3;
  s["cluster"] = {{"ranks", ranks}};
  s["training"] = {{"steps", steps}, {"accumulation_steps", K}, {"eval_every", 0}};
  const RunConfig c = config_of(s);
  const auto model = make_model(c);
  Recorder rec(ranks, model->num_params());
  RunHooks hooks;
  hooks.subscribe_gradients = [&](GradientHooks& g) { g.subscribe(rec); };
  const RunResult r = run_training(c, hooks);
  ASSERT_EQ(r.disposition, Disposition::kPassed) << r.message;
  std::vector<Event> want;
  for (int t = 0; t < steps; ++t)
    for (int64_t k = 0; k < K; ++k) {
      for (const Range& l : dense_layers_last_first(model->tensors(), true))
        want.push_back({k + 1 == K ? 'F' : 'L', k, l.first, l.second});  // only the last micro-batch's are final
      want.push_back({'E', k, k + 1 == K ? 1u : 0u, 0});
    }
  for (int q = 0; q < ranks; ++q) {
    EXPECT_EQ(rec.events[static_cast<size_t>(q)], want) << "rank " << q;
    for (const auto& g : rec.grads[static_cast<size_t>(q)]) EXPECT_TRUE(g.empty());  // running sum: no own gradient
  }
}

// Rank r's micro-batch k of step t must be the model's backward of data.micro_batch(t, k, r) at the parameters
// entering step t (report.trace) into zeros, bit for bit; a micro-batch without samples (inline data) ends with zeros
// and announces no layer.
TEST(GradientReadyRankLoop, AnEachMicroBatchSubscriberSeesEveryMicroBatchGradientAlone) {
  json teacher = mlp_scenario(true, "fp32");
  teacher["cluster"] = {{"ranks", 2}};
  teacher["training"] = {{"steps", 2}, {"accumulation_steps", 3}, {"eval_every", 0}};
  teacher["report"] = {{"trace", true}};
  const json inline_data = {
      {"name", "hooks_inline"},
      {"model", {{"kind", "linear"}, {"layers", {2, 1}}, {"loss", "mse"}}},
      {"data",
       {{"kind", "inline"},
        {"ranks",
         {{{{"x", {{1.0, 2.0}, {3.0, 4.0}}}, {"y", {{1.0}, {2.0}}}}, {{"x", {{0.5, 1.0}}}, {"y", {{0.3}}}}},
          {{{"x", {{2.0, 1.0}}}, {"y", {{1.5}}}}, {{"x", json::array()}, {"y", json::array()}}}}}}},
      {"cluster", {{"ranks", 2}}},
      {"training",
       {{"steps", 2}, {"accumulation_steps", 2}, {"eval_every", 0}, {"optimizer", {{"kind", "sgd"}, {"lr", 0.05}}}}},
      {"report", {{"trace", true}}}};
  for (const json& scenario : {teacher, inline_data}) {
    const RunConfig c = config_of(scenario);
    const int N = static_cast<int>(c.cluster.ranks);
    const int64_t K = c.training.accumulation_steps, steps = c.training.steps;
    const auto model = make_model(c);
    const auto data = make_dataset(c);
    const size_t n = model->num_params();
    Recorder rec(N, n);
    RunHooks hooks;
    hooks.subscribe_gradients = [&](GradientHooks& g) { g.subscribe(rec, GradientHooks::Gradient::kEachMicroBatch); };
    const RunResult r = run_training(c, hooks);
    ASSERT_EQ(r.disposition, Disposition::kPassed) << r.message;
    ASSERT_EQ(r.trace.size(), static_cast<size_t>(steps));
    const PrecisionPolicy policy = precision_policy(c.precision);
    auto ws = model->make_workspace(4);
    bool saw_empty = false;
    for (int q = 0; q < N; ++q) {
      const auto& got = rec.grads[static_cast<size_t>(q)];
      ASSERT_EQ(got.size(), static_cast<size_t>(steps * K)) << scenario["name"] << " rank " << q;
      size_t layers = 0;
      for (const Event& e : rec.events[static_cast<size_t>(q)]) layers += e.kind == 'L' ? 1 : 0;
      size_t want_layers = 0;
      for (int64_t t = 0; t < steps; ++t)
        for (int64_t k = 0; k < K; ++k) {
          const std::vector<float>& w =
              t == 0 ? r.trace_initial : r.trace[static_cast<size_t>(t - 1)][static_cast<size_t>(q)];
          Batch b;
          data->micro_batch(t, k, q, b);
          std::vector<float> g(n, 0.0f);
          if (b.count > 0) {
            model->forward(w.data(), b, *ws, policy);
            model->backward(w.data(), b, *ws, g.data(), policy);
            want_layers += dense_layers_last_first(model->tensors(), true).size();
          } else {
            saw_empty = true;
          }
          const std::vector<float>& h = got[static_cast<size_t>(t * K + k)];
          ASSERT_EQ(h.size(), n);
          EXPECT_EQ(0, std::memcmp(h.data(), g.data(), n * sizeof(float)))
              << scenario["name"] << " rank " << q << " step " << t << " micro-batch " << k;
        }
      EXPECT_EQ(layers, want_layers) << scenario["name"] << " rank " << q;
    }
    EXPECT_EQ(saw_empty, scenario["name"] == "hooks_inline");
  }
}

}  // namespace
}  // namespace gs
