// NCCL's collectives across nodes: its tuning model with nNodes > 1 (ncclTopoTuneModel and ncclTopoGetAlgoTime in
// src/graph/tuning.cc of NCCL 2.20.3, commit b6475625, the version of the profiles' constants), on the levels of a
// multi-node profile: nodes of g GPUs on NVLink (fabric), joined by the NICs of the "internode" section.
// n = nodes x g ranks; intra = links x per-link bandwidth, inter = NICs x line rate / 8 x achievable fraction.
//
// Bandwidth (bus, then algorithm bandwidth):
//   ring: min(intra, inter); LL min(llMaxBw, bus / 4), LL128 min(0.92 bus, ch x perChMaxRingLL128);
//     algbw = bus x n / nsteps (nsteps 2(n-1) all-reduce, n-1 all-gather / reduce-scatter, n broadcast);
//   tree (all-reduce): NCCL takes the tree graph's bwIntra on <= 2 nodes, which its channel search raises to at
//     most 2 x bwInter (search.cc, "increase bwIntra for trees (2 nodes or collnet)"): each node is the root of one
//     of the two trees and a leaf of the other, so a node's NICs carry every byte once each way; so
//     min(intra, 2 inter) on 2 nodes, min(intra, inter) on more; then min(0.92 bus, ch x perChMaxTree), LL
//     min(bus / 3.8, llMaxBw), LL128 min(bus x 120/128, ch x perChMaxTreeLL128); algbw = bus / 2;
//   NVLSTree (all-reduce, NVLink SHARP profiles; NcclAlgo::kNvls across nodes: NVLS inside each node, a tree of
//     the NVLS heads across nodes): min(bwIntra, nodes <= 2 ? bwInter : bwInter / 2) with the NVLS graph's
//     nCh x bwIntra = intra x k / (k+1) (k heads = min(g, NICs), each head's link carrying its data twice) and
//     nCh x bwInter = inter; algbw = 5/6 bus. NVLS itself (SHARP in the switches, CollNet) is not available
//     across nodes without a CollNet plugin, nor are tree and NVLSTree for the other collectives.
//   llMaxBw, perChMax*: the profile's node-count constants (internode.nccl: N2 for 2 nodes, N4 beyond).
// Latency, split in the part on NVLink paths and the part on the network:
//   ring: baseLat + (nsteps - nInter) x max(hwLat[NVLink], netOverhead (x3 Simple)) + nInter x interLat,
//     nInter = 2 x nodes all-reduce (2.20.3; 2(nodes-1) from 2.23.4), nodes-1 all-gather / reduce-scatter;
//     broadcast baseLat + hwLat[NET] (one hop: the pipelined chain);
//   tree: baseLat + 2 ((g-1) hwLat[NVLink] + log2i(nodes) interLat);
//   NVLSTree: hwLat[NVLink][NVLS] + 2 log2i(nodes) interLat;
//   interLat = hwLat[NET] + latencyInter (twice for Simple: the flush); log2i is NCCL's floor(log2).
//   The NVLink part is baseLat and the NVLink hops (for a ring step, hwLat[NVLink] of max(hwLat, netOverhead)); the
//   network part the rest.
// NCCL's time (ncclTopoGetAlgoTime): latency + bytes / algbw, the tree's bandwidth x treeCorrectionFactor[proto]
//   [log2i(bytes / 64)] below 512 MiB, ring Simple all-reduce's latency x 1.4 (the "plateau") from 64 B per channel
//   and rank. NCCL's tuner takes the algorithm and protocol with the lowest such time; so does best().
// The price (cost()): that time with the latency latency_scale x NVLink part + network part, and no launch_us: the
//   profile's fitted one-node terms (latency_scale x NCCL's latency + launch_us) were fitted to one node, whose
//   latencies are baseLat and NVLink hops only; the scale multiplies those terms here too, NCCL's network terms
//   are taken as NCCL has them, and a per-call launch cost fitted on one published multi-node table's small
//   messages comes out at 0 (docs/cost-model.md, "Multi-node rows"). Two terms of the profile's "internode"
//   section, fitted on one published table per interconnect (the others held out), change the price, not NCCL's
//   ranking (NCCL picks by its own constants):
//   - nvls_tree_efficiency e: NVLSTree's algbw is e x NCCL's (NCCL's model gives 2-node NVLSTree the NVLS
//     graph's full bandwidth; measured 2-node busbw is ~0.9 of it);
//   - pipeline_window_MB W: a tree or NVLSTree all-reduce in LL128 or Simple moves min(bytes, W) before its
//     intra-node and inter-node stages overlap (NCCL pipelines chunks through the levels; a message smaller than
//     what the channels hold in flight crosses them one after the other): + min(bytes, W) / algbw. LL (8-byte
//     flag-and-data lines forwarded as they arrive) and the ring (one pipeline over every rank) have none.
// Not modeled: CollNet / SHARP in the switches, PAT, NCCL's channel search itself (its speed quantization, the
// tree's NCCL_TOPO_PATTERN_TREE 0.85), the chunk sizes themselves (the window is one fitted constant), PXN,
// rail-optimised vs fat-tree placement, congestion.
#pragma once
#include <array>
#include <optional>

#include "sim/cost/collective_model.h"
#include "sim/cost/hardware_profile.h"

namespace gs {

class HierarchicalModel {
 public:
  // nodes >= 1 nodes of gpus_per_node ranks each (nodes 1: no network level; CollectiveModel's one-node model is the
  // better price there). Throws gs::Error when nodes > 1 and the profile has no inter-node level.
  HierarchicalModel(const HardwareProfile& hw, int nodes, int gpus_per_node);
  // One call with one algorithm and protocol, priced as the header says; time_s < 0 where NCCL has no such
  // combination across nodes.
  CollectiveCost cost(CollectiveKind kind, double bytes, NcclAlgo algo, NcclProto proto) const;
  // The call as NCCL runs it: the algorithm and protocol its tuner ranks first (nccl_time_us), among the forced
  // algorithm's protocols when one is given and NCCL has it for this collective, priced by cost().
  CollectiveCost best(CollectiveKind kind, double bytes, std::optional<NcclAlgo> forced = std::nullopt) const;
  // Whether NCCL has this algorithm for this collective across these nodes.
  bool available(CollectiveKind kind, NcclAlgo algo) const;
  // Bus bandwidth (GB/s) before the algorithm's ratio, algorithm bandwidth, and NCCL's latency (us) of one
  // combination: whole, its NVLink part and its network part. Bandwidth 0 when unavailable.
  double bus_GBps(CollectiveKind kind, NcclAlgo algo, NcclProto proto) const { return at(kind, algo, proto).bus; }
  double algbw_GBps(CollectiveKind kind, NcclAlgo algo, NcclProto proto) const {
    return at(kind, algo, proto).algbw;
  }
  double latency_us(CollectiveKind kind, NcclAlgo algo, NcclProto proto) const {
    return at(kind, algo, proto).nvlink_us + at(kind, algo, proto).net_us;
  }
  double nvlink_latency_us(CollectiveKind kind, NcclAlgo algo, NcclProto proto) const {
    return at(kind, algo, proto).nvlink_us;
  }
  double network_latency_us(CollectiveKind kind, NcclAlgo algo, NcclProto proto) const {
    return at(kind, algo, proto).net_us;
  }
  // ncclTopoGetAlgoTime (us) with NCCL's own latency: its tuner's ranking. < 0 when unavailable.
  double nccl_time_us(CollectiveKind kind, double bytes, NcclAlgo algo, NcclProto proto) const;
  int ranks() const { return nodes_ * gpn_; }
  int nodes() const { return nodes_; }

 private:
  struct Terms {
    double bus = 0.0, algbw = 0.0;        // GB/s
    double nvlink_us = 0.0, net_us = 0.0;  // latency parts
  };
  const Terms& at(CollectiveKind kind, NcclAlgo algo, NcclProto proto) const {
    return terms_[static_cast<size_t>(kind)][static_cast<size_t>(algo)][static_cast<size_t>(proto)];
  }
  // lat (us) + bytes / (algbw x bw_scale) with NCCL's tree correction factor and ring plateau (ncclTopoGetAlgoTime).
  double time_us(CollectiveKind kind, double bytes, NcclAlgo algo, NcclProto proto, double lat_us,
                 double bw_scale = 1.0) const;
  const HardwareProfile* hw_;
  int nodes_;
  int gpn_;
  std::array<std::array<std::array<Terms, kNcclProtoCount>, kNcclAlgoCount>, kCollectiveKindCount> terms_{};
};

}  // namespace gs
