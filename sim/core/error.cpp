// The one throw helper behind GS_EXPECT, and the number format of messages.
#include "sim/core/error.h"

#include <cmath>

#include <fmt/format.h>

namespace gs {

void throw_error(const char* file, int line, const char* expr, const std::string& message) {
  std::string where = file;
  auto slash = where.rfind("sim/");
  if (slash != std::string::npos) where = where.substr(slash);
  throw Error(where + ":" + std::to_string(line) + ": " + message + " (expected " + expr + ")");
}

std::string format_number(double x, int significant_digits) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (significant_digits <= 0) return fmt::format("{}", x);
  return fmt::format("{:.{}g}", x, significant_digits);
}

}  // namespace gs
