// DeepSpeed's 1-bit Adam (training.optimizer.kind "onebit_adam"; Tang et al. 2021, arXiv 2102.02888): the pieces
// the strategy (onebit_adam.cpp), 0/1 Adam (zero_one_adam.cpp), the memory estimate and the tests share.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/comm/communicator.h"
#include "sim/comm/rank_gather.h"
#include "sim/config/run_config.h"
#include "sim/cost/step_cost.h"
#include "sim/model/model.h"

namespace gs {

class PhaseClock;

// DeepSpeed OnebitAdam.__init__ / step (deepspeed/runtime/fp16/onebit/adam.py): the compressed buffer is the
// tensor padded with zeros to a multiple of size * divider, divider = lcm(size, 8) ("corrected_tensor_size"); each
// rank serves padded / size of it ("server_chunk_size").
size_t onebit_padded_elements(size_t n, int ranks);

// 1-bit Adam's non-freeze group (training.optimizer.uncompressed_tensors): whether tensor t is in it (named by its
// table name or its file name).
bool onebit_non_freeze(const OptimizerConfig& o, const TensorInfo& t);

// The phase of 1-based optimizer step k (DeepSpeed's state['step']) for freeze_step f: step 1 initializes the
// error buffers (the momentum, still zero, goes through one compressed all-reduce; the parameters do not move);
// steps 2 .. max(f, 2) are uncompressed Adam on the all-reduced gradient (the freeze check runs after the update
// of each of them: state['step'] >= freeze_step); from max(f, 2) + 1 on the variance is frozen and the momentum is
// compressed.
enum class OnebitPhase { kInit, kWarmup, kCompressed };
OnebitPhase onebit_phase(int64_t step_1based, int64_t freeze_step);

// What one compressed all-reduce measured on the calling rank.
struct OnebitNorms {
  double worker_error = 0.0;  // ||worker error|| after the call (L2, over the padded buffer)
  double server_error = 0.0;  // ||server error|| after the call (L2, over the rank's chunk)
  float worker_scale = 0.0f;  // ||x|| / sqrt(padded), x = momentum + old worker error
  float server_scale = 0.0f;  // the rank's chunk's ||c|| / sqrt(chunk)
  double compress_s = 0.0;    // wall seconds of the worker's and the server's compression (not the collectives)
  double decompress_s = 0.0;  // wall seconds of the final decoding
};

// One rank's share of DeepSpeed's compressed_allreduce (deepspeed/runtime/comm/nccl.py, NcclBackend, and
// compressed.py, CompressedBackend, which compute the same values): every rank of `comm` calls it with its own
// m[0, n), worker_error (onebit_padded_elements(n, N) floats) and server_error (padded / N floats). On return m holds
// the same values on every rank. The steps, in float32 as DeepSpeed's tensors:
//   x = pad(m) + worker_error; s_w = ||x|| / sqrt(padded); sign(x) = +1 where x >= 0 (also 0 and -0: DeepSpeed's
//   x.sign().add_(1).bool(), unlike signsgd's sign(0) = 0), else -1; worker_error = x - s_w * sign(x);
//   signs of chunk q to rank q (DeepSpeed: all-to-all; here an all-gather of the packed bits, the same values);
//   rank q's chunk: c = sum over ranks j in rank order of sign_j * (s_w,j * float(1/N)), c += server_error;
//   s_s = ||c|| / sqrt(chunk); server_error = c - s_s * sign(c); signs and s_s all-gathered;
//   m[i] = s_s,q * sign_q(c)[i] for i < n.
// Norms ||.|| are summed in double and rounded to float (DeepSpeed: torch.linalg.norm in float32). The packed bits
// follow numpy.packbits' order (first value in the most significant bit), as cupy's packbits.
void onebit_compressed_allreduce(Communicator& comm, int rank, float* m, size_t n, std::vector<float>& worker_error,
                                 std::vector<float>& server_error, OnebitNorms* norms = nullptr);

// onebit_compressed_allreduce as one phase of a rank's step: timed as `compress` on `clock`, the time the rank waited
// for the others moved to `wait`, and onebit_wire_bytes(padded, ranks) added to the step's bytes (the all-gather of
// every packed sign stands in for DeepSpeed's all-to-all; the wire counts the real messages). The error buffers are
// made zero at the first call (DeepSpeed: state['worker_error'] made when first missing): padded floats, padded / N.
void timed_onebit_compressed_allreduce(Communicator& comm, PhaseClock& clock, int rank, int ranks, float* m, size_t n,
                                       size_t padded, std::vector<float>& worker_error,
                                       std::vector<float>& server_error, OnebitNorms* norms);

// Bytes one rank sends in one compressed all-reduce of `padded` elements on N ranks, at DeepSpeed's message sizes:
// the all-to-all of the packed signs ((N-1)/N x padded/8), the all-gather of the worker scales ((N-1) x 4), the
// all-gather of the server signs ((N-1)/N x padded/8, each rank's chunk/8) and of the server scales ((N-1) x 4).
double onebit_wire_bytes(size_t padded, int ranks);

// The modeled cost of one compressed all-reduce over `padded` elements on N ranks (the worker's and the server's
// compression passes, DeepSpeed's four collectives with the all-to-all priced as a reduce-scatter of the same bytes,
// the final decoding).
void onebit_price_compressed(StepCost& cost, size_t padded, int ranks);

// The report's "compression" object (reports/README.md) over compressed all-reduce calls: calls[r] holds rank r's
// calls in order (every rank makes the same calls). DeepSpeed's message sizes per call, every rank's compression and
// decoding times, and the error-feedback norms per call averaged over the ranks. Null when there is no call.
nlohmann::json onebit_compression_report(const std::vector<const std::vector<OnebitNorms>*>& calls, size_t n,
                                         size_t padded, const std::string& kind);

// Across processes (SyncStrategy::gather_ranks): every rank's compressed-call records (member `calls` of each rank's
// state) to process 0, for onebit_compression_report.
template <typename State>
void gather_onebit_calls(ProcessGroup& group, std::vector<State>& states, std::vector<OnebitNorms> State::*calls,
                         int first_rank, int local_ranks) {
  std::vector<std::vector<OnebitNorms>> rows(states.size());
  for (size_t r = 0; r < states.size(); ++r) rows[r] = std::move(states[r].*calls);
  gather_rank_rows(group, rows, first_rank, local_ranks);
  for (size_t r = 0; r < states.size(); ++r) states[r].*calls = std::move(rows[r]);
}

// DeepSpeed's element-wise Adam pieces, as torch's CPU kernels compute them in float32 (the scalars rounded to float
// from double as torch does with Python floats): exp_avg.mul_(beta1).add_(1 - beta1, g) (one fused add);
// exp_avg_sq.mul_(beta2).addcmul_(1 - beta2, g, g); and update = exp_avg / (exp_avg_sq.sqrt() + eps),
// update += weight_decay * p (weight_decay > 0), p.add_(-lr * update), with `accumulated` (when not null) also
// receiving accumulated.add_(-lr * update) (0/1 Adam's momentum_accumulator).
void deepspeed_first_moment(float* m, const float* g, size_t n, double beta1);
void deepspeed_second_moment(float* v, const float* g, size_t n, double beta2);
void deepspeed_update(float* p, const float* m, const float* v, size_t n, const OptimizerConfig& o, double lr,
                      float* accumulated = nullptr);

}  // namespace gs
