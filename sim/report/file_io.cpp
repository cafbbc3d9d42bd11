// The report writer's file calls, the atomic writer, the durable journal append and the test faults (file_io.h).
// A new fault is one more entry parsed in install_test_faults and handled in FaultyOps.
#include "sim/report/file_io.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

namespace gs {

int FileOps::open(const std::string& path, int flags, mode_t mode) { return ::open(path.c_str(), flags, mode); }
ssize_t FileOps::write(int fd, const void* data, size_t bytes) { return ::write(fd, data, bytes); }
int FileOps::fsync(int fd) { return ::fsync(fd); }
int FileOps::rename(const std::string& from, const std::string& to) { return std::rename(from.c_str(), to.c_str()); }
int FileOps::mkdirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    errno = ec.value();
    return -1;
  }
  if (!std::filesystem::is_directory(path, ec)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

namespace {

FileOps g_system_ops;
FileOps* g_ops = nullptr;

// The GRADSWEEP_TEST_FAULTS file faults. Writes are matched to paths through the descriptors opened here.
class FaultyOps : public FileOps {
 public:
  struct Counted {
    std::string match;
    long from = 0;  // 1-based write number at which the fault starts
    long seen = 0;
  };
  std::vector<Counted> disk_full, stop_in_write;
  std::vector<std::string> unwritable;

  int open(const std::string& path, int flags, mode_t mode) override {
    if ((flags & (O_WRONLY | O_RDWR | O_CREAT)) != 0 && matches_unwritable(path)) {
      errno = EACCES;
      return -1;
    }
    int fd = FileOps::open(path, flags, mode);
    if (fd >= 0) {
      if (static_cast<size_t>(fd) >= paths_.size()) paths_.resize(static_cast<size_t>(fd) + 1);
      paths_[static_cast<size_t>(fd)] = path;
    }
    return fd;
  }
  ssize_t write(int fd, const void* data, size_t bytes) override {
    const std::string path = fd >= 0 && static_cast<size_t>(fd) < paths_.size() ? paths_[static_cast<size_t>(fd)] : "";
    for (auto& c : disk_full) {
      if (path.find(c.match) == std::string::npos || ++c.seen < c.from) continue;
      if (bytes > 1) FileOps::write(fd, data, bytes / 2);  // the disk fills part way through
      errno = ENOSPC;
      return -1;
    }
    for (auto& c : stop_in_write) {
      if (path.find(c.match) == std::string::npos || ++c.seen != c.from) continue;
      ssize_t half = FileOps::write(fd, data, bytes / 2);
      ::raise(SIGSTOP);
      return half;  // the caller writes the rest
    }
    return FileOps::write(fd, data, bytes);
  }
  int mkdirs(const std::string& path) override {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec) && matches_unwritable(path)) {
      errno = EACCES;
      return -1;
    }
    return FileOps::mkdirs(path);
  }

 private:
  bool matches_unwritable(const std::string& path) const {
    for (const auto& u : unwritable)
      if (path.find(u) != std::string::npos) return true;
    return false;
  }
  std::vector<std::string> paths_;  // by descriptor
};

std::vector<std::pair<std::string, std::string>> parse_faults() {
  std::vector<std::pair<std::string, std::string>> out;
  const char* env = std::getenv("GRADSWEEP_TEST_FAULTS");
  if (env == nullptr) return out;
  std::string s = env;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) {
      size_t eq = item.find('=');
      if (eq == std::string::npos)
        throw Error("GRADSWEEP_TEST_FAULTS: expected name=value, got \"" + item + "\"");
      out.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

FaultyOps::Counted parse_counted(const std::string& name, const std::string& v) {
  size_t colon = v.rfind(':');
  FaultyOps::Counted c;
  char* end = nullptr;
  if (colon != std::string::npos) c.from = std::strtol(v.c_str() + colon + 1, &end, 10);
  if (colon == std::string::npos || colon == 0 || end == nullptr || *end != '\0' || c.from < 1)
    throw Error(fmt::format("GRADSWEEP_TEST_FAULTS: {} expects SUBSTRING:N with N >= 1, got \"{}\"", name, v));
  c.match = v.substr(0, colon);
  return c;
}

std::string reason() { return std::strerror(errno); }

}  // namespace

FileOps& file_ops() { return g_ops != nullptr ? *g_ops : g_system_ops; }

FileOps* set_file_ops(FileOps* ops) {
  FileOps* previous = g_ops;
  g_ops = ops;
  return previous;
}

std::optional<std::string> test_fault(const std::string& name) {
  for (const auto& [k, v] : parse_faults())
    if (k == name) return v;
  return std::nullopt;
}

void install_test_faults() {
  static FaultyOps faulty;
  static bool installed = false;
  if (installed) return;
  bool any = false;
  for (const auto& [k, v] : parse_faults()) {
    if (k == "disk_full") {
      faulty.disk_full.push_back(parse_counted(k, v));
    } else if (k == "stop_in_write") {
      faulty.stop_in_write.push_back(parse_counted(k, v));
    } else if (k == "unwritable") {
      faulty.unwritable.push_back(v);
    } else if (k != "stop_at" && k != "stop_before_report" && k != "step_delay_ms" && k != "fail_read") {
      throw Error("GRADSWEEP_TEST_FAULTS: unknown fault \"" + k +
                  "\"; expected disk_full, unwritable, stop_in_write, stop_at, stop_before_report, step_delay_ms or "
                  "fail_read");
    }
    any = any || (k != "stop_at" && k != "stop_before_report" && k != "step_delay_ms" && k != "fail_read");
  }
  installed = true;
  if (any) set_file_ops(&faulty);
}

void write_all(int fd, const std::string& data, const std::string& path) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = file_ops().write(fd, data.data() + off, data.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw ReportIoError("cannot write " + path + ": " + reason());
    off += static_cast<size_t>(w);
  }
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = file_ops().open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw ReportIoError("cannot write " + tmp + ": " + reason() + "; " + path + " is unchanged");
  auto fail = [&](const std::string& what) {
    std::string message = what + ": " + reason() + "; " + path + " is unchanged";
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw ReportIoError(message);
  };
  try {
    write_all(fd, text, tmp);
  } catch (const ReportIoError& e) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw ReportIoError(std::string(e.what()) + "; " + path + " is unchanged");
  }
  // Delayed-allocation file systems report a full disk only here.
  if (file_ops().fsync(fd) != 0) fail("cannot write " + tmp + " (fsync)");
  int closed = ::close(fd);
  fd = -1;
  if (closed != 0) fail("cannot write " + tmp + " (close)");
  if (file_ops().rename(tmp, path) != 0) fail("cannot rename " + tmp + " to " + path);
  // The rename itself is durable once the folder is synced (best effort: some file systems refuse it).
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void append_file_durable(const std::string& path, const std::string& text) {
  int fd = file_ops().open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw ReportIoError("cannot append to " + path + ": " + reason());
  const off_t before = ::lseek(fd, 0, SEEK_END);
  auto cut_back = [&] {
    if (before >= 0 && ::ftruncate(fd, before) != 0) {
      // Nothing more to do: a cut line is skipped when the journal is read.
    }
    ::close(fd);
  };
  try {
    write_all(fd, text, path);
  } catch (...) {
    cut_back();
    throw;
  }
  if (::fdatasync(fd) != 0) {
    std::string message = "cannot append to " + path + " (fdatasync): " + reason();
    cut_back();
    throw ReportIoError(message);
  }
  ::close(fd);
}

void remove_stale_temporaries(const std::string& path) {
  std::filesystem::path p(path);
  std::error_code ec;
  const std::string prefix = p.filename().string() + ".tmp.";
  for (const auto& entry : std::filesystem::directory_iterator(p.parent_path().empty() ? "." : p.parent_path(), ec))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(entry.path(), ec);
}

int lock_exclusive(const std::string& path) {
  for (int attempt = 0; attempt < 100; ++attempt) {  // each retry follows a holder that removed the file
    const int fd = file_ops().open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK || err == EINTR) return kLockHeld;
      errno = err;
      return -1;
    }
    struct stat held {}, named {};
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino)
      return fd;
    ::close(fd);  // the lock of a removed file: take the one at path now
  }
  return kLockHeld;
}

void remove_lock_file(int fd, const std::string& path) {
  if (fd < 0) return;
  ::unlink(path.c_str());  // under the lock: nobody else holds this file's lock, and a later locker sees it gone
  ::close(fd);
}

}  // namespace gs
