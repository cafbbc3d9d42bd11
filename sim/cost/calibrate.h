// `gradsweep calibrate`: a hardware profile from measurements made on the user's own node: nccl-tests tables (text
// as all_reduce_perf prints it, several versions' column layouts, or its -J JSON, or rccl-tests' JSON lines) and a
// GEMM sweep (bench_gpu --benchmark_filter=Gemm --benchmark_format=json, or {"precision", "shapes": [[m, n, k,
// TFLOPS], ...]}). It writes the measured curves into the profile and fits the analytic model's constants (NCCL
// latency scale and launch cost; GEMM efficiency and falloff), printing the fit's error at every point.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/cost/collective_model.h"

namespace gs {

// One nccl-tests table. Points are the out-of-place columns (in-place where a row has no out-of-place result).
struct NcclTestsTable {
  std::string file;
  std::optional<CollectiveKind> op;  // from "# Collective test starting: <op>_perf", the JSON, or the caller
  std::optional<NcclAlgo> algo;      // nullopt: NCCL's own choice ("default" curve); from the caller
  int ranks = 0;                     // "#  Rank N ..." lines or the JSON's devices (0: not stated)
  std::vector<double> bytes, time_us, busbw_GBps;
};

// Parses nccl-tests output, text or JSON (detected by its first non-blank character). Text: the header row
// ("# size count type redop [root] time algbw busbw #wrong|error time ...") names the columns; rows of MPI-tagged
// output ("[0] ...") are read too; rows that do not parse are skipped, and a table with no row is an error.
// Throws gs::Error naming the file and what was expected.
NcclTestsTable parse_nccl_tests(const std::string& text, const std::string& file);

// One GEMM measurement.
struct GemmPoint {
  Precision precision = Precision::kBf16;
  double m = 0, n = 0, k = 0, tflops = 0;
};
// Parses Google Benchmark JSON (entries with counters m, n, k and TFLOPS; the precision from the name: fp32, tf32,
// bf16, fp16 or fp8) or {"precision": "bf16", "shapes": [[m, n, k, TFLOPS], ...]} (also a list of those). Throws
// gs::Error naming the file and the JSON path.
std::vector<GemmPoint> parse_gemm_json(const std::string& text, const std::string& file);

// The analytic collective model's fit: latency_scale shared, launch_us per collective (grid search of
// sum log^2(model busbw / measured busbw) over every point).
struct CollectiveFit {
  double latency_scale = 1.0;
  std::array<double, kCollectiveKindCount> launch_us{};
  std::array<bool, kCollectiveKindCount> fitted{};
};
CollectiveFit fit_collectives(const HardwareProfile& base, const std::vector<NcclTestsTable>& tables);

// GEMM constants of compute_model.h's form (FLOP time + a fixed cost + a cost per operand byte): gemm_efficiency
// per measured precision and the fixed cost and bytes rate, the same at every precision, least squares in log time
// (grid over the two overheads, golden-section search for each efficiency). half_gflop and half_intensity are those
// overheads as the profile's half points at the 16-bit rate (the fitted bf16 efficiency where bf16 was measured, else
// the base's); fixed_s and skinny_Bps (0: no bytes term) are them in seconds and bytes/s at sustained_fraction 1.
struct GemmFit {
  std::array<std::optional<double>, kPrecisionCount> efficiency{};
  double half_gflop = 0.0, half_intensity = 0.0;
  double fixed_s = 0.0, skinny_Bps = 0.0;
};
GemmFit fit_gemm(const HardwareProfile& base, const std::vector<GemmPoint>& points);

struct CalibrateRequest {
  std::string base = "h100-sxm-8";    // profile name or path
  std::string name;                   // the new profile's name ("" : the output file's stem)
  std::string out;                    // output path (for the name and the sources)
  std::vector<std::string> nccl_files;  // "[OP[:ALGO]=]FILE"
  std::vector<std::string> gemm_files;
  // The ranks a nccl-tests file was measured on when it does not list them ("#  Rank N" lines, the JSON's devices):
  // 0 assumes the base profile's gpus_per_node (said in the report). A file that lists its ranks keeps its own.
  int ranks = 0;
};
struct CalibrateResult {
  std::string profile_text;  // the new profile (JSON, every number with its source); parse_hardware_profile reads it
  std::string report;        // the fit's error per point, for the terminal
};
// Reads the files, fits, and builds the profile from the base's JSON. Throws gs::Error (a file, its format, an
// operation that cannot be told, an algorithm the base has not) before anything is written.
CalibrateResult calibrate(const CalibrateRequest& r);

}  // namespace gs
