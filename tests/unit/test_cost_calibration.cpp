// Tests of the calibrated modeled clock (sim/cost): measured bus-bandwidth curves in the profiles and their log-size
// interpolation and extension, the analytic model's fitted latency scale and launch cost, NCCL_ALGO-style forcing,
// compute priced as GEMM + attention + memory time, `gradsweep price`'s table, the nccl-tests parsers on published
// outputs (tests/data/nccl_tests/) and calibrate's fits recovering known constants. Expected values come from the
// formulas worked by hand here, from the published tables (sources named), never from the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/config/run_config.h"
#include "sim/core/error.h"
#include "sim/cost/calibrate.h"
#include "sim/cost/collective_model.h"
#include "sim/cost/compute_model.h"
#include "sim/cost/hardware_profile.h"
#include "sim/cost/price.h"
#include "sim/validate/validate.h"
#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

constexpr double kKiB = 1024.0, kMiB = 1048576.0, kGiB = 1073741824.0;

std::string data_file(const std::string& name) {
  return std::string(GRADSWEEP_SOURCE_DIR) + "/tests/data/nccl_tests/" + name;
}
std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// nccl-tests: time = bytes x 2(n-1)/n / busbw.
double allreduce_time_s(double bytes, double busbw_GBps) { return bytes * 1.75 / (busbw_GBps * 1e9); }

// The Azure ND H100 v5 NCCL Bandwidth table (Azure/AI-benchmarking-guide, Azure_Results/ND_H100_v5_results.md at
// 8fd0c6e1bd0f; tools/data/published_figures.json): the profile ships every other size.
TEST(CollectiveCurves, ProfileCarriesThePublishedFitPoints) {
  const HardwareProfile& hw = *load_hardware_profile("h100-sxm-8");
  const BusbwCurve& c = hw.curves[0][kCurveDefault];
  ASSERT_EQ(c.bytes.size(), 12u);
  EXPECT_EQ(c.bytes.front(), 1024.0);
  EXPECT_EQ(c.busbw_GBps.front(), 0.07);
  EXPECT_EQ(c.bytes.back(), 4 * kGiB);
  EXPECT_EQ(c.busbw_GBps.back(), 475.54);
  EXPECT_NE(c.source.find("ND_H100_v5_results.md"), std::string::npos);
  EXPECT_TRUE(load_hardware_profile("h100-pcie-8")->curves[0][kCurveDefault].empty());
}

TEST(CollectiveCurves, MeasuredPointsAreExactAndBetweenThemBusbwIsLogLinear) {
  const HardwareProfile& hw = *load_hardware_profile("h100-sxm-8");
  CollectiveModel m(hw, 8);
  // 16 MiB is a fit point: 234.45 GB/s.
  CollectiveCost at = m.best(CollectiveKind::kAllReduce, 16 * kMiB);
  EXPECT_NEAR(at.busbw_GBps, 234.45, 1e-9);
  EXPECT_NEAR(at.time_s, allreduce_time_s(16 * kMiB, 234.45), 1e-15);
  EXPECT_EQ(at.source, CostSource::kCurve);
  EXPECT_NEAR(at.algbw_GBps * 1.75, at.busbw_GBps, 1e-9);
  // Halfway in log size between 16 MiB and 64 MiB (32 MiB): the geometric mean of 234.45 and 361.78.
  EXPECT_NEAR(m.best(CollectiveKind::kAllReduce, 32 * kMiB).busbw_GBps, std::sqrt(234.45 * 361.78), 1e-9);
  // The held-out 32 MiB point of the same table is 295.53: the interpolation (291.24) is 1.5% low.
  EXPECT_NEAR(m.best(CollectiveKind::kAllReduce, 32 * kMiB).busbw_GBps / 295.53, 0.9855, 0.0005);
  // NCCL's tuner ranks NVLS first for large all-reduces on NVLink SHARP: the reported choice.
  EXPECT_EQ(m.best(CollectiveKind::kAllReduce, kGiB).algo, NcclAlgo::kNvls);
}

TEST(CollectiveCurves, BeyondTheTableTheEndsLatencyAndBandwidthCarryOn) {
  const HardwareProfile& hw = *load_hardware_profile("h100-sxm-8");
  CollectiveModel m(hw, 8);
  // Above: 4 GiB at 475.54 and 1 GiB at 466.35 (the last two points): beta = 3 GiB / (t4 - t1), bounded to [1, 2] x
  // the last point's algbw (it is inside here); 8 GiB costs t4 + 4 GiB / beta.
  const double t1 = allreduce_time_s(kGiB, 466.35), t4 = allreduce_time_s(4 * kGiB, 475.54);
  const double beta = 3 * kGiB / (t4 - t1);
  ASSERT_GT(beta, 4 * kGiB / t4);
  ASSERT_LT(beta, 2 * 4 * kGiB / t4);
  CollectiveCost big = m.best(CollectiveKind::kAllReduce, 8 * kGiB);
  EXPECT_NEAR(big.time_s, t4 + 4 * kGiB / beta, 1e-12);
  EXPECT_EQ(big.source, CostSource::kCurveExtended);
  // The held-out published 8 GiB point is 478.87 GB/s: within 1%.
  EXPECT_NEAR(big.busbw_GBps / 478.87, 1.0, 0.01);
  // Below: 1 KiB at 0.07 and 4 KiB at 0.27: t = alpha + S / beta through them.
  const double s0 = 1024, s1 = 4096, u0 = allreduce_time_s(s0, 0.07), u1 = allreduce_time_s(s1, 0.27);
  const double b0 = (s1 - s0) / (u1 - u0), alpha = u0 - s0 / b0;
  EXPECT_NEAR(m.best(CollectiveKind::kAllReduce, 8).time_s, alpha + 8 / b0, 1e-15);
}

TEST(CollectiveCurves, AnalyticModelAddsLaunchAndScalesNcclLatency) {
  HardwareProfile hw = *load_hardware_profile("h100-sxm-8");
  hw.latency_scale = 2.0;
  hw.launch_us[0] = 7.0;
  CollectiveModel m(hw, 8);
  // Ring Simple on 8 ranks: NCCL's latency 8.4 + 14 x 3.4 us (tuning.cc baseLat + nsteps hwLat), its bandwidth
  // 18 x 20.6 x 8 / 14 GB/s; time = 7 + 2 x latency + S / bw.
  const double bw = 18 * 20.6 * 8.0 / 14.0;
  const double expect_us = 7.0 + 2.0 * (8.4 + 14 * 3.4) + kGiB / (1000.0 * bw);
  EXPECT_NEAR(m.cost(CollectiveKind::kAllReduce, kGiB, NcclAlgo::kRing, NcclProto::kSimple).time_s, expect_us * 1e-6,
              1e-12);
  // The tuner's ranking is NCCL's own, unscaled: the curve's reported algorithm does not move with the fit.
  EXPECT_DOUBLE_EQ(m.latency_us(CollectiveKind::kAllReduce, NcclAlgo::kRing, NcclProto::kSimple), 8.4 + 14 * 3.4);
}

TEST(CollectiveCurves, ForcedAlgorithmUsesItsOwnPriceWhereItServes) {
  const HardwareProfile& hw = *load_hardware_profile("h100-sxm-8");
  CollectiveModel ring(hw, 8, NcclAlgo::kRing);
  CollectiveCost c = ring.best(CollectiveKind::kAllReduce, 8 * kGiB);
  EXPECT_EQ(c.algo, NcclAlgo::kRing);
  EXPECT_EQ(c.source, CostSource::kModel);  // no ring curve in the profile
  // NCCL_NVLS_ENABLE=0 on 8x H200, 8 GiB: 365.6 GB/s (stas00/ml-engineering network/README.md @ 744d01e18b79,
  // SHARP section): the analytic ring is within 10%, and below the NVLS curve's 478.9.
  EXPECT_NEAR(c.busbw_GBps / 365.6, 1.0, 0.10);
  // Tree serves all-reduce only: all-gather keeps NCCL's choice under a forced tree.
  CollectiveModel tree(hw, 8, NcclAlgo::kTree);
  EXPECT_EQ(tree.best(CollectiveKind::kAllGather, kGiB).algo, NcclAlgo::kRing);
  EXPECT_EQ(nccl_algo_from_name("NVLS"), NcclAlgo::kNvls);
  EXPECT_EQ(nccl_algo_from_name("NVLSTree"), NcclAlgo::kNvls);  // the table's name of nvls across nodes
  EXPECT_FALSE(nccl_algo_from_name("auto").has_value());
  EXPECT_THROW(nccl_algo_from_name("collnet"), Error);
}

TEST(CollectiveCurves, NvlsForcedOnAProfileWithoutSharpIsAConfigurationError) {
  RunConfig c;
  c.cluster.hardware = "a100-sxm-8";
  c.cluster.nccl_algo = "nvls";
  std::vector<ConfigIssue> issues;
  validate_config(c, issues);
  bool found = false;
  for (const auto& i : issues)
    found = found || (i.path == "cluster.nccl_algo" && i.message.find("NVLink SHARP") != std::string::npos);
  EXPECT_TRUE(found);
}

TEST(CollectiveCurves, CurveFormatErrorsNameThePath) {
  std::string text = read_text(load_hardware_profile("a100-sxm-8")->file);
  const std::string key = "\"collectives\": {";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  std::string bad = text;
  const size_t ar = bad.find("\"all_reduce\"", at);
  bad.insert(ar, R"("all_gather": {"ring": {"value": [[1024, 1.0], [512, 2.0]], "source": "x"}, )"
                 R"("nvls": {"value": [[1, 1], [2, 2]], "source": "x"}}, "alltoall": {}, )");
  try {
    parse_hardware_profile(bad, "p.json");
    FAIL() << "accepted";
  } catch (const ProfileError& e) {
    const std::string all = e.what();
    EXPECT_NE(all.find("p.json: collectives.all_gather.ring.value[1]: expected a size above the previous point's "
                       "1024 bytes"), std::string::npos) << all;
    EXPECT_NE(all.find("collectives.all_gather.nvls: expected no nvls curve: fabric.nvls is false"), std::string::npos) << all;
    EXPECT_NE(all.find("collectives.alltoall: expected no such key"), std::string::npos) << all;
  }
}

// Compute: GEMM time + memory time, each by hand on the h100-sxm-8 profile's numbers. The GEMM is its FLOP time
// plus a fixed cost (gemm_half_gflop GFLOP at the bf16 rate) plus its operand and result bytes at B_skinny =
// bf16 rate / gemm_half_intensity (compute_model.h), written out here.
TEST(ComputeModel, GemmFixedAndBytesCostsAttentionAndMemoryAddUp) {
  const HardwareProfile& hw = *load_hardware_profile("h100-sxm-8");
  const double e = hw.gemm_efficiency[static_cast<size_t>(Precision::kBf16)];
  const double e32 = hw.gemm_efficiency[static_cast<size_t>(Precision::kFp32)];
  const double s = hw.sustained_fraction, h = hw.gemm_half_gflop, hi = hw.gemm_half_intensity;
  const double bf16_rate = 989.4e12 * e * s;  // FLOP/s of a large bf16 GEMM
  const double fixed = h * 1e9 / bf16_rate, per_byte = hi / bf16_rate;
  // Small: the strategy guide MLP's 32 x 10 x 128 GEMM: 81,920 FLOP, 2 (32 x 128 + 128 x 10 + 32 x 10) = 11,392
  // bytes in bf16 and 22,784 in fp32 (fp32 at 67 TFLOP/s, the same fixed cost and bytes rate).
  EXPECT_NEAR(gemm_shape_time_s(hw, 32, 10, 128, Precision::kBf16), 81920.0 / bf16_rate + fixed + 11392.0 * per_byte,
              1e-15);
  EXPECT_NEAR(gemm_shape_time_s(hw, 32, 10, 128, Precision::kFp32),
              81920.0 / (67.0e12 * e32 * s) + fixed + 22784.0 * per_byte, 1e-15);
  // Large: 8192^3 bf16, 1.1 TFLOP over 3 x 8192^2 x 2 bytes.
  const double m = 8192, flops = 2 * m * m * m;
  EXPECT_NEAR(gemm_shape_time_s(hw, m, m, m, Precision::kBf16), flops / bf16_rate + fixed + 6 * m * m * per_byte,
              1e-12);
  // fp8 at 1978.9 TFLOP/s and 1 byte per element; the fixed cost is the bf16 one.
  const double e8 = hw.gemm_efficiency[static_cast<size_t>(Precision::kFp8)];
  EXPECT_NEAR(gemm_shape_time_s(hw, m, m, m, Precision::kFp8),
              flops / (1978.9e12 * e8 * s) + fixed + 3 * m * m * per_byte, 1e-12);
  // A skinny GEMM (the Azure table's 802816 x 192 x 768) reaches much less of the peak than a square one.
  EXPECT_LT(gemm_efficiency(hw, 2.0 * 802816 * 192 * 768, 2.0 * 802816 * 192 * 768 /
                                                              (2.0 * (802816 * 768 + 768 * 192 + 802816 * 192)),
                            Precision::kBf16),
            0.6 * e);
  EXPECT_NEAR(attention_time_s(hw, 1e12, Precision::kBf16), 1.0 / (989.4 * hw.attention_efficiency * s), 1e-12);
  EXPECT_NEAR(memory_time_s(hw, 3.35e9), 1e-3 / (hw.hbm_achievable_fraction * s), 1e-12);
  // An op is its compute plus its memory time, not their max.
  const double both = op_time_s(hw, 1e12, 3.35e9, Precision::kBf16, 0);
  EXPECT_NEAR(both, 1.0 / (989.4 * e * s) + 1e-3 / (hw.hbm_achievable_fraction * s), 1e-12);
}

// h100-pcie-8 carries no GEMM sweep of its own: it takes h100-sxm-8's fit (the same silicon), and the fit's fixed
// cost is a time, 5.62 us a GEMM at sustained_fraction 1 (the Azure ND H100 v5 FP8 sweep). Stated as GFLOP at the
// profile's own bf16 rate, a copied gemm_half_gflop would make it 5.62 x 989.4 / 756 = 7.36 us on the slower part.
TEST(ComputeModel, CopiedProfileKeepsTheFittedFixedTimePerGemm) {
  const HardwareProfile& pcie = *load_hardware_profile("h100-pcie-8");
  const HardwareProfile& sxm = *load_hardware_profile("h100-sxm-8");
  const size_t b = static_cast<size_t>(Precision::kBf16);
  EXPECT_EQ(pcie.peak_tflops[b], 756.0);
  EXPECT_EQ(sxm.peak_tflops[b], 989.4);
  // The fixed time at sustained_fraction 1, from each profile's own numbers: 5.62 us on both (to the 4 digits the
  // profile's gemm_half_gflop is written with).
  const double sxm_us = gemm_fixed_s(sxm) * sxm.sustained_fraction * 1e6;
  const double pcie_us = gemm_fixed_s(pcie) * pcie.sustained_fraction * 1e6;
  EXPECT_NEAR(sxm_us, 4.568e9 / (989.4e12 * 0.821) * 1e6, 1e-9);
  EXPECT_NEAR(sxm_us, 5.62, 0.005);
  EXPECT_NEAR(pcie_us, sxm_us, 0.002);
}

// h100-pcie-8 has no measured collective curve: it takes h100-sxm-8's fitted fixed costs (launch_us 9.25 us a call,
// latency_scale 1.454 on NCCL's latencies; the launch and enqueue cost is the GPU's and NCCL's, not the link's) over
// NCCL's PCIe constants. A small all-reduce on 8 ranks is then ring LL (NCCL src/graph/tuning.cc, single node):
// latency baseLat[Ring][LL] 6.6 us + 2 (8 - 1) hops x hwLat[PCI][Ring][LL] 1.0 us = 20.6 us; bus bandwidth
// min(llMaxBw 87.7, 48 GB/s (PCIe Gen5 x16 as NCCL reads it) / 4) = 12 GB/s, algorithm bandwidth 12 x 8 / 14.
// time = 9.25 + 1.454 x 20.6 + S / algbw, written out here from those constants.
TEST(CollectiveModel, PcieSmallAllReduceIsTheFittedFixedCostPlusSizeOverBandwidth) {
  const CollectiveModel pcie(*load_hardware_profile("h100-pcie-8"), 8);
  const double algbw_Bps = 12.0 * 8.0 / 14.0 * 1e9;
  for (double s : {1 * kKiB, 8 * kKiB, 64 * kKiB}) {
    const CollectiveCost c = pcie.best(CollectiveKind::kAllReduce, s);
    EXPECT_NEAR(c.time_s, (9.25 + 1.454 * 20.6) * 1e-6 + s / algbw_Bps, 1e-12) << s;
    EXPECT_EQ(c.algo, NcclAlgo::kRing);
    EXPECT_EQ(c.proto, NcclProto::kLL);
  }
  // 8 KiB: 39.20 + 1.19 = 40.40 us (h100-sxm-8's measured curve: 28.3 us; before the fixed costs: 21.8 us).
  EXPECT_NEAR(pcie.best(CollectiveKind::kAllReduce, 8 * kKiB).time_s * 1e6, 40.40, 0.005);
}

// PCIe's bandwidth is lower than NVLink's and the fixed costs are the same, so an all-reduce on 8 x H100 PCIe is never
// cheaper than on 8 x H100 SXM (priced there from its measured curve), at every size from 1 KiB to 1 GiB (factor
// 2^(1/4)).
TEST(CollectiveModel, PcieAllReduceIsNeverCheaperThanNvlink) {
  const auto pcie_hw = load_hardware_profile("h100-pcie-8"), sxm_hw = load_hardware_profile("h100-sxm-8");
  EXPECT_EQ(pcie_hw->latency_scale, sxm_hw->latency_scale);
  for (size_t c = 0; c < kProfileCollectiveCount; ++c) EXPECT_EQ(pcie_hw->launch_us[c], sxm_hw->launch_us[c]) << c;
  const CollectiveModel pcie(*pcie_hw, 8), sxm(*sxm_hw, 8);
  for (double s = kKiB; s <= kGiB * 1.0001; s *= std::pow(2.0, 0.25)) {
    EXPECT_GE(pcie.best(CollectiveKind::kAllReduce, s).time_s, sxm.best(CollectiveKind::kAllReduce, s).time_s) << s;
  }
}

// More work never costs less: on every shipped profile, at every precision, a GEMM's time does not fall when m, n
// or k doubles, over m, n, k in 1, 2, 4 .. 16384. (The former product of two hyperbolic falloffs failed this far
// below its fitted range: its cross term falls as 1 / (GFLOP x FLOP per byte).)
TEST(ComputeModel, GemmTimeIsNondecreasingInMNAndKOnEveryProfile) {
  std::vector<double> dims;
  for (double d = 1; d <= 16384; d *= 2) dims.push_back(d);
  for (const std::string& name : hardware_profile_names()) {
    const HardwareProfile& hw = *load_hardware_profile(name);
    for (size_t pi = 0; pi < kPrecisionCount; ++pi) {
      const Precision p = static_cast<Precision>(pi);
      int bad = 0;
      for (size_t a = 0; a < dims.size(); ++a)
        for (size_t b = 0; b < dims.size(); ++b)
          for (size_t c = 0; c + 1 < dims.size(); ++c) {
            const double x = dims[a], y = dims[b], lo = dims[c], hi = dims[c + 1];
            bad += gemm_shape_time_s(hw, hi, x, y, p) < gemm_shape_time_s(hw, lo, x, y, p);  // m
            bad += gemm_shape_time_s(hw, x, hi, y, p) < gemm_shape_time_s(hw, x, lo, y, p);  // n
            bad += gemm_shape_time_s(hw, x, y, hi, p) < gemm_shape_time_s(hw, x, y, lo, p);  // k
          }
      EXPECT_EQ(bad, 0) << name << " " << kPrecisionNames[pi];
    }
  }
}

// A 16-bit GEMM is never slower than the fp32 one where the 16-bit peak x efficiency is at least fp32's: the fixed
// cost is the same at every precision and the 16-bit operands are half the bytes.
TEST(ComputeModel, SixteenBitGemmIsNoSlowerThanFp32WhereItsRateIsHigher) {
  std::vector<double> dims;
  for (double d = 1; d <= 16384; d *= 2) dims.push_back(d);
  int compared = 0;
  for (const std::string& name : hardware_profile_names()) {
    const HardwareProfile& hw = *load_hardware_profile(name);
    const size_t f32 = static_cast<size_t>(Precision::kFp32);
    for (Precision p : {Precision::kBf16, Precision::kFp16}) {
      const size_t i = static_cast<size_t>(p);
      if (hw.peak_tflops[i] * hw.gemm_efficiency[i] < hw.peak_tflops[f32] * hw.gemm_efficiency[f32]) continue;
      ++compared;
      int bad = 0;
      for (double m : dims)
        for (double n : dims)
          for (double k : dims)
            bad += gemm_shape_time_s(hw, m, n, k, p) > gemm_shape_time_s(hw, m, n, k, Precision::kFp32);
      EXPECT_EQ(bad, 0) << name << " " << kPrecisionNames[i];
    }
  }
  EXPECT_GT(compared, 0);
}

// On large GEMMs the form is the former product form's first order: at 8192^3 the two agree within 1% on every
// shipped profile and precision. Product: flops / (peak x e_p x sustained) x (1 + r h / F) (1 + r hI / I), F GFLOP,
// I FLOP per byte, r = peak[p] / peak[bf16], h and hI the profile's half points.
TEST(ComputeModel, GemmAgreesWithTheProductFormAt8192Cubed) {
  const double m = 8192, flops = 2 * m * m * m;
  for (const std::string& name : hardware_profile_names()) {
    const HardwareProfile& hw = *load_hardware_profile(name);
    for (size_t pi = 0; pi < kPrecisionCount; ++pi) {
      const Precision p = static_cast<Precision>(pi);
      const double r = hw.peak_tflops[pi] / hw.peak_tflops[static_cast<size_t>(Precision::kBf16)];
      const double intensity = flops / (3 * m * m * precision_bytes(p));
      const double product = flops / (hw.peak_tflops[pi] * 1e12 * hw.gemm_efficiency[pi] * hw.sustained_fraction) *
                             (1 + r * hw.gemm_half_gflop / (flops * 1e-9)) *
                             (1 + r * hw.gemm_half_intensity / intensity);
      EXPECT_NEAR(gemm_shape_time_s(hw, m, m, m, p) / product, 1.0, 0.01) << name << " " << kPrecisionNames[pi];
    }
  }
}

TEST(Price, TableHasNcclTestsColumnsAndItsArithmetic) {
  PriceRequest r;
  parse_size_range("1K:8G", r);
  EXPECT_EQ(r.min_bytes, 1024.0);
  EXPECT_EQ(r.max_bytes, 8 * kGiB);
  const auto rows = price_rows(r);
  ASSERT_EQ(rows.size(), 24u);  // 2^10 .. 2^33
  for (const auto& row : rows) {
    EXPECT_EQ(row.count, row.bytes / 4);  // fp32
    EXPECT_NEAR(row.cost.algbw_GBps, row.bytes / row.cost.time_s / 1e9, 1e-9 * row.cost.algbw_GBps);
    EXPECT_NEAR(row.cost.busbw_GBps, 1.75 * row.cost.algbw_GBps, 1e-9 * row.cost.busbw_GBps);
  }
  const std::string t = price_table(r, rows);
  EXPECT_NE(t.find("size"), std::string::npos);
  EXPECT_NE(t.find("busbw"), std::string::npos);
  EXPECT_NE(t.find("nvls"), std::string::npos);
  // all_gather with bf16: nccl-tests prints the per-rank count, bytes / 2 / ranks.
  PriceRequest ag;
  ag.op = CollectiveKind::kAllGather;
  ag.dtype = data_type_from_name("bf16");
  parse_size_range("64M", ag);
  const auto one = price_rows(ag);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].count, 64 * kMiB / 2 / 8);
  EXPECT_NEAR(one[0].cost.busbw_GBps, 0.875 * one[0].cost.algbw_GBps, 1e-9);
  nlohmann::json j = price_json(ag, one);
  EXPECT_EQ(j["rows"][0]["algorithm"], "ring");
  EXPECT_EQ(j["type"], "bfloat16");
}

// Where each column of a price table ends (right-aligned numbers: size .. busbw) or starts (algo, proto, from): the
// table's lines from the column header on, each as the positions of its whitespace-separated fields.
std::vector<std::vector<std::pair<size_t, size_t>>> price_table_fields(const std::string& table) {
  std::vector<std::vector<std::pair<size_t, size_t>>> out;
  std::istringstream in(table);
  std::string line;
  bool header = false;
  while (std::getline(in, line)) {
    header = header || line.find("busbw") != std::string::npos;
    if (!header) continue;
    std::vector<std::pair<size_t, size_t>> f;  // [begin, end) of each field, the leading "#" left out
    for (size_t i = 0; i < line.size();) {
      if (line[i] == ' ' || (i == 0 && line[i] == '#')) {
        ++i;
        continue;
      }
      const size_t b = i;
      while (i < line.size() && line[i] != ' ') ++i;
      f.emplace_back(b, i);
    }
    out.push_back(f);
  }
  return out;
}

// QA: a time of 8 digits or more before the point, or the algorithm "nvlstree" (8 letters in a 5-wide column),
// pushed the rest of that row out of line with the header. Each column is now as wide as its widest field.
TEST(Price, ColumnsStayInLineForLongTimesAndNvlsTree) {
  PriceRequest nvlstree;  // 2 nodes of 8 H100 over IB: NVLSTree from 512 KiB
  nvlstree.hardware = "h100-sxm-8x4-ib";
  nvlstree.ranks = 16;
  nvlstree.dtype = data_type_from_name("fp32");
  parse_size_range("1K:1G:1024", nvlstree);
  PriceRequest slow;  // 1 TiB over PCIe: 4.0e7 us, 11 characters before the point
  slow.hardware = "h100-pcie-8";
  slow.dtype = data_type_from_name("fp32");
  parse_size_range("1G:1T:1024", slow);
  for (const PriceRequest& r : {nvlstree, slow}) {
    const auto rows = price_rows(r);
    const std::string table = price_table(r, rows);
    const auto lines = price_table_fields(table);
    ASSERT_EQ(lines.size(), rows.size() + 2) << table;  // the column names, the units, the rows
    const auto& names = lines[0];
    ASSERT_EQ(names.size(), 11u) << table;  // size count type redop root time algbw busbw algo proto from
    for (size_t l = 2; l < lines.size(); ++l) {
      ASSERT_EQ(lines[l].size(), 11u) << table;
      for (size_t c = 0; c < 8; ++c) EXPECT_EQ(lines[l][c].second, names[c].second) << "column " << c << "\n" << table;
      for (size_t c = 8; c < 11; ++c) EXPECT_EQ(lines[l][c].first, names[c].first) << "column " << c << "\n" << table;
    }
    for (size_t c : {0u, 1u, 5u, 6u, 7u}) EXPECT_EQ(lines[1][c < 5 ? c : c - 3].second, names[c].second) << table;
  }
  // The tables hold what made them go out of line: NVLSTree and a time of 11 characters before the point.
  EXPECT_NE(price_table(nvlstree, price_rows(nvlstree)).find(" nvlstree Simple "), std::string::npos);
  EXPECT_NE(price_table(slow, price_rows(slow)).find(" 40086498.92 "), std::string::npos);
}

TEST(Price, BadInputsAreRefusedWithWhatWasExpected) {
  PriceRequest r;
  EXPECT_THROW(parse_size_range("8G:1K", r), Error);
  EXPECT_THROW(parse_size_range("1X", r), Error);
  EXPECT_THROW(parse_size_range("1K:8G:1", r), Error);
  EXPECT_THROW(data_type_from_name("fp4"), Error);
  EXPECT_THROW(collective_kind_from_name("alltoall"), Error);
  r.hardware = "a100-sxm-8";
  r.algo = NcclAlgo::kNvls;
  try {
    price_rows(r);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no NVLink SHARP"), std::string::npos) << e.what();
  }
  r.hardware = "h200-1";
  r.algo.reset();
  EXPECT_THROW(price_rows(r), Error);  // one GPU: give --ranks
}

// Parsers on published outputs (tests/data/nccl_tests/README.md names each source). Expected: the files' numbers.
TEST(NcclTestsParser, ReadsEveryLayoutItsPublishedNumbers) {
  {
    const auto t = parse_nccl_tests(read_text(data_file("coreweave_gb200_nvl72_all_reduce.txt")), "cw");
    ASSERT_EQ(t.bytes.size(), 5u);
    EXPECT_EQ(t.bytes[0], 536870912.0);
    EXPECT_EQ(t.busbw_GBps[0], 586.06);  // out-of-place
    EXPECT_EQ(t.time_us[4], 20299.0);
    EXPECT_EQ(t.busbw_GBps[4], 834.57);
  }
  {
    // No root column, "error" columns; rows whose busbw prints 0.00 are kept for their times (calibrate derives
    // their busbw from the time where it knows the factor, else drops them).
    const auto t = parse_nccl_tests(read_text(data_file("nccl2.21_h20_two_nodes_no_root.txt")), "h20");
    ASSERT_EQ(t.bytes.size(), 8u);
    EXPECT_EQ(t.bytes[0], 4.0);
    EXPECT_EQ(t.busbw_GBps[0], 0.0);
    EXPECT_EQ(t.bytes[5], 128.0);
    EXPECT_EQ(t.time_us[5], 47.76);
    EXPECT_EQ(t.busbw_GBps[7], 0.02);
  }
  {
    const auto t = parse_nccl_tests(read_text(data_file("mpi_tagged_poor_allreduce.txt")), "mpi");
    ASSERT_EQ(t.bytes.size(), 10u);
    EXPECT_EQ(t.bytes[0], 1048576.0);
    EXPECT_EQ(t.busbw_GBps[0], 1.24);
    EXPECT_EQ(t.time_us[9], 193909.0);
  }
  {
    const auto t = parse_nccl_tests(read_text(data_file("nccl_tests_2.20_spark_all_reduce.txt")), "spark");
    ASSERT_EQ(t.bytes.size(), 4u);
    EXPECT_EQ(t.op, CollectiveKind::kAllReduce);  // "# Collective test starting: all_reduce_perf"
    EXPECT_EQ(t.ranks, 2);
    EXPECT_EQ(t.busbw_GBps[3], 0.96);
  }
  {
    const auto t = parse_nccl_tests(read_text(data_file("rccl_tests_all_reduce.jsonl")), "rccl");
    ASSERT_EQ(t.bytes.size(), 3u);  // the out-of-place lines of 1024, 2048 and 4096 bytes
    EXPECT_EQ(t.op, CollectiveKind::kAllReduce);
    EXPECT_EQ(t.ranks, 4);
    EXPECT_DOUBLE_EQ(t.busbw_GBps[1], 0.1581332859757086);
  }
  {
    const auto t = parse_nccl_tests(read_text(data_file("nccl_tests_json_a0b82b2.json")), "j");
    ASSERT_EQ(t.bytes.size(), 4u);
    EXPECT_EQ(t.op, CollectiveKind::kAllReduce);
    EXPECT_EQ(t.ranks, 8);
    EXPECT_DOUBLE_EQ(t.busbw_GBps[0], 0.07);
  }
  EXPECT_THROW(parse_nccl_tests("# nothing here\n", "empty.txt"), Error);
  EXPECT_THROW(parse_nccl_tests("{\"results\": 3}", "bad.json"), Error);
}

// The fits recover the constants that made their input (the formulas' own output, computed here).
TEST(Calibrate, CollectiveFitRecoversLatencyScaleAndLaunch) {
  HardwareProfile hw = *load_hardware_profile("h100-sxm-8");
  for (auto& per : hw.curves)
    for (auto& c : per) c = BusbwCurve{};
  HardwareProfile truth = hw;
  truth.latency_scale = 2.1;  // between two grid steps
  truth.launch_us[0] = 7.5;
  CollectiveModel m(truth, 8);
  NcclTestsTable t;
  t.op = CollectiveKind::kAllReduce;
  t.ranks = 8;
  for (double s = 1024; s <= 8 * kGiB; s *= 4) {
    t.bytes.push_back(s);
    t.busbw_GBps.push_back(m.best(CollectiveKind::kAllReduce, s).busbw_GBps);
    t.time_us.push_back(0);
  }
  const CollectiveFit f = fit_collectives(hw, {t});
  EXPECT_TRUE(f.fitted[0]);
  EXPECT_FALSE(f.fitted[1]);
  EXPECT_NEAR(f.latency_scale / truth.latency_scale, 1.0, 0.08);  // the grid steps 7.8%
  EXPECT_NEAR(f.launch_us[0], 7.5, 1.5);
}

TEST(Calibrate, GemmFitRecoversEfficiencyAndHalfPoints) {
  HardwareProfile hw = *load_hardware_profile("a100-sxm-8");
  hw.gemm_efficiency[static_cast<size_t>(Precision::kFp16)] = 0.8;
  hw.gemm_half_gflop = 2.0;
  hw.gemm_half_intensity = 100.0;
  std::vector<GemmPoint> pts;
  for (auto [m, n, k] : {std::array<double, 3>{1024, 1024, 1024}, {2048, 2048, 2048}, {8192, 8192, 8192},
                         {16384, 16384, 16384}, {802816, 192, 768}, {4096, 256, 4096}}) {
    const double flops = 2 * m * n * k, bytes = 2 * (m * k + k * n + m * n);
    pts.push_back({Precision::kFp16, m, n, k, 312.0 * gemm_efficiency(hw, flops, flops / bytes, Precision::kFp16)});
  }
  const GemmFit f = fit_gemm(*load_hardware_profile("a100-sxm-8"), pts);
  ASSERT_TRUE(f.efficiency[static_cast<size_t>(Precision::kFp16)].has_value());
  EXPECT_NEAR(*f.efficiency[static_cast<size_t>(Precision::kFp16)], 0.8, 0.02);
  EXPECT_NEAR(f.half_gflop / 2.0, 1.0, 0.15);      // log grid steps of 12%
  EXPECT_NEAR(f.half_intensity / 100.0, 1.0, 0.15);
  EXPECT_FALSE(f.efficiency[static_cast<size_t>(Precision::kBf16)].has_value());
}

// nccl-tests prints busbw at two decimals, so at small sizes the column is mostly rounding (0.01 GB/s for 128 B of a
// 47.76 us all-reduce). With the ranks known (--ranks: the excerpt lists none) the curve takes busbw from the time as
// nccl-tests computes it: 128 B / 47.76 us x 2 (16 - 1) / 16 = 0.0050251 GB/s; 4 B: 4 / 47.54 us x 1.875. Without
// them and without a row of 1 GB/s or more to read the factor from, the printed values stay and the 0.00 rows go.
TEST(Calibrate, SmallSizesTakeTheirBusbwFromTheTimeWhenTheRanksAreKnown) {
  CalibrateRequest r;
  r.base = "h100-sxm-8";
  r.out = "/tmp/never-written/h20.json";
  r.nccl_files = {"all_reduce=" + data_file("nccl2.21_h20_two_nodes_no_root.txt")};
  r.ranks = 16;
  const HardwareProfile p = parse_hardware_profile(calibrate(r).profile_text, "h20.json");
  const BusbwCurve& c = p.curves[0][kCurveDefault];
  ASSERT_EQ(c.bytes.size(), 8u);
  EXPECT_NEAR(c.busbw_GBps[0], 4.0 / 47.54e-6 / 1e9 * 1.875, 1e-12);
  EXPECT_EQ(c.bytes[5], 128.0);
  EXPECT_NEAR(c.busbw_GBps[5], 128.0 / 47.76e-6 / 1e9 * 1.875, 1e-12);
  CalibrateRequest unknown = r;
  unknown.ranks = 0;
  const CalibrateResult res = calibrate(unknown);
  const HardwareProfile up = parse_hardware_profile(res.profile_text, "h20.json");
  const BusbwCurve& u = up.curves[0][kCurveDefault];
  ASSERT_EQ(u.bytes.size(), 3u);  // 128, 256 and 512 B, as printed
  EXPECT_EQ(u.busbw_GBps[0], 0.01);
  EXPECT_NE(res.report.find("give --ranks N"), std::string::npos) << res.report;
  CalibrateRequest bad = r;
  bad.ranks = 1;
  EXPECT_THROW(calibrate(bad), Error);
}

TEST(Calibrate, WritesAProfileThatReadsBackWithTheMeasuredCurve) {
  CalibrateRequest r;
  r.base = "h100-sxm-8";
  r.out = "/tmp/never-written/my-node.json";
  r.nccl_files = {"all_reduce=" + data_file("coreweave_gb200_nvl72_all_reduce.txt")};
  const std::string gemm = "/tmp/gs_cal_gemm_" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream o(gemm);
    o << R"({"precision": "fp8", "shapes": [[1024,1024,1024,274.1],[2048,2048,2048,1011.3],[4096,4096,4096,1216.9],)"
         R"([8192,8192,8192,1290.1],[16384,16384,16384,1377.3],[1024,2145,1024,410.7],[6144,12288,12288,1351.4],)"
         R"([802816,192,768,663.8]]})";
  }
  r.gemm_files = {gemm};
  const CalibrateResult res = calibrate(r);
  std::remove(gemm.c_str());
  const HardwareProfile p = parse_hardware_profile(res.profile_text, "my-node.json");
  EXPECT_EQ(p.name, "my-node");
  const BusbwCurve& c = p.curves[0][kCurveDefault];
  ASSERT_EQ(c.bytes.size(), 5u);
  EXPECT_EQ(c.busbw_GBps[0], 586.06);
  EXPECT_NE(c.source.find("measured"), std::string::npos);
  EXPECT_NE(res.report.find("largest error of the analytic fit"), std::string::npos);
  // The Azure ND H100 v5 FP8 sweep: the largest shapes reach about 0.7 of the FP8 peak (1290-1377 of 1978.9).
  EXPECT_NEAR(p.gemm_efficiency[static_cast<size_t>(Precision::kFp8)], 0.72, 0.04);
  EXPECT_NE(res.report.find("802816"), std::string::npos);
  // A file that does not say its collective must be named.
  CalibrateRequest unnamed = r;
  unnamed.gemm_files.clear();
  unnamed.nccl_files = {data_file("coreweave_gb200_nvl72_all_reduce.txt")};
  EXPECT_THROW(calibrate(unnamed), Error);
}

// Timing-only runs report nccl-tests' algbw and busbw of their modeled collectives: busbw / algbw = 2(N-1)/N, and
// one bucket holding the whole 212-parameter MLP is one all-reduce of 848 bytes at the profile's price.
TEST(Report, TimingOnlyRunsFillAlgbwAndBusbw) {
  nlohmann::json j = {{"name", "bw"},
                      {"model", {{"kind", "mlp"}, {"layers", {8, 16, 4}}, {"loss", "cross_entropy"}}},
                      {"data", {{"kind", "none"}, {"batch_per_rank", 5}}},
                      {"cluster", {{"ranks", 8}}},
                      {"training", {{"mode", "timing"}, {"steps", 2}, {"optimizer", {{"kind", "sgd"}, {"lr", 0.1}}}}},
                      {"sync", {{"kind", "allreduce"}}}};
  const nlohmann::json run = test::run_scenario_text(j.dump())[0];
  const double algbw = run["communication"]["algbw_GBps"].get<double>();
  const double busbw = run["communication"]["busbw_GBps"].get<double>();
  EXPECT_NEAR(busbw / algbw, 1.75, 1e-9);
  CollectiveModel m(*load_hardware_profile("h100-sxm-8"), 8);
  EXPECT_NEAR(algbw, m.best(CollectiveKind::kAllReduce, 848).algbw_GBps, 1e-9 * algbw);
}

}  // namespace
}  // namespace gs
