// Test helpers: run a scenario given as JSON text in-process (load, validate, expand, run each, report entry).
#pragma once
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/config/scenario.h"
#include "sim/report/report.h"
#include "sim/runtime/rank_loop.h"
#include "sim/validate/validate.h"

namespace gs::test {

// Runs every run of the scenario and returns its report entries (runs[] of report.json), in expansion order.
inline std::vector<json> run_scenario_text(const std::string& text, const std::vector<std::string>& sets = {}) {
  Scenario s = parse_scenario(text, "<test>", sets);
  std::vector<json> out;
  for (const auto& spec : s.runs) {
    RunResult r = run_training(spec.config);
    EXPECT_EQ(r.disposition, Disposition::kPassed) << spec.id << ": " << r.message;
    out.push_back(run_to_json(spec, r));
  }
  return out;
}

// 1-bit Adam on `ranks` ranks of a quadratic model of 100 parameters (all 1) in two tensors, w0 (40) and w1 (60), no
// data, on an h100-sxm-8 profile: the small two-tensor case of the 1-bit optimizers' memory tests.
inline RunConfig two_tensor_onebit_adam(int ranks) {
  RunConfig c;
  c.model.kind = "quadratic";
  c.model.initial_w = json::array();
  for (int i = 0; i < 100; ++i) c.model.initial_w.push_back(1.0);
  c.model.a = json::array({c.model.initial_w});
  c.model.b = json::array({c.model.initial_w});
  c.model.split = {40, 60};
  c.data.kind = "none";
  c.cluster.ranks = ranks;
  c.cluster.hardware = "h100-sxm-8";
  c.training.optimizer.kind = "onebit_adam";
  return c;
}

// trace.params[step][rank] as floats.
inline std::vector<float> params_after(const json& run, size_t step_index, size_t rank) {
  return run.at("trace").at("params").at(step_index).at(rank).get<std::vector<float>>();
}

}  // namespace gs::test
