// Tests of the input pipeline: the IDX reader's refusals and a seeded mutation fuzz of it, the loader thread and its
// bounded queue, the node cache policies (hit counts against sets computed here from the sampling rule), the storage
// model and prefetch recurrence against hand-worked numbers, and a loader failure ending a run without a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kernels/rng.h"
#include "sim/config/run_config.h"
#include "sim/core/error.h"
#include "sim/cost/hardware_profile.h"
#include "sim/cost/storage_model.h"
#include "sim/model/data_cache.h"
#include "sim/model/dataset.h"
#include "sim/model/idx.h"
#include "sim/model/loader.h"
#include "sim/runtime/rank_loop.h"
#include "sim/validate/validate.h"

namespace gs {
namespace {

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << needle;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what() << "\n  expected: " << needle;
  }
}

// ---- IDX ---------------------------------------------------------------------------------------------------------

std::vector<unsigned char> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims, size_t data_bytes) {
  std::vector<unsigned char> b;
  auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(v >> s));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  for (size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<unsigned char>(i * 7 % 10));
  return b;
}

TEST(DataIdxParse, RefusalsNameFileAndByteOffset) {
  const std::string f = "/x/train-images-idx3-ubyte";
  auto ok = idx_bytes(kIdxImagesMagic, {2, 3, 4}, 24);
  IdxData d = parse_idx(ok.data(), ok.size(), f, kIdxImagesMagic, 3);
  EXPECT_EQ(d.dims, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(d.data_offset, 16u);
  ASSERT_EQ(d.data.size(), 24u);
  EXPECT_EQ(d.data[23], 23 * 7 % 10);

  expect_error([&] { parse_idx(ok.data(), 2, f, kIdxImagesMagic, 3); }, f + ": byte offset 2: truncated IDX header");
  expect_error([&] { parse_idx(ok.data(), 10, f, kIdxImagesMagic, 3); }, f + ": byte offset 10: truncated IDX header");
  expect_error([&] { parse_idx(ok.data(), ok.size(), f, kIdxLabelsMagic, 1); },
               f + ": byte offset 0: bad magic number 2051");
  auto zero = idx_bytes(kIdxImagesMagic, {2, 0, 4}, 0);
  expect_error([&] { parse_idx(zero.data(), zero.size(), f, kIdxImagesMagic, 3); },
               f + ": byte offset 8: dimension 1 is 0");
  auto huge = idx_bytes(kIdxImagesMagic, {0xffffffffu, 0xffffffffu, 2}, 0);
  expect_error([&] { parse_idx(huge.data(), huge.size(), f, kIdxImagesMagic, 3); },
               f + ": byte offset 8: implausible dimensions");
  expect_error([&] { parse_idx(ok.data(), ok.size() - 5, f, kIdxImagesMagic, 3); },
               f + ": byte offset 35: truncated: the header promises 24 data bytes from offset 16");
  auto longer = ok;
  longer.push_back(0);
  expect_error([&] { parse_idx(longer.data(), longer.size(), f, kIdxImagesMagic, 3); },
               f + ": byte offset 40: 1 bytes of trailing data");

  const std::string lf = "/x/train-labels-idx1-ubyte";
  auto labels = idx_bytes(kIdxLabelsMagic, {3}, 0);
  labels.insert(labels.end(), {4, 12, 1});
  IdxData l = parse_idx(labels.data(), labels.size(), lf, kIdxLabelsMagic, 1);
  expect_error([&] { check_idx_labels(l, lf, 10); }, lf + ": byte offset 9: label 12 of item 1 is outside 0..9");
  expect_error([&] { check_idx_counts(d, f, l, lf); },
               f + ": byte offset 4: 2 images, but " + lf + ": byte offset 4: 3 labels");
}

// Seeded mutation fuzz (cheap; tools/fuzz.sh runs the libFuzzer target fuzz_idx on the same parser): every mutation
// of a valid file (byte flips, truncation, extension, header overwrites) either parses into a consistent result or is
// refused with a gs::Error naming the file and a byte offset within the buffer.
TEST(DataIdxParse, SeededMutationsParseConsistentlyOrAreRefusedWithAnOffset) {
  const std::string f = "fuzz.idx";
  const auto base = idx_bytes(kIdxImagesMagic, {3, 4, 5}, 60);
  int refused = 0, parsed = 0;
  for (uint32_t iter = 0; iter < 3000; ++iter) {
    std::vector<unsigned char> b = base;
    const Draw4 r = philox_draw(42, Purpose::kShuffle, iter, 7, 0);
    switch (r.v[0] % 4) {
      case 0: b[r.v[1] % b.size()] ^= static_cast<unsigned char>(1u << (r.v[2] % 8)); break;  // one bit
      case 1: b.resize(r.v[1] % b.size()); break;                                             // truncation
      case 2: b.insert(b.end(), r.v[1] % 9 + 1, 0xab); break;                                 // extension
      default: b[4 + r.v[1] % 12] = static_cast<unsigned char>(r.v[2]); break;                // header byte
    }
    try {
      IdxData d = parse_idx(b.data(), b.size(), f, kIdxImagesMagic, 3);
      ++parsed;
      ASSERT_EQ(d.dims.size(), 3u);
      ASSERT_EQ(static_cast<int64_t>(d.data.size()), d.dims[0] * d.dims[1] * d.dims[2]) << iter;
      ASSERT_EQ(d.data.size() + 16, b.size()) << iter;
    } catch (const Error& e) {
      ++refused;
      const std::string m = e.what();
      const size_t at = m.find(f + ": byte offset ");
      ASSERT_NE(at, std::string::npos) << m;
      const size_t offset = std::stoul(m.substr(at + f.size() + 14));
      ASSERT_LE(offset, b.size()) << m;
    }
  }
  EXPECT_GT(refused, 1000);
  EXPECT_GT(parsed, 100);  // pixel-byte flips leave a valid file
}

// ---- Storage model and prefetch recurrence ---------------------------------------------------------------------

TEST(DataStorage, ReadTimeIsRequestsTimesLatencyOverInFlightPlusBytesOverTheLoadersShare) {
  StorageProfile p;
  p.bandwidth_GBps = 2.0;
  p.latency_us = 100.0;
  p.concurrency = 64;
  // 100 requests, 64 in flight (the window of 200 allows more): 100 x 100 us / 64; 1e6 bytes at 2 GB/s / 4
  // readers = 0.5 GB/s -> 2 ms.
  EXPECT_NEAR(storage_read_s(p, 100, 1e6, 4, 200), 100 * 100e-6 / 64 + 1e6 / 0.5e9, 1e-15);
  // A window of 10 samples (a short prefetch queue) bounds the requests in flight below the concurrency.
  EXPECT_NEAR(storage_read_s(p, 100, 0, 1, 10), 100 * 100e-6 / 10, 1e-15);
  EXPECT_NEAR(storage_read_s(p, 1, 0, 1, 0), 100e-6, 1e-15);  // at least one request in flight
  EXPECT_EQ(storage_read_s(p, 0, 0, 8, 64), 0.0);
}

TEST(DataStorage, ProfilesCarryTheirNumbersAndBadOnesNameThePath) {
  const StorageProfile nfs = load_storage_profile("nfs");
  EXPECT_EQ(nfs.name, "nfs");
  EXPECT_EQ(nfs.bandwidth_GBps, 1.17);  // scenarios/hardware/storage/nfs.json
  EXPECT_EQ(nfs.latency_us, 500.0);
  EXPECT_EQ(nfs.concurrency, 16.0);
  const StorageProfile c = load_storage_profile(json{{"bandwidth_GBps", 2}, {"latency_us", 10}, {"concurrency", 4}});
  EXPECT_EQ(c.name, "custom");
  EXPECT_EQ(c.bandwidth_GBps, 2.0);
  expect_error([] { load_storage_profile("tape"); }, "data.storage: unknown storage profile \"tape\"; choices: "
                                                     "local_nvme, nfs, object_store");
  expect_error([] { load_storage_profile(json{{"bandwidth_GBps", 2}, {"concurrency", 4}}); },
               "data.storage.latency_us: expected a number in [0, 1000000000] (microseconds per request), got nothing");
  expect_error([] { load_storage_profile(json{{"bandwidth_GBps", 2}, {"latency_us", 1}, {"concurrency", 0}}); },
               "data.storage.concurrency: expected a number in [1,");
  std::vector<ConfigIssue> issues;
  config_from_json(json{{"data", {{"storage", {{"bandwidth_GBps", 1}, {"latency_us", 1}, {"concurency", 4}}}}}},
                   issues);
  ASSERT_FALSE(issues.empty());
  EXPECT_EQ(issues[0].path, "data.storage.concurency");
}

// Every problem of a storage profile at once (file profiles and objects in the scenario), each with its path.
TEST(DataStorage, EveryProblemOfAProfileIsListedAtOnce) {
  // An object in the scenario: two bad numbers and an unknown key are three issues, each on its own path.
  std::vector<ConfigIssue> issues;
  config_from_json(json{{"data", {{"storage", {{"bandwidth_GBps", -1}, {"latency_us", "slow"}, {"concurrency", 4},
                                               {"iops", 9}}}}}},
                   issues);
  std::set<std::string> paths;
  for (const auto& i : issues) paths.insert(i.path);
  EXPECT_EQ(paths, (std::set<std::string>{"data.storage.bandwidth_GBps", "data.storage.latency_us",
                                          "data.storage.iops"}));
  // A profile file (a folder of our own through GRADSWEEP_HARDWARE_DIR): a number without its source, a value that
  // is no number and a missing key are three problems naming the file.
  const std::string dir = ::testing::TempDir() + "/gradsweep_storage_profiles";
  std::filesystem::create_directories(dir + "/storage");
  const std::string file = dir + "/storage/broken.json";
  {
    std::ofstream out(file);
    out << R"({"name": "broken", "bandwidth_GBps": 2, "latency_us": {"value": "x", "source": "s"}})";
  }
  const char* old = std::getenv("GRADSWEEP_HARDWARE_DIR");
  const std::string saved = old ? old : "";
  setenv("GRADSWEEP_HARDWARE_DIR", dir.c_str(), 1);
  std::vector<std::string> problems;
  try {
    load_storage_profile("broken");
  } catch (const ProfileError& e) {
    problems = e.problems();
  }
  if (old) setenv("GRADSWEEP_HARDWARE_DIR", saved.c_str(), 1);
  else unsetenv("GRADSWEEP_HARDWARE_DIR");
  // QA: a missing key said "expected a number" although a profile file needs {"value": ..., "source": ...}; each
  // problem says the format (bare number, missing key) or the value's own expectation (inside the object).
  const std::string tail = ", \"source\": \"<where it comes from>\"}";
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_EQ(problems[0], file + ": bandwidth_GBps: expected {\"value\": <a number in [1e-09, 1000000] (GB/s per node)>" +
                             tail + ", got 2");
  EXPECT_EQ(problems[1], file + ": latency_us.value: expected a number in [0, 1000000000] (microseconds per request), "
                                "got \"x\"");
  EXPECT_EQ(problems[2], file + ": concurrency: expected {\"value\": <a number in [1, 1000000] (requests in flight per "
                                "loader)>" + tail + ", got nothing");
}

TEST(DataPrefetchModel, HandWorkedRecurrence) {
  // depth 1, fetch 3, compute 1: stall 3 (cold), then fetch - compute = 2 per step.
  {
    PrefetchModel m(1, 1);
    const double want[] = {3, 2, 2, 2};
    for (double w : want) {
      const double s = m.stall_s(0, 3.0);
      EXPECT_DOUBLE_EQ(s, w);
      m.end_step(0, s + 1.0);
    }
  }
  // depth 1, fetch 2, compute 3: after the cold start the loader hides behind compute.
  {
    PrefetchModel m(1, 1);
    const double want[] = {2, 0, 0, 0};
    for (double w : want) {
      const double s = m.stall_s(0, 2.0);
      EXPECT_DOUBLE_EQ(s, w);
      m.end_step(0, s + 3.0);
    }
  }
  // depth 0: no loader thread, every step waits for its whole read.
  {
    PrefetchModel m(1, 0);
    for (int i = 0; i < 3; ++i) {
      EXPECT_DOUBLE_EQ(m.stall_s(0, 2.0), 2.0);
      m.end_step(0, 5.0);
    }
  }
  // depth 2, one slow read (fetch 5 at step 2, else 1), compute 3: step 0 stalls 1 (taken_0 = 1, start_1 = 4),
  // step 1 none (done_1 = 2, taken_1 = 4, start_2 = 7). Depth 2: begin_2 = max(done_1 = 2, taken_0 = 1) = 2,
  // done_2 = 7 -> no stall. Depth 1: begin_2 = max(2, taken_1 = 4) = 4, done_2 = 9 -> stall 2.
  for (int64_t depth : {2, 1}) {
    PrefetchModel m(1, depth);
    const double fetch[] = {1, 1, 5};
    double last = 0;
    for (double f : fetch) {
      last = m.stall_s(0, f);
      m.end_step(0, last + 3.0);
    }
    EXPECT_DOUBLE_EQ(last, depth == 2 ? 0.0 : 2.0) << depth;
  }
}

// ---- Loader and cache -----------------------------------------------------------------------------------------

RunConfig teacher_config(int64_t ranks, int64_t accumulation, int64_t batch, int64_t train) {
  RunConfig c;
  c.data.kind = "teacher";
  c.data.teacher.in_dim = 6;
  c.data.teacher.hidden = 8;
  c.data.teacher.out_dim = 3;
  c.data.teacher.train_samples = train;
  c.data.teacher.eval_samples = 4;
  c.cluster.ranks = ranks;
  c.training.accumulation_steps = accumulation;
  c.data.batch_per_rank = batch;
  c.model.layers = {6, 3};
  return c;
}

uint64_t fnv(const Batch& b) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  };
  mix(b.x.data(), b.x.size() * sizeof(float));
  mix(b.y.data(), b.y.size() * sizeof(float));
  mix(b.labels.data(), b.labels.size() * sizeof(int32_t));
  return h;
}

struct LoaderRun {
  std::vector<std::vector<uint64_t>> hashes;        // [rank][step * K + k]
  std::vector<std::vector<DataCounts>> counts;      // [rank][step]
  std::vector<size_t> max_depth;
};

// Every rank's loader on its own thread, as the rank loop runs them; the consumer takes every micro-batch.
LoaderRun run_loaders(const Dataset& data, const RunConfig& c, int64_t steps, int64_t prefetch, bool with_cache,
                      int ranks_per_node) {
  const int ranks = static_cast<int>(c.cluster.ranks);
  std::unique_ptr<DataCache> cache;
  if (with_cache) cache = std::make_unique<DataCache>(data, c, ranks_per_node);
  LoaderRun out;
  out.hashes.resize(static_cast<size_t>(ranks));
  out.counts.resize(static_cast<size_t>(ranks));
  out.max_depth.resize(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      Loader loader(data, c, cache.get(), r, steps, prefetch);
      Batch b;
      for (int64_t s = 0; s < steps; ++s) {
        DataCounts step_counts;
        for (int64_t k = 0; k < c.training.accumulation_steps; ++k) {
          DataCounts mc;
          loader.next(b, mc);
          step_counts += mc;
          out.hashes[static_cast<size_t>(r)].push_back(fnv(b));
        }
        out.counts[static_cast<size_t>(r)].push_back(step_counts);
      }
      out.max_depth[static_cast<size_t>(r)] = loader.max_queue_depth();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(DataLoader, BatchesAreTheDatasetsWhateverTheCacheAndPrefetch) {
  RunConfig c = teacher_config(4, 2, 8, 1000);  // G = 64: 15 steps per epoch, 40 samples dropped
  const auto data = make_dataset(c);
  const int64_t steps = 40;  // 2.7 epochs
  // The reference: the dataset's own micro_batch, no loader, no cache.
  std::vector<std::vector<uint64_t>> want(4);
  for (int r = 0; r < 4; ++r)
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t k = 0; k < 2; ++k) {
        Batch b;
        data->micro_batch(s, k, r, b);
        want[static_cast<size_t>(r)].push_back(fnv(b));
      }
  for (const char* policy : {"none", "lru", "static", "partitioned"}) {
    for (double cap : {0.3, 1.0}) {
      for (int64_t prefetch : {0, 1, 3}) {
        c.data.cache.policy = policy;
        c.data.cache.capacity_fraction = cap;
        const bool cached = std::string(policy) != "none";
        LoaderRun got = run_loaders(*data, c, steps, prefetch, cached, 4);
        EXPECT_EQ(got.hashes, want) << policy << " " << cap << " prefetch " << prefetch;
        for (size_t d : got.max_depth) EXPECT_LE(d, static_cast<size_t>(prefetch));
      }
    }
  }
}

TEST(DataLoader, QueueFillsToItsBoundAndNoFurther) {
  RunConfig c = teacher_config(1, 1, 4, 256);
  const auto data = make_dataset(c);
  for (int64_t prefetch : {1, 3}) {
    Loader loader(*data, c, nullptr, 0, 30, prefetch);
    Batch b;
    DataCounts counts;
    for (int i = 0; i < 30; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a slow consumer: the loader runs ahead
      loader.next(b, counts);
      EXPECT_EQ(counts.samples, 4);
      EXPECT_EQ(counts.storage_samples, 4);
    }
    EXPECT_EQ(loader.max_queue_depth(), static_cast<size_t>(prefetch));
  }
}

// Training-set indices of every (rank, step) of a run, from the sampling rule alone.
std::vector<std::vector<std::vector<int64_t>>> reads(const RunConfig& c, int64_t n, int64_t steps) {
  std::vector<std::vector<std::vector<int64_t>>> out(static_cast<size_t>(c.cluster.ranks));
  for (int r = 0; r < c.cluster.ranks; ++r)
    for (int64_t s = 0; s < steps; ++s) {
      std::vector<int64_t> all;
      for (int64_t k = 0; k < c.training.accumulation_steps; ++k) {
        auto idx = micro_batch_indices(c, n, s, k, r);
        all.insert(all.end(), idx.begin(), idx.end());
      }
      out[static_cast<size_t>(r)].push_back(all);
    }
  return out;
}

TEST(DataCache, StaticHitsAreTheReadsOfTheFirstCSamplesOfEpochOne) {
  const int64_t n = 4000;
  RunConfig c = teacher_config(4, 2, 16, n);  // G = 128: 31 steps per epoch, 32 samples dropped each epoch
  c.data.cache.policy = "static";
  c.data.cache.capacity_fraction = 0.25;
  const auto data = make_dataset(c);
  const int64_t per_epoch = 31, steps = 4 * per_epoch;
  LoaderRun got = run_loaders(*data, c, steps, 2, true, 4);
  // The fixed set: the first C = 1000 samples of epoch 0's order (MinIO fills in access order, never evicts).
  const std::vector<int64_t> order0 = epoch_order(n, static_cast<uint64_t>(c.training.seed), 0, true);
  const std::set<int64_t> cached(order0.begin(), order0.begin() + 1000);
  const auto rd = reads(c, n, steps);
  for (int64_t e = 1; e < 4; ++e) {
    int64_t hits = 0, want = 0, samples = 0;
    for (int r = 0; r < 4; ++r)
      for (int64_t s = e * per_epoch; s < (e + 1) * per_epoch; ++s) {
        const DataCounts& dc = got.counts[static_cast<size_t>(r)][static_cast<size_t>(s)];
        hits += dc.hits;
        samples += dc.samples;
        EXPECT_EQ(dc.hits + dc.storage_samples, dc.samples);
        EXPECT_EQ(dc.peer_samples, 0);
        for (int64_t i : rd[static_cast<size_t>(r)][static_cast<size_t>(s)]) want += cached.count(i);
      }
    EXPECT_EQ(hits, want) << "epoch " << e;
    // c up to the dropped partial batch: at most all 32 dropped samples were (or were not) in the set.
    EXPECT_NEAR(static_cast<double>(hits) / static_cast<double>(samples), 0.25, 32.0 / static_cast<double>(samples));
  }
  int64_t epoch0_hits = 0;
  for (int r = 0; r < 4; ++r)
    for (int64_t s = 0; s < per_epoch; ++s) epoch0_hits += got.counts[static_cast<size_t>(r)][static_cast<size_t>(s)].hits;
  EXPECT_EQ(epoch0_hits, 0);  // a permutation reads every sample once per epoch
}

TEST(DataCache, PartitionedReadsOneMinusCFromStorageAndSplitsTheRestOneToNMinusOne) {
  const int64_t n = 8000, ranks = 8;
  RunConfig c = teacher_config(ranks, 1, 32, n);  // G = 256: 31 steps per epoch, 64 samples dropped
  c.data.cache.policy = "partitioned";
  c.data.cache.capacity_fraction = 0.5;
  const auto data = make_dataset(c);
  const int64_t per_epoch = 31, steps = 5 * per_epoch;
  LoaderRun got = run_loaders(*data, c, steps, 2, true, 8);
  // Rank r's part: the first C_r = 500 samples it read in epoch 0 (computed here from the sampling rule).
  const auto rd = reads(c, n, steps);
  std::vector<int> owner(static_cast<size_t>(n), -1);
  for (int r = 0; r < ranks; ++r) {
    int64_t kept = 0;
    for (int64_t s = 0; s < per_epoch && kept < 500; ++s)
      for (int64_t i : rd[static_cast<size_t>(r)][static_cast<size_t>(s)])
        if (kept < 500) {
          owner[static_cast<size_t>(i)] = r;
          ++kept;
        }
  }
  int64_t local = 0, peer = 0, storage = 0, samples = 0;
  for (int r = 0; r < ranks; ++r)
    for (int64_t s = per_epoch; s < steps; ++s) {
      const DataCounts& dc = got.counts[static_cast<size_t>(r)][static_cast<size_t>(s)];
      int64_t want_local = 0, want_peer = 0;
      for (int64_t i : rd[static_cast<size_t>(r)][static_cast<size_t>(s)]) {
        const int o = owner[static_cast<size_t>(i)];
        want_local += o == r;
        want_peer += o >= 0 && o != r;
      }
      ASSERT_EQ(dc.hits, want_local) << r << " " << s;
      ASSERT_EQ(dc.peer_samples, want_peer) << r << " " << s;
      EXPECT_EQ(dc.peer_bytes, static_cast<double>(want_peer * data->decoded_sample_bytes()));
      local += dc.hits;
      peer += dc.peer_samples;
      storage += dc.storage_samples;
      samples += dc.samples;
    }
  EXPECT_EQ(local + peer + storage, samples);
  // Storage reads: (1 - c) of the samples read, up to the dropped partial batch (64 of 8000 per epoch).
  const double drop = 64.0 / (n - 64.0);
  EXPECT_NEAR(static_cast<double>(storage) / static_cast<double>(samples), 0.5, drop);
  // Of the cached samples a rank reads, each is its own with probability 1/N (a uniformly random owner): local
  // ~ Binomial(M, 1/N); 4 standard deviations.
  const double m = static_cast<double>(local + peer), p = 1.0 / ranks;
  EXPECT_NEAR(static_cast<double>(local) / m, p, 4.0 * std::sqrt(p * (1 - p) / m));
}

TEST(DataCache, LruUnderPermutationAccessIsNoBetterThanStatic) {
  const int64_t n = 4000;
  RunConfig c = teacher_config(4, 1, 32, n);
  const auto data = make_dataset(c);
  const int64_t per_epoch = n / 128, steps = 4 * per_epoch;
  for (double cap : {0.25, 0.5, 0.75}) {
    int64_t hits[2] = {0, 0}, samples = 0;
    int i = 0;
    for (const char* policy : {"lru", "static"}) {
      c.data.cache.policy = policy;
      c.data.cache.capacity_fraction = cap;
      LoaderRun got = run_loaders(*data, c, steps, 2, true, 4);
      samples = 0;
      for (const auto& rank : got.counts)
        for (int64_t s = per_epoch; s < steps; ++s) {
          hits[i] += rank[static_cast<size_t>(s)].hits;
          samples += rank[static_cast<size_t>(s)].samples;
        }
      ++i;
    }
    EXPECT_LE(hits[0], hits[1]) << "capacity " << cap;
    EXPECT_LT(static_cast<double>(hits[0]) / static_cast<double>(samples), cap) << "lru thrashes below c";
  }
}

// A dataset whose reads fail on one rank mid-run, as a truncated file found while loading would.
class FailingDataset : public Dataset {
 public:
  FailingDataset(std::unique_ptr<Dataset> inner, int64_t fail_sample)
      : inner_(std::move(inner)), fail_sample_(fail_sample) {}
  int64_t in_dim() const override { return inner_->in_dim(); }
  int64_t out_dim() const override { return inner_->out_dim(); }
  bool classification() const override { return inner_->classification(); }
  int64_t steps_per_epoch() const override { return inner_->steps_per_epoch(); }
  void micro_batch(int64_t s, int64_t k, int r, Batch& out) const override { inner_->micro_batch(s, k, r, out); }
  const Batch& eval_set() const override { return inner_->eval_set(); }
  int64_t train_size() const override { return inner_->train_size(); }
  int64_t stored_sample_bytes() const override { return inner_->stored_sample_bytes(); }
  void shape_batch(Batch& out, int64_t count, int rank) const override { inner_->shape_batch(out, count, rank); }
  void read_sample(int64_t i, Batch& out, int64_t row) const override {
    if (i == fail_sample_) throw Error("/data/shard-3.idx: byte offset 4096: truncated: the file ends early");
    inner_->read_sample(i, out, row);
  }

 private:
  std::unique_ptr<Dataset> inner_;
  int64_t fail_sample_;
};

TEST(DataLoader, AFailingLoaderFailsTheRunWithFileAndOffsetAndNoRankHangs) {
  for (const char* policy : {"none", "partitioned", "static"}) {
    for (int64_t prefetch : {0, 2}) {
      RunConfig c = teacher_config(4, 1, 8, 512);
      c.model.kind = "linear";
      c.model.loss = "cross_entropy";
      c.cluster.backend = "host";
      c.training.steps = 40;
      c.training.eval_every = 0;
      c.data.prefetch = prefetch;
      c.data.cache.policy = policy;
      c.data.cache.capacity_fraction = 0.5;
      // The sample at position 3 * 32 + 2 * 8 of epoch 0: step 3, rank 2.
      const int64_t fail = epoch_order(512, 1, 0, true)[3 * 32 + 2 * 8];
      RunHooks hooks;
      hooks.make_dataset = [&](const RunConfig& cfg) {
        return std::make_unique<FailingDataset>(make_dataset(cfg), fail);
      };
      auto fut = std::async(std::launch::async, [&] { return run_training(c, hooks); });
      ASSERT_EQ(fut.wait_for(std::chrono::seconds(120)), std::future_status::ready)
          << "a rank hangs (" << policy << ", prefetch " << prefetch << ")";
      const RunResult r = fut.get();
      EXPECT_EQ(r.disposition, Disposition::kFailed);
      EXPECT_NE(r.message.find("rank 2: /data/shard-3.idx: byte offset 4096: truncated"), std::string::npos)
          << r.message;
      EXPECT_LE(r.steps_completed, 3);
    }
  }
}

// data.loader_threads: a micro-batch read by several threads is bitwise the dataset's own micro_batch (the reference:
// Dataset::micro_batch, which generates the rows in order on one thread), for thread counts below, at and above the
// 16-rows-a-thread floor, with and without the loader thread.
TEST(DataLoader, ParallelReadsAreTheDatasetsBatchesBitForBit) {
  RunConfig c = teacher_config(2, 2, 100, 1000);  // 100 rows a micro-batch: at most 6 threads of >= 16 rows
  const auto data = make_dataset(c);
  const int64_t steps = 12;  // 2.4 epochs (G = 400 over 1000 samples)
  std::vector<std::vector<uint64_t>> want(2);
  for (int r = 0; r < 2; ++r)
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t k = 0; k < 2; ++k) {
        Batch b;
        data->micro_batch(s, k, r, b);
        want[static_cast<size_t>(r)].push_back(fnv(b));
      }
  for (int64_t threads : {2, 3, 6, 7, 64}) {
    for (int64_t prefetch : {0, 2}) {
      c.data.loader_threads = threads;
      LoaderRun got = run_loaders(*data, c, steps, prefetch, false, 2);
      EXPECT_EQ(got.hashes, want) << "loader_threads " << threads << " prefetch " << prefetch;
      for (const auto& per_step : got.counts)
        for (const DataCounts& dc : per_step) EXPECT_EQ(dc.storage_samples, 200);
    }
  }
}

// A sample that fails to read fails the micro-batch whichever thread read it, with its own message; a failure in an
// earlier range is the one reported when two ranges fail (as a serial read meets it first).
TEST(DataLoader, AFailingParallelReadRethrowsTheFirstRangesError) {
  RunConfig c = teacher_config(1, 1, 64, 64);  // one micro-batch holds the whole (shuffled) set
  const std::vector<int64_t> order = micro_batch_indices(c, 64, 0, 0, 0);
  ASSERT_EQ(order.size(), 64u);
  for (size_t row : {size_t{0}, size_t{40}, size_t{63}}) {
    FailingDataset failing(make_dataset(c), order[row]);
    Batch b;
    failing.shape_batch(b, 64, 0);
    try {
      read_samples(failing, order, 4, b);  // 4 ranges of 16 rows
      ADD_FAILURE() << "row " << row << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("/data/shard-3.idx: byte offset 4096: truncated"), std::string::npos)
          << e.what();
    }
  }
}

// The two settings it does not combine with are refused at validation, naming data.loader_threads.
TEST(DataLoader, LoaderThreadsWithANodeCacheOrInlineDataAreRefused) {
  RunConfig c = teacher_config(2, 1, 8, 512);
  c.data.loader_threads = 4;
  auto messages = [](const RunConfig& cfg) {
    std::vector<ConfigIssue> issues;
    validate_config(cfg, issues, false);
    std::vector<std::string> out;
    for (const ConfigIssue& i : issues)
      if (i.path == "data.loader_threads") out.push_back(i.message);
    return out;
  };
  EXPECT_TRUE(messages(c).empty());
  c.data.cache.policy = "lru";
  EXPECT_EQ(messages(c), std::vector<std::string>{"the node cache \"lru\" reads each micro-batch in its own order on "
                                                  "one thread: use 1, or data.cache.policy \"none\""});
  c.data.cache.policy = "none";
  c.data.kind = "inline";
  EXPECT_EQ(messages(c), std::vector<std::string>{"parallel reads need an indexed training set (data.kind "
                                                  "fashion_mnist or teacher), got \"inline\": use 1"});
}

}  // namespace
}  // namespace gs
