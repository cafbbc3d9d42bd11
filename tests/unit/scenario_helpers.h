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

// trace.params[step][rank] as floats.
inline std::vector<float> params_after(const json& run, size_t step_index, size_t rank) {
  return run.at("trace").at("params").at(step_index).at(rank).get<std::vector<float>>();
}

}  // namespace gs::test
