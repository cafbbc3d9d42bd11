// libFuzzer target over the scenario loader and validator (tools/fuzz.sh builds and runs it; CI runs it for a
// bounded time): any bytes must give a valid scenario or a clean gs::ScenarioError, never a crash, a hang, another
// exception type, or an unbounded allocation (libFuzzer's -rss_limit_mb/-malloc_limit_mb catch those). Every input
// that once failed is kept in tests/fuzz/corpus/ and replayed by the fuzz run.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "sim/config/scenario.h"
#include "sim/validate/validate.h"

// Validation decodes Fashion-MNIST (the default dataset) once per process; do it before fuzzing, so the per-input
// time limit measures the loader and validator rather than that one decode (seconds under ASan).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  try {
    gs::parse_scenario(R"({"name": "warm", "training": {"steps": 1}})", "<warm-up>");
  } catch (const std::exception&) {
    // no dataset installed: fuzz inputs naming it get a clean error instead
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    gs::Scenario s = gs::parse_scenario(text, "<fuzz>");
    if (s.runs.empty()) {
      std::fprintf(stderr, "a valid scenario expanded into no runs\n");
      std::abort();
    }
  } catch (const gs::ScenarioError& e) {
    if (e.issues().empty() || std::string(e.what()).empty()) {
      std::fprintf(stderr, "a ScenarioError without a message\n");
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not a clean scenario error: %s\n", e.what());
    std::abort();
  }
  return 0;
}
