// The modeled price of one compressed bucket, from its shape and the compressor's settings alone: the bytes this rank
// encodes, the collectives that carry the payload (NCCL's nBytes each), and the GPU work of the encode and decode
// kernels. Timing-only runs (training.mode "timing") price every bucket with it; training runs price the same
// function, handing it only what depends on the gradient's values (the measured payload of threshold, dgc and the
// sign compressors' zero plane), so both price a bucket alike (tests/unit/test_compress_modeled.cpp).
// The formulas per compressor and the top-k kernel count are in docs/cost-model.md ("Compression").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/compress/compressor.h"
#include "sim/config/run_config.h"
#include "sim/model/model.h"

namespace gs {

class StepCost;

// A group of GPU kernels: HBM bytes (read + written), fp32 FLOPs (0: memory-bound) and launches.
struct ModeledKernels {
  double bytes = 0.0;
  double flops = 0.0;
  double launches = 1.0;
};

// One compressed bucket on one rank, for the modeled clock.
struct BucketPrice {
  ModeledKernels encode;        // error-feedback input, the compressor's passes, the payload written
  std::vector<WireCall> calls;  // the collectives in issue order (NCCL nBytes: all-gather = the whole output)
  ModeledKernels decode;        // every received byte read, the fp32 sum written, error feedback's residual
  double payload_bytes = 0.0;   // this rank's encoded bytes (the report's payload_bytes)
};

// What is priced: gradient elements [begin, end) of the flat fp32 gradient (element_bytes each) on `ranks` ranks.
struct BucketShape {
  size_t begin = 0;
  size_t end = 0;
  int ranks = 1;
  int64_t step = 0;             // 0-based optimizer step (powersgd: dense before start_step)
  bool error_feedback = false;  // the reducer's residual (not dgc's own): p = g + e before, e = p - own after
  double element_bytes = 4.0;   // the gradient's dtype (fp32)
  const std::vector<TensorInfo>* tensors = nullptr;  // powersgd: the matrices whose first element lies in the bucket
  // Payloads that depend on the values (threshold, dgc, signsgd, onebit), measured by a training run: this rank's
  // and the largest rank's (all-gathers pad to it). Negative: not measured, taken from compression.expected_density
  // (threshold, dgc) or as a bucket without exact zeros (signsgd, onebit: one bit plane).
  double measured_own_bytes = -1.0;
  double measured_max_bytes = -1.0;
  size_t n() const { return end - begin; }
};

// True for the compressors whose payload size depends on the gradient's values at a fixed setting (threshold, dgc).
bool density_is_data_dependent(const std::string& kind);

// The fraction of each bucket a timing-only run of threshold or dgc keeps at 0-based step `step`:
// compression.expected_density; dgc's during its warm-up (compression.warmup_steps W) follows the compressor's
// schedule ending at it (dgc_density_at): expected_density^((step + 1) / (W + 1)) for step < W.
double modeled_density(const CompressionConfig& c, int64_t step);

// The price of one bucket (kind != "none"). A compressor this file does not price (a new one) is priced as a gather
// of the payload its training run measured. Throws gs::Error for threshold / dgc without a measured payload and
// without compression.expected_density, and for an unpriced compressor without a measured payload (timing-only runs).
BucketPrice price_compressed_bucket(const CompressionConfig& c, const BucketShape& b);

// The encode passes over the bucket's input p (in units of element_bytes x n, read or written) and the launches of
// one compressor's encode: 1 and 1 for most; topk 7 and 21 (torch.topk's multi-block radix select, see modeled.cpp);
// dgc 6 (clip, momentum and velocity updates, the threshold select). The parameter server's pushes use it too.
struct EncodePasses {
  double passes = 1.0;
  double launches = 1.0;
};
EncodePasses encode_passes(const std::string& kind);

// Adds a bucket's price to the rank's modeled step on the bucket's chain: encode, the collectives, then decode.
void add_bucket_price(StepCost& cost, const BucketPrice& price, size_t begin, size_t end);

// What a timing-only run's compressed reduction is made of: the ranges priced as buckets (the strategy's buckets; top-k
// with scope "model": one over the whole gradient), the gradient's elements, the ranks, and the shape's other fields.
struct ModeledReduction {
  std::vector<std::pair<size_t, size_t>> buckets;
  size_t n = 0;
  int ranks = 1;
  bool error_feedback = false;                       // the reducer's residual (not dgc's own)
  const std::vector<TensorInfo>* tensors = nullptr;  // the model's tensor table (PowerSGD's matrices)
};
ModeledReduction modeled_reduction(const CompressionConfig& c, const std::vector<std::pair<size_t, size_t>>& buckets,
                                   size_t n, int ranks, const std::vector<TensorInfo>* tensors);
// The shape of bucket [first, second) of the reduction at 0-based step `step` (price_compressed_bucket's input).
BucketShape modeled_shape(const ModeledReduction& r, int64_t step, const std::pair<size_t, size_t>& bucket);

// Steps whose buckets are priced alike share a class (the first member of a strategy's PriceKey: a timing-only run
// prices one step per class): 0 for the steps priced as every step after the schedules; powersgd before start_step:
// 1 (dense fp32); dgc's warm-up step t < warmup_steps: 1 + t (modeled_density).
int64_t compression_price_class(const CompressionConfig& c, int64_t step);

// Adds every bucket of step `step`, priced from its shape alone, to the rank's modeled step (timing-only runs).
void add_modeled_reduction(StepCost& cost, const CompressionConfig& c, const ModeledReduction& r, int64_t step);

// The report's "compression" object of a timing-only run of `steps` optimizer steps (reports/README.md,
// "compression"), from the same prices: the keys a training run writes that are defined without the gradient's
// values (kind, collective, error_feedback, dense / payload / wire bytes per rank and step as means over the steps,
// compression_ratio, accumulate for casts) plus collectives_per_rank_per_step and "modeled": true; the keys that need
// values or a measured clock (compress_time, decompress_time, relative_error, max_relative_error, residual_norm)
// are null.
nlohmann::json modeled_compression_report(const CompressionConfig& c, const ModeledReduction& r, int64_t steps);

}  // namespace gs
