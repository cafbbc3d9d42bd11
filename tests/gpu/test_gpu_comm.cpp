// GPU tests of the communicators (sim/comm/gpu_communicator.h): `local` with 8 rank threads on one GPU against a
// serial reference (and against the host communicator, bit for bit), its other collectives, its asynchronous buckets
// (ordered after each rank's compute stream), mismatch and abort; `nccl`
// with one rank per visible GPU (a one-GPU machine runs it with one rank) against the same reference.
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "sim/comm/gpu_communicator.h"
#include "sim/core/barrier.h"
#include "tests/gpu/gpu_test_util.h"

namespace gs {
namespace {

using test::Dev;

// Runs body(rank) on `ranks` threads (each sets `device` first); returns the exceptions (null where none).
std::vector<std::exception_ptr> run_ranks(int ranks, const std::function<int(int)>& device_of,
                                          const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        GS_CUDA_CHECK(cudaSetDevice(device_of(r)));
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::exception_ptr>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  }
}

// Per-rank inputs of count values with exponents spread over 2^-10..2^10 (rounding visible in the sums).
std::vector<std::vector<float>> rank_inputs(int ranks, size_t count, uint64_t salt) {
  auto rng = test::fresh_rng(salt);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> in(ranks, std::vector<float>(count));
  for (auto& v : in)
    for (auto& x : v) x = std::ldexp(normal(rng), static_cast<int>(rng() % 21) - 10);
  return in;
}

// Serial reference: ((in_0 + in_1) + in_2) + ... per element.
std::vector<float> serial_sum(const std::vector<std::vector<float>>& in, size_t offset, size_t count) {
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    float acc = in[0][offset + i];
    for (size_t r = 1; r < in.size(); ++r) acc = acc + in[r][offset + i];
    out[i] = acc;
  }
  return out;
}

TEST(GpuLocalCommunicator, EightRanksOnOneGpuAllReduceLikeSerialReferenceAndHostCommunicator) {
  constexpr int kRanks = 8;
  for (size_t count : test::kernel_sizes()) {
    const auto in = rank_inputs(kRanks, count, count + 1);
    const auto want = serial_sum(in, 0, count);
    // The host communicator on the same inputs: the same bits is the backend-independence promise.
    auto host = make_host_communicator(kRanks);
    auto host_bufs = in;
    expect_no_errors(run_ranks(kRanks, [](int) { return 0; },
                               [&](int r) { host->all_reduce_sum(r, host_bufs[r].data(), count); }));
    auto comm = make_local_communicator(kRanks, 0);
    std::vector<std::vector<float>> got(kRanks);
    expect_no_errors(run_ranks(kRanks, [](int) { return 0; }, [&](int r) {
      gpu::Stream stream;
      comm->set_compute_stream(r, stream.get());
      Dev<float> buf(in[r]);
      comm->all_reduce_sum(r, buf.get(), count);
      got[r] = buf.host();
      const CommStats st = comm->take_stats(r);
      EXPECT_EQ(st.calls, 1u);
      EXPECT_EQ(st.bytes_sent, 2ull * (kRanks - 1) * count * sizeof(float) / kRanks);
    }));
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_SAME_BITS(got[r], want, "local all-reduce rank " + std::to_string(r) + " count " + std::to_string(count));
      EXPECT_SAME_BITS(got[r], host_bufs[r], "local vs host communicator rank " + std::to_string(r));
    }
  }
}

TEST(GpuLocalCommunicator, DoubleAllReduceGatherScatterBroadcast) {
  constexpr int kRanks = 5;
  constexpr size_t kCount = 1001;
  const auto in = rank_inputs(kRanks, kRanks * kCount, 99);
  auto comm = make_local_communicator(kRanks, 0);
  std::vector<std::vector<float>> gathered(kRanks), scattered(kRanks), broadcasted(kRanks);
  std::vector<std::vector<double>> dsum(kRanks);
  expect_no_errors(run_ranks(kRanks, [](int) { return 0; }, [&](int r) {
    gpu::Stream stream;
    comm->set_compute_stream(r, stream.get());
    // double all-reduce of the first kCount values, widened.
    std::vector<double> d(in[r].begin(), in[r].begin() + kCount);
    Dev<double> d_d(d);
    comm->all_reduce_sum(r, d_d.get(), kCount);
    dsum[r] = d_d.host();
    // all-gather of the first kCount values.
    Dev<float> src(std::vector<float>(in[r].begin(), in[r].begin() + kCount));
    Dev<float> out(kRanks * kCount);
    comm->all_gather(r, out.get(), src.get(), kCount);
    gathered[r] = out.host();
    // reduce-scatter of all kRanks * kCount values.
    Dev<float> full(in[r]);
    Dev<float> part(kCount);
    comm->reduce_scatter_sum(r, part.get(), full.get(), kCount);
    scattered[r] = part.host();
    // broadcast from rank 3.
    Dev<float> b(std::vector<float>(in[r].begin(), in[r].begin() + kCount));
    comm->broadcast(r, b.get(), kCount, 3);
    broadcasted[r] = b.host();
    comm->barrier(r);
  }));
  for (int r = 0; r < kRanks; ++r) {
    std::vector<double> dwant(kCount);
    for (size_t i = 0; i < kCount; ++i) {
      double acc = in[0][i];
      for (int q = 1; q < kRanks; ++q) acc = acc + static_cast<double>(in[q][i]);
      dwant[i] = acc;
    }
    EXPECT_SAME_BITS(dsum[r], dwant, "double all-reduce rank " + std::to_string(r));
    std::vector<float> gwant;
    for (int q = 0; q < kRanks; ++q) gwant.insert(gwant.end(), in[q].begin(), in[q].begin() + kCount);
    EXPECT_SAME_BITS(gathered[r], gwant, "all-gather rank " + std::to_string(r));
    EXPECT_SAME_BITS(scattered[r], serial_sum(in, static_cast<size_t>(r) * kCount, kCount),
                     "reduce-scatter rank " + std::to_string(r));
    EXPECT_SAME_BITS(broadcasted[r], std::vector<float>(in[3].begin(), in[3].begin() + kCount),
                     "broadcast rank " + std::to_string(r));
  }
}

TEST(GpuLocalCommunicator, MismatchThrowsOnEveryRankAndAbortNeverHangs) {
  constexpr int kRanks = 4;
  auto comm = make_local_communicator(kRanks, 0);
  Dev<float> bufs[kRanks] = {Dev<float>(16), Dev<float>(16), Dev<float>(16), Dev<float>(16)};
  // Rank 2 reduces 8 values, the others 16: every rank throws (none hangs).
  auto errors = run_ranks(kRanks, [](int) { return 0; },
                          [&](int r) { comm->all_reduce_sum(r, bufs[r].get(), r == 2 ? 8 : 16); });
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(errors[r] != nullptr) << "rank " << r << " did not throw";
  // Rank 1 aborts instead of joining: the others leave their collective with Aborted.
  auto comm2 = make_local_communicator(kRanks, 0);
  errors = run_ranks(kRanks, [](int) { return 0; }, [&](int r) {
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      comm2->abort();
      return;
    }
    comm2->all_reduce_sum(r, bufs[r].get(), 16);
  });
  for (int r = 0; r < kRanks; ++r) {
    if (r == 1) continue;
    bool aborted = false;
    try {
      if (errors[r]) std::rethrow_exception(errors[r]);
    } catch (const Aborted&) {
      aborted = true;
    } catch (...) {
    }
    EXPECT_TRUE(aborted) << "rank " << r << " did not leave with Aborted";
  }
}

// Asynchronous buckets of `local` (all_reduce_sum_start / all_reduce_wait): each rank produces bucket b on its compute
// stream (a device copy queued behind 256 MiB of other copies, into a buffer poisoned with NaN) and starts it at once.
// A reduction that did not wait for every rank's stream would sum NaN or stale values; the sums must be the serial
// reference's bits (the same kernel and rank order as the synchronous all-reduce). Two rounds: the events and pointer
// tables are reused.
TEST(GpuLocalCommunicator, AsyncBucketsWaitForEveryRanksStreamAndSumInRankOrder) {
  constexpr int kRanks = 4, kBuckets = 5;
  constexpr size_t kCount = 100003;
  constexpr size_t kFiller = size_t{16} << 20;  // floats: 64 MiB per copy
  auto comm = make_local_communicator(kRanks, 0);
  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<std::vector<float>>> in(kBuckets);
    for (int b = 0; b < kBuckets; ++b) in[b] = rank_inputs(kRanks, kCount, 500 + 10 * round + b);
    std::vector<std::vector<std::vector<float>>> got(kBuckets, std::vector<std::vector<float>>(kRanks));
    expect_no_errors(run_ranks(kRanks, [](int) { return 0; }, [&](int r) {
      gpu::Stream stream;
      comm->set_compute_stream(r, stream.get());
      Dev<float> filler_a(kFiller), filler_b(kFiller);
      std::vector<Dev<float>> src, dst;
      for (int b = 0; b < kBuckets; ++b) {
        src.emplace_back(in[b][r]);
        dst.emplace_back(kCount);  // NaN until the rank's copy lands
      }
      for (int b = 0; b < kBuckets; ++b) {
        for (int i = 0; i < 4; ++i)
          GS_CUDA_CHECK(cudaMemcpyAsync(filler_b.get(), filler_a.get(), kFiller * sizeof(float),
                                        cudaMemcpyDeviceToDevice, stream.get()));
        GS_CUDA_CHECK(cudaMemcpyAsync(dst[b].get(), src[b].get(), kCount * sizeof(float), cudaMemcpyDeviceToDevice,
                                      stream.get()));
        comm->all_reduce_sum_start(r, dst[b].get(), kCount);
      }
      comm->all_reduce_wait(r);
      for (int b = 0; b < kBuckets; ++b) got[b][r] = dst[b].host();
      const CommStats st = comm->take_stats(r);
      EXPECT_EQ(st.calls, static_cast<uint64_t>(kBuckets));
      EXPECT_EQ(st.bytes_sent, kBuckets * (2ull * (kRanks - 1) * kCount * sizeof(float) / kRanks));
    }));
    for (int b = 0; b < kBuckets; ++b) {
      const auto want = serial_sum(in[b], 0, kCount);
      for (int r = 0; r < kRanks; ++r)
        EXPECT_SAME_BITS(got[b][r], want, "round " + std::to_string(round) + " bucket " + std::to_string(b) +
                                              " rank " + std::to_string(r));
    }
  }
}

// A bucket started with a different count on one rank, or met by a synchronous collective on another, makes every
// rank throw (none waits forever for the others).
TEST(GpuLocalCommunicator, AsyncMismatchThrowsOnEveryRank) {
  constexpr int kRanks = 4;
  Dev<float> bufs[kRanks] = {Dev<float>(16), Dev<float>(16), Dev<float>(16), Dev<float>(16)};
  auto comm = make_local_communicator(kRanks, 0);
  auto errors = run_ranks(kRanks, [](int) { return 0; }, [&](int r) {
    comm->all_reduce_sum_start(r, bufs[r].get(), r == 2 ? 8 : 16);
    comm->all_reduce_wait(r);
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(errors[r] != nullptr) << "count mismatch: rank " << r << " did not throw";
  auto comm2 = make_local_communicator(kRanks, 0);
  errors = run_ranks(kRanks, [](int) { return 0; }, [&](int r) {
    if (r == 3) {
      comm2->all_reduce_sum(r, bufs[r].get(), 16);
      return;
    }
    comm2->all_reduce_sum_start(r, bufs[r].get(), 16);
    comm2->all_reduce_wait(r);
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(errors[r] != nullptr) << "sync vs async: rank " << r << " did not throw";
}

TEST(GpuNcclCommunicator, OneRankPerGpuAllReduceAgainstSerialReference) {
  if (!nccl_compiled()) GTEST_SKIP() << "built without NCCL";
  int gpus = 0;
  GS_CUDA_CHECK(cudaGetDeviceCount(&gpus));
  const int ranks = std::min(gpus, 8);
  std::vector<int> devices(ranks);
  for (int r = 0; r < ranks; ++r) devices[r] = r;
  auto comm = make_nccl_communicator(devices);
  ASSERT_EQ(comm->size(), ranks);
  for (size_t count : test::kernel_sizes()) {
    // Three buckets per rank in one group, started on the communication stream, then waited for.
    constexpr int kBuckets = 3;
    std::vector<std::vector<std::vector<float>>> in(kBuckets);
    for (int b = 0; b < kBuckets; ++b) in[b] = rank_inputs(ranks, count, count * 3 + b);
    std::vector<std::vector<std::vector<float>>> got(kBuckets, std::vector<std::vector<float>>(ranks));
    expect_no_errors(run_ranks(ranks, [&](int r) { return devices[r]; }, [&](int r) {
      gpu::Stream stream;
      comm->set_compute_stream(r, stream.get());
      std::vector<Dev<float>> bufs;
      for (int b = 0; b < kBuckets; ++b) bufs.emplace_back(in[b][r]);
      comm->group_begin(r);
      for (int b = 0; b < kBuckets; ++b) comm->all_reduce_sum_start(r, bufs[b].get(), count);
      comm->group_end(r);
      comm->all_reduce_wait(r);
      for (int b = 0; b < kBuckets; ++b) got[b][r] = bufs[b].host();
    }));
    for (int b = 0; b < kBuckets; ++b) {
      const auto want = serial_sum(in[b], 0, count);
      for (int r = 0; r < ranks; ++r) {
        if (ranks <= 2) {
          // One rank: a copy; two: a + b in either order is the same float.
          EXPECT_SAME_BITS(got[b][r], want, "nccl bucket " + std::to_string(b) + " rank " + std::to_string(r));
        } else {
          // Ring/tree order differs from rank order: (ranks - 1) roundings of partial sums, bounded by
          // (ranks - 1) u sum_r |in_r| per element.
          size_t bad = 0;
          for (size_t i = 0; i < count; ++i) {
            double mag = 0.0;
            for (int q = 0; q < ranks; ++q) mag += std::fabs(in[b][q][i]);
            bad += !(std::fabs(got[b][r][i] - want[i]) <= 2.0 * ranks * 5.960464477539063e-08 * mag);
          }
          EXPECT_EQ(bad, 0u) << "nccl bucket " << b << " rank " << r;
        }
      }
    }
  }
}

}  // namespace
}  // namespace gs
