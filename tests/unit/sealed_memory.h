// A device memory stand-in for CPU tests of the backend seam (sim/core/element_ops.h): SealedMemory stores every
// float bit-complemented (~bits), so any code that reads or writes one of its buffers with a host loop instead of
// through ElementOps (or SealedCommunicator) computes on garbage and the test that compares it with host memory
// fails. Its operations are written here from the element math (kernels/optim_math.h) and the definitions in
// element_ops.h, not from host_element_ops, so a test of host_element_ops against it compares two implementations.
// SealedCommunicator reduces sealed buffers through a host communicator; with `asynchronous` its starts only queue
// the bucket and the sums happen at all_reduce_wait (a device communicator's contract: nothing touches a started
// bucket before the wait); with `poison` too, a started bucket reads as NaN until the wait (which puts its values back
// and sums them), as a device buffer under an in-place reduction that is running or has run: code that reads a started
// bucket before the wait sees values that are not the rank's own, and a write into one before the wait is a test
// failure (found at the wait). A communicator destroyed with buckets started and not waited for is a test failure too
// (a device would free memory a reduction still uses).
#pragma once
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/optim_math.h"
#include "sim/comm/communicator.h"
#include "sim/core/clock.h"
#include "sim/core/element_ops.h"

namespace gs::test {

inline float seal(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u = ~u;
  float y;
  std::memcpy(&y, &u, sizeof y);
  return y;
}
inline float unseal(float x) { return seal(x); }  // the complement is its own inverse

inline void seal_all(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = seal(x[i]);
}

class SealedMemory final : public ElementOps {
 public:
  explicit SealedMemory(int ranks) : tally_(static_cast<size_t>(ranks)) {}
  bool host() const override { return false; }
  void zero(int, float* x, size_t n) override {
    for (size_t i = 0; i < n; ++i) x[i] = seal(0.0f);
  }
  void copy(int, float* dst, const float* src, size_t n) override { std::memmove(dst, src, n * sizeof(float)); }
  void upload(int, float* dst, const float* host, size_t n) override {
    for (size_t i = 0; i < n; ++i) dst[i] = seal(host[i]);
  }
  void download(int, float* host, const float* src, size_t n) override {
    for (size_t i = 0; i < n; ++i) host[i] = unseal(src[i]);
  }
  void add(int, float* acc, const float* x, size_t n) override {
    for (size_t i = 0; i < n; ++i) acc[i] = seal(unseal(acc[i]) + unseal(x[i]));
  }
  void add_scaled(int, float* acc, const float* x, float f, size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      const volatile float product = f * unseal(x[i]);  // rounded apart from the sum
      acc[i] = seal(unseal(acc[i]) + product);
    }
  }
  void scale(int, float* x, size_t n, float f) override {
    for (size_t i = 0; i < n; ++i) x[i] = seal(unseal(x[i]) * f);
  }
  void divide(int, float* x, size_t n, float d) override {
    for (size_t i = 0; i < n; ++i) x[i] = seal(unseal(x[i]) / d);
  }
  size_t count_nonfinite(int, const float* x, size_t n) override {
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += std::isfinite(unseal(x[i])) ? 0 : 1;
    return bad;
  }
  void tally_nonfinite(int rank, const float* x, size_t n) override {
    tally_[static_cast<size_t>(rank)] += count_nonfinite(rank, x, n);
  }
  size_t take_nonfinite(int rank) override { return std::exchange(tally_[static_cast<size_t>(rank)], 0); }
  ElementScan scan(int rank, const float* x, size_t n, bool want_norm) override {
    ElementScan s;
    s.nonfinite = count_nonfinite(rank, x, n);
    if (want_norm) {
      for (size_t i = 0; i < n; ++i) s.sum_squares += static_cast<double>(unseal(x[i])) * unseal(x[i]);
    }
    return s;
  }
  void sgd(int, float* w, const float* g, float* buf, size_t n, const SgdScalars& s) override {
    ++sgd_calls;
    for (size_t i = 0; i < n; ++i) {
      float wi = unseal(w[i]), bi = buf == nullptr ? 0.0f : unseal(buf[i]);
      sgd_element(wi, unseal(g[i]), bi, s);
      w[i] = seal(wi);
      if (buf != nullptr) buf[i] = seal(bi);
    }
  }
  void adam(int, float* w, const float* g, float* m, float* v, size_t n, const AdamScalars& s) override {
    ++adam_calls;
    for (size_t i = 0; i < n; ++i) {
      float wi = unseal(w[i]), mi = unseal(m[i]), vi = unseal(v[i]);
      adam_element(wi, unseal(g[i]), mi, vi, s);
      w[i] = seal(wi);
      m[i] = seal(mi);
      v[i] = seal(vi);
    }
  }
  double phase_begin(int) override { return now_s(); }
  void phase_end(int, double mark, Phase phase, PhaseClock& clock) override { clock.add(phase, now_s() - mark); }

  std::atomic<int64_t> allocations{0}, releases{0}, sgd_calls{0}, adam_calls{0};

 protected:
  float* allocate_zeroed(int, size_t n) override {
    if (n == 0) return nullptr;
    ++allocations;
    float* p = new float[n];
    for (size_t i = 0; i < n; ++i) p[i] = seal(0.0f);
    return p;
  }
  void release(int, float* p) noexcept override {
    ++releases;
    delete[] p;
  }

 private:
  std::vector<size_t> tally_;  // per rank (each rank's own thread writes its entry)
};

// The collectives of a host communicator on sealed buffers (each rank's buffers are its own, so each is unsealed in
// place around the host collective and sealed again). The double all-reduce (control values) is host memory.
class SealedCommunicator final : public Communicator {
 public:
  ~SealedCommunicator() override {
    for (size_t r = 0; r < pending_.size(); ++r)
      if (!pending_[r].empty())
        ADD_FAILURE() << "rank " << r << " has " << pending_[r].size() << " bucket(s) started and never waited for";
  }
  SealedCommunicator(int ranks, bool asynchronous, bool poison = false)
      : inner_(make_host_communicator(ranks)), asynchronous_(asynchronous), poison_(poison),
        pending_(static_cast<size_t>(ranks)), saved_(static_cast<size_t>(ranks)), started_(static_cast<size_t>(ranks)) {}
  int size() const override { return inner_->size(); }
  void all_reduce_sum(int rank, float* buf, size_t count) override {
    seal_all(buf, count);
    inner_->all_reduce_sum(rank, buf, count);
    seal_all(buf, count);
  }
  void all_reduce_sum(int rank, double* buf, size_t count) override { inner_->all_reduce_sum(rank, buf, count); }
  void all_gather(int rank, float* out, const float* in, size_t count) override {
    std::vector<float> plain(in, in + count);
    seal_all(plain.data(), count);
    inner_->all_gather(rank, out, plain.data(), count);
    seal_all(out, count * static_cast<size_t>(size()));
  }
  void reduce_scatter_sum(int rank, float* out, const float* in, size_t count) override {
    std::vector<float> plain(in, in + count * static_cast<size_t>(size()));
    seal_all(plain.data(), plain.size());
    inner_->reduce_scatter_sum(rank, out, plain.data(), count);
    seal_all(out, count);
  }
  void broadcast(int rank, float* buf, size_t count, int root) override {
    seal_all(buf, count);
    inner_->broadcast(rank, buf, count, root);
    seal_all(buf, count);
  }
  void barrier(int rank) override { inner_->barrier(rank); }
  void all_reduce_sum_start(int rank, float* buf, size_t count) override {
    ++started_[static_cast<size_t>(rank)];
    if (!asynchronous_) return all_reduce_sum(rank, buf, count);
    pending_[static_cast<size_t>(rank)].emplace_back(buf, count);
    if (poison_) {
      saved_[static_cast<size_t>(rank)].emplace_back(buf, buf + count);
      for (size_t i = 0; i < count; ++i) buf[i] = seal(std::nanf(""));
    }
  }
  void all_reduce_wait(int rank) override {
    auto pending = std::exchange(pending_[static_cast<size_t>(rank)], {});
    auto saved = std::exchange(saved_[static_cast<size_t>(rank)], {});
    for (size_t b = 0; b < pending.size(); ++b) {
      auto [buf, count] = pending[b];
      if (poison_) {
        const float nan = seal(std::nanf(""));
        for (size_t i = 0; i < count; ++i)
          if (std::memcmp(&buf[i], &nan, sizeof nan) != 0) {
            ADD_FAILURE() << "rank " << rank << ": element " << i << " of a started bucket was written before its wait";
            break;
          }
        std::memcpy(buf, saved[b].data(), count * sizeof(float));
      }
      all_reduce_sum(rank, buf, count);
    }
  }
  bool starts_asynchronously() const override { return asynchronous_; }
  void abort() override { inner_->abort(); }
  CommStats take_stats(int rank) override { return inner_->take_stats(rank); }
  // Buckets rank `rank` has started (all_reduce_sum_start) so far.
  int64_t started(int rank) const { return started_[static_cast<size_t>(rank)]; }

 private:
  std::unique_ptr<Communicator> inner_;
  bool asynchronous_;
  bool poison_;
  std::vector<std::vector<std::pair<float*, size_t>>> pending_;  // per rank: started, not yet reduced
  std::vector<std::vector<std::vector<float>>> saved_;            // poison: their values at the start
  std::vector<int64_t> started_;
};

}  // namespace gs::test
