// The data pipeline on the modeled clock: storage profiles (data.storage: a built-in name from
// scenarios/hardware/storage/*.json, whose numbers carry {"value", "source"}, or an object of plain numbers), the
// time one loader takes to read a batch's samples, and the prefetch recurrence that turns loader time into data
// stall. A new storage profile is one file in that folder; a new pricing term is one more line in storage_read_s.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace gs {

struct StorageProfile {
  std::string name;            // "local_nvme", ..., or "custom" for an object of numbers
  std::string file;            // the profile file ("" for an object given in the scenario)
  double bandwidth_GBps = 0;   // GB/s (1e9 B/s) per node, shared by the node's loaders
  double latency_us = 0;       // per request: time to first byte
  double concurrency = 1;      // requests one loader keeps in flight
};

// Folder of the built-in storage profiles: hardware_dir() + "/storage".
std::string storage_dir();
// Built-in profile names (file names without .json), sorted.
std::vector<std::string> storage_profile_names();
// data.storage resolved: a built-in name, or {"bandwidth_GBps": x, "latency_us": y, "concurrency": z} (plain numbers
// or {"value", "source"} objects). Cached per name (thread-safe). Throws gs::Error "data.storage: ..." for an unknown
// name (with the choices), ProfileError (hardware_profile.h) with every missing, unknown or out-of-range key, each
// with its JSON path ("data.storage.latency_us: expected ...", or "<file>: latency_us: expected ..." for a file).
StorageProfile load_storage_profile(const nlohmann::json& spec);

// Seconds of loader work to read `requests` samples of `bytes` in total, when `readers` loaders share the node's
// storage bandwidth and the loader may keep `window` requests in flight (the samples its prefetch queue has room for):
//   requests * latency / min(concurrency, window) + bytes / (bandwidth / readers).
// Little's law: with q requests outstanding, each taking one latency, requests complete at q / latency per second;
// the bytes stream at the loader's share of the link (a latency-bandwidth, Hockney, model per request). Requests of
// consecutive batches overlap (a worker pool, as PyTorch's DataLoader workers), so a batch's share of the latency
// shrinks with fewer misses; the first batch of a run is priced the same way (its full first-byte latency is not
// added). 0 requests: 0.
double storage_read_s(const StorageProfile& p, double requests, double bytes, double readers, double window);

// The prefetch recurrence of one rank's loader (modeled clock). The loader works on batch i (one optimizer step's
// micro-batches, loader work fetch_s) as soon as it finished batch i-1 and the consumer has taken batch i-depth (the
// bounded queue holds at most `depth` finished batches); the consumer asks for batch i when step i starts (the end
// of step i-1) and stalls until it is done:
//   begin_i = max(done_{i-1}, taken_{i-depth}),  done_i = begin_i + fetch_i,
//   stall_i = max(0, done_i - start_i),          taken_i = start_i + stall_i,   start_{i+1} = start_i + step_i.
// depth 0: no loader thread; the rank reads its own batch at step start (stall_i = fetch_i). The loader starts at
// time 0 with the run, so the first step stalls for the whole first read. In steady state the stall per step is
// max(0, fetch - compute): what the loader cannot hide behind the previous step's compute (CoorDL, Mohan et al.,
// VLDB 2021, "data stall"; PyTorch DataLoader's prefetch_factor bounds the same queue).
class PrefetchModel {
 public:
  PrefetchModel(int ranks, int64_t depth);
  // The stall of `rank` at its next step, whose batch costs the loader fetch_s. Call once per rank and step, then
  // end_step with the step's modeled duration (stall included).
  double stall_s(int rank, double fetch_s);
  void end_step(int rank, double step_s);
  // The loader's work of the last stall_s call of `rank`: [begin_i, done_i] on the rank's clock (seconds from its
  // start), for the timeline.
  int64_t depth() const { return depth_; }
  std::pair<double, double> last_fetch_s(int rank) const {
    const Rank& r = ranks_[static_cast<size_t>(rank)];
    return {r.begin_s, r.done_s};
  }

 private:
  struct Rank {
    double start_s = 0;                // when the current step starts
    double done_s = 0;                 // when the loader finished the previous batch
    double begin_s = 0;                // when it began it
    std::vector<double> taken_s;       // ring of the last `depth` take times (0 before the first steps)
    int64_t step = 0;
  };
  int64_t depth_;
  std::vector<Rank> ranks_;
};

}  // namespace gs
