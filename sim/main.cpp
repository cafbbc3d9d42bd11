// gradsweep's command line: run, validate, list, fields. Everything else lives in the library.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "sim/compress/compressor.h"
#include "sim/config/scenario.h"
#include "sim/cost/hardware_profile.h"
#include "sim/model/dataset.h"
#include "sim/model/model.h"
#include "sim/report/file_io.h"
#include "sim/runtime/driver.h"
#include "sim/strategy/strategy.h"

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

void print_list() {
  std::printf("models (model.kind):\n");
  for (const auto& e : gs::model_registry()) std::printf("  %-14s %s\n", e.name, e.doc);
  std::printf("datasets (data.kind):\n");
  for (const auto& e : gs::dataset_registry()) std::printf("  %-14s %s\n", e.name, e.doc);
  std::printf("sync strategies (sync.kind):\n");
  for (const auto& e : gs::strategy_registry()) std::printf("  %-14s %s\n", e.name, e.doc);
  std::printf("compressors (compression.kind):\n");
  for (const auto& e : gs::compressor_registry()) std::printf("  %-14s %s\n", e.name, e.doc);
  std::printf("precision modes (precision.mode):\n");
  for (const auto& m : gs::precision_modes()) std::printf("  %-14s %s\n", m.name, m.doc);
  std::printf("hardware profiles (cluster.hardware, --hardware; from %s):\n", gs::hardware_dir().c_str());
  for (const auto& name : gs::hardware_profile_names()) {
    try {
      std::printf("  %-14s %s\n", name.c_str(), gs::load_hardware_profile(name)->description.c_str());
    } catch (const std::exception& e) {
      std::printf("  %-14s (unreadable: %s)\n", name.c_str(), e.what());
    }
  }
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gradsweep: simulate and benchmark data-parallel training strategies; sweeps scenario files and "
               "writes JSON reports (tools/plot.py draws them)"};
  app.require_subcommand(1);
  std::vector<std::string> args(argv, argv + argc);

  std::string scenario_file, out_dir, filter, hardware, validate_hardware;
  std::vector<std::string> sets;
  bool dry_run = false, resume = false, retry_failed = false, quiet = false, timing_only = false;
  CLI::App* run = app.add_subcommand("run", "run a scenario's sweep and write its report");
  run->add_option("scenario", scenario_file, "scenario file (default: scenarios/quickstart.json)");
  run->add_option("--out", out_dir, "report folder (default: reports/<scenario name>)");
  run->add_option("--set", sets, "override a field: dotted.path=value (JSON value, or a plain string); repeatable")
      ->allow_extra_args(false)
      ->type_name("PATH=VALUE");
  run->add_option("--hardware", hardware,
                  "hardware profile of the modeled clock: a name from `gradsweep list` or a profile file "
                  "(same as --set cluster.hardware=NAME)");
  run->add_flag("--timing-only", timing_only,
                "price the schedule alone on the modeled clock: no arithmetic, no model memory (same as --set "
                "training.mode=timing)");
  run->add_option("--filter", filter, "run only the runs whose id matches this regular expression");
  run->add_flag("--dry-run", dry_run, "print the expansion and each run's id and swept values; run nothing");
  CLI::Option* resume_flag =
      run->add_flag("--resume", resume, "keep the runs already in the report; run the missing and interrupted ids");
  run->add_flag("--retry-failed", retry_failed, "with --resume: also rerun failed, diverged and timed-out runs")
      ->needs(resume_flag);
  run->add_flag("--quiet", quiet, "no progress on stderr");

  std::string validate_file;
  std::vector<std::string> validate_sets;
  CLI::App* validate = app.add_subcommand("validate", "check a scenario file and print its expansion; runs nothing");
  validate->add_option("scenario", validate_file, "scenario file")->required();
  validate->add_option("--set", validate_sets, "override a field: dotted.path=value; repeatable")
      ->allow_extra_args(false)
      ->type_name("PATH=VALUE");
  validate->add_option("--hardware", validate_hardware, "hardware profile (same as --set cluster.hardware=NAME)");

  CLI::App* list = app.add_subcommand("list", "list models, datasets, sync strategies, compressors, precision modes, hardware profiles");
  CLI::App* fields = app.add_subcommand("fields", "print every scenario field with type, default and range (Markdown)");

  if (argc > 1 && argv[1][0] != '-') {
    std::string cmd = argv[1];
    if (cmd != "run" && cmd != "validate" && cmd != "list" && cmd != "fields") {
      std::fprintf(stderr, "gradsweep: unknown command \"%s\"; commands: run, validate, list, fields (see --help)\n",
                   cmd.c_str());
      return kExitBadInput;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitBadInput;
  }

  try {
    if (list->parsed()) {
      print_list();
      return 0;
    }
    if (fields->parsed()) {
      print_fields();
      return 0;
    }
    if (validate->parsed()) {
      if (!validate_hardware.empty()) validate_sets.push_back("cluster.hardware=" + validate_hardware);
      gs::Scenario s = gs::load_scenario(validate_file, validate_sets);
      std::printf("%s: valid; %s\n", validate_file.c_str(), gs::describe_expansion(s).c_str());
      return 0;
    }
    if (run->parsed()) {
      gs::install_stop_handlers();
      gs::install_test_faults();  // GRADSWEEP_TEST_FAULTS (tests only; nothing when unset)
      if (scenario_file.empty()) scenario_file = default_scenario();
      if (!hardware.empty()) sets.push_back("cluster.hardware=" + hardware);
      if (timing_only) sets.push_back("training.mode=timing");
      gs::Scenario s = gs::load_scenario(scenario_file, sets);
      if (dry_run) {
        std::fputs(gs::dry_run_text(s, filter).c_str(), stdout);
        return 0;
      }
      gs::DriverOptions o;
      o.out_dir = out_dir;
      o.filter = filter;
      o.resume = resume;
      o.retry_failed = retry_failed;
      o.argv = args;
      o.quiet = quiet;
      return gs::run_sweep(s, o);
    }
  } catch (const gs::ReportIoError& e) {
    std::fprintf(stderr, "gradsweep: %s\ngradsweep: the report could not be written; runs journaled so far are kept "
                 "(--resume continues once the folder is writable)\n", e.what());
    return kExitReportIo;
  } catch (const gs::ScenarioError& e) {
    std::fprintf(stderr, "%s\n%zu problem%s; nothing was run\n", e.what(), e.issues().size(),
                 e.issues().size() == 1 ? "" : "s");
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gradsweep: %s\n", e.what());
    return kExitBadInput;
  }
  return 0;
}
