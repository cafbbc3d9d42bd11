// Storage profiles, the loader's read time and the prefetch recurrence of storage_model.h.
#include "sim/cost/storage_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/core/json_io.h"
#include "sim/cost/hardware_profile.h"

namespace gs {
namespace {

using json = nlohmann::json;

struct Key {
  const char* key;
  double min, max;
  const char* doc;
};
constexpr Key kKeys[] = {
    {"bandwidth_GBps", 1e-9, 1e6, "GB/s per node"},
    {"latency_us", 0.0, 1e9, "microseconds per request"},
    {"concurrency", 1.0, 1e6, "requests in flight per loader"},
};

std::string short_dump(const json& j) { return bounded_dump(j, 60); }

// Reads the three numbers of an object; `sourced` requires {"value", "source"} for each (profile files). Every
// problem is collected (ProfileError), each "<where><path>: expected ..., got ...": where is "data.storage" for an
// object given in the scenario ("data.storage.bandwidth_GBps: ..."), the file for a profile file ("<file>:
// bandwidth_GBps: ...").
StorageProfile parse(const json& j, const std::string& where, bool sourced) {
  std::vector<std::string> problems;
  auto bad = [&](const std::string& key, const std::string& expected, const json* got) {
    const std::string path = key.empty() ? key : (sourced ? ": " + key : "." + key);
    problems.push_back(fmt::format("{}{}: expected {}, got {}", where, path, expected,
                                   got ? short_dump(*got) : "nothing"));
  };
  if (!j.is_object()) {
    bad("", "an object {\"bandwidth_GBps\", \"latency_us\", \"concurrency\"}", &j);
    throw ProfileError(problems);
  }
  StorageProfile p;
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = (sourced && (it.key() == "name" || it.key() == "description"));
    for (const Key& k : kKeys) known = known || it.key() == k.key;
    if (!known) bad(it.key(), "no such key (bandwidth_GBps, latency_us, concurrency)", &it.value());
  }
  double* out[] = {&p.bandwidth_GBps, &p.latency_us, &p.concurrency};
  for (size_t i = 0; i < 3; ++i) {
    const Key& k = kKeys[i];
    const std::string path = k.key;
    // What the format expects: a profile file {"value": <number>, "source": "<text>"} for every number; an object in
    // the scenario a plain number (the sourced form is accepted there too).
    const std::string number = fmt::format("a number in [{}, {}] ({})", k.min, k.max, k.doc);
    const std::string expected =
        sourced ? fmt::format("{{\"value\": <{}>, \"source\": \"<where it comes from>\"}}", number) : number;
    if (!j.contains(k.key)) {
      bad(path, expected, nullptr);
      continue;
    }
    const json* v = &j[k.key];
    std::string value_path = path;
    if (v->is_object()) {
      for (auto it = v->begin(); it != v->end(); ++it)
        if (it.key() != "value" && it.key() != "source")
          bad(path + "." + it.key(), "no such key (a profile number holds \"value\" and \"source\")", &it.value());
      const json* s = v->contains("source") ? &(*v)["source"] : nullptr;
      if (s == nullptr || !s->is_string() || s->get<std::string>().empty())
        bad(path + ".source", "a non-empty string naming where the value comes from", s);
      value_path = path + ".value";
      if (!v->contains("value")) {
        bad(value_path, number, nullptr);
        continue;
      }
      v = &(*v)["value"];
    } else if (sourced) {
      bad(path, expected, v);
      continue;
    }
    if (!v->is_number() || !(v->get<double>() >= k.min && v->get<double>() <= k.max)) {
      bad(value_path, number, v);
      continue;
    }
    *out[i] = v->get<double>();
  }
  if (!problems.empty()) throw ProfileError(problems);
  return p;
}

}  // namespace

std::string storage_dir() { return hardware_dir() + "/storage"; }

std::vector<std::string> storage_profile_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(storage_dir(), ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

StorageProfile load_storage_profile(const json& spec) {
  if (spec.is_object()) {
    StorageProfile p = parse(spec, "data.storage", false);
    p.name = "custom";
    return p;
  }
  if (!spec.is_string()) {
    throw Error(fmt::format("data.storage: expected a profile name or an object {{\"bandwidth_GBps\", "
                            "\"latency_us\", \"concurrency\"}}, got {}", short_dump(spec)));
  }
  const std::string name = spec.get<std::string>();
  static std::mutex mu;
  static std::map<std::string, StorageProfile> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  const std::vector<std::string> names = storage_profile_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string choices;
    for (size_t i = 0; i < names.size(); ++i) choices += (i ? ", " : "") + names[i];
    throw Error(fmt::format("data.storage: unknown storage profile \"{}\"; choices: {} (from {}), or an object "
                            "{{\"bandwidth_GBps\", \"latency_us\", \"concurrency\"}}",
                            name, choices.empty() ? "none found" : choices, storage_dir()));
  }
  const std::string file = storage_dir() + "/" + name + ".json";
  const json j = read_json_file(file);  // size-capped, depth-limited, errors name the file
  StorageProfile p = parse(j, file, true);
  p.name = name;
  p.file = file;
  cache[name] = p;
  return p;
}

double storage_read_s(const StorageProfile& p, double requests, double bytes, double readers, double window) {
  if (requests <= 0) return 0.0;
  const double in_flight = std::max(1.0, std::min(p.concurrency, window));
  const double share_Bps = p.bandwidth_GBps * 1e9 / std::max(1.0, readers);
  return requests * p.latency_us * 1e-6 / in_flight + bytes / share_Bps;
}

PrefetchModel::PrefetchModel(int ranks, int64_t depth) : depth_(std::max<int64_t>(0, depth)) {
  ranks_.resize(static_cast<size_t>(ranks));
  for (auto& r : ranks_) r.taken_s.assign(static_cast<size_t>(std::max<int64_t>(1, depth_)), 0.0);
}

double PrefetchModel::stall_s(int rank, double fetch_s) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  double begin = r.start_s;  // depth 0: read at step start
  if (depth_ > 0) {
    const double freed = r.taken_s[static_cast<size_t>(r.step % depth_)];  // taken_{i-depth} (0 before step depth)
    begin = std::max(r.done_s, freed);
  }
  const double done = begin + fetch_s;
  const double stall = std::max(0.0, done - r.start_s);
  r.begin_s = begin;
  r.done_s = done;
  if (depth_ > 0) r.taken_s[static_cast<size_t>(r.step % depth_)] = r.start_s + stall;
  return stall;
}

void PrefetchModel::end_step(int rank, double step_s) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  r.start_s += step_s;
  ++r.step;
}

}  // namespace gs
