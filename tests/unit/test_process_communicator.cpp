// The communicator across processes (make_process_communicator) without MPI: P "processes" are P communicators in this
// process joined by a process group of threads (ThreadGroup below, the MPI group's contract: all-gather in process
// order, broadcast); their N = P x L rank threads all-reduce and all-gather, and every rank's result is compared bit
// for bit (memcmp) with a serial sum in rank order 0..N-1, the one-process communicator's contract. The compressed
// reduction (sim/compress/reduce.h) over those processes gives every rank the bits one process gives, for a cast, top-k,
// PowerSGD and the other compressors, and its per-rank records gathered to process 0 give one process's report.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "kernels/rng.h"
#include "sim/comm/communicator.h"
#include "sim/comm/process_group.h"
#include "sim/compress/reduce.h"
#include "sim/core/barrier.h"
#include "sim/validate/validate.h"

namespace gs {
namespace {

struct Shared {
  explicit Shared(int processes) : barrier(processes), in(static_cast<size_t>(processes)) {}
  Barrier barrier;
  std::vector<const void*> in;
};

// Process p of a group whose processes are threads of this process (one caller thread per process at a time).
class ThreadGroup final : public ProcessGroup {
 public:
  ThreadGroup(Shared& shared, int process) : s_(shared), p_(process) {}
  int size() const override { return static_cast<int>(s_.in.size()); }
  int rank() const override { return p_; }
  void all_gather(const void* in, void* out, size_t bytes) override {
    s_.in[static_cast<size_t>(p_)] = in;
    s_.barrier.arrive_and_wait();
    for (int q = 0; q < size(); ++q)
      if (bytes > 0) std::memcpy(static_cast<char*>(out) + q * bytes, s_.in[static_cast<size_t>(q)], bytes);
    s_.barrier.arrive_and_wait();
  }
  void broadcast(void* buf, size_t bytes, int root) override {
    s_.in[static_cast<size_t>(p_)] = buf;
    s_.barrier.arrive_and_wait();
    if (p_ != root && bytes > 0) std::memcpy(buf, s_.in[static_cast<size_t>(root)], bytes);
    s_.barrier.arrive_and_wait();
  }
  std::vector<std::vector<char>> gather_to_root(const std::vector<char>& mine) override {
    s_.in[static_cast<size_t>(p_)] = &mine;
    s_.barrier.arrive_and_wait();
    std::vector<std::vector<char>> out;
    if (p_ == 0)
      for (const void* v : s_.in) out.push_back(*static_cast<const std::vector<char>*>(v));
    s_.barrier.arrive_and_wait();
    return out;
  }
  std::optional<int> max_within(int value, double) override { return value; }
  // Not used by the communicator under test (main's exit agreement only).
  std::optional<ExitAgreement> agree_on_exit(int code, uint64_t, double) override { return ExitAgreement{code, true}; }
  [[noreturn]] void abort(int) override { std::abort(); }

 private:
  Shared& s_;
  int p_;
};

// P processes of L ranks: their groups and communicators.
struct Job {
  Job(int processes, int local) : local_ranks(local), shared(processes) {
    for (int p = 0; p < processes; ++p) {
      groups.push_back(std::make_unique<ThreadGroup>(shared, p));
      comms.push_back(make_process_communicator(local, p * local, *groups.back()));
    }
  }
  Communicator& comm_of(int rank) { return *comms[static_cast<size_t>(rank / local_ranks)]; }
  int local_ranks;
  Shared shared;
  std::vector<std::unique_ptr<ProcessGroup>> groups;
  std::vector<std::unique_ptr<Communicator>> comms;
};

template <typename T>
std::vector<std::vector<T>> random_inputs(int ranks, size_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-1e3, 1e3);
  std::vector<std::vector<T>> in(static_cast<size_t>(ranks), std::vector<T>(count));
  for (auto& v : in)
    for (T& x : v) x = static_cast<T>(u(gen));
  return in;
}

// The serial reference: ((in_0 + in_1) + in_2) + ... per element.
template <typename T>
std::vector<T> rank_order_sum(const std::vector<std::vector<T>>& in) {
  std::vector<T> out = in[0];
  for (size_t r = 1; r < in.size(); ++r)
    for (size_t i = 0; i < out.size(); ++i) out[i] = out[i] + in[r][i];
  return out;
}

void run_threads(int ranks, const std::function<void(int)>& fn) {
  std::vector<std::future<void>> done;
  for (int r = 0; r < ranks; ++r) done.push_back(std::async(std::launch::async, fn, r));
  for (auto& d : done) {
    ASSERT_EQ(d.wait_for(std::chrono::seconds(120)), std::future_status::ready) << "a rank hangs";
    d.get();
  }
}

template <typename T>
void check_all_reduce(int processes, int local, size_t count) {
  Job job(processes, local);
  const int ranks = processes * local;
  std::vector<std::vector<T>> bufs = random_inputs<T>(ranks, count, static_cast<uint32_t>(count + ranks));
  const std::vector<T> want = rank_order_sum(bufs);
  run_threads(ranks, [&](int r) { job.comm_of(r).all_reduce_sum(r, bufs[static_cast<size_t>(r)].data(), count); });
  for (int r = 0; r < ranks; ++r)
    EXPECT_TRUE(count == 0 || std::memcmp(bufs[static_cast<size_t>(r)].data(), want.data(), count * sizeof(T)) == 0)
        << processes << " x " << local << " ranks, count " << count << ", rank " << r;
}

TEST(ProcessCommunicator, AllReduceEqualsTheSerialSumInRankOrderBitForBit) {
  for (const auto& [processes, local] : std::vector<std::pair<int, int>>{{2, 3}, {3, 2}, {1, 4}, {4, 1}}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{17}, size_t{100003}}) {
      check_all_reduce<float>(processes, local, count);
      check_all_reduce<double>(processes, local, count);
    }
  }
}

TEST(ProcessCommunicator, AllGatherPutsEveryRankInRankOrder) {
  Job job(3, 2);
  const size_t count = 1001;
  std::vector<std::vector<float>> in = random_inputs<float>(6, count, 7);
  std::vector<std::vector<float>> out(6, std::vector<float>(6 * count, -1.0f));
  run_threads(6, [&](int r) {
    job.comm_of(r).all_gather(r, out[static_cast<size_t>(r)].data(), in[static_cast<size_t>(r)].data(), count);
  });
  for (int r = 0; r < 6; ++r)
    for (int q = 0; q < 6; ++q)
      EXPECT_EQ(std::memcmp(out[static_cast<size_t>(r)].data() + q * count, in[static_cast<size_t>(q)].data(),
                            count * sizeof(float)),
                0)
          << "rank " << r << " block " << q;
}

TEST(ProcessCommunicator, BroadcastFromARankOfAnotherProcess) {
  Job job(2, 3);
  std::vector<std::vector<float>> bufs = random_inputs<float>(6, 33, 3);
  const std::vector<float> root = bufs[4];
  run_threads(6, [&](int r) { job.comm_of(r).broadcast(r, bufs[static_cast<size_t>(r)].data(), 33, 4); });
  for (int r = 0; r < 6; ++r) EXPECT_EQ(bufs[static_cast<size_t>(r)], root) << "rank " << r;
}

TEST(ProcessCommunicator, SizeIsEveryProcesssRanksAndForeignRanksAreRefused) {
  Job job(2, 3);
  EXPECT_EQ(job.comms[0]->size(), 6);
  float x = 1.0f;
  EXPECT_THROW(job.comms[0]->all_reduce_sum(3, &x, 1), Error);  // rank 3 is process 1's
}

// ---- The compressed reduction across processes ------------------------------------------------------------------

// A linear model [in, out] with bias under `compression` for `ranks` ranks.
RunConfig compressed_config(const json& compression, int ranks) {
  std::vector<ConfigIssue> issues;
  json j = {{"model", {{"kind", "linear"}, {"layers", {24, 10}}, {"bias", true}, {"loss", "mse"}}},
            {"data", {{"kind", "inline"}, {"ranks", json::array({json::array({{{"y", {{0.0}}}}})})}}},
            {"compression", compression}};
  RunConfig cfg = config_from_json(j, issues);
  cfg.cluster.ranks = ranks;
  return cfg;
}

// Three steps of `ranks` ranks' gradient sums (Philox normals, step and rank apart) reduced by CompressedReduction
// (red_of(rank): the reduction of the rank's process); returns [step][rank] the averaged gradients.
template <typename ReductionOf>
std::vector<std::vector<std::vector<float>>> reduce_steps(int ranks, size_t n, ReductionOf red_of) {
  std::vector<std::vector<std::vector<float>>> out;
  for (int64_t t = 0; t < 3; ++t) {
    std::vector<std::vector<float>> g(static_cast<size_t>(ranks), std::vector<float>(n));
    for (int r = 0; r < ranks; ++r)
      fill_normal(g[static_cast<size_t>(r)].data(), n, 11, Purpose::kInit, static_cast<uint32_t>(t),
                  static_cast<uint32_t>(r));
    run_threads(ranks, [&](int r) {
      PhaseClock clock;
      clock.begin_step();
      red_of(r).reduce(r, t, g[static_cast<size_t>(r)].data(), 8.0 * ranks, clock);
      clock.end_step();
    });
    out.push_back(std::move(g));
  }
  return out;
}

// The report without its measured times.
json without_times(json j) {
  for (const char* k : {"compress_time", "decompress_time"}) j.erase(k);
  return j;
}

TEST(ProcessCommunicator, CompressedReductionGivesTheOneProcessBitsAndReport) {
  const std::vector<json> kinds = {
      {{"kind", "fp16"}, {"divide", "split"}},
      {{"kind", "bf16"}, {"accumulate", "fp32"}},
      {{"kind", "topk"}, {"ratio", 0.1}, {"error_feedback", "gradient"}},
      {{"kind", "threshold"}, {"tau", 0.5}, {"error_feedback", "gradient"}},
      {{"kind", "powersgd"}, {"rank", 2}, {"error_feedback", "gradient"}},
      {{"kind", "signsgd"}, {"vote", true}},
      {{"kind", "dgc"}, {"ratio", 0.2}},
      {{"kind", "qsgd"}, {"levels", 4}},
  };
  for (const json& kind : kinds) {
    for (const auto& [processes, local] : std::vector<std::pair<int, int>>{{2, 3}, {3, 2}}) {
      const int ranks = processes * local;
      const RunConfig cfg = compressed_config(kind, ranks);
      std::unique_ptr<Model> model = make_model(cfg);
      const size_t n = model->num_params();
      const std::vector<std::pair<size_t, size_t>> buckets{{0, 100}, {100, n}};
      // One process.
      std::unique_ptr<Communicator> host = make_host_communicator(ranks);
      CompressedReduction one(cfg, *model, *host, ranks, buckets);
      const auto want = reduce_steps(ranks, n, [&](int) -> CompressedReduction& { return one; });
      // P processes: each its own reduction over its process communicator, as each mpirun process holds one.
      Job job(processes, local);
      std::vector<std::unique_ptr<CompressedReduction>> reds;
      for (int p = 0; p < processes; ++p)
        reds.push_back(std::make_unique<CompressedReduction>(cfg, *model, *job.comms[static_cast<size_t>(p)], ranks,
                                                             buckets));
      const auto got =
          reduce_steps(ranks, n, [&](int r) -> CompressedReduction& { return *reds[static_cast<size_t>(r / local)]; });
      for (size_t t = 0; t < want.size(); ++t)
        for (int r = 0; r < ranks; ++r)
          ASSERT_EQ(std::memcmp(got[t][static_cast<size_t>(r)].data(), want[t][static_cast<size_t>(r)].data(),
                                n * sizeof(float)),
                    0)
              << kind.dump() << " " << processes << " x " << local << " step " << t << " rank " << r;
      EXPECT_NE(want[0][0], want[2][0]) << kind.dump();  // the steps differ (not vacuous)
      // The per-rank records to process 0: its report is one process's (times apart).
      std::vector<std::thread> gather;
      for (int p = 0; p < processes; ++p)
        gather.emplace_back([&, p] {
          reds[static_cast<size_t>(p)]->gather_ranks(*job.groups[static_cast<size_t>(p)], p * local, local);
        });
      for (auto& g : gather) g.join();
      EXPECT_EQ(without_times(reds[0]->report()), without_times(one.report())) << kind.dump();
    }
  }
}

}  // namespace
}  // namespace gs
