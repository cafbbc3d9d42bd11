// Timing summaries (see summary.h).
#include "sim/core/summary.h"

#include <algorithm>
#include <cmath>

namespace gs {

double percentile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  double pos = q * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(sorted.size() - 1, lo + 1);
  double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Summary summarize(std::vector<double> v) {
  Summary s;
  s.count = static_cast<int64_t>(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.p50 = percentile_sorted(v, 0.50);
  s.p95 = percentile_sorted(v, 0.95);
  s.p99 = percentile_sorted(v, 0.99);
  double sum = 0.0;
  for (double x : v) sum += x;
  s.total = sum;
  s.mean = sum / static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0.0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.stdev = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

}  // namespace gs
