// Barrier for the rank threads of one World, with abort: a failing rank wakes every waiter, which then throws
// gs::Aborted, so a run never hangs on a dead rank. Generation-counter design: spin briefly (yielding), then sleep.
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

// Reusable barrier for a fixed number of threads (parties >= 1); safe when threads outnumber cores.
class Barrier {
 public:
  explicit Barrier(int parties);
  Barrier(const Barrier&) = delete;
  Barrier& operator=(const Barrier&) = delete;
  // Blocks until all parties arrive (spins briefly with yield, then sleeps on a condition variable). Throws Aborted
  // if abort() was called before or while waiting (a generation that completed before the abort still returns).
  // Everything a thread wrote before arriving is visible to every thread after the barrier returns.
  // Returns the seconds spent waiting (steady clock).
  double arrive_and_wait();
  // Wakes every waiter; every later arrive_and_wait() throws Aborted. Permanent; callable from any thread.
  void abort();
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  int parties() const { return parties_; }

 private:
  // Wakes sleepers of the generation that just completed or was aborted.
  void wake_sleepers();

  const int parties_;
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<uint64_t> generation_{0};
  std::atomic<bool> aborted_{false};
  std::atomic<int> sleepers_{0};  // threads blocked (or about to block) on cv_; lets the releaser skip the mutex
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace gs
