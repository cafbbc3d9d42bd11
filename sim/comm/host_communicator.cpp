// HostCommunicator: collectives between rank threads of one process through shared memory. Every collective
// publishes each rank's buffer pointers in a per-rank slot, meets at a barrier, does this rank's share of the work
// directly on the other ranks' buffers, and meets again. Sums run in rank order 0..N-1 for every element.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "sim/comm/collective_op.h"
#include "sim/comm/communicator.h"
#include "sim/comm/host_slots.h"

namespace gs {

namespace {

using Op = CollectiveOp;
using host_slots::kTileBytes;
using host_slots::owned_range;
using host_slots::RankStats;
using host_slots::Slot;

// acc[i] = a[i] + b[i]; acc[i] += b[i]: element loops the compiler vectorizes (strict IEEE, one add per element, so
// the order across ranks is the loop order of the caller).
template <typename T>
void add_into(T* __restrict acc, const T* __restrict a, const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = a[i] + b[i];
}
template <typename T>
void accumulate(T* __restrict acc, const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += b[i];
}

// acc[0..n) = in_0[off..] + in_1[off..] + ... + in_{N-1}[off..], left to right, where in_r is slots[r].in.
template <typename T>
void sum_tile_in_rank_order(T* __restrict acc, const Slot* slots, int ranks, size_t off, size_t n) {
  auto input = [&](int r) { return static_cast<const T*>(slots[r].in) + off; };
  if (ranks == 1) {
    std::memcpy(acc, input(0), n * sizeof(T));
    return;
  }
  add_into(acc, input(0), input(1), n);
  for (int r = 2; r < ranks; ++r) accumulate(acc, input(r), n);
}

class HostCommunicator final : public Communicator {
 public:
  HostCommunicator(int ranks, double deadline_s)
      : ranks_(checked_ranks(ranks)), barrier_(ranks, deadline_s), slots_(ranks), stats_(ranks) {}

  int size() const override { return ranks_; }

  void all_reduce_sum(int rank, float* buf, size_t count) override {
    all_reduce_impl(rank, buf, count, Op::kAllReduceF32);
  }
  void all_reduce_sum(int rank, double* buf, size_t count) override {
    all_reduce_impl(rank, buf, count, Op::kAllReduceF64);
  }

  void all_gather(int rank, float* out, const float* in, size_t count) override {
    begin(rank, Op::kAllGather, count, 0, in, out);
    // This rank copies its input into block `rank` of every rank's output, a tile at a time (read once, write N).
    const size_t tile = kTileBytes / sizeof(float);
    for (size_t off = 0; off < count; off += tile) {
      const size_t n = std::min(tile, count - off);
      for (int r = 0; r < ranks_; ++r) {
        float* dst = static_cast<float*>(slots_[r].out) + static_cast<size_t>(rank) * count + off;
        if (dst != in + off) std::memcpy(dst, in + off, n * sizeof(float));
      }
    }
    end(rank, static_cast<uint64_t>(ranks_ - 1) * count * sizeof(float));
  }

  void reduce_scatter_sum(int rank, float* out, const float* in, size_t count) override {
    begin(rank, Op::kReduceScatter, count, 0, in, out);
    // This rank sums block `rank` of every input, in rank order, into its own output. out may alias that block of
    // its own input: each tile is fully read before it is written.
    alignas(64) float acc[kTileBytes / sizeof(float)];
    const size_t tile = kTileBytes / sizeof(float);
    const size_t base = static_cast<size_t>(rank) * count;
    for (size_t off = 0; off < count; off += tile) {
      const size_t n = std::min(tile, count - off);
      sum_tile_in_rank_order(acc, slots_.data(), ranks_, base + off, n);
      std::memcpy(out + off, acc, n * sizeof(float));
    }
    end(rank, static_cast<uint64_t>(ranks_ - 1) * count * sizeof(float));
  }

  void broadcast(int rank, float* buf, size_t count, int root) override {
    GS_EXPECT(root >= 0 && root < ranks_, "broadcast root " + std::to_string(root) + " out of range");
    begin(rank, Op::kBroadcast, count, root, buf, buf);
    // Every non-root rank pulls the root's buffer into its own.
    const float* src = static_cast<const float*>(slots_[root].in);
    if (rank != root && count > 0 && src != buf) std::memcpy(buf, src, count * sizeof(float));
    end(rank, rank == root ? static_cast<uint64_t>(count) * sizeof(float) : 0);
  }

  // Two barrier rounds like every collective, so a rank that calls barrier() while the others call something else is
  // caught by the descriptor check on every rank (one round would let it run ahead and rewrite its slot).
  void barrier(int rank) override {
    begin(rank, Op::kBarrier, 0, 0, nullptr, nullptr);
    end(rank, 0);
  }

  void abort() override { barrier_.abort(); }

  CommStats take_stats(int rank) override {
    check_rank(rank);
    CommStats out = stats_[rank].stats;
    stats_[rank].stats = CommStats{};
    return out;
  }

 private:
  static int checked_ranks(int ranks) {
    GS_EXPECT(ranks >= 1, "a communicator needs at least one rank, got " + std::to_string(ranks));
    return ranks;
  }

  void check_rank(int rank) const {
    GS_EXPECT(rank >= 0 && rank < ranks_,
              "rank " + std::to_string(rank) + " out of range for " + std::to_string(ranks_) + " ranks");
  }

  // Publishes this rank's descriptor and waits for all ranks; then checks every rank called the same collective
  // with the same count and root. Every rank sees the same slots, so on a mismatch every rank throws together.
  void begin(int rank, Op op, size_t count, int root, const void* in, void* out) {
    check_rank(rank);
    GS_EXPECT(count == 0 || (in != nullptr && out != nullptr), std::string(collective_op_name(op)) + ": null buffer");
    Slot& slot = slots_[rank];
    slot.op = op;
    slot.count = count;
    slot.root = root;
    slot.in = in;
    slot.out = out;
    stats_[rank].stats.wait_s += barrier_.arrive_and_wait();
    for (int r = 0; r < ranks_; ++r) {
      const Slot& other = slots_[r];
      if (other.op != op || other.count != count || other.root != root) {
        throw_error(__FILE__, __LINE__, "same collective on every rank",
                    std::string("rank ") + std::to_string(rank) + " called " + collective_op_name(op) + " count " +
                        std::to_string(count) + " but rank " + std::to_string(r) + " called " +
                        collective_op_name(other.op) + " count " + std::to_string(other.count));
      }
    }
  }

  // Waits until every rank has finished its share (after this, buffers belong to their callers again).
  void end(int rank, uint64_t bytes_sent) {
    CommStats& s = stats_[rank].stats;
    s.wait_s += barrier_.arrive_and_wait();
    s.bytes_sent += bytes_sent;
    s.calls += 1;
  }

  template <typename T>
  void all_reduce_impl(int rank, T* buf, size_t count, Op op) {
    begin(rank, op, count, 0, buf, buf);
    if (ranks_ > 1) {
      // This rank reduces its own range of every rank's buffer, in rank order, and writes the sum to all of them.
      // Ranges are disjoint, so nobody else reads or writes these elements during the collective.
      constexpr size_t kTile = kTileBytes / sizeof(T);
      alignas(64) T acc[kTile];
      const auto [lo, hi] = owned_range<T>(count, ranks_, rank);
      for (size_t off = lo; off < hi; off += kTile) {
        const size_t n = std::min(kTile, hi - off);
        sum_tile_in_rank_order(acc, slots_.data(), ranks_, off, n);
        for (int r = 0; r < ranks_; ++r) std::memcpy(static_cast<T*>(slots_[r].out) + off, acc, n * sizeof(T));
      }
    }
    end(rank, ring_all_reduce_bytes(ranks_, count, sizeof(T)));
  }

  const int ranks_;
  Barrier barrier_;
  std::vector<Slot> slots_;
  std::vector<RankStats> stats_;
};

}  // namespace

std::unique_ptr<Communicator> make_host_communicator(int ranks, double deadline_s) {
  return std::make_unique<HostCommunicator>(ranks, deadline_s);
}

}  // namespace gs
