// The `teacher` dataset: Gaussian inputs labelled by a fixed random network (in_dim -> hidden tanh -> out_dim, no
// biases). Samples are generated on the fly from their index, so no training array is stored. Options live in
// TeacherConfig (run_config.h); docs/data.md gives the definition and the noise floor.
//
// The teacher runs in float, one sample at a time, every output summed in the same fixed order (the loops vectorize
// across outputs, never across a sum). So a sample's targets depend on its index alone, bit for bit, in whichever
// micro-batch, rank or batch size it lands, as the sharding rule of dataset.h promises. One BLAS GEMM per micro-batch
// would be up to 2x faster for wide teachers, but OpenBLAS's sgemm rounds a row differently depending on its position
// in the matrix (and on the thread count), which would break that rule.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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
    std::vector<float> w1(static_cast<size_t>(t_.hidden * t_.in_dim));
    std::vector<float> w2(static_cast<size_t>(t_.out_dim * t_.hidden));
    fill_normal(w1.data(), w1.size(), seed, Purpose::kTeacher, 0, 0);
    fill_normal(w2.data(), w2.size(), seed, Purpose::kTeacher, 1, 0);
    const auto s1 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(t_.in_dim)));
    const auto s2 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(t_.hidden)));
    for (float& w : w1) w *= s1;
    for (float& w : w2) w *= s2;
    // Kept transposed (in_dim x hidden, hidden x out_dim) so the forward's inner loops run along the outputs.
    w1t_ = transpose(w1, t_.hidden, t_.in_dim);
    w2t_ = transpose(w2, t_.out_dim, t_.hidden);

    resize(eval_, t_.eval_samples, 0);
    std::vector<int64_t> all(static_cast<size_t>(t_.eval_samples));
    for (int64_t i = 0; i < t_.eval_samples; ++i) all[static_cast<size_t>(i)] = i;
    samples(Purpose::kTeacherEval, all, eval_);
  }

  int64_t in_dim() const override { return t_.in_dim; }
  int64_t out_dim() const override { return t_.out_dim; }
  bool classification() const override { return classification_; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }

  void micro_batch(int64_t step, int64_t micro, int rank, Batch& out) const override {
    const std::vector<int64_t> idx = micro_batch_indices(config_, t_.train_samples, step, micro, rank);
    resize(out, static_cast<int64_t>(idx.size()), rank);
    samples(Purpose::kTeacherData, idx, out);
  }

  const Batch& eval_set() const override { return eval_; }

  int64_t train_size() const override { return t_.train_samples; }
  // Generated, not stored: priced as if stored as decoded floats.
  int64_t stored_sample_bytes() const override { return decoded_sample_bytes(); }
  void shape_batch(Batch& out, int64_t count, int rank) const override { resize(out, count, rank); }
  void read_sample(int64_t i, Batch& out, int64_t row) const override {
    thread_local std::vector<float> h, f;
    h.resize(static_cast<size_t>(t_.hidden));
    f.resize(static_cast<size_t>(t_.out_dim));
    float* x = out.x.data() + row * t_.in_dim;
    fill_normal(x, static_cast<uint64_t>(t_.in_dim), static_cast<uint64_t>(t_.seed), Purpose::kTeacherData,
                static_cast<uint32_t>(i), 0);
    forward(x, h.data(), f.data());
    target(Purpose::kTeacherData, i, f.data(), out, row);
  }

 private:
  // The rows x cols matrix m (row-major) transposed.
  static std::vector<float> transpose(const std::vector<float>& m, int64_t rows, int64_t cols) {
    std::vector<float> out(m.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(c * rows + r)] = m[static_cast<size_t>(r * cols + c)];
    }
    return out;
  }

  void resize(Batch& b, int64_t count, int rank) const {
    b.rank = rank;
    b.count = count;
    b.in_dim = t_.in_dim;
    b.out_dim = classification_ ? 0 : t_.out_dim;
    b.x.resize(static_cast<size_t>(count * t_.in_dim));
    b.y.resize(classification_ ? 0 : static_cast<size_t>(count * t_.out_dim));
    b.labels.resize(classification_ ? static_cast<size_t>(count) : 0);
  }

  // Samples indices[s] of the stream `purpose` into row s of out (already sized). Counter layout: step = index;
  // rank 0 draws the input x ~ N(0, I); rank 1 draws the noise (regression: out_dim normals; classification: flip
  // coin and class).
  void samples(Purpose purpose, const std::vector<int64_t>& indices, Batch& out) const {
    const auto seed = static_cast<uint64_t>(t_.seed);
    std::vector<float> h(static_cast<size_t>(t_.hidden)), f(static_cast<size_t>(t_.out_dim));
    for (size_t s = 0; s < indices.size(); ++s) {
      const auto row = static_cast<int64_t>(s);
      float* x = out.x.data() + row * t_.in_dim;
      fill_normal(x, static_cast<uint64_t>(t_.in_dim), seed, purpose, static_cast<uint32_t>(indices[s]), 0);
      forward(x, h.data(), f.data());
      target(purpose, indices[s], f.data(), out, row);
    }
  }

  // f = W2 tanh(W1 x) in float for one sample (h: hidden scratch). Each output is summed in index order
  // (h_j = sum over i of W1[j][i] x_i, i = 0, 1, ...; f_o likewise over j); the loops vectorize across outputs only.
  void forward(const float* x, float* h, float* f) const {
    const int64_t in = t_.in_dim, hidden = t_.hidden, out = t_.out_dim;
    std::fill(h, h + hidden, 0.0f);
    for (int64_t i = 0; i < in; ++i) {
      const float xi = x[i];
      const float* w = w1t_.data() + i * hidden;
      for (int64_t j = 0; j < hidden; ++j) h[j] += w[j] * xi;
    }
    for (int64_t j = 0; j < hidden; ++j) h[j] = std::tanh(h[j]);
    std::fill(f, f + out, 0.0f);
    for (int64_t j = 0; j < hidden; ++j) {
      const float hj = h[j];
      const float* w = w2t_.data() + j * out;
      for (int64_t o = 0; o < out; ++o) f[o] += w[o] * hj;
    }
  }

  // The target of sample `index` in row `row` of out from its teacher output f (out_dim floats): the noisy
  // regression target, or the argmax class (lowest index on ties), flipped with probability noise.
  void target(Purpose purpose, int64_t index, const float* f, Batch& out, int64_t row) const {
    const auto seed = static_cast<uint64_t>(t_.seed);
    const auto step = static_cast<uint32_t>(index);
    if (classification_) {
      int64_t label = 0;
      for (int64_t o = 1; o < t_.out_dim; ++o) {
        if (f[o] > f[label]) label = o;
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
        y[o] = static_cast<float>(static_cast<double>(f[o]) + t_.noise * static_cast<double>(y[o]));
      }
    }
  }

  RunConfig config_;
  TeacherConfig t_;
  bool classification_ = true;
  int64_t steps_per_epoch_ = 0;
  std::vector<float> w1t_;  // W1 transposed: in_dim x hidden
  std::vector<float> w2t_;  // W2 transposed: hidden x out_dim
  Batch eval_;
};

}  // namespace

std::unique_ptr<Dataset> make_teacher(const RunConfig& config) { return std::make_unique<Teacher>(config); }

}  // namespace gs
