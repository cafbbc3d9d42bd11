// Counts in messages: "1 rank", "2 ranks". Every user-facing "N noun" goes through count_text, so a count of one
// never reads "1 ranks". Extend with a plural argument for a noun that does not take an "s".
#pragma once
#include <string>
#include <type_traits>

namespace gs {

// n and the noun, in the plural (default: noun + "s") unless n is 1 (or -1).
template <typename N>
std::string count_text(N n, const std::string& noun, const std::string& plural = "") {
  const bool one = n == static_cast<N>(1) || n == static_cast<N>(-1);
  std::string number;
  if constexpr (std::is_floating_point_v<N>) {
    number = std::to_string(static_cast<long long>(n));  // counts held in a double are whole numbers
  } else {
    number = std::to_string(n);
  }
  return number + " " + (one ? noun : plural.empty() ? noun + "s" : plural);
}

}  // namespace gs
