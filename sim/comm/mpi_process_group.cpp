// The MPI process group (process_group.h): MPI_COMM_WORLD, started with MPI_THREAD_SERIALIZED (the rank threads of a
// process take turns: only the first local rank's thread, or the main thread between runs, calls MPI). Built only
// when CMake finds MPI.
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <string>
#include <thread>

#include "sim/comm/process_group.h"
#include "sim/core/error.h"

namespace gs {
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string(what) + ": " + std::string(text, static_cast<size_t>(len)));
}

int int_bytes(size_t bytes, const char* what) {
  GS_EXPECT(bytes <= static_cast<size_t>(INT_MAX),
            std::string(what) + ": " + std::to_string(bytes) + " bytes per process exceed MPI's int count");
  return static_cast<int>(bytes);
}

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup() {
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    // The exit agreement's own communicator: a process that agrees on its exit while another is still inside a
    // collective on MPI_COMM_WORLD must not match that collective.
    check(MPI_Comm_dup(MPI_COMM_WORLD, &exit_comm_), "MPI_Comm_dup");
  }
  int size() const override { return size_; }
  int rank() const override { return rank_; }

  void all_gather(const void* in, void* out, size_t bytes) override {
    const int n = int_bytes(bytes, "MPI_Allgather");
    check(MPI_Allgather(in, n, MPI_BYTE, out, n, MPI_BYTE, MPI_COMM_WORLD), "MPI_Allgather");
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    check(MPI_Bcast(buf, int_bytes(bytes, "MPI_Bcast"), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }

  std::vector<std::vector<char>> gather_to_root(const std::vector<char>& mine) override {
    int n = int_bytes(mine.size(), "MPI_Gatherv");
    std::vector<int> sizes(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
    check(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
    size_t total = 0;
    for (int p = 0; p < size_; ++p) {
      offsets[static_cast<size_t>(p)] = int_bytes(total, "MPI_Gatherv");
      total += static_cast<size_t>(sizes[static_cast<size_t>(p)]);
    }
    std::vector<char> all(rank_ == 0 ? total : 0);
    check(MPI_Gatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, 0, MPI_COMM_WORLD),
          "MPI_Gatherv");
    std::vector<std::vector<char>> out;
    if (rank_ != 0) return out;
    for (int p = 0; p < size_; ++p) {
      const char* at = all.data() + offsets[static_cast<size_t>(p)];
      out.emplace_back(at, at + sizes[static_cast<size_t>(p)]);
    }
    return out;
  }

  std::optional<int> max_within(int value, double deadline_s) override {
    int result = value;
    MPI_Request req;
    check(MPI_Iallreduce(&value, &result, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req), "MPI_Iallreduce");
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
    for (;;) {
      int done = 0;
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return result;
      if (std::chrono::steady_clock::now() > until) return std::nullopt;  // the job is aborted next
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  std::optional<ExitAgreement> agree_on_exit(int code, uint64_t text_hash, double deadline_s) override {
    // The largest status, the largest hash and the largest complement of the hash: every hash is the same exactly
    // when the largest equals the complement of the largest complement (its smallest).
    unsigned long long mine[3] = {static_cast<unsigned long long>(code < 0 ? 0 : code), text_hash, ~text_hash};
    unsigned long long all[3] = {0, 0, 0};
    MPI_Request req;
    check(MPI_Iallreduce(mine, all, 3, MPI_UNSIGNED_LONG_LONG, MPI_MAX, exit_comm_, &req), "MPI_Iallreduce");
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
    for (;;) {
      int done = 0;
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return ExitAgreement{static_cast<int>(all[0]), all[1] == ~all[2]};
      if (std::chrono::steady_clock::now() > until) return std::nullopt;  // the job is aborted next
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  int size_ = 1;
  int rank_ = 0;
  MPI_Comm exit_comm_ = MPI_COMM_NULL;
};

}  // namespace

std::unique_ptr<ProcessGroup> start_mpi_process_group(int* argc, char*** argv) {
  int provided = MPI_THREAD_SINGLE;
  check(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw Error("MPI_Init_thread: this MPI gives thread level " + std::to_string(provided) +
                ", gradsweep needs MPI_THREAD_SERIALIZED (rank threads take turns calling MPI)");
  }
  return std::make_unique<MpiProcessGroup>();
}

void finalize_mpi() { MPI_Finalize(); }

}  // namespace gs
