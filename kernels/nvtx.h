// NVTX ranges in one domain ("gradsweep") for Nsight Systems; compile to nothing where no CUDA toolkit is present.
#pragma once

#if defined(GRADSWEEP_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>
namespace gs {
struct NvtxDomainTag {
  static constexpr const char* name{"gradsweep"};
};
// RAII range: pushed in the constructor, popped in the destructor.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) {
    domain_ = domain();
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = name;
    nvtxDomainRangePushEx(domain_, &a);
  }
  ~NvtxRange() { nvtxDomainRangePop(domain_); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  static nvtxDomainHandle_t domain() {
    static nvtxDomainHandle_t d = nvtxDomainCreateA("gradsweep");
    return d;
  }
  nvtxDomainHandle_t domain_;
};
}  // namespace gs
#define GS_NVTX_CAT2(a, b) a##b
#define GS_NVTX_CAT(a, b) GS_NVTX_CAT2(a, b)
#define GS_NVTX_RANGE(name) ::gs::NvtxRange GS_NVTX_CAT(gs_nvtx_range_, __LINE__)(name)
#else
#define GS_NVTX_RANGE(name) \
  do {                      \
  } while (0)
#endif
