// The GPU communicators of gpu_communicator.h: LocalCommunicator (rank threads sharing one GPU; rank 0 reduces with
// kernels between two host barriers) and NcclCommunicator (one NCCL communicator per rank, polled waits so aborts and
// asynchronous NCCL errors end every wait). A new collective is added to both classes and to Communicator.
#include "sim/comm/gpu_communicator.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#if defined(GRADSWEEP_HAVE_NCCL)
#include <nccl.h>
#endif

#include "kernels/cuda_kernels.h"
#include "sim/comm/collective_op.h"
#include "sim/runtime/barrier.h"

namespace gs {

namespace {

using Op = CollectiveOp;

struct alignas(64) Slot {
  Op op = Op::kBarrier;
  size_t count = 0;
  int root = 0;
  const void* in = nullptr;
  void* out = nullptr;
  cudaStream_t stream = nullptr;
  bool stream_set = false;
  CommStats stats;
};

// ---- local ----------------------------------------------------------------------------------------------------

class LocalCommunicator final : public GpuCommunicator {
 public:
  LocalCommunicator(int ranks, int device)
      : ranks_(ranks), device_(device), barrier_(ranks), slots_(ranks) {
    GS_EXPECT(ranks >= 1, "a communicator needs at least one rank, got " + std::to_string(ranks));
    GS_CUDA_CHECK(cudaSetDevice(device_));
    stream_ = gpu::Stream();
    ptrs_ = gpu::DeviceBuffer<void*>(2 * static_cast<size_t>(ranks), "local communicator pointer table");
    staging_ = gpu::PinnedBuffer<void*>(2 * static_cast<size_t>(ranks), "local communicator pointer staging");
  }

  int size() const override { return ranks_; }

  void set_compute_stream(int rank, cudaStream_t stream) override {
    check_rank(rank);
    slots_[rank].stream = stream;
    slots_[rank].stream_set = true;
  }

  void all_reduce_sum(int rank, float* buf, size_t count) override {
    run(rank, Op::kAllReduceF32, count, 0, buf, buf, [&] {
      upload_pointers();
      gpu::sum_in_rank_order(reinterpret_cast<float* const*>(ptrs_.get() + ranks_),
                             reinterpret_cast<const float* const*>(ptrs_.get()), ranks_, count, stream_.get());
    });
    finish(rank, ring_all_reduce_bytes(ranks_, count, sizeof(float)));
  }

  void all_reduce_sum(int rank, double* buf, size_t count) override {
    run(rank, Op::kAllReduceF64, count, 0, buf, buf, [&] {
      upload_pointers();
      gpu::sum_in_rank_order(reinterpret_cast<double* const*>(ptrs_.get() + ranks_),
                             reinterpret_cast<const double* const*>(ptrs_.get()), ranks_, count, stream_.get());
    });
    finish(rank, ring_all_reduce_bytes(ranks_, count, sizeof(double)));
  }

  void all_gather(int rank, float* out, const float* in, size_t count) override {
    run(rank, Op::kAllGather, count, 0, in, out, [&] {
      for (int src = 0; src < ranks_; ++src) {
        for (int dst = 0; dst < ranks_; ++dst) {
          float* to = static_cast<float*>(slots_[dst].out) + static_cast<size_t>(src) * count;
          const void* from = slots_[src].in;
          if (to != from) {
            GS_CUDA_CHECK(cudaMemcpyAsync(to, from, count * sizeof(float), cudaMemcpyDeviceToDevice, stream_.get()));
          }
        }
      }
    });
    finish(rank, static_cast<uint64_t>(ranks_ - 1) * count * sizeof(float));
  }

  void reduce_scatter_sum(int rank, float* out, const float* in, size_t count) override {
    run(rank, Op::kReduceScatter, count, 0, in, out, [&] {
      upload_pointers();
      gpu::reduce_scatter_in_rank_order(reinterpret_cast<float* const*>(ptrs_.get() + ranks_),
                                        reinterpret_cast<const float* const*>(ptrs_.get()), ranks_, count,
                                        stream_.get());
    });
    finish(rank, static_cast<uint64_t>(ranks_ - 1) * count * sizeof(float));
  }

  void broadcast(int rank, float* buf, size_t count, int root) override {
    GS_EXPECT(root >= 0 && root < ranks_, "broadcast root " + std::to_string(root) + " out of range");
    run(rank, Op::kBroadcast, count, root, buf, buf, [&] {
      for (int dst = 0; dst < ranks_; ++dst) {
        if (dst == root || slots_[dst].out == slots_[root].in) continue;
        GS_CUDA_CHECK(cudaMemcpyAsync(slots_[dst].out, slots_[root].in, count * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream_.get()));
      }
    });
    finish(rank, rank == root ? static_cast<uint64_t>(count) * sizeof(float) : 0);
  }

  void barrier(int rank) override {
    run(rank, Op::kBarrier, 0, 0, nullptr, nullptr, [] {});
    finish(rank, 0);
  }

  void all_reduce_sum_start(int rank, float* buf, size_t count) override { all_reduce_sum(rank, buf, count); }
  void all_reduce_wait(int rank) override { check_rank(rank); }

  void abort() override { barrier_.abort(); }

  CommStats take_stats(int rank) override {
    check_rank(rank);
    CommStats out = slots_[rank].stats;
    slots_[rank].stats = CommStats{};
    return out;
  }

 private:
  void check_rank(int rank) const {
    GS_EXPECT(rank >= 0 && rank < ranks_,
              "rank " + std::to_string(rank) + " out of range for " + std::to_string(ranks_) + " ranks");
  }

  // Publishes the call, waits for the rank's own queued work, meets the other ranks, checks that all called the same
  // collective, lets rank 0 do the work on the communicator's stream (waiting for it), and meets again. A failure in
  // rank 0's work aborts the barrier (the other ranks throw Aborted) and is rethrown in rank 0.
  template <class Work>
  void run(int rank, Op op, size_t count, int root, const void* in, void* out, Work&& work) {
    check_rank(rank);
    GS_EXPECT(count == 0 || (in != nullptr && out != nullptr), std::string(collective_op_name(op)) + ": null buffer");
    GS_CUDA_CHECK(cudaSetDevice(device_));
    Slot& slot = slots_[rank];
    slot.op = op;
    slot.count = count;
    slot.root = root;
    slot.in = in;
    slot.out = out;
    if (slot.stream_set) {
      GS_CUDA_CHECK(cudaStreamSynchronize(slot.stream));
    } else {
      GS_CUDA_CHECK(cudaDeviceSynchronize());
    }
    slot.stats.wait_s += barrier_.arrive_and_wait();
    for (int r = 0; r < ranks_; ++r) {
      const Slot& other = slots_[r];
      if (other.op != op || other.count != count || other.root != root) {
        throw_error(__FILE__, __LINE__, "same collective on every rank",
                    std::string("rank ") + std::to_string(rank) + " called " + collective_op_name(op) + " count " +
                        std::to_string(count) + " but rank " + std::to_string(r) + " called " +
                        collective_op_name(other.op) + " count " + std::to_string(other.count));
      }
    }
    if (rank == 0 && count > 0) {
      try {
        work();
        stream_.synchronize();
      } catch (...) {
        barrier_.abort();
        throw;
      }
    }
  }

  void finish(int rank, uint64_t bytes_sent) {
    CommStats& s = slots_[rank].stats;
    s.wait_s += barrier_.arrive_and_wait();
    s.bytes_sent += bytes_sent;
    s.calls += 1;
  }

  // Device pointer table: [0, ranks) the inputs, [ranks, 2 ranks) the outputs, in rank order (rank 0 only).
  void upload_pointers() {
    for (int r = 0; r < ranks_; ++r) {
      staging_[r] = const_cast<void*>(slots_[r].in);
      staging_[ranks_ + r] = slots_[r].out;
    }
    GS_CUDA_CHECK(cudaMemcpyAsync(ptrs_.get(), staging_.get(), 2 * ranks_ * sizeof(void*), cudaMemcpyHostToDevice,
                                  stream_.get()));
  }

  const int ranks_;
  const int device_;
  Barrier barrier_;
  std::vector<Slot> slots_;
  gpu::Stream stream_;
  gpu::DeviceBuffer<void*> ptrs_;
  gpu::PinnedBuffer<void*> staging_;
};

// ---- nccl -----------------------------------------------------------------------------------------------------

#if defined(GRADSWEEP_HAVE_NCCL)

void check_nccl(ncclResult_t r, const char* call, const char* file, int line) {
  if (r == ncclSuccess) return;
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + call + ": " + ncclGetErrorString(r) +
              (r == ncclSystemError || r == ncclInternalError ? std::string(" (") + ncclGetLastError(nullptr) + ")"
                                                               : std::string()));
}
#define GS_NCCL_CHECK(call) check_nccl((call), #call, __FILE__, __LINE__)

class NcclCommunicator final : public GpuCommunicator {
 public:
  explicit NcclCommunicator(const std::vector<int>& devices)
      : ranks_(static_cast<int>(devices.size())), devices_(devices), barrier_(ranks_), ranks_state_(ranks_) {
    GS_EXPECT(ranks_ >= 1, "the nccl communicator needs at least one GPU");
    for (size_t a = 0; a < devices.size(); ++a) {
      for (size_t b = a + 1; b < devices.size(); ++b) {
        GS_EXPECT(devices[a] != devices[b], "nccl: ranks " + std::to_string(a) + " and " + std::to_string(b) +
                                                " share GPU " + std::to_string(devices[a]) +
                                                " (NCCL allows one rank per GPU; use the local communicator)");
      }
    }
    comms_.resize(ranks_, nullptr);
    GS_NCCL_CHECK(ncclCommInitAll(comms_.data(), ranks_, devices_.data()));
    for (int r = 0; r < ranks_; ++r) {
      GS_CUDA_CHECK(cudaSetDevice(devices_[r]));
      RankState& st = ranks_state_[r];
      st.comm_stream = gpu::Stream();
      st.ready = gpu::Event(false);
      st.done = gpu::Event(false);
    }
  }

  ~NcclCommunicator() override {
    for (int r = 0; r < ranks_; ++r) {
      if (!comms_[r]) continue;
      if (ranks_state_[r].aborted) continue;  // ncclCommAbort already freed it
      (void)cudaSetDevice(devices_[r]);
      (void)ncclCommDestroy(comms_[r]);
    }
  }

  int size() const override { return ranks_; }

  void set_compute_stream(int rank, cudaStream_t stream) override {
    check_rank(rank);
    ranks_state_[rank].compute = stream;
  }

  void all_reduce_sum(int rank, float* buf, size_t count) override {
    all_reduce_sum_start(rank, buf, count);
    all_reduce_wait(rank);
  }

  void all_reduce_sum(int rank, double* buf, size_t count) override {
    RankState& st = enter(rank);
    GS_NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclDouble, ncclSum, comms_[rank], st.comm_stream.get()));
    st.pending = true;
    st.stats.bytes_sent += ring_all_reduce_bytes(ranks_, count, sizeof(double));
    st.stats.calls += 1;
    all_reduce_wait(rank);
  }

  void all_gather(int rank, float* out, const float* in, size_t count) override {
    RankState& st = enter(rank);
    GS_NCCL_CHECK(ncclAllGather(in, out, count, ncclFloat, comms_[rank], st.comm_stream.get()));
    st.pending = true;
    st.stats.bytes_sent += static_cast<uint64_t>(ranks_ - 1) * count * sizeof(float);
    st.stats.calls += 1;
    all_reduce_wait(rank);
  }

  void reduce_scatter_sum(int rank, float* out, const float* in, size_t count) override {
    RankState& st = enter(rank);
    GS_NCCL_CHECK(ncclReduceScatter(in, out, count, ncclFloat, ncclSum, comms_[rank], st.comm_stream.get()));
    st.pending = true;
    st.stats.bytes_sent += static_cast<uint64_t>(ranks_ - 1) * count * sizeof(float);
    st.stats.calls += 1;
    all_reduce_wait(rank);
  }

  void broadcast(int rank, float* buf, size_t count, int root) override {
    GS_EXPECT(root >= 0 && root < ranks_, "broadcast root " + std::to_string(root) + " out of range");
    RankState& st = enter(rank);
    GS_NCCL_CHECK(ncclBroadcast(buf, buf, count, ncclFloat, root, comms_[rank], st.comm_stream.get()));
    st.pending = true;
    st.stats.bytes_sent += rank == root ? static_cast<uint64_t>(count) * sizeof(float) : 0;
    st.stats.calls += 1;
    all_reduce_wait(rank);
  }

  void barrier(int rank) override {
    check_rank(rank);
    ranks_state_[rank].stats.wait_s += barrier_.arrive_and_wait();
  }

  void all_reduce_sum_start(int rank, float* buf, size_t count) override {
    RankState& st = enter(rank);
    GS_NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comms_[rank], st.comm_stream.get()));
    st.pending = true;
    st.stats.bytes_sent += ring_all_reduce_bytes(ranks_, count, sizeof(float));
    st.stats.calls += 1;
  }

  void all_reduce_wait(int rank) override {
    check_rank(rank);
    RankState& st = ranks_state_[rank];
    if (!st.pending) return;
    GS_CUDA_CHECK(cudaSetDevice(devices_[rank]));
    st.done.record(st.comm_stream.get());
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t q = cudaEventQuery(st.done.get());
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) {
        abort_rank(rank);
        gpu::check_cuda(q, "cudaEventQuery(all-reduce done)", __FILE__, __LINE__);
      }
      ncclResult_t async = ncclSuccess;
      GS_NCCL_CHECK(ncclCommGetAsyncError(comms_[rank], &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        abort_rank(rank);
        check_nccl(async, "NCCL asynchronous error", __FILE__, __LINE__);
      }
      if (aborted_.load(std::memory_order_acquire)) {
        abort_rank(rank);
        throw Aborted();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    st.stats.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    st.pending = false;
    // Later compute work is ordered after the collectives (already complete: this is only an ordering edge).
    GS_CUDA_CHECK(cudaStreamWaitEvent(st.compute, st.done.get(), 0));
  }

  void group_begin(int rank) override {
    check_rank(rank);
    GS_NCCL_CHECK(ncclGroupStart());
  }
  void group_end(int rank) override {
    check_rank(rank);
    GS_NCCL_CHECK(ncclGroupEnd());
  }

  void abort() override {
    aborted_.store(true, std::memory_order_release);
    barrier_.abort();
  }

  CommStats take_stats(int rank) override {
    check_rank(rank);
    CommStats out = ranks_state_[rank].stats;
    ranks_state_[rank].stats = CommStats{};
    return out;
  }

 private:
  struct alignas(64) RankState {
    cudaStream_t compute = nullptr;
    gpu::Stream comm_stream;
    gpu::Event ready{false};
    gpu::Event done{false};
    bool pending = false;
    bool aborted = false;
    CommStats stats;
  };

  void check_rank(int rank) const {
    GS_EXPECT(rank >= 0 && rank < ranks_,
              "rank " + std::to_string(rank) + " out of range for " + std::to_string(ranks_) + " ranks");
  }

  // Makes the rank's device current and its communication stream wait for the compute stream's queued work.
  RankState& enter(int rank) {
    check_rank(rank);
    if (aborted_.load(std::memory_order_acquire)) throw Aborted();
    RankState& st = ranks_state_[rank];
    GS_CUDA_CHECK(cudaSetDevice(devices_[rank]));
    st.ready.record(st.compute);
    GS_CUDA_CHECK(cudaStreamWaitEvent(st.comm_stream.get(), st.ready.get(), 0));
    return st;
  }

  // Aborts this rank's NCCL communicator (unblocks its kernels) and every other rank.
  void abort_rank(int rank) {
    RankState& st = ranks_state_[rank];
    if (!st.aborted) {
      st.aborted = true;
      (void)ncclCommAbort(comms_[rank]);
    }
    aborted_.store(true, std::memory_order_release);
    barrier_.abort();
  }

  const int ranks_;
  std::vector<int> devices_;
  Barrier barrier_;
  std::vector<RankState> ranks_state_;
  std::vector<ncclComm_t> comms_;
  std::atomic<bool> aborted_{false};
};

#endif  // GRADSWEEP_HAVE_NCCL

}  // namespace

std::unique_ptr<GpuCommunicator> make_local_communicator(int ranks, int device) {
  return std::make_unique<LocalCommunicator>(ranks, device);
}

std::unique_ptr<GpuCommunicator> make_nccl_communicator(const std::vector<int>& devices) {
#if defined(GRADSWEEP_HAVE_NCCL)
  return std::make_unique<NcclCommunicator>(devices);
#else
  (void)devices;
  throw Error("the nccl communicator needs NCCL, and this build has none (GRADSWEEP_HAVE_NCCL unset)");
#endif
}

bool nccl_compiled() {
#if defined(GRADSWEEP_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

}  // namespace gs
