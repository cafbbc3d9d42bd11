// Host step time of each precision mode on the quickstart model (Google Benchmark): MLP 784-256-256-10 on
// Fashion-MNIST, batch 32, SGD 0.05 momentum 0.9, 1 rank (no thread oversubscription), 200 steps of which the first
// 20 are left out; manual time = median step time. Modes alternate, each repeated, so load drifts hit them alike.
// Prints the ratio bf16_mixed / fp32 of the medians (emulation cost; target < 2). A new mode is one more name below.
// Run: bench_precision --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/config/run_config.h"
#include "sim/runtime/rank_loop.h"

extern "C" void openblas_set_num_threads(int);

namespace {

constexpr int64_t kSteps = 200;
constexpr int64_t kWarmup = 20;

gs::RunConfig quickstart(const std::string& mode) {
  gs::RunConfig c;
  c.name = "bench_precision";
  c.model.kind = "mlp";
  c.model.layers = {784, 256, 256, 10};
  c.model.loss = "cross_entropy";
  c.data.kind = "fashion_mnist";
  c.data.batch_per_rank = 32;
  c.data.eval_samples = 100;  // the one evaluation after the last step stays short (not timed)
  c.cluster.ranks = 1;
  c.cluster.backend = "host";
  c.training.steps = kSteps;
  c.training.eval_every = 0;
  c.training.optimizer.kind = "sgd";
  c.training.optimizer.lr = 0.05;
  c.training.optimizer.momentum = 0.9;
  c.precision.mode = mode;
  c.precision.loss_scale = "none";  // the arithmetic's cost alone (a scaler adds a pass over the gradient)
  return c;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::map<std::string, std::vector<double>>& medians_s() {
  static std::map<std::string, std::vector<double>> m;
  return m;
}

void bm_mode(benchmark::State& state, const std::string& mode) {
  const gs::RunConfig cfg = quickstart(mode);
  std::vector<double> step_s;
  for (auto _ : state) {
    gs::RunResult r = gs::run_training(cfg);
    if (!r.is(gs::Disposition::kPassed)) {
      state.SkipWithError(fmt::format("run {}: {}", gs::disposition_name(r.disposition), r.message).c_str());
      return;
    }
    std::vector<double> run_step;
    for (size_t s = static_cast<size_t>(kWarmup); s < r.steps[0].size(); ++s) run_step.push_back(r.steps[0][s].step_s);
    state.SetIterationTime(median(run_step));
    step_s.insert(step_s.end(), run_step.begin(), run_step.end());
  }
  const double med = median(step_s);
  medians_s()[mode].push_back(med);
  state.counters["step_ms"] = med * 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  openblas_set_num_threads(1);
  static const std::vector<std::string> modes = {"fp32", "bf16_mixed", "fp16_mixed", "fp16_pure", "fp8_mixed"};
  for (const std::string& m : modes) {
    benchmark::RegisterBenchmark(("quickstart/" + m).c_str(), [&m](benchmark::State& s) { bm_mode(s, m); })
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const auto& m = medians_s();
  if (m.count("fp32") == 0) {
    std::printf("ratios: n/a (fp32 filtered out)\n");
    return 0;
  }
  const double base = median(m.at("fp32"));
  std::printf("fp32 step: %.3f ms (median of %zu runs)\n", base * 1e3, m.at("fp32").size());
  for (const std::string& mode : modes) {
    if (mode == "fp32" || m.count(mode) == 0) continue;
    const double t = median(m.at(mode));
    std::printf("ratio step(%s) / step(fp32) = %.3f  (%.3f ms%s)\n", mode.c_str(), t / base, t * 1e3,
                mode == "bf16_mixed" ? "; target < 2" : "");
  }
  return 0;
}
