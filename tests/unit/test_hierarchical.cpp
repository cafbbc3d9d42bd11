// Multi-node collectives (sim/cost/hierarchical.h): prices written out by hand from NCCL 2.20.3's tuning formulas
// (src/graph/tuning.cc at b6475625: ncclTopoTuneModel with nNodes > 1, ncclTopoGetAlgoTime) on the numbers of the
// h100-sxm-8x4-ib and a100-sxm-8x2-oci-roce profiles, and the profiles' multi-node fields. Every expected value below
// is the formula with the profile's constants, not the code under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "sim/core/error.h"
#include "sim/cost/collective_model.h"
#include "sim/cost/hardware_profile.h"
#include "sim/cost/hierarchical.h"

using namespace gs;

namespace {
constexpr double kMiB = 1048576.0, kGiB = 1073741824.0;
// h100-sxm-8's fitted one-node latency scale (the multi-node price multiplies NCCL's NVLink-path latency by it, and
// adds no launch_us).
constexpr double kLatScale = 1.454;
// h100-sxm-8x4-ib: NVLink 18 x 20.6 GB/s per GPU; NICs 8 x 400 Gb/s / 8 x 0.92.
constexpr double kIntra = 18 * 20.6, kInter = 8 * 400.0 / 8.0 * 0.92;
// The priced time (s): NVLink part x latency_scale + network part, + bytes / algbw (GB/s).
double price_s(double nvlink_us, double net_us, double bytes, double algbw_GBps, double scale = kLatScale) {
  return (scale * nvlink_us + net_us + bytes / (1000.0 * algbw_GBps)) * 1e-6;
}
// h100-sxm-8x4-ib's fitted inter-node terms (internode.nvls_tree_efficiency, pipeline_window_MB): NVLSTree's algbw x
// 0.9; a tree or NVLSTree all-reduce in LL128 or Simple adds min(bytes, 24 MB) / algbw.
constexpr double kNvlsEff = 0.9, kWindow = 24e6;
double window_s(double bytes, double algbw_GBps) { return std::min(bytes, kWindow) / (1000.0 * algbw_GBps) * 1e-6; }
const HardwareProfile& ib4() { return *load_hardware_profile("h100-sxm-8x4-ib"); }
const HardwareProfile& a100_oci() { return *load_hardware_profile("a100-sxm-8x2-oci-roce"); }
}  // namespace

TEST(HierarchicalProfile, FourNodeInfinibandProfileLoadsFromItsBase) {
  const HardwareProfile& hw = ib4();
  EXPECT_EQ(hw.nodes, 4);
  EXPECT_EQ(hw.gpus_per_node, 8);
  EXPECT_EQ(hw.internode_kind, "ib");
  EXPECT_EQ(hw.nics_per_node, 8);
  EXPECT_DOUBLE_EQ(hw.internode_GBps(), kInter);  // 368 GB/s per node
  EXPECT_DOUBLE_EQ(hw.latency_scale, kLatScale);
  // NCCL's node-count constants: llMaxBws Intel row {N2 39.0, N4 20.4}, perChMaxTreeBws Hopper {41.4, 36.0},
  // perChMaxTreeLL128Bws Hopper {36.7, 29.0}; netOverhead Intel 1 us; hwLat[NET][NVLSTree] Simple 14;
  // latencyInter 0 (net_ib reports none).
  EXPECT_DOUBLE_EQ(hw.internode_ll_max_bw_GBps[0], 39.0);
  EXPECT_DOUBLE_EQ(hw.internode_ll_max_bw_GBps[1], 20.4);
  EXPECT_DOUBLE_EQ(hw.internode_per_channel_max_tree_GBps[0], 41.4);
  EXPECT_DOUBLE_EQ(hw.internode_per_channel_max_tree_GBps[1], 36.0);
  EXPECT_DOUBLE_EQ(hw.internode_per_channel_max_tree_ll128_GBps[1], 29.0);
  EXPECT_DOUBLE_EQ(hw.net_overhead_us, 1.0);
  EXPECT_DOUBLE_EQ(hw.net_hw_lat_us[static_cast<size_t>(NcclAlgo::kNvls)][2], 14.0);
  EXPECT_DOUBLE_EQ(hw.internode_latency_us, 0.0);
  const HardwareProfile& roce = *load_hardware_profile("h100-sxm-8x32-roce");
  EXPECT_EQ(roce.nodes, 32);
  EXPECT_DOUBLE_EQ(roce.internode_GBps(), 8 * 400.0 / 8.0 * 0.85);
  // The OCI A100 hosts are AMD: llMaxBws AMD row {22.5, 19.0}, netOverhead 2 us; no NVLink SHARP, so no NVLSTree.
  const HardwareProfile& a100 = a100_oci();
  EXPECT_DOUBLE_EQ(a100.internode_ll_max_bw_GBps[0], 22.5);
  EXPECT_DOUBLE_EQ(a100.internode_per_channel_max_tree_GBps[0], 23.6);
  EXPECT_DOUBLE_EQ(a100.net_overhead_us, 2.0);
  EXPECT_FALSE(a100.nvls);
}

// 4 x 8 = 32 ranks. Ring: bus = min(NVLink 370.8, NICs 368) = 368 GB/s, algbw = bus x 32 / 62.
TEST(HierarchicalCollective, RingAllReduceAcrossFourNodesIsBoundByTheNics) {
  HierarchicalModel m(ib4(), 4, 8);
  const double n = 32, algbw = kInter * n / (2 * (n - 1));
  // Ring Simple: 62 steps, 2 x 4 = 8 across the network (NCCL 2.20.3's nInterSteps), 54 on NVLink at
  // max(hwLat 3.4, netOverhead 3 x 1.0) = 3.4 each: NVLink part 8.4 + 54 x 3.4 = 192.0 us, network part 8 x 14 =
  // 112 us; from 64 B per channel and rank (16 x 32 x 64 = 32 KiB) NCCL's plateau multiplies the latency by 1.4.
  const auto k = CollectiveKind::kAllReduce;
  EXPECT_NEAR(m.nvlink_latency_us(k, NcclAlgo::kRing, NcclProto::kSimple), 8.4 + 54 * 3.4, 1e-9);
  EXPECT_NEAR(m.network_latency_us(k, NcclAlgo::kRing, NcclProto::kSimple), 8 * 14.0, 1e-9);
  for (double bytes : {kMiB, 64 * kMiB, kGiB}) {
    const CollectiveCost c = m.cost(k, bytes, NcclAlgo::kRing, NcclProto::kSimple);
    EXPECT_NEAR(c.time_s, (1.4 * (kLatScale * 192.0 + 112.0) + bytes / (1000.0 * algbw)) * 1e-6, 1e-12) << bytes;
    EXPECT_NEAR(c.busbw_GBps, bytes / c.time_s / 1e9 * 2 * (n - 1) / n, 1e-9);
  }
  // NCCL's own time (its tuner's ranking) has the latency unscaled: 1.4 x 304 us.
  EXPECT_NEAR(m.nccl_time_us(k, kGiB, NcclAlgo::kRing, NcclProto::kSimple), 1.4 * 304.0 + kGiB / (1000.0 * algbw),
              1e-6);
  // Ring LL: the 54 NVLink steps cost netOverhead 1.0 us each (> hwLat 0.6): 0.6 of it on NVLink, 0.4 network.
  EXPECT_NEAR(m.nvlink_latency_us(k, NcclAlgo::kRing, NcclProto::kLL), 6.6 + 54 * 0.6, 1e-9);
  EXPECT_NEAR(m.network_latency_us(k, NcclAlgo::kRing, NcclProto::kLL), 54 * 0.4 + 8 * 2.7, 1e-9);
  // Ring LL bus: min(llMaxBws[Intel][N4] 20.4, 368 / 4).
  EXPECT_NEAR(m.bus_GBps(k, NcclAlgo::kRing, NcclProto::kLL), 20.4, 1e-12);
}

TEST(HierarchicalCollective, TreeLatencyGrowsWithLog2OfTheNodes) {
  // Tree LL: NVLink part 6.8 + 2 x 7 x 0.6 = 15.2 us, network part 2 x log2(nodes) x 5.0 us. Bus: 2 nodes
  // min(min(370.8, 2 x 368) x 0.92, 16 x 41.4) = 341.136 GB/s, then LL min(341.136 / 3.8, llMaxBw N2 39.0) = 39.0;
  // more nodes min(368 x 0.92, 16 x 36.0) = 338.56, LL min(338.56 / 3.8, N4 20.4) = 20.4. algbw = bus / 2, at 4 KiB
  // x treeCorrectionFactor[LL][log2(4096 / 64) = 6] = 0.7.
  for (int nodes : {2, 4, 16}) {
    HierarchicalModel m(ib4(), nodes, 8);
    const auto k = CollectiveKind::kAllReduce;
    EXPECT_NEAR(m.nvlink_latency_us(k, NcclAlgo::kTree, NcclProto::kLL), 15.2, 1e-9) << nodes;
    EXPECT_NEAR(m.network_latency_us(k, NcclAlgo::kTree, NcclProto::kLL), 2 * std::log2(nodes) * 5.0, 1e-9);
    const double bus = nodes == 2 ? 39.0 : 20.4;
    EXPECT_NEAR(m.cost(k, 4096, NcclAlgo::kTree, NcclProto::kLL).time_s,
                price_s(15.2, 2 * std::log2(nodes) * 5.0, 4096, bus / 2 * 0.7), 1e-12);
  }
  // Tree Simple at 4 nodes, 1 GiB (no correction from 512 MiB): bus 338.56, algbw half; NVLink part 0 + 2 x 7 x 28
  // = 392 us, network part 2 x 2 x 28 = 112 us.
  HierarchicalModel m(ib4(), 4, 8);
  EXPECT_NEAR(m.cost(CollectiveKind::kAllReduce, kGiB, NcclAlgo::kTree, NcclProto::kSimple).time_s,
              price_s(392.0, 112.0, kGiB, 338.56 / 2) + window_s(kGiB, 338.56 / 2), 1e-12);
  // latencyInter (internode.latency_us) is added to every network hop, twice for Simple (NCCL's flush).
  HardwareProfile with_lat = ib4();
  with_lat.internode_latency_us = 2.0;
  HierarchicalModel ml(with_lat, 4, 8);
  EXPECT_NEAR(ml.network_latency_us(CollectiveKind::kAllReduce, NcclAlgo::kTree, NcclProto::kLL), 4 * (5.0 + 2.0),
              1e-9);
  EXPECT_NEAR(ml.network_latency_us(CollectiveKind::kAllReduce, NcclAlgo::kTree, NcclProto::kSimple),
              4 * (28.0 + 4.0), 1e-9);
}

// 2 x 8 = 16 ranks, NVLink SHARP: NVLSTree (NVLS inside each node, a tree across them) is NCCL's algorithm there.
TEST(HierarchicalCollective, NvlsTreeOnTwoNodesIsBoundByNvlsInsideTheNode) {
  HierarchicalModel m(ib4(), 2, 8);
  const auto k = CollectiveKind::kAllReduce;
  // bus = min(NVLS graph 370.8 x 8/9 (8 heads), NICs 368 (2 nodes: bwInter whole)) = 329.6; algbw = 5/6 bus.
  const double bus = kIntra * 8.0 / 9.0, algbw = bus * 5.0 / 6.0;
  EXPECT_NEAR(m.bus_GBps(k, NcclAlgo::kNvls, NcclProto::kSimple), bus, 1e-9);
  // Latency: hwLat[NVLink][NVLSTree] 23 us + 2 x log2(2) x hwLat[NET][NVLSTree] 14 us.
  EXPECT_NEAR(m.nvlink_latency_us(k, NcclAlgo::kNvls, NcclProto::kSimple), 23.0, 1e-9);
  EXPECT_NEAR(m.network_latency_us(k, NcclAlgo::kNvls, NcclProto::kSimple), 28.0, 1e-9);
  const CollectiveCost c = m.best(k, kGiB);
  EXPECT_EQ(c.algo, NcclAlgo::kNvls);
  EXPECT_EQ(c.proto, NcclProto::kSimple);
  EXPECT_NEAR(c.time_s, price_s(23.0, 28.0, kGiB, algbw * kNvlsEff) + window_s(kGiB, algbw * kNvlsEff), 1e-12);
  // nccl-tests' busbw passes the NICs' 368 GB/s: 0.9 algbw x 2 x 15/16 = 463.5 GB/s at the limit, 447.2 at 1 GiB
  // with the latency and the window.
  EXPECT_GT(c.busbw_GBps, 440.0);
  // 4 nodes: the tree's inner nodes carry two children, so NCCL halves bwInter: min(329.6, 368 / 2) = 184; latency
  // 23 + 2 x 2 x 14. The ring (368 x 32/62 = 189.9 GB/s algbw) then beats NVLSTree (5/6 x 184 = 153.3) at 8 GiB.
  HierarchicalModel m4(ib4(), 4, 8);
  EXPECT_NEAR(m4.bus_GBps(k, NcclAlgo::kNvls, NcclProto::kSimple), kInter / 2, 1e-9);
  EXPECT_NEAR(m4.cost(k, kGiB, NcclAlgo::kNvls, NcclProto::kSimple).time_s,
              price_s(23.0, 56.0, kGiB, kInter / 2 * 5.0 / 6.0 * kNvlsEff) +
                  window_s(kGiB, kInter / 2 * 5.0 / 6.0 * kNvlsEff),
              1e-12);
  EXPECT_EQ(m4.best(k, 8 * kGiB).algo, NcclAlgo::kRing);
  // NVLSTree serves all-reduce only, Simple only; a profile without NVLink SHARP has none.
  EXPECT_FALSE(m.available(CollectiveKind::kAllGather, NcclAlgo::kNvls));
  EXPECT_LT(m.cost(k, kGiB, NcclAlgo::kNvls, NcclProto::kLL128).time_s, 0);
  EXPECT_FALSE(HierarchicalModel(a100_oci(), 2, 8).available(k, NcclAlgo::kNvls));
}

// The fitted inter-node terms, by hand on 2 x 8 H100 (h100-sxm-8x4-ib): NVLSTree algbw = 370.8 x 8/9 x 5/6 = 274.67
// GB/s, x 0.9 = 247.2 GB/s; latency 1.454 x 23 + 28 = 61.442 us. 16 MiB (inside the 24 MB window): 61.442 + 2 x
// 16777216 / 247200 = 197.180 us; 1 GiB: 61.442 + (1073741824 + 24e6) / 247200 = 4502.145 us. NCCL's own time (its
// ranking) keeps its constants: 23 + 28 + 16777216 / 274667 = 112.08 us. LL has no window; one node has neither term.
TEST(HierarchicalCollective, FittedNvlsTreeEfficiencyAndPipelineWindowArePriced) {
  HierarchicalModel m(ib4(), 2, 8);
  const auto k = CollectiveKind::kAllReduce;
  EXPECT_NEAR(m.cost(k, 16 * kMiB, NcclAlgo::kNvls, NcclProto::kSimple).time_s * 1e6, 197.180, 1e-3);
  EXPECT_NEAR(m.cost(k, kGiB, NcclAlgo::kNvls, NcclProto::kSimple).time_s * 1e6, 4502.145, 1e-3);
  EXPECT_NEAR(m.nccl_time_us(k, 16 * kMiB, NcclAlgo::kNvls, NcclProto::kSimple), 112.08, 1e-2);
  // Tree LL at 4 KiB: no window (as in TreeLatencyGrowsWithLog2OfTheNodes's price).
  EXPECT_NEAR(m.cost(k, 4096, NcclAlgo::kTree, NcclProto::kLL).time_s, price_s(15.2, 10.0, 4096, 39.0 / 2 * 0.7),
              1e-12);
  const HardwareProfile& one = *load_hardware_profile("h100-sxm-8");
  EXPECT_EQ(one.nvls_tree_efficiency, 1.0);
  EXPECT_EQ(one.pipeline_window_MB, 0.0);
  EXPECT_EQ(ib4().nvls_tree_efficiency, kNvlsEff);
  EXPECT_EQ(ib4().pipeline_window_MB, kWindow / 1e6);
  EXPECT_EQ(a100_oci().pipeline_window_MB, 0.0);
}

// The choice is NCCL's: the lowest ncclTopoGetAlgoTime (unscaled latency, tree correction factors).
TEST(HierarchicalCollective, TwoNodeChoiceIsTreeLLThenTreeLL128ThenNvlsTree) {
  HierarchicalModel m(ib4(), 2, 8);
  const auto k = CollectiveKind::kAllReduce;
  // Tree LL128 on 2 nodes: bus min(341.136 x 120/128, 16 x 36.7) = 319.815, algbw half; latency 14 + 2 x 7 x 1.25 +
  // 2 x 8.5 = 48.5 us. Tree LL: 25.2 us, algbw 19.5. NVLSTree: 51 us, algbw 274.67.
  const double ll128 = 341.136 * 120.0 / 128.0 / 2, nvls = kIntra * 8.0 / 9.0 * 5.0 / 6.0;
  // 1 KiB: tree LL 25.2 + 1024 / (19.5 x 0.9) beats tree LL128 (48.5 + ...) and NVLSTree (51 + ...). Price: 1.454 x
  // 15.2 + 10 us + the bytes.
  const CollectiveCost small = m.best(k, 1024);
  EXPECT_EQ(small.algo, NcclAlgo::kTree);
  EXPECT_EQ(small.proto, NcclProto::kLL);
  EXPECT_NEAR(small.time_s, price_s(15.2, 10.0, 1024, 19.5 * 0.9), 1e-12);
  // 256 KiB (log2(256K / 64) = 12): tree LL 25.2 + 262144 / (19.5 x 0.4 x 1000) = 58.8 us, tree LL128 48.5 +
  // 262144 / (159.9 x 0.6 x 1000) = 51.23 us, NVLSTree 51 + 0.95 = 51.95 us: tree LL128.
  EXPECT_NEAR(m.nccl_time_us(k, 262144, NcclAlgo::kTree, NcclProto::kLL128), 48.5 + 262144 / (1000 * ll128 * 0.6),
              1e-6);
  const CollectiveCost mid = m.best(k, 262144);
  EXPECT_EQ(mid.algo, NcclAlgo::kTree);
  EXPECT_EQ(mid.proto, NcclProto::kLL128);
  // 1 MiB (log2 = 14): tree LL128 48.5 + 1048576 / (159.9 x 0.6 x 1000) = 59.4 us, NVLSTree 51 + 3.8 = 54.8 us.
  EXPECT_NEAR(m.nccl_time_us(k, kMiB, NcclAlgo::kNvls, NcclProto::kSimple), 51.0 + kMiB / (1000 * nvls), 1e-6);
  EXPECT_EQ(m.best(k, kMiB).algo, NcclAlgo::kNvls);
  // Forcing ring (NCCL_ALGO=Ring) keeps ring; forcing tree for a reduce-scatter, which has none, leaves NCCL's
  // choice (as on one node).
  EXPECT_EQ(m.best(k, 1024, NcclAlgo::kRing).algo, NcclAlgo::kRing);
  EXPECT_EQ(m.best(CollectiveKind::kReduceScatter, kGiB, NcclAlgo::kTree).algo, NcclAlgo::kRing);
}

// On 2 nodes each node is the root of one tree and a leaf of the other: NCCL takes the tree graph's bwIntra, up to
// 2 x bwInter, so the tree's busbw can pass the NICs' line rate, which the ring's cannot.
TEST(HierarchicalCollective, TwoNodeTreePassesTheNicsWhereNvlinkAllows) {
  const HardwareProfile& hw = a100_oci();  // NVLink 12 x 20 = 240 GB/s; NICs 16 x 100 / 8 x 0.85 = 170 GB/s
  HierarchicalModel m(hw, 2, 8);
  const auto k = CollectiveKind::kAllReduce;
  const double bus = std::min(240.0, 2 * 170.0) * 0.92;  // 220.8 (perChMaxTree N2 16 x 23.6 does not bind)
  EXPECT_NEAR(m.bus_GBps(k, NcclAlgo::kTree, NcclProto::kSimple), bus, 1e-9);
  EXPECT_NEAR(m.bus_GBps(k, NcclAlgo::kRing, NcclProto::kSimple), 170.0, 1e-9);
  // 8 GiB: tree Simple (NCCL: 0 + 2 x 7 x 28 + 2 x 28 = 448 us + S / 110.4 GB/s) beats tree LL128 (48.5 us + S /
  // 103.5) and ring Simple (S / 90.7). Price: 2.279 x 392 + 56 us + S / 110.4.
  const CollectiveCost c = m.best(k, 8 * kGiB);
  EXPECT_EQ(c.algo, NcclAlgo::kTree);
  EXPECT_EQ(c.proto, NcclProto::kSimple);
  EXPECT_NEAR(c.time_s, price_s(392.0, 56.0, 8 * kGiB, bus / 2, 2.279), 1e-12);
  EXPECT_GT(c.busbw_GBps, 170.0);
  // More than 2 nodes the tree is bound by the NICs like the ring: min(intra, inter).
  HierarchicalModel m4(ib4(), 4, 8);
  EXPECT_NEAR(m4.bus_GBps(k, NcclAlgo::kTree, NcclProto::kSimple), kInter * 0.92, 1e-9);
  // AMD hosts: ring LL's 26 NVLink steps cost netOverhead 2.0 us (0.6 NVLink + 1.4 network), and llMaxBws AMD N2
  // caps its bus at 22.5 GB/s.
  EXPECT_NEAR(m.nvlink_latency_us(k, NcclAlgo::kRing, NcclProto::kLL), 6.6 + 26 * 0.6, 1e-9);
  EXPECT_NEAR(m.network_latency_us(k, NcclAlgo::kRing, NcclProto::kLL), 26 * 1.4 + 4 * 2.7, 1e-9);
  EXPECT_NEAR(m.bus_GBps(k, NcclAlgo::kRing, NcclProto::kLL), 22.5, 1e-12);
}

TEST(HierarchicalCollective, OtherCollectivesAreRingsAcrossNodes) {
  HierarchicalModel m(ib4(), 4, 8);
  // Reduce-scatter: 31 steps, 3 of them across the network: NVLink part 8.4 + 28 x 3.4 = 103.6 us, network 3 x 14 =
  // 42 us; no plateau (all-reduce only); algbw 368 x 32 / 31.
  EXPECT_NEAR(m.cost(CollectiveKind::kReduceScatter, kGiB, NcclAlgo::kRing, NcclProto::kSimple).time_s,
              price_s(103.6, 42.0, kGiB, kInter * 32 / 31), 1e-12);
  EXPECT_LT(m.cost(CollectiveKind::kReduceScatter, kGiB, NcclAlgo::kTree, NcclProto::kSimple).time_s, 0);
  // Broadcast: pipelined, one network hop: 8.4 us on the NVLink side, hwLat[NET][Ring][Simple] 14 us; algbw = bus.
  EXPECT_NEAR(m.cost(CollectiveKind::kBroadcast, kGiB, NcclAlgo::kRing, NcclProto::kSimple).time_s,
              price_s(8.4, 14.0, kGiB, kInter), 1e-12);
}

// CollectiveModel hands calls that span nodes to the hierarchical model (NCCL's names: nvls there is NVLSTree).
TEST(HierarchicalCollective, CollectiveModelPricesCallsAcrossNodesHierarchically) {
  const HardwareProfile& hw = ib4();
  CollectiveModel cm(hw, 16);
  HierarchicalModel hm(hw, 2, 8);
  EXPECT_TRUE(cm.multi_node());
  EXPECT_STREQ(cm.algo_name(NcclAlgo::kNvls), "nvlstree");
  for (double bytes : {1024.0, kMiB, kGiB}) {
    EXPECT_DOUBLE_EQ(cm.best(CollectiveKind::kAllReduce, bytes).time_s,
                     hm.best(CollectiveKind::kAllReduce, bytes).time_s);
    EXPECT_DOUBLE_EQ(cm.with_algo(CollectiveKind::kAllReduce, bytes, NcclAlgo::kRing).time_s,
                     hm.best(CollectiveKind::kAllReduce, bytes, NcclAlgo::kRing).time_s);
  }
  EXPECT_FALSE(cm.available(CollectiveKind::kAllGather, NcclAlgo::kNvls));
  EXPECT_LT(cm.with_algo(CollectiveKind::kAllGather, kMiB, NcclAlgo::kTree).time_s, 0);
  // 8 ranks on the same profile stay on one node (its curve).
  CollectiveModel one(hw, 8);
  EXPECT_FALSE(one.multi_node());
  EXPECT_STREQ(one.algo_name(NcclAlgo::kNvls), "nvls");
}

// Rank counts that are not whole nodes within a multi-node profile (QA: 12 ranks were priced as one NVLink node,
// 24 as a flat ring, 33 beyond the profile's 32 GPUs as one node with no NIC at all): ceil(ranks / 8) nodes of 8,
// a partial last node at the pace of a full one, nodes beyond the profile's 4 as more of the same fabric.
TEST(HierarchicalCollective, RanksThatAreNotWholeNodesArePricedOnTheNodesTheySpan) {
  const HardwareProfile& hw = ib4();
  for (auto [ranks, nodes] : {std::pair<int, int>{9, 2}, {12, 2}, {24, 3}, {33, 5}, {64, 8}}) {
    CollectiveModel cm(hw, ranks);
    HierarchicalModel hm(hw, nodes, 8);
    EXPECT_TRUE(cm.multi_node()) << ranks;
    EXPECT_EQ(CollectiveModel::nodes_spanned(hw, ranks), nodes) << ranks;
    for (double bytes : {1024.0, kMiB, kGiB})
      EXPECT_DOUBLE_EQ(cm.best(CollectiveKind::kAllReduce, bytes).time_s,
                       hm.best(CollectiveKind::kAllReduce, bytes).time_s)
          << ranks << " ranks, " << bytes << " bytes";
  }
  // Crossing the NICs costs: 9 ranks take longer than the 8 of one node at every size from 1 MiB.
  CollectiveModel one(hw, 8), nine(hw, 9);
  for (double bytes : {kMiB, kGiB})
    EXPECT_GT(nine.best(CollectiveKind::kAllReduce, bytes).time_s, one.best(CollectiveKind::kAllReduce, bytes).time_s);
}

TEST(HierarchicalProfile, InternodeErrorsNameTheFileAndPath) {
  auto problems = [](const std::string& text) {
    try {
      parse_hardware_profile(text, std::string(GRADSWEEP_SOURCE_DIR) + "/scenarios/hardware/p.json");
    } catch (const ProfileError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string no_level = problems(R"({"base": "h100-sxm-8", "nodes": {"value": 2, "source": "x"}})");
  EXPECT_NE(no_level.find("p.json: internode: expected an object"), std::string::npos) << no_level;
  // An internode section on one node (nodes absent or 1) would price nothing: refused, naming nodes; a missing kind
  // names the two kinds (it said "a string").
  const std::string one_node = problems(R"({"base": "h100-sxm-8",
    "internode": {"nic_Gbps": {"value": 400, "source": "x"}}})");
  EXPECT_NE(one_node.find("p.json: nodes: expected a whole number above 1 (\"internode\" is given"),
            std::string::npos)
      << one_node;
  EXPECT_NE(one_node.find("p.json: internode.kind: expected \"ib\" or \"roce\", got nothing"), std::string::npos)
      << one_node;
  const std::string bad = problems(R"({"base": "h100-sxm-8", "nodes": {"value": 0, "source": "x"},
    "internode": {"kind": "ethernet", "nic_Gbps": {"value": 400}, "nics_per_node": {"value": 8, "source": "x"},
    "achievable_fraction": {"value": 1.5, "source": "x"}, "latency_us": {"value": 1, "source": "x"},
    "hw_lat_us": {"tree": {"value": [1, 2], "source": "x"}, "ring": {"value": [1, 2, 3], "source": "x"}},
    "nccl": {"ll_max_bw_GBps": {"value": [39, 20.4, 1], "source": "x"},
             "per_channel_max_tree_GBps": {"value": [41.4, 0], "source": "x"}},
    "nic_gbps": 1}})");
  EXPECT_NE(bad.find("p.json: nodes.value: expected an integer in [1, 4096], got 0"), std::string::npos) << bad;
  EXPECT_NE(bad.find("p.json: internode.kind: expected \"ib\" or \"roce\", got \"ethernet\""), std::string::npos)
      << bad;
  EXPECT_NE(bad.find("p.json: internode.nic_Gbps.source: expected a non-empty string"), std::string::npos) << bad;
  EXPECT_NE(bad.find("p.json: internode.achievable_fraction.value: expected a number in [1e-06, 1], got 1.5"),
            std::string::npos)
      << bad;
  EXPECT_NE(bad.find("p.json: internode.hw_lat_us.tree.value: expected three numbers"), std::string::npos) << bad;
  EXPECT_NE(bad.find("p.json: internode.nic_gbps: expected no such key"), std::string::npos) << bad;
  // The node-count constants: two numbers each, > 0; the missing ones and NVLSTree's latency (fabric.nvls) named.
  EXPECT_NE(bad.find("p.json: internode.nccl.ll_max_bw_GBps.value: expected two numbers [for 2 nodes, for more"),
            std::string::npos)
      << bad;
  EXPECT_NE(bad.find("p.json: internode.nccl.per_channel_max_tree_GBps.value[1]: expected a number in (0, 1e6]"),
            std::string::npos)
      << bad;
  EXPECT_NE(bad.find("p.json: internode.nccl.net_overhead_us: expected {\"value\""), std::string::npos) << bad;
  EXPECT_NE(bad.find("p.json: internode.hw_lat_us.nvls_tree: expected {\"value\""), std::string::npos) << bad;
  // No NVLink SHARP (A100): an NVLSTree latency is refused.
  const std::string a100 = problems(R"({"base": "a100-sxm-8", "nodes": {"value": 2, "source": "x"},
    "internode": {"kind": "roce", "nic_Gbps": {"value": 100, "source": "x"},
    "nics_per_node": {"value": 16, "source": "x"},
    "achievable_fraction": {"value": 0.85, "source": "x"}, "latency_us": {"value": 0, "source": "x"},
    "hw_lat_us": {"tree": {"value": [5, 8.5, 28], "source": "x"}, "ring": {"value": [2.7, 4, 14], "source": "x"},
                  "nvls_tree": {"value": [0, 0, 14], "source": "x"}},
    "nccl": {"ll_max_bw_GBps": {"value": [22.5, 19], "source": "x"},
             "per_channel_max_ring_ll128_GBps": {"value": [20, 20], "source": "x"},
             "per_channel_max_tree_GBps": {"value": [23.6, 17.8], "source": "x"},
             "per_channel_max_tree_ll128_GBps": {"value": [20, 20], "source": "x"},
             "net_overhead_us": {"value": 2, "source": "x"}}}})");
  EXPECT_NE(a100.find("p.json: internode.hw_lat_us.nvls_tree: expected no nvls_tree latency: fabric.nvls is false"),
            std::string::npos)
      << a100;
  EXPECT_EQ(a100.find("no such key"), std::string::npos) << a100;
  EXPECT_THROW(HierarchicalModel(*load_hardware_profile("h100-sxm-8"), 2, 8), Error);
}
