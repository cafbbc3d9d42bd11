// Precision modes of model.h: names, the policy of a run's precision section, and the bytes per parameter each mode
// holds and sends. A new mode is one PrecisionMode value, one row in kModes, and its arithmetic in kernels/dense_mixed.
#include <string>

#include "kernels/dense_mixed.h"
#include "sim/core/error.h"
#include "sim/model/model.h"

namespace gs {
namespace {

const std::vector<PrecisionModeInfo> kModes = {
    {PrecisionMode::kFp32, "fp32", "IEEE single precision everywhere"},
    {PrecisionMode::kTf32, "tf32", "GPU only: GEMM inputs rounded to tf32 by tensor cores (skipped on the host)"},
    {PrecisionMode::kBf16Mixed, "bf16_mixed", "bf16 operands and activations, fp32 accumulation and master weights"},
    {PrecisionMode::kFp16Mixed, "fp16_mixed", "fp16 operands and activations, fp32 accumulation and master weights"},
    {PrecisionMode::kFp16Pure, "fp16_pure", "weights, gradients, optimizer state in fp16; no master copy"},
    {PrecisionMode::kFp8Mixed, "fp8_mixed", "E4M3 forward / E5M2 gradient GEMM operands, per-tensor amax scaling"},
};

}  // namespace

PrecisionMode parse_precision_mode(const std::string& name) {
  std::string known;
  for (const PrecisionModeInfo& r : kModes) {
    if (name == r.name) return r.mode;
    known += known.empty() ? r.name : std::string(", ") + r.name;
  }
  throw Error("precision.mode: unknown mode '" + name + "' (known: " + known + ")");
}

const std::vector<PrecisionModeInfo>& precision_modes() { return kModes; }

const char* precision_mode_name(PrecisionMode mode) {
  for (const PrecisionModeInfo& r : kModes) {
    if (r.mode == mode) return r.name;
  }
  return "?";
}

PrecisionPolicy precision_policy(const PrecisionConfig& precision) {
  PrecisionPolicy p;
  p.mode = parse_precision_mode(precision.mode);
  p.amax_history_len = precision.amax_history_len;
  return p;
}

BytesPerParam bytes_per_param(PrecisionMode mode, int state_buffers) {
  BytesPerParam b;
  const double k = state_buffers;
  switch (mode) {
    case PrecisionMode::kFp32:
    case PrecisionMode::kTf32:  // tf32 rounds GEMM inputs inside the tensor core; storage stays fp32
      b = {4, 4, 4 * k, 0, 4};
      break;
    case PrecisionMode::kBf16Mixed:
    case PrecisionMode::kFp16Mixed:  // format weight copies for the GEMMs, fp32 gradients, state and master (AMP)
      b = {2, 4, 4 * k, 4, 4};
      break;
    case PrecisionMode::kFp16Pure:  // everything in fp16, no master copy
      b = {2, 2, 2 * k, 0, 2};
      break;
    case PrecisionMode::kFp8Mixed:  // E4M3 weight copies, fp32 gradients (wgrad accumulates in fp32), fp32 master
      b = {1, 4, 4 * k, 4, 4};
      break;
  }
  return b;
}

MixedSpec mixed_spec(const PrecisionPolicy& p) {
  MixedSpec m;
  m.format = p.mode == PrecisionMode::kBf16Mixed || p.mode == PrecisionMode::kFp8Mixed ? FloatFormat::kBf16
             : p.emulated()                                                            ? FloatFormat::kFp16
                                                                                       : FloatFormat::kFp32;
  m.fp8_gemm = p.mode == PrecisionMode::kFp8Mixed;
  m.grad_in_format = p.mode == PrecisionMode::kFp16Pure;
  m.loss_scale = p.loss_scale;
  m.amax_history_len = p.amax_history_len;
  return m;
}

}  // namespace gs
