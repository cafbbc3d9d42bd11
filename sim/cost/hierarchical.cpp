// HierarchicalModel (hierarchical.h): NCCL's multi-node ring and tree, per
// level.
#include "sim/core/count_text.h"
#include "sim/cost/hierarchical.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace gs {

HierarchicalModel::HierarchicalModel(const HardwareProfile &hw, int nodes,
                                     int gpus_per_node)
    : hw_(&hw), nodes_(nodes), gpn_(gpus_per_node) {
  GS_EXPECT(nodes >= 1 && gpus_per_node >= 1,
            fmt::format("HierarchicalModel: expected nodes >= 1 and "
                        "gpus_per_node >= 1, got {} and {}",
                        nodes, gpus_per_node));
  GS_EXPECT(nodes == 1 || hw.nics_per_node > 0,
            fmt::format("{}: internode: expected an inter-node level to price {}, got none", hw.file,
                        count_text(nodes, "node")));
}

double HierarchicalModel::bus_GBps(CollectiveKind kind, NcclAlgo algo,
                                   NcclProto proto) const {
  const bool allreduce = kind == CollectiveKind::kAllReduce;
  if (ranks() <= 1 || algo == NcclAlgo::kNvls)
    return 0.0; // NVLS across nodes (NVLSTree): not modeled
  if (algo == NcclAlgo::kTree && !allreduce)
    return 0.0;
  if (kind == CollectiveKind::kBroadcast && algo != NcclAlgo::kRing)
    return 0.0;
  if (proto == NcclProto::kLL128 && !hw_->ll128)
    return 0.0;
  double bus = hw_->nccl_bw_GBps();
  if (nodes_ > 1)
    bus = std::min(bus, hw_->internode_GBps());
  const double ch = hw_->channels;
  if (algo == NcclAlgo::kRing) {
    if (proto == NcclProto::kLL)
      bus = std::min(hw_->ll_max_bw_GBps,
                     bus * (allreduce ? 1.0 / 4.0 : 1.0 / 3.0));
    if (proto == NcclProto::kLL128)
      bus = std::min(bus * 0.92, ch * hw_->per_channel_max_ring_ll128_GBps);
    return bus;
  }
  bus = std::min(bus * 0.92, ch * hw_->per_channel_max_tree_GBps);
  if (proto == NcclProto::kLL)
    bus = std::min(bus / 3.8, hw_->ll_max_bw_GBps);
  if (proto == NcclProto::kLL128)
    bus = std::min(bus * 7.0 / 9.0, ch * hw_->per_channel_max_tree_ll128_GBps);
  return bus;
}

double HierarchicalModel::latency_us(CollectiveKind kind, NcclAlgo algo,
                                     NcclProto proto) const {
  const size_t a = static_cast<size_t>(algo), p = static_cast<size_t>(proto);
  const double n = ranks(), nodes = nodes_;
  const double intra = hw_->hw_lat_us[a][p];
  const double inter =
      nodes_ > 1 ? hw_->net_hw_lat_us[a][p] + hw_->internode_latency_us : intra;
  double lat = hw_->base_lat_us[a][p];
  if (algo == NcclAlgo::kTree)
    return lat + 2.0 * ((gpn_ - 1) * intra + std::log2(nodes) * inter);
  const bool allreduce = kind == CollectiveKind::kAllReduce;
  if (kind == CollectiveKind::kBroadcast)
    return lat + (nodes_ > 1 ? inter : intra);
  const double nsteps = allreduce ? 2.0 * (n - 1) : n - 1;
  const double ninter = nodes_ == 1 ? 0.0
                        : allreduce ? 2.0 * (nodes - 1)
                                    : nodes - 1;
  return lat + (nsteps - ninter) * intra + ninter * inter;
}

CollectiveCost HierarchicalModel::cost(CollectiveKind kind, double bytes,
                                       NcclAlgo algo, NcclProto proto) const {
  CollectiveCost c;
  c.algo = algo;
  c.proto = proto;
  if (ranks() <= 1)
    return c;
  const double bus = bus_GBps(kind, algo, proto);
  if (bus <= 0) {
    c.time_s = -1.0;
    return c;
  }
  const double n = ranks();
  const double nsteps = kind == CollectiveKind::kAllReduce   ? 2.0 * (n - 1)
                        : kind == CollectiveKind::kBroadcast ? n
                                                             : n - 1;
  const double algbw = algo == NcclAlgo::kRing ? bus * n / nsteps : bus * 0.5;
  const size_t k = static_cast<size_t>(kind);
  c.time_s =
      (hw_->launch_us[k] + hw_->latency_scale * latency_us(kind, algo, proto) +
       bytes / (1000.0 * algbw)) *
      1e-6;
  c.algbw_GBps = bytes / c.time_s / 1e9;
  c.busbw_GBps = c.algbw_GBps * CollectiveModel::busbw_factor(kind, ranks());
  return c;
}

CollectiveCost HierarchicalModel::best(CollectiveKind kind, double bytes,
                                       std::optional<NcclAlgo> forced) const {
  CollectiveCost out;
  if (ranks() <= 1)
    return out;
  out.time_s = std::numeric_limits<double>::infinity();
  for (size_t a = 0; a < kNcclAlgoCount; ++a) {
    if (forced && static_cast<size_t>(*forced) != a)
      continue;
    for (size_t p = 0; p < kNcclProtoCount; ++p) {
      const CollectiveCost c = cost(kind, bytes, static_cast<NcclAlgo>(a),
                                    static_cast<NcclProto>(p));
      if (c.time_s >= 0 && c.time_s < out.time_s)
        out = c;
    }
  }
  if (std::isinf(out.time_s))
    out.time_s = -1.0;
  return out;
}

} // namespace gs
