// InteractionScheduler (scheduler.h): one mutex, one condition variable, a state per rank. The grant rule is the
// whole algorithm (may_grant); everything else moves a rank between states and notifies.
#include "sim/comm/scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/core/barrier.h"

namespace gs {

Ordering parse_ordering(const std::string& name) {
  if (name == "modeled") return Ordering::kModeled;
  if (name == "real") return Ordering::kReal;
  throw Error(fmt::format("sync.ordering: expected \"modeled\" or \"real\", got \"{}\"", name));
}

namespace {
std::atomic<int>& test_delay() {
  static std::atomic<int> us{[] {
    const char* v = std::getenv("GRADSWEEP_TEST_THREAD_DELAY_US");
    return v == nullptr ? 0 : std::max(0, std::atoi(v));
  }()};
  return us;
}
}  // namespace

int InteractionScheduler::test_delay_us() { return test_delay().load(std::memory_order_relaxed); }
void InteractionScheduler::set_test_delay_us(int us) { test_delay().store(std::max(0, us)); }

InteractionScheduler::InteractionScheduler(int ranks, Ordering ordering)
    : ranks_(ranks),
      ordering_(ordering),
      state_(static_cast<size_t>(ranks), State::kComputing),
      time_s_(static_cast<size_t>(ranks), 0.0) {}

bool InteractionScheduler::may_grant(int rank) const {
  if (holder_ != -1) return false;
  if (ordering_ == Ordering::kReal) return true;
  const double t = time_s_[static_cast<size_t>(rank)];
  for (int q = 0; q < ranks_; ++q) {
    if (q == rank) continue;
    const State s = state_[static_cast<size_t>(q)];
    if (s != State::kComputing && s != State::kPending) continue;
    const double tq = time_s_[static_cast<size_t>(q)];
    if (tq < t || (tq == t && q < rank)) return false;  // q may act first
  }
  return true;
}

void InteractionScheduler::wait_turn(std::unique_lock<std::mutex>& lock, int rank) {
  cv_.wait(lock, [&] {
    return aborted_ || (state_[static_cast<size_t>(rank)] == State::kPending && may_grant(rank));
  });
  if (aborted_) throw Aborted();
  holder_ = rank;
  state_[static_cast<size_t>(rank)] = State::kHolding;
}

void InteractionScheduler::acquire(int rank, double t_s) {
  if (const int us = test_delay_us(); us > 0) {
    thread_local std::minstd_rand gen(static_cast<unsigned>(
        std::chrono::steady_clock::now().time_since_epoch().count() ^
        std::hash<std::thread::id>()(std::this_thread::get_id())));
    std::this_thread::sleep_for(std::chrono::microseconds(gen() % static_cast<unsigned>(us + 1)));
  }
  std::unique_lock<std::mutex> lock(mu_);
  GS_EXPECT(state_[static_cast<size_t>(rank)] == State::kComputing, "acquire: the rank must be computing");
  GS_EXPECT(t_s >= time_s_[static_cast<size_t>(rank)] || ordering_ == Ordering::kReal,
            fmt::format("acquire: rank {} asked for modeled time {} before its bound {}", rank, t_s,
                        time_s_[static_cast<size_t>(rank)]));
  state_[static_cast<size_t>(rank)] = State::kPending;
  time_s_[static_cast<size_t>(rank)] = t_s;
  // Raising this rank's bound to t_s may let another pending rank go first.
  cv_.notify_all();
  wait_turn(lock, rank);
}

void InteractionScheduler::release(int rank, double next_s) {
  std::lock_guard<std::mutex> lock(mu_);
  GS_EXPECT(holder_ == rank, "release: the rank does not hold the turn");
  state_[static_cast<size_t>(rank)] = State::kComputing;
  time_s_[static_cast<size_t>(rank)] = next_s;
  holder_ = -1;
  cv_.notify_all();
}

double InteractionScheduler::block(int rank) {
  std::unique_lock<std::mutex> lock(mu_);
  GS_EXPECT(holder_ == rank, "block: the rank does not hold the turn");
  state_[static_cast<size_t>(rank)] = State::kBlocked;
  holder_ = -1;
  bool anyone = false;  // someone who can still wake this rank
  for (State s : state_) anyone = anyone || s == State::kComputing || s == State::kPending;
  GS_EXPECT(anyone, "every rank is blocked: the strategy waits for an event no rank will produce");
  cv_.notify_all();
  wait_turn(lock, rank);
  return time_s_[static_cast<size_t>(rank)];
}

void InteractionScheduler::wake(int rank, double t_s) {
  std::lock_guard<std::mutex> lock(mu_);
  GS_EXPECT(holder_ != -1 && holder_ != rank, "wake: called outside another rank's turn");
  GS_EXPECT(state_[static_cast<size_t>(rank)] == State::kBlocked, "wake: the rank is not blocked");
  state_[static_cast<size_t>(rank)] = State::kPending;
  time_s_[static_cast<size_t>(rank)] = t_s;
}

void InteractionScheduler::leave(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (holder_ == rank) holder_ = -1;
  state_[static_cast<size_t>(rank)] = State::kGone;
  cv_.notify_all();
}

void InteractionScheduler::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

}  // namespace gs
