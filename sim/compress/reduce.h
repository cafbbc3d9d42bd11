// The compressed reduction of the allreduce strategy: error feedback, the per-bucket compressor jobs, the measured
// split of compress / communicate / decompress time, bytes on the wire, and the per-step error statistics the report
// shows under "compression". Compressor-specific work lives in the compressors (sim/compress/*.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/compress/compressor.h"
#include "sim/core/clock.h"

namespace gs {

struct Bucket;
class StepCost;

class CompressedReduction {
 public:
  // buckets: the strategy's buckets (contiguous ranges of the flat gradient). ranks compressor instances are made.
  CompressedReduction(const RunConfig& config, const Model& model, Communicator& comm, int ranks,
                      const std::vector<std::pair<size_t, size_t>>& buckets);
  ~CompressedReduction();

  // Collective (every rank calls it once per step): replaces grad[0..n) (rank's local gradient SUM) by the average
  // over the step's samples, (sum over ranks of decode(C(g_r + e_r))) / S, the same bits on every rank. Updates the
  // rank's error-feedback residual. Times go to clock phases compress (encode + decode), communicate and wait; the
  // wire bytes to clock.add_bytes.
  // With cost (the rank's modeled step), every bucket's encode, collectives (real payload bytes) and decode are
  // priced on that bucket's chain (see price_bucket).
  void reduce(int rank, int64_t step, float* grad, double global_samples, PhaseClock& clock,
              StepCost* cost = nullptr);

  // The report's "compression" object (reports/README.md). Call after the run.
  nlohmann::json report() const;

  // Rank r's error-feedback residual (n floats; DGC: its velocity; empty without error feedback). For tests.
  const std::vector<float>& residual(int rank) const;

 private:
  struct RankState;
  void price_bucket(StepCost& cost, const CompressTally& t, size_t begin, size_t end, uint64_t payload_bytes,
                    bool ef) const;
  const RunConfig& config_;
  const Model& model_;
  Communicator& comm_;
  int ranks_;
  size_t n_;
  std::vector<std::pair<size_t, size_t>> buckets_;
  std::vector<std::unique_ptr<RankState>> state_;
};

}  // namespace gs
