// `gradsweep calibrate` (calibrate.h): nccl-tests and GEMM parsers, the fits, and the calibrated profile.
#include "sim/core/count_text.h"
#include "sim/cost/calibrate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/core/json_io.h"
#include "sim/cost/compute_model.h"
#include "sim/cost/price.h"

namespace gs {
namespace {

using ojson = nlohmann::ordered_json;

std::vector<std::string> split_ws(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

// MPI-tagged output prefixes every row (and sometimes fields) with "[rank]": drop them.
std::string strip_rank_tags(const std::string& line) {
  std::string out;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '[') {
      size_t j = i + 1;
      while (j < line.size() && std::isdigit(static_cast<unsigned char>(line[j]))) ++j;
      if (j > i + 1 && j < line.size() && line[j] == ']') {
        out += ' ';
        i = j;
        continue;
      }
    }
    out += line[i];
  }
  return out;
}

bool number(const std::string& t, double* v) {
  char* end = nullptr;
  const double x = std::strtod(t.c_str(), &end);
  if (t.empty() || end == nullptr || *end != '\0' || !std::isfinite(x)) return false;
  *v = x;
  return true;
}

std::optional<CollectiveKind> op_from_program(std::string name) {
  // "all_reduce_perf", "all_reduce_perf_mpi", "AllReduce", "allreduce"
  std::string n;
  for (char c : name)
    if (std::isalpha(static_cast<unsigned char>(c))) n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n.size() > 4 && n.find("perf") != std::string::npos) n = n.substr(0, n.find("perf"));
  if (n == "allreduce") return CollectiveKind::kAllReduce;
  if (n == "allgather") return CollectiveKind::kAllGather;
  if (n == "reducescatter") return CollectiveKind::kReduceScatter;
  if (n == "broadcast") return CollectiveKind::kBroadcast;
  return std::nullopt;
}

void add_point(NcclTestsTable& t, double bytes, double time_us, double busbw, const std::string& where) {
  // busbw 0.00 at tiny sizes says nothing at two decimals, but the row's time does (calibrate recomputes the busbw
  // from it, busbw_from_times): a row is kept when either is above 0.
  if (!(bytes > 0) || !(busbw > 0 || time_us > 0)) return;
  if (!t.bytes.empty() && bytes <= t.bytes.back())
    throw Error(fmt::format("{}: {}: size {} is not above the previous row's {}: one table (one collective, one "
                            "NCCL_ALGO) per file", t.file, where, bytes, t.bytes.back()));
  t.bytes.push_back(bytes);
  t.time_us.push_back(time_us);
  t.busbw_GBps.push_back(busbw);
}

NcclTestsTable parse_json_table(const std::string& text, const std::string& file) {
  NcclTestsTable t;
  t.file = file;
  // rccl-tests' JSON lines: one object per line and placement.
  if (text.find("}\n{") != std::string::npos || text.find("}\r\n{") != std::string::npos) {
    std::istringstream in(text);
    std::map<double, std::pair<double, double>> oop, ip;
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const nlohmann::json j = parse_json_text(line, fmt::format("{}: line {}", file, line_no));
      if (!j.is_object() || !j.contains("size") || !j.contains("busBw") || !j.contains("time"))
        throw Error(fmt::format("{}: line {}: expected an object with size, time and busBw (rccl-tests JSON)", file,
                                line_no));
      if (j.contains("name") && j["name"].is_string()) t.op = op_from_program(j["name"].get<std::string>());
      if (j.contains("gpus") && j["gpus"].is_number_integer()) t.ranks = j["gpus"].get<int>();
      const bool in_place = j.contains("inPlace") && j["inPlace"].is_number() && j["inPlace"].get<double>() != 0;
      (in_place ? ip : oop)[j["size"].get<double>()] = {j["time"].get<double>(), j["busBw"].get<double>()};
    }
    const auto& use = oop.empty() ? ip : oop;
    for (const auto& [size, tb] : use) add_point(t, size, tb.first, tb.second, "size " + std::to_string(size));
    if (t.bytes.empty()) throw Error(fmt::format("{}: no result with a bus bandwidth above 0", file));
    return t;
  }
  const nlohmann::json j = parse_json_text(text, file);
  const nlohmann::json* results = nullptr;
  if (j.is_object() && j.contains("results") && j["results"].is_array()) results = &j["results"];
  if (results == nullptr)
    throw Error(fmt::format("{}: expected nccl-tests -J JSON (an object with \"results\": [{{\"size\", "
                            "\"out_of_place\": {{\"time\", \"bus_bw\"}}, ...}}]) or rccl-tests JSON lines", file));
  for (const char* key : {"devices"}) {
    if (j.contains(key) && j[key].is_array()) t.ranks = static_cast<int>(j[key].size());
    if (j.contains("config") && j["config"].is_object() && j["config"].contains(key) && j["config"][key].is_array())
      t.ranks = static_cast<int>(j["config"][key].size());
  }
  for (size_t i = 0; i < results->size(); ++i) {
    const nlohmann::json& r = (*results)[i];
    const std::string where = fmt::format("results[{}]", i);
    if (!r.is_object() || !r.contains("size") || !r["size"].is_number())
      throw Error(fmt::format("{}: {}: expected an object with a numeric \"size\"", file, where));
    if (r.contains("experiment_name") && r["experiment_name"].is_string())
      if (auto op = op_from_program(r["experiment_name"].get<std::string>())) t.op = op;
    const nlohmann::json* body = nullptr;
    for (const char* place : {"out_of_place", "in_place"})
      if (body == nullptr && r.contains(place) && r[place].is_object() && r[place].contains("bus_bw") &&
          r[place]["bus_bw"].is_number())
        body = &r[place];
    if (body == nullptr) continue;
    const double time = (*body).contains("time") && (*body)["time"].is_number() ? (*body)["time"].get<double>() : 0.0;
    add_point(t, r["size"].get<double>(), time, (*body)["bus_bw"].get<double>(), where);
  }
  if (t.bytes.empty()) throw Error(fmt::format("{}: no result with a bus bandwidth above 0", file));
  return t;
}

}  // namespace

NcclTestsTable parse_nccl_tests(const std::string& text, const std::string& file) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '{' || text[first] == '[')) return parse_json_table(text, file);
  NcclTestsTable t;
  t.file = file;
  int size_col = -1, time_col = -1, busbw_col = -1, time2_col = -1, busbw2_col = -1;
  std::istringstream in(text);
  int line_no = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++line_no;
    const std::string line = strip_rank_tags(raw);
    std::vector<std::string> tok = split_ws(line);
    if (tok.empty()) continue;
    const bool comment = tok[0][0] == '#';
    if (comment) {
      if (tok[0] == "#") tok.erase(tok.begin());
      else tok[0] = tok[0].substr(1);
    }
    if (tok.empty()) continue;
    if (tok[0] == "Rank" && tok.size() > 1) {
      ++t.ranks;
      continue;
    }
    for (size_t i = 0; i + 1 < tok.size(); ++i)
      if ((tok[i] == "starting:" || tok[i] == "concluded:") && !t.op) t.op = op_from_program(tok[i + 1]);
    if (std::find(tok.begin(), tok.end(), "size") != tok.end() &&
        std::find(tok.begin(), tok.end(), "busbw") != tok.end()) {
      size_col = time_col = busbw_col = time2_col = busbw2_col = -1;
      for (size_t i = 0; i < tok.size(); ++i) {
        const std::string& h = tok[i];
        if (h == "size") size_col = static_cast<int>(i);
        if (h == "time" || h == "cputime") (time_col < 0 ? time_col : time2_col) = static_cast<int>(i);
        if (h == "busbw") (busbw_col < 0 ? busbw_col : busbw2_col) = static_cast<int>(i);
      }
      continue;
    }
    if (comment) continue;
    // A data row. Without a header: the layout by field count (13+: with root, 12: without).
    int sc = size_col, tc = time_col, bc = busbw_col, tc2 = time2_col, bc2 = busbw2_col;
    if (sc < 0) {
      const bool root = tok.size() >= 13;
      sc = 0;
      tc = root ? 5 : 4;
      bc = root ? 7 : 6;
      tc2 = root ? 9 : 8;
      bc2 = root ? 11 : 10;
    }
    double size = 0, time = 0, busbw = 0;
    if (static_cast<int>(tok.size()) <= std::max(sc, bc) || !number(tok[static_cast<size_t>(sc)], &size)) continue;
    bool ok = number(tok[static_cast<size_t>(bc)], &busbw) && tc >= 0 && number(tok[static_cast<size_t>(tc)], &time);
    if ((!ok || busbw <= 0) && bc2 >= 0 && static_cast<int>(tok.size()) > bc2) {  // the in-place columns instead
      double time2 = 0, busbw2 = 0;
      const bool ok2 = number(tok[static_cast<size_t>(bc2)], &busbw2) && number(tok[static_cast<size_t>(tc2)], &time2);
      if (ok2 && (!ok || busbw2 > 0)) {  // a 0.00 row keeps its out-of-place time, as the rows around it
        ok = true;
        time = time2;
        busbw = busbw2;
      }
    }
    if (!ok) continue;
    add_point(t, size, time, busbw, fmt::format("line {}", line_no));
  }
  if (t.bytes.empty())
    throw Error(fmt::format("{}: no nccl-tests result row (expected all_reduce_perf's table: size count type redop "
                            "[root] time algbw busbw ...)", file));
  return t;
}

std::vector<GemmPoint> parse_gemm_json(const std::string& text, const std::string& file) {
  const nlohmann::json j = parse_json_text(text, file);
  std::vector<GemmPoint> out;
  auto precision_in = [&](const std::string& name, const std::string& where) {
    std::string s;
    for (char ch : name) s += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (const char* p : {"fp8", "bf16", "fp16", "tf32", "fp32"})
      if (s.find(p) != std::string::npos) return precision_from_name(p);
    throw Error(fmt::format("{}: {}: no precision (fp32, tf32, bf16, fp16 or fp8) in \"{}\"", file, where, s));
  };
  auto table = [&](const nlohmann::json& t, const std::string& where) {
    if (!t.is_object() || !t.contains("precision") || !t["precision"].is_string() || !t.contains("shapes") ||
        !t["shapes"].is_array())
      throw Error(fmt::format("{}: {}: expected {{\"precision\": \"bf16\", \"shapes\": [[m, n, k, TFLOPS], ...]}}",
                              file, where));
    const Precision p = precision_from_name(t["precision"].get<std::string>());
    for (size_t i = 0; i < t["shapes"].size(); ++i) {
      const nlohmann::json& s = t["shapes"][i];
      bool ok = s.is_array() && s.size() == 4;
      for (size_t c = 0; ok && c < 4; ++c) ok = s[c].is_number() && s[c].get<double>() > 0;
      if (!ok) throw Error(fmt::format("{}: {}.shapes[{}]: expected [m, n, k, TFLOPS], all > 0", file, where, i));
      out.push_back({p, s[0].get<double>(), s[1].get<double>(), s[2].get<double>(), s[3].get<double>()});
    }
  };
  if (j.is_object() && j.contains("benchmarks") && j["benchmarks"].is_array()) {
    for (size_t i = 0; i < j["benchmarks"].size(); ++i) {
      const nlohmann::json& b = j["benchmarks"][i];
      const std::string where = fmt::format("benchmarks[{}]", i);
      if (!b.is_object() || !b.contains("name")) continue;
      if (b.contains("run_type") && b["run_type"] == "aggregate" && !(b.contains("aggregate_name") &&
                                                                      b["aggregate_name"] == "median"))
        continue;  // repetitions: the median only
      bool ok = true;
      for (const char* c : {"m", "n", "k", "TFLOPS"}) ok = ok && b.contains(c) && b[c].is_number() && b[c] > 0;
      if (!ok) continue;
      out.push_back({precision_in(b["name"].get<std::string>(), where), b["m"].get<double>(), b["n"].get<double>(),
                     b["k"].get<double>(), b["TFLOPS"].get<double>()});
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) table(j[i], fmt::format("[{}]", i));
  } else {
    table(j, "(root)");
  }
  if (out.empty())
    throw Error(fmt::format("{}: no GEMM measurement (Google Benchmark JSON with counters m, n, k and TFLOPS, or "
                            "{{\"precision\", \"shapes\"}})", file));
  return out;
}

CollectiveFit fit_collectives(const HardwareProfile& base, const std::vector<NcclTestsTable>& tables) {
  HardwareProfile hw = base;
  for (auto& per_op : hw.curves)
    for (auto& c : per_op) c = BusbwCurve{};
  CollectiveFit best;
  double best_loss = std::numeric_limits<double>::infinity();
  std::map<int, std::unique_ptr<CollectiveModel>> models;
  for (const auto& t : tables) {
    const int n = t.ranks > 1 ? t.ranks : base.gpus_per_node;
    if (!models.count(n)) models[n] = std::make_unique<CollectiveModel>(hw, n);
  }
  for (int si = 0; si <= 80; ++si) {
    const double scale = 0.05 * std::pow(400.0, si / 80.0);  // 0.05 .. 20
    hw.latency_scale = scale;
    CollectiveFit f;
    f.latency_scale = scale;
    double total = 0.0;
    for (size_t op = 0; op < kCollectiveKindCount; ++op) {
      double op_best = std::numeric_limits<double>::infinity();
      bool any = false;
      for (int li = 0; li <= 240; ++li) {
        const double launch = 0.25 * li;  // 0 .. 60 us
        hw.launch_us[op] = launch;
        double loss = 0.0;
        for (const auto& t : tables) {
          if (!t.op || static_cast<size_t>(*t.op) != op) continue;
          any = true;
          const CollectiveModel& m = *models[t.ranks > 1 ? t.ranks : base.gpus_per_node];
          for (size_t i = 0; i < t.bytes.size(); ++i) {
            const CollectiveCost c = t.algo ? m.with_algo(*t.op, t.bytes[i], *t.algo) : m.best(*t.op, t.bytes[i]);
            const double e = std::log(c.busbw_GBps / t.busbw_GBps[i]);
            loss += e * e;
          }
        }
        if (!any) break;
        if (loss < op_best) {
          op_best = loss;
          f.launch_us[op] = launch;
        }
      }
      hw.launch_us[op] = base.launch_us[op];
      if (!any) continue;
      f.fitted[op] = true;
      total += op_best;
    }
    if (total < best_loss) {
      best_loss = total;
      best = f;
    }
  }
  return best;
}

namespace {

// The profile's half points for an absolute fixed cost (seconds) and bytes rate (bytes/s; 0: no bytes term) at the
// profile's current 16-bit GEMM rate, sustained_fraction 1 (compute_model.h's t_fixed and B_skinny, inverted).
void set_gemm_overheads(HardwareProfile* hw, double fixed_s, double skinny_Bps) {
  const size_t b = static_cast<size_t>(Precision::kBf16);
  const double rate = hw->peak_tflops[b] * 1e12 * hw->gemm_efficiency[b];
  hw->gemm_half_gflop = fixed_s * rate * 1e-9;
  hw->gemm_half_intensity = skinny_Bps > 0 ? rate / skinny_Bps : 0.0;
}

// sum over precision p's points of log^2(model time / measured time), the model compute_model.h's
// gemm_shape_time_s with the profile's constants (sustained_fraction 1: a cuBLAS sweep is what the GPU sustains).
double gemm_log_loss(const HardwareProfile& hw, const std::vector<GemmPoint>& points, size_t p) {
  double loss = 0.0;
  for (const GemmPoint& g : points) {
    if (static_cast<size_t>(g.precision) != p) continue;
    const double measured_s = 2.0 * g.m * g.n * g.k / (g.tflops * 1e12);
    const double e = std::log(gemm_shape_time_s(hw, g.m, g.n, g.k, g.precision) / measured_s);
    loss += e * e;
  }
  return loss;
}

}  // namespace

GemmFit fit_gemm(const HardwareProfile& base, const std::vector<GemmPoint>& points) {
  GemmFit best;
  double best_loss = std::numeric_limits<double>::infinity();
  HardwareProfile hw = base;
  hw.sustained_fraction = 1.0;
  std::array<bool, kPrecisionCount> measured{};
  for (const GemmPoint& g : points) measured[static_cast<size_t>(g.precision)] = true;
  // Grid over the absolute fixed cost (0, then 0.01 us .. 1 ms) and bytes rate (none, then 0.02 .. 1000 TB/s), both
  // the same at every precision; each measured precision's efficiency by golden-section search of log e in
  // [log 1e-3, 0] (the loss of precision p depends only on e_p once the two overheads are fixed).
  for (int fi = 0; fi <= 101; ++fi) {
    const double fixed_s = fi == 0 ? 0.0 : 1e-8 * std::pow(1e5, (fi - 1) / 100.0);
    for (int ii = 0; ii <= 101; ++ii) {
      const double skinny_Bps = ii == 0 ? 0.0 : 2e10 * std::pow(5e4, (ii - 1) / 100.0);
      GemmFit f;
      f.fixed_s = fixed_s;
      f.skinny_Bps = skinny_Bps;
      hw.gemm_efficiency = base.gemm_efficiency;
      double loss = 0.0;
      for (size_t p = 0; p < kPrecisionCount; ++p) {
        if (!measured[p]) continue;
        auto at = [&](double log_e) {
          hw.gemm_efficiency[p] = std::exp(log_e);
          set_gemm_overheads(&hw, fixed_s, skinny_Bps);
          return gemm_log_loss(hw, points, p);
        };
        const double g = (std::sqrt(5.0) - 1.0) / 2.0;
        double lo = std::log(1e-3), hi = 0.0;
        double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo), l1 = at(x1), l2 = at(x2);
        for (int it = 0; it < 60; ++it) {
          if (l1 <= l2) {
            hi = x2, x2 = x1, l2 = l1, x1 = hi - g * (hi - lo), l1 = at(x1);
          } else {
            lo = x1, x1 = x2, l1 = l2, x2 = lo + g * (hi - lo), l2 = at(x2);
          }
        }
        const double log_e = 0.5 * (lo + hi);
        loss += at(log_e);
        f.efficiency[p] = std::exp(log_e);
      }
      if (loss < best_loss) {
        best_loss = loss;
        set_gemm_overheads(&hw, fixed_s, skinny_Bps);  // at the fitted bf16 efficiency, where bf16 was measured
        f.half_gflop = hw.gemm_half_gflop;
        f.half_intensity = hw.gemm_half_intensity;
        best = f;
      }
    }
  }
  return best;
}

namespace {

// "[OP[:ALGO]=]FILE" -> op, algo, file.
void split_nccl_arg(const std::string& arg, std::optional<CollectiveKind>* op, std::optional<NcclAlgo>* algo,
                    std::string* file) {
  *file = arg;
  const size_t eq = arg.find('=');
  if (eq == std::string::npos) return;
  std::string head = arg.substr(0, eq);
  std::string algo_name;
  if (const size_t colon = head.find(':'); colon != std::string::npos) {
    algo_name = head.substr(colon + 1);
    head = head.substr(0, colon);
  }
  std::optional<CollectiveKind> k;
  for (size_t i = 0; i < kCollectiveKindCount; ++i)
    if (head == kCollectiveKindNames[i]) k = static_cast<CollectiveKind>(i);
  if (!k) return;  // an '=' in a file name
  *op = k;
  *algo = nccl_algo_from_name(algo_name);
  *file = arg.substr(eq + 1);
}

std::string fmt_size(double b) {
  if (b >= 1073741824.0 && std::fmod(b, 1073741824.0) == 0) return fmt::format("{:.0f}G", b / 1073741824.0);
  if (b >= 1048576.0 && std::fmod(b, 1048576.0) == 0) return fmt::format("{:.0f}M", b / 1048576.0);
  if (b >= 1024.0 && std::fmod(b, 1024.0) == 0) return fmt::format("{:.0f}K", b / 1024.0);
  return fmt::format("{:.0f}", b);
}

}  // namespace

// The busbw of the rows whose printed busbw has fewer than three significant digits (below 1 GB/s: 0.01 printed for
// 0.005 at 128 B), from the row's time as nccl-tests computes it (algbw = bytes / time, busbw = algbw x the
// collective's factor; common.cu): the factor for `ranks` when they are known (> 1), else the table's own
// busbw / algbw at its largest busbw (at least 1 GB/s). Rows with busbw 0 and no factor are dropped (they say
// nothing at two decimals).
void busbw_from_times(NcclTestsTable& t, int ranks) {
  double factor = ranks > 1 ? CollectiveModel::busbw_factor(*t.op, ranks) : 0.0;
  if (factor <= 0) {
    size_t at = t.bytes.size();
    for (size_t i = 0; i < t.bytes.size(); ++i)
      if (t.time_us[i] > 0 && (at == t.bytes.size() || t.busbw_GBps[i] > t.busbw_GBps[at])) at = i;
    if (at < t.bytes.size() && t.busbw_GBps[at] >= 1.0)
      factor = t.busbw_GBps[at] / (t.bytes[at] / (t.time_us[at] * 1e-6) / 1e9);
  }
  size_t kept = 0;
  for (size_t i = 0; i < t.bytes.size(); ++i) {
    double busbw = t.busbw_GBps[i];
    if (busbw < 1.0 && t.time_us[i] > 0 && factor > 0) busbw = t.bytes[i] / (t.time_us[i] * 1e-6) / 1e9 * factor;
    if (!(busbw > 0)) continue;
    t.bytes[kept] = t.bytes[i];
    t.time_us[kept] = t.time_us[i];
    t.busbw_GBps[kept++] = busbw;
  }
  t.bytes.resize(kept);
  t.time_us.resize(kept);
  t.busbw_GBps.resize(kept);
}

CalibrateResult calibrate(const CalibrateRequest& r) {
  auto base = load_hardware_profile(r.base);
  if (r.ranks != 0 && r.ranks < 2)
    throw Error(fmt::format("calibrate: --ranks: expected a whole number of ranks >= 2, got {}", r.ranks));
  if (r.nccl_files.empty() && r.gemm_files.empty())
    throw Error("calibrate: nothing to calibrate from: give --nccl-tests FILE... and/or --gemm FILE");
  std::vector<NcclTestsTable> tables;
  for (const std::string& arg : r.nccl_files) {
    std::optional<CollectiveKind> op;
    std::optional<NcclAlgo> algo;
    std::string file;
    split_nccl_arg(arg, &op, &algo, &file);
    NcclTestsTable t = parse_nccl_tests(read_json_file_text(file), file);
    if (op) t.op = op;
    t.algo = algo;
    if (!t.op) {
      const std::string stem = std::filesystem::path(file).filename().string();
      for (size_t i = 0; i < kCollectiveKindCount && !t.op; ++i)
        if (stem.rfind(kCollectiveKindNames[i], 0) == 0) t.op = static_cast<CollectiveKind>(i);
    }
    if (!t.op)
      throw Error(fmt::format("{}: which collective is this? The file does not say (no \"Collective test starting\" "
                              "line) and its name does not start with one: give it as all_reduce=FILE (or "
                              "all_gather, reduce_scatter, broadcast; OP:ALGO=FILE for a run with NCCL_ALGO)", file));
    if (t.ranks <= 1 && r.ranks > 1) t.ranks = r.ranks;  // the file does not list them: --ranks says
    busbw_from_times(t, t.ranks);
    CollectiveModel probe(*base, std::max(2, t.ranks > 1 ? t.ranks : base->gpus_per_node));
    if (t.algo && !probe.available(*t.op, *t.algo))
      throw Error(fmt::format("{}: NCCL has no {} {} on base profile \"{}\"", file,
                              kNcclAlgoNames[static_cast<size_t>(*t.algo)],
                              kCollectiveKindNames[static_cast<size_t>(*t.op)], base->name));
    if (t.bytes.size() < 2) throw Error(fmt::format("{}: a curve needs at least two sizes, the file has one", file));
    tables.push_back(std::move(t));
  }
  std::vector<GemmPoint> gemm;
  std::string gemm_sources;
  for (const std::string& file : r.gemm_files) {
    auto pts = parse_gemm_json(read_json_file_text(file), file);
    gemm.insert(gemm.end(), pts.begin(), pts.end());
    gemm_sources += (gemm_sources.empty() ? "" : ", ") + file;
  }

  ojson p = ojson::parse(read_json_file_text(base->file));
  const std::string name = !r.name.empty() ? r.name
                           : !r.out.empty() ? std::filesystem::path(r.out).stem().string()
                                            : base->name + "-calibrated";
  p["name"] = name;
  std::string files;
  for (const auto& t : tables) files += (files.empty() ? "" : ", ") + t.file;
  if (!gemm_sources.empty()) files += (files.empty() ? "" : ", ") + gemm_sources;
  p["description"] = fmt::format("{}; calibrated by gradsweep calibrate from {}", base->description, files);
  std::string report;
  if (!tables.empty()) {
    const CollectiveFit fit = fit_collectives(*base, tables);
    const std::string fitted_from = fmt::format("fitted by gradsweep calibrate to {}", files);
    p["nccl"]["latency_scale"] = {{"value", fit.latency_scale}, {"source", fitted_from}};
    for (size_t op = 0; op < kCollectiveKindCount; ++op) {
      if (!fit.fitted[op]) continue;
      p["nccl"]["launch_us"][kCollectiveKindNames[op]] = {{"value", fit.launch_us[op]}, {"source", fitted_from}};
    }
    HardwareProfile analytic = *base;
    for (auto& per_op : analytic.curves)
      for (auto& c : per_op) c = BusbwCurve{};
    analytic.latency_scale = fit.latency_scale;
    for (size_t op = 0; op < kCollectiveKindCount; ++op)
      if (fit.fitted[op]) analytic.launch_us[op] = fit.launch_us[op];
    report += fmt::format("analytic collective model fitted: latency_scale {:.3f}", fit.latency_scale);
    for (size_t op = 0; op < kCollectiveKindCount; ++op)
      if (fit.fitted[op]) report += fmt::format(", {} launch {:.2f} us", kCollectiveKindNames[op], fit.launch_us[op]);
    report += "\n(a run prices these sizes from the measured curves, exactly; the fit below is what the model gives "
              "beyond them and for algorithms without a curve)\n";
    for (const auto& t : tables) {
      const int n = t.ranks > 1 ? t.ranks : base->gpus_per_node;
      CollectiveModel m(analytic, n);
      const size_t slot = t.algo ? static_cast<size_t>(*t.algo) : kCurveDefault;
      const std::string path = fmt::format("collectives.{}.{}", kCollectiveKindNames[static_cast<size_t>(*t.op)],
                                           kCurveSlotNames[slot]);
      ojson pts = ojson::array();
      for (size_t i = 0; i < t.bytes.size(); ++i) pts.push_back({t.bytes[i], t.busbw_GBps[i]});
      p["collectives"][kCollectiveKindNames[static_cast<size_t>(*t.op)]][kCurveSlotNames[slot]] = {
          {"value", pts},
          {"source", fmt::format("measured: {} (nccl-tests, out-of-place busbw, {}{})", t.file, count_text(n, "rank"),
                                 t.ranks > 1 ? "" : " assumed: the file does not list its ranks; --ranks N says")}};
      report += fmt::format("\n{} ({}), {}: {}\n", path, t.file, count_text(n, "rank"),
                            t.ranks > 1 ? "" : "(ranks assumed: the file does not list them; give --ranks N)");
      report += fmt::format("  {:>10}  {:>12}  {:>12}  {:>8}\n", "size", "busbw GB/s", "model GB/s", "error");
      double worst = 0.0;
      for (size_t i = 0; i < t.bytes.size(); ++i) {
        const CollectiveCost c = t.algo ? m.with_algo(*t.op, t.bytes[i], *t.algo) : m.best(*t.op, t.bytes[i]);
        const double err = (c.busbw_GBps - t.busbw_GBps[i]) / t.busbw_GBps[i];
        worst = std::max(worst, std::fabs(err));
        report += fmt::format("  {:>10}  {:>12.2f}  {:>12.2f}  {:>+7.1f}%\n", fmt_size(t.bytes[i]), t.busbw_GBps[i],
                              c.busbw_GBps, 100.0 * err);
      }
      report += fmt::format("  largest error of the analytic fit: {:.1f}%\n", 100.0 * worst);
      if (t.ranks > 1 && t.ranks != base->gpus_per_node)
        report += fmt::format("  note: measured on {}, the base profile has {}\n", count_text(t.ranks, "rank"),
                              count_text(base->gpus_per_node, "GPU"));
    }
  }
  if (!gemm.empty()) {
    const GemmFit fit = fit_gemm(*base, gemm);
    const std::string fitted_from = fmt::format("fitted by gradsweep calibrate --gemm to {}", gemm_sources);
    HardwareProfile hw = *base;
    hw.gemm_half_gflop = fit.half_gflop;
    hw.gemm_half_intensity = fit.half_intensity;
    for (size_t q = 0; q < kPrecisionCount; ++q) {
      if (!fit.efficiency[q]) continue;
      hw.gemm_efficiency[q] = *fit.efficiency[q];
      p["compute"]["gemm_efficiency"][kPrecisionNames[q]] = {{"value", *fit.efficiency[q]}, {"source", fitted_from}};
    }
    p["compute"]["gemm_half_gflop"] = {{"value", fit.half_gflop}, {"source", fitted_from + " (at the 16-bit rate)"}};
    p["compute"]["gemm_half_intensity"] = {{"value", fit.half_intensity},
                                           {"source", fitted_from + " (FLOP per byte, at the 16-bit rate)"}};
    report += fmt::format("\nGEMM fit: fixed cost {:.3f} us, bytes at {:.1f} TB/s (every precision; sustained 1); as "
                          "half points at the 16-bit rate: half size {:.3f} GFLOP, half intensity {:.1f} FLOP/byte",
                          fit.fixed_s * 1e6, fit.skinny_Bps * 1e-12, fit.half_gflop, fit.half_intensity);
    for (size_t q = 0; q < kPrecisionCount; ++q)
      if (fit.efficiency[q]) report += fmt::format(", {} efficiency {:.3f}", kPrecisionNames[q], *fit.efficiency[q]);
    report += fmt::format("\n  {:>5}  {:>8} {:>8} {:>8}  {:>14}  {:>12}  {:>8}\n", "prec", "m", "n", "k",
                          "measured TFLOPS", "model TFLOPS", "error");
    for (const GemmPoint& g : gemm) {
      const double flops = 2.0 * g.m * g.n * g.k;
      const double bytes = precision_bytes(g.precision) * (g.m * g.k + g.k * g.n + g.m * g.n);
      const double model =
          hw.peak_tflops[static_cast<size_t>(g.precision)] * gemm_efficiency(hw, flops, flops / bytes, g.precision);
      report += fmt::format("  {:>5}  {:>8.0f} {:>8.0f} {:>8.0f}  {:>14.1f}  {:>12.1f}  {:>+7.1f}%\n",
                            kPrecisionNames[static_cast<size_t>(g.precision)], g.m, g.n, g.k, g.tflops, model,
                            100.0 * (model - g.tflops) / g.tflops);
    }
  }
  CalibrateResult out;
  out.profile_text = p.dump(2) + "\n";
  out.report = report;
  parse_hardware_profile(out.profile_text, r.out.empty() ? name + ".json" : r.out);  // what it wrote reads back
  return out;
}

}  // namespace gs
