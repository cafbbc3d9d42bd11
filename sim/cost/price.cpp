// `gradsweep price` (price.h): sizes, data types and the nccl-tests-shaped table of the modeled collectives.
#include "sim/core/count_text.h"
#include "sim/cost/price.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace gs {

double parse_size_bytes(const std::string& text, const std::string& what) {
  std::string t = text;
  double mult = 1.0;
  if (!t.empty()) {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(t.back())));
    if (u == 'K' || u == 'M' || u == 'G' || u == 'T') {
      mult = u == 'K' ? 1024.0 : u == 'M' ? 1048576.0 : u == 'G' ? 1073741824.0 : 1099511627776.0;
      t.pop_back();
    }
  }
  char* end = nullptr;
  const double v = t.empty() ? NAN : std::strtod(t.c_str(), &end);
  if (t.empty() || end == nullptr || *end != '\0' || !std::isfinite(v) || v <= 0)
    throw Error(fmt::format("{}: expected a size in bytes > 0, optionally with K, M or G (binary, as nccl-tests), "
                            "got \"{}\"", what, text));
  return v * mult;
}

DataType data_type_from_name(const std::string& name) {
  struct T {
    const char* names[2];
    const char* nccl;
    double bytes;
  };
  static const T kTypes[] = {{{"fp32", "float"}, "float", 4},     {{"fp16", "half"}, "half", 2},
                             {{"bf16", "bfloat16"}, "bfloat16", 2}, {{"fp64", "double"}, "double", 8},
                             {{"int8", "int8"}, "int8", 1},         {{"uint8", "uint8"}, "uint8", 1},
                             {{"int32", "int32"}, "int32", 4},      {{"fp8", "fp8_e4m3"}, "f8e4m3", 1}};
  for (const T& t : kTypes)
    if (name == t.names[0] || name == t.names[1]) return {t.nccl, t.bytes};
  throw Error(fmt::format("--dtype: unknown type \"{}\"; expected fp32, fp16, bf16, fp64, fp8, int8, uint8 or int32",
                          name));
}

CollectiveKind collective_kind_from_name(const std::string& name) {
  for (size_t k = 0; k < kCollectiveKindCount; ++k)
    if (name == kCollectiveKindNames[k]) return static_cast<CollectiveKind>(k);
  throw Error(fmt::format("--op: unknown collective \"{}\"; expected all_reduce, all_gather, reduce_scatter or "
                          "broadcast", name));
}

void parse_size_range(const std::string& text, PriceRequest& r) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i)
    if (i == text.size() || text[i] == ':') {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  if (parts.empty() || parts.size() > 3)
    throw Error(fmt::format("--bytes: expected SIZE or MIN:MAX[:FACTOR] (e.g. 1K:8G), got \"{}\"", text));
  r.min_bytes = parse_size_bytes(parts[0], "--bytes");
  r.max_bytes = parts.size() > 1 ? parse_size_bytes(parts[1], "--bytes") : r.min_bytes;
  r.factor = 2.0;
  if (parts.size() > 2) {
    char* end = nullptr;
    r.factor = std::strtod(parts[2].c_str(), &end);
    if (parts[2].empty() || *end != '\0' || !(r.factor > 1.0) || !std::isfinite(r.factor))
      throw Error(fmt::format("--bytes: the factor (after the second ':') must be a number > 1, got \"{}\"", parts[2]));
  }
  if (r.max_bytes < r.min_bytes)
    throw Error(fmt::format("--bytes: the largest size {} is below the smallest {}", parts[1], parts[0]));
}

// How `ranks` are priced on `hw` when they are not one of its nodes or whole nodes within it (empty otherwise): the
// same rules as the runs' (collective_model.h spans_nodes; scenario_load's cluster.ranks notes).
static std::string layout_note(const HardwareProfile& hw, int ranks) {
  const int g = hw.gpus_per_node;
  if (ranks <= g) return "";
  if (hw.nodes <= 1)
    return fmt::format("{} ranks are more than the {} GPUs of \"{}\": priced as one larger node of the same fabric",
                       ranks, g, hw.name);
  const int nodes = CollectiveModel::nodes_spanned(hw, ranks);
  if (ranks % g == 0 && nodes <= hw.nodes) return "";
  return fmt::format("{} ranks are {} of \"{}\" ({} nodes of {} GPUs): priced on {} nodes of {}{}{}", ranks,
                     nodes > hw.nodes ? "more than the GPUs" : "not whole nodes", hw.name, hw.nodes, g, nodes, g,
                     ranks % g != 0 ? ", the partial last node at the pace of a full one" : "",
                     nodes > hw.nodes ? ", more nodes than the profile has, of the same fabric" : "");
}

// The communicator size of the request: --ranks, else the profile's GPUs.
static int ranks_of(const PriceRequest& r, const HardwareProfile& hw) { return r.ranks.value_or(hw.gpus_per_node); }

std::vector<PriceRow> price_rows(const PriceRequest& r) {
  auto hw = load_hardware_profile(r.hardware);
  const int ranks = ranks_of(r, *hw);
  if (r.ranks && ranks < 2)
    throw Error(fmt::format("--ranks: expected a whole number of ranks >= 2 (a collective needs two), got {}", ranks));
  if (ranks < 2)
    throw Error(fmt::format("--ranks: a collective needs at least 2 ranks (profile \"{}\" has {} GPU{}; give --ranks)",
                            hw->name, hw->gpus_per_node, hw->gpus_per_node == 1 ? "" : "s"));
  CollectiveModel m(*hw, ranks);
  if (r.algo && !m.available(r.op, *r.algo))
    throw Error(fmt::format("--algo {}: NCCL has no {} {} on hardware profile \"{}\"{}",
                            kNcclAlgoNames[static_cast<size_t>(*r.algo)], kNcclAlgoNames[static_cast<size_t>(*r.algo)],
                            kCollectiveKindNames[static_cast<size_t>(r.op)], hw->name,
                            *r.algo == NcclAlgo::kNvls && !hw->nvls ? " (fabric.nvls false: no NVLink SHARP)"
                            : *r.algo == NcclAlgo::kNvls ? " (across nodes NVLS is NVLSTree, all_reduce only)"
                                                         : " (tree serves all_reduce only)"));
  std::vector<PriceRow> rows;
  for (double s = r.min_bytes; s <= r.max_bytes * (1 + 1e-12); s *= r.factor) {
    PriceRow row;
    // nccl-tests: count = bytes / type size (all-gather and reduce-scatter print the per-rank count).
    double count = std::floor(s / r.dtype.bytes);
    if (count < 1) count = 1;
    row.bytes = count * r.dtype.bytes;
    const bool per_rank = r.op == CollectiveKind::kAllGather || r.op == CollectiveKind::kReduceScatter;
    row.count = per_rank ? std::floor(count / ranks) : count;
    row.cost = r.algo ? m.with_algo(r.op, row.bytes, *r.algo) : m.best(r.op, row.bytes);
    rows.push_back(row);
    if (rows.size() > 10000) throw Error("--bytes: more than 10000 sizes; use a larger factor");
  }
  return rows;
}

std::string price_table(const PriceRequest& r, const std::vector<PriceRow>& rows) {
  auto hw = load_hardware_profile(r.hardware);
  const int ranks = ranks_of(r, *hw);
  std::string out = fmt::format("# gradsweep price: {} on {} of {} ({}), modeled clock; algorithm: {}\n",
                                kCollectiveKindNames[static_cast<size_t>(r.op)], count_text(ranks, "rank"), hw->name,
                                hw->gpu,
                                r.algo ? CollectiveModel::algo_name(*r.algo, CollectiveModel::spans_nodes(*hw, ranks))
                                       : "NCCL's choice");
  if (const std::string note = layout_note(*hw, ranks); !note.empty()) out += "# note: " + note + "\n";
  out += "#\n";
  const char* redop = r.op == CollectiveKind::kAllReduce || r.op == CollectiveKind::kReduceScatter ? "sum" : "none";
  const int root = r.op == CollectiveKind::kBroadcast ? 0 : -1;
  const bool multi = CollectiveModel::spans_nodes(*hw, ranks);
  // Each row's fields as printed, then every column as wide as nccl-tests' (size 12, count 13, time 10, algbw and
  // busbw 8, algo 5, proto 6) or its widest field, so a long time or "nvlstree" keeps the columns in line.
  std::vector<std::array<std::string, 8>> cells;
  std::array<size_t, 8> width = {12, 13, 10, 8, 8, 5, 6, 0};
  for (const PriceRow& row : rows) {
    const CollectiveCost& c = row.cost;
    cells.push_back({fmt::format("{:.0f}", row.bytes), fmt::format("{:.0f}", row.count),
                     fmt::format("{:.2f}", c.time_s * 1e6), fmt::format("{:.2f}", c.algbw_GBps),
                     fmt::format("{:.2f}", c.busbw_GBps), CollectiveModel::algo_name(c.algo, multi),
                     kNcclProtoNames[static_cast<size_t>(c.proto)], kCostSourceNames[static_cast<size_t>(c.source)]});
    for (size_t i = 0; i < width.size(); ++i) width[i] = std::max(width[i], cells.back()[i].size());
  }
  const auto line = [&](char lead, const std::array<std::string, 8>& f, const std::string& type,
                        const std::string& op, const std::string& rt) {
    std::string l = fmt::format("{}{:>{}} {:>{}} {:>9} {:>7} {:>7} {:>{}} {:>{}} {:>{}}", lead, f[0], width[0], f[1],
                                width[1], type, op, rt, f[2], width[2], f[3], width[3], f[4], width[4]);
    if (!f[5].empty()) l += fmt::format("  {:<{}} {:<{}} {}", f[5], width[5], f[6], width[6], f[7]);
    return l + "\n";
  };
  out += line('#', {"size", "count", "time", "algbw", "busbw", "algo", "proto", "from"}, "type", "redop", "root");
  std::string units = line('#', {"(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)", "", "", ""}, "", "", "");
  units.erase(units.find_last_not_of(" \n") + 1);  // no trailing blanks
  out += units + "\n";
  for (const auto& f : cells) out += line(' ', f, r.dtype.nccl_name, redop, fmt::format("{}", root));
  return out;
}

nlohmann::json price_json(const PriceRequest& r, const std::vector<PriceRow>& rows) {
  auto hw = load_hardware_profile(r.hardware);
  nlohmann::json j;
  j["hardware"] = hw->name;
  j["profile_file"] = hw->file;
  j["op"] = kCollectiveKindNames[static_cast<size_t>(r.op)];
  const int ranks = ranks_of(r, *hw);
  const bool multi = CollectiveModel::spans_nodes(*hw, ranks);
  j["ranks"] = ranks;
  j["nodes"] = multi ? CollectiveModel::nodes_spanned(*hw, ranks) : 1;
  const std::string note = layout_note(*hw, ranks);
  j["note"] = note.empty() ? nlohmann::json() : nlohmann::json(note);
  j["algorithm_forced"] = r.algo ? nlohmann::json(CollectiveModel::algo_name(*r.algo, multi)) : nlohmann::json();
  j["type"] = r.dtype.nccl_name;
  nlohmann::json out = nlohmann::json::array();
  for (const PriceRow& row : rows) {
    const CollectiveCost& c = row.cost;
    out.push_back({{"size_bytes", row.bytes},
                   {"count", row.count},
                   {"time_us", c.time_s * 1e6},
                   {"algbw_GBps", c.algbw_GBps},
                   {"busbw_GBps", c.busbw_GBps},
                   {"algorithm", CollectiveModel::algo_name(c.algo, multi)},
                   {"protocol", kNcclProtoNames[static_cast<size_t>(c.proto)]},
                   {"from", kCostSourceNames[static_cast<size_t>(c.source)]}});
  }
  j["rows"] = out;
  return j;
}

}  // namespace gs
