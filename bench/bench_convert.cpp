// Host conversion throughput (Google Benchmark): fp32 <-> fp16/bf16/fp8 E4M3/E5M2 and the fused round trips of
// kernels/convert.h on 64 Mi values, best path (AVX2/F16C where the CPU has it) and portable path, against a memcpy of
// the 256 MiB fp32 array in the same run. Ratio = memcpy time / conversion time (element rates; targets >= 0.5 for
// fp16 and bf16, >= 0.25 for fp8). Run: bench_convert --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/convert.h"

namespace {

constexpr size_t kValues = size_t{64} << 20;  // 64 Mi values

// The arrays, made once (about 0.9 GiB) and shared by every benchmark.
struct Arrays {
  std::vector<float> fp32_in;
  std::vector<float> fp32_out;
  std::vector<uint16_t> u16;
  std::vector<uint8_t> u8;
};

Arrays& arrays() {
  static Arrays a = [] {
    Arrays x;
    x.fp32_in.resize(kValues);
    std::mt19937 gen(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // Gradient-like values spread over many binades (a few underflow in fp8), no NaNs.
    for (size_t i = 0; i < kValues; ++i) x.fp32_in[i] = normal(gen) * ((i % 7 == 0) ? 1e-3f : 1.0f);
    x.fp32_out.assign(kValues, 0.0f);
    x.u16.resize(kValues);
    x.u8.resize(kValues);
    gs::convert_fp32_to_fp16(x.u16.data(), x.fp32_in.data(), kValues);
    gs::convert_fp32_to_fp8_e4m3(x.u8.data(), x.fp32_in.data(), kValues);
    return x;
  }();
  return a;
}

// Median seconds per pass of each benchmark (one entry per repetition), for the ratios printed at the end.
std::map<std::string, std::vector<double>>& pass_seconds() {
  static std::map<std::string, std::vector<double>> m;
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times `pass` (one pass over the 64 Mi values) per iteration; records seconds per pass and the element rate.
template <class Pass>
void time_passes(benchmark::State& state, const std::string& name, Pass pass) {
  pass();  // warm-up (pages touched, caches in a steady state)
  std::vector<double> seconds;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    benchmark::ClobberMemory();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    seconds.push_back(s);
  }
  const double s = median(seconds);
  pass_seconds()[name].push_back(s);
  state.counters["Gvalues_per_s"] = static_cast<double>(kValues) / s / 1e9;
  state.counters["fp32_GBps"] = 4.0 * static_cast<double>(kValues) / s / 1e9;
}

void register_benchmarks() {
  using gs::ConvertIsa;
  struct Case {
    std::string name;
    void (*run)(ConvertIsa);
  };
  static const Case cases[] = {
      {"fp32_to_fp16", [](ConvertIsa i) { gs::convert_fp32_to_fp16(arrays().u16.data(), arrays().fp32_in.data(), kValues, i); }},
      {"fp16_to_fp32", [](ConvertIsa i) { gs::convert_fp16_to_fp32(arrays().fp32_out.data(), arrays().u16.data(), kValues, i); }},
      {"fp32_to_bf16", [](ConvertIsa i) { gs::convert_fp32_to_bf16(arrays().u16.data(), arrays().fp32_in.data(), kValues, i); }},
      {"bf16_to_fp32", [](ConvertIsa i) { gs::convert_bf16_to_fp32(arrays().fp32_out.data(), arrays().u16.data(), kValues, i); }},
      {"fp32_to_fp8_e4m3",
       [](ConvertIsa i) {
         gs::convert_fp32_to_fp8_e4m3(arrays().u8.data(), arrays().fp32_in.data(), kValues, gs::Fp8Overflow::kSatFinite, i);
       }},
      {"fp8_e4m3_to_fp32", [](ConvertIsa i) { gs::convert_fp8_e4m3_to_fp32(arrays().fp32_out.data(), arrays().u8.data(), kValues, i); }},
      {"fp32_to_fp8_e5m2",
       [](ConvertIsa i) {
         gs::convert_fp32_to_fp8_e5m2(arrays().u8.data(), arrays().fp32_in.data(), kValues, gs::Fp8Overflow::kNoSat, i);
       }},
      {"fp8_e5m2_to_fp32", [](ConvertIsa i) { gs::convert_fp8_e5m2_to_fp32(arrays().fp32_out.data(), arrays().u8.data(), kValues, i); }},
      {"round_through_fp16", [](ConvertIsa i) { gs::round_fp32_through_fp16(arrays().fp32_out.data(), arrays().fp32_in.data(), kValues, i); }},
      {"round_through_bf16", [](ConvertIsa i) { gs::round_fp32_through_bf16(arrays().fp32_out.data(), arrays().fp32_in.data(), kValues, i); }},
      {"round_through_fp8_e4m3",
       [](ConvertIsa i) {
         gs::round_fp32_through_fp8_e4m3(arrays().fp32_out.data(), arrays().fp32_in.data(), kValues,
                                         gs::Fp8Overflow::kSatFinite, i);
       }},
      {"round_through_fp8_e5m2",
       [](ConvertIsa i) {
         gs::round_fp32_through_fp8_e5m2(arrays().fp32_out.data(), arrays().fp32_in.data(), kValues,
                                         gs::Fp8Overflow::kNoSat, i);
       }},
  };
  benchmark::RegisterBenchmark("BM_Memcpy_fp32_64Mi", [](benchmark::State& state) {
    time_passes(state, "memcpy", [] {
      std::memcpy(arrays().fp32_out.data(), arrays().fp32_in.data(), kValues * sizeof(float));
    });
  })->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(10);
  for (const Case& c : cases) {
    for (ConvertIsa isa : {ConvertIsa::kBest, ConvertIsa::kPortable}) {
      const std::string key = c.name + (isa == ConvertIsa::kBest ? "/best" : "/portable");
      benchmark::RegisterBenchmark(("BM_Convert/" + key).c_str(), [c, isa, key](benchmark::State& state) {
        time_passes(state, key, [c, isa] { c.run(isa); });
      })->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(10);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const auto& m = pass_seconds();
  auto it = m.find("memcpy");
  if (it == m.end()) {
    std::printf("ratios: n/a (memcpy filtered out)\n");
    return 0;
  }
  const double memcpy_s = median(it->second);
  std::printf("AVX2/F16C path: %s\n", gs::convert_avx2_available() ? "yes" : "no (portable only)");
  std::printf("memcpy of 64 Mi fp32 values: %.2f ms (median of %zu), %.2f GB/s\n", memcpy_s * 1e3, it->second.size(),
              4.0 * static_cast<double>(kValues) / memcpy_s / 1e9);
  for (const auto& [name, seconds] : m) {
    if (name == "memcpy") continue;
    const bool fp8 = name.find("fp8") != std::string::npos;
    const double target = fp8 ? 0.25 : 0.5;
    const double ratio = memcpy_s / median(seconds);
    std::printf("ratio %-32s = %.3f  (%.2f ms; target >= %.2f%s)\n", name.c_str(), ratio, median(seconds) * 1e3,
                target, name.find("/portable") != std::string::npos ? ", portable path: for reference" : "");
  }
  return 0;
}
