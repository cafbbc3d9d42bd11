// The modeled clock of a run: prices the model's declared ops per micro-batch, lays each rank's step out on a compute
// stream and a communication stream (DDP bucket overlap), applies stragglers and, for synchronous steps, waits for
// the slowest rank. Pure scheduling functions (schedule_chains, straggler_factor) are exposed for tests; a new
// modeled effect is one more term in model_step.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/config/run_config.h"
#include "sim/cost/step_cost.h"
#include "sim/model/model.h"

namespace gs {

// DDP overlap of one rank's communication chains: chain i starts at max(ready_s[i], end of chain i-1) and runs
// duration_s[i]. exposed_s = max(0, end of the last chain - compute_end_s), the communication not hidden behind
// compute that ends at compute_end_s; overlapped_s = sum(duration_s) - exposed_s. Times in seconds from step start.
struct OverlapResult {
  double comm_end_s = 0.0;
  double exposed_s = 0.0;
  double overlapped_s = 0.0;
};
OverlapResult schedule_chains(double compute_end_s, const std::vector<double>& ready_s,
                              const std::vector<double>& duration_s);

// Delayed update (sync.staleness s > 0, docs/design.md, section 2): the chains of step t may run under the compute of steps
// t+1..t+s, so a step's communication is exposed only where, in steady state, it does not fit: past the window of s
// more steps of compute (latency: comm_end_s - compute_end_s - s * step_compute_s) or where the communication stream
// is busier than the compute stream (throughput: total chain duration - step_compute_s, the bound that s cannot
// remove). same_step is schedule_chains' result for the step alone; step_compute_s is one step's whole compute
// stream (through the optimizer), seconds. s = 0 returns same_step unchanged.
OverlapResult defer_chains(const OverlapResult& same_step, double compute_end_s, double step_compute_s,
                           int64_t deferred_steps);

// Straggler multiplier of rank's compute at step: factors[rank] (1 when absent) x noise, where noise is
// max(0, 1 + sigma Z) (normal) or exp(sigma Z - sigma^2/2) (lognormal, mean 1), Z standard normal from Philox
// (kernels/rng.h, Purpose::kStraggler, counter (step, rank)). noise "none" or sigma 0: the factor alone.
double straggler_factor(const StragglerConfig& s, uint64_t seed, int64_t step, int rank);

// ZeRO stage 3's parameter gathers (CommChain::unshard) in one rank's step: their whole time on the unshard stream
// and the compute stream's waits for them (the exposed part), seconds.
struct UnshardTotals {
  double time_s = 0.0;
  double wait_s = 0.0;
};
UnshardTotals unshard_totals(const StepCost& c);
// The compute stream's waits for stage-3 gathers before a chain tied to `range` becomes ready: all of the earlier
// micro-batches', its own micro-batch's forward's, and its backward's before the layers from range.begin on are done
// (the backward runs the layers in reverse). Seconds.
double unshard_wait_before_s(const StepCost& c, const GradRange& range);

// Link sharing (docs/cost-model.md, "Link sharing"): one rank's step whose collectives run on two streams (ZeRO
// stage 3's parameter gathers on the unshard stream, CommChain::unshard, beside the communication stream's chains)
// with the rank's one link shared. The compute stream runs data, then per micro-batch its forward and backward
// (forward / K each; the backwards as StepLayout lays them), each pass stalling before a layer until its gather is
// done; a gather is issued at its pass's start (the first) or when the layer before it starts and the previous gather
// is done (UnshardSlot::issue_after); a chain on the communication stream starts when it is ready and the previous
// chain is done: chain_ready_s's point of its backward (ready_fraction[i] of it done, with the stalls before it), or
// compute_end where ready_fraction[i] < 0 (not tied to backward, overlap off); never before floor_s[i] when given
// (the other ranks' readiness). It asks for
// the link after its pre work. The link serves each collective whole, in the order they ask for it (FIFO; ties: the
// gather first). Straggler factor f scales the compute. Times in seconds from the rank's step start.
struct LinkSchedule {
  std::vector<UnshardSlot> slots;  // per unshard chain, in chain order: start_s (on the link) and stall_s re-placed
  std::vector<double> ready_s, start_s, end_s;  // per communication-stream chain (chains without unshard, in order)
  double wait_s = 0.0;       // the compute stream's stalls for the gathers, summed
  double comm_end_s = 0.0;   // when the communication stream's last chain ends (0: none)
  double link_busy_s = 0.0;  // the collectives' time on the link (gathers and chains' comm_s), summed
};
LinkSchedule share_link(const StepCost& c, double f, const std::vector<double>& ready_fraction,
                        const std::vector<double>& floor_s = {});
// The chains with each unshard chain's slot replaced by the modeled step's (ModeledStep::unshard_slots, when set).
std::vector<CommChain> with_modeled_slots(std::vector<CommChain> chains, const std::vector<UnshardSlot>& slots);

// One chain (bucket) of a rank's modeled step on its communication stream (StepLayout), or one stage-3 parameter
// gather on its unshard stream (unshard).
struct ChainSpan {
  double start_s = 0.0;  // when it starts, seconds from the rank's step start (after StepLayout::lag_s)
  double pre_s = 0.0;    // its compute before the collectives (encode), seconds, straggler factor applied
  double comm_s = 0.0;   // its collectives and point-to-point transfers
  double post_s = 0.0;   // its compute after them (decode)
  double bytes = 0.0;    // NCCL nBytes of its collectives
  CollectiveCost chosen;  // the last collective's algorithm and protocol
  CollectiveKind kind = CollectiveKind::kAllReduce;  // and its kind
  bool has_collective = false;
  GradRange range;        // the gradient elements it carries (empty: not tied to backward); unshard: the parameters
  bool unshard = false;   // a stage-3 parameter gather (CommChain::unshard): start_s is where its pass puts it
  UnshardSlot slot;       // its pass, layer and the compute stream's wait for it (unshard only)
};

// Where one rank's modeled step puts its work (report.timeline; sim/report/timeline.h draws it), seconds. The
// compute stream, in order from the step start: lag_s waiting for the rank furthest behind (carry_rank_clocks),
// data_s, micro_batches forwards and backwards (each forward forward_s / K; the backwards (backward_s -
// last_backward_s) / (K - 1) each, the last last_backward_s), compress_s, the communication not hidden behind compute
// (exposed_compress_s, exposed_communicate_s: the phases compress and communicate add to the report), then
// wait_collective_s for the other ranks' chains, optimizer_s, and the wait for the slowest rank up to the step's end.
// ZeRO stage 3: each pass also holds the compute stream's waits for its parameter gathers (the unshard chains'
// slot.stall_s, at slot.compute_before of the pass's compute; phase communicate). Every slice of it is one of the
// report's phases, so they add up to the modeled step. The communication stream: one ChainSpan per chain (the
// unshard stream's gathers among them, unshard set).
struct StepLayout {
  double lag_s = 0.0, data_s = 0.0, forward_s = 0.0, backward_s = 0.0, last_backward_s = 0.0, compress_s = 0.0;
  double exposed_compress_s = 0.0, exposed_communicate_s = 0.0, wait_collective_s = 0.0, optimizer_s = 0.0;
  int64_t micro_batches = 1;
  std::vector<ChainSpan> chains;
  // The loader's work on this step's batch on the rank's clock (seconds from the run's start; the lockstep clock's
  // prefetch recurrence, storage_model.h); negative: no loader (timing-only runs, data.prefetch 0 reads in data_s).
  double fetch_begin_s = -1.0, fetch_end_s = -1.0;
};

// One rank's modeled step (phase times in the measured clock's keys) and its communication split.
struct ModeledStep {
  StepTimes times;
  double exposed_s = 0.0;     // communication (and chain compute) not hidden behind compute; stage 3: with the
                              // compute stream's waits for the parameter gathers
  double overlapped_s = 0.0;  // communication hidden behind compute (backward; stage 3: the gathers' hidden part)
  bool synchronous = false;   // the step had a collective: every rank waited for the slowest
  // ZeRO stage 3: its gathers' slots as the shared link placed them (share_link), in chain order; empty otherwise.
  std::vector<UnshardSlot> unshard_slots;
  // When CostModel::record_layouts() is on (report.timeline); null otherwise (a pointer: steps are kept per rank and
  // step for the whole run, and most runs draw no timeline).
  std::shared_ptr<StepLayout> layout;
};

// Carries the ranks' modeled clocks from step to step. On steps without a collective (local SGD between averages,
// independent) ranks drift apart by their stragglers; a synchronous step starts only when the rank furthest behind
// arrives, so each rank's lag behind it is added to that rank's wait phase and step_s. rank_time_s[r] is rank r's
// modeled time (seconds) before the step, and after it on return. When every step is synchronous no rank ever lags and
// the steps are left exactly as they were.
void carry_rank_clocks(std::vector<ModeledStep>& steps, std::vector<double>& rank_time_s);

// The precision model compute runs at for a precision.mode (fp32 -> fp32, tf32 -> tf32, bf16_mixed -> bf16,
// fp16_* -> fp16, fp8_mixed -> fp8).
Precision compute_precision(const std::string& precision_mode);

// Fused attention's backward over its forward FLOPs (FlashAttention-2, Dao 2023, section 3: five matrix products
// against the forward's two, the attention matrix recomputed).
constexpr double kAttentionBackwardFactor = 2.5;

class CostModel {
 public:
  // Loads config.cluster.hardware (throws gs::Error as load_hardware_profile) and the model's layer costs.
  CostModel(const RunConfig& config, const Model& model);
  // Same from parts (tests).
  CostModel(std::shared_ptr<const HardwareProfile> hw, int ranks, std::vector<LayerCost> layers,
            StragglerConfig stragglers, uint64_t seed, Precision precision = Precision::kFp32,
            std::optional<NcclAlgo> nccl_algo = std::nullopt, PrecisionMode mode = PrecisionMode::kFp32);

  const HardwareProfile& hardware() const { return *hw_; }
  const CollectiveModel& collectives() const { return coll_; }
  StepCost make_step_cost() const { return StepCost(hw_.get(), &coll_); }

  // Prices forward and backward of one micro-batch of `samples` per layer (compute_model.h's terms, summed):
  // forward = its GEMMs (declared shapes with rows x samples, or the declared FLOPs as GEMM work over the weights
  // and activations) + fused attention + memory-bound traffic (elementwise bytes, or activation bytes) + its kernels'
  // launches; backward = 2 x the GEMMs + kAttentionBackwardFactor x the attention + 2 x the traffic + 8 bytes per
  // parameter (fp32 gradient read and written) + twice the launches. Under training.activation_checkpointing the
  // backward also runs the forward of every layer marked checkpointed again (the recomputation).
  void add_micro_batch(StepCost& cost, int64_t samples, bool last) const;
  // Optimizer step over `params` parameters, including the division by S (the gradient read and written): SGD reads
  // p, g (and momentum) and writes p (and momentum); Adam/AdamW read p, g, m, v and write p, m, v. Each tensor at
  // its size in the precision mode (bytes_per_param): fp32 where a mode keeps fp32 master weights, gradients and
  // state (fp32, tf32, the mixed modes), fp16 under fp16_pure (model.half(): torch.optim's state is made like the
  // weights), so pure fp16 moves half of fp32's bytes.
  void add_optimizer(StepCost& cost, const OptimizerConfig& opt, double params) const;
  // HBM bytes per parameter of that optimizer step (read + written).
  double optimizer_bytes_per_param(const OptimizerConfig& opt) const;

  // The modeled step of every rank from the ranks' records of that step (ranks[r] is rank r's); with
  // record_layouts() each ModeledStep carries its StepLayout.
  std::vector<ModeledStep> model_step(const std::vector<const StepCost*>& ranks, int64_t step) const;
  // Whether model_step records each step's layout (report.timeline; from the config, settable for tests).
  bool record_layouts() const { return record_layouts_; }
  void set_record_layouts(bool on) { record_layouts_ = on; }

  // Fraction of a micro-batch's backward done once every gradient element >= begin is produced (backward runs in
  // reverse layer order), by declared backward FLOPs (by parameter count when no FLOPs are declared).
  double backward_done_fraction(size_t begin) const;
  // When a chain tied to gradient range `range` becomes ready on a rank whose compute runs at straggler factor f:
  // during the backward of its micro-batch (range.micro_batch; -1 the last), once the layers from range.begin on are
  // done (seconds from the step start), later by the stage-3 gather waits on the compute stream before that point
  // (unshard_wait_before_s).
  double chain_ready_s(const StepCost& c, double f, const GradRange& range) const;
  // share_link for a rank's step (each chain's ready_fraction from backward_done_fraction; -1 where its range is
  // empty or overlap_backward is off).
  LinkSchedule link_schedule(const StepCost& c, double f, const std::vector<double>& floor_s = {}) const;

 private:
  std::shared_ptr<const HardwareProfile> hw_;
  CollectiveModel coll_;
  std::vector<LayerCost> layers_;
  std::vector<double> layer_weight_;  // backward share of each layer (sums to 1)
  StragglerConfig stragglers_;
  uint64_t seed_;
  Precision precision_;
  PrecisionMode mode_;  // precision.mode: the sizes of the optimizer's tensors
  bool recompute_ = false;  // training.activation_checkpointing
  bool record_layouts_ = false;  // report.timeline
};

}  // namespace gs
