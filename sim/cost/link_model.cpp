// LinkQueues (link_model.h): two busy-until times per device, one per direction.
#include "sim/cost/link_model.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace gs {

LinkQueues::LinkQueues(int devices, double bandwidth_Bps, double latency_s)
    : send_busy_(static_cast<size_t>(std::max(devices, 0)), 0.0),
      recv_busy_(static_cast<size_t>(std::max(devices, 0)), 0.0),
      bandwidth_Bps_(bandwidth_Bps),
      latency_s_(latency_s) {
  GS_EXPECT(devices >= 1, fmt::format("LinkQueues: expected at least one device, got {}", devices));
  GS_EXPECT(bandwidth_Bps > 0, fmt::format("LinkQueues: expected a positive bandwidth, got {} B/s", bandwidth_Bps));
  GS_EXPECT(latency_s >= 0, fmt::format("LinkQueues: expected a latency >= 0, got {} s", latency_s));
}

double LinkQueues::transfer(int src, int dst, double ready_s, double bytes) {
  const int n = devices();
  GS_EXPECT(src >= 0 && src < n && dst >= 0 && dst < n && src != dst,
            fmt::format("LinkQueues::transfer: expected two different devices in [0, {}), got {} -> {}", n, src, dst));
  GS_EXPECT(bytes >= 0, fmt::format("LinkQueues::transfer: expected bytes >= 0, got {}", bytes));
  if (bytes == 0) return ready_s;
  const double wire_s = bytes / bandwidth_Bps_;
  double& send = send_busy_[static_cast<size_t>(src)];
  double& recv = recv_busy_[static_cast<size_t>(dst)];
  send = std::max(ready_s, send) + wire_s;
  recv = std::max(ready_s, recv) + wire_s;
  ++messages_;
  return std::max(send, recv) + latency_s_;
}

}  // namespace gs
