// gradsweep merge (docs/cluster.md): joins the reports of the slices of one sweep (gradsweep run --shard K/N, each
// in its own shard-K-of-N/ folder) into one report.json that tools/plot.py and tools/compare.py read like any other.
// It refuses reports of another scenario file, other --set values, another report schema or gradsweep version or
// build, or another slicing (the fingerprints); two runs of one id whose results differ once the measured (wall-clock)
// fields are left out; and, unless allowed, a sweep that lacks runs (a slice that is absent, or one that did not run
// all of its runs, or was stopped in one: `interrupted`), naming them. The run files the kept runs name (timeline/,
// weights/, batches/) are copied beside the new report. Nothing is written before every check passed; the report is
// written atomically. The new folder's .lock is held while the merge writes there and removed when it ends, done or
// refused (a lock another process holds is never removed: lock_exclusive, remove_lock_file).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/report/file_io.h"

namespace gs {

struct MergeRequest {
  // Each a slice's report.json, a folder holding one, or a folder holding shard-K-of-N/ folders (the --out of the
  // slices' runs: every such folder with a report.json in it is taken).
  std::vector<std::string> sources;
  std::string out_dir;         // the merged report's folder (created; refused when it holds a report.json or journal)
  bool allow_missing = false;  // write the report even when runs are missing (they are listed in it)
  std::vector<std::string> argv;  // recorded in the report's `merged` block
};

struct MergeResult {
  std::string report_path;
  std::vector<std::string> reports;      // the slice reports read, in order
  int64_t shard_count = 0;               // N
  size_t runs = 0;                       // runs in the merged report
  size_t duplicates = 0;                 // runs given by more than one report (with the same results)
  size_t files = 0;                      // run files copied
  std::vector<int64_t> missing_shards;   // slices none of the sources is (only with allow_missing)
  std::vector<std::string> missing;      // ids of the present slices' runs that no report holds (allow_missing)
  std::vector<std::string> interrupted;  // ids of runs kept as `interrupted` (stopped by a signal; allow_missing)
};

// Throws gs::Error (the CLI's exit 2) for every refusal above and for a source that cannot be read or is not a
// slice's report (the message names the file and, where it applies, the JSON path); ReportIoError (exit 3) when the
// new report or a run file cannot be written.
MergeResult merge_reports(const MergeRequest& request);

// A run's report entry without the fields that measure this machine and moment (wall_s, every key holding "measured",
// timing.model_error, throughput.samples_per_s, memory.available_bytes, compression.compress_time and decompress_time,
// and communication.algbw_GBps / busbw_GBps where they come from measured steps): what must be equal between two runs
// of one id (a run's arithmetic and modeled clock are reproducible; parameter-server runs with sync.ordering "real" are
// not, and two of them are refused as different).
nlohmann::json without_measured(const nlohmann::json& run);

}  // namespace gs
