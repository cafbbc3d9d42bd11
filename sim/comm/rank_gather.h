// Per-rank results of a run across processes (mpirun), brought to process 0 after the run: each process holds the
// entries of its own ranks (first_rank .. first_rank + local_ranks - 1, process p's are p x local_ranks ..), process 0
// receives the others' into the same vectors, so its report has every rank's. One process: nothing happens.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "sim/comm/process_group.h"

namespace gs {

// rows[r] for every rank r (plain data, any length per rank).
template <typename T>
void gather_rank_rows(ProcessGroup& group, std::vector<std::vector<T>>& rows, int first_rank, int local_ranks) {
  static_assert(std::is_trivially_copyable_v<T>, "rows travel as bytes");
  if (group.size() <= 1) return;
  std::vector<char> mine;
  for (int r = first_rank; r < first_rank + local_ranks; ++r) {
    const std::vector<T>& row = rows[static_cast<size_t>(r)];
    const uint64_t n = row.size();
    const char* np = reinterpret_cast<const char*>(&n);
    mine.insert(mine.end(), np, np + sizeof n);
    const char* data = reinterpret_cast<const char*>(row.data());
    mine.insert(mine.end(), data, data + n * sizeof(T));
  }
  const std::vector<std::vector<char>> all = group.gather_to_root(mine);
  for (size_t p = 1; p < all.size(); ++p) {
    const char* at = all[p].data();
    for (int j = 0; j < local_ranks; ++j) {
      uint64_t n = 0;
      std::memcpy(&n, at, sizeof n);
      at += sizeof n;
      std::vector<T>& row = rows[p * static_cast<size_t>(local_ranks) + static_cast<size_t>(j)];
      row.resize(n);
      std::memcpy(static_cast<void*>(row.data()), at, n * sizeof(T));
      at += n * sizeof(T);
    }
  }
}

// values[r] for every rank r.
template <typename T>
void gather_rank_values(ProcessGroup& group, std::vector<T>& values, int first_rank, int local_ranks) {
  if (group.size() <= 1) return;
  std::vector<std::vector<T>> rows(values.size());
  for (int r = first_rank; r < first_rank + local_ranks; ++r)
    rows[static_cast<size_t>(r)] = {values[static_cast<size_t>(r)]};
  gather_rank_rows(group, rows, first_rank, local_ranks);
  for (size_t r = 0; r < values.size(); ++r)
    if (rows[r].size() == 1) values[r] = rows[r][0];
}

}  // namespace gs
