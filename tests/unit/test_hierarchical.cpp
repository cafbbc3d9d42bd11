// Multi-node collectives (sim/cost/hierarchical.h): prices by hand from NCCL's
// tuning formulas (tuning.cc, ncclTopoTuneModel with nNodes > 1) on the
// h100-sxm-8x4-ib profile's numbers, and the profile's new fields.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "sim/core/error.h"
#include "sim/cost/hardware_profile.h"
#include "sim/cost/hierarchical.h"

using namespace gs;

namespace {
constexpr double kGiB = 1073741824.0;
// h100-sxm-8's fitted one-node terms (inputs of the model, read from its file
// by the loader).
constexpr double kLaunchUs = 9.25, kLatScale = 1.454;
double us(double latency_us, double bytes, double algbw_GBps) {
  return (kLaunchUs + kLatScale * latency_us + bytes / (1000.0 * algbw_GBps)) *
         1e-6;
}
} // namespace

TEST(HierarchicalProfile, FourNodeInfinibandProfileLoadsFromItsBase) {
  const HardwareProfile &hw = *load_hardware_profile("h100-sxm-8x4-ib");
  EXPECT_EQ(hw.nodes, 4);
  EXPECT_EQ(hw.gpus_per_node, 8);
  EXPECT_EQ(hw.internode_kind, "ib");
  EXPECT_EQ(hw.nics_per_node, 8);
  EXPECT_DOUBLE_EQ(hw.internode_GBps(),
                   8 * 400.0 / 8.0 * 0.92); // 368 GB/s per node
  EXPECT_DOUBLE_EQ(hw.latency_scale, kLatScale);
  EXPECT_DOUBLE_EQ(hw.launch_us[0], kLaunchUs);
  const HardwareProfile &roce = *load_hardware_profile("h100-sxm-8x32-roce");
  EXPECT_EQ(roce.nodes, 32);
  EXPECT_DOUBLE_EQ(roce.internode_GBps(), 8 * 400.0 / 8.0 * 0.85);
}

// 4 x 8 = 32 ranks. bus = min(NVLink 18 x 20.6 = 370.8, NICs 368) = 368 GB/s.
TEST(HierarchicalCollective, RingAllReduceAcrossFourNodesIsBoundByTheNics) {
  const HardwareProfile &hw = *load_hardware_profile("h100-sxm-8x4-ib");
  HierarchicalModel m(hw, 4, 8);
  const double n = 32, bus = 368.0;
  // Ring Simple: algbw = bus x n / (2(n-1)); latency 8.4 + (62 - 6) x 3.4 + 6 x
  // (14.0 + 1.0) = 288.8 us.
  const double algbw = bus * n / (2 * (n - 1));
  for (double bytes : {1024.0 * 1024, 64.0 * 1024 * 1024, kGiB}) {
    const CollectiveCost c = m.cost(CollectiveKind::kAllReduce, bytes,
                                    NcclAlgo::kRing, NcclProto::kSimple);
    EXPECT_NEAR(c.time_s, us(288.8, bytes, algbw), 1e-12) << bytes;
    EXPECT_NEAR(c.busbw_GBps, bytes / c.time_s / 1e9 * 2 * (n - 1) / n, 1e-9);
  }
  // At 1 GiB the busbw is about 2(n-1)/n x algbw x (bandwidth share of the
  // time): below the NICs' 368 GB/s.
  const CollectiveCost big = m.cost(CollectiveKind::kAllReduce, kGiB,
                                    NcclAlgo::kRing, NcclProto::kSimple);
  EXPECT_LT(big.busbw_GBps, 368.0);
  EXPECT_GT(big.busbw_GBps, 0.9 * 368.0);
}

TEST(HierarchicalCollective, TreeLatencyGrowsWithLog2OfTheNodes) {
  const HardwareProfile &hw = *load_hardware_profile("h100-sxm-8x4-ib");
  // Tree LL: 6.8 + 2 ((8-1) 0.6 + log2(nodes) (5.0 + 1.0)); bus min(368 x 0.92
  // / 3.8, llMaxBw 87.7) = 87.7.
  for (int nodes : {2, 4, 16}) {
    HierarchicalModel m(hw, nodes, 8);
    const double lat = 6.8 + 2 * (7 * 0.6 + std::log2(nodes) * 6.0);
    EXPECT_NEAR(m.latency_us(CollectiveKind::kAllReduce, NcclAlgo::kTree,
                             NcclProto::kLL),
                lat, 1e-9)
        << nodes;
    EXPECT_NEAR(m.cost(CollectiveKind::kAllReduce, 4096, NcclAlgo::kTree,
                       NcclProto::kLL)
                    .time_s,
                us(lat, 4096, 87.7 / 2), 1e-12);
  }
  // Tree Simple at 4 nodes: bus 0.92 x 368 = 338.56, algbw half; latency 0 + 2
  // (7 x 28 + 2 x (28 + 1)) = 508 us.
  HierarchicalModel m(hw, 4, 8);
  EXPECT_NEAR(m.cost(CollectiveKind::kAllReduce, kGiB, NcclAlgo::kTree,
                     NcclProto::kSimple)
                  .time_s,
              us(508.0, kGiB, 338.56 / 2), 1e-12);
}

TEST(HierarchicalCollective, SmallAllReducesTakeTreeLLLargeOnesRingSimple) {
  const HardwareProfile &hw = *load_hardware_profile("h100-sxm-8x4-ib");
  HierarchicalModel m(hw, 4, 8);
  // 1 KiB: tree LL (latency 39.2 us) beats ring LL (6.6 + 56 x 0.6 + 6 x 3.7
  // = 62.4 us) and every Simple.
  const CollectiveCost small = m.best(CollectiveKind::kAllReduce, 1024);
  EXPECT_EQ(small.algo, NcclAlgo::kTree);
  EXPECT_EQ(small.proto, NcclProto::kLL);
  EXPECT_NEAR(small.time_s, us(39.2, 1024, 87.7 / 2), 1e-12);
  // 1 GiB: ring Simple (288.8 us + S / 189.9 GB/s) beats ring LL128 (150.4 us +
  // S / (338.56 x 32/62)) and tree.
  const CollectiveCost large = m.best(CollectiveKind::kAllReduce, kGiB);
  EXPECT_EQ(large.algo, NcclAlgo::kRing);
  EXPECT_EQ(large.proto, NcclProto::kSimple);
  EXPECT_NEAR(large.time_s, us(288.8, kGiB, 368.0 * 32 / 62), 1e-12);
  // NVLS across nodes is not modeled; forcing ring keeps ring.
  EXPECT_LT(m.cost(CollectiveKind::kAllReduce, kGiB, NcclAlgo::kNvls,
                   NcclProto::kSimple)
                .time_s,
            0);
  EXPECT_EQ(m.best(CollectiveKind::kAllReduce, 1024, NcclAlgo::kRing).algo,
            NcclAlgo::kRing);
  // Reduce-scatter: ring only, (n-1) steps, 3 of them inter-node: 8.4 + 28
  // x 3.4 + 3 x 15 = 148.6 us.
  EXPECT_NEAR(m.cost(CollectiveKind::kReduceScatter, kGiB, NcclAlgo::kRing,
                     NcclProto::kSimple)
                  .time_s,
              us(148.6, kGiB, 368.0 * 32 / 31), 1e-12);
  EXPECT_LT(m.cost(CollectiveKind::kReduceScatter, kGiB, NcclAlgo::kTree,
                   NcclProto::kSimple)
                .time_s,
            0);
}

TEST(HierarchicalProfile, InternodeErrorsNameTheFileAndPath) {
  auto problems = [](const std::string &text) {
    try {
      parse_hardware_profile(text, std::string(GRADSWEEP_SOURCE_DIR) +
                                       "/scenarios/hardware/p.json");
    } catch (const ProfileError &e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string no_level = problems(
      R"({"base": "h100-sxm-8", "nodes": {"value": 2, "source": "x"}})");
  EXPECT_NE(no_level.find("p.json: internode: expected an object"),
            std::string::npos)
      << no_level;
  const std::string bad =
      problems(R"({"base": "h100-sxm-8", "nodes": {"value": 0, "source": "x"},
    "internode": {"kind": "ethernet", "nic_Gbps": {"value": 400}, "nics_per_node": {"value": 8, "source": "x"},
    "achievable_fraction": {"value": 1.5, "source": "x"}, "latency_us": {"value": 1, "source": "x"},
    "hw_lat_us": {"tree": {"value": [1, 2], "source": "x"}, "ring": {"value": [1, 2, 3], "source": "x"}},
    "nic_gbps": 1}})");
  EXPECT_NE(
      bad.find("p.json: nodes.value: expected an integer in [1, 4096], got 0"),
      std::string::npos)
      << bad;
  EXPECT_NE(bad.find("p.json: internode.kind: expected \"ib\" or \"roce\", got "
                     "\"ethernet\""),
            std::string::npos)
      << bad;
  EXPECT_NE(
      bad.find(
          "p.json: internode.nic_Gbps.source: expected a non-empty string"),
      std::string::npos)
      << bad;
  EXPECT_NE(bad.find("p.json: internode.achievable_fraction.value: expected a "
                     "number in [1e-06, 1], got 1.5"),
            std::string::npos)
      << bad;
  EXPECT_NE(
      bad.find(
          "p.json: internode.hw_lat_us.tree.value: expected three numbers"),
      std::string::npos)
      << bad;
  EXPECT_NE(bad.find("p.json: internode.nic_gbps: expected no such key"),
            std::string::npos)
      << bad;
  EXPECT_THROW(HierarchicalModel(*load_hardware_profile("h100-sxm-8"), 2, 8),
               Error);
}
