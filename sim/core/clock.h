// Measured clock: per rank and step, seconds spent in each phase (steady clock on the host backend). The modeled
// clock (cost-model issue) fills the same phases from a hardware profile.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

namespace gs {

enum class Phase { kData, kForward, kBackward, kCompress, kCommunicate, kOptimizer, kWait, kCount };
constexpr size_t kPhaseCount = static_cast<size_t>(Phase::kCount);
constexpr std::array<const char*, kPhaseCount> kPhaseNames = {"data",        "forward",   "backward", "compress",
                                                               "communicate", "optimizer", "wait"};

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One step of one rank.
struct StepTimes {
  std::array<double, kPhaseCount> phase_s{};
  double step_s = 0.0;       // wall time of the whole step
  uint64_t bytes_sent = 0;   // bytes this rank put on the (modeled) wire during the step
};

// Per-rank recorder; only its rank thread touches it during a run.
class PhaseClock {
 public:
  void begin_step() {
    current_ = StepTimes{};
    step_start_ = now_s();
  }
  void add(Phase p, double s) { current_.phase_s[static_cast<size_t>(p)] += s; }
  // Moves s seconds from one phase to another (e.g. the part of a collective spent waiting for other ranks).
  void move(Phase from, Phase to, double s) {
    current_.phase_s[static_cast<size_t>(from)] -= s;
    current_.phase_s[static_cast<size_t>(to)] += s;
  }
  void add_bytes(uint64_t b) { current_.bytes_sent += b; }
  void end_step() {
    current_.step_s = now_s() - step_start_;
    steps_.push_back(current_);
  }
  const std::vector<StepTimes>& steps() const { return steps_; }
  // The step in progress (phases added so far).
  const StepTimes& current() const { return current_; }
  void reserve(size_t n) { steps_.reserve(n); }

 private:
  StepTimes current_;
  double step_start_ = 0.0;
  std::vector<StepTimes> steps_;
};

// Adds the seconds from construction to destruction to one phase of a clock.
class PhaseTimer {
 public:
  PhaseTimer(PhaseClock& clock, Phase phase) : clock_(clock), phase_(phase), start_(now_s()) {}
  ~PhaseTimer() { clock_.add(phase_, now_s() - start_); }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  PhaseClock& clock_;
  Phase phase_;
  double start_;
};

}  // namespace gs
