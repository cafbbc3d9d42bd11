// StepCost: what one rank does in one optimizer step, priced on the run's hardware profile as it is recorded. The
// rank loop prices the model's forward and backward itself; strategies, compressors and precision add the rest.
// Usage, from anything that gets a StepInput (`in.cost` is never null):
//   in.cost->add_pass(Phase::kCompress, bytes);                         // memory-bound pass: encode, decode, cast,
//                                                                       // one top-k pass (bytes read + written)
//   in.cost->add_op(Phase::kCompress, flops, bytes, Precision::kBf16);  // a kernel with FLOPs at a format's rate
//   in.cost->add_collective(CollectiveKind::kAllGather, bytes, GradRange{b.begin, b.end});
//       // one bucket: starts when backward has produced gradient elements [begin, end) and the previous collective
//       // is done (DDP overlap); bytes = NCCL's nBytes (collective_model.h), i.e. the wire format's bytes;
//       // GradRange{b.begin, b.end, k}: produced by micro-batch k's backward instead of the last one's
//   in.cost->add_pass(Phase::kCompress, bytes, GradRange{b.begin, b.end});  // work on that bucket's chain: before
//                                                                       // its collective if added first, else after
//   in.cost->add_collective(CollectiveKind::kAllReduce, bytes);         // no range: after backward, not overlapped
//   in.cost->add_unshard_gather(bytes, GradRange{l.param_begin, l.param_end, k}, slot);
//       // ZeRO stage 3: one layer's parameter all-gather on the unshard stream, placed in its pass by the strategy
//       // (UnshardSlot); the compute stream waits slot.stall_s for it (exposed), the rest runs under compute
//   in.cost->add_p2p(bytes);                                            // push or pull to one peer (parameter server)
//   in.cost->add_p2p_received(bytes);                                   // a pull: priced, counted by its sender
//   in.cost->add_p2p_time(seconds, sent, bytes);                        // transfers priced by LinkQueues
//   in.cost->add_served_bytes(bytes);                                   // sent for others, priced at the receivers
//   in.cost->add_time(Phase::kOptimizer, seconds);                      // anything priced elsewhere
//   in.cost->overlap_backward = false;  in.cost->deferred_steps = s;     // when chains may start / must end
// Extend: a new kind of work is one more add_* here that prices into the same records.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "sim/cost/collective_model.h"
#include "sim/cost/compute_model.h"
#include "sim/core/clock.h"

namespace gs {

// Gradient elements [begin, end) of the flat buffer (a bucket). Empty (begin == end) = not tied to backward.
struct GradRange {
  size_t begin = 0;
  size_t end = 0;
  // The micro-batch whose backward produces the range (0-based; a chain per micro-batch, e.g. ZeRO's reduce-scatter
  // of every micro-batch); -1: the step's last micro-batch, after which the accumulated gradient is complete.
  int64_t micro_batch = -1;
  bool empty() const { return end <= begin; }
};

// Where a stage-3 parameter all-gather (StepCost::add_unshard_gather) runs: on the unshard stream (FSDP's), beside
// the communication stream, during one pass (forward or backward) of one micro-batch, as the strategy's prefetch
// schedule placed it. Times in seconds from the start of the pass on the compute stream (the pass's own stalls
// included), straggler factor 1.
struct UnshardSlot {
  bool backward = false;        // the pass: false forward, true backward (the re-gather before it)
  size_t unit = 0;              // the layer (index into Model::layer_costs()) whose parameters it gathers
  double start_s = 0.0;         // when the gather starts, from the pass's start
  double stall_s = 0.0;         // how long the compute stream waits for it before the layer computes (exposed)
  double compute_before = 0.0;  // fraction of the pass's compute done before that wait (the layers before it)
  // Fraction of the pass's compute done when it may be issued: the layer before it (in the pass's order) starts;
  // the pass's first gather is issued at the pass's start (0). The modeled clock re-places the gather there with
  // the link shared (cost_model.h, share_link): start_s is then when it gets the link, stall_s the wait that gives.
  double issue_after = 0.0;
};

// One bucket's (or one untied) chain on the communication stream: pre work, the collectives, post work. Or, with
// unshard set, one parameter all-gather on the unshard stream (UnshardSlot), which the communication stream's
// schedule (schedule_chains) skips.
struct CommChain {
  GradRange range;
  double pre_s = 0.0;    // compute on the chain before its first collective (e.g. encode), seconds
  double comm_s = 0.0;   // collectives and p2p, seconds
  double post_s = 0.0;   // compute after (e.g. decode-sum), seconds
  double bytes = 0.0;    // NCCL nBytes of its collectives
  // Bytes this rank puts on the wire: per collective nBytes x nccl-tests' bus-bandwidth factor (all-reduce
  // 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, broadcast 1; the host communicator's ring counts the same), plus
  // each point-to-point transfer it sends, whole (a parameter server worker's push; a pull is counted by the rank
  // that sends it, add_p2p_received).
  double wire_bytes = 0.0;
  CollectiveCost chosen;  // the last collective's choice (algorithm, protocol) for the report
  CollectiveKind kind = CollectiveKind::kAllReduce;  // the last collective's kind
  bool has_collective = false;
  bool unshard = false;  // a stage-3 parameter gather on the unshard stream (range: the layer's parameters)
  UnshardSlot slot;      // where it runs (unshard only)
};

class StepCost {
 public:
  StepCost() = default;
  explicit StepCost(const HardwareProfile* hw, const CollectiveModel* coll) : hw_(hw), coll_(coll) {}

  void clear() {
    compute_s.fill(0.0);
    chain_compute_s.fill(0.0);
    last_backward_s = 0.0;
    chains.clear();
    micro_batches = 0;
    synchronous = false;
    overlap_backward = true;
    deferred_steps = 0;
    served_bytes = 0.0;
  }
  // A kernel: roofline time on the profile (compute_model.h), added to `phase`.
  void add_op(Phase phase, double flops, double bytes, Precision precision, double launches = 1.0,
              GradRange range = {}) {
    add_time(phase, op_time_s(*hw_, flops, bytes, precision, launches), range);
  }
  // A memory-bound pass of `bytes` (read + written).
  void add_pass(Phase phase, double bytes, GradRange range = {}, double launches = 1.0) {
    add_time(phase, pass_time_s(*hw_, bytes, launches), range);
  }
  // Seconds of GPU work in `phase`; with a range, on that bucket's communication chain.
  void add_time(Phase phase, double seconds, GradRange range = {}) {
    if (range.empty()) {
      compute_s[static_cast<size_t>(phase)] += seconds;
      return;
    }
    CommChain& c = chain(range);
    (c.has_collective ? c.post_s : c.pre_s) += seconds;
    chain_compute_s[static_cast<size_t>(phase)] += seconds;
  }
  // A collective over all ranks; priced with NCCL's lowest-time choice. Makes the step synchronous.
  void add_collective(CollectiveKind kind, double bytes, GradRange range = {}) {
    CollectiveCost c = coll_->best(kind, bytes);
    CommChain& ch = chain(range);
    ch.comm_s += c.time_s;
    ch.bytes += bytes;
    ch.wire_bytes += bytes * CollectiveModel::busbw_factor(kind, coll_->ranks());
    ch.chosen = c;
    ch.kind = kind;
    ch.has_collective = true;
    synchronous = true;
  }
  // ZeRO stage 3: the all-gather of one layer's parameters (`bytes`: NCCL's nBytes, the gathered layer in the
  // compute format; `params`: the layer's parameter range and micro-batch k >= 0) on the unshard stream, its own
  // chain, placed where `slot` says. Priced with NCCL's lowest-time choice, its whole time on the chain (what runs
  // under compute is overlapped, slot.stall_s is exposed: cost_model.h). Makes the step synchronous.
  void add_unshard_gather(double bytes, GradRange params, const UnshardSlot& slot) {
    const CollectiveCost c = coll_->best(CollectiveKind::kAllGather, bytes);
    chains.push_back(CommChain{});
    CommChain& ch = chains.back();
    ch.range = params;
    ch.comm_s = c.time_s;
    ch.bytes = bytes;
    ch.wire_bytes = bytes * CollectiveModel::busbw_factor(CollectiveKind::kAllGather, coll_->ranks());
    ch.chosen = c;
    ch.kind = CollectiveKind::kAllGather;
    ch.has_collective = true;
    ch.unshard = true;
    ch.slot = slot;
    synchronous = true;
  }
  // A point-to-point transfer of `bytes` to one peer (not synchronous).
  void add_p2p(double bytes, GradRange range = {}) {
    CommChain& ch = chain(range);
    ch.comm_s += coll_->p2p_s(bytes);
    ch.bytes += bytes;
    ch.wire_bytes += bytes;
  }
  // A point-to-point transfer this rank receives and waits for (a parameter server's pull): priced like add_p2p,
  // not counted in the rank's wire bytes (the sender counts it).
  void add_p2p_received(double bytes, GradRange range = {}) {
    CommChain& ch = chain(range);
    ch.comm_s += coll_->p2p_s(bytes);
    ch.bytes += bytes;
  }
  // Point-to-point transfers priced elsewhere (a parameter server's pushes and pulls through LinkQueues,
  // link_model.h): `seconds` on the chain, `sent_bytes` this rank puts on the wire.
  void add_p2p_time(double seconds, double sent_bytes, double bytes, GradRange range = {}) {
    CommChain& ch = chain(range);
    ch.comm_s += seconds;
    ch.bytes += bytes;
    ch.wire_bytes += sent_bytes;
  }
  // Bytes this rank sends for other ranks without waiting on them: a co-located parameter-server shard sends the
  // other workers' pulls. Counted in the step's wire bytes; their time is in the receivers' transfers
  // (add_p2p_time, queued on this rank's send link).
  void add_served_bytes(double bytes) { served_bytes += bytes; }
  const HardwareProfile& hardware() const { return *hw_; }
  const CollectiveModel& collectives() const { return *coll_; }

  // Read by the modeled clock (cost_model.h).
  std::array<double, kPhaseCount> compute_s{};        // untied GPU work per phase (forward, backward, optimizer, ...)
  std::array<double, kPhaseCount> chain_compute_s{};  // of which on communication chains (reported per phase)
  double last_backward_s = 0.0;  // the last micro-batch's backward (buckets become ready during it)
  int64_t micro_batches = 0;     // micro-batches priced (CostModel::add_micro_batch; the timeline draws each)
  std::vector<CommChain> chains;  // in order of first use
  bool synchronous = false;       // a collective was recorded: every rank waits for the slowest
  // False: every chain becomes ready only when the whole backward is done (apex's delay_allreduce), so nothing
  // overlaps backward. Set by the strategy (sync.overlap).
  bool overlap_backward = true;
  // Delayed update (sync.staleness s): this step's chains may also run under the compute of the next s steps; the
  // modeled clock exposes only what does not fit (cost_model.h, defer_chains).
  int64_t deferred_steps = 0;
  double served_bytes = 0.0;  // add_served_bytes: sent for others (priced at the receivers)

 private:
  CommChain& chain(GradRange range) {
    for (auto& c : chains)
      if (!c.unshard && c.range.begin == range.begin && c.range.end == range.end && c.range.micro_batch == range.micro_batch)
        return c;
    chains.push_back(CommChain{});
    chains.back().range = range;
    return chains.back();
  }
  const HardwareProfile* hw_ = nullptr;
  const CollectiveModel* coll_ = nullptr;
};

}  // namespace gs
