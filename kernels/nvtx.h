// NVTX ranges for Nsight Systems: one domain "gradsweep", one registered string per range name (NvtxName), OS thread
// and CUDA stream names. A new range name is one enumerator in NvtxName plus its string in kNvtxNames (docs/profiling.md
// says what each means). Without the NVTX3 headers (GRADSWEEP_HAVE_NVTX unset) every call compiles to nothing.
#pragma once
#include <cstdint>

#if defined(GRADSWEEP_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif
#if defined(GRADSWEEP_HAVE_NVTX) && (defined(__CUDACC__) || defined(GRADSWEEP_HAVE_CUDA))
#include <nvtx3/nvToolsExtCudaRt.h>
#endif
#if defined(__CUDACC__) || defined(GRADSWEEP_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif
#if defined(__linux__)
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace gs {

// The ranges gradsweep emits (docs/profiling.md): nesting per thread is run > measure > step > micro_step >
// forward|backward, and step > compress|communicate|optimizer|eval.
enum class NvtxName : int {
  kRun,          // one run of a sweep (driver thread: setup to teardown; rank thread: its whole part)
  kMeasure,      // the measured steps (the range `nsys --capture-range=nvtx --nvtx-capture=measure@gradsweep` gates on)
  kStep,         // one optimizer step
  kMicroStep,    // one micro-batch (gradient accumulation)
  kForward,      // forward pass of a micro-batch
  kBackward,     // backward pass of a micro-batch
  kCompress,     // gradient compression: encode, decode-and-sum, error feedback
  kCommunicate,  // one collective on a bucket; payload: the bucket's bytes this rank sends (uint64)
  kOptimizer,    // the optimizer update (with unscale/clip/skip of the precision step)
  kEval,         // evaluation on the eval set
  kCount
};

inline constexpr const char* kNvtxNames[] = {"run",     "measure",     "step",      "micro_step", "forward",
                                             "backward", "compress",   "communicate", "optimizer", "eval"};
static_assert(sizeof(kNvtxNames) / sizeof(kNvtxNames[0]) == static_cast<size_t>(NvtxName::kCount),
              "one string per NvtxName");
inline constexpr const char* kNvtxDomain = "gradsweep";

#if defined(GRADSWEEP_HAVE_NVTX)
namespace nvtx_detail {
// The domain and its registered strings, created on first use. With no tool attached NVTX returns null handles and
// every push/pop below costs one branch.
struct Registry {
  nvtxDomainHandle_t domain = nullptr;
  nvtxStringHandle_t names[static_cast<int>(NvtxName::kCount)] = {};
};
inline const Registry& registry() {
  static const Registry r = [] {
    Registry x;
    x.domain = nvtxDomainCreateA(kNvtxDomain);
    if (x.domain != nullptr)
      for (int i = 0; i < static_cast<int>(NvtxName::kCount); ++i)
        x.names[i] = nvtxDomainRegisterStringA(x.domain, kNvtxNames[i]);
    return x;
  }();
  return r;
}
inline void push(NvtxName name, const uint64_t* payload_bytes) {
  const Registry& r = registry();
  if (r.domain == nullptr) return;
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = r.names[static_cast<int>(name)];
  if (payload_bytes != nullptr) {
    a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    a.payload.ullValue = *payload_bytes;
  }
  nvtxDomainRangePushEx(r.domain, &a);
}
}  // namespace nvtx_detail

// Pushes a range of `name` on this thread's stack in the gradsweep domain; nvtx_pop ends the innermost one.
inline void nvtx_push(NvtxName name) { nvtx_detail::push(name, nullptr); }
// Same, with a payload (bytes; NVTX_PAYLOAD_TYPE_UNSIGNED_INT64), e.g. a communicated bucket's size.
inline void nvtx_push(NvtxName name, uint64_t payload_bytes) { nvtx_detail::push(name, &payload_bytes); }
inline void nvtx_pop() {
  const nvtx_detail::Registry& r = nvtx_detail::registry();
  if (r.domain != nullptr) nvtxDomainRangePop(r.domain);
}
#else
inline void nvtx_push(NvtxName) {}
inline void nvtx_push(NvtxName, uint64_t) {}
inline void nvtx_pop() {}
#endif

// RAII range: pushed in the constructor, popped in the destructor (also on exceptions).
class NvtxRange {
 public:
  explicit NvtxRange(NvtxName name) { nvtx_push(name); }
  NvtxRange(NvtxName name, uint64_t payload_bytes) { nvtx_push(name, payload_bytes); }
  ~NvtxRange() { nvtx_pop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

// Consecutive ranges over the phases of one scope (e.g. encode, collective, decode at a compressor's timing points):
// next() ends the current range and starts the next; the destructor ends the last.
class NvtxPhases {
 public:
  explicit NvtxPhases(NvtxName first) { nvtx_push(first); }
  void next(NvtxName name) {
    nvtx_pop();
    nvtx_push(name);
  }
  void next(NvtxName name, uint64_t payload_bytes) {
    nvtx_pop();
    nvtx_push(name, payload_bytes);
  }
  ~NvtxPhases() { nvtx_pop(); }
  NvtxPhases(const NvtxPhases&) = delete;
  NvtxPhases& operator=(const NvtxPhases&) = delete;
};

// Initializes NVTX (the injected tool, the gradsweep domain and its registered strings) on the calling thread. NVTX3
// initializes lazily on the first call and writes its function table without synchronization, so two rank threads
// making their first NVTX call at once race (ThreadSanitizer reports it); World calls this before it starts the rank
// threads, so every later call happens after the initialization.
inline void nvtx_initialize() {
#if defined(GRADSWEEP_HAVE_NVTX)
  nvtxInitialize(nullptr);
  (void)nvtx_detail::registry();
#endif
}

// Names the calling OS thread (at most 15 characters, e.g. "rank 3"): for the kernel (pthread_setname_np: top, gdb,
// perf) and for NVTX tools (nvtxNameOsThreadA with the thread's kernel id). Errors are ignored (names are cosmetic).
inline void name_this_thread(const char* name) {
#if defined(__linux__)
  (void)pthread_setname_np(pthread_self(), name);
#if defined(GRADSWEEP_HAVE_NVTX)
  nvtxNameOsThreadA(static_cast<uint32_t>(syscall(SYS_gettid)), name);
#endif
#else
  (void)name;
#endif
}

#if defined(__CUDACC__) || defined(GRADSWEEP_HAVE_CUDA)
// Names a CUDA stream in Nsight Systems' timeline (e.g. "rank 0 compute", "rank 0 comm").
inline void nvtx_name_stream(cudaStream_t stream, const char* name) {
#if defined(GRADSWEEP_HAVE_NVTX)
  nvtxNameCudaStreamA(stream, name);
#else
  (void)stream;
  (void)name;
#endif
}
#endif

}  // namespace gs

#define GS_NVTX_CAT2(a, b) a##b
#define GS_NVTX_CAT(a, b) GS_NVTX_CAT2(a, b)
// A range over the rest of the enclosing scope: GS_NVTX_RANGE(kStep); GS_NVTX_RANGE_BYTES(kCommunicate, bytes).
#define GS_NVTX_RANGE(name) ::gs::NvtxRange GS_NVTX_CAT(gs_nvtx_range_, __LINE__)(::gs::NvtxName::name)
#define GS_NVTX_RANGE_BYTES(name, bytes) \
  ::gs::NvtxRange GS_NVTX_CAT(gs_nvtx_range_, __LINE__)(::gs::NvtxName::name, static_cast<uint64_t>(bytes))
