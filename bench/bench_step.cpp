// End-to-end training step time (Google Benchmark): gs::run_training on the anchors' workloads (fmnist: MLP
// 784-512-512-10 on Fashion-MNIST; wide: MLP 1024-2048-2048-2048-1024 teacher regression), batch 32 per rank,
// 1/2/4 ranks, shared and replicated state. Manual time = median step time; per-phase medians as counters.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/config/run_config.h"
#include "sim/core/clock.h"
#include "sim/runtime/rank_loop.h"

extern "C" void openblas_set_num_threads(int);

namespace {

// One workload of the anchors (bench/peers/torch_ddp.py) as a run configuration.
struct Workload {
  std::string name;
  int64_t steps;   // optimizer steps per run
  int64_t warmup;  // leading steps left out of the figures
  gs::RunConfig config;
};

gs::RunConfig common_config() {
  gs::RunConfig c;
  c.name = "bench_step";
  c.model.kind = "mlp";
  c.data.batch_per_rank = 32;
  c.training.accumulation_steps = 1;
  c.training.eval_every = 0;  // one evaluation after the last step, outside the step times
  c.training.optimizer.kind = "sgd";
  c.training.optimizer.lr = 0.05;
  c.training.optimizer.momentum = 0.9;
  c.sync.kind = "allreduce";
  c.cluster.backend = "host";
  return c;
}

Workload fmnist() {
  Workload w{"fmnist", 60, 5, common_config()};
  w.config.model.layers = {784, 512, 512, 10};
  w.config.model.loss = "cross_entropy";
  w.config.data.kind = "fashion_mnist";
  w.config.data.eval_samples = 1000;  // keeps the final evaluation short
  return w;
}

Workload wide() {
  Workload w{"wide", 8, 2, common_config()};
  w.config.model.layers = {1024, 2048, 2048, 2048, 1024};
  w.config.model.loss = "mse";
  w.config.data.kind = "teacher";
  w.config.data.teacher.task = "regression";
  w.config.data.teacher.in_dim = 1024;
  w.config.data.teacher.out_dim = 1024;
  w.config.data.teacher.train_samples = 8192;
  w.config.data.teacher.eval_samples = 64;
  return w;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One run per iteration; figures over the steps after the warm-up. step_ms: median of rank 0's step times (each
// step ends when all ranks have updated, so rank 0's steps add up to the run's wall time). step_max_ms: median of
// the slowest rank's step time (more than step_ms when ranks outnumber cores: ranks take turns being delayed).
// step_mean_ms: rank 0's mean step time, torch_ddp.py's statistic. Phases: median over steps of the mean over ranks.
void bm_step(benchmark::State& state, const Workload& w, bool share) {
  gs::RunConfig cfg = w.config;
  cfg.cluster.ranks = state.range(0);
  cfg.cluster.share_identical = share;
  cfg.training.steps = w.steps;
  std::vector<double> step_s, step_max_s, mean_s;
  std::vector<std::vector<double>> phase_s(gs::kPhaseCount);
  for (auto _ : state) {
    gs::RunResult r = gs::run_training(cfg);
    if (!r.is(gs::Disposition::kPassed)) {
      state.SkipWithError(fmt::format("run {}: {}", gs::disposition_name(r.disposition), r.message).c_str());
      return;
    }
    const size_t ranks = r.steps.size(), steps = r.steps[0].size();
    std::vector<double> run_step;
    for (size_t s = static_cast<size_t>(w.warmup); s < steps; ++s) {
      double mx = 0.0;
      for (size_t k = 0; k < ranks; ++k) mx = std::max(mx, r.steps[k][s].step_s);
      run_step.push_back(r.steps[0][s].step_s);
      step_max_s.push_back(mx);
      for (size_t p = 0; p < gs::kPhaseCount; ++p) {
        double m = 0.0;
        for (size_t k = 0; k < ranks; ++k) m += r.steps[k][s].phase_s[p];
        phase_s[p].push_back(m / static_cast<double>(ranks));
      }
    }
    double sum = 0.0;
    for (double t : run_step) sum += t;
    mean_s.push_back(sum / static_cast<double>(run_step.size()));
    state.SetIterationTime(median(run_step));
    step_s.insert(step_s.end(), run_step.begin(), run_step.end());
  }
  const double med = median(step_s);
  state.counters["step_ms"] = med * 1e3;
  state.counters["step_max_ms"] = median(step_max_s) * 1e3;
  state.counters["step_mean_ms"] = median(mean_s) * 1e3;
  state.counters["samples_per_s"] = static_cast<double>(cfg.cluster.ranks * cfg.data.batch_per_rank) / med;
  for (size_t p = 0; p < gs::kPhaseCount; ++p) {
    if (static_cast<gs::Phase>(p) == gs::Phase::kCompress) continue;  // no compressor in these runs
    state.counters[std::string(gs::kPhaseNames[p]) + "_ms"] = median(phase_s[p]) * 1e3;
  }
}

}  // namespace

int main(int argc, char** argv) {
  openblas_set_num_threads(1);  // one BLAS thread per rank thread, as the driver does
  static const Workload workloads[] = {fmnist(), wide()};
  for (const Workload& w : workloads) {
    for (bool share : {true, false}) {
      const std::string name = w.name + (share ? "/shared" : "/replicated");
      benchmark::RegisterBenchmark(name.c_str(), [&w, share](benchmark::State& s) { bm_step(s, w, share); })
          ->ArgName("ranks")
          ->Arg(1)
          ->Arg(2)
          ->Arg(4)
          ->Iterations(1)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
