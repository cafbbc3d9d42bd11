// Hardware profiles of the modeled clock: one JSON file per node type in scenarios/hardware/ (every number there is
// {"value": x, "source": "..."}). A new profile is one file in that folder; a new field is one member here and one
// read in hardware_profile.cpp.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "sim/core/error.h"

namespace gs {

// Every problem of one profile file (hardware or storage), not only the first: problems()[i] is "file: JSON path:
// expected ..., got ..." (what() joins them with newlines).
class ProfileError : public Error {
 public:
  explicit ProfileError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

// Compute precision of an op; the index into HardwareProfile::peak_tflops.
enum class Precision { kFp32, kTf32, kBf16, kFp16, kFp8, kCount };
constexpr size_t kPrecisionCount = static_cast<size_t>(Precision::kCount);
constexpr std::array<const char*, kPrecisionCount> kPrecisionNames = {"fp32", "tf32", "bf16", "fp16", "fp8"};

// NCCL's algorithms and protocols, in NCCL's index order (tuning.cc).
enum class NcclAlgo { kTree, kRing, kNvls, kCount };
enum class NcclProto { kLL, kLL128, kSimple, kCount };
constexpr size_t kNcclAlgoCount = static_cast<size_t>(NcclAlgo::kCount);
constexpr size_t kNcclProtoCount = static_cast<size_t>(NcclProto::kCount);
constexpr std::array<const char*, kNcclAlgoCount> kNcclAlgoNames = {"tree", "ring", "nvls"};
constexpr std::array<const char*, kNcclProtoCount> kNcclProtoNames = {"LL", "LL128", "Simple"};

// Collectives a profile can carry measured curves and launch overheads for (collective_model.h's CollectiveKind,
// same order).
constexpr size_t kProfileCollectiveCount = 4;
constexpr std::array<const char*, kProfileCollectiveCount> kProfileCollectiveNames = {"all_reduce", "all_gather",
                                                                                      "reduce_scatter", "broadcast"};
// A curve's algorithm slot: forced with NCCL_ALGO (tree, ring, nvls: NcclAlgo's order), or NCCL's own choice at
// each size ("default", what all_reduce_perf measures without NCCL_ALGO).
constexpr size_t kCurveDefault = kNcclAlgoCount;
constexpr size_t kCurveSlotCount = kNcclAlgoCount + 1;
constexpr std::array<const char*, kCurveSlotCount> kCurveSlotNames = {"tree", "ring", "nvls", "default"};

// A measured bus-bandwidth curve (nccl-tests' busbw column against its size column), sizes strictly increasing.
// Empty: no measurement, the analytic model prices that collective and algorithm.
struct BusbwCurve {
  std::vector<double> bytes;       // NCCL's nBytes of the call (nccl-tests' "size")
  std::vector<double> busbw_GBps;  // nccl-tests' busbw at that size
  std::string source;
  bool empty() const { return bytes.empty(); }
};

struct HardwareProfile {
  std::string name;         // e.g. "h100-sxm-8"
  std::string description;
  std::string gpu;
  std::string arch;         // hopper | ampere
  std::string file;         // where it was read from
  int gpus_per_node = 1;
  // Compute (compute_model.h).
  std::array<double, kPrecisionCount> peak_tflops{};      // dense, per GPU
  std::array<double, kPrecisionCount> gemm_efficiency{};  // of peak_tflops that large GEMMs reach (cuBLAS)
  double gemm_half_gflop = 0.0;       // a GEMM of this many GFLOP reaches half of gemm_efficiency (size falloff)
  double gemm_half_intensity = 0.0;   // FLOP/byte at which a GEMM reaches half of it (skinny falloff); 0: none
  double attention_efficiency = 1.0;  // of the 16-bit peak that fused (FlashAttention-style) attention reaches
  double hbm_TBps = 0.0;
  double hbm_achievable_fraction = 1.0;  // of hbm_TBps that streaming (STREAM-like) kernels reach
  double sustained_fraction = 1.0;    // of the microbenchmark rates a training loop sustains (fitted end to end)
  double launch_overhead_us = 0.0;    // per kernel launch
  // Intra-node fabric.
  std::string fabric;                // nvlink | pcie
  double link_GBps_per_direction = 0.0;  // datasheet, per GPU
  int nccl_links = 1;
  double nccl_link_bw_GBps = 0.0;    // NCCL's usable bandwidth per link (topo.h)
  int channels = 1;
  bool nvls = false;
  // NCCL tuning constants (tuning.cc), [algo][proto] in microseconds.
  std::array<std::array<double, kNcclProtoCount>, kNcclAlgoCount> base_lat_us{};
  std::array<std::array<double, kNcclProtoCount>, kNcclAlgoCount> hw_lat_us{};
  double ll_max_bw_GBps = 0.0;
  double per_channel_max_ring_ll128_GBps = 0.0;
  double per_channel_max_tree_GBps = 0.0;
  double per_channel_max_tree_ll128_GBps = 0.0;
  bool ll128 = false;
  double p2p_latency_us = 0.0;
  // Fitted to measured curves (gradsweep calibrate): NCCL's tuning latencies are meant to rank algorithms, so the
  // analytic model multiplies them by latency_scale and adds a per-collective launch / enqueue cost.
  double latency_scale = 1.0;
  std::array<double, kProfileCollectiveCount> launch_us{};
  // Measured curves: curves[collective][slot] (slot: kCurveSlotNames).
  std::array<std::array<BusbwCurve, kCurveSlotCount>, kProfileCollectiveCount> curves{};
  // GPU memory (section "memory"; the GPU memory estimate, sim/app/memory.h).
  double memory_capacity_GiB = 0.0;     // the device memory of one GPU, datasheet value (binary units, 2^30 bytes)
  double memory_usable_fraction = 1.0;  // of the capacity, what a training process can hold in tensors
  // Multi-node clusters (optional "nodes", 1; section "internode", required when nodes > 1; sim/cost/hierarchical.h
  // prices it): nodes of gpus_per_node GPUs joined by nics_per_node NICs of nic_Gbps each per node.
  int nodes = 1;
  std::string internode_kind;            // ib | roce ("" on one node)
  double nic_Gbps = 0.0;                 // line rate of one NIC (Gb/s)
  int nics_per_node = 0;
  double nic_achievable_fraction = 1.0;  // of the line rate that nccl-tests' busbw reaches across nodes
  // NCCL's graph latencyInter: the latency the NET plugin reports for its NICs, added to every inter-node hop (twice
  // for Simple: tuning.cc's flush); net_ib reports 0.
  double internode_latency_us = 0.0;
  // NCCL's hwLat[NCCL_HW_NET] per algorithm [LL, LL128, Simple] (NcclAlgo order: tree, ring, and at kNvls the
  // NVLSTree row, NCCL's NVLS algorithm across nodes).
  std::array<std::array<double, kNcclProtoCount>, kNcclAlgoCount> net_hw_lat_us{};
  // NCCL's node-count-dependent constants (tuning.cc), [0] for 2 nodes (NCCL's N2 column), [1] for more (N4); the
  // LL cap's multi-node rows are chosen by the host CPU's vendor, the per-channel caps by the GPU generation.
  std::array<double, 2> internode_ll_max_bw_GBps{};
  std::array<double, 2> internode_per_channel_max_ring_ll128_GBps{};
  std::array<double, 2> internode_per_channel_max_tree_GBps{};
  std::array<double, 2> internode_per_channel_max_tree_ll128_GBps{};
  // NCCL's network post overhead per ring step (getNetOverhead: x86 Intel 1 us, AMD 2 us; x3 for Simple).
  double net_overhead_us = 0.0;
  // Fitted on one published multi-node table per interconnect (docs/cost-model.md, "Multi-node rows"; optional):
  // NVLSTree's bus bandwidth as a fraction of NCCL's model of it (1: NCCL's), and the bytes a tree or NVLSTree
  // all-reduce moves (LL128, Simple) before its intra- and inter-node stages overlap: the price adds
  // min(bytes, window) / algbw (0: none). sim/cost/hierarchical.h.
  double nvls_tree_efficiency = 1.0;
  double pipeline_window_MB = 0.0;
  // The inter-node bandwidth one node's NICs give a ring or tree (GB/s): NICs x line rate / 8 x achievable fraction.
  double internode_GBps() const { return nics_per_node * nic_Gbps / 8.0 * nic_achievable_fraction; }

  // NCCL's per-GPU intra-node bandwidth: links x per-link bandwidth (GB/s).
  double nccl_bw_GBps() const { return nccl_links * nccl_link_bw_GBps; }
  // One GPU's memory in bytes, and the part of it a run may use (capacity x usable fraction).
  double memory_capacity_bytes() const { return memory_capacity_GiB * 1073741824.0; }
  double memory_usable_bytes() const { return memory_capacity_bytes() * memory_usable_fraction; }
};

// Folder of the built-in profiles: $GRADSWEEP_HARDWARE_DIR, else ./scenarios/hardware when it exists, else the
// source tree's scenarios/hardware.
std::string hardware_dir();
// Names of the built-in profiles (file names without .json), sorted.
std::vector<std::string> hardware_profile_names();
// Whether name_or_path names a profile file rather than a built-in profile: it has a '/' or ends in .json.
bool is_hardware_profile_path(const std::string& name_or_path);
// Loads a profile by built-in name or by path (is_hardware_profile_path). Cached per process
// (thread-safe). Throws gs::Error: unknown name (naming the choices), unreadable file; ProfileError with one
// "file: JSON path: expected ..., got ..." per missing or mistyped field, number without its source or unknown key,
// all of them (a check that depends on a bad field, e.g. fabric.nvls on fabric.kind, is skipped).
std::shared_ptr<const HardwareProfile> load_hardware_profile(const std::string& name_or_path);
// Parses profile JSON text; file names it in errors.
HardwareProfile parse_hardware_profile(const std::string& text, const std::string& file);

Precision precision_from_name(const std::string& name);  // throws gs::Error for an unknown name

}  // namespace gs
