// The loader thread and the bounded prefetch queue of loader.h.
#include "sim/model/loader.h"

#include <algorithm>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "sim/core/error.h"
#include "sim/model/data_cache.h"

namespace gs {

void read_samples(const Dataset& data, const std::vector<int64_t>& indices, int64_t threads, Batch& out) {
  const auto rows = static_cast<int64_t>(indices.size());
  // At least kMinRowsPerThread rows a thread: below that a thread's start (tens of microseconds) costs more than
  // the rows it would read.
  constexpr int64_t kMinRowsPerThread = 16;
  const int64_t parts = std::max<int64_t>(1, std::min(threads, rows / kMinRowsPerThread));
  auto read_range = [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) data.read_sample(indices[static_cast<size_t>(s)], out, s);
  };
  if (parts == 1) {
    read_range(0, rows);
    return;
  }
  // Contiguous ranges of rows, part p = [p rows / parts, (p + 1) rows / parts); the calling thread reads the last.
  std::vector<std::thread> helpers;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(parts));
  helpers.reserve(static_cast<size_t>(parts - 1));
  auto part = [&](int64_t p) {
    try {
      read_range(p * rows / parts, (p + 1) * rows / parts);
    } catch (...) {
      errors[static_cast<size_t>(p)] = std::current_exception();
    }
  };
  for (int64_t p = 0; p + 1 < parts; ++p) helpers.emplace_back(part, p);
  part(parts - 1);
  for (std::thread& t : helpers) t.join();
  for (const std::exception_ptr& e : errors)  // the first part's error, as a serial read would have met it first
    if (e) std::rethrow_exception(e);
}

void load_micro_batch(const Dataset& data, const RunConfig& config, DataCache* cache, int64_t step, int64_t micro,
                      int rank, Batch& out, DataCounts& counts) {
  counts = DataCounts{};
  const int64_t n = data.train_size();
  if (n <= 0) {
    data.micro_batch(step, micro, rank, out);
    counts.samples = out.count;
    return;
  }
  const std::vector<int64_t> idx = micro_batch_indices(config, n, step, micro, rank);
  data.shape_batch(out, static_cast<int64_t>(idx.size()), rank);
  counts.samples = static_cast<int64_t>(idx.size());
  if (cache != nullptr) {
    cache->fill(data, idx, step, micro, rank, out, counts);
    return;
  }
  read_samples(data, idx, config.data.loader_threads, out);
  counts.storage_samples = counts.samples;
  counts.storage_bytes = static_cast<double>(counts.samples * data.stored_sample_bytes());
}

Loader::Loader(const Dataset& data, const RunConfig& config, DataCache* cache, int rank, int64_t steps,
               int64_t prefetch)
    : data_(data),
      config_(config),
      cache_(cache),
      rank_(rank),
      steps_(steps),
      prefetch_(prefetch),
      micro_per_step_(config.training.accumulation_steps) {
  if (prefetch_ > 0) thread_ = std::thread([this] { run(); });
}

Loader::~Loader() {
  bool done = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    done = prefetch_ == 0 ? next_step_ >= steps_ : finished_;
  }
  cv_.notify_all();
  // A loader that loaded every step passed all its cache barriers, so the node's other loaders need nothing more from
  // it (they may still be loading, e.g. when ranks run at different paces). One stopped early (an early stop of the
  // run, or its rank failed) releases the node's loaders still waiting for it in a barrier; they throw Aborted.
  if (cache_ != nullptr && !done) cache_->abort();
  if (thread_.joinable()) thread_.join();
}

void Loader::run() {
  try {
    for (int64_t step = 0; step < steps_; ++step) {
      for (int64_t k = 0; k < micro_per_step_; ++k) {
        Item item;
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [&] { return stop_ || static_cast<int64_t>(ready_.size()) < prefetch_; });
          if (stop_) return;
          if (!free_.empty()) {
            item.batch = std::move(free_.back());
            free_.pop_back();
          }
        }
        load_micro_batch(data_, config_, cache_, step, k, rank_, item.batch, item.counts);
        {
          std::lock_guard<std::mutex> lock(mu_);
          ready_.push_back(std::move(item));
          max_depth_ = std::max(max_depth_, ready_.size());
        }
        cv_.notify_all();
      }
      if (cache_ != nullptr && step + 1 < steps_) cache_->end_step(rank_, step);
    }
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    // The node's other loaders must not wait for this one at the cache barrier (they throw Aborted instead).
    if (cache_ != nullptr) cache_->abort();
  }
  cv_.notify_all();
}

void Loader::next(Batch& out, DataCounts& counts) {
  if (prefetch_ == 0) {
    GS_EXPECT(next_step_ < steps_, "Loader::next: asked for more micro-batches than the run has");
    try {
      load_micro_batch(data_, config_, cache_, next_step_, next_micro_, rank_, out, counts);
      if (++next_micro_ == micro_per_step_) {
        if (cache_ != nullptr && next_step_ + 1 < steps_) cache_->end_step(rank_, next_step_);
        next_micro_ = 0;
        ++next_step_;
      }
    } catch (...) {
      if (cache_ != nullptr) cache_->abort();
      throw;
    }
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !ready_.empty() || error_ || finished_; });
  if (ready_.empty()) {
    if (error_) std::rethrow_exception(error_);
    throw_error(__FILE__, __LINE__, "a micro-batch", "Loader::next: asked for more micro-batches than the run has");
  }
  std::swap(out, ready_.front().batch);
  counts = ready_.front().counts;
  free_.push_back(std::move(ready_.front().batch));
  ready_.pop_front();
  lock.unlock();
  cv_.notify_all();
}

size_t Loader::max_queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_depth_;
}

}  // namespace gs
