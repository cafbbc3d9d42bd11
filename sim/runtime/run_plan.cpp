// plan_run (run_plan.h): the hardware profile, the backend and the enums of a run, resolved once.
#include "sim/runtime/run_plan.h"

#include <exception>

#include "sim/core/count_text.h"
#include "sim/strategy/strategy.h"

#if defined(GRADSWEEP_HAVE_CUDA)
#include "kernels/cuda_runtime.h"
#endif

namespace gs {
namespace {

void fail(RunResult& res, const std::string& message) {
  res.set_disposition(Disposition::kFailed, message);
}

}  // namespace

std::optional<RunPlan> plan_run(const RunConfig& config, RunResult& res) {
  RunPlan plan;
  plan.config = config;
  try {
    // The detected GPU's profile (validation refuses detect on host).
    if (config.cluster.hardware == "detect") plan.config.cluster.hardware = resolve_hardware(config);
    plan.mode = parse_run_mode(config.training.mode);
    plan.strategy = &find_strategy(config);
    plan.pitfall = parse_pitfall(config.training.pitfall);
    plan.precision = parse_precision_mode(config.precision.mode);
    plan.loss_scale = loss_scaler_settings(config.precision).kind;
    plan.shape = step_shape(config);
  } catch (const std::exception& e) {
    fail(res, e.what());
    return std::nullopt;
  }
  if (plan.timing()) return plan;  // priced on the host: no backend to choose
  const RunConfig& c = plan.config;
  try {
    plan.backend = choose_backend(c);
#if defined(GRADSWEEP_HAVE_CUDA)
    // After a sticky CUDA error (an illegal address, ...) every later CUDA call of this process fails: say so once,
    // naming the first error, instead of each later run failing with a confusing error of its own.
    if (plan.backend.backend == BackendKind::kCuda) {
      const std::string sticky = gpu::sticky_cuda_error();
      if (!sticky.empty()) {
        fail(res, "not run on cuda: an earlier cuda run of this process hit a sticky CUDA error, which leaves the "
                  "GPU context unusable for the rest of the process: " + sticky +
                  " (run the sweep again with --resume --retry-failed, in a new process, to run it)");
        res.backend_reason = plan.backend.reason;
        return std::nullopt;
      }
    }
#endif
    if (plan.backend.backend == BackendKind::kCuda) resolve_backend(c);  // throws where cuda cannot run this config
  } catch (const std::exception& e) {
    fail(res, e.what());
    return std::nullopt;
  }
  res.backend_reason = plan.backend.reason;
  if (plan.backend.backend == BackendKind::kCuda) res.cuda_path = cuda_path_name(plan.backend.cuda_path);
  return plan;
}

std::vector<ConfigIssue> process_issues(const RunConfig& c, int processes) {
  std::vector<ConfigIssue> out;
  if (processes <= 1) return out;
  const std::string np = "mpirun -np " + std::to_string(processes);
  auto refuse = [&](const std::string& field, const std::string& value, const std::string& supported) {
    out.push_back({field, "\"" + value + "\" does not run across processes (" + np + "); supported: " + supported});
  };
  if (c.cluster.ranks % processes != 0)
    out.push_back({"cluster.ranks", count_text(c.cluster.ranks, "rank") + " cannot be split evenly over " +
                                        std::to_string(processes) + " processes (" + np +
                                        "): expected a multiple of " + std::to_string(processes)});
  if (c.sync.kind == "parameter_server")
    out.push_back({"sync.kind", "\"parameter_server\" does not run across processes (" + np +
                                    "): its server shards are memory of one process, which every worker's pushes "
                                    "and pulls reach one at a time in the order of all workers' modeled clocks; "
                                    "across processes that would take point-to-point messages to the server's "
                                    "process in that global order, and the MPI path has only collectives in rank "
                                    "order; run it without mpirun, or use sync.kind \"allreduce\""});
  else if (c.sync.kind != "allreduce" && c.sync.kind != "local_sgd" && c.sync.kind != "independent" &&
           c.sync.kind != "zero")  // a strategy not shown to give the one-process bits across processes
    refuse("sync.kind", c.sync.kind, "\"allreduce\", \"local_sgd\", \"independent\" and \"zero\"");
  if (c.cluster.backend == "cuda") refuse("cluster.backend", c.cluster.backend, "\"host\" (or \"auto\" on host)");
  if (c.data.cache.policy != "none") refuse("data.cache.policy", c.data.cache.policy, "\"none\"");
  return out;
}

}  // namespace gs
