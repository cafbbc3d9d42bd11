// CompressedReduction (see reduce.h) and the default gather path of Compressor::reduce_bucket: encode, all-gather the
// payloads (sizes first: payloads may differ per rank), decode and sum in rank order.
#include "sim/compress/reduce.h"

#include <algorithm>
#include <cmath>
#include <deque>

#include "kernels/nvtx.h"
#include "sim/comm/rank_gather.h"
#include "sim/compress/modeled.h"
#include "sim/core/error.h"
#include "sim/cost/step_cost.h"
#include "sim/core/summary.h"

namespace gs {

const char* collective_name(WireCollective c) {
  switch (c) {
    case WireCollective::kAllReduce: return "all_reduce";
    case WireCollective::kAllGather: return "all_gather";
    case WireCollective::kReduceScatter: return "reduce_scatter";
  }
  return "all_reduce";
}


CompressOps& compress_ops_of(ElementOps& memory) {
  CompressOps* c = memory.compress_ops();
  if (c == nullptr)
    throw Error("compression: this run's memory has no compressor operations (sim/core/compress_ops.h)");
  return *c;
}

CompressOps& BucketJob::compress_ops() const { return compress_ops_of(ops()); }

float* CompressSpace::room(ElementOps& memory, int rank, FloatBuffer& b, size_t words) {
  if (b.size() < words) b = memory.allocate(rank, words);
  return b.get();
}

void Compressor::encode(const BucketJob& job, std::vector<uint8_t>& payload) {
  // 4-byte aligned room (a compressor's indices and values are words).
  thread_local std::vector<float> room;
  room.resize((max_payload_bytes(job.n) + 3) / 4);
  auto* out = reinterpret_cast<uint8_t*>(room.data());
  const size_t bytes = encode_into(job, out);
  payload.assign(out, out + bytes);
}

size_t encode_sparse(const BucketJob& job, const uint32_t* idx, size_t count, float scale, bool indices_implied,
                     uint8_t* out) {
  const size_t idx_bytes = indices_implied ? 0 : count * sizeof(uint32_t);
  auto* vals = reinterpret_cast<float*>(out + idx_bytes);  // 4-byte aligned: idx_bytes % 4 == 0
  ElementOps& ops = job.ops();
  job.compress_ops().gather(job.rank, vals, job.p, idx, count);
  if (scale != 1.0f) ops.scale(job.rank, vals, count, scale);  // scale * p[idx[j]], one rounding either way
  return idx_bytes + count * sizeof(float);
}

void decode_sparse_add(const BucketJob& job, const uint8_t* payload, size_t bytes, const uint32_t* implied_idx,
                       float* out) {
  const size_t count = implied_idx != nullptr ? bytes / sizeof(float) : bytes / (sizeof(uint32_t) + sizeof(float));
  const uint32_t* idx = implied_idx != nullptr ? implied_idx : reinterpret_cast<const uint32_t*>(payload);
  const auto* vals = reinterpret_cast<const float*>(payload + (implied_idx != nullptr ? 0 : count * sizeof(uint32_t)));
  job.compress_ops().scatter_add(job.rank, out, idx, vals, count);
}

// The gather path: this rank's message encoded into its payload buffer and decoded into own_decoded, the sizes
// all-reduced (host doubles), the payloads all-gathered padded to the largest (4-byte words, the bytes past a
// message's end not part of it), then decoded and summed in rank order (or combined). Every element operation goes
// through the job's memory, so a backend's device memory runs it as host memory does.
void Compressor::reduce_bucket(const BucketJob& job) {
  thread_local std::vector<double> sizes;
  GS_EXPECT(job.space != nullptr, "the gather path needs the reducer's buffers (BucketJob::space)");
  CompressTally& t = *job.tally;
  ElementOps& ops = job.ops();
  CompressSpace& space = *job.space;
  const int N = job.ranks;
  CompressSpan encode(ops, job.rank, t, &CompressTally::compress_s);
  NvtxPhases nvtx(NvtxName::kCompress);
  float* send = CompressSpace::room(ops, job.rank, space.payload, (max_payload_bytes(job.n) + 3) / 4);
  const size_t bytes = encode_into(job, reinterpret_cast<uint8_t*>(send));
  ops.zero(job.rank, job.own_decoded, job.n);
  decode_add(job, job.rank, reinterpret_cast<const uint8_t*>(send), bytes, job.own_decoded);
  encode.end();
  double t1 = now_s();
  nvtx.next(NvtxName::kCommunicate, bytes);
  // Payload sizes (exact in double), then the payloads padded to the largest, as 4-byte words.
  sizes.assign(static_cast<size_t>(N), 0.0);
  sizes[static_cast<size_t>(job.rank)] = static_cast<double>(bytes);
  job.comm->all_reduce_sum(job.rank, sizes.data(), sizes.size());
  size_t max_bytes = 0;
  uint64_t total_bytes = 0;
  for (double b : sizes) {
    max_bytes = std::max(max_bytes, static_cast<size_t>(b));
    total_bytes += static_cast<uint64_t>(b);
  }
  const size_t words = (max_bytes + 3) / 4;
  float* recv = CompressSpace::room(ops, job.rank, space.gathered, words * static_cast<size_t>(N));
  job.comm->all_gather(job.rank, recv, send, words);
  t.communicate_s += now_s() - t1;
  nvtx.next(NvtxName::kCompress);
  CompressSpan decode(ops, job.rank, t, &CompressTally::decompress_s);
  std::vector<const uint8_t*> ptrs(static_cast<size_t>(N));
  std::vector<size_t> szs(static_cast<size_t>(N));
  for (int r = 0; r < N; ++r) {
    ptrs[static_cast<size_t>(r)] = reinterpret_cast<const uint8_t*>(recv + static_cast<size_t>(r) * words);
    szs[static_cast<size_t>(r)] = static_cast<size_t>(sizes[static_cast<size_t>(r)]);
  }
  if (!combine(job, ptrs, szs)) {
    ops.zero(job.rank, job.sum, job.n);
    for (int r = 0; r < N; ++r)
      decode_add(job, r, ptrs[static_cast<size_t>(r)], szs[static_cast<size_t>(r)], job.sum);
  }
  decode.end();
  t.calls.push_back({WireCollective::kAllGather, 4.0 * static_cast<double>(words) * N});
  t.payload_bytes += bytes;
  // Ring all-gather of unequal blocks: every block but one's own crosses each link once: (N-1)/N of the total.
  t.wire_bytes += N > 1 ? (static_cast<uint64_t>(N - 1) * total_bytes) / static_cast<uint64_t>(N) : 0;
}

// What one rank records per step.
struct StepRecord {
  uint64_t payload_bytes = 0;
  uint64_t wire_bytes = 0;
  double compress_s = 0.0;
  double decompress_s = 0.0;
  double relative_error = std::nan("");
  double max_relative_error = std::nan("");
  double residual_norm = 0.0;
};

// The step's error statistics (compression.measure_error): the average sent (grad) against the exact sum / S, element
// by element in double on the host (a device's buffers are downloaded first: a diagnostic's copy, the same bits).
void record_error(ElementOps& memory, int rank, size_t n, const float* grad, const float* exact, float S,
                  StepRecord& rec) {
  thread_local std::vector<float> got, want;
  if (!memory.host()) {
    got.resize(n);
    want.resize(n);
    memory.download(rank, got.data(), grad, n);
    memory.download(rank, want.data(), exact, n);
    grad = got.data();
    exact = want.data();
  }
  double d2 = 0.0, x2 = 0.0, worst = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(exact[i] / S);
    const double d = static_cast<double>(grad[i]) - x;
    d2 += d * d;
    x2 += x * x;
    // Element-wise |d| / |x|: inf where x is 0 and d is not, or d is not a number.
    const double r = std::isnan(d) ? INFINITY : (d == 0.0 ? 0.0 : std::fabs(d) / std::fabs(x));
    worst = std::max(worst, r);
  }
  rec.relative_error = x2 > 0 ? std::sqrt(d2 / x2) : (d2 > 0 ? INFINITY : 0.0);
  rec.max_relative_error = worst;
}

OptimizerConfig update_optimizer(const RunConfig& config) {
  OptimizerConfig o = config.training.optimizer;
  if (config.compression.kind != "none" && config.compression.error_feedback == "momentum") o.momentum = 0.0;
  return o;
}

struct CompressedReduction::RankState {
  std::unique_ptr<Compressor> comp;
  // In the run's memory (n floats each, or empty):
  FloatBuffer residual;  // error feedback: e, momentum's v, ef21's h_r; empty without it
  FloatBuffer velocity;  // momentum: u, else empty
  FloatBuffer tracked;   // ef21: G, the mean of the ranks' h_r (the same on every rank), else empty
  FloatBuffer own;       // decode(C(p)) of this rank
  FloatBuffer sum;       // sum over ranks of the decoded messages
  FloatBuffer exact;     // exact sum of the raw gradients, when measuring
  CompressSpace space;   // the gather path's buffers
  std::deque<StepRecord> steps;  // a deque: a device memory adds span times into the last record at settle
};

CompressedReduction::CompressedReduction(const RunConfig& config, const Model& model, Communicator& comm, int ranks,
                                         const std::vector<std::pair<size_t, size_t>>& buckets, ElementOps& memory)
    : config_(config), model_(model), comm_(comm), memory_(memory), ranks_(ranks), n_(model.num_params()),
      buckets_(buckets) {
  GS_EXPECT(ranks_ < static_cast<int>(kSharedRank), "compression supports fewer than 65535 ranks");
  GS_EXPECT(buckets_.size() < 0xffff, "compression supports fewer than 65535 buckets");
  if (!memory_.host()) {
    const CompressorEntry* e = find_compressor(config.compression.kind);
    GS_EXPECT(e != nullptr && e->element_ops,
              "compression.kind \"" + config.compression.kind + "\" runs on host memory only (host_memory_reason)");
  }
  for (int r = 0; r < ranks_; ++r) {
    auto s = std::make_unique<RankState>();
    s->comp = make_compressor(config, model, ranks);
    GS_EXPECT(s->comp != nullptr, "compression.kind \"none\" takes the uncompressed path");
    const std::string& ef = config.compression.error_feedback;
    if (ef != "none" && !s->comp->own_feedback()) s->residual = memory_.allocate(r, n_);
    if (ef == "momentum") s->velocity = memory_.allocate(r, n_);
    if (ef == "ef21") s->tracked = memory_.allocate(r, n_);
    s->own = memory_.allocate(r, n_);
    s->sum = memory_.allocate(r, n_);
    if (config.compression.measure_error) s->exact = memory_.allocate(r, n_);
    state_.push_back(std::move(s));
  }
}

CompressedReduction::~CompressedReduction() = default;

std::vector<float> CompressedReduction::residual(int rank) const {
  const RankState& s = *state_[static_cast<size_t>(rank)];
  if (const float* own = s.comp->own_residual()) return download(rank, own, n_);
  return download(rank, s.residual.get(), s.residual.size());
}

std::vector<float> CompressedReduction::velocity(int rank) const {
  const FloatBuffer& u = state_[static_cast<size_t>(rank)]->velocity;
  return download(rank, u.get(), u.size());
}

std::vector<float> CompressedReduction::download(int rank, const float* src, size_t n) const {
  std::vector<float> v(n);
  if (n != 0) memory_.download(rank, v.data(), src, n);
  return v;
}

// The compressor's input p from the rank's gradient sum g (in place), by placement (see reduce.h), through the
// memory's operations (the host's are the loops this always was: a product and a sum round apart).
void CompressedReduction::feed_in(int rank, RankState& s, float* grad) const {
  float* e = s.residual.get();
  if (s.velocity.get() != nullptr) {  // momentum correction: u = m u + g (two roundings, as SGD's buf * m + g), v += u
    compress_ops().momentum_feed_in(rank, s.velocity.get(), e, grad, n_,
                                    static_cast<float>(config_.training.optimizer.momentum));
  } else if (s.tracked.get() != nullptr) {  // ef21: p = g - h (g + (-1) h: the same bits as g - h)
    memory_.add_scaled(rank, grad, e, -1.0f, n_);
  } else {  // gradient: p = g + e
    memory_.add(rank, grad, e, n_);
  }
}

// The state after the rank's message: own = decode(C(p)) in s.own. Returns the squared norm of what stays unsent.
double CompressedReduction::feed_back(int rank, RankState& s, const float* p) const {
  float* e = s.residual.get();
  const float* own = s.own.get();
  CompressOps& cops = compress_ops();
  if (s.velocity.get() != nullptr) {  // momentum factor masking: u and v zeroed at the sent coordinates
    return cops.mask_sent(rank, s.velocity.get(), e, own, n_);
  }
  if (s.tracked.get() != nullptr) {  // ef21: h += c; what h still misses of g is p - c
    memory_.add(rank, e, own, n_);
    return cops.sum_squared_difference(rank, p, own, n_);
  }
  return cops.residual_of(rank, e, p, own, n_);  // e = p - decode(sent)
}

CompressOps& CompressedReduction::compress_ops() const { return compress_ops_of(memory_); }

void CompressedReduction::reduce(int rank, int64_t step, float* grad, double global_samples, PhaseClock& clock,
                                 StepCost* cost) {
  RankState& s = *state_[static_cast<size_t>(rank)];
  Compressor& comp = *s.comp;
  StepRecord& rec = s.steps.emplace_back();
  // The exact sum, for the error statistics only: neither its time nor its bytes count as this run's traffic.
  if (s.exact.get() != nullptr) {
    memory_.copy(rank, s.exact.get(), grad, n_);
    comm_.all_reduce_sum(rank, s.exact.get(), n_);
    comm_.take_stats(rank);
  }
  CompressTally tally;
  tally.clock = &clock;
  tally.settled_compress_s = &rec.compress_s;  // a device memory's event times, at the rank's next settle
  tally.settled_decompress_s = &rec.decompress_s;
  const bool ef = s.residual.get() != nullptr;
  if (ef) {
    GS_NVTX_RANGE(kCompress);
    CompressSpan span(memory_, rank, tally, &CompressTally::compress_s);
    feed_in(rank, s, grad);
  }
  BucketJob job;
  job.comm = &comm_;
  job.rank = rank;
  job.ranks = ranks_;
  job.step = step;
  job.seed = static_cast<uint64_t>(config_.training.seed);
  job.divisor = global_samples;
  job.tensors = &model_.tensors();
  job.tally = &tally;
  job.memory = &memory_;
  job.space = &s.space;
  auto run = [&](uint32_t b, size_t begin, size_t end) {
    job.bucket = b;
    job.offset = begin;
    job.n = end - begin;
    job.p = grad + begin;
    job.own_decoded = s.own.get() + begin;
    job.sum = s.sum.get() + begin;
    const uint64_t payload_before = tally.payload_bytes;
    tally.calls.clear();
    comp.reduce_bucket(job);
    if (cost != nullptr) price_bucket(*cost, tally, step, begin, end, tally.payload_bytes - payload_before, ef);
  };
  if (comp.whole_model()) {
    run(0, 0, n_);
  } else {
    for (size_t b = 0; b < buckets_.size(); ++b) run(static_cast<uint32_t>(b), buckets_[b].first, buckets_[b].second);
  }
  double norm2 = 0.0;
  NvtxPhases nvtx(NvtxName::kCompress);  // error feedback, then the division by S
  CompressSpan feedback(memory_, rank, tally, &CompressTally::compress_s);
  if (ef) {
    norm2 = feed_back(rank, s, grad);
  } else if (const float* v = comp.own_residual()) {
    norm2 = memory_.scan(rank, v, n_, true).sum_squares;
  }
  feedback.end();
  CompressSpan average(memory_, rank, tally, &CompressTally::decompress_s);
  const float S = static_cast<float>(global_samples);
  if (comp.divides_itself()) {
    memory_.copy(rank, grad, s.sum.get(), n_);
  } else {
    compress_ops().average(rank, grad, s.sum.get(), n_, S);
  }
  if (s.tracked.get() != nullptr) {  // ef21: G += the mean of the messages; the update is G
    memory_.add(rank, s.tracked.get(), grad, n_);
    memory_.copy(rank, grad, s.tracked.get(), n_);
  }
  average.end();
  if (s.exact.get() != nullptr) record_error(memory_, rank, n_, grad, s.exact.get(), S, rec);
  CommStats st = comm_.take_stats(rank);
  clock.add(Phase::kCommunicate, tally.communicate_s);  // the compress phase: each CompressSpan's
  clock.move(Phase::kCommunicate, Phase::kWait, std::min(st.wait_s, tally.communicate_s));
  clock.add_bytes(tally.wire_bytes);
  rec.payload_bytes = tally.payload_bytes;
  rec.wire_bytes = tally.wire_bytes;
  rec.compress_s += tally.compress_s;  // host memory's seconds (a device's arrive at settle)
  rec.decompress_s += tally.decompress_s;
  rec.residual_norm = std::sqrt(norm2);
}

// The modeled price of the bucket just reduced: price_compressed_bucket, the function timing-only runs price with,
// given what this run measured where the payload depends on the values (threshold, dgc, the sign compressors' zero
// plane): this rank's payload and the largest rank's, which the all-gather pads to.
void CompressedReduction::price_bucket(StepCost& cost, const CompressTally& t, int64_t step, size_t begin, size_t end,
                                       uint64_t payload_bytes, bool ef) const {
  BucketShape shape;
  shape.begin = begin;
  shape.end = end;
  shape.ranks = ranks_;
  shape.step = step;
  shape.error_feedback = ef;
  shape.tensors = &model_.tensors();
  if (!t.calls.empty() && t.calls.front().kind == WireCollective::kAllGather &&
      state_.front()->comp->collective() == WireCollective::kAllGather) {
    shape.measured_own_bytes = static_cast<double>(payload_bytes);
    shape.measured_max_bytes = t.calls.front().bytes / static_cast<double>(ranks_);
  }
  add_bucket_price(cost, price_compressed_bucket(config_.compression, shape), begin, end);
}

void CompressedReduction::gather_ranks(ProcessGroup& group, int first_rank, int local_ranks) {
  if (group.size() <= 1) return;
  std::vector<std::vector<StepRecord>> rows(state_.size());
  for (size_t r = 0; r < state_.size(); ++r) rows[r].assign(state_[r]->steps.begin(), state_[r]->steps.end());
  gather_rank_rows(group, rows, first_rank, local_ranks);
  for (size_t r = 0; r < state_.size(); ++r) state_[r]->steps.assign(rows[r].begin(), rows[r].end());
}

namespace {

json dist_json(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return nullptr;
  Summary s = summarize(v);
  auto num = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  return {{"count", s.count}, {"min", num(s.min)}, {"p50", num(s.p50)}, {"p95", num(s.p95)},
          {"max", num(s.max)}, {"mean", num(s.mean)}, {"last", num(v.back())}};
}

json ms_json(const std::vector<double>& seconds) {
  Summary s = summarize(seconds);
  return {{"count", s.count}, {"p50_ms", s.p50 * 1e3}, {"mean_ms", s.mean * 1e3}, {"total_ms", s.total * 1e3}};
}

}  // namespace

json CompressedReduction::report() const {
  const CompressionConfig& c = config_.compression;
  const Compressor& comp = *state_.front()->comp;
  std::vector<double> payload, wire, enc, dec, err, max_err, res;
  for (const auto& s : state_) {
    for (const auto& r : s->steps) {
      payload.push_back(static_cast<double>(r.payload_bytes));
      wire.push_back(static_cast<double>(r.wire_bytes));
      enc.push_back(r.compress_s);
      dec.push_back(r.decompress_s);
    }
  }
  // Per step: the error is the same on every rank (same bits); the residual norm is averaged over ranks.
  const size_t steps = state_.front()->steps.size();
  for (size_t t = 0; t < steps; ++t) {
    err.push_back(state_.front()->steps[t].relative_error);
    max_err.push_back(state_.front()->steps[t].max_relative_error);
    double m = 0.0;
    for (const auto& s : state_) m += t < s->steps.size() ? s->steps[t].residual_norm : 0.0;
    res.push_back(m / static_cast<double>(ranks_));
  }
  auto mean = [](const std::vector<double>& v) {
    double a = 0.0;
    for (double x : v) a += x;
    return v.empty() ? 0.0 : a / static_cast<double>(v.size());
  };
  const double dense = static_cast<double>(n_) * 4.0;
  const double pay = mean(payload);
  json j;
  j["kind"] = c.kind;
  j["collective"] = collective_name(comp.collective());
  // "plain" is the gradient placement (the name reports have always carried); "momentum", "ef21" as configured.
  const std::string& ef = c.error_feedback;
  j["error_feedback"] = comp.own_feedback() ? "own" : (ef == "gradient" ? "plain" : ef);
  j["dense_bytes_per_rank_per_step"] = dense;
  j["payload_bytes_per_rank_per_step"] = pay;
  j["wire_bytes_per_rank_per_step"] = mean(wire);
  j["compression_ratio"] = pay > 0 ? json(dense / pay) : json(nullptr);
  j["compress_time"] = ms_json(enc);
  j["decompress_time"] = ms_json(dec);
  j["relative_error"] = dist_json(err);
  j["max_relative_error"] = dist_json(max_err);
  if (comp.divides_itself()) j["accumulate"] = c.accumulate;  // casts
  j["residual_norm"] = dist_json(res);
  return j;
}

}  // namespace gs
