// cuda_status and cuda_usable (cuda_probe.h); without CUDA the probe's stub, make_gpu_model's (cuda_model.h) and
// make_cuda_backend's (cuda_backend.h).
#include "sim/backend/cuda_probe.h"

#include "sim/backend/cuda_backend.h"
#include "sim/backend/cuda_model.h"
#include "sim/core/error.h"

namespace gs {

#if !defined(GRADSWEEP_HAVE_CUDA)
CudaProbe cuda_probe() {
  CudaProbe p;
  p.error = "built without CUDA";
  return p;
}

// The GPU model and the seam's cuda backend need the CUDA side (cuda_model.cpp, cuda_backend.cpp); validation refuses
// "cuda" before these.
std::unique_ptr<Model> make_gpu_model(const RunConfig&, CudaElementOps*) {
  throw Error("cluster.backend: \"cuda\" needs a build with CUDA; this binary was built without CUDA");
}

std::unique_ptr<Backend> make_cuda_backend(const RunConfig&) {
  throw Error("cluster.backend: \"cuda\" needs a build with CUDA; this binary was built without CUDA");
}
#endif

const CudaProbe& cuda_status() {
  static const CudaProbe probe = cuda_probe();
  return probe;
}

bool cuda_usable(const CudaProbe& p) { return p.compiled && p.error.empty() && p.device_count > 0; }

}  // namespace gs
