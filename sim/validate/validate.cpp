// Validation of a run configuration above the registries: config_from_json (the leaf's reading, sim/config/
// config_read.h, then the cross-field rules), validate_config's rules, the size limits and the structural checks that
// build the model and the dataset, and the backend's questions (sim/runtime/device.h). This layer sits above runtime
// because those checks need models, datasets, hardware and storage profiles and the device choice; config below it
// stays a leaf (docs/design.md, section 6).
#include "sim/validate/validate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "sim/config/config_read.h"
#include "sim/core/count_text.h"
#include "sim/core/error.h"
#include "sim/core/json_io.h"
#include "sim/cost/hardware_profile.h"
#include "sim/cost/storage_model.h"
#include "sim/model/dataset.h"
#include "sim/model/model.h"
#include "sim/runtime/device.h"
#include "sim/strategy/strategy.h"

namespace gs {
namespace {

// An exception from a model or dataset factory as an issue: "path: message" split, internal file:line and the
// "(expected ...)" tail of GS_EXPECT dropped.
ConfigIssue issue_from_exception(const std::string& what, const std::string& fallback_path) {
  std::string m = what;
  if (m.rfind("sim/", 0) == 0) {
    size_t colon = m.find(": ");
    if (colon != std::string::npos) m = m.substr(colon + 2);
  }
  size_t tail = m.rfind(" (expected ");
  if (tail != std::string::npos && m.back() == ')') m = m.substr(0, tail);
  size_t colon = m.find(": ");
  if (colon != std::string::npos) {
    std::string head = m.substr(0, colon);
    bool is_path = !head.empty() && head.find(' ') == std::string::npos &&
                   (head.find('.') != std::string::npos || head.find('[') != std::string::npos);
    if (is_path) return {head, m.substr(colon + 2)};
  }
  return {fallback_path, m};
}

// report.trace's limits: the model's parameters against report.trace_max_params (with the size a larger limit would
// cost), and the trace's estimated size in the report against kTraceMaxBytes.
void trace_size_issues(const RunConfig& c, const Model& model, const std::function<bool(const std::string&)>& clean,
                       std::vector<ConfigIssue>& issues) {
  const auto n = static_cast<double>(model.num_params());
  const bool steps_known = c.training.epochs <= 0 && clean("training.steps") && clean("cluster.ranks");
  const double numbers = (static_cast<double>(c.training.steps) + 1) * static_cast<double>(c.cluster.ranks) * n;
  const double mib = numbers * kTraceBytesPerNumber / 1048576.0;
  // The most steps a trace of this run can have within kTraceMaxBytes (the initial snapshot is one more).
  const double max_steps =
      std::floor(kTraceMaxBytes / kTraceBytesPerNumber / (static_cast<double>(c.cluster.ranks) * n)) - 1;
  if (n > static_cast<double>(c.report.trace_max_params)) {
    // The way on that passes: raising the limit alone, when the trace also fits the size limit; else fewer steps too.
    std::string hint;
    if (steps_known && numbers * kTraceBytesPerNumber <= kTraceMaxBytes)
      hint = fmt::format(" (report.trace_max_params {:.0f} takes it: a trace of about {:.0f} MiB of report for {} x "
                         "{})", n, mib, count_text(c.training.steps, "step"), count_text(c.cluster.ranks, "rank"));
    else if (steps_known && max_steps >= 1)
      hint = fmt::format(" (report.trace_max_params {:.0f} with training.steps at most {:.0f} takes it: the trace of "
                         "{} would be about {:.0f} MiB of report, more than the limit of {:.0f} MiB)", n,
                         max_steps, count_text(c.training.steps, "step"), mib, kTraceMaxBytes / 1048576);
    else if (steps_known)
      hint = fmt::format(" (one step of {} would already be more than the limit of {:.0f} MiB of report)",
                         count_text(c.cluster.ranks, "rank"), kTraceMaxBytes / 1048576);
    issues.push_back({"report.trace", fmt::format("trace is refused above {} parameters; this model has {:.0f}{}",
                                                  c.report.trace_max_params, n, hint)});
    return;
  }
  if (steps_known && numbers * kTraceBytesPerNumber > kTraceMaxBytes)
    issues.push_back({"report.trace", fmt::format("a trace of {} steps x {} ranks x {:.0f} parameters is about {:.0f} "
                                                  "MiB of report, more than the limit of {:.0f} MiB: at most {:.0f} "
                                                  "steps of this run",
                                                  c.training.steps, c.cluster.ranks, n, mib, kTraceMaxBytes / 1048576,
                                                  max_steps)});
}

// training.optimizer.uncompressed_tensors (1-bit Adam's non-freeze group, already a list of distinct strings): every
// name a tensor of the model's table (its name or its file name), each tensor once, and not all of them (nothing
// would be compressed).
void uncompressed_tensor_issues(const RunConfig& c, const Model& model, std::vector<ConfigIssue>& issues) {
  const json& names = c.training.optimizer.uncompressed_tensors;
  if (!names.is_array() || names.empty()) return;
  const std::string path = "training.optimizer.uncompressed_tensors";
  std::vector<bool> named(model.tensors().size(), false);
  std::string known;
  for (const TensorInfo& t : model.tensors())
    known += (known.empty() ? "" : ", ") + t.name + (t.file_name() == t.name ? "" : " (" + t.file_name() + ")");
  std::vector<size_t> first_entry(model.tensors().size(), 0);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string name = names[i].get<std::string>();
    bool found = false;
    for (size_t t = 0; t < model.tensors().size(); ++t) {
      if (model.tensors()[t].name != name && model.tensors()[t].file_name() != name) continue;
      found = true;
      if (named[t])  // its name and its file name are two strings for one tensor
        issues.push_back({fmt::format("{}[{}]", path, i),
                          fmt::format("\"{}\" is tensor {}, which entry [{}] already names: name each tensor once",
                                      name, model.tensors()[t].name, first_entry[t])});
      named[t] = true;
      first_entry[t] = i;
    }
    if (!found)
      issues.push_back({fmt::format("{}[{}]", path, i), fmt::format("model.kind \"{}\" has no tensor \"{}\"; its "
                                                                    "tensors: {}", c.model.kind, name, known)});
  }
  if (std::find(named.begin(), named.end(), false) == named.end())
    issues.push_back({path, "names every tensor of the model, so nothing would be compressed: leave at least one "
                            "out (or use training.optimizer.kind \"adam\")"});
}

// The size limits of a run: model construction, parameters (2^32 for a run with arithmetic), compression.k at most
// the parameters, report.trace at most kTraceMaxParams, the teacher's size, the steps given as epochs. Each is judged
// whenever its own inputs are well-typed and free of other problems (`clean(p)`: no mistyped field and no issue at
// path p or under the prefix p), so a problem elsewhere (a mistyped cluster.ranks, a failing schedule rule) does not
// hide them. Inputs: model.* (and cluster.ranks for quadratic curvatures per rank), training.mode, compression.k,
// report.trace; report.timeline with training.steps, sync.*; data.kind, data.teacher.*; training.epochs,
// cluster.ranks, training.accumulation_steps, data.batch_per_rank.
void size_limit_issues(const RunConfig& c, const std::function<bool(const std::string&)>& clean,
                       std::vector<ConfigIssue>& issues) {
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, msg}); };
  const bool arithmetic_known = clean("training.mode");
  const bool arithmetic = c.training.mode != "timing";
  if (clean("model.") && clean("model") && (c.model.kind != "quadratic" || clean("cluster.ranks"))) {
    try {
      auto model = make_model(c);
      if (arithmetic_known && static_cast<double>(model->num_params()) > kMaxParams && arithmetic)
        add("model.layers", fmt::format("{} parameters is more than the limit of {:.0f} (2^32) for a run with "
                                        "arithmetic", model->num_params(), kMaxParams));
      // k values per bucket: more than the whole model can never be kept (and each kept value also sends its index,
      // so k near the bucket size already costs more than the dense gradient).
      if (clean("compression.k") && c.compression.k > static_cast<int64_t>(model->num_params()))
        add("compression.k", fmt::format("at most the model's {} parameters, got {}", model->num_params(),
                                         c.compression.k));
      if (clean("report.trace") && clean("report.trace_max_params") && c.report.trace)
        trace_size_issues(c, *model, clean, issues);
      if (clean("training.optimizer.uncompressed_tensors") && clean("training.optimizer.kind"))
        uncompressed_tensor_issues(c, *model, issues);
      if (clean("report.timeline") && c.report.timeline && c.training.epochs <= 0 && clean("training.steps") &&
          clean("cluster.ranks") && clean("training.accumulation_steps") && clean("sync.") &&
          clean("compression.kind")) {
        const TimelineEstimate est = timeline_slices_per_step(c, *model);
        const double slices = est.per_step * static_cast<double>(c.training.steps);
        if (slices > kTimelineMaxSlices)
          add("report.timeline", fmt::format("the timeline would hold about {:.0f} slices (ranks x (2 x micro-batches "
                                             "+ {:.0f} x {:.0f} buckets + {:.0f}{}) per step), more than the limit "
                                             "of {:.0f}: at most {} of this run, or larger sync.bucket_mb",
                                             slices, est.per_bucket, est.buckets, est.others,
                                             est.gathered_layers > 0
                                                 ? fmt::format(" + 6 x {:.0f} layers x micro-batches",
                                                               est.gathered_layers)
                                                 : std::string(),
                                             kTimelineMaxSlices,
                                             count_text(std::floor(kTimelineMaxSlices / est.per_step), "step")));
      }
    } catch (const std::exception& e) {
      issues.push_back(issue_from_exception(e.what(), "model"));
    }
  }
  if (!arithmetic_known || !arithmetic) return;  // timing-only runs read no data
  // Absurd data settings for a run with arithmetic, refused before anything is built (the limits are far above
  // any real use and keep validation itself bounded in time and memory).
  const auto& d = c.data;
  if (d.kind == "teacher" && clean("data.kind") && clean("data.teacher.")) {
    const auto& t = d.teacher;
    const double weights = static_cast<double>(t.hidden) * static_cast<double>(t.in_dim + t.out_dim);
    const double eval_madds = static_cast<double>(t.eval_samples) * weights;
    if (weights > kMaxTeacherWeights)
      add("data.teacher.hidden", fmt::format("the teacher has {:.0f} weights (hidden x (in_dim + out_dim)), more "
                                             "than the limit of {:.0f}", weights, kMaxTeacherWeights));
    else if (eval_madds > kMaxTeacherEvalMadds)
      add("data.teacher.eval_samples", fmt::format("generating the evaluation set takes {:.3g} multiply-adds "
                                                   "(eval_samples x hidden x (in_dim + out_dim)), more than the "
                                                   "limit of {:.0e}", eval_madds, kMaxTeacherEvalMadds));
  }
  if (c.training.epochs > 0 && (d.kind == "teacher" || d.kind == "fashion_mnist") && clean("training.epochs") &&
      clean("data.kind") && clean("data.teacher.train_samples") && clean("cluster.ranks") &&
      clean("training.accumulation_steps") && clean("data.batch_per_rank")) {
    const double train = d.kind == "teacher" ? static_cast<double>(d.teacher.train_samples) : 60000.0;
    const double global = static_cast<double>(c.cluster.ranks) * static_cast<double>(c.training.accumulation_steps) *
                          static_cast<double>(d.batch_per_rank);
    const double steps = std::floor(c.training.epochs * std::floor(train / global));
    if (steps > kMaxSteps)
      add("training.epochs", fmt::format("{} epoch{} {:.0f} optimizer steps, more than the limit of {:.0f}",
                                         c.training.epochs, c.training.epochs == 1 ? " is" : "s are", steps,
                                         kMaxSteps));
  }
}

// clean(p) for size_limit_issues: true when no path among `taken` (mistyped fields, issue paths) is p, is under p
// (p ends with '.'), or indexes into p (p[...]).
std::function<bool(const std::string&)> clean_unless(std::vector<std::string> taken) {
  return [taken = std::move(taken)](const std::string& p) {
    for (const auto& t : taken) {
      if (t == p || (t.rfind(p, 0) == 0 && (p.back() == '.' || t[p.size()] == '[' || t[p.size()] == '.')))
        return false;
    }
    return true;
  };
}

// cluster.stragglers.factors in its object form, {"RANK": factor, ...} (RANK a rank index, negative from the end as
// in Python: "-1" is the last rank), becomes the list of cluster.ranks factors, the unnamed ranks 1, so one scenario
// can keep "the last rank is 1.5x slower" across a sweep of cluster.ranks. A key that is not an integer, out of
// [-N, N), naming a rank another key already names, or whose factor is not a number > 0 and < 1e6 (the list's range)
// is an issue at its path, quoting what the file says (not the list it would become).
void resolve_straggler_factors(RunConfig& c, std::vector<ConfigIssue>& issues) {
  json& f = c.cluster.stragglers.factors;
  if (!f.is_object()) return;
  const int64_t n = c.cluster.ranks;
  if (n < 1) return;  // cluster.ranks' own issue
  json list = json::array();
  for (int64_t r = 0; r < n; ++r) list.push_back(1.0);
  std::vector<std::string> named(static_cast<size_t>(n));
  bool ok = true;
  for (const auto& [key, value] : f.items()) {
    const std::string path = fmt::format("cluster.stragglers.factors[\"{}\"]", key);
    int64_t r = 0;
    size_t used = 0;
    try {
      r = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (key.empty() || used != key.size()) {
      issues.push_back({path, fmt::format("expected a rank index as the key (0 to {}, or -1 to -{} counting from the "
                                          "last rank), got \"{}\"", n - 1, n, key)});
      ok = false;
      continue;
    }
    const int64_t rank = r < 0 ? r + n : r;
    if (rank < 0 || rank >= n) {
      issues.push_back({path, fmt::format("rank {} is outside this run's {} (0 to {}, or -1 to -{} counting "
                                          "from the last rank)", r, count_text(n, "rank"), n - 1, n)});
      ok = false;
      continue;
    }
    if (!named[static_cast<size_t>(rank)].empty()) {
      issues.push_back({path, fmt::format("names rank {}, which key \"{}\" already names", rank,
                                          named[static_cast<size_t>(rank)])});
      ok = false;
      continue;
    }
    if (!value.is_number() || !(value.get<double>() > 0 && value.get<double>() < 1e6)) {  // NaN fails both
      issues.push_back({path, fmt::format("expected a compute slowdown factor, a number > 0 and < 1e6, got {}",
                                          bounded_dump(value))});
      ok = false;
      continue;
    }
    named[static_cast<size_t>(rank)] = key;
    list[static_cast<size_t>(rank)] = value;
  }
  if (ok) f = std::move(list);
}

// The cross-field issues (pitfall aliases and validate_config without the structural checks) of a configuration
// with no type or range error.
std::vector<ConfigIssue> cross_field_issues(const json& j) {
  std::vector<ConfigIssue> out;
  RunConfig c;
  read_fields(j, registry_kinds(), c, out);
  if (!out.empty()) return out;
  resolve_straggler_factors(c, out);
  if (!out.empty()) return out;
  apply_pitfall_alias(j, c, out);
  if (!out.empty()) return out;
  validate_config(c, out, /*structural_checks=*/false);
  return out;
}

// The cross-field issues of j that do not depend on the fields in `bad` (mistyped or out of range in j): those that
// are found whatever value each bad field takes among candidate_values (one field varied at a time, the others at
// their default). An issue on a bad field itself is left out (its own error is reported). When no rule fails and no
// bad field feeds the structural checks (model, data, ranks, steps, compression, precision, report), those run too.
std::vector<ConfigIssue> cross_field_issues_despite(const json& j, const std::vector<std::string>& bad) {
  if (!j.is_object()) return {};
  std::vector<const FieldInfo*> fields;
  for (const auto& path : bad)
    for (const auto& f : config_fields())
      if (f.path == path && std::find(fields.begin(), fields.end(), &f) == fields.end()) fields.push_back(&f);
  auto set = [](json& doc, const std::string& path, const json& v) {
    // Sections on the way that are no object (reported by find_unknown) become objects.
    for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1)) {
      std::string section = "/" + path.substr(0, dot);
      std::replace(section.begin(), section.end(), '.', '/');
      const json::json_pointer sp(section);
      if (doc.contains(sp) && !doc[sp].is_object()) doc[sp] = json::object();
    }
    std::string ptr = "/" + path;
    std::replace(ptr.begin(), ptr.end(), '.', '/');
    doc[json::json_pointer(ptr)] = v;
  };
  json base = j;
  for (const FieldInfo* f : fields) set(base, f->path, f->default_value);
  auto key = [](const ConfigIssue& i) { return i.path + "\n" + i.message; };
  std::vector<ConfigIssue> kept;
  std::vector<ConfigIssue> at_default = cross_field_issues(base);
  // The size limits whose own inputs are neither mistyped nor part of a kept problem (size_limit_issues).
  auto with_size_limits = [&](std::vector<ConfigIssue> out) {
    std::vector<ConfigIssue> read_issues;
    RunConfig c;
    read_fields(base, registry_kinds(), c, read_issues);
    if (!read_issues.empty()) return out;
    std::vector<std::string> taken = bad;
    for (const auto& i : out) taken.push_back(i.path);
    size_limit_issues(c, clean_unless(std::move(taken)), out);
    return out;
  };
  if (at_default.empty()) {
    // No rule across fields fails: the structural checks (model and dataset construction, which run only on a config
    // whose rules hold) still can, unless a bad field is one of their inputs.
    static const char* const kStructuralInputs[] = {"model.", "data.", "cluster.ranks", "training.steps",
                                                    "training.epochs", "training.accumulation_steps",
                                                    "training.mode", "compression.", "precision.", "report."};
    bool touches = false;
    for (const FieldInfo* f : fields)
      for (const char* in : kStructuralInputs) touches = touches || f->path.rfind(in, 0) == 0;
    if (touches) return with_size_limits({});
    std::vector<ConfigIssue> out;
    RunConfig c;
    read_fields(base, registry_kinds(), c, out);
    if (out.empty()) resolve_straggler_factors(c, out);
    if (out.empty()) apply_pitfall_alias(base, c, out);
    if (out.empty()) validate_config(c, out);
    return out;
  }
  for (auto& i : at_default) {
    bool on_bad = false;
    for (const FieldInfo* f : fields)
      on_bad = on_bad || i.path == f->path || i.path.rfind(f->path + "[", 0) == 0;
    if (!on_bad) kept.push_back(std::move(i));
  }
  for (const FieldInfo* f : fields) {
    for (const json& v : candidate_values(*f)) {
      if (kept.empty()) return with_size_limits({});
      if (v == f->default_value) continue;
      json variant = base;
      set(variant, f->path, v);
      std::set<std::string> found;
      for (const auto& i : cross_field_issues(variant)) found.insert(key(i));
      kept.erase(std::remove_if(kept.begin(), kept.end(), [&](const ConfigIssue& i) { return !found.count(key(i)); }),
                 kept.end());
    }
  }
  return with_size_limits(std::move(kept));
}

// The rules of the files exchanged with PyTorch (model.init.from, report.save_weights, report.save_batches;
// docs/parity.md): what they apply to and the size of the batches file.
void interop_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, msg}); };
  const bool timing = c.training.mode == "timing";
  if (!c.model.init_from.empty() && (!c.model.initial_weights.is_null() || !c.model.initial_bias.is_null()))
    add("model.init.from", "give the initial values once: a file (model.init.from) or model.initial_weights / "
                           "initial_bias, not both");
  if (timing && c.report.save_weights != "none")
    add("report.save_weights", "timing-only runs hold no parameters to save: use \"none\"");
  if (!c.report.save_batches) return;
  if (timing) return add("report.save_batches", "timing-only runs draw no batches: use false");
  const auto& d = c.data;
  if (d.kind != "fashion_mnist" && d.kind != "teacher")
    return add("report.save_batches", "the indices are of an indexed training set (data.kind fashion_mnist or "
                                      "teacher); data.kind \"" + d.kind + "\" has none" +
                                      (d.kind == "inline" ? " (its micro-batches are in the configuration: rank r's "
                                                            "step t uses data.ranks[r][(t K + k) mod its count])"
                                                          : ""));
  if (c.sync.kind == "parameter_server" && c.sync.staleness != 0)
    return add("report.save_batches", "SSP and asynchronous workers take different numbers of steps, so there is "
                                      "no [steps, ranks, ...] array of them: use sync.staleness 0 (BSP) or false");
  double steps = static_cast<double>(c.training.steps);
  const double global = static_cast<double>(c.cluster.ranks) * static_cast<double>(c.training.accumulation_steps) *
                        static_cast<double>(d.batch_per_rank);
  if (c.training.epochs > 0) {
    const double train = d.kind == "teacher" ? static_cast<double>(d.teacher.train_samples) : 60000.0;
    steps = std::max(1.0, std::floor(c.training.epochs * std::floor(train / global)));
  }
  if (steps * global > kSaveBatchesMaxIndices)
    add("report.save_batches", fmt::format("the file would hold {:.0f} indices (steps x ranks x accumulation_steps x "
                                           "batch_per_rank, {:.0f} MiB of int32), more than the limit of {:.0f} "
                                           "({:.0f} MiB): at most {} of this run",
                                           steps * global, steps * global * 4 / 1048576, kSaveBatchesMaxIndices,
                                           kSaveBatchesMaxIndices * 4 / 1048576,
                                           count_text(std::floor(kSaveBatchesMaxIndices / global), "step")));
}

// compression.error_feedback "momentum" and "ef21": what each placement needs (sim/compress/reduce.cpp).
void check_error_feedback(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  const std::string& ef = c.compression.error_feedback;
  if (ef != "momentum" && ef != "ef21") return;
  // q names the field in messages at other paths; at its own path the value alone (the path is printed before it).
  const std::string q = "compression.error_feedback \"" + ef + "\"", own = "\"" + ef + "\"";
  if (c.sync.kind != "allreduce")
    issues.push_back({"compression.error_feedback",
                      fmt::format("{} applies to sync.kind \"allreduce\" (it is \"{}\"{})", own, c.sync.kind,
                                  c.sync.kind == "parameter_server"
                                      ? "; a parameter server's pushes take \"gradient\" or \"none\""
                                      : "")});
  if (ef != "momentum") return;
  const std::string& k = c.compression.kind;
  if (k != "topk" && k != "randomk" && k != "threshold")
    issues.push_back({"compression.error_feedback",
                      fmt::format("{} is DGC's momentum correction of a sparsifier: it needs compression.kind "
                                  "\"topk\", \"randomk\" or \"threshold\" (it is \"{}\"; \"dgc\" has its own)", own, k)});
  const OptimizerConfig& o = c.training.optimizer;
  if (o.kind != "sgd")
    issues.push_back({"training.optimizer.kind",
                      fmt::format("{} moves SGD's momentum into each rank's velocity: it needs \"sgd\", got \"{}\"",
                                  q, o.kind)});
  else if (o.nesterov)
    issues.push_back({"training.optimizer.nesterov",
                      q + " runs heavy-ball momentum in each rank's velocity; Nesterov is not modeled there, got true"});
}

// The rule of c's kind of the kind field `path` (its registry entry's, registry_kinds()), if it has one.
void kind_issues(const std::string& path, const std::string& kind, const RunConfig& c,
                 std::vector<ConfigIssue>& issues) {
  for (const KindField& f : registry_kinds())
    if (f.path == path)
      for (const KindChoice& k : f.choices)
        if (k.name == kind && k.issues != nullptr) k.issues(c, issues);
}

// The run's own fields: its name, the schedule, the target.
void run_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, msg}); };
  {
    // The name is a folder name (reports/<name>) and the prefix of run ids.
    bool ok = !c.name.empty() && c.name.size() <= 100 && c.name[0] != '.' && c.name[0] != '-';
    for (char ch : c.name) ok = ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' ||
                                       ch == '.');
    if (!ok)
      add("name", fmt::format("expected 1 to 100 letters, digits, '_', '-' or '.' not starting with '.' or '-' "
                              "(it names the report folder), got {}", bounded_dump(json(c.name))));
  }
  if (c.training.schedule.kind == "warmup_cosine" && c.training.schedule.min_lr > c.training.optimizer.lr)
    add("training.schedule.min_lr", fmt::format("expected <= training.optimizer.lr ({}), got {}",
                                                c.training.optimizer.lr, c.training.schedule.min_lr));
  // A field some mode requires, left out (read_fields' *_given), is said to be required, not to be "0"; a 0 given is
  // quoted.
  const TargetConfig& target = c.training.target;
  if (target.metric == "eval_accuracy" && !target.value_given)
    add("training.target.value", "required by training.target.metric \"eval_accuracy\": expected the accuracy to "
                                 "reach, in (0, 1] (e.g. 0.8)");
  else if ((target.metric == "eval_loss" || target.metric == "train_loss") && !target.value_given)
    add("training.target.value",
        fmt::format("required by training.target.metric \"{}\": expected the loss to reach (the target is met at "
                    "{} <= value; e.g. 0.5)", target.metric, target.metric));
  else if (c.training.target.metric == "eval_accuracy" && !(c.training.target.value > 0 && c.training.target.value <= 1))
    add("training.target.value", fmt::format("an accuracy target is in (0, 1], got {}", c.training.target.value));
}

// What a timing-only run has not (epochs, a trace) and the files a run writes beside its report.
void timing_and_file_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, msg}); };
  const auto& d = c.data;
  const bool timing = c.training.mode == "timing";
  if (timing && c.training.epochs > 0)
    add("training.epochs", "timing-only runs have no data and no epochs: use training.steps");
  if (timing && c.report.trace)
    add("report.trace", "timing-only runs hold no parameters to trace: use false");
  interop_issues(c, issues);
  if (c.report.timeline) {
    // The file holds a slice per rank, phase and bucket of every step: bounded by the steps it may draw.
    double steps = static_cast<double>(c.training.steps);
    if (c.training.epochs > 0 && (d.kind == "teacher" || d.kind == "fashion_mnist")) {
      const double train = d.kind == "teacher" ? static_cast<double>(d.teacher.train_samples) : 60000.0;
      const double global = static_cast<double>(c.cluster.ranks) *
                            static_cast<double>(c.training.accumulation_steps) * static_cast<double>(d.batch_per_rank);
      steps = std::max(1.0, std::floor(c.training.epochs * std::floor(train / global)));
    }
    if (steps > static_cast<double>(kTimelineMaxSteps))
      add("report.timeline", fmt::format("a timeline draws runs of at most {} optimizer steps (its file grows with "
                                         "steps x ranks x buckets); this run has {:.0f}: use training.steps <= {}",
                                         kTimelineMaxSteps, steps, kTimelineMaxSteps));
  }
}

// training.pitfall: refused where the mistake has no effect or is not modeled (docs/pitfalls.md).
void pitfall_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, msg}); };
  const auto& d = c.data;
  const bool timing = c.training.mode == "timing";
  const std::string& p = c.training.pitfall;
  const std::string q = "\"" + p + "\"";
  const int64_t K = c.training.accumulation_steps;
  if ((p == "zero_grad_in_loop" || p == "mean_of_means") && timing)
    add("training.pitfall", q + " changes the gradient; timing-only runs compute none (use training.mode \"train\")");
  if ((p == "zero_grad_in_loop" || p == "mean_of_means") && c.sync.kind != "allreduce")
    add("training.pitfall", q + " is modeled for sync.kind \"allreduce\" only (the divisor it changes travels in "
                            "the all-reduce's control values; other strategies divide by the sample count), got \"" +
                            c.sync.kind + "\"");
  if (p == "zero_grad_in_loop" && K < 2)
    add("training.pitfall", q + " needs training.accumulation_steps >= 2 (with one micro-batch per step zeroing "
                            "inside the loop is the correct loop), got " + std::to_string(K));
  if (p == "mean_of_means") {
    if (d.kind != "inline")
      add("training.pitfall", q + " needs micro-batches of different sizes, which only data.kind \"inline\" gives "
                              "(the other kinds deal b samples to every micro-batch and drop an epoch's partial "
                              "global batch, so the mean of means is the sample-weighted mean), got \"" + d.kind +
                              "\"");
    if (c.precision.mode != "fp32")
      add("training.pitfall", q + " is modeled in fp32 only (the per-micro-batch 1/(K b_k) scaling is not "
                              "emulated in other formats), got precision.mode \"" + c.precision.mode + "\"");
  }
  if (p == "fp16_pure_unscaled" && (c.precision.mode != "fp16_pure" ||
                                    (c.precision.loss_scale != "none" && c.precision.loss_scale != "auto")))
    add("training.pitfall", q + " is precision.mode \"fp16_pure\" with precision.loss_scale \"none\", got \"" +
                            c.precision.mode + "\" with \"" + c.precision.loss_scale + "\"");
  if (p == "delay_allreduce" && c.sync.kind != "allreduce")
    add("training.pitfall", q + " is apex DDP's all-reduce after the whole backward: it needs sync.kind "
                            "\"allreduce\", got \"" + c.sync.kind + "\"");
  else if (p == "delay_allreduce" && c.sync.overlap)
    add("training.pitfall", q + " is sync.overlap false, got true");
}

// Compression under a strategy that takes none (zero's and the parameter server's limits are their own rules),
// error feedback's placements, the asynchronous staleness.
void sync_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, msg}); };
  const SyncConfig& sy = c.sync;
  if (c.compression.kind != "none" && sy.kind != "allreduce" && sy.kind != "parameter_server" && sy.kind != "zero")
    add("compression.kind", fmt::format("compression applies to sync.kind \"allreduce\" and \"parameter_server\" "
                                        "(it is \"{}\")", sy.kind));
  check_error_feedback(c, issues);
  if (sy.staleness == kStalenessInf && sy.kind != "parameter_server")
    add("sync.staleness", fmt::format("expected an integer >= 0 for sync.kind \"{}\": \"inf\" (fully "
                                      "asynchronous) applies to sync.kind \"parameter_server\" only", sy.kind));
}

// The input pipeline: the storage profile (every problem of it, one issue each: a profile file's problems name the
// file) and the node cache.
void storage_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, msg}); };
  const auto& d = c.data;
  std::vector<std::string> problems;
  try {
    load_storage_profile(d.storage);
  } catch (const ProfileError& e) {
    problems = e.problems();
  } catch (const std::exception& e) {
    problems = {e.what()};
  }
  for (const std::string& msg : problems) {
    const std::string prefix = "data.storage";
    if (msg.rfind(prefix, 0) == 0 && msg.size() > prefix.size() &&
        (msg[prefix.size()] == '.' || msg[prefix.size()] == ':')) {
      const size_t colon = msg.find(": ");
      add(msg.substr(0, colon), msg.substr(colon + 2));
    } else {
      add("data.storage", msg);
    }
  }
  if (d.cache.policy != "none" && d.kind != "fashion_mnist" && d.kind != "teacher")
    add("data.cache.policy", "a cache needs an indexed training set (data.kind fashion_mnist or teacher), got \"" +
                                 d.kind + "\"");
  if (d.cache.policy != "none" && c.sync.kind == "parameter_server")
    add("data.cache.policy", "the node cache fills and evicts at a barrier per step, which assumes ranks step "
                             "together; sync.kind \"parameter_server\" ranks run free: use \"none\"");
  if (d.cache.capacity_fraction > 0 && d.cache.capacity_bytes > 0)
    add("data.cache.capacity_bytes", "give the capacity once: capacity_bytes or capacity_fraction, not both");
  if (d.loader_threads > 1 && d.kind != "fashion_mnist" && d.kind != "teacher")
    add("data.loader_threads", "parallel reads need an indexed training set (data.kind fashion_mnist or teacher), "
                               "got \"" + d.kind + "\": use 1");
  else if (d.loader_threads > 1 && d.cache.policy != "none")
    add("data.loader_threads", "the node cache \"" + d.cache.policy + "\" reads each micro-batch in its own order "
                               "on one thread: use 1, or data.cache.policy \"none\"");
}

// The machine and build decide (like data paths): "cuda" needs a usable GPU and the cuda backend; the hardware
// profile; the stragglers.
void backend_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, msg}); };
  if (auto why = backend_issue(c.cluster.backend)) add("cluster.backend", *why);
  // What the cuda backend does not run (choose_cuda_path, device.h); "auto" falls back to host for those instead.
  if (c.cluster.backend == "cuda")
    for (const ConfigIssue& i : choose_cuda_path(c).refusals) add(i.path, i.message);
  // The backend the run takes here ("cuda" counts even where validation refuses it above: one message is enough).
  const bool on_cuda = c.cluster.backend == "cuda" || choose_backend(c).backend == BackendKind::kCuda;
  auto check_profile = [&](const std::string& name) {
    try {
      load_hardware_profile(name);
    } catch (const ProfileError& e) {
      for (const std::string& p : e.problems()) add("cluster.hardware", p);  // "file: JSON path: expected ..." each
    } catch (const std::exception& e) {
      add("cluster.hardware", e.what());
    }
  };
  if (c.cluster.hardware == "detect") {
    // The profile of the GPU the run uses (resolve_hardware): there is none on the host backend.
    if (!on_cuda) {
      add("cluster.hardware", "\"detect\" takes the profile of the GPU a run uses, so it needs the cuda backend "
                              "(cluster.backend \"cuda\", or \"auto\" where a GPU is usable and the cuda backend "
                              "runs the configuration); this run is on host: name a profile from `gradsweep list`");
    } else if (!backend_issue("cuda")) {
      std::string resolved;
      try {
        resolved = resolve_hardware(c);
      } catch (const std::exception& e) {
        issues.push_back(issue_from_exception(e.what(), "cluster.hardware"));
      }
      if (!resolved.empty()) check_profile(resolved);
    }
  } else {
    check_profile(c.cluster.hardware);
    if (c.cluster.nccl_algo == "nvls") {
      try {
        if (!load_hardware_profile(c.cluster.hardware)->nvls)
          add("cluster.nccl_algo", fmt::format("nvls needs NVLink SHARP, and hardware profile \"{}\" has none "
                                               "(fabric.nvls false): ring or tree", c.cluster.hardware));
      } catch (const std::exception&) {
        // the profile's own problems are listed under cluster.hardware above
      }
    }
  }
  {
    const json& f = c.cluster.stragglers.factors;
    bool ok = f.is_null() || (f.is_array() && static_cast<int64_t>(f.size()) == c.cluster.ranks);
    if (ok && f.is_array())
      for (const auto& x : f) ok = ok && x.is_number() && x.get<double>() > 0 && x.get<double>() < 1e6;
    if (!ok)
      add("cluster.stragglers.factors", fmt::format("expected null, a list of {} > 0 and < 1e6 (one per "
                                                    "rank), or an object {{\"RANK\": factor}} naming some ranks "
                                                    "(the others 1; \"-1\" is the last rank), got {}",
                                                    count_text(c.cluster.ranks, "number"), bounded_dump(f)));
    if (c.cluster.stragglers.inject && !on_cuda && c.cluster.backend != "host")  // host: the kind rule says it
      add("cluster.stragglers.inject", "injecting real delays needs the cuda backend (cluster.backend \"cuda\", or "
                                       "\"auto\" where a GPU is usable and the cuda backend runs the configuration); "
                                       "the host backend models stragglers on the modeled clock only: use false");
  }
}

// The dataset built once per distinct data setting (Fashion-MNIST is decoded once per process and cached), so
// shapes, sizes and files are checked before any run starts: its error ("" when built) and its dimensions.
struct CheckedData {
  std::string error;
  int64_t in_dim = 0, out_dim = 0;
};
CheckedData checked_dataset(const RunConfig& c) {
  const auto& d = c.data;
  static std::mutex mu;
  using Checked = CheckedData;
  static std::map<std::string, Checked> checked;
  json key = config_to_json(c)["data"];
  key["_"] = {c.cluster.ranks, c.training.accumulation_steps, c.model.loss, c.model.layers, c.training.epochs > 0};
  // CBOR, not dump(): a --set string that is not UTF-8 (a folder named so) is kept byte for byte and does not throw
  // (dump() throws type_error 316, which hid every other problem); two such paths stay two keys.
  const std::vector<std::uint8_t> cbor = json::to_cbor(key);
  const std::string cache_key(cbor.begin(), cbor.end());
  Checked result;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = checked.find(cache_key);
    const auto& t = d.teacher;
    const double teacher_weights = static_cast<double>(t.hidden) * static_cast<double>(t.in_dim + t.out_dim);
    const double global = static_cast<double>(c.cluster.ranks) * static_cast<double>(c.training.accumulation_steps) *
                          static_cast<double>(d.batch_per_rank);
    if (it != checked.end()) {
      result = it->second;
    } else if (d.kind == "teacher" &&
               (teacher_weights > 1e7 || teacher_weights * static_cast<double>(t.eval_samples) > 1e8)) {
      // Too large to build just to check it (validation stays fast and small): the constructor's checks here.
      result.in_dim = t.in_dim;
      result.out_dim = t.out_dim;
      if (t.task == "classification" && t.out_dim < 2)
        result.error = "data.teacher.out_dim: classification needs at least 2 classes";
      else if (global > static_cast<double>(t.train_samples))
        result.error = fmt::format("data.batch_per_rank: one global batch (ranks x accumulation_steps x "
                                   "batch_per_rank = {:.0f} samples) exceeds the training set ({} samples)",
                                   global, t.train_samples);
    } else {
      if (checked.size() >= 4096) checked.clear();  // bounded (the fuzzer validates millions of settings)
      try {
        auto ds = make_dataset(c);
        result.in_dim = ds->in_dim();
        result.out_dim = ds->out_dim();
        if (c.training.epochs > 0 && ds->steps_per_epoch() == 0)
          result.error = "training.epochs: the data has no epochs; use training.steps";
      } catch (const std::exception& e) {
        result.error = e.what();
        if (result.error.empty()) result.error = "cannot build the dataset";
      }
      checked[cache_key] = result;
    }
  }
  return result;
}

// Inline data against the model: every step has a sample, the model's widths fit the samples.
void inline_data_issues(const RunConfig& c, const CheckedData& result, std::vector<ConfigIssue>& issues) {
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, msg}); };
  const auto& d = c.data;
  const auto& m = c.model;
  const bool ce = m.loss == "cross_entropy";
  if (d.kind == "inline" && d.ranks.is_array()) {
    // A step needs at least one sample on some rank. Rank r's step t uses its micro-batches t*K .. t*K+K-1 (mod
    // its count), so the steps repeat with the least common multiple of the counts: check one period.
    std::vector<std::vector<size_t>> sizes;
    for (const auto& row : d.ranks) {
      std::vector<size_t> v;
      for (const auto& mb : row) v.push_back(mb.contains("y") ? mb["y"].size() : 0);
      sizes.push_back(v);
    }
    const int64_t K = c.training.accumulation_steps;
    int64_t period = 1;
    for (const auto& v : sizes)
      if (!v.empty()) period = std::min<int64_t>(std::lcm(period, static_cast<int64_t>(v.size())), 100000);
    // Samples in K consecutive micro-batches from position s of a rank's cyclic list, from its prefix sums in
    // O(1) (K can be 65536 and the period 100000).
    std::vector<std::vector<size_t>> prefix;
    for (const auto& v : sizes) {
      std::vector<size_t> p(v.size() + 1, 0);
      for (size_t i = 0; i < v.size(); ++i) p[i + 1] = p[i] + v[i];
      prefix.push_back(p);
    }
    for (int64_t t = 0; t < std::min(period, c.training.steps); ++t) {
      size_t n = 0;
      for (const auto& p : prefix) {
        const auto L = static_cast<int64_t>(p.size()) - 1;
        if (L <= 0) continue;
        const int64_t s = (t * K) % L, rem = K % L;
        n += static_cast<size_t>(K / L) * p.back();
        n += s + rem <= L ? p[static_cast<size_t>(s + rem)] - p[static_cast<size_t>(s)]
                          : (p.back() - p[static_cast<size_t>(s)]) + p[static_cast<size_t>(s + rem - L)];
      }
      if (n == 0) {
        add("data.ranks", fmt::format("step {} has no samples on any rank (its micro-batches are all empty)", t + 1));
        break;
      }
    }
  }
  if (d.kind == "inline" && m.kind != "quadratic" && m.layers.size() >= 2) {
    // Dimensions inferred from the inline samples must fit the model.
    if (result.in_dim != m.layers.front())
      add("model.layers[0]", fmt::format("inline samples have {} inputs, got {}", result.in_dim, m.layers.front()));
    if (ce && result.out_dim > m.layers.back())
      add("data.ranks", fmt::format("labels must be < {} (the model's classes, model.layers' last width); "
                                    "the data has labels up to {}", m.layers.back(), result.out_dim - 1));
    if (!ce && result.out_dim != m.layers.back())
      add("model.layers", fmt::format("inline targets have {} outputs, last width is {}", result.out_dim,
                                      m.layers.back()));
  }
}

// The structural checks of the model and of cheap datasets, by constructing them (their errors name the JSON path).
// Size limits (model, compression.k, report.trace, teacher, epochs): each judged when its own inputs have no problem,
// even when other rules failed (size_limit_issues). The dataset checks (building it: shapes, sizes, files) read
// data.*, model.*, cluster.ranks, training.steps, epochs, accumulation_steps and mode: they run whenever none of those
// has a problem, whatever else failed.
void structural_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  {
    std::vector<std::string> taken;
    for (const auto& i : issues) taken.push_back(i.path);
    size_limit_issues(c, clean_unless(std::move(taken)), issues);
  }
  std::vector<std::string> taken;
  for (const auto& i : issues) {
    if (i.path.empty()) return;  // a whole-config problem
    taken.push_back(i.path);
  }
  const auto clean = clean_unless(std::move(taken));
  for (const char* in : {"data.", "data", "model.", "model", "cluster.ranks", "training.steps", "training.epochs",
                         "training.accumulation_steps", "training.mode"})
    if (!clean(in)) return;
  if (c.training.mode == "timing") return;  // timing-only runs read no data
  const CheckedData result = checked_dataset(c);
  if (!result.error.empty()) return issues.push_back(issue_from_exception(result.error, "data"));
  inline_data_issues(c, result, issues);
}

}  // namespace

// The rules in the order of the scenario's sections; a kind's own rules (its registry entry's) where its section's
// come. The order of the issues is the order users read them in (tests compare some of them).
TimelineEstimate timeline_slices_per_step(const RunConfig& c, const Model& model) {
  // Per rank and step about 2 slices per micro-batch, per bucket its collective (and with compression its encode and
  // decode) and the others (phases, the loader, the measured phases); the buckets as make_buckets cuts the
  // model's tensors (a tensor larger than a bucket is a bucket of its own: GPT-2 XL's 6.2 GB in 25 MiB buckets are
  // 145, not 250).
  TimelineEstimate e;
  if (c.sync.kind != "independent")
    e.buckets = static_cast<double>(make_buckets(model.tensors(), static_cast<size_t>(c.sync.first_bucket_mb * 1048576.0),
                                                 static_cast<size_t>(c.sync.bucket_mb * 1048576.0))
                                        .size());
  e.per_bucket = c.compression.kind == "none" ? 1.0 : 3.0;
  // ZeRO stage 3: per micro-batch and layer with parameters, a gather before its forward and one before its
  // backward (unshard track), each with at most a wait and a split of its pass on the compute track.
  if (c.sync.kind == "zero" && c.sync.stage >= 3 && c.cluster.ranks > 1) {
    for (const LayerCost& l : model.layer_costs()) e.gathered_layers += l.param_end > l.param_begin ? 1.0 : 0.0;
    e.gathered_layers = std::max(1.0, e.gathered_layers);
  }
  // The others: communicate (exposed), compress (exposed chain work) and optimizer (3); a training run also its data
  // stall, the loader's batches (at most one per micro-batch) and its 8 measured phases.
  const double K = static_cast<double>(c.training.accumulation_steps);
  e.others = c.training.mode == "timing" ? 3.0 : 3.0 + 1.0 + K + 8.0;
  e.per_step = static_cast<double>(c.cluster.ranks) *
               (2.0 * K + e.per_bucket * e.buckets + e.others + 6.0 * e.gathered_layers * K);
  return e;
}

void validate_config(const RunConfig& c, std::vector<ConfigIssue>& issues, bool structural_checks) {
  run_issues(c, issues);
  kind_issues("model.kind", c.model.kind, c, issues);
  timing_and_file_issues(c, issues);
  kind_issues("compression.kind", c.compression.kind, c, issues);
  kind_issues("data.kind", c.data.kind, c, issues);
  if (c.training.target.metric == "eval_accuracy" && c.model.loss != "cross_entropy")
    issues.push_back({"training.target.metric", "eval_accuracy needs a classification model (model.loss "
                                                "\"cross_entropy\")"});
  pitfall_issues(c, issues);
  kind_issues("sync.kind", c.sync.kind, c, issues);
  sync_issues(c, issues);
  kind_issues("training.optimizer.kind", c.training.optimizer.kind, c, issues);
  storage_issues(c, issues);
  backend_issues(c, issues);
  if (structural_checks) structural_issues(c, issues);
}

RunConfig config_from_json(const json& j, std::vector<ConfigIssue>& issues) {
  RunConfig c;
  if (!j.is_object()) {
    issues.push_back({"", fmt::format("expected a JSON object, got {}", bounded_dump(j, 60))});
    return c;
  }
  const std::vector<std::string> bad = read_config(j, registry_kinds(), c, issues);
  if (!bad.empty()) {
    // Some fields are mistyped: report the cross-field problems that do not depend on them (see the header).
    for (auto& i : cross_field_issues_despite(j, bad)) issues.push_back(std::move(i));
    return c;
  }
  const size_t before = issues.size();
  resolve_straggler_factors(c, issues);
  if (issues.size() != before) return c;
  apply_pitfall_alias(j, c, issues);
  if (issues.size() == before) {
    validate_config(c, issues);
  } else {  // a pitfall alias was refused: the size limits whose inputs it does not name are still judged
    std::vector<std::string> taken;
    for (size_t i = before; i < issues.size(); ++i) taken.push_back(issues[i].path);
    size_limit_issues(c, clean_unless(std::move(taken)), issues);
  }
  return c;
}

}  // namespace gs
