// The cuda backend's model: the mlp / linear model (dense stack) with forward, backward and evaluation on the GPU
// through kernels/cuda_dense*.h, behind the host Model interface, so the rank loop and every sync strategy run
// unchanged on cluster.backend "cuda": on the backend's GPU memory (`resident`, cuda_backend.h), or on host buffers
// staged through the workspace's copies (the form the GPU tests compare the device path with, tests/gpu/: it passed
// on an H200 as the staged cuda path, which the device path replaced). A new GPU precision mode is one branch in
// cuda_model.cpp's forward/backward.
#pragma once
#include <memory>

#include "sim/config/run_config.h"
#include "sim/model/model.h"

namespace gs {

class CudaElementOps;  // sim/backend/cuda_element_ops.h

// The GPU model of an mlp or linear configuration. Tensors, init_params (so linear's explicit initial values),
// classification and the costs are the host model's (make_model); forward / backward / evaluate run on the GPU:
//  - the device is the batch's rank modulo the device count (cudaSetDevice in the calling thread on every call), bound
//    on the workspace's first use; each workspace owns a stream, a cuBLAS handle, the dense (and mixed) scratch and
//    device copies of parameters, gradient and batch.
//  - forward uploads the parameters and the batch (the batch through the workspace's pinned staging), runs the
//    forward, synchronizes and returns the loss SUM (double).
//  - backward uploads the host `grad`, adds the batch's gradient on the device (fp32 GEMMs with beta 1, or the mixed
//    stack's accumulation), and downloads the sum into `grad`: grad += gradient of the loss sum, as the host model.
//    The host `grad` is final only after the download, so every layer is announced to ws.grad_ready then, last first.
//    fp32 / tf32 under a loss scale: the unscaled gradient times the scale (gpu::scale), then added; its non-finite
//    values are counted in ws.precision.grad_nonfinite (the host counts the scaled intermediate tensors instead).
//    bf16_mixed / fp16_mixed / fp16_pure / fp8_mixed: the mixed stack (kernels/cuda_dense_mixed.h) with the host
//    model's MixedSpec; ws.precision gets its rounding counts (gpu::counters_to_host); fp8's delayed scalings live in
//    the workspace (as the host model's scratch); fp16_pure's gradient is held in fp16 as the host's.
//  - evaluate runs the fp32 forward in chunks of the workspace's capacity (loss sum, correct count); tf32: TF32 GEMMs,
//    as every GEMM of its handle.
// Every precision mode runs. Built with the CUDA side only; without it this throws gs::Error. Throws gs::Error for a
// model kind other than mlp / linear, and CUDA errors as gs::Error (GS_CUDA_CHECK).
// With `resident` (the backend seam's device memory, cuda_backend.h): `params` and `grad` are device buffers of that
// memory (rank r's on resident->device(r); evaluation reads rank 0's), nothing is uploaded or downloaded but the batch
// and the loss, every kernel runs on the rank's stream of that memory (resident->stream(r)), and backward adds into
// `grad` on the device and announces its layers without waiting (final in that stream's order). Counters as above.
std::unique_ptr<Model> make_gpu_model(const RunConfig& config, CudaElementOps* resident = nullptr);

}  // namespace gs
