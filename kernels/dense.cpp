// Host implementation of the dense ops (kernels/dense.h): GEMM through CBLAS (OpenBLAS), element loops over the
// shared element math (kernels/dense_math.h), and the dense-stack forward/backward. Explicit float and double
// instantiations at the end; a new op is declared in dense.h, defined here and added to the instantiation list.
#include "kernels/dense.h"

#include <cblas.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "kernels/dense_math.h"

namespace gs {

BlasInfo blas_info() {
  const char* config = openblas_get_config();
  const char* core = openblas_get_corename();
  return {config != nullptr ? config : "", core != nullptr ? core : ""};
}


// ---- Ops --------------------------------------------------------------------------------------------------------

template <class T>
void gemm(T* c, const T* a, const T* b, int64_t m, int64_t n, int64_t k, Transpose trans_a, Transpose trans_b,
          T alpha, T beta) {
  if (m <= 0 || n <= 0) return;
  const bool ta = trans_a == Transpose::kYes;
  const bool tb = trans_b == Transpose::kYes;
  // Row-major leading dimensions: the stored row length of each operand.
  const auto lda = static_cast<blasint>(std::max<int64_t>(1, ta ? m : k));
  const auto ldb = static_cast<blasint>(std::max<int64_t>(1, tb ? k : n));
  const auto ldc = static_cast<blasint>(n);
  const CBLAS_TRANSPOSE op_a = ta ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE op_b = tb ? CblasTrans : CblasNoTrans;
  const auto bm = static_cast<blasint>(m), bn = static_cast<blasint>(n), bk = static_cast<blasint>(k);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, op_a, op_b, bm, bn, bk, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    static_assert(std::is_same_v<T, double>, "gemm: float or double");
    cblas_dgemm(CblasRowMajor, op_a, op_b, bm, bn, bk, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

template <class T>
void broadcast_rows(T* y, const T* row, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) std::copy(row, row + cols, y + r * cols);
}

template <class T>
void add_bias(T* y, const T* bias, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    T* yr = y + r * cols;
    for (int64_t j = 0; j < cols; ++j) yr[j] += bias[j];
  }
}

template <class T>
void bias_grad(T* db, const T* dy, int64_t rows, int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) db[j] = torch_column_sum(dy, rows, cols, j);
}

template <class T>
void add_bias_grad(T* grad_bias, const T* dy, int64_t rows, int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) grad_bias[j] += torch_column_sum(dy, rows, cols, j);
}

template <class T>
void activation_forward(T* out, const T* in, int64_t n, Activation act) {
  if (act == Activation::kRelu) {
    for (int64_t i = 0; i < n; ++i) out[i] = relu(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = gelu(in[i]);
  }
}

template <class T>
void activation_backward(T* dx, const T* dy, const T* x, int64_t n, Activation act) {
  if (act == Activation::kRelu) {
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * relu_derivative(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * gelu_derivative(x[i]);
  }
}

template <class T>
double softmax_cross_entropy(const T* logits, const int32_t* labels, int64_t rows, int64_t classes) {
  double sum = 0.0;
  for (int64_t r = 0; r < rows; ++r) sum += softmax_cross_entropy_row(logits + r * classes, labels[r], classes);
  return sum;
}

template <class T>
void softmax_cross_entropy_backward(T* dlogits, const T* logits, const int32_t* labels, int64_t rows,
                                    int64_t classes) {
  for (int64_t r = 0; r < rows; ++r) {
    softmax_cross_entropy_grad_row(dlogits + r * classes, logits + r * classes, labels[r], classes);
  }
}

template <class T>
double mse(const T* y_hat, const T* y, int64_t rows, int64_t cols) {
  double sum = 0.0;
  for (int64_t r = 0; r < rows; ++r) sum += mse_row(y_hat + r * cols, y + r * cols, cols);
  return sum;
}

template <class T>
void mse_backward(T* dy_hat, const T* y_hat, const T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dy_hat[i] = y_hat[i] - y[i];
}

template <class T>
int64_t count_correct(const T* logits, const int32_t* labels, int64_t rows, int64_t classes) {
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T* z = logits + r * classes;
    int64_t best = 0;
    for (int64_t j = 1; j < classes; ++j) {
      if (z[j] > z[best]) best = j;
    }
    correct += best == labels[r] ? 1 : 0;
  }
  return correct;
}

// ---- Dense stack ------------------------------------------------------------------------------------------------

size_t DenseStack::weight_offset(int64_t l) const {
  size_t off = 0;
  for (int64_t i = 0; i < l; ++i) {
    off += static_cast<size_t>(widths[i] * widths[i + 1]) + (bias ? static_cast<size_t>(widths[i + 1]) : 0);
  }
  return off;
}

size_t DenseStack::bias_offset(int64_t l) const {
  return weight_offset(l) + static_cast<size_t>(widths[l] * widths[l + 1]);
}

size_t DenseStack::num_params() const { return weight_offset(num_layers()); }

template <class T>
DenseScratch<T> make_dense_scratch(const DenseStack& stack, int64_t max_rows) {
  DenseScratch<T> s;
  s.max_rows = max_rows;
  const int64_t layers = stack.num_layers();
  s.pre.resize(static_cast<size_t>(layers));
  s.post.resize(static_cast<size_t>(layers));
  int64_t widest = 1;
  for (int64_t l = 0; l < layers; ++l) {
    const auto size = static_cast<size_t>(max_rows * stack.widths[l + 1]);
    s.pre[l].assign(size, T(0));
    if (l + 1 < layers) s.post[l].assign(size, T(0));
    widest = std::max(widest, stack.widths[l + 1]);
  }
  s.grad_a.assign(static_cast<size_t>(max_rows * widest), T(0));
  s.grad_b.assign(static_cast<size_t>(max_rows * widest), T(0));
  return s;
}

template <class T>
double dense_stack_forward(DenseScratch<T>& scratch, const DenseStack& stack, const T* params, const T* x,
                           int64_t rows, const T* y, const int32_t* labels) {
  if (rows <= 0) return 0.0;
  const int64_t layers = stack.num_layers();
  const T* a = x;  // input of layer l
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t in = stack.widths[l], out = stack.widths[l + 1];
    const T* w = params + stack.weight_offset(l);
    T* z = scratch.pre[l].data();
    // z = a W^T + b: seed z with the bias rows and let the GEMM accumulate (beta = 1), one pass instead of two.
    T beta = T(0);
    if (stack.bias) {
      broadcast_rows(z, params + stack.bias_offset(l), rows, out);
      beta = T(1);
    }
    gemm(z, a, w, rows, out, in, Transpose::kNo, Transpose::kYes, T(1), beta);
    if (l + 1 < layers) {
      T* h = scratch.post[l].data();
      activation_forward(h, z, rows * out, stack.activation);
      a = h;
    }
  }
  const T* out = scratch.pre.back().data();
  const int64_t out_dim = stack.widths.back();
  return stack.loss == LossKind::kCrossEntropy ? softmax_cross_entropy(out, labels, rows, out_dim)
                                               : mse(out, y, rows, out_dim);
}

template <class T>
void dense_stack_backward(T* grad, DenseScratch<T>& scratch, const DenseStack& stack, const T* params, const T* x,
                          int64_t rows, const T* y, const int32_t* labels,
                          const std::function<void(int64_t layer)>& after_layer) {
  if (rows <= 0) return;
  const int64_t layers = stack.num_layers();
  const int64_t out_dim = stack.widths.back();
  T* dz = scratch.grad_a.data();  // gradient of the loss sum with respect to layer l's pre-activation
  T* da = scratch.grad_b.data();  // gradient with respect to layer l's input
  const T* logits = scratch.pre.back().data();
  if (stack.loss == LossKind::kCrossEntropy) {
    softmax_cross_entropy_backward(dz, logits, labels, rows, out_dim);
  } else {
    mse_backward(dz, logits, y, rows * out_dim);
  }
  for (int64_t l = layers - 1; l >= 0; --l) {
    const int64_t in = stack.widths[l], out = stack.widths[l + 1];
    const T* a = l == 0 ? x : scratch.post[l - 1].data();
    const T* w = params + stack.weight_offset(l);
    // dW (out x in) += dz^T (out x rows) * a (rows x in), straight into grad (beta = 1: accumulate).
    gemm(grad + stack.weight_offset(l), dz, a, out, in, rows, Transpose::kYes, Transpose::kNo, T(1), T(1));
    if (stack.bias) add_bias_grad(grad + stack.bias_offset(l), dz, rows, out);
    if (after_layer) after_layer(l);
    if (l == 0) break;  // the input's gradient is not needed
    // da (rows x in) = dz (rows x out) * W (out x in); then dz_prev = da * act'(pre[l-1]) in place.
    gemm(da, dz, w, rows, in, out, Transpose::kNo, Transpose::kNo, T(1), T(0));
    activation_backward(da, da, scratch.pre[l - 1].data(), rows * in, stack.activation);
    std::swap(dz, da);
  }
}

// ---- Explicit instantiations ------------------------------------------------------------------------------------

#define GS_DENSE_INSTANTIATE(T)                                                                                    \
  template void gemm<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, Transpose, Transpose, T, T);            \
  template void broadcast_rows<T>(T*, const T*, int64_t, int64_t);                                                 \
  template void add_bias<T>(T*, const T*, int64_t, int64_t);                                                       \
  template void bias_grad<T>(T*, const T*, int64_t, int64_t);                                                      \
  template void add_bias_grad<T>(T*, const T*, int64_t, int64_t);                                                  \
  template void activation_forward<T>(T*, const T*, int64_t, Activation);                                          \
  template void activation_backward<T>(T*, const T*, const T*, int64_t, Activation);                               \
  template double softmax_cross_entropy<T>(const T*, const int32_t*, int64_t, int64_t);                            \
  template void softmax_cross_entropy_backward<T>(T*, const T*, const int32_t*, int64_t, int64_t);                 \
  template double mse<T>(const T*, const T*, int64_t, int64_t);                                                    \
  template void mse_backward<T>(T*, const T*, const T*, int64_t);                                                  \
  template int64_t count_correct<T>(const T*, const int32_t*, int64_t, int64_t);                                   \
  template DenseScratch<T> make_dense_scratch<T>(const DenseStack&, int64_t);                                      \
  template double dense_stack_forward<T>(DenseScratch<T>&, const DenseStack&, const T*, const T*, int64_t,         \
                                         const T*, const int32_t*);                                                \
  template void dense_stack_backward<T>(T*, DenseScratch<T>&, const DenseStack&, const T*, const T*, int64_t,      \
                                        const T*, const int32_t*, const std::function<void(int64_t)>&);

GS_DENSE_INSTANTIATE(float)
GS_DENSE_INSTANTIATE(double)

#undef GS_DENSE_INSTANTIATE

}  // namespace gs
