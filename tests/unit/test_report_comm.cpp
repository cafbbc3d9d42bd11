// The report's communication figures on both paths: timing-only runs write the bytes the modeled clock prices (ring
// all-reduce 2(N-1)/N of the buffer per rank, parameter server pushes and the pulls a shard host sends), equal to what a
// full run measures; the
// parameter server's exposed communication is its push + pull. Extend: a new strategy's wire bytes are one more case.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "sim/config/run_config.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/hardware_profile.h"
#include "sim/model/model.h"
#include "sim/report/timeline.h"
#include "sim/validate/validate.h"
#include "tests/unit/scenario_helpers.h"

namespace gs {
namespace {

// A small MLP (8-16-4: 8*16 + 16 + 16*4 + 4 = 212 parameters) trained for real, or priced only (training.mode timing).
json mlp_run(int ranks, const json& sync, bool timing) {
  json j = {{"name", "comm"},
            {"model", {{"kind", "mlp"}, {"layers", {8, 16, 4}}, {"loss", "cross_entropy"}}},
            {"cluster", {{"ranks", ranks}}},
            {"training", {{"steps", 3}, {"eval_every", 0}, {"optimizer", {{"kind", "sgd"}, {"lr", 0.1}}}}},
            {"sync", sync}};
  if (timing) {
    j["data"] = {{"kind", "none"}, {"batch_per_rank", 5}};
    j["training"]["mode"] = "timing";
  } else {
    j["data"] = {{"kind", "teacher"}, {"batch_per_rank", 5},
                 {"teacher", {{"in_dim", 8}, {"hidden", 12}, {"out_dim", 4}, {"train_samples", 512},
                              {"eval_samples", 64}}}};
  }
  return j;
}

std::vector<double> bytes_per_rank(const json& run) {
  return run["communication"]["bytes_sent_per_rank_per_step"].get<std::vector<double>>();
}

constexpr double kMlpParams = 212.0;

// Ring all-reduce (Patarasuk & Yuan 2009; nccl-tests' busbw factor): each rank sends 2(N-1)/N of the fp32 buffer,
// 4 x 212 bytes, rounded down to whole bytes as the host communicator counts them. Both paths report it.
TEST(ReportCommunication, TimingOnlyAllReduceBytesAreTheRingShareAsMeasured) {
  for (int ranks : {2, 3, 8}) {
    const double ring = std::floor(2.0 * (ranks - 1) / ranks * 4.0 * kMlpParams);
    const json timing = test::run_scenario_text(mlp_run(ranks, {{"kind", "allreduce"}}, true).dump())[0];
    ASSERT_EQ(timing["num_params"], 212);
    const json full = test::run_scenario_text(mlp_run(ranks, {{"kind", "allreduce"}}, false).dump())[0];
    EXPECT_EQ(bytes_per_rank(timing), std::vector<double>(static_cast<size_t>(ranks), ring)) << ranks << " ranks";
    EXPECT_EQ(bytes_per_rank(full), std::vector<double>(static_cast<size_t>(ranks), ring)) << ranks << " ranks";
  }
}

// GPT-2 small (124,439,808 parameters) on 8 ranks, timing only: 2 x 7/8 x 4 bytes x n = 7n bytes per rank and step,
// whatever the bucketing (every bucket's share is a whole number of bytes here).
TEST(ReportCommunication, TimingOnlyGpt2AllReduceBytesAreSevenPerParameterOnEightRanks) {
  json j = {{"name", "gpt"}, {"model", {{"kind", "gpt2-small"}}}, {"data", {{"kind", "none"}}},
            {"cluster", {{"ranks", 8}}}, {"training", {{"mode", "timing"}, {"steps", 2}}}};
  const json run = test::run_scenario_text(j.dump())[0];
  ASSERT_EQ(run["num_params"], 124439808);
  EXPECT_EQ(bytes_per_rank(run), std::vector<double>(8, 7.0 * 124439808.0));
}

// Parameter server (BSP), bytes each rank SENDS per step (as for a collective): a worker's push, 4n bytes, except the
// share of a shard it hosts itself (with P co-located shards (P-1)/P of it); a pull is sent by the rank hosting the
// shard, 4n / P to each of the other N - 1 workers (a dedicated server is no rank: its pulls count nowhere). QA: with
// one co-located shard rank 0 showed 0 bytes although it sends every worker's pull: (N - 1) x 4n. Timing-only prices
// a step with both; the full run measures the same, except that after the last clock's push nobody pulls: over S = 3
// steps the pulls are 2/3 per step. With N shards every rank sends 2 (N-1)/N x 4n, ring all-reduce's count.
TEST(ReportCommunication, ParameterServerBytesArePushesAndServedPullsOnBothPaths) {
  const int ranks = 4;
  const double B = 4.0 * kMlpParams;  // one dense push or pull
  struct Case {
    json sync;
    std::vector<double> push, pulls;  // per rank: its push, and the pulls it sends as a shard host
  };
  const std::vector<Case> cases = {
      {{{"kind", "parameter_server"}}, std::vector<double>(4, B * 3 / 4), std::vector<double>(4, B * 3 / 4)},
      {{{"kind", "parameter_server"}, {"dedicated", true}}, std::vector<double>(4, B), std::vector<double>(4, 0.0)},
      {{{"kind", "parameter_server"}, {"shards", 1}}, {0.0, B, B, B}, {3 * B, 0.0, 0.0, 0.0}},
      {{{"kind", "parameter_server"}, {"shards", 2}}, {B / 2, B / 2, B, B}, {3 * B / 2, 3 * B / 2, 0.0, 0.0}},
  };
  for (const Case& k : cases) {
    const json timing = test::run_scenario_text(mlp_run(ranks, k.sync, true).dump())[0];
    const json run = test::run_scenario_text(mlp_run(ranks, k.sync, false).dump())[0];
    const std::vector<double> priced = bytes_per_rank(timing), measured = bytes_per_rank(run);
    ASSERT_EQ(priced.size(), 4u);
    ASSERT_EQ(measured.size(), 4u);
    for (size_t r = 0; r < 4; ++r) {
      EXPECT_EQ(priced[r], k.push[r] + k.pulls[r]) << k.sync.dump() << " rank " << r;
      EXPECT_NEAR(measured[r], k.push[r] + k.pulls[r] * 2.0 / 3.0, 1e-9 * B) << k.sync.dump() << " rank " << r;
    }
  }
  // N co-located shards: the ring all-reduce's 2 (N-1)/N x 4n per rank.
  const json ring = test::run_scenario_text(mlp_run(ranks, {{"kind", "allreduce"}}, true).dump())[0];
  const json ps = test::run_scenario_text(mlp_run(ranks, {{"kind", "parameter_server"}}, true).dump())[0];
  EXPECT_EQ(bytes_per_rank(ps), bytes_per_rank(ring));
}

double mean_ms(const json& dist) { return dist["all"]["mean_ms"].get<double>(); }

// The parameter server's exposed communication: a push starts after the whole backward and the next clock starts after
// the pull, so nothing overlaps compute: exposed = the communicate phase = 2 point-to-point transfers of the rank's
// bytes (priced by the collective model: p2p latency + bytes / link bandwidth), overlapped 0. Timing-only: every step;
// the full run's last step has the push only (the run ends before the pull): mean (2 + 2 + 1) / 3 transfers.
TEST(ReportCommunication, ParameterServerExposedCommunicationIsPushPlusPull) {
  const int ranks = 3;
  for (bool timing : {false, true}) {
    const json cfg = mlp_run(ranks, {{"kind", "parameter_server"}, {"dedicated", true}}, timing);
    const json run = test::run_scenario_text(cfg.dump())[0];
    Scenario sc = parse_scenario(cfg.dump(), "<test>");
    auto model = make_model(sc.runs[0].config);
    CostModel cm(sc.runs[0].config, *model);
    const double one_ms = cm.collectives().p2p_s(4.0 * kMlpParams) * 1e3;
    ASSERT_GT(one_ms, 0.0);
    const double push_pull_ms = timing ? 2.0 * one_ms : 5.0 / 3.0 * one_ms;
    const json& modeled = run["timing"]["modeled"];
    EXPECT_NEAR(mean_ms(modeled["communication"]["exposed"]), push_pull_ms, 1e-9 * push_pull_ms) << timing;
    EXPECT_NEAR(mean_ms(modeled["phases"]["communicate"]), push_pull_ms, 1e-9 * push_pull_ms) << timing;
    EXPECT_NEAR(mean_ms(modeled["communication"]["overlapped"]), 0.0, 1e-9 * push_pull_ms) << timing;
    EXPECT_EQ(modeled["communication"]["exposed"]["all"]["count"], 3 * ranks) << timing;
  }
}

// Every collective the modeled clock records (rank 0's first step: the report's buckets and its busbw_GBps) of every
// run of every shipped scenario (scenarios/*.json, scenarios/strategies/*.json) run timing-only, as `gradsweep run
// --timing-only` would (epoch-based runs given 2 steps; the runs timing-only refuses, the parameter server's SSP and
// compressed pushes, left out), moves its wire bytes (nccl-tests' busbw: nBytes x the bus-bandwidth factor) at no
// more than the profile's link bandwidth per direction over its own time: a busbw above it means a chain's time is
// not the time its bytes took (ZeRO stage 3's gathers once carried only their exposed part: 463.9 and 628.5 GB/s on
// NVLink, 65.8 and 73.0 on PCIe). The one exception is NVLink SHARP's all-reduce, which the switch reduces: each GPU
// sends and receives its buffer once, so its busbw is bounded by 2(N-1)/N x the link. Point-to-point chains
// (parameter server): bytes sent over their time, the same bound.
TEST(ReportCommunication, NoRecordedBusbwAboveTheLinkInAnyShippedScenarioTimingOnly) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const char* dir : {"/scenarios", "/scenarios/strategies"})
    for (const auto& e : fs::directory_iterator(std::string(GRADSWEEP_SOURCE_DIR) + dir))
      if (e.path().extension() == ".json") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 20u);
  int runs = 0, refused = 0, chains = 0, stage3 = 0;
  for (const std::string& file : files) {
    const Scenario s = load_scenario(file);
    for (const RunSpec& spec : s.runs) {
      json j = config_to_json(spec.config);
      j["training"]["mode"] = "timing";
      if (j["training"]["epochs"].get<double>() > 0) {
        j["training"]["epochs"] = 0.0;
        j["training"]["steps"] = 2;
      }
      std::vector<ConfigIssue> issues;
      const RunConfig c = config_from_json(j, issues);
      if (issues.empty()) validate_config(c, issues);
      if (!issues.empty()) {
        ++refused;
        continue;
      }
      const RunResult r = run_training(c);
      if (r.disposition == Disposition::kSkipped) continue;  // does not fit the GPU
      ASSERT_EQ(r.disposition, Disposition::kPassed) << spec.id << ": " << r.message;
      ++runs;
      const auto hw = load_hardware_profile(c.cluster.hardware);
      const double n = static_cast<double>(c.cluster.ranks);
      double wire = 0.0, coll_s = 0.0;
      for (const CommChain& ch : r.modeled_chains) {
        if (!(ch.comm_s > 0.0) || !(ch.wire_bytes > 0.0)) continue;
        ++chains;
        stage3 += ch.unshard ? 1 : 0;
        const bool nvls_all_reduce =
            ch.has_collective && ch.kind == CollectiveKind::kAllReduce && ch.chosen.algo == NcclAlgo::kNvls;
        const double bound = hw->link_GBps_per_direction * (nvls_all_reduce ? 2.0 * (n - 1.0) / n : 1.0);
        EXPECT_LE(ch.wire_bytes / ch.comm_s / 1e9, bound * (1.0 + 1e-9))
            << spec.id << " (" << file << "): chain [" << ch.range.begin << ", " << ch.range.end << ") "
            << kCollectiveKindNames[static_cast<size_t>(ch.kind)] << " " << ch.bytes << " bytes in " << ch.comm_s
            << " s on " << c.cluster.hardware;
        if (ch.has_collective && !nvls_all_reduce) {
          wire += ch.wire_bytes;
          coll_s += ch.comm_s;
        }
      }
      if (coll_s > 0.0) {
        EXPECT_LE(wire / coll_s / 1e9, hw->link_GBps_per_direction * (1.0 + 1e-9)) << spec.id;
      }
    }
  }
  EXPECT_GT(runs, 100);
  EXPECT_GT(chains, 1000);
  EXPECT_GT(stage3, 100) << "the stage-3 runs' per-layer gathers are among them";
  EXPECT_LT(refused, runs);
}


// One link per rank (docs/cost-model.md, "Link sharing"): in every shipped scenario run timing-only (2 steps, with
// its timeline, which holds every rank's every step), the collectives of a rank's step (the communication stream's
// chains and ZeRO stage 3's gathers on the unshard stream) are busy on the link no longer than the step lasts.
TEST(ReportCommunication, NoRankBusyOnItsLinkLongerThanItsStepInAnyShippedScenarioTimingOnly) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const char* dir : {"/scenarios", "/scenarios/strategies"})
    for (const auto& e : fs::directory_iterator(std::string(GRADSWEEP_SOURCE_DIR) + dir))
      if (e.path().extension() == ".json") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  int steps = 0, stage3 = 0, refused = 0;
  for (const std::string& file : files) {
    const Scenario s = load_scenario(file);
    for (const RunSpec& spec : s.runs) {
      json j = config_to_json(spec.config);
      j["training"]["mode"] = "timing";
      j["training"]["epochs"] = 0.0;
      j["training"]["steps"] = 2;
      j["report"]["timeline"] = true;
      std::vector<ConfigIssue> issues;
      const RunConfig c = config_from_json(j, issues);
      if (issues.empty()) validate_config(c, issues);
      if (!issues.empty()) {
        ++refused;
        continue;
      }
      const RunResult r = run_training(c);
      if (r.disposition == Disposition::kSkipped) continue;
      ASSERT_EQ(r.disposition, Disposition::kPassed) << spec.id << ": " << r.message;
      ASSERT_EQ(r.modeled_layouts.size(), r.modeled_steps.size()) << spec.id;
      for (size_t rank = 0; rank < r.modeled_layouts.size(); ++rank)
        for (size_t t = 0; t < r.modeled_layouts[rank].size(); ++t) {
          double busy = 0.0, gathers = 0.0;
          for (const ChainSpan& ch : r.modeled_layouts[rank][t].chains)
            if (ch.has_collective) {
              busy += ch.comm_s;
              gathers += ch.unshard ? ch.comm_s : 0.0;
            }
          const double step = r.modeled_steps[rank][t].step_s;
          EXPECT_LE(busy, step * (1.0 + 1e-9) + 1e-12)
              << spec.id << " (" << file << "), rank " << rank << " step " << t << ": " << busy * 1e3
              << " ms on the link (" << gathers * 1e3 << " ms of stage-3 gathers) in a " << step * 1e3 << " ms step";
          ++steps;
          stage3 += gathers > 0.0 ? 1 : 0;
        }
    }
  }
  EXPECT_GT(steps, 500);
  EXPECT_GT(stage3, 20) << "the stage-3 runs' steps are among them";
  EXPECT_LT(refused, steps);
}

// report.timeline's size bound (validate.h, timeline_slices_per_step) against the files written, timing-only, 2
// steps: GPT-2 XL under ZeRO stage 3 on PCIe (gathers, waits and 145 reduce-scatter buckets: the old estimate of 3
// slices per bucket and 250 buckets said 2.4x the file) and on NVLink, GPT-2 small on the all-reduce, an MLP with
// top-k (encode, collective, decode per bucket), with accumulation, and a trained MLP with top-k in small buckets. The estimate may not undercount (it refuses
// before a run writes more than the limit) and stays within 1.3x (2x under ZeRO stage 3, whose waits and compute
// splits exist only where a gather is exposed).
TEST(ReportTimeline, EstimateBoundsTheWrittenSlices) {
  const std::vector<std::string> cases = {
      R"({"model": {"kind": "gpt2-xl"}, "cluster": {"ranks": 8, "hardware": "h100-pcie-8"},
          "sync": {"kind": "zero", "stage": 3}})",
      R"({"model": {"kind": "gpt2-xl"}, "cluster": {"ranks": 8, "hardware": "h100-sxm-8"},
          "sync": {"kind": "zero", "stage": 3}})",
      R"({"model": {"kind": "gpt2-small"}, "cluster": {"ranks": 4, "hardware": "h100-sxm-8"}})",
      R"({"model": {"kind": "gpt2-small"}, "cluster": {"ranks": 4, "hardware": "h100-sxm-8"},
          "compression": {"kind": "topk"}})",
      R"({"model": {"kind": "gpt2-small"}, "cluster": {"ranks": 2, "hardware": "h100-sxm-8"},
          "training": {"accumulation_steps": 4}})",
      R"({"model": {"kind": "mlp", "layers": [16, 64, 64, 4], "loss": "cross_entropy"}, "cluster": {"ranks": 2},
          "data": {"kind": "teacher", "batch_per_rank": 8, "teacher": {"in_dim": 16, "out_dim": 4}},
          "training": {"mode": "train", "steps": 3, "accumulation_steps": 2, "eval_every": 0},
          "compression": {"kind": "topk"}, "sync": {"bucket_mb": 0.004, "first_bucket_mb": 0.004}})",
  };
  for (const std::string& text : cases) {
    const json extra = json::parse(text);
    json doc = json::parse(R"({"name": "tl", "data": {"kind": "none", "batch_per_rank": 1},
                               "training": {"mode": "timing", "steps": 2}, "report": {"timeline": true}})");
    doc.merge_patch(extra);
    const Scenario sc = parse_scenario(doc.dump(), "<test>");
    const RunConfig& c = sc.runs[0].config;
    auto model = make_model(c);
    const double estimate = timeline_slices_per_step(c, *model).per_step * static_cast<double>(c.training.steps);
    const RunResult res = run_training(c);
    ASSERT_EQ(res.disposition, Disposition::kPassed) << text << ": " << res.message;
    const double written = static_cast<double>(timeline_text("tl", res).slices);
    EXPECT_GE(estimate, written) << text;
    const double most = c.sync.kind == "zero" ? 2.0 : 1.3;
    EXPECT_LE(estimate, most * written) << text << ": estimate " << estimate << ", written " << written;
  }
}

}  // namespace
}  // namespace gs
