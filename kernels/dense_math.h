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

// multi_row_sum over x[0], x[stride], ..., x[(count-1) stride].
template <class T>
GS_HD inline T torch_cascade_sum(const T* x, int64_t count, int64_t stride) {
  constexpr int64_t kLevels = 4;
  const int64_t q = torch_ceil_log2(count) / kLevels;
  const int64_t power = q > 4 ? q : 4;
  const int64_t step = int64_t(1) << power;
  const int64_t mask = step - 1;
  T acc[kLevels] = {T(0), T(0), T(0), T(0)};
  int64_t i = 0;
  while (i + step <= count) {
    for (int64_t j = 0; j < step; ++j, ++i) acc[0] += x[i * stride];
    for (int64_t j = 1; j < kLevels; ++j) {
      acc[j] += acc[j - 1];
      acc[j - 1] = T(0);
      if ((i & (mask << (j * power))) != 0) break;
    }
  }
  for (; i < count; ++i) acc[0] += x[i * stride];
  for (int64_t j = 1; j < kLevels; ++j) acc[0] += acc[j];
  return acc[0];
}

// row_sum: 4 interleaved cascade sums, the leftover elements into the first, then the partials in order.
template <class T>
GS_HD inline T torch_row_sum(const T* x, int64_t count, int64_t stride) {
  const int64_t n4 = count / 4;
  T p[4];
  for (int64_t k = 0; k < 4; ++k) p[k] = torch_cascade_sum(x + k * stride, n4, 4 * stride);
  for (int64_t i = 4 * n4; i < count; ++i) p[0] += x[i * stride];
  for (int64_t k = 1; k < 4; ++k) p[0] += p[k];
  return p[0];
}

// Sum over r < rows of dy[r * cols + j]: column j of dy.sum(0) as PyTorch's CPU computes it. cols >= 8: columns in
// whole groups of 32 take multi_row_sum, the rest row_sum; 2..7 columns: whole groups of 4 take multi_row_sum, the
// rest row_sum; one column with rows >= 8 is an inner reduction over 8 vector lanes (lane l sums rows l mod 8 by
// row_sum; the scalar leftover rows, then the lanes in order).
template <class T>
GS_HD inline T torch_column_sum(const T* dy, int64_t rows, int64_t cols, int64_t j) {
  if (cols == 1 && rows >= 8) {
    const int64_t vectors = rows / 8;
    T acc = T(0);
    for (int64_t r = 8 * vectors; r < rows; ++r) acc += dy[r];
    for (int64_t lane = 0; lane < 8; ++lane) acc += torch_row_sum(dy + lane, vectors, 8);
    return T(0) + acc;
  }
  const int64_t cascaded = cols >= 8 ? cols / 32 * 32 : cols / 4 * 4;
  const T s = j < cascaded ? torch_cascade_sum(dy + j, rows, cols) : torch_row_sum(dy + j, rows, cols);
  return T(0) + s;  // the output starts at zero and the sum is added to it (+0 for an all -0 column, as PyTorch)
}

}  // namespace gs
