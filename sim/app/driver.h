// The sweep driver: runs the expanded runs of a scenario one after another, shows progress, and writes the report
// (journal + atomic report.json). Signals: once the report is open, the first SIGINT/SIGTERM stops the current run at
// its next step boundary (recorded as `interrupted`), writes the report and exits 130/143; a second one exits at once.
// Before that (loading, validation, --filter) the first signal exits at once with 130/143: nothing was run.
#pragma once
#include <string>
#include <vector>

#include "sim/config/scenario.h"
#include "sim/core/id_pattern.h"
#include "sim/core/shard.h"

namespace gs {

// Longest --filter pattern accepted (characters); the pattern is an IdPattern (sim/core/id_pattern.h).
constexpr size_t kMaxFilterChars = 512;

struct DriverOptions {
  std::string out_dir;               // "" = reports/<scenario name>
  std::string filter;                // IdPattern searched in run ids ("" = all), <= kMaxFilterChars
  bool resume = false;               // run only ids not yet in the report (and the interrupted ones)
  bool retry_failed = false;         // with resume: also rerun failed, diverged and timeout runs
  bool overwrite = false;            // not resume: move runs already in out_dir aside (move_report_aside)
  std::vector<std::string> argv;     // recorded in the report's context
  bool quiet = false;                // no progress output
  // --shard K/N: run only the runs of slice K of N (sim/core/shard.h), into <out_dir>/shard-K-of-N/ (report, journal,
  // lock and run files; --resume, --overwrite and --dry-run act on that folder); count 0: the whole sweep into out_dir.
  int64_t shard_index = 0;
  int64_t shard_count = 0;
  Shard shard() const { return Shard{shard_index, shard_count}; }
};

// The folder this sweep's report goes into: out_dir (default reports/<scenario name>), plus shard-K-of-N/ when sharded.
std::string report_dir(const Scenario& scenario, const DriverOptions& options);

// Returns the process exit code: 0 when every run that ran passed or diverged, 1 when one failed, 130/143 when
// interrupted by SIGINT/SIGTERM. Throws gs::Error for problems before any run (bad filter, another writer, runs
// already in the folder without --resume or --overwrite: the text says how to go on) and
// ReportIoError when the report cannot be written (unwritable folder, disk full): the sweep stops there, the
// previous report.json stays intact and the runs journaled so far are kept for --resume.
int run_sweep(const Scenario& scenario, const DriverOptions& options);

// One refresh of the live progress line on a terminal (README, "Progress").
struct ProgressLine {
  size_t run = 1, runs = 1;        // this run's position i of N runs to run
  std::string id;                  // its run id
  int64_t step = 0, total = 0;     // optimizer steps done and planned
  double loss = 0.0;               // the last train loss (NaN: none)
  bool timing_only = false;        // training.mode "timing": no loss to show
  double run_eta_s = -1, sweep_eta_s = -1;  // seconds left in this run and in the whole sweep (< 0: unknown)
};
// The line fitted into `width` terminal columns: at most width - 1 characters, so that a refresh ("\r\033[K" + it)
// never wraps and redraws in place. It keeps i/N, the step, the loss and both ETAs, and shortens the run id in the
// middle ("abc...xyz") after dropping its sweep name, its null parts and then its keys (fit_run_id in driver.cpp),
// then drops the words "step" and "sweep", then the id; below about 36 columns it is cut.
std::string fit_progress_line(const ProgressLine& p, size_t width);

// Lines that stay on stderr (the sweep's first and last line, one per finished run, notes and errors) are wrapped to
// the output's width; kNoBreak joins words that a wrap keeps on one line (printed as a space).
constexpr char kNoBreak = '\x1f';
// The output's width in columns: $COLUMNS when set to a positive number (as Python's shutil.get_terminal_size and
// curses read it), else the window size of the terminal on fd (stderr unless given) when `terminal`, else 0
// (unknown: lines are not wrapped, so a log or a pipe keeps one line per message). One rule for every command's
// output: run's progress and notes on stderr, validate, --dry-run and list on stdout.
size_t output_columns(bool terminal, int fd = 2);
// text in lines of at most width - 1 characters (so a terminal never wraps them itself), broken at spaces, every line
// after the first indented by `indent` spaces; a word longer than a whole line is broken after its last '/' that
// fits (a long path between its folders; not in words joined by kNoBreak), else where the line ends. width 0: text
// unchanged (kNoBreak turned into spaces either way).
std::string wrap_to(const std::string& text, size_t width, size_t indent);
// Each line of text wrapped as wrap_to does, its continuation lines indented two spaces past the line's own leading
// spaces (the refusals' and notes' layout); width 0: text unchanged.
std::string wrap_lines(const std::string& text, size_t width);

// The --filter pattern (RE2 syntax, matched somewhere in a run id); throws gs::Error naming --filter when RE2 refuses
// it or it is longer than kMaxFilterChars (refused before compiling: a run id is never that long). RE2 matches in
// time linear in the id (no backtracking), so no pattern can hang the tool.
IdPattern compile_filter(const std::string& pattern);

// Installs the SIGINT/SIGTERM handlers (idempotent): before run_sweep opens the report a signal exits at once with
// 128 + signal; afterwards the first one is a stop request (see above). main calls it before loading a scenario.
void install_stop_handlers();
// The default actions back, once the command has ended (main, before the processes' exit agreement): a signal then
// (mpirun ending the other processes of a job whose process 0 exited non-zero) ends the process without a message.
void remove_stop_handlers();

// The --dry-run text: the expansion as a product, then each run's id and swept values (those the filter keeps).
// With --resume (resume.resume true): what that resume would do, checked as it would check it without writing:
// each listed run marked "done (kept)" or "runs", then the count of each; throws gs::Error / ReportIoError where
// the resume would be refused (another scenario or other --set values in resume.out_dir, unreadable files).
// Without --resume it is refused as the run would be where the folder holds runs, and with --overwrite it says
// what would be moved aside.
// columns: the width of its lines (output_columns; 0: each line as it is). A run's line that does not fit has its id
// whole on a line of its own and its swept values below it, under the id; an id longer than the line is not broken.
std::string dry_run_text(const Scenario& scenario, const std::string& filter, size_t columns = 0);
std::string dry_run_text(const Scenario& scenario, const DriverOptions& resume, size_t columns = 0);

// validate's line "FILE: valid; 12 runs = 4 [a] x 3 [b]" wrapped to columns (0: one line), each part of the
// expansion kept whole where it fits, continuation lines indented two spaces.
std::string validate_text(const std::string& file, const Scenario& scenario, size_t columns);

}  // namespace gs
