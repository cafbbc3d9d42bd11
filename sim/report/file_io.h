// The report writer's file calls (open, write, fsync, rename, mkdir) behind one replaceable table, the atomic
// writer and the durable journal append built on it, and the test faults (a full disk, an unwritable folder, a stop
// inside a write). CI runs as root, which permission bits do not stop, so faults are injected here. A new call the
// writer makes is added to FileOps and used through file_ops().
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>

#include "sim/core/error.h"

namespace gs {

// The report (or its journal or folder) could not be written: disk full, unwritable folder, I/O error. what()
// names the file and the system's reason. The CLI exits with status 3.
class ReportIoError : public Error {
 public:
  using Error::Error;
  bool before_any_run = false;  // set by the driver when the report folder failed before the first run started
};

// POSIX calls with their POSIX contract (return -1 and set errno on failure). The default forwards to the system.
class FileOps {
 public:
  virtual ~FileOps() = default;
  virtual int open(const std::string& path, int flags, mode_t mode);
  virtual ssize_t write(int fd, const void* data, size_t bytes);
  virtual int fsync(int fd);
  virtual int rename(const std::string& from, const std::string& to);
  // Creates path and its missing parents (mode 0755); 0 when it exists as a folder afterwards.
  virtual int mkdirs(const std::string& path);
};

// The FileOps in use (the system's unless replaced).
FileOps& file_ops();
// Replaces the file calls; nullptr restores the system's. Returns the previous replacement (or nullptr). Not
// thread-safe: set it before writers start (tests, start-up).
FileOps* set_file_ops(FileOps* ops);

// Faults for tests of the binary, from the environment variable GRADSWEEP_TEST_FAULTS (comma-separated; unset in
// normal use):
//   disk_full=SUBSTR:N     the N-th write (1-based) to a file whose path contains SUBSTR, and every later one,
//                          writes half of its bytes and fails with ENOSPC
//   unwritable=SUBSTR      opening for writing, and creating folders, fails with EACCES for paths containing SUBSTR
//   stop_in_write=SUBSTR:N the N-th write to such a file writes half its bytes, then the process stops itself
//                          (SIGSTOP) so a test can signal it mid-write; SIGCONT resumes the write
//   stop_at=RUN:STEP       read by the driver: after optimizer step STEP of the RUN-th run it runs (1-based), the
//                          process stops itself (SIGSTOP) so a test can send signals at a known step
//   stop_before_report=1   read by main: after loading the scenario, before the report is opened, the process stops
//                          itself (SIGSTOP) so a test can signal it while no run is in progress
//   step_delay_ms=N        read by the driver: every optimizer step waits N ms (rank 0's progress hook), so a test
//                          sees the live progress line refresh whatever the machine's speed
//   fail_read=N            read by the driver: the N-th training sample this process reads (1-based, over its ranks'
//                          loaders; indexable datasets) throws, so the run fails mid-run in this process alone
// Installs the file faults (idempotent); throws gs::Error for a malformed value.
void install_test_faults();
// The value of one GRADSWEEP_TEST_FAULTS entry ("stop_at" -> "2:5"), or nullopt.
std::optional<std::string> test_fault(const std::string& name);

// Writes all of data to fd (retrying short writes and EINTR); throws ReportIoError naming path.
void write_all(int fd, const std::string& data, const std::string& path);

// Writes text to path atomically: path.tmp.<pid> in the same folder, fsync, rename, fsync of the folder. On any
// failure the temporary file is removed, path keeps its previous content, and ReportIoError names the file.
void write_file_atomic(const std::string& path, const std::string& text);

// Appends text to path (created 0644) and fdatasyncs it. On failure the file is cut back to its previous length (no
// partial line stays behind) and ReportIoError names the file.
void append_file_durable(const std::string& path, const std::string& text);

// An exclusive flock on the lock file `path` (created 0644 through file_ops().open), taken without waiting. Once
// held it is checked to be the file at `path` still: a holder that removed the file (remove_lock_file) left the
// lock of an unlinked file to whoever had opened it just before, so such a lock is let go and the new file locked
// instead. Returns the descriptor; kLockHeld when another process holds the lock; -1 (errno set) when the file
// cannot be opened.
constexpr int kLockHeld = -2;
int lock_exclusive(const std::string& path);

// Removes the lock file `path`, then closes fd, the exclusive lock lock_exclusive(path) returned (so the file removed
// is always the one this process holds, never one another process has locked since).
void remove_lock_file(int fd, const std::string& path);

// Removes leftover "<path>.tmp.*" files of writers that were killed mid-write (call with the folder's lock held).
void remove_stale_temporaries(const std::string& path);

}  // namespace gs
