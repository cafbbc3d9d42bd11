// Scenario: a JSON file holding a base run configuration plus `sweep` (axes: grid product over dotted paths; zip:
// groups of axes that vary together; repeats: seeds). Loading (load_scenario, parse_scenario: sim/validate/
// validate.h) validates everything and expands the sweep into one RunSpec per run; any problem, in the file or in any
// expanded run, is collected and reported at once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sim/config/run_config.h"
#include "sim/core/error.h"

namespace gs {

// All problems of one scenario file. what() is the whole multi-line message, one "file: path: message" per line.
class ScenarioError : public Error {
 public:
  ScenarioError(std::string file, std::vector<ConfigIssue> issues);
  const std::vector<ConfigIssue>& issues() const { return issues_; }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::vector<ConfigIssue> issues_;
};

// One axis of the grid: a single path, or a zip group of several paths whose values go together.
struct SweepAxis {
  std::vector<std::string> paths;
  std::vector<std::vector<json>> values;  // values[i][p]: value of paths[p] at point i
  int group = -1;                         // zip group index in the file (-1 for an entry of sweep.axes)
};

// One run of the expansion.
struct RunSpec {
  std::string id;      // stable: scenario name, swept values (by leaf name), repeat index
  int64_t index = 0;   // position in the expansion
  int64_t repeat = 0;
  json swept;          // {"dotted.path": value, ...} for every swept path (ordered as the axes)
  RunConfig config;    // resolved (seed = training.seed + repeat)
};

struct Scenario {
  std::string path;         // file it came from ("" for text)
  std::string name;
  json raw;                 // the file as given
  std::string sha256;       // of the file's bytes
  std::vector<std::string> overrides;  // --set path=value, as given
  std::vector<SweepAxis> axes;
  int64_t repeats = 1;
  std::vector<RunSpec> runs;
  // Settings that are allowed but worth knowing before a run (e.g. more ranks than the hardware profile's GPUs),
  // "path: text" as issues are; the CLI prints them to stderr as notes.
  std::vector<ConfigIssue> notes;
};

// Whether the swept paths' last names differ: a run id names each value by it, else by its whole path.
bool swept_leaves_unique(const std::vector<SweepAxis>& axes);
// One swept value's part of a run id: "leaf=value" (or "dotted.path=value" when the leaves are not unique).
std::string run_id_part(const std::string& path, const json& v, bool leaves_unique);

// A run's id in the parts it joins with '.': the scenario's name, "key=value" per swept path (the path's last name,
// or the whole path where two swept paths share it), "r<repeat>"; {id} for a run not from s's expansion.
std::vector<std::string> run_id_parts(const Scenario& s, const RunSpec& r);

// "12 runs = 4 [training.accumulation_steps] x 3 [cluster.ranks]" (x R [repeats] when repeats > 1).
std::string describe_expansion(const Scenario& s);
// The same text in its parts, which describe_expansion joins with spaces: "12 runs =",
// "4 [training.accumulation_steps]", "x 3 [cluster.ranks]" (a wrap keeps each part on one line where it fits).
std::vector<std::string> expansion_parts(const Scenario& s);

// SHA-256 of bytes (FIPS 180-4, computed by OpenSSL), 64 lowercase hex digits. Throws gs::Error if OpenSSL fails.
std::string sha256_hex(const std::string& bytes);

}  // namespace gs
