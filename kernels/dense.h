// Dense host arithmetic: row-major GEMM (CBLAS), bias, activations, losses, and the forward/backward of a stack of
// fully connected layers (the mlp and linear models). Templated on float and double (explicit instantiations in
// dense.cpp). Argument order is destination first: op(out, in..., n). Ops never allocate; scratch is made up front.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace gs {

enum class Transpose { kNo, kYes };
enum class Activation { kRelu, kGelu };
enum class LossKind { kCrossEntropy, kMse };

// The BLAS behind gemm, as the library names itself: OpenBLAS's build configuration (openblas_get_config, e.g.
// "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64") and the kernel it picked for this CPU at load time
// (openblas_get_corename, e.g. "Haswell", "Cooperlake"; OPENBLAS_CORETYPE overrides the pick). GEMM results depend on
// the kernel in their last bits, so reports record it (context.blas; docs/parity.md, "The BLAS kernel").
struct BlasInfo {
  const char* config;
  const char* core;
};
BlasInfo blas_info();

// ---- Ops --------------------------------------------------------------------------------------------------------

// c (m x n) = alpha * op(a) * op(b) + beta * c, row-major; op(a) is m x k, op(b) is k x n (a is k x m when
// transposed, b is n x k when transposed). beta = 0 ignores c's old contents. Through cblas_sgemm / cblas_dgemm.
template <class T>
void gemm(T* c, const T* a, const T* b, int64_t m, int64_t n, int64_t k, Transpose trans_a, Transpose trans_b,
          T alpha, T beta);

// y[r, :] = row[:] for r < rows (y is rows x cols).
template <class T>
void broadcast_rows(T* y, const T* row, int64_t rows, int64_t cols);

// y[r, :] += bias[:] for r < rows (y is rows x cols).
template <class T>
void add_bias(T* y, const T* bias, int64_t rows, int64_t cols);

// db[j] = sum_r dy[r, j] (column sums of dy, rows x cols): one micro-batch's bias gradient of y = x W^T + b, summed
// in PyTorch's CPU order (torch_column_sum, dense_math.h). db is overwritten.
template <class T>
void bias_grad(T* db, const T* dy, int64_t rows, int64_t cols);

// grad_bias[j] += bias_grad(dy)[j]: the micro-batch is summed first, then added (one rounding per column), as
// PyTorch's AccumulateGrad adds each backward's bias gradient into .grad.
template <class T>
void add_bias_grad(T* grad_bias, const T* dy, int64_t rows, int64_t cols);

// out[i] = act(in[i]) for i < n; out may alias in. GELU is the exact erf form (see dense_math.h).
template <class T>
void activation_forward(T* out, const T* in, int64_t n, Activation act);

// dx[i] = dy[i] * act'(x[i]) for i < n, x the pre-activation; dx may alias dy.
template <class T>
void activation_backward(T* dx, const T* dy, const T* x, int64_t n, Activation act);

// Sum over rows of softmax cross-entropy logsumexp(z_r) - z_r[label_r]; logits rows x classes, labels in [0, classes)
// (not checked here). Accumulated in double.
template <class T>
double softmax_cross_entropy(const T* logits, const int32_t* labels, int64_t rows, int64_t classes);

// dlogits[r, :] = softmax(logits[r, :]) - onehot(label_r): the gradient of that sum. dlogits may alias logits.
template <class T>
void softmax_cross_entropy_backward(T* dlogits, const T* logits, const int32_t* labels, int64_t rows,
                                    int64_t classes);

// Sum over rows of 0.5 * ||y_hat_r - y_r||^2 (both rows x cols), accumulated in double.
template <class T>
double mse(const T* y_hat, const T* y, int64_t rows, int64_t cols);

// dy_hat[i] = y_hat[i] - y[i] for i < n: the gradient of that sum. dy_hat may alias y_hat.
template <class T>
void mse_backward(T* dy_hat, const T* y_hat, const T* y, int64_t n);

// Number of rows whose first maximal logit is at the label.
template <class T>
int64_t count_correct(const T* logits, const int32_t* labels, int64_t rows, int64_t classes);

// ---- A stack of fully connected layers -------------------------------------------------------------------------

// Layers widths[0] -> widths[1] -> ... -> widths.back(); y = x W^T + b per layer (W row-major out x in, as
// torch.nn.Linear), `activation` after every layer but the last, `loss` on the last layer's output.
// Parameter layout (flat): for each layer l: weight (out x in) then, if bias, bias (out).
struct DenseStack {
  std::vector<int64_t> widths;  // >= 2 entries, each >= 1 (the caller validates)
  Activation activation = Activation::kRelu;
  LossKind loss = LossKind::kCrossEntropy;
  bool bias = true;

  int64_t num_layers() const { return static_cast<int64_t>(widths.size()) - 1; }
  // Offsets in elements of layer l's weight and bias in the flat parameter buffer.
  size_t weight_offset(int64_t l) const;
  size_t bias_offset(int64_t l) const;  // only meaningful when bias
  size_t num_params() const;
};

// Activations of the last forward pass for up to max_rows samples (made once per rank; never resized by ops).
template <class T>
struct DenseScratch {
  int64_t max_rows = 0;
  std::vector<std::vector<T>> pre;   // pre[l]: layer l's output before the activation, max_rows x widths[l+1]
  std::vector<std::vector<T>> post;  // post[l]: after the activation (hidden layers only; empty for the last)
  std::vector<T> grad_a, grad_b;     // ping-pong gradient buffers, max_rows x max(widths[1..])
};

template <class T>
DenseScratch<T> make_dense_scratch(const DenseStack& stack, int64_t max_rows);

// Forward pass over rows samples (rows <= scratch.max_rows): x is rows x widths[0]; targets are y (rows x
// widths.back(), mse) or labels (rows, cross_entropy; the other may be null). Returns the SUM of the per-sample
// losses; keeps the activations in scratch for dense_stack_backward. params laid out as DenseStack says.
template <class T>
double dense_stack_forward(DenseScratch<T>& scratch, const DenseStack& stack, const T* params, const T* x,
                           int64_t rows, const T* y, const int32_t* labels);

// After dense_stack_forward on the same inputs: grad[0..num_params()) += gradient of that loss sum with respect to
// the parameters (accumulates; never clears). Uses scratch's gradient buffers. Standard backpropagation: per layer
// dW += dZ^T A, db += colsum(dZ) (the micro-batch's column sums first, then added), dA_prev = dZ W,
// dZ_prev = dA_prev * act'(Z_prev). after_layer (optional) is called with l once layer l's weight and bias gradients
// are in grad, layers from the last to the first (as dense_stack_backward_gpu's); not called when rows <= 0.
template <class T>
void dense_stack_backward(T* grad, DenseScratch<T>& scratch, const DenseStack& stack, const T* params, const T* x,
                          int64_t rows, const T* y, const int32_t* labels,
                          const std::function<void(int64_t layer)>& after_layer = {});

// The last forward pass's output (rows x widths.back()).
template <class T>
const T* dense_stack_output(const DenseScratch<T>& scratch) {
  return scratch.pre.back().data();
}

}  // namespace gs
