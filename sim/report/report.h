// The report: one JSON document per scenario (reports/README.md is the reference, reports/schema.json its schema).
// Finished runs are appended to a journal (runs.jsonl, one flushed line per run) beside report.json, and report.json
// is reassembled from it atomically (temporary file in the same folder, then rename) at most every few seconds and
// at the end, so a killed sweep leaves a valid report and --resume picks up from the journal.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "sim/config/scenario.h"
#include "sim/report/file_io.h"
#include "sim/runtime/run_result.h"

namespace gs {

constexpr int kReportSchemaVersion = 1;
// Longest convergence series written per run before it is thinned to every k-th step (evaluations always kept).
constexpr size_t kMaxSeriesPoints = 10000;

// One run's entry of runs[] (ids, resolved config, disposition, timing, communication, convergence, target, trace).
json run_to_json(const RunSpec& spec, const RunResult& result);
// An entry for a run that never started (skipped, or failed before its rank loop).
json run_stub_json(const RunSpec& spec, const std::string& disposition, const std::string& message);

// timing.model_error: the modeled clock's relative error against the measured one, per phase and for the whole step,
// (M - T) / T with T the measured and M the modeled seconds summed over every rank and step the two clocks share
// (null where T is 0: nothing was measured in that phase). {"phases": {name: number|null}, "step": number|null}.
json model_error_json(const std::vector<std::vector<StepTimes>>& measured,
                      const std::vector<std::vector<StepTimes>>& modeled);

// The `tool` and `context` blocks.
json tool_json();
json context_json(const Scenario& scenario, const std::vector<std::string>& argv);

// The runs a --resume into dir keeps, by id (those whose disposition is not in `rerun`), read from report.json and
// the journal runs.jsonl without writing anything; none when the folder or both files are absent. Throws gs::Error
// exactly as ReportWriter's resume does (another scenario or other --set values, an unreadable file, a report run
// that is not a run) and ReportIoError for a FIFO or device in their place. journal_ok (optional): whether the
// journal's header line matched this scenario. --resume --dry-run shows its answer.
std::map<std::string, json> resumable_runs(const std::string& dir, const Scenario& scenario,
                                           const std::vector<std::string>& rerun = {"interrupted"},
                                           bool* journal_ok = nullptr);

class ReportWriter {
 public:
  // dir: the report folder (created). resume: keep the runs already in the journal/report (their ids are done(),
  // except those whose disposition is in `rerun`: `interrupted`, and with --retry-failed also failed, diverged and
  // timeout); otherwise start empty. The journal's first line records the scenario's sha256 and overrides; resuming
  // throws gs::Error when report.json or the journal belongs to another scenario or overrides, or when it cannot
  // tell. Throws ReportIoError when the folder cannot be created or written.
  ReportWriter(std::string dir, const Scenario& scenario, json header, bool resume,
               const std::vector<std::string>& rerun = {"interrupted"});
  ReportWriter(const ReportWriter&) = delete;
  ReportWriter& operator=(const ReportWriter&) = delete;
  // Ids already in the report (resume).
  bool done(const std::string& id) const { return runs_.count(id) > 0; }
  // Appends a finished run to the journal (flushed; ReportIoError when it cannot, the journal cut back to its
  // previous length) and rewrites report.json unless that would cost more than about
  // 5% of the time: the rewrite waits until 20 x the last rewrite's duration has passed, capped at max_interval_s. So
  // small reports are current after every run, and a long sweep's growing report is rewritten at most every few
  // seconds.
  // kJournalOnly appends without rewriting (tests; a crash between append and rewrite looks like this).
  enum class Rewrite { kAuto, kJournalOnly };
  void add(const json& run, Rewrite rewrite = Rewrite::kAuto);
  static constexpr double kMaxRewriteIntervalS = 3.0;
  // Rewrites report.json now (atomically; ReportIoError when it cannot, the previous report.json intact).
  void flush();
  std::string report_path() const { return dir_ + "/report.json"; }
  std::string journal_path() const { return dir_ + "/runs.jsonl"; }
  size_t size() const { return runs_.size(); }

 private:
  void append_line(const std::string& line);  // appends and fdatasyncs one journal line

  std::string dir_;
  json header_;
  std::map<std::string, json> runs_;  // by id
  double last_flush_s_ = 0.0;     // when report.json was last written (steady clock, s)
  double last_flush_cost_s_ = 0.0;  // how long that write took
  // flock on <dir>/.lock for the writer's lifetime; a member, so it is released even when the constructor throws.
  struct LockFile {
    int fd = -1;
    ~LockFile();
  } lock_;
};

}  // namespace gs
