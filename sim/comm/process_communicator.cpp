// ProcessCommunicator (communicator.h, make_process_communicator): the host backend's collectives over the ranks of
// several processes (mpirun). Ranks of one process are threads that publish their buffers in slots as the host
// communicator's do; the first local rank's thread packs every local buffer and all-gathers them over the process
// group (global rank order: process 0's ranks first); then every local rank sums its share of the elements over all N
// ranks' copies, left to right in rank order 0..N-1, exactly as HostCommunicator does, so a run gives the same bits in
// one process and across processes. The cost: every process receives every rank's buffer (N x the data, not a ring's
// 2 (N - 1) / N; for a reduce-scatter every rank's whole input, N x count x N); the bytes it reports are a ring's, as
// the host communicator's.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "sim/comm/collective_op.h"
#include "sim/comm/communicator.h"
#include "sim/comm/host_slots.h"
#include "sim/comm/process_group.h"
#include "sim/core/error.h"

namespace gs {
namespace {

using Op = CollectiveOp;
using host_slots::kTileBytes;
using host_slots::owned_range;
using host_slots::RankStats;
using host_slots::Slot;

// acc[0..n) = block_0[off..] + block_1[off..] + ... + block_{N-1}[off..], left to right, where block_r starts at
// blocks + r * stride: the same additions in the same order as HostCommunicator's sum_tile_in_rank_order.
template <typename T>
void sum_blocks_in_rank_order(T* __restrict acc, const T* __restrict blocks, size_t stride, int ranks, size_t off,
                              size_t n) {
  const T* b0 = blocks + off;
  if (ranks == 1) {
    std::memcpy(acc, b0, n * sizeof(T));
    return;
  }
  const T* b1 = b0 + stride;
  for (size_t i = 0; i < n; ++i) acc[i] = b0[i] + b1[i];
  for (int r = 2; r < ranks; ++r) {
    const T* b = blocks + static_cast<size_t>(r) * stride + off;
    for (size_t i = 0; i < n; ++i) acc[i] += b[i];
  }
}

class ProcessCommunicator final : public Communicator {
 public:
  ProcessCommunicator(int local_ranks, int first_rank, ProcessGroup& group)
      : local_(local_ranks),
        first_(first_rank),
        ranks_(local_ranks * group.size()),
        group_(group),
        barrier_(local_ranks),
        slots_(static_cast<size_t>(local_ranks)),
        stats_(static_cast<size_t>(local_ranks)) {
    GS_EXPECT(local_ranks >= 1, "a process needs at least one rank");
  }

  int size() const override { return ranks_; }

  void all_reduce_sum(int rank, float* buf, size_t count) override {
    all_reduce_impl(rank, buf, count, Op::kAllReduceF32);
  }
  void all_reduce_sum(int rank, double* buf, size_t count) override {
    all_reduce_impl(rank, buf, count, Op::kAllReduceF64);
  }

  void all_gather(int rank, float* out, const float* in, size_t count) override {
    const int li = begin(rank, Op::kAllGather, count, 0, in, out);
    exchange(li, count * sizeof(float));
    // recv_ holds every rank's block in rank order: this rank copies its share of it into every local output (the
    // outputs may be one buffer: the shares are disjoint).
    const auto [lo, hi] = owned_range<float>(count * static_cast<size_t>(ranks_), local_, li);
    const float* all = reinterpret_cast<const float*>(recv_.data());
    for (const Slot& s : slots_)
      if (hi > lo) std::memcpy(static_cast<float*>(s.out) + lo, all + lo, (hi - lo) * sizeof(float));
    end(li, static_cast<uint64_t>(ranks_ - 1) * count * sizeof(float));
  }

  // Every rank's whole input (N blocks of count) to every process, then each local rank sums its own block of all N
  // inputs in rank order (HostCommunicator's additions). out may alias this rank's block of its input: the inputs
  // were copied into recv_ before any output is written.
  void reduce_scatter_sum(int rank, float* out, const float* in, size_t count) override {
    const int li = begin(rank, Op::kReduceScatter, count, 0, in, out);
    const size_t whole = count * static_cast<size_t>(ranks_);
    exchange(li, whole * sizeof(float));
    constexpr size_t kTile = kTileBytes / sizeof(float);
    alignas(64) float acc[kTile];
    const float* blocks = reinterpret_cast<const float*>(recv_.data());
    const size_t base = static_cast<size_t>(rank) * count;
    for (size_t off = 0; off < count; off += kTile) {
      const size_t n = std::min(kTile, count - off);
      sum_blocks_in_rank_order(acc, blocks, whole, ranks_, base + off, n);
      std::memcpy(out + off, acc, n * sizeof(float));
    }
    end(li, static_cast<uint64_t>(ranks_ - 1) * count * sizeof(float));
  }

  void broadcast(int rank, float* buf, size_t count, int root) override {
    GS_EXPECT(root >= 0 && root < ranks_, "broadcast root " + std::to_string(root) + " out of range");
    const int li = begin(rank, Op::kBroadcast, count, root, buf, buf);
    if (li == 0) {
      recv_.resize(count * sizeof(float));
      const int owner = root / local_;
      if (owner == group_.rank() && count > 0)
        std::memcpy(recv_.data(), slots_[static_cast<size_t>(root - first_)].in, recv_.size());
      group_.broadcast(recv_.data(), recv_.size(), owner);
    }
    stats_[static_cast<size_t>(li)].stats.wait_s += barrier_.arrive_and_wait();
    if (rank != root && count > 0) std::memcpy(buf, recv_.data(), count * sizeof(float));
    end(li, rank == root ? static_cast<uint64_t>(count) * sizeof(float) : 0);
  }

  void barrier(int rank) override {
    const int li = begin(rank, Op::kBarrier, 0, 0, nullptr, nullptr);
    exchange(li, 1);
    end(li, 0);
  }

  void abort() override { barrier_.abort(); }

  CommStats take_stats(int rank) override {
    RankStats& s = stats_[static_cast<size_t>(local_index(rank))];
    CommStats out = s.stats;
    s.stats = CommStats{};
    return out;
  }

 private:
  int local_index(int rank) const {
    GS_EXPECT(rank >= first_ && rank < first_ + local_,
              "rank " + std::to_string(rank) + " is not one of this process's ranks " + std::to_string(first_) + ".." +
                  std::to_string(first_ + local_ - 1));
    return rank - first_;
  }

  // Publishes the call, waits for the local ranks, checks they called the same collective; returns the local index.
  int begin(int rank, Op op, size_t count, int root, const void* in, void* out) {
    const int li = local_index(rank);
    GS_EXPECT(count == 0 || (in != nullptr && out != nullptr), std::string(collective_op_name(op)) + ": null buffer");
    slots_[static_cast<size_t>(li)] = Slot{op, count, root, in, out};
    stats_[static_cast<size_t>(li)].stats.wait_s += barrier_.arrive_and_wait();
    for (int r = 0; r < local_; ++r) {
      const Slot& other = slots_[static_cast<size_t>(r)];
      if (other.op != op || other.count != count || other.root != root)
        throw Error(std::string("same collective on every rank: rank ") + std::to_string(rank) + " called " +
                    collective_op_name(op) + " count " + std::to_string(count) + " but rank " +
                    std::to_string(first_ + r) + " called " + collective_op_name(other.op) + " count " +
                    std::to_string(other.count));
    }
    return li;
  }

  // The first local rank packs the local inputs (bytes each) and all-gathers them: recv_ = every rank's input in
  // global rank order. Every local rank waits for it.
  void exchange(int li, size_t bytes) {
    if (li == 0) {
      send_.resize(bytes * static_cast<size_t>(local_));
      for (int r = 0; r < local_; ++r)
        if (bytes > 0 && slots_[static_cast<size_t>(r)].in != nullptr)
          std::memcpy(send_.data() + bytes * static_cast<size_t>(r), slots_[static_cast<size_t>(r)].in, bytes);
      recv_.resize(send_.size() * static_cast<size_t>(group_.size()));
      group_.all_gather(send_.data(), recv_.data(), send_.size());
    }
    stats_[static_cast<size_t>(li)].stats.wait_s += barrier_.arrive_and_wait();
  }

  void end(int li, uint64_t bytes_sent) {
    CommStats& s = stats_[static_cast<size_t>(li)].stats;
    s.wait_s += barrier_.arrive_and_wait();
    s.bytes_sent += bytes_sent;
    s.calls += 1;
  }

  template <typename T>
  void all_reduce_impl(int rank, T* buf, size_t count, Op op) {
    const int li = begin(rank, op, count, 0, buf, buf);
    exchange(li, count * sizeof(T));
    constexpr size_t kTile = kTileBytes / sizeof(T);
    alignas(64) T acc[kTile];
    const T* blocks = reinterpret_cast<const T*>(recv_.data());
    const auto [lo, hi] = owned_range<T>(count, local_, li);
    for (size_t off = lo; off < hi; off += kTile) {
      const size_t n = std::min(kTile, hi - off);
      sum_blocks_in_rank_order(acc, blocks, count, ranks_, off, n);
      for (const Slot& s : slots_) std::memcpy(static_cast<T*>(s.out) + off, acc, n * sizeof(T));
    }
    end(li, ring_all_reduce_bytes(ranks_, count, sizeof(T)));
  }

  const int local_;
  const int first_;
  const int ranks_;
  ProcessGroup& group_;
  Barrier barrier_;
  std::vector<Slot> slots_;
  std::vector<RankStats> stats_;
  std::vector<char> send_, recv_;  // the first local rank's staging buffers (read by all between barriers)
};

}  // namespace

std::unique_ptr<Communicator> make_process_communicator(int local_ranks, int first_rank, ProcessGroup& group) {
  return std::make_unique<ProcessCommunicator>(local_ranks, first_rank, group);
}

}  // namespace gs
