// Tests of the Barrier and the host Communicator: N rank threads run collectives whose results are compared bit for
// bit (memcmp) with a serial reference summed in rank order; stats against nccl-tests' byte formulas; abort.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sim/comm/communicator.h"
#include "sim/core/barrier.h"
#include "sim/core/clock.h"

namespace gs {
namespace {

using namespace std::chrono_literals;

constexpr size_t kLargeCount = 1000003;  // large and odd: ranges that do not split evenly into tiles or ranks
const std::vector<size_t> kCounts = {0, 1, 17, kLargeCount};

// Runs fn(rank) on `ranks` threads and returns each rank's exception (null if it returned). If a rank has not
// finished by the deadline, the test fails and comm.abort() (when given) unblocks the rest instead of hanging.
std::vector<std::exception_ptr> run_ranks(int ranks, const std::function<void(int)>& fn,
                                          Communicator* comm = nullptr,
                                          std::chrono::seconds timeout = std::chrono::seconds(120)) {
  std::vector<std::future<void>> done;
  for (int r = 0; r < ranks; ++r) done.push_back(std::async(std::launch::async, fn, r));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::exception_ptr> errors(ranks);
  for (int r = 0; r < ranks; ++r) {
    if (done[r].wait_until(deadline) != std::future_status::ready) {
      ADD_FAILURE() << "rank " << r << " still blocked after " << timeout.count() << " s";
      if (comm != nullptr) comm->abort();
    }
  }
  for (int r = 0; r < ranks; ++r) {
    try {
      done[r].get();
    } catch (...) {
      errors[r] = std::current_exception();
    }
  }
  return errors;
}

// Fails the test for every rank that threw; returns true when none did.
bool expect_no_errors(const std::vector<std::exception_ptr>& errors) {
  bool ok = true;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    ok = false;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << " threw: " << e.what();
    }
  }
  return ok;
}

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Inputs whose sum depends on the order of addition: large values that cancel mixed with small ones
// (1e8f + 1 - 1e8f is 0 in float, 1e8f - 1e8f + 1 is 1). Element 0 alone already tells rank order from reverse.
template <typename T>
T input_value(uint64_t seed, int rank, size_t i) {
  const double big = sizeof(T) == 4 ? 1e8 : 1e17;
  if (i == 0) return static_cast<T>(rank == 0 ? big : rank == 1 ? -big : rank == 2 ? 1.0 : 0.0);  // a sure witness
  const double table[] = {big, -big, 1.0, -3.0, 0.5, 0.1, big * 0.75, -0.0};
  return static_cast<T>(table[mix(seed * 0x10001 + static_cast<uint64_t>(rank) * 0x100000001ULL + i) % 8]);
}

template <typename T>
std::vector<T> make_input(uint64_t seed, int rank, size_t count) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = input_value<T>(seed, rank, i);
  return v;
}

// Serial reference: sum over ranks in the order given, per element, in T's precision.
template <typename T>
std::vector<T> reference_sum(const std::vector<std::vector<T>>& in, size_t count, bool reverse = false) {
  const int ranks = static_cast<int>(in.size());
  std::vector<T> out(count);
  for (size_t i = 0; i < count; ++i) {
    T acc = in[reverse ? ranks - 1 : 0][i];
    for (int k = 1; k < ranks; ++k) acc += in[reverse ? ranks - 1 - k : k][i];
    out[i] = acc;
  }
  return out;
}

template <typename T>
bool same_bits(const T* a, const T* b, size_t count) {
  return count == 0 || std::memcmp(a, b, count * sizeof(T)) == 0;
}

uint64_t all_reduce_bytes(int ranks, size_t count, size_t elem_bytes) {
  return 2ULL * (ranks - 1) * count * elem_bytes / ranks;
}

// All-reduce of N ranks' buffers (odd ranks at a 4-byte offset, so buffers are not all 64-byte aligned), compared
// bit for bit with the rank-order reference on every rank.
template <typename T>
void check_all_reduce(int ranks, size_t count, uint64_t seed) {
  SCOPED_TRACE("ranks=" + std::to_string(ranks) + " count=" + std::to_string(count));
  std::vector<std::vector<T>> inputs;
  for (int r = 0; r < ranks; ++r) inputs.push_back(make_input<T>(seed, r, count));
  const std::vector<T> expected = reference_sum(inputs, count);
  if (ranks >= 3 && count >= 1) {
    // The inputs must make a wrong order visible, or this test proves nothing about the order.
    ASSERT_FALSE(same_bits(expected.data(), reference_sum(inputs, count, true).data(), count));
  }
  std::vector<std::vector<T>> storage(ranks);
  std::vector<T*> bufs(ranks);
  for (int r = 0; r < ranks; ++r) {
    storage[r].resize(count + 1);
    bufs[r] = storage[r].data() + (r % 2);
    if (count > 0) std::memcpy(bufs[r], inputs[r].data(), count * sizeof(T));
  }
  auto comm = make_host_communicator(ranks);
  ASSERT_TRUE(expect_no_errors(run_ranks(ranks, [&](int r) { comm->all_reduce_sum(r, bufs[r], count); },
                                         comm.get())));
  for (int r = 0; r < ranks; ++r) {
    EXPECT_TRUE(same_bits(expected.data(), bufs[r], count)) << "rank " << r << " differs from the reference";
    const CommStats stats = comm->take_stats(r);
    EXPECT_EQ(stats.bytes_sent, all_reduce_bytes(ranks, count, sizeof(T)));
    EXPECT_EQ(stats.calls, 1u);
    EXPECT_GE(stats.wait_s, 0.0);
  }
}

TEST(CollectivesAllReduce, FloatIsBitExactRankOrderSum) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (size_t count : kCounts) check_all_reduce<float>(ranks, count, 1);
  }
}

TEST(CollectivesAllReduce, DoubleIsBitExactRankOrderSum) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (size_t count : kCounts) check_all_reduce<double>(ranks, count, 2);
  }
}

TEST(CollectivesAllReduce, ManySmallCallsInARow) {
  // Hammers the barrier: thousands of back-to-back collectives with 8 threads on few cores.
  constexpr int kRanks = 8;
  constexpr int kCalls = 2000;
  auto comm = make_host_communicator(kRanks);
  std::atomic<int> wrong{0};
  auto errors = run_ranks(
      kRanks,
      [&](int r) {
        for (int call = 0; call < kCalls; ++call) {
          float v[3] = {static_cast<float>(r + call), 1.0f, static_cast<float>(r)};
          comm->all_reduce_sum(r, v, 3);
          const float want0 = static_cast<float>(kRanks * call + kRanks * (kRanks - 1) / 2);
          if (v[0] != want0 || v[1] != kRanks || v[2] != kRanks * (kRanks - 1) / 2) wrong.fetch_add(1);
        }
      },
      comm.get());
  EXPECT_TRUE(expect_no_errors(errors));
  EXPECT_EQ(wrong.load(), 0);
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(comm->take_stats(r).calls, static_cast<uint64_t>(kCalls));
}

TEST(CollectivesAllGather, EveryRankGetsEveryBlock) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{17}, size_t{250001}}) {
      SCOPED_TRACE("ranks=" + std::to_string(ranks) + " count=" + std::to_string(count));
      std::vector<std::vector<float>> in;
      std::vector<std::vector<float>> out(ranks, std::vector<float>(ranks * count, -1.0f));
      for (int r = 0; r < ranks; ++r) in.push_back(make_input<float>(3, r, count));
      auto comm = make_host_communicator(ranks);
      ASSERT_TRUE(expect_no_errors(run_ranks(
          ranks, [&](int r) { comm->all_gather(r, out[r].data(), in[r].data(), count); }, comm.get())));
      for (int r = 0; r < ranks; ++r) {
        for (int q = 0; q < ranks; ++q) {
          EXPECT_TRUE(same_bits(in[q].data(), out[r].data() + q * count, count)) << "rank " << r << " block " << q;
        }
        EXPECT_EQ(comm->take_stats(r).bytes_sent, uint64_t{(ranks - 1) * count * sizeof(float)});
      }
    }
  }
}

TEST(CollectivesAllGather, InPlaceInputInsideOutput) {
  constexpr int kRanks = 4;
  constexpr size_t kCount = 1001;
  std::vector<std::vector<float>> out(kRanks, std::vector<float>(kRanks * kCount, -1.0f));
  for (int r = 0; r < kRanks; ++r) {
    const auto in = make_input<float>(4, r, kCount);
    std::copy(in.begin(), in.end(), out[r].begin() + r * kCount);
  }
  auto comm = make_host_communicator(kRanks);
  ASSERT_TRUE(expect_no_errors(run_ranks(
      kRanks, [&](int r) { comm->all_gather(r, out[r].data(), out[r].data() + r * kCount, kCount); },
      comm.get())));
  for (int r = 0; r < kRanks; ++r) {
    for (int q = 0; q < kRanks; ++q) {
      EXPECT_TRUE(same_bits(make_input<float>(4, q, kCount).data(), out[r].data() + q * kCount, kCount));
    }
  }
}

TEST(CollectivesReduceScatter, EachRankGetsItsBlockSummedInRankOrder) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{17}, size_t{250001}}) {
      SCOPED_TRACE("ranks=" + std::to_string(ranks) + " count=" + std::to_string(count));
      std::vector<std::vector<float>> in;
      for (int r = 0; r < ranks; ++r) in.push_back(make_input<float>(5, r, ranks * count));
      const std::vector<float> expected = reference_sum(in, ranks * count);
      std::vector<std::vector<float>> out(ranks, std::vector<float>(count, -1.0f));
      auto comm = make_host_communicator(ranks);
      ASSERT_TRUE(expect_no_errors(run_ranks(
          ranks, [&](int r) { comm->reduce_scatter_sum(r, out[r].data(), in[r].data(), count); }, comm.get())));
      for (int r = 0; r < ranks; ++r) {
        EXPECT_TRUE(same_bits(expected.data() + r * count, out[r].data(), count)) << "rank " << r;
        EXPECT_EQ(comm->take_stats(r).bytes_sent, uint64_t{(ranks - 1) * count * sizeof(float)});
      }
    }
  }
}

TEST(CollectivesBroadcast, EveryRankGetsTheRootBuffer) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (size_t count : {size_t{0}, size_t{17}, kLargeCount}) {
      const int root = ranks - 1;
      SCOPED_TRACE("ranks=" + std::to_string(ranks) + " count=" + std::to_string(count));
      std::vector<std::vector<float>> buf;
      for (int r = 0; r < ranks; ++r) buf.push_back(make_input<float>(6, r, count));
      const std::vector<float> expected = buf[root];
      auto comm = make_host_communicator(ranks);
      ASSERT_TRUE(expect_no_errors(
          run_ranks(ranks, [&](int r) { comm->broadcast(r, buf[r].data(), count, root); }, comm.get())));
      for (int r = 0; r < ranks; ++r) {
        EXPECT_TRUE(same_bits(expected.data(), buf[r].data(), count)) << "rank " << r;
        EXPECT_EQ(comm->take_stats(r).bytes_sent, r == root ? uint64_t{count * sizeof(float)} : 0u);
      }
    }
  }
}

TEST(CollectivesSequence, MixedCollectivesOnDifferentSizesAndStats) {
  // One communicator, one run of consecutive collectives of different kinds and sizes; every result checked, then
  // the stats must add up to the nccl-tests byte formulas.
  for (int ranks : {1, 3, 8}) {
    SCOPED_TRACE("ranks=" + std::to_string(ranks));
    const size_t n = static_cast<size_t>(ranks);
    const std::vector<size_t> reduce_counts = {17, 1, kLargeCount, 0, 4096, 4097};
    std::vector<std::vector<std::vector<float>>> ar_in;  // [call][rank]
    std::vector<std::vector<float>> ar_expected;
    for (size_t c = 0; c < reduce_counts.size(); ++c) {
      ar_in.emplace_back();
      for (int r = 0; r < ranks; ++r) ar_in[c].push_back(make_input<float>(10 + c, r, reduce_counts[c]));
      ar_expected.push_back(reference_sum(ar_in[c], reduce_counts[c]));
    }
    std::vector<std::vector<double>> d_in;
    for (int r = 0; r < ranks; ++r) d_in.push_back(make_input<double>(20, r, 3));
    const std::vector<double> d_expected = reference_sum(d_in, 3);
    constexpr size_t kGather = 333;
    constexpr size_t kScatter = 129;
    std::vector<std::vector<float>> rs_in;
    for (int r = 0; r < ranks; ++r) rs_in.push_back(make_input<float>(30, r, n * kScatter));
    const std::vector<float> rs_expected = reference_sum(rs_in, n * kScatter);

    auto comm = make_host_communicator(ranks);
    std::atomic<int> wrong{0};
    auto check = [&](bool ok) {
      if (!ok) wrong.fetch_add(1);
    };
    auto errors = run_ranks(
        ranks,
        [&](int r) {
          for (size_t c = 0; c < reduce_counts.size(); ++c) {
            std::vector<float> buf = ar_in[c][r];
            comm->all_reduce_sum(r, buf.data(), buf.size());
            check(same_bits(ar_expected[c].data(), buf.data(), buf.size()));
            if (c == 1) {
              std::vector<float> in = make_input<float>(40, r, kGather);
              std::vector<float> out(n * kGather);
              comm->all_gather(r, out.data(), in.data(), kGather);
              for (int q = 0; q < ranks; ++q) {
                check(same_bits(make_input<float>(40, q, kGather).data(), out.data() + q * kGather, kGather));
              }
            }
            if (c == 2) {
              std::vector<float> out(kScatter);
              comm->reduce_scatter_sum(r, out.data(), rs_in[r].data(), kScatter);
              check(same_bits(rs_expected.data() + r * kScatter, out.data(), kScatter));
              std::vector<double> d = d_in[r];
              comm->all_reduce_sum(r, d.data(), d.size());
              check(same_bits(d_expected.data(), d.data(), d.size()));
            }
          }
          std::vector<float> b = make_input<float>(50, r, 1000);
          comm->broadcast(r, b.data(), b.size(), 0);
          check(same_bits(make_input<float>(50, 0, 1000).data(), b.data(), b.size()));
          comm->barrier(r);
        },
        comm.get());
    ASSERT_TRUE(expect_no_errors(errors));
    EXPECT_EQ(wrong.load(), 0);
    for (int r = 0; r < ranks; ++r) {
      uint64_t bytes = 0;
      for (size_t count : reduce_counts) bytes += all_reduce_bytes(ranks, count, sizeof(float));
      bytes += all_reduce_bytes(ranks, 3, sizeof(double));
      bytes += (n - 1) * kGather * sizeof(float);   // all-gather: (n-1)/n of n*count
      bytes += (n - 1) * kScatter * sizeof(float);  // reduce-scatter: (n-1)/n of n*count
      if (r == 0) bytes += 1000 * sizeof(float);    // broadcast: the root sends the buffer
      const CommStats stats = comm->take_stats(r);
      EXPECT_EQ(stats.bytes_sent, bytes) << "rank " << r;
      EXPECT_EQ(stats.calls, reduce_counts.size() + 5) << "rank " << r;
      EXPECT_GE(stats.wait_s, 0.0);
      const CommStats again = comm->take_stats(r);  // take_stats resets
      EXPECT_EQ(again.bytes_sent, 0u);
      EXPECT_EQ(again.calls, 0u);
      EXPECT_EQ(again.wait_s, 0.0);
    }
  }
}

TEST(CollectivesAbort, FailedRankDoesNotHangTheOthers) {
  for (int ranks : {2, 4, 8}) {
    SCOPED_TRACE("ranks=" + std::to_string(ranks));
    const int failing = ranks / 2;
    auto comm = make_host_communicator(ranks);
    std::vector<std::vector<float>> bufs(ranks, std::vector<float>(100000, 1.0f));
    std::promise<void> failed;
    std::future<void> failed_seen = failed.get_future();
    std::vector<std::future<void>> done;
    for (int r = 0; r < ranks; ++r) {
      done.push_back(std::async(std::launch::async, [&, r] {
        comm->all_reduce_sum(r, bufs[r].data(), bufs[r].size());  // one good collective first
        if (r == failing) {
          failed.set_value();
          throw std::runtime_error("rank failed before the collective");
        }
        comm->all_reduce_sum(r, bufs[r].data(), bufs[r].size());
      }));
    }
    // The test plays the World: once a rank has failed, it aborts the communicator.
    ASSERT_EQ(failed_seen.wait_for(60s), std::future_status::ready);
    EXPECT_THROW(done[failing].get(), std::runtime_error);
    comm->abort();
    for (int r = 0; r < ranks; ++r) {
      if (r == failing) continue;
      ASSERT_EQ(done[r].wait_for(30s), std::future_status::ready) << "rank " << r << " hangs after abort";
      EXPECT_THROW(done[r].get(), Aborted) << "rank " << r;
    }
    // Every later collective throws Aborted at once.
    float x = 1.0f;
    EXPECT_THROW(comm->all_reduce_sum(0, &x, 1), Aborted);
    EXPECT_THROW(comm->barrier(0), Aborted);
  }
}

TEST(CollectivesAbort, MismatchedCallsThrowOnEveryRank) {
  constexpr int kRanks = 3;
  auto comm = make_host_communicator(kRanks);
  std::vector<std::vector<float>> bufs(kRanks, std::vector<float>(64, 1.0f));
  auto errors = run_ranks(
      kRanks, [&](int r) { comm->all_reduce_sum(r, bufs[r].data(), r == 1 ? 32 : 64); }, comm.get(), 30s);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " did not notice the mismatch";
    EXPECT_THROW(std::rethrow_exception(errors[r]), Error);
  }
  // Different collectives: a barrier against all-reduces, and a double against a float all-reduce.
  auto comm2 = make_host_communicator(kRanks);
  std::vector<double> dbuf(64, 1.0);
  errors = run_ranks(
      kRanks,
      [&](int r) {
        if (r == 0) comm2->barrier(r);
        if (r == 1) comm2->all_reduce_sum(r, dbuf.data(), 64);
        if (r == 2) comm2->all_reduce_sum(r, bufs[r].data(), 64);
      },
      comm2.get(), 30s);
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(errors[r]) << "rank " << r << " did not notice the mismatch";
}

TEST(CollectivesBarrier, ReleasesAllPartiesAndReportsWait) {
  for (int parties = 1; parties <= 8; ++parties) {
    Barrier barrier(parties);
    EXPECT_EQ(barrier.parties(), parties);
    std::atomic<int> phase_count{0};
    std::atomic<int> errors{0};
    std::vector<double> waited(parties, 0.0);
    auto result = run_ranks(parties, [&](int r) {
      for (int phase = 0; phase < 200; ++phase) {
        phase_count.fetch_add(1);
        waited[r] += barrier.arrive_and_wait();
        // After the barrier of phase p every party has counted phase p.
        if (phase_count.load() < (phase + 1) * parties) errors.fetch_add(1);
        barrier.arrive_and_wait();
      }
    });
    EXPECT_TRUE(expect_no_errors(result));
    EXPECT_EQ(errors.load(), 0) << "parties=" << parties;
    for (double w : waited) EXPECT_GE(w, 0.0);
  }
}

TEST(CollectivesBarrier, SlowPartyShowsUpAsWait) {
  // Scheduling decides who arrives last, so the check is against each rank's own arrival and departure times: the
  // reported wait is the time spent inside the barrier, and the first to arrive waits at least until the second one
  // arrives (rank 1 sleeps so that this is normally rank 0 waiting about 50 ms). The arrival time is taken just
  // before the barrier is entered: a thread preempted between the two (a loaded machine) enters later than its
  // arrival time says, and its wait may then fall short of the gap. Such a round proves nothing either way, so the
  // lower bound must hold in one of 5 rounds (a wait that does not count the other party's lateness fails them all);
  // the upper bound holds in every round.
  const double slack_s = 1e-3;
  bool covered = false;
  for (int round = 0; round < 5 && !covered; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Barrier barrier(2);
    std::vector<double> waited(2), arrived(2), left(2);
    auto result = run_ranks(2, [&](int r) {
      if (r == 1) std::this_thread::sleep_for(50ms);
      arrived[r] = now_s();
      waited[r] = barrier.arrive_and_wait();
      left[r] = now_s();
    });
    EXPECT_TRUE(expect_no_errors(result));
    const int first = arrived[0] <= arrived[1] ? 0 : 1;
    const int last = 1 - first;
    for (int r = 0; r < 2; ++r) {
      EXPECT_GE(waited[r], 0.0);
      EXPECT_LE(waited[r], left[r] - arrived[r] + slack_s) << "rank " << r;
    }
    covered = waited[first] >= arrived[last] - arrived[first] - slack_s;
    if (!covered) {
      std::printf("round %d: rank %d waited %.6f s of a %.6f s gap\n", round, first, waited[first],
                  arrived[last] - arrived[first]);
    }
  }
  EXPECT_TRUE(covered) << "in no round did the first arrival's wait cover the gap to the second arrival";
}

TEST(CollectivesBarrier, AbortWakesWaitersAndLaterArrivals) {
  Barrier barrier(3);
  auto waiter = std::async(std::launch::async, [&] { barrier.arrive_and_wait(); });
  auto sleeper = std::async(std::launch::async, [&] { barrier.arrive_and_wait(); });
  std::this_thread::sleep_for(20ms);  // long enough for both to stop spinning and sleep
  barrier.abort();
  EXPECT_TRUE(barrier.aborted());
  ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready);
  ASSERT_EQ(sleeper.wait_for(10s), std::future_status::ready);
  EXPECT_THROW(waiter.get(), Aborted);
  EXPECT_THROW(sleeper.get(), Aborted);
  EXPECT_THROW(barrier.arrive_and_wait(), Aborted);
}

// Deadlines (the GPU backend's communicators and the cuda backend's control communicator): a wait that outlasts its
// deadline aborts every rank and throws DeadlineExceeded, so a hang ends the run as failed instead of never.
TEST(CollectivesDeadline, DefaultIsTheRunTimeoutOrTenMinutes) {
  EXPECT_EQ(wait_deadline_s(0.0), 600.0);
  EXPECT_EQ(kDefaultWaitDeadlineS, 600.0);
  EXPECT_EQ(wait_deadline_s(30.0), 30.0);  // no single wait outlasts the whole run's limit
  EXPECT_TRUE(WaitDeadline(0.0).none());
  EXPECT_FALSE(WaitDeadline(0.0).expired());  // none never expires
}

TEST(CollectivesDeadline, ConditionWaitThrowsPastItsDeadlineAndReturnsOnTime) {
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  {  // never notified: throws once the deadline passed (not before), naming the wait and the deadline
    std::unique_lock<std::mutex> lock(mu);
    const auto t0 = std::chrono::steady_clock::now();
    const WaitDeadline d(0.05);
    try {
      d.wait(cv, lock, [&] { return ready; }, "rank 1's wait for the other ranks");
      ADD_FAILURE() << "no DeadlineExceeded";
    } catch (const DeadlineExceeded& e) {
      EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms);
      const std::string m = e.what();
      EXPECT_NE(m.find("rank 1's wait for the other ranks did not complete within 0.05 s"), std::string::npos) << m;
      EXPECT_NE(m.find("training.run_timeout_s"), std::string::npos) << m;
    }
    EXPECT_TRUE(lock.owns_lock());  // the caller's locked section goes on (it records the failure)
  }
  // Notified well before the deadline: returns, no throw.
  auto setter = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(10ms);
    {
      std::lock_guard<std::mutex> g(mu);
      ready = true;
    }
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  EXPECT_NO_THROW(WaitDeadline(30.0).wait(cv, lock, [&] { return ready; }, "w"));
  EXPECT_TRUE(ready);
}

TEST(CollectivesDeadline, BarrierPastItsDeadlineAbortsTheOthers) {
  Barrier barrier(3, 0.1);  // the third party never comes
  auto a = std::async(std::launch::async, [&] { barrier.arrive_and_wait(); });
  auto b = std::async(std::launch::async, [&] { barrier.arrive_and_wait(); });
  ASSERT_EQ(a.wait_for(10s), std::future_status::ready);
  ASSERT_EQ(b.wait_for(10s), std::future_status::ready);
  int deadline = 0, aborted = 0;
  for (auto* f : {&a, &b}) {
    try {
      f->get();
      ADD_FAILURE() << "a waiter returned from a barrier its third party never reached";
    } catch (const DeadlineExceeded& e) {
      ++deadline;
      EXPECT_NE(std::string(e.what()).find("a barrier of 3 ranks"), std::string::npos) << e.what();
    } catch (const Aborted&) {
      ++aborted;
    }
  }
  EXPECT_GE(deadline, 1);  // the first to hit it reports the hang; the other is aborted (or hit it too)
  EXPECT_EQ(deadline + aborted, 2);
  EXPECT_TRUE(barrier.aborted());
  EXPECT_THROW(barrier.arrive_and_wait(), Aborted);
  // A barrier that completes in time is unaffected by its deadline.
  Barrier quick(2, 5.0);
  auto c = std::async(std::launch::async, [&] { return quick.arrive_and_wait(); });
  EXPECT_NO_THROW(quick.arrive_and_wait());
  EXPECT_NO_THROW(c.get());
}

TEST(CollectivesDeadline, HostCommunicatorWithADeadlineEndsAHungCollective) {
  // The cuda backend's control communicator: rank 1 never calls the all-reduce (a rank stuck elsewhere).
  auto comm = make_host_communicator(2, 0.1);
  double v = 1.0;
  EXPECT_THROW(comm->all_reduce_sum(0, &v, 1), DeadlineExceeded);
  EXPECT_THROW(comm->all_reduce_sum(1, &v, 1), Aborted);  // every later call of every rank
}

TEST(CollectivesBarrier, RejectsZeroParties) {
  EXPECT_THROW(Barrier(0), Error);
  EXPECT_THROW(make_host_communicator(0), Error);
}

}  // namespace
}  // namespace gs
