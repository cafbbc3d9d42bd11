// The exact cases from public bug reports (tests/data/strategy_cases.json), for the tests that check them.
// One loader for every test file; a new case is read by its id.
#pragma once
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace gs {

// The case with this id from tests/data/strategy_cases.json; null when the file cannot be read or no case has the id.
inline nlohmann::json load_case(const std::string& id) {
  std::ifstream in(std::string(GRADSWEEP_SOURCE_DIR) + "/tests/data/strategy_cases.json");
  if (!in) return nullptr;
  nlohmann::json all = nlohmann::json::parse(in);
  for (const auto& c : all)
    if (c["id"] == id) return c;
  return nullptr;
}

}  // namespace gs
