// The host backend (backend.h).
#include "sim/backend/backend.h"

namespace gs {
namespace {

class HostBackend final : public Backend {
 public:
  ElementOps& memory() override { return host_element_ops(); }
  std::unique_ptr<Model> make_model(const RunConfig& config) override { return gs::make_model(config); }
  std::unique_ptr<Communicator> make_communicator(int ranks) override { return make_host_communicator(ranks); }
};

}  // namespace

std::unique_ptr<Backend> make_host_backend() { return std::make_unique<HostBackend>(); }

}  // namespace gs
