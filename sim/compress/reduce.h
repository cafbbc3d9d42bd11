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
class ProcessGroup;
class StepCost;

// The optimizer a strategy runs on the reduced gradient: training.optimizer, except that with
// compression.error_feedback "momentum" SGD's momentum lives in each rank's velocity (CompressedReduction), so the
// optimizer applies the averaged sparse update without momentum (Lin et al. 2018, section 3.2).
OptimizerConfig update_optimizer(const RunConfig& config);

class CompressedReduction {
 public:
  // buckets: the strategy's buckets (contiguous ranges of the flat gradient). ranks compressor instances are made.
  // memory: the run's memory, where the gradients reduce() takes live and the error-feedback state and the messages
  // are kept; every element operation goes through it (its ElementOps and CompressOps). A memory other than the
  // host's takes only the kinds whose CompressorEntry::element_ops is true (host_memory_reason refuses the others
  // before a run; here a gs::Error).
  CompressedReduction(const RunConfig& config, const Model& model, Communicator& comm, int ranks,
                      const std::vector<std::pair<size_t, size_t>>& buckets,
                      ElementOps& memory = host_element_ops());
  ~CompressedReduction();

  // Collective (every rank calls it once per step): replaces grad[0..n) (rank's local gradient SUM) by the average
  // over the step's samples, (sum over ranks of decode(C(p_r))) / S, the same bits on every rank, and updates the
  // rank's error-feedback state. p_r by compression.error_feedback: none g_r; gradient g_r + e_r (e_r = p_r -
  // decode); momentum (Lin et al. 2018, DGC's momentum correction and factor masking, m = the SGD momentum):
  // u_r = m u_r + g_r, v_r += u_r, p_r = v_r, then u_r and v_r zeroed where decode(C(p_r)) is nonzero (the sent
  // coordinates); ef21 (Richtarik et al. 2021, arXiv 2106.05203): p_r = g_r - h_r, h_r += decode(C(p_r)), and the
  // result is G += (sum over ranks of decode) / S (G = sum_r h_r / S for a constant S), not the step's average. Times go to clock phases compress (encode + decode), communicate and wait; the
  // wire bytes to clock.add_bytes.
  // With cost (the rank's modeled step), every bucket's encode, collectives (real payload bytes) and decode are
  // priced on that bucket's chain by price_compressed_bucket (sim/compress/modeled.h), as timing-only
  // runs price it.
  void reduce(int rank, int64_t step, float* grad, double global_samples, PhaseClock& clock,
              StepCost* cost = nullptr);

  // The report's "compression" object (reports/README.md). Call after the run.
  nlohmann::json report() const;
  // Across processes (mpirun), after the run, on every process: the per-step records of the other processes' ranks
  // to process 0 (this process runs ranks first_rank .. first_rank + local_ranks - 1), so its report() averages over
  // every rank as one process's does. One process: nothing happens.
  void gather_ranks(ProcessGroup& group, int first_rank, int local_ranks);

  // Rank r's error-feedback residual (n floats, downloaded; empty without error feedback). compression.error_feedback
  // "gradient": e; "momentum": the accumulated velocity v; "ef21": the rank's tracked gradient g_i; DGC: its v. For
  // tests.
  std::vector<float> residual(int rank) const;
  // Rank r's velocity u under error_feedback "momentum" (n floats, downloaded), else empty. For tests.
  std::vector<float> velocity(int rank) const;

 private:
  struct RankState;
  void feed_in(int rank, RankState& s, float* grad) const;
  double feed_back(int rank, RankState& s, const float* p) const;
  CompressOps& compress_ops() const;
  std::vector<float> download(int rank, const float* src, size_t n) const;
  void price_bucket(StepCost& cost, const CompressTally& t, int64_t step, size_t begin, size_t end,
                    uint64_t payload_bytes, bool ef) const;
  const RunConfig& config_;
  const Model& model_;
  Communicator& comm_;
  ElementOps& memory_;
  int ranks_;
  size_t n_;
  std::vector<std::pair<size_t, size_t>> buckets_;
  std::vector<std::unique_ptr<RankState>> state_;
};

}  // namespace gs
