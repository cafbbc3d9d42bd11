// The collectives a communicator implements, their names in error messages, and the per-rank traffic each counts
// (nccl-tests conventions), shared by the host and GPU communicators so both report the same names and bytes.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gs {

enum class CollectiveOp : int { kAllReduceF32, kAllReduceF64, kAllGather, kReduceScatter, kBroadcast, kBarrier };

// The collective's name as errors print it, e.g. "all_reduce_sum(float)".
inline const char* collective_op_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduceF32: return "all_reduce_sum(float)";
    case CollectiveOp::kAllReduceF64: return "all_reduce_sum(double)";
    case CollectiveOp::kAllGather: return "all_gather";
    case CollectiveOp::kReduceScatter: return "reduce_scatter_sum";
    case CollectiveOp::kBroadcast: return "broadcast";
    case CollectiveOp::kBarrier: return "barrier";
  }
  return "?";
}

// Bytes one rank sends in a ring all-reduce of `count` elements of `elem_bytes` over `ranks` ranks:
// 2 (N-1) / N x count x elem_bytes (nccl-tests' busbw convention).
inline uint64_t ring_all_reduce_bytes(int ranks, size_t count, size_t elem_bytes) {
  return static_cast<uint64_t>(2) * static_cast<uint64_t>(ranks - 1) * count * elem_bytes /
         static_cast<uint64_t>(ranks);
}

}  // namespace gs
