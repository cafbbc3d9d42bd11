// The modeled clock of one run as a Chrome trace-event JSON file (report.timeline; docs/profiling.md): it opens in
// ui.perfetto.dev and chrome://tracing. A new track is one more writer in timeline.cpp with its thread id below.
#pragma once
#include <cstdint>
#include <string>

#include "sim/runtime/run_result.h"

namespace gs {

// Thread ids of one rank's tracks (rank r: r * kTimelineTracksPerRank + the track).
constexpr int kTimelineTracksPerRank = 5;
enum class TimelineTrack { kCompute = 0, kCommunication = 1, kDataLoader = 2, kMeasured = 3, kUnshard = 4 };
int timeline_tid(int rank, TimelineTrack track);

// The trace of one run, the file's whole text, and the number of slices ("ph": "X" events) it holds.
struct TimelineText {
  std::string text;
  int64_t slices = 0;
};

// The Trace Event Format's JSON object form ({"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}};
// Google's "Trace Event Format" document): one process (pid 1, named after run_id) and per rank the tracks of
// TimelineTrack. Timestamps ts and durations dur in microseconds of the modeled clock from the run's start. Per rank
// and step, from res.modeled_layouts (cost_model.h, StepLayout): an instant "step N" at the rank's step start; on
// the compute track the step's slices in order (wait for the rank furthest behind, data stall, forward and backward
// of each micro-batch, compress, the exposed compress and communicate, wait for the other ranks' collectives,
// optimizer, wait for the slowest rank), each named and categorised by its report phase, so per rank and phase they
// add up to the report's modeled phase totals (ZeRO stage 3: each forward and backward split where the compute
// stream waits for a parameter all-gather, the wait a "communicate" slice between); on the communication track each
// chain (bucket) as its encode, its collective (args: bytes, algorithm, protocol, the gradient range) and its decode,
// starting where the model starts it (a delayed update's chains may run into the next steps: the stream is first in,
// first out); on the unshard track (ZeRO stage 3 only) each layer's parameter all-gather of each pass and
// micro-batch where the prefetch schedule puts it (args: bytes, algorithm, protocol, layer, pass, micro-batch, the
// part of it exposed); on the data loader track the loader's work on each step's batch. Runs without layouts (the
// parameter server, whose workers keep their own clocks) get their modeled phases laid end to end per step. The measured clock, where there is one (not
// timing-only), on its own track per rank: each step's measured phase totals laid end to end in the rank loop's
// order (data, forward, backward, wait, compress, communicate, optimizer), which the measured clock records as
// totals, not start times.
TimelineText timeline_text(const std::string& run_id, const RunResult& res);

// A file name for a run's timeline: the id where it is made of [A-Za-z0-9._=-] and at most 180 characters, else
// those characters kept, the rest '_', cut to 160, then "-<index>" (ids are unique; their cleaned forms may not be).
std::string timeline_file_name(const std::string& run_id, int64_t index);

}  // namespace gs
