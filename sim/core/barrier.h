// Barrier for the rank threads of one World, with abort: a failing rank wakes every waiter, which then throws
// gs::Aborted, so a run never hangs on a dead rank. Generation-counter design: spin briefly (when the parties fit the
// cores), then sleep.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "sim/core/error.h"

namespace gs {

// Thrown in a waiting rank when another rank aborted the world.
class Aborted : public Error {
 public:
  Aborted() : Error("aborted: another rank failed") {}
};

// Thrown by a wait that passed its deadline (a hang: a rank that never arrives, a collective that never completes).
// Not an Aborted: the rank that hit the deadline reports it as the run's error; the others are aborted.
class DeadlineExceeded : public Error {
 public:
  using Error::Error;
};

// The deadline of every wait inside one collective of the GPU backend's communicators (and their host barriers):
// training.run_timeout_s when it is > 0 (no single wait may outlast the whole run's limit), else
// kDefaultWaitDeadlineS. Pure.
constexpr double kDefaultWaitDeadlineS = 600.0;
double wait_deadline_s(double run_timeout_s);

// A deadline `seconds` from its construction (steady clock); seconds <= 0: none (never expires).
class WaitDeadline {
 public:
  explicit WaitDeadline(double seconds);
  bool none() const { return seconds_ <= 0.0; }
  bool expired() const { return !none() && std::chrono::steady_clock::now() >= at_; }
  std::chrono::steady_clock::time_point at() const { return at_; }
  double seconds() const { return seconds_; }
  // Throws DeadlineExceeded "WHAT did not complete within S s (the wait deadline: training.run_timeout_s, or 600 s
  // when it is 0); a rank or the GPU stopped making progress".
  [[noreturn]] void fail(const std::string& what) const;
  // cv.wait(lock, pred) that throws fail(what) past the deadline (lock held again either way).
  template <class Pred>
  void wait(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Pred pred, const std::string& what) const {
    if (none()) {
      cv.wait(lock, pred);
    } else if (!cv.wait_until(lock, at_, pred)) {
      fail(what);
    }
  }

 private:
  double seconds_;
  std::chrono::steady_clock::time_point at_;
};

// Reusable barrier for a fixed number of threads (parties >= 1); safe when threads outnumber cores.
class Barrier {
 public:
  // deadline_s > 0: a wait longer than that aborts the barrier (every other waiter throws Aborted) and throws
  // DeadlineExceeded in the waiter that hit it; 0: waits have no deadline.
  explicit Barrier(int parties, double deadline_s = 0.0);
  Barrier(const Barrier&) = delete;
  Barrier& operator=(const Barrier&) = delete;
  // Blocks until all parties arrive (spins up to 50 us when the parties fit the usable CPUs, then sleeps on a
  // condition variable). Throws Aborted if abort() was called before or while waiting (a generation that completed
  // before the abort still returns), DeadlineExceeded (after aborting) when the deadline passed first.
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
  const double deadline_s_;
  // Waiters spin (CPU pause, up to kSpinLimit) before sleeping: only when every party can have a CPU of the
  // process's affinity mask, since a spinning rank on an oversubscribed machine steals the core from the rank it waits
  // for (other processes' ranks on the same machine are not counted: a spin costs at most 50 us per wait).
  const bool spins_;
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<uint64_t> generation_{0};
  std::atomic<bool> aborted_{false};
  std::atomic<int> sleepers_{0};  // threads blocked (or about to block) on cv_; lets the releaser skip the mutex
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace gs
