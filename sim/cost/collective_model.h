// NCCL-style collective and point-to-point costs on one node of a hardware profile. The formulas follow NCCL's own
// tuning model (src/graph/tuning.cc, ncclTopoTuneModel / ncclTopoGetAlgoTime); a new collective is one CollectiveKind
// plus its steps and nccl-tests bus-bandwidth factor here.
#pragma once
#include <array>
#include <cstddef>

#include "sim/cost/hardware_profile.h"

namespace gs {

enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kCount };
constexpr size_t kCollectiveKindCount = static_cast<size_t>(CollectiveKind::kCount);
constexpr std::array<const char*, kCollectiveKindCount> kCollectiveKindNames = {"all_reduce", "all_gather",
                                                                                "reduce_scatter", "broadcast"};

// The priced collective: time and the algorithm/protocol that gives it.
struct CollectiveCost {
  double time_s = 0.0;     // < 0: this algorithm/protocol is not available for this call
  NcclAlgo algo = NcclAlgo::kRing;
  NcclProto proto = NcclProto::kSimple;
  double algbw_GBps = 0.0;  // bytes / time_s (nccl-tests' algbw)
  double busbw_GBps = 0.0;  // algbw x busbw_factor (nccl-tests' busbw)
};

class CollectiveModel {
 public:
  // ranks: the communicator size (one rank per GPU of one node).
  CollectiveModel(const HardwareProfile& hw, int ranks);

  // nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): all-reduce 2(n-1)/n, all-gather and reduce-scatter
  // (n-1)/n, broadcast 1.
  static double busbw_factor(CollectiveKind kind, int ranks);

  // NCCL's modeled algorithm bandwidth (GB/s) and latency (us) of one algorithm/protocol; bandwidth 0 when NCCL would
  // not use that combination here (NVLS without NVLink SHARP, LL128 off PCIe, tree for non-all-reduce, ...).
  double algbw_GBps(CollectiveKind kind, NcclAlgo algo, NcclProto proto) const {
    return bw_[idx(kind)][static_cast<size_t>(algo)][static_cast<size_t>(proto)];
  }
  double latency_us(CollectiveKind kind, NcclAlgo algo, NcclProto proto) const {
    return lat_[idx(kind)][static_cast<size_t>(algo)][static_cast<size_t>(proto)];
  }
  // Time of one call moving `bytes` (NCCL's nBytes: the buffer of all-reduce and broadcast, the whole gathered output
  // of all-gather, the whole input of reduce-scatter) with one algorithm/protocol: latency + bytes / algbw
  // (ncclTopoGetAlgoTime). time_s < 0 when unavailable. One rank: 0 s.
  CollectiveCost cost(CollectiveKind kind, double bytes, NcclAlgo algo, NcclProto proto) const;
  // The lowest predicted time over every available algorithm and protocol, as NCCL chooses.
  CollectiveCost best(CollectiveKind kind, double bytes) const;
  // Point-to-point send of `bytes` to one peer (a parameter server's push or pull): p2p latency + bytes / NCCL's
  // per-GPU link bandwidth.
  double p2p_s(double bytes) const;
  int ranks() const { return ranks_; }

 private:
  static size_t idx(CollectiveKind k) { return static_cast<size_t>(k); }
  using Table = std::array<std::array<std::array<double, kNcclProtoCount>, kNcclAlgoCount>, kCollectiveKindCount>;
  int ranks_;
  double p2p_latency_s_;
  double p2p_bw_Bps_;
  Table bw_{};   // GB/s, algorithm bandwidth
  Table lat_{};  // us
};

}  // namespace gs
