// --filter's matcher (sim/core/id_pattern.h, RE2): finds the ids std::regex (an independent reference) finds for
// patterns both syntaxes share; patterns that make std::regex backtrack for ever end with the right answer; what RE2
// does not take is refused with its reason. Extend: a new construct is one more pattern in FindsWhatStdRegexFinds.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "sim/core/error.h"
#include "sim/core/id_pattern.h"

namespace gs {
namespace {

const std::vector<std::string> kIds = {
    "quickstart.accumulation_steps=2.ranks=4.r0",
    "quickstart.accumulation_steps=12.ranks=16.r3",
    "scaling.ranks=8.bucket_mb=25.accumulation_steps=1.r0",
    "t.kind=topk.ratio=0.01.r0",
    "t.kind=\"none\".r1",
    "t.model.layers=[8,4,3].r0",
    "t.r0",
    "",
    "a_b-c d",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab",
};

TEST(IdPattern, FindsWhatStdRegexFinds) {
  const std::vector<std::string> patterns = {
      "", "ranks=4", "^quickstart\\.accumulation_steps=2\\.ranks=4\\.r0$", "ranks=8\\.", "r0$", "^t\\.", "r[0-9]$",
      "r[^0]$", "\\d+\\.r\\d", "ranks=(4|16)\\b", "ranks=1\\B", "(topk|randomk)", "ratio=0\\.0?1", "a{3}b", "a{2,}b",
      "^a{79}b$", "^a{80}b$", "^a{1,79}b$", "layers=\\[8,4,3\\]", "kind=\"none\"", "\\s", "\\S\\s\\S", "[\\w-]+ d",
      "\\W", "^$", "^", "$", "x?", "(?:ab|a)_", "a_b-c\\x20?", "[a-c]{2,3}\\.", "(a|)+b", "(a*)*b$", "(.*)*x",
      "((a+)+)+c", ".*.*.*=.*.*\\.r0", "[.]", "\\.", "r0|r1", "^(t|quickstart)\\.r?", "steps=1[2-9]?\\.",
      "ranks=\\d{1,2}\\.r\\d$", "\\bkind\\b", "e.k", "(a|b)*?c", "\\d+?\\.", "[\\d.]+",
  };
  for (const auto& p : patterns) {
    const IdPattern mine(p);
    const std::regex ref(p, std::regex::ECMAScript);
    for (const auto& id : kIds) {
      // std::regex is only asked where it answers quickly (no nested unbounded quantifiers).
      if (p == "(.*)*x" || p == "((a+)+)+c" || p == "(a*)*b$") continue;
      EXPECT_EQ(mine.search(id), std::regex_search(id, ref)) << "pattern \"" << p << "\" on \"" << id << "\"";
    }
  }
}

// The patterns that send std::regex into exponential backtracking: answered from the math of the pattern.
TEST(IdPattern, NestedQuantifiersEndWithTheRightAnswer) {
  const std::string as(80, 'a');
  EXPECT_FALSE(IdPattern("(.*)*x").search(kIds[0]));  // no "x" in the id
  EXPECT_TRUE(IdPattern("(.*)*r0").search(kIds[0]));
  EXPECT_FALSE(IdPattern("((a+)+)+c").search(as));    // no "c"
  EXPECT_TRUE(IdPattern("((a+)+)+$").search(as));
  EXPECT_FALSE(IdPattern("^(a|aa)*$").search(as + "b"));
  EXPECT_TRUE(IdPattern("^(a|aa)*b$").search(as + "b"));
  EXPECT_FALSE(IdPattern("(a*)*(b*)*(a*)*c").search(as + "b" + as));
  std::string many;
  for (int i = 0; i < 100; ++i) many += ".*";
  EXPECT_FALSE(IdPattern(many + "x").search(as + as + as));  // 100 stars: n^100 paths for a backtracker
  EXPECT_TRUE(IdPattern(many + "b").search(as + "b"));
  // A long id (far past any real one): linear time answers at once; a backtracker would never end.
  const std::string long_id(1 << 20, 'r');
  EXPECT_FALSE(IdPattern("(.*)*x").search(long_id));
  EXPECT_TRUE(IdPattern("(.*)*rr$").search(long_id));
}

std::string error_of(const std::string& p) {
  try {
    IdPattern x(p);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Syntax errors carry RE2's reason and the offending piece; constructs RE2 leaves out on purpose (backreferences,
// lookarounds: they need backtracking) say so. Checked by content, not RE2's exact wording.
TEST(IdPattern, RefusesWhatRe2DoesNotTakeWithTheReason) {
  auto has = [](const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; };
  const std::string backref = error_of("(r)\\1");
  EXPECT_TRUE(has(backref, "\\1") && has(backref, "backreferences are not supported")) << backref;
  const std::string ahead = error_of("(?=a)");
  EXPECT_TRUE(has(ahead, "(?=") && has(ahead, "lookarounds are not supported")) << ahead;
  const std::string behind = error_of("(?<!a)b");
  EXPECT_TRUE(has(behind, "(?<") && has(behind, "lookarounds are not supported")) << behind;
  EXPECT_TRUE(has(error_of("(a"), "missing )")) << error_of("(a");
  EXPECT_TRUE(has(error_of("a)"), "unexpected )") || has(error_of("a)"), "missing (")) << error_of("a)");
  EXPECT_TRUE(has(error_of("[a"), "missing ]")) << error_of("[a");
  EXPECT_TRUE(has(error_of("*a"), "repetition operator: *")) << error_of("*a");
  EXPECT_FALSE(has(error_of("(?<n>a)"), "lookaround")) << error_of("(?<n>a)");  // a named group, not a lookbehind
  EXPECT_TRUE(has(error_of("[z-a]"), "z-a")) << error_of("[z-a]");
  EXPECT_TRUE(has(error_of("a{1001}"), "{1001}")) << error_of("a{1001}");  // RE2's repeat limit is 1000
  // Accepted: the largest single count, a non-capturing group, a character class with an escape.
  EXPECT_EQ(error_of("a{1000}b"), "");
  EXPECT_EQ(error_of("(?:ab|[\\d.])+"), "");
}

// Anchors and classes, answered from the pattern's meaning on ids written out here.
TEST(IdPattern, AnchorsAndClassesMeanWhatRe2Says) {
  const IdPattern whole("^t\\.r0$");
  EXPECT_TRUE(whole.search("t.r0"));
  EXPECT_FALSE(whole.search("xt.r0"));   // ^: start of the id only
  EXPECT_FALSE(whole.search("t.r01"));   // $: end of the id only
  EXPECT_FALSE(whole.search("t.r0\n"));  // $ without (?m) is the very end, not before a final newline
  EXPECT_TRUE(IdPattern("\\.r[0-9]$").search("a.ranks=4.r3"));
  EXPECT_FALSE(IdPattern("\\.r[^0-9]$").search("a.ranks=4.r3"));
  EXPECT_TRUE(IdPattern("[[:digit:]]+\\.r").search("ranks=16.r0"));  // POSIX class inside brackets (RE2 syntax)
  EXPECT_FALSE(IdPattern("\\bks=").search("ranks=4"));                // no word boundary between n and k
  EXPECT_TRUE(IdPattern("\\Bks=").search("ranks=4"));
  EXPECT_TRUE(IdPattern("(?i)RANKS").search("ranks=4"));               // RE2 flag group
  EXPECT_FALSE(IdPattern("RANKS").search("ranks=4"));
  EXPECT_TRUE(IdPattern("").search(""));                               // the empty pattern matches every id
}

// A copy shares the compiled pattern and answers the same (make_filter returns the pattern by value).
TEST(IdPattern, CopiesAnswerLikeTheOriginal) {
  const IdPattern a("ranks=(4|16)\\b");
  const IdPattern b = a;
  for (const auto& id : kIds) EXPECT_EQ(a.search(id), b.search(id)) << id;
  EXPECT_TRUE(b.search(kIds[1]));
  EXPECT_FALSE(b.search(kIds[2]));
}

}  // namespace
}  // namespace gs
