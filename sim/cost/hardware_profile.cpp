// Reading hardware profiles (scenarios/hardware/*.json): every number is {"value": x, "source": "text"}; errors name
// the file, the JSON path and what was expected.
#include "sim/cost/hardware_profile.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/core/error.h"
#include "sim/core/json_io.h"

namespace gs {
namespace {

using json = nlohmann::json;

class Reader {
 public:
  Reader(const json& root, std::string file) : root_(root), file_(std::move(file)) {}

  // Records one problem; reading goes on so that every problem of the file is reported at once.
  // A field inside a section that is there but is not an object ("fabric": []) is one problem, at the section.
  void fail(const std::string& path, const std::string& expected, const json* got) const {
    for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1)) {
      const std::string section = path.substr(0, dot);
      const json* s = find(section);
      if (s == nullptr) break;
      if (!s->is_object()) {
        if (bad_sections_.insert(section).second)
          problems_.push_back(fmt::format("{}: {}: expected an object (a section of the profile, as in "
                                          "scenarios/hardware/h100-sxm-8.json), got {}",
                                          file_, section, bounded_dump(*s, 80)));
        return;
      }
    }
    const std::string g = got == nullptr ? "nothing" : bounded_dump(*got, 80);  // never the whole (deep) value
    problems_.push_back(fmt::format("{}: {}: expected {}, got {}", file_, path, expected, g));
  }
  const std::vector<std::string>& problems() const { return problems_; }
  const json* find(const std::string& path) const {
    const json* cur = &root_;
    std::stringstream ss(path);
    std::string key;
    while (std::getline(ss, key, '.')) {
      if (!cur->is_object() || !cur->contains(key)) return nullptr;
      cur = &(*cur)[key];
    }
    return cur;
  }
  // The string at path, or nullopt (problem recorded).
  std::optional<std::string> str(const std::string& path) const {
    used_.insert(path);
    const json* j = find(path);
    if (j == nullptr || !j->is_string()) {
      fail(path, "a string", j);
      return std::nullopt;
    }
    return j->get<std::string>();
  }
  // One of `allowed` (a string); anything else (absent, another type, another string) fails naming them all.
  std::optional<std::string> choice(const std::string& path, std::initializer_list<const char*> allowed) const {
    used_.insert(path);
    const json* j = find(path);
    std::string expected;
    for (const char* a : allowed) {
      if (j != nullptr && j->is_string() && *j == a) return j->get<std::string>();
      expected += fmt::format("{}\"{}\"", expected.empty() ? "" : " or ", a);
    }
    fail(path, expected, j);
    return std::nullopt;
  }
  // {"value": ..., "source": "..."}: the value (nullptr when absent), the source checked.
  // Missing, not an object, or without "value": says the whole format, `what` being the value's own expectation.
  const json* sourced(const std::string& path, const std::string& what) const {
    used_.insert(path);
    const json* j = find(path);
    if (j == nullptr || !j->is_object() || !j->contains("value")) {
      const std::string format = fmt::format("{{\"value\": <{}>, \"source\": \"<where it comes from>\"}}", what);
      if (j != nullptr && j->is_object())
        fail(path + ".value", what + " (the profile's numbers are " + format + ")", nullptr);
      else
        fail(path, format, j);
      return nullptr;
    }
    const json* s = find(path + ".source");
    if (s == nullptr || !s->is_string() || s->get<std::string>().empty())
      fail(path + ".source", "a non-empty string naming where the value comes from", s);
    return &(*j)["value"];
  }
  // Numbers: the value, or min when it is missing or bad (problem recorded; the profile is refused then).
  double number(const std::string& path, double min, double max) const {
    const std::string what = fmt::format("a number in [{}, {}]", min, max);
    const json* v = sourced(path, what);
    if (v == nullptr) return min;
    if (!v->is_number() || v->get<double>() < min || v->get<double>() > max) {
      fail(path + ".value", what, v);
      return min;
    }
    return v->get<double>();
  }
  int integer(const std::string& path, int min, int max) const {
    const std::string what = fmt::format("an integer in [{}, {}]", min, max);
    const json* v = sourced(path, what);
    if (v == nullptr) return min;
    if (!v->is_number_integer() || v->get<int64_t>() < min || v->get<int64_t>() > max) {
      fail(path + ".value", what, v);
      return min;
    }
    return v->get<int>();
  }
  std::optional<bool> boolean(const std::string& path) const {
    const json* v = sourced(path, "true or false");
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) {
      fail(path + ".value", "true or false", v);
      return std::nullopt;
    }
    return v->get<bool>();
  }
  // An optional number: `fallback` when the key is absent, else checked as number().
  double optional_number(const std::string& path, double min, double max, double fallback) const {
    used_.insert(path);
    if (find(path) == nullptr) return fallback;
    return number(path, min, max);
  }
  // A measured curve {"value": [[bytes, busbw_GBps], ...], "source": "..."}: at least two points, sizes > 0 and
  // strictly increasing, busbw > 0.
  BusbwCurve curve(const std::string& path) const {
    BusbwCurve c;
    const std::string what = "[[bytes, busbw_GBps], ...] (nccl-tests' size and busbw columns)";
    const json* v = sourced(path, what);
    if (v == nullptr) return c;
    if (!v->is_array() || v->size() < 2) {
      fail(path + ".value", "at least two points " + what, v);
      return c;
    }
    for (size_t i = 0; i < v->size(); ++i) {
      const json& pt = (*v)[i];
      const std::string at = fmt::format("{}.value[{}]", path, i);
      if (!pt.is_array() || pt.size() != 2 || !pt[0].is_number() || !pt[1].is_number() || pt[0].get<double>() <= 0 ||
          pt[1].get<double>() <= 0) {
        fail(at, "[bytes > 0, busbw_GBps > 0]", &pt);
        return BusbwCurve{};
      }
      if (!c.bytes.empty() && pt[0].get<double>() <= c.bytes.back()) {
        fail(at, fmt::format("a size above the previous point's {} bytes (sizes strictly increasing)", c.bytes.back()),
             &pt);
        return BusbwCurve{};
      }
      c.bytes.push_back(pt[0].get<double>());
      c.busbw_GBps.push_back(pt[1].get<double>());
    }
    if (const json* s = find(path + ".source"); s != nullptr && s->is_string()) c.source = s->get<std::string>();
    return c;
  }
  // Marks a section as known although none of its members may be read (an empty or mistyped section is not also
  // "no such key"); its members are still checked one by one.
  void known(const std::string& path) const { used_.insert(path + ".\x01"); }
  // A node-count-dependent NCCL constant {"value": [2 nodes, more than 2 nodes], "source": ...}, both > 0.
  std::array<double, 2> pair(const std::string& path) const {
    std::array<double, 2> out{};
    const std::string what = "[for 2 nodes, for more than 2 nodes] (NCCL's N2 and N4 columns), both > 0";
    const json* v = sourced(path, what);
    if (v == nullptr) return out;
    if (!v->is_array() || v->size() != 2) {
      fail(path + ".value", "two numbers " + what, v);
      return out;
    }
    for (size_t i = 0; i < 2; ++i) {
      if (!(*v)[i].is_number() || (*v)[i].get<double>() <= 0 || (*v)[i].get<double>() > 1e6)
        fail(fmt::format("{}.value[{}]", path, i), "a number in (0, 1e6]", &(*v)[i]);
      else
        out[i] = (*v)[i].get<double>();
    }
    return out;
  }
  std::array<double, kNcclProtoCount> triple(const std::string& path) const {
    std::array<double, kNcclProtoCount> out{};
    const json* v = sourced(path, "[LL, LL128, Simple] in microseconds");
    if (v == nullptr) return out;
    if (!v->is_array() || v->size() != kNcclProtoCount) {
      fail(path + ".value", "three numbers [LL, LL128, Simple] in microseconds", v);
      return out;
    }
    for (size_t i = 0; i < kNcclProtoCount; ++i) {
      if (!(*v)[i].is_number() || (*v)[i].get<double>() < 0)
        fail(fmt::format("{}.value[{}]", path, i), "a number >= 0 (microseconds)", &(*v)[i]);
      else
        out[i] = (*v)[i].get<double>();
    }
    return out;
  }

  // Refuses keys the profile format does not have (a misspelt key would otherwise be ignored silently): every key
  // must lead to a field read above, and a sourced number holds only "value" and "source".
  void check_unknown_keys() const { check_unknown_keys(root_, ""); }

 private:
  void check_unknown_keys(const json& node, const std::string& path) const {
    if (!node.is_object()) return;
    if (used_.count(path) != 0) {
      for (const auto& item : node.items())
        if (item.key() != "value" && item.key() != "source")
          fail(path + "." + item.key(), "no such key (a profile number holds \"value\" and \"source\")",
               &item.value());
      return;
    }
    for (const auto& item : node.items()) {
      const std::string child = path.empty() ? item.key() : path + "." + item.key();
      auto it = used_.lower_bound(child);
      const bool known = it != used_.end() && (*it == child || it->rfind(child + ".", 0) == 0);
      if (!known) {
        fail(child, "no such key in a hardware profile (see scenarios/hardware/h100-sxm-8.json)", &item.value());
        continue;  // its insides are not looked at: the key itself is the problem
      }
      check_unknown_keys(item.value(), child);
    }
  }

  const json& root_;
  std::string file_;
  mutable std::set<std::string> used_;  // paths read so far
  mutable std::vector<std::string> problems_;
  mutable std::set<std::string> bad_sections_;  // sections already reported as not an object
};

bool is_path(const std::string& s) { return is_hardware_profile_path(s); }

// The file a profile's "base" names: a built-in name (as --hardware takes it) or a path relative to the folder of
// the profile that names it.
std::string base_file(const std::string& base, const std::string& file) {
  if (is_path(base)) {
    const std::filesystem::path b(base);
    return b.is_absolute() ? base : (std::filesystem::path(file).parent_path() / b).string();
  }
  const std::vector<std::string> names = hardware_profile_names();
  if (std::find(names.begin(), names.end(), base) == names.end()) {
    std::string choices;
    for (size_t i = 0; i < names.size(); ++i) choices += (i ? ", " : "") + names[i];
    throw ProfileError({fmt::format("{}: base: expected a built-in hardware profile ({}) or the path of a profile "
                                    "file, got unknown profile \"{}\"", file, choices, base)});
  }
  return hardware_dir() + "/" + base + ".json";
}

// A sourced number ({"value": ..., "source": ...}) is replaced whole; other objects are merged key by key.
void override_into(json& into, const json& over) {
  for (const auto& item : over.items()) {
    json& slot = into[item.key()];
    if (item.value().is_object() && !item.value().contains("value") && slot.is_object())
      override_into(slot, item.value());
    else
      slot = item.value();
  }
}

// A profile with "base": the base profile's JSON (itself a complete profile without "base", checked on its own) with
// this file's keys over it; the base's measured curves ("collectives") are dropped when this file's gpus_per_node
// differs from the base's (they were measured on the base's GPU count). A profile without "base" is returned as is.
json with_base(const json& root, const std::string& file) {
  if (!root.contains("base")) return root;
  const json& base = root["base"];
  if (!base.is_string() || base.get<std::string>().empty())
    throw ProfileError({fmt::format("{}: base: expected the name of a built-in hardware profile or a profile file's "
                                    "path, got {}", file, bounded_dump(base, 80))});
  const std::string name = base.get<std::string>(), from = base_file(name, file);
  std::error_code ec;
  if (std::filesystem::equivalent(from, file, ec))
    throw ProfileError({fmt::format("{}: base: expected another profile, got \"{}\": this file itself (a cycle)",
                                    file, name)});
  json parent;
  try {
    parent = parse_json_text(read_json_file_text(from), from);
  } catch (const Error& e) {
    throw ProfileError(
        {fmt::format("{}: base: expected a readable profile file, got \"{}\": {}", file, name, e.what())});
  }
  if (parent.is_object() && parent.contains("base"))
    throw ProfileError({fmt::format("{}: base: expected a profile without a base of its own, got \"{}\" ({}), which "
                                    "is derived from {} (chains of bases are not followed)",
                                    file, name, from, bounded_dump(parent["base"], 80))});
  parse_hardware_profile(parent.dump(), from);  // the base's own problems, named in its file
  json merged = parent;
  auto value_of = [](const json& j) { return j.is_object() && j.contains("value") ? j["value"] : json(); };
  if (root.contains("gpus_per_node") && value_of(root["gpus_per_node"]) != value_of(parent["gpus_per_node"]))
    merged.erase("collectives");
  json over = root;
  over.erase("base");
  override_into(merged, over);
  return merged;
}

// The multi-node fields: "nodes" (optional, 1) and, when nodes > 1, the "internode" section (hierarchical.h).
void read_internode(const Reader& r, HardwareProfile& p) {
  if (r.find("nodes") != nullptr) p.nodes = r.integer("nodes", 1, 4096);
  const bool has = r.find("internode") != nullptr;
  if (!has) {
    if (p.nodes > 1)
      r.fail("internode", "an object {\"kind\", \"nic_Gbps\", \"nics_per_node\", \"achievable_fraction\", "
             "\"latency_us\", \"hw_lat_us\", \"nccl\"} (nodes > 1; as in scenarios/hardware/h100-sxm-8x4-ib.json)",
             nullptr);
    return;
  }
  r.known("internode");
  if (p.nodes <= 1)  // one node: the section would price nothing (it used to be ignored without a word)
    r.fail("nodes", "a whole number above 1 (\"internode\" is given: nodes of gpus_per_node GPUs joined by it; "
           "remove \"internode\" for one node)", r.find("nodes"));
  if (auto kind = r.choice("internode.kind", {"ib", "roce"})) p.internode_kind = *kind;
  p.nic_Gbps = r.number("internode.nic_Gbps", 1e-3, 1e6);
  p.nics_per_node = r.integer("internode.nics_per_node", 1, 1024);
  p.nic_achievable_fraction = r.number("internode.achievable_fraction", 1e-6, 1.0);
  p.internode_latency_us = r.number("internode.latency_us", 0.0, 1e6);
  p.net_hw_lat_us[static_cast<size_t>(NcclAlgo::kTree)] = r.triple("internode.hw_lat_us.tree");
  p.net_hw_lat_us[static_cast<size_t>(NcclAlgo::kRing)] = r.triple("internode.hw_lat_us.ring");
  // NVLSTree (NVLS inside each node, a tree across them) exists only with NVLink SHARP: its NET latency is required
  // there and refused elsewhere.
  const std::string nvls_tree = "internode.hw_lat_us.nvls_tree";
  if (p.nvls) {
    p.net_hw_lat_us[static_cast<size_t>(NcclAlgo::kNvls)] = r.triple(nvls_tree);
  } else if (r.find(nvls_tree) != nullptr) {
    r.triple(nvls_tree);  // read, so that it is not also reported as an unknown key
    r.fail(nvls_tree, "no nvls_tree latency: fabric.nvls is false (no NVLSTree)", r.find(nvls_tree));
  }
  r.known("internode.nccl");
  p.internode_ll_max_bw_GBps = r.pair("internode.nccl.ll_max_bw_GBps");
  p.internode_per_channel_max_ring_ll128_GBps = r.pair("internode.nccl.per_channel_max_ring_ll128_GBps");
  p.internode_per_channel_max_tree_GBps = r.pair("internode.nccl.per_channel_max_tree_GBps");
  p.internode_per_channel_max_tree_ll128_GBps = r.pair("internode.nccl.per_channel_max_tree_ll128_GBps");
  p.net_overhead_us = r.number("internode.nccl.net_overhead_us", 0.0, 1e3);
  p.nvls_tree_efficiency = r.optional_number("internode.nvls_tree_efficiency", 1e-3, 1.0, 1.0);
  p.pipeline_window_MB = r.optional_number("internode.pipeline_window_MB", 0.0, 1e6, 0.0);
}

}  // namespace

ProfileError::ProfileError(std::vector<std::string> problems)
    : Error([&] {
        std::string s;
        for (size_t i = 0; i < problems.size(); ++i) s += (i ? "\n" : "") + problems[i];
        return s;
      }()),
      problems_(std::move(problems)) {}

std::string hardware_dir() {
  if (const char* env = std::getenv("GRADSWEEP_HARDWARE_DIR"); env != nullptr && *env != '\0') return env;
  if (std::filesystem::is_directory("scenarios/hardware")) return "scenarios/hardware";
  return std::string(GRADSWEEP_SOURCE_DIR) + "/scenarios/hardware";
}

std::vector<std::string> hardware_profile_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(hardware_dir(), ec)) {
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Precision precision_from_name(const std::string& name) {
  for (size_t i = 0; i < kPrecisionCount; ++i)
    if (name == kPrecisionNames[i]) return static_cast<Precision>(i);
  throw Error(fmt::format("unknown precision \"{}\"; expected fp32, tf32, bf16, fp16 or fp8", name));
}

HardwareProfile parse_hardware_profile(const std::string& text, const std::string& file) {
  const json text_root = parse_json_text(text, file);  // depth-limited: a deep file cannot overflow the stack
  if (!text_root.is_object()) throw Error(fmt::format("{}: expected a JSON object (a hardware profile)", file));
  const json root = with_base(text_root, file);
  Reader r(root, file);
  HardwareProfile p;
  p.file = file;
  p.name = r.str("name").value_or("");
  p.description = r.str("description").value_or("");
  p.gpu = r.str("gpu").value_or("");
  if (auto arch = r.str("arch")) {
    p.arch = *arch;
    if (p.arch != "hopper" && p.arch != "ampere") r.fail("arch", "\"hopper\" or \"ampere\"", r.find("arch"));
  }
  p.gpus_per_node = r.integer("gpus_per_node", 1, 1024);
  for (size_t i = 0; i < kPrecisionCount; ++i)
    p.peak_tflops[i] = r.number(std::string("compute.peak_tflops.") + kPrecisionNames[i], 1e-6, 1e9);
  for (size_t i = 0; i < kPrecisionCount; ++i)
    p.gemm_efficiency[i] = r.number(std::string("compute.gemm_efficiency.") + kPrecisionNames[i], 1e-6, 1.0);
  p.gemm_half_gflop = r.number("compute.gemm_half_gflop", 0.0, 1e9);
  p.gemm_half_intensity = r.number("compute.gemm_half_intensity", 0.0, 1e9);
  p.attention_efficiency = r.number("compute.attention_efficiency", 1e-6, 1.0);
  p.hbm_TBps = r.number("compute.hbm_TBps", 1e-6, 1e6);
  p.hbm_achievable_fraction = r.number("compute.hbm_achievable_fraction", 1e-6, 1.0);
  p.sustained_fraction = r.number("compute.sustained_fraction", 1e-6, 1.0);
  p.launch_overhead_us = r.number("compute.launch_overhead_us", 0.0, 1e6);
  std::optional<std::string> fabric = r.str("fabric.kind");
  if (fabric && *fabric != "nvlink" && *fabric != "pcie") {
    r.fail("fabric.kind", "\"nvlink\" or \"pcie\"", r.find("fabric.kind"));
    fabric.reset();
  }
  p.fabric = fabric.value_or("");
  p.link_GBps_per_direction = r.number("fabric.link_GBps_per_direction", 1e-6, 1e6);
  p.nccl_links = r.integer("fabric.nccl_links", 1, 1024);
  p.nccl_link_bw_GBps = r.number("fabric.nccl_link_bw_GBps", 1e-6, 1e6);
  p.channels = r.integer("fabric.channels", 1, 64);
  const std::optional<bool> nvls = r.boolean("fabric.nvls");
  p.nvls = nvls.value_or(false);
  if (nvls && fabric && *nvls && *fabric != "nvlink")  // depends on fabric.kind: checked only when it was read
    r.fail("fabric.nvls", "false: NVLink SHARP needs an NVLink fabric", r.find("fabric.nvls"));
  const char* algos[] = {"tree", "ring", "nvls"};
  for (size_t a = 0; a < kNcclAlgoCount; ++a) {
    p.base_lat_us[a] = r.triple(std::string("nccl.base_lat_us.") + algos[a]);
    p.hw_lat_us[a] = r.triple(std::string("nccl.hw_lat_us.") + algos[a]);
  }
  p.ll_max_bw_GBps = r.number("nccl.ll_max_bw_GBps", 1e-6, 1e6);
  p.per_channel_max_ring_ll128_GBps = r.number("nccl.per_channel_max_ring_ll128_GBps", 1e-6, 1e6);
  p.per_channel_max_tree_GBps = r.number("nccl.per_channel_max_tree_GBps", 1e-6, 1e6);
  p.per_channel_max_tree_ll128_GBps = r.number("nccl.per_channel_max_tree_ll128_GBps", 1e-6, 1e6);
  p.ll128 = r.boolean("nccl.ll128").value_or(false);
  p.p2p_latency_us = r.number("nccl.p2p_latency_us", 0.0, 1e6);
  p.latency_scale = r.optional_number("nccl.latency_scale", 0.0, 1e3, 1.0);
  for (size_t c = 0; c < kProfileCollectiveCount; ++c)
    p.launch_us[c] = r.optional_number(std::string("nccl.launch_us.") + kProfileCollectiveNames[c], 0.0, 1e6, 0.0);
  if (const json* cs = r.find("collectives"); cs != nullptr) {
    r.known("collectives");
    if (!cs->is_object()) {
      r.fail("collectives", "an object {\"all_reduce\": {\"default\": <curve>, \"ring\": ...}, ...}", cs);
    } else {
      for (size_t c = 0; c < kProfileCollectiveCount; ++c) {
        const std::string base = std::string("collectives.") + kProfileCollectiveNames[c];
        const json* kind = r.find(base);
        if (kind == nullptr) continue;
        r.known(base);
        if (!kind->is_object()) {
          r.fail(base, "an object of curves by algorithm (default, ring, tree, nvls)", kind);
          continue;
        }
        for (size_t a = 0; a < kCurveSlotCount; ++a) {
          const std::string path = base + "." + kCurveSlotNames[a];
          if (r.find(path) == nullptr) continue;
          if (a == static_cast<size_t>(NcclAlgo::kNvls) && nvls && !*nvls)
            r.fail(path, "no nvls curve: fabric.nvls is false", r.find(path));
          p.curves[c][a] = r.curve(path);
        }
      }
    }
  }
  p.memory_capacity_GiB = r.number("memory.capacity_GiB", 1e-6, 1e9);
  p.memory_usable_fraction = r.number("memory.usable_fraction", 1e-6, 1.0);
  read_internode(r, p);
  r.check_unknown_keys();
  if (!r.problems().empty()) throw ProfileError(r.problems());
  return p;
}

bool is_hardware_profile_path(const std::string& s) {
  return s.find('/') != std::string::npos || (s.size() > 5 && s.compare(s.size() - 5, 5, ".json") == 0);
}

std::shared_ptr<const HardwareProfile> load_hardware_profile(const std::string& name_or_path) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const HardwareProfile>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(name_or_path);
  if (it != cache.end()) return it->second;
  std::string file;
  if (is_path(name_or_path)) {
    file = name_or_path;
  } else {
    std::vector<std::string> names = hardware_profile_names();
    if (std::find(names.begin(), names.end(), name_or_path) == names.end()) {
      std::string choices;
      for (size_t i = 0; i < names.size(); ++i) choices += (i ? ", " : "") + names[i];
      throw Error(fmt::format("unknown hardware profile \"{}\"; choices: {} (from {}), or the path of a profile file",
                              name_or_path, choices.empty() ? "none found" : choices, hardware_dir()));
    }
    file = hardware_dir() + "/" + name_or_path + ".json";
  }
  // Size-capped; a folder, device or FIFO is refused by name.
  auto p = std::make_shared<const HardwareProfile>(parse_hardware_profile(read_json_file_text(file), file));
  cache[name_or_path] = p;
  return p;
}

}  // namespace gs
