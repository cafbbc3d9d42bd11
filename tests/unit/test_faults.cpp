// Faults inside one process: a full disk and an unwritable folder through a replaced FileOps (CI runs as root, which
// permission bits do not stop), --retry-failed's choice of runs, the per-run time limit, and divergence naming the
// step and the first non-finite quantity. Signals and the CLI's exit codes are tested on the binary in
// tests/e2e/test_faults.py.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "sim/report/file_io.h"
#include "sim/report/report.h"
#include "sim/runtime/rank_loop.h"
#include "sim/validate/validate.h"

namespace gs {
namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Writes to paths containing `match` fail: ENOSPC after writing half the bytes (disk_full), or EACCES at open.
class BrokenDisk : public FileOps {
 public:
  std::string match;
  bool full = false, unwritable = false;
  int failures = 0;

  int open(const std::string& path, int flags, mode_t mode) override {
    if (unwritable && path.find(match) != std::string::npos && (flags & (O_WRONLY | O_RDWR | O_CREAT)) != 0) {
      ++failures;
      errno = EACCES;
      return -1;
    }
    int fd = FileOps::open(path, flags, mode);
    if (fd >= 0 && path.find(match) != std::string::npos) matched_fd_ = fd;
    return fd;
  }
  ssize_t write(int fd, const void* data, size_t bytes) override {
    if (full && fd == matched_fd_) {
      ++failures;
      FileOps::write(fd, data, bytes / 2);
      errno = ENOSPC;
      return -1;
    }
    return FileOps::write(fd, data, bytes);
  }
  int mkdirs(const std::string& path) override {
    if (unwritable && path.find(match) != std::string::npos && !std::filesystem::exists(path)) {
      errno = EACCES;
      return -1;
    }
    return FileOps::mkdirs(path);
  }

 private:
  int matched_fd_ = -1;
};

// Installs a FileOps for one test and restores the system's afterwards.
struct ScopedOps {
  explicit ScopedOps(FileOps* ops) { set_file_ops(ops); }
  ~ScopedOps() { set_file_ops(nullptr); }
};

class FaultsFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gs_faults_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    scenario_.path = "x.json";
    scenario_.name = "x";
    scenario_.sha256 = std::string(64, 'a');
    header_ = {{"schema_version", 1}, {"context", {{"scenario_sha256", scenario_.sha256}}}};
  }
  void TearDown() override {
    set_file_ops(nullptr);
    std::filesystem::remove_all(dir_);
  }
  int files_in_dir() const {
    int n = 0;
    for (auto& e : std::filesystem::directory_iterator(dir_)) n += e.is_regular_file();
    return n;
  }
  std::filesystem::path dir_;
  Scenario scenario_;
  json header_;
};

TEST_F(FaultsFiles, DiskFullWhileRewritingTheReportKeepsThePreviousOne) {
  ReportWriter w(dir_.string(), scenario_, header_, false);
  w.add({{"id", "x.a=1.r0"}, {"index", 0}, {"disposition", "passed"}}, ReportWriter::Rewrite::kJournalOnly);
  w.flush();
  const std::string before = read_text(dir_ / "report.json");
  ASSERT_EQ(json::parse(before)["runs"].size(), 1u);
  const int files_before = files_in_dir();

  BrokenDisk disk;
  disk.match = "report.json";
  disk.full = true;
  ScopedOps scoped(&disk);
  w.add({{"id", "x.a=2.r0"}, {"index", 1}, {"disposition", "passed"}}, ReportWriter::Rewrite::kJournalOnly);
  try {
    w.flush();
    FAIL() << "a full disk must be reported";
  } catch (const ReportIoError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(std::strerror(ENOSPC)), std::string::npos) << m;
    EXPECT_NE(m.find("report.json"), std::string::npos) << m;
    EXPECT_NE(m.find("unchanged"), std::string::npos) << m;
  }
  EXPECT_EQ(disk.failures, 1);
  EXPECT_EQ(read_text(dir_ / "report.json"), before) << "the previous report must stay byte for byte";
  EXPECT_EQ(files_in_dir(), files_before) << "the half-written temporary file must be removed";
}

TEST_F(FaultsFiles, DiskFullWhileAppendingCutsTheJournalBack) {
  ReportWriter w(dir_.string(), scenario_, header_, false);
  w.add({{"id", "x.a=1.r0"}, {"index", 0}, {"disposition", "passed"}}, ReportWriter::Rewrite::kJournalOnly);
  const std::string journal = read_text(dir_ / "runs.jsonl");
  BrokenDisk disk;
  disk.match = "runs.jsonl";
  disk.full = true;
  {
    ScopedOps scoped(&disk);
    EXPECT_THROW(w.add({{"id", "x.a=2.r0"}, {"index", 1}, {"disposition", "passed"}},
                       ReportWriter::Rewrite::kJournalOnly),
                 ReportIoError);
  }
  EXPECT_EQ(disk.failures, 1);
  EXPECT_EQ(read_text(dir_ / "runs.jsonl"), journal) << "no partial line may stay in the journal";
  // Once there is room again, the next line is whole and resume sees both runs' predecessors intact.
  w.add({{"id", "x.a=3.r0"}, {"index", 2}, {"disposition", "passed"}}, ReportWriter::Rewrite::kJournalOnly);
}

TEST_F(FaultsFiles, ResumeCutsAPartialJournalLineSoTheNextLineStaysReadable) {
  {
    ReportWriter w(dir_.string(), scenario_, header_, false);
    w.add({{"id", "x.a=1.r0"}, {"index", 0}, {"disposition", "passed"}}, ReportWriter::Rewrite::kJournalOnly);
  }
  std::ofstream(dir_ / "runs.jsonl", std::ios::app) << "{\"id\": \"x.a=2.r0\", \"ind";  // killed mid-append
  {
    ReportWriter w(dir_.string(), scenario_, header_, true);
    EXPECT_FALSE(w.done("x.a=2.r0"));
    w.add({{"id", "x.a=2.r0"}, {"index", 1}, {"disposition", "passed"}}, ReportWriter::Rewrite::kJournalOnly);
  }
  ReportWriter again(dir_.string(), scenario_, header_, true);
  EXPECT_TRUE(again.done("x.a=1.r0"));
  EXPECT_TRUE(again.done("x.a=2.r0")) << "the run appended after a cut line was lost";
}

TEST_F(FaultsFiles, UnwritableFolderIsAClearErrorAndTheReportStays) {
  {
    ReportWriter w(dir_.string(), scenario_, header_, false);
    w.add({{"id", "x.a=1.r0"}, {"index", 0}, {"disposition", "passed"}});
    w.flush();
  }
  const std::string before = read_text(dir_ / "report.json");
  BrokenDisk disk;
  disk.match = dir_.string();
  disk.unwritable = true;
  ScopedOps scoped(&disk);
  try {
    ReportWriter w(dir_.string(), scenario_, header_, true);
    FAIL() << "an unwritable folder must be reported";
  } catch (const ReportIoError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(dir_.string()), std::string::npos) << m;
    EXPECT_NE(m.find(std::strerror(EACCES)), std::string::npos) << m;
  }
  EXPECT_EQ(read_text(dir_ / "report.json"), before);
  // A folder that does not exist yet and cannot be created.
  const auto sub = dir_ / "new";
  EXPECT_THROW(ReportWriter(sub.string(), scenario_, header_, false), ReportIoError);
  EXPECT_FALSE(std::filesystem::exists(sub));
  // And write_file_atomic on its own refuses without leaving anything behind.
  EXPECT_THROW(write_file_atomic((dir_ / "report.json").string(), "{}"), ReportIoError);
  EXPECT_EQ(read_text(dir_ / "report.json"), before);
}

TEST_F(FaultsFiles, RetryFailedRerunsFailedDivergedAndTimeoutRuns) {
  {
    ReportWriter w(dir_.string(), scenario_, header_, false);
    int i = 0;
    for (const char* d : {"passed", "failed", "diverged", "timeout", "interrupted", "skipped"})
      w.add({{"id", std::string("x.") + d}, {"index", i++}, {"disposition", d}}, ReportWriter::Rewrite::kJournalOnly);
  }
  {
    ReportWriter plain(dir_.string(), scenario_, header_, true);
    for (const char* d : {"passed", "failed", "diverged", "timeout", "skipped"})
      EXPECT_TRUE(plain.done(std::string("x.") + d)) << d;
    EXPECT_FALSE(plain.done("x.interrupted"));
  }
  ReportWriter retry(dir_.string(), scenario_, header_, true,
                     {Disposition::kInterrupted, Disposition::kFailed, Disposition::kDiverged, Disposition::kTimeout});
  EXPECT_TRUE(retry.done("x.passed"));
  EXPECT_TRUE(retry.done("x.skipped"));
  for (const char* d : {"failed", "diverged", "timeout", "interrupted"})
    EXPECT_FALSE(retry.done(std::string("x.") + d)) << d;
}

// A linear model y = w*x (one weight, no bias, mse) on one inline sample; every step is the exact SGD update
// w <- w - lr * (w*x - y) * x, so which quantity overflows float first follows from the numbers.
RunConfig linear_run(double x, double w0, double lr, int64_t steps) {
  RunConfig c;
  c.name = "faults";
  c.model.kind = "linear";
  c.model.layers = {1, 1};
  c.model.bias = false;
  c.model.loss = "mse";
  c.model.initial_weights = json::array({json::array({w0})});
  c.data.kind = "inline";
  c.data.ranks = json::array({json::array({json{{"x", {{x}}}, {"y", {{0.0}}}}})});
  c.training.steps = steps;
  c.training.eval_every = 0;
  c.training.optimizer.lr = lr;
  return c;
}

TEST(FaultsDivergence, LossOverflowsFirst) {
  // x = 1e30, w = 1: the prediction 1e30 is a float, its loss 0.5 * 1e60 is not.
  RunResult r = run_training(linear_run(1e30, 1.0, 0.1, 10));
  EXPECT_EQ(r.disposition, Disposition::kDiverged);
  EXPECT_EQ(r.divergence_quantity, "train_loss");
  EXPECT_EQ(r.divergence_step, 1);
  EXPECT_EQ(r.steps_completed, 1);
  EXPECT_NE(r.message.find("step 1"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("training loss"), std::string::npos) << r.message;
}

TEST(FaultsDivergence, GradientOverflowsFirst) {
  // x = 3e38 (float max 3.4e38), w = 1e-30: prediction 3e8, loss 4.5e16 (finite), gradient 3e8 * 3e38 = inf.
  RunResult r = run_training(linear_run(3e38, 1e-30, 0.1, 10));
  EXPECT_EQ(r.disposition, Disposition::kDiverged);
  EXPECT_EQ(r.divergence_quantity, "gradient");
  EXPECT_EQ(r.divergence_step, 1);
  ASSERT_EQ(r.series.size(), 1u);
  EXPECT_NEAR(r.series[0].train_loss, 0.5 * 3e8 * 3e8, 0.5 * 3e8 * 3e8 * 1e-5);
  EXPECT_NE(r.message.find("gradient"), std::string::npos) << r.message;
}

TEST(FaultsDivergence, ParametersOverflowFirst) {
  // x = 1e5, w = 1: loss 5e9 and gradient 1e10 are finite; the update 1 - 1e30 * 1e10 is -inf in float. Step 2
  // sees the non-finite parameters: the quantity is the parameters after step 1's update.
  RunResult r = run_training(linear_run(1e5, 1.0, 1e30, 10));
  EXPECT_EQ(r.disposition, Disposition::kDiverged);
  EXPECT_EQ(r.divergence_quantity, "parameters");
  EXPECT_EQ(r.divergence_step, 1);
  ASSERT_GE(r.series.size(), 1u);
  EXPECT_NEAR(r.series[0].train_loss, 5e9, 5e9 * 1e-6);
  EXPECT_NE(r.message.find("parameters after its update"), std::string::npos) << r.message;
}

TEST(FaultsDivergence, AStableRunIsNotFlagged) {
  // w <- w - 0.1 * w * 1: w = 0.9^k, loss 0.5 * 0.81^k, all finite.
  RunResult r = run_training(linear_run(1.0, 1.0, 0.1, 5));
  EXPECT_EQ(r.disposition, Disposition::kPassed) << r.message;
  ASSERT_EQ(r.series.size(), 5u);
  EXPECT_NEAR(r.series[4].train_loss, 0.5 * std::pow(0.81, 4), 1e-6);
}

TEST(FaultsTimeout, RunStopsAtAStepBoundaryAfterTheLimit) {
  RunConfig c = linear_run(1.0, 1.0, 0.1, 1000000000);
  c.cluster.ranks = 2;
  c.data.ranks = json::array({c.data.ranks[0], c.data.ranks[0]});
  c.training.run_timeout_s = 0.2;
  RunResult r = run_training(c);
  EXPECT_EQ(r.disposition, Disposition::kTimeout) << r.message;
  EXPECT_GT(r.steps_completed, 0);
  EXPECT_LT(r.steps_completed, 1000000000);
  EXPECT_EQ(static_cast<int64_t>(r.series.size()), r.steps_completed);
  EXPECT_GE(r.wall_s, 0.2);
  EXPECT_NE(r.message.find("run_timeout_s"), std::string::npos) << r.message;
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(static_cast<int64_t>(r.steps[1].size()), r.steps_completed) << "both ranks stop at the same step";
}

}  // namespace
}  // namespace gs

namespace gs {
namespace {

// Issues of a scenario text, "" when it is valid.
std::string problems(const json& doc) {
  try {
    parse_scenario(doc.dump(), "<test>");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

json teacher_doc() {
  return {{"name", "limits"},
          {"model", {{"kind", "mlp"}, {"layers", {8, 16, 4}}}},
          {"data", {{"kind", "teacher"}, {"batch_per_rank", 4},
                    {"teacher", {{"in_dim", 8}, {"hidden", 12}, {"out_dim", 4}, {"train_samples", 4096},
                                 {"eval_samples", 64}}}}},
          {"training", {{"steps", 5}}}};
}

TEST(FaultsLimits, AbsurdSettingsAreRefusedWithTheLimitNamed) {
  ASSERT_EQ(problems(teacher_doc()), "");
  auto with = [](const std::string& ptr, const json& v) {
    json d = teacher_doc();
    d[json::json_pointer(ptr)] = v;
    return problems(d);
  };
  std::string m = with("/cluster/ranks", 100000);
  EXPECT_NE(m.find("cluster.ranks: expected an integer >= 1 and <= 1024"), std::string::npos) << m;
  m = with("/training/steps", 1e12);
  EXPECT_NE(m.find("training.steps: expected an integer >= 1 and <= 1000000000"), std::string::npos) << m;
  m = with("/model/layers", json::array({8, 1000000000, 4}));
  EXPECT_NE(m.find("model.layers[1]: expected an integer >= 1 and <= 1048576"), std::string::npos) << m;
  // Every width allowed, the product not: 2^20 x 2^20 x 2 weights = 2^41 parameters > 2^32.
  json wide = teacher_doc();
  wide["model"]["layers"] = {8, 1 << 20, 1 << 20, 4};
  m = problems(wide);
  EXPECT_NE(m.find("parameters is more than the limit of 4294967296 (2^32)"), std::string::npos) << m;
  // Epochs that come to more than 1e9 steps: 4096 samples / (1 x 1 x 4) = 1024 steps per epoch x 1e6 epochs.
  json many = teacher_doc();
  many["training"] = {{"epochs", 1e6}};
  m = problems(many);
  EXPECT_NE(m.find("1024000000 optimizer steps, more than the limit of 1000000000"), std::string::npos) << m;
  // A teacher of 2^16 x (2^16 + 4) weights > 2^30, refused before anything is built.
  json big = teacher_doc();
  big["data"]["teacher"]["in_dim"] = 65536;
  big["data"]["teacher"]["hidden"] = 65536;
  big["model"]["layers"] = {65536, 4};
  big["model"]["kind"] = "linear";
  m = problems(big);
  EXPECT_NE(m.find("more than the limit of 1073741824"), std::string::npos) << m;
  // Its evaluation set: 1e7 samples x 16384 x (8 + 4) weights = 1.97e12 multiply-adds > 1e12.
  json slow = teacher_doc();
  slow["data"]["teacher"]["hidden"] = 16384;
  slow["data"]["teacher"]["eval_samples"] = 10000000;
  m = problems(slow);
  EXPECT_NE(m.find("data.teacher.eval_samples: generating the evaluation set takes 1.97e+12 multiply-adds"),
            std::string::npos) << m;
}

TEST(FaultsLimits, InlineEmptinessCheckIsFastForLargeAccumulation) {
  // Rank 0 has micro-batches of 1 and 0 samples, rank 1 only empty ones; with K = 65536 every step sees 32768
  // samples. (The check sums K micro-batches from prefix sums: 100000 steps x 65536 micro-batches stay cheap.)
  json d = {{"name", "inl"},
            {"model", {{"kind", "linear"}, {"layers", {1, 1}}, {"loss", "mse"}}},
            {"data", {{"kind", "inline"},
                      {"ranks", {{{{"x", {{1.0}}}, {"y", {{1.0}}}}, {{"x", json::array()}, {"y", json::array()}}},
                                 {{{"x", json::array()}, {"y", json::array()}}}}}}},
            {"cluster", {{"ranks", 2}}},
            {"training", {{"steps", 1000000}, {"accumulation_steps", 65536}}}};
  EXPECT_EQ(problems(d), "");
  // With K = 1 every second step of rank 0 is empty, and rank 1 has nothing: step 2 has no samples.
  d["training"]["accumulation_steps"] = 1;
  std::string m = problems(d);
  EXPECT_NE(m.find("step 2 has no samples on any rank"), std::string::npos) << m;
}

// Between a locker's open and its flock, the holder removes the lock file (remove_lock_file) and, with third_locker,
// another process creates and locks a new one: the race that removing a lock file opens. open returns the old file.
class RemovedWhileOpening : public FileOps {
 public:
  bool third_locker = false;
  int opens = 0, other_fd = -1;
  int open(const std::string& path, int flags, mode_t mode) override {
    const int fd = FileOps::open(path, flags, mode);
    if (++opens == 1) {
      ::unlink(path.c_str());
      if (third_locker) {
        other_fd = FileOps::open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (other_fd < 0 || ::flock(other_fd, LOCK_EX | LOCK_NB) != 0) ADD_FAILURE() << "the third locker failed";
      }
    }
    return fd;
  }
};

bool same_file(int fd, const std::string& path) {
  struct stat a {}, b {};
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

TEST_F(FaultsFiles, LockFileIsExclusiveAndItsHolderRemovesIt) {
  std::filesystem::create_directories(dir_);
  const std::string path = (dir_ / ".lock").string();
  const int fd = lock_exclusive(path);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(lock_exclusive(path), kLockHeld);
  EXPECT_TRUE(same_file(fd, path));
  remove_lock_file(fd, path);
  EXPECT_FALSE(std::filesystem::exists(path));
  const int again = lock_exclusive(path);  // a new file, free
  ASSERT_GE(again, 0);
  remove_lock_file(again, path);
}

TEST_F(FaultsFiles, TheLockOfALockFileRemovedMeanwhileIsNotKept) {
  std::filesystem::create_directories(dir_);
  const std::string path = (dir_ / ".lock").string();
  {
    // The removed file's flock is free, but the folder's lock is now the new file's, held by the third process.
    RemovedWhileOpening race;
    race.third_locker = true;
    ScopedOps scoped(&race);
    EXPECT_EQ(lock_exclusive(path), kLockHeld);
    EXPECT_EQ(race.opens, 2);  // the removed file, then the one at path now
    ::close(race.other_fd);
  }
  std::filesystem::remove(path);
  {
    // Removed and not replaced: the lock taken is that of a new file at path, not of the removed one.
    RemovedWhileOpening race;
    ScopedOps scoped(&race);
    const int fd = lock_exclusive(path);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(race.opens, 2);
    EXPECT_TRUE(same_file(fd, path));
    remove_lock_file(fd, path);
  }
}

}  // namespace
}  // namespace gs
