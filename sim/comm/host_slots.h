// Shared-memory pieces of the host-side communicators (host_communicator.cpp, process_communicator.cpp): the
// per-rank slot a rank publishes its call in, its counters, the tile size of a rank-order sum and the element range
// each rank reduces. One definition, so the in-process and cross-process collectives split work identically.
#pragma once
#include <algorithm>
#include <cstddef>
#include <utility>

#include "sim/comm/collective_op.h"
#include "sim/comm/communicator.h"

namespace gs {
namespace host_slots {

// Elements per tile: the accumulator (16 KiB) stays in L1 while the N inputs stream through.
constexpr size_t kTileBytes = 16 * 1024;
// Rank ranges start at multiples of 64 bytes (16 floats) from the buffer's start: with 64-byte aligned buffers no two
// ranks write the same cache line.
constexpr size_t kRangeAlignBytes = 64;

// One call's arguments as a rank published them (the call's descriptor, as NCCL packs them).
struct alignas(64) Slot {
  CollectiveOp op = CollectiveOp::kBarrier;
  size_t count = 0;
  int root = 0;
  const void* in = nullptr;
  void* out = nullptr;
};

// Per-rank counters; written only by the owning rank's thread.
struct alignas(64) RankStats {
  CommStats stats;
};

// [lo, hi) of the `count` elements rank `rank` of `ranks` reduces: contiguous, in rank order, starting on 64-byte
// multiples.
template <typename T>
std::pair<size_t, size_t> owned_range(size_t count, int ranks, int rank) {
  constexpr size_t kAlign = kRangeAlignBytes / sizeof(T);
  size_t chunk = (count + static_cast<size_t>(ranks) - 1) / static_cast<size_t>(ranks);
  chunk = (chunk + kAlign - 1) / kAlign * kAlign;
  const size_t lo = std::min(count, chunk * static_cast<size_t>(rank));
  return {lo, std::min(count, lo + chunk)};
}

}  // namespace host_slots
}  // namespace gs
