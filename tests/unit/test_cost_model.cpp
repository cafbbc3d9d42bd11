// Tests of the modeled clock (sim/cost): hardware profiles load with their sources and fail with clear errors; the
// NCCL-style all-reduce model against published nccl-tests figures (written below with their sources, never taken
// from the model); compute roofline; DDP overlap arithmetic on hand-made schedules; straggler expectations.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "sim/core/error.h"
#include "sim/core/json_io.h"
#include "sim/cost/collective_model.h"
#include "sim/cost/compute_model.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/hardware_profile.h"
#include "sim/model/model.h"
#include "sim/app/memory.h"
#include "sim/runtime/rank_loop.h"

namespace gs {
namespace {

constexpr double kMiB = 1048576.0;
constexpr double kGiB = 1073741824.0;

// Published 8-GPU all-reduce bus bandwidths (nccl-tests all_reduce_perf, large messages), GB/s:
// - 8x H100 SXM, NCCL_ALGO=Ring: about 360-370 (NVIDIA DGX H100 nccl-tests runs; midpoint 365).
// - 8x H100/H200 SXM with NVLink SHARP (NVLS, NCCL >= 2.17 default): about 480 from 1 GiB up (the Azure tables in
//   tools/data/published_figures.json: 466-479 at 1-8 GiB, 423-432 at 256 MiB).
// - 8x A100 SXM 80GB (NVLink 3, ring): about 235.
constexpr double kPublishedH100RingBusbw = 365.0;
constexpr double kPublishedNvlsBusbw = 480.0;
constexpr double kPublishedA100Busbw = 235.0;

TEST(HardwareProfile, BuiltInProfilesLoadWithEveryField) {
  std::vector<std::string> names = hardware_profile_names();
  for (const char* want : {"a100-sxm-8", "h100-pcie-8", "h100-sxm-8", "h200-1", "h200-sxm-8"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  auto h100 = load_hardware_profile("h100-sxm-8");
  EXPECT_EQ(h100->name, "h100-sxm-8");
  EXPECT_DOUBLE_EQ(h100->peak_tflops[static_cast<size_t>(Precision::kBf16)], 989.4);  // datasheet, dense
  EXPECT_DOUBLE_EQ(h100->peak_tflops[static_cast<size_t>(Precision::kFp8)], 1978.9);
  EXPECT_DOUBLE_EQ(h100->hbm_TBps, 3.35);
  EXPECT_DOUBLE_EQ(load_hardware_profile("h200-sxm-8")->hbm_TBps, 4.8);
  EXPECT_DOUBLE_EQ(load_hardware_profile("a100-sxm-8")->hbm_TBps, 2.039);
  EXPECT_DOUBLE_EQ(h100->link_GBps_per_direction, 450.0);
  EXPECT_DOUBLE_EQ(load_hardware_profile("a100-sxm-8")->link_GBps_per_direction, 300.0);
  // NCCL's ring constants (tuning.cc): base 6.6/14.0/8.4 us, per NVLink hop 0.6/1.9/3.4 us.
  EXPECT_DOUBLE_EQ(h100->base_lat_us[1][0], 6.6);
  EXPECT_DOUBLE_EQ(h100->base_lat_us[1][1], 14.0);
  EXPECT_DOUBLE_EQ(h100->base_lat_us[1][2], 8.4);
  EXPECT_DOUBLE_EQ(h100->hw_lat_us[1][0], 0.6);
  EXPECT_DOUBLE_EQ(h100->hw_lat_us[1][1], 1.9);
  EXPECT_DOUBLE_EQ(h100->hw_lat_us[1][2], 3.4);
  EXPECT_TRUE(h100->nvls);
  EXPECT_FALSE(load_hardware_profile("h100-pcie-8")->nvls);
  EXPECT_EQ(load_hardware_profile("h100-pcie-8")->fabric, "pcie");
}

TEST(HardwareProfile, UnknownNameListsTheChoices) {
  try {
    load_hardware_profile("h900-sxm-8");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("unknown hardware profile \"h900-sxm-8\""), std::string::npos) << m;
    EXPECT_NE(m.find("h100-sxm-8"), std::string::npos) << m;
    EXPECT_NE(m.find("a100-sxm-8"), std::string::npos) << m;
  }
}

TEST(HardwareProfile, ErrorsNameFilePathAndExpectation) {
  auto expect_error = [](const std::string& text, const std::string& want) {
    try {
      parse_hardware_profile(text, "my.json");
      FAIL() << "expected an error for " << want;
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("my.json"), std::string::npos) << m;
      EXPECT_NE(m.find(want), std::string::npos) << m;
    }
  };
  expect_error("{", "not valid JSON");
  expect_error(R"({"name": 3})", "name: expected a string");
  // A number without its source is refused.
  std::string base = R"({"name": "x", "description": "d", "gpu": "g", "arch": "hopper", "gpus_per_node": )";
  expect_error(base + R"(8})", "gpus_per_node: expected {\"value\": <an integer in [1, 1024]>, \"source\": \"<where "
                              "it comes from>\"}, got 8");
  expect_error(base + R"({"value": 8, "source": ""}})", "gpus_per_node.source: expected a non-empty string");
  expect_error(base + R"({"value": 8, "source": "s"}})", "compute.peak_tflops.fp32: expected");
}

// QA: a missing or mistyped profile number said "expected a number" without the format. Each kind of field (number,
// integer, bool, latency triple) missing, given bare, or given as an object without "value" says the format
// {"value": <...>, "source": "<where it comes from>"} of docs/cost-model.md's profiles.
TEST(HardwareProfile, MissingOrMistypedFieldsSayTheFormat) {
  std::ifstream in(hardware_dir() + "/h100-sxm-8.json");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str());
  j["compute"].erase("hbm_TBps");                               // missing number
  j["fabric"]["channels"] = 16;                                 // bare integer
  j["nccl"]["ll128"] = {{"source", "s"}};                       // object without "value"
  j["nccl"]["hw_lat_us"]["tree"] = nlohmann::json::array({1, 2, 3});  // bare triple
  const std::string fmt_tail = ", \"source\": \"<where it comes from>\"}";
  const std::vector<std::string> want = {
      "my.json: compute.hbm_TBps: expected {\"value\": <a number in [1e-06, 1000000]>" + fmt_tail + ", got nothing",
      "my.json: fabric.channels: expected {\"value\": <an integer in [1, 64]>" + fmt_tail + ", got 16",
      "my.json: nccl.hw_lat_us.tree: expected {\"value\": <[LL, LL128, Simple] in microseconds>" + fmt_tail +
          ", got [1,2,3]",
      "my.json: nccl.ll128.value: expected true or false (the profile's numbers are {\"value\": <true or false>" +
          fmt_tail + "), got nothing"};
  try {
    parse_hardware_profile(j.dump(), "my.json");
    FAIL() << "accepted";
  } catch (const ProfileError& e) {
    std::set<std::string> got(e.problems().begin(), e.problems().end());
    std::string all;
    for (const auto& p : e.problems()) all += p + "\n";
    EXPECT_EQ(e.problems().size(), want.size()) << all;
    for (const auto& w : want) EXPECT_TRUE(got.count(w)) << w << "\nnot in:\n" << all;
  }
}

// QA6 F9: "fabric": [] said "got nothing" for each of the section's fields; a section that is there but is not an
// object is one problem at the section, showing what it got. Another section's problem is still listed.
TEST(HardwareProfile, ASectionThatIsNotAnObjectIsOneProblem) {
  std::ifstream in(hardware_dir() + "/h100-sxm-8.json");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str());
  j["fabric"] = nlohmann::json::array();
  j["nccl"] = 7;
  j["compute"].erase("hbm_TBps");
  try {
    parse_hardware_profile(j.dump(), "my.json");
    FAIL() << "accepted";
  } catch (const ProfileError& e) {
    std::string all;
    for (const auto& p : e.problems()) all += p + "\n";
    const std::string tail = ": expected an object (a section of the profile, as in scenarios/hardware/h100-sxm-8.json)";
    const std::vector<std::string> want = {"my.json: fabric" + tail + ", got []", "my.json: nccl" + tail + ", got 7"};
    for (const auto& w : want) {
      size_t n = 0;
      for (const auto& p : e.problems()) n += p == w;
      EXPECT_EQ(n, 1u) << w << "\n" << all;
    }
    ASSERT_EQ(e.problems().size(), 3u) << all;  // + compute.hbm_TBps missing
    EXPECT_EQ(all.find("fabric."), std::string::npos) << all;
    EXPECT_EQ(all.find("nccl."), std::string::npos) << all;
  }
}

TEST(HardwareProfile, UnknownKeysAreRefusedWithTheirPath) {
  std::ifstream in(hardware_dir() + "/h100-sxm-8.json");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json shipped = nlohmann::json::parse(ss.str());
  EXPECT_EQ(parse_hardware_profile(shipped.dump(), "my.json").name, "h100-sxm-8");  // the shipped file is clean
  auto expect_refused = [](const nlohmann::json& j, const std::string& path) {
    try {
      parse_hardware_profile(j.dump(), "my.json");
      FAIL() << "expected an error for " << path;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("my.json: " + path + ": expected no such key"), std::string::npos) << m;
    }
  };
  nlohmann::json top = shipped;
  top["bogus"] = 1;
  expect_refused(top, "bogus");
  nlohmann::json misspelt = shipped;
  misspelt["fabric"]["nvlinks"] = {{"value", 18}, {"source", "s"}};
  expect_refused(misspelt, "fabric.nvlinks");
  nlohmann::json extra = shipped;
  extra["compute"]["hbm_TBps"]["unit"] = "TB/s";
  expect_refused(extra, "compute.hbm_TBps.unit");
}

// Every problem of a profile at once (not the first only), each naming the file, the JSON path and what was
// expected; a check that depends on a bad field (fabric.nvls needs fabric.kind) is skipped.
TEST(HardwareProfile, EveryProblemIsListedAtOnce) {
  std::ifstream in(hardware_dir() + "/h100-sxm-8.json");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str());
  ASSERT_TRUE(j["fabric"]["nvls"]["value"].get<bool>());  // the test's dependent check needs an NVLS profile
  // Five independent mistakes, one dependent on the third.
  j["gpus_per_node"]["value"] = "eight";                  // 1: not an integer
  j["compute"].erase("hbm_TBps");                         // 2: missing
  j["fabric"]["kind"] = "ethernet";                       // 3: not a choice (fabric.nvls true is then not judged)
  j["nccl"]["base_lat_us"]["ring"]["source"] = "";        // 4: a number without its source
  j["compute"]["sm_count"] = 132;                         // 5: unknown key
  const std::vector<std::string> want = {
      "my.json: gpus_per_node.value: expected an integer", "my.json: compute.hbm_TBps: expected {\"value\"",
      "my.json: fabric.kind: expected \"nvlink\" or \"pcie\"",
      "my.json: nccl.base_lat_us.ring.source: expected a non-empty string",
      "my.json: compute.sm_count: expected no such key"};
  try {
    parse_hardware_profile(j.dump(), "my.json");
    FAIL() << "accepted";
  } catch (const ProfileError& e) {
    std::string all;
    for (const auto& p : e.problems()) all += p + "\n";
    ASSERT_EQ(e.problems().size(), want.size()) << all;
    for (const auto& w : want) {
      bool found = false;
      for (const auto& p : e.problems()) found = found || p.rfind(w, 0) == 0;
      EXPECT_TRUE(found) << w << "\n" << all;
    }
    EXPECT_EQ(all.find("fabric.nvls"), std::string::npos) << all;
  }
}

// A profile with "base": the base's fields under its own; the base's measured curves are dropped when the GPU count
// differs (measured on the base's count), kept when it is the same. Expected values read from the base file itself.
TEST(HardwareProfile, ABaseIsInheritedAndItsCurvesDroppedWhenTheGpuCountDiffers) {
  std::ifstream in(hardware_dir() + "/h100-sxm-8.json");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json base = nlohmann::json::parse(ss.str());
  ASSERT_TRUE(base["collectives"]["all_reduce"].contains("default"));  // the premise: the base has a curve
  auto four = load_hardware_profile("h100-sxm-4");
  EXPECT_EQ(four->name, "h100-sxm-4");
  EXPECT_EQ(four->gpus_per_node, 4);
  EXPECT_EQ(four->gpu, base["gpu"].get<std::string>());
  EXPECT_DOUBLE_EQ(four->peak_tflops[static_cast<size_t>(Precision::kBf16)],
                   base["compute"]["peak_tflops"]["bf16"]["value"].get<double>());
  EXPECT_DOUBLE_EQ(four->latency_scale, base["nccl"]["latency_scale"]["value"].get<double>());
  EXPECT_DOUBLE_EQ(four->memory_capacity_GiB, base["memory"]["capacity_GiB"]["value"].get<double>());
  for (const auto& kind : four->curves)
    for (const auto& c : kind) EXPECT_TRUE(c.empty());
  // The same GPU count keeps the curves; a sourced number is replaced whole, its section's other members stay.
  const auto dir = std::filesystem::temp_directory_path() / ("gs-base-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "mine.json").string();
  std::ofstream(file) << R"({"base": "h100-sxm-8", "name": "mine",
    "compute": {"hbm_TBps": {"value": 3.0, "source": "my measurement"}}})";
  const HardwareProfile mine = parse_hardware_profile(read_json_file_text(file), file);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(mine.name, "mine");
  EXPECT_EQ(mine.gpus_per_node, base["gpus_per_node"]["value"].get<int>());
  EXPECT_DOUBLE_EQ(mine.hbm_TBps, 3.0);
  EXPECT_DOUBLE_EQ(mine.hbm_achievable_fraction, base["compute"]["hbm_achievable_fraction"]["value"].get<double>());
  const auto& points = base["collectives"]["all_reduce"]["default"]["value"];
  ASSERT_EQ(mine.curves[0][kCurveDefault].bytes.size(), points.size());
  EXPECT_DOUBLE_EQ(mine.curves[0][kCurveDefault].busbw_GBps.back(), points.back()[1].get<double>());
}

// A bad "base" is one problem naming the file, the JSON path "base" and what was expected: not a string, an unknown
// name, a missing file, the file itself (a cycle), a base that has a base of its own (chains are refused).
TEST(HardwareProfile, ABadBaseIsRefusedWithTheFileAndWhy) {
  const auto dir = std::filesystem::temp_directory_path() / ("gs-badbase-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto error_of = [&](const std::string& name, const std::string& text) {
    const std::string file = (dir / name).string();
    std::ofstream(file) << text;
    try {
      parse_hardware_profile(read_json_file_text(file), file);
    } catch (const ProfileError& e) {
      EXPECT_EQ(e.problems().size(), 1u) << e.what();
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string at = (dir / "p.json").string() + ": base: expected ";
  std::string m = error_of("p.json", R"({"base": 8, "name": "p"})");
  EXPECT_EQ(m.rfind(at + "the name of a built-in hardware profile or a profile file's path, got 8", 0), 0u) << m;
  m = error_of("p.json", R"({"base": "h900-sxm-8", "name": "p"})");
  EXPECT_EQ(m.rfind(at + "a built-in hardware profile (", 0), 0u) << m;
  EXPECT_NE(m.find("h100-sxm-8"), std::string::npos) << m;
  EXPECT_NE(m.find("got unknown profile \"h900-sxm-8\""), std::string::npos) << m;
  m = error_of("p.json", R"({"base": "./absent.json", "name": "p"})");
  EXPECT_EQ(m.rfind(at + "a readable profile file, got \"./absent.json\"", 0), 0u) << m;
  m = error_of("p.json", R"({"base": "./p.json", "name": "p"})");
  EXPECT_EQ(m.rfind(at + "another profile, got \"./p.json\": this file itself (a cycle)", 0), 0u) << m;
  // Two files naming each other: a cycle, refused as a chain at the first step.
  error_of("q.json", R"({"base": "./p.json", "name": "q"})");
  m = error_of("p.json", R"({"base": "./q.json", "name": "p"})");
  EXPECT_EQ(m.rfind(at + "a profile without a base of its own, got \"./q.json\"", 0), 0u) << m;
  m = error_of("p.json", R"({"base": "h100-sxm-4", "name": "p"})");  // a shipped derived profile
  EXPECT_EQ(m.rfind(at + "a profile without a base of its own, got \"h100-sxm-4\"", 0), 0u) << m;
  EXPECT_NE(m.find("derived from \"h100-sxm-8\""), std::string::npos) << m;
  std::filesystem::remove_all(dir);
}

TEST(CollectiveModel, BusbwFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(CollectiveModel::busbw_factor(CollectiveKind::kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(CollectiveModel::busbw_factor(CollectiveKind::kAllGather, 8), 0.875);
  EXPECT_DOUBLE_EQ(CollectiveModel::busbw_factor(CollectiveKind::kReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(CollectiveModel::busbw_factor(CollectiveKind::kBroadcast, 8), 1.0);
}

// Large messages, 1 GiB to 8 GiB: the modeled busbw is within 10% of the published figure.
void expect_large_busbw(const CollectiveModel& m, bool ring_only, double published) {
  for (double bytes : {1 * kGiB, 2 * kGiB, 8 * kGiB}) {
    CollectiveCost c = ring_only ? m.cost(CollectiveKind::kAllReduce, bytes, NcclAlgo::kRing, NcclProto::kSimple)
                                 : m.best(CollectiveKind::kAllReduce, bytes);
    EXPECT_NEAR(c.busbw_GBps, published, 0.10 * published) << bytes << " bytes";
    EXPECT_NEAR(c.algbw_GBps * 1.75, c.busbw_GBps, 1e-9 * c.busbw_GBps);
  }
}

TEST(CollectiveModel, H100RingMatchesPublishedBusbw) {
  CollectiveModel m(*load_hardware_profile("h100-sxm-8"), 8);
  expect_large_busbw(m, true, kPublishedH100RingBusbw);
}

TEST(CollectiveModel, NvlsMatchesPublishedBusbwAndIsChosenForLargeMessages) {
  for (const char* hw : {"h100-sxm-8", "h200-sxm-8"}) {
    CollectiveModel m(*load_hardware_profile(hw), 8);
    expect_large_busbw(m, false, kPublishedNvlsBusbw);
    EXPECT_EQ(m.best(CollectiveKind::kAllReduce, kGiB).algo, NcclAlgo::kNvls) << hw;
  }
}

TEST(CollectiveModel, A100MatchesPublishedBusbwWithRing) {
  CollectiveModel m(*load_hardware_profile("a100-sxm-8"), 8);
  expect_large_busbw(m, false, kPublishedA100Busbw);
  CollectiveCost c = m.best(CollectiveKind::kAllReduce, kGiB);
  EXPECT_EQ(c.algo, NcclAlgo::kRing);
  EXPECT_EQ(c.proto, NcclProto::kSimple);
}

TEST(CollectiveModel, SmallMessageLatencyInPublishedRange) {
  // Held-out 2 KiB points of the Azure tables (Azure/AI-benchmarking-guide Azure_Results/ND_*_results.md at
  // 8fd0c6e1bd0f, NCCL Bandwidth, busbw 0.14 / 0.12 / 0.08 GB/s): 2048 x 1.75 / busbw = 25.6, 29.9 and 44.8 us. The
  // profiles carry 1 KiB and 4 KiB; the interpolation is within 20%.
  const std::pair<const char*, double> published[] = {{"h100-sxm-8", 25.6}, {"h200-sxm-8", 29.87}, {"a100-sxm-8", 44.8}};
  for (const auto& [hw, us] : published) {
    CollectiveModel m(*load_hardware_profile(hw), 8);
    EXPECT_NEAR(m.best(CollectiveKind::kAllReduce, 2048.0).time_s * 1e6 / us, 1.0, 0.2) << hw;
    // NCCL's own tuner picks a low-latency protocol there.
    EXPECT_NE(m.best(CollectiveKind::kAllReduce, 2048.0).proto, NcclProto::kSimple) << hw;
  }
  // The analytic LL floor from NCCL's constants alone (latency scale 1, no launch): 6.6 + 2 x 7 x 0.6 = 15.0 us.
  HardwareProfile raw = *load_hardware_profile("h100-sxm-8");
  raw.latency_scale = 1.0;
  raw.launch_us = {};
  for (auto& per : raw.curves)
    for (auto& c : per) c = BusbwCurve{};
  CollectiveModel m(raw, 8);
  CollectiveCost c = m.best(CollectiveKind::kAllReduce, 8.0);
  EXPECT_NEAR(c.time_s * 1e6, 15.0, 0.01);
  EXPECT_EQ(c.proto, NcclProto::kLL);
}

TEST(CollectiveModel, OneRankIsFreeAndAlgorithmsNcclWouldNotUseAreAbsent) {
  CollectiveModel one(*load_hardware_profile("h100-sxm-8"), 1);
  EXPECT_EQ(one.best(CollectiveKind::kAllReduce, kGiB).time_s, 0.0);
  CollectiveModel pcie(*load_hardware_profile("h100-pcie-8"), 8);
  EXPECT_LT(pcie.cost(CollectiveKind::kAllReduce, kGiB, NcclAlgo::kNvls, NcclProto::kSimple).time_s, 0.0);
  EXPECT_LT(pcie.cost(CollectiveKind::kAllReduce, kGiB, NcclAlgo::kRing, NcclProto::kLL128).time_s, 0.0);
  EXPECT_LT(pcie.cost(CollectiveKind::kAllGather, kGiB, NcclAlgo::kTree, NcclProto::kSimple).time_s, 0.0);
  // PCIe ring Simple: busbw -> NCCL's Gen5 x16 figure (48 GB/s) for large messages; latency 8.4 + 14 x 5.7 us, with
  // h100-sxm-8's fitted launch (9.25 us) and latency scale (1.454) that the PCIe profile takes.
  CollectiveCost c = pcie.cost(CollectiveKind::kAllReduce, 8 * kGiB, NcclAlgo::kRing, NcclProto::kSimple);
  double expect_s = (9.25 + 1.454 * (8.4 + 14 * 5.7)) * 1e-6 + 8 * kGiB / (48e9 * 8.0 / 14.0);
  EXPECT_NEAR(c.time_s, expect_s, 1e-9 * expect_s);
}

TEST(CollectiveModel, AllGatherRingTimeFromFirstPrinciples) {
  // Ring all-gather of S total bytes on n ranks moves (n-1)/n S per rank over NCCL's link bandwidth B:
  // time = launch + latency_scale x (base + (n-1) hops) + S (n-1) / (n B) (the profile's fitted launch and scale).
  const HardwareProfile& hw = *load_hardware_profile("a100-sxm-8");
  CollectiveModel m(hw, 4);
  double S = 512 * kMiB, B = 12 * 20.0e9;
  CollectiveCost c = m.cost(CollectiveKind::kAllGather, S, NcclAlgo::kRing, NcclProto::kSimple);
  double expect_s = (hw.launch_us[1] + hw.latency_scale * (8.4 + 3 * 3.4)) * 1e-6 + S * 3.0 / (4.0 * B);
  EXPECT_NEAR(c.time_s, expect_s, 1e-9 * expect_s);
  EXPECT_NEAR(m.p2p_s(S), 11.8e-6 + S / B, 1e-12);
}

TEST(ComputeModel, RooflineAndLaunch) {
  const HardwareProfile& hw = *load_hardware_profile("h100-sxm-8");
  const double e = hw.gemm_efficiency[static_cast<size_t>(Precision::kBf16)];
  const double sus = hw.sustained_fraction, mem = 3.35e12 * hw.hbm_achievable_fraction * sus;
  // 1 TFLOP of bf16 at 989.4 x e x sustained, plus 1 MB over HBM, plus one 4 us launch: summed.
  EXPECT_NEAR(op_time_s(hw, 1e12, 1e6, Precision::kBf16), 1e12 / (989.4e12 * e * sus) + 1e6 / mem + 4e-6,
              1e-12);
  // Memory-bound: 3.35 GB at 3.35 TB/s x the HBM fraction x sustained.
  EXPECT_NEAR(pass_time_s(hw, 3.35e9), 3.35e9 / mem + 4e-6, 1e-12);
  // fp32 runs at 67 TFLOP/s.
  EXPECT_NEAR(op_time_s(hw, 1e12, 0, Precision::kFp32, 0),
              1e12 / (67.0e12 * hw.gemm_efficiency[static_cast<size_t>(Precision::kFp32)] * sus), 1e-12);
}

TEST(Overlap, AllHidden) {
  // Backward ends at 10; buckets ready at 2, 5, 8 take 1 each: they end at 9, nothing is exposed.
  OverlapResult r = schedule_chains(10.0, {2.0, 5.0, 8.0}, {1.0, 1.0, 1.0});
  EXPECT_EQ(r.comm_end_s, 9.0);
  EXPECT_EQ(r.exposed_s, 0.0);
  EXPECT_EQ(r.overlapped_s, 3.0);
}

TEST(Overlap, AllExposed) {
  // Every bucket ready only at the end of backward (overlap off): 3 + 4 exposed.
  OverlapResult r = schedule_chains(10.0, {10.0, 10.0}, {3.0, 4.0});
  EXPECT_EQ(r.comm_end_s, 17.0);
  EXPECT_EQ(r.exposed_s, 7.0);
  EXPECT_EQ(r.overlapped_s, 0.0);
}

TEST(Overlap, PartlyHiddenWithQueueing) {
  // Ready at 1, 2, 9; durations 4, 4, 2: starts 1, 5, 9 (waits for the second), ends 5, 9, 11. Backward ends at 10:
  // exposed 1, overlapped 9.
  OverlapResult r = schedule_chains(10.0, {1.0, 2.0, 9.0}, {4.0, 4.0, 2.0});
  EXPECT_EQ(r.comm_end_s, 11.0);
  EXPECT_EQ(r.exposed_s, 1.0);
  EXPECT_EQ(r.overlapped_s, 9.0);
  // The second bucket queued behind the first: had it been free, bucket 3 would still end at 11.
  OverlapResult q = schedule_chains(10.0, {1.0, 2.0, 3.0}, {4.0, 4.0, 4.0});
  EXPECT_EQ(q.comm_end_s, 13.0);  // 1+4 = 5, 5+4 = 9, 9+4 = 13
  EXPECT_EQ(q.exposed_s, 3.0);
}

// A record with only compute: forward t0/3, backward 2 t0/3; synchronous (one empty collective at 1 rank costs 0).
StepCost compute_only(const CostModel& m, double t0) {
  StepCost c = m.make_step_cost();
  c.add_time(Phase::kForward, t0 / 3.0);
  c.add_time(Phase::kBackward, 2.0 * t0 / 3.0);
  c.synchronous = true;
  return c;
}

TEST(Stragglers, PersistentFactorSetsTheSynchronousStep) {
  StragglerConfig s;
  s.factors = json::array({1.0, 1.3, 1.0, 1.0});
  CostModel m(load_hardware_profile("h100-sxm-8"), 4, {}, s, 7);
  std::vector<StepCost> recs(4, compute_only(m, 0.010));
  std::vector<const StepCost*> p;
  for (auto& r : recs) p.push_back(&r);
  std::vector<ModeledStep> out = m.model_step(p, 0);
  for (int r = 0; r < 4; ++r) {
    EXPECT_NEAR(out[r].times.step_s, 0.013, 1e-15);  // every rank waits for rank 1
    double wait = out[r].times.phase_s[static_cast<size_t>(Phase::kWait)];
    EXPECT_NEAR(wait, r == 1 ? 0.0 : 0.003, 1e-15);
  }
}

// E[max of n standard normals] (tabulated order statistics, e.g. Harter 1961): 0.5642, 1.0294, 1.4236.
TEST(Stragglers, NormalNoiseMeanStepIsExpectedMaximum) {
  const double t0 = 0.010, sigma = 0.1;
  const std::vector<std::pair<int, double>> cases = {{2, 0.5642}, {4, 1.0294}, {8, 1.4236}};
  for (auto [n, emax] : cases) {
    StragglerConfig s;
    s.noise = "normal";
    s.sigma = sigma;
    CostModel m(load_hardware_profile("h100-sxm-8"), n, {}, s, 12345);
    std::vector<StepCost> recs(static_cast<size_t>(n), compute_only(m, t0));
    std::vector<const StepCost*> p;
    for (auto& r : recs) p.push_back(&r);
    const int steps = 20000;
    double sum = 0.0;
    for (int t = 0; t < steps; ++t) sum += m.model_step(p, t)[0].times.step_s;
    const double mean = sum / steps;
    // The max of n standard normals has variance below 1, so the mean's standard error is below t0 sigma /
    // sqrt(steps); allow 5 of them.
    const double tol = 5.0 * t0 * sigma / std::sqrt(static_cast<double>(steps));
    EXPECT_NEAR(mean, t0 * (1.0 + sigma * emax), tol) << n << " ranks";
  }
}

TEST(Stragglers, LognormalNoiseHasMeanOne) {
  StragglerConfig s;
  s.noise = "lognormal";
  s.sigma = 0.5;
  double sum = 0.0;
  const int steps = 40000;
  for (int t = 0; t < steps; ++t) sum += straggler_factor(s, 3, t, 0);
  // Var of exp(sigma Z - sigma^2/2) = exp(sigma^2) - 1 = 0.284; 5 standard errors.
  EXPECT_NEAR(sum / steps, 1.0, 5.0 * std::sqrt(std::exp(0.25) - 1.0) / std::sqrt(double(steps)));
}

// h100-sxm-8's bf16 terms as compute_model.h writes them: the large-GEMM rate (989.4 TFLOP/s dense x efficiency x
// sustained), the fixed cost per GEMM, the cost per operand byte, the HBM rate and one launch.
struct Bf16Terms {
  double rate, fixed, per_byte, hbm, launch;
};
Bf16Terms bf16_terms(const HardwareProfile& hw) {
  const size_t b16 = static_cast<size_t>(Precision::kBf16);
  const double s = hw.sustained_fraction, rate = 989.4e12 * hw.gemm_efficiency[b16] * s;
  return {rate, hw.gemm_half_gflop * 1e9 / rate, hw.gemm_half_intensity / rate,
          hw.hbm_TBps * 1e12 * hw.hbm_achievable_fraction * s, hw.launch_overhead_us * 1e-6};
}

// An MLP's layers are priced by their GEMM shapes: 784-128-10 with biases, 32 samples, bf16 on h100-sxm-8, every
// term written out from compute_model.h's formulas and the profile's constants. Per Linear layer (weight and bias
// one entry): forward = GEMM [32, in] x [in, out] (FLOP time + fixed cost + 2 bytes x (32 in + in out + 32 out) at
// the skinny byte rate) + the bias add and activation (or loss), each reading and writing 32 x out fp32 values,
// + 2 launches; backward = two such GEMMs, twice the elementwise traffic plus the fp32 gradient read and written
// (8 bytes a parameter), 4 launches; for a layer fed by the data one GEMM, its traffic once, 2 launches.

// One bf16_mixed micro-batch of 32 samples of a dense model (`kind` mlp or linear) on h100-sxm-8: the modeled step.
StepCost dense_micro_batch(const std::string& kind, std::vector<int64_t> layers, const std::string& loss) {
  RunConfig c;
  c.model.kind = kind;
  c.model.layers = std::move(layers);
  c.model.loss = loss;
  c.cluster.hardware = "h100-sxm-8";
  c.precision.mode = "bf16_mixed";
  CostModel m(c, *make_model(c));
  StepCost cost = m.make_step_cost();
  m.add_micro_batch(cost, 32, true);
  return cost;
}

// The header's price of one dense layer [32, in] x [in, out] with bias at bf16 on h100-sxm-8, seconds: forward and
// backward; `input_gradient` false for a layer fed by the data (its backward is the weight-gradient GEMM alone, its
// traffic and kernels once).
std::pair<double, double> dense_layer_price(double in, double out, bool input_gradient) {
  const auto [rate, fixed, per_byte, hbm, launch] = bf16_terms(*load_hardware_profile("h100-sxm-8"));
  const double gemm = 2.0 * 32 * in * out / rate + fixed + 2.0 * (32 * in + in * out + 32 * out) * per_byte;
  const double ew = 32 * 2 * 8.0 * out;  // two kernels, 4-byte values read and written
  const double passes = input_gradient ? 2.0 : 1.0;
  return {gemm + ew / hbm + 2 * launch,
          passes * gemm + (passes * ew + 8.0 * (in * out + out)) / hbm + 2 * passes * launch};
}

TEST(CostModel, MlpLayersArePricedByTheirGemmShapes) {
  const StepCost cost = dense_micro_batch("mlp", {784, 128, 10}, "cross_entropy");
  // The first layer's input is the data, which needs no gradient; the second's backward has the input gradient too.
  const auto [fwd1, bwd1] = dense_layer_price(784, 128, false);
  const auto [fwd2, bwd2] = dense_layer_price(128, 10, true);
  EXPECT_NEAR(cost.compute_s[static_cast<size_t>(Phase::kForward)], fwd1 + fwd2, 1e-15);
  EXPECT_NEAR(cost.compute_s[static_cast<size_t>(Phase::kBackward)], bwd1 + bwd2, 1e-15);
  // Two GEMMs forward and three backward, each with its fixed cost (not one per weight and bias tensor).
  const auto [rate, fixed, per_byte, hbm, launch] = bf16_terms(*load_hardware_profile("h100-sxm-8"));
  EXPECT_GT(cost.compute_s[static_cast<size_t>(Phase::kBackward)], 3 * fixed);
}

// model.kind linear runs the one-layer mlp (linear.cpp), so it is priced as that layer: one weight-gradient GEMM in
// the backward (its input is the data). Before, it took the shape-unknown path below, two backward GEMMs per tensor
// (QA: 0.165 vs the mlp's 0.087 ms on h200-1).
TEST(CostModel, LinearModelIsPricedAsItsOneLayerWithoutAnInputGradient) {
  const StepCost cost = dense_micro_batch("linear", {784, 128}, "mse");
  const auto [fwd, bwd] = dense_layer_price(784, 128, false);
  EXPECT_NEAR(cost.compute_s[static_cast<size_t>(Phase::kForward)], fwd, 1e-15);
  EXPECT_NEAR(cost.compute_s[static_cast<size_t>(Phase::kBackward)], bwd, 1e-15);
}

// A layer whose shape is not declared (the default: one entry per tensor, FLOPs shared by parameter count): its
// weights count at the compute precision's size, and its backward is two GEMMs with a fixed cost each.
TEST(CostModel, ShapeUnknownLayerCountsWeightsAtThePrecisionAndTwoBackwardGemms) {
  const std::shared_ptr<const HardwareProfile> hw = load_hardware_profile("h100-sxm-8");
  std::vector<LayerCost> layers = {{0, 1000, 2e6, 0.0, 1.0}};
  CostModel m(hw, 1, layers, StragglerConfig{}, 1, Precision::kBf16);
  StepCost cost = m.make_step_cost();
  m.add_micro_batch(cost, 4, true);
  const auto [rate, fixed, per_byte, hbm, launch] = bf16_terms(*hw);
  const double gemm = 4 * 2e6 / rate + fixed + 2.0 * 1000 * per_byte;  // 1,000 bf16 weights, no activations
  EXPECT_NEAR(cost.compute_s[static_cast<size_t>(Phase::kForward)], gemm + launch, 1e-15);
  EXPECT_NEAR(cost.compute_s[static_cast<size_t>(Phase::kBackward)], 2 * gemm + 8000.0 / hbm + 2 * launch, 1e-15);
}

// The optimizer phase moves each precision mode's tensors at their size. Per parameter, with k state buffers (plain
// SGD 0, momentum 1, Adam 2): the division by S reads and writes the gradient, the update reads p, g and the k
// states and writes p and the k states. Modes with fp32 master weights, gradients and state (fp32, tf32, the mixed
// modes: their weight cast to the format is a forward pass, not the optimizer's) move 4 bytes each:
// 4 (2 + 3 + 2k) = 20 + 8k; fp16_pure (model.half(): torch.optim's state is fp16 like the weights) 2 each: 10 + 4k,
// half of fp32, with no rounding pass of its own. FLOPs per parameter: the division 1, then SGD p -= lr g 2,
// momentum m = mu m + g and p -= lr m 4, Adam 12; at the profile's fp32 rate; two launches.
TEST(CostModel, OptimizerPhaseMovesEachModesTensorsAtTheirSize) {
  const std::shared_ptr<const HardwareProfile> hw = load_hardware_profile("h100-pcie-8");
  const size_t f32 = static_cast<size_t>(Precision::kFp32);
  const double s = hw->sustained_fraction, hbm = hw->hbm_TBps * 1e12 * hw->hbm_achievable_fraction * s;
  const double rate = hw->peak_tflops[f32] * 1e12 * hw->gemm_efficiency[f32] * s;
  const double n = 784 * 128 + 128 + 128 * 10 + 10;  // the MLP's parameters
  struct Opt {
    const char* kind;
    double momentum, k, flops;
  };
  for (const Opt& o : {Opt{"sgd", 0.0, 0, 3}, Opt{"sgd", 0.9, 1, 5}, Opt{"adam", 0.9, 2, 13}}) {
    for (const char* mode : {"fp32", "tf32", "bf16_mixed", "fp16_mixed", "fp8_mixed", "fp16_pure"}) {
      RunConfig c;
      c.model.kind = "mlp";
      c.model.layers = {784, 128, 10};
      c.cluster.hardware = "h100-pcie-8";
      c.precision.mode = mode;
      c.training.optimizer.kind = o.kind;
      c.training.optimizer.momentum = o.momentum;
      CostModel m(c, *make_model(c));
      StepCost cost = m.make_step_cost();
      m.add_optimizer(cost, c.training.optimizer, n);
      const double bytes = std::string(mode) == "fp16_pure" ? 10 + 4 * o.k : 20 + 8 * o.k;
      EXPECT_DOUBLE_EQ(m.optimizer_bytes_per_param(c.training.optimizer), bytes) << mode << " " << o.kind;
      EXPECT_NEAR(cost.compute_s[static_cast<size_t>(Phase::kOptimizer)],
                  o.flops * n / rate + bytes * n / hbm + 2 * hw->launch_overhead_us * 1e-6, 1e-15)
          << mode << " " << o.kind << " k " << o.k;
    }
  }
}

TEST(CostModel, BucketsOverlapBackwardOnTheModeledStep) {
  // Two equal layers; bucket A holds the last layer (ready halfway through backward), bucket B the first (ready at
  // the end). One rank: collectives are free, so only the 2-rank case exposes anything.
  std::vector<LayerCost> layers = {{0, 1000, 1e6, 0}, {1000, 2000, 1e6, 0}};
  CostModel m(load_hardware_profile("h100-sxm-8"), 2, layers, StragglerConfig{}, 1);
  EXPECT_DOUBLE_EQ(m.backward_done_fraction(1000), 0.5);
  EXPECT_DOUBLE_EQ(m.backward_done_fraction(0), 1.0);
  StepCost c = m.make_step_cost();
  c.add_time(Phase::kForward, 1.0);
  c.add_time(Phase::kBackward, 2.0);
  c.last_backward_s = 2.0;
  c.add_collective(CollectiveKind::kAllReduce, 1e6, GradRange{1000, 2000});
  c.add_collective(CollectiveKind::kAllReduce, 1e6, GradRange{0, 1000});
  const double d = m.collectives().best(CollectiveKind::kAllReduce, 1e6).time_s;
  std::vector<const StepCost*> p = {&c, &c};
  ModeledStep s = m.model_step(p, 0)[0];
  // Bucket A runs inside backward (from 2.0), bucket B after it (from 3.0): exposed d, overlapped d.
  EXPECT_NEAR(s.exposed_s, d, 1e-15);
  EXPECT_NEAR(s.overlapped_s, d, 1e-15);
  EXPECT_NEAR(s.times.step_s, 3.0 + d, 1e-12);
  EXPECT_NEAR(s.times.phase_s[static_cast<size_t>(Phase::kCommunicate)], d, 1e-15);
}

}  // namespace
}  // namespace gs

namespace gs {
namespace {

RunConfig preset_config(const std::string& kind) {
  RunConfig c;
  c.model.kind = kind;
  c.data.kind = "none";
  c.training.mode = "timing";
  return c;
}

// Published parameter counts: GPT-2 small 124,439,808 and XL 1,557,611,200 (Hugging Face gpt2 / gpt2-xl
// checkpoints, lm head tied); LLaMA-7B 6,738,415,616 (Meta's checkpoint, lm head untied).
TEST(TransformerPresets, ParameterCountsMatchThePublishedModels) {
  EXPECT_EQ(make_model(preset_config("gpt2-small"))->num_params(), 124439808u);
  EXPECT_EQ(make_model(preset_config("gpt2-xl"))->num_params(), 1557611200u);
  EXPECT_EQ(make_model(preset_config("llama-7b"))->num_params(), 6738415616u);
}

// Training FLOPs per token ~ 6 x parameters + the attention term 12 x layers x seq x d (Kaplan et al. 2020;
// Hoffmann et al. 2022): within 3% (embedding lookups and norms are parameters without matrix FLOPs).
TEST(TransformerPresets, TrainingFlopsPerTokenAreSixTimesParametersPlusAttention) {
  struct Shape {
    const char* kind;
    double layers, d, seq;
  };
  for (Shape s : {Shape{"gpt2-small", 12, 768, 1024}, Shape{"gpt2-xl", 48, 1600, 1024},
                  Shape{"llama-7b", 32, 4096, 2048}}) {
    auto m = make_model(preset_config(s.kind));
    const double per_token = 3.0 * m->forward_flops_per_sample() / s.seq;
    const double expect = 6.0 * static_cast<double>(m->num_params()) + 12.0 * s.layers * s.seq * s.d;
    EXPECT_NEAR(per_token / expect, 1.0, 0.03) << s.kind;
    // Layers cover the parameters contiguously, so buckets can find when their gradients are ready.
    size_t next = 0;
    for (const LayerCost& l : m->layer_costs()) {
      EXPECT_EQ(l.param_begin, next);
      next = l.param_end;
    }
    EXPECT_EQ(next, m->num_params());
  }
  RunConfig shorter = preset_config("gpt2-small");
  shorter.model.sequence_length = 128;
  EXPECT_LT(make_model(shorter)->forward_flops_per_sample(), make_model(preset_config("gpt2-small"))
                                                                  ->forward_flops_per_sample() / 7.9);
}

TEST(TransformerPresets, RefuseArithmetic) {
  auto m = make_model(preset_config("gpt2-small"));
  EXPECT_TRUE(m->shape_only());
  EXPECT_THROW(m->make_workspace(1), Error);
}

TEST(TimingOnly, OneRankStepIsTheDeclaredComputeAndEightRanksAddOnlyExposedCommunication) {
  RunConfig c = preset_config("gpt2-small");
  c.training.steps = 5;
  c.cluster.ranks = 1;
  RunResult one = run_training(c);
  ASSERT_EQ(one.disposition, Disposition::kPassed) << one.message;
  EXPECT_TRUE(one.steps.empty());  // no measured clock: nothing ran
  ASSERT_EQ(one.modeled_steps.size(), 1u);
  ASSERT_EQ(one.modeled_steps[0].size(), 5u);
  const StepTimes& s1 = one.modeled_steps[0][0];
  // One rank: no communication, so the step is forward + backward + optimizer exactly.
  const double f = s1.phase_s[static_cast<size_t>(Phase::kForward)];
  const double b = s1.phase_s[static_cast<size_t>(Phase::kBackward)];
  const double o = s1.phase_s[static_cast<size_t>(Phase::kOptimizer)];
  EXPECT_DOUBLE_EQ(s1.step_s, f + b + o);
  EXPECT_NEAR(one.series.back().modeled_s, 5 * s1.step_s, 1e-12);
  c.cluster.ranks = 8;
  RunResult eight = run_training(c);
  ASSERT_EQ(eight.disposition, Disposition::kPassed) << eight.message;
  const StepTimes& s8 = eight.modeled_steps[7][0];
  EXPECT_DOUBLE_EQ(s8.phase_s[static_cast<size_t>(Phase::kForward)], f);
  EXPECT_NEAR(s8.step_s, f + b + o + eight.modeled_exposed_s[7][0], 1e-12);
  EXPECT_FALSE(eight.modeled_chains.empty());
  // 8 ranks train 8x the samples per step.
  EXPECT_DOUBLE_EQ(eight.samples_trained, 8 * one.samples_trained);
}


TEST(TimingOnly, RunTimeoutStopsALongRunAsTimeout) {
  RunConfig c = preset_config("gpt2-small");
  c.cluster.ranks = 8;
  c.training.steps = 50000000;  // far more than 0.2 s of modeling on any machine
  c.training.run_timeout_s = 0.2;
  RunResult r = run_training(c);
  EXPECT_EQ(r.disposition, Disposition::kTimeout) << r.message;
  EXPECT_GT(r.steps_completed, 0);
  EXPECT_LT(r.steps_completed, c.training.steps);
  EXPECT_EQ(static_cast<int64_t>(r.series.size()), r.steps_completed);
}

TEST(TimingOnly, MemoryEstimateHoldsOnlyThePerStepRecordsAndSkipsWhatCannotFit) {
  RunConfig c = preset_config("gpt2-xl");
  c.cluster.ranks = 8;
  c.training.steps = 1000000000;
  const MemoryEstimate e = estimate_run_memory(c, 0);
  EXPECT_EQ(e.parameters_bytes + e.gradients_bytes + e.optimizer_bytes + e.dataset_bytes + e.activations_bytes, 0);
  // Every rank keeps at least one StepTimes and its exposed and overlapped seconds per step.
  const double lower = 1e9 * 8 * static_cast<double>(sizeof(StepTimes) + 2 * sizeof(double));
  EXPECT_GE(static_cast<double>(e.records_bytes), lower);
  const int64_t available = int64_t{8} << 30;  // 8 GiB
  const std::string reason = memory_skip_reason(c, 0, available);
  const std::string key = "the largest training.steps that fits is ";
  const size_t at = reason.find(key);
  ASSERT_NE(at, std::string::npos) << reason;
  const int64_t fit = std::stoll(reason.substr(at + key.size()));
  // At least the StepTimes and two doubles per rank and step must fit in what is available.
  EXPECT_GT(fit, 0);
  EXPECT_LE(static_cast<double>(fit) * 8 * static_cast<double>(sizeof(StepTimes) + 2 * sizeof(double)),
            static_cast<double>(available));
  c.training.steps = fit;
  EXPECT_EQ(memory_skip_reason(c, 0, available), "");
  c.training.steps = fit + 1;
  EXPECT_NE(memory_skip_reason(c, 0, available), "");
  c.training.steps = 1000;
  EXPECT_EQ(memory_skip_reason(c, 0, int64_t{1} << 30), "");
}


// Link sharing (share_link) on a toy computed by hand, times in arbitrary units (seconds): K = 2 micro-batches, two
// layers of half the compute each (parameters [0, 100) and [100, 200)), forward 10 and backward 20 per micro-batch,
// every gather 4, every reduce-scatter 6 (bucket [100, 200) ready half-way through its backward, [0, 100) at its
// end). Micro-batch 0: forward 0-14 (gather L0 0-4, the compute waits 4; gather L1 4-8 under L0's compute 4-9),
// backward 14-38 (gather L1 14-18, wait 4; gather L0 18-22 under L1's compute 18-28); reduce-scatter [100, 200) at 28
// (link free since 22) to 34; [0, 100) ready at 38, asking for the link when micro-batch 1's forward issues its first
// gather (38: the tie goes to the gather, 38-42). The reduce-scatter gets the link 42-48, before micro-batch 1's
// gather of L1, which asks at 42 (when L0 starts) and so runs 48-52: L1 could compute at 38 + 5 + 4 = 47 and waits
// 5 (unshared, that gather would run 42-46 and the compute not wait). Backward 1 from 57: gather L1 57-61 (wait 4),
// L0 61-65; reduce-scatters 71-77 and 81-87. Waits 4 + 0 + 4 + 0 + 4 + 5 + 4 + 0 = 21; compute ends at 60 + 21 = 81,
// the communication at 87; the link is busy 8 x 4 + 4 x 6 = 56.
TEST(LinkSharing, ReduceScatterBeforeTheNextMicroBatchsGatherDelaysItByHand) {
  StepCost c;
  c.micro_batches = 2;
  c.compute_s[static_cast<size_t>(Phase::kForward)] = 20.0;
  c.compute_s[static_cast<size_t>(Phase::kBackward)] = 40.0;
  c.last_backward_s = 20.0;
  auto gather = [&](size_t begin, int64_t k, bool backward, double before) {
    CommChain ch;
    ch.range = GradRange{begin, begin + 100, k};
    ch.comm_s = 4.0;
    ch.has_collective = true;
    ch.kind = CollectiveKind::kAllGather;
    ch.unshard = true;
    ch.slot.backward = backward;
    ch.slot.compute_before = before;
    ch.slot.issue_after = 0.0;  // the first gather at the pass's start, the second when the first layer starts
    c.chains.push_back(ch);
  };
  auto reduce_scatter = [&](size_t begin, int64_t k) {
    CommChain ch;
    ch.range = GradRange{begin, begin + 100, k};
    ch.comm_s = 6.0;
    ch.has_collective = true;
    ch.kind = CollectiveKind::kReduceScatter;
    c.chains.push_back(ch);
  };
  for (int64_t k = 0; k < 2; ++k) {
    gather(0, k, false, 0.0);
    gather(100, k, false, 0.5);
    gather(100, k, true, 0.0);
    gather(0, k, true, 0.5);
    reduce_scatter(100, k);
    reduce_scatter(0, k);
  }
  const LinkSchedule l = share_link(c, 1.0, {0.5, 1.0, 0.5, 1.0, 0.5, 1.0, 0.5, 1.0});
  // Chain order: micro-batch 0's four gathers and two reduce-scatters, then micro-batch 1's; slots in gather order.
  const std::vector<double> stall = {4, 0, 4, 0, 4, 5, 4, 0}, start = {0, 4, 0, 4, 0, 10, 0, 4};
  ASSERT_EQ(l.slots.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_NEAR(l.slots[i].stall_s, stall[i], 1e-12) << i;
    EXPECT_NEAR(l.slots[i].start_s, start[i], 1e-12) << i;
  }
  const std::vector<double> ready = {28, 38, 71, 81}, begins = {28, 38, 71, 81}, ends = {34, 48, 77, 87};
  ASSERT_EQ(l.ready_s.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(l.ready_s[i], ready[i], 1e-12) << i;
    EXPECT_NEAR(l.start_s[i], begins[i], 1e-12) << i;
    EXPECT_NEAR(l.end_s[i], ends[i], 1e-12) << i;
  }
  EXPECT_NEAR(l.wait_s, 21.0, 1e-12);
  EXPECT_NEAR(l.comm_end_s, 87.0, 1e-12);
  EXPECT_NEAR(l.link_busy_s, 56.0, 1e-12);
  // A straggler at 2x: compute 120, gathers no longer wait behind the compute they overlap except the passes' first.
  const LinkSchedule slow = share_link(c, 2.0, {0.5, 1.0, 0.5, 1.0, 0.5, 1.0, 0.5, 1.0});
  EXPECT_NEAR(slow.wait_s, 16.0, 1e-12);  // the four first gathers of a pass, 4 each
}

}  // namespace
}  // namespace gs
