// Element math of the dense ops, shared by the host implementation (dense.cpp) and a later CUDA twin: activations
// and their derivatives, softmax cross-entropy over one row (stable log-sum-exp), MSE over one row. Header-only
// GS_HD inline functions templated on the element type (float, double); a new element function is added here.
#pragma once
#include <math.h>

#include <cstdint>

#include "kernels/rng.h"  // GS_HD

namespace gs {

// Precision-matched libm calls (float -> erff/expf/logf, double -> erf/exp/log), usable on host and device.
GS_HD inline float math_erf(float x) { return ::erff(x); }
GS_HD inline double math_erf(double x) { return ::erf(x); }
GS_HD inline float math_exp(float x) { return ::expf(x); }
GS_HD inline double math_exp(double x) { return ::exp(x); }
GS_HD inline float math_log(float x) { return ::logf(x); }
GS_HD inline double math_log(double x) { return ::log(x); }

constexpr double kInvSqrt2 = 0.70710678118654752440;    // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2*pi)

// ReLU: max(x, 0).
template <class T>
GS_HD inline T relu(T x) {
  return x > T(0) ? x : T(0);
}

// d relu / dx at the pre-activation x; 0 at x = 0 (as PyTorch).
template <class T>
GS_HD inline T relu_derivative(T x) {
  return x > T(0) ? T(1) : T(0);
}

// GELU, exact form x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (Hendrycks & Gimpel 2016; PyTorch's approximate='none').
template <class T>
GS_HD inline T gelu(T x) {
  return T(0.5) * x * (T(1) + math_erf(x * T(kInvSqrt2)));
}

// d gelu / dx = Phi(x) + x * phi(x), phi the standard normal density.
template <class T>
GS_HD inline T gelu_derivative(T x) {
  T cdf = T(0.5) * (T(1) + math_erf(x * T(kInvSqrt2)));
  T pdf = T(kInvSqrt2Pi) * math_exp(T(-0.5) * x * x);
  return cdf + x * pdf;
}

// One step of a row's max scan: a later value replaces m only when strictly greater, so a NaN never replaces m and a
// NaN first value stays. The GPU's warp-per-row kernels reduce with the same step (the result does not depend on the
// order, up to the sign of a zero maximum, which no use below can see).
template <class T>
GS_HD inline T max_scan_step(T m, T v) {
  return v > m ? v : m;
}

// One term of the MSE sum: (y_hat - y)^2, rounded after the difference and after the product.
template <class T>
GS_HD inline T squared_error_term(T y_hat, T y) {
  T d = y_hat - y;
  return d * d;
}

// log(sum_j exp(z_j)) over z[0..n), n >= 1, computed as m + log(sum exp(z_j - m)) with m = max z (no overflow). The
// sum runs in index order j = 0, 1, ... (the GPU kernel computes the terms in parallel and adds them in this order).
template <class T>
GS_HD inline T log_sum_exp_row(const T* z, int64_t n) {
  T m = z[0];
  for (int64_t j = 1; j < n; ++j) m = max_scan_step(m, z[j]);
  T s = T(0);
  for (int64_t j = 0; j < n; ++j) s += math_exp(z[j] - m);
  return m + math_log(s);
}

// Softmax cross-entropy of one sample: -log softmax(z)[label] = logsumexp(z) - z[label]. label in [0, n).
template <class T>
GS_HD inline T softmax_cross_entropy_row(const T* z, int32_t label, int64_t n) {
  return log_sum_exp_row(z, n) - z[label];
}

// Its gradient with respect to z: dz = softmax(z) - onehot(label). dz may alias z.
template <class T>
GS_HD inline void softmax_cross_entropy_grad_row(T* dz, const T* z, int32_t label, int64_t n) {
  T lse = log_sum_exp_row(z, n);
  for (int64_t j = 0; j < n; ++j) dz[j] = math_exp(z[j] - lse);
  dz[label] -= T(1);
}

// Per-sample MSE as gradsweep defines it (docs/design.md, section 2): 0.5 * ||y_hat - y||^2 over n outputs. Its gradient
// with respect to y_hat is y_hat - y.
// The sum runs in index order (as log_sum_exp_row's).
template <class T>
GS_HD inline T mse_row(const T* y_hat, const T* y, int64_t n) {
  T s = T(0);
  for (int64_t j = 0; j < n; ++j) s += squared_error_term(y_hat[j], y[j]);
  return T(0.5) * s;
}

// ---- Column sums in PyTorch's CPU order (the bias gradient dy.sum(0)) ----------------------------------------------
// PyTorch sums a contiguous rows x cols tensor over dim 0 with its cascade sum (aten/src/ATen/native/cpu/
// SumKernel.cpp, 1.13 to 2.x, AVX2 build: 8 floats per vector): each column is summed by multi_row_sum (runs of
// 16 rows summed in order, the run sums cascaded through 4 levels) or by row_sum (4 interleaved multi_row_sums,
// rows r = k mod 4, then the leftover rows into the first, then the 4 partials in order), depending on where the
// column falls in its vector grouping. These functions reproduce that order element by element, so the host and
// the CUDA twin give the bits PyTorch's CPU gives (docs/parity.md).

// ceil(log2(x)), 1 for x <= 2 (ATen's utils::CeilLog2).
GS_HD inline int64_t torch_ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  int64_t bits = 0;
  for (uint64_t v = static_cast<uint64_t>(x - 1); v != 0; v >>= 1) ++bits;
  return bits;
}

// Elements per run of multi_row_sum over `count` elements: 2^max(4, ceil(log2(count)) / 4) (16 up to 2^19 elements).
GS_HD inline int64_t torch_cascade_step(int64_t count) {
  const int64_t q = torch_ceil_log2(count) / 4;
  return int64_t(1) << (q > 4 ? q : 4);
}

// Whole runs of multi_row_sum over `count` elements (not monotone in count: the run length doubles past 2^19).
GS_HD inline int64_t torch_cascade_runs(int64_t count) { return count / torch_cascade_step(count); }

// x[0] + x[stride] + ... + x[(count-1) stride], from +0, in index order: one run of multi_row_sum (or its tail).
template <class T>
GS_HD inline T torch_run_sum(const T* x, int64_t count, int64_t stride) {
  T s = T(0);
  for (int64_t i = 0; i < count; ++i) s += x[i * stride];
  return s;
}

// multi_row_sum's 4-level cascade, fed the sums of its whole runs in order (add_run) and finished with the sum of
// the tail (the count mod step elements after the last whole run). The run sums are independent of each other, so
// a CUDA block computes them in parallel and one thread feeds them here in order (bias_grad_kernel): the same bits
// as the sequential loop of ATen's multi_row_sum. step = torch_cascade_step(count).
template <class T>
struct TorchCascade {
  int64_t step;
  int64_t runs = 0;
  T acc1 = T(0), acc2 = T(0), acc3 = T(0);

  GS_HD explicit TorchCascade(int64_t run_length) : step(run_length) {}
  // After each run: level 1 takes the run; every step runs level 1 moves into level 2; every step^2 runs level 2
  // moves into level 3 (ATen's `if ((i & (mask << (j * power))) != 0) break` with i = runs * step).
  GS_HD void add_run(T run_sum) {
    acc1 += run_sum;
    ++runs;
    if ((runs & (step - 1)) != 0) return;  // step is a power of 2
    acc2 += acc1;
    acc1 = T(0);
    if ((runs & (step * step - 1)) != 0) return;
    acc3 += acc2;
    acc2 = T(0);
  }
  // The tail's sum, then the levels in order.
  GS_HD T finish(T tail_sum) const {
    T s = tail_sum;
    s += acc1;
    s += acc2;
    s += acc3;
    return s;
  }
};

// multi_row_sum over x[0], x[stride], ..., x[(count-1) stride].
template <class T>
GS_HD inline T torch_cascade_sum(const T* x, int64_t count, int64_t stride) {
  const int64_t step = torch_cascade_step(count);
  TorchCascade<T> cascade(step);
  int64_t i = 0;
  for (; i + step <= count; i += step) cascade.add_run(torch_run_sum(x + i * stride, step, stride));
  return cascade.finish(torch_run_sum(x + i * stride, count - i, stride));
}

// ---- Column sums as units of cascades (shared by the host loop and the parallel CUDA kernel) --------------------
// torch_column_sum below splits a column into at most 4 cascade sums ("units") and combines them: a column that
// takes multi_row_sum is one unit; one that takes row_sum is 4 (rows k mod 4) plus the leftover rows. A single
// column with rows >= 8 is 8 vector lanes, each a row_sum ("virtual columns" 0..7), combined after.

// Elements x[offset + i * stride], i < count, of dy (count 0: an empty unit).
struct TorchSumUnit {
  int64_t offset, count, stride;
};

// True for one column with rows >= 8 (8 virtual columns: the vector lanes).
GS_HD inline bool torch_column_lanes(int64_t rows, int64_t cols) { return cols == 1 && rows >= 8; }

// The virtual columns of a rows x cols dy: 8 lanes for one column with rows >= 8, else the columns.
GS_HD inline int64_t torch_virtual_columns(int64_t rows, int64_t cols) {
  return torch_column_lanes(rows, cols) ? 8 : cols;
}

// Virtual column v's elements before the split (its offset, count, stride in dy).
GS_HD inline TorchSumUnit torch_virtual_column(int64_t rows, int64_t cols, int64_t v) {
  return torch_column_lanes(rows, cols) ? TorchSumUnit{v, rows / 8, 8} : TorchSumUnit{v, rows, cols};
}

// True where virtual column v takes row_sum: every lane; for cols >= 8 the columns after the whole groups of 32,
// for 2..7 columns those after the whole groups of 4 (one column with rows < 8 too: no whole group of 4).
GS_HD inline bool torch_takes_row_sum(int64_t rows, int64_t cols, int64_t v) {
  if (torch_column_lanes(rows, cols)) return true;
  const int64_t cascaded = cols >= 8 ? cols / 32 * 32 : cols / 4 * 4;
  return v >= cascaded;
}

// Unit u (0..3) of virtual column v: row_sum's partial u (rows u mod 4), or for multi_row_sum the column (u = 0)
// and empty units.
GS_HD inline TorchSumUnit torch_column_unit(int64_t rows, int64_t cols, int64_t v, int u) {
  const TorchSumUnit c = torch_virtual_column(rows, cols, v);
  if (torch_takes_row_sum(rows, cols, v)) return TorchSumUnit{c.offset + u * c.stride, c.count / 4, 4 * c.stride};
  return u == 0 ? c : TorchSumUnit{c.offset, 0, c.stride};
}

// Virtual column v's sum from its units' cascade sums p[0..3]: row_sum adds the leftover elements into the first
// partial, then the partials in order; multi_row_sum is p[0].
template <class T>
GS_HD inline T torch_virtual_column_sum(const T* dy, int64_t rows, int64_t cols, int64_t v, const T* p) {
  if (!torch_takes_row_sum(rows, cols, v)) return p[0];
  const TorchSumUnit c = torch_virtual_column(rows, cols, v);
  T s = p[0];
  for (int64_t i = c.count / 4 * 4; i < c.count; ++i) s += dy[c.offset + i * c.stride];
  for (int k = 1; k < 4; ++k) s += p[k];
  return s;
}

// The column's sum from its virtual columns' sums (lane[0..7] for the lanes, lane[0] otherwise): the lanes start
// from the leftover rows (rows mod 8) and are added in order; the output starts at zero and the sum is added to it
// (+0 for an all -0 column, as PyTorch).
template <class T>
GS_HD inline T torch_column_total(const T* dy, int64_t rows, int64_t cols, const T* lane) {
  if (!torch_column_lanes(rows, cols)) return T(0) + lane[0];
  T acc = T(0);
  for (int64_t r = rows / 8 * 8; r < rows; ++r) acc += dy[r];
  for (int k = 0; k < 8; ++k) acc += lane[k];
  return T(0) + acc;
}

// Sum over r < rows of dy[r * cols + j]: column j of dy.sum(0) as PyTorch's CPU computes it. cols >= 8: columns in
// whole groups of 32 take multi_row_sum, the rest row_sum; 2..7 columns: whole groups of 4 take multi_row_sum, the
// rest row_sum; one column with rows >= 8 is an inner reduction over 8 vector lanes (lane l sums rows l mod 8 by
// row_sum; the scalar leftover rows, then the lanes in order). Computed through the units above, each a
// torch_cascade_sum, so the host and the parallel CUDA kernel share every step but who sums which run.
template <class T>
GS_HD inline T torch_column_sum(const T* dy, int64_t rows, int64_t cols, int64_t j) {
  T lane[8];
  const int64_t virtuals = torch_column_lanes(rows, cols) ? 8 : 1;
  for (int64_t k = 0; k < virtuals; ++k) {
    const int64_t v = virtuals == 8 ? k : j;
    T p[4];
    for (int u = 0; u < 4; ++u) {
      const TorchSumUnit unit = torch_column_unit(rows, cols, v, u);
      p[u] = torch_cascade_sum(dy + unit.offset, unit.count, unit.stride);
    }
    lane[k] = torch_virtual_column_sum(dy, rows, cols, v, p);
  }
  return torch_column_total(dy, rows, cols, lane);
}

}  // namespace gs
