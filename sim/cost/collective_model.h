// NCCL-style collective and point-to-point costs on one node of a hardware profile. Where the profile carries a
// measured bus-bandwidth curve (nccl-tests' all_reduce_perf table, per collective and algorithm) a call is priced
// from it, interpolated in log size; elsewhere by NCCL's own tuning model (src/graph/tuning.cc, ncclTopoTuneModel /
// ncclTopoGetAlgoTime) with the profile's fitted latency scale and per-collective launch cost. A new collective is
// one CollectiveKind plus its steps and nccl-tests bus-bandwidth factor here.
#pragma once
#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "sim/cost/hardware_profile.h"

namespace gs {

enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kCount };
constexpr size_t kCollectiveKindCount = static_cast<size_t>(CollectiveKind::kCount);
static_assert(kCollectiveKindCount == kProfileCollectiveCount, "profile curves follow CollectiveKind's order");
constexpr std::array<const char*, kCollectiveKindCount> kCollectiveKindNames = kProfileCollectiveNames;

// Where a priced time came from.
enum class CostSource {
  kModel,          // the analytic model (no curve for this collective and algorithm)
  kCurve,          // interpolated between two measured points
  kCurveExtended,  // beyond the measured sizes: the curve's end latency or bandwidth carried on
};
constexpr std::array<const char*, 3> kCostSourceNames = {"model", "curve", "curve+ext"};

// The priced collective: time and the algorithm/protocol that gives it.
struct CollectiveCost {
  double time_s = 0.0;     // < 0: this algorithm/protocol is not available for this call
  NcclAlgo algo = NcclAlgo::kRing;
  NcclProto proto = NcclProto::kSimple;
  double algbw_GBps = 0.0;  // bytes / time_s (nccl-tests' algbw)
  double busbw_GBps = 0.0;  // algbw x busbw_factor (nccl-tests' busbw)
  CostSource source = CostSource::kModel;
};

class HierarchicalModel;  // hierarchical.h

class CollectiveModel {
 public:
  // ranks: the communicator size (one rank per GPU of one node). forced: every collective that algorithm serves
  // uses it (cluster.nccl_algo, like NCCL_ALGO); the others keep NCCL's choice.
  CollectiveModel(const HardwareProfile& hw, int ranks, std::optional<NcclAlgo> forced = std::nullopt);

  // nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): all-reduce 2(n-1)/n, all-gather and reduce-scatter
  // (n-1)/n, broadcast 1.
  static double busbw_factor(CollectiveKind kind, int ranks);

  // NCCL's modeled algorithm bandwidth (GB/s) and latency (us) of one algorithm/protocol, NCCL's constants as they
  // are (the tuner's ranking); bandwidth 0 when NCCL would not use that combination here (NVLS without NVLink SHARP,
  // LL128 off NVLink, tree for non-all-reduce, ...).
  double algbw_GBps(CollectiveKind kind, NcclAlgo algo, NcclProto proto) const {
    return bw_[idx(kind)][static_cast<size_t>(algo)][static_cast<size_t>(proto)];
  }
  double latency_us(CollectiveKind kind, NcclAlgo algo, NcclProto proto) const {
    return lat_[idx(kind)][static_cast<size_t>(algo)][static_cast<size_t>(proto)];
  }
  // Whether NCCL has this algorithm for this collective here (some protocol has bandwidth; across nodes, the
  // hierarchical model's: tree and NVLSTree, named nvls, for all-reduce only).
  bool available(CollectiveKind kind, NcclAlgo algo) const;
  // Analytic time of one call moving `bytes` (NCCL's nBytes: the buffer of all-reduce and broadcast, the whole
  // gathered output of all-gather, the whole input of reduce-scatter) with one algorithm/protocol:
  // launch_us[kind] + latency_scale x NCCL's latency + bytes / algbw (ncclTopoGetAlgoTime plus the fitted terms).
  // time_s < 0 when unavailable. One rank: 0 s.
  CollectiveCost cost(CollectiveKind kind, double bytes, NcclAlgo algo, NcclProto proto) const;
  // One call with one algorithm, as NCCL_ALGO=<algo> runs it: the profile's measured curve for that collective
  // and algorithm when it has one, else the analytic model's fastest protocol. time_s < 0 when unavailable.
  CollectiveCost with_algo(CollectiveKind kind, double bytes, NcclAlgo algo) const;
  // The call as NCCL runs it by default: the forced algorithm where it serves this collective; else the profile's
  // "default" curve when it has one (algorithm and protocol: what NCCL's tuner ranks first by its own constants);
  // else the fastest of with_algo over the algorithms.
  CollectiveCost best(CollectiveKind kind, double bytes) const;
  // Point-to-point send of `bytes` to one peer (a parameter server's push or pull): p2p latency + bytes / NCCL's
  // per-GPU link bandwidth.
  double p2p_s(double bytes) const;
  double p2p_latency_s() const { return p2p_latency_s_; }
  double p2p_bandwidth_Bps() const { return p2p_bw_Bps_; }
  int ranks() const { return ranks_; }
  // Whether the call spans nodes (the hierarchical model prices it), and NCCL's name of an algorithm here: nvls is
  // NCCL's NVLSTree across nodes.
  bool multi_node() const { return multi_node_ != nullptr; }
  const char* algo_name(NcclAlgo algo) const { return algo_name(algo, multi_node()); }
  static const char* algo_name(NcclAlgo algo, bool multi_node) {
    return multi_node && algo == NcclAlgo::kNvls ? "nvlstree" : kNcclAlgoNames[static_cast<size_t>(algo)];
  }
  // Whether `ranks` on a multi-node profile (nodes > 1) span nodes: more ranks than one node's GPUs. They are priced on
  // nodes_spanned(hw, ranks) = ceil(ranks / gpus_per_node) nodes of gpus_per_node GPUs: a last, partial node at the
  // pace of a full one (its NICs and NVLink carry the same per-rank traffic in NCCL's rings and trees), and more nodes
  // than the profile has as more nodes of the same fabric (scenario_load's note says so).
  static bool spans_nodes(const HardwareProfile& hw, int ranks) { return hw.nodes > 1 && ranks > hw.gpus_per_node; }
  static int nodes_spanned(const HardwareProfile& hw, int ranks) {
    return (ranks + hw.gpus_per_node - 1) / hw.gpus_per_node;
  }

 private:
  static size_t idx(CollectiveKind k) { return static_cast<size_t>(k); }
  // NCCL's tuner ranking (unscaled constants): the algorithm and protocol it picks for this call.
  CollectiveCost tuner_choice(CollectiveKind kind, double bytes, std::optional<NcclAlgo> only) const;
  // The curve's time for `bytes` (seconds) and whether it is inside the measured sizes.
  double curve_time_s(const BusbwCurve& c, CollectiveKind kind, double bytes, bool* inside) const;
  // A call priced from a measured curve: its time, with the algorithm and protocol NCCL's tuner would pick (among
  // `only` when given), algbw/busbw and whether the size is inside the curve.
  CollectiveCost from_curve(const BusbwCurve& curve, CollectiveKind kind, double bytes,
                            std::optional<NcclAlgo> only) const;
  CollectiveCost finish(CollectiveCost c, CollectiveKind kind, double bytes) const;
  using Table = std::array<std::array<std::array<double, kNcclProtoCount>, kNcclAlgoCount>, kCollectiveKindCount>;
  const HardwareProfile* hw_;
  int ranks_;
  std::optional<NcclAlgo> forced_;
  double p2p_latency_s_;
  double p2p_bw_Bps_;
  Table bw_{};   // GB/s, algorithm bandwidth
  Table lat_{};  // us
  // More ranks than one node's GPUs on a multi-node profile (nodes > 1): the hierarchical model prices the call.
  std::shared_ptr<const HierarchicalModel> multi_node_;
};

// Parses an NCCL_ALGO-style name (ring, tree, nvls; any case; nvlstree, NCCL's name of NVLS across nodes, which the
// price table prints for nvls on a multi-node profile, is nvls); nullopt for "auto" or "". Throws gs::Error otherwise.
std::optional<NcclAlgo> nccl_algo_from_name(const std::string& name);

}  // namespace gs
