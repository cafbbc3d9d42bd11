// The --filter pattern: a regular-expression subset (ECMAScript syntax) matched without backtracking, in time linear
// in the text, so no pattern can hang the tool (std::regex backtracks: "(.*)*x" never ends on a 40-character id).
// A new construct is one case in the parser (id_pattern.cpp) and, if it needs one, one opcode in the matcher.
#pragma once
#include <bitset>
#include <cstddef>
#include <string>
#include <vector>

namespace gs {

class IdPatternParser;

// Syntax accepted (a subset of ECMAScript regular expressions, byte-wise):
//   literals; "." (any byte but \n and \r); [abc], [a-z], [^...] with \d \w \s and escapes inside;
//   \d \D \w \W \s \S; \t \n \r \f \v; "\" before any punctuation (\. \( \[ ...) for the literal;
//   ^ and $ (start and end of the id), \b and \B (word boundary, word = [A-Za-z0-9_]);
//   (...) and (?:...) groups, a|b, and the quantifiers * + ? {n} {n,} {n,m} (n, m <= 1000; a trailing "?" is
//   accepted: lazy and greedy find the same ids).
// Not accepted (gs::Error saying so): backreferences \1..\9, lookarounds (?= (?! (?<= (?<!, named groups, and
// patterns that expand to more than kMaxPatternStates states.
class IdPattern {
 public:
  static constexpr size_t kMaxPatternStates = 20000;  // matcher states after {n,m} expansion

  // Compiles pattern. Throws gs::Error("<what is wrong> at character <1-based position>") for a syntax error or an
  // unsupported construct; the message does not repeat the pattern.
  explicit IdPattern(const std::string& pattern);

  // Whether the pattern matches somewhere in text (std::regex_search's meaning). Cost: O(text size x states), no
  // backtracking (Thompson's construction simulated as a set of states; Pike VM without captures).
  bool search(const std::string& text) const;

  size_t states() const { return prog_.size(); }

 private:
  enum class Op { kByte, kSplit, kJump, kBol, kEol, kWordBoundary, kNotWordBoundary, kMatch };
  struct Inst {
    Op op;
    int x = 0;  // kByte: index in sets_; kSplit/kJump: target
    int y = 0;  // kSplit: second target
  };
  struct Node;
  friend class IdPatternParser;
  void compile(const Node& n);
  int emit(Inst i);

  std::vector<Inst> prog_;
  std::vector<std::bitset<256>> sets_;
};

}  // namespace gs
