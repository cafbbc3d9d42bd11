// The sweep driver (see driver.h): filter, resume, progress on stderr, report writing, signals.
#include "sim/core/count_text.h"
#include "sim/app/driver.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "sim/comm/process_group.h"
#include "sim/core/error.h"
#include "sim/core/id_pattern.h"
#include "sim/core/json_io.h"
#include "sim/model/dataset.h"
#include "sim/model/model.h"
#include "sim/report/file_io.h"
#include "sim/report/report.h"
#include "sim/app/memory.h"
#include "sim/report/run_files.h"
#include "sim/report/timeline.h"
#include "sim/runtime/rank_loop.h"
#include "sim/runtime/run_plan.h"

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

// The text cut in its middle to at most `max` characters ("abc...xyz"; the whole text when it fits).
std::string middle_cut(const std::string& id, size_t max) {
  if (id.size() <= max) return id;
  if (max < 5) return id.substr(0, max);
  const size_t keep = max - 3, head = (keep + 1) / 2, tail = keep - head;
  return id.substr(0, head) + "..." + id.substr(id.size() - tail);
}

// A run id "NAME.k1=v1.k2=v2.rR" (sim/config/scenario.h) in its parts: NAME, each "key=value" and "rR". A part
// starts after a '.' that is followed by a key and '=' (a key: words [A-Za-z_][A-Za-z0-9_]* joined by dots, as an id
// spells a whole path where two swept paths share their last part: model.kind=, sync.stage=), or by the repeat
// "r<digits>" at the end, so the dots inside values (0.001) stay in their value.
std::vector<std::string> run_id_parts(const std::string& id) {
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; };
  auto word_start = [&](size_t k) {
    return k < id.size() && (std::isalpha(static_cast<unsigned char>(id[k])) != 0 || id[k] == '_');
  };
  // Where the part starting at j ends its key: the index of its '=' (the repeat: the id's end); npos when no part
  // starts at j.
  auto part_key_end = [&](size_t j) -> size_t {
    if (j >= id.size()) return std::string::npos;
    if (id[j] == 'r' && j + 1 < id.size() && id.find_first_not_of("0123456789", j + 1) == std::string::npos)
      return id.size();  // the repeat
    if (!word_start(j)) return std::string::npos;
    size_t k = j;
    for (;;) {
      while (k < id.size() && word(id[k])) ++k;
      if (k < id.size() && id[k] == '.' && word_start(k + 1)) {
        ++k;
        continue;
      }
      return k < id.size() && id[k] == '=' ? k : std::string::npos;
    }
  };
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i < id.size(); ++i) {
    if (id[i] != '.') continue;
    const size_t key_end = part_key_end(i + 1);
    if (key_end == std::string::npos) continue;
    parts.push_back(id.substr(start, i - start));
    start = i + 1;
    i = key_end;  // the dots of a dotted key (model.kind=) start no part
  }
  parts.push_back(id.substr(start));
  return parts;
}

// A run id fitted to at most `max` characters, keeping what tells the runs of a sweep apart: the whole id when it
// fits; else without its NAME (the sweep's own name, the same in every run and printed in the sweep's header); else
// also without its "key=null" parts (an axis value that leaves the field at its default: the key's absence says as
// much); else its values alone, in the sweep's axis order (as the header lists the axes), joined by '/'
// ("h100-pcie-8/onebit_adam/0.001/20/r0"); the last cut in its middle ("abc...xyz"). So at 60 to 120 columns the runs
// of the shipped sweeps print apart, where a middle cut of the whole id printed runs alike (onebit_adam's adam and
// zero_one_adam runs, scaling's rank counts).
std::string fit_run_id(const std::string& id, size_t max) {
  if (id.size() <= max) return id;
  std::vector<std::string> parts = run_id_parts(id);
  auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& s : v) out += (out.empty() ? "" : ".") + s;
    return out;
  };
  if (parts.size() > 1 && parts.front().find('=') == std::string::npos) parts.erase(parts.begin());
  std::string shorter = join(parts);
  if (shorter.size() <= max) return shorter;
  std::vector<std::string> set;
  for (const std::string& s : parts) {
    const std::string null_value = "=null";
    const bool is_null = s.size() > null_value.size() && s.compare(s.size() - null_value.size(), null_value.size(),
                                                                   null_value) == 0;
    if (!is_null) set.push_back(s);
  }
  if (set.empty()) return middle_cut(shorter, max);
  shorter = join(set);
  if (shorter.size() <= max) return shorter;
  std::string values;
  for (const std::string& s : set) {
    const size_t eq = s.find('=');
    values += (values.empty() ? "" : "/") + (eq == std::string::npos ? s : s.substr(eq + 1));
  }
  return middle_cut(values, max);
}

// " modeled step 12.3 ms, 4.56e+05 samples/s" of a run's report entry (what it has of the two; "" without either).
std::string modeled_summary(const json& run) {
  std::string out;
  const json* modeled = run.contains("timing") && run["timing"].is_object() && run["timing"].contains("modeled")
                            ? &run["timing"]["modeled"] : nullptr;
  if (modeled != nullptr && modeled->is_object() && modeled->contains("step")) {
    const json& all = (*modeled)["step"].value("all", json::object());
    if (all.contains("mean_ms") && all["mean_ms"].is_number())
      out += fmt::format(" modeled step {:.4g} ms", all["mean_ms"].get<double>());
  }
  if (run.contains("throughput") && run["throughput"].is_object() &&
      run["throughput"].value("modeled_samples_per_s", json()).is_number())
    out += fmt::format("{} {:.4g} samples/s", out.empty() ? "" : ",",
                       run["throughput"]["modeled_samples_per_s"].get<double>());
  return out;
}

}  // namespace

std::string wrap_to(const std::string& text, size_t width, size_t indent) {
  const size_t max = width > 1 ? width - 1 : 1;
  auto joined = [](std::string t) {  // the words' own spaces back
    std::replace(t.begin(), t.end(), kNoBreak, ' ');
    return t;
  };
  if (width == 0 || text.size() <= max) return joined(text);
  indent = std::min(indent, max / 2);
  std::string out, line, word;
  auto room = [&] { return max - (out.empty() ? 0 : indent); };
  auto end_line = [&] {
    out += (out.empty() ? "" : "\n" + std::string(indent, ' ')) + line;
    line.clear();
  };
  std::istringstream in(text);
  while (in >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > room()) end_line();
    while (line.empty() && word.size() > room()) {  // longer than a line: break it, after a '/' where it has one
      size_t cut = room();
      // A path is cut between its folders, not inside a name (a phrase held together by kNoBreak is not a path).
      const size_t slash = word.find(kNoBreak) == std::string::npos ? word.rfind('/', cut - 1) : std::string::npos;
      if (slash != std::string::npos && slash > 0) cut = slash + 1;
      line = word.substr(0, cut);
      word = word.substr(cut);
      end_line();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) end_line();
  return joined(out);
}

std::string wrap_lines(const std::string& text, size_t width) {
  if (width == 0) return wrap_to(text, 0, 0);
  std::string out, line;
  std::istringstream in(text);
  for (bool first = true; std::getline(in, line); first = false) {
    const size_t lead = std::min(line.find_first_not_of(' '), line.size());
    const size_t room = width > lead + 20 ? width - lead : 20;
    const std::string pad(lead, ' ');
    std::string prefixed = pad;
    for (char c : wrap_to(line.substr(lead), room, 2)) prefixed += c == '\n' ? "\n" + pad : std::string(1, c);
    out += (first ? "" : "\n") + prefixed;
  }
  return out;
}

size_t output_columns(bool terminal, int fd) {
  if (const char* c = std::getenv("COLUMNS"); c != nullptr) {
    char* end = nullptr;
    const long v = std::strtol(c, &end, 10);
    if (end != c && *end == '\0' && v > 0) return static_cast<size_t>(v);
  }
  winsize ws{};
  if (terminal && ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
}

namespace {
// What is left of a line of `columns` after `indent` (wrap_to's continuation lines); 0 for an unknown width.
size_t line_room(size_t columns, size_t indent) {
  if (columns == 0) return 0;
  const size_t max = columns > 1 ? columns - 1 : 1;
  return max - std::min(indent, max / 2);
}

// text with its spaces turned into kNoBreak when it fits in `room` characters (or the width is unknown, room 0), so
// a wrap keeps it on one line; a longer text keeps its spaces, so a wrap breaks it between words, not inside one.
std::string whole_if_fits(std::string text, size_t room) {
  if (room == 0 || text.size() <= room) std::replace(text.begin(), text.end(), ' ', kNoBreak);
  return text;
}

// describe_expansion's parts (expansion_parts), suffix after the last, each whole_if_fits(room); a part too long for
// a line keeps "x N [" with its first name, so that no line ends in "x".
std::string expansion_to_wrap(const Scenario& s, size_t room, const std::string& suffix) {
  std::vector<std::string> parts = expansion_parts(s);
  parts.back() += suffix;
  std::string out;
  for (auto part : parts) {
    part = whole_if_fits(part, room);
    for (size_t at = 0; at < part.size() && part[at] != '['; ++at)
      if (part[at] == ' ') part[at] = kNoBreak;
    out += (out.empty() ? "" : " ") + part;
  }
  return out;
}

}  // namespace

std::string validate_text(const std::string& file, const Scenario& s, size_t columns) {
  return wrap_to(file + ": valid; " + expansion_to_wrap(s, line_room(columns, 2), ""), columns, 2);
}

IdPattern compile_filter(const std::string& f) {
  if (f.size() > kMaxFilterChars)
    throw Error(fmt::format("--filter: a pattern of at most {} characters is accepted, got {} characters (\"{}\")",
                            kMaxFilterChars, f.size(), bounded_text(f, 60)));
  try {
    return IdPattern(f);
  } catch (const Error& e) {
    throw Error("--filter: not an RE2 pattern: \"" + bounded_text(f) + "\": " + e.what() +
                " (syntax: RE2, matched somewhere in the run id; scenarios/README.md)");
  }
}

namespace {

// The --filter pattern over run ids (compile_filter); throws gs::Error when RE2 refuses it or it matches none of the
// runs.
IdPattern make_filter(const std::string& f, const Scenario& s) {
  const IdPattern re = compile_filter(f);
  for (const auto& r : s.runs)
    if (re.search(r.id)) return re;
  std::string examples;
  for (size_t i = 0; i < s.runs.size() && i < 3; ++i) examples += (i ? ", " : "") + s.runs[i].id;
  if (s.runs.size() > 3) examples += ", ...";
  throw Error(fmt::format("--filter \"{}\": 0 of {} match; ids look like {} (--dry-run lists them all; a --set "
                          "on a swept path changes the ids, so give --dry-run the same --set values)",
                          bounded_text(f), count_text(s.runs.size(), "run"), bounded_text(examples, 300)));
}

}  // namespace

std::string fit_progress_line(const ProgressLine& p, size_t width) {
  const size_t max = width > 1 ? width - 1 : 1;
  const std::string count = fmt::format("[{}/{}]", p.run, p.runs);
  // The step right-aligned to the total's digits, and room kept for a loss of up to 10 characters: the id keeps
  // one length through a run, so refreshes do not jitter.
  const std::string steps = fmt::format("{:>{}}/{}", p.step, std::to_string(p.total).size(), p.total);
  const std::string loss_value = format_number(p.loss, 4);
  const std::string loss = p.timing_only ? "timing-only" : "loss " + loss_value;
  const size_t loss_room = p.timing_only || loss_value.size() >= 10 ? 0 : 10 - loss_value.size();
  const std::string run_eta = fmt_duration(p.run_eta_s), sweep_eta = fmt_duration(p.sweep_eta_s);
  // Longest to shortest; {id} is cut in the middle to what is left, down to `min_id` characters.
  struct Form {
    std::string fixed;  // with "{}" where the id goes ("" when it has none)
    size_t min_id;
  };
  const Form forms[] = {
      {fmt::format("{} {{}} step {} {} ETA {} (sweep {})", count, steps, loss, run_eta, sweep_eta), 20},
      {fmt::format("{} {{}} {} {} ETA {}/{}", count, steps, loss, run_eta, sweep_eta), 10},
      {fmt::format("{} {} {} ETA {}/{}", count, steps, loss, run_eta, sweep_eta), 0},
  };
  for (const auto& f : forms) {
    const bool with_id = f.fixed.find("{}") != std::string::npos;
    const size_t fixed = f.fixed.size() - (with_id ? 2 : 0);
    if (fixed > max) continue;
    if (!with_id) return f.fixed;
    const size_t room = max - fixed > loss_room ? max - fixed - loss_room : 0;
    if (room < std::min(f.min_id, p.id.size())) continue;
    return fmt::format(fmt::runtime(f.fixed), fit_run_id(p.id, room));
  }
  const std::string last = forms[2].fixed;
  return last.substr(0, max);
}

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

void remove_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

namespace {
// The refusal of a sweep without --resume into a folder that holds runs: what is there, whose, and the three ways on.
std::string replace_refusal(const ExistingReport& e, const Scenario& s, const DriverOptions& o) {
  const IdPattern re = make_filter(o.filter, s);
  const size_t finished = e.runs - e.interrupted;
  std::string held = e.runs == 0 ? "a report.json"
                                 : fmt::format("a report of {} run{} ({} finished{})", e.runs, e.runs == 1 ? "" : "s",
                                               finished, e.interrupted ? fmt::format(", {} interrupted", e.interrupted)
                                                                       : std::string());
  // The mismatch (report.cpp) may run over several lines, its details indented: it ends the sentence without a stop.
  const std::string whose =
      e.mismatch.empty()
          ? " of this scenario (the same file and --set values)."
          : (e.scenario_name.empty() ? std::string() : fmt::format(" of scenario \"{}\"", e.scenario_name)) +
                " that --resume cannot continue:\n  " + e.mismatch;
  std::string out = fmt::format("{} already holds {}{}\nThis sweep would replace it, so nothing was run. Choose one:\n",
                                e.dir, held, whose);
  if (e.mismatch.empty()) {
    size_t to_run = 0;
    for (const auto& r : s.runs)  // this slice's runs only (--shard): the others are another slice's to run
      to_run += o.shard().holds(r.id) && re.search(r.id) && e.kept.count(r.id) == 0 ? 1 : 0;
    out += fmt::format("  --resume      keep its {} finished run{}, run the {} missing or interrupted{}\n",
                       e.kept.size(), e.kept.size() == 1 ? "" : "s", to_run,
                       o.filter.empty() ? "" : " that --filter keeps");
  }
  out += "  --out DIR     write this sweep's report into another folder\n";
  out += fmt::format("  --overwrite   first move its report.json, runs.jsonl, figures (*.png) and run\n"
                     "                files (weights/, batches/, timeline/) into\n"
                     "                {}/replaced-<date>-<time>/ (nothing is deleted)", e.dir);
  if (!e.mismatch.empty()) out += "\n(--resume continues only a report of the same scenario file and --set values)";
  return out;
}

// head ("  [i] ") and a run id, broken where the line is full after a '.' between the id's parts (run_id_parts),
// continuation lines indented 2 past the id; a part longer than a line is cut at the line's end. The lines joined
// without their indents give the id back (what --filter takes). No final newline.
std::string id_lines(const std::string& head, const std::vector<std::string>& parts, size_t columns) {
  const size_t max = columns == 0 ? std::string::npos : (columns > 1 ? columns - 1 : 1);
  const size_t indent = std::min(head.size() + 2, max / 2);
  std::string out, line = head;
  bool fresh = true;  // line holds its prefix only
  auto flush = [&] {
    out += line + "\n";
    line = std::string(indent, ' ');
    fresh = true;
  };
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string part = parts[i] + (i + 1 < parts.size() ? "." : "");
    if (!fresh && line.size() + part.size() > max) flush();
    while (line.size() + part.size() > max) {  // longer than a line
      const size_t room = max > line.size() ? max - line.size() : 0;
      line += part.substr(0, room);
      part.erase(0, room);
      flush();
    }
    line += part;
    fresh = false;
  }
  return out + line;
}

// done: the ids a --resume keeps (nullptr: not a resume). columns: the output's width (0: lines as they are).
// shard: the slice listed (inactive: all runs).
std::string dry_run_listing(const Scenario& s, const std::string& filter, const std::map<std::string, json>* done,
                            const std::string& dir, size_t columns, const Shard& shard = Shard{}) {
  const IdPattern re = make_filter(filter, s);
  std::string out = wrap_to(expansion_to_wrap(s, line_room(columns, 2), ""), columns, 2) + "\n";
  size_t kept = 0, kept_done = 0, in_shard = 0;
  for (const auto& r : s.runs) {
    if (!shard.holds(r.id)) continue;
    ++in_shard;
    if (!re.search(r.id)) continue;
    ++kept;
    std::vector<std::string> values;  // "path=value" each, then the repeat and the resume's mark
    for (const auto& a : s.axes)
      for (const auto& p : a.paths)
        values.push_back(p + "=" + r.swept[p].dump(-1, ' ', false, json::error_handler_t::replace));
    if (s.repeats > 1) values.push_back(fmt::format("repeat={} seed={}", r.repeat, r.config.training.seed));
    if (done != nullptr) {
      const bool is_done = done->count(r.id) > 0;
      kept_done += is_done ? 1 : 0;
      values.push_back(is_done ? " (done: kept)" : " (runs)");  // two spaces before it, as between id and values
    }
    const std::string head = fmt::format("  [{}] ", r.index);
    std::string line = head + r.id + " ";
    for (const auto& v : values) line += " " + v;
    if (columns == 0 || line.size() <= columns - 1) {  // one line as it is
      out += line + "\n";
      continue;
    }
    // The id on a line of its own (longer than the line, on lines of its own, id_lines), the values below it, under
    // the id, each kept whole where it fits.
    out += id_lines(head, run_id_parts(s, r), columns) + "\n";
    const size_t room = columns > head.size() ? columns - head.size() : 1;
    std::string text;
    for (const auto& v : values) text += (text.empty() ? "" : " ") + whole_if_fits(v.substr(v[0] == ' '), room - 1);
    for (char c : std::string(head.size(), ' ') + wrap_to(text, room, 0))
      out += c == '\n' ? "\n" + std::string(head.size(), ' ') : std::string(1, c);
    out += "\n";
  }
  const auto wrapped = [&](const std::string& text) { return wrap_to(text, columns, 2) + "\n"; };
  if (shard.active())
    out += wrapped(fmt::format("--shard {}/{}: {} of {} runs in this slice -> {}", shard.index, shard.count, in_shard,
                               s.runs.size(), dir));
  if (!filter.empty()) {
    const size_t of = shard.active() ? in_shard : s.runs.size();
    out += wrapped(fmt::format("{} of {} match --filter {}", kept, count_text(of, "run"), filter));
  }
  if (done != nullptr)
    out += wrapped(fmt::format("--resume into {}: {} to run, {} already done (kept)", dir, kept - kept_done,
                               kept_done));
  return out;
}

// The dispositions a --resume runs again: interrupted, and with --retry-failed also failed, diverged and timeout.
std::vector<Disposition> rerun_dispositions(const DriverOptions& o) {
  if (!o.retry_failed) return {Disposition::kInterrupted};
  return {Disposition::kInterrupted, Disposition::kFailed, Disposition::kDiverged, Disposition::kTimeout};
}
}  // namespace

std::string dry_run_text(const Scenario& s, const std::string& filter, size_t columns) {
  return dry_run_listing(s, filter, nullptr, "", columns);
}

std::string report_dir(const Scenario& s, const DriverOptions& o) {
  const std::string dir = o.out_dir.empty() ? "reports/" + s.name : o.out_dir;
  return o.shard().active() ? dir + "/" + shard_folder_name(o.shard()) : dir;
}

// Why the sweep could not create or write its report folder `dir`: the nearest existing entry of its path is a file or
// a folder that is not writable (a read-only file system, permissions), said as the run would; nullopt when it
// could. Writes nothing.
std::optional<std::string> report_dir_unwritable(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path path = fs::absolute(dir, ec);
  if (ec) return std::nullopt;
  fs::path probe = path;
  while (!fs::exists(probe, ec) && probe.has_parent_path() && probe.parent_path() != probe) probe = probe.parent_path();
  int err = 0;
  if (!fs::exists(probe, ec)) return std::nullopt;
  if (!fs::is_directory(probe, ec))
    err = ENOTDIR;  // a file where a folder of the path would be
  else if (::access(probe.c_str(), W_OK | X_OK) != 0)
    err = errno;
  if (err == 0) return std::nullopt;
  return fmt::format("cannot {} the report folder {}: {}", probe == path ? "write into" : "create", dir,
                     std::strerror(err));
}

std::string dry_run_text(const Scenario& s, const DriverOptions& o, size_t columns) {
  const std::string dir = report_dir(s, o);
  if (auto why = report_dir_unwritable(dir)) throw Error(*why);  // refused where the run would be
  if (!o.resume) {  // refused where the run would be; with --overwrite, what it would move aside
    std::optional<ExistingReport> found;
    try {
      found = existing_report(dir, s);
    } catch (const ReportIoError& e) {  // a dry run writes nothing: a plain refusal, as for a bad input
      throw Error(e.what());
    }
    std::string text = dry_run_listing(s, o.filter, nullptr, dir, columns, o.shard());
    if (found && !o.overwrite) throw Error(replace_refusal(*found, s, o));
    if (found)
      text += wrap_to(fmt::format("--overwrite: would first move the {} run{} in {} (report.json, runs.jsonl, "
                                  "figures, weights/, batches/, timeline/) into {}/replaced-<date>-<time>/",
                                  found->runs, found->runs == 1 ? "" : "s", dir, dir),
                      columns, 2) +
              "\n";
    return text;
  }
  std::map<std::string, json> done;
  try {
    done = resumable_runs(dir, s, rerun_dispositions(o));  // as run_sweep's resume
  } catch (const ReportIoError& e) {  // a dry run writes nothing: a plain refusal, as for a bad input
    throw Error(e.what());
  }
  return dry_run_listing(s, o.filter, &done, dir, columns, o.shard());
}

namespace {
// The indent of a "gradsweep: ..." line's continuation lines: under the text after "gradsweep: " (11) where a line
// has room for it, else 2 (on 40 columns 11 would leave 28 characters, less than some axis names with their ']').
size_t lead_indent(size_t columns) { return columns == 0 || columns >= 60 ? 11 : 2; }

// The sweep's first line: "gradsweep: 12 runs = 4 [a] x 3 [b]; 12 to run -> DIR/report.json" for wrap_to at
// `columns` with lead_indent, each part kept whole where it fits on a line (a longer one breaks between its words, a
// path after a '/'). already: the runs a --resume keeps (none: not a resume). A slice (--shard) says "; shard K/N: M
// of them" before the count to run.
std::string sweep_header(const Scenario& s, size_t to_run, std::optional<size_t> already, const std::string& path,
                         size_t columns, const Shard& shard) {
  const size_t room = line_room(columns, lead_indent(columns));
  const std::string to_run_text = fmt::format("{} to run", to_run) +
                                  (already ? fmt::format(" ({} already in the report)", *already) : std::string());
  std::string slice;
  if (shard.active()) {
    size_t in_shard = 0;
    for (const auto& r : s.runs) in_shard += shard.holds(r.id) ? 1 : 0;
    slice = whole_if_fits(fmt::format("shard {}/{}: {} of them;", shard.index, shard.count, in_shard), room) + " ";
  }
  return "gradsweep: " + expansion_to_wrap(s, room, ";") + " " + slice + whole_if_fits(to_run_text, room) + " " +
         whole_if_fits("-> " + path, room);
}

// Test fault stop_at=RUN:STEP (file_io.h): stop this process after that step of the RUN-th run so a test can signal
// it there; {0, 0} when unset.
std::pair<size_t, int64_t> stop_at_fault() {
  auto f = test_fault("stop_at");
  if (!f) return {0, 0};
  unsigned long long run_n = 0;
  long long step_n = 0;
  if (std::sscanf(f->c_str(), "%llu:%lld", &run_n, &step_n) != 2)
    throw Error("GRADSWEEP_TEST_FAULTS: stop_at expects RUN:STEP, got \"" + *f + "\"");
  return {static_cast<size_t>(run_n), static_cast<int64_t>(step_n)};
}

// The report's top-level fields before its runs (reports/README.md): schema, tool, context, scenario, axes, repeats.
json report_header(const Scenario& s, const DriverOptions& o) {
  json header;
  header["schema_version"] = kReportSchemaVersion;
  header["tool"] = tool_json();
  header["context"] = context_json(s, o.argv);
  header["scenario_name"] = s.name;
  json axes = json::array();
  for (const auto& a : s.axes) axes.push_back({{"paths", a.paths}, {"values", a.values}});
  header["axes"] = axes;
  header["repeats"] = s.repeats;
  // A slice's report names its slice and the ids in it, so that gradsweep merge can name the runs it lacks.
  if (o.shard().active()) {
    json ids = json::array();
    for (const auto& r : s.runs)
      if (o.shard().holds(r.id)) ids.push_back(r.id);
    header["shard"] = {{"index", o.shard_index}, {"count", o.shard_count}, {"sweep_runs", s.runs.size()},
                       {"ids", ids}};
  }
  return header;
}

// The memory estimate of a run before it starts (report key `memory`): host memory (dataset, parameters, buffers,
// per-step records; timing-only runs hold no model, data or buffers, but still every rank's per-step records) against
// MemAvailable, then one GPU of the modeled node (timing-only runs too). *skip_reason: why the run does not fit and is
// skipped ("" when it fits).
json run_memory(const RunSpec& spec, std::string* skip_reason) {
  int64_t num_params = 0;
  std::unique_ptr<Model> model;
  try {
    model = make_model(spec.config);
    if (run_does_arithmetic(spec.config)) num_params = static_cast<int64_t>(model->num_params());
  } catch (const std::exception&) {
    // run_training reports the model's error as a failed run
  }
  const std::optional<int64_t> available = available_memory_bytes();
  json memory = estimate_run_memory(spec.config, num_params).to_json();
  memory["available_bytes"] = available ? json(*available) : json(nullptr);
  if (available) *skip_reason = memory_skip_reason(spec.config, num_params, *available);
  memory["gpu"] = nullptr;
  if (model) {
    const GpuMemoryEstimate gpu = estimate_gpu_memory(spec.config, *model);
    memory["gpu"] = gpu.to_json();
    if (skip_reason->empty() && !gpu.fits() && spec.config.cluster.gpu_memory == "skip")
      *skip_reason = gpu_memory_skip_reason(spec.config, *model);
  }
  return memory;
}

// " eval_accuracy 0.8123 eval_loss 0.5 train_loss 0.4" of a finished run's report entry (what it has of them), each
// name joined to its value by kNoBreak; timing-only runs train nothing: their modeled step and throughput instead.
std::string finished_metrics(const json& run, bool timing_only) {
  const json& fin = run["convergence"]["final"];
  std::string metrics;
  const std::string nb(1, kNoBreak);
  if (!fin["eval_accuracy"].is_null())
    metrics += fmt::format(" eval_accuracy{}{:.4f}", nb, fin["eval_accuracy"].get<double>());
  if (!fin["eval_loss"].is_null()) metrics += " eval_loss" + nb + format_number(fin["eval_loss"].get<double>(), 4);
  if (!fin["train_loss"].is_null()) metrics += " train_loss" + nb + format_number(fin["train_loss"].get<double>(), 4);
  if (timing_only) metrics += modeled_summary(run) + " (timing-only: no loss or accuracy)";
  return metrics;
}

// A finished run's line "[i/N] ID passed in 1.2s: eval_accuracy 0.8 ..." fitted to `columns` (0: one line as it is):
// the id cut in its middle (as on the live line) as far as "[i/N] ID passed in 1.2s:" needs to fit, the metrics on
// the lines below where they do not fit beside it, and the run's message (a skip's reason) on lines of its own. Where
// fewer than 8 characters of the id would be left, the id (cut to the line) has the first line and the outcome, whole
// where it fits a line, starts the next: the outcome and its time are never cut for the id.
std::string finished_run_text(const std::string& count, const std::string& id, const std::string& outcome,
                              const std::string& metrics, const std::string& message, size_t columns) {
  const std::string tail = " " + outcome + (metrics.empty() ? "" : ":");
  if (columns == 0)  // one line as it is, the metrics' kNoBreak printed as spaces (wrap_to at width 0)
    return wrap_to(count + " " + id + tail + metrics + (message.empty() ? "" : " (" + message + ")"), 0, 0);
  const size_t max = columns > 1 ? columns - 1 : 1, fixed = count.size() + 1 + tail.size();
  const size_t indent = std::min(count.size() + 1, max / 2), room = max > fixed ? max - fixed : 0;
  std::string text;
  if (room >= std::min<size_t>(8, id.size())) {
    std::string head = count + " " + fit_run_id(id, room) + tail;
    std::replace(head.begin(), head.end(), ' ', kNoBreak);
    text = wrap_to(head + metrics, columns, indent);
  } else {  // "[i/N] ID" alone, then the outcome and the metrics under the id
    const std::string pad(indent, ' ');
    text = count + " " + fit_run_id(id, max > count.size() + 1 ? max - count.size() - 1 : 1) + "\n" + pad;
    for (char c : wrap_to(whole_if_fits(tail.substr(1), max - indent) + metrics, columns - indent, 0))
      text += c == '\n' ? "\n" + pad : std::string(1, c);
  }
  if (!message.empty()) text += "\n" + wrap_lines(std::string(count.size() + 1, ' ') + "(" + message + ")", columns);
  return text;
}
// GRADSWEEP_TEST_FAULTS fail_read=N (file_io.h): the dataset of the run, whose N-th sample read in this process
// throws.
class FailingReads final : public Dataset {
 public:
  FailingReads(std::unique_ptr<Dataset> inner, int64_t fail_at) : inner_(std::move(inner)), fail_at_(fail_at) {}
  int64_t in_dim() const override { return inner_->in_dim(); }
  int64_t out_dim() const override { return inner_->out_dim(); }
  bool classification() const override { return inner_->classification(); }
  int64_t steps_per_epoch() const override { return inner_->steps_per_epoch(); }
  void micro_batch(int64_t step, int64_t micro, int rank, Batch& out) const override {
    inner_->micro_batch(step, micro, rank, out);
  }
  const Batch& eval_set() const override { return inner_->eval_set(); }
  int64_t train_size() const override { return inner_->train_size(); }
  int64_t stored_sample_bytes() const override { return inner_->stored_sample_bytes(); }
  void shape_batch(Batch& out, int64_t count, int rank) const override { inner_->shape_batch(out, count, rank); }
  void read_sample(int64_t i, Batch& out, int64_t row) const override {
    if (++reads_ == fail_at_) throw Error(fmt::format("test fault fail_read: sample {} read {}", i, fail_at_));
    inner_->read_sample(i, out, row);
  }

 private:
  std::unique_ptr<Dataset> inner_;
  int64_t fail_at_;
  mutable std::atomic<int64_t> reads_{0};
};

// The run's hooks' dataset under the test fault fail_read (none without it).
void add_read_fault(RunHooks& hooks) {
  const std::optional<std::string> f = test_fault("fail_read");
  if (!f) return;
  const int64_t n = std::atoll(f->c_str());
  hooks.make_dataset = [n](const RunConfig& c) { return std::make_unique<FailingReads>(make_dataset(c), n); };
}

// The runs of this slice that the filter keeps, in expansion order.
std::vector<const RunSpec*> planned_runs(const Scenario& s, const DriverOptions& o, const IdPattern& re) {
  std::vector<const RunSpec*> planned;
  for (const auto& r : s.runs)
    if (o.shard().holds(r.id) && re.search(r.id)) planned.push_back(&r);
  return planned;
}

// Across processes: every process must run the same runs of the same scenario (file, --set values, --filter,
// --shard), else they would wait for each other forever; refused on every process alike (FNV-1a of what decides it).
void check_same_sweep(const Scenario& s, const std::vector<const RunSpec*>& runs) {
  std::string key = s.sha256;
  for (const std::string& o : s.overrides) key += "\n" + o;
  for (const RunSpec* r : runs) key += "\n" + r->id;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  ProcessGroup& g = process_group();
  std::vector<uint64_t> all(static_cast<size_t>(g.size()));
  g.all_gather(&h, all.data(), sizeof h);
  for (size_t p = 1; p < all.size(); ++p)
    if (all[p] != all[0])
      throw Error(fmt::format("process {} of mpirun was given another sweep than process 0 (scenario file, --set, "
                              "--filter or --shard differ): give every process the same command",
                              p));
}

// Across processes (mpirun): what the job cannot run, refused before anything is written (ScenarioError: exit 2).
// One issue per field and message, naming its first run and how many more.
void refuse_across_processes(const Scenario& s, const DriverOptions& o, const std::vector<const RunSpec*>& runs) {
  const int processes = process_group().size();
  if (processes <= 1) return;
  check_same_sweep(s, runs);
  std::vector<ConfigIssue> issues;
  std::vector<size_t> more;
  for (const RunSpec* r : runs)
    for (const ConfigIssue& i : process_issues(r->config, processes)) {
      auto same = [&](const ConfigIssue& x) { return x.path == i.path && x.message.rfind(i.message, 0) == 0; };
      const auto it = std::find_if(issues.begin(), issues.end(), same);
      if (it != issues.end()) {
        ++more[static_cast<size_t>(it - issues.begin())];
        continue;
      }
      issues.push_back({i.path, i.message + " (run " + r->id});
      more.push_back(0);
    }
  if (issues.empty()) return;
  for (size_t k = 0; k < issues.size(); ++k)
    issues[k].message += more[k] > 0 ? fmt::format(" and {} more)", more[k]) : ")";
  throw ScenarioError(s.path, issues);
}

// Process 0's `value` on every process (a decision of the sweep: run, skip, stop).
int decided_by_process_0(int value) {
  process_group().broadcast(&value, sizeof value, 0);
  return value;
}

// How long a process whose run failed waits for the others to finish that run before it ends the job itself.
constexpr double kFailedRunWaitS = 10.0;
constexpr double kNoDeadlineS = 1e9;

// The sweep's stop decision, across processes: the largest signal number any process has received (0: none), so that
// a signal to any one process (mpirun forwards SIGTERM to all, but a task's scancel or a kill reaches one) stops the
// sweep on every process, as its run's stop is already shared with the control values (hooks.stop on every process).
// A collective: every process calls it at the same points (before each run and once after the last).
int signal_of_any_process() {
  ProcessGroup& g = process_group();
  const int mine = g_signal.load();
  if (g.size() <= 1) return mine;
  return g.max_within(mine, kNoDeadlineS).value_or(mine);
}

// Process 0 after each run, across processes: report.json is rewritten (a process that fails in the next run leaves
// process 0 inside a collective, where it cannot write any more); when a run failed here or in another process the
// whole job then ends with exit status 1 (MPI_Abort).
void end_job_after_failure(ReportWriter& writer, bool failed) {
  ProcessGroup& g = process_group();
  if (g.size() <= 1) return;
  const bool all_passed = !failed && g.max_within(0, kNoDeadlineS).value_or(1) == 0;
  writer.flush();
  if (all_passed) return;
  std::fprintf(stderr, "gradsweep: a run failed across processes; %s has the runs so far; ending the job\n",
               writer.report_path().c_str());
  g.abort(1);
}

// The planned runs this sweep runs, in order: process 0's `keep` (those its report has not finished: a --resume
// keeps the others) shared with every process of mpirun, so that all run the same runs; `keep` is read on process 0
// only (one flag per planned run).
std::vector<const RunSpec*> runs_to_do(const std::vector<const RunSpec*>& planned, std::vector<uint8_t> keep) {
  ProcessGroup& g = process_group();
  keep.resize(planned.size(), 1);
  if (g.size() > 1 && !keep.empty()) g.broadcast(keep.data(), keep.size(), 0);
  std::vector<const RunSpec*> todo;
  for (size_t i = 0; i < planned.size(); ++i)
    if (keep[i] != 0) todo.push_back(planned[i]);
  return todo;
}

// Whether process 0 opened the report, shared with every process of mpirun before any run (the other processes wait
// here, not in runs_to_do's broadcast): on process 0 `failure` is what open_report threw (null when it opened); on
// the others it is ignored. Every process then throws the same error, so that the refusal ("--resume into a damaged
// report", "a different --set") ends the job with one message and its own exit status through main's
// finish_processes, not through the failed-process path (a 10 s wait, then MPI_Abort).
void share_open_outcome(std::exception_ptr failure) {
  ProcessGroup& g = process_group();
  if (g.size() <= 1) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  enum : int { kOpened = 0, kReportIo = 1, kRefused = 2 };
  int kind = kOpened;
  std::string text;
  if (g.rank() == 0 && failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const ReportIoError& e) {
      kind = kReportIo;
      text = e.what();
    } catch (const std::exception& e) {
      kind = kRefused;
      text = e.what();
    }
  }
  kind = decided_by_process_0(kind);
  if (kind == kOpened) return;
  uint64_t bytes = text.size();
  g.broadcast(&bytes, sizeof bytes, 0);
  text.resize(bytes);
  if (bytes > 0) g.broadcast(text.data(), bytes, 0);
  if (g.rank() == 0) std::rethrow_exception(failure);  // its own error, with its own type and fields
  if (kind == kReportIo) {
    ReportIoError e(text);
    e.before_any_run = true;
    throw e;
  }
  throw Error(text);
}

// The other processes (mpirun rank > 0): the same runs in the same order with process 0's decisions; nothing is
// written. A failed run ends the job (process 0 flushes its report first when it can).
int follow_sweep(const std::vector<const RunSpec*>& planned) {
  share_open_outcome(nullptr);
  g_report_open.store(true);  // a signal is a stop request, which process 0 reads and shares
  ProcessGroup& g = process_group();
  for (const RunSpec* spec : runs_to_do(planned, {})) {
    if (signal_of_any_process() != 0) break;
    RunResult res;
    RunHooks hooks;
    hooks.stop = &g_stop;  // a signal to this process stops the run on every process (the control values' max)
    add_read_fault(hooks);
    if (decided_by_process_0(0) == 1) res = run_training(spec->config, hooks);
    const bool failed = res.is(Disposition::kFailed);
    if (failed) std::fprintf(stderr, "gradsweep: process %d: run %s failed: %s\n", g.rank(), spec->id.c_str(),
                             res.message.c_str());
    const std::optional<int> any = g.max_within(failed ? 1 : 0, failed ? kFailedRunWaitS : kNoDeadlineS);
    if (any && *any == 0) continue;
    if (any) std::this_thread::sleep_for(std::chrono::duration<double>(kFailedRunWaitS));  // process 0 ends the job
    g.abort(1);
  }
  const int sig = signal_of_any_process();
  return sig != 0 ? 128 + sig : 0;
}

// The sweep's report writer in `made`: a report is never replaced (said before anything else is tried on the folder;
// the writer checks again under its lock), and report.json is this scenario's, valid, from here on. Errors before
// any run say so (ReportIoError::before_any_run).
void open_report(std::optional<ReportWriter>& made, const Scenario& s, const DriverOptions& o, const std::string& dir,
                 const json& header) {
  if (!o.resume && !o.overwrite) {
    std::optional<ExistingReport> found;
    try {
      found = existing_report(dir, s);
    } catch (ReportIoError& e) {
      e.before_any_run = true;
      throw;
    }
    if (found) throw Error(replace_refusal(*found, s, o));
  }
  try {
    made.emplace(dir, s, header, o.resume, rerun_dispositions(o),
                 o.overwrite ? ReportWriter::ExistingRuns::kMoveAside : ReportWriter::ExistingRuns::kRefuse);
    made->flush();  // from here on report.json is this scenario's, valid, with the runs finished so far
    g_report_open.store(true);
  } catch (ReportIoError& e) {
    e.before_any_run = true;  // main says that nothing was run
    throw;
  } catch (const ReportInTheWay& e) {  // a report is never replaced: say how to go on
    throw Error(replace_refusal(e.existing, s, o));
  }
}

// The sweep's progress on stderr: the live line of the run in progress (a terminal only) and the test faults that
// act at a step (stop_at, step_delay_ms).
class SweepProgress {
 public:
  SweepProgress(bool tty, size_t runs) : tty_(tty), runs_(runs) {
    const std::pair<size_t, int64_t> stop_at = stop_at_fault();
    stop_run_ = stop_at.first;
    stop_step_ = stop_at.second;
    // Test fault step_delay_ms=N: each optimizer step of a run waits N ms in the progress hook (a run long enough for
    // the live line to refresh, whatever the machine's speed).
    if (auto f = test_fault("step_delay_ms")) step_delay_ms_ = std::atoi(f->c_str());
  }
  // hooks.on_step for run i (0-based) of the sweep, started at run0 (seconds); the hook reads this object.
  void watch(RunHooks& hooks, size_t i, const RunSpec& spec, double run0) {
    if (!tty_ && stop_run_ != i + 1 && step_delay_ms_ <= 0) return;
    last_print_ = 0.0;
    hooks.on_step = [this, i, &spec, run0](int64_t step, int64_t total, double loss) {
      on_step(i, spec, run0, step, total, loss);
    };
  }
  // Run i is done after `seconds`.
  void finished(double seconds) { finished_s_ += seconds; }

 private:
  void on_step(size_t i, const RunSpec& spec, double run0, int64_t step, int64_t total, double loss) {
    if (stop_run_ == i + 1 && step == stop_step_) ::raise(SIGSTOP);
    if (step_delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_delay_ms_));
    if (!tty_) return;
    double t = now_s();
    if (t - last_print_ < 0.2 && step != total) return;
    last_print_ = t;
    ProgressLine line;
    line.run = i + 1;
    line.runs = runs_;
    line.id = spec.id;
    line.step = step;
    line.total = total;
    line.loss = loss;
    line.timing_only = spec.config.training.mode == "timing";
    const double run_total_s = (t - run0) / static_cast<double>(step) * static_cast<double>(total);
    // At the last step elapsed / step * total - elapsed rounds to -1e-16 as often as to 0, and a negative ETA
    // means "unknown" to the line: clamp it to 0.
    line.run_eta_s = std::max(0.0, run_total_s - (t - run0));
    // The runs still to come take as long as the mean run so far (the finished ones and this one, projected).
    const double mean_run_s = (finished_s_ + run_total_s) / static_cast<double>(i + 1);
    line.sweep_eta_s = line.run_eta_s + mean_run_s * static_cast<double>(runs_ - i - 1);
    const size_t columns = output_columns(true);
    std::fprintf(stderr, "\r\033[K%s", fit_progress_line(line, columns > 0 ? columns : 80).c_str());
  }

  bool tty_;
  size_t runs_;
  size_t stop_run_ = 0;
  int64_t stop_step_ = 0;
  int step_delay_ms_ = 0;
  double last_print_ = 0.0;
  double finished_s_ = 0.0;  // wall time of the runs of this sweep finished so far
};

// One run's entry into the report: its timeline and run files first (report.timeline, report.save_weights,
// report.save_batches), then the journal. A file that cannot be written stops the sweep as the report would, with
// report.json kept as current as the disk allows.
void record_run(ReportWriter& writer, const std::string& dir, const RunSpec& spec, const RunResult& res, json& run) {
  try {
    // report.timeline: the modeled clock as a trace-event file beside the report, written before the journal entry
    // that names it; one that cannot be written stops the sweep as the report would.
    run["timeline"] = nullptr;
    if (spec.config.report.timeline && !res.modeled_steps.empty() && !res.modeled_steps[0].empty()) {
      const std::string name = timeline_file_name(spec.id, spec.index);
      const TimelineText t = timeline_text(spec.id, res);
      if (file_ops().mkdirs(dir + "/timeline") != 0)
        throw ReportIoError("cannot create the timeline folder " + dir + "/timeline: " + std::strerror(errno));
      write_file_atomic(dir + "/timeline/" + name, t.text);
      run["timeline"] = {{"file", "timeline/" + name},
                         {"ranks", res.modeled_steps.size()},
                         {"steps", res.modeled_steps[0].size()},
                         {"slices", t.slices},
                         {"bytes", t.text.size()}};
    }
    // report.save_weights, report.save_batches: the files for PyTorch (run_files.h), also before the journal entry.
    const RunFiles files = res.is(Disposition::kSkipped) ? RunFiles{nullptr, nullptr} : write_run_files(dir, spec, res);
    run["weights"] = files.weights;
    run["batches"] = files.batches;
    if (!files.powersgd_q.is_null()) run["powersgd_q"] = files.powersgd_q;
    writer.add(run);
  } catch (const ReportIoError&) {
    // The journal (or the run's timeline) cannot take the run (disk full): keep report.json as current as the disk
    // allows, then stop.
    try {
      writer.flush();
    } catch (const ReportIoError&) {
    }
    throw;
  }
}

// A finished run's line on stderr ("[i/N] ID passed in 1.2s: metrics", or "[i/N] ID skipped: why").
void print_finished(bool tty, size_t i, size_t runs, const RunSpec& spec, const RunResult& res, const json& run) {
  // A skipped run never started: no time and no metrics, only why, after the colon ("ID skipped: does not fit ...").
  const bool skipped = res.is(Disposition::kSkipped);
  const std::string metrics = skipped ? (res.message.empty() ? "" : " " + res.message)
                                      : finished_metrics(run, spec.config.training.mode == "timing");
  const std::string name = disposition_name(res.disposition);
  const std::string outcome = skipped ? name : fmt::format("{} in {:.1f}s", name, res.wall_s);
  if (tty) std::fputs("\r\033[K", stderr);  // the live line's place
  std::fprintf(stderr, "%s\n",
               finished_run_text(fmt::format("[{}/{}]", i + 1, runs), spec.id, outcome, metrics,
                                 skipped ? "" : res.message, output_columns(tty))
                   .c_str());
}

}  // namespace

int run_sweep(const Scenario& s, const DriverOptions& o) {
  const IdPattern re = make_filter(o.filter, s);
  openblas_set_num_threads(1);  // one BLAS thread per rank thread
  const std::vector<const RunSpec*> planned = planned_runs(s, o, re);
  refuse_across_processes(s, o, planned);
  if (process_group().rank() != 0) return follow_sweep(planned);
  const std::string dir = report_dir(s, o);
  std::optional<ReportWriter> made;
  std::exception_ptr failure;
  try {
    open_report(made, s, o, dir, report_header(s, o));
  } catch (...) {
    failure = std::current_exception();
  }
  share_open_outcome(failure);
  ReportWriter& writer = *made;
  const bool tty = isatty(STDERR_FILENO) != 0 && !o.quiet;
  // The lines that stay are wrapped to the output's width (output_columns: $COLUMNS, else the terminal's).
  // "gradsweep: ..." lines, their continuation lines under the text after "gradsweep: " (lead_indent).
  auto say = [&](const std::string& text) {
    std::fprintf(stderr, "%s\n", wrap_to(text, output_columns(tty), lead_indent(output_columns(tty))).c_str());
  };
  if (!writer.moved_aside().empty())  // said even with --quiet: where the previous runs are now
    say(fmt::format("gradsweep: --overwrite: moved the previous report of {} into {}/", dir, writer.moved_aside()));

  std::vector<uint8_t> keep;
  for (const RunSpec* r : planned) keep.push_back(writer.done(r->id) ? 0 : 1);
  const std::vector<const RunSpec*> todo = runs_to_do(planned, keep);

  install_stop_handlers();  // idempotent; main installs them before loading the scenario

  if (!o.quiet)
    say(sweep_header(s, todo.size(), o.resume ? std::optional<size_t>(writer.size()) : std::nullopt,
                     writer.report_path(), output_columns(tty), o.shard()));
  SweepProgress progress(tty, todo.size());
  int exit_code = 0;
  double sweep0 = now_s();
  for (size_t i = 0; i < todo.size(); ++i) {
    const RunSpec& spec = *todo[i];
    if (signal_of_any_process() != 0) break;
    RunHooks hooks;
    hooks.stop = &g_stop;
    add_read_fault(hooks);
    double run0 = now_s();
    progress.watch(hooks, i, spec, run0);
    // Memory: estimated before the run; one that does not fit what is available is skipped, not started.
    RunResult res;
    const json memory = run_memory(spec, &res.message);
    if (decided_by_process_0(res.message.empty() ? 1 : 2) == 1) {
      res = run_training(spec.config, hooks);
    } else {
      res.disposition = Disposition::kSkipped;
    }
    json run =
        res.is(Disposition::kSkipped) ? run_stub_json(spec, res.disposition, res.message) : run_to_json(spec, res);
    run["memory"] = memory;
    record_run(writer, dir, spec, res, run);
    if (res.is(Disposition::kFailed)) exit_code = 1;
    progress.finished(now_s() - run0);
    if (!o.quiet) print_finished(tty, i, todo.size(), spec, res, run);
    end_job_after_failure(writer, res.is(Disposition::kFailed));
  }
  writer.flush();
  if (!o.quiet)
    say(fmt::format("gradsweep: wrote {} ({}) in {}", writer.report_path(), count_text(writer.size(), "run"),
                    fmt_duration(now_s() - sweep0)));
  const int sig = signal_of_any_process();  // this process's or another's (the same on every process)
  if (sig != 0) return 128 + sig;
  return exit_code;
}

}  // namespace gs
