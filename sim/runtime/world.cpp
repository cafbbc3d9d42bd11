// World (world.h): persistent rank threads, job hand-off, per-rank exception capture and abort. Extend: per-thread
// setup in thread_main.
#include "sim/runtime/world.h"

#include <string>

#include "kernels/nvtx.h"
#include "sim/core/error.h"
#include "sim/core/barrier.h"

namespace gs {

World::World(int ranks, int first_rank) : first_rank_(first_rank) {
  GS_EXPECT(ranks >= 1, "a world needs at least one rank");
  threads_.reserve(static_cast<size_t>(ranks));
  nvtx_initialize();  // before the rank threads: NVTX3's lazy initialization is not thread-safe
  try {
    for (int r = first_rank; r < first_rank + ranks; ++r) threads_.emplace_back([this, r] { thread_main(r); });
  } catch (const std::exception& e) {
    // Not every rank thread could start (thread or memory limits): stop and join the ones that did.
    const size_t started = threads_.size();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_start_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    throw Error("cannot start rank thread " + std::to_string(started) + " of " + std::to_string(ranks) + ": " +
                e.what());
  }
}

World::~World() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : threads_) t.join();
}

void World::thread_main(int rank) {
  const std::string name = "rank " + std::to_string(rank);
  name_this_thread(name.c_str());  // "rank N" in Nsight Systems, top and gdb
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    try {
      (*job)(rank);
    } catch (...) {
      std::exception_ptr e = std::current_exception();
      bool is_abort = false;
      try {
        std::rethrow_exception(e);
      } catch (const Aborted&) {
        is_abort = true;
      } catch (...) {
      }
      bool call_abort = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!is_abort && !first_error_) {
          first_error_ = e;
          first_error_rank_ = rank;
        }
        if (!aborted_) {
          aborted_ = true;
          call_abort = true;
        }
      }
      if (call_abort && on_abort_ != nullptr) (*on_abort_)();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--running_ == 0) cv_done_.notify_all();
    }
  }
}

void World::run(const std::function<void(int)>& job, const std::function<void()>& on_abort) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &job;
    on_abort_ = &on_abort;
    running_ = size();
    aborted_ = false;
    first_error_ = nullptr;
    first_error_rank_ = -1;
    ++generation_;
  }
  cv_start_.notify_all();
  std::exception_ptr err;
  int err_rank = -1;
  bool aborted = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [&] { return running_ == 0; });
    err = first_error_;
    err_rank = first_error_rank_;
    aborted = aborted_;
  }
  if (err) {
    try {
      std::rethrow_exception(err);
    } catch (const std::exception& e) {
      throw Error("rank " + std::to_string(err_rank) + ": " + e.what());
    } catch (...) {
      throw Error("rank " + std::to_string(err_rank) + ": unknown exception");
    }
  }
  if (aborted) throw Error("run aborted");
}

}  // namespace gs
