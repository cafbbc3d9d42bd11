// The sweep driver (see driver.h): filter, resume, progress on stderr, report writing, signals.
#include "sim/app/driver.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/core/id_pattern.h"
#include "sim/core/json_io.h"
#include "sim/model/model.h"
#include "sim/report/report.h"
#include "sim/app/memory.h"
#include "sim/runtime/rank_loop.h"

extern "C" void openblas_set_num_threads(int);

namespace gs {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};
std::atomic<bool> g_report_open{false};  // run_sweep has written this sweep's report.json: a stop ends with a report

// First signal: before the report exists (loading, validation, --filter) there is nothing to finish, so leave at once;
// afterwards ask the current run to stop at its next step boundary. A second signal always leaves at once.
extern "C" void on_signal(int sig) {
  if (!g_report_open.load()) {
    static const char kMsg[] = "gradsweep: stopped by a signal before any run started; nothing was run\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    _exit(128 + sig);
  }
  if (g_signal.exchange(sig) != 0) _exit(128 + sig);  // second signal: leave at once
  g_stop.store(true);
}

std::string fmt_duration(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  int t = static_cast<int>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60) : fmt::format("{}:{:02}", t / 60, t % 60);
}

// The --filter pattern over run ids (RE2 syntax); throws gs::Error when RE2 refuses it or it matches none of the
// runs. RE2 matches in time linear in the id (no backtracking), so no pattern can hang the tool; patterns longer than
// kMaxFilterChars are refused first (a run id is never that long).
IdPattern make_filter(const std::string& f, const Scenario& s) {
  if (f.size() > kMaxFilterChars)
    throw Error(fmt::format("--filter: a pattern of at most {} characters is accepted, got {} characters (\"{}\")",
                            kMaxFilterChars, f.size(), bounded_text(f, 60)));
  std::optional<IdPattern> re;
  try {
    re.emplace(f);
  } catch (const Error& e) {
    throw Error("--filter: not an RE2 pattern: \"" + bounded_text(f) + "\": " + e.what() +
                " (syntax: RE2, matched somewhere in the run id; scenarios/README.md)");
  }
  for (const auto& r : s.runs)
    if (re->search(r.id)) return *re;
  throw Error(fmt::format("--filter \"{}\" matches none of the {} run ids (see --dry-run)", bounded_text(f),
                          s.runs.size()));
}

}  // namespace

void install_stop_handlers() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

namespace {
// done: the ids a --resume keeps (nullptr: not a resume).
std::string dry_run_listing(const Scenario& s, const std::string& filter, const std::map<std::string, json>* done,
                            const std::string& dir) {
  const IdPattern re = make_filter(filter, s);
  std::string out = describe_expansion(s) + "\n";
  size_t kept = 0, kept_done = 0;
  for (const auto& r : s.runs) {
    if (!re.search(r.id)) continue;
    ++kept;
    std::string values;
    for (const auto& a : s.axes)
      for (const auto& p : a.paths)
        values += (values.empty() ? "" : " ") + p + "=" + r.swept[p].dump(-1, ' ', false, json::error_handler_t::replace);
    std::string mark;
    if (done != nullptr) {
      const bool is_done = done->count(r.id) > 0;
      kept_done += is_done ? 1 : 0;
      mark = is_done ? "  (done: kept)" : "  (runs)";
    }
    out += fmt::format("  [{}] {}  {}{}{}\n", r.index, r.id, values,
                       s.repeats > 1 ? fmt::format(" repeat={} seed={}", r.repeat, r.config.training.seed) : "", mark);
  }
  if (!filter.empty()) out += fmt::format("{} of {} runs match --filter {}\n", kept, s.runs.size(), filter);
  if (done != nullptr)
    out += fmt::format("--resume into {}: {} to run, {} already done (kept)\n", dir, kept - kept_done, kept_done);
  return out;
}
}  // namespace

std::string dry_run_text(const Scenario& s, const std::string& filter) {
  return dry_run_listing(s, filter, nullptr, "");
}

std::string dry_run_text(const Scenario& s, const DriverOptions& o) {
  if (!o.resume) return dry_run_text(s, o.filter);
  const std::string dir = o.out_dir.empty() ? "reports/" + s.name : o.out_dir;
  std::vector<std::string> rerun = {"interrupted"};  // as run_sweep's resume
  if (o.retry_failed) rerun.insert(rerun.end(), {"failed", "diverged", "timeout"});
  std::map<std::string, json> done;
  try {
    done = resumable_runs(dir, s, rerun);
  } catch (const ReportIoError& e) {  // a dry run writes nothing: a plain refusal, as for a bad input
    throw Error(e.what());
  }
  return dry_run_listing(s, o.filter, &done, dir);
}

int run_sweep(const Scenario& s, const DriverOptions& o) {
  const IdPattern re = make_filter(o.filter, s);
  openblas_set_num_threads(1);  // one BLAS thread per rank thread
  std::string dir = o.out_dir.empty() ? "reports/" + s.name : o.out_dir;
  json header;
  header["schema_version"] = kReportSchemaVersion;
  header["tool"] = tool_json();
  header["context"] = context_json(s, o.argv);
  header["scenario_name"] = s.name;
  json axes = json::array();
  for (const auto& a : s.axes) axes.push_back({{"paths", a.paths}, {"values", a.values}});
  header["axes"] = axes;
  header["repeats"] = s.repeats;
  std::error_code status_ec;  // never open it here: a FIFO named report.json would block (ReportWriter refuses it)
  bool replacing = !o.resume && std::filesystem::is_regular_file(dir + "/report.json", status_ec);
  std::vector<std::string> rerun = {"interrupted"};
  if (o.retry_failed) rerun.insert(rerun.end(), {"failed", "diverged", "timeout"});
  std::optional<ReportWriter> made;
  try {
    made.emplace(dir, s, header, o.resume, rerun);
    made->flush();  // from here on report.json is this scenario's, valid, with the runs finished so far
    g_report_open.store(true);
  } catch (ReportIoError& e) {
    e.before_any_run = true;  // main says that nothing was run
    throw;
  }
  ReportWriter& writer = *made;
  if (replacing && !o.quiet)
    std::fprintf(stderr, "gradsweep: replacing the runs of the existing %s/report.json (--resume keeps them)\n",
                 dir.c_str());

  std::vector<const RunSpec*> todo;
  for (const auto& r : s.runs)
    if (re.search(r.id) && !writer.done(r.id)) todo.push_back(&r);

  install_stop_handlers();  // idempotent; main installs them before loading the scenario

  const bool tty = isatty(STDERR_FILENO) != 0 && !o.quiet;
  if (!o.quiet)
    std::fprintf(stderr, "gradsweep: %s; %zu to run%s -> %s\n", describe_expansion(s).c_str(), todo.size(),
                 o.resume ? fmt::format(" ({} already in the report)", writer.size()).c_str() : "",
                 writer.report_path().c_str());
  // Test fault stop_at=RUN:STEP (file_io.h): stop this process after that step so a test can signal it there.
  size_t stop_run = 0;
  int64_t stop_step = 0;
  if (auto f = test_fault("stop_at")) {
    unsigned long long run_n = 0;
    long long step_n = 0;
    if (std::sscanf(f->c_str(), "%llu:%lld", &run_n, &step_n) != 2)
      throw Error("GRADSWEEP_TEST_FAULTS: stop_at expects RUN:STEP, got \"" + *f + "\"");
    stop_run = static_cast<size_t>(run_n);
    stop_step = static_cast<int64_t>(step_n);
  }
  int exit_code = 0;
  double sweep0 = now_s();
  for (size_t i = 0; i < todo.size(); ++i) {
    const RunSpec& spec = *todo[i];
    if (g_stop.load()) break;
    double last_print = 0.0;
    RunHooks hooks;
    hooks.stop = &g_stop;
    double run0 = now_s();
    if (tty || stop_run == i + 1) {
      hooks.on_step = [&](int64_t step, int64_t total, double loss) {
        if (stop_run == i + 1 && step == stop_step) ::raise(SIGSTOP);
        if (!tty) return;
        double t = now_s();
        if (t - last_print < 0.2 && step != total) return;
        last_print = t;
        double eta = (t - run0) / static_cast<double>(step) * static_cast<double>(total - step);
        std::fprintf(stderr, "\r\033[K[%zu/%zu] %s step %lld/%lld loss %s ETA %s", i + 1, todo.size(),
                     spec.id.c_str(), static_cast<long long>(step), static_cast<long long>(total),
                     format_number(loss, 4).c_str(), fmt_duration(eta).c_str());
      };
    }
    // Memory: estimated before the run; one that does not fit what is available is skipped, not started.
    json memory = nullptr;
    RunResult res;
    // Timing-only runs hold no model, data or buffers, but still every rank's per-step records.
    {
      int64_t num_params = 0;
      try {
        if (run_does_arithmetic(spec.config)) num_params = static_cast<int64_t>(make_model(spec.config)->num_params());
      } catch (const std::exception&) {
        // run_training reports the model's error as a failed run
      }
      const std::optional<int64_t> available = available_memory_bytes();
      memory = estimate_run_memory(spec.config, num_params).to_json();
      memory["available_bytes"] = available ? json(*available) : json(nullptr);
      if (available) res.message = memory_skip_reason(spec.config, num_params, *available);
    }
    if (res.message.empty()) {
      res = run_training(spec.config, hooks);
    } else {
      res.disposition = "skipped";
    }
    json run = res.disposition == "skipped" ? run_stub_json(spec, res.disposition, res.message) : run_to_json(spec, res);
    run["memory"] = memory;
    try {
      writer.add(run);
    } catch (const ReportIoError&) {
      // The journal cannot take the run (disk full): keep report.json as current as the disk allows, then stop.
      try {
        writer.flush();
      } catch (const ReportIoError&) {
      }
      throw;
    }
    if (res.disposition == "failed") exit_code = 1;
    if (!o.quiet) {
      const json& fin = run["convergence"]["final"];
      std::string metrics;
      if (!fin["eval_accuracy"].is_null()) metrics += fmt::format(" eval_accuracy {:.4f}", fin["eval_accuracy"].get<double>());
      if (!fin["eval_loss"].is_null()) metrics += fmt::format(" eval_loss {:.4g}", fin["eval_loss"].get<double>());
      if (!fin["train_loss"].is_null()) metrics += fmt::format(" train_loss {:.4g}", fin["train_loss"].get<double>());
      std::fprintf(stderr, "%s[%zu/%zu] %s %s in %.1fs:%s%s\n", tty ? "\r\033[K" : "", i + 1, todo.size(),
                   spec.id.c_str(), res.disposition.c_str(), res.wall_s, metrics.c_str(),
                   res.message.empty() ? "" : (" (" + res.message + ")").c_str());
    }
  }
  writer.flush();
  if (!o.quiet)
    std::fprintf(stderr, "gradsweep: wrote %s (%zu runs) in %s\n", writer.report_path().c_str(), writer.size(),
                 fmt_duration(now_s() - sweep0).c_str());
  int sig = g_signal.load();
  if (sig != 0) return 128 + sig;
  return exit_code;
}

}  // namespace gs
