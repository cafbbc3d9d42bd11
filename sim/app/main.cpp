// gradsweep's command line: run, validate, list, fields. Everything else lives in the library.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "sim/comm/process_group.h"
#include "sim/compress/compressor.h"
#include "sim/config/scenario.h"
#include "sim/cost/calibrate.h"
#include "sim/cost/hardware_profile.h"
#include "sim/cost/price.h"
#include "sim/model/dataset.h"
#include "sim/model/model.h"
#include "sim/report/file_io.h"
#include "sim/report/merge.h"
#include "sim/app/driver.h"
#include "sim/strategy/strategy.h"
#include "sim/validate/validate.h"

namespace {

constexpr int kExitBadInput = 2;
constexpr int kExitReportIo = 3;  // the report could not be written (README: exit status)

std::string default_scenario() {
  const char* rel = "scenarios/quickstart.json";
  if (std::filesystem::exists(rel)) return rel;
  return std::string(GRADSWEEP_SOURCE_DIR) + "/" + rel;
}

std::string type_text(gs::FieldType t) {
  switch (t) {
    case gs::FieldType::kInt: return "integer";
    case gs::FieldType::kNumber: return "number";
    case gs::FieldType::kBool: return "bool";
    case gs::FieldType::kString: return "string";
    case gs::FieldType::kIntList: return "integer list";
    case gs::FieldType::kJson: return "JSON";
  }
  return "?";
}

// The width of what a command prints on stdout (validate, --dry-run, list): gs::output_columns of stdout, 0 (lines
// not wrapped) when unknown, as for the progress on stderr.
size_t stdout_columns() { return gs::output_columns(isatty(STDOUT_FILENO) != 0, STDOUT_FILENO); }

// CLI11's help (--help of gradsweep and of each command) at stdout_columns(), the width list and validate print at;
// unknown (a pipe without COLUMNS): CLI11's own lines. The name column stays as CLI11 aligns it and a description
// wraps under its own first line; where that would leave it fewer than 30 characters, it goes below the name,
// indented 4. The description and usage lines wrap with continuation lines indented 2.
class HelpFormatter final : public CLI::Formatter {
 public:
  explicit HelpFormatter(size_t columns) : columns_(columns) {}
  std::string make_option(const CLI::Option* opt, bool is_positional) const override {
    if (columns_ == 0) return CLI::Formatter::make_option(opt, is_positional);
    return row(make_option_name(opt, is_positional) + make_option_opts(opt), make_option_desc(opt));
  }
  std::string make_subcommand(const CLI::App* sub) const override {
    if (columns_ == 0) return CLI::Formatter::make_subcommand(sub);
    return row(sub->get_display_name(true), sub->get_description());
  }
  std::string make_description(const CLI::App* app) const override {
    return wrapped(CLI::Formatter::make_description(app));
  }
  std::string make_usage(const CLI::App* app, std::string name) const override {
    return wrapped(CLI::Formatter::make_usage(app, std::move(name)));
  }

 private:
  // text's lines wrapped (gs::wrap_lines), its final newline kept.
  std::string wrapped(const std::string& text) const {
    if (columns_ == 0 || text.empty()) return text;
    const bool newline = text.back() == '\n';
    return gs::wrap_lines(newline ? text.substr(0, text.size() - 1) : text, columns_) + (newline ? "\n" : "");
  }
  // "  name   description" with the description's paragraphs wrapped at the name column (or below the name).
  std::string row(const std::string& name, const std::string& desc) const {
    const std::string left = "  " + name;
    const size_t column = get_column_width();
    const bool beside = columns_ >= column + 30;
    const size_t indent = beside ? column : 4;
    const size_t width = columns_ > indent + 20 ? columns_ - indent : 20;  // gs::wrap_to: lines of width - 1
    std::vector<std::string> lines;
    std::istringstream paragraphs(desc);
    for (std::string para; std::getline(paragraphs, para);) {
      std::istringstream wrapped_para(gs::wrap_to(para, width, 0));
      for (std::string l; std::getline(wrapped_para, l);) lines.push_back(std::move(l));
    }
    const bool first_beside = beside && left.size() < column && !lines.empty();
    std::string out = first_beside ? left + std::string(column - left.size(), ' ') + lines[0] : left;
    for (size_t i = first_beside ? 1 : 0; i < lines.size(); ++i) out += "\n" + std::string(indent, ' ') + lines[i];
    return out + "\n";
  }
  size_t columns_;
};

// `gradsweep list`: one section per registry, "  name  doc" with the name column as wide as the longest name of
// all sections and the doc wrapped under itself to stdout_columns() (each paragraph one line when it is unknown).
void print_list() {
  using Entries = std::vector<std::pair<std::string, std::string>>;
  std::vector<std::pair<std::string, Entries>> sections;
  auto add = [&](std::string title, const auto& registry) {
    Entries e;
    for (const auto& x : registry) e.emplace_back(x.name, x.doc);
    sections.emplace_back(std::move(title), std::move(e));
  };
  add("models (model.kind):", gs::model_registry());
  add("datasets (data.kind):", gs::dataset_registry());
  add("sync strategies (sync.kind):", gs::strategy_registry());
  add("compressors (compression.kind):", gs::compressor_registry());
  add("precision modes (precision.mode):", gs::precision_modes());
  Entries hw;
  for (const auto& name : gs::hardware_profile_names()) {
    try {
      hw.emplace_back(name, gs::load_hardware_profile(name)->description);
    } catch (const std::exception& e) {
      hw.emplace_back(name, std::string("(unreadable: ") + e.what() + ")");
    }
  }
  sections.emplace_back("hardware profiles (cluster.hardware, --hardware; from " + gs::hardware_dir() + "):", hw);
  size_t name_width = 0;
  for (const auto& [title, entries] : sections)
    for (const auto& [name, doc] : entries) name_width = std::max(name_width, name.size());
  const size_t columns = stdout_columns();
  // The doc beside the name where that leaves it 30 characters, else (a narrow output) below it, indented by 4.
  const bool beside = columns == 0 || columns >= 2 + name_width + 2 + 30;
  const size_t indent = beside ? 2 + name_width + 2 : 4;
  const size_t doc_width = columns == 0 ? 0 : columns - indent;  // wrap_to: lines of doc_width - 1 characters
  for (const auto& [title, entries] : sections) {
    std::printf("%s\n", gs::wrap_to(title, columns, 2).c_str());
    for (const auto& [name, doc] : entries) {
      std::vector<std::string> lines;
      std::istringstream paragraphs(doc);
      for (std::string para; std::getline(paragraphs, para);) {
        const std::string text = gs::wrap_to(para, doc_width, 0);
        std::istringstream wrapped(text);
        for (std::string l; std::getline(wrapped, l);) lines.push_back(std::move(l));
        if (text.empty()) lines.emplace_back();  // an empty paragraph (or doc) keeps its line
      }
      if (lines.empty()) lines.emplace_back();
      if (!beside) std::printf("  %s\n", name.c_str());
      for (size_t i = 0; i < lines.size(); ++i)
        std::printf("%-*s%s\n", static_cast<int>(indent), !beside || i > 0 ? "" : ("  " + name).c_str(),
                    lines[i].c_str());
    }
  }
}

// Lines on stderr wrapped to the output's width (gs::output_columns; unwrapped when it is unknown).
void print_wrapped(const std::string& text) {
  std::fprintf(stderr, "%s\n", gs::wrap_lines(text, gs::output_columns(isatty(STDERR_FILENO) != 0)).c_str());
}

// An error that ends the command. Under mpirun with several processes it is kept for finish_processes, which prints it
// once when every process ended with the same text (a refused scenario), instead of once per process; else now.
std::string g_deferred_error;
void print_error(const std::string& text) {
  if (gs::process_group().size() > 1)
    g_deferred_error += (g_deferred_error.empty() ? "" : "\n") + text;
  else
    print_wrapped(text);
}

// load_scenario, where --hardware and --timing-only (`typed`: the path each sets and the option as typed) are --set
// values under the hood: a problem with one names the option the user typed ("(the value of --hardware, not of the
// file)"), not a --set they never gave, unless they also gave that path with --set.
gs::Scenario load_naming_options(const std::string& file, const std::vector<std::string>& sets,
                                 const gs::IdPattern* keep,
                                 const std::vector<std::pair<std::string, std::string>>& typed) {
  try {
    return gs::load_scenario(file, sets, keep);
  } catch (const gs::ScenarioError& e) {
    std::vector<gs::ConfigIssue> issues = e.issues();
    bool renamed = false;
    for (const auto& [path, option] : typed) {
      const size_t given = std::count_if(sets.begin(), sets.end(),
                                         [&](const std::string& s) { return s.rfind(path + "=", 0) == 0; });
      if (given != 1) continue;  // the user's own --set of that path too: keep naming --set
      const std::string as_set = " (the value of --set " + path + ", not of the file)";
      const std::string as_typed = " (the value of " + option + ", not of the file)";
      for (gs::ConfigIssue& i : issues) {
        const size_t at = i.message.find(as_set);
        if (at == std::string::npos) continue;
        i.message.replace(at, as_set.size(), as_typed);
        renamed = true;
      }
    }
    if (!renamed) throw;
    throw gs::ScenarioError(e.file(), issues);
  }
}

// Allowed settings worth knowing (Scenario::notes), one "note: file: path: text" each on stderr.
// Under mpirun only process 0 prints what every process would print the same (notes, validate's and --dry-run's text).
bool prints_for_the_job() { return gs::process_group().rank() == 0; }

void print_notes(const gs::Scenario& s) {
  if (!prints_for_the_job()) return;
  for (const auto& n : s.notes) print_wrapped(fmt::format("note: {}: {}: {}", s.path, n.path, n.message));
}

void print_fields() {
  std::printf("| path | type | default | allowed | meaning |\n|---|---|---|---|---|\n");
  for (const auto& f : gs::config_fields()) {
    std::string allowed;
    for (size_t i = 0; i < f.choices.size(); ++i) allowed += (i ? ", " : "") + gs::json(f.choices[i]).dump();
    bool has_min = f.min > -1e307, has_max = f.max < 1e307;
    if (has_min) allowed += fmt::format("{} {}", f.min_exclusive ? ">" : ">=", f.min);
    if (has_max) allowed += fmt::format("{}{} {}", has_min ? ", " : "", f.max_exclusive ? "<" : "<=", f.max);
    if (f.allow_inf) allowed += ", or \"inf\"";
    std::printf("| `%s` | %s | `%s` | %s | %s |\n", f.path.c_str(), type_text(f.type).c_str(),
                f.default_value.dump().c_str(), allowed.c_str(), f.doc.c_str());
  }
}

// `gradsweep merge`: the merged report, the runs or slices it lacks (with --allow-missing) as notes, and a summary
// line on stderr. Refusals (gs::Error) go to main's handler (exit 2); a report that cannot be written exits 3.
int merge_command(const gs::MergeRequest& req) {
  try {
    const gs::MergeResult m = gs::merge_reports(req);
    for (const auto& id : m.missing) print_wrapped("note: merge: missing run " + id);
    for (const auto& id : m.interrupted) print_wrapped("note: merge: interrupted run " + id);
    for (const auto k : m.missing_shards)
      print_wrapped(fmt::format("note: merge: missing slice {} of {}", k, m.shard_count));
    print_wrapped(fmt::format("gradsweep: merged {} slice report{} of {} slices: {} runs ({} given twice, the "
                              "same), {} run file{} copied -> {}",
                              m.reports.size(), m.reports.size() == 1 ? "" : "s", m.shard_count, m.runs,
                              m.duplicates, m.files, m.files == 1 ? "" : "s", m.report_path));
  } catch (const gs::ReportIoError& e) {
    print_wrapped(fmt::format("gradsweep: {}\ngradsweep: the merged report could not be written", e.what()));
    return kExitReportIo;
  }
  return 0;
}

// A command line CLI11 refuses (a missing or unknown argument, a value of the wrong type, --retry-failed without
// --resume, ...): "gradsweep: CMD: what (see gradsweep CMD --help)" on stderr and exit 2, as every other refusal;
// --help (CLI11's CallForHelp, exit code 0) prints the help. cmd: the subcommand given ("" when none was).
int parse_error(const CLI::App& app, const CLI::ParseError& e, const std::string& cmd) {
  if (e.get_exit_code() == 0) return app.exit(e);
  const std::string named = cmd.empty() ? "" : cmd + ": ";
  print_error(fmt::format("gradsweep: {}{} (see gradsweep {}--help)", named, e.what(), cmd.empty() ? "" : cmd + " "));
  return kExitBadInput;
}

// `gradsweep run`: its options, and what it does once parsed.
struct RunArgs {
  CLI::App* cmd = nullptr;
  std::string scenario_file, out_dir, filter, hardware, shard_text;
  std::vector<std::string> sets;
  bool dry_run = false, resume = false, retry_failed = false, quiet = false, timing_only = false, overwrite = false;
};

void add_run_command(CLI::App& app, RunArgs& a) {
  CLI::App* run = a.cmd = app.add_subcommand("run", "run a scenario's sweep and write its report");
  run->add_option("scenario", a.scenario_file, "scenario file (default: scenarios/quickstart.json)");
  run->add_option("--out", a.out_dir, "report folder (default: reports/<scenario name>)");
  run->add_option("--set", a.sets, "override a field: dotted.path=value (JSON value, or a plain string); repeatable")
      ->allow_extra_args(false)
      ->type_name("PATH=VALUE");
  run->add_option("--hardware", a.hardware,
                  "hardware profile of the modeled clock: a name from `gradsweep list` or a profile file "
                  "(same as --set cluster.hardware=NAME)");
  run->add_flag("--timing-only", a.timing_only,
                "price the schedule alone on the modeled clock: no arithmetic, no model memory (same as --set "
                "training.mode=timing)");
  run->add_option("--filter", a.filter,
                  "run only the runs whose id this pattern matches somewhere: RE2 syntax (linear-time matching), at "
                  "most 512 characters (scenarios/README.md)");
  run->add_flag("--dry-run", a.dry_run, "print the expansion and each run's id and swept values; run nothing");
  CLI::Option* resume_flag =
      run->add_flag("--resume", a.resume, "keep the runs already in the report; run the missing and interrupted ids");
  run->add_flag("--retry-failed", a.retry_failed, "with --resume: also rerun failed, diverged and timed-out runs")
      ->needs(resume_flag);
  run->add_flag("--overwrite", a.overwrite,
                "when the report folder holds runs: move its report.json, runs.jsonl, figures and run files "
                "(weights/, batches/, timeline/) into "
                "replaced-<date>-<time>/ inside it, then run (without it such a folder is refused)")
      ->excludes(resume_flag);
  run->add_flag("--quiet", a.quiet, "no progress on stderr");
  run->add_option("--shard", a.shard_text,
                  "run only slice K of N of the sweep (a run's slice depends on its id alone), into "
                  "<out>/shard-K-of-N/; K from 1 as SLURM_ARRAY_TASK_ID; gradsweep merge joins the slices "
                  "(docs/cluster.md)")
      ->type_name("K/N");
}

int run_command(RunArgs& a, const std::vector<std::string>& args) {
  gs::install_stop_handlers();
  gs::install_test_faults();  // GRADSWEEP_TEST_FAULTS (tests only; nothing when unset)
  if (a.scenario_file.empty()) a.scenario_file = default_scenario();
  if (a.cmd->count("--out") > 0 && a.out_dir.empty())
    throw gs::Error("--out: expected the report folder's path, got an empty one (leave --out out for "
                    "reports/<scenario name>)");
  // --shard is checked before the scenario is read: a bad slice is refused before anything else.
  const gs::Shard shard = a.cmd->count("--shard") > 0 ? gs::parse_shard(a.shard_text) : gs::Shard{};
  std::vector<std::pair<std::string, std::string>> typed;
  if (!a.hardware.empty()) {
    a.sets.push_back("cluster.hardware=" + a.hardware);
    typed.emplace_back("cluster.hardware", "--hardware");
  }
  if (a.timing_only) {
    a.sets.push_back("training.mode=timing");
    typed.emplace_back("training.mode", "--timing-only");
  }
  // The filter before the scenario: the problems of runs it leaves out do not refuse the sweep.
  std::optional<gs::IdPattern> keep;
  if (!a.filter.empty()) keep.emplace(gs::compile_filter(a.filter));
  gs::Scenario s = load_naming_options(a.scenario_file, a.sets, keep ? &*keep : nullptr, typed);
  if (gs::process_group().rank() == 0) print_notes(s);  // mpirun: once, not once per process
  if (gs::test_fault("stop_before_report")) ::raise(SIGSTOP);  // tests: a signal before any run
  gs::DriverOptions o;
  o.out_dir = a.out_dir;
  o.filter = a.filter;
  o.resume = a.resume;
  o.retry_failed = a.retry_failed;
  o.overwrite = a.overwrite;
  o.argv = args;
  o.quiet = a.quiet;
  o.shard_index = shard.index;
  o.shard_count = shard.count;
  if (a.dry_run) {  // with --resume: which runs it keeps and reruns, refused where the resume would be
    const std::string text = gs::dry_run_text(s, o, stdout_columns());  // its refusals on every process
    if (prints_for_the_job()) std::fputs(text.c_str(), stdout);
    return 0;
  }
  return gs::run_sweep(s, o);
}

// `gradsweep validate`.
struct ValidateArgs {
  CLI::App* cmd = nullptr;
  std::string file, hardware;
  std::vector<std::string> sets;
  bool timing_only = false;
};

void add_validate_command(CLI::App& app, ValidateArgs& a) {
  a.cmd = app.add_subcommand("validate", "check a scenario file and print its expansion; runs nothing");
  a.cmd->add_option("scenario", a.file, "scenario file")->required();
  a.cmd->add_option("--set", a.sets, "override a field: dotted.path=value; repeatable")
      ->allow_extra_args(false)
      ->type_name("PATH=VALUE");
  a.cmd->add_option("--hardware", a.hardware, "hardware profile (same as --set cluster.hardware=NAME)");
  a.cmd->add_flag("--timing-only", a.timing_only, "as run's: training.mode \"timing\" (same as --set "
                                                  "training.mode=timing)");
}

int validate_command(ValidateArgs& a) {
  std::vector<std::pair<std::string, std::string>> typed;
  if (!a.hardware.empty()) {
    a.sets.push_back("cluster.hardware=" + a.hardware);
    typed.emplace_back("cluster.hardware", "--hardware");
  }
  if (a.timing_only) {  // the run command line's options, so that it can be validated as typed
    a.sets.push_back("training.mode=timing");
    typed.emplace_back("training.mode", "--timing-only");
  }
  gs::Scenario s = load_naming_options(a.file, a.sets, nullptr, typed);
  print_notes(s);
  const std::string text = gs::validate_text(a.file, s, stdout_columns());
  if (prints_for_the_job()) std::printf("%s\n", text.c_str());
  return 0;
}

// `gradsweep price`.
struct PriceArgs {
  CLI::App* cmd = nullptr;
  std::string hardware = "h100-sxm-8", op = "all_reduce", bytes = "1K:8G", algo, dtype = "fp32";
  int ranks = 0;
  bool as_json = false;
};

void add_price_command(CLI::App& app, PriceArgs& a) {
  CLI::App* price = a.cmd = app.add_subcommand("price", "print the modeled clock's collective times as nccl-tests "
                                                        "prints them (size, count, type, time, algbw, busbw, "
                                                        "algorithm, protocol)");
  price->add_option("--hardware", a.hardware, "hardware profile: a name from `gradsweep list` or a profile file");
  price->add_option("--op", a.op, "all_reduce | all_gather | reduce_scatter | broadcast");
  price->add_option("--ranks", a.ranks, "communicator size (default: the profile's GPUs)");
  price->add_option("--bytes", a.bytes, "SIZE or MIN:MAX[:FACTOR], K/M/G binary as nccl-tests (default 1K:8G:2)");
  price->add_option("--algo", a.algo, "force an algorithm as NCCL_ALGO does: ring | tree | nvls (nvlstree: nvls "
                                      "across nodes, as the table names it)");
  price->add_option("--dtype", a.dtype, "element type: fp32 | fp16 | bf16 | fp64 | fp8 | int8 | uint8 | int32");
  price->add_flag("--json", a.as_json, "the same rows as JSON");
}

int price_command(const PriceArgs& a) {
  gs::PriceRequest r;
  r.hardware = a.hardware;
  r.op = gs::collective_kind_from_name(a.op);
  if (a.cmd->count("--ranks") > 0) r.ranks = a.ranks;
  gs::parse_size_range(a.bytes, r);
  r.algo = gs::nccl_algo_from_name(a.algo);
  r.dtype = gs::data_type_from_name(a.dtype);
  const auto rows = gs::price_rows(r);
  if (a.as_json)
    std::printf("%s\n", gs::price_json(r, rows).dump(2).c_str());
  else
    std::fputs(gs::price_table(r, rows).c_str(), stdout);
  return 0;
}

// `gradsweep calibrate`.
struct CalibrateArgs {
  CLI::App* cmd = nullptr;
  gs::CalibrateRequest req;
};

void add_calibrate_command(CLI::App& app, CalibrateArgs& a) {
  CLI::App* calibrate = a.cmd = app.add_subcommand("calibrate", "write a hardware profile from your own nccl-tests "
                                                                "and GEMM measurements, printing the fit's error per "
                                                                "point");
  gs::CalibrateRequest& cal = a.req;
  calibrate->add_option("--base", cal.base, "profile to start from (name or file)")->required();
  calibrate->add_option("--ranks", cal.ranks, "the ranks a nccl-tests file was measured on when it does not list "
                                              "them (default: the base profile's GPUs)");
  calibrate->add_option("--nccl-tests", cal.nccl_files,
                        "nccl-tests output, text or -J JSON; [OP[:ALGO]=]FILE when the file does not say which "
                        "collective it measured (e.g. all_gather=ag.txt, all_reduce:ring=ring.txt)")
      ->type_name("FILE...");
  calibrate->add_option("--gemm", cal.gemm_files,
                        "GEMM sweep: bench_gpu --benchmark_filter=Gemm --benchmark_format=json (cuda build), or "
                        "{\"precision\", \"shapes\": [[m, n, k, TFLOPS], ...]}")
      ->type_name("FILE");
  calibrate->add_option("--name", cal.name, "the new profile's name (default: the output file's name)");
  calibrate->add_option("--out", cal.out, "profile file to write (refused if it exists)")->required();
}

int calibrate_command(const CalibrateArgs& a) {
  const gs::CalibrateRequest& cal = a.req;
  if (std::filesystem::exists(cal.out)) {
    std::fprintf(stderr, "gradsweep: --out %s exists; calibrate writes a new profile file: give another path\n",
                 cal.out.c_str());
    return kExitBadInput;
  }
  const gs::CalibrateResult res = gs::calibrate(cal);
  gs::write_file_atomic(cal.out, res.profile_text);
  std::fputs(res.report.c_str(), stdout);
  std::printf("\nwrote %s (use it as --hardware %s or cluster.hardware)\n", cal.out.c_str(), cal.out.c_str());
  return 0;
}

// `gradsweep merge`.
struct MergeArgs {
  CLI::App* cmd = nullptr;
  gs::MergeRequest req;
};

void add_merge_command(CLI::App& app, MergeArgs& a) {
  CLI::App* merge = a.cmd = app.add_subcommand("merge", "join the reports of a sweep's slices (run --shard K/N) into "
                                                        "one report (docs/cluster.md)");
  merge->add_option("sources", a.req.sources,
                    "slice reports: report.json files, their folders, or the slices' --out folder (its "
                    "shard-K-of-N/ folders)")
      ->required()
      ->type_name("REPORT...");
  merge->add_option("--out", a.req.out_dir, "folder of the merged report (refused when it holds one)")->required();
  merge->add_flag("--allow-missing", a.req.allow_missing,
                  "write the report even when slices or runs are missing (listed in its merged block)");
}

// Every command's options, bound to the CLI11 app in the order `--help` lists them.
struct Commands {
  RunArgs run;
  ValidateArgs validate;
  CLI::App* list = nullptr;
  CLI::App* fields = nullptr;
  PriceArgs price;
  CalibrateArgs calibrate;
  MergeArgs merge;
};

// The parsed command, run; refusals turned into their exit status and message.
int dispatch(Commands& c, const std::vector<std::string>& args) {
  try {
    if (c.list->parsed()) {
      print_list();
      return 0;
    }
    if (c.fields->parsed()) {
      print_fields();
      return 0;
    }
    if (c.price.cmd->parsed()) return price_command(c.price);
    if (c.calibrate.cmd->parsed()) return calibrate_command(c.calibrate);
    if (c.merge.cmd->parsed()) {
      c.merge.req.argv = args;
      return merge_command(c.merge.req);
    }
    if (c.validate.cmd->parsed()) return validate_command(c.validate);
    if (c.run.cmd->parsed()) return run_command(c.run, args);
  } catch (const gs::ReportIoError& e) {
    print_error(fmt::format("gradsweep: {}\ngradsweep: the report could not be written; {}", e.what(),
                              e.before_any_run ? "nothing was run"
                                               : "runs journaled so far are kept (--resume continues once the folder "
                                                 "is writable)"));
    return kExitReportIo;
  } catch (const gs::ScenarioError& e) {
    print_error(fmt::format("{}\n{} problem{}; nothing was run", e.what(), e.issues().size(),
                              e.issues().size() == 1 ? "" : "s"));
    return kExitBadInput;
  } catch (const std::exception& e) {
    print_error(fmt::format("gradsweep: {}", e.what()));
    return kExitBadInput;
  }
  return 0;
}

// Every command (main runs it between the start and the end of the job's processes).
int commands(int argc, char** argv) {
  CLI::App app{"gradsweep: simulate and benchmark data-parallel training strategies; sweeps scenario files and "
               "writes JSON reports (tools/plot.py draws them)"};
  app.formatter(std::make_shared<HelpFormatter>(stdout_columns()));  // before the commands: they take a copy
  app.require_subcommand(1);
  const std::vector<std::string> args(argv, argv + argc);
  Commands c;
  add_run_command(app, c.run);
  add_validate_command(app, c.validate);
  c.list = app.add_subcommand("list", "list models, datasets, sync strategies, compressors, precision modes, "
                                      "hardware profiles");
  c.fields = app.add_subcommand("fields", "print every scenario field with type, default and range (Markdown)");
  add_price_command(app, c.price);
  add_calibrate_command(app, c.calibrate);
  add_merge_command(app, c.merge);

  if (argc > 1 && argv[1][0] != '-') {
    std::string cmd = argv[1];
    if (cmd != "run" && cmd != "validate" && cmd != "list" && cmd != "fields" && cmd != "price" && cmd != "calibrate" &&
        cmd != "merge") {
      std::fprintf(stderr, "gradsweep: unknown command \"%s\"; commands: run, validate, list, fields, price, "
                   "calibrate, merge (see --help)\n",
                   cmd.c_str());
      return kExitBadInput;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parse_error(app, e, argc > 1 && argv[1][0] != '-' ? argv[1] : "");
  }
  return dispatch(c, args);
}

}  // namespace

// Under mpirun MPI starts first (and a build without MPI refuses such a launch, exit 2); at the end the processes agree
// on the job's exit status and print a refusal they share once (finish_processes); a process that fails alone aborts
// every process with its exit status.
int main(int argc, char** argv) {
  try {
    gs::start_processes(&argc, &argv);
  } catch (const std::exception& e) {
    print_wrapped(fmt::format("gradsweep: {}", e.what()));
    return kExitBadInput;
  }
  const int code = commands(argc, argv);
  gs::remove_stop_handlers();
  return gs::finish_processes(code, g_deferred_error, print_wrapped);
}
