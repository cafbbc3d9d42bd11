// World: the rank threads of one run, one persistent thread per rank; run() hands every thread the same job and waits,
// and a rank that throws aborts the world (on_abort wakes blocked ranks) and is rethrown: never a hang. Extend: work
// every rank thread does once (naming, device binding) goes into thread_main.
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gs {

class World {
 public:
  // first_rank: the rank the first thread runs (under mpirun a process runs ranks first_rank .. first_rank +
  // ranks - 1 of the job's); job(rank) and error messages get those ranks.
  explicit World(int ranks, int first_rank = 0);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  // Runs job(rank) on every rank thread and blocks until all return. If ranks throw, calls on_abort() once (from the
  // first failing thread) and rethrows the first error that is not an Aborted, prefixed with "rank R: ".
  void run(const std::function<void(int)>& job, const std::function<void()>& on_abort);

 private:
  void thread_main(int rank);

  int first_rank_ = 0;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(int)>* job_ = nullptr;
  const std::function<void()>* on_abort_ = nullptr;
  uint64_t generation_ = 0;
  int running_ = 0;
  bool stop_ = false;
  bool aborted_ = false;
  std::exception_ptr first_error_;
  int first_error_rank_ = -1;
};

}  // namespace gs
