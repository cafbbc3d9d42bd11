// NCCL's tuning model for one node (ncclTopoTuneModel, nNodes = 1), written from its constants in the hardware
// profile. Bus bandwidth before refinements = NCCL's graph bandwidth: links x per-link bandwidth for ring and tree
// (the channel search fills the links), n/(n+1) of it for NVLS (the head GPU of each of n channels carries twice).
#include "sim/cost/collective_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/cost/hierarchical.h"

namespace gs {

CollectiveModel::CollectiveModel(const HardwareProfile& hw, int ranks, std::optional<NcclAlgo> forced)
    : hw_(&hw),
      ranks_(ranks),
      forced_(forced),
      p2p_latency_s_(hw.p2p_latency_us * 1e-6),
      p2p_bw_Bps_(hw.nccl_bw_GBps() * 1e9) {
  if (ranks <= 1) return;
  if (spans_nodes(hw, ranks))  // hierarchical.h
    multi_node_ = std::make_shared<const HierarchicalModel>(hw, nodes_spanned(hw, ranks), hw.gpus_per_node);
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

bool CollectiveModel::available(CollectiveKind kind, NcclAlgo algo) const {
  if (multi_node_) return multi_node_->available(kind, algo);
  for (size_t p = 0; p < kNcclProtoCount; ++p)
    if (algbw_GBps(kind, algo, static_cast<NcclProto>(p)) > 0) return true;
  return false;
}

CollectiveCost CollectiveModel::finish(CollectiveCost c, CollectiveKind kind, double bytes) const {
  c.algbw_GBps = c.time_s > 0 ? bytes / c.time_s / 1e9 : 0.0;
  c.busbw_GBps = c.algbw_GBps * busbw_factor(kind, ranks_);
  return c;
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
  // ncclTopoGetAlgoTime: time_us = lat + nBytes / (1000 * bw_GBps); plus the fitted launch cost and latency scale.
  c.time_s = (hw_->launch_us[idx(kind)] + hw_->latency_scale * latency_us(kind, algo, proto) +
              bytes / (1000.0 * bw)) * 1e-6;
  return finish(c, kind, bytes);
}

CollectiveCost CollectiveModel::tuner_choice(CollectiveKind kind, double bytes, std::optional<NcclAlgo> only) const {
  CollectiveCost out;
  double best_us = std::numeric_limits<double>::infinity();
  for (size_t a = 0; a < kNcclAlgoCount; ++a) {
    if (only && static_cast<size_t>(*only) != a) continue;
    for (size_t p = 0; p < kNcclProtoCount; ++p) {
      const double bw = bw_[idx(kind)][a][p];
      if (bw <= 0) continue;
      const double us = lat_[idx(kind)][a][p] + bytes / (1000.0 * bw);
      if (us < best_us) {
        best_us = us;
        out.algo = static_cast<NcclAlgo>(a);
        out.proto = static_cast<NcclProto>(p);
      }
    }
  }
  out.time_s = std::isinf(best_us) ? -1.0 : 0.0;
  return out;
}

double CollectiveModel::curve_time_s(const BusbwCurve& c, CollectiveKind kind, double bytes, bool* inside) const {
  const double f = busbw_factor(kind, ranks_);
  auto t = [&](size_t i) { return c.bytes[i] * f / (c.busbw_GBps[i] * 1e9); };  // nccl-tests: busbw = S f / t
  const size_t n = c.bytes.size();
  *inside = bytes >= c.bytes.front() && bytes <= c.bytes.back();
  if (bytes <= c.bytes.front()) {
    // Below the table: the latency and bandwidth of its first two points (t = alpha + S / beta); where the time
    // does not grow between them, the first point's time (latency-bound).
    const double dt = t(1) - t(0);
    if (dt <= 0) return t(0);
    const double beta = (c.bytes[1] - c.bytes[0]) / dt;
    const double alpha = t(0) - c.bytes[0] / beta;
    return alpha > 0 ? alpha + bytes / beta : t(0);
  }
  if (bytes >= c.bytes.back()) {
    // Above the table: the last point's time plus the rest at the bandwidth between its last two points (bounded
    // to [1, 2] x the last point's algbw, so that two noisy points cannot make it unbounded).
    const double algbw_last = c.bytes[n - 1] / t(n - 1);
    const double dt = t(n - 1) - t(n - 2);
    double beta = dt > 0 ? (c.bytes[n - 1] - c.bytes[n - 2]) / dt : 2.0 * algbw_last;
    beta = std::clamp(beta, algbw_last, 2.0 * algbw_last);
    return t(n - 1) + (bytes - c.bytes[n - 1]) / beta;
  }
  // Inside: busbw linear in log size between the two points around it (log time is then linear in log size too).
  size_t i = static_cast<size_t>(std::upper_bound(c.bytes.begin(), c.bytes.end(), bytes) - c.bytes.begin());
  if (i >= n) i = n - 1;
  const double x0 = std::log(c.bytes[i - 1]), x1 = std::log(c.bytes[i]);
  const double w = (std::log(bytes) - x0) / (x1 - x0);
  const double busbw = std::exp((1.0 - w) * std::log(c.busbw_GBps[i - 1]) + w * std::log(c.busbw_GBps[i]));
  return bytes * f / (busbw * 1e9);
}

namespace {

// The fastest of candidate(0) .. candidate(count - 1) that is available (time_s >= 0); `none` (time_s = +inf) when
// none is.
template <class Candidate>
CollectiveCost fastest(CollectiveCost none, size_t count, Candidate&& candidate) {
  none.time_s = std::numeric_limits<double>::infinity();
  CollectiveCost out = none;
  for (size_t i = 0; i < count; ++i) {
    const CollectiveCost c = candidate(i);
    if (c.time_s >= 0 && c.time_s < out.time_s) out = c;
  }
  return out;
}

}  // namespace

CollectiveCost CollectiveModel::from_curve(const BusbwCurve& curve, CollectiveKind kind, double bytes,
                                           std::optional<NcclAlgo> only) const {
  CollectiveCost out = tuner_choice(kind, bytes, only);  // the algorithm and protocol NCCL would take
  bool inside = false;
  out.time_s = curve_time_s(curve, kind, bytes, &inside);
  out.source = inside ? CostSource::kCurve : CostSource::kCurveExtended;
  return finish(out, kind, bytes);
}

CollectiveCost CollectiveModel::with_algo(CollectiveKind kind, double bytes, NcclAlgo algo) const {
  CollectiveCost out;
  out.algo = algo;
  if (ranks_ <= 1) return out;
  if (!available(kind, algo)) {
    out.time_s = -1.0;
    return out;
  }
  if (multi_node_) return multi_node_->best(kind, bytes, algo);
  const BusbwCurve& curve = hw_->curves[idx(kind)][static_cast<size_t>(algo)];
  if (!curve.empty()) return from_curve(curve, kind, bytes, algo);
  return fastest(out, kNcclProtoCount, [&](size_t p) { return cost(kind, bytes, algo, static_cast<NcclProto>(p)); });
}

CollectiveCost CollectiveModel::best(CollectiveKind kind, double bytes) const {
  if (ranks_ <= 1) return CollectiveCost{};
  if (multi_node_) return multi_node_->best(kind, bytes, forced_);
  if (forced_ && available(kind, *forced_)) return with_algo(kind, bytes, *forced_);
  const BusbwCurve& def = hw_->curves[idx(kind)][kCurveDefault];
  if (!def.empty()) return from_curve(def, kind, bytes, std::nullopt);
  return fastest(CollectiveCost{}, kNcclAlgoCount,
                 [&](size_t a) { return with_algo(kind, bytes, static_cast<NcclAlgo>(a)); });
}

double CollectiveModel::p2p_s(double bytes) const {
  if (bytes <= 0) return 0.0;
  return p2p_latency_s_ + bytes / p2p_bw_Bps_;
}

std::optional<NcclAlgo> nccl_algo_from_name(const std::string& name) {
  std::string n;
  for (char ch : name) n += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (n.empty() || n == "auto") return std::nullopt;
  if (n == "nvlstree") return NcclAlgo::kNvls;  // the table's name of nvls across nodes
  for (size_t a = 0; a < kNcclAlgoCount; ++a)
    if (n == kNcclAlgoNames[a]) return static_cast<NcclAlgo>(a);
  throw Error(fmt::format("unknown NCCL algorithm \"{}\"; expected auto, ring, tree, nvls or nvlstree", name));
}

}  // namespace gs
