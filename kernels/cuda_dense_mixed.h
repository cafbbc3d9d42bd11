// The bf16_mixed / fp16_mixed forward and backward of the dense stack on the GPU: kernels/dense_mixed.cpp's steps
// (fp16/bf16 branch; fp8 and fp16_pure are not here) with the same rounding points, GEMMs through gpu::gemm_mixed
// (format operands, fp32 accumulation) and roundings through gpu::round_through_format / encode_format. Host C++
// calling the ops of cuda_kernels.h. A new rounding point of the host twin gets its step here too.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cuda_dense.h"
#include "kernels/cuda_kernels.h"
#include "kernels/dense.h"
#include "kernels/dense_mixed.h"

namespace gs::gpu {

// Device state of the mixed stack for batches of up to max_rows samples, beside a DenseScratchGpu (which holds the
// pre-activations, activations, gradient ping-pong buffers and per-sample losses). Made once per rank.
struct MixedScratchGpu {
  FloatFormat format = FloatFormat::kBf16;
  std::vector<DeviceBuffer<uint16_t>> a_enc;  // a_enc[l]: layer l's input in the format (bit patterns), max_rows x in
  std::vector<DeviceBuffer<uint16_t>> w_enc;  // w_enc[l]: layer l's weight in the format, out x in
  DeviceBuffer<uint16_t> dz_enc;              // the output gradient in the format, max_rows x widest
  DeviceBuffer<float> b_q;                    // a bias (forward) or bias gradient (backward), widest
  DeviceBuffer<float> dw;                     // the widest weight gradient, fp32 GEMM result
  // Rounding counts of the backward's gradient casts: 2 uint64 per counted cast (underflow, non-finite), written by
  // gpu::count_rounding, count_slots() per backward x micro_batches backwards per step; read with counters_to_host.
  DeviceBuffer<unsigned long long> counts;
  int64_t micro_batches = 1;
  int64_t backward_index = 0;  // backwards since reset_counts (slot block to write)
  uint64_t grad_values = 0;    // values cast since reset_counts (known on the host; the counts are on the device)
};

// Counted gradient casts per backward: the loss gradient, then per layer the weight gradient, the bias gradient (with
// bias) and the input gradient (all but layer 0).
int64_t count_slots(const DenseStack& stack);

// format: kBf16 (bf16_mixed) or kFp16 (fp16_mixed); micro_batches: backwards per step between reset_counts calls.
MixedScratchGpu make_mixed_scratch_gpu(const DenseStack& stack, int64_t max_rows, FloatFormat format,
                                       int64_t micro_batches);

// Zeroes the step's counts (device memset on stream) and the host-side value count.
void reset_counts(MixedScratchGpu& m, cudaStream_t stream);
// Adds the counts since reset_counts to c (copies the device counts: synchronizes the stream).
void counters_to_host(MixedScratchGpu& m, MixedCounters& c, cudaStream_t stream);

// As dense_stack_forward_mixed (host): input, weight copies and bias rounded to the format, fp32-accumulated GEMM with
// a format output, format activations (relu exact). *loss_sum (device double) = the unscaled loss SUM from the
// format's logits, without synchronizing. rows <= both scratches' max_rows.
void dense_stack_forward_mixed_gpu(const BlasHandle& blas, DenseScratchGpu& s, MixedScratchGpu& m,
                                   const DenseStack& stack, const float* params, const float* x, int64_t rows,
                                   const float* y, const int32_t* labels, double* loss_sum);

// As dense_stack_backward_mixed (host, fp32 master gradient): grad (device) += rows x format(gradient of the
// mean loss times loss_scale) per parameter tensor, i.e. the gradient of loss_scale x the loss SUM. Seed loss_scale /
// rows, every GEMM output and the bias gradients rounded to the format and counted. after_layer as in
// dense_stack_backward_gpu.
void dense_stack_backward_mixed_gpu(const BlasHandle& blas, float* grad, DenseScratchGpu& s, MixedScratchGpu& m,
                                    const DenseStack& stack, int64_t rows, const float* y, const int32_t* labels,
                                    float loss_scale, const std::function<void(int64_t layer)>& after_layer = {});

}  // namespace gs::gpu
