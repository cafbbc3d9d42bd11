// The `teacher` dataset: Gaussian inputs labelled by a fixed random network (in_dim -> hidden tanh -> out_dim, no
// biases). Samples are generated on the fly from their index, so no training array is stored. Options live in
// TeacherConfig (run_config.h); docs/data.md gives the definition and the noise floor.
#include <cmath>
#include <string>

#include "kernels/rng.h"
#include "sim/core/error.h"
#include "sim/model/dataset.h"

namespace gs {

namespace {

class Teacher : public Dataset {
 public:
  explicit Teacher(const RunConfig& config) : config_(config), t_(config.data.teacher) {
    GS_EXPECT(t_.task == "classification" || t_.task == "regression",
              "data.teacher.task: expected \"classification\" or \"regression\", got \"" + t_.task + "\"");
    GS_EXPECT(t_.in_dim >= 1, "data.teacher.in_dim: must be >= 1");
    GS_EXPECT(t_.hidden >= 1, "data.teacher.hidden: must be >= 1");
    GS_EXPECT(t_.out_dim >= 1, "data.teacher.out_dim: must be >= 1");
    GS_EXPECT(t_.train_samples >= 1 && t_.train_samples <= static_cast<int64_t>(UINT32_MAX),
              "data.teacher.train_samples: must be in [1, 2^32)");
    GS_EXPECT(t_.eval_samples >= 0 && t_.eval_samples <= static_cast<int64_t>(UINT32_MAX),
              "data.teacher.eval_samples: must be in [0, 2^32)");
    classification_ = t_.task == "classification";
    if (classification_) {
      GS_EXPECT(t_.out_dim >= 2, "data.teacher.out_dim: classification needs at least 2 classes");
      GS_EXPECT(t_.noise >= 0.0 && t_.noise <= 1.0, "data.teacher.noise: a label-flip probability must be in [0, 1]");
    } else {
      GS_EXPECT(t_.noise >= 0.0, "data.teacher.noise: a target noise stdev must be >= 0");
    }
    steps_per_epoch_ = indexed_steps_per_epoch(config_, t_.train_samples);

    // Weights: W1[h][i] ~ N(0, 1/in_dim), W2[o][h] ~ N(0, 1/hidden), from (teacher.seed, kTeacher, step 0 / 1).
    const auto seed = static_cast<uint64_t>(t_.seed);
    w1_.resize(static_cast<size_t>(t_.hidden * t_.in_dim));
    w2_.resize(static_cast<size_t>(t_.out_dim * t_.hidden));
    fill_normal(w1_.data(), w1_.size(), seed, Purpose::kTeacher, 0, 0);
    fill_normal(w2_.data(), w2_.size(), seed, Purpose::kTeacher, 1, 0);
    const auto s1 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(t_.in_dim)));
    const auto s2 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(t_.hidden)));
    for (float& w : w1_) w *= s1;
    for (float& w : w2_) w *= s2;

    resize(eval_, t_.eval_samples, 0);
    for (int64_t i = 0; i < t_.eval_samples; ++i) sample(Purpose::kTeacherEval, i, eval_, i);
  }

  int64_t in_dim() const override { return t_.in_dim; }
  int64_t out_dim() const override { return t_.out_dim; }
  bool classification() const override { return classification_; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }

  void micro_batch(int64_t step, int64_t micro, int rank, Batch& out) const override {
    const std::vector<int64_t> idx = micro_batch_indices(config_, t_.train_samples, step, micro, rank);
    resize(out, static_cast<int64_t>(idx.size()), rank);
    for (size_t s = 0; s < idx.size(); ++s) sample(Purpose::kTeacherData, idx[s], out, static_cast<int64_t>(s));
  }

  const Batch& eval_set() const override { return eval_; }

 private:
  void resize(Batch& b, int64_t count, int rank) const {
    b.rank = rank;
    b.count = count;
    b.in_dim = t_.in_dim;
    b.out_dim = classification_ ? 0 : t_.out_dim;
    b.x.resize(static_cast<size_t>(count * t_.in_dim));
    b.y.resize(classification_ ? 0 : static_cast<size_t>(count * t_.out_dim));
    b.labels.resize(classification_ ? static_cast<size_t>(count) : 0);
  }

  // Sample `index` of the stream `purpose` into row `row` of out. Counter layout: step = index; rank 0 draws the
  // input x ~ N(0, I); rank 1 draws the noise (regression: out_dim normals; classification: flip coin and class).
  void sample(Purpose purpose, int64_t index, Batch& out, int64_t row) const {
    const auto seed = static_cast<uint64_t>(t_.seed);
    const auto step = static_cast<uint32_t>(index);
    float* x = out.x.data() + row * t_.in_dim;
    fill_normal(x, static_cast<uint64_t>(t_.in_dim), seed, purpose, step, 0);

    // Teacher forward in double: logits = W2 tanh(W1 x).
    std::vector<double> h(static_cast<size_t>(t_.hidden));
    for (int64_t j = 0; j < t_.hidden; ++j) {
      double a = 0.0;
      const float* w = w1_.data() + j * t_.in_dim;
      for (int64_t i = 0; i < t_.in_dim; ++i) a += static_cast<double>(w[i]) * x[i];
      h[static_cast<size_t>(j)] = std::tanh(a);
    }
    auto output = [&](int64_t o) {
      double a = 0.0;
      const float* w = w2_.data() + o * t_.hidden;
      for (int64_t j = 0; j < t_.hidden; ++j) a += static_cast<double>(w[j]) * h[static_cast<size_t>(j)];
      return a;
    };

    if (classification_) {
      int64_t label = 0;
      double best = output(0);
      for (int64_t o = 1; o < t_.out_dim; ++o) {
        const double v = output(o);
        if (v > best) {
          best = v;
          label = o;
        }
      }
      const Draw4 d = philox_draw(seed, purpose, step, 1, 0);
      if (static_cast<double>(uniform_open01(d.v[0])) < t_.noise) {
        // A uniformly random other class: label + 1 + floor(u * (C - 1)) mod C.
        const uint64_t others = static_cast<uint64_t>(t_.out_dim - 1);
        const auto shift = static_cast<int64_t>((static_cast<uint64_t>(d.v[1]) * others) >> 32);
        label = (label + 1 + shift) % t_.out_dim;
      }
      out.labels[static_cast<size_t>(row)] = static_cast<int32_t>(label);
    } else {
      float* y = out.y.data() + row * t_.out_dim;
      fill_normal(y, static_cast<uint64_t>(t_.out_dim), seed, purpose, step, 1);
      for (int64_t o = 0; o < t_.out_dim; ++o) {
        y[o] = static_cast<float>(output(o) + t_.noise * static_cast<double>(y[o]));
      }
    }
  }

  RunConfig config_;
  TeacherConfig t_;
  bool classification_ = true;
  int64_t steps_per_epoch_ = 0;
  std::vector<float> w1_;  // hidden x in_dim
  std::vector<float> w2_;  // out_dim x hidden
  Batch eval_;
};

}  // namespace

std::unique_ptr<Dataset> make_teacher(const RunConfig& config) { return std::make_unique<Teacher>(config); }

}  // namespace gs
