// NCCL's hierarchical collectives across nodes (ncclTopoTuneModel with nNodes >
// 1, NCCL 2.19-2.20 src/graph/tuning.cc) priced per level with the alpha-beta
// model: nodes of g GPUs on NVLink (the profile's fabric), joined by the NICs
// of the profile's "internode" section. n = nodes x g ranks.
//   bandwidth: the slower level, min(intra = links x per-link bw, inter = NICs
//   x line rate / 8 x achievable fraction);
//     ring algbw = bus x n / nsteps (nsteps = 2(n-1) all-reduce, n-1
//     all-gather/reduce-scatter), with NCCL's protocol refinements (LL bus/4
//     capped at llMaxBw, LL128 0.92); tree (all-reduce only) algbw = 0.92 bus /
//     2 (LL bus/3.8, LL128 7/9 bus);
//   latency: ring baseLat + (nsteps - nInter) x intraLat + nInter x interLat,
//   nInter = 2(nodes-1) all-reduce,
//     nodes-1 otherwise; tree baseLat + 2 ((g-1) intraLat + log2(nodes)
//     interLat) (NCCL's double binary tree across nodes, a chain inside each);
//     interLat = hwLat[NET] + internode.latency_us;
//   time = launch_us[op] + latency_scale x latency + bytes / algbw (the
//   profile's fitted one-node terms).
// Not modeled: NVLS across nodes (NVLSTree), CollNet / SHARP in the switches,
// NCCL's netOverhead per inter-node step, PXN, rail-optimised vs fat-tree
// differences and congestion between jobs.
#pragma once
#include <optional>

#include "sim/cost/collective_model.h"
#include "sim/cost/hardware_profile.h"

namespace gs {

class HierarchicalModel {
public:
  // nodes >= 1 nodes of gpus_per_node ranks each (nodes 1: CollectiveModel's
  // one-node model is the better price). Throws gs::Error when nodes > 1 and
  // the profile has no inter-node level.
  HierarchicalModel(const HardwareProfile &hw, int nodes, int gpus_per_node);
  // One call with one algorithm and protocol; time_s < 0 where NCCL has no such
  // combination across nodes.
  CollectiveCost cost(CollectiveKind kind, double bytes, NcclAlgo algo,
                      NcclProto proto) const;
  // The fastest algorithm and protocol (as NCCL's tuner picks), or the forced
  // algorithm's fastest protocol.
  CollectiveCost best(CollectiveKind kind, double bytes,
                      std::optional<NcclAlgo> forced = std::nullopt) const;
  // Bus bandwidth (GB/s) before the algorithm's ratio and NCCL's latency (us)
  // of one combination; 0 bandwidth when unavailable.
  double bus_GBps(CollectiveKind kind, NcclAlgo algo, NcclProto proto) const;
  double latency_us(CollectiveKind kind, NcclAlgo algo, NcclProto proto) const;
  int ranks() const { return nodes_ * gpn_; }
  int nodes() const { return nodes_; }

private:
  const HardwareProfile *hw_;
  int nodes_;
  int gpn_;
};

} // namespace gs
