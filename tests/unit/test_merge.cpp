// gradsweep merge's comparison of two runs of one id (sim/report/merge.h, without_measured): the measured fields
// named in reports/README.md ("Slices and merged reports") are left out wherever they are, every other field is kept,
// and algbw/busbw are left out only where they come from measured steps (timing-only runs price them).
#include <gtest/gtest.h>

#include "sim/report/merge.h"

namespace gs {
namespace {

using nlohmann::json;

TEST(Merge, WithoutMeasuredLeavesOutTheMeasuredFieldsOnly) {
  const json run = json::parse(R"({
    "id": "x.r0", "wall_s": 1.5, "disposition": "passed",
    "memory": {"total_bytes": 10, "available_bytes": 99},
    "timing": {"measured": {"step": {}}, "modeled": {"step": {"all": {"mean_ms": 2.0}}}, "model_error": {"step": 0.1}},
    "throughput": {"samples_per_s": 5.0, "modeled_samples_per_s": 6.0},
    "communication": {"bytes_sent_per_rank_per_step": [4, 4], "algbw_GBps": 1.0, "busbw_GBps": 2.0},
    "compression": {"compress_time": {"mean_ms": 1}, "decompress_time": {"mean_ms": 1}, "ratio": 0.01},
    "convergence": {"series": [{"step": 1, "measured_s": 0.1, "modeled_s": 0.2, "train_loss": 0.5}]},
    "time_to_target": {"reached": true, "measured_s": 0.1, "modeled_s": 0.2},
    "data": {"max_queue_depth": [2, 3], "prefetch": 2,
             "totals": {"stall_measured_s": 0.1, "stall_share_measured": 0.5, "stall_modeled_s": 0.3}}
  })");
  const json expected = json::parse(R"({
    "id": "x.r0", "disposition": "passed",
    "memory": {"total_bytes": 10},
    "timing": {"modeled": {"step": {"all": {"mean_ms": 2.0}}}},
    "throughput": {"modeled_samples_per_s": 6.0},
    "communication": {"bytes_sent_per_rank_per_step": [4, 4]},
    "compression": {"ratio": 0.01},
    "convergence": {"series": [{"step": 1, "modeled_s": 0.2, "train_loss": 0.5}]},
    "time_to_target": {"reached": true, "modeled_s": 0.2},
    "data": {"prefetch": 2, "totals": {"stall_modeled_s": 0.3}}
  })");
  EXPECT_EQ(without_measured(run), expected) << without_measured(run).dump(1);
}

TEST(Merge, TimingOnlyRunsKeepTheirModeledBandwidth) {
  const json run = json::parse(R"({"id": "t.r0", "timing": {"measured": null, "modeled": {}},
                                   "communication": {"algbw_GBps": 1.0, "busbw_GBps": 2.0}})");
  const json expected = json::parse(R"({"id": "t.r0", "timing": {"modeled": {}},
                                        "communication": {"algbw_GBps": 1.0, "busbw_GBps": 2.0}})");
  EXPECT_EQ(without_measured(run), expected);
}

}  // namespace
}  // namespace gs
