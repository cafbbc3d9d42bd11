// Error handling: one exception type and one expectation macro. CUDA/NCCL macros live beside the CUDA code.
// Errors carry file:line and the failing expression (as NCCL's do).
#pragma once
#include <stdexcept>
#include <string>

namespace gs {

// Thrown for every gradsweep error that ends a run or a command; what() is the user-facing message.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The one throw helper: formats "file:line: expr: message" and throws gs::Error.
[[noreturn]] void throw_error(const char* file, int line, const char* expr, const std::string& message);

// A number for a message: NaN, inf and -inf for the non-finite values (fmt and printf write "nan" or "-nan",
// depending on the sign bit of the NaN); finite values as fmt's shortest round trip (significant_digits 0) or with
// that many significant digits ("{:.6g}").
std::string format_number(double x, int significant_digits = 0);

}  // namespace gs

// GS_EXPECT(cond, message): throws gs::Error naming the location and the failed condition when cond is false.
#define GS_EXPECT(cond, message)                                   \
  do {                                                             \
    if (!(cond)) ::gs::throw_error(__FILE__, __LINE__, #cond, (message)); \
  } while (0)
