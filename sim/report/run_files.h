// The files a run writes beside the report for PyTorch (docs/parity.md, "Files"): report.save_weights writes
// weights/<run>.initial.safetensors and/or weights/<run>.final.safetensors, report.save_batches writes
// batches/<run>.npz. Each is written atomically (write_file_atomic) before the journal entry that names it.
#pragma once
#include <string>

#include "sim/config/scenario.h"
#include "sim/runtime/run_result.h"

namespace gs {

// What the run's report entry says of its files (null where none was asked for or the run did not train):
//   weights: {"format": "safetensors", "names": "torch_state_dict", "initial": "weights/<run>.initial.safetensors"
//             | null, "final": "weights/<run>.final.safetensors" | null, "final_step": steps completed}
//   batches: {"file": "batches/<run>.npz", "array": "indices", "dtype": "int32",
//             "shape": [steps completed, ranks, accumulation_steps, batch_per_rank]}
//   powersgd_q (compression.kind powersgd, with report.trace or initial weights saved; absent otherwise):
//            {"file": "weights/<run>.powersgd_q.safetensors", "names": "torch_state_dict", "rank": r,
//             "start_step": compression.start_step}: the initial Q of every compressed matrix, named as its
//             parameter, shape [cols, r] (powersgd_initial_q, compressor.h), for PyTorch's powerSGD_hook state
// Paths are relative to the report's folder.
struct RunFiles {
  json weights;
  json batches;
  json powersgd_q = nullptr;
};

// Writes the files of run `spec` (result `res`) into the report folder `dir`. Tensors are named and shaped as the
// model's table says (TensorInfo::file_name); batches are micro_batch_indices of every step the run completed (the
// dataset's sampling rule, dataset.h: what its loaders read). Throws ReportIoError when a folder or file cannot be
// written (the sweep stops, as for the report).
RunFiles write_run_files(const std::string& dir, const RunSpec& spec, const RunResult& res);

// The file name part shared by a run's files: its id where that is made of [A-Za-z0-9._=-] and at most 180
// characters, else a cleaned id with the run's index (as the timeline's, timeline_file_name, without ".json").
std::string run_file_stem(const std::string& run_id, int64_t index);

}  // namespace gs
