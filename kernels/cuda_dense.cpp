// Definitions of kernels/cuda_dense.h: dense_stack_forward/backward (kernels/dense.cpp) step for step on the GPU.
// Host C++ (launches go through cuda_kernels.h); a change to the host stack's steps is mirrored here.
#include "kernels/cuda_dense.h"

#include <algorithm>
#include <utility>

namespace gs::gpu {

DenseScratchGpu make_dense_scratch_gpu(const DenseStack& stack, int64_t max_rows) {
  DenseScratchGpu s;
  s.max_rows = max_rows;
  const int64_t layers = stack.num_layers();
  int64_t widest = 1;
  for (int64_t l = 0; l < layers; ++l) {
    const auto size = static_cast<size_t>(max_rows * stack.widths[l + 1]);
    s.pre.emplace_back(size, "dense pre-activations");
    s.post.emplace_back(l + 1 < layers ? size : 0, "dense activations");
    widest = std::max(widest, stack.widths[l + 1]);
  }
  s.grad_a = DeviceBuffer<float>(static_cast<size_t>(max_rows * widest), "dense gradient buffer");
  s.grad_b = DeviceBuffer<float>(static_cast<size_t>(max_rows * widest), "dense gradient buffer");
  s.row_loss = DeviceBuffer<float>(static_cast<size_t>(std::max<int64_t>(max_rows, 1)), "per-sample losses");
  return s;
}

void dense_stack_forward_gpu(const BlasHandle& blas, DenseScratchGpu& scratch, const DenseStack& stack,
                             const float* params, const float* x, int64_t rows, const float* y, const int32_t* labels,
                             double* loss_sum) {
  GS_EXPECT_GPU(rows <= scratch.max_rows, "dense_stack_forward_gpu: rows <= max_rows");
  cudaStream_t st = blas.stream();
  if (rows <= 0) {
    sum_to_double(loss_sum, scratch.row_loss.get(), 0, scratch.scratch, st);
    return;
  }
  const int64_t layers = stack.num_layers();
  const float* a = x;
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t in = stack.widths[l], out = stack.widths[l + 1];
    const float* w = params + stack.weight_offset(l);
    float* z = scratch.pre[l].get();
    float beta = 0.0f;
    if (stack.bias) {
      broadcast_rows(z, params + stack.bias_offset(l), rows, out, st);
      beta = 1.0f;
    }
    gemm(blas, z, a, w, rows, out, in, Transpose::kNo, Transpose::kYes, 1.0f, beta);
    if (l + 1 < layers) {
      float* h = scratch.post[l].get();
      activation_forward(h, z, rows * out, stack.activation, st);
      a = h;
    }
  }
  const float* out = scratch.pre.back().get();
  const int64_t out_dim = stack.widths.back();
  if (stack.loss == LossKind::kCrossEntropy) {
    softmax_cross_entropy_rows(scratch.row_loss.get(), out, labels, rows, out_dim, st);
  } else {
    mse_rows(scratch.row_loss.get(), out, y, rows, out_dim, st);
  }
  sum_to_double(loss_sum, scratch.row_loss.get(), static_cast<size_t>(rows), scratch.scratch, st);
}

void dense_stack_backward_gpu(const BlasHandle& blas, float* grad, DenseScratchGpu& scratch, const DenseStack& stack,
                              const float* params, const float* x, int64_t rows, const float* y,
                              const int32_t* labels, const std::function<void(int64_t layer)>& after_layer) {
  if (rows <= 0) return;
  cudaStream_t st = blas.stream();
  const int64_t layers = stack.num_layers();
  const int64_t out_dim = stack.widths.back();
  float* dz = scratch.grad_a.get();
  float* da = scratch.grad_b.get();
  const float* logits = scratch.pre.back().get();
  if (stack.loss == LossKind::kCrossEntropy) {
    softmax_cross_entropy_backward(dz, logits, labels, rows, out_dim, st);
  } else {
    mse_backward(dz, logits, y, rows * out_dim, st);
  }
  for (int64_t l = layers - 1; l >= 0; --l) {
    const int64_t in = stack.widths[l], out = stack.widths[l + 1];
    const float* a = l == 0 ? x : scratch.post[l - 1].get();
    const float* w = params + stack.weight_offset(l);
    gemm(blas, grad + stack.weight_offset(l), dz, a, out, in, rows, Transpose::kYes, Transpose::kNo, 1.0f, 1.0f);
    if (stack.bias) add_bias_grad(grad + stack.bias_offset(l), dz, rows, out, st);
    if (after_layer) after_layer(l);
    if (l == 0) break;
    gemm(blas, da, dz, w, rows, in, out, Transpose::kNo, Transpose::kNo, 1.0f, 0.0f);
    activation_backward(da, da, scratch.pre[l - 1].get(), rows * in, stack.activation, st);
    std::swap(dz, da);
  }
}

}  // namespace gs::gpu
