// `gradsweep price`: the modeled clock's collective times in nccl-tests' table (all_reduce_perf and friends), and the
// size / type parsing it shares with `gradsweep calibrate`.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/cost/collective_model.h"

namespace gs {

// A size with nccl-tests' suffixes: a plain number of bytes, or K, M, G (binary: 1K = 1024), case-insensitive.
// Throws gs::Error naming `what` and the text.
double parse_size_bytes(const std::string& text, const std::string& what);

// nccl-tests' data types: name as it prints it and element size in bytes. Accepts fp32|float, fp16|half,
// bf16|bfloat16, fp64|double, int8, uint8, int32, fp8 (fp8_e4m3). Throws gs::Error for another name.
struct DataType {
  std::string nccl_name;  // "float", "half", "bfloat16", ...
  double bytes = 4.0;
};
DataType data_type_from_name(const std::string& name);

// CollectiveKind from "all_reduce" | "all_gather" | "reduce_scatter" | "broadcast"; throws gs::Error.
CollectiveKind collective_kind_from_name(const std::string& name);

struct PriceRequest {
  std::string hardware = "h100-sxm-8";  // profile name or path
  CollectiveKind op = CollectiveKind::kAllReduce;
  std::optional<int> ranks;             // none: the profile's gpus_per_node
  double min_bytes = 1024, max_bytes = 8.0 * 1024 * 1024 * 1024;
  double factor = 2.0;                  // sizes min, min x factor, ... up to max (nccl-tests -f)
  std::optional<NcclAlgo> algo;         // --algo: NCCL_ALGO; nullopt: NCCL's choice
  DataType dtype;
};

struct PriceRow {
  double bytes = 0, count = 0;
  CollectiveCost cost;
};

// Parses "MIN:MAX[:FACTOR]" or one size into the request's range. Throws gs::Error.
void parse_size_range(const std::string& text, PriceRequest& r);
// The rows of the table, one per size (nccl-tests rounds each size down to whole elements; so does this). Throws
// gs::Error for an algorithm the profile does not have for this collective, fewer than 2 ranks, or a bad range.
std::vector<PriceRow> price_rows(const PriceRequest& r);
// nccl-tests' table: size, count, type, redop, root, time (us), algbw, busbw (GB/s), then the algorithm and protocol
// chosen and where the time comes from (curve, curve+ext, model).
std::string price_table(const PriceRequest& r, const std::vector<PriceRow>& rows);
nlohmann::json price_json(const PriceRequest& r, const std::vector<PriceRow>& rows);

}  // namespace gs
