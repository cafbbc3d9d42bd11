// The --filter pattern over run ids: a thin wrapper over RE2 (linear-time matching, no backtracking, so no pattern
// can hang the tool; std::regex backtracks: "(.*)*x" never ends on a 40-character id). Extend through RE2's options.
#pragma once
#include <memory>
#include <string>

namespace re2 {
class RE2;
}

namespace gs {

// A compiled --filter pattern in RE2 syntax (https://github.com/google/re2/wiki/Syntax; UTF-8). Copies share the
// compiled automaton (RE2 objects are immutable and thread-safe).
class IdPattern {
 public:
  // Compiles pattern with RE2's default options (UTF-8, no logging to stderr). Throws gs::Error with RE2's error
  // text for a syntax error or a construct RE2 does not support; backreferences (\1..\9) and lookarounds ((?= (?!
  // (?<= (?<!) get a sentence saying they are not supported (RE2 matches in linear time, without them). The message
  // names neither --filter nor the whole pattern (the caller adds both).
  explicit IdPattern(const std::string& pattern);

  // Whether the pattern matches somewhere in text (RE2::PartialMatch; std::regex_search's meaning). Cost: linear in
  // the text's bytes for a given pattern.
  bool search(const std::string& text) const;

 private:
  std::shared_ptr<const re2::RE2> re_;
};

}  // namespace gs
