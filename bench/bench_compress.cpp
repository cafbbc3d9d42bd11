// Host compressor kernels (kernels/compress.h), Google Benchmark: each op on 1, 16 and 64 Mi fp32 values, GB/s of
// input and its ratio to memcpy of the same size in the same run (x_memcpy, x_memcpy_cpu); top-k also against
// std::nth_element on a copy. A new op adds one BM_ function and one BENCHMARK line at the end.
// Run: bench_compress --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <vector>

#include "kernels/compress.h"
#include "kernels/convert.h"
#include "kernels/rng.h"

namespace {

constexpr int64_t kMi = int64_t{1} << 20;

// Normal inputs, made once per size (not timed).
const std::vector<float>& input(int64_t n) {
  static std::map<int64_t, std::vector<float>> cache;
  auto& v = cache[n];
  if (v.empty()) {
    v.resize(static_cast<size_t>(n));
    gs::fill_normal(v.data(), static_cast<uint64_t>(n), 2026, gs::Purpose::kInit, 0, 0);
  }
  return v;
}

// memcpy rates of each size (GB/s), wall clock and thread CPU time, the latest run's (set by BM_memcpy, which runs
// before the others of its size).
struct Rates {
  double wall_GBps = 0.0;
  double cpu_GBps = 0.0;
};
std::map<int64_t, Rates>& memcpy_rates() {
  static std::map<int64_t, Rates> rates;
  return rates;
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Times the loop body with a steady clock (the harness's real time) and with this thread's CPU time, and sets rate
// counters: GBps (fp32 input bytes per wall second), x_memcpy = GBps / memcpy's wall rate of the same size, and
// x_memcpy_cpu, the same ratio from CPU time (steadier on a shared machine: time spent preempted is not counted).
template <class Body>
Rates run(benchmark::State& state, int64_t n, Body&& body, bool ratios = true) {
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = thread_cpu_s();
  for (auto _ : state) body();
  const double cpu_s = thread_cpu_s() - c0;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(n) * sizeof(float);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  const Rates r{bytes / s / 1e9, bytes / cpu_s / 1e9};
  state.counters["GBps"] = r.wall_GBps;
  const auto it = memcpy_rates().find(n);
  if (ratios && it != memcpy_rates().end()) {
    state.counters["x_memcpy"] = r.wall_GBps / it->second.wall_GBps;
    state.counters["x_memcpy_cpu"] = r.cpu_GBps / it->second.cpu_GBps;
  }
  return r;
}

void BM_memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto& x = input(n);
  std::vector<float> y(x.size());
  memcpy_rates()[n] = run(
      state, n,
      [&] {
        std::memcpy(y.data(), x.data(), x.size() * sizeof(float));
        benchmark::ClobberMemory();
      },
      false);
}

// sign_encode of x (state.range(0) values) into a message sized for the worst case (every value nonzero or not).
void sign_encode_of(benchmark::State& state, const std::vector<float>& x) {
  std::vector<uint8_t> msg(gs::sign_encoded_bytes(x.size(), x.size()));
  run(state, state.range(0), [&] { benchmark::DoNotOptimize(gs::sign_encode(msg.data(), x.data(), x.size())); });
}

// sign_decode_add of x's message into an fp32 buffer.
void sign_decode_add_of(benchmark::State& state, const std::vector<float>& x) {
  std::vector<uint8_t> msg(gs::sign_encoded_bytes(x.size(), x.size()));
  gs::sign_encode(msg.data(), x.data(), x.size());
  std::vector<float> out(x.size(), 0.0f);
  run(state, state.range(0), [&] {
    gs::sign_decode_add(out.data(), msg.data(), out.size());
    benchmark::ClobberMemory();
  });
}

void BM_sign_encode(benchmark::State& state) { sign_encode_of(state, input(state.range(0))); }

// One value in ten an exact zero (dead ReLU units, border pixels): the message carries the zero plane too.
const std::vector<float>& input_with_zeros(int64_t n) {
  static std::map<int64_t, std::vector<float>> cache;
  auto& v = cache[n];
  if (v.empty()) {
    v = input(n);
    for (size_t i = 0; i < v.size(); i += 10) v[i] = 0.0f;
  }
  return v;
}

void BM_sign_encode_10pct_zeros(benchmark::State& state) { sign_encode_of(state, input_with_zeros(state.range(0))); }

void BM_sign_decode_add(benchmark::State& state) { sign_decode_add_of(state, input(state.range(0))); }

void BM_sign_decode_add_10pct_zeros(benchmark::State& state) {
  sign_decode_add_of(state, input_with_zeros(state.range(0)));
}

void BM_sign_vote_4_ranks(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto& x = input(n);
  std::vector<std::vector<uint8_t>> msgs(4, std::vector<uint8_t>(gs::sign_encoded_bytes(x.size(), x.size())));
  std::vector<const uint8_t*> ptrs;
  for (int r = 0; r < 4; ++r) {
    std::vector<float> xr(x.begin(), x.end());
    std::rotate(xr.begin(), xr.begin() + r * 1000, xr.end());
    gs::sign_encode(msgs[r].data(), xr.data(), xr.size());
    ptrs.push_back(msgs[r].data());
  }
  std::vector<float> out(x.size());
  run(state, n, [&] {
    gs::sign_vote(out.data(), ptrs.data(), 4, out.size());
    benchmark::ClobberMemory();
  });
}

void BM_onebit_encode(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto& x = input(n);
  std::vector<uint8_t> wire(gs::onebit_encoded_bytes(x.size(), x.size()));
  run(state, n, [&] {
    gs::onebit_encode(wire.data(), x.data(), x.size());
    benchmark::ClobberMemory();
  });
}

void BM_onebit_decode_add(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto& x = input(n);
  std::vector<uint8_t> wire(gs::onebit_encoded_bytes(x.size(), x.size()));
  gs::onebit_encode(wire.data(), x.data(), x.size());
  std::vector<float> out(x.size(), 0.0f);
  run(state, n, [&] {
    gs::onebit_decode_add(out.data(), wire.data(), out.size());
    benchmark::ClobberMemory();
  });
}

void BM_qsgd_encode_s4(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto& x = input(n);
  std::vector<uint8_t> wire(gs::qsgd_encoded_bytes(x.size(), 4));
  uint64_t stream = 0;
  run(state, n, [&] {
    gs::qsgd_encode(wire.data(), x.data(), x.size(), 4, 1, stream++);
    benchmark::ClobberMemory();
  });
}

void BM_qsgd_decode_add_s4(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto& x = input(n);
  std::vector<uint8_t> wire(gs::qsgd_encoded_bytes(x.size(), 4));
  gs::qsgd_encode(wire.data(), x.data(), x.size(), 4, 1, 0);
  std::vector<float> out(x.size(), 0.0f);
  run(state, n, [&] {
    gs::qsgd_decode_add(out.data(), wire.data(), out.size(), 4);
    benchmark::ClobberMemory();
  });
}

void BM_terngrad_encode(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto& x = input(n);
  std::vector<uint8_t> wire(gs::terngrad_encoded_bytes(x.size()));
  uint64_t stream = 0;
  run(state, n, [&] {
    gs::terngrad_encode(wire.data(), x.data(), x.size(), 1, stream++);
    benchmark::ClobberMemory();
  });
}

void BM_terngrad_decode_add(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto& x = input(n);
  std::vector<uint8_t> wire(gs::terngrad_encoded_bytes(x.size()));
  gs::terngrad_encode(wire.data(), x.data(), x.size(), 1, 0);
  std::vector<float> out(x.size(), 0.0f);
  run(state, n, [&] {
    gs::terngrad_decode_add(out.data(), wire.data(), out.size());
    benchmark::ClobberMemory();
  });
}

// Cast compressors' encode (kernels/convert.h, helper "precision"'s kernels; bench_convert times them in detail):
// fp32 -> fp16 / bf16 / fp8, here for the ratio against memcpy in the same run as the other compressors.
template <class T, void (*kConvert)(T*, const float*, size_t)>
void BM_cast_encode(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto& x = input(n);
  std::vector<T> out(x.size());
  run(state, n, [&] {
    kConvert(out.data(), x.data(), x.size());
    benchmark::ClobberMemory();
  });
}
void to_fp16(uint16_t* o, const float* i, size_t n) { gs::convert_fp32_to_fp16(o, i, n); }
void to_bf16(uint16_t* o, const float* i, size_t n) { gs::convert_fp32_to_bf16(o, i, n); }
void to_e4m3(uint8_t* o, const float* i, size_t n) { gs::convert_fp32_to_fp8_e4m3(o, i, n); }
void to_e5m2(uint8_t* o, const float* i, size_t n) { gs::convert_fp32_to_fp8_e5m2(o, i, n); }

// Top-k 1%: ours (indices, ascending) against the obvious baseline, std::nth_element on a copy of |x| (threshold
// only, no indices: the baseline does less work than ours).
void BM_topk_1pct(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto& x = input(n);
  const size_t k = x.size() / 100;
  std::vector<uint32_t> idx(k);
  run(state, n, [&] { benchmark::DoNotOptimize(gs::topk_select(x.data(), x.size(), k, idx.data())); });
}

void BM_nth_element_copy_1pct(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto& x = input(n);
  const size_t k = x.size() / 100;
  std::vector<float> copy(x.size());
  run(state, n, [&] {
    for (size_t i = 0; i < x.size(); ++i) copy[i] = std::fabs(x[i]);
    std::nth_element(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(k - 1), copy.end(),
                     std::greater<float>());
    benchmark::DoNotOptimize(copy[k - 1]);
  });
}

void BM_threshold_select(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto& x = input(n);
  std::vector<uint32_t> idx(x.size());
  const float tau = 2.576f;  // about 1% of standard normals
  run(state, n, [&] { benchmark::DoNotOptimize(gs::threshold_select(x.data(), x.size(), tau, idx.data())); });
}

// DGC's sampled threshold at ratio 1% from 1% samples (the paper samples 0.1% to 1%).
void BM_sampled_threshold_1pct(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto& x = input(n);
  uint64_t stream = 0;
  run(state, n, [&] {
    benchmark::DoNotOptimize(gs::sampled_threshold(x.data(), x.size(), 0.01, 1, stream++, x.size() / 100));
  });
}

void BM_randomk_1pct(benchmark::State& state) {
  const int64_t n = state.range(0);
  const size_t k = static_cast<size_t>(n) / 100;
  std::vector<uint32_t> idx(k);
  uint64_t stream = 0;
  run(state, n, [&] { benchmark::DoNotOptimize(gs::randomk_indices(idx.data(), n, k, 1, stream++)); });
}

void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(kMi)->Arg(16 * kMi)->Arg(64 * kMi)->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

BENCHMARK(BM_memcpy)->Apply(sizes);
BENCHMARK(BM_sign_encode)->Apply(sizes);
BENCHMARK(BM_sign_encode_10pct_zeros)->Apply(sizes);
BENCHMARK(BM_sign_decode_add)->Apply(sizes);
BENCHMARK(BM_sign_decode_add_10pct_zeros)->Apply(sizes);
BENCHMARK(BM_sign_vote_4_ranks)->Apply(sizes);
BENCHMARK(BM_onebit_encode)->Apply(sizes);
BENCHMARK(BM_onebit_decode_add)->Apply(sizes);
BENCHMARK(BM_qsgd_encode_s4)->Apply(sizes);
BENCHMARK(BM_qsgd_decode_add_s4)->Apply(sizes);
BENCHMARK(BM_terngrad_encode)->Apply(sizes);
BENCHMARK(BM_terngrad_decode_add)->Apply(sizes);
BENCHMARK_TEMPLATE(BM_cast_encode, uint16_t, to_fp16)->Name("BM_cast_encode_fp16")->Apply(sizes);
BENCHMARK_TEMPLATE(BM_cast_encode, uint16_t, to_bf16)->Name("BM_cast_encode_bf16")->Apply(sizes);
BENCHMARK_TEMPLATE(BM_cast_encode, uint8_t, to_e4m3)->Name("BM_cast_encode_fp8_e4m3")->Apply(sizes);
BENCHMARK_TEMPLATE(BM_cast_encode, uint8_t, to_e5m2)->Name("BM_cast_encode_fp8_e5m2")->Apply(sizes);
BENCHMARK(BM_topk_1pct)->Apply(sizes);
BENCHMARK(BM_nth_element_copy_1pct)->Apply(sizes);
BENCHMARK(BM_threshold_select)->Apply(sizes);
BENCHMARK(BM_sampled_threshold_1pct)->Apply(sizes);
BENCHMARK(BM_randomk_1pct)->Apply(sizes);

BENCHMARK_MAIN();
