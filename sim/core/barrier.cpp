// Barrier: generation counter + arrival counter. The last arrival resets the count and bumps the generation; the
// others spin with the CPU's pause hint for a short while (when the parties fit the usable CPUs), then sleep on a
// condition variable until the generation moves.
#include "sim/core/barrier.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

namespace gs {

namespace {

// How long a waiter spins before it sleeps, when it spins at all (Barrier::spins_): about the cost of a futex sleep and
// wake-up, so a barrier whose parties arrive close together is passed without a system call.
constexpr std::chrono::microseconds kSpinLimit{50};

// The CPU's spin-wait hint (x86 PAUSE, Arm YIELD): a spinning thread lets its hyperthread sibling run and leaves the
// loop without a memory-order mis-speculation. Not sched_yield: on Linux's EEVDF scheduler (6.6 on) every yield
// pushes the thread's virtual deadline a slice further, so a thread that yields in a loop on a loaded machine falls
// behind every CPU-bound process and a run can all but stop.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// CPUs this process may run on: its affinity mask where the system has one (taskset, a container's cpuset, a job
// scheduler's binding), else every hardware thread; at least 1. Other processes on the machine are not counted.
int usable_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double wait_deadline_s(double run_timeout_s) { return run_timeout_s > 0.0 ? run_timeout_s : kDefaultWaitDeadlineS; }

WaitDeadline::WaitDeadline(double seconds)
    : seconds_(seconds),
      at_(std::chrono::steady_clock::now() +
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              std::chrono::duration<double>(seconds > 0.0 ? seconds : 0.0))) {}

void WaitDeadline::fail(const std::string& what) const {
  char s[32], d[32];
  std::snprintf(s, sizeof s, "%g", seconds_);
  std::snprintf(d, sizeof d, "%g", kDefaultWaitDeadlineS);
  throw DeadlineExceeded(what + " did not complete within " + s + " s (the wait deadline: training.run_timeout_s, or " +
                         d + " s when it is 0): a rank or the GPU stopped making progress, so the run was aborted");
}

Barrier::Barrier(int parties, double deadline_s)
    : parties_(parties), deadline_s_(deadline_s), spins_(parties <= usable_cpus()) {
  GS_EXPECT(parties >= 1, "a barrier needs at least one party, got " + std::to_string(parties));
}

void Barrier::wake_sleepers() {
  // seq_cst pairs with the sleeper's increment of sleepers_ and its seq_cst re-check of the generation: either the
  // sleeper sees the new generation (or abort) before sleeping, or this load sees the sleeper and notifies under
  // the mutex, which the sleeper holds until it is inside wait().
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }
}

double Barrier::arrive_and_wait() {
  const auto t0 = std::chrono::steady_clock::now();
  if (aborted()) throw Aborted();
  // The generation cannot move before this thread arrives, so this is the generation being joined.
  const uint64_t gen = generation_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == parties_) {
    // Last arrival: the acq_rel chain on arrived_ made every earlier arrival's writes visible here; the release on
    // generation_ passes them (and ours) on to every waiter.
    arrived_.store(0, std::memory_order_relaxed);
    generation_.store(gen + 1, std::memory_order_seq_cst);
    wake_sleepers();
    return seconds_since(t0);
  }
  auto released = [&] { return generation_.load(std::memory_order_seq_cst) != gen; };
  for (int i = 0; spins_; ++i) {
    if (released()) return seconds_since(t0);
    if (aborted()) throw Aborted();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() - t0 > kSpinLimit) break;
    cpu_relax();
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    auto woken = [&] { return released() || aborted_.load(std::memory_order_seq_cst); };
    bool timed_out = false;
    if (deadline_s_ > 0.0) {
      timed_out = !cv_.wait_until(lock, t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                  std::chrono::duration<double>(deadline_s_)),
                                  woken);
    } else {
      cv_.wait(lock, woken);
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    if (timed_out) {
      lock.unlock();
      abort();  // every other waiter throws Aborted; this one reports the hang
      WaitDeadline(deadline_s_).fail("a barrier of " + std::to_string(parties_) + " ranks (" +
                                     std::to_string(arrived_.load()) + " arrived)");
    }
  }
  // A generation that completed counts even if an abort raced with it; the next arrival will throw.
  if (!released()) throw Aborted();
  return seconds_since(t0);
}

void Barrier::abort() {
  aborted_.store(true, std::memory_order_seq_cst);
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

}  // namespace gs
