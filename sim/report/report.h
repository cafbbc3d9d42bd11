// The report: one JSON document per scenario (reports/README.md is the reference, reports/schema.json its schema).
// Finished runs are appended to a journal (runs.jsonl, one flushed line per run) beside report.json, and report.json
// is reassembled from it atomically (temporary file in the same folder, then rename) at most every few seconds and
// at the end, so a killed sweep leaves a valid report and --resume picks up from the journal.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <utility>
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
json run_stub_json(const RunSpec& spec, Disposition disposition, const std::string& message);
// The disposition a report's run entry names (its "disposition" text); nullopt when it has none or another text.
std::optional<Disposition> run_disposition(const json& run);

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
// journal's header line matched this scenario. merged (optional): report.json's `merged` block (gradsweep merge), null
// when it has none. --resume --dry-run shows its answer.
std::map<std::string, json> resumable_runs(const std::string& dir, const Scenario& scenario,
                                           const std::vector<Disposition>& rerun = {Disposition::kInterrupted},
                                           bool* journal_ok = nullptr, json* merged = nullptr);

// What a sweep without --resume would replace in a report folder: the runs that report.json and the journal
// runs.jsonl hold there, whose they are and what a --resume would keep (reports/README.md, "A report is never
// replaced"). existing_report reads without writing and returns none when nothing would be lost (neither file, or
// files that hold no run); throws ReportIoError for a FIFO or device in their place.
struct ExistingReport {
  std::string dir;
  size_t runs = 0;              // distinct run ids over report.json and runs.jsonl
  size_t interrupted = 0;       // of them, the ones whose last record is `interrupted`
  std::string scenario_name;    // report.json's scenario_name ("" when it has none or cannot be read)
  std::string mismatch;         // why a --resume would refuse these runs ("" when it would keep them)
  std::map<std::string, json> kept;  // the runs a plain --resume keeps, by id (empty when mismatch is set)
};
std::optional<ExistingReport> existing_report(const std::string& dir, const Scenario& scenario);

// Moves report.json, runs.jsonl and the figures beside them (*.png) from dir into a new folder
// dir/replaced-YYYYMMDD-HHMMSS (local time; "-2", "-3", ... when that exists) and returns that folder's path.
// Nothing is deleted. Throws ReportIoError when a file cannot be moved (what moved so far stays in the new folder).
std::string move_report_aside(const std::string& dir);

// Thrown by a ReportWriter that is not resuming when the folder holds runs (ExistingRuns::kRefuse): nothing was
// written or moved. The driver turns it into the refusal that says how to go on.
class ReportInTheWay : public Error {
 public:
  ReportInTheWay(const std::string& what, ExistingReport e) : Error(what), existing(std::move(e)) {}
  ExistingReport existing;
};

class ReportWriter {
 public:
  // Without resume, what to do with runs already in the folder: refuse (ReportInTheWay), or move them aside
  // (move_report_aside; --overwrite). A folder whose files hold no run is written over either way.
  enum class ExistingRuns { kRefuse, kMoveAside };
  // dir: the report folder (created). resume: keep the runs already in the journal/report (their ids are done(),
  // except those whose disposition is in `rerun`: `interrupted`, and with --retry-failed also failed, diverged and
  // timeout); otherwise start empty. The journal's first line records the scenario's sha256 and overrides; resuming
  // throws gs::Error when report.json or the journal belongs to another scenario or overrides, or when it cannot
  // tell. Without resume a folder holding runs is refused or moved aside (`existing`; moved_aside() names where).
  // Resuming a merged report (gradsweep merge --allow-missing) keeps its `merged` block and lists in its `resumed`
  // the ids of the runs the resumes completed.
  // Throws ReportIoError when the folder cannot be created or written.
  ReportWriter(std::string dir, const Scenario& scenario, json header, bool resume,
               const std::vector<Disposition>& rerun = {Disposition::kInterrupted},
               ExistingRuns existing = ExistingRuns::kRefuse);
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
  // Where the runs the folder held went (move_report_aside), or "" when nothing was moved.
  const std::string& moved_aside() const { return moved_aside_; }

 private:
  void append_line(const std::string& line);  // appends and fdatasyncs one journal line
  // merged_.resumed: id listed last (completed) or left out (an interrupted run, which the next --resume reruns).
  void note_resumed(const std::string& id, bool completed);

  std::string dir_;
  std::string moved_aside_;
  json header_;
  json merged_;                        // the resumed report's `merged` block (null: not a merged report)
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
