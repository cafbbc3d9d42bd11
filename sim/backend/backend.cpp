// The host backend (backend.h).
#include "sim/backend/backend.h"

namespace gs {
namespace {

class HostBackend final : public Backend {
 public:
  explicit HostBackend(ModelFactory model) : model_(model) {}
  ElementOps& memory() override { return host_element_ops(); }
  std::unique_ptr<Model> make_model(const RunConfig& config) override { return model_(config); }
  std::unique_ptr<Communicator> make_communicator(int ranks) override { return make_host_communicator(ranks); }

 private:
  ModelFactory model_;
};

}  // namespace

std::unique_ptr<Backend> make_host_backend(ModelFactory model) { return std::make_unique<HostBackend>(model); }

}  // namespace gs
