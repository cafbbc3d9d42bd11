// The GPU communicators of gpu_communicator.h: LocalCommunicator (rank threads sharing one GPU; rank 0 reduces with
// kernels between two host barriers; buckets started asynchronously are reduced on the communicator's stream once
// every rank's compute stream has produced them) and NcclCommunicator (one NCCL communicator per rank, polled waits so
// aborts and asynchronous NCCL errors end every wait). A new collective is added to both classes and to Communicator.
#include "sim/comm/gpu_communicator.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(GRADSWEEP_HAVE_NCCL)
#include <nccl.h>
#endif

#include "kernels/cuda_kernels.h"
#include "sim/comm/collective_op.h"
#include "sim/core/barrier.h"

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
  LocalCommunicator(int ranks, int device, double deadline_s)
      : ranks_(ranks), device_(device), deadline_s_(deadline_s), barrier_(ranks, deadline_s), slots_(ranks) {
    GS_EXPECT(ranks >= 1, "a communicator needs at least one rank, got " + std::to_string(ranks));
    GS_CUDA_CHECK(cudaSetDevice(device_));
    stream_ = gpu::Stream();
    ptrs_ = gpu::DeviceBuffer<void*>(2 * static_cast<size_t>(ranks), "local communicator pointer table");
    staging_ = gpu::PinnedBuffer<void*>(2 * static_cast<size_t>(ranks), "local communicator pointer staging");
    const size_t table = 2 * static_cast<size_t>(ranks);
    bucket_ptrs_ = gpu::DeviceBuffer<void*>(kBucketTables * table, "local communicator bucket pointer tables");
    bucket_staging_ = gpu::PinnedBuffer<void*>(kBucketTables * table, "local communicator bucket pointer staging");
    for (size_t t = 0; t < kBucketTables; ++t) table_uploaded_.emplace_back(false);
    for (int r = 0; r < ranks; ++r) done_.emplace_back(false);
    ready_.resize(static_cast<size_t>(ranks));
    in_flight_.assign(static_cast<size_t>(ranks), 0);
    posted_.assign(static_cast<size_t>(ranks), 0);
    in_sync_.assign(static_cast<size_t>(ranks), false);
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

  // Records "bucket final" on the rank's compute stream and posts the bucket under the mutex; the rank that posts it
  // last enqueues its reduction on the communicator's stream (after every rank's event, in bucket order: bucket s is
  // complete only once every rank posted s, and each rank posts in order, so s - 1 was complete and enqueued before).
  // The rank returns without waiting for the other ranks or the GPU.
  void all_reduce_sum_start(int rank, float* buf, size_t count) override {
    check_rank(rank);
    GS_EXPECT(count == 0 || buf != nullptr, "all_reduce_sum_start: null buffer");
    GS_CUDA_CHECK(cudaSetDevice(device_));
    Slot& slot = slots_[rank];
    std::vector<gpu::Event>& events = ready_[static_cast<size_t>(rank)];
    const size_t j = in_flight_[static_cast<size_t>(rank)]++;
    if (j == events.size()) events.emplace_back(false);  // reused after all_reduce_wait: every wait on it is enqueued
    events[j].record(slot.stream);                        // the legacy default stream when none was set
    slot.stats.bytes_sent += ring_all_reduce_bytes(ranks_, count, sizeof(float));
    slot.stats.calls += 1;
    std::unique_lock<std::mutex> lock(mu_);
    throw_if_failed_locked();
    for (int r = 0; r < ranks_; ++r)
      if (r != rank && in_sync_[static_cast<size_t>(r)])
        fail_locked(lock, "rank " + std::to_string(rank) + " started an asynchronous all-reduce while rank " +
                              std::to_string(r) + " called a synchronous collective");
    const uint64_t seq = posted_[static_cast<size_t>(rank)]++;
    PendingBucket& p = pending_[seq];
    if (p.bufs.empty()) {
      p.bufs.assign(static_cast<size_t>(ranks_), nullptr);
      p.ready.assign(static_cast<size_t>(ranks_), nullptr);
      p.counts.assign(static_cast<size_t>(ranks_), 0);
    }
    p.bufs[static_cast<size_t>(rank)] = buf;
    p.ready[static_cast<size_t>(rank)] = events[j].get();
    p.counts[static_cast<size_t>(rank)] = count;
    if (++p.arrived < ranks_) return;
    for (int r = 0; r < ranks_; ++r)
      if (p.counts[static_cast<size_t>(r)] != count)
        fail_locked(lock, "same collective on every rank: bucket " + std::to_string(seq) + " has count " +
                              std::to_string(count) + " on rank " + std::to_string(rank) + " but " +
                              std::to_string(p.counts[static_cast<size_t>(r)]) + " on rank " + std::to_string(r));
    GS_EXPECT(seq == enqueued_, "local communicator: buckets complete in order");
    try {
      enqueue_bucket_locked(p, count);
    } catch (const std::exception& e) {
      fail_locked(lock, e.what());
    }
    pending_.erase(seq);
    ++enqueued_;
    lock.unlock();
    cv_.notify_all();
  }

  // Waits (host) until every rank posted the buckets this rank started, orders the compute stream after their
  // reductions and returns once they are done. wait_s counts the time waiting for the other ranks' buckets (this
  // rank's own compute stream is synchronized first, as before a barrier).
  void all_reduce_wait(int rank) override {
    check_rank(rank);
    if (in_flight_[static_cast<size_t>(rank)] == 0) return;
    GS_CUDA_CHECK(cudaSetDevice(device_));
    Slot& slot = slots_[rank];
    if (slot.stream_set) {
      GS_CUDA_CHECK(cudaStreamSynchronize(slot.stream));
    } else {
      GS_CUDA_CHECK(cudaDeviceSynchronize());
    }
    const auto t0 = std::chrono::steady_clock::now();
    const WaitDeadline deadline(deadline_s_);
    gpu::Event& done = done_[static_cast<size_t>(rank)];
    {
      std::unique_lock<std::mutex> lock(mu_);
      try {
        deadline.wait(
            cv_, lock,
            [&] {
              if (aborted_ || enqueued_ >= posted_[static_cast<size_t>(rank)]) return true;
              for (int r = 0; r < ranks_; ++r)
                if (in_sync_[static_cast<size_t>(r)]) return true;  // a rank went to a synchronous collective instead
              return false;
            },
            "local communicator: rank " + std::to_string(rank) + "'s wait for the other ranks to start its " +
                std::to_string(posted_[static_cast<size_t>(rank)] - enqueued_) + " asynchronous all-reduce(s)");
      } catch (const DeadlineExceeded& e) {
        fail_locked(lock, e.what());
      }
      throw_if_failed_locked();
      if (enqueued_ < posted_[static_cast<size_t>(rank)])
        fail_locked(lock, "rank " + std::to_string(rank) + " waits for asynchronous all-reduces that another rank "
                          "did not start (it called a synchronous collective)");
      done.record(stream_.get());  // after every reduction enqueued so far, this rank's included
    }
    slot.stats.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    GS_CUDA_CHECK(cudaStreamWaitEvent(slot.stream, done.get(), 0));
    // The reductions themselves, polled under the same deadline (a GPU that stopped making progress ends the wait).
    for (;;) {
      const cudaError_t q = cudaEventQuery(done.get());
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) {
        abort();
        gpu::check_cuda(q, "cudaEventQuery(local all-reduce done)", __FILE__, __LINE__);
      }
      if (deadline.expired()) {
        std::unique_lock<std::mutex> lock(mu_);
        fail_locked(lock, "local communicator: rank " + std::to_string(rank) +
                              "'s asynchronous all-reduces on the GPU did not complete within the wait deadline (" +
                              std::to_string(deadline_s_) + " s)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    in_flight_[static_cast<size_t>(rank)] = 0;
  }

  void abort() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      aborted_ = true;
    }
    cv_.notify_all();
    barrier_.abort();
  }

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
  // Buckets this rank started asynchronously are waited for first; a rank that calls a synchronous collective while
  // another started a bucket this rank never started makes both throw (instead of each waiting for the other).
  template <class Work>
  void run(int rank, Op op, size_t count, int root, const void* in, void* out, Work&& work) {
    check_rank(rank);
    GS_EXPECT(count == 0 || (in != nullptr && out != nullptr), std::string(collective_op_name(op)) + ": null buffer");
    all_reduce_wait(rank);
    {
      std::unique_lock<std::mutex> lock(mu_);
      throw_if_failed_locked();
      for (int r = 0; r < ranks_; ++r)
        if (posted_[static_cast<size_t>(r)] > posted_[static_cast<size_t>(rank)])
          fail_locked(lock, "rank " + std::to_string(rank) + " called " + collective_op_name(op) + " while rank " +
                                std::to_string(r) + " started an asynchronous all-reduce");
      in_sync_[static_cast<size_t>(rank)] = true;
    }
    cv_.notify_all();
    SyncFlag clear{*this, rank};  // cleared once every rank reached this collective (or on a throw)
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
    clear.now();
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

  // Clears in_sync_[rank] under the mutex when now() is called or at scope exit.
  struct SyncFlag {
    LocalCommunicator& c;
    int rank;
    bool set = true;
    void now() {
      if (!set) return;
      set = false;
      std::lock_guard<std::mutex> lock(c.mu_);
      c.in_sync_[static_cast<size_t>(rank)] = false;
    }
    ~SyncFlag() { now(); }
  };

  // One bucket's posts: every rank's buffer, its "bucket final" event and count.
  struct PendingBucket {
    std::vector<float*> bufs;
    std::vector<cudaEvent_t> ready;
    std::vector<size_t> counts;
    int arrived = 0;
  };

  // Under mu_: throws Aborted after abort(), gs::Error with the recorded failure after a mismatch or a failed enqueue.
  void throw_if_failed_locked() const {
    if (!failure_.empty()) throw Error("local communicator: " + failure_);
    if (aborted_) throw Aborted();
  }
  // Under mu_: records the failure, wakes every waiter (they throw it), aborts the barrier and throws it here.
  [[noreturn]] void fail_locked(std::unique_lock<std::mutex>& lock, const std::string& why) {
    if (failure_.empty()) failure_ = why;
    aborted_ = true;
    const std::string msg = failure_;
    lock.unlock();
    cv_.notify_all();
    barrier_.abort();
    throw Error("local communicator: " + msg);
  }

  // Under mu_: the communicator's stream waits for every rank's "bucket final" event, uploads the bucket's pointer
  // table (one of kBucketTables, reused once its previous upload has run) and sums in rank order into every rank's
  // buffer (the same kernel and order as all_reduce_sum: bit-identical results).
  void enqueue_bucket_locked(const PendingBucket& p, size_t count) {
    cudaStream_t s = stream_.get();
    for (cudaEvent_t e : p.ready) GS_CUDA_CHECK(cudaStreamWaitEvent(s, e, 0));
    if (count == 0) return;
    const size_t t = next_table_++ % kBucketTables;
    const size_t n = 2 * static_cast<size_t>(ranks_);
    table_uploaded_[t].synchronize();  // the staging's previous upload has run (never recorded: returns at once)
    void** staging = bucket_staging_.get() + t * n;
    for (int r = 0; r < ranks_; ++r) {
      staging[r] = p.bufs[static_cast<size_t>(r)];
      staging[ranks_ + r] = p.bufs[static_cast<size_t>(r)];
    }
    void** table = bucket_ptrs_.get() + t * n;
    GS_CUDA_CHECK(cudaMemcpyAsync(table, staging, n * sizeof(void*), cudaMemcpyHostToDevice, s));
    table_uploaded_[t].record(s);
    gpu::sum_in_rank_order(reinterpret_cast<float* const*>(table + ranks_), reinterpret_cast<const float* const*>(table),
                           ranks_, count, s);
  }

  static constexpr size_t kBucketTables = 64;

  const int ranks_;
  const int device_;
  const double deadline_s_;  // of every wait (WaitDeadline); the barrier's too
  Barrier barrier_;
  std::vector<Slot> slots_;
  gpu::Stream stream_;
  gpu::DeviceBuffer<void*> ptrs_;
  gpu::PinnedBuffer<void*> staging_;
  // Asynchronous buckets. Per rank (its own thread only): "bucket final" events of the buckets in flight, their number.
  std::vector<std::vector<gpu::Event>> ready_;
  std::vector<size_t> in_flight_;
  std::vector<gpu::Event> done_;  // per rank: recorded on stream_ after its buckets' reductions
  gpu::DeviceBuffer<void*> bucket_ptrs_;
  gpu::PinnedBuffer<void*> bucket_staging_;
  std::vector<gpu::Event> table_uploaded_;
  size_t next_table_ = 0;
  // Under mu_: the posts not yet complete (by bucket sequence number), buckets posted per rank and enqueued in all,
  // ranks inside a synchronous collective's first barrier, abort and failure.
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, PendingBucket> pending_;
  std::vector<uint64_t> posted_;
  uint64_t enqueued_ = 0;
  std::vector<bool> in_sync_;
  bool aborted_ = false;
  std::string failure_;
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
  NcclCommunicator(const std::vector<int>& devices, double deadline_s)
      : ranks_(static_cast<int>(devices.size())),
        devices_(devices),
        deadline_s_(deadline_s),
        barrier_(ranks_, deadline_s),
        ranks_state_(ranks_) {
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

  // Teardown from the thread that made the communicators (ncclCommInitAll): after an abort, or with work still
  // pending on any rank (a rank that threw between a start and its wait), every communicator not yet aborted is
  // aborted (ncclCommAbort does not wait for work whose peers may be gone; ncclCommDestroy would). Otherwise every
  // communicator is finalized inside one group (one thread manages them all, which NCCL requires to be grouped:
  // "Destroying a communicator", NCCL user guide) and then destroyed.
  ~NcclCommunicator() override {
    bool clean = !aborted_.load(std::memory_order_acquire);
    for (int r = 0; r < ranks_; ++r)
      if (ranks_state_[r].pending) clean = false;
    if (!clean) {
      abort_all();
      return;
    }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    bool finalized = ncclGroupStart() == ncclSuccess;
    for (int r = 0; r < ranks_ && finalized; ++r) {
      (void)cudaSetDevice(devices_[r]);
      finalized = ncclCommFinalize(comms_[r]) == ncclSuccess;
    }
    finalized = ncclGroupEnd() == ncclSuccess && finalized;
    if (!finalized) {  // nothing left to flush cleanly: abort instead of a destroy that could wait
      abort_all();
      return;
    }
#endif
    for (int r = 0; r < ranks_; ++r) {
      if (!comms_[r] || ranks_state_[r].aborted.load()) continue;
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
    const WaitDeadline deadline(deadline_s_);
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
      if (deadline.expired()) {
        abort_rank(rank);
        deadline.fail("nccl: rank " + std::to_string(rank) + "'s collectives on GPU " +
                      std::to_string(devices_[rank]));
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

  // Callable from any thread (the world's abort hook runs on the failing rank's): aborts every rank's NCCL
  // communicator not yet aborted, which ends NCCL kernels still waiting for peers, so no rank's later cudaFree or
  // synchronization waits for them, and wakes every rank waiting in a collective (they throw Aborted).
  void abort() override { abort_all(); }

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
    std::atomic<bool> aborted{false};  // ncclCommAbort called (exactly once: exchange), from any thread
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

  // Called by rank `rank` on an error in its wait: aborts every communicator (its own first) and every rank.
  void abort_rank(int rank) {
    abort_one(rank);
    abort_all();
  }
  void abort_one(int r) {
    if (comms_[r] && !ranks_state_[r].aborted.exchange(true)) {
      (void)cudaSetDevice(devices_[r]);
      (void)ncclCommAbort(comms_[r]);
    }
  }
  void abort_all() {
    aborted_.store(true, std::memory_order_release);
    barrier_.abort();
    int device = -1;
    const bool restore = cudaGetDevice(&device) == cudaSuccess;
    for (int r = 0; r < ranks_; ++r) abort_one(r);
    if (restore) (void)cudaSetDevice(device);  // the calling rank thread's device stays current
  }

  const int ranks_;
  std::vector<int> devices_;
  const double deadline_s_;  // of every wait (WaitDeadline); the barrier's too
  Barrier barrier_;
  std::vector<RankState> ranks_state_;
  std::vector<ncclComm_t> comms_;
  std::atomic<bool> aborted_{false};
};

#endif  // GRADSWEEP_HAVE_NCCL

}  // namespace

std::unique_ptr<GpuCommunicator> make_local_communicator(int ranks, int device, double deadline_s) {
  return std::make_unique<LocalCommunicator>(ranks, device, deadline_s);
}

std::unique_ptr<GpuCommunicator> make_nccl_communicator(const std::vector<int>& devices, double deadline_s) {
#if defined(GRADSWEEP_HAVE_NCCL)
  return std::make_unique<NcclCommunicator>(devices, deadline_s);
#else
  (void)devices;
  (void)deadline_s;
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
