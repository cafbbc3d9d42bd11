// Sweep slices (sim/core/shard.h): FNV-1a 64 against its published test vectors, the slice of an id as that hash
// modulo N plus 1, every run of an expanded scenario in exactly one of N slices, slices of similar size, and the
// parsing of --shard K/N with its refusals.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "sim/config/scenario.h"
#include "sim/core/error.h"
#include "sim/core/shard.h"
#include "sim/validate/validate.h"

namespace gs {
namespace {

// Published FNV-1a 64-bit values (Fowler, Noll, Vo; the reference test suite's "", "a" and "foobar").
TEST(Shard, Fnv1a64MatchesPublishedVectors) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
}

// The slice is the hash modulo N plus 1: 0xaf63dc4c8601ec8c % 3 = 1, 0x85944171f73967e8 % 7 = 6,
// 0xcbf29ce484222325 % 5 = 2 (computed apart from this code).
TEST(Shard, SliceIsTheHashModuloCountPlusOne) {
  EXPECT_EQ(shard_of("a", 3), 2);
  EXPECT_EQ(shard_of("foobar", 7), 7);
  EXPECT_EQ(shard_of("", 5), 3);
  EXPECT_EQ(shard_of("foobar", 1), 1);
  EXPECT_TRUE((Shard{2, 3}.holds("a")));
  EXPECT_FALSE((Shard{1, 3}.holds("a")));
  EXPECT_TRUE(Shard{}.holds("a"));  // not sharded: every run
}

TEST(Shard, EveryRunOfASweepIsInExactlyOneSlice) {
  const Scenario s = parse_scenario(R"({"name": "sh", "model": {"kind": "linear", "layers": [4, 2]},
      "data": {"kind": "teacher", "teacher": {"in_dim": 4, "out_dim": 2, "train_samples": 1024, "eval_samples": 8}},
      "training": {"steps": 1},
      "sweep": {"axes": {"training.optimizer.lr": [0.1, 0.2, 0.3, 0.4, 0.5], "cluster.ranks": [1, 2, 4]},
                "repeats": 3}})",
                                    "<test>");
  ASSERT_EQ(s.runs.size(), 45u);
  for (int64_t n = 1; n <= 8; ++n) {
    std::map<std::string, int> slices_holding;
    for (int64_t k = 1; k <= n; ++k)
      for (const auto& r : s.runs)
        if (Shard{k, n}.holds(r.id)) ++slices_holding[r.id];
    ASSERT_EQ(slices_holding.size(), s.runs.size()) << n << " slices";
    for (const auto& [id, count] : slices_holding) EXPECT_EQ(count, 1) << id << " in " << n << " slices";
  }
}

// 1200 ids over 4 slices: 300 expected in each, binomial standard deviation 15; 250-350 is beyond 3 of them.
TEST(Shard, SlicesHaveSimilarSizes) {
  std::vector<int> sizes(4, 0);
  for (int i = 0; i < 1200; ++i) ++sizes[static_cast<size_t>(shard_of("big.lr=" + std::to_string(i) + ".r0", 4) - 1)];
  for (int k = 0; k < 4; ++k) {
    EXPECT_GE(sizes[k], 250) << "slice " << k + 1;
    EXPECT_LE(sizes[k], 350) << "slice " << k + 1;
  }
}

TEST(Shard, ParsesKOfN) {
  const Shard a = parse_shard("2/8");
  EXPECT_EQ(a.index, 2);
  EXPECT_EQ(a.count, 8);
  EXPECT_TRUE(a.active());
  EXPECT_EQ(parse_shard("1/1").count, 1);
  EXPECT_EQ(parse_shard("1000000/1000000").index, 1000000);
  EXPECT_EQ(shard_folder_name(parse_shard("3/12")), "shard-3-of-12");
}

TEST(Shard, RefusesWhatIsNotKOfN) {
  auto message = [](const std::string& text) {
    try {
      parse_shard(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message("0/2").find("K must be from 1 to N = 2, got 0"), std::string::npos) << message("0/2");
  EXPECT_NE(message("3/2").find("K must be from 1 to N = 2, got 3"), std::string::npos) << message("3/2");
  EXPECT_NE(message("1/0").find("N must be from 1 to 1000000, got 0"), std::string::npos) << message("1/0");
  EXPECT_NE(message("1/1000001").find("N must be from 1"), std::string::npos) << message("1/1000001");
  for (const char* bad : {"a/b", "1/b", "-1/2", "+1/2", " 1/2", "1 /2", "1/2/3", "1.0/2", "/2", "1/", ""})
    EXPECT_NE(message(bad).find("--shard \"" + std::string(bad) + "\": "), std::string::npos)
        << bad << ": " << message(bad);
  EXPECT_NE(message("2").find("expected K/N with a '/'"), std::string::npos) << message("2");
  EXPECT_NE(message("a/b").find("digits only"), std::string::npos) << message("a/b");
}

}  // namespace
}  // namespace gs
