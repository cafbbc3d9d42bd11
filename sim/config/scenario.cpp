// The scenario's leaf part: ScenarioError's message, run ids from the swept values, the expansion's description and
// the file's SHA-256. Loading a scenario (parse_scenario, load_scenario: syntax, sweep, overrides, expansion and the
// validation of every run) is above the registries, in sim/validate/scenario_load.cpp.
#include "sim/config/scenario.h"

#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <openssl/evp.h>

namespace gs {
namespace {

std::string message_of(const ConfigIssue& i) { return i.path.empty() ? i.message : i.path + ": " + i.message; }

std::string value_text(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string leaf_of(const std::string& path) {
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

}  // namespace

bool swept_leaves_unique(const std::vector<SweepAxis>& axes) {
  std::set<std::string> leaves;
  bool unique = true;
  for (const auto& a : axes)
    for (const auto& p : a.paths) unique &= leaves.insert(leaf_of(p)).second;
  return unique;
}

std::string run_id_part(const std::string& path, const json& v, bool leaves_unique) {
  return (leaves_unique ? leaf_of(path) : path) + "=" + value_text(v);
}


ScenarioError::ScenarioError(std::string file, std::vector<ConfigIssue> issues)
    : Error([&] {
        std::string s;
        for (size_t i = 0; i < issues.size(); ++i)
          s += (i ? "\n" : "") + file + ": " + message_of(issues[i]);
        return s;
      }()),
      file_(std::move(file)),
      issues_(std::move(issues)) {}

std::vector<std::string> run_id_parts(const Scenario& s, const RunSpec& r) {
  std::vector<std::string> parts = {s.name};
  const bool leaves_unique = swept_leaves_unique(s.axes);
  for (const auto& a : s.axes)
    for (const auto& p : a.paths) parts.push_back(run_id_part(p, r.swept.value(p, json()), leaves_unique));
  parts.push_back("r" + std::to_string(r.repeat));
  std::string joined;
  for (const auto& part : parts) joined += (joined.empty() ? "" : ".") + part;
  return joined == r.id ? parts : std::vector<std::string>{r.id};
}

std::vector<std::string> expansion_parts(const Scenario& s) {
  std::vector<std::string> parts = {fmt::format("{} run{} =", s.runs.size(), s.runs.size() == 1 ? "" : "s")};
  for (const auto& a : s.axes) {
    std::string names;
    for (size_t p = 0; p < a.paths.size(); ++p) names += (p ? ", " : "") + a.paths[p];
    parts.push_back(fmt::format("{}{} [{}]", parts.size() > 1 ? "x " : "", a.values.size(), names));
  }
  if (s.repeats > 1) parts.push_back(fmt::format("{}{} [repeats]", parts.size() > 1 ? "x " : "", s.repeats));
  else if (parts.size() == 1) parts.push_back("1 (no sweep)");
  return parts;
}

std::string describe_expansion(const Scenario& s) {
  std::string out;
  for (const auto& part : expansion_parts(s)) out += (out.empty() ? "" : " ") + part;
  return out;
}

// SHA-256 through OpenSSL's EVP digest API (FIPS 180-4); used for the scenario's fingerprint in reports.
std::string sha256_hex(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1 || len != 32)
    throw Error("SHA-256 of " + std::to_string(bytes.size()) + " bytes failed in OpenSSL (EVP_Digest)");
  static const char kHex[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 0xf];
  }
  return out;
}

}  // namespace gs
