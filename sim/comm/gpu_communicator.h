// GPU communicators: `local` (several rank threads on one GPU, reduced by kernels in rank order) and `nccl` (one
// rank per GPU through NCCL). Buffers passed to them are DEVICE pointers. Built only with the CUDA side
// (GRADSWEEP_HAVE_CUDA); a new GPU backend implements GpuCommunicator and gets a factory here.
#pragma once
#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "sim/comm/communicator.h"

namespace gs {

// A Communicator over device buffers, with bucketed asynchronous all-reduces. Ordering contract: a collective reads a
// buffer after the work queued so far on the rank's compute stream (set_compute_stream; the legacy default stream
// when none is set), and work queued on that stream after the collective returns sees its result. Errors (CUDA,
// NCCL, a rank calling a different collective) throw gs::Error; abort() makes every rank waiting in a collective throw
// Aborted (NCCL communicators are aborted with ncclCommAbort), so a run never hangs.
class GpuCommunicator : public Communicator {
 public:
  // The stream the rank's compute kernels run on (set once per rank, before its first collective).
  virtual void set_compute_stream(int rank, cudaStream_t stream) = 0;
  // all_reduce_sum_start (Communicator): on a communication stream, after the compute stream's work so far; the
  // caller does not touch the buffer until all_reduce_wait, which polls (so abort() and NCCL's asynchronous errors end
  // the wait) and orders the compute stream after the reductions. group_begin/end: ncclGroupStart/End (no-ops for
  // local).
  bool starts_asynchronously() const override { return true; }
};

// `local`: `ranks` rank threads share GPU `device`. Every synchronous collective meets at a host barrier; rank 0 then
// reduces all ranks' buffers with one kernel (sum_in_rank_order: ranks 0..N-1 in order, the host communicator's bits)
// on the communicator's stream, and all ranks meet again. all_reduce_sum_start records an event on the rank's compute
// stream and returns; once every rank has started bucket b, the same kernel reduces it on the communicator's stream
// after all ranks' events (buckets in start order), so a bucket's reduction overlaps the backward of earlier layers
// and the sums are bit-identical to all_reduce_sum's. Starting a bucket that another rank meets with a synchronous
// collective (or a different count) throws on every rank.
// deadline_s (both factories): every wait inside a collective (the host barriers, the wait for other ranks' buckets,
// the polled GPU completion) ends after that many seconds with a DeadlineExceeded error and aborts every rank, so a
// hang ends the run as failed (wait_deadline_s in sim/core/barrier.h: training.run_timeout_s, or 600 s); 0: none.
std::unique_ptr<GpuCommunicator> make_local_communicator(int ranks, int device,
                                                         double deadline_s = kDefaultWaitDeadlineS);

// `nccl`: rank r on GPU devices[r] (distinct devices: NCCL forbids two ranks of one communicator on one GPU). One
// NCCL communicator per rank, created once here (ncclCommInitAll) and destroyed with this object. Sums are NCCL's
// (ring/tree order): equal to the host's for 1 or 2 ranks, within rounding otherwise. Throws gs::Error when built
// without NCCL or when NCCL fails.
std::unique_ptr<GpuCommunicator> make_nccl_communicator(const std::vector<int>& devices,
                                                        double deadline_s = kDefaultWaitDeadlineS);

// True when this build links NCCL.
bool nccl_compiled();

}  // namespace gs
