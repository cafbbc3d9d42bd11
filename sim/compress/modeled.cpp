// price_compressed_bucket (modeled.h): the wire format of every compressor (sim/compress/*.cpp, kernels/compress.h)
// as byte counts, the collectives it issues, and its encode / decode kernels as memory traffic, FLOPs and launches.
#include "sim/compress/modeled.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "kernels/compress.h"
#include "sim/core/error.h"
#include "sim/cost/step_cost.h"

namespace gs {
namespace {

CollectiveKind priced_kind(WireCollective c) {
  switch (c) {
    case WireCollective::kAllReduce: return CollectiveKind::kAllReduce;
    case WireCollective::kAllGather: return CollectiveKind::kAllGather;
    case WireCollective::kReduceScatter: return CollectiveKind::kReduceScatter;
  }
  return CollectiveKind::kAllReduce;
}

double cast_bytes(const std::string& kind) {
  if (kind == "fp16" || kind == "bf16") return 2.0;
  if (kind == "fp8_e4m3" || kind == "fp8_e5m2") return 1.0;
  return 0.0;
}

// The gather path (Compressor::reduce_bucket): every rank's payload padded to the largest, as 4-byte words; NCCL's
// nBytes of the all-gather is the whole output, N of them.
double gathered_bytes(double max_payload_bytes, int ranks) {
  return 4.0 * std::ceil(max_payload_bytes / 4.0) * static_cast<double>(ranks);
}

// PowerSGD's bucket (sim/compress/powersgd.cpp): the matrices it compresses (rows = shape[0], cols = the rest,
// (rows + cols) r x min_compression_rate < rows cols) whose first element lies in [begin, end); the rest dense.
struct PowerSgdBucket {
  double dense = 0.0, p = 0.0, q = 0.0;  // elements all-reduced: the dense remainder, P (rows x r), Q (cols x r)
  double encode_flops = 0.0, decode_flops = 0.0;
  double matrices = 0.0;
};

PowerSgdBucket powersgd_bucket(const CompressionConfig& c, const BucketShape& b) {
  PowerSgdBucket out;
  out.dense = static_cast<double>(b.n());
  if (b.step < c.start_step) return out;  // dense fp32 before start_step
  GS_EXPECT(b.tensors != nullptr, "powersgd is priced from the model's tensor table");
  const double r = static_cast<double>(c.rank);
  for (const TensorInfo& t : *b.tensors) {
    if (t.shape.size() < 2 || t.count == 0 || t.offset < b.begin || t.offset >= b.end) continue;
    const auto rows = static_cast<size_t>(t.shape[0]);
    const size_t cols = t.count / rows;
    if (static_cast<double>((rows + cols) * static_cast<size_t>(c.rank)) * c.min_compression_rate >=
        static_cast<double>(rows * cols))
      continue;  // not enough gain: sent dense
    const double mn = static_cast<double>(rows * cols), m = static_cast<double>(rows);
    out.dense -= mn;
    out.p += m * r;
    out.q += static_cast<double>(cols) * r;
    // P = M Q, Q = M^T P and this rank's P Q^T (2 rows cols r each); Gram-Schmidt on Q and on P, as
    // powerSGD_hook orthogonalizes both (2 r^2 per row); decode P Q^T.
    out.encode_flops += 6.0 * mn * r + 2.0 * (m + static_cast<double>(cols)) * r * r;
    out.decode_flops += 2.0 * mn * r;
    out.matrices += 1.0;
  }
  return out;
}

// Values kept by threshold / dgc without a measurement at 0-based step `step`: the bucket's expected density (at least
// one value); dgc's follows its warm-up (modeled_density).
size_t expected_kept(const CompressionConfig& c, size_t n, int64_t step) {
  if (!(c.expected_density > 0.0 && c.expected_density <= 1.0))
    throw Error(fmt::format("compression.expected_density: {} keeps a share of values that depends on the gradient; "
                            "a bucket priced without one needs compression.expected_density in (0, 1], {}", c.kind,
                            c.expected_density == 0.0 ? std::string("not given")
                                                      : fmt::format("got {}", c.expected_density)));
  return kept_count(n, modeled_density(c, step), 0);
}

}  // namespace

bool density_is_data_dependent(const std::string& kind) { return kind == "threshold" || kind == "dgc"; }

double modeled_density(const CompressionConfig& c, int64_t step) {
  return c.kind == "dgc" ? dgc_density_at(c.expected_density, c.warmup_steps, step) : c.expected_density;
}

EncodePasses encode_passes(const std::string& kind) {
  // torch.topk on CUDA for a slice this large takes the multi-block radix select (mbtopk::launch in
  // aten/src/ATen/native/cuda/TensorTopK.cu, pytorch/pytorch 6ed5926): 4 passes of 8 radix bits over fp32 keys, each
  // computeBlockDigitCounts (reads the input) + computeDigitCumSum + computeBlockwiseWithinKCounts, then
  // computeBlockwiseKthCounts, two cub inclusive_sum_by_key scans and gatherTopK (reads the input again): 5 reads
  // of the input, 17 kernels, plus a fill and 2 memsets = 20 launches. Before it |p| is written (p.abs(): a read and
  // a write), after it the payload packed (1 launch): 7 passes, 21 launches.
  if (kind == "topk") return {7.0, 21.0};
  // DGC (sim/compress/dgc.cpp): g read, u and v read and written, the threshold select's read of v.
  if (kind == "dgc") return {6.0, 1.0};
  return {1.0, 1.0};
}

BucketPrice price_compressed_bucket(const CompressionConfig& c, const BucketShape& b) {
  BucketPrice out;
  const size_t n = b.n();
  const double dense = b.element_bytes * static_cast<double>(n);
  const std::string& kind = c.kind;
  const bool measured = b.measured_own_bytes >= 0.0 && b.measured_max_bytes >= 0.0;
  EncodePasses pass = encode_passes(kind);
  double decode_launches = 1.0;
  // Gather compressors: this rank's payload and the largest (equal unless the size depends on the values).
  auto gather = [&](double own, double largest) {
    out.payload_bytes = own;
    out.calls.push_back({WireCollective::kAllGather, gathered_bytes(largest, b.ranks)});
  };
  if (const double w = cast_bytes(kind); w > 0.0) {
    out.payload_bytes = w * static_cast<double>(n);
    if (c.accumulate == "fp32") {  // reduce-scatter at the cast size, all-gather of the fp32 sums
      out.calls.push_back({WireCollective::kReduceScatter, out.payload_bytes});
      out.calls.push_back({WireCollective::kAllGather, 4.0 * static_cast<double>(n)});
    } else {
      out.calls.push_back({WireCollective::kAllReduce, out.payload_bytes});
    }
  } else if (density_is_data_dependent(kind)) {
    if (measured) {
      gather(b.measured_own_bytes, b.measured_max_bytes);
    } else {
      const double bytes = 8.0 * static_cast<double>(expected_kept(c, n, b.step));
      gather(bytes, bytes);
    }
  } else if (kind == "powersgd") {
    const PowerSgdBucket ps = powersgd_bucket(c, b);
    const double e = b.element_bytes;
    if (ps.dense > 0) out.calls.push_back({WireCollective::kAllReduce, e * ps.dense});
    if (ps.p > 0) out.calls.push_back({WireCollective::kAllReduce, e * ps.p});
    if (ps.q > 0) out.calls.push_back({WireCollective::kAllReduce, e * ps.q});
    out.payload_bytes = e * (ps.dense + ps.p + ps.q);
    out.encode.flops = ps.encode_flops;
    out.decode.flops = ps.decode_flops;
    pass.launches += 3.0 * ps.matrices;  // per matrix: P = M Q, Gram-Schmidt, Q = M^T P
    decode_launches += ps.matrices;      // per matrix: P Q^T
  } else if (const CompressorEntry* entry = find_compressor(kind); entry != nullptr && entry->payload_bytes) {
    // A gather compressor: the payload its training run measured (the all-gather padded to the largest rank's; a
    // sign bucket with exact zeros sends a second plane), else its payload from the settings.
    if (measured) {
      gather(b.measured_own_bytes, b.measured_max_bytes);
    } else {
      const double bytes = entry->payload_bytes(c, n);
      gather(bytes, bytes);
    }
  } else if (measured) {
    // A gather compressor without a payload from its settings: the payload its training run measured.
    gather(b.measured_own_bytes, b.measured_max_bytes);
  } else {
    throw Error(fmt::format("compression.kind: no modeled price for \"{}\" (its registry line has no payload_bytes)",
                            kind));
  }
  // Encode: error feedback p = g + e (read 2, write 1), the compressor's passes over p, the payload written.
  const double ef = b.error_feedback ? 3.0 * dense : 0.0;
  out.encode.bytes = ef + pass.passes * dense + out.payload_bytes;
  out.encode.launches = pass.launches;
  // Decode-and-sum: every received byte read, the fp32 sum written; error feedback e = p - decode (read 2, write 1).
  double received = 0.0;
  for (const WireCall& call : out.calls) received += call.bytes;
  out.decode.bytes = received + dense + ef;
  out.decode.launches = decode_launches;
  return out;
}

void add_bucket_price(StepCost& cost, const BucketPrice& price, size_t begin, size_t end) {
  const GradRange range{begin, end};
  auto kernels = [&](const ModeledKernels& k) {
    if (k.flops > 0) {
      cost.add_op(Phase::kCompress, k.flops, k.bytes, Precision::kFp32, k.launches, range);
    } else {
      cost.add_pass(Phase::kCompress, k.bytes, range, k.launches);
    }
  };
  kernels(price.encode);
  for (const WireCall& call : price.calls) cost.add_collective(priced_kind(call.kind), call.bytes, range);
  kernels(price.decode);
}

ModeledReduction modeled_reduction(const CompressionConfig& c, const std::vector<std::pair<size_t, size_t>>& buckets,
                                   size_t n, int ranks, const std::vector<TensorInfo>* tensors) {
  ModeledReduction r;
  r.buckets = c.kind == "topk" && c.scope == "model" ? std::vector<std::pair<size_t, size_t>>{{0, n}} : buckets;
  r.n = n;
  r.ranks = ranks;
  r.error_feedback = c.error_feedback != "none" && c.kind != "dgc";  // dgc keeps its own residual
  r.tensors = tensors;
  return r;
}

int64_t compression_price_class(const CompressionConfig& c, int64_t step) {
  if (c.kind == "powersgd" && step < c.start_step) return 1;
  if (c.kind == "dgc" && step < c.warmup_steps) return 1 + step;  // each warm-up step keeps its own density
  return 0;
}

BucketShape modeled_shape(const ModeledReduction& r, int64_t step, const std::pair<size_t, size_t>& bucket) {
  BucketShape shape;
  shape.begin = bucket.first;
  shape.end = bucket.second;
  shape.ranks = r.ranks;
  shape.step = step;
  shape.error_feedback = r.error_feedback;
  shape.tensors = r.tensors;
  return shape;
}

namespace {

// One rank's modeled step: its encoded bytes, the bytes it puts on the wire (NCCL nBytes x nccl-tests' bus-bandwidth
// factor, as the modeled clock counts them) and the collectives it issues.
struct StepTotals {
  double payload = 0.0, wire = 0.0, calls = 0.0;
};

StepTotals modeled_step_totals(const CompressionConfig& c, const ModeledReduction& r, int64_t step) {
  StepTotals t;
  for (const auto& b : r.buckets) {
    const BucketPrice p = price_compressed_bucket(c, modeled_shape(r, step, b));
    t.payload += p.payload_bytes;
    for (const WireCall& call : p.calls) {
      t.wire += call.bytes * CollectiveModel::busbw_factor(priced_kind(call.kind), r.ranks);
      t.calls += 1.0;
    }
  }
  return t;
}

// The collective that carries the payload (the compressor's collective()): casts and PowerSGD's factors are summed in
// an all-reduce, the other payloads gathered.
const char* modeled_collective(const std::string& kind) {
  const bool summed = cast_bytes(kind) > 0.0 || kind == "powersgd";
  return collective_name(summed ? WireCollective::kAllReduce : WireCollective::kAllGather);
}

// DGC's warm-up steps run (at most kMaxWarmupListed): each step's density and one rank's bytes.
template <class Totals>
nlohmann::json dgc_warmup_json(const CompressionConfig& c, int64_t steps, Totals& totals) {
  constexpr int64_t kMaxWarmupListed = 1000;
  nlohmann::json out = nlohmann::json::array();
  for (int64_t t = 0; t < std::min({steps, c.warmup_steps, kMaxWarmupListed}); ++t) {
    const StepTotals& one = totals(t);
    out.push_back({{"step", t},
                   {"density", modeled_density(c, t)},
                   {"payload_bytes_per_rank", one.payload},
                   {"wire_bytes_per_rank", one.wire}});
  }
  return out;
}

}  // namespace

void add_modeled_reduction(StepCost& cost, const CompressionConfig& c, const ModeledReduction& r, int64_t step) {
  for (const auto& b : r.buckets)
    add_bucket_price(cost, price_compressed_bucket(c, modeled_shape(r, step, b)), b.first, b.second);
}

nlohmann::json modeled_compression_report(const CompressionConfig& c, const ModeledReduction& r, int64_t steps) {
  std::map<int64_t, StepTotals> by_class;  // one priced step per class (compression_price_class)
  auto totals = [&](int64_t t) -> const StepTotals& {
    auto it = by_class.find(compression_price_class(c, t));
    if (it == by_class.end()) it = by_class.emplace(compression_price_class(c, t), modeled_step_totals(c, r, t)).first;
    return it->second;
  };
  StepTotals sum;
  for (int64_t t = 0; t < steps; ++t) {
    const StepTotals& one = totals(t);
    sum.payload += one.payload;
    sum.wire += one.wire;
    sum.calls += one.calls;
  }
  const double per = steps > 0 ? 1.0 / static_cast<double>(steps) : 0.0;
  const double dense = 4.0 * static_cast<double>(r.n);
  const double pay = sum.payload * per;
  nlohmann::json j;
  j["kind"] = c.kind;
  j["collective"] = modeled_collective(c.kind);
  j["error_feedback"] = c.kind == "dgc" ? "own" : (c.error_feedback == "gradient" ? "plain" : c.error_feedback);
  j["dense_bytes_per_rank_per_step"] = dense;
  j["payload_bytes_per_rank_per_step"] = pay;
  j["wire_bytes_per_rank_per_step"] = sum.wire * per;
  j["collectives_per_rank_per_step"] = sum.calls * per;
  j["compression_ratio"] = pay > 0 ? nlohmann::json(dense / pay) : nlohmann::json(nullptr);
  if (cast_bytes(c.kind) > 0.0) j["accumulate"] = c.accumulate;
  // Measured on a clock or from the gradient's values: a timing-only run has neither (its modeled encode and decode
  // time is timing.modeled's compress phase).
  for (const char* key : {"compress_time", "decompress_time", "relative_error", "max_relative_error", "residual_norm"})
    j[key] = nullptr;
  j["modeled"] = true;
  if (density_is_data_dependent(c.kind)) j["expected_density"] = c.expected_density;
  if (c.kind == "dgc" && c.warmup_steps > 0) j["warmup"] = dgc_warmup_json(c, steps, totals);
  return j;
}

}  // namespace gs
