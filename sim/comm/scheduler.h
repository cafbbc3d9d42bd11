// InteractionScheduler: the one place where rank threads of a free-running strategy (parameter server) take turns on
// shared state in modeled-time order, ties broken by rank, so a run is reproducible bit for bit however the OS
// schedules its threads. Threads compute in parallel between turns; only the order of their interactions is fixed.
// A new kind of interaction needs nothing here: a strategy wraps it in acquire/release (or block/wake).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

namespace gs {

// modeled: turns in (modeled time, rank) order (conservative discrete-event rule, below). real: turns in the order the
// threads reach the lock, as in production (reports say which ran).
enum class Ordering { kModeled, kReal };
Ordering parse_ordering(const std::string& name);  // "modeled" | "real"; throws gs::Error otherwise

// Turn-taking over `ranks` rank threads. Each rank is, at any moment, in one of: computing (it promised that its
// next event is at modeled time >= a bound), pending (it asked for a turn at time t), blocked (asleep until another
// rank's turn wakes it), holding the turn, or gone.
// Modeled rule (conservative parallel discrete-event simulation, Chandy-Misra style): a pending event (t, r) is
// granted when no turn is held and every other rank q that is computing or pending has (bound_q, q) > (t, r)
// lexicographically; blocked and gone ranks cannot act earlier (a blocked rank is woken only from a later turn, at
// that turn's time or later). So turns are granted in nondecreasing modeled time, ties by rank, whatever the real
// timing. Every method is thread-safe; each rank calls only its own methods, and wake() only inside a turn.
class InteractionScheduler {
 public:
  InteractionScheduler(int ranks, Ordering ordering);

  Ordering ordering() const { return ordering_; }
  // Blocks until `rank` may act at modeled time t_s (seconds), then holds the turn. Throws gs::Aborted after abort().
  void acquire(int rank, double t_s);
  // Ends the turn; the rank computes and its next acquire will be at modeled time >= next_s.
  void release(int rank, double next_s);
  // Ends the turn and sleeps until another rank's turn calls wake(rank, t); returns holding the turn again, at the
  // modeled time t it was woken for.
  double block(int rank);
  // Inside a turn: makes blocked `rank` pending at modeled time t_s (>= the current turn's time).
  void wake(int rank, double t_s);
  // Ends the turn (or, without one, the rank's participation): the rank has no more events.
  void leave(int rank);
  // Wakes every waiting thread with gs::Aborted (a rank failed; World's abort hook).
  void abort();

  // Test-only: GRADSWEEP_TEST_THREAD_DELAY_US=n makes every acquire sleep a random 0..n microseconds of real time
  // first (a thread-local generator seeded from the clock), to shake the real interleaving in determinism tests.
  // Not a configuration field; tests may also set it with set_test_delay_us.
  static int test_delay_us();
  static void set_test_delay_us(int us);

 private:
  enum class State { kComputing, kPending, kBlocked, kHolding, kGone };
  bool may_grant(int rank) const;  // with mu_ held
  void wait_turn(std::unique_lock<std::mutex>& lock, int rank);

  const int ranks_;
  const Ordering ordering_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<State> state_;
  std::vector<double> time_s_;  // computing: the bound of the next event; pending/holding: the event's time
  int holder_ = -1;
  bool aborted_ = false;
};

}  // namespace gs
