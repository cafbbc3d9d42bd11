// The cuda backend of the seam (cuda_backend.h). Built with the CUDA side only (the stub without it is in
// cuda_status.cpp).
#include "sim/backend/cuda_backend.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/backend/cuda_element_ops.h"
#include "sim/backend/cuda_model.h"
#include "sim/backend/cuda_probe.h"
#include "sim/comm/gpu_communicator.h"
#include "sim/core/barrier.h"
#include "sim/core/error.h"

namespace gs {
namespace {

// Float collectives on device buffers through the GPU communicator (ordered after the rank's stream of the memory);
// the step control's double all-reduce and the barriers, which are host memory, through a host communicator.
class SplitCommunicator final : public Communicator {
 public:
  SplitCommunicator(std::unique_ptr<GpuCommunicator> gpu, std::unique_ptr<Communicator> host)
      : gpu_(std::move(gpu)), host_(std::move(host)) {}
  int size() const override { return gpu_->size(); }
  void all_reduce_sum(int rank, float* buf, size_t count) override { gpu_->all_reduce_sum(rank, buf, count); }
  void all_reduce_sum(int rank, double* buf, size_t count) override { host_->all_reduce_sum(rank, buf, count); }
  void all_gather(int rank, float* out, const float* in, size_t count) override {
    gpu_->all_gather(rank, out, in, count);
  }
  void reduce_scatter_sum(int rank, float* out, const float* in, size_t count) override {
    gpu_->reduce_scatter_sum(rank, out, in, count);
  }
  void broadcast(int rank, float* buf, size_t count, int root) override { gpu_->broadcast(rank, buf, count, root); }
  void barrier(int rank) override { host_->barrier(rank); }
  void all_reduce_sum_start(int rank, float* buf, size_t count) override {
    gpu_->all_reduce_sum_start(rank, buf, count);
  }
  void all_reduce_wait(int rank) override { gpu_->all_reduce_wait(rank); }
  void group_begin(int rank) override { gpu_->group_begin(rank); }
  void group_end(int rank) override { gpu_->group_end(rank); }
  bool starts_asynchronously() const override { return gpu_->starts_asynchronously(); }
  void abort() override {
    gpu_->abort();
    host_->abort();
  }
  // The gradient collectives' traffic; the control values' (host) is dropped, as the host loop's control step does.
  CommStats take_stats(int rank) override {
    host_->take_stats(rank);
    return gpu_->take_stats(rank);
  }

 private:
  std::unique_ptr<GpuCommunicator> gpu_;
  std::unique_ptr<Communicator> host_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::vector<int> devices, bool nccl, double deadline_s)
      : devices_(std::move(devices)), nccl_(nccl), deadline_s_(deadline_s), memory_(devices_) {}
  ElementOps& memory() override { return memory_; }
  std::unique_ptr<Model> make_model(const RunConfig& config) override { return make_gpu_model(config, &memory_); }
  std::unique_ptr<Communicator> make_communicator(int ranks) override {
    GS_EXPECT(ranks == memory_.ranks(), "cuda backend: a communicator of another rank count than its memory's");
    std::unique_ptr<GpuCommunicator> gpu = nccl_ ? make_nccl_communicator(devices_, deadline_s_)
                                                 : make_local_communicator(ranks, devices_.front(), deadline_s_);
    for (int r = 0; r < ranks; ++r) gpu->set_compute_stream(r, memory_.stream(r));
    return std::make_unique<SplitCommunicator>(std::move(gpu), make_host_communicator(ranks, deadline_s_));
  }
  bool one_rank_per_device() const override { return nccl_; }
  std::optional<std::string> issue(const RunConfig& config, const std::optional<std::string>& host_reason) override {
    return cuda_seam_issue(config, host_reason);
  }

 private:
  std::vector<int> devices_;
  bool nccl_;
  double deadline_s_;
  CudaElementOps memory_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const RunConfig& config) {
  const CudaProbe& probe = cuda_status();
  GS_EXPECT(cuda_usable(probe), "cluster.backend cuda: no usable GPU (" + probe.error + ")");
  const int ranks = config.cluster.ranks;
  const bool nccl = nccl_compiled() && ranks <= probe.device_count;
  std::vector<int> devices(static_cast<size_t>(ranks), 0);
  if (nccl)
    for (int r = 0; r < ranks; ++r) devices[static_cast<size_t>(r)] = r;
  return std::make_unique<CudaBackend>(std::move(devices), nccl, wait_deadline_s(config.training.run_timeout_s));
}

}  // namespace gs
