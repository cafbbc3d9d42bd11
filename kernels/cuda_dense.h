// The forward/backward of a stack of fully connected layers (kernels/dense.h's DenseStack, fp32) on the GPU: the
// same steps as dense_stack_forward/backward with cuBLAS GEMMs and the kernels of cuda_kernels.h, enqueued on the
// BLAS handle's stream. The building block of the cuda rank loop. A new layer kind gets its steps in both files.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cuda_kernels.h"
#include "kernels/dense.h"

namespace gs::gpu {

// Device activations of the last forward pass for up to max_rows samples (made once per rank).
struct DenseScratchGpu {
  int64_t max_rows = 0;
  std::vector<DeviceBuffer<float>> pre;   // pre[l]: layer l's output before the activation, max_rows x widths[l+1]
  std::vector<DeviceBuffer<float>> post;  // post[l]: after the activation (hidden layers; empty for the last)
  DeviceBuffer<float> grad_a, grad_b;     // ping-pong gradient buffers, max_rows x widest
  DeviceBuffer<float> row_loss;           // per-sample losses, max_rows
  Scratch scratch;                        // for the loss sum
};

DenseScratchGpu make_dense_scratch_gpu(const DenseStack& stack, int64_t max_rows);

// Forward of rows samples (<= max_rows; device x rows x widths[0], y or labels as dense_stack_forward). Writes the
// SUM of the per-sample losses to *loss_sum (a device double) without synchronizing; keeps activations in scratch.
void dense_stack_forward_gpu(const BlasHandle& blas, DenseScratchGpu& scratch, const DenseStack& stack,
                             const float* params, const float* x, int64_t rows, const float* y, const int32_t* labels,
                             double* loss_sum);

// After dense_stack_forward_gpu on the same batch: grad (device, num_params) += gradient of that loss sum.
// after_layer (optional) is called with l once layer l's weight and bias gradients are enqueued, layers from the last
// to the first: from then on grad[weight_offset(l), num_params) is final in stream order (the cuda rank loop starts
// the all-reduce of buckets there, DDP-style overlap).
void dense_stack_backward_gpu(const BlasHandle& blas, float* grad, DenseScratchGpu& scratch, const DenseStack& stack,
                              const float* params, const float* x, int64_t rows, const float* y,
                              const int32_t* labels, const std::function<void(int64_t layer)>& after_layer = {});

}  // namespace gs::gpu
