// Point-to-point messages between the devices of one node, queued on each device's link (both directions apart, as
// PCIe and NVLink are full duplex). A message of B bytes from device s to device d, handed to the link at time t:
//   send side  e_s = max(t, send_busy[s]) + B / W;  send_busy[s] = e_s
//   recv side  e_d = max(t, recv_busy[d]) + B / W;  recv_busy[d] = e_d
//   delivered at max(e_s, e_d) + alpha
// W is the device's link bandwidth per direction (NCCL's per-GPU bandwidth: links x per-link bandwidth, the
// profile's fabric), alpha the point-to-point latency (nccl.p2p_latency_us); both are CollectiveModel::p2p_s's
// terms, so one message on idle links costs exactly p2p_s(B). Each link carries its messages one after the other in
// the order they are handed to it (first come, first served: callers hand them over in modeled-time order), so N
// messages into one device take alpha + N B / W, not alpha + B / W. The latency (launch, protocol handshake) does not
// occupy the link: messages handed over together pay one alpha, their bytes queue. A message waits only for its own
// two links (a flow-level model: each link a FIFO server of bytes), so it is exact where one link is the bottleneck and
// optimistic by at most one message's B / W where its two links are busy at different times.
// Extend: a device with a different link (a dedicated server's NIC) is a per-device bandwidth here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gs {

class LinkQueues {
 public:
  // devices >= 1; bandwidth_Bps > 0 (bytes per second per direction); latency_s >= 0. Throws gs::Error otherwise.
  LinkQueues(int devices, double bandwidth_Bps, double latency_s);

  // Queues one message of `bytes` (>= 0) from `src` to `dst` (different devices, 0 <= src, dst < devices()) handed to
  // the links at `ready_s` (seconds); returns when `dst` has it. 0 bytes: nothing is queued, delivered at ready_s.
  // Throws gs::Error for a device out of range or src == dst.
  double transfer(int src, int dst, double ready_s, double bytes);

  double send_busy_until_s(int device) const { return send_busy_[static_cast<size_t>(device)]; }
  double recv_busy_until_s(int device) const { return recv_busy_[static_cast<size_t>(device)]; }
  int devices() const { return static_cast<int>(send_busy_.size()); }
  double bandwidth_Bps() const { return bandwidth_Bps_; }
  double latency_s() const { return latency_s_; }
  int64_t messages() const { return messages_; }  // messages queued so far (bytes > 0)

 private:
  std::vector<double> send_busy_, recv_busy_;
  double bandwidth_Bps_;
  double latency_s_;
  int64_t messages_ = 0;
};

}  // namespace gs
