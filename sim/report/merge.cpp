// gradsweep merge (see merge.h): read and check every slice report, join their runs, copy their run files, write.
#include "sim/report/merge.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <utility>

#include "sim/core/json_io.h"
#include "sim/core/shard.h"
#include "sim/report/report.h"

namespace gs {
namespace fs = std::filesystem;

namespace {

// A slice's report read from disk, with what the merge needs of its header.
struct SliceReport {
  std::string path;  // its report.json
  std::string dir;   // the folder its run files are relative to
  json doc;
  int64_t index = 0, count = 0, sweep_runs = 0;
  std::vector<std::string> ids;  // shard.ids: the runs of its slice
};

// Lists up to `shown` of items, then "and N more".
std::string some_of(const std::vector<std::string>& items, size_t shown = 8) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < shown; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > shown) out += fmt::format(" and {} more", items.size() - shown);
  return out;
}

// The report.json files a source names: itself, the one in its folder, or those of its shard-K-of-N/ folders (by K).
std::vector<std::string> reports_of(const std::string& source) {
  std::error_code ec;
  if (fs::is_regular_file(source, ec)) return {source};
  if (!fs::is_directory(source, ec))
    throw Error(source +
                ": no such report file or folder (give a slice's report.json, its folder, or the folder of "
                "the slices' --out)");
  if (fs::exists(source + "/report.json", ec)) return {source + "/report.json"};
  static const std::regex kShardFolder("shard-([0-9]+)-of-([0-9]+)");
  std::vector<std::pair<std::pair<long long, long long>, std::string>> found;
  for (const auto& entry : fs::directory_iterator(source, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    std::error_code type_ec;
    if (!entry.is_directory(type_ec) || !std::regex_match(name, m, kShardFolder)) continue;
    if (!fs::exists(entry.path() / "report.json", type_ec)) continue;
    found.push_back({{std::stoll(m[2].str().substr(0, 12)), std::stoll(m[1].str().substr(0, 12))},
                     (entry.path() / "report.json").string()});
  }
  if (found.empty())
    throw Error(source +
                ": holds neither a report.json nor shard-K-of-N/ folders with one (the folders gradsweep "
                "run --shard K/N --out " +
                source + " writes)");
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

// The integer at doc[key] when it is one >= min, else a refusal naming path and JSON path.
int64_t integer_at(const json& obj, const char* key, int64_t min, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer() || it->get<int64_t>() < min)
    throw Error(fmt::format("{}.{}: expected an integer >= {}, got {}", where, key, min,
                            it == obj.end() ? std::string("nothing") : bounded_dump(*it)));
  return it->get<int64_t>();
}

// Reads one slice report and checks the fields the merge reads (types, the slice, its ids and runs).
SliceReport read_slice(const std::string& path) {
  SliceReport r;
  r.path = path;
  r.dir = fs::path(path).parent_path().string();
  if (r.dir.empty()) r.dir = ".";
  r.doc = read_json_file(path, kMaxReportFileBytes);  // "<path>: ..." for a file that cannot be read or parsed
  const json& d = r.doc;
  if (!d.is_object() || !d.contains("runs") || !d["runs"].is_array())
    throw Error(path + ": $: not a gradsweep report (expected an object with a runs list)");
  if (!d.value("schema_version", json()).is_number_integer() ||
      d["schema_version"].get<int64_t>() != kReportSchemaVersion)
    throw Error(fmt::format("{}: $.schema_version: expected {} (the report schema this gradsweep writes), got {}", path,
                            kReportSchemaVersion, bounded_dump(d.value("schema_version", json()))));
  if (!d.value("context", json()).is_object() || !d["context"].value("scenario_sha256", json()).is_string())
    throw Error(path + ": $.context.scenario_sha256: expected a string (which scenario file wrote the report)");
  if (!d.contains("shard") || !d["shard"].is_object())
    throw Error(path +
                ": $.shard: not a slice's report (no shard block): merge joins the reports of gradsweep run "
                "--shard K/N; a whole sweep's report is complete already");
  const json& sh = d["shard"];
  r.count = integer_at(sh, "count", 1, path + ": $.shard");
  r.index = integer_at(sh, "index", 1, path + ": $.shard");
  r.sweep_runs = integer_at(sh, "sweep_runs", 0, path + ": $.shard");
  if (r.index > r.count)
    throw Error(fmt::format("{}: $.shard.index: expected 1 to count = {}, got {}", path, r.count, r.index));
  if (!sh.value("ids", json()).is_array()) throw Error(path + ": $.shard.ids: expected a list of run ids");
  for (size_t i = 0; i < sh["ids"].size(); ++i) {
    const json& id = sh["ids"][i];
    if (!id.is_string())
      throw Error(fmt::format("{}: $.shard.ids[{}]: expected a string, got {}", path, i, bounded_dump(id)));
    if (shard_of(id.get<std::string>(), r.count) != r.index)
      throw Error(
          fmt::format("{}: $.shard.ids[{}]: run {} belongs to slice {} of {}, not {} (this report was not "
                      "sliced by this gradsweep's rule)",
                      path, i, id.get<std::string>(), shard_of(id.get<std::string>(), r.count), r.count, r.index));
    r.ids.push_back(id.get<std::string>());
  }
  const std::set<std::string> ids(r.ids.begin(), r.ids.end());
  for (size_t i = 0; i < d["runs"].size(); ++i) {
    const json& run = d["runs"][i];
    if (!run.is_object() || !run.value("id", json()).is_string() || !run.value("index", json()).is_number_integer())
      throw Error(fmt::format("{}: $.runs[{}]: expected a run with a string id and an integer index", path, i));
    if (ids.count(run["id"].get<std::string>()) == 0)
      throw Error(fmt::format("{}: $.runs[{}]: run {} is not one of its slice's runs ($.shard.ids)", path, i,
                              run["id"].get<std::string>()));
  }
  return r;
}

// Why report b is not a slice of the same sweep as report a (the fingerprints), or "".
std::string fingerprint_difference(const SliceReport& a, const SliceReport& b) {
  const json &ca = a.doc["context"], &cb = b.doc["context"];
  auto shown = [](const json& v) { return v.is_null() ? std::string("(none)") : bounded_dump(v, 70); };
  auto differs = [&](const std::string& what, const json& x, const json& y) {
    return x == y ? std::string()
                  : fmt::format("{} differs: {} in {}, {} in {}", what, shown(x), a.path, shown(y), b.path);
  };
  const json none;
  const json ta = a.doc.value("tool", json::object()), tb = b.doc.value("tool", json::object());
  const json sets_a = ca.value("overrides", json::array()), sets_b = cb.value("overrides", json::array());
  for (const std::string& d :
       {differs("the scenario file (context.scenario_sha256)", ca["scenario_sha256"], cb["scenario_sha256"]),
        ca.contains("overrides_sha256") && cb.contains("overrides_sha256")
            ? differs("the --set values (context.overrides)", sets_a, sets_b) +
                  (sets_a == sets_b ? differs("the --set values' bytes (context.overrides_sha256)",
                                              ca["overrides_sha256"], cb["overrides_sha256"])
                                    : std::string())
            : differs("the --set values (context.overrides)", sets_a, sets_b),
        differs("the gradsweep version (tool.version)", ta.value("version", none), tb.value("version", none)),
        differs("the gradsweep build (tool.git_commit)", ta.value("git_commit", none), tb.value("git_commit", none)),
        differs("N of --shard K/N (shard.count; merge the slices of one N)", json(a.count), json(b.count)),
        differs("the sweep's run count (shard.sweep_runs)", json(a.sweep_runs), json(b.sweep_runs))})
    if (!d.empty()) return d;
  return "";
}

// The first JSON path at which a and b differ ("" when equal), below `path`.
std::string first_difference(const json& a, const json& b, const std::string& path) {
  if (a == b) return "";
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (const auto& [k, v] : a.items()) keys.insert(k);
    for (const auto& [k, v] : b.items()) keys.insert(k);
    for (const auto& k : keys) {
      if (!a.contains(k) || !b.contains(k)) return path + "." + k;
      if (std::string d = first_difference(a[k], b[k], path + "." + k); !d.empty()) return d;
    }
  }
  if (a.is_array() && b.is_array() && a.size() == b.size())
    for (size_t i = 0; i < a.size(); ++i)
      if (std::string d = first_difference(a[i], b[i], fmt::format("{}[{}]", path, i)); !d.empty()) return d;
  return path;
}

// The run files a run's entry names, relative to its report's folder: timeline.file, weights.initial/final,
// batches.file, powersgd_q.file. A name that leaves the folder (absolute, or with "..") is refused.
std::vector<std::string> run_files_of(const json& run, const std::string& where) {
  std::vector<std::string> files;
  const std::pair<const char*, const char*> keys[] = {
      {"timeline", "file"}, {"weights", "initial"}, {"weights", "final"}, {"batches", "file"}, {"powersgd_q", "file"}};
  for (const auto& [block, key] : keys) {
    if (!run.contains(block) || !run[block].is_object() || !run[block].contains(key)) continue;
    const json& v = run[block][key];
    if (v.is_null()) continue;
    const std::string at = fmt::format("{}.{}.{}", where, block, key);
    if (!v.is_string() || v.get<std::string>().empty()) throw Error(at + ": expected a file name or null");
    const fs::path p(v.get<std::string>());
    bool up = false;
    for (const auto& part : p) up = up || part == "..";
    if (p.is_absolute() || up)
      throw Error(at + ": " + bounded_text(v.get<std::string>()) + ": expected a path inside the report's folder");
    files.push_back(p.lexically_normal().string());
  }
  return files;
}

// Holds a shared flock on each slice folder's .lock (where there is one) for the merge's lifetime, so that no sweep
// writes a slice while it is read; refuses a folder a sweep is writing now.
struct SourceLocks {
  std::vector<int> fds;
  ~SourceLocks() {
    for (const int fd : fds) ::close(fd);
  }
  void take(const std::string& dir) {
    const int fd = ::open((dir + "/.lock").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;  // no sweep ever locked it (a copied folder)
    fds.push_back(fd);
    if (::flock(fd, LOCK_SH | LOCK_NB) != 0)
      throw Error("a gradsweep is writing " + dir + " (its sweep is still running); merge once it has ended");
  }
};

// The merged report's folder's .lock, held (exclusively) while the merge writes there and removed when it ends, done
// or refused: a finished merged folder holds no lock file. One another process holds is never touched.
struct OutLock {
  int fd = -1;
  std::string path;
  ~OutLock() { remove_lock_file(fd, path); }
  void take(const std::string& dir) {
    path = dir + "/.lock";
    fd = lock_exclusive(path);
    if (fd == kLockHeld) throw Error("another gradsweep is writing " + dir + "; wait for it or choose another --out");
    if (fd < 0) throw ReportIoError("cannot write in " + dir + " (creating .lock: " + std::strerror(errno) + ")");
  }
};

// Reads every source's slice reports, checks that they are slices of one sweep, and takes their locks.
std::vector<SliceReport> read_slices(const std::vector<std::string>& sources, SourceLocks& locks) {
  if (sources.empty()) throw Error("merge: give the slice reports or their folders to merge");
  std::vector<SliceReport> slices;
  std::set<std::string> seen;
  for (const auto& source : sources)
    for (const auto& path : reports_of(source)) {
      std::error_code ec;
      const fs::path canonical = fs::weakly_canonical(path, ec);
      const std::string key = ec ? path : canonical.string();
      if (!seen.insert(key).second) continue;  // the same file named twice
      locks.take(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string());
      slices.push_back(read_slice(path));
      if (std::string d = fingerprint_difference(slices.front(), slices.back()); !d.empty())
        throw Error("merge: " + slices.back().path + " is not a slice of the same sweep as " + slices.front().path +
                    ": " + d);
    }
  return slices;
}

// The merged runs by id (the first report's entry where several have one), each with its report, and the duplicates.
struct JoinedRuns {
  std::map<std::string, std::pair<const json*, const SliceReport*>> by_id;
  size_t duplicates = 0;
};

JoinedRuns join_runs(const std::vector<SliceReport>& slices) {
  JoinedRuns j;
  std::map<int64_t, const SliceReport*> first_of_slice;
  for (const auto& s : slices) {
    auto [it, fresh] = first_of_slice.emplace(s.index, &s);
    if (!fresh && it->second->ids != s.ids)
      throw Error(fmt::format("merge: {} and {} are both slice {} of {} but list different runs ($.shard.ids)",
                              it->second->path, s.path, s.index, s.count));
    for (const auto& run : s.doc["runs"]) {
      const std::string id = run["id"].get<std::string>();
      auto [at, added] = j.by_id.emplace(id, std::make_pair(&run, &s));
      if (added) continue;
      const std::string diff = first_difference(without_measured(*at->second.first), without_measured(run), "$");
      if (!diff.empty())
        throw Error(
            fmt::format("merge: run {} is in {} and in {} with different results (first at {}, measured "
                        "times left out); keep one of them",
                        id, at->second.second->path, s.path, diff));
      ++j.duplicates;
    }
  }
  return j;
}

// Refuses missing slices or runs unless allowed (then records them in result).
void check_complete(const std::vector<SliceReport>& slices, const JoinedRuns& joined, bool allow_missing,
                    MergeResult& result) {
  std::map<int64_t, const SliceReport*> present;
  for (const auto& s : slices) present.emplace(s.index, &s);
  const int64_t n = slices.front().count;
  std::vector<std::string> problems;
  std::vector<std::string> absent;
  for (int64_t k = 1; k <= n; ++k)
    if (present.count(k) == 0) {
      result.missing_shards.push_back(k);
      absent.push_back(std::to_string(k));
    }
  if (!absent.empty())
    problems.push_back(
        fmt::format("slice{} {} of {} {} not among the sources (run them with gradsweep run SCENARIO "
                    "--shard K/{} and the same --out)",
                    absent.size() == 1 ? "" : "s", some_of(absent, 20), n, absent.size() == 1 ? "is" : "are", n));
  size_t listed = 0;
  for (const auto& [k, s] : present) {
    listed += s->ids.size();
    std::vector<std::string> lacking, stopped;  // not in any report; stopped by a signal (what --resume reruns)
    for (const auto& id : s->ids) {
      const auto it = joined.by_id.find(id);
      if (it == joined.by_id.end())
        lacking.push_back(id);
      else if (run_disposition(*it->second.first) == Disposition::kInterrupted)
        stopped.push_back(id);
    }
    if (lacking.empty() && stopped.empty()) continue;
    std::string what;
    if (!lacking.empty())
      what = fmt::format("lacks {} of its {} runs: {}", lacking.size(), s->ids.size(), some_of(lacking));
    if (!stopped.empty())
      what += fmt::format("{}{} of its {} runs {} interrupted: {}", what.empty() ? "" : "; ", stopped.size(),
                          s->ids.size(), stopped.size() == 1 ? "was" : "were", some_of(stopped));
    problems.push_back(
        fmt::format("slice {} of {} ({}) {} (finish it with gradsweep run SCENARIO --shard {}/{} "
                    "--resume and the same --out)",
                    k, n, s->path, what, k, n));
    result.missing.insert(result.missing.end(), lacking.begin(), lacking.end());
    result.interrupted.insert(result.interrupted.end(), stopped.begin(), stopped.end());
  }
  if (absent.empty() && listed != static_cast<size_t>(slices.front().sweep_runs))
    throw Error(fmt::format("merge: the {} slices list {} runs, but their sweep has {} (shard.sweep_runs)", n, listed,
                            slices.front().sweep_runs));
  if (problems.empty() || allow_missing) return;
  std::string text = "merge: the sweep is incomplete:";
  for (const auto& p : problems) text += "\n  " + p;
  throw Error(text +
              "\n  (--allow-missing writes the report without the missing runs, with the interrupted ones as "
              "they are, and lists both in its merged block)");
}

// Copies from/rel to to/rel through a temporary file in the same folder and a rename (an existing one is replaced).
void copy_run_file(const std::string& from, const std::string& to) {
  std::error_code ec;
  const fs::path dest(to);
  if (file_ops().mkdirs(dest.parent_path().string()) != 0)
    throw ReportIoError("cannot create the folder " + dest.parent_path().string() + ": " + std::strerror(errno));
  const std::string tmp = to + ".tmp." + std::to_string(::getpid());
  fs::copy_file(from, tmp, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(tmp, to, ec);
  if (ec) {
    std::error_code rm_ec;
    fs::remove(tmp, rm_ec);
    throw ReportIoError("cannot copy " + from + " to " + to + ": " + ec.message());
  }
}

}  // namespace

namespace {
// without_measured below the run's top level: the keys that hold measured times, wherever they are.
json strip_measured(const json& v) {
  if (v.is_array()) {
    json out = json::array();
    for (const auto& x : v) out.push_back(strip_measured(x));
    return out;
  }
  if (!v.is_object()) return v;
  json out = json::object();
  for (const auto& [k, x] : v.items()) {
    if (k == "wall_s" || k.find("measured") != std::string::npos || k == "model_error" || k == "samples_per_s" ||
        k == "available_bytes" || k == "compress_time" || k == "decompress_time" || k == "max_queue_depth")
      continue;
    out[k] = strip_measured(x);
  }
  return out;
}
}  // namespace

json without_measured(const json& run) {
  json out = strip_measured(run);
  // algbw and busbw are over the measured communicate phase where steps were measured (timing-only: modeled).
  const bool measured = run.is_object() && run.contains("timing") && run["timing"].is_object() &&
                        run["timing"].contains("measured") && !run["timing"]["measured"].is_null();
  if (measured && out.contains("communication") && out["communication"].is_object()) {
    out["communication"].erase("algbw_GBps");
    out["communication"].erase("busbw_GBps");
  }
  return out;
}

MergeResult merge_reports(const MergeRequest& req) {
  SourceLocks locks;
  const std::vector<SliceReport> slices = read_slices(req.sources, locks);
  MergeResult result;
  for (const auto& s : slices) result.reports.push_back(s.path);
  result.shard_count = slices.front().count;
  const JoinedRuns joined = join_runs(slices);
  check_complete(slices, joined, req.allow_missing, result);
  // The run files, checked before anything is written.
  std::vector<std::pair<std::string, std::string>> copies;  // (source file, relative name)
  std::vector<const json*> ordered;
  for (const auto& [id, entry] : joined.by_id) {
    ordered.push_back(entry.first);
    for (const auto& rel : run_files_of(*entry.first, entry.second->path + ": run " + id)) {
      const std::string from = entry.second->dir + "/" + rel;
      std::error_code ec;
      if (!fs::is_regular_file(from, ec))
        throw Error(fmt::format("{}: run {} names {}, which is not there ({})", entry.second->path, id, rel, from));
      copies.emplace_back(from, rel);
    }
  }
  std::stable_sort(ordered.begin(), ordered.end(), [](const json* a, const json* b) {
    return (*a)["index"].get<int64_t>() < (*b)["index"].get<int64_t>();
  });
  // The new folder: one writer at a time, and a report there is never replaced.
  if (file_ops().mkdirs(req.out_dir) != 0)
    throw ReportIoError("cannot create the report folder " + req.out_dir + ": " + std::strerror(errno));
  OutLock out_lock;
  out_lock.take(req.out_dir);
  for (const char* name : {"report.json", "runs.jsonl"}) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(req.out_dir + "/" + name, ec)))
      throw Error(req.out_dir + "/" + name +
                  " exists: merge writes a new report (a report is never replaced); "
                  "choose another --out or move it away");
  }
  for (const auto& [from, rel] : copies) copy_run_file(from, req.out_dir + "/" + rel);
  json doc = slices.front().doc;
  doc.erase("shard");
  json runs = json::array();
  for (const json* r : ordered) runs.push_back(*r);
  doc["runs"] = std::move(runs);
  doc["merged"] = {{"argv", req.argv},
                   {"reports", result.reports},
                   {"shard_count", result.shard_count},
                   {"missing_shards", result.missing_shards},
                   {"missing", result.missing},
                   {"interrupted", result.interrupted}};
  result.report_path = req.out_dir + "/report.json";
  write_file_atomic(result.report_path, doc.dump(1, ' ', false, json::error_handler_t::replace) + "\n");
  result.runs = ordered.size();
  result.duplicates = joined.duplicates;
  result.files = copies.size();
  return result;
}

}  // namespace gs
