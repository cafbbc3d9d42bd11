// Backend selection (cluster.backend auto|host|cuda) and the CUDA facts in the report's context. These run on any
// machine: the expected answers follow from the issue's rule applied to what the device query reports (no usable GPU
// on a machine without a driver, where the query fails with "insufficient driver" rather than "no device").
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#if defined(GRADSWEEP_HAVE_CUDA)
#include "kernels/cuda_runtime.h"
#endif
#include "sim/config/scenario.h"
#include "sim/cost/hardware_profile.h"
#include "sim/report/report.h"
#include "sim/runtime/device.h"
#include "sim/runtime/rank_loop.h"
#include "sim/validate/validate.h"

namespace gs {
namespace {

const char* kScenario = R"({"name": "b", "model": {"kind": "mlp", "layers": [8, 4, 3]},
  "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 3}}, "training": {"steps": 2}})";

RunConfig config_with(const std::string& backend) {
  Scenario s = parse_scenario(kScenario, "b.json", {"cluster.backend=" + backend});
  return s.runs.at(0).config;
}

TEST(Backend, UsableMeansCompiledNoErrorAndADevice) {
  CudaProbe p;
  EXPECT_FALSE(cuda_usable(p));  // not compiled
  p.compiled = true;
  p.device_count = 1;
  EXPECT_TRUE(cuda_usable(p));
  p.error = "CUDA driver version is insufficient for CUDA runtime version";  // any error: no GPU
  EXPECT_FALSE(cuda_usable(p));
  p.error.clear();
  p.device_count = 0;
  EXPECT_FALSE(cuda_usable(p));
}

TEST(Backend, HostAndAutoResolve) {
  EXPECT_EQ(resolve_backend(config_with("host")), BackendKind::kHost);
  // auto: cuda exactly when a GPU is usable and this build has the cuda rank loop.
  const bool gpu = cuda_usable(cuda_status());
  EXPECT_EQ(resolve_backend(config_with("auto")), gpu && kCudaBackendBuilt ? BackendKind::kCuda : BackendKind::kHost);
}

TEST(Backend, CudaIsRefusedAtValidationNamingTheQueryOrTheMissingBackend) {
  const CudaProbe& p = cuda_status();
  if (cuda_usable(p) && kCudaBackendBuilt) {
    EXPECT_FALSE(backend_issue("cuda").has_value());
    return;
  }
  try {
    parse_scenario(kScenario, "b.json", {"cluster.backend=cuda"});
    FAIL() << "cluster.backend cuda was accepted";
  } catch (const ScenarioError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].path, "cluster.backend");
    const std::string& m = e.issues()[0].message;
    if (cuda_usable(p)) {  // a GPU, but this version has no cuda rank loop
      EXPECT_NE(m.find("not available yet"), std::string::npos) << m;
    } else if (!p.compiled) {
      EXPECT_NE(m.find("built without CUDA"), std::string::npos) << m;
    } else {  // no GPU: the message names the device query's error
      EXPECT_NE(m.find("needs a usable GPU"), std::string::npos) << m;
      EXPECT_NE(m.find(p.error.empty() ? "found no device" : p.error), std::string::npos) << m;
    }
  }
}

// cluster.hardware "detect": device names as cudaDeviceProp::name spells them -> the shipped profile's file name
// (scenarios/hardware/NAME.json). The expected names are the files', and each profile's `gpu` names the same GPU.
TEST(Backend, DetectMapsGpuNamesToShippedProfiles) {
  struct Case {
    const char* device_name;
    int count;
    std::optional<std::string> profile;
    const char* gpu_word;  // a word the profile's `gpu` field must contain
  };
  const Case cases[] = {
      {"NVIDIA H200", 1, "h200-1", "H200"},
      {"NVIDIA H200", 2, "h200-sxm-2", "H200"},  // 2 or 4 H200s are not an 8-GPU node
      {"NVIDIA H200", 4, "h200-sxm-4", "H200"},
      {"NVIDIA H200", 8, "h200-sxm-8", "H200"},
      {"NVIDIA H200", 3, std::nullopt, ""},      // no 3-GPU profile: refused, not priced as 4 or 8
      {"NVIDIA H200", 16, std::nullopt, ""},
      {"NVIDIA H200 NVL", 2, std::nullopt, ""},  // the PCIe card with NVLink bridges: no profile
      {"NVIDIA H100 80GB HBM3", 1, "h100-sxm-1", "H100"},
      {"NVIDIA H100 80GB HBM3", 2, "h100-sxm-2", "H100"},
      {"NVIDIA H100 80GB HBM3", 4, "h100-sxm-4", "H100"},
      {"NVIDIA H100 80GB HBM3", 8, "h100-sxm-8", "H100"},
      {"NVIDIA H100 PCIe", 8, "h100-pcie-8", "H100"},
      {"NVIDIA H100 PCIe", 2, std::nullopt, ""},  // only the 8-GPU PCIe profile is shipped
      {"NVIDIA A100-SXM4-80GB", 8, "a100-sxm-8", "A100"},
      {"NVIDIA A100-SXM4-40GB", 1, std::nullopt, ""},  // only the 8-GPU A100 profile is shipped
      {"NVIDIA A100 80GB PCIe", 1, std::nullopt, ""},   // no PCIe A100 profile is shipped
      {"NVIDIA H100 NVL", 2, std::nullopt, ""},         // nor an NVL one
      {"NVIDIA GH200 480GB", 1, std::nullopt, ""},      // GH200 is not H200 (word match, not substring)
      {"NVIDIA L40S", 1, std::nullopt, ""},
      {"", 0, std::nullopt, ""},
  };
  for (const Case& c : cases) {
    const auto got = detected_hardware_profile(c.device_name, c.count);
    EXPECT_EQ(got, c.profile) << c.device_name << " x" << c.count;
    if (!c.profile) continue;
    const auto profile = load_hardware_profile(*c.profile);  // the file exists and parses
    EXPECT_EQ(profile->name, *c.profile);
    EXPECT_NE(profile->gpu.find(c.gpu_word), std::string::npos) << profile->gpu;
    EXPECT_EQ(profile->gpus_per_node, c.count) << *c.profile;  // the profile describes as many GPUs as were found
  }
  // The one-GPU H200 profile describes one GPU per node; the 8-GPU ones eight.
  EXPECT_EQ(load_hardware_profile("h200-1")->gpus_per_node, 1);
  EXPECT_EQ(load_hardware_profile("h200-sxm-8")->gpus_per_node, 8);
}

TEST(Backend, DetectOnHostIsRefusedNamingTheField) {
  try {
    parse_scenario(kScenario, "b.json", {"cluster.backend=host", "cluster.hardware=detect"});
    FAIL() << "cluster.hardware detect was accepted on host";
  } catch (const ScenarioError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].path, "cluster.hardware");
    EXPECT_NE(e.issues()[0].message.find("needs the cuda backend"), std::string::npos) << e.issues()[0].message;
  }
  // Stragglers injected for real need the cuda backend too.
  try {
    parse_scenario(kScenario, "b.json", {"cluster.backend=host", "cluster.stragglers.inject=true"});
    FAIL() << "cluster.stragglers.inject was accepted on host";
  } catch (const ScenarioError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].path, "cluster.stragglers.inject");
    EXPECT_EQ(e.issues()[0].message, "only applies when cluster.backend is \"cuda\" or \"auto\" (it is \"host\") (the "
                                     "value of --set cluster.stragglers.inject, not of the file)");
  }
}

// QA6 F3: "detect" on the base with cluster.backend swept is a per-run rule: it names the runs it refuses, as every
// rule checked on expanded runs does. The host run is refused wherever this runs; the auto run only without a
// usable GPU (then auto runs on host).
TEST(Backend, DetectWithASweptBackendNamesTheRuns) {
  std::string swept = std::string(kScenario).insert(1, R"("sweep": {"axes": {"cluster.backend": ["host", "auto"]}},)");
  try {
    parse_scenario(swept, "b.json", {"cluster.hardware=detect"});
    FAIL() << "cluster.hardware detect was accepted on a host run";
  } catch (const ScenarioError& e) {
    ASSERT_EQ(e.issues().size(), 1u) << e.what();
    EXPECT_EQ(e.issues()[0].path, "cluster.hardware");
    const std::string& m = e.issues()[0].message;
    const bool gpu = cuda_usable(cuda_status()) && kCudaBackendBuilt;
    EXPECT_NE(m.find(gpu ? "(sweep run b.backend=host)" : "(sweep runs b.backend=host, b.backend=auto)"),
              std::string::npos) << m;
  }
}

// QA6 F8 (docs/device.md says so): a timing-only run has no model to refuse, but cluster.backend "cuda" still needs a
// usable GPU (and a CUDA build); host and auto take it anywhere.
TEST(Backend, TimingOnlyOnCudaStillNeedsAUsableGpu) {
  const std::vector<std::string> timing = {"training.mode=timing"};
  for (const char* b : {"host", "auto"}) {
    std::vector<std::string> sets = timing;
    sets.push_back(std::string("cluster.backend=") + b);
    EXPECT_NO_THROW(parse_scenario(kScenario, "b.json", sets)) << b;
  }
  std::vector<std::string> sets = timing;
  sets.emplace_back("cluster.backend=cuda");
  if (cuda_usable(cuda_status()) && kCudaBackendBuilt) {
    EXPECT_NO_THROW(parse_scenario(kScenario, "b.json", sets));
    return;
  }
  try {
    parse_scenario(kScenario, "b.json", sets);
    FAIL() << "cuda accepted without a usable GPU";
  } catch (const ScenarioError& e) {
    ASSERT_EQ(e.issues().size(), 1u) << e.what();
    EXPECT_EQ(e.issues()[0].path, "cluster.backend");
    EXPECT_EQ(e.issues()[0].message, *backend_issue("cuda") + " (the value of --set cluster.backend, not of the file)");
  }
}

// What the cuda backend (the rank loop with every buffer in GPU memory) does not run, from the rule in its
// documentation (device.h, residency.cpp): a model without a GPU model. Every strategy, compressor, optimizer and
// precision setting of the registries runs there (the parameter server with its workers in GPU memory, the 1-bit
// optimizers' compressed all-reduce through the memory's operations): no issue for any of them.
TEST(Backend, CudaBackendRefusesOnlyModelsWithoutAGpuModel) {
  EXPECT_TRUE(cuda_device_issues(config_with("host")).empty());
  RunConfig q = config_with("host");
  q.model.kind = "quadratic";
  const std::vector<ConfigIssue> issues = cuda_device_issues(q);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].path, "model.kind");
  EXPECT_EQ(issues[0].message.rfind("\"quadratic\" has no GPU model (mlp, linear)", 0), 0u) << issues[0].message;
  EXPECT_NE(issues[0].message.find("does not run on cluster.backend \"cuda\" in this version"), std::string::npos)
      << issues[0].message;
  EXPECT_NE(issues[0].message.find("use \"host\""), std::string::npos) << issues[0].message;
  RunConfig a = q;  // auto never takes cuda for it
  a.cluster.backend = "auto";
  const BackendChoice choice = choose_backend(a);
  EXPECT_EQ(choice.backend, BackendKind::kHost);
  if (cuda_usable(cuda_status())) {
    EXPECT_NE(choice.reason.find("model.kind"), std::string::npos) << choice.reason;
  }
  RunConfig t = q;
  t.training.mode = "timing";
  EXPECT_TRUE(cuda_device_issues(t).empty());
  const std::vector<std::vector<std::string>> runs = {
      {"sync.kind=independent"},
      {"sync.kind=local_sgd", "sync.period=2"},
      {"sync.kind=zero"},
      {"sync.kind=parameter_server"},
      {"sync.kind=parameter_server", "sync.staleness=inf", "compression.kind=topk", "compression.ratio=0.1"},
      {"sync.staleness=1"},
      {"precision.mode=fp16_pure"},
      {"precision.loss_scale=static"},
      {"precision.mode=tf32", "precision.loss_scale=dynamic"},
      {"compression.kind=topk", "compression.ratio=0.1", "compression.error_feedback=true"},
      {"compression.kind=powersgd"},
      {"compression.kind=qsgd", "precision.mode=fp16_mixed"},
      {"training.clip_grad_norm=1.0"},
      {"training.pitfall=zero_grad_in_loop", "training.accumulation_steps=2"},
      {"report.trace=true"},
      {"data.cache.policy=lru"},
      {"training.optimizer.kind=adamw"},
      {"training.optimizer.kind=onebit_adam"},
      {"training.optimizer.kind=zero_one_adam"},
      {"training.optimizer.kind=onebit_lamb"},
  };
  for (std::vector<std::string> sets : runs) {
    const std::string label = sets.front();
    sets.emplace_back("cluster.backend=host");
    const RunConfig c = parse_scenario(kScenario, "b.json", sets).runs.at(0).config;
    const std::vector<ConfigIssue> found = cuda_device_issues(c);
    EXPECT_TRUE(found.empty()) << label << ": " << (found.empty() ? "" : found[0].message);
    const CudaPathChoice path = choose_cuda_path(c);
    EXPECT_EQ(path.path, CudaPath::kDevice) << label;
    EXPECT_TRUE(path.refusals.empty()) << label;
  }
  // Injected delays add no refusal of their own (the rank loop injects them on any backend that asks).
  RunConfig inject = config_with("host");
  inject.cluster.stragglers.inject = true;
  EXPECT_EQ(choose_cuda_path(inject).path, CudaPath::kDevice);
  q.cluster.stragglers.inject = true;
  EXPECT_EQ(choose_cuda_path(q).refusals.size(), 1u);
  EXPECT_EQ(std::string(cuda_path_name(CudaPath::kDevice)), "device");
}

// choose_backend against a probe (no GPU needed): the reason of each backend and cuda path.
TEST(Backend, ChoiceWithAProbeNamesThePathAndWhy) {
  CudaProbe gpu;
  gpu.compiled = true;
  gpu.device_count = 1;
  gpu.devices.push_back({"NVIDIA H200", "9.0", 0, 132});
  CudaProbe none;
  none.compiled = true;
  none.error = "CUDA driver version is insufficient for CUDA runtime version";
  // Parsed on host, then the backend (and injected stragglers) set: validation would judge this machine's GPU.
  auto config = [](const std::string& backend, std::vector<std::string> sets, bool inject = false) {
    sets.emplace_back("cluster.backend=host");
    RunConfig c = parse_scenario(kScenario, "b.json", sets).runs.at(0).config;
    c.cluster.backend = backend;
    c.cluster.stragglers.inject = inject;
    return c;
  };
  // cuda: the device path, or none (refused: validation says).
  BackendChoice d = choose_backend(config("cuda", {}), gpu);
  EXPECT_EQ(d.backend, BackendKind::kCuda);
  EXPECT_EQ(d.cuda_path, CudaPath::kDevice);
  EXPECT_EQ(d.reason, "cluster.backend \"cuda\"");
  BackendChoice ps = choose_backend(config("cuda", {"sync.kind=parameter_server"}), gpu);
  EXPECT_EQ(ps.cuda_path, CudaPath::kDevice);
  RunConfig quadratic = config("cuda", {});
  quadratic.model.kind = "quadratic";
  BackendChoice r = choose_backend(quadratic, gpu);
  EXPECT_EQ(r.backend, BackendKind::kCuda);
  EXPECT_EQ(r.cuda_path, CudaPath::kNone);
  // auto takes the device path where the cuda backend runs the configuration, else host naming why.
  BackendChoice a = choose_backend(config("auto", {"sync.kind=local_sgd"}, true), gpu);
  quadratic.cluster.backend = "auto";
  BackendChoice al = choose_backend(quadratic, gpu);
  BackendChoice ap = choose_backend(config("auto", {"training.optimizer.kind=onebit_adam"}), gpu);
  BackendChoice an = choose_backend(config("auto", {}), none);
  if (kCudaBackendBuilt) {
    EXPECT_EQ(a.backend, BackendKind::kCuda);
    EXPECT_EQ(a.cuda_path, CudaPath::kDevice);
    EXPECT_EQ(a.reason, "auto: a usable GPU (NVIDIA H200) and a configuration the cuda backend runs");
    EXPECT_EQ(al.backend, BackendKind::kHost);
    EXPECT_EQ(al.reason.rfind("auto: a GPU is usable, but the cuda backend does not run this configuration: "
                              "model.kind: \"quadratic\" has no GPU model",
                              0),
              0u)
        << al.reason;
    EXPECT_EQ(ap.backend, BackendKind::kCuda);
    EXPECT_EQ(ap.cuda_path, CudaPath::kDevice);
    EXPECT_EQ(an.backend, BackendKind::kHost);
    EXPECT_EQ(an.reason, "auto: no usable GPU (the device query says \"" + none.error + "\")");
    EXPECT_FALSE(backend_issue("cuda", gpu).has_value());
  } else {
    for (const BackendChoice* c : {&a, &al, &ap, &an}) {
      EXPECT_EQ(c->backend, BackendKind::kHost);
      EXPECT_EQ(c->reason, "auto: this binary was built without CUDA");
    }
  }
  ASSERT_TRUE(backend_issue("cuda", none).has_value());
  EXPECT_NE(backend_issue("cuda", none)->find(none.error), std::string::npos) << *backend_issue("cuda", none);
  EXPECT_FALSE(backend_issue("host", none).has_value());
}

// Validation with cluster.backend cuda lists what the cuda backend does not run at its path (beside the GPU's absence
// here); everything else is not refused.
TEST(Backend, CudaValidationNamesTheUnsupportedPath) {
  const size_t gpu_issue = cuda_usable(cuda_status()) && kCudaBackendBuilt ? 0u : 1u;
  const char* kQuadratic = R"({"name": "q", "model": {"kind": "quadratic", "a": [[1, 2]], "b": [[0, 1]],
    "initial_w": [0, 0]}, "data": {"kind": "none"}, "training": {"steps": 2}})";
  try {
    parse_scenario(kQuadratic, "q.json", {"cluster.backend=cuda"});
    FAIL() << "accepted";
  } catch (const ScenarioError& e) {
    bool found = false;
    for (const ConfigIssue& i : e.issues()) found = found || i.path == "model.kind";
    EXPECT_TRUE(found) << e.what();
    EXPECT_EQ(e.issues().size(), gpu_issue + 1) << e.what();
  }
  for (const char* runs : {"sync.kind=independent", "sync.kind=local_sgd", "training.clip_grad_norm=1",
                           "report.trace=true", "compression.kind=topk", "precision.mode=fp16_pure",
                           "sync.kind=parameter_server", "training.optimizer.kind=onebit_adam"}) {
    try {
      parse_scenario(kScenario, "b.json", {"cluster.backend=cuda", runs});
      EXPECT_EQ(gpu_issue, 0u) << runs << " accepted without a GPU";
    } catch (const ScenarioError& e) {
      ASSERT_EQ(e.issues().size(), gpu_issue) << runs << ": " << e.issues()[0].path;
      EXPECT_EQ(e.issues()[0].path, "cluster.backend") << runs;
    }
  }
}

TEST(Backend, ChoiceNamesItsReason) {
  const BackendChoice host = choose_backend(config_with("host"));
  EXPECT_EQ(host.backend, BackendKind::kHost);
  EXPECT_EQ(host.reason, "cluster.backend \"host\"");
  const BackendChoice a = choose_backend(config_with("auto"));
  const CudaProbe& p = cuda_status();
  if (!p.compiled) {
    EXPECT_EQ(a.reason, "auto: this binary was built without CUDA");
  } else if (!cuda_usable(p)) {
    EXPECT_EQ(a.backend, BackendKind::kHost);
    EXPECT_EQ(a.reason.rfind("auto: no usable GPU", 0), 0u) << a.reason;
  } else {
    EXPECT_EQ(a.backend, BackendKind::kCuda);
    EXPECT_NE(a.reason.find(p.devices.front().name), std::string::npos) << a.reason;
  }
}

// timing.model_error: (modeled - measured) / measured of the sums over ranks and steps, per phase and per step.
TEST(Backend, ModelErrorIsTheRelativeErrorOfTheSums) {
  auto st = [](double fwd, double bwd, double step) {
    StepTimes t;
    t.phase_s[static_cast<size_t>(Phase::kForward)] = fwd;
    t.phase_s[static_cast<size_t>(Phase::kBackward)] = bwd;
    t.step_s = step;
    return t;
  };
  // Two ranks, two steps. Measured forward sums to 1 + 3 + 2 + 2 = 8, modeled to 2 + 2 + 2 + 4 = 10: +0.25.
  // Backward 4 x 1 = 4 measured, 4 x 0.5 = 2 modeled: -0.5. Step 4 x 5 = 20 measured, 4 x 4 = 16 modeled: -0.2.
  const std::vector<std::vector<StepTimes>> measured = {{st(1, 1, 5), st(3, 1, 5)}, {st(2, 1, 5), st(2, 1, 5)}};
  const std::vector<std::vector<StepTimes>> modeled = {{st(2, 0.5, 4), st(2, 0.5, 4)},
                                                       {st(2, 0.5, 4), st(4, 0.5, 4)}};
  const json e = model_error_json(measured, modeled);
  EXPECT_DOUBLE_EQ(e.at("phases").at("forward").get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(e.at("phases").at("backward").get<double>(), -0.5);
  EXPECT_DOUBLE_EQ(e.at("step").get<double>(), -0.2);
  EXPECT_TRUE(e.at("phases").at("compress").is_null());  // nothing measured there
  EXPECT_EQ(e.at("phases").size(), kPhaseCount);
}

// The routing in run_training: the backend taken and why reach the run's report entry; a run that cannot take cuda
// (no GPU here) fails with the reason instead of starting, and never reaches the cuda backend.
TEST(Backend, RunRecordsTheBackendAndWhy) {
  Scenario s = parse_scenario(kScenario, "b.json", {"cluster.backend=auto"});
  const RunResult r = run_training(s.runs.at(0).config);
  ASSERT_EQ(r.disposition, Disposition::kPassed) << r.message;
  const BackendChoice want = choose_backend(s.runs.at(0).config);
  EXPECT_EQ(r.backend, want.backend == BackendKind::kCuda ? "cuda" : "host");
  EXPECT_EQ(r.backend_reason, want.reason);
  const json j = run_to_json(s.runs.at(0), r);
  EXPECT_EQ(j.at("backend_reason").get<std::string>(), want.reason);
  // cuda_path: the path on cuda (auto takes only the device path), null on host.
  if (want.backend == BackendKind::kCuda) {
    EXPECT_EQ(j.at("cuda_path"), "device");
  } else {
    EXPECT_TRUE(j.at("cuda_path").is_null()) << j.at("cuda_path");
  }
  EXPECT_EQ(j.at("timing").contains("model_error"), r.ranks_one_per_gpu);
  if (cuda_usable(cuda_status())) return;
  EXPECT_FALSE(r.ranks_one_per_gpu);
  RunConfig c = s.runs.at(0).config;  // validation refuses cuda here; run_training must too, as a failed run
  c.cluster.backend = "cuda";
  const RunResult f = run_training(c);
  EXPECT_EQ(f.disposition, Disposition::kFailed);
  EXPECT_NE(f.message.find("cluster.backend"), std::string::npos) << f.message;
  EXPECT_EQ(f.steps_completed, 0);
  c.sync.kind = "parameter_server";  // another strategy: refused the same way, before any step
  const RunResult g = run_training(c);
  EXPECT_EQ(g.disposition, Disposition::kFailed);
  EXPECT_NE(g.message.find("cluster.backend"), std::string::npos) << g.message;
  EXPECT_EQ(g.steps_completed, 0);
}

#if defined(GRADSWEEP_HAVE_CUDA)
// A sticky CUDA error (an illegal address, a launch failure, ...) loses the process's GPU context: check_cuda names it
// as such and records the first one; every later cuda run of the process then fails naming it, before touching the
// GPU, while host runs go on. The sticky set is the one CUDA's cudaError_t documentation marks as corrupting the
// context; an out-of-memory or an invalid argument is not in it. (ctest runs each test in its own process.)
TEST(Backend, StickyCudaErrorIsNamedAndFailsTheLaterCudaRuns) {
  for (cudaError_t e : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorMisalignedAddress,
                        cudaErrorIllegalInstruction, cudaErrorHardwareStackError, cudaErrorAssert,
                        cudaErrorECCUncorrectable, cudaErrorInvalidPc, cudaErrorLaunchTimeout})
    EXPECT_TRUE(gpu::is_sticky_cuda_error(e)) << cudaGetErrorName(e);
  for (cudaError_t e : {cudaSuccess, cudaErrorMemoryAllocation, cudaErrorInvalidValue, cudaErrorNotReady,
                        cudaErrorInsufficientDriver, cudaErrorNoDevice, cudaErrorLaunchOutOfResources})
    EXPECT_FALSE(gpu::is_sticky_cuda_error(e)) << cudaGetErrorName(e);
  // A non-sticky error is reported and not recorded.
  EXPECT_THROW(gpu::check_cuda(cudaErrorInvalidValue, "cudaMemcpyAsync(x)", "k.cu", 1), gpu::CudaError);
  EXPECT_EQ(gpu::sticky_cuda_error(), "");
  try {
    gpu::check_cuda(cudaErrorIllegalAddress, "cudaStreamSynchronize(s)", "kernels/k.cu", 7);
    ADD_FAILURE() << "no CudaError";
  } catch (const gpu::CudaError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("kernels/k.cu:7: cudaStreamSynchronize(s): cudaErrorIllegalAddress"), std::string::npos) << m;
    EXPECT_NE(m.find("sticky CUDA error"), std::string::npos) << m;
  }
  const std::string first = gpu::sticky_cuda_error();
  EXPECT_EQ(first.rfind("kernels/k.cu:7: cudaStreamSynchronize(s): cudaErrorIllegalAddress", 0), 0u) << first;
  EXPECT_THROW(gpu::check_cuda(cudaErrorLaunchFailure, "later", "k.cu", 9), gpu::CudaError);
  EXPECT_EQ(gpu::sticky_cuda_error(), first);  // the first one is kept
  RunConfig cuda = config_with("host");  // validation would refuse cuda without a GPU; run_training is what is tested
  cuda.cluster.backend = "cuda";
  const RunResult r = run_training(cuda);
  EXPECT_EQ(r.disposition, Disposition::kFailed);
  EXPECT_NE(r.message.find("sticky CUDA error"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find(first), std::string::npos) << r.message;
  EXPECT_EQ(r.steps_completed, 0);
  const RunResult h = run_training(config_with("host"));
  EXPECT_EQ(h.disposition, Disposition::kPassed) << h.message;
}
#endif

TEST(Backend, CliRefusesCudaWithoutGpuWithExitTwoBeforeAnyRun) {
  if (cuda_usable(cuda_status())) GTEST_SKIP() << "a GPU is usable here";
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("gradsweep_backend_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "b.json") << kScenario;
  const std::string cmd = "'" GRADSWEEP_BINARY "' run '" + (dir / "b.json").string() + "' --out '" +
                          (dir / "out").string() + "' --quiet --set cluster.backend=cuda > '" +
                          (dir / "err.txt").string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  std::stringstream err;
  err << std::ifstream(dir / "err.txt").rdbuf();
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2) << err.str();
  EXPECT_NE(err.str().find("cluster.backend"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("nothing was run"), std::string::npos) << err.str();
  EXPECT_FALSE(fs::exists(dir / "out" / "report.json")) << "refused before any run: no report";
  fs::remove_all(dir);
}

TEST(Backend, ContextReportsCudaVersionsOrNull) {
  Scenario s = parse_scenario(kScenario, "b.json");
  json c = context_json(s, {"gradsweep"});
  const CudaProbe& p = cuda_status();
  const json& cu = c.at("cuda");
  EXPECT_EQ(cu.at("usable").get<bool>(), cuda_usable(p));
  for (const char* k : {"runtime_version", "runtime_header_version", "driver_version", "nccl_version",
                        "nccl_header_version"}) {
    ASSERT_TRUE(cu.contains(k)) << k;
    EXPECT_TRUE(cu.at(k).is_null() || cu.at(k).get<int>() > 0) << k << " " << cu.at(k);
    if (!p.compiled) {
      EXPECT_TRUE(cu.at(k).is_null()) << k << ": a host-only build knows no CUDA version";
    }
  }
  if (p.compiled) {
    // CUDA runtime versions encode 1000 * major + 10 * minor; the header's major is the runtime's (same toolkit).
    ASSERT_FALSE(cu.at("runtime_header_version").is_null());
    EXPECT_GE(cu.at("runtime_header_version").get<int>(), 11000);
    if (!cu.at("runtime_version").is_null()) {
      EXPECT_EQ(cu.at("runtime_version").get<int>() / 1000, cu.at("runtime_header_version").get<int>() / 1000);
    }
  }
  EXPECT_EQ(c.at("gpus").size(), p.devices.size());
  if (!cuda_usable(p)) {
    EXPECT_TRUE(c.at("gpus").empty());
  }
}

}  // namespace
}  // namespace gs
