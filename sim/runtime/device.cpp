// Device-side facts for the host program; the CUDA query lives in cuda_probe.cu when CUDA is compiled.
#include "sim/runtime/cuda_probe.h"

namespace gs {
#if !defined(GRADSWEEP_HAVE_CUDA)
CudaProbe cuda_probe() {
  CudaProbe p;
  p.error = "built without CUDA";
  return p;
}
#endif
}  // namespace gs
