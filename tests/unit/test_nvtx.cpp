// NVTX ranges of a host-backend run, seen by a real NVTX tool: the gradsweep binary runs with NVTX_INJECTION64_PATH
// pointing at tests/nvtx/nvtx_recorder.cpp, which records every push/pop with its nesting path per thread. The
// expected counts follow from the scenario (steps, micro-batches, eval cadence, the MLP's tensor sizes), not from the
// code under test; the recorded durations must nest (a child inside its parent, every rank's run inside the process). Skipped when the build has no NVTX3 headers (the ranges compile to nothing there).
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;

struct Range {
  uint64_t count = 0, payloads = 0, payload_sum = 0, unregistered = 0, total_ns = 0, max_ns = 0;
};

struct Record {
  std::vector<std::string> domains;
  std::multiset<std::pair<std::string, std::string>> strings;  // (domain, text)
  std::map<std::string, std::string> thread_comm;              // NVTX thread name -> kernel name at naming
  std::map<std::tuple<std::string, std::string, std::string>, Range> ranges;  // (thread, domain, path)
  std::vector<std::string> open, errors;

  // Ranges of one thread in the gradsweep domain: path -> totals.
  std::map<std::string, Range> of(const std::string& thread) const {
    std::map<std::string, Range> out;
    for (const auto& [k, v] : ranges)
      if (std::get<0>(k) == thread && std::get<1>(k) == "gradsweep") out[std::get<2>(k)] = v;
    return out;
  }
};

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> f;
  std::stringstream ss(line);
  std::string x;
  while (std::getline(ss, x, '\t')) f.push_back(x);
  return f;
}

Record read_record(const fs::path& path) {
  Record r;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto f = split_tabs(line);
    if (f.empty()) continue;
    if (f[0] == "domain" && f.size() == 2) r.domains.push_back(f[1]);
    if (f[0] == "string" && f.size() == 3) r.strings.insert({f[1], f[2]});
    if (f[0] == "thread" && f.size() == 3) r.thread_comm[f[1]] = f[2];
    if (f[0] == "range" && f.size() == 10)
      r.ranges[{f[1], f[2], f[3]}] = Range{std::stoull(f[4]), std::stoull(f[5]), std::stoull(f[6]),
                                           std::stoull(f[7]), std::stoull(f[8]), std::stoull(f[9])};
    if (f[0] == "open") r.open.push_back(line);
    if (f[0] == "error") r.errors.push_back(line);
  }
  return r;
}

class NvtxRanges : public ::testing::Test {
 protected:
  void SetUp() override {
#if !defined(GRADSWEEP_NVTX_RECORDER)
    GTEST_SKIP() << "built without the NVTX3 headers: no ranges to record";
#endif
    dir_ = fs::temp_directory_path() /
           ("gradsweep_nvtx_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Runs the binary on `scenario` with the recorder attached (or, with `tool` false, without it); returns the record.
  // wall_ns_: how long the whole process took, on the steady clock.
  Record run(const std::string& scenario, const std::vector<std::string>& sets, bool tool = true) {
#if defined(GRADSWEEP_NVTX_RECORDER)
    const fs::path file = dir_ / "scenario.json", record = dir_ / "record.tsv", log = dir_ / "log.txt";
    std::ofstream(file) << scenario;
    std::string cmd = std::string(tool ? "NVTX_INJECTION64_PATH='" GRADSWEEP_NVTX_RECORDER "' " : "") +
                      "GRADSWEEP_NVTX_RECORD='" + record.string() + "' '" GRADSWEEP_BINARY "' run '" + file.string() +
                      "' --out '" + (dir_ / "out").string() + "' --quiet";
    for (const auto& s : sets) cmd += " --set '" + s + "'";
    cmd += " > '" + log.string() + "' 2>&1";
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = std::system(cmd.c_str());
    wall_ns_ = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    std::stringstream text;
    text << std::ifstream(log).rdbuf();
    EXPECT_EQ(rc, 0) << cmd << "\n" << text.str();
    return read_record(record);
#else
    (void)scenario;
    (void)sets;
    (void)tool;
    return {};
#endif
  }

  fs::path dir_;
  uint64_t wall_ns_ = 0;
};

// MLP 16-32-4: tensors W1 (16x32), b1 (32), W2 (32x4), b2 (4): 676 parameters, 2704 bytes of fp32 gradient.
constexpr uint64_t kGradBytes = (16 * 32 + 32 + 32 * 4 + 4) * 4;
constexpr int kTensors = 4;

const char* kScenario = R"({
  "name": "nvtx",
  "model": {"kind": "mlp", "layers": [16, 32, 4], "loss": "cross_entropy"},
  "data": {"kind": "teacher", "batch_per_rank": 8,
           "teacher": {"in_dim": 16, "hidden": 24, "out_dim": 4, "train_samples": 512, "eval_samples": 64}},
  "cluster": {"ranks": 2, "backend": "host"},
  "training": {"steps": 6, "accumulation_steps": 2, "eval_every": 3,
               "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9}}
})";

TEST_F(NvtxRanges, RankThreadsNestRunMeasureStepMicroStepForwardBackward) {
  // Replicated all-reduce with one bucket per tensor (bucket_mb of one byte closes a bucket after every tensor).
  Record r = run(kScenario, {"cluster.share_identical=false", "sync.bucket_mb=1e-6", "sync.first_bucket_mb=1e-6"});
  if (HasFatalFailure() || IsSkipped()) return;
  EXPECT_EQ(r.domains, std::vector<std::string>{"gradsweep"});
  // Every range name is a registered string of the domain, exactly once.
  std::multiset<std::pair<std::string, std::string>> names;
  for (const char* n : {"run", "measure", "step", "micro_step", "forward", "backward", "compress", "communicate",
                        "optimizer", "eval"})
    names.insert({"gradsweep", n});
  EXPECT_EQ(r.strings, names);
  EXPECT_TRUE(r.open.empty()) << r.open.front();
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
  // OS threads named "rank N" for NVTX and for the kernel (pthread_setname_np, read back from /proc).
  EXPECT_EQ(r.thread_comm, (std::map<std::string, std::string>{{"rank 0", "rank 0"}, {"rank 1", "rank 1"}}));

  const uint64_t steps = 6, micro = steps * 2;
  for (const std::string rank : {"rank 0", "rank 1"}) {
    std::map<std::string, Range> got = r.of(rank);
    std::map<std::string, uint64_t> want = {
        {"run", 1},
        {"run/measure", 1},
        {"run/measure/step", steps},
        {"run/measure/step/micro_step", micro},
        {"run/measure/step/micro_step/forward", micro},
        {"run/measure/step/micro_step/backward", micro},
        {"run/measure/step/communicate", steps * kTensors},
        {"run/measure/step/optimizer", steps},
    };
    if (rank == "rank 0") want["run/measure/step/eval"] = 2;  // after steps 3 and 6, on rank 0
    std::map<std::string, uint64_t> counts;
    for (const auto& [path, v] : got) {
      counts[path] = v.count;
      EXPECT_EQ(v.unregistered, 0u) << rank << " " << path << " pushed without a registered string";
    }
    EXPECT_EQ(counts, want) << rank;
    const Range& comm = got["run/measure/step/communicate"];
    EXPECT_EQ(comm.payloads, steps * kTensors) << "every communicate range carries its bucket's bytes";
    EXPECT_EQ(comm.payload_sum, steps * kGradBytes) << "the buckets add up to the whole fp32 gradient";
  }
  // The driver thread (not a rank) has the run's own range around setup, rank threads and teardown.
  bool driver_run = false;
  for (const auto& [k, v] : r.ranges)
    if (std::get<0>(k).rfind("comm:", 0) == 0 && std::get<2>(k) == "run" && v.count == 1) driver_run = true;
  EXPECT_TRUE(driver_run);
}

TEST_F(NvtxRanges, DurationsNestInsideTheirParentsAndTheProcess) {
  // Every range was open a positive time; a range's pushes lie inside its parent's, so the time of all children of a
  // path adds up to at most the parent's time; the longest push is at most their sum; and no rank thread's `run` lasts
  // longer than the whole process, timed from outside.
  Record r = run(kScenario, {"cluster.share_identical=false"});
  if (HasFatalFailure() || IsSkipped()) return;
  ASSERT_GT(wall_ns_, 0u);
  for (const std::string rank : {"rank 0", "rank 1"}) {
    std::map<std::string, Range> got = r.of(rank);
    ASSERT_FALSE(got.empty()) << rank;
    std::map<std::string, uint64_t> children_ns;
    for (const auto& [path, v] : got) {
      EXPECT_GT(v.total_ns, 0u) << rank << " " << path;
      EXPECT_LE(v.max_ns, v.total_ns) << rank << " " << path;
      EXPECT_GE(v.max_ns * v.count, v.total_ns) << rank << " " << path << ": the longest push times the count";
      const size_t slash = path.rfind('/');
      if (slash != std::string::npos) children_ns[path.substr(0, slash)] += v.total_ns;
    }
    for (const auto& [parent, ns] : children_ns) {
      ASSERT_TRUE(got.count(parent)) << rank << " " << parent;
      EXPECT_LE(ns, got[parent].total_ns) << rank << ": the children of " << parent << " outlast it";
    }
    EXPECT_LE(got["run"].total_ns, wall_ns_) << rank << ": a rank's run range outlasts the process";
    // Six steps, each with its forward and backward passes inside: the steps take most of the measured part.
    EXPECT_GE(got["run/measure/step"].total_ns, got["run/measure/step/micro_step/forward"].total_ns +
                                                    got["run/measure/step/micro_step/backward"].total_ns);
  }
}

TEST_F(NvtxRanges, SharedReductionIsOneCommunicateRangePerStep) {
  // share_identical (the default): each rank reduces and updates its slice of one shared buffer, one fused range.
  Record r = run(kScenario, {"cluster.ranks=3"});
  if (HasFatalFailure() || IsSkipped()) return;
  for (const std::string rank : {"rank 0", "rank 1", "rank 2"}) {
    std::map<std::string, Range> got = r.of(rank);
    EXPECT_EQ(got["run/measure/step"].count, 6u) << rank;
    EXPECT_EQ(got["run/measure/step/communicate"].count, 6u) << rank;
    EXPECT_EQ(got["run/measure/step/communicate"].payload_sum, 6 * kGradBytes) << rank;
    EXPECT_EQ(got.count("run/measure/step/optimizer"), 0u) << rank << ": the update is fused into the reduction";
  }
  EXPECT_TRUE(r.errors.empty());
}

TEST_F(NvtxRanges, CompressionHasCompressAndCommunicateUnderStep) {
  // Top-k with error feedback, one bucket: encode -> all-reduce of sizes + all-gather -> decode, then the update.
  Record r = run(kScenario, {"compression.kind=topk", "compression.ratio=0.1", "compression.error_feedback=true",
                                 "training.accumulation_steps=1"});
  if (HasFatalFailure() || IsSkipped()) return;
  for (const std::string rank : {"rank 0", "rank 1"}) {
    std::map<std::string, Range> got = r.of(rank);
    EXPECT_EQ(got["run/measure/step/micro_step"].count, 6u) << rank;
    EXPECT_EQ(got["run/measure/step/optimizer"].count, 6u) << rank;
    EXPECT_EQ(got["run/measure/step/communicate"].count, 6u) << rank;  // one bucket per step
    // Per step: error feedback p = g + e, encode, decode-and-sum, residual update: 4 compress ranges.
    EXPECT_EQ(got["run/measure/step/compress"].count, 24u) << rank;
    // The payload is the compressed message: below the dense gradient, above zero.
    const Range& c = got["run/measure/step/communicate"];
    EXPECT_EQ(c.payloads, 6u);
    EXPECT_GT(c.payload_sum, 0u);
    EXPECT_LT(c.payload_sum, 6 * kGradBytes / 2) << "top-k 10% with indices sends far less than the dense gradient";
  }
  EXPECT_TRUE(r.errors.empty());
  EXPECT_TRUE(r.open.empty());
}

TEST_F(NvtxRanges, LocalSgdCommunicatesOnlyWhenAveraging) {
  // Local SGD with H = 3 after 2 synchronous warm-up steps, 8 steps: warm-up steps all-reduce their gradient (one
  // bucket) and update; then every step updates locally and steps 5 and 8 average the parameters (one buffer of the
  // whole model), followed by the division by N (an optimizer range). Per rank: communicate 2 + 2 = 4, with
  // 4 x 2704 bytes; optimizer 8 + 2 = 10.
  Record r = run(kScenario, {"sync.kind=local_sgd", "sync.period=3", "sync.warmup_steps=2", "training.steps=8",
                             "training.eval_every=0"});
  if (HasFatalFailure() || IsSkipped()) return;
  for (const std::string rank : {"rank 0", "rank 1"}) {
    std::map<std::string, Range> got = r.of(rank);
    EXPECT_EQ(got["run/measure/step"].count, 8u) << rank;
    EXPECT_EQ(got["run/measure/step/communicate"].count, 4u) << rank;
    EXPECT_EQ(got["run/measure/step/communicate"].payload_sum, 4 * kGradBytes) << rank;
    EXPECT_EQ(got["run/measure/step/optimizer"].count, 10u) << rank;
  }
  EXPECT_TRUE(r.errors.empty());
  EXPECT_TRUE(r.open.empty());
}

TEST_F(NvtxRanges, NoToolNoRecord) {
  // Without NVTX_INJECTION64_PATH nothing loads the recorder, so no record is written (the ranges cost a branch).
  run(kScenario, {}, false);
  if (HasFatalFailure() || IsSkipped()) return;
  EXPECT_FALSE(fs::exists(dir_ / "record.tsv"));
}

}  // namespace
