// An NVTX tool for tests: loaded by NVTX through NVTX_INJECTION64_PATH, it records every range pushed and popped, per
// thread and domain, with its nesting path ("run/measure/step") and how long it was open (steady clock, from the
// push to its pop), and writes a summary to $GRADSWEEP_NVTX_RECORD at exit. A new kind of record is one more callback below (the NVTX callback tables: nvtxDetail/nvtxTypes.h).
//
// Output, one tab-separated record a line:
//   domain  NAME                                   a domain created (nvtxDomainCreateA)
//   string  DOMAIN  NAME                           a registered string (nvtxDomainRegisterStringA)
//   thread  NVTX_NAME  COMM                        nvtxNameOsThreadA, and the kernel's name of that thread then
//   range   THREAD  DOMAIN  PATH  COUNT  PAYLOADS  PAYLOAD_SUM  UNREGISTERED  TOTAL_NS  MAX_NS
//                                                  pushes of PATH on threads named THREAD (nvtxNameOsThreadA, else
//                                                  "comm:" + kernel name); PAYLOADS of them carried a uint64 payload
//                                                  adding up to PAYLOAD_SUM; UNREGISTERED used no registered string;
//                                                  the popped ones were open TOTAL_NS nanoseconds together, the
//                                                  longest MAX_NS
//   open    THREAD  DOMAIN  PATH                   a range still open at exit
//   error   TEXT                                   a pop with nothing pushed, an unknown handle, ...
#include <nvtx3/nvToolsExt.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace {

struct Domain {
  std::string name;
};
struct String {
  std::string domain, text;
};
struct Totals {
  uint64_t count = 0, payloads = 0, payload_sum = 0, unregistered = 0, total_ns = 0, max_ns = 0;
};
// One open range: its name, where its totals are, and when it was pushed.
struct Open {
  std::string name;
  Totals* totals;
  uint64_t start_ns;
};

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

std::mutex g_mu;
std::vector<std::unique_ptr<Domain>>* g_domains;  // handles are pointers to these (never freed: tools outlive main)
std::vector<std::unique_ptr<String>>* g_strings;
std::map<uint32_t, std::string>* g_thread_names;                                    // tid -> NVTX name
std::vector<std::pair<std::string, std::string>>* g_named;                          // (NVTX name, comm)
std::map<std::tuple<std::string, std::string, std::string>, Totals>* g_ranges;    // (thread, domain, path)
std::map<std::pair<uint32_t, std::string>, std::vector<Open>>* g_stacks;          // (tid, domain) -> open ranges
std::vector<std::string>* g_errors;

uint32_t tid() { return static_cast<uint32_t>(syscall(SYS_gettid)); }

std::string comm_of(uint32_t t) {
  std::ifstream f("/proc/self/task/" + std::to_string(t) + "/comm");
  std::string s;
  std::getline(f, s);
  return s;
}

std::string thread_label(uint32_t t) {
  auto it = g_thread_names->find(t);
  return it != g_thread_names->end() ? it->second : "comm:" + comm_of(t);
}

std::string domain_name(nvtxDomainHandle_t d) {
  if (d == nullptr) return "(default)";
  for (const auto& p : *g_domains)
    if (reinterpret_cast<nvtxDomainHandle_t>(p.get()) == d) return p->name;
  g_errors->push_back("unknown domain handle");
  return "(unknown)";
}

std::string message_of(const nvtxEventAttributes_t* a, bool* registered) {
  *registered = false;
  if (a == nullptr) return "(null attributes)";
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return a->message.ascii != nullptr ? a->message.ascii : "(null)";
    case NVTX_MESSAGE_TYPE_REGISTERED:
      for (const auto& s : *g_strings)
        if (reinterpret_cast<nvtxStringHandle_t>(s.get()) == a->message.registered) {
          *registered = true;
          return s->text;
        }
      g_errors->push_back("unknown registered string handle");
      return "(unknown string)";
    default:
      return "(message type " + std::to_string(a->messageType) + ")";
  }
}

void push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::lock_guard<std::mutex> lock(g_mu);
  const uint32_t t = tid();
  const std::string dom = domain_name(d);
  bool registered = false;
  std::string name = message_of(a, &registered);
  auto& stack = (*g_stacks)[{t, dom}];
  std::string path;
  for (const auto& s : stack) path += s.name + "/";
  path += name;
  Totals& tot = (*g_ranges)[{thread_label(t), dom, path}];  // std::map: the reference stays valid
  ++tot.count;
  if (a != nullptr && a->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64) {
    ++tot.payloads;
    tot.payload_sum += a->payload.ullValue;
  }
  if (!registered) ++tot.unregistered;
  stack.push_back(Open{name, &tot, now_ns()});  // the clock read last: the recorder's own work is not counted
}

void pop(nvtxDomainHandle_t d) {
  std::lock_guard<std::mutex> lock(g_mu);
  const uint32_t t = tid();
  const std::string dom = domain_name(d);
  auto& stack = (*g_stacks)[{t, dom}];
  if (stack.empty()) {
    g_errors->push_back("pop with no open range on thread " + thread_label(t) + " in domain " + dom);
    return;
  }
  const uint64_t open_ns = now_ns() - stack.back().start_ns;
  Totals& tot = *stack.back().totals;
  tot.total_ns += open_ns;
  if (open_ns > tot.max_ns) tot.max_ns = open_ns;
  stack.pop_back();
}

int NVTX_API domain_range_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  push(d, a);
  return 0;
}
int NVTX_API domain_range_pop(nvtxDomainHandle_t d) {
  pop(d);
  return 0;
}
int NVTX_API range_push_ex(const nvtxEventAttributes_t* a) {
  push(nullptr, a);
  return 0;
}
int NVTX_API range_push_a(const char* message) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = message;
  push(nullptr, &a);
  return 0;
}
int NVTX_API range_pop() {
  pop(nullptr);
  return 0;
}
nvtxDomainHandle_t NVTX_API domain_create_a(const char* name) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_domains->push_back(std::make_unique<Domain>(Domain{name != nullptr ? name : ""}));
  return reinterpret_cast<nvtxDomainHandle_t>(g_domains->back().get());
}
nvtxStringHandle_t NVTX_API domain_register_string_a(nvtxDomainHandle_t d, const char* text) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_strings->push_back(std::make_unique<String>(String{domain_name(d), text != nullptr ? text : ""}));
  return reinterpret_cast<nvtxStringHandle_t>(g_strings->back().get());
}
void NVTX_API name_os_thread_a(uint32_t thread, const char* name) {
  std::lock_guard<std::mutex> lock(g_mu);
  (*g_thread_names)[thread] = name != nullptr ? name : "";
  g_named->push_back({name != nullptr ? name : "", comm_of(thread)});
}

void write_record() {
  const char* path = std::getenv("GRADSWEEP_NVTX_RECORD");
  if (path == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mu);
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) return;
  for (const auto& d : *g_domains) std::fprintf(f, "domain\t%s\n", d->name.c_str());
  for (const auto& s : *g_strings) std::fprintf(f, "string\t%s\t%s\n", s->domain.c_str(), s->text.c_str());
  for (const auto& [name, comm] : *g_named) std::fprintf(f, "thread\t%s\t%s\n", name.c_str(), comm.c_str());
  for (const auto& [key, t] : *g_ranges)
    std::fprintf(f, "range\t%s\t%s\t%s\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\n", std::get<0>(key).c_str(),
                 std::get<1>(key).c_str(), std::get<2>(key).c_str(), static_cast<unsigned long long>(t.count),
                 static_cast<unsigned long long>(t.payloads), static_cast<unsigned long long>(t.payload_sum),
                 static_cast<unsigned long long>(t.unregistered), static_cast<unsigned long long>(t.total_ns),
                 static_cast<unsigned long long>(t.max_ns));
  for (const auto& [key, stack] : *g_stacks) {
    std::string p;
    for (const auto& s : stack) p += (p.empty() ? "" : "/") + s.name;
    if (!stack.empty()) std::fprintf(f, "open\t%s\t%s\t%s\n", thread_label(key.first).c_str(), key.second.c_str(), p.c_str());
  }
  for (const auto& e : *g_errors) std::fprintf(f, "error\t%s\n", e.c_str());
  std::fclose(f);
}

// Sets slot `id` of a callback module's table to fn (when the application's NVTX has that slot).
bool set_slot(const NvtxExportTableCallbacks* cb, NvtxCallbackModule module, unsigned id, NvtxFunctionPointer fn) {
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (cb->GetModuleFunctionTable(module, &table, &size) == 0 || table == nullptr || id > size) return false;
  *table[id] = fn;
  return true;
}

}  // namespace

// The NVTX injection entry point (nvtxDetail/nvtxInit.h): fills the core and core2 callback tables.
extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  auto* cb = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (cb == nullptr || cb->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;
  // Leaked on purpose: the application may still call NVTX from static destructors after ours ran.
  g_domains = new std::vector<std::unique_ptr<Domain>>();
  g_strings = new std::vector<std::unique_ptr<String>>();
  g_thread_names = new std::map<uint32_t, std::string>();
  g_named = new std::vector<std::pair<std::string, std::string>>();
  g_ranges = new std::map<std::tuple<std::string, std::string, std::string>, Totals>();
  g_stacks = new std::map<std::pair<uint32_t, std::string>, std::vector<Open>>();
  g_errors = new std::vector<std::string>();
  auto fp = [](auto f) { return reinterpret_cast<NvtxFunctionPointer>(f); };
  bool ok = true;
  ok &= set_slot(cb, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushEx, fp(&range_push_ex));
  ok &= set_slot(cb, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushA, fp(&range_push_a));
  ok &= set_slot(cb, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePop, fp(&range_pop));
  ok &= set_slot(cb, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_NameOsThreadA, fp(&name_os_thread_a));
  ok &= set_slot(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePushEx, fp(&domain_range_push_ex));
  ok &= set_slot(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePop, fp(&domain_range_pop));
  ok &= set_slot(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainCreateA, fp(&domain_create_a));
  ok &= set_slot(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRegisterStringA, fp(&domain_register_string_a));
  if (!ok) return 0;
  std::atexit(write_record);
  return 1;
}
