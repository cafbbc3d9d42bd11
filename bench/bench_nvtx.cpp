// What an NVTX range costs with no tool attached (Google Benchmark): push and pop of one registered-string range of
// kernels/nvtx.h (the `step` range, and `communicate` with its payload) against the same loop without it, in the same
// run. NVTX hands back a null domain when no tool is loaded, so a range should cost a branch: about a nanosecond.
// Run without NVTX_INJECTION64_PATH: bench_nvtx --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>

#include "kernels/nvtx.h"

namespace {

// The baseline: the loop with a dependency on a counter and nothing else.
void BM_LoopOnly(benchmark::State& state) {
  uint64_t x = 0;
  for (auto _ : state) {
    ++x;
    benchmark::DoNotOptimize(x);
  }
}
BENCHMARK(BM_LoopOnly);

void BM_RangeNoTool(benchmark::State& state) {
  uint64_t x = 0;
  for (auto _ : state) {
    gs::NvtxRange r(gs::NvtxName::kStep);
    ++x;
    benchmark::DoNotOptimize(x);
  }
}
BENCHMARK(BM_RangeNoTool);

void BM_RangeWithPayloadNoTool(benchmark::State& state) {
  uint64_t x = 0;
  for (auto _ : state) {
    gs::NvtxRange r(gs::NvtxName::kCommunicate, x);
    ++x;
    benchmark::DoNotOptimize(x);
  }
}
BENCHMARK(BM_RangeWithPayloadNoTool);

}  // namespace

BENCHMARK_MAIN();
