// Tests of the models (sim/model) and the dense host arithmetic (kernels/dense.h): finite-difference gradients in
// double, float-vs-double agreement, closed-form linear and quadratic cases, init determinism and bounds,
// accumulation, and configuration errors naming their JSON path. Suites are named Models*.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/dense.h"
#include "kernels/dense_math.h"
#include "kernels/rng.h"
#include "sim/core/error.h"
#include "sim/model/model.h"

namespace gs {
namespace {

RunConfig mlp_config(std::vector<int64_t> layers, const std::string& activation, const std::string& loss,
                     bool bias = true) {
  RunConfig c;
  c.model.kind = "mlp";
  c.model.layers = std::move(layers);
  c.model.activation = activation;
  c.model.loss = loss;
  c.model.bias = bias;
  return c;
}

// count samples with standard-normal inputs, labels in [0, out) or standard-normal regression targets.
Batch make_batch(int64_t in, int64_t out, int64_t count, bool classification, uint64_t seed) {
  Batch b;
  b.count = count;
  b.in_dim = in;
  b.x.resize(static_cast<size_t>(count * in));
  fill_normal(b.x.data(), b.x.size(), seed, Purpose::kTeacherData, 0, 0);
  if (classification) {
    for (int64_t i = 0; i < count; ++i) b.labels.push_back(static_cast<int32_t>((i * 7 + 3) % out));
  } else {
    b.out_dim = out;
    b.y.resize(static_cast<size_t>(count * out));
    fill_normal(b.y.data(), b.y.size(), seed, Purpose::kTeacherData, 1, 0);
  }
  return b;
}

DenseStack stack_of(const RunConfig& c) {
  DenseStack s;
  s.widths = c.model.layers;
  s.activation = c.model.activation == "gelu" ? Activation::kGelu : Activation::kRelu;
  s.loss = c.model.loss == "mse" ? LossKind::kMse : LossKind::kCrossEntropy;
  s.bias = c.model.bias;
  return s;
}

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// The double-precision twin of an mlp: same stack, parameters and batch converted to double.
struct DoubleMlp {
  DenseStack stack;
  std::vector<double> x, y;
  const Batch* batch;
  DenseScratch<double> scratch;

  DoubleMlp(const RunConfig& c, const Batch& b)
      : stack(stack_of(c)), x(to_double(b.x)), y(to_double(b.y)), batch(&b),
        scratch(make_dense_scratch<double>(stack, b.count)) {}
  const int32_t* labels() const { return batch->labels.empty() ? nullptr : batch->labels.data(); }
  double loss(const std::vector<double>& p) {
    return dense_stack_forward(scratch, stack, p.data(), x.data(), batch->count, y.data(), labels());
  }
  std::vector<double> grad(const std::vector<double>& p) {
    std::vector<double> g(p.size(), 0.0);
    loss(p);
    dense_stack_backward(g.data(), scratch, stack, p.data(), x.data(), batch->count, y.data(), labels());
    return g;
  }
};

double norm(const std::vector<double>& v) {
  double s = 0.0;
  for (double e : v) s += e * e;
  return std::sqrt(s);
}

double rel_error(const std::vector<double>& got, const std::vector<double>& want) {
  std::vector<double> d(got.size());
  for (size_t i = 0; i < got.size(); ++i) d[i] = got[i] - want[i];
  return norm(d) / norm(want);
}

std::vector<float> init(const Model& m, uint64_t seed) {
  std::vector<float> p(m.num_params());
  m.init_params(p.data(), seed);
  return p;
}

// ---- (1) gradients against central finite differences, double precision -----------------------------------------

struct FdCase {
  const char* activation;
  const char* loss;
};

std::string fd_case_name(const FdCase& fd) { return std::string(fd.activation) + "_" + fd.loss; }

// How gtest prints the parameter (ctest's test list, failure messages): "relu_mse", not the struct's raw bytes.
void PrintTo(const FdCase& fd, std::ostream* os) { *os << fd_case_name(fd); }

class ModelsFiniteDifference : public ::testing::TestWithParam<FdCase> {};

TEST_P(ModelsFiniteDifference, MlpGradientMatchesCentralDifferences) {
  const FdCase fd = GetParam();
  RunConfig c = mlp_config({5, 7, 6, 3}, fd.activation, fd.loss);
  auto model = make_model(c);
  const bool cls = model->classification();
  Batch batch = make_batch(5, 3, 4, cls, 11);
  DoubleMlp net(c, batch);
  std::vector<double> p = to_double(init(*model, 3));

  const std::vector<double> g = net.grad(p);
  // Keep ReLU's kink out of reach: a step h in one parameter moves a pre-activation by about |x| * h <= 4h here
  // (|x| <= 4, |w| <= 1/sqrt(5)), so every hidden pre-activation must lie farther than 10h from 0.
  const double h = 1e-5;
  for (size_t l = 0; l + 1 < net.scratch.pre.size(); ++l) {
    for (double z : net.scratch.pre[l]) ASSERT_GT(std::fabs(z), 10 * h) << "hidden pre-activation too close to 0";
  }
  std::vector<double> numeric(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    std::vector<double> q = p;
    q[i] = p[i] + h;
    const double up = net.loss(q);
    q[i] = p[i] - h;
    const double down = net.loss(q);
    numeric[i] = (up - down) / (2 * h);
  }
  EXPECT_LT(rel_error(g, numeric), 1e-6);
  const double scale = *std::max_element(numeric.begin(), numeric.end(),
                                         [](double a, double b) { return std::fabs(a) < std::fabs(b); });
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(g[i], numeric[i], 1e-7 * std::fabs(scale)) << "param " << i;
}

INSTANTIATE_TEST_SUITE_P(Models, ModelsFiniteDifference,
                         ::testing::Values(FdCase{"relu", "cross_entropy"}, FdCase{"relu", "mse"},
                                           FdCase{"gelu", "cross_entropy"}, FdCase{"gelu", "mse"}),
                         [](const auto& p) { return fd_case_name(p.param); });

TEST(ModelsDense, ElementMathClosedForms) {
  EXPECT_DOUBLE_EQ(gelu(0.0), 0.0);
  EXPECT_NEAR(gelu(1.0), 0.8413447460685429, 1e-15);  // 1 * Phi(1)
  EXPECT_NEAR(gelu_derivative(0.0), 0.5, 1e-15);
  EXPECT_EQ(relu_derivative(0.0), 0.0);
  const double z[3] = {1000.0, 1000.0, 1000.0};  // stable: no overflow
  EXPECT_NEAR(softmax_cross_entropy_row(z, 1, 3), std::log(3.0), 1e-12);
  const double yh[2] = {1.0, 2.0}, y[2] = {0.0, 0.0};
  EXPECT_DOUBLE_EQ(mse_row(yh, y, 2), 2.5);
}

// The bias gradient of a micro-batch is summed first and then added to the accumulated gradient (PyTorch's
// AccumulateGrad): with 1 already accumulated, two rows of 2^-24 sum to 2^-23 and survive; added one at a time each
// would round away (1 + 2^-24 is a tie that rounds to 1).
TEST(ModelsDense, BiasGradSumsTheMicroBatchFirst) {
  const float tiny = std::ldexp(1.0f, -24);
  float grad = 1.0f;
  const float dy[] = {tiny, tiny};
  add_bias_grad(&grad, dy, 2, 1);
  EXPECT_EQ(grad, 1.0f + std::ldexp(1.0f, -23));
  float db = 5.0f;
  bias_grad(&db, dy, 2, 1);  // overwrites
  EXPECT_EQ(db, std::ldexp(1.0f, -23));
}

// PyTorch's CPU order for dy.sum(0) (SumKernel.cpp), worked by hand on inputs where it differs from a running sum.
TEST(ModelsDense, BiasGradFollowsPyTorchsCascadeOrder) {
  const float tiny = std::ldexp(1.0f, -24);
  // 2 columns: row_sum, 4 interleaved partials. 8 rows: p_k = x_k + x_{k+4}; column 0 holds x0 = 1, x4 = -1,
  // x1 = 2^-24: p0 = 0, p1 = 2^-24, total 2^-24 (a running sum loses the 2^-24 to the 1 and ends at 0).
  {
    std::vector<float> dy(8 * 2, 0.0f);
    dy[0 * 2] = 1.0f;
    dy[4 * 2] = -1.0f;
    dy[1 * 2] = tiny;
    dy[3 * 2 + 1] = 3.0f;
    float db[2];
    bias_grad(db, dy.data(), 8, 2);
    EXPECT_EQ(db[0], tiny);
    EXPECT_EQ(db[1], 3.0f);
  }
  // 32 columns: multi_row_sum, runs of 16 rows. 33 rows: (x32) + ((rows 0-15) + (rows 16-31)); column 5 holds
  // x0 = 1, x16 = x17 = 2^-24: the second run sums to 2^-23 first and survives: 1 + 2^-23 (a running sum gives 1).
  {
    const int64_t rows = 33, cols = 32;
    std::vector<float> dy(static_cast<size_t>(rows * cols), 0.0f);
    dy[0 * cols + 5] = 1.0f;
    dy[16 * cols + 5] = tiny;
    dy[17 * cols + 5] = tiny;
    std::vector<float> db(cols);
    bias_grad(db.data(), dy.data(), rows, cols);
    EXPECT_EQ(db[5], 1.0f + 2 * tiny);
    // 40 columns: 32 take multi_row_sum, 32..39 row_sum (4 partials of rows k mod 4, leftover row 32 into the first):
    // column 35 with x0 = 1, x4 = -1, x1 = 2^-24 gives 2^-24 again.
    const int64_t wide = 40;
    std::vector<float> dz(static_cast<size_t>(rows * wide), 0.0f);
    dz[0 * wide + 35] = 1.0f;
    dz[4 * wide + 35] = -1.0f;
    dz[1 * wide + 35] = tiny;
    std::vector<float> dbw(wide);
    bias_grad(dbw.data(), dz.data(), rows, wide);
    EXPECT_EQ(dbw[35], tiny);
  }
  // An all -0 column sums to +0 (the output starts at +0, as PyTorch's).
  {
    const float dy[] = {-0.0f, -0.0f, -0.0f};
    float db = 1.0f;
    bias_grad(&db, dy, 3, 1);
    EXPECT_EQ(db, 0.0f);
    EXPECT_FALSE(std::signbit(db));
  }
}

// ---- An independent transcription of ATen's loops (SumKernel.cpp multi_row_sum / row_sum / the inner 8-lane
// reduction of one column), as literal as C++ allows: the reference for the unit split that the host and the
// parallel CUDA bias_grad share (TorchCascade fed run sums, torch_column_unit, torch_virtual_column_sum).
float aten_multi_row_sum(const float* x, int64_t count, int64_t stride) {
  constexpr int64_t num_levels = 4;
  int64_t ceil_log2 = 1;
  if (count > 2) {
    ceil_log2 = 0;
    for (uint64_t v = static_cast<uint64_t>(count - 1); v != 0; v >>= 1) ++ceil_log2;
  }
  const int64_t level_power = std::max(int64_t{4}, ceil_log2 / num_levels);
  const int64_t level_step = int64_t{1} << level_power;
  const int64_t level_mask = level_step - 1;
  float acc[num_levels] = {0.0f, 0.0f, 0.0f, 0.0f};
  int64_t i = 0;
  for (; i + level_step <= count;) {
    for (int64_t j = 0; j < level_step; ++j, ++i) acc[0] += x[i * stride];
    for (int64_t j = 1; j < num_levels; ++j) {
      acc[j] += acc[j - 1];
      acc[j - 1] = 0.0f;
      const auto mask = (level_mask << (j * level_power));
      if ((i & mask) != 0) break;
    }
  }
  for (; i < count; ++i) acc[0] += x[i * stride];
  for (int64_t j = 1; j < num_levels; ++j) acc[0] += acc[j];
  return acc[0];
}

float aten_row_sum(const float* x, int64_t count, int64_t stride) {
  const int64_t n4 = count / 4;
  float p[4];
  for (int64_t k = 0; k < 4; ++k) p[k] = aten_multi_row_sum(x + k * stride, n4, 4 * stride);
  for (int64_t i = 4 * n4; i < count; ++i) p[0] += x[i * stride];
  return p[0] + p[1] + p[2] + p[3];  // left to right, as ATen's
}

float aten_column_sum(const float* dy, int64_t rows, int64_t cols, int64_t j) {
  float out = 0.0f;
  if (cols == 1 && rows >= 8) {
    const int64_t vectors = rows / 8;
    float acc = 0.0f;
    for (int64_t r = 8 * vectors; r < rows; ++r) acc += dy[r];
    for (int64_t lane = 0; lane < 8; ++lane) acc += aten_row_sum(dy + lane, vectors, 8);
    return out + acc;
  }
  const int64_t cascaded = cols >= 8 ? cols / 32 * 32 : cols / 4 * 4;
  return out + (j < cascaded ? aten_multi_row_sum(dy + j, rows, cols) : aten_row_sum(dy + j, rows, cols));
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Values of mixed magnitudes (1e-4 .. 1e4, both signs) so that any change of order changes bits.
std::vector<float> mixed_values(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  fill_normal(v.data(), n, seed, Purpose::kTeacherData, 0, 0);
  for (size_t i = 0; i < n; ++i) v[i] *= std::ldexp(1.0f, static_cast<int>(i * 7919 % 27) - 13);
  return v;
}

// The cascade fed run sums equals ATen's sequential loop, including the run length 32 past 2^19 elements and the
// level-3 carries past 16^3 runs; summing the runs in another order (here last first, as a CUDA block may) and
// feeding them in order changes nothing.
TEST(ModelsDense, CascadeOfRunSumsMatchesATensLoop) {
  std::vector<int64_t> counts;
  for (int64_t c = 0; c <= 300; ++c) counts.push_back(c);
  for (int64_t c : {4095, 4096, 4097, 65535, 65536, 65537, 65536 + 4096 * 3 + 17, 524287, 524288, 524289,
                    524288 + 32 * 1024 + 5})
    counts.push_back(c);
  const auto x = mixed_values(600000, 91);
  int differs_from_running_sum = 0;
  for (int64_t count : counts) {
    const float want = aten_multi_row_sum(x.data(), count, 1);
    const float got = torch_cascade_sum(x.data(), count, 1);
    EXPECT_EQ(float_bits(got), float_bits(want)) << "count " << count;
    const int64_t step = torch_cascade_step(count), whole = count / step;
    EXPECT_EQ(step, count > 524288 ? 32 : 16) << "count " << count;
    std::vector<float> run(static_cast<size_t>(whole));
    for (int64_t r = whole - 1; r >= 0; --r) run[static_cast<size_t>(r)] = torch_run_sum(&x[r * step], step, 1);
    TorchCascade<float> cascade(step);
    for (float s : run) cascade.add_run(s);
    EXPECT_EQ(float_bits(cascade.finish(torch_run_sum(&x[whole * step], count - whole * step, 1))),
              float_bits(want)) << "count " << count;
    float running = 0.0f;
    for (int64_t i = 0; i < count; ++i) running += x[i];
    differs_from_running_sum += running != want;
  }
  EXPECT_GT(differs_from_running_sum, 100);  // the inputs do tell the orders apart
}

// Column sums through the units (multi_row_sum columns, row_sum columns, the 8 lanes of one column) equal ATen's
// dispatch over every kind of shape: 1 column below and above 8 rows, 2..7 columns, 8..31 (all row_sum), 32 and
// more (groups of 32 cascaded, the rest row_sum).
TEST(ModelsDense, ColumnSumsThroughUnitsMatchATensDispatch) {
  for (int64_t rows : {0, 1, 3, 7, 8, 9, 15, 16, 17, 33, 64, 257, 1031, 4133}) {
    for (int64_t cols : {1, 2, 3, 4, 5, 7, 8, 10, 31, 32, 33, 40, 64, 65, 100}) {
      const auto dy = mixed_values(static_cast<size_t>(rows * cols), static_cast<uint64_t>(rows * 1000 + cols));
      for (int64_t j = 0; j < cols; ++j)
        ASSERT_EQ(float_bits(torch_column_sum(dy.data(), rows, cols, j)),
                  float_bits(aten_column_sum(dy.data(), rows, cols, j)))
            << rows << " x " << cols << " column " << j;
    }
  }
  // Past 2^19 elements per unit the run length doubles: one column (lanes of 2^24 + 8 rows would be needed) is
  // left to the GPU test; 10 columns of 2^21 + 5 rows give row_sum units of 2^19 + 1 elements.
  const int64_t rows = (int64_t{1} << 21) + 5, cols = 10;
  const auto dy = mixed_values(static_cast<size_t>(rows * cols), 17);
  for (int64_t j = 0; j < cols; ++j)
    EXPECT_EQ(float_bits(torch_column_sum(dy.data(), rows, cols, j)),
              float_bits(aten_column_sum(dy.data(), rows, cols, j)))
        << "column " << j;
}

TEST(ModelsDense, GemmTransposes) {
  // a = [[1,2],[3,4]], b = [[5,6],[7,8]].
  const double a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  double c[4];
  gemm(c, a, b, 2, 2, 2, Transpose::kNo, Transpose::kNo, 1.0, 0.0);
  EXPECT_EQ(std::vector<double>(c, c + 4), (std::vector<double>{19, 22, 43, 50}));
  gemm(c, a, b, 2, 2, 2, Transpose::kYes, Transpose::kNo, 1.0, 0.0);  // a^T b
  EXPECT_EQ(std::vector<double>(c, c + 4), (std::vector<double>{26, 30, 38, 44}));
  gemm(c, a, b, 2, 2, 2, Transpose::kNo, Transpose::kYes, 1.0, 0.0);  // a b^T
  EXPECT_EQ(std::vector<double>(c, c + 4), (std::vector<double>{17, 23, 39, 53}));
  gemm(c, a, b, 2, 2, 2, Transpose::kNo, Transpose::kYes, 1.0, 1.0);  // accumulate
  EXPECT_EQ(std::vector<double>(c, c + 4), (std::vector<double>{34, 46, 78, 106}));
}

// ---- (2) the float model agrees with the double twin -----------------------------------------------------------

TEST(ModelsMlp, FloatGradientAgreesWithDouble) {
  for (const char* act : {"relu", "gelu"}) {
    for (const char* loss : {"cross_entropy", "mse"}) {
      SCOPED_TRACE(std::string(act) + " " + loss);
      RunConfig c = mlp_config({20, 16, 12, 4}, act, loss);
      auto model = make_model(c);
      Batch batch = make_batch(20, 4, 8, model->classification(), 5);
      std::vector<float> p = init(*model, 9);
      auto ws = model->make_workspace(8);
      std::vector<float> g(p.size(), 0.0f);
      const double loss_f = model->forward(p.data(), batch, *ws, PrecisionPolicy{});
      model->backward(p.data(), batch, *ws, g.data(), PrecisionPolicy{});

      DoubleMlp net(c, batch);
      std::vector<double> pd = to_double(p);
      const double loss_d = net.loss(pd);
      EXPECT_NEAR(loss_f, loss_d, 1e-5 * std::fabs(loss_d));
      EXPECT_LT(rel_error(to_double(g), net.grad(pd)), 1e-5);
    }
  }
}

TEST(ModelsMlp, EvaluateChunksBeyondTheWorkspace) {
  RunConfig c = mlp_config({6, 5, 3}, "relu", "cross_entropy");
  auto model = make_model(c);
  Batch batch = make_batch(6, 3, 10, true, 2);
  std::vector<float> p = init(*model, 1);
  auto small = model->make_workspace(3);  // 10 samples in chunks of 3
  auto whole = model->make_workspace(10);
  const EvalSums e = model->evaluate(p.data(), batch, *small);
  EXPECT_EQ(e.count, 10);
  EXPECT_NEAR(e.loss_sum, model->forward(p.data(), batch, *whole, PrecisionPolicy{}), 1e-5);
  EXPECT_THROW(model->forward(p.data(), batch, *small, PrecisionPolicy{}), Error);  // forward does not chunk
}

TEST(ModelsMlp, TensorTableAndFlops) {
  auto model = make_model(mlp_config({784, 512, 512, 10}, "relu", "cross_entropy"));
  const auto& t = model->tensors();
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[0].name, "layer0.weight");
  EXPECT_EQ(t[0].shape, (std::vector<int64_t>{512, 784}));
  EXPECT_EQ(t[1].name, "layer0.bias");
  EXPECT_EQ(t[1].offset, 512u * 784u);
  EXPECT_EQ(t[5].name, "layer2.bias");
  EXPECT_EQ(model->num_params(), 784u * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
  const double gemm_flops = 2.0 * (784 * 512 + 512 * 512 + 512 * 10);
  EXPECT_GE(model->forward_flops_per_sample(), gemm_flops);
  EXPECT_LT(model->forward_flops_per_sample(), 1.01 * gemm_flops);
  EXPECT_TRUE(model->classification());
}

// ---- (3) closed forms ------------------------------------------------------------------------------------------

TEST(ModelsLinear, MseLossAndGradientMatchClosedForm) {
  RunConfig c;
  c.model.kind = "linear";
  c.model.layers = {3, 2};
  c.model.loss = "mse";
  c.model.initial_weights = json::parse("[[1, 2, 3], [4, 5, 6]]");
  c.model.initial_bias = json::parse("[0.5, -0.5]");
  auto model = make_model(c);
  ASSERT_EQ(model->tensors().size(), 2u);
  EXPECT_EQ(model->tensors()[0].name, "weight");
  EXPECT_EQ(model->tensors()[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(model->tensors()[1].name, "bias");
  std::vector<float> p = init(*model, 1);
  EXPECT_EQ(p, (std::vector<float>{1, 2, 3, 4, 5, 6, 0.5f, -0.5f}));

  Batch b;
  b.count = 2;
  b.in_dim = 3;
  b.out_dim = 2;
  b.x = {1, 0, -1, 2, 1, 0};
  b.y = {0, 1, 3, 10};
  // Sample 0: y_hat = [1-3+0.5, 4-6-0.5] = [-1.5, -2.5]; r0 = y_hat - y = [-1.5, -3.5].
  // Sample 1: y_hat = [2+2+0.5, 8+5-0.5] = [4.5, 12.5]; r1 = [1.5, 2.5].
  const double want_loss = 0.5 * (1.5 * 1.5 + 3.5 * 3.5) + 0.5 * (1.5 * 1.5 + 2.5 * 2.5);
  // dW[o][i] = sum_s r_s[o] x_s[i]; db = r0 + r1.
  const std::vector<float> want_grad = {-1.5f + 3.0f, 1.5f, 1.5f, -3.5f + 5.0f, 2.5f, 3.5f, 0.0f, -1.0f};
  auto ws = model->make_workspace(2);
  EXPECT_NEAR(model->forward(p.data(), b, *ws, PrecisionPolicy{}), want_loss, 1e-5);
  std::vector<float> g(p.size(), 0.0f);
  model->backward(p.data(), b, *ws, g.data(), PrecisionPolicy{});
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want_grad[i], 1e-5) << i;
}

TEST(ModelsLinear, BareNumberAndDefaults) {
  RunConfig c;
  c.model.kind = "linear";
  c.model.layers = {1, 1};
  c.model.loss = "mse";
  c.model.initial_weights = 2.0;  // explicit weights, null bias: bias starts at 0
  auto model = make_model(c);
  EXPECT_EQ(init(*model, 1), (std::vector<float>{2.0f, 0.0f}));

  c.model.initial_weights = nullptr;  // both null: the mlp's seeded init, identical to a one-layer mlp
  auto seeded = make_model(c);
  RunConfig as_mlp = c;
  as_mlp.model.kind = "mlp";
  EXPECT_EQ(init(*seeded, 7), init(*make_model(as_mlp), 7));
}

TEST(ModelsQuadratic, LossAndGradientMatchClosedForm) {
  RunConfig c;
  c.model.kind = "quadratic";
  c.model.a = json::parse("[2, 1]");
  c.model.b = json::parse("[1, -1]");
  c.model.initial_w = json::parse("[0, 0]");
  auto model = make_model(c);
  ASSERT_EQ(model->tensors().size(), 1u);
  EXPECT_EQ(model->tensors()[0].name, "w");
  EXPECT_EQ(model->tensors()[0].shape, (std::vector<int64_t>{2}));
  std::vector<float> w = init(*model, 1);
  EXPECT_EQ(w, (std::vector<float>{0, 0}));
  auto ws = model->make_workspace(1);
  Batch b;
  b.count = 1;
  EXPECT_DOUBLE_EQ(model->forward(w.data(), b, *ws, PrecisionPolicy{}), 1.5);  // 0.5 * (2*1 + 1*1)
  std::vector<float> g(2, 0.0f);
  model->backward(w.data(), b, *ws, g.data(), PrecisionPolicy{});
  EXPECT_EQ(g, (std::vector<float>{-2, 1}));  // a * (w - b)
  b.count = 3;  // count samples of the same f_r
  EXPECT_DOUBLE_EQ(model->forward(w.data(), b, *ws, PrecisionPolicy{}), 4.5);
  EXPECT_DOUBLE_EQ(model->evaluate(w.data(), b, *ws).loss_sum, 4.5);
}

TEST(ModelsQuadratic, PerRankRows) {
  RunConfig c;
  c.model.kind = "quadratic";
  c.cluster.ranks = 2;
  c.model.a = json::parse("[[2, 1], [1, 4]]");
  c.model.b = json::parse("[[1, -1]]");  // one row for every rank
  c.model.initial_w = json::parse("[0, 1]");
  auto model = make_model(c);
  auto ws = model->make_workspace(1);
  std::vector<float> w = init(*model, 1);
  Batch b;
  b.count = 1;
  b.rank = 1;
  // Rank 1: a = [1, 4], b = [1, -1]: f = 0.5 * (1*1 + 4*4) = 8.5; grad = [1*(0-1), 4*(1+1)] = [-1, 8].
  EXPECT_DOUBLE_EQ(model->forward(w.data(), b, *ws, PrecisionPolicy{}), 8.5);
  std::vector<float> g(2, 0.0f);
  model->backward(w.data(), b, *ws, g.data(), PrecisionPolicy{});
  EXPECT_EQ(g, (std::vector<float>{-1, 8}));
}

// ---- (4) init determinism and bounds ---------------------------------------------------------------------------

TEST(ModelsInit, DeterministicBoundedAndKeyed) {
  RunConfig c = mlp_config({50, 40, 10}, "relu", "cross_entropy");
  auto model = make_model(c);
  const std::vector<float> a = init(*model, 42), b = init(*model, 42), other = init(*model, 43);
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);  // same seed, same bits
  EXPECT_NE(a, other);
  for (const TensorInfo& t : model->tensors()) {
    const int64_t fan_in = t.name.rfind("layer0", 0) == 0 ? 50 : 40;
    const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
    float max_abs = 0.0f;
    for (size_t i = t.offset; i < t.offset + t.count; ++i) max_abs = std::max(max_abs, std::fabs(a[i]));
    EXPECT_LE(max_abs, bound) << t.name;
    EXPECT_GT(max_abs, 0.8f * bound) << t.name;  // spread over the whole interval
  }
  // The documented key: layer 1's bias is step 2*1+1 of (seed, kInit), rank 0.
  const TensorInfo& b1 = model->tensors()[3];
  ASSERT_EQ(b1.name, "layer1.bias");
  std::vector<float> want(b1.count);
  const float bound = static_cast<float>(1.0 / std::sqrt(40.0));
  fill_uniform(want.data(), want.size(), -bound, bound, 42, Purpose::kInit, 3, 0);
  EXPECT_EQ(std::vector<float>(a.begin() + static_cast<long>(b1.offset), a.begin() + static_cast<long>(b1.offset + b1.count)),
            want);
}

// ---- (5) backward accumulates ----------------------------------------------------------------------------------

TEST(ModelsAccumulate, BackwardAddsIntoGrad) {
  for (const char* kind : {"mlp", "quadratic"}) {
    SCOPED_TRACE(kind);
    RunConfig c = mlp_config({6, 5, 3}, "gelu", "cross_entropy");
    c.model.kind = kind;
    c.model.a = json::parse("[2, 1]");
    c.model.b = json::parse("[1, -1]");
    c.model.initial_w = json::parse("[0.5, 0.25]");
    auto model = make_model(c);
    Batch batch = make_batch(6, 3, 4, true, 8);
    std::vector<float> p = init(*model, 2);
    auto ws = model->make_workspace(4);
    std::vector<float> once(p.size(), 0.0f), twice(p.size(), 0.0f), offset(p.size(), 1.0f);
    model->forward(p.data(), batch, *ws, PrecisionPolicy{});
    model->backward(p.data(), batch, *ws, once.data(), PrecisionPolicy{});
    model->backward(p.data(), batch, *ws, twice.data(), PrecisionPolicy{});
    model->backward(p.data(), batch, *ws, twice.data(), PrecisionPolicy{});
    model->backward(p.data(), batch, *ws, offset.data(), PrecisionPolicy{});
    for (size_t i = 0; i < p.size(); ++i) {
      EXPECT_NEAR(twice[i], 2.0f * once[i], 1e-6f * (1.0f + std::fabs(once[i]))) << i;
      EXPECT_NEAR(offset[i], 1.0f + once[i], 1e-6f * (1.0f + std::fabs(once[i]))) << i;
    }
  }
}

// ---- (6) bad configurations name their JSON path ---------------------------------------------------------------

void expect_config_error(const RunConfig& c, const std::vector<std::string>& fragments) {
  try {
    make_model(c);
    ADD_FAILURE() << "no error; expected one mentioning " << fragments[0];
  } catch (const Error& e) {
    for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(ModelsConfig, BadConfigurationsThrowWithThePath) {
  RunConfig mlp = mlp_config({5, 4, 3}, "relu", "cross_entropy");
  auto with = [](RunConfig c, const std::function<void(RunConfig&)>& edit) {
    edit(c);
    return c;
  };
  expect_config_error(with(mlp, [](RunConfig& c) { c.model.kind = "cnn"; }),
                      {"model.kind", "'cnn'", "mlp, linear, quadratic"});
  expect_config_error(with(mlp, [](RunConfig& c) { c.model.layers = {5}; }), {"model.layers", "at least 2"});
  expect_config_error(with(mlp, [](RunConfig& c) { c.model.layers = {5, 0, 3}; }), {"model.layers[1]", ">= 1"});
  expect_config_error(with(mlp, [](RunConfig& c) { c.model.activation = "tanh"; }), {"model.activation", "tanh"});
  expect_config_error(with(mlp, [](RunConfig& c) { c.model.loss = "hinge"; }), {"model.loss", "hinge"});
  expect_config_error(with(mlp, [](RunConfig& c) { c.model.layers = {5, 1}; }), {"model.layers", "2 classes"});
  expect_config_error(with(mlp, [](RunConfig& c) { c.model.initial_weights = json::parse("[[1]]"); }),
                      {"model.initial_weights", "linear"});

  RunConfig lin;
  lin.model.kind = "linear";
  lin.model.layers = {3, 2};
  lin.model.loss = "mse";
  expect_config_error(with(lin, [](RunConfig& c) { c.model.layers = {3, 4, 2}; }), {"model.layers", "[in, out]"});
  expect_config_error(with(lin, [](RunConfig& c) { c.model.initial_weights = json::parse("[[1, 2, 3]]"); }),
                      {"model.initial_weights: expected 2 rows of 3 numbers"});
  expect_config_error(with(lin, [](RunConfig& c) { c.model.initial_weights = json::parse("[[1, 2], [3, 4]]"); }),
                      {"model.initial_weights: expected 2 rows of 3 numbers", "row 0"});
  expect_config_error(with(lin, [](RunConfig& c) { c.model.initial_weights = 1.5; }), {"model.initial_weights"});
  expect_config_error(
      with(lin, [](RunConfig& c) { c.model.initial_weights = json::parse(R"([[1, 2, 3], [4, "x", 6]])"); }),
      {"model.initial_weights[1][1]", "number"});
  expect_config_error(with(lin, [](RunConfig& c) { c.model.initial_bias = json::parse("[1]"); }),
                      {"model.initial_bias", "2 numbers"});
  expect_config_error(with(lin,
                           [](RunConfig& c) {
                             c.model.bias = false;
                             c.model.initial_bias = json::parse("[1, 2]");
                           }),
                      {"model.initial_bias", "model.bias"});

  RunConfig quad;
  quad.model.kind = "quadratic";
  quad.cluster.ranks = 2;
  quad.model.a = json::parse("[2, 1]");
  quad.model.b = json::parse("[1, -1]");
  quad.model.initial_w = json::parse("[0, 0]");
  expect_config_error(with(quad, [](RunConfig& c) { c.model.initial_w = nullptr; }), {"model.initial_w"});
  expect_config_error(with(quad, [](RunConfig& c) { c.model.a = json::parse("[[1, 1], [1, 1], [1, 1]]"); }),
                      {"model.a", "1 or 2", "got 3 lists"});
  expect_config_error(with(quad, [](RunConfig& c) { c.model.b = json::parse("[[1, 1], [1]]"); }),
                      {"model.b[1]", "2 numbers"});
  expect_config_error(with(quad, [](RunConfig& c) { c.model.a = json::parse(R"([1, "two"])"); }),
                      {"model.a[1]", "number"});
  expect_config_error(with(quad, [](RunConfig& c) { c.model.b = nullptr; }), {"model.b"});
}

}  // namespace
}  // namespace gs
