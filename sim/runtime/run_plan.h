// RunPlan: what a validated RunConfig resolves to before a run starts, decided once: its enums (run mode, pitfall,
// precision, loss scaling), its strategy's registry line, its StepShape, the resolved hardware profile ("detect" replaced) and the backend
// with its reason and cuda path. The rank loops read the plan, not the config's strings. Extend: a new decision that
// every loop needs is one member here, set in plan_run.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "sim/config/run_config.h"
#include "sim/config/run_kinds.h"
#include "sim/model/model.h"
#include "sim/optim/loss_scaler.h"
#include "sim/runtime/device.h"
#include "sim/runtime/run_result.h"
#include "sim/strategy/strategy.h"

namespace gs {

struct RunPlan {
  RunConfig config;  // the run's configuration with cluster.hardware resolved ("detect": the detected profile)
  RunMode mode = RunMode::kTrain;
  // The registry line of the run's strategy (sim/strategy/registry.cpp): training.optimizer.kind's where that
  // optimizer owns the gradient's communication, else sync.kind's.
  const StrategyEntry* strategy = nullptr;
  Pitfall pitfall = Pitfall::kNone;
  PrecisionMode precision = PrecisionMode::kFp32;
  LossScaleKind loss_scale = LossScaleKind::kNone;  // resolved (precision.loss_scale "auto" decided)
  StepShape shape;
  // Timing-only runs are priced on the host and choose no backend (backend.reason empty, cuda_path kNone).
  BackendChoice backend;
  bool timing() const { return mode == RunMode::kTiming; }
  bool scaler_active() const { return loss_scale != LossScaleKind::kNone; }
  // The cuda backend's device path: the rank loop with every buffer in GPU memory (make_cuda_backend).
  bool on_device() const { return backend.backend == BackendKind::kCuda && backend.cuda_path == CudaPath::kDevice; }
};

// Resolves `config` (validated) into its plan. Where the run cannot start (cluster.hardware "detect" without a usable
// profile, a cuda backend that cannot run it, a sticky CUDA error of an earlier run of this process) it fills `res`
// as "failed" with the message (and backend_reason when the backend was chosen) and returns nullopt. Sets
// res.backend_reason and res.cuda_path of the chosen backend.
std::optional<RunPlan> plan_run(const RunConfig& config, RunResult& res);

// Why `config` cannot run across `processes` processes under mpirun (docs/cluster.md, "One run across processes
// (MPI)"): one issue per field, empty when it can (always for one process). Supported: sync.kind allreduce
// (with gradient accumulation, every compressor, every precision mode), local_sgd, independent and zero, every
// optimizer (the 1-bit ones too), the host backend, cluster.ranks a multiple of processes.
std::vector<ConfigIssue> process_issues(const RunConfig& config, int processes);

}  // namespace gs
