// Sweeps split over many machines (docs/cluster.md): `gradsweep run --shard K/N` runs the K-th of N disjoint slices
// of a scenario's runs. A run's slice depends on its id alone (FNV-1a 64 of the id's bytes, modulo N, plus 1), so
// adding a repeat, a value to an axis or resuming never moves a run that already exists to another slice.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace gs {

// Most slices a sweep may be split into (Slurm's MaxArraySize is 1001 by default; this leaves room).
constexpr int64_t kMaxShards = 1000000;

// 64-bit FNV-1a of bytes (offset basis 0xcbf29ce484222325, prime 0x100000001b3; Fowler, Noll, Vo).
uint64_t fnv1a64(std::string_view bytes);

// One slice of a sweep: index K from 1 to count N (as SLURM_ARRAY_TASK_ID with --array=1-N); count 0: not sharded.
struct Shard {
  int64_t index = 0;
  int64_t count = 0;
  bool active() const { return count > 0; }
  // Whether the run with this id belongs to this slice (every run does when not sharded).
  bool holds(const std::string& run_id) const;
};

// The slice of run_id among count slices: fnv1a64(run_id) % count + 1, from 1 to count (count >= 1).
int64_t shard_of(const std::string& run_id, int64_t count);

// Parses "K/N": two decimal integers without sign or spaces, 1 <= N <= kMaxShards, 1 <= K <= N. Throws gs::Error
// "--shard \"TEXT\": ..." saying what was expected.
Shard parse_shard(const std::string& text);

// The folder a slice writes its report into, inside the --out folder: "shard-K-of-N".
std::string shard_folder_name(const Shard& shard);

}  // namespace gs
