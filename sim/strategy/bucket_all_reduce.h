// The bucketed gradient all-reduce of the lock-step strategies (all-reduce, local SGD's warm-up, 1-bit Adam's
// warm-up): every bucket's sum in place, timed as communication, then this rank's wait moved out of it and its wire
// bytes counted.
#pragma once
#include <vector>

#include "kernels/nvtx.h"
#include "sim/comm/communicator.h"
#include "sim/core/clock.h"
#include "sim/strategy/strategy.h"

namespace gs {

// grad: the model's flat gradient (floats), summed over the ranks bucket by bucket (Bucket's [begin, end) elements).
inline void all_reduce_buckets(Communicator& comm, int rank, float* grad, const std::vector<Bucket>& buckets,
                               PhaseClock& clock) {
  {
    PhaseTimer t(clock, Phase::kCommunicate);
    for (const Bucket& b : buckets) {
      GS_NVTX_RANGE_BYTES(kCommunicate, (b.end - b.begin) * sizeof(float));
      comm.all_reduce_sum(rank, grad + b.begin, b.end - b.begin);
    }
  }
  CommStats st = comm.take_stats(rank);
  clock.move(Phase::kCommunicate, Phase::kWait, st.wait_s);
  clock.add_bytes(st.bytes_sent);
}

}  // namespace gs
