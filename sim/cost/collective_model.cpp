// NCCL's tuning model for one node (ncclTopoTuneModel, nNodes = 1), written from its constants in the hardware
// profile. Bus bandwidth before refinements = NCCL's graph bandwidth: links x per-link bandwidth for ring and tree
// (the channel search fills the links), n/(n+1) of it for NVLS (the head GPU of each of n channels carries twice).
#include "sim/cost/collective_model.h"

#include <algorithm>
#include <limits>

namespace gs {

CollectiveModel::CollectiveModel(const HardwareProfile& hw, int ranks)
    : ranks_(ranks),
      p2p_latency_s_(hw.p2p_latency_us * 1e-6),
      p2p_bw_Bps_(hw.nccl_bw_GBps() * 1e9) {
  if (ranks <= 1) return;
  const double n = ranks;
  const double total = hw.nccl_bw_GBps();
  const double ch = hw.channels;
  for (size_t c = 0; c < kCollectiveKindCount; ++c) {
    const auto kind = static_cast<CollectiveKind>(c);
    const bool allreduce = kind == CollectiveKind::kAllReduce;
    const double nsteps = allreduce ? 2.0 * (n - 1) : (kind == CollectiveKind::kBroadcast ? n : n - 1);
    for (size_t a = 0; a < kNcclAlgoCount; ++a) {
      const auto algo = static_cast<NcclAlgo>(a);
      if (kind == CollectiveKind::kBroadcast && algo != NcclAlgo::kRing) continue;
      if (algo == NcclAlgo::kTree && !allreduce) continue;
      if (algo == NcclAlgo::kNvls && !hw.nvls) continue;
      for (size_t p = 0; p < kNcclProtoCount; ++p) {
        const auto proto = static_cast<NcclProto>(p);
        if (algo == NcclAlgo::kNvls && proto != NcclProto::kSimple) continue;
        if (proto == NcclProto::kLL128 && !hw.ll128) continue;
        double bus = algo == NcclAlgo::kNvls ? total * n / (n + 1.0) : total;
        // NCCL's refinements (tuning.cc), single node: ppn = n >= 2.
        if (algo == NcclAlgo::kRing && proto == NcclProto::kLL)
          bus = std::min(hw.ll_max_bw_GBps, bus * (allreduce ? 1.0 / 4.0 : 1.0 / 3.0));
        if (algo == NcclAlgo::kRing && proto == NcclProto::kLL128)
          bus = std::min(bus * 0.92, ch * hw.per_channel_max_ring_ll128_GBps);
        if (algo == NcclAlgo::kTree) bus = std::min(bus * 0.92, ch * hw.per_channel_max_tree_GBps);
        if (algo == NcclAlgo::kTree && proto == NcclProto::kLL) bus = std::min(bus / 3.8, hw.ll_max_bw_GBps);
        if (algo == NcclAlgo::kTree && proto == NcclProto::kLL128)
          bus = std::min(bus * 7.0 / 9.0, ch * hw.per_channel_max_tree_ll128_GBps);
        // Bus bandwidth to algorithm bandwidth: ring n/nsteps, NVLS 5/6, tree 1/2.
        const double ratio = algo == NcclAlgo::kRing ? n / nsteps : algo == NcclAlgo::kNvls ? 5.0 / 6.0 : 0.5;
        bw_[c][a][p] = bus * ratio;
        const double hop = hw.hw_lat_us[a][p];
        double lat = hw.base_lat_us[a][p];
        if (algo == NcclAlgo::kRing) {
          lat += kind == CollectiveKind::kBroadcast ? hop : nsteps * hop;  // broadcast: pipelined, one hop
        } else if (algo == NcclAlgo::kTree) {
          lat += 2.0 * (n - 1) * hop;
        } else {
          lat = hop;  // NVLS: the switch's latency alone
        }
        lat_[c][a][p] = lat;
      }
    }
  }
}

double CollectiveModel::busbw_factor(CollectiveKind kind, int ranks) {
  const double n = ranks;
  switch (kind) {
    case CollectiveKind::kAllReduce: return 2.0 * (n - 1) / n;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter: return (n - 1) / n;
    default: return 1.0;
  }
}

CollectiveCost CollectiveModel::cost(CollectiveKind kind, double bytes, NcclAlgo algo, NcclProto proto) const {
  CollectiveCost c;
  c.algo = algo;
  c.proto = proto;
  if (ranks_ <= 1) return c;
  const double bw = algbw_GBps(kind, algo, proto);
  if (bw <= 0) {
    c.time_s = -1.0;
    return c;
  }
  // ncclTopoGetAlgoTime: time_us = lat + nBytes / (1000 * bw_GBps).
  c.time_s = (latency_us(kind, algo, proto) + bytes / (1000.0 * bw)) * 1e-6;
  c.algbw_GBps = bytes / c.time_s / 1e9;
  c.busbw_GBps = c.algbw_GBps * busbw_factor(kind, ranks_);
  return c;
}

CollectiveCost CollectiveModel::best(CollectiveKind kind, double bytes) const {
  CollectiveCost out;
  if (ranks_ <= 1) return out;
  out.time_s = std::numeric_limits<double>::infinity();
  for (size_t a = 0; a < kNcclAlgoCount; ++a)
    for (size_t p = 0; p < kNcclProtoCount; ++p) {
      CollectiveCost c = cost(kind, bytes, static_cast<NcclAlgo>(a), static_cast<NcclProto>(p));
      if (c.time_s >= 0 && c.time_s < out.time_s) out = c;
    }
  return out;
}

double CollectiveModel::p2p_s(double bytes) const {
  if (bytes <= 0) return 0.0;
  return p2p_latency_s_ + bytes / p2p_bw_Bps_;
}

}  // namespace gs
