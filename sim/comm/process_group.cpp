// ProcessGroup (process_group.h): the one-process group, the mpirun detection and the start and end of MPI.
#include "sim/comm/process_group.h"

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace gs {
namespace {

// This process alone: every collective is a copy.
class SingleProcess final : public ProcessGroup {
 public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  void all_gather(const void* in, void* out, size_t bytes) override {
    if (bytes > 0 && in != out) std::memmove(out, in, bytes);
  }
  void broadcast(void*, size_t, int) override {}
  std::vector<std::vector<char>> gather_to_root(const std::vector<char>& mine) override { return {mine}; }
  std::optional<int> max_within(int value, double) override { return value; }
  std::optional<ExitAgreement> agree_on_exit(int code, uint64_t, double) override { return ExitAgreement{code, true}; }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
};

std::unique_ptr<ProcessGroup>& current() {
  static std::unique_ptr<ProcessGroup> group = std::make_unique<SingleProcess>();
  return group;
}

bool g_mpi_started = false;

}  // namespace

ProcessGroup& process_group() { return *current(); }

std::optional<std::string> mpi_launch_variable() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (const char* v = std::getenv(name); v != nullptr) return std::string(name) + "=" + v;
  return std::nullopt;
}

bool built_with_mpi() {
#if defined(GRADSWEEP_WITH_MPI)
  return true;
#else
  return false;
#endif
}

void start_processes(int* argc, char*** argv) {
  const std::optional<std::string> launched = mpi_launch_variable();
  if (!launched) return;
  if (!built_with_mpi())
    throw Error("launched under mpirun (" + *launched +
                ") but this gradsweep was built without MPI: install libopenmpi-dev and openmpi-bin "
                "(tools/setup.sh) and build again in a new build folder (rm -rf build; tools/build.sh), or run "
                "without mpirun");
#if defined(GRADSWEEP_WITH_MPI)
  current() = start_mpi_process_group(argc, argv);
  g_mpi_started = true;
#endif
}

int finish_processes(int code, const std::string& error_text, const std::function<void(const std::string&)>& print) {
  if (!g_mpi_started) {
    if (!error_text.empty()) print(error_text);
    return code;
  }
  ProcessGroup& g = process_group();
  if (g.size() > 1) {
    uint64_t hash = 1469598103934665603ull;  // FNV-1a of the text
    for (unsigned char ch : error_text) hash = (hash ^ ch) * 1099511628211ull;
    const std::optional<ProcessGroup::ExitAgreement> agreed = g.agree_on_exit(code, hash, code != 0 ? 10.0 : 1e9);
    if (!agreed) {
      if (!error_text.empty()) print(fmt::format("process {}: {}", g.rank(), error_text));
      g.abort(code);
    }
    if (!error_text.empty()) {
      if (!agreed->same_text)
        print(fmt::format("process {}: {}", g.rank(), error_text));
      else if (g.rank() == 0)
        print(error_text);
    }
    code = agreed->code;
  } else if (!error_text.empty()) {
    print(error_text);
  }
#if defined(GRADSWEEP_WITH_MPI)
  finalize_mpi();
#endif
  return code;
}

}  // namespace gs
