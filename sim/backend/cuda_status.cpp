// cuda_status and cuda_usable (cuda_probe.h); without CUDA the probe's stub and make_gpu_model's (cuda_model.h).
#include "sim/backend/cuda_probe.h"

#include "sim/backend/cuda_model.h"
#include "sim/core/error.h"

namespace gs {

#if !defined(GRADSWEEP_HAVE_CUDA)
CudaProbe cuda_probe() {
  CudaProbe p;
  p.error = "built without CUDA";
  return p;
}

// The staged cuda path's GPU model needs the CUDA side (cuda_model.cpp); validation refuses "cuda" before this.
std::unique_ptr<Model> make_gpu_model(const RunConfig&) {
  throw Error("cluster.backend: \"cuda\" needs a build with CUDA; this binary was built without CUDA");
}
#endif

const CudaProbe& cuda_status() {
  static const CudaProbe probe = cuda_probe();
  return probe;
}

bool cuda_usable(const CudaProbe& p) { return p.compiled && p.error.empty() && p.device_count > 0; }

}  // namespace gs
