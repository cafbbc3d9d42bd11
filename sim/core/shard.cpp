// Sweep slices (see shard.h).
#include "sim/core/shard.h"

#include <fmt/format.h>

#include "sim/core/error.h"

namespace gs {

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

int64_t shard_of(const std::string& run_id, int64_t count) {
  GS_EXPECT(count >= 1, "a sweep is split into at least one slice");
  return static_cast<int64_t>(fnv1a64(run_id) % static_cast<uint64_t>(count)) + 1;
}

bool Shard::holds(const std::string& run_id) const { return !active() || shard_of(run_id, count) == index; }

namespace {
// A decimal integer of at most 7 digits (kMaxShards has 7) without sign, spaces or leading '+'; -1 when it is not.
int64_t small_decimal(const std::string& text) {
  if (text.empty() || text.size() > 7) return -1;
  int64_t v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}
}  // namespace

Shard parse_shard(const std::string& text) {
  const std::string shown = text.size() > 40 ? text.substr(0, 40) + "..." : text;
  const std::string usage =
      "K/N runs the K-th of N slices of the sweep, K from 1 to N (as SLURM_ARRAY_TASK_ID with "
      "#SBATCH --array=1-N), e.g. --shard 2/8";
  const size_t slash = text.find('/');
  if (slash == std::string::npos)
    throw Error(fmt::format("--shard \"{}\": expected K/N with a '/' between the two numbers; {}", shown, usage));
  const int64_t k = small_decimal(text.substr(0, slash)), n = small_decimal(text.substr(slash + 1));
  if (k < 0 || n < 0)
    throw Error(
        fmt::format("--shard \"{}\": K and N must be whole numbers of digits only (no sign, spaces or "
                    "letters); {}",
                    shown, usage));
  if (n < 1 || n > kMaxShards)
    throw Error(fmt::format("--shard \"{}\": N must be from 1 to {}, got {}; {}", shown, kMaxShards, n, usage));
  if (k < 1 || k > n)
    throw Error(fmt::format("--shard \"{}\": K must be from 1 to N = {}, got {}; {}", shown, n, k, usage));
  return Shard{k, n};
}

std::string shard_folder_name(const Shard& shard) { return fmt::format("shard-{}-of-{}", shard.index, shard.count); }

}  // namespace gs
