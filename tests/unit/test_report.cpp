// Report pieces: timing summaries against numpy's definitions, time to target, atomic writes, the journal and
// resume (a truncated journal line is simply run again), and a report that a fresh writer never replaces.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "sim/report/report.h"
#include "sim/core/summary.h"

namespace gs {
namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(ReportSummary, PercentilesMatchNumpyLinear) {
  // numpy.percentile([4, 1, 3, 2, 10], [50, 95, 99]) = 3, 8.8, 9.76; mean 4; sample stdev sqrt(12.5).
  Summary s = summarize({4, 1, 3, 2, 10});
  EXPECT_EQ(s.count, 5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.p50, 3);
  EXPECT_NEAR(s.p95, 8.8, 1e-12);
  EXPECT_NEAR(s.p99, 9.76, 1e-12);
  EXPECT_DOUBLE_EQ(s.mean, 4);
  EXPECT_NEAR(s.stdev, std::sqrt(12.5), 1e-12);
  EXPECT_DOUBLE_EQ(s.total, 20);
  Summary one = summarize({2.5});
  EXPECT_EQ(one.stdev, 0);
  EXPECT_EQ(one.p99, 2.5);
  EXPECT_EQ(summarize({}).count, 0);
}

RunSpec spec_with_target(const std::string& metric, double value) {
  RunSpec spec;
  spec.id = "t.r0";
  spec.config.training.target = {metric, value};
  spec.swept = json::object();
  return spec;
}

RunResult result_with_series() {
  RunResult r;
  for (int i = 1; i <= 4; ++i) {
    SeriesPoint p;
    p.step = i;
    p.measured_s = 0.5 * i;
    p.train_loss = 1.0 / i;
    if (i % 2 == 0) {
      p.eval_loss = 1.2 / i;
      p.eval_accuracy = 0.4 * i / 2;  // 0.4 at step 2, 0.8 at step 4
    }
    r.series.push_back(p);
  }
  r.steps_completed = 4;
  return r;
}

TEST(ReportTarget, FirstPointReachingTheTarget) {
  json a = run_to_json(spec_with_target("eval_accuracy", 0.8), result_with_series());
  EXPECT_TRUE(a["time_to_target"]["reached"].get<bool>());
  EXPECT_EQ(a["time_to_target"]["step"], 4);
  EXPECT_EQ(a["time_to_target"]["measured_s"], 2.0);
  json l = run_to_json(spec_with_target("train_loss", 0.34), result_with_series());
  EXPECT_EQ(l["time_to_target"]["step"], 3);  // 1/3 <= 0.34
  json n = run_to_json(spec_with_target("eval_accuracy", 0.9), result_with_series());
  EXPECT_FALSE(n["time_to_target"]["reached"].get<bool>());
  EXPECT_TRUE(n["time_to_target"]["step"].is_null());
  json none = run_to_json(spec_with_target("", 0), result_with_series());
  EXPECT_TRUE(none["time_to_target"].is_null());
  // Final metrics come from the last evaluation; non-finite numbers are written as null.
  RunResult r = result_with_series();
  r.series.back().train_loss = std::nan("");
  json f = run_to_json(spec_with_target("", 0), r);
  EXPECT_TRUE(f["convergence"]["final"]["train_loss"].is_null());
  EXPECT_DOUBLE_EQ(f["convergence"]["final"]["eval_accuracy"].get<double>(), 0.8);
}

TEST(ReportSeries, LongRunsAreThinnedButKeepEvaluationsAndTheLastStep) {
  RunResult r;
  const int64_t n = 25003;  // stride 3 above 10000 points
  for (int64_t i = 1; i <= n; ++i) {
    SeriesPoint p;
    p.step = i;
    p.measured_s = 0.001 * static_cast<double>(i);
    p.train_loss = 1.0 / static_cast<double>(i);
    if (i % 1000 == 0 || i == 7) p.eval_loss = 0.5;
    r.series.push_back(p);
  }
  json j = run_to_json(spec_with_target("train_loss", 1.0 / 24999.5), r);
  const json& s = j["convergence"]["series"];
  EXPECT_LE(s.size(), kMaxSeriesPoints + 30);
  EXPECT_EQ(s.back()["step"], n);
  EXPECT_EQ(s[0]["step"], 3);  // every 3rd step
  bool has7 = false;
  for (const auto& p : s) has7 = has7 || p["step"] == 7;
  EXPECT_TRUE(has7) << "an evaluation step is always kept";
  // Time to target is computed from every step, not the thinned series: step 25000 reaches 1/24999.5.
  EXPECT_EQ(j["time_to_target"]["step"], 25000);
}

class ReportFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gs_report_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

Scenario tiny_scenario() {
  Scenario s;
  s.path = "x.json";
  s.name = "x";
  s.sha256 = std::string(64, 'a');
  return s;
}

TEST_F(ReportFiles, AtomicWriteLeavesNoTemporaryFile) {
  std::filesystem::create_directories(dir_);
  std::string path = (dir_ / "r.json").string();
  write_file_atomic(path, "{\"a\": 1}\n");
  write_file_atomic(path, "{\"a\": 2}\n");
  std::ifstream in(path);
  EXPECT_EQ(json::parse(in)["a"], 2);
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST_F(ReportFiles, ResumeKeepsFinishedRunsAndSkipsACutLine) {
  Scenario s = tiny_scenario();
  json header = {{"schema_version", 1}, {"context", {{"scenario_sha256", s.sha256}}}};
  {
    ReportWriter w(dir_.string(), s, header, false);
    w.add({{"id", "x.a=1.r0"}, {"index", 0}, {"disposition", "passed"}});
    w.add({{"id", "x.a=2.r0"}, {"index", 1}, {"disposition", "interrupted"}});
    w.add({{"id", "x.a=3.r0"}, {"index", 2}, {"disposition", "failed"}}, ReportWriter::Rewrite::kJournalOnly);
  }
  // A kill in the middle of appending leaves half a line.
  std::ofstream(dir_ / "runs.jsonl", std::ios::app) << "{\"id\": \"x.a=4.r0\", \"ind";
  ReportWriter again(dir_.string(), s, header, true);
  EXPECT_TRUE(again.done("x.a=1.r0"));
  EXPECT_FALSE(again.done("x.a=2.r0")) << "interrupted runs are run again";
  EXPECT_TRUE(again.done("x.a=3.r0")) << "the journal holds runs report.json does not have yet";
  EXPECT_FALSE(again.done("x.a=4.r0"));
  again.flush();
  std::ifstream in(dir_ / "report.json");
  json doc = json::parse(in);
  ASSERT_EQ(doc["runs"].size(), 2u);
  EXPECT_EQ(doc["runs"][0]["id"], "x.a=1.r0");  // in expansion order
  EXPECT_EQ(doc["runs"][1]["id"], "x.a=3.r0");
}

TEST_F(ReportFiles, ResumeRefusesAReportOfAnotherScenario) {
  Scenario s = tiny_scenario();
  json header = {{"schema_version", 1}, {"context", {{"scenario_sha256", s.sha256}}}};
  {
    ReportWriter w(dir_.string(), s, header, false);
    w.add({{"id", "x.r0"}, {"index", 0}, {"disposition", "passed"}});
  }
  Scenario changed = s;
  changed.sha256 = std::string(64, 'b');
  EXPECT_THROW(ReportWriter(dir_.string(), changed, header, true), Error);
  // Without --resume the old runs are never dropped: refused (nothing written), or moved aside with --overwrite.
  const std::string report_before = slurp(dir_ / "report.json"), journal_before = slurp(dir_ / "runs.jsonl");
  try {
    ReportWriter refused(dir_.string(), changed, header, false);
    ADD_FAILURE() << "a fresh writer replaced a report that holds a run";
  } catch (const ReportInTheWay& e) {
    EXPECT_EQ(e.existing.runs, 1u);
    EXPECT_NE(e.existing.mismatch.find("scenario sha256 differs"), std::string::npos) << e.existing.mismatch;
  }
  EXPECT_EQ(slurp(dir_ / "report.json"), report_before);
  EXPECT_EQ(slurp(dir_ / "runs.jsonl"), journal_before);
  ReportWriter fresh(dir_.string(), changed, header, false, {Disposition::kInterrupted},
                     ReportWriter::ExistingRuns::kMoveAside);
  EXPECT_FALSE(fresh.done("x.r0"));
  const std::filesystem::path aside = fresh.moved_aside();
  EXPECT_EQ(aside.parent_path(), dir_);
  EXPECT_EQ(aside.filename().string().rfind("replaced-", 0), 0u) << aside;
  EXPECT_EQ(slurp(aside / "report.json"), report_before);
  EXPECT_EQ(slurp(aside / "runs.jsonl"), journal_before);
}

TEST_F(ReportFiles, ResumeChecksTheJournalWhenTheReportCannotTell) {
  Scenario s = tiny_scenario();
  json header = {{"schema_version", 1}, {"context", {{"scenario_sha256", s.sha256}}}};
  {
    ReportWriter w(dir_.string(), s, header, false);
    w.add({{"id", "x.r0"}, {"index", 0}, {"disposition", "passed"}}, ReportWriter::Rewrite::kJournalOnly);
  }
  std::ofstream(dir_ / "report.json") << "{}";
  Scenario other = s;
  other.sha256 = std::string(64, 'c');
  EXPECT_THROW(ReportWriter(dir_.string(), other, header, true), Error);
  Scenario with_set = s;
  with_set.overrides = {"training.steps=3"};
  EXPECT_THROW(ReportWriter(dir_.string(), with_set, header, true), Error);
  ReportWriter same(dir_.string(), s, header, true);
  EXPECT_TRUE(same.done("x.r0"));
  // A journal without its header line cannot be trusted.
  std::ofstream(dir_ / "runs.jsonl") << "{\"id\": \"x.r0\", \"index\": 0}\n";
  EXPECT_THROW(ReportWriter(dir_.string(), s, header, true), Error);
}

TEST_F(ReportFiles, OneWriterPerFolder) {
  Scenario s = tiny_scenario();
  json header = {{"schema_version", 1}, {"context", {{"scenario_sha256", s.sha256}}}};
  ReportWriter first(dir_.string(), s, header, false);
  EXPECT_THROW(ReportWriter(dir_.string(), s, header, true), Error);
}

}  // namespace
}  // namespace gs
