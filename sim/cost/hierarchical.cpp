// HierarchicalModel (hierarchical.h): NCCL 2.20.3's tuning model across nodes (src/graph/tuning.cc at b6475625;
// the NVLSTree and tree bandwidths at 2 nodes follow src/graph/search.cc at the same commit).
#include "sim/cost/hierarchical.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "sim/core/count_text.h"
#include "sim/core/error.h"

namespace gs {
namespace {

// tuning.cc treeCorrectionFactor[proto][log2i(nBytes >> 6)], 64 B to 256 MiB: "Trees are not perfectly sticking to
// the model for medium sizes".
constexpr double kTreeCorrection[kNcclProtoCount][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};

// NCCL's log2i: floor(log2(n)), 0 for n <= 1.
int log2i(long long n) {
  int l = 0;
  while (n >>= 1) ++l;
  return l;
}

}  // namespace

HierarchicalModel::HierarchicalModel(const HardwareProfile& hw, int nodes, int gpus_per_node)
    : hw_(&hw), nodes_(nodes), gpn_(gpus_per_node) {
  GS_EXPECT(nodes >= 1 && gpus_per_node >= 1,
            fmt::format("HierarchicalModel: expected nodes >= 1 and gpus_per_node >= 1, got {} and {}", nodes,
                        gpus_per_node));
  GS_EXPECT(nodes == 1 || hw.nics_per_node > 0,
            fmt::format("{}: internode: expected an inter-node level to price {}, got none", hw.file,
                        count_text(nodes, "node")));
  const bool multi = nodes > 1;
  const size_t nn = nodes <= 2 ? 0 : 1;  // tuning.cc index2 - 1: the N2 or N4 column
  const double n = ranks(), g = gpus_per_node, ch = hw.channels;
  const double intra = hw.nccl_bw_GBps();
  const double inter = multi ? hw.internode_GBps() : intra;
  // One node: the profile's one-node constants (NCCL's N1 column).
  const double ll_max = multi ? hw.internode_ll_max_bw_GBps[nn] : hw.ll_max_bw_GBps;
  const double ring_ll128_cap = multi ? hw.internode_per_channel_max_ring_ll128_GBps[nn]
                                      : hw.per_channel_max_ring_ll128_GBps;
  const double tree_cap = multi ? hw.internode_per_channel_max_tree_GBps[nn] : hw.per_channel_max_tree_GBps;
  const double tree_ll128_cap = multi ? hw.internode_per_channel_max_tree_ll128_GBps[nn]
                                      : hw.per_channel_max_tree_ll128_GBps;
  const double log2_nodes = log2i(nodes);
  for (size_t c = 0; c < kCollectiveKindCount; ++c) {
    const auto kind = static_cast<CollectiveKind>(c);
    const bool allreduce = kind == CollectiveKind::kAllReduce;
    const bool broadcast = kind == CollectiveKind::kBroadcast;
    const double nsteps = allreduce ? 2.0 * (n - 1) : broadcast ? n : n - 1;
    for (size_t a = 0; a < kNcclAlgoCount; ++a) {
      const auto algo = static_cast<NcclAlgo>(a);
      // Ring serves every collective; tree and NVLSTree all-reduce only (NVLS for all-gather / reduce-scatter is
      // disabled across nodes without CollNet); NVLSTree needs NVLink SHARP and more than one node.
      if (algo != NcclAlgo::kRing && !allreduce) continue;
      if (algo == NcclAlgo::kNvls && (!hw.nvls || !multi)) continue;
      for (size_t p = 0; p < kNcclProtoCount; ++p) {
        const auto proto = static_cast<NcclProto>(p);
        if (algo == NcclAlgo::kNvls && proto != NcclProto::kSimple) continue;
        if (proto == NcclProto::kLL128 && !hw.ll128) continue;
        const bool simple = proto == NcclProto::kSimple;
        Terms t;
        double bus = 0.0;
        if (algo == NcclAlgo::kRing) {
          bus = std::min(intra, inter);
          if (proto == NcclProto::kLL) bus = std::min(ll_max, bus * (multi || allreduce ? 1.0 / 4.0 : 1.0 / 3.0));
          if (proto == NcclProto::kLL128) bus = std::min(bus * 0.92, ch * ring_ll128_cap);
          t.algbw = bus * n / nsteps;
        } else if (algo == NcclAlgo::kTree) {
          bus = std::min(intra, (nodes <= 2 ? 2.0 : 1.0) * inter);
          bus = std::min(bus * 0.92, ch * tree_cap);
          if (proto == NcclProto::kLL) bus = std::min(bus / 3.8, ll_max);
          if (proto == NcclProto::kLL128)
            bus = std::min(bus * (multi ? 120.0 / 128.0 : 7.0 / 9.0), ch * tree_ll128_cap);
          t.algbw = bus / 2.0;
        } else {
          const double heads = std::min(g, static_cast<double>(hw.nics_per_node));
          bus = std::min(intra * heads / (heads + 1.0), nodes <= 2 ? inter : inter / 2.0);
          t.algbw = bus * 5.0 / 6.0;
        }
        t.bus = bus;
        // Latencies: NVLink hop, network hop (interLat: hwLat[NET] + latencyInter, twice for Simple).
        const double base = hw.base_lat_us[a][p];
        const double hop = hw.hw_lat_us[a][p];
        const double inter_lat =
            multi ? hw.net_hw_lat_us[a][p] + hw.internode_latency_us * (simple ? 2.0 : 1.0) : 0.0;
        if (algo == NcclAlgo::kRing && broadcast) {
          // Pipelined along the ring, one hop (sameChannels): hwLat[NET] across nodes, hwLat[NVLink] on one.
          t.nvlink_us = base + (multi ? 0.0 : hop);
          t.net_us = multi ? hw.net_hw_lat_us[a][p] : 0.0;
        } else if (algo == NcclAlgo::kRing) {
          const double ninter = !multi ? 0.0 : allreduce ? 2.0 * nodes : nodes - 1.0;
          const double intra_steps = std::max(0.0, nsteps - ninter);
          const double net_overhead = multi ? hw.net_overhead_us * (simple ? 3.0 : 1.0) : 0.0;
          t.nvlink_us = base + intra_steps * hop;
          t.net_us = intra_steps * std::max(0.0, net_overhead - hop) + ninter * inter_lat;
        } else if (algo == NcclAlgo::kTree) {
          t.nvlink_us = base + 2.0 * (g - 1.0) * hop;
          t.net_us = 2.0 * log2_nodes * inter_lat;
        } else {
          t.nvlink_us = hop;  // baseLat[NVLSTree] is 0; hwLat[NVLink][NVLSTree] = hwLat[NVLink][NVLS] in 2.20.3
          t.net_us = 2.0 * log2_nodes * inter_lat;
        }
        terms_[c][a][p] = t;
      }
    }
  }
}

bool HierarchicalModel::available(CollectiveKind kind, NcclAlgo algo) const {
  for (size_t p = 0; p < kNcclProtoCount; ++p)
    if (algbw_GBps(kind, algo, static_cast<NcclProto>(p)) > 0) return true;
  return false;
}

double HierarchicalModel::time_us(CollectiveKind kind, double bytes, NcclAlgo algo, NcclProto proto, double lat_us,
                                  double bw_scale) const {
  double bw = algbw_GBps(kind, algo, proto) * bw_scale;
  if (algo == NcclAlgo::kTree) {
    const int log_size = log2i(static_cast<long long>(bytes) >> 6);
    if (log_size < 23) bw *= kTreeCorrection[static_cast<size_t>(proto)][log_size];
  }
  // The ring's "plateau" (compute capability >= 80: 1.4; every profile here is Ampere or Hopper).
  if (algo == NcclAlgo::kRing && proto == NcclProto::kSimple && nodes_ > 1 && kind == CollectiveKind::kAllReduce &&
      std::floor(bytes / (static_cast<double>(hw_->channels) * ranks())) >= 64)
    lat_us *= 1.4;
  return lat_us + bytes / (1000.0 * bw);
}

double HierarchicalModel::nccl_time_us(CollectiveKind kind, double bytes, NcclAlgo algo, NcclProto proto) const {
  if (algbw_GBps(kind, algo, proto) <= 0) return -1.0;
  return time_us(kind, bytes, algo, proto, latency_us(kind, algo, proto));
}

CollectiveCost HierarchicalModel::cost(CollectiveKind kind, double bytes, NcclAlgo algo, NcclProto proto) const {
  CollectiveCost c;
  c.algo = algo;
  c.proto = proto;
  if (ranks() <= 1) return c;
  if (algbw_GBps(kind, algo, proto) <= 0) {
    c.time_s = -1.0;
    return c;
  }
  const double lat = hw_->latency_scale * nvlink_latency_us(kind, algo, proto) + network_latency_us(kind, algo, proto);
  // The profile's fitted inter-node terms (hierarchical.h): NVLSTree's efficiency, and the window a tree or NVLSTree
  // fills before its stages overlap (LL128 and Simple).
  const bool multi = nodes_ > 1;
  const double bw_scale = multi && algo == NcclAlgo::kNvls ? hw_->nvls_tree_efficiency : 1.0;
  double window_us = 0.0;
  if (multi && algo != NcclAlgo::kRing && proto != NcclProto::kLL)
    window_us = std::min(bytes, hw_->pipeline_window_MB * 1e6) / (1000.0 * algbw_GBps(kind, algo, proto) * bw_scale);
  c.time_s = (time_us(kind, bytes, algo, proto, lat, bw_scale) + window_us) * 1e-6;
  c.algbw_GBps = bytes / c.time_s / 1e9;
  c.busbw_GBps = c.algbw_GBps * CollectiveModel::busbw_factor(kind, ranks());
  return c;
}

CollectiveCost HierarchicalModel::best(CollectiveKind kind, double bytes, std::optional<NcclAlgo> forced) const {
  CollectiveCost out;
  if (ranks() <= 1) return out;
  // A forced algorithm NCCL does not have for this collective leaves NCCL's choice (as on one node).
  if (forced && !available(kind, *forced)) forced.reset();
  double best_us = std::numeric_limits<double>::infinity();
  for (size_t a = 0; a < kNcclAlgoCount; ++a) {
    if (forced && static_cast<size_t>(*forced) != a) continue;
    for (size_t p = 0; p < kNcclProtoCount; ++p) {
      const double us = nccl_time_us(kind, bytes, static_cast<NcclAlgo>(a), static_cast<NcclProto>(p));
      if (us >= 0 && us < best_us) {
        best_us = us;
        out.algo = static_cast<NcclAlgo>(a);
        out.proto = static_cast<NcclProto>(p);
      }
    }
  }
  if (std::isinf(best_us)) {
    out.time_s = -1.0;
    return out;
  }
  return cost(kind, bytes, out.algo, out.proto);
}

}  // namespace gs
