// Report assembly and the atomic writer with its journal (see report.h and reports/README.md).
#include "sim/report/report.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "kernels/dense.h"
#include "sim/core/error.h"
#include "sim/core/json_io.h"
#include "sim/core/summary.h"
#include "sim/cost/ps_cost.h"
#include "sim/backend/cuda_probe.h"
#include "sim/runtime/device.h"

#include "git_info.h"  // generated in the build folder

#ifndef GRADSWEEP_VERSION
#define GRADSWEEP_VERSION "0.0.0"
#endif
#ifndef GRADSWEEP_BUILD_TYPE
#define GRADSWEEP_BUILD_TYPE ""
#endif

namespace gs {
namespace {

json num(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }
json num(const std::optional<double>& x) { return x ? num(*x) : json(nullptr); }

json summary_json(const std::vector<double>& seconds) {
  Summary s = summarize(seconds);
  return {{"count", s.count},          {"min_ms", s.min * 1e3},   {"p50_ms", s.p50 * 1e3},
          {"p95_ms", s.p95 * 1e3},     {"p99_ms", s.p99 * 1e3},   {"mean_ms", s.mean * 1e3},
          {"stdev_ms", s.stdev * 1e3}, {"max_ms", s.max * 1e3},   {"total_ms", s.total * 1e3}};
}

// {"all": summary over every rank's steps, "per_rank": [summary per rank]} of one quantity of steps[rank][step].
template <class Steps, class Get>
json phase_json(const Steps& steps, Get get) {
  std::vector<double> all;
  json per_rank = json::array();
  for (const auto& rank_steps : steps) {
    std::vector<double> v;
    v.reserve(rank_steps.size());
    for (const auto& st : rank_steps) v.push_back(get(st));
    all.insert(all.end(), v.begin(), v.end());
    per_rank.push_back(summary_json(v));
  }
  return {{"all", summary_json(all)}, {"per_rank", per_rank}};
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto c = line.find(':');
      if (c != std::string::npos) return line.substr(c + 2);
    }
  }
  return "unknown";
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

json tool_json() {
  // Commit and dirty flag of the source tree when the binary was built (cmake/git_info.cmake).
  std::string commit = GRADSWEEP_GIT_COMMIT;
  const int dirty = GRADSWEEP_GIT_DIRTY;
  json j;
  j["name"] = "gradsweep";
  j["version"] = GRADSWEEP_VERSION;
  j["git_commit"] = commit.empty() ? json(nullptr) : json(commit);
  j["git_dirty"] = dirty < 0 ? json(nullptr) : json(dirty == 1);
  j["build_type"] = GRADSWEEP_BUILD_TYPE;
#if defined(__clang__)
  j["compiler"] = fmt::format("Clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  j["compiler"] = fmt::format("GNU {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  j["compiler"] = "unknown";
#endif
  j["cuda_compiled"] = cuda_status().compiled;
  return j;
}

// SHA-256 of the --set values' bytes, each followed by a NUL: the lossless identity --resume compares (the report's
// "overrides" replace invalid UTF-8 by U+FFFD, so two different byte strings can read alike there).
static std::string overrides_sha256(const std::vector<std::string>& overrides) {
  std::string bytes;
  for (const auto& o : overrides) bytes += o + '\0';
  return sha256_hex(bytes);
}

json context_json(const Scenario& scenario, const std::vector<std::string>& argv) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  json c;
  c["date"] = utc_now();
  c["host"] = host;
  c["cpu"] = cpu_model();
  c["cores"] = std::thread::hardware_concurrency();
  c["memory_bytes"] = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
  c["argv"] = argv;
  c["scenario_path"] = scenario.path;
  c["scenario"] = scenario.raw;
  c["scenario_sha256"] = scenario.sha256;
  c["overrides"] = scenario.overrides;
  c["overrides_sha256"] = overrides_sha256(scenario.overrides);
  // CUDA and NCCL: versions in their own encodings (13000 = 13.0, 22809 = 2.28.9), null when unknown (no CUDA in
  // the build, no driver, no NCCL linked); `gpus` lists the usable devices ([] without one).
  const CudaProbe& p = cuda_status();
  auto version = [](int v) { return v > 0 ? json(v) : json(nullptr); };
  c["cuda"] = {{"compiled", p.compiled},
               {"device_count", p.device_count},
               {"usable", cuda_usable(p)},
               {"error", p.error},
               {"runtime_version", version(p.runtime_version)},
               {"runtime_header_version", version(p.runtime_header_version)},
               {"driver_version", version(p.driver_version)},
               {"nccl_version", version(p.nccl_version)},
               {"nccl_header_version", version(p.nccl_header_version)}};
  json gpus = json::array();
  for (const auto& d : p.devices)
    gpus.push_back({{"name", d.name},
                    {"compute_capability", d.compute_capability},
                    {"memory_bytes", d.memory_bytes},
                    {"multiprocessors", d.multiprocessors}});
  c["gpus"] = gpus;
  const BlasInfo blas = blas_info();
  c["blas"] = {{"config", blas.config}, {"core", blas.core}};
  return c;
}

std::optional<Disposition> run_disposition(const json& run) {
  const auto d = run.find("disposition");
  return d != run.end() && d->is_string() ? parse_disposition(d->get<std::string>()) : std::nullopt;
}

json run_stub_json(const RunSpec& spec, Disposition disposition, const std::string& message) {
  json j;
  j["id"] = spec.id;
  j["index"] = spec.index;
  j["repeat"] = spec.repeat;
  j["swept"] = spec.swept;
  j["config"] = config_to_json(spec.config);
  j["disposition"] = disposition_name(disposition);
  j["message"] = message.empty() ? json(nullptr) : json(message);
  j["steps_completed"] = 0;
  j["wall_s"] = 0.0;
  j["timing"] = {{"measured", nullptr}, {"modeled", nullptr}};
  j["throughput"] = {{"samples_per_s", nullptr}, {"modeled_samples_per_s", nullptr}};
  j["communication"] = {{"bytes_sent_per_rank_per_step", json::array()}, {"algbw_GBps", nullptr},
                        {"busbw_GBps", nullptr}};
  j["convergence"] = {{"series", json::array()},
                      {"final", {{"train_loss", nullptr}, {"eval_loss", nullptr}, {"eval_accuracy", nullptr}}}};
  j["time_to_target"] = nullptr;
  j["trace"] = nullptr;
  j["precision"] = nullptr;
  j["compression"] = nullptr;
  j["data"] = nullptr;
  return j;
}

// The run's input pipeline (reports/README.md, "data"): per rank, one entry per epoch (ranges of epochs once a run
// has more than kMaxDataEntries of them) with where samples came from and the data stall on both clocks.
static json data_json(const DataResult& d, const RunResult& r) {
  constexpr int64_t kMaxDataEntries = 200;
  // Ranks of free-running strategies (parameter server) take different numbers of steps: the longest sets the
  // epochs, and each rank's entries cover the steps it took.
  int64_t steps = 0;
  for (const auto& recs : d.steps) steps = std::max(steps, static_cast<int64_t>(recs.size()));
  const int64_t per_epoch = d.steps_per_epoch > 0 ? d.steps_per_epoch : std::max<int64_t>(1, steps);
  const int64_t epochs = (steps + per_epoch - 1) / per_epoch;
  const int64_t group = std::max<int64_t>(1, (epochs + kMaxDataEntries - 1) / kMaxDataEntries);
  auto ratio = [](double a, double b) { return b > 0 ? json(a / b) : json(nullptr); };
  json per_rank = json::array();
  DataCounts all;
  double all_stall_meas = 0, all_step_meas = 0, all_stall_mod = 0, all_step_mod = 0;
  for (size_t rank = 0; rank < d.steps.size(); ++rank) {
    json entries = json::array();
    const auto& recs = d.steps[rank];
    for (int64_t e0 = 0; e0 < epochs; e0 += group) {
      const int64_t e1 = std::min(epochs, e0 + group);
      const int64_t s0 = e0 * per_epoch, s1 = std::min(static_cast<int64_t>(recs.size()), e1 * per_epoch);
      if (s0 >= s1) break;  // this rank took fewer steps than the longest
      DataCounts c;
      double fetch = 0, stall_meas = 0, step_meas = 0, stall_mod = 0, step_mod = 0;
      for (int64_t s = s0; s < s1; ++s) {
        const auto i = static_cast<size_t>(s);
        c += recs[i].counts;
        fetch += recs[i].fetch_modeled_s;
        if (rank < r.steps.size() && i < r.steps[rank].size()) {
          stall_meas += r.steps[rank][i].phase_s[static_cast<size_t>(Phase::kData)];
          step_meas += r.steps[rank][i].step_s;
        }
        if (rank < r.modeled_steps.size() && i < r.modeled_steps[rank].size()) {
          stall_mod += r.modeled_steps[rank][i].phase_s[static_cast<size_t>(Phase::kData)];
          step_mod += r.modeled_steps[rank][i].step_s;
        }
      }
      all += c;
      all_stall_meas += stall_meas;
      all_step_meas += step_meas;
      all_stall_mod += stall_mod;
      all_step_mod += step_mod;
      entries.push_back({{"epoch", e0},
                         {"epoch_last", e1 - 1},
                         {"steps", s1 - s0},
                         {"samples", c.samples},
                         {"hits", c.hits},
                         {"hit_rate", ratio(static_cast<double>(c.hits), static_cast<double>(c.samples))},
                         {"peer_samples", c.peer_samples},
                         {"peer_rate", ratio(static_cast<double>(c.peer_samples), static_cast<double>(c.samples))},
                         {"storage_samples", c.storage_samples},
                         {"storage_bytes", c.storage_bytes},
                         {"peer_bytes", c.peer_bytes},
                         {"fetch_modeled_s", fetch},
                         {"stall_measured_s", stall_meas},
                         {"stall_modeled_s", stall_mod},
                         {"step_measured_s", step_meas},
                         {"step_modeled_s", step_mod},
                         {"stall_share_measured", ratio(stall_meas, step_meas)},
                         {"stall_share_modeled", ratio(stall_mod, step_mod)}});
    }
    per_rank.push_back({{"rank", rank}, {"epochs", entries}});
  }
  return {{"storage", d.storage},
          {"prefetch", d.prefetch},
          {"cache", {{"policy", d.cache_policy}, {"capacity_samples", d.cache_capacity_samples}}},
          {"ranks_per_node", d.ranks_per_node},
          {"steps_per_epoch", d.steps_per_epoch},
          {"max_queue_depth", d.max_queue_depth},
          {"totals",
           {{"samples", all.samples},
            {"hit_rate", ratio(static_cast<double>(all.hits), static_cast<double>(all.samples))},
            {"peer_rate", ratio(static_cast<double>(all.peer_samples), static_cast<double>(all.samples))},
            {"storage_bytes", all.storage_bytes},
            {"peer_bytes", all.peer_bytes},
            {"stall_measured_s", all_stall_meas},
            {"stall_modeled_s", all_stall_mod},
            {"stall_share_measured", ratio(all_stall_meas, all_step_meas)},
            {"stall_share_modeled", ratio(all_stall_mod, all_step_mod)}}},
          {"per_rank", per_rank}};
}

// The run's precision object (reports/README.md, "precision").
static json precision_json(const PrecisionResult& p) {
  constexpr size_t kMaxListed = 1000;  // skipped steps listed; the count is always complete
  json trajectory = json::array();
  for (const auto& [step, scale] : p.loss_scale_trajectory) trajectory.push_back({step, num(scale)});
  json skipped = json::array();
  for (size_t i = 0; i < p.skipped_steps.size() && i < kMaxListed; ++i) skipped.push_back(p.skipped_steps[i]);
  json first = json::array();
  for (const auto& f : p.first_nonfinite_step) first.push_back(f ? json(*f) : json(nullptr));
  const double values = static_cast<double>(p.grad_values);
  return {{"mode", p.mode},
          {"loss_scale", p.loss_scale},
          {"loss_scale_trajectory", trajectory},
          {"final_loss_scale", num(p.final_loss_scale)},
          {"skipped_steps", p.skipped_steps.size()},
          {"skipped_step_list", skipped},
          {"skipped_nonfinite_loss", p.skipped_nonfinite_loss},
          {"skipped_nonfinite_gradient", p.skipped_nonfinite_gradient},
          {"grad_values_rounded", p.grad_values},
          {"grad_underflow_fraction", p.grad_values > 0 ? json(static_cast<double>(p.grad_underflow) / values)
                                                        : json(nullptr)},
          {"grad_nonfinite_values", p.grad_nonfinite},
          {"first_nonfinite_step", first},
          {"averaged_grad_nonfinite_values", p.averaged_grad_nonfinite},
          {"first_nonfinite_averaged_step",
           p.first_nonfinite_averaged_step ? json(*p.first_nonfinite_averaged_step) : json(nullptr)},
          {"bytes_per_param", {{"weights_bytes", p.bytes.weights},
                               {"gradients_bytes", p.bytes.gradients},
                               {"optimizer_state_bytes", p.bytes.optimizer_state},
                               {"master_bytes", p.bytes.master},
                               {"held_bytes", p.bytes.held()},
                               {"wire_bytes", p.bytes.wire}}}};
}

json model_error_json(const std::vector<std::vector<StepTimes>>& measured,
                      const std::vector<std::vector<StepTimes>>& modeled) {
  std::array<double, kPhaseCount + 1> t{}, m{};  // the phases, then the step
  for (size_t r = 0; r < std::min(measured.size(), modeled.size()); ++r) {
    for (size_t s = 0; s < std::min(measured[r].size(), modeled[r].size()); ++s) {
      for (size_t p = 0; p < kPhaseCount; ++p) {
        t[p] += measured[r][s].phase_s[p];
        m[p] += modeled[r][s].phase_s[p];
      }
      t[kPhaseCount] += measured[r][s].step_s;
      m[kPhaseCount] += modeled[r][s].step_s;
    }
  }
  auto rel = [&](size_t i) { return t[i] > 0 ? json((m[i] - t[i]) / t[i]) : json(nullptr); };
  json phases = json::object();
  for (size_t p = 0; p < kPhaseCount; ++p) phases[kPhaseNames[p]] = rel(p);
  return {{"phases", phases}, {"step", rel(kPhaseCount)}};
}

namespace {

// The measured clock's part of a run (timing.measured, throughput.samples_per_s, communication), from its steps.
void add_measured(const RunResult& r, json& j) {
  json phases = json::object();
  for (size_t p = 0; p < kPhaseCount; ++p)
    phases[kPhaseNames[p]] = phase_json(r.steps, [p](const StepTimes& st) { return st.phase_s[p]; });
  j["timing"]["measured"] = {{"phases", phases}, {"step", phase_json(r.steps, [](const StepTimes& st) {
                                                   return st.step_s;
                                                 })}};
  double trained_s = r.series.empty() ? 0.0 : r.series.back().measured_s;
  j["throughput"]["samples_per_s"] = trained_s > 0 ? num(r.samples_trained / trained_s) : json(nullptr);
  // Communication: mean bytes per step per rank; algbw from the all-reduced gradient size over the median
  // communicate time (exposed, waiting excluded), busbw with nccl-tests' all-reduce factor 2(n-1)/n.
  json bytes = json::array();
  std::vector<double> comm_s;
  for (const auto& rank_steps : r.steps) {
    double b = 0.0;
    for (const auto& st : rank_steps) {
      b += static_cast<double>(st.bytes_sent);
      comm_s.push_back(st.phase_s[static_cast<size_t>(Phase::kCommunicate)]);
    }
    bytes.push_back(rank_steps.empty() ? 0.0 : b / static_cast<double>(rank_steps.size()));
  }
  j["communication"]["bytes_sent_per_rank_per_step"] = bytes;
  const int n = static_cast<int>(r.steps.size());
  double any_bytes = 0.0;
  for (const auto& b : bytes) any_bytes += b.get<double>();
  Summary cs = summarize(comm_s);
  if (n > 1 && any_bytes > 0 && cs.p50 > 0) {
    double algbw = static_cast<double>(r.num_params) * 4.0 / cs.p50 / 1e9;
    j["communication"]["algbw_GBps"] = algbw;
    j["communication"]["busbw_GBps"] = algbw * 2.0 * (n - 1) / n;
  }
}

// Timing-only runs (no measured step): the bytes per rank and step the modeled clock priced (the cost model's
// collectives at nccl-tests' bus-bandwidth factor, the host communicator's count; parameter server: push + pull).
void add_modeled_communication(const RunResult& r, json& j) {
  json bytes = json::array();
  for (const auto& rank_steps : r.modeled_steps) {
    double b = 0.0;
    for (const auto& st : rank_steps) b += static_cast<double>(st.bytes_sent);
    bytes.push_back(rank_steps.empty() ? 0.0 : b / static_cast<double>(rank_steps.size()));
  }
  j["communication"]["bytes_sent_per_rank_per_step"] = bytes;
  // nccl-tests' algbw and busbw of the step's collectives on the modeled clock: their NCCL bytes and wire bytes
  // over their whole time, hidden or exposed (rank 0's first step; chains with a collective only; ZeRO stage 3's
  // parameter gathers each at its own time on the unshard stream).
  double coll_bytes = 0.0, coll_wire = 0.0, coll_s = 0.0;
  for (const CommChain& c : r.modeled_chains)
    if (c.has_collective && c.comm_s > 0) {
      coll_bytes += c.bytes;
      coll_wire += c.wire_bytes;
      coll_s += c.comm_s;
    }
  if (coll_s > 0) {
    j["communication"]["algbw_GBps"] = coll_bytes / coll_s / 1e9;
    j["communication"]["busbw_GBps"] = coll_wire / coll_s / 1e9;
  }
}

// The modeled clock's part of a run (timing.modeled, its bound and model error, throughput.modeled_samples_per_s;
// a timing-only run's communication).
void add_modeled(const RunSpec& spec, const RunResult& r, bool has_steps, json& j) {
  // The modeled clock, same shape as measured, plus the communication split and the chosen algorithm per chain
  // (bucket) of rank 0's first step.
  json phases = json::object();
  for (size_t p = 0; p < kPhaseCount; ++p)
    phases[kPhaseNames[p]] = phase_json(r.modeled_steps, [p](const StepTimes& st) { return st.phase_s[p]; });
  auto same = [](double x) { return x; };
  json buckets = json::array();
  for (const CommChain& c : r.modeled_chains) {
    buckets.push_back({{"grad_begin", c.range.begin},
                       {"grad_end", c.range.end},
                       {"bytes", c.bytes},
                       {"algorithm", c.has_collective ? json(kNcclAlgoNames[static_cast<size_t>(c.chosen.algo)])
                                                      : json(nullptr)},
                       {"protocol", c.has_collective ? json(kNcclProtoNames[static_cast<size_t>(c.chosen.proto)])
                                                     : json(nullptr)},
                       {"comm_ms", c.comm_s * 1e3},
                       {"compute_ms", (c.pre_s + c.post_s) * 1e3}});
    if (c.range.micro_batch >= 0) buckets.back()["micro_batch"] = c.range.micro_batch;
    if (c.unshard) {  // a stage-3 parameter gather on the unshard stream: grad_begin / grad_end are its parameters
      buckets.back()["stream"] = "unshard";
      buckets.back()["pass"] = c.slot.backward ? "backward" : "forward";
      buckets.back()["layer"] = c.slot.unit;
      buckets.back()["exposed_ms"] = c.slot.stall_s * 1e3;
    }
  }
  j["timing"]["modeled"] = {
      {"hardware", r.hardware},
      {"phases", phases},
      {"step", phase_json(r.modeled_steps, [](const StepTimes& st) { return st.step_s; })},
      {"communication", {{"exposed", phase_json(r.modeled_exposed_s, same)},
                         {"overlapped", phase_json(r.modeled_overlapped_s, same)},
                         {"buckets", buckets}}}};
  // Where the model is known to be a bound rather than an estimate (a parameter server: sim/cost/ps_cost.h).
  if (const std::optional<ModeledBound> bound = parameter_server_bound(spec.config)) {
    j["timing"]["modeled"]["bound"] = bound->kind;
    j["timing"]["modeled"]["bound_reason"] = bound->reason;
  }
  // Where every rank had its own GPU the measured clock is the hardware the model prices: compare them.
  if (r.ranks_one_per_gpu && has_steps) j["timing"]["model_error"] = model_error_json(r.steps, r.modeled_steps);
  if (!has_steps) add_modeled_communication(r, j);
  double modeled_s = r.series.empty() ? 0.0 : r.series.back().modeled_s;
  j["throughput"]["modeled_samples_per_s"] = modeled_s > 0 ? num(r.samples_trained / modeled_s) : json(nullptr);
}

// convergence: the series (every step up to kMaxSeriesPoints steps; beyond that every k-th step, plus every
// evaluation and the last step, so a million-step run keeps a report of a few MB) and the final values.
json convergence_json(const RunResult& r, bool has_modeled) {
  json series = json::array();
  std::optional<double> last_eval_loss, last_eval_acc;
  const size_t stride = (r.series.size() + kMaxSeriesPoints - 1) / kMaxSeriesPoints;
  for (size_t i = 0; i < r.series.size(); ++i) {
    const SeriesPoint& pt = r.series[i];
    if (pt.eval_loss) last_eval_loss = pt.eval_loss;
    if (pt.eval_accuracy) last_eval_acc = pt.eval_accuracy;
    bool keep = stride <= 1 || i % stride == stride - 1 || pt.eval_loss || i + 1 == r.series.size();
    if (!keep) continue;
    series.push_back({{"step", pt.step},
                      {"measured_s", pt.measured_s},
                      {"modeled_s", has_modeled ? json(pt.modeled_s) : json(nullptr)},
                      {"train_loss", num(pt.train_loss)},
                      {"eval_loss", num(pt.eval_loss)},
                      {"eval_accuracy", num(pt.eval_accuracy)}});
  }
  return {{"series", series},
          {"final", {{"train_loss", r.series.empty() ? json(nullptr) : num(r.series.back().train_loss)},
                     {"eval_loss", num(last_eval_loss)},
                     {"eval_accuracy", num(last_eval_acc)}}}};
}

// time_to_target: the first recorded point where the metric reaches the value (every step, not the thinned series).
json time_to_target_json(const TargetConfig& tg, const RunResult& r, bool has_modeled) {
  json t = {{"metric", tg.metric}, {"value", tg.value}, {"reached", false},
            {"step", nullptr},     {"measured_s", nullptr}, {"modeled_s", nullptr}};
  for (const auto& pt : r.series) {
    std::optional<double> v = tg.metric == "eval_accuracy" ? pt.eval_accuracy
                              : tg.metric == "eval_loss"   ? pt.eval_loss
                                                           : std::optional<double>(pt.train_loss);
    if (!v || !std::isfinite(*v)) continue;
    bool hit = tg.metric == "eval_accuracy" ? *v >= tg.value : *v <= tg.value;
    if (hit) {
      t["reached"] = true;
      t["step"] = pt.step;
      t["measured_s"] = pt.measured_s;
      if (has_modeled) t["modeled_s"] = pt.modeled_s;
      break;
    }
  }
  return t;
}

}  // namespace

json run_to_json(const RunSpec& spec, const RunResult& r) {
  json j = run_stub_json(spec, r.disposition, r.message);
  j["steps_completed"] = r.steps_completed;
  j["wall_s"] = r.wall_s;
  j["num_params"] = r.num_params;
  j["backend"] = r.backend.empty() ? json(nullptr) : json(r.backend);
  j["backend_reason"] = r.backend_reason.empty() ? json(nullptr) : json(r.backend_reason);
  j["cuda_path"] = r.cuda_path.empty() ? json(nullptr) : json(r.cuda_path);  // cuda: "device" (older: "staged", "seam")
  j["replicas_identical"] = r.num_params > 0 ? json(r.replicas_identical) : json(nullptr);
  j["compression"] = r.compression;
  j["divergence"] = r.is(Disposition::kDiverged)
                        ? json{{"step", r.divergence_step}, {"quantity", r.divergence_quantity}}
                        : json(nullptr);
  const bool has_steps = !r.steps.empty() && !r.steps[0].empty();
  if (has_steps) add_measured(r, j);
  const bool has_modeled = !r.modeled_steps.empty() && !r.modeled_steps[0].empty();
  if (has_modeled) add_modeled(spec, r, has_steps, j);
  j["convergence"] = convergence_json(r, has_modeled);
  if (const TargetConfig& tg = spec.config.training.target; !tg.metric.empty())
    j["time_to_target"] = time_to_target_json(tg, r, has_modeled);
  if (r.precision) j["precision"] = precision_json(*r.precision);
  j["staleness"] = r.staleness;  // free-running strategies (parameter server); null otherwise
  if (r.data) j["data"] = data_json(*r.data, r);
  if (spec.config.report.trace) {
    json params = json::array();
    for (const auto& step : r.trace) params.push_back(step);
    j["trace"] = {{"initial", r.trace_initial}, {"params", params}};
  }
  return j;
}

namespace {

// Why path cannot be a report file (it exists and is a folder, FIFO, device or socket), or nothing.
std::optional<std::string> not_a_regular_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st) || fs::is_regular_file(st)) return std::nullopt;
  const char* what = fs::is_directory(st) ? "a folder"
                     : fs::is_fifo(st)    ? "a FIFO (named pipe)"
                     : fs::is_socket(st)  ? "a socket"
                                          : "a device or other non-regular file";
  return path + " is " + what + ", not a regular file; remove it or choose another --out";
}

// Whether a run read back by --resume has the fields the resume path reads with their types: an object with a
// string "id", a string "disposition" and an integer "index" >= 0 when present. Returns "<.field>: expected ...".
std::optional<std::string> resumed_run_problem(const json& run) {
  if (!run.is_object()) return std::string(": expected an object");
  if (!run.contains("id") || !run["id"].is_string()) return std::string(".id: expected a string");
  if (run.contains("disposition") && !run["disposition"].is_string())
    return std::string(".disposition: expected a string");
  if (run.contains("index") && !run["index"].is_number_unsigned() &&
      !(run["index"].is_number_integer() && run["index"].get<int64_t>() >= 0))
    return std::string(".index: expected an integer >= 0");
  return std::nullopt;
}

// A run's position in the sweep (runs read back are checked by resumed_run_problem; 0 when absent).
int64_t run_index(const json& run) {
  const auto it = run.find("index");
  return it != run.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

// JSON text with invalid UTF-8 (a byte from argv, a path or a --set string) replaced by U+FFFD: the report stays
// valid JSON and the run is not refused after it started.
std::string dump_valid_utf8(const json& j, int indent = -1) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

// The settings in which two scenario files differ, as "path: old, now new" (dotted paths of the leaves: objects are
// descended, a list is one value), at most kShown of them and then "and N more"; none when they are equal.
std::vector<std::string> scenario_differences(const json& was, const json& now) {
  constexpr size_t kShown = 6;
  std::vector<std::string> out;
  size_t more = 0;
  std::function<void(const json&, const json&, const std::string&)> walk = [&](const json& a, const json& b,
                                                                                const std::string& path) {
    if (a.is_object() && b.is_object()) {
      std::set<std::string> keys;
      for (const auto& [k, v] : a.items()) keys.insert(k);
      for (const auto& [k, v] : b.items()) keys.insert(k);
      for (const auto& k : keys)
        walk(a.contains(k) ? a[k] : json(), b.contains(k) ? b[k] : json(), path.empty() ? k : path + "." + k);
      return;
    }
    if (a == b) return;
    if (out.size() == kShown) {
      ++more;
      return;
    }
    auto shown = [](const json& v) { return v.is_null() ? std::string("(not set)") : bounded_dump(v, 40); };
    out.push_back(path + ": " + shown(a) + ", now " + shown(b));
  };
  walk(was, now, "");
  if (more > 0) out.push_back(fmt::format("and {} more", more));
  return out;
}

// Why runs of another scenario file (their scenario sha256 differs) do not belong to this one, naming both files and
// scenarios and the settings that differ where `written` (the report's context) records the scenario it ran; the
// journal's header records only the sha256. Detail lines are indented by two spaces.
std::string other_scenario_text(const Scenario& scenario, const json& written) {
  const json* raw = written.is_object() && written.contains("scenario") ? &written["scenario"] : nullptr;
  if (raw == nullptr)
    return "its runs come from another scenario file or another version of " + scenario.path +
           " (scenario sha256 differs; which file wrote them is not recorded)";
  auto named = [](const std::string& path, const json& doc) {
    const std::string name =
        doc.is_object() && doc.value("name", json()).is_string() ? doc["name"].get<std::string>() : "?";
    return fmt::format("{} (scenario \"{}\")", path.empty() ? "inline text" : path, bounded_text(name, 40));
  };
  const std::string was_path = written.value("scenario_path", json()).is_string()
                                   ? written["scenario_path"].get<std::string>() : std::string();
  std::string text = was_path == scenario.path
                         ? "its runs come from another version of " + named(was_path, *raw)
                         : "its runs come from " + named(was_path, *raw) + ",\n  this sweep reads " +
                               named(scenario.path, scenario.raw);
  const std::vector<std::string> diff = scenario_differences(*raw, scenario.raw);
  if (diff.empty()) return text + ";\n  the settings are the same, the file's bytes differ (scenario sha256)";
  text += fmt::format(";\n  they differ in {}:", diff.size() == 1 ? "one setting" : "these settings");
  for (const auto& d : diff) text += "\n    " + d;
  return text;
}

// Why runs fingerprinted (sha, sets, sets_fp) do not belong to this scenario and its --set values, or nothing.
// `sets_fp`: the lossless overrides_sha256 when the file has one (this version), else the text is compared.
// `written`: the report's context (scenario_path, scenario) when there is one, to name what differs.
std::optional<std::string> fingerprint_mismatch(const Scenario& scenario, const json& sha, const json& sets,
                                                const json& sets_fp, const json& written = json()) {
  if (sha != json(scenario.sha256)) return other_scenario_text(scenario, written);
  // The overrides as written there (invalid UTF-8 replaced by U+FFFD), to compare with what was read back.
  const json sets_written = json::parse(dump_valid_utf8(json(scenario.overrides)));
  if (sets_fp.is_string() ? sets_fp != json(overrides_sha256(scenario.overrides)) : sets != sets_written)
    return "written with --set " + bounded_dump(sets, 200) + ", now " + bounded_dump(sets_written, 200) +
           (sets == sets_written ? " (the same text: they differ in bytes that are not UTF-8)" : "");
  return std::nullopt;
}

// Calls each(line, first) for every line of a journal's text (runs.jsonl) that parses as JSON (depth-limited like
// every JSON input), in order; empty lines and lines that do not parse (cut by a kill: that run is simply run again)
// are skipped. first: whether it is the first line that parsed (the header line in a journal this version wrote).
void for_each_journal_entry(const std::string& text, const std::string& path,
                            const std::function<void(const json&, bool)>& each) {
  std::istringstream jl(text);
  std::string line;
  bool first = true;
  while (std::getline(jl, line)) {
    if (line.empty()) continue;
    json j;
    try {
      j = parse_json_text(line, path);
    } catch (const Error&) {
      continue;
    }
    each(j, first);
    first = false;
  }
}

}  // namespace

std::map<std::string, json> resumable_runs(const std::string& dir, const Scenario& scenario,
                                           const std::vector<Disposition>& rerun, bool* journal_ok_out,
                                           json* merged_out) {
  const std::string report_path = dir + "/report.json", journal_path = dir + "/runs.jsonl";
  // Opening a FIFO or device named report.json / runs.jsonl would block or never end: refuse them by name first.
  for (const std::string& path : {report_path, journal_path}) {
    if (auto problem = not_a_regular_file(path)) throw ReportIoError(*problem);
  }
  // Where a resume cannot continue the report: the ways on that work (a plain run into the folder is refused too).
  const std::string ways_on = fmt::format("run with --overwrite instead of --resume (it moves that report aside into "
                                          "{}/replaced-<date>-<time>/) or choose another --out", dir);
  auto check = [&](const json& sha, const json& sets, const json& sets_fp, const std::string& where,
                   const json& written) {
    if (auto why = fingerprint_mismatch(scenario, sha, sets, sets_fp, written))
      throw Error(where + ": " + *why +
                  (why->rfind("written with --set", 0) == 0 ? "; resume with the same overrides or choose another --out"
                                                            : "\n" + ways_on));
  };
  std::vector<json> found;
  std::error_code exists_ec;
  if (std::filesystem::exists(report_path, exists_ec)) {
    json old;
    try {  // size-capped (kMaxReportFileBytes), depth-limited, regular files only
      old = read_json_file(report_path, kMaxReportFileBytes);
    } catch (const Error& e) {
      std::error_code journal_ec;
      const bool journal = std::filesystem::is_regular_file(journal_path, journal_ec);
      throw Error("cannot resume from an unreadable report: " + std::string(e.what()) +
                  (journal ? fmt::format("\nthe journal {} holds the runs that finished: move the damaged report "
                                         "aside (mv {} {}.damaged) and resume again, which rebuilds the report from "
                                         "the journal; or ",
                                         journal_path, report_path, report_path)
                           : std::string("\n")) +
                  ways_on);
    }
    const json* sha = old.is_object() && old.contains("context") && old["context"].is_object() &&
                              old["context"].contains("scenario_sha256")
                          ? &old["context"]["scenario_sha256"]
                          : nullptr;
    bool has_runs = old.is_object() && old.contains("runs") && old["runs"].is_array() && !old["runs"].empty();
    if (merged_out != nullptr && old.is_object() && old.contains("merged") && old["merged"].is_object())
      *merged_out = old["merged"];
    if (sha != nullptr) {
      check(*sha, old["context"].value("overrides", json::array()), old["context"].value("overrides_sha256", json()),
            report_path, old["context"]);
    } else if (has_runs) {
      throw Error(report_path + ": cannot tell which scenario wrote it (no context.scenario_sha256); " + ways_on);
    }
    if (has_runs) {
      size_t i = 0;
      for (const auto& run : old["runs"]) {
        if (auto problem = resumed_run_problem(run))
          throw Error(fmt::format("{}: $.runs[{}]{}; {}", report_path, i, *problem, ways_on));
        found.push_back(run);
        ++i;
      }
    }
  }
  bool journal_ok = false;
  if (std::filesystem::exists(journal_path, exists_ec)) {
    std::string text;
    try {  // size-capped (kMaxReportFileBytes), regular files only
      text = read_json_file_text(journal_path, kMaxReportFileBytes);
    } catch (const Error& e) {
      throw Error("cannot resume from an unreadable journal: " + std::string(e.what()));
    }
    for_each_journal_entry(text, journal_path, [&](const json& j, bool first) {
      if (first) {
        if (!j.is_object() || !j.contains("journal"))
          throw Error(journal_path + ": cannot tell which scenario wrote it (no header line); " + ways_on);
        check(j.value("scenario_sha256", json()), j.value("overrides", json::array()),
              j.value("overrides_sha256", json()), journal_path, json());
        journal_ok = true;
        return;
      }
      if (resumed_run_problem(j)) return;  // a mistyped line is skipped like a cut one: that run is run again
      found.push_back(j);
    });
  }
  std::map<std::string, json> runs;
  for (const auto& run : found) {
    const std::optional<Disposition> d = run_disposition(run);
    if (d && std::find(rerun.begin(), rerun.end(), *d) != rerun.end()) {  // unfinished or retried: run again
      runs.erase(run["id"].get<std::string>());
      continue;
    }
    runs[run["id"].get<std::string>()] = run;
  }
  if (journal_ok_out != nullptr) *journal_ok_out = journal_ok;
  return runs;
}

std::optional<ExistingReport> existing_report(const std::string& dir, const Scenario& scenario) {
  const std::string report_path = dir + "/report.json", journal_path = dir + "/runs.jsonl";
  for (const std::string& path : {report_path, journal_path}) {
    if (auto problem = not_a_regular_file(path)) throw ReportIoError(*problem);
  }
  ExistingReport e;
  e.dir = dir;
  std::map<std::string, std::optional<Disposition>> last;  // run id -> its last disposition (journal lines later)
  bool unreadable = false;                  // a file there that is not a report we can read: it is kept too
  auto note = [&](const std::string& why) {
    if (e.mismatch.empty()) e.mismatch = why;
  };
  auto take = [&](const json& run) {
    if (!run.is_object() || !run.contains("id") || !run["id"].is_string()) return;
    last[run["id"].get<std::string>()] = run_disposition(run);
  };
  std::error_code ec;
  if (std::filesystem::exists(report_path, ec)) {
    json old;
    try {
      old = read_json_file(report_path, kMaxReportFileBytes);
    } catch (const Error& x) {
      unreadable = true;
      note(std::string("it cannot be read as a gradsweep report: ") + x.what());
    }
    if (!unreadable && !(old.is_object() && old.contains("runs") && old["runs"].is_array())) {
      unreadable = true;
      note(report_path + " is not a gradsweep report (no runs list)");
    }
    if (!unreadable) {
      if (old.contains("scenario_name") && old["scenario_name"].is_string())
        e.scenario_name = old["scenario_name"].get<std::string>();
      for (const auto& run : old["runs"]) take(run);
      const json ctx = old.contains("context") && old["context"].is_object() ? old["context"] : json::object();
      if (ctx.contains("scenario_sha256")) {
        if (auto why = fingerprint_mismatch(scenario, ctx["scenario_sha256"], ctx.value("overrides", json::array()),
                                            ctx.value("overrides_sha256", json()), ctx))
          note(*why);
      } else if (!old["runs"].empty()) {
        note("cannot tell which scenario wrote it (no context.scenario_sha256)");
      }
    }
  }
  if (std::filesystem::exists(journal_path, ec)) {
    std::string text;
    try {
      text = read_json_file_text(journal_path, kMaxReportFileBytes);
    } catch (const Error& x) {
      unreadable = true;
      note(std::string("its journal cannot be read: ") + x.what());
    }
    for_each_journal_entry(text, journal_path, [&](const json& j, bool first) {
      if (first) {
        if (j.is_object() && j.contains("journal")) {
          if (auto why = fingerprint_mismatch(scenario, j.value("scenario_sha256", json()),
                                              j.value("overrides", json::array()), j.value("overrides_sha256", json())))
            note(*why);
          return;
        }
        note("cannot tell which scenario wrote its journal (no header line)");
      }
      take(j);
    });
  }
  if (last.empty() && !unreadable) return std::nullopt;  // nothing that a new report would lose
  e.runs = last.size();
  for (const auto& [id, d] : last) e.interrupted += d == Disposition::kInterrupted ? 1 : 0;
  if (e.mismatch.empty()) {
    try {
      e.kept = resumable_runs(dir, scenario);
    } catch (const Error& x) {  // a run a --resume cannot read back
      e.mismatch = x.what();
    }
  }
  return e;
}

std::string move_report_aside(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  std::string aside = dir + "/replaced-" + stamp;
  std::error_code ec;
  for (int k = 2; fs::exists(aside, ec) || fs::is_symlink(aside, ec); ++k)
    aside = dir + "/replaced-" + stamp + "-" + std::to_string(k);
  if (file_ops().mkdirs(aside) != 0)
    throw ReportIoError("cannot create " + aside + " to move the previous report into: " + std::strerror(errno));
  // report.json first: once it is gone the folder no longer looks finished; the journal and figures follow.
  std::vector<std::string> names = {"report.json", "runs.jsonl"};
  std::vector<std::string> figures;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::error_code type_ec;
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file(type_ec) && name.size() > 4 && name.compare(name.size() - 4, 4, ".png") == 0)
      figures.push_back(name);
  }
  std::sort(figures.begin(), figures.end());
  names.insert(names.end(), figures.begin(), figures.end());
  // The run files the report names by paths relative to its folder (report.save_weights, report.save_batches,
  // report.timeline): moved with it, so the moved report still finds them and the next sweep cannot overwrite them.
  for (const char* folder : {"weights", "batches", "timeline"}) names.push_back(folder);
  for (const auto& name : names) {
    const std::string from = dir + "/" + name;
    if (!fs::exists(fs::symlink_status(from, ec))) continue;
    if (file_ops().rename(from, aside + "/" + name) != 0)
      throw ReportIoError("cannot move " + from + " into " + aside + ": " + std::strerror(errno) +
                          " (what was moved so far is there)");
  }
  return aside;
}

ReportWriter::ReportWriter(std::string dir, const Scenario& scenario, json header, bool resume,
                           const std::vector<Disposition>& rerun, ExistingRuns existing)
    : dir_(std::move(dir)), header_(std::move(header)) {

  std::error_code ec;
  if (file_ops().mkdirs(dir_) != 0)
    throw ReportIoError("cannot create the report folder " + dir_ + ": " + std::strerror(errno));
  // One writer per folder: a second sweep into the same folder would interleave the journal.
  std::string lock_path = dir_ + "/.lock";
  lock_.fd = lock_exclusive(lock_path);
  if (lock_.fd == kLockHeld) throw Error("another gradsweep is writing " + dir_ + "; wait for it or choose another --out");
  if (lock_.fd < 0)
    throw ReportIoError("cannot write in the report folder " + dir_ + " (creating .lock: " + std::strerror(errno) + ")");
  // Opening a FIFO or device named report.json / runs.jsonl would block or never end: refuse them by name first.
  for (const std::string& path : {report_path(), journal_path()}) {
    if (auto problem = not_a_regular_file(path)) throw ReportIoError(*problem);
  }
  remove_stale_temporaries(report_path());  // left by a writer killed mid-write
  // The journal's first line says which scenario (file hash and overrides) its runs belong to.
  const json identity = {{"journal", 1}, {"scenario_sha256", scenario.sha256}, {"overrides", scenario.overrides},
                         {"overrides_sha256", overrides_sha256(scenario.overrides)}};
  auto write_identity = [&] {
    std::filesystem::remove(journal_path(), ec);
    append_line(dump_valid_utf8(identity) + "\n");
  };
  if (!resume) {
    // A report is never replaced: runs already here are refused or moved aside, under the lock.
    if (auto found = existing_report(dir_, scenario)) {
      if (existing == ExistingRuns::kRefuse)
        throw ReportInTheWay(dir_ + " holds runs that a new report would replace", std::move(*found));
      moved_aside_ = move_report_aside(dir_);
    }
    write_identity();
    return;
  }
  bool journal_ok = false;
  runs_ = resumable_runs(dir_, scenario, rerun, &journal_ok, &merged_);  // the checks a --resume --dry-run makes too
  if (journal_ok) {
    // A line cut by a kill or a full disk ends without a newline: cut it off, or the next appended line would be
    // glued to it and lost to the next --resume.
    std::error_code size_ec;
    const auto size = std::filesystem::file_size(journal_path(), size_ec);
    std::ifstream whole(journal_path(), std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(whole)), std::istreambuf_iterator<char>());
    const size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if (!size_ec && keep < size) std::filesystem::resize_file(journal_path(), keep, size_ec);
  }
  if (!journal_ok) {
    // Keep what report.json held in the fresh journal, so report.json can always be rebuilt from the journal.
    write_identity();
    for (const auto& [id, run] : runs_) append_line(dump_valid_utf8(run) + "\n");
  }
}

ReportWriter::LockFile::~LockFile() {
  if (fd >= 0) ::close(fd);  // releases the flock
}

void ReportWriter::append_line(const std::string& line) { append_file_durable(journal_path(), line); }

void ReportWriter::note_resumed(const std::string& id, bool completed) {
  json& resumed = merged_["resumed"];
  if (!resumed.is_array()) resumed = json::array();
  json kept = json::array();
  for (const auto& r : resumed)
    if (r != json(id)) kept.push_back(r);
  if (completed) kept.push_back(id);
  resumed = std::move(kept);
}

void ReportWriter::add(const json& run, Rewrite rewrite) {
  const std::string id = run["id"].get<std::string>();
  runs_[id] = run;
  append_line(dump_valid_utf8(run) + "\n");
  if (merged_.is_object()) note_resumed(id, run_disposition(run) != Disposition::kInterrupted);
  const double wait_s = std::min(kMaxRewriteIntervalS, 20.0 * last_flush_cost_s_);
  if (rewrite == Rewrite::kAuto && now_s() - last_flush_s_ >= wait_s) flush();
}

void ReportWriter::flush() {
  const double start = now_s();
  json doc = header_;
  std::vector<const json*> ordered;
  for (const auto& [id, run] : runs_) ordered.push_back(&run);
  std::stable_sort(ordered.begin(), ordered.end(), [](const json* a, const json* b) {
    return run_index(*a) < run_index(*b);
  });
  json runs = json::array();
  for (const json* r : ordered) runs.push_back(*r);
  doc["runs"] = runs;
  if (merged_.is_object()) doc["merged"] = merged_;
  write_file_atomic(report_path(), dump_valid_utf8(doc, 1) + "\n");
  last_flush_s_ = now_s();
  last_flush_cost_s_ = last_flush_s_ - start;
}

}  // namespace gs
