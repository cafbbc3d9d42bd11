// The one throw helper behind GS_EXPECT.
#include "sim/core/error.h"

namespace gs {

void throw_error(const char* file, int line, const char* expr, const std::string& message) {
  std::string where = file;
  auto slash = where.rfind("sim/");
  if (slash != std::string::npos) where = where.substr(slash);
  throw Error(where + ":" + std::to_string(line) + ": " + message + " (expected " + expr + ")");
}

}  // namespace gs
