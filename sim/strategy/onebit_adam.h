// DeepSpeed's 1-bit Adam (training.optimizer.kind "onebit_adam"; Tang et al. 2021, arXiv 2102.02888): the pieces
// the strategy (onebit_adam.cpp), 0/1 Adam (zero_one_adam.cpp), 1-bit LAMB (onebit_lamb.cpp), the memory estimate and
// the tests share. The three strategies keep every buffer in the run's memory (StrategySetup::memory(): host RAM, or
// a backend's device memory; host_memory_reason accepts them) and touch elements only through its ElementOps and
// CompressOps (sim/core/compress_ops.h: the Adam pieces below, the compressed all-reduce's compensation, server sum
// and decoding, 0/1 Adam's sync and 1-bit LAMB's passes); scalars that drive control (norms, scales) come back as
// values.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/comm/communicator.h"
#include "sim/comm/rank_gather.h"
#include "sim/config/run_config.h"
#include "sim/core/compress_ops.h"
#include "sim/core/element_ops.h"
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

// What one compressed all-reduce measured on the calling rank. The times are spans of the memory's clock
// (ElementOps::phase_begin / span_end): on host memory the host seconds around the work, added before the call returns;
// on a device the spans' CUDA event times, added at the rank's next settle (so the record must stay valid until then:
// OnebitCalls, a deque, keeps its records in place as calls are added). They are added to: a record starts at zero.
struct OnebitNorms {
  double worker_error = 0.0;  // ||worker error|| after the call (L2, over the padded buffer)
  double server_error = 0.0;  // ||server error|| after the call (L2, over the rank's chunk)
  float worker_scale = 0.0f;  // ||x|| / sqrt(padded), x = momentum + old worker error
  float server_scale = 0.0f;  // the rank's chunk's ||c|| / sqrt(chunk)
  double compress_s = 0.0;    // the worker's and the server's compression: 2 spans (not the collectives)
  double decompress_s = 0.0;  // the final decoding: 1 span
  bool done = false;          // the call returned (a record made for a call that threw is not reported)
};

// One rank's compressed-call records in call order, each made (emplace_back) before its call and handed to it: a
// deque, so a record a device still has span times pending for stays where it is while later ones are added.
using OnebitCalls = std::deque<OnebitNorms>;

// The calls of `calls` that returned: all but a last record whose call threw (a failed run's rank).
inline size_t onebit_returned_calls(const OnebitCalls& calls) {
  return !calls.empty() && !calls.back().done ? calls.size() - 1 : calls.size();
}

// One rank's buffers of the compressed all-reduce, in the memory of its strategy (StrategySetup::memory()), each
// allocated with the rank that uses it (on a device: that rank's GPU). The error buffers are DeepSpeed's state; the
// others are workspace, made at the first call.
struct OnebitBuffers {
  FloatBuffer worker_error;  // state['worker_error']: padded floats (onebit_padded_elements(n, N)); empty: not made
  FloatBuffer server_error;  // state['server_error']: padded / N floats
  FloatBuffer x;             // padded: the worker's compensated momentum
  FloatBuffer chunk;         // padded / N: the server's sum of the rank's chunk
  FloatBuffer worker_message, worker_messages;  // the rank's scale and signs; every rank's (all-gathered)
  FloatBuffer server_message, server_messages;  // the same for the server's chunk
  bool has_errors() const { return worker_error.size() > 0; }
  // The error buffers made zero (padded and padded / ranks floats of `memory`, rank `rank`'s).
  void make_errors(ElementOps& memory, int rank, size_t padded, int ranks);
  // The error buffers freed (DeepSpeed drops them after the initialization step).
  void drop_errors() {
    worker_error = FloatBuffer();
    server_error = FloatBuffer();
  }
};

// One rank's share of DeepSpeed's compressed_allreduce (deepspeed/runtime/comm/nccl.py, NcclBackend, and
// compressed.py, CompressedBackend, which compute the same values): every rank of `comm` calls it with its own
// m[0, n) and buffers (b.worker_error and b.server_error made), all of `memory` (host RAM or a device's; the
// collectives carry buffers of that memory). On return m holds the same values on every rank. The steps, in float32
// as DeepSpeed's tensors, each an operation of the memory's CompressOps (sim/core/compress_ops.h):
//   x = pad(m) + worker_error; s_w = ||x|| / sqrt(padded); sign(x) = +1 where x >= 0 (also 0 and -0: DeepSpeed's
//   x.sign().add_(1).bool(), unlike signsgd's sign(0) = 0), else -1; worker_error = x - s_w * sign(x)
//   (onebit_compensate); signs of chunk q to rank q (DeepSpeed: all-to-all; here an all-gather of every rank's
//   message of s_w and the packed bits, the same values); rank q's chunk: c = sum over ranks j in rank order of
//   sign_j * (s_w,j * float(1/N)) (onebit_server_sum), c += server_error; s_s = ||c|| / sqrt(chunk); server_error =
//   c - s_s * sign(c); signs and s_s all-gathered; m[i] = s_s,q * sign_q(c)[i] for i < n (onebit_decode_chunks).
// Norms ||.|| are summed in double and rounded to float (DeepSpeed: torch.linalg.norm in float32; on a device in a
// fixed order of its own, the host's to rounding). The packed bits follow numpy.packbits' order (first value in the
// most significant bit), as cupy's packbits. Throws gs::Error when the error buffers are not of DeepSpeed's sizes.
// `norms`, when not null, receives the call's norms and scales and has its times added (OnebitNorms: on a device at
// the rank's next settle, so it must stay valid until then). The sub-spans reach no phase of the rank's clock (the
// caller times the whole call: timed_onebit_compressed_allreduce).
void onebit_compressed_allreduce(Communicator& comm, ElementOps& memory, int rank, float* m, size_t n,
                                 OnebitBuffers& b, OnebitNorms* norms = nullptr);

// onebit_compressed_allreduce as one phase of a rank's step: timed as `compress` on `clock` (TimedPhase: the
// memory's clock), the time the rank waited for the others moved to `wait`, and onebit_wire_bytes(padded, ranks)
// added to the step's bytes (the all-gather of every packed sign stands in for DeepSpeed's all-to-all; the wire counts
// the real messages). The error buffers are made zero at the first call (DeepSpeed: state['worker_error'] made when
// first missing): padded floats, padded / N.
void timed_onebit_compressed_allreduce(Communicator& comm, ElementOps& memory, PhaseClock& clock, int rank, int ranks,
                                       float* m, size_t n, size_t padded, OnebitBuffers& b, OnebitNorms* norms);

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
nlohmann::json onebit_compression_report(const std::vector<const OnebitCalls*>& calls, size_t n, size_t padded,
                                         const std::string& kind);

// Across processes (SyncStrategy::gather_ranks, after the run: every span settled): every rank's compressed-call
// records (member `calls` of each rank's state) to process 0, for onebit_compression_report.
template <typename State>
void gather_onebit_calls(ProcessGroup& group, std::vector<State>& states, OnebitCalls State::*calls, int first_rank,
                         int local_ranks) {
  if (group.size() <= 1) return;
  std::vector<std::vector<OnebitNorms>> rows(states.size());
  for (size_t r = 0; r < states.size(); ++r) rows[r].assign((states[r].*calls).begin(), (states[r].*calls).end());
  gather_rank_rows(group, rows, first_rank, local_ranks);
  for (size_t r = 0; r < states.size(); ++r) (states[r].*calls).assign(rows[r].begin(), rows[r].end());
}

// DeepSpeed's element-wise Adam pieces on buffers of one memory, through its CompressOps (sim/core/compress_ops.h;
// element math kernels/compress_math.h), as torch's CPU kernels compute them in float32 (the scalars rounded to float
// from double as torch does with Python floats): exp_avg.mul_(beta1).add_(1 - beta1, g) (one fused add);
// exp_avg_sq.mul_(beta2).addcmul_(1 - beta2, g, g); and update = exp_avg / (exp_avg_sq.sqrt() + eps),
// update += weight_decay * p (weight_decay > 0), p.add_(-lr * update), with `accumulated` (when not null) also
// receiving accumulated.add_(-lr * update) (0/1 Adam's momentum_accumulator). n floats of rank `rank`'s buffers.
void deepspeed_first_moment(CompressOps& ops, int rank, float* m, const float* g, size_t n, double beta1);
void deepspeed_second_moment(CompressOps& ops, int rank, float* v, const float* g, size_t n, double beta2);
void deepspeed_update(CompressOps& ops, int rank, float* p, const float* m, const float* v, size_t n,
                      const OptimizerConfig& o, double lr, float* accumulated = nullptr);

}  // namespace gs
