// ProcessGroup: the processes of one job under mpirun (docs/cluster.md, "One run across processes (MPI)"). Each process
// runs its share of a run's ranks as threads; what crosses processes goes through this interface, so only
// mpi_process_group.cpp (built when CMake finds MPI) includes mpi.h. Outside mpirun the group is this process alone.
// Every process calls the same operations in the same order; calls are serialized (one thread at a time, any thread:
// MPI_THREAD_SERIALIZED).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gs {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // out[p * bytes .. (p + 1) * bytes) = in of process p, on every process.
  virtual void all_gather(const void* in, void* out, size_t bytes) = 0;
  // buf of every process = buf of root.
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  // Process 0 gets every process's bytes (index = process); the others get an empty list.
  virtual std::vector<std::vector<char>> gather_to_root(const std::vector<char>& mine) = 0;
  // The largest `value` over the processes, or nothing when not every process arrived within deadline_s (a process
  // that failed alone while the others wait inside a collective).
  virtual std::optional<int> max_within(int value, double deadline_s) = 0;
  // Ends every process of the job with `code` (MPI_Abort); never returns.
  [[noreturn]] virtual void abort(int code) = 0;
  // How the job's processes ended their command, agreed on a communicator of its own (so it cannot be confused with
  // a collective another process is still inside): the largest exit status and whether every process gave the same
  // text_hash; nothing when not every process arrived within deadline_s.
  struct ExitAgreement {
    int code = 0;
    bool same_text = true;
  };
  virtual std::optional<ExitAgreement> agree_on_exit(int code, uint64_t text_hash, double deadline_s) = 0;
};

// The group of this process: size 1 unless start_processes started MPI.
ProcessGroup& process_group();

// The launcher's description when this process was started by mpirun (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE),
// e.g. "OMPI_COMM_WORLD_SIZE=2"; nothing otherwise.
std::optional<std::string> mpi_launch_variable();

// True when this build can run across processes (CMake found MPI).
bool built_with_mpi();

// Called once by main before anything else: under mpirun starts MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED) and
// makes process_group() the job's processes. Throws gs::Error when launched under mpirun by a build without MPI or
// when the MPI cannot give the thread level.
void start_processes(int* argc, char*** argv);

// main's last call. One process: returns `code`. Under mpirun with several processes, each says how its command
// ended (its exit status and `error_text`, what it has to say and has not printed: deferred_error_text) within a
// deadline (10 s after a failure; none after success). When all arrive, the text is printed through `print` once,
// by process 0, when every process has the same (a refused scenario: no copy per process), else by each process
// with its own, "process P: " first; MPI ends normally (no MPI_Abort banner) and the job's largest status is
// returned. When one does not arrive (it is inside a collective that a failed process will never join), this one
// prints its own text and aborts the job with its status (MPI_Abort).
int finish_processes(int code, const std::string& error_text, const std::function<void(const std::string&)>& print);

// The MPI process group (mpi_process_group.cpp, MPI builds only): initializes MPI.
std::unique_ptr<ProcessGroup> start_mpi_process_group(int* argc, char*** argv);
void finalize_mpi();

}  // namespace gs
