// The parameter server's price (ps_cost.h): its devices, the order of a push's and a pull's messages, the shards'
// optimizer queues, the lock-step BSP clock, and where the result is a bound.
#include "sim/cost/ps_cost.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace gs {

namespace {
int device_count(int workers, int shards, bool dedicated) {
  GS_EXPECT(workers >= 1 && shards >= 1 && (dedicated || shards <= workers),
            fmt::format("ParameterServerLinks: expected workers >= 1 and 1 <= shards{}, got {} workers, {} shards",
                        dedicated ? "" : " <= workers (co-located)", workers, shards));
  return dedicated ? workers + shards : workers;
}
}  // namespace

ParameterServerLinks::ParameterServerLinks(const CollectiveModel& coll, int workers, int shards, bool dedicated)
    : workers_(workers),
      shards_(shards),
      dedicated_(dedicated),
      links_(device_count(workers, shards, dedicated), coll.p2p_bandwidth_Bps(), coll.p2p_latency_s()),
      shard_busy_s_(static_cast<size_t>(shards), 0.0) {}

int ParameterServerLinks::remote_shards(int worker) const {
  return !dedicated_ && worker < shards_ ? shards_ - 1 : shards_;
}

std::vector<double> ParameterServerLinks::push(int worker, double ready_s, double bytes) {
  std::vector<double> arrived(static_cast<size_t>(shards_), ready_s);
  const double part = bytes / shards_;
  for (int k = 1; k <= shards_; ++k) {
    const int p = (worker + k) % shards_;
    const int host = shard_device(p);
    if (host == worker) continue;  // the worker's own shard: no message
    arrived[static_cast<size_t>(p)] = links_.transfer(worker, host, ready_s, part);
  }
  return arrived;
}

double ParameterServerLinks::pull(int worker, double ready_s, double bytes) {
  double done = ready_s;
  const double part = bytes / shards_;
  for (int k = 1; k <= shards_; ++k) {
    const int host = shard_device((worker + k) % shards_);
    if (host == worker) continue;
    done = std::max(done, links_.transfer(host, worker, ready_s, part));
  }
  return done;
}

double ParameterServerLinks::apply(const std::vector<double>& arrived_s, double apply_s) {
  GS_EXPECT(arrived_s.size() == shard_busy_s_.size(),
            fmt::format("ParameterServerLinks::apply: expected {} arrival times, got {}", shard_busy_s_.size(),
                        arrived_s.size()));
  double done = 0.0;
  for (size_t p = 0; p < shard_busy_s_.size(); ++p) {
    double& busy = shard_busy_s_[p];
    busy = std::max(arrived_s[p], busy) + apply_s;
    done = std::max(done, busy);
  }
  return done;
}

BspClockPrice price_bsp_clock(const CollectiveModel& coll, int shards, bool dedicated,
                              const std::vector<double>& push_bytes, double pull_bytes, double apply_s) {
  const int workers = static_cast<int>(push_bytes.size());
  ParameterServerLinks links(coll, workers, shards, dedicated);
  BspClockPrice out;
  for (int w = 0; w < workers; ++w)
    for (double t : links.push(w, 0.0, push_bytes[static_cast<size_t>(w)])) out.pushes_s = std::max(out.pushes_s, t);
  const double applied = out.pushes_s + apply_s;
  for (int w = 0; w < workers; ++w) out.pull_s.push_back(links.pull(w, applied, pull_bytes) - applied);
  return out;
}

std::optional<ModeledBound> parameter_server_bound(const RunConfig& c) {
  if (c.sync.kind != "parameter_server") return std::nullopt;
  const StragglerConfig& s = c.cluster.stragglers;
  const bool stragglers = (s.factors.is_array() && !s.factors.empty()) || (s.noise != "none" && s.sigma > 0);
  if (c.training.mode == "timing" && stragglers)
    return ModeledBound{"upper", "timing-only parameter server with stragglers: every push of a clock is priced as "
                                 "handed to the links at once, so the pushes of faster workers queue behind each "
                                 "other although they would have landed before the slowest one's"};
  if (c.sync.staleness != 0 && !c.sync.dedicated)
    return ModeledBound{"lower", "co-located shards under SSP or asynchronous updates: a shard's optimizer steps for "
                                 "the other workers' pushes run on its host's GPU without delaying that worker's own "
                                 "forward and backward (GPU sharing is not modeled)"};
  return std::nullopt;
}

}  // namespace gs
