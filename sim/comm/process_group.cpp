// ProcessGroup (process_group.h): the one-process group, the mpirun detection and the start and end of MPI.
#include "sim/comm/process_group.h"

#include <cstdlib>
#include <cstring>

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

int finish_processes(int code) {
  if (!g_mpi_started) return code;
  if (code != 0 && process_group().size() > 1) process_group().abort(code);
#if defined(GRADSWEEP_WITH_MPI)
  finalize_mpi();
#endif
  return code;
}

}  // namespace gs
