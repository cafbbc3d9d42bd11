// Tests of the datasets (sim/model/*data*, teacher, fashion_mnist): the sharding rule of dataset.h, epoch orders,
// IDX parsing on small files written here, the inline format and its errors, and the "none" dataset. A new dataset
// joins the sharding test when it is indexable.
#include <gtest/gtest.h>

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kernels/rng.h"
#include "sim/core/error.h"
#include "sim/model/dataset.h"

namespace gs {
namespace {

namespace fs = std::filesystem;

const char* kDebianFashionMnist = "/usr/share/datasets/fashion-mnist";

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "error \"" << e.what() << "\" does not contain \"" << needle << "\"";
  }
}

RunConfig teacher_config(int64_t ranks, int64_t accumulation, int64_t batch, const std::string& task) {
  RunConfig c;
  c.data.kind = "teacher";
  c.cluster.ranks = ranks;
  c.training.accumulation_steps = accumulation;
  c.data.batch_per_rank = batch;
  c.training.seed = 11;
  c.data.teacher.task = task;
  c.data.teacher.in_dim = 5;
  c.data.teacher.hidden = 7;
  c.data.teacher.out_dim = 3;
  c.data.teacher.train_samples = 211;
  c.data.teacher.eval_samples = 17;
  c.model.loss = task == "classification" ? "cross_entropy" : "mse";
  return c;
}

// One sample as bytes (input bits, then target bits or label): a key for bitwise multiset comparison.
std::string sample_key(const Batch& b, int64_t s) {
  std::string k(reinterpret_cast<const char*>(b.x.data() + s * b.in_dim), static_cast<size_t>(b.in_dim) * 4);
  if (!b.labels.empty()) k.append(reinterpret_cast<const char*>(&b.labels[static_cast<size_t>(s)]), 4);
  if (b.out_dim > 0) {
    k.append(reinterpret_cast<const char*>(b.y.data() + s * b.out_dim), static_cast<size_t>(b.out_dim) * 4);
  }
  return k;
}

// For N ranks x K micro-batches x b samples, step t's micro-batches hold exactly the samples of one rank's batch of
// N*K*b (as a multiset, and position by position: micro k of rank r is rows [(k*N + r)*b, +b)).
void check_sharding(RunConfig base, const std::vector<int64_t>& steps) {
  const int64_t b = base.data.batch_per_rank;
  for (int64_t n : {1, 2, 3, 4}) {
    for (int64_t k : {1, 2, 4}) {
      RunConfig c = base, one = base;
      c.cluster.ranks = n;
      c.training.accumulation_steps = k;
      one.cluster.ranks = 1;
      one.training.accumulation_steps = 1;
      one.data.batch_per_rank = n * k * b;
      const auto sharded = make_dataset(c);
      const auto single = make_dataset(one);
      ASSERT_EQ(sharded->steps_per_epoch(), single->steps_per_epoch());
      for (int64_t t : steps) {
        Batch ref, mb;
        single->micro_batch(t, 0, 0, ref);
        ASSERT_EQ(ref.count, n * k * b);
        std::multiset<std::string> want, got;
        for (int64_t s = 0; s < ref.count; ++s) want.insert(sample_key(ref, s));
        for (int64_t m = 0; m < k; ++m) {
          for (int r = 0; r < n; ++r) {
            sharded->micro_batch(t, m, r, mb);
            ASSERT_EQ(mb.rank, r);
            ASSERT_EQ(mb.count, b);
            for (int64_t s = 0; s < b; ++s) {
              got.insert(sample_key(mb, s));
              ASSERT_EQ(sample_key(mb, s), sample_key(ref, (m * n + r) * b + s))
                  << "N=" << n << " K=" << k << " step " << t << " micro " << m << " rank " << r << " row " << s;
            }
          }
        }
        EXPECT_EQ(got, want) << "N=" << n << " K=" << k << " step " << t;
      }
    }
  }
}

TEST(DataSharding, TeacherRanksTimesMicroBatchesEqualOneBigBatch) {
  for (const char* task : {"classification", "regression"}) {
    RunConfig c = teacher_config(1, 1, 3, task);
    c.data.teacher.train_samples = 100;  // G = 3..48: several epochs within the steps below
    check_sharding(c, {0, 1, 2, 3, 5, 8, 13});
  }
}

// The teacher runs through BLAS in fixed-shape blocks, so a sample's bits do not depend on the micro-batch it lands in:
// also with one-sample micro-batches, and with in_dim past the GEMM's k blocking (several partial sums per output).
TEST(DataSharding, TeacherWideLayersAndSingleSampleMicroBatches) {
  for (const char* task : {"classification", "regression"}) {
    for (int64_t b : {1, 5}) {
      RunConfig c = teacher_config(1, 1, b, task);
      c.data.teacher.in_dim = 1000;
      c.data.teacher.hidden = 70;
      c.data.teacher.out_dim = 13;
      c.data.teacher.train_samples = 300;
      c.data.teacher.eval_samples = 0;
      check_sharding(c, {0, 3});
    }
  }
}

TEST(DataSharding, FashionMnistRanksTimesMicroBatchesEqualOneBigBatch) {
  if (!fs::exists(fs::path(kDebianFashionMnist) / "train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed at " << kDebianFashionMnist << " (Debian: dataset-fashion-mnist)";
  }
  RunConfig c;
  c.data.kind = "fashion_mnist";
  c.data.batch_per_rank = 2;
  c.training.seed = 3;
  c.data.eval_samples = 100;
  check_sharding(c, {0, 1, 2499});  // G = 2..32: step 2499 is in epoch 0 or later depending on G
}

TEST(DataFashionMnist, DebianCopyLoadsWithExpectedShapes) {
  if (!fs::exists(fs::path(kDebianFashionMnist) / "train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed at " << kDebianFashionMnist;
  }
  RunConfig c;
  c.data.kind = "fashion_mnist";
  c.data.batch_per_rank = 32;
  c.cluster.ranks = 4;
  const auto t0 = std::chrono::steady_clock::now();
  const auto d = make_dataset(c);
  const auto t1 = std::chrono::steady_clock::now();
  const auto d2 = make_dataset(c);
  const auto t2 = std::chrono::steady_clock::now();
  std::printf("fashion_mnist load: first %.1f ms, cached %.1f ms\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count(),
              std::chrono::duration<double, std::milli>(t2 - t1).count());
  EXPECT_EQ(d->in_dim(), 784);
  EXPECT_EQ(d->out_dim(), 10);
  EXPECT_TRUE(d->classification());
  EXPECT_EQ(d->steps_per_epoch(), 60000 / 128);
  EXPECT_EQ(d->eval_set().count, 10000);
  EXPECT_EQ(d->eval_set().x.size(), 10000u * 784u);
  std::vector<int64_t> per_class(10);
  for (int32_t l : d->eval_set().labels) per_class[static_cast<size_t>(l)]++;
  for (int64_t n : per_class) EXPECT_EQ(n, 1000);  // the test split is balanced
  for (float v : d->eval_set().x) ASSERT_TRUE(v >= 0.0f && v <= 1.0f);
  EXPECT_EQ(d2->eval_set().x, d->eval_set().x);
}

TEST(DataEpochOrder, PermutationDeterministicAndSeeded) {
  const int64_t n = 1000;
  const auto a = epoch_order(n, 7, 0, true);
  std::vector<int64_t> sorted = a, iota(static_cast<size_t>(n));
  std::sort(sorted.begin(), sorted.end());
  std::iota(iota.begin(), iota.end(), int64_t{0});
  EXPECT_EQ(sorted, iota);
  EXPECT_EQ(epoch_order(n, 7, 0, true), a);
  EXPECT_NE(epoch_order(n, 7, 1, true), a);
  EXPECT_NE(epoch_order(n, 8, 0, true), a);
  EXPECT_NE(a, iota);
  EXPECT_EQ(epoch_order(n, 7, 0, false), iota);
  EXPECT_EQ(epoch_order(n, 7, 5, false), iota);
  EXPECT_TRUE(epoch_order(0, 7, 0, true).empty());
  EXPECT_EQ(epoch_order(1, 7, 0, true), std::vector<int64_t>{0});
}

TEST(DataEpochOrder, FollowsTheOrderAndDropsTheLastPartialBatch) {
  // 100 samples, G = 2*2*8 = 32: three steps per epoch, samples at positions 96..99 of each epoch are never used.
  RunConfig c = teacher_config(2, 2, 8, "regression");
  c.data.teacher.train_samples = 100;
  const auto d = make_dataset(c);
  EXPECT_EQ(d->steps_per_epoch(), 3);
  // Sample i on its own: one rank, batches of 1, no shuffling, step i.
  RunConfig one = teacher_config(1, 1, 1, "regression");
  one.data.teacher.train_samples = 100;
  one.data.shuffle = false;
  const auto plain = make_dataset(one);
  auto sample = [&](int64_t i) {
    Batch b;
    plain->micro_batch(i, 0, 0, b);
    return sample_key(b, 0);
  };
  for (int64_t t = 0; t < 7; ++t) {
    const auto order = epoch_order(100, 11, t / 3, true);
    for (int64_t m = 0; m < 2; ++m) {
      for (int r = 0; r < 2; ++r) {
        Batch b;
        d->micro_batch(t, m, r, b);
        for (int64_t s = 0; s < 8; ++s) {
          const int64_t pos = (t % 3) * 32 + (m * 2 + r) * 8 + s;
          ASSERT_LT(pos, 96);
          ASSERT_EQ(sample_key(b, s), sample(order[static_cast<size_t>(pos)])) << "step " << t;
        }
      }
    }
  }
  // Without shuffling, epoch 1 starts over with samples 0..31.
  RunConfig unshuffled = c;
  unshuffled.data.shuffle = false;
  const auto u = make_dataset(unshuffled);
  Batch b0, b3;
  u->micro_batch(0, 0, 0, b0);
  u->micro_batch(3, 0, 0, b3);
  EXPECT_EQ(b0.x, b3.x);
  EXPECT_EQ(sample_key(b0, 0), sample(0));
}

TEST(DataEpochOrder, GlobalBatchLargerThanTrainingSetIsAnError) {
  RunConfig c = teacher_config(4, 4, 8, "classification");
  c.data.teacher.train_samples = 100;
  expect_error([&] { make_dataset(c); }, "data.batch_per_rank");
}

TEST(DataTeacher, DeterministicShapesAndNoise) {
  const RunConfig c = teacher_config(2, 1, 4, "classification");
  const auto a = make_dataset(c), b = make_dataset(c);
  Batch x, y;
  a->micro_batch(5, 0, 1, x);
  b->micro_batch(5, 0, 1, y);
  EXPECT_EQ(x.x, y.x);
  EXPECT_EQ(x.labels, y.labels);
  EXPECT_EQ(x.in_dim, 5);
  EXPECT_EQ(a->out_dim(), 3);
  EXPECT_EQ(a->eval_set().count, 17);
  EXPECT_EQ(a->eval_set().labels.size(), 17u);
  for (int32_t l : a->eval_set().labels) EXPECT_TRUE(l >= 0 && l < 3);
  // The training seed shuffles; the teacher seed alone fixes the samples.
  RunConfig other = c;
  other.data.teacher.seed = 99;
  EXPECT_NE(make_dataset(other)->eval_set().x, a->eval_set().x);

  // Regression with noise 0 is the teacher itself; with noise s the residual stdev is s (from a big eval set).
  RunConfig r = teacher_config(1, 1, 1, "regression");
  r.data.teacher.eval_samples = 20000;
  r.data.teacher.noise = 0.0;
  const auto clean = make_dataset(r);
  r.data.teacher.noise = 0.5;
  const auto noisy = make_dataset(r);
  ASSERT_EQ(clean->eval_set().x, noisy->eval_set().x);
  double sum_sq = 0.0;
  for (size_t i = 0; i < clean->eval_set().y.size(); ++i) {
    const double e = noisy->eval_set().y[i] - clean->eval_set().y[i];
    sum_sq += e * e;
  }
  EXPECT_NEAR(std::sqrt(sum_sq / static_cast<double>(clean->eval_set().y.size())), 0.5, 0.01);

  // Classification: a flip probability p changes about a fraction p of the labels.
  RunConfig k = teacher_config(1, 1, 1, "classification");
  k.data.teacher.eval_samples = 20000;
  k.data.teacher.noise = 0.0;
  const auto exact = make_dataset(k);
  k.data.teacher.noise = 0.2;
  const auto flipped = make_dataset(k);
  int64_t changed = 0;
  for (size_t i = 0; i < 20000; ++i) changed += exact->eval_set().labels[i] != flipped->eval_set().labels[i];
  EXPECT_NEAR(static_cast<double>(changed) / 20000.0, 0.2, 0.015);
}

// The targets follow docs/data.md: x from (teacher.seed, stream, step = index, rank 0), weights W1 ~ N(0, 1/in_dim) and
// W2 ~ N(0, 1/hidden) from (teacher.seed, kTeacher, step 0 / 1), f(x) = W2 tanh(W1 x). The dataset evaluates f in
// float; here it is recomputed in double from the documented streams.
TEST(DataTeacher, TargetsFollowTheDefinition) {
  RunConfig c = teacher_config(1, 1, 6, "regression");
  TeacherConfig& t = c.data.teacher;
  t.in_dim = 300;
  t.hidden = 40;
  t.out_dim = 6;
  t.noise = 0.0;
  t.eval_samples = 37;
  const auto seed = static_cast<uint64_t>(t.seed);
  std::vector<float> w1(static_cast<size_t>(t.hidden * t.in_dim)), w2(static_cast<size_t>(t.out_dim * t.hidden));
  fill_normal(w1.data(), w1.size(), seed, Purpose::kTeacher, 0, 0);
  fill_normal(w2.data(), w2.size(), seed, Purpose::kTeacher, 1, 0);
  const auto s1 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(t.in_dim)));
  const auto s2 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(t.hidden)));
  for (float& w : w1) w *= s1;
  for (float& w : w2) w *= s2;
  auto teacher = [&](const float* x) {
    const auto in = static_cast<size_t>(t.in_dim), hidden = static_cast<size_t>(t.hidden);
    std::vector<double> h(hidden), f(static_cast<size_t>(t.out_dim));
    for (size_t j = 0; j < h.size(); ++j) {
      double a = 0.0;
      for (size_t i = 0; i < in; ++i) a += static_cast<double>(w1[j * in + i]) * x[i];
      h[j] = std::tanh(a);
    }
    for (size_t o = 0; o < f.size(); ++o) {
      for (size_t j = 0; j < hidden; ++j) f[o] += static_cast<double>(w2[o * hidden + j]) * h[j];
    }
    return f;
  };
  // Checks every row of b against the definition; returns the largest difference.
  auto check = [&](const Batch& b, Purpose purpose, const std::vector<int64_t>& indices) {
    double worst = 0.0;
    std::vector<float> x(static_cast<size_t>(t.in_dim));
    for (int64_t s = 0; s < b.count; ++s) {
      const auto step = static_cast<uint32_t>(indices[static_cast<size_t>(s)]);
      fill_normal(x.data(), x.size(), seed, purpose, step, 0);
      EXPECT_TRUE(std::equal(x.begin(), x.end(), b.x.begin() + s * t.in_dim)) << "input of row " << s;
      const std::vector<double> f = teacher(x.data());
      for (int64_t o = 0; o < t.out_dim; ++o) {
        worst = std::max(worst, std::fabs(b.y[static_cast<size_t>(s * t.out_dim + o)] - f[static_cast<size_t>(o)]));
      }
    }
    return worst;
  };
  const auto d = make_dataset(c);
  std::vector<int64_t> eval_indices(37);
  std::iota(eval_indices.begin(), eval_indices.end(), 0);
  EXPECT_LT(check(d->eval_set(), Purpose::kTeacherEval, eval_indices), 1e-5);
  Batch mb;
  d->micro_batch(4, 0, 0, mb);
  EXPECT_LT(check(mb, Purpose::kTeacherData, micro_batch_indices(c, t.train_samples, 4, 0, 0)), 1e-5);
}

// Rank threads read one dataset at once (epochs cross, so the shared order cache is exercised): same bytes as serial.
TEST(DataTeacher, ConcurrentRanksMatchSerial) {
  RunConfig c = teacher_config(4, 2, 3, "classification");
  c.data.teacher.train_samples = 50;  // G = 24: two steps per epoch
  const auto d = make_dataset(c);
  auto collect = [&](int rank) {
    std::string all;
    Batch b;
    for (int64_t t = 0; t < 40; ++t) {
      for (int64_t m = 0; m < 2; ++m) {
        d->micro_batch(t, m, rank, b);
        for (int64_t s = 0; s < b.count; ++s) all += sample_key(b, s);
      }
    }
    return all;
  };
  std::vector<std::string> serial, parallel(4);
  for (int r = 0; r < 4; ++r) serial.push_back(collect(r));
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) threads.emplace_back([&, r] { parallel[static_cast<size_t>(r)] = collect(r); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(parallel, serial);
}

// ---- IDX files written here ----------------------------------------------------------------------------------

class DataIdx : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gradsweep_test_idx_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<unsigned char> header(uint32_t magic, const std::vector<uint32_t>& dims) {
    std::vector<unsigned char> h;
    auto put = [&](uint32_t v) {
      for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<unsigned char>(v >> s));
    };
    put(magic);
    for (uint32_t d : dims) put(d);
    return h;
  }

  static unsigned char pixel(uint32_t image, uint32_t i) {
    return static_cast<unsigned char>((image * 31 + i * 7) % 256);
  }

  void write_gz(const std::string& name, const std::vector<unsigned char>& bytes) const {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    if (!bytes.empty()) {
      ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    }
    ASSERT_EQ(gzclose(f), Z_OK);
  }

  std::vector<unsigned char> images(uint32_t count, uint32_t rows = 28, uint32_t cols = 28) const {
    auto b = header(2051, {count, rows, cols});
    for (uint32_t n = 0; n < count; ++n) {
      for (uint32_t i = 0; i < rows * cols; ++i) b.push_back(pixel(n, i));
    }
    return b;
  }

  static std::vector<unsigned char> labels(const std::vector<unsigned char>& l) {
    auto b = header(2049, {static_cast<uint32_t>(l.size())});
    b.insert(b.end(), l.begin(), l.end());
    return b;
  }

  // A valid small set: 3 training images (labels 0, 9, 4), 2 test images (labels 7, 1).
  void write_valid() const {
    write_gz("train-images-idx3-ubyte.gz", images(3));
    write_gz("train-labels-idx1-ubyte.gz", labels({0, 9, 4}));
    write_gz("t10k-images-idx3-ubyte.gz", images(2));
    write_gz("t10k-labels-idx1-ubyte.gz", labels({7, 1}));
  }

  RunConfig config() const {
    RunConfig c;
    c.data.kind = "fashion_mnist";
    c.data.path = dir_.string();
    c.data.batch_per_rank = 1;
    c.data.shuffle = false;
    return c;
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(DataIdx, ValuesScaledToUnitInterval) {
  write_valid();
  const auto d = make_dataset(config());
  EXPECT_EQ(d->in_dim(), 784);
  EXPECT_EQ(d->out_dim(), 10);
  EXPECT_EQ(d->steps_per_epoch(), 3);
  const int32_t want_labels[] = {0, 9, 4};
  for (uint32_t n = 0; n < 3; ++n) {
    Batch b;
    d->micro_batch(n, 0, 0, b);
    ASSERT_EQ(b.count, 1);
    ASSERT_EQ(b.x.size(), 784u);
    EXPECT_EQ(b.labels, std::vector<int32_t>{want_labels[n]});
    for (uint32_t i = 0; i < 784; ++i) {
      ASSERT_EQ(b.x[i], static_cast<float>(pixel(n, i)) / 255.0f) << "image " << n << " pixel " << i;
      ASSERT_TRUE(b.x[i] >= 0.0f && b.x[i] <= 1.0f);
    }
  }
  const Batch& e = d->eval_set();
  EXPECT_EQ(e.count, 2);
  EXPECT_EQ(e.labels, (std::vector<int32_t>{7, 1}));
  EXPECT_EQ(e.x[784 + 5], static_cast<float>(pixel(1, 5)) / 255.0f);
  // Byte 255 maps to exactly 1 and byte 0 to exactly 0 (image 0: pixel i = 7i mod 256; 7*73 = 511 = 255 mod 256).
  Batch first;
  d->micro_batch(0, 0, 0, first);
  EXPECT_EQ(first.x[0], 0.0f);
  EXPECT_EQ(first.x[73], 1.0f);

  RunConfig c = config();
  c.data.eval_samples = 1;
  EXPECT_EQ(make_dataset(c)->eval_set().count, 1);
  c.data.eval_samples = 3;
  expect_error([&] { make_dataset(c); }, "data.eval_samples");
}

TEST_F(DataIdx, BadMagicNamesTheFile) {
  write_valid();
  auto b = images(3);
  b[3] = 0x04;  // 2052
  write_gz("train-images-idx3-ubyte.gz", b);
  expect_error([&] { make_dataset(config()); }, path("train-images-idx3-ubyte.gz") + ": byte offset 0: bad magic number 2052");
  write_valid();
  write_gz("t10k-labels-idx1-ubyte.gz", images(2));  // an image file where labels belong
  expect_error([&] { make_dataset(config()); }, path("t10k-labels-idx1-ubyte.gz") + ": byte offset 0: bad magic number 2051");
}

TEST_F(DataIdx, TruncatedAndOversizedFilesNameTheFile) {
  write_valid();
  auto b = images(3);
  b.resize(b.size() - 100);
  write_gz("train-images-idx3-ubyte.gz", b);
  // 16 header bytes + 3 x 784 data bytes promised, 100 fewer present: the file ends at offset 16 + 2352 - 100.
  expect_error([&] { make_dataset(config()); },
               path("train-images-idx3-ubyte.gz") + ": byte offset 2268: truncated: the header promises 2352 data bytes");
  write_valid();
  write_gz("train-labels-idx1-ubyte.gz", {0, 0, 8});  // shorter than a header
  expect_error([&] { make_dataset(config()); }, path("train-labels-idx1-ubyte.gz") + ": byte offset 3: truncated IDX header");  // not even the magic
  write_gz("train-labels-idx1-ubyte.gz", {0, 0, 8, 1, 0, 0});  // the magic, then 2 of the 4 count bytes
  expect_error([&] { make_dataset(config()); },
               path("train-labels-idx1-ubyte.gz") + ": byte offset 6: truncated IDX header");
  write_valid();
  auto l = labels({0, 9, 4});
  l.push_back(3);
  write_gz("train-labels-idx1-ubyte.gz", l);
  expect_error([&] { make_dataset(config()); }, path("train-labels-idx1-ubyte.gz") + ": byte offset 11: trailing data");
}

TEST_F(DataIdx, CorruptGzipNamesTheFile) {
  write_valid();
  // Cut the compressed stream in half: zlib reports an unexpected end of file.
  const std::string p = path("t10k-images-idx3-ubyte.gz");
  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  std::ofstream(p, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  expect_error([&] { make_dataset(config()); }, p + ":");
}

TEST_F(DataIdx, BadLabelsCountsAndMissingFilesNameTheFile) {
  write_valid();
  write_gz("train-labels-idx1-ubyte.gz", labels({0, 10, 4}));
  expect_error([&] { make_dataset(config()); }, path("train-labels-idx1-ubyte.gz") + ": byte offset 9: label 10 of item 1");
  write_valid();
  write_gz("train-labels-idx1-ubyte.gz", labels({0, 9}));
  expect_error([&] { make_dataset(config()); }, "byte offset 4: 3 images, but " + path("train-labels-idx1-ubyte.gz") + ": byte offset 4: 2 labels");
  write_valid();
  fs::remove(dir_ / "t10k-labels-idx1-ubyte.gz");
  expect_error([&] { make_dataset(config()); }, path("t10k-labels-idx1-ubyte.gz") + ": file not found");
  write_valid();
  RunConfig c = config();
  c.data.batch_per_rank = 4;  // a global batch of 4 from 3 samples
  expect_error([&] { make_dataset(c); }, "data.batch_per_rank");
}

// ---- inline ----------------------------------------------------------------------------------------------------

// A linear model as wide as the data's first rows say (the dataset takes its widths from an mlp or linear model, so
// the model of these tests is made to agree with their data; a malformed row is then the one named).
RunConfig inline_config(int64_t ranks, int64_t accumulation, const json& data_ranks, const std::string& loss = "mse") {
  RunConfig c;
  c.data.kind = "inline";
  c.cluster.ranks = ranks;
  c.training.accumulation_steps = accumulation;
  c.data.ranks = data_ranks;
  c.model.kind = "linear";
  c.model.loss = loss;
  int64_t in = -1, out = -1, classes = 2;
  for (const json& rank : data_ranks) {
    for (const json& mb : rank.is_array() ? rank : json::array()) {
      if (!mb.is_object()) continue;
      if (in < 0 && mb.contains("x") && mb["x"].is_array() && !mb["x"].empty() && mb["x"][0].is_array())
        in = static_cast<int64_t>(mb["x"][0].size());
      const json& y = mb.contains("y") ? mb["y"] : json();
      if (!y.is_array()) continue;
      for (const json& v : y) {
        if (loss == "mse" && out < 0 && v.is_array()) out = static_cast<int64_t>(v.size());
        if (loss != "mse" && v.is_number_integer()) classes = std::max<int64_t>(classes, v.get<int64_t>() + 1);
      }
    }
  }
  c.model.layers = {in < 0 ? 1 : in, loss == "mse" ? (out < 0 ? 1 : out) : classes};
  return c;
}

TEST(DataInline, UnevenMicroBatchesCycleInOrder) {
  const json ranks = json::parse(R"([
    [ {"x": [[1, 2], [3, 4]], "y": [[10], [20]]}, {"x": [], "y": []}, {"x": [[5, 6]], "y": [[30]]} ],
    [ {"x": [[7, 8], [9, 10], [11, 12]], "y": [[40], [50], [60]]} ]
  ])");
  const auto d = make_dataset(inline_config(2, 2, ranks));
  EXPECT_EQ(d->in_dim(), 2);
  EXPECT_EQ(d->out_dim(), 1);
  EXPECT_FALSE(d->classification());
  EXPECT_EQ(d->steps_per_epoch(), 0);
  // Rank 0 at step t, micro k: micro-batch (2t + k) mod 3.
  const int64_t counts[] = {2, 0, 1};
  for (int64_t t = 0; t < 4; ++t) {
    for (int64_t k = 0; k < 2; ++k) {
      Batch b;
      d->micro_batch(t, k, 0, b);
      const int64_t m = (2 * t + k) % 3;
      EXPECT_EQ(b.rank, 0);
      EXPECT_EQ(b.count, counts[m]);
      EXPECT_EQ(b.x.size(), static_cast<size_t>(2 * counts[m]));
      EXPECT_EQ(b.in_dim, 2);
      EXPECT_EQ(b.out_dim, 1);
      if (m == 2) {
        EXPECT_EQ(b.x, (std::vector<float>{5, 6}));
        EXPECT_EQ(b.y, (std::vector<float>{30}));
      }
      d->micro_batch(t, k, 1, b);
      EXPECT_EQ(b.rank, 1);
      EXPECT_EQ(b.count, 3);
      EXPECT_EQ(b.y, (std::vector<float>{40, 50, 60}));
    }
  }
  // Eval defaults to every sample once, rank order then micro-batch order.
  const Batch& e = d->eval_set();
  EXPECT_EQ(e.count, 6);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.y, (std::vector<float>{10, 20, 30, 40, 50, 60}));
  EXPECT_EQ(e.x, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
}

TEST(DataInline, ShorthandLabelsAndExplicitEval) {
  // x omitted: a 1-dimensional input of 1.0 for every sample.
  auto c = inline_config(1, 1, json::parse(R"([[ {"y": [[3.0], [4.0]]} ]])"));
  c.data.eval = json::parse(R"({"y": [[5.0]]})");
  const auto d = make_dataset(c);
  EXPECT_EQ(d->in_dim(), 1);
  Batch b;
  d->micro_batch(0, 0, 0, b);
  EXPECT_EQ(b.x, (std::vector<float>{1.0f, 1.0f}));
  EXPECT_EQ(b.y, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_EQ(d->eval_set().count, 1);
  EXPECT_EQ(d->eval_set().x, std::vector<float>{1.0f});

  // Classification: y holds integer labels; classes = the model's output width (at least max label + 1).
  auto k = inline_config(
      2, 1, json::parse(R"([[ {"x": [[1, 0]], "y": [2]} ], [ {"x": [[0, 1], [1, 1]], "y": [0, 1]} ]])"),
      "cross_entropy");
  k.model.layers = {2, 4};
  const auto dk = make_dataset(k);
  EXPECT_TRUE(dk->classification());
  EXPECT_EQ(dk->out_dim(), 4);
  d->micro_batch(0, 0, 0, b);
  dk->micro_batch(0, 0, 1, b);
  EXPECT_EQ(b.labels, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(b.out_dim, 0);
  EXPECT_TRUE(b.y.empty());
}

TEST(DataInline, BadShapesNameThePath) {
  auto make = [](int64_t ranks, const char* text, const std::string& loss = "mse") {
    return [=] { make_dataset(inline_config(ranks, 1, json::parse(text), loss)); };
  };
  expect_error(make(2, R"([[ {"x": [[1, 2, 3]], "y": [[1]]} ],
                          [ {"x": [[1, 2, 3], [4, 5, 6], [7, 8]], "y": [[1], [2], [3]]} ]])"),
               "data.ranks[1][0].x[2]: expected 3 numbers");
  expect_error(make(1, R"([[ {"x": [[1], [2]], "y": [[1]]} ]])"), "data.ranks[0][0].y: expected 2 entries");
  expect_error(make(1, R"([[ {"x": [[1]], "y": [[1]]}, {"x": [[1]], "y": [[1, 2]]} ]])"),
               "data.ranks[0][1].y[0]: expected 1 number");
  expect_error(make(1, R"([[ {"x": [[1]], "y": [["a"]]} ]])"), "data.ranks[0][0].y[0][0]: expected a number");
  expect_error(make(3, R"([[ {"y": [[1]]} ], [ {"y": [[1]]} ]])"), "data.ranks: expected a list of 3 rows");
  expect_error(make(1, R"([[]])"), "data.ranks[0]: expected a non-empty list");
  expect_error(make(1, R"([[ {"x": [[1]]} ]])"), "data.ranks[0][0].y: missing");
  expect_error(make(1, R"([[ {"x": [[1]], "y": [[1]], "z": 1} ]])"), "data.ranks[0][0].z: unknown key");
  expect_error(make(1, R"([[ {"x": [[1, 2]], "y": [[1]]}, {"y": [[1]]} ]])"), "data.ranks[0][1].x: missing");
  expect_error(make(1, R"([[ {"x": [[1]], "y": [-1]} ]])", "cross_entropy"),
               "data.ranks[0][0].y[0]: expected a class label");
  expect_error(make(1, R"([[ {"x": [[1]], "y": [0.5]} ]])", "cross_entropy"),
               "data.ranks[0][0].y[0]: expected a class label");
  expect_error([] { make_dataset(inline_config(1, 1, json())); },
               "data.ranks: required by data.kind \"inline\": expected a list of 1 row (one list");
  auto c = inline_config(1, 1, json::parse(R"([[ {"x": [[1, 2]], "y": [[1]]} ]])"));
  c.data.eval = json::parse(R"({"x": [[1]], "y": [[1]]})");
  expect_error([&] { make_dataset(c); }, "data.eval.x[0]: expected 2 numbers");
}

// Inline samples are float32: 1e39 (above float32's largest value 3.4028235e38) would become inf and is refused with
// its path; 3.4028235e38 itself (a float32 value) and 3.4028235677973362e38 (just below the midpoint 2^128 - 2^103
// to the next power of two, so it rounds down to float32's largest value) are accepted; the midpoint itself rounds to
// inf (a tie, to the even 2^128) and is refused; -1e39 too, in x as in y and in data.eval.
TEST(DataInline, NumbersPastFloat32RangeAreRefusedWithTheirPath) {
  auto make = [](const std::string& text) {
    return [=] { make_dataset(inline_config(1, 1, json::parse(text))); };
  };
  expect_error(make(R"([[ {"x": [[1]], "y": [[1e39]]} ]])"), "data.ranks[0][0].y[0][0]: 1e+39 is outside float32's range");
  expect_error(make(R"([[ {"x": [[1]], "y": [[1]]}, {"x": [[-1e39]], "y": [[1]]} ]])"),
               "data.ranks[0][1].x[0][0]: -1e+39 is outside float32's range");
  expect_error(make(R"([[ {"x": [[1]], "y": [[3.4028235677973366e38]]} ]])"), "would become inf");
  expect_error(make(R"([[ {"x": [[1]], "y": [[1]]}, {"x": [[-1e39]], "y": [[1]]} ]])"), "would become -inf");
  const auto d = make_dataset(inline_config(1, 1, json::parse(
                                                      R"([[ {"x": [[3.4028235e38]], "y": [[3.4028235677973362e38]]} ]])")));
  Batch b;
  d->micro_batch(0, 0, 0, b);
  EXPECT_EQ(b.x, std::vector<float>{std::numeric_limits<float>::max()});
  EXPECT_EQ(b.y, std::vector<float>{std::numeric_limits<float>::max()});
  auto c = inline_config(1, 1, json::parse(R"([[ {"x": [[1]], "y": [[1]]} ]])"));
  c.data.eval = json::parse(R"({"x": [[1]], "y": [[-1e300]]})");
  expect_error([&] { make_dataset(c); }, "data.eval.y[0][0]: -1e+300 is outside float32's range");
}

// ---- none and the registry ---------------------------------------------------------------------------------------

TEST(DataNone, OneEmptySamplePerMicroBatch) {
  RunConfig c;
  c.data.kind = "none";
  c.cluster.ranks = 3;
  const auto d = make_dataset(c);
  Batch b;
  b.x = {1.0f, 2.0f};
  d->micro_batch(4, 0, 2, b);
  EXPECT_EQ(b.rank, 2);
  EXPECT_EQ(b.count, 1);
  EXPECT_EQ(b.in_dim, 0);
  EXPECT_TRUE(b.x.empty());
  EXPECT_EQ(d->eval_set().count, 1);
  EXPECT_EQ(d->eval_set().rank, 0);
  EXPECT_EQ(d->steps_per_epoch(), 0);
}

TEST(DataRegistry, ListsEveryDatasetAndRejectsUnknownKinds) {
  std::vector<std::string> names;
  for (const auto& e : dataset_registry()) {
    names.push_back(e.name);
    EXPECT_NE(std::string(e.doc), "");
  }
  EXPECT_EQ(names, (std::vector<std::string>{"fashion_mnist", "teacher", "inline", "none"}));
  RunConfig c;
  c.data.kind = "cifar";
  expect_error([&] { make_dataset(c); }, "data.kind: unknown dataset 'cifar'");
}

}  // namespace
}  // namespace gs
