// Helpers of the GPU tests: device copies of host vectors, poisoned outputs, fresh random inputs, bit comparisons.
// Header-only; a new helper that several GPU test files need goes here.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda_runtime.h"
#include "sim/backend/backend.h"
#include "sim/backend/cuda_model.h"
#include "sim/config/scenario.h"
#include "sim/runtime/rank_loop.h"
#include "sim/validate/validate.h"

namespace gs::test {

// The small run the end-to-end GPU tests train on both backends: an MLP 16-32-4 on the teacher task (4096 training,
// 256 evaluation samples), 2 ranks of 2 micro-batches of 8 samples, SGD lr 0.1 momentum 0.9, 20 steps with an
// evaluation every 10, hardware h200-1; `sets` are --set overrides applied on top (backend, precision, steps, ...).
inline RunConfig small_mlp_config(const std::vector<std::string>& sets) {
  const char* kScenario = R"({"name": "m", "model": {"kind": "mlp", "layers": [16, 32, 4]},
    "data": {"kind": "teacher", "batch_per_rank": 8, "prefetch": 0,
             "teacher": {"in_dim": 16, "hidden": 24, "out_dim": 4, "train_samples": 4096, "eval_samples": 256}},
    "training": {"steps": 20, "eval_every": 10, "accumulation_steps": 2,
                 "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9}},
    "cluster": {"ranks": 2, "hardware": "h200-1"}})";
  return parse_scenario(kScenario, "m.json", sets).runs.at(0).config;
}

// `c` on the cuda backend's staged path whatever path its plan takes: the rank loop on host buffers with the GPU model
// (cuda_model.h), as cluster.backend "cuda" runs what its device path refuses. The report still names the plan's path.
inline RunResult run_staged(const RunConfig& c) {
  RunHooks hooks;
  hooks.make_backend = [](const RunConfig&) {
    return make_host_backend([](const RunConfig& config) { return make_gpu_model(config); });
  };
  return run_training(c, hooks);
}

// The sizes every kernel runs over: empty, one element, odd, and past 2^24 (index and grid arithmetic).
// GRADSWEEP_GPU_SIZES=small keeps 0, 1 and 1001, =large only 2^24 + 3 (the device check runs the large ones last, as
// a run of their own); unset or anything else: all four.
inline const std::vector<size_t>& kernel_sizes() {
  static const std::vector<size_t> sizes = [] {
    const std::vector<size_t> small = {0, 1, 1001};
    const size_t large = (size_t{1} << 24) + 3;
    const char* which = std::getenv("GRADSWEEP_GPU_SIZES");
    const std::string w = which ? which : "";
    if (w == "small") return small;
    if (w == "large") return std::vector<size_t>{large};
    std::vector<size_t> all = small;
    all.push_back(large);
    return all;
  }();
  return sizes;
}

// A fresh generator per call site and size, seeded from a run-wide counter (inputs differ between tests).
inline std::mt19937_64 fresh_rng(size_t salt) {
  static uint64_t counter = 0x9e3779b97f4a7c15ull;
  counter = counter * 6364136223846793005ull + 1442695040888963407ull;
  return std::mt19937_64(counter ^ salt);
}

// Normal values times a random power of two in [2^lo, 2^hi]: spans the ranges of every reduced format.
inline std::vector<float> wide_values(size_t n, std::mt19937_64& rng, int lo = -30, int hi = 20) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exp(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(normal(rng), exp(rng));
  return v;
}

// Plain normals.
inline std::vector<float> normals(size_t n, std::mt19937_64& rng, float sigma = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// Sprinkles special values (+-0, +-inf, NaN, fp32 subnormals, format boundaries) over v.
inline void add_specials(std::vector<float>& v, std::mt19937_64& rng) {
  if (v.empty()) return;
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -3e-39f, 65504.0f, 65520.0f, 448.0f,
                            464.0f, 465.0f, 57344.0f, 61440.0f, 3.4e38f, 5.9604645e-08f, 2.98e-08f};
  std::uniform_int_distribution<size_t> pos(0, v.size() - 1);
  const size_t count = std::min<size_t>(v.size(), 64);
  for (size_t j = 0; j < count; ++j) v[pos(rng)] = specials[j % (sizeof specials / sizeof specials[0])];
}

// A device copy of a host vector (and back).
template <class T>
class Dev {
 public:
  explicit Dev(size_t n) : buf_(std::max<size_t>(n, 1)), n_(n) { poison(); }
  explicit Dev(const std::vector<T>& host) : Dev(host.size()) {
    gpu::copy_to_device(buf_.get(), host.data(), bytes());
    GS_CUDA_CHECK(cudaDeviceSynchronize());  // kernels under test run on non-blocking streams
  }
  T* get() const { return buf_.get(); }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  // Fills with 0xff bytes: NaN floats, all-ones integers; an output a kernel forgets to write shows up.
  void poison() {
    GS_CUDA_CHECK(cudaMemset(buf_.get(), 0xff, std::max<size_t>(n_, 1) * sizeof(T)));
    GS_CUDA_CHECK(cudaDeviceSynchronize());  // ordered before kernels on non-blocking streams
  }
  std::vector<T> host(size_t count) const {
    std::vector<T> out(count);
    GS_CUDA_CHECK(cudaDeviceSynchronize());
    gpu::copy_to_host(out.data(), buf_.get(), count * sizeof(T));
    return out;
  }
  std::vector<T> host() const { return host(n_); }

 private:
  gpu::DeviceBuffer<T> buf_;
  size_t n_;
};

template <class T>
T read_one(const T* device_ptr) {
  T v{};
  GS_CUDA_CHECK(cudaDeviceSynchronize());
  gpu::copy_to_host(&v, device_ptr, sizeof v);
  return v;
}

inline uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// First index where two arrays differ bitwise (a.size() when equal), for short failure messages on 2^24 elements.
// Floating-point NaNs compare equal to each other whatever their sign and payload: IEEE 754 leaves the NaN an operation
// produces to the implementation, and the two sides differ (seen on an H200, 2026-12-04: x86's SSE gives NaN - y the
// first operand's NaN and an invalid operation the "default NaN" 0xFFC00000, CUDA's float arithmetic its canonical
// 0x7FFFFFFF), so "bit for bit" means every non-NaN bit pattern equal and NaN exactly where the other side has NaN.
template <class T>
size_t first_bit_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    }
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return i;
  }
  return a.size();
}

#define EXPECT_SAME_BITS(got, want, what)                                                                \
  do {                                                                                                   \
    ASSERT_EQ((got).size(), (want).size()) << (what);                                                    \
    const size_t at_ = ::gs::test::first_bit_difference((got), (want));                                  \
    EXPECT_EQ(at_, (want).size()) << (what) << ": first difference at " << at_ << " of " << (want).size(); \
  } while (0)

// Largest |got - want| / (abs_floor + |want|) over the arrays; NaN in both counts as equal, NaN in one as infinite.
inline double max_relative_error(const std::vector<float>& got, const std::vector<float>& want, double abs_floor) {
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool gn = std::isnan(got[i]), wn = std::isnan(want[i]);
    if (gn || wn) {
      if (gn != wn) return INFINITY;
      continue;
    }
    if (got[i] == want[i]) continue;  // equal infinities included
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]) / (abs_floor + std::fabs(want[i]));
    worst = std::max(worst, e);
  }
  return worst;
}

}  // namespace gs::test
