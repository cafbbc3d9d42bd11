// Barrier for the rank threads of one World, with abort: a failing rank wakes every waiter, which then throws
// gs::Aborted, so a run never hangs on a dead rank.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "sim/core/error.h"

namespace gs {

// Thrown in a waiting rank when another rank aborted the world.
class Aborted : public Error {
 public:
  Aborted() : Error("aborted: another rank failed") {}
};

class Barrier {
 public:
  explicit Barrier(int parties);
  // Blocks until all parties arrive (spins briefly, then sleeps). Throws Aborted if abort() was called before or
  // while waiting. Returns the seconds spent waiting.
  double arrive_and_wait();
  // Wakes every waiter; every later arrive_and_wait() throws Aborted.
  void abort();
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  int parties() const { return parties_; }

 private:
  const int parties_;
  std::atomic<int> arrived_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> aborted_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace gs
