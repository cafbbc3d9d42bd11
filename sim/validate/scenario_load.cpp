// Scenario loading: JSON syntax (file:line:column), top-level shape, the sweep block, overrides, expansion into
// runs, and validation of every expanded run (config_from_json), with all problems collected before anything runs.
// Above the registries with the rest of validation (sim/validate/validate.h): it validates every run and reads
// hardware profiles for file paths and notes.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "sim/core/id_pattern.h"
#include "sim/core/json_io.h"
#include "sim/cost/collective_model.h"
#include "sim/cost/hardware_profile.h"
#include "sim/validate/validate.h"

namespace gs {
namespace {

using ojson = nlohmann::ordered_json;

std::string message_of(const ConfigIssue& i) { return i.path.empty() ? i.message : i.path + ": " + i.message; }

// Sets a dotted path inside a JSON object, creating objects on the way (where a key is missing or null). A value on
// the way that is not an object ("model": 5 with model.layers swept) is left as it is, so its own problem ("model:
// expected an object") is reported; returns false then.
bool set_path(json& j, const std::string& path, const json& value) {
  json* cur = &j;
  size_t start = 0;
  while (true) {
    if (cur->is_null()) *cur = json::object();
    if (!cur->is_object()) return false;
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (dot == std::string::npos) {
      (*cur)[key] = value;
      return true;
    }
    cur = &(*cur)[key];
    start = dot + 1;
  }
}

// The fields inside a section path ("model" -> model.kind, model.layers, ...), in table order; empty when path is a
// field or names nothing.
std::vector<std::string> section_fields(const std::string& path) {
  std::vector<std::string> out;
  for (const auto& f : config_fields())
    if (f.path.rfind(path + ".", 0) == 0) out.push_back(f.path);
  return out;
}

// Whether a --set fixes path: the path itself or a section holding it was set.
bool is_overridden(const std::set<std::string>& overridden, const std::string& path) {
  for (const auto& o : overridden)
    if (path == o || path.rfind(o + ".", 0) == 0) return true;
  return false;
}

// Removes a dotted path from a JSON object (nothing when it is not there).
void erase_path(json& j, const std::string& path) {
  json* cur = &j;
  size_t start = 0;
  while (cur->is_object()) {
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (dot == std::string::npos) {
      cur->erase(key);
      return;
    }
    if (!cur->contains(key)) return;
    cur = &(*cur)[key];
    start = dot + 1;
  }
}

// A sweep value (or a --set value) at path: null means "not set", the field's default (as if the key were left out
// of the file), for every field; anything else is set.
void apply_value(json& j, const std::string& path, const json& value) {
  if (value.is_null())
    erase_path(j, path);
  else
    set_path(j, path, value);
}

// Reads one axis's value list; issues name `where`.
// Fields holding a file or folder path that the scenario file gives relative to its own folder: every path field of
// the schema (cluster.hardware only when it names a file, is_hardware_profile_path; a built-in name stays a name).
constexpr const char* kFilePathFields[] = {"model.init.from", "data.path", "cluster.hardware"};

// A relative path in a string value of one of kFilePathFields, taken from `folder` (the scenario file's; the current
// folder for --set values): made absolute, so the resolved configuration in the report names the file wherever the
// report is read. Other values are returned as they are.
// A value given for a section above such a field (--set 'model.init={"from": ...}', a sweep over whole sections) has
// the field's string inside it resolved the same way.
json resolve_file_path(const std::string& path, const json& v, const std::string& folder) {
  if (v.is_object()) {
    json out = v;
    for (const char* f : kFilePathFields) {
      const std::string field(f);
      if (field.size() <= path.size() + 1 || field.compare(0, path.size() + 1, path + ".") != 0) continue;
      const std::string rest = field.substr(path.size() + 1);
      const size_t dot = rest.find('.');
      const std::string key = rest.substr(0, dot);
      if (out.contains(key)) out[key] = resolve_file_path(path + "." + key, out[key], folder);
    }
    return out;
  }
  bool file_field = false;
  for (const char* f : kFilePathFields) file_field = file_field || path == f;
  if (!file_field || !v.is_string() || v.get<std::string>().empty()) return v;
  if (path == "cluster.hardware" && !is_hardware_profile_path(v.get<std::string>())) return v;  // a built-in name
  const std::filesystem::path p(v.get<std::string>());
  if (p.is_absolute()) return v;
  std::error_code ec;
  const std::filesystem::path base = folder.empty() ? std::filesystem::current_path(ec) : std::filesystem::path(folder);
  return (std::filesystem::absolute(base, ec) / p).lexically_normal().string();
}

// The folder of the scenario file `file` ("" for text without a file: paths stay relative to the current folder).
std::string scenario_folder(const std::string& file) {
  if (file.empty()) return "";
  const std::filesystem::path parent = std::filesystem::path(file).parent_path();
  return parent.empty() ? "." : parent.string();
}

bool read_values(const ojson& v, const std::string& where, std::vector<json>& out, std::vector<ConfigIssue>& issues) {
  if (!v.is_array() || v.empty()) {
    issues.push_back({where, "expected a non-empty list of values"});
    return false;
  }
  for (const auto& x : v) out.push_back(json::parse(x.dump()));
  return true;
}

// The base's problems that are the base's own: a cross-field rule on a field the sweep leaves alone but that reads a
// swept field (compression.ratio under compression.kind "none", with the kind swept over [topk, randomk]; stragglers
// factors for the base's 4 ranks, with ranks swept over [2]) is judged on the runs, not on a base that never runs.
// A problem on a swept path (or inside a swept value) is dropped: every run replaces that value with its own (a swept
// value that has the same problem is reported by the runs, at its place in the sweep). Kept: the other problems that
// every expanded run has too. A dropped problem that some runs do have is reported by those runs, named by them.
// Cost: one config_from_json per grid point, only for a base that has problems. The problems on swept paths go to
// `unused` (the scenario's notes say that value is not used and what is wrong with it).
std::vector<ConfigIssue> base_issues_every_run_has(const json& base, const std::vector<SweepAxis>& axes,
                                                   std::vector<ConfigIssue> base_issues, const std::string& folder,
                                                   std::vector<ConfigIssue>& unused) {
  auto on_swept = [&](const ConfigIssue& i) {
    for (const auto& a : axes)
      for (const auto& p : a.paths)
        if (i.path == p || i.path.rfind(p + "[", 0) == 0 || i.path.rfind(p + ".", 0) == 0) return true;
    return false;
  };
  // Per-run rules on one field that read another (validate_config): with the read field swept, the problem belongs
  // to the runs even where every run has it, so they name it ("(sweep runs ...)"), as for every per-run rule. A new
  // rule of that kind adds a line here.
  static const std::pair<const char*, const char*> kReads[] = {
      {"cluster.hardware", "cluster.backend"},           // "detect" needs the cuda backend
      {"cluster.stragglers.inject", "cluster.backend"},  // real delays need the cuda backend
  };
  auto reads_swept = [&](const ConfigIssue& i) {
    for (const auto& [at, reads] : kReads)
      if (i.path == at)
        for (const auto& a : axes)
          for (const auto& p : a.paths)
            if (p == reads) return true;
    return false;
  };
  std::set<std::string> open;  // keys of base problems not yet missing from some run
  std::set<std::string> dropped;
  for (const auto& i : base_issues) {
    if (on_swept(i)) unused.push_back(i);
    (on_swept(i) || reads_swept(i) ? dropped : open).insert(message_of(i));
  }
  int64_t points = 1;
  for (const auto& a : axes) points *= static_cast<int64_t>(a.values.size());
  for (int64_t point = 0; point < points && !open.empty(); ++point) {
    json cfg = base;
    int64_t rest = point;
    for (size_t ai = axes.size(); ai-- > 0;) {
      const auto& a = axes[ai];
      size_t pick = static_cast<size_t>(rest % static_cast<int64_t>(a.values.size()));
      rest /= static_cast<int64_t>(a.values.size());
      for (size_t p = 0; p < a.paths.size(); ++p)
        apply_value(cfg, a.paths[p], resolve_file_path(a.paths[p], a.values[pick][p], folder));
    }
    std::vector<ConfigIssue> run_issues;
    config_from_json(cfg, run_issues);
    std::set<std::string> has;
    for (const auto& i : run_issues) has.insert(message_of(i));
    for (auto it = open.begin(); it != open.end();) {
      if (has.count(*it)) {
        ++it;
      } else {
        dropped.insert(*it);
        it = open.erase(it);
      }
    }
  }
  base_issues.erase(std::remove_if(base_issues.begin(), base_issues.end(),
                                   [&](const ConfigIssue& i) { return dropped.count(message_of(i)) > 0; }),
                    base_issues.end());
  return base_issues;
}

// One note for every hardware profile that some run's cluster.ranks exceeds (over: profile file -> the rank counts
// over its GPUs; gpus_of: file -> (profile name, GPUs per node)): "9 and 16 are more than the 8 GPUs of hardware
// profiles "x" (file) and "z" (file); 5 is more than the 4 GPUs of hardware profile "y" (file): allowed, ...", said
// once however many profiles a sweep crosses.
// "a", "a and b", "a, b and c".
std::string and_list(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
  return out;
}

std::string ranks_over_gpus_note(const std::map<std::string, std::set<int64_t>>& over,
                                 const std::map<std::string, std::pair<std::string, int>>& gpus_of) {
  // Profiles that the same rank counts exceed with the same GPU count share one clause (in the files' order).
  std::vector<std::pair<std::pair<std::set<int64_t>, int>, std::vector<std::string>>> clauses;
  for (const auto& [hw_file, ranks] : over) {
    const auto& [hw_name, gpus] = gpus_of.at(hw_file);
    const std::pair<std::set<int64_t>, int> key{ranks, gpus};
    auto it = std::find_if(clauses.begin(), clauses.end(), [&](const auto& c) { return c.first == key; });
    if (it == clauses.end()) it = clauses.insert(clauses.end(), {key, {}});
    it->second.push_back(fmt::format("\"{}\" ({})", hw_name, hw_file));
  }
  std::string parts;
  std::set<int> node_sizes;
  for (const auto& [key, profiles] : clauses) {
    const auto& [ranks, gpus] = key;
    node_sizes.insert(gpus);
    std::vector<std::string> counts;
    for (int64_t r : ranks) counts.push_back(std::to_string(r));
    parts += fmt::format("{}{} {} more than the {} GPU{} of hardware profile{} {}", parts.empty() ? "" : "; ",
                         and_list(counts), ranks.size() == 1 ? "is" : "are", gpus, gpus == 1 ? "" : "s",
                         profiles.size() == 1 ? "" : "s", and_list(profiles));
  }
  const int first = *node_sizes.begin();
  const std::string nodes = node_sizes.size() == 1 ? fmt::format("{} rank{}", first, first == 1 ? "" : "s")
                                                   : std::string("each profile's GPU count");
  return parts + ": allowed, the modeled clock then prices the collectives as one larger node of the same fabric and "
                 "storage and the node cache as nodes of " + nodes + " (docs/cost-model.md)";
}

// The scenario's text as a JSON document: size and nesting limits before parsing, syntax errors at file:line:column
// and a top level that is no object (thrown as ScenarioError), duplicate keys (issues).
ojson parse_document(const std::string& text, const std::string& file, std::vector<ConfigIssue>& issues) {
  // Nesting deeper than kMaxJsonDepth is refused before parsing (the parser recurses once per level); text larger
  // than a file may be is refused too.
  if (text.size() > kMaxJsonFileBytes)
    throw ScenarioError(file, {{"", fmt::format("larger than {} bytes ({} MiB), the most gradsweep reads from a JSON "
                                                "file", kMaxJsonFileBytes, kMaxJsonFileBytes >> 20)}});
  if (auto problem = json_limit_problem(text)) {
    size_t line = 0, col = 0;
    json_line_col(text, problem->byte, line, col);
    throw ScenarioError(fmt::format("{}:{}:{}", file, line, col), {{"", problem->message}});
  }
  // An empty file (or one of blanks only) is said to be empty, not a syntax error at 1:1.
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw ScenarioError(file, {{"", fmt::format("the file is empty ({}): expected a scenario, a JSON object {{...}} "
                                                "(scenarios/README.md)", text.empty() ? "0 bytes" : "blanks only")}});
  ojson doc;
  // Duplicate keys: nlohmann keeps the last silently; a scenario with two "lr" is a mistake worth naming.
  std::vector<std::vector<std::string>> keys_seen;  // per open object
  std::vector<std::string> key_path;                // key of each open container (or "" for arrays/root)
  std::string pending_key;
  auto on_event = [&](int /*depth*/, ojson::parse_event_t event, ojson& parsed) {
    switch (event) {
      case ojson::parse_event_t::object_start:
      case ojson::parse_event_t::array_start:
        key_path.push_back(pending_key);
        pending_key.clear();
        keys_seen.emplace_back();
        break;
      case ojson::parse_event_t::object_end:
      case ojson::parse_event_t::array_end:
        if (!keys_seen.empty()) keys_seen.pop_back();
        if (!key_path.empty()) key_path.pop_back();
        pending_key.clear();
        break;
      case ojson::parse_event_t::key: {
        std::string k = parsed.get<std::string>();
        auto& seen = keys_seen.back();
        if (std::find(seen.begin(), seen.end(), k) != seen.end()) {
          std::string path;
          for (const auto& part : key_path)
            if (!part.empty()) path += (path.empty() ? "" : ".") + part;
          path += (path.empty() ? "" : ".") + k;
          issues.push_back({path, "duplicate key (the file gives it twice; only one value can count)"});
        }
        seen.push_back(k);
        pending_key = k;
        break;
      }
      case ojson::parse_event_t::value:
        pending_key.clear();
        break;
    }
    return true;
  };
  try {
    doc = ojson::parse(text, on_event);
  } catch (const ojson::exception& e) {  // syntax, or a number too large for a double (1e400): at a line:col
    const JsonParseProblem p = json_parse_problem(e, text);
    const bool syntax = dynamic_cast<const ojson::parse_error*>(&e) != nullptr;
    const std::string reason = (syntax ? "JSON syntax error: " : "invalid JSON: ") + p.reason;
    if (p.byte == std::string::npos) throw ScenarioError(file, {{"", reason}});
    size_t line = 0, col = 0;
    json_line_col(text, p.byte, line, col);
    throw ScenarioError(fmt::format("{}:{}:{}", file, line, col), {{"", reason}});
  }
  if (!doc.is_object()) throw ScenarioError(file, {{"", "expected a JSON object at the top level"}});
  return doc;
}

// The base configuration: everything but sweep and description, its file paths taken from the scenario's folder.
json base_of(const ojson& doc, const std::string& file, std::vector<ConfigIssue>& issues) {
  json base = json::object();
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() == "sweep" || it.key() == "description") continue;
    base[it.key()] = json::parse(it.value().dump());
  }
  for (const char* f : kFilePathFields) {
    std::string ptr = std::string("/") + f;
    std::replace(ptr.begin(), ptr.end(), '.', '/');
    const json::json_pointer jp(ptr);
    try {
      if (base.contains(jp)) base[jp] = resolve_file_path(f, base[jp], scenario_folder(file));
    } catch (const json::exception&) {  // a section that is no object: find_unknown reports it
    }
  }
  if (doc.contains("description") && !doc["description"].is_string())
    issues.push_back({"description", "expected a string"});
  return base;
}

// --set path=value, in order, into base; returns the paths they set (a field, or a section replaced by an object).
std::set<std::string> apply_overrides(const std::vector<std::string>& overrides, json& base,
                                      std::vector<ConfigIssue>& issues) {
  std::set<std::string> overridden;
  for (const auto& o : overrides) {
    size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      issues.push_back({"--set " + o, "expected dotted.path=value"});
      continue;
    }
    std::string path = o.substr(0, eq), value = o.substr(eq + 1);
    if (path == "description") {
      issues.push_back({"--set description", "the description is the scenario file's free text, not a field of the "
                                             "runs: --set changes run fields (the report keeps the file as given and "
                                             "lists the --set values in context.overrides); edit the file to change "
                                             "it"});
      continue;
    }
    if (path == "sweep" || path.rfind("sweep.", 0) == 0) {
      issues.push_back({"--set " + path, "the sweep block is not a field of the runs: --set fixes a field for every "
                                         "run (an axis on that field is dropped); edit the file to change the sweep"});
      continue;
    }
    const std::vector<std::string> inside = section_fields(path);
    if (!inside.empty()) {  // a whole section: an object replaces it (its fields left out take their defaults)
      std::string examples;
      for (size_t i = 0; i < inside.size() && i < 3; ++i) examples += (i ? ", " : "") + inside[i] + "=...";
      const std::string expected = fmt::format(
          "{} is a section: expected a JSON object {{...}} that replaces it (its fields left out take their "
          "defaults), or set one of its fields: {}", path, examples);
      json v;
      bool ok = !json_limit_problem(value).has_value();
      if (ok) {
        try {
          v = json::parse(value);
        } catch (const json::exception&) {
          ok = false;
        }
      }
      if (!ok || !v.is_object()) {
        issues.push_back({"--set " + path, expected + ", got " + bounded_text(value)});
        continue;
      }
      set_path(base, path, resolve_file_path(path, v, ""));  // a file path inside: from the current folder
      overridden.insert(path);
      continue;
    }
    if (!is_config_field(path)) {
      std::string hint = suggest_key(path);
      issues.push_back({"--set " + path, "unknown key" + (hint.empty() ? "" : "; did you mean \"" + hint + "\"?")});
      continue;
    }
    if (auto problem = json_limit_problem(value)) {  // the parser recurses once per level: refuse before parsing
      issues.push_back({"--set " + path, problem->message});
      continue;
    }
    json v;
    try {
      v = json::parse(value);
    } catch (const json::parse_error&) {
      v = value;
    } catch (const json::exception&) {  // valid JSON the parser cannot hold, e.g. 1e400 (beyond a double)
      issues.push_back({"--set " + path, "expected a value a double can hold, got " + bounded_text(value)});
      continue;
    }
    for (const auto& f : config_fields())
      if (f.path == path && f.type == FieldType::kString && !v.is_string()) v = value;  // --set name=2024
    apply_value(base, path, resolve_file_path(path, v, ""));  // null (not a string field): back to the default
    overridden.insert(path);
  }
  return overridden;
}

// The swept paths: each a configuration field (not the name), swept once.
class SweptPaths {
 public:
  explicit SweptPaths(std::vector<ConfigIssue>& issues) : issues_(issues) {}
  bool check(const std::string& where, const std::string& path) {
    if (path == "name") {
      issues_.push_back({where, "the scenario name cannot be swept (it names the report folder)"});
      return false;
    }
    if (is_config_field(path)) return true;
    std::string hint = suggest_key(path);
    issues_.push_back({where, "\"" + path + "\" is not a configuration field" +
                                  (hint.empty() ? "" : "; did you mean \"" + hint + "\"?")});
    return false;
  }
  bool claim(const std::string& where, const std::string& path) {
    if (!swept_.insert(path).second) {
      issues_.push_back({where, "\"" + path + "\" is swept twice"});
      return false;
    }
    return true;
  }

 private:
  std::vector<ConfigIssue>& issues_;
  std::set<std::string> swept_;
};

// sweep.axes: one axis per path (an axis over an overridden path is left out).
void read_axes(const ojson& axes, const std::set<std::string>& overridden, SweptPaths& paths, Scenario& s,
               std::vector<ConfigIssue>& issues) {
  if (!axes.is_object()) {
    issues.push_back({"sweep.axes", "expected an object {\"dotted.path\": [values...]}"});
  } else {
    for (auto it = axes.begin(); it != axes.end(); ++it) {
      std::string where = "sweep.axes[\"" + it.key() + "\"]";
      if (!paths.check(where, it.key()) || !paths.claim(where, it.key())) continue;
      SweepAxis a;
      a.paths = {it.key()};
      std::vector<json> vals;
      if (!read_values(it.value(), where, vals, issues)) continue;
      // The first index of each value (json's ordering: equal values, 1 and 1.0 too, are one key): n log n for an
      // axis of many values.
      std::map<json, size_t> first;
      for (size_t i = 0; i < vals.size(); ++i) {
        const auto [at, fresh] = first.emplace(vals[i], i);
        if (!fresh) {
          issues.push_back({fmt::format("{}[{}]", where, i),
                            fmt::format("{} repeats the value at [{}]; use sweep.repeats for repeated runs",
                                        bounded_dump(vals[i]), at->second)});
          continue;  // one mistake, one problem: the repeat is not expanded, so it does not give two runs one id
        }
        a.values.push_back({vals[i]});
      }
      if (!is_overridden(overridden, it.key())) s.axes.push_back(a);
    }
  }
}

// One group of sweep.zip: paths whose lists of equal length go together (overridden paths leave the group; a group
// emptied by overrides disappears).
void read_zip_group(const ojson& group, size_t g, const std::set<std::string>& overridden, SweptPaths& paths,
                    Scenario& s, std::vector<ConfigIssue>& issues) {
  std::string gwhere = fmt::format("sweep.zip[{}]", g);
  if (!group.is_object() || group.empty()) {
    issues.push_back({gwhere, "expected an object {\"path\": [values], ...} of one or more paths, their "
                              "lists of equal length"});
    return;
  }
  SweepAxis a;
  a.group = static_cast<int>(g);
  std::vector<std::vector<json>> cols;
  bool ok = true;
  std::optional<size_t> first_size;  // of the group's first list, whatever its path (checked on its own)
  for (auto it = group.begin(); it != group.end(); ++it) {
    std::string where = gwhere + "[\"" + it.key() + "\"]";
    const bool path_ok = paths.check(where, it.key()) && paths.claim(where, it.key());
    std::vector<json> vals;
    if (!read_values(it.value(), where, vals, issues)) {
      ok = false;
      continue;
    }
    if (first_size && vals.size() != *first_size) {
      issues.push_back({where, fmt::format("expected {} values (as the group's first list), got {}",
                                           *first_size, vals.size())});
      ok = false;
      continue;
    }
    if (!first_size) first_size = vals.size();
    if (!path_ok) {
      ok = false;
      continue;
    }
    a.paths.push_back(it.key());
    cols.push_back(vals);
  }
  if (!ok || cols.empty()) return;
  std::map<std::vector<json>, size_t> first;  // each row's first index (n log n, as an axis)
  for (size_t i = 0; i < cols.front().size(); ++i) {
    std::vector<json> point;
    for (auto& c : cols) point.push_back(c[i]);
    const auto [at, fresh] = first.emplace(point, i);
    if (!fresh)
      issues.push_back({fmt::format("{}[{}]", gwhere, i),
                        fmt::format("repeats the values at [{}]; use sweep.repeats for repeated runs", at->second)});
    a.values.push_back(point);
  }
  // Overridden paths leave the group; a group emptied by overrides disappears.
  SweepAxis kept;
  kept.group = a.group;
  for (size_t p = 0; p < a.paths.size(); ++p) {
    if (is_overridden(overridden, a.paths[p])) continue;
    kept.paths.push_back(a.paths[p]);
  }
  if (kept.paths.size() == a.paths.size()) {
    s.axes.push_back(a);
  } else if (!kept.paths.empty()) {
    for (auto& point : a.values) {
      std::vector<json> kp;
      for (size_t p = 0; p < a.paths.size(); ++p)
        if (!is_overridden(overridden, a.paths[p])) kp.push_back(point[p]);
      kept.values.push_back(kp);
    }
    s.axes.push_back(kept);
  }
}

// The sweep block: axes, zip groups, repeats.
void read_sweep(const ojson& sw, const std::set<std::string>& overridden, Scenario& s,
                std::vector<ConfigIssue>& issues) {
  if (!sw.is_object()) return issues.push_back({"sweep", "expected an object {\"axes\", \"zip\", \"repeats\"}"});
  for (auto it = sw.begin(); it != sw.end(); ++it) {
    const std::string& k = it.key();
    if (k != "axes" && k != "zip" && k != "repeats") {
      std::string hint = k == "axis" ? "axes" : (k == "repeat" || k == "seeds") ? "repeats" : "";
      issues.push_back({"sweep." + k, "unknown key; expected axes, zip or repeats" +
                                          (hint.empty() ? "" : std::string("; did you mean \"sweep.") + hint +
                                                                   "\"?")});
    }
  }
  SweptPaths paths(issues);
  if (sw.contains("axes")) read_axes(sw["axes"], overridden, paths, s, issues);
  if (sw.contains("zip")) {
    const ojson& zip = sw["zip"];
    ojson groups = zip.is_object() ? ojson::array({zip}) : zip;
    if (!groups.is_array()) {
      issues.push_back({"sweep.zip", "expected a list of groups {\"path\": [values], \"path2\": [values]}"});
    } else {
      for (size_t g = 0; g < groups.size(); ++g) read_zip_group(groups[g], g, overridden, paths, s, issues);
    }
  }
  if (sw.contains("repeats")) {
    const ojson& r = sw["repeats"];
    if (!r.is_number_integer() || r.get<int64_t>() < 1 || r.get<int64_t>() > 10000)
      issues.push_back({"sweep.repeats", "expected an integer >= 1 and <= 10000, got " + bounded_dump(r)});
    else
      s.repeats = r.get<int64_t>();
  }
}

// One point of the grid (its axes' picks, last axis fastest): its configuration, swept values and id, and the place
// in the sweep of each swept path (for messages).
struct GridPoint {
  json cfg;
  json swept = json::object();
  std::string id;                                          // without ".r<repeat>"
  std::vector<std::pair<std::string, std::string>> where;  // path -> sweep location
};

GridPoint grid_point(const Scenario& s, const json& base, int64_t point, bool leaves_unique) {
  std::vector<size_t> pick(s.axes.size());
  int64_t rest = point;
  for (size_t ai = s.axes.size(); ai-- > 0;) {
    pick[ai] = static_cast<size_t>(rest % static_cast<int64_t>(s.axes[ai].values.size()));
    rest /= static_cast<int64_t>(s.axes[ai].values.size());
  }
  GridPoint g{base, json::object(), s.name, {}};
  for (size_t ai = 0; ai < s.axes.size(); ++ai) {
    const auto& a = s.axes[ai];
    for (size_t p = 0; p < a.paths.size(); ++p) {
      const json& v = a.values[pick[ai]][p];
      // null: the field's default. A relative file path from the scenario's folder; the id keeps the value given.
      apply_value(g.cfg, a.paths[p], resolve_file_path(a.paths[p], v, scenario_folder(s.path)));
      g.swept[a.paths[p]] = v;
      g.id += "." + run_id_part(a.paths[p], v, leaves_unique);
      g.where.emplace_back(a.paths[p], a.group < 0
                                           ? fmt::format("sweep.axes[\"{}\"][{}]", a.paths[p], pick[ai])
                                           : fmt::format("sweep.zip[{}][\"{}\"][{}]", a.group, a.paths[p], pick[ai]));
    }
  }
  return g;
}

// What the expansion gathers besides the runs: the expanded runs' problems, each said once (on a swept path: named by
// its place in the sweep; elsewhere: one line naming the runs it comes from), and the notes.
class Expansion {
 public:
  Expansion(Scenario& s, std::vector<ConfigIssue>& issues, const std::set<std::string>& base_keys)
      : s_(s), issues_(issues), base_keys_(base_keys) {}

  // The problems of grid point g's run.
  void add(std::vector<ConfigIssue>& run_issues, const GridPoint& g) {
    for (auto& i : run_issues) {
      bool placed = false;  // on a swept path: named by its place in the sweep
      for (const auto& [path, loc] : g.where) {
        if (i.path == path) {
          i.path = loc;
          placed = true;
        } else if (i.path.rfind(path + "[", 0) == 0 || i.path.rfind(path + ".", 0) == 0) {
          // inside a swept value: model.layers[1] -> sweep.axes["model.layers"][1][1], data.storage.latency_us ->
          // sweep.axes["data.storage"][0].latency_us
          i.path = loc + i.path.substr(path.size());
          placed = true;
        }
      }
      std::string key = message_of(i);
      if (placed) {
        if (seen_issue_.insert(key).second) issues_.push_back(i);
      } else if (!base_keys_.count(key)) {
        name_run(i, key, g.id);  // from a swept value but on another path: named by the runs it comes from
      }
    }
  }

  // A problem on a path that is not swept, named by the runs (ids without ".r<repeat>") it comes from.
  void name_run(const ConfigIssue& i, const std::string& key, const std::string& run) {
    auto [it, fresh] = from_runs_.try_emplace(key, FromRuns{issues_.size(), i.message, {}});
    if (fresh) issues_.push_back(i);
    it->second.runs.push_back(run);
  }

  // cluster.ranks above the hardware profile's GPUs (allowed: docs/cost-model.md), per profile file.
  void note_gpus(const RunConfig& rc) {
    try {
      auto hw = load_hardware_profile(rc.cluster.hardware);
      const int64_t ranks = rc.cluster.ranks, g = hw->gpus_per_node;
      if (ranks <= g) return;
      if (hw->nodes > 1) {
        // A multi-node profile prices ceil(ranks / g) nodes across its inter-node level (collective_model.h,
        // spans_nodes): whole nodes up to its node count as they are, anything else said in a note.
        if (ranks % g != 0 || ranks > static_cast<int64_t>(hw->nodes) * g) partial_nodes_[hw->file].insert(ranks);
        multi_node_profiles_[hw->file] = hw;
        return;
      }
      over_gpus_[hw->file].insert(ranks);
      gpus_of_[hw->file] = {hw->name, hw->gpus_per_node};
    } catch (const std::exception&) {
      // validate_config reported it
    }
  }

  // A run that writes compression.measure_error true under kind "none".
  void note_measure_error(const std::string& id) { measure_error_none_.push_back(id); }

  // The runs named at their problems; the notes.
  void finish() {
    for (auto& [key, f] : from_runs_) {
      (void)key;
      std::string runs;
      const size_t shown = std::min<size_t>(f.runs.size(), 3);
      for (size_t r = 0; r < shown; ++r) runs += (r ? ", " : "") + f.runs[r];
      if (f.runs.size() > shown) runs += fmt::format(" and {} more", f.runs.size() - shown);
      issues_[f.at].message = f.message + fmt::format(" (sweep run{} {})", f.runs.size() == 1 ? "" : "s", runs);
    }
    const auto& me = measure_error_none_;
    if (!me.empty()) {
      std::string runs;
      for (size_t r = 0; r < me.size() && r < 3; ++r) runs += (r ? ", " : "") + me[r];
      if (me.size() > 3) runs += fmt::format(" and {} more", me.size() - 3);
      s_.notes.push_back({"compression.measure_error",
                          fmt::format("true has no effect while compression.kind is \"none\" (nothing is compressed, "
                                      "so no error is measured; run{} {}); accepted because true is its default",
                                      me.size() == 1 ? "" : "s", runs)});
    }
    if (!over_gpus_.empty()) s_.notes.push_back({"cluster.ranks", ranks_over_gpus_note(over_gpus_, gpus_of_)});
    for (const auto& [file, ranks] : partial_nodes_) {
      const HardwareProfile& hw = *multi_node_profiles_.at(file);
      std::vector<std::string> counts;
      for (int64_t r : ranks) {
        const int nodes = CollectiveModel::nodes_spanned(hw, static_cast<int>(r));
        counts.push_back(fmt::format("{} ({} node{})", r, nodes, nodes == 1 ? "" : "s"));
      }
      const int g = hw.gpus_per_node;
      s_.notes.push_back(
          {"cluster.ranks",
           fmt::format("{} {} not whole nodes within hardware profile \"{}\" ({}), {} nodes of {} GPUs: allowed, the "
                       "modeled clock prices the collectives on ceil(ranks / {}) nodes of {}, a partial last node at "
                       "the pace of a full one and nodes beyond the profile's {} as more of the same fabric "
                       "(docs/cost-model.md)",
                       and_list(counts), ranks.size() == 1 ? "is" : "are", hw.name, file, hw.nodes, g, g, g,
                       hw.nodes)});
    }
  }

 private:
  struct FromRuns {
    size_t at;                      // index in issues
    std::string message;            // without the runs
    std::vector<std::string> runs;  // run ids without the repeat suffix
  };
  Scenario& s_;
  std::vector<ConfigIssue>& issues_;
  const std::set<std::string>& base_keys_;  // the base's problems, reported once
  std::set<std::string> seen_issue_;
  std::map<std::string, FromRuns> from_runs_;
  std::map<std::string, std::set<int64_t>> over_gpus_;
  std::map<std::string, std::pair<std::string, int>> gpus_of_;  // file -> (name, gpus_per_node)
  // Multi-node profiles: the rank counts that are not whole nodes within the profile (partial or beyond its nodes).
  std::map<std::string, std::set<int64_t>> partial_nodes_;
  std::map<std::string, std::shared_ptr<const HardwareProfile>> multi_node_profiles_;  // file -> profile
  std::vector<std::string> measure_error_none_;
};

// Expansion: the grid product of the axes (last axis fastest), then repeats; every grid point's run validated.
void expand_runs(Scenario& s, const json& base, bool base_ok, const std::set<std::string>& base_keys,
                 const IdPattern* keep, const std::string& file, std::vector<ConfigIssue>& issues) {
  const int64_t kMaxRuns = 100000;
  double total_runs = static_cast<double>(s.repeats);
  for (const auto& a : s.axes) total_runs *= static_cast<double>(a.values.size());
  if (total_runs > static_cast<double>(kMaxRuns)) {
    issues.push_back({"sweep", fmt::format("{:.0f} runs is more than the limit of {}", total_runs, kMaxRuns)});
    throw ScenarioError(file, issues);
  }
  int64_t points = 1;
  for (const auto& a : s.axes) points *= static_cast<int64_t>(a.values.size());
  Expansion ex(s, issues, base_keys);
  const bool leaves_unique = swept_leaves_unique(s.axes);
  for (int64_t point = 0; point < points; ++point) {
    const GridPoint g = grid_point(s, base, point, leaves_unique);
    bool kept = keep == nullptr;  // the filter keeps one of this point's runs (its ids end in .r<repeat>)
    for (int64_t r = 0; !kept && r < s.repeats; ++r) kept = keep->search(g.id + ".r" + std::to_string(r));
    std::vector<ConfigIssue> run_issues;
    RunConfig rc = config_from_json(g.cfg, run_issues);
    if (!kept) run_issues.clear();  // never run: its problems are not this sweep's (it keeps its id and index)
    // compression.measure_error written as true (its default, so accepted: a resolved config copied from a report
    // carries it) under kind "none": worth a note, the run measures nothing.
    if (const json* c = g.cfg.is_object() && g.cfg.contains("compression") ? &g.cfg["compression"] : nullptr;
        c != nullptr && c->is_object() && c->value("measure_error", json()) == json(true) &&
        rc.compression.kind == "none" && kept)
      ex.note_measure_error(g.id);
    ex.add(run_issues, g);
    if (!run_issues.empty() || !base_ok) continue;
    if (rc.training.seed + s.repeats - 1 > 4294967295LL) {
      ConfigIssue i{"sweep.repeats", fmt::format("training.seed {} + {} repeats passes the largest seed 4294967295",
                                                 rc.training.seed, s.repeats)};
      if (!g.swept.contains("training.seed")) {
        issues.push_back(i);
        break;
      }
      ex.name_run(i, message_of(i), g.id);
      continue;
    }
    if (rc.cluster.ranks > 1 && kept) ex.note_gpus(rc);
    for (int64_t r = 0; r < s.repeats; ++r) {
      RunSpec spec;
      spec.id = g.id + ".r" + std::to_string(r);
      spec.repeat = r;
      spec.index = static_cast<int64_t>(s.runs.size());
      spec.swept = g.swept;
      spec.config = rc;
      spec.config.training.seed = rc.training.seed + r;
      s.runs.push_back(std::move(spec));
    }
  }
  ex.finish();
}

}  // namespace

Scenario load_scenario(const std::string& file, const std::vector<std::string>& overrides, const IdPattern* keep) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) throw ScenarioError(file, {{"", "is a folder, not a scenario file"}});
  std::string text;
  try {
    text = read_json_file_text(file);  // size-capped; devices, FIFOs and sockets refused
  } catch (const Error& e) {
    std::string what = e.what();
    if (what.rfind(file + ": ", 0) == 0) what = what.substr(file.size() + 2);
    throw ScenarioError(file, {{"", what}});
  }
  return parse_scenario(text, file, overrides, keep);
}

Scenario parse_scenario(const std::string& text, const std::string& file, const std::vector<std::string>& overrides,
                        const IdPattern* keep) {
  std::vector<ConfigIssue> issues;
  const ojson doc = parse_document(text, file, issues);
  Scenario s;
  s.path = file;
  s.raw = json::parse(doc.dump());
  s.sha256 = sha256_hex(text);
  s.overrides = overrides;
  json base = base_of(doc, file, issues);
  const std::set<std::string> overridden = apply_overrides(overrides, base, issues);
  if (doc.contains("sweep")) read_sweep(doc["sweep"], overridden, s, issues);

  // Base configuration: unknown keys, types and ranges, once (not per run).
  std::vector<ConfigIssue> base_issues;
  RunConfig base_cfg = config_from_json(base, base_issues);
  s.name = base_cfg.name;
  if (!base_issues.empty() && base.is_object() && !s.axes.empty()) {
    std::vector<ConfigIssue> unused;
    base_issues = base_issues_every_run_has(base, s.axes, std::move(base_issues), scenario_folder(s.path), unused);
    for (const ConfigIssue& i : unused)  // QA: a wrong value the sweep replaces was accepted without a word
      s.notes.push_back({i.path, "the base's value is not used (the sweep sets this field in every run); as a value "
                                 "it would be refused: " + i.message});
  }
  std::set<std::string> base_keys;  // the base's problems, reported once (runs that share them do not repeat them)
  for (const auto& i : base_issues) {
    base_keys.insert(message_of(i));
    issues.push_back(i);
    // A value that came from the command line, not the file, says so (the file is named at the head of the list).
    for (const std::string& o : overridden)
      if (i.path == o || i.path.rfind(o + ".", 0) == 0 || i.path.rfind(o + "[", 0) == 0) {
        issues.back().message += " (the value of --set " + o + ", not of the file)";
        break;
      }
  }
  // A bad base does not stop here: the runs' own problems (a swept value against the base) join the same list.
  if (!base_issues.empty() && !base.is_object()) throw ScenarioError(file, issues);
  expand_runs(s, base, base_issues.empty(), base_keys, keep, file, issues);
  std::set<std::string> ids;
  for (const auto& r : s.runs)
    if (!ids.insert(r.id).second) {
      issues.push_back({"sweep", "two runs would share the id \"" + r.id + "\" (swept values that print alike)"});
      break;
    }
  if (!issues.empty()) throw ScenarioError(file, issues);
  return s;
}

}  // namespace gs
