// Timing summaries: min, percentiles, mean, stdev of a sample of durations. Percentiles interpolate linearly between
// closest ranks (numpy's default "linear" method); stdev is the sample standard deviation (n - 1), 0 for n < 2.
#pragma once
#include <cstdint>
#include <vector>

namespace gs {

struct Summary {
  int64_t count = 0;
  double min = 0, p50 = 0, p95 = 0, p99 = 0, mean = 0, stdev = 0, max = 0, total = 0;  // same unit as the input
};

// values need not be sorted; empty input gives count 0 and zeros.
Summary summarize(std::vector<double> values);

// q in [0, 1] of sorted values (linear interpolation between closest ranks).
double percentile_sorted(const std::vector<double>& sorted, double q);

}  // namespace gs
