// IdPattern over RE2 (sim/core/id_pattern.h): compile with errors turned into gs::Error, search = PartialMatch.
// A new option (case folding, Latin-1) is one line on `opts` below.
#include "sim/core/id_pattern.h"

#include <re2/re2.h>

#include "sim/core/error.h"

namespace gs {
namespace {

// Whether RE2's "invalid perl operator" argument (arg: "(?=", "(?!" or "(?<", a piece of pattern) is a lookahead or a
// lookbehind: "(?<" is one when "=" or "!" follows it somewhere in the pattern.
bool is_lookaround(const std::string& pattern, const std::string& arg) {
  if (arg == "(?=" || arg == "(?!") return true;
  if (arg != "(?<") return false;
  for (size_t at = pattern.find("(?<"); at != std::string::npos; at = pattern.find("(?<", at + 1))
    if (at + 3 < pattern.size() && (pattern[at + 3] == '=' || pattern[at + 3] == '!')) return true;
  return false;
}

}  // namespace

IdPattern::IdPattern(const std::string& pattern) {
  RE2::Options opts;
  opts.set_log_errors(false);  // errors come back as gs::Error, never printed by RE2
  auto re = std::make_shared<const RE2>(pattern, opts);
  if (!re->ok()) {
    std::string msg = re->error();
    const std::string& arg = re->error_arg();
    if (re->error_code() == RE2::ErrorBadEscape && arg.size() == 2 && arg[1] >= '1' && arg[1] <= '9')
      msg += " (backreferences are not supported: RE2 matches in linear time)";
    else if (re->error_code() == RE2::ErrorBadPerlOp && is_lookaround(pattern, arg))
      msg += " (lookarounds are not supported: RE2 matches in linear time)";
    throw Error(msg);
  }
  re_ = std::move(re);
}

bool IdPattern::search(const std::string& text) const { return RE2::PartialMatch(text, *re_); }

}  // namespace gs
