// Host all-reduce throughput (Google Benchmark): persistent rank threads, fp32, 1-256 MiB x 2/4/8 ranks, algbw and
// busbw as nccl-tests defines them; a one-thread memcpy of 64 MiB as the machine's baseline, and their ratio.
// Run: bench_allreduce --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "sim/comm/communicator.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kRatioBytes = 64 * kMiB;  // the ratio printed at the end: busbw(64 MiB, 4 ranks) / memcpy(64 MiB)
constexpr int kRatioRanks = 4;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Results of every run of the two benchmarks the final ratio needs (one per repetition); medians at the end.
struct RatioInputs {
  std::vector<double> busbw_GBps;
  std::vector<double> memcpy_GBps;
};
RatioInputs& ratio_inputs() {
  static RatioInputs inputs;
  return inputs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Iterations so one run reduces about 4 GiB of rank buffers (a few hundred ms), between 3 and 500.
benchmark::IterationCount iterations_for(size_t bytes, int ranks) {
  const size_t per_iteration = bytes * static_cast<size_t>(ranks);
  return static_cast<benchmark::IterationCount>(std::clamp<size_t>((size_t{4} << 30) / per_iteration, 3, 500));
}

// Ranks 1..N-1 as persistent threads; the benchmark's own thread is rank 0. Before each collective the ranks meet
// at a control barrier (untimed) that also carries the stop decision, so every rank runs the same collectives.
class RankThreads {
 public:
  RankThreads(int ranks, size_t count)
      : comm_(gs::make_host_communicator(ranks)), buffers_(ranks, std::vector<float>(count, 1.0f)) {
    for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, r] { loop(r); });
  }
  ~RankThreads() {
    stop_.store(true, std::memory_order_relaxed);
    comm_->barrier(0);  // releases the others, which see stop_ and leave
    for (auto& t : threads_) t.join();
  }
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  // One all-reduce of every rank; returns rank 0's wall time in the collective, which ends only when all ranks have
  // finished (its closing barrier), after all ranks started together from the control barrier.
  double all_reduce_once() {
    comm_->barrier(0);
    const auto t0 = std::chrono::steady_clock::now();
    comm_->all_reduce_sum(0, buffers_[0].data(), buffers_[0].size());
    return seconds_since(t0);
  }

 private:
  void loop(int rank) {
    std::vector<float>& buf = buffers_[rank];
    for (;;) {
      comm_->barrier(rank);
      if (stop_.load(std::memory_order_relaxed)) return;
      comm_->all_reduce_sum(rank, buf.data(), buf.size());
    }
  }

  std::unique_ptr<gs::Communicator> comm_;
  std::vector<std::vector<float>> buffers_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
};

void BM_HostAllReduce(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) * kMiB;
  const int ranks = static_cast<int>(state.range(1));
  RankThreads world(ranks, bytes / sizeof(float));
  world.all_reduce_once();  // warm-up: pages touched, threads scheduled
  double total_s = 0.0;
  for (auto _ : state) {
    const double s = world.all_reduce_once();
    state.SetIterationTime(s);
    total_s += s;
  }
  // nccl-tests: algbw = size / time; busbw = algbw * 2(n-1)/n for all-reduce.
  const double algbw = static_cast<double>(bytes) * static_cast<double>(state.iterations()) / total_s / 1e9;
  const double busbw = algbw * 2.0 * (ranks - 1) / ranks;
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["algbw_GBps"] = algbw;
  state.counters["busbw_GBps"] = busbw;
  if (bytes == kRatioBytes && ranks == kRatioRanks) ratio_inputs().busbw_GBps.push_back(busbw);
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) * kMiB;
  std::vector<char> src(bytes, 1);
  std::vector<char> dst(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);  // warm-up
  double total_s = 0.0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
    const double s = seconds_since(t0);
    state.SetIterationTime(s);
    total_s += s;
  }
  benchmark::DoNotOptimize(dst.data());
  const double rate = static_cast<double>(bytes) * static_cast<double>(state.iterations()) / total_s / 1e9;
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["GBps"] = rate;
  if (bytes == kRatioBytes) ratio_inputs().memcpy_GBps.push_back(rate);
}

void register_benchmarks() {
  for (int ranks : {2, 4, 8}) {
    for (int mib : {1, 4, 16, 64, 256}) {
      benchmark::RegisterBenchmark("BM_HostAllReduce", BM_HostAllReduce)
          ->Args({mib, ranks})
          ->ArgNames({"MiB", "ranks"})
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(iterations_for(static_cast<size_t>(mib) * kMiB, ranks));
    }
  }
  benchmark::RegisterBenchmark("BM_Memcpy", BM_Memcpy)
      ->Arg(static_cast<int>(kRatioBytes / kMiB))
      ->ArgName("MiB")
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(50);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const RatioInputs& in = ratio_inputs();
  if (in.busbw_GBps.empty() || in.memcpy_GBps.empty()) {
    std::printf("ratio busbw(all-reduce 64 MiB, 4 ranks) / memcpy(64 MiB, 1 thread): n/a (filtered out)\n");
    return 0;
  }
  const double busbw = median(in.busbw_GBps);
  const double memcpy_rate = median(in.memcpy_GBps);
  std::printf("ratio busbw(all-reduce 64 MiB, 4 ranks) / memcpy(64 MiB, 1 thread) = %.3f  (medians of %zu and %zu "
              "runs: busbw %.2f GB/s, memcpy %.2f GB/s; target >= 0.25)\n",
              busbw / memcpy_rate, in.busbw_GBps.size(), in.memcpy_GBps.size(), busbw, memcpy_rate);
  return 0;
}
