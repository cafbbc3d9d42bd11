// host_memory_reason (strategy.h): which strategies keep their buffers in a backend's device memory. A strategy whose
// every element operation goes through ElementOps (sim/core/element_ops.h) runs device-resident; one with host loops
// runs with host buffers only (the cuda backend refuses it; every kind of the registries runs device-resident now).
// The parameter server runs on a device memory as
// practice runs it with GPU workers: its workers' parameters and gradients in that memory, its server shards,
// optimizer and compression in host memory by design, pushes and pulls the memory's download / upload
// (parameter_server.cpp). The communication-owning optimizers (1-bit Adam, 0/1 Adam, 1-bit LAMB) run on device memory:
// their compressed all-reduce and updates are CompressOps. Extend: a strategy or compressor that moves its element
// code onto ElementOps (a compressor: CompressOps, CompressorEntry::element_ops) drops its line here.
#include <optional>
#include <string>

#include "sim/compress/compressor.h"
#include "sim/optim/optimizer.h"
#include "sim/strategy/strategy.h"

namespace gs {

std::optional<std::string> host_memory_reason(const RunConfig& c) {
  auto quoted = [](const std::string& v) { return "\"" + v + "\""; };
  // 1-bit Adam, 0/1 Adam and 1-bit LAMB own their communication (sync.kind allreduce, no compressor: validation's
  // rule) and run every element loop through the memory's ElementOps and CompressOps (onebit_adam.h).
  if (owns_communication(c.training.optimizer)) return std::nullopt;
  if (!optimizer_has_device_update(c.training.optimizer))
    return "training.optimizer.kind: " + quoted(c.training.optimizer.kind) + " has no device update";
  if (c.compression.kind != "none") {
    const CompressorEntry* e = find_compressor(c.compression.kind);
    if (e == nullptr || !e->element_ops)
      return "compression.kind: " + quoted(c.compression.kind) +
             " encodes and decodes with host loops (every other kind runs through the compressor operations of the "
             "run's memory, sim/core/compress_ops.h)";
    if (c.sync.kind != "allreduce" && c.sync.kind != "zero" && c.sync.kind != "parameter_server")
      return "compression.kind: " + quoted(c.compression.kind) + " under sync.kind " + quoted(c.sync.kind) +
             " compresses with host loops (allreduce's compressed reduction and zero's cast reduce-scatter run on "
             "device memory; the parameter server compresses its pushes' host copies)";
  }
  return std::nullopt;
}

}  // namespace gs
