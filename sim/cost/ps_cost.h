// The parameter server's price on the modeled clock (used by sim/strategy/parameter_server.cpp): every push and pull
// is one message per shard through LinkQueues (link_model.h), so a shard host's link carries every worker's traffic in
// modeled order, and each shard's optimizer steps queue on its device.
//
// Devices: worker r is device r (its GPU); shard p lives on device p (co-located, p < N) or on device N + p
// (dedicated: a device of its own with the profile's link). Shard p holds elements [p ceil(n/S), (p+1) ceil(n/S)).
// A push of B bytes (the worker's whole payload: dense 4n, fp16_pure 2n, or a compressed message) is S messages of
// B / S, one to each shard; the one to a shard on the worker's own device does not cross the wire. A pull of B bytes
// is S messages of B / S from the shards. Messages of one push or pull are handed to the links together, in the order
// of shards w+1, w+2, ... (mod S) for worker w (a rotation: workers that push at once spread over the shard hosts, as
// all-to-all schedules do). On idle links a push costs alpha + (S-1) B / (S W) co-located on a shard host, alpha +
// B / W otherwise, as CollectiveModel::p2p_s; with N workers pushing at once to one shard the host's receive link
// carries (N-1) B (co-located) and the last push lands at alpha + (N-1) B / W.
// Server work (SSP and asynchronous: one optimizer step per push; apply_s per shard, from its memory traffic on the
// shard's device, CostModel::add_optimizer): shard p starts a push's step when that push's part has arrived and its
// previous step is done, in the order of the calls (first come, first served); the push is applied when every shard is
// done. BSP applies once per clock after the last push (the caller adds apply_s to the last arrival).
// Extend: another placement of shards is shard_device; another message order is the rotation in push / pull.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "sim/config/run_config.h"
#include "sim/cost/collective_model.h"
#include "sim/cost/link_model.h"

namespace gs {

class ParameterServerLinks {
 public:
  // workers >= 1, shards >= 1 (co-located: shards <= workers). Latency and bandwidth: coll's point-to-point terms.
  // Throws gs::Error for counts out of range.
  ParameterServerLinks(const CollectiveModel& coll, int workers, int shards, bool dedicated);

  int shard_device(int shard) const { return dedicated_ ? workers_ + shard : shard; }
  // Messages one push (or pull) of `worker` puts on the wire: S, less the shard on its own device.
  int remote_shards(int worker) const;

  // Worker's push of `bytes` handed to the links at ready_s: returns per shard when it has its part (a shard on the
  // worker's own device: ready_s).
  std::vector<double> push(int worker, double ready_s, double bytes);
  // Worker's pull of `bytes` from every shard, starting at ready_s: returns when the worker has every part.
  double pull(int worker, double ready_s, double bytes);
  // One push's server work (SSP, asynchronous): apply_s on every shard, shard p from max(arrived_s[p], its previous
  // step's end); returns when every shard is done.
  double apply(const std::vector<double>& arrived_s, double apply_s);

  const LinkQueues& links() const { return links_; }

 private:
  int workers_, shards_;
  bool dedicated_;
  LinkQueues links_;
  std::vector<double> shard_busy_s_;  // end of each shard's last optimizer step
};

// One BSP clock of the lock-step (timing-only) clock: every worker hands its push (push_bytes[w]) over at time 0, the
// server applies after the last part has arrived (apply_s, shards in parallel), then every worker pulls pull_bytes in
// rank order. Seconds: pushes_s = when the last push has arrived at every shard; pull_s[w] = worker w's pull, from the
// end of the apply until it has every part. The clock's communication is pushes_s + max(pull_s) for every worker (the
// next clock starts when the last pull is in).
struct BspClockPrice {
  double pushes_s = 0.0;
  std::vector<double> pull_s;
};
BspClockPrice price_bsp_clock(const CollectiveModel& coll, int shards, bool dedicated,
                              const std::vector<double>& push_bytes, double pull_bytes, double apply_s);

// Where the parameter server's modeled clock is a bound rather than the model's estimate, and why (report
// timing.modeled.bound, "lower": the modeled times can only be too short; "upper": too long). nullopt: none known (every
// strategy but the parameter server; BSP with its own clock).
struct ModeledBound {
  std::string kind;    // "lower" | "upper"
  std::string reason;  // one sentence naming what is left out
};
std::optional<ModeledBound> parameter_server_bound(const RunConfig& config);

}  // namespace gs
