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

struct HardwareProfile {
  std::string name;         // e.g. "h100-sxm-8"
  std::string description;
  std::string gpu;
  std::string arch;         // hopper | ampere
  std::string file;         // where it was read from
  int gpus_per_node = 1;
  // Compute.
  std::array<double, kPrecisionCount> peak_tflops{};  // dense, per GPU
  double achievable_fraction = 1.0;                   // of peak_tflops on real ops
  double hbm_TBps = 0.0;
  double hbm_achievable_fraction = 1.0;
  double launch_overhead_us = 0.0;                    // per kernel launch
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

  // NCCL's per-GPU intra-node bandwidth: links x per-link bandwidth (GB/s).
  double nccl_bw_GBps() const { return nccl_links * nccl_link_bw_GBps; }
};

// Folder of the built-in profiles: $GRADSWEEP_HARDWARE_DIR, else ./scenarios/hardware when it exists, else the
// source tree's scenarios/hardware.
std::string hardware_dir();
// Names of the built-in profiles (file names without .json), sorted.
std::vector<std::string> hardware_profile_names();
// Loads a profile by built-in name or by path (anything with a '/' or ending in .json). Cached per process
// (thread-safe). Throws gs::Error: unknown name (naming the choices), unreadable file; ProfileError with one
// "file: JSON path: expected ..., got ..." per missing or mistyped field, number without its source or unknown key,
// all of them (a check that depends on a bad field, e.g. fabric.nvls on fabric.kind, is skipped).
std::shared_ptr<const HardwareProfile> load_hardware_profile(const std::string& name_or_path);
// Parses profile JSON text; file names it in errors.
HardwareProfile parse_hardware_profile(const std::string& text, const std::string& file);

Precision precision_from_name(const std::string& name);  // throws gs::Error for an unknown name

}  // namespace gs
