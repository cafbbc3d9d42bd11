// Backend selection (cluster.backend auto|host|cuda) and the CUDA facts in the report's context. These run on any
// machine: the expected answers follow from the issue's rule applied to what the device query reports (no usable GPU
// on a machine without a driver, where the query fails with "insufficient driver" rather than "no device").
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "sim/config/scenario.h"
#include "sim/report/report.h"
#include "sim/runtime/device.h"

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
  EXPECT_EQ(resolve_backend(config_with("host")), Backend::kHost);
  // auto: cuda exactly when a GPU is usable and this build has the cuda rank loop.
  const bool gpu = cuda_usable(cuda_status());
  EXPECT_EQ(resolve_backend(config_with("auto")), gpu && kCudaRankLoopBuilt ? Backend::kCuda : Backend::kHost);
}

TEST(Backend, CudaIsRefusedAtValidationNamingTheQueryOrTheMissingRankLoop) {
  const CudaProbe& p = cuda_status();
  if (cuda_usable(p) && kCudaRankLoopBuilt) {
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
