// The mixed-precision forward and backward of the dense stack on the GPU (bf16_mixed, fp16_mixed, fp16_pure,
// fp8_mixed): kernels/dense_mixed.cpp's steps with the same rounding points, GEMMs through gpu::gemm_mixed (format
// operands, fp32 accumulation) and roundings through gpu::round_through_format / encode_format. Host C++ calling the
// ops of cuda_kernels.h. A new rounding point of the host twin gets its step here too.
//
// fp8_mixed GEMMs are EMULATED, not run on fp8 tensor cores: each operand is quantized with its delayed per-tensor
// scale (gpu::fp8_quantize_delayed: E4M3 inputs and weights, E5M2 output gradients, amax history and scale on the
// device), the fp8 values are stored as bf16 (every E4M3/E5M2 value is exact in bf16) and multiplied by a bf16 GEMM
// with fp32 accumulation, alpha = the two operands' 1/scale (gpu::gemm_mixed_scaled). Products of fp8 values are
// exact in fp32, so this is the fp8 tensor-core result (D = scale_a^-1 scale_b^-1 sum q_a q_b) up to summation order.
// Chosen over cuBLASLt fp8 matmuls (sm_89+, TN layout only, 16-byte aligned leading dimensions, fp8 output
// scales) because no GPU could run the code when it was written: the emulation runs on every GPU and is checked
// against the host twin. cuBLASLt fp8 GEMMs are NOT done.
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
  FloatFormat format = FloatFormat::kBf16;  // == spec.format
  MixedSpec spec;                           // the mode's arithmetic (spec.loss_scale unused: backward takes it)
  // GEMM operands as bit patterns: fp16/bf16 in the format; fp8 the quantized values (E4M3 / E5M2) as bf16.
  std::vector<DeviceBuffer<uint16_t>> a_enc;  // a_enc[l]: layer l's input, max_rows x in
  std::vector<DeviceBuffer<uint16_t>> w_enc;  // w_enc[l]: layer l's weight, out x in
  DeviceBuffer<uint16_t> dz_enc;              // the output gradient, max_rows x widest
  DeviceBuffer<float> b_q;                    // a bias (forward) or bias gradient (backward), widest
  DeviceBuffer<float> dw;                     // the widest weight gradient, fp32 GEMM result
  // Rounding counts of the backward's gradient casts: 2 uint64 per counted cast (underflow, non-finite), written by
  // gpu::count_rounding, count_slots() per backward x micro_batches backwards per step; read with counters_to_host.
  DeviceBuffer<unsigned long long> counts;
  // fp8: 3 delayed scalings per layer (input, weight, output gradient: the host's MixedScratch::fp8 order), their
  // amax histories (spec.amax_history_len floats each, in the same order) and the alpha/beta pairs of the 3 GEMMs
  // per layer (forward, weight gradient, input gradient).
  DeviceBuffer<Fp8ScalingState> fp8_state;
  DeviceBuffer<float> fp8_history;
  DeviceBuffer<float> fp8_scalars;
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
// Any mode of MixedSpec (as the host model maps precision.mode, sim/model/mlp.cpp): format kBf16 or kFp16;
// grad_in_format (fp16_pure); fp8_gemm with format kBf16 (fp8_mixed; amax_history_len >= 1), fp8 scalings at scale 1
// with empty histories. Throws gpu::CudaError for another combination.
MixedScratchGpu make_mixed_scratch_gpu(const DenseStack& stack, int64_t max_rows, const MixedSpec& spec,
                                       int64_t micro_batches);

// fp8: the delayed scalings as the host holds them (MixedScratch::fp8: 3 per layer, same order and fields; copies
// from the device: synchronizes the stream). Empty without fp8.
std::vector<Fp8Scaling> fp8_scalings_to_host(const MixedScratchGpu& m, cudaStream_t stream);
// One device scaling state and its history (device pointers) as the host's Fp8Scaling (synchronous copies).
Fp8Scaling fp8_scaling_to_host(const Fp8ScalingState* state, const float* history);

// Zeroes the step's counts (device memset on stream) and the host-side value count.
void reset_counts(MixedScratchGpu& m, cudaStream_t stream);
// Adds the counts since reset_counts to c (copies the device counts: synchronizes the stream).
void counters_to_host(MixedScratchGpu& m, MixedCounters& c, cudaStream_t stream);

// As dense_stack_forward_mixed (host): input, weight copies and bias rounded to the format (fp8: input and weight
// quantized to E4M3 with their delayed scales), fp32-accumulated GEMM with a format output, format activations (relu
// exact). *loss_sum (device double) = the unscaled loss SUM from the
// format's logits, without synchronizing. rows <= both scratches' max_rows.
void dense_stack_forward_mixed_gpu(const BlasHandle& blas, DenseScratchGpu& s, MixedScratchGpu& m,
                                   const DenseStack& stack, const float* params, const float* x, int64_t rows,
                                   const float* y, const int32_t* labels, double* loss_sum);

// As dense_stack_backward_mixed (host): grad (device) += rows x format(gradient of the mean loss times loss_scale)
// per parameter tensor, i.e. the gradient of loss_scale x the loss SUM (fp32 master gradient), or under
// spec.grad_in_format grad = rows x format(grad / rows + format gradient) (fp16_pure). Seed loss_scale / rows; fp16 /
// bf16: every GEMM output and the bias gradients rounded to the format and counted; fp8: the output gradient
// quantized to E5M2 with its delayed scale (counted), fp32 weight gradients, bf16 input and bias gradients.
// after_layer as in dense_stack_backward_gpu.
void dense_stack_backward_mixed_gpu(const BlasHandle& blas, float* grad, DenseScratchGpu& s, MixedScratchGpu& m,
                                    const DenseStack& stack, int64_t rows, const float* y, const int32_t* labels,
                                    float loss_scale, const std::function<void(int64_t layer)>& after_layer = {});

}  // namespace gs::gpu
