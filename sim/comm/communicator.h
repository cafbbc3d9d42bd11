// Communicator: collectives between the ranks of one World. One instance per run, shared by all rank threads; every
// rank calls the same collective with the same sizes in the same order (as with NCCL). Backends: host (threads and
// shared memory, this file's HostCommunicator), later nccl and local (N ranks on one GPU).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "sim/core/barrier.h"

namespace gs {

// Per-rank traffic accounting, in bytes a ring implementation would send (nccl-tests conventions):
// all-reduce 2(n-1)/n * size, reduce-scatter and all-gather (n-1)/n * total size, broadcast size (non-root: 0).
struct CommStats {
  uint64_t bytes_sent = 0;      // bytes this rank would put on the wire
  double wait_s = 0.0;          // seconds spent waiting for other ranks inside collectives
  uint64_t calls = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int size() const = 0;
  // In-place sum over ranks: on return buf[0..count) of every rank holds sum_r buf_r, summed in rank order
  // 0,1,...,N-1 for every element (bit-reproducible; the same bits on every rank). count may be 0.
  virtual void all_reduce_sum(int rank, float* buf, size_t count) = 0;
  // Same for doubles (small control values such as sample counts and losses).
  virtual void all_reduce_sum(int rank, double* buf, size_t count) = 0;
  // out[r*count .. (r+1)*count) = in of rank r, on every rank. out has size()*count elements.
  virtual void all_gather(int rank, float* out, const float* in, size_t count) = 0;
  // out[0..count) of rank r = sum over ranks q (in order) of in_q[r*count .. (r+1)*count). in has size()*count.
  virtual void reduce_scatter_sum(int rank, float* out, const float* in, size_t count) = 0;
  // buf of every rank = buf of root.
  virtual void broadcast(int rank, float* buf, size_t count, int root) = 0;
  // Blocks until every rank arrives.
  virtual void barrier(int rank) = 0;
  // Bucketed asynchronous all-reduce (a device-resident strategy starts buckets as backward finishes them): starts the
  // in-place sum of buf[0..count) and returns; every rank starts the same buckets in the same order and touches none
  // of them until all_reduce_wait, which returns once every bucket this rank started is reduced. group_begin/end
  // bracket starts that go out together (ncclGroupStart/End). The host's: the synchronous all_reduce_sum at the
  // start (the same sums), nothing to wait for. The GPU communicators (gpu_communicator.h) start them on a
  // communication stream.
  virtual void all_reduce_sum_start(int rank, float* buf, size_t count) { all_reduce_sum(rank, buf, count); }
  virtual void all_reduce_wait(int rank) { (void)rank; }
  virtual void group_begin(int rank) { (void)rank; }
  virtual void group_end(int rank) { (void)rank; }
  // True when all_reduce_sum_start returns before the sum is done (device communicators): starting a bucket as
  // backward finishes it then overlaps them. False on the host, where a start blocks the rank until every rank starts.
  virtual bool starts_asynchronously() const { return false; }
  // Wakes every rank blocked in a collective; they throw Aborted.
  virtual void abort() = 0;
  // This rank's counters since the last take_stats(rank); resets them.
  virtual CommStats take_stats(int rank) = 0;
};

// Host backend: ranks are threads of this process; buffers are exchanged by pointer through shared memory and every
// rank reduces its own 1/N share of the elements, reading all N inputs in rank order and writing the result to all N.
// deadline_s > 0: a barrier wait longer than that aborts every rank and throws DeadlineExceeded (the cuda backend's
// control communicator: wait_deadline_s); 0 (the host backend): no deadline.
std::unique_ptr<Communicator> make_host_communicator(int ranks, double deadline_s = 0.0);

class ProcessGroup;  // process_group.h
// Host backend across processes (mpirun): this process holds global ranks first_rank .. first_rank + local_ranks - 1
// of local_ranks x group.size(); the sums are HostCommunicator's, in the same rank order, so the bits are the same
// as one process's with as many ranks (process_communicator.cpp).
std::unique_ptr<Communicator> make_process_communicator(int local_ranks, int first_rank, ProcessGroup& group);

}  // namespace gs
