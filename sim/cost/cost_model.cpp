// The modeled clock (cost_model.h): per-micro-batch pricing of declared layers, DDP bucket overlap, stragglers, and
// the synchronous wait for the slowest rank.
#include "sim/cost/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "kernels/rng.h"
#include "sim/core/error.h"
#include "sim/model/model.h"

namespace gs {

OverlapResult schedule_chains(double compute_end_s, const std::vector<double>& ready_s,
                              const std::vector<double>& duration_s) {
  OverlapResult r;
  double end = 0.0, total = 0.0;
  for (size_t i = 0; i < ready_s.size(); ++i) {
    end = std::max(ready_s[i], end) + duration_s[i];
    total += duration_s[i];
  }
  r.comm_end_s = end;
  r.exposed_s = std::max(0.0, end - compute_end_s);
  r.overlapped_s = std::max(0.0, total - r.exposed_s);  // not -1 ulp when every chain starts at compute_end_s
  return r;
}

OverlapResult defer_chains(const OverlapResult& same_step, double compute_end_s, double step_compute_s,
                           int64_t deferred_steps) {
  if (deferred_steps <= 0) return same_step;
  const double total = same_step.overlapped_s + same_step.exposed_s;
  const double latency = same_step.comm_end_s - compute_end_s - static_cast<double>(deferred_steps) * step_compute_s;
  const double throughput = total - step_compute_s;
  OverlapResult r;
  r.exposed_s = std::max(0.0, std::max(latency, throughput));
  r.overlapped_s = std::max(0.0, total - r.exposed_s);
  r.comm_end_s = compute_end_s + r.exposed_s;
  return r;
}

void carry_rank_clocks(std::vector<ModeledStep>& steps, std::vector<double>& rank_time_s) {
  const size_t n = std::min(steps.size(), rank_time_s.size());
  if (n == 0) return;
  if (steps[0].synchronous) {
    const double latest = *std::max_element(rank_time_s.begin(), rank_time_s.begin() + static_cast<ptrdiff_t>(n));
    for (size_t r = 0; r < n; ++r) {
      const double lag = latest - rank_time_s[r];
      if (lag <= 0.0) continue;
      steps[r].times.step_s += lag;
      steps[r].times.phase_s[static_cast<size_t>(Phase::kWait)] += lag;
      if (steps[r].layout) steps[r].layout->lag_s += lag;
    }
  }
  for (size_t r = 0; r < n; ++r) rank_time_s[r] += steps[r].times.step_s;
}

double straggler_factor(const StragglerConfig& s, uint64_t seed, int64_t step, int rank) {
  double f = 1.0;
  if (s.factors.is_array() && static_cast<size_t>(rank) < s.factors.size()) f = s.factors[rank].get<double>();
  if (s.noise == "none" || s.sigma <= 0) return f;
  Draw4 d = philox_draw(seed, Purpose::kStraggler, static_cast<uint32_t>(step), static_cast<uint32_t>(rank), 0);
  // Box-Muller in double (normal_pair rounds to float; the noise needs no more than that, but keep double here).
  const double u1 = (static_cast<double>(d.v[0]) + 0.5) * 2.3283064365386963e-10;
  const double u2 = (static_cast<double>(d.v[1]) + 0.5) * 2.3283064365386963e-10;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  if (s.noise == "normal") return f * std::max(0.0, 1.0 + s.sigma * z);
  return f * std::exp(s.sigma * z - 0.5 * s.sigma * s.sigma);
}

UnshardTotals unshard_totals(const StepCost& c) {
  UnshardTotals t;
  for (const CommChain& ch : c.chains)
    if (ch.unshard) {
      t.time_s += ch.comm_s;
      t.wait_s += ch.slot.stall_s;
    }
  return t;
}

double unshard_wait_before_s(const StepCost& c, const GradRange& range) {
  const int64_t last = std::max<int64_t>(1, c.micro_batches) - 1;
  const int64_t k = range.micro_batch < 0 || range.micro_batch >= last ? last : range.micro_batch;
  double s = 0.0;
  for (const CommChain& ch : c.chains) {
    if (!ch.unshard) continue;
    const int64_t m = ch.range.micro_batch;
    if (m < k || (m == k && (!ch.slot.backward || ch.range.begin >= range.begin))) s += ch.slot.stall_s;
  }
  return s;
}

namespace {

// share_link's compute stream: pass p's duration ([2k] forward k, [2k + 1] backward k, as StepLayout lays them) and
// start (known once every gather of the passes before it is placed), its stalls so far.
struct LinkPasses {
  std::vector<double> dur, start, stall;
  size_t known = 1;  // passes whose start is known
  LinkPasses(const StepCost& c, double f) {
    const auto& s = c.compute_s;
    const int64_t K = std::max<int64_t>(1, c.micro_batches);
    const double bwd = s[static_cast<size_t>(Phase::kBackward)] * f;
    const double last = K == 1 ? bwd : std::min(c.last_backward_s * f, bwd);
    const double earlier = K == 1 ? 0.0 : (bwd - last) / static_cast<double>(K - 1);
    for (int64_t k = 0; k < K; ++k) {
      dur.push_back(s[static_cast<size_t>(Phase::kForward)] * f / static_cast<double>(K));
      dur.push_back(k + 1 == K ? last : earlier);
    }
    start.assign(dur.size(), 0.0);
    stall.assign(dur.size(), 0.0);
    start[0] = s[static_cast<size_t>(Phase::kData)] * f;
  }
  // Starts the passes up to (and including) `next`, the pass of the next gather to place (all: dur.size()).
  void advance(size_t next) {
    for (; known < dur.size() && known <= next; ++known)
      start[known] = start[known - 1] + dur[known - 1] + stall[known - 1];
  }
};

size_t backward_pass(const GradRange& range, int64_t micro_batches) {
  const int64_t K = std::max<int64_t>(1, micro_batches);
  const int64_t k = range.micro_batch < 0 || range.micro_batch >= K - 1 ? K - 1 : range.micro_batch;
  return static_cast<size_t>(2 * k + 1);
}

}  // namespace

LinkSchedule share_link(const StepCost& c, double f, const std::vector<double>& ready_fraction,
                        const std::vector<double>& floor_s) {
  const int64_t K = std::max<int64_t>(1, c.micro_batches);
  const auto& s = c.compute_s;
  LinkPasses pass(c, f);
  std::vector<size_t> gi, gp, ci;  // the gathers (chain index, pass) and the communication stream's chains
  LinkSchedule out;
  for (size_t j = 0; j < c.chains.size(); ++j) {
    const CommChain& ch = c.chains[j];
    if (!ch.unshard) {
      ci.push_back(j);
      continue;
    }
    gi.push_back(j);
    gp.push_back(static_cast<size_t>(2 * std::clamp<int64_t>(ch.range.micro_batch, 0, K - 1) + (ch.slot.backward ? 1 : 0)));
    out.slots.push_back(ch.slot);
  }
  const size_t G = gi.size(), C = ci.size();
  const double compute_base = (s[static_cast<size_t>(Phase::kData)] + s[static_cast<size_t>(Phase::kForward)] +
                               s[static_cast<size_t>(Phase::kBackward)] + s[static_cast<size_t>(Phase::kCompress)]) * f;
  size_t g = 0, i = 0;
  double link = 0.0, chain_end = 0.0, gather_end = 0.0, rdy = 0.0;
  bool have = false;  // chain i's readiness known (every gather it waits for placed)
  auto chain_ready = [&](size_t idx) {
    const CommChain& ch = c.chains[ci[idx]];
    const double x = idx < ready_fraction.size() ? ready_fraction[idx] : -1.0;
    if (x < 0.0) {
      if (g < G) return false;
      rdy = compute_base + out.wait_s;
    } else {
      const size_t p = backward_pass(ch.range, K);
      if (g < G && (gp[g] < p || (gp[g] == p && c.chains[gi[g]].range.begin >= ch.range.begin))) return false;
      double w = 0.0;  // the stalls of its backward before the layers from range.begin on are done
      for (size_t q = 0; q < G; ++q)
        if (gp[q] == p && c.chains[gi[q]].range.begin >= ch.range.begin) w += out.slots[q].stall_s;
      rdy = pass.start[p] + x * pass.dur[p] + w;
    }
    if (idx < floor_s.size()) rdy = std::max(rdy, floor_s[idx]);
    return true;
  };
  pass.advance(G > 0 ? gp[0] : pass.dur.size());
  while (g < G || i < C) {
    double tg = std::numeric_limits<double>::infinity(), tc = tg;
    if (g < G) {
      const size_t p = gp[g];
      tg = g == 0 || gp[g - 1] != p
               ? pass.start[p]
               : std::max(gather_end, pass.start[p] + out.slots[g].issue_after * pass.dur[p] + pass.stall[p]);
    }
    if (i < C && (have || (have = chain_ready(i)))) tc = std::max(rdy, chain_end) + c.chains[ci[i]].pre_s * f;
    if (tc < tg) {  // the communication stream's chain asks first: it gets the link first
      const CommChain& ch = c.chains[ci[i]];
      const double on_link = std::max(tc, link);
      link = on_link + ch.comm_s;
      chain_end = link + ch.post_s * f;
      if (ch.has_collective) out.link_busy_s += ch.comm_s;
      out.ready_s.push_back(rdy);
      out.start_s.push_back(tc - ch.pre_s * f);
      out.end_s.push_back(chain_end);
      ++i;
      have = false;
      continue;
    }
    const size_t p = gp[g];
    UnshardSlot& slot = out.slots[g];
    const double on_link = std::max(tg, link);
    gather_end = link = on_link + c.chains[gi[g]].comm_s;
    out.link_busy_s += c.chains[gi[g]].comm_s;
    const double reach = pass.start[p] + slot.compute_before * pass.dur[p] + pass.stall[p];
    slot.start_s = on_link - pass.start[p];
    slot.stall_s = std::max(0.0, gather_end - reach);
    pass.stall[p] += slot.stall_s;
    out.wait_s += slot.stall_s;
    ++g;
    pass.advance(g < G ? gp[g] : pass.dur.size());
  }
  out.comm_end_s = chain_end;
  return out;
}

std::vector<CommChain> with_modeled_slots(std::vector<CommChain> chains, const std::vector<UnshardSlot>& slots) {
  size_t j = 0;
  for (CommChain& ch : chains)
    if (ch.unshard && j < slots.size()) ch.slot = slots[j++];
  return chains;
}

Precision compute_precision(const std::string& mode) {
  if (mode == "tf32") return Precision::kTf32;
  if (mode.rfind("bf16", 0) == 0) return Precision::kBf16;
  if (mode.rfind("fp16", 0) == 0) return Precision::kFp16;
  if (mode.rfind("fp8", 0) == 0) return Precision::kFp8;
  return Precision::kFp32;
}

CostModel::CostModel(const RunConfig& config, const Model& model)
    : CostModel(load_hardware_profile(config.cluster.hardware), static_cast<int>(config.cluster.ranks),
                model.layer_costs(), config.cluster.stragglers, static_cast<uint64_t>(config.training.seed),
                compute_precision(config.precision.mode), nccl_algo_from_name(config.cluster.nccl_algo),
                parse_precision_mode(config.precision.mode)) {
  recompute_ = config.training.activation_checkpointing;
  record_layouts_ = config.report.timeline;
}

CostModel::CostModel(std::shared_ptr<const HardwareProfile> hw, int ranks, std::vector<LayerCost> layers,
                     StragglerConfig stragglers, uint64_t seed, Precision precision,
                     std::optional<NcclAlgo> nccl_algo, PrecisionMode mode)
    : hw_(std::move(hw)),
      coll_(*hw_, ranks, nccl_algo),
      layers_(std::move(layers)),
      stragglers_(std::move(stragglers)),
      seed_(seed),
      precision_(precision),
      mode_(mode) {
  // A layer's share of the backward: its declared FLOPs, twice with an input gradient and once without (as
  // add_micro_batch prices it), else its parameter count.
  auto backward_flops = [](const LayerCost& l) { return (l.input_gradient ? 2.0 : 1.0) * l.forward_flops_per_sample; };
  double total = 0.0;
  for (const auto& l : layers_) total += backward_flops(l);
  bool by_params = total <= 0;
  if (by_params) {
    total = 0.0;
    for (const auto& l : layers_) total += static_cast<double>(l.param_end - l.param_begin);
  }
  for (const auto& l : layers_) {
    double w = by_params ? static_cast<double>(l.param_end - l.param_begin) : backward_flops(l);
    layer_weight_.push_back(total > 0 ? w / total : 0.0);
  }
}

void CostModel::add_micro_batch(StepCost& cost, int64_t samples, bool last) const {
  const HardwareProfile& hw = *hw_;
  const double b = static_cast<double>(samples);
  const double launch_s = hw.launch_overhead_us * 1e-6;
  double fwd = 0.0, bwd = 0.0;
  for (const auto& l : layers_) {
    const double params = static_cast<double>(l.param_end - l.param_begin);
    // Backward: input and weight gradients (twice the forward's GEMM FLOPs), fused attention's backward at
    // kAttentionBackwardFactor x its forward (FlashAttention-2 recomputes the attention matrix), twice the
    // forward's memory-bound traffic, and the fp32 gradient accumulated (read + written, 8 bytes a parameter).
    // A layer without an input gradient (the first, fed by data: LayerCost::input_gradient) has the weight
    // gradient alone: its GEMMs, traffic and launches once. Under activation checkpointing a checkpointed layer's
    // backward runs its forward again first.
    const double passes = l.input_gradient ? 2.0 : 1.0;
    double f = 0.0;
    if (!l.gemms.empty()) {
      double g = 0.0;
      for (const LayerGemm& s : l.gemms) g += gemm_shape_time_s(hw, b * s.rows_per_sample, s.n, s.k, precision_);
      const double attn = b * l.attention_flops_per_sample;
      const double ew = b * l.elementwise_bytes_per_sample;
      f = g + attention_time_s(hw, attn, precision_) + memory_time_s(hw, ew) + l.kernels * launch_s;
      bwd += passes * g + attention_time_s(hw, kAttentionBackwardFactor * attn, precision_) +
             memory_time_s(hw, passes * ew + 8.0 * params) + passes * l.kernels * launch_s;
    } else {
      // Shape unknown: the declared FLOPs as one GEMM whose operands are the weights (at the compute precision)
      // and the activations; the backward as two such GEMMs (input and weight gradients), each with its fixed cost.
      const double flops = b * l.forward_flops_per_sample;
      const double act = b * l.activation_bytes_per_sample;
      const double operands = precision_bytes(precision_) * params + act;
      const double gemm = gemm_time_s(hw, flops, operands, precision_);
      f = gemm + memory_time_s(hw, act) + l.kernels * launch_s;
      bwd += passes * gemm + memory_time_s(hw, passes * act + 8.0 * params) + passes * l.kernels * launch_s;
    }
    fwd += f;
    if (recompute_ && l.checkpointed) bwd += f;  // activation checkpointing: the block's forward again
  }
  cost.add_time(Phase::kForward, fwd);
  cost.add_time(Phase::kBackward, bwd);
  ++cost.micro_batches;
  if (last) cost.last_backward_s = bwd;
}

double CostModel::optimizer_bytes_per_param(const OptimizerConfig& opt) const {
  const int k = opt.kind == "sgd" ? (opt.momentum != 0.0 ? 1 : 0) : 2;
  const BytesPerParam b = bytes_per_param(mode_, k);
  const double p = b.master > 0 ? b.master : b.weights;  // the copy the optimizer steps
  // Division by S (g read and written), then the update: p, g and the state read, p and the state written.
  return 2.0 * b.gradients + (2.0 * p + b.gradients + 2.0 * b.optimizer_state);
}

void CostModel::add_optimizer(StepCost& cost, const OptimizerConfig& opt, double params) const {
  const double flops = 1.0 + (opt.kind == "sgd" ? (opt.momentum != 0.0 ? 4.0 : 2.0) : 12.0);
  cost.add_op(Phase::kOptimizer, flops * params, optimizer_bytes_per_param(opt) * params, Precision::kFp32, 2.0);
}

double CostModel::backward_done_fraction(size_t begin) const {
  double f = 0.0;
  for (size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i].param_begin >= begin) f += layer_weight_[i];
  return std::min(1.0, f);
}

double CostModel::chain_ready_s(const StepCost& c, double f, const GradRange& range) const {
  const auto& s = c.compute_s;
  const double data = s[static_cast<size_t>(Phase::kData)], fwd = s[static_cast<size_t>(Phase::kForward)] * f,
               bwd = s[static_cast<size_t>(Phase::kBackward)];
  const int64_t K = c.micro_batches;
  const double waits = unshard_wait_before_s(c, range);  // stage 3's gathers stall the compute stream
  if (range.micro_batch < 0 || K <= 1 || range.micro_batch >= K - 1) {  // the last backward: the step's sum
    const double last_bwd_start = (data + s[static_cast<size_t>(Phase::kForward)] + bwd) * f - c.last_backward_s * f;
    return last_bwd_start + c.last_backward_s * f * backward_done_fraction(range.begin) + waits;
  }
  // Micro-batch k < K - 1 on the compute stream (StepLayout): data, then K forwards of fwd / K and backwards of
  // (bwd - last) / (K - 1) each, alternating; backward k ends after k + 1 of each.
  const double each_fwd = fwd / static_cast<double>(K);
  const double each_bwd = (bwd - c.last_backward_s) * f / static_cast<double>(K - 1);
  const double k1 = static_cast<double>(range.micro_batch + 1);
  return data * f + k1 * (each_fwd + each_bwd) - each_bwd + each_bwd * backward_done_fraction(range.begin) + waits;
}

LinkSchedule CostModel::link_schedule(const StepCost& c, double f, const std::vector<double>& floor_s) const {
  std::vector<double> x;
  for (const CommChain& ch : c.chains)
    if (!ch.unshard) x.push_back(ch.range.empty() || !c.overlap_backward ? -1.0 : backward_done_fraction(ch.range.begin));
  return share_link(c, f, x, floor_s);
}

namespace {

// The communication stream's split on a shared link: its end from the schedule, exposed what ends after compute,
// overlapped the rest of the chains' own durations (a chain's wait for the link is neither).
OverlapResult linked_overlap(const LinkSchedule& l, double compute_end_s, const std::vector<double>& duration_s) {
  OverlapResult o;
  double total = 0.0;
  for (double d : duration_s) total += d;
  o.comm_end_s = l.comm_end_s;
  o.exposed_s = std::max(0.0, l.comm_end_s - compute_end_s);
  o.overlapped_s = std::max(0.0, total - o.exposed_s);
  return o;
}

bool has_unshard(const StepCost& c) {
  for (const CommChain& ch : c.chains)
    if (ch.unshard) return true;
  return false;
}

// Where each pass of a step starts on the compute stream as StepLayout lays it out (data, then per micro-batch its
// forward and its backward, each with its waits for stage-3 gathers): [2k] forward k, [2k + 1] backward k, seconds
// from the rank's step start (after lag_s).
std::vector<double> pass_starts(const StepLayout& l, const std::vector<CommChain>& chains) {
  const int64_t K = std::max<int64_t>(1, l.micro_batches);
  std::vector<double> wait(static_cast<size_t>(2 * K), 0.0), start(wait.size(), 0.0);
  for (const CommChain& ch : chains)
    if (ch.unshard && ch.range.micro_batch >= 0 && ch.range.micro_batch < K)
      wait[static_cast<size_t>(2 * ch.range.micro_batch + (ch.slot.backward ? 1 : 0))] += ch.slot.stall_s;
  const double last = K == 1 ? l.backward_s : std::min(l.last_backward_s, l.backward_s);
  const double earlier = K == 1 ? 0.0 : (l.backward_s - last) / static_cast<double>(K - 1);
  double t = l.data_s;
  for (int64_t k = 0; k < K; ++k) {
    const size_t i = static_cast<size_t>(2 * k);
    start[i] = t;
    t += l.forward_s / static_cast<double>(K) + wait[i];
    start[i + 1] = t;
    t += (k + 1 == K ? last : earlier) + wait[i + 1];
  }
  return start;
}

// One rank's StepLayout (CostModel::record_layouts): its compute stream from its modeled phases (t, straggler factor
// f applied), the exposed chain work and communication after the compute, the wait for the other ranks'
// collectives; its chains from the StepCost, the communication stream's starting at chain_start (in order), the
// unshard stream's where their passes put them.
StepLayout make_layout(const StepCost& c, double f, const StepTimes& t, double exposed_compress,
                       double exposed_communicate, double wait_collective, const std::vector<double>& chain_start) {
  const auto& ph = t.phase_s;
  StepLayout l;
  l.data_s = ph[static_cast<size_t>(Phase::kData)];
  l.forward_s = ph[static_cast<size_t>(Phase::kForward)];
  l.backward_s = ph[static_cast<size_t>(Phase::kBackward)];
  l.last_backward_s = c.last_backward_s * f;
  l.micro_batches = std::max<int64_t>(1, c.micro_batches);
  l.compress_s = c.compute_s[static_cast<size_t>(Phase::kCompress)] * f;
  l.exposed_compress_s = exposed_compress;
  l.exposed_communicate_s = exposed_communicate;
  l.wait_collective_s = wait_collective;
  l.optimizer_s = ph[static_cast<size_t>(Phase::kOptimizer)];
  const std::vector<double> pass = pass_starts(l, c.chains);
  size_t i = 0;
  for (const CommChain& ch : c.chains) {
    ChainSpan span;
    if (ch.unshard) {
      const int64_t k = std::clamp<int64_t>(ch.range.micro_batch, 0, l.micro_batches - 1);
      span.start_s = pass[static_cast<size_t>(2 * k + (ch.slot.backward ? 1 : 0))] + ch.slot.start_s;
    } else {
      span.start_s = chain_start[i++];
    }
    span.pre_s = ch.pre_s * f;
    span.comm_s = ch.comm_s;
    span.post_s = ch.post_s * f;
    span.bytes = ch.bytes;
    span.chosen = ch.chosen;
    span.kind = ch.kind;
    span.has_collective = ch.has_collective;
    span.range = ch.range;
    span.unshard = ch.unshard;
    span.slot = ch.slot;
    l.chains.push_back(span);
  }
  return l;
}

}  // namespace

std::vector<ModeledStep> CostModel::model_step(const std::vector<const StepCost*>& ranks, int64_t step) const {
  const size_t n = ranks.size();
  std::vector<ModeledStep> out(n);
  bool synchronous = false;
  for (const StepCost* c : ranks) synchronous = synchronous || c->synchronous;
  // Per rank: compute stream (with stage 3's waits for its gathers), the communication stream's chain readiness and
  // durations (the unshard stream's gathers are placed by their strategy: CommChain::unshard).
  std::vector<double> compute_end(n), opt(n), factor(n);
  std::vector<UnshardTotals> unshard(n);
  std::vector<std::optional<LinkSchedule>> link(n);  // ranks whose collectives share the link across streams
  std::vector<std::vector<double>> ready(n), dur(n);
  size_t nchains = 0;
  for (size_t r = 0; r < n; ++r) {
    const StepCost& c = *ranks[r];
    const double f = straggler_factor(stragglers_, seed_, step, static_cast<int>(r));
    factor[r] = f;
    unshard[r] = unshard_totals(c);
    if (has_unshard(c)) {  // two streams of collectives on one link: share it (share_link)
      link[r] = link_schedule(c, f);
      unshard[r].wait_s = link[r]->wait_s;
    }
    const auto& s = c.compute_s;
    const double backward_end = (s[static_cast<size_t>(Phase::kData)] + s[static_cast<size_t>(Phase::kForward)] +
                                 s[static_cast<size_t>(Phase::kBackward)]) * f + unshard[r].wait_s;
    const double untied_compress = s[static_cast<size_t>(Phase::kCompress)] * f;
    compute_end[r] = backward_end + untied_compress;
    opt[r] = (s[static_cast<size_t>(Phase::kOptimizer)] + s[static_cast<size_t>(Phase::kCommunicate)] +
              s[static_cast<size_t>(Phase::kWait)]) * f;
    for (const CommChain& ch : c.chains) {
      if (ch.unshard) continue;
      const double rdy = ch.range.empty() || !c.overlap_backward ? compute_end[r] : chain_ready_s(c, f, ch.range);
      ready[r].push_back(rdy);
      dur[r].push_back((ch.pre_s + ch.post_s) * f + ch.comm_s);
    }
    if (link[r]) ready[r] = link[r]->ready_s;
    nchains = std::max(nchains, ready[r].size());
  }
  // Synchronous: a chain starts when every rank has it ready.
  std::vector<double> ready_all(nchains, 0.0), dur_all(nchains, 0.0);
  if (synchronous) {
    for (size_t r = 0; r < n; ++r)
      for (size_t i = 0; i < ready[r].size(); ++i) {
        ready_all[i] = std::max(ready_all[i], ready[r][i]);
        dur_all[i] = std::max(dur_all[i], dur[r][i]);
      }
  }
  double comm_end_all = 0.0;
  std::vector<double> start_all(nchains, 0.0);  // each chain's start when every rank waits for it
  if (synchronous) {
    double e = 0.0;
    for (size_t i = 0; i < nchains; ++i) {
      start_all[i] = std::max(ready_all[i], e);
      e = start_all[i] + dur_all[i];
    }
    comm_end_all = e;
  }
  // Shared links, synchronous: each rank's chains again, none before every rank has it ready; the step's
  // communication ends with the last rank's.
  double linked_end = -1.0;
  for (size_t r = 0; r < n && synchronous; ++r) {
    if (!link[r]) continue;
    const double before = link[r]->wait_s;
    link[r] = link_schedule(*ranks[r], factor[r], ready_all);
    compute_end[r] += link[r]->wait_s - before;
    unshard[r].wait_s = link[r]->wait_s;
    linked_end = std::max(linked_end, link[r]->comm_end_s);
  }
  if (linked_end >= 0.0) comm_end_all = linked_end;
  std::vector<double> end(n);
  for (size_t r = 0; r < n; ++r) {
    const StepCost& c = *ranks[r];
    OverlapResult alone = schedule_chains(compute_end[r], ready[r], dur[r]);
    if (link[r]) alone = linked_overlap(*link[r], compute_end[r], dur[r]);
    double comm_end = synchronous ? comm_end_all : alone.comm_end_s;
    if (c.deferred_steps > 0) {
      // Delayed update: the communication also hides behind the next s steps' compute (one step's compute stream
      // is compute_end + optimizer).
      const double step_compute = compute_end[r] + opt[r];
      alone = defer_chains(alone, compute_end[r], step_compute, c.deferred_steps);
      OverlapResult all;
      all.comm_end_s = comm_end;
      all.exposed_s = std::max(0.0, comm_end - compute_end[r]);
      double total = 0.0;
      for (double d : synchronous ? dur_all : dur[r]) total += d;
      all.overlapped_s = total - all.exposed_s;
      comm_end = defer_chains(all, compute_end[r], step_compute, c.deferred_steps).comm_end_s;
    }
    end[r] = std::max(compute_end[r], comm_end) + opt[r];
    ModeledStep& m = out[r];
    if (link[r]) m.unshard_slots = link[r]->slots;
    // Stage 3's gathers: the compute stream's waits for them are exposed, the rest of their time ran under compute.
    m.exposed_s = alone.exposed_s + unshard[r].wait_s;
    m.overlapped_s = alone.overlapped_s + std::max(0.0, unshard[r].time_s - unshard[r].wait_s);
    auto& ph = m.times.phase_s;
    const double f = factor[r];
    for (Phase p : {Phase::kData, Phase::kForward, Phase::kBackward, Phase::kOptimizer})
      ph[static_cast<size_t>(p)] = c.compute_s[static_cast<size_t>(p)] * f;
    ph[static_cast<size_t>(Phase::kOptimizer)] += (c.compute_s[static_cast<size_t>(Phase::kCommunicate)] +
                                                   c.compute_s[static_cast<size_t>(Phase::kWait)]) * f;
    // Exposed chain time splits between compress and communicate by the communication stream's chains' composition.
    double chain_compute = 0.0, chain_total = 0.0;
    for (const CommChain& ch : c.chains) {
      if (ch.unshard) continue;
      chain_compute += (ch.pre_s + ch.post_s) * f;
      chain_total += (ch.pre_s + ch.post_s) * f + ch.comm_s;
    }
    const double exposed_compress = chain_total > 0 ? alone.exposed_s * chain_compute / chain_total : 0.0;
    ph[static_cast<size_t>(Phase::kCompress)] = c.compute_s[static_cast<size_t>(Phase::kCompress)] * f +
                                                exposed_compress;
    const double exposed_communicate = alone.exposed_s - exposed_compress;
    ph[static_cast<size_t>(Phase::kCommunicate)] = exposed_communicate + unshard[r].wait_s;
    double bytes = 0.0;  // on the wire (CommChain::wire_bytes), as the host communicator counts a measured step
    for (const CommChain& ch : c.chains) bytes += ch.wire_bytes;
    bytes += c.served_bytes;  // a co-located server shard's pulls to the other workers (StepCost::add_served_bytes)
    m.times.bytes_sent = static_cast<uint64_t>(bytes);
    if (record_layouts_) {
      std::vector<double> starts;  // the communication stream's chains
      double e = 0.0;
      for (size_t i = 0; i < ready[r].size(); ++i) {
        starts.push_back(synchronous ? start_all[i] : std::max(ready[r][i], e));
        e = starts.back() + dur[r][i];
      }
      if (link[r]) starts = link[r]->start_s;
      const double wait_collective = std::max(0.0, std::max(0.0, comm_end - compute_end[r]) - alone.exposed_s);
      StepCost placed;  // the gathers where the shared link put them
      if (link[r]) {
        placed = c;
        placed.chains = with_modeled_slots(c.chains, link[r]->slots);
      }
      m.layout = std::make_shared<StepLayout>(make_layout(link[r] ? placed : c, f, m.times, exposed_compress,
                                                          exposed_communicate, wait_collective, starts));
    }
  }
  const double step_all = n == 0 ? 0.0 : *std::max_element(end.begin(), end.end());
  for (size_t r = 0; r < n; ++r) {
    ModeledStep& m = out[r];
    m.synchronous = synchronous;
    m.times.step_s = synchronous ? step_all : end[r];
    double busy = 0.0;
    for (size_t p = 0; p < kPhaseCount; ++p)
      if (p != static_cast<size_t>(Phase::kWait)) busy += m.times.phase_s[p];
    m.times.phase_s[static_cast<size_t>(Phase::kWait)] = std::max(0.0, m.times.step_s - busy);
  }
  return out;
}

}  // namespace gs
