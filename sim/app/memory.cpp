// Memory estimate of a run (memory.h): one term per component, from the allocations the code makes (named beside
// each term), and the fit check with the largest setting that would fit. A new allocation that grows with a setting
// gets its term here.
#include "sim/app/memory.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "kernels/compress.h"
#include "kernels/compress_math.h"
#include "sim/compress/compressor.h"
#include "sim/compress/modeled.h"
#include "sim/compress/reduce.h"
#include "sim/config/run_kinds.h"
#include "sim/cost/hardware_profile.h"
#include "sim/core/clock.h"
#include "sim/runtime/device.h"
#include "sim/runtime/rank_loop.h"
#include "sim/strategy/onebit_adam.h"
#include "sim/strategy/strategy.h"

namespace gs {
namespace {

constexpr int64_t kF = 4;                    // bytes per float
constexpr int64_t kFashionTrain = 60000;     // Debian's dataset-fashion-mnist (docs/data.md)
constexpr int64_t kFashionTest = 10000;
constexpr int64_t kFashionPixels = 784;
constexpr int64_t kEvalChunkRows = 1024;     // rank_loop.cpp kEvalChunk
constexpr int64_t kOrderCacheEntries = 8;    // dataset_registry.cpp: shuffled orders kept
constexpr int64_t kStepTimesReserved = 1 << 16;  // PhaseClock::reserve in rank_loop.cpp
constexpr int64_t kTileBytes = 4096 * 4;     // allreduce.cpp kTileElems floats per rank

int64_t numbers_in(const json& j) {
  if (j.is_number()) return 1;
  int64_t n = 0;
  if (j.is_array() || j.is_object())
    for (const auto& v : j) n += numbers_in(v);
  return n;
}

// Forward/backward buffers of a dense stack for `rows` samples (kernels/dense.cpp make_dense_scratch): pre-activations
// of every layer, post-activations of the hidden ones, two gradient buffers of the widest layer.
int64_t dense_scratch_bytes(const std::vector<int64_t>& widths, int64_t rows) {
  int64_t floats = 0, widest = 1;
  for (size_t l = 1; l < widths.size(); ++l) {
    floats += rows * widths[l] * (l + 1 < widths.size() ? 2 : 1);
    widest = std::max(widest, widths[l]);
  }
  return (floats + 2 * rows * widest) * kF;
}

// Ranks per node of the run's hardware profile (one node cache each); all ranks on one node when it cannot be read.
int64_t hardware_gpus_per_node(const RunConfig& c) {
  try {
    return load_hardware_profile(c.cluster.hardware)->gpus_per_node;
  } catch (const std::exception&) {
    return c.cluster.ranks;
  }
}

int64_t train_samples(const RunConfig& c) {
  if (c.data.kind == "fashion_mnist") return kFashionTrain;
  if (c.data.kind == "teacher") return c.data.teacher.train_samples;
  return 0;
}

int64_t planned_steps_estimate(const RunConfig& c) {
  if (c.training.epochs <= 0) return c.training.steps;
  const int64_t global = step_shape(c).global_batch;
  const int64_t per_epoch = global > 0 ? train_samples(c) / global : 0;
  return std::max<int64_t>(1, static_cast<int64_t>(std::floor(c.training.epochs * static_cast<double>(per_epoch))));
}

// Records: every rank's measured StepTimes (reserved up to 2^16 steps, then growing by doubling: 1.5x on average;
// none in timing-only runs) and modeled StepTimes with exposed/overlapped seconds (cost model), rank 0's series,
// the summaries' copies when the report is built (3 doubles per rank-step), and the trace (n parameters per rank
// and step).
int64_t records_bytes(const RunConfig& c, int64_t n) {
  const int64_t N = c.cluster.ranks;
  const int64_t T = planned_steps_estimate(c);
  const double growth = T > kStepTimesReserved ? 1.5 : 1.0;
  const int64_t clocks = run_does_arithmetic(c) ? 2 : 1;  // timing-only runs keep no measured clock
  const auto per_rank_step = static_cast<int64_t>(clocks * sizeof(StepTimes) + 2 * sizeof(double));
  int64_t bytes = static_cast<int64_t>(growth * static_cast<double>(T * N * per_rank_step +
                                                                   T * static_cast<int64_t>(sizeof(SeriesPoint)))) +
                  3 * T * N * 8;
  if (c.report.trace) bytes += (T + 1) * N * n * kF * 2;  // float snapshots, then their JSON numbers
  return bytes;
}

std::string size_2dp(int64_t bytes) { return binary_size_text(static_cast<double>(bytes), 2); }

// sync.kind "zero" (strategy/zero.cpp) on the host: per rank its gathered parameters padded to N x per elements
// (per = zero_partition), its padded copy of the gradient and its averaged shard, with reduce_every_microbatch the
// shard's running sum and the rank loop's buffer of one micro-batch's gradient; the optimizer state of its shard only
// (the ranks' shards add up to n). Replaces the replica-per-rank parameters and state counted before it.
// Bytes of one rank's workspace for the compressed all-reduce of the 1-bit optimizers (onebit_adam, zero_one_adam,
// onebit_lamb), from what sim/strategy/onebit_adam.cpp allocates (onebit_compressed_allreduce's room() calls on
// OnebitBuffers; 1-bit Adam's compressed() for its flat copy), each buffer 4-byte floats or words: x, the compensated
// momentum (P = onebit_padded_elements(m, N) floats); chunk, the server's sum of this rank's chunk (C = P / N); the
// worker's message (onebit_message_words(P) = 1 + ceil(P / 32) words: its scale, then the packed signs) and the N
// all-gathered ones; the server's message (onebit_message_words(C)) and the N all-gathered; with `flat` (1-bit Adam
// whose uncompressed_tensors leave tensors out) the compressed group's flat copy, m floats. m: the compressed group's
// values; N: ranks (> 1). The error buffers (P and C floats, DeepSpeed's worker_error and server_error) are counted
// apart, as error feedback.
int64_t onebit_workspace_bytes(size_t m, bool flat, int N) {
  const size_t P = onebit_padded_elements(m, N), C = P / static_cast<size_t>(N);
  const size_t messages = static_cast<size_t>(N + 1) * (onebit_message_words(P) + onebit_message_words(C));
  return static_cast<int64_t>(P + C + messages + (flat ? m : 0)) * kF;
}

void add_zero_host_buffers(const RunConfig& c, int64_t n, int64_t state, MemoryEstimate& e) {
  const int64_t N = c.cluster.ranks;
  const auto per = static_cast<int64_t>(zero_partition(static_cast<size_t>(n), static_cast<int>(N)));
  e.parameters_bytes = (N * per * N + n) * kF;  // the replicas and the initial copy
  e.gradients_bytes += N * (per * N + per) * kF;
  if (c.sync.reduce_every_microbatch && c.sync.stage >= 2 && c.training.accumulation_steps > 1)
    e.gradients_bytes += N * (n + per) * kF;
  e.optimizer_bytes = state * n * kF;
}

}  // namespace

int64_t MemoryEstimate::total_bytes() const {
  return dataset_bytes + parameters_bytes + gradients_bytes + optimizer_bytes + residuals_bytes + activations_bytes +
         communication_bytes + records_bytes;
}

json MemoryEstimate::to_json() const {
  return {{"total_bytes", total_bytes()},           {"dataset_bytes", dataset_bytes},
          {"parameters_bytes", parameters_bytes},   {"gradients_bytes", gradients_bytes},
          {"optimizer_bytes", optimizer_bytes},     {"residuals_bytes", residuals_bytes},
          {"activations_bytes", activations_bytes}, {"communication_bytes", communication_bytes},
          {"records_bytes", records_bytes}};
}

MemoryEstimate estimate_run_memory(const RunConfig& c, int64_t num_params) {
  MemoryEstimate e;
  if (!run_does_arithmetic(c)) {  // timing-only: no data, parameters or buffers; the per-step records remain
    e.records_bytes = records_bytes(c, 0);
    return e;
  }
  const int64_t N = c.cluster.ranks, b = c.data.batch_per_rank, n = num_params;
  const bool classification = c.model.loss == "cross_entropy";
  const int64_t in = c.model.layers.empty() ? 0 : c.model.layers.front();
  const int64_t out = c.model.layers.empty() ? 0 : c.model.layers.back();
  int64_t eval_rows = 0;

  // Dataset. fashion_mnist.cpp: both splits as raw bytes (the backing store: a pixel byte each, a label byte), the
  // evaluation subset decoded to floats. teacher.cpp: weights (plus their transposes), the evaluation set. inline_data.cpp:
  // one float per number. dataset_registry.cpp: up to kOrderCacheEntries shuffled orders of int64 indices.
  if (c.data.kind == "fashion_mnist") {
    const int64_t eval = c.data.eval_samples > 0 ? std::min(c.data.eval_samples, kFashionTest) : kFashionTest;
    eval_rows = eval;
    e.dataset_bytes = (kFashionTrain + kFashionTest) * (kFashionPixels + 1) + eval * (kFashionPixels + 1) * kF;
  } else if (c.data.kind == "teacher") {
    const auto& t = c.data.teacher;
    eval_rows = t.eval_samples;
    e.dataset_bytes = 2 * (t.hidden * t.in_dim + t.out_dim * t.hidden) * kF +
                      t.eval_samples * (t.in_dim + (t.task == "classification" ? 1 : t.out_dim)) * kF +
                      t.eval_samples * 8;
  } else if (c.data.kind == "inline") {
    e.dataset_bytes = (numbers_in(c.data.ranks) + numbers_in(c.data.eval)) * kF * 2;  // batches and eval set
    eval_rows = std::max<int64_t>(1, numbers_in(c.data.eval) / std::max<int64_t>(1, in + out));
  }
  // Input pipeline (loader.h, data_cache.h): per rank the loader's queue and free buffers (prefetch + 2 micro-batches);
  // per node the cache's decoded samples (capacity) and its per-sample index (12 bytes a training sample).
  {
    const int64_t sample_floats = in + (classification ? 1 : out);
    e.dataset_bytes += N * (c.data.prefetch + 2) * b * sample_floats * kF;
    const int64_t train = train_samples(c);
    if (c.data.cache.policy != "none" && train > 0) {
      const int64_t decoded = std::max<int64_t>(1, sample_floats * kF);
      int64_t capacity = c.data.cache.capacity_bytes > 0
                             ? c.data.cache.capacity_bytes / decoded
                             : static_cast<int64_t>(std::floor(c.data.cache.capacity_fraction * static_cast<double>(train)));
      capacity = std::min(capacity, train);
      const int64_t per_node = std::max<int64_t>(1, hardware_gpus_per_node(c));
      const int64_t nodes = (N + per_node - 1) / per_node;
      e.dataset_bytes += nodes * (capacity * (decoded + 24) + train * 12);
    }
  }
  if (c.data.shuffle && train_samples(c) > 0) {
    const int64_t epochs = std::min<int64_t>(kOrderCacheEntries,
                                             std::max<int64_t>(1, static_cast<int64_t>(std::ceil(c.training.epochs))));
    e.dataset_bytes += epochs * train_samples(c) * 8;
  }

  // Parameters (strategy/allreduce.cpp: one replica when shared, else one per rank; independent: one per rank) and
  // the initial copy of rank_loop.cpp.
  // strategy/onebit_adam.cpp, zero_one_adam.cpp, onebit_lamb.cpp: one replica per rank
  const bool onebit = owns_communication(c.training.optimizer);
  const bool shared = c.sync.kind == "allreduce" && c.cluster.share_identical && !onebit;
  const int64_t replicas = shared ? 1 : N;
  e.parameters_bytes = (replicas + 1) * n * kF;
  // Gradients: each rank's gradient sum (rank_loop.cpp), and the shared mode's averaged gradient.
  e.gradients_bytes = (N + (shared ? 1 : 0)) * n * kF;
  // Delayed update (allreduce with sync.staleness s): a ring of s averaged gradients per replica.
  if (c.sync.kind == "allreduce") e.gradients_bytes += c.sync.staleness * replicas * n * kF;
  // local_sgd: the evaluation average of the replicas (strategy/local_sgd.cpp).
  if (c.sync.kind == "local_sgd") e.parameters_bytes += n * kF;
  // Optimizer state per replica (optim/optimizer.cpp): momentum buffer, or Adam's two moments.
  const OptimizerConfig o = update_optimizer(c);  // momentum correction: SGD's buffer is the velocity (below)
  // (0/1 Adam: m, v and the accumulated update of its local steps, DeepSpeed's momentum_accumulator; 1-bit LAMB
  // (strategy/onebit_lamb.cpp): m, v, v_fresh, the last step's m and the update)
  const int64_t state = o.kind == "sgd"             ? (o.momentum != 0.0 ? 1 : 0)
                        : o.kind == "zero_one_adam" ? 3
                        : o.kind == "onebit_lamb"   ? 5
                                                    : 2;
  e.optimizer_bytes = replicas * state * n * kF;
  // Error feedback: one residual per rank of the full gradient (dgc: its momentum and accumulation buffers, two),
  // and a compressor's encode/decode staging of up to one gradient per rank. Low precision: a working copy of the
  // parameters per replica beside the fp32 master. (Not yet checked by tools/bench_memory.py.)
  // momentum correction: velocity and residual; ef21: the rank's tracked gradient and the tracked mean.
  const std::string& ef = c.compression.error_feedback;
  if (ef != "none") e.residuals_bytes = (ef == "gradient" ? 1 : 2) * N * n * kF;
  if (c.compression.kind == "dgc") e.residuals_bytes = 2 * N * n * kF;
  if (c.compression.kind != "none") e.communication_bytes += N * n * kF;
  if (onebit && N > 1) {
    // The 1-bit optimizers: per rank the worker error (padded P) and the server error (P / N), and the compressed
    // all-reduce's workspace (onebit_workspace_bytes). Without the tensor table the whole model is the compressed
    // group and, when 1-bit Adam's uncompressed_tensors names any, its flat copy is counted at n: an upper bound.
    const auto P = static_cast<int64_t>(onebit_padded_elements(static_cast<size_t>(n), static_cast<int>(N)));
    e.residuals_bytes += N * (P + P / N) * kF;
    const json& split = c.training.optimizer.uncompressed_tensors;
    e.communication_bytes +=
        N * onebit_workspace_bytes(static_cast<size_t>(n), split.is_array() && !split.empty(), static_cast<int>(N));
  }
  if (c.sync.kind == "zero") add_zero_host_buffers(c, n, state, e);
  if (c.precision.mode != "fp32") e.parameters_bytes += replicas * n * kF;

  // Activations: per rank the micro-batch (inputs, targets or labels, sample indices) and the model's buffers;
  // rank 0's evaluation chunk and its buffers.
  if (c.model.kind != "quadratic" && c.model.layers.size() >= 2) {
    const int64_t per_sample = (in + (classification ? 1 : out)) * kF + 8;
    e.activations_bytes = N * (b * per_sample + dense_scratch_bytes(c.model.layers, b));
    const int64_t chunk = std::min(kEvalChunkRows, std::max<int64_t>(eval_rows, 1));
    e.activations_bytes += chunk * per_sample + dense_scratch_bytes(c.model.layers, chunk);
  }
  // Communication: the host communicator reads the ranks' buffers in place; allreduce stages one tile per rank.
  e.communication_bytes += N * kTileBytes;

  e.records_bytes = records_bytes(c, n);
  return e;
}

std::optional<int64_t> available_memory_bytes() {
  if (const char* env = std::getenv("GRADSWEEP_MEMORY_AVAILABLE_BYTES")) {
    char* end = nullptr;
    long long v = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && v >= 0) return static_cast<int64_t>(v);
  }
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream ss(line.substr(13));
    long long kb = 0;
    if (ss >> kb) return static_cast<int64_t>(kb) * 1024;
  }
  return std::nullopt;
}

bool run_does_arithmetic(const RunConfig& config) { return config.training.mode != "timing"; }

std::string memory_skip_reason(const RunConfig& c, int64_t num_params, int64_t available) {
  const MemoryEstimate e = estimate_run_memory(c, num_params);
  if (e.total_bytes() <= available) return "";
  std::string parts;
  const std::pair<const char*, int64_t> terms[] = {
      {"dataset", e.dataset_bytes},         {"parameters", e.parameters_bytes}, {"gradients", e.gradients_bytes},
      {"optimizer", e.optimizer_bytes},     {"residuals", e.residuals_bytes},   {"activations", e.activations_bytes},
      {"communication", e.communication_bytes}, {"records", e.records_bytes}};
  for (const auto& [name, bytes] : terms)
    if (bytes > 0) parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", name, size_2dp(bytes));
  // The largest value of one setting that fits, the others unchanged (the estimate grows with each): ranks first,
  // then the micro-batch, then the steps (records).
  auto fits = [&](const RunConfig& x) { return estimate_run_memory(x, num_params).total_bytes() <= available; };
  auto largest = [&](int64_t hi, auto set) -> int64_t {
    RunConfig x = c;
    set(x, 1);
    if (!fits(x)) return 0;
    int64_t lo = 1;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo + 1) / 2;
      set(x, mid);
      if (fits(x)) lo = mid; else hi = mid - 1;
    }
    return lo;
  };
  std::string hint = "no setting of cluster.ranks, data.batch_per_rank or training.steps alone fits";
  if (int64_t r = largest(c.cluster.ranks, [](RunConfig& x, int64_t v) { x.cluster.ranks = v; }); r > 0) {
    hint = fmt::format("the largest cluster.ranks that fits is {}", r);
  } else if (int64_t bb = largest(c.data.batch_per_rank, [](RunConfig& x, int64_t v) { x.data.batch_per_rank = v; });
             bb > 0) {
    hint = fmt::format("the largest data.batch_per_rank that fits is {}", bb);
  } else if (c.training.epochs <= 0) {
    if (int64_t s = largest(c.training.steps, [](RunConfig& x, int64_t v) { x.training.steps = v; }); s > 0)
      hint = fmt::format("the largest training.steps that fits is {}", s);
  }
  return fmt::format("needs an estimated {} ({}) but {} is available; {}", size_2dp(e.total_bytes()), parts, size_2dp(available),
                     hint);
}


// ---- GPU memory of the modeled node ----------------------------------------------------------------------------------

namespace {

int state_buffers(const OptimizerConfig& o) { return o.kind == "sgd" ? (o.momentum != 0.0 ? 1 : 0) : 2; }

// Bytes of one activation value: 16-bit modes keep their activations in the format (fp8_mixed: its non-GEMM tensors
// in bf16), fp32 and tf32 in fp32.
double activation_element_bytes(const std::string& mode) { return mode == "fp32" || mode == "tf32" ? 4.0 : 2.0; }

// The compressor's buffers on one rank, from its wire format (sim/compress/*.cpp) and the bucket layout, without the
// gradient's values: its own payload for the whole gradient, and for gather compressors the ranks' gathered payloads
// (every bucket's, as they may all be in flight while backward overlaps). PowerSGD: P and Q of every matrix (the
// all-reduced payload) and the warm-start Q kept across steps. threshold keeps a value-dependent count: bounded by
// every value kept (8 bytes each); dgc by its step-0 warm-up density; both by compression.expected_density where a
// timing-only run gives it (dgc: its step-0 warm-up density, modeled_density).
int64_t compression_buffer_bytes(const RunConfig& c, const Model& model) {
  const auto& cp = c.compression;
  if (cp.kind == "none") return 0;
  const auto n = static_cast<double>(model.num_params());
  const double N = static_cast<double>(c.cluster.ranks);
  if (cp.kind == "fp16" || cp.kind == "bf16") return static_cast<int64_t>(2.0 * n);
  if (cp.kind == "fp8_e4m3" || cp.kind == "fp8_e5m2") return static_cast<int64_t>(n);
  if (cp.kind == "powersgd") {
    double pq = 0.0, q = 0.0, dense = 0.0;
    const auto r = static_cast<double>(cp.rank);
    for (const TensorInfo& t : model.tensors()) {
      if (t.shape.size() < 2 || t.count == 0) {
        dense += static_cast<double>(t.count);
        continue;
      }
      const auto rows = static_cast<double>(t.shape[0]), cols = static_cast<double>(t.count) / rows;
      if ((rows + cols) * r * cp.min_compression_rate >= rows * cols) {
        dense += static_cast<double>(t.count);
        continue;
      }
      pq += (rows + cols) * r;
      q += cols * r;
    }
    return static_cast<int64_t>(4.0 * (pq + q + dense));
  }
  std::vector<Bucket> buckets = {{0, model.num_params()}};
  if (!(cp.kind == "topk" && cp.scope == "model"))
    buckets = make_buckets(model.tensors(), static_cast<size_t>(c.sync.first_bucket_mb * 1048576.0),
                           static_cast<size_t>(c.sync.bucket_mb * 1048576.0));
  const CompressorEntry* entry = find_compressor(cp.kind);
  double own = 0.0;
  for (const Bucket& b : buckets) {
    const size_t m = b.end - b.begin;
    if ((cp.kind == "threshold" || cp.kind == "dgc") && cp.expected_density > 0) {  // timing-only runs
      own += 8.0 * static_cast<double>(kept_count(m, modeled_density(cp, 0), 0));  // dgc: step 0 keeps the most
    } else if (cp.kind == "threshold") {
      own += 8.0 * static_cast<double>(m);
    } else if (cp.kind == "dgc") {
      own += 8.0 * static_cast<double>(kept_count(m, dgc_density_at(cp.ratio, cp.warmup_steps, 0), 0));
    } else if (cp.kind == "signsgd") {
      own += static_cast<double>(sign_encoded_bytes(m, m));  // room for both planes (zeros)
    } else if (cp.kind == "onebit") {
      own += static_cast<double>(onebit_encoded_bytes(m, m));
    } else if (entry != nullptr && entry->payload_bytes) {  // a gather compressor's payload from its settings
      own += entry->payload_bytes(cp, m);
    }
  }
  const bool gathered = c.sync.kind != "parameter_server";  // the server receives the pushes, not the workers
  return static_cast<int64_t>(own * (gathered ? 1.0 + N : 1.0));
}

std::string size_1dp(double bytes) { return binary_size_text(bytes, 1); }

// The smallest ZeRO stage (sync.kind "zero", sync.stage 1 to 3; a zero run: the stages above its own) at which the run
// fits, the rest as configured, by estimate_gpu_memory; a compressor ZeRO does not take (anything but the fp16 and bf16
// casts) is left out, and said so. "" on one rank (nothing to shard) and for a zero run at stage 3.
std::string zero_stage_hint(const RunConfig& c, const Model& model) {
  if (c.cluster.ranks <= 1) return "";
  if (owns_communication(c.training.optimizer))
    return "ZeRO (sync.kind \"zero\") does not run training.optimizer.kind \"" + c.training.optimizer.kind + "\"";
  const int64_t first = c.sync.kind == "zero" ? c.sync.stage + 1 : 1;
  if (first > 3) return "";
  RunConfig x = c;
  x.sync.kind = "zero";
  x.sync.staleness = 0;
  std::string without;
  if (const std::string& k = c.compression.kind; k != "none" && k != "fp16" && k != "bf16") {
    x.compression.kind = "none";
    without = fmt::format(", without compression.kind \"{}\", which ZeRO does not take", k);
  }
  x.compression.error_feedback = "none";
  // With accumulation, stages 2 and 3 keep the gradient sharded only when every micro-batch is reduced.
  const bool every =
      c.training.accumulation_steps > 1 && x.compression.kind == "none" && c.precision.mode != "fp16_pure";
  for (int64_t stage = first; stage <= 3; ++stage) {
    x.sync.stage = stage;
    x.sync.reduce_every_microbatch = stage >= 2 && (every || c.sync.reduce_every_microbatch);
    const GpuMemoryEstimate e = estimate_gpu_memory(x, model);
    if (e.fits())
      return fmt::format("with ZeRO (sync.kind \"zero\"{}) the smallest sync.stage that fits is {}{} ({} per rank{})",
                         c.sync.kind == "zero" ? ", above this run's stage" : "", stage,
                         x.sync.reduce_every_microbatch && every ? " with sync.reduce_every_microbatch true" : "",
                         size_1dp(static_cast<double>(e.total_bytes())), without);
  }
  return fmt::format("no ZeRO stage fits either (sync.kind \"zero\", sync.stage 3: {} per rank{})",
                     size_1dp(static_cast<double>(estimate_gpu_memory(x, model).total_bytes())), without);
}

}  // namespace

int64_t GpuMemoryEstimate::total_bytes() const {
  return model_states_bytes() + activations_bytes + communication_bytes + compression_bytes + error_feedback_bytes;
}

json GpuMemoryEstimate::to_json() const {
  if (!known()) return nullptr;
  return {{"hardware", hardware},
          {"gpu", gpu},
          {"total_bytes", total_bytes()},
          {"capacity_bytes", capacity_bytes},
          {"usable_bytes", usable_bytes},
          {"fits", fits()},
          {"weights_bytes", weights_bytes},
          {"master_weights_bytes", master_weights_bytes},
          {"gradients_bytes", gradients_bytes},
          {"optimizer_bytes", optimizer_bytes},
          {"activations_bytes", activations_bytes},
          {"communication_bytes", communication_bytes},
          {"compression_bytes", compression_bytes},
          {"error_feedback_bytes", error_feedback_bytes},
          {"activations",
           {{"element_bytes", activation_element_bytes},
            {"stored_bytes", static_cast<int64_t>(activations.stored_bytes)},
            {"working_bytes", static_cast<int64_t>(activations.working_bytes)},
            {"per_block_bytes", static_cast<int64_t>(activations.per_block_bytes)},
            {"blocks", activations.blocks}}}};
}

GpuMemoryEstimate estimate_gpu_memory(const RunConfig& c, const Model& model) {
  GpuMemoryEstimate e;
  try {
    const std::string name = c.cluster.hardware == "detect" ? resolve_hardware(c) : c.cluster.hardware;
    const auto hw = load_hardware_profile(name);
    e.hardware = hw->name;
    e.gpu = hw->gpu;
    e.capacity_bytes = static_cast<int64_t>(hw->memory_capacity_bytes());
    e.usable_bytes = static_cast<int64_t>(hw->memory_usable_bytes());
  } catch (const std::exception&) {
    return e;  // the run reports the profile's error itself
  }
  const auto n = static_cast<double>(model.num_params());
  const std::string& mode = c.precision.mode;
  const int k = state_buffers(update_optimizer(c));  // momentum correction: the velocity counts as error feedback
  const BytesPerParam bpp = bytes_per_param(parse_precision_mode(mode), k);
  auto bytes = [](double x) { return static_cast<int64_t>(std::ceil(x)); };
  const std::string& sync = c.sync.kind;
  if (sync == "parameter_server") {
    // A worker holds the pulled parameters (fp32, or the fp16 server's fp16) and their copy in the format it computes
    // with (mixed modes), and its gradient; the optimizer runs on the server. A co-located shard (sync.dedicated
    // false) lives on the ranks r < shards: its parameters and optimizer state (the largest shard, on rank 0).
    const bool fp16_server = mode == "fp16_pure";
    const double server_param = fp16_server ? 2.0 : 4.0;
    e.weights_bytes = bytes(n * (server_param + (bpp.master > 0 ? bpp.weights : 0.0)));
    e.gradients_bytes = bytes(n * bpp.gradients);
    if (!c.sync.dedicated) {
      const double shards = static_cast<double>(c.sync.shards > 0 ? c.sync.shards : c.cluster.ranks);
      const double shard = std::ceil(n / shards);
      e.master_weights_bytes = bytes(shard * server_param);
      e.optimizer_bytes = bytes(shard * (fp16_server ? 2.0 : 4.0) * k);
    }
    e.communication_bytes = bytes(n * bpp.wire);  // the push buffer
  } else if (sync == "zero") {
    // ZeRO (Rajbhandari et al. 2020, section 5, with K = 12 for mixed-precision Adam; docs/memory.md): stage 1 shards
    // the optimizer state and the fp32 master weights, 2 also the gradients, 3 also the weights; each rank holds its
    // partition of ceil(n / N) elements. Stages 2 and 3 keep one reduce bucket (sync.bucket_mb, DeepSpeed's
    // reduce_bucket_size) of the gradient in the wire format; stage 3 also the gathered weights of two layers (the one
    // computing and the one prefetched); stage 1 the whole gradient's bucket buffers, as DDP.
    const double part = std::ceil(n / static_cast<double>(std::max<int64_t>(1, c.cluster.ranks)));
    const int64_t stage = c.sync.stage;
    e.weights_bytes = bytes((stage >= 3 ? part : n) * bpp.weights);
    e.master_weights_bytes = bytes(part * bpp.master);
    // Gradients sharded at stage >= 2 once reduced; with K > 1 micro-batches reduced once per step (the default) the
    // rank accumulates the whole gradient until the last micro-batch; sync.reduce_every_microbatch reduce-scatters
    // each micro-batch as its backward ends and accumulates only the shard (DeepSpeed stage 2).
    const bool sharded_grad = stage >= 2 && (c.training.accumulation_steps <= 1 || c.sync.reduce_every_microbatch);
    e.gradients_bytes = bytes((sharded_grad ? part : n) * bpp.gradients);
    e.optimizer_bytes = bytes(part * bpp.optimizer_state);
    if (c.cluster.ranks > 1) {
      const double bucket = std::min(n, c.sync.bucket_mb * 1048576.0 / 4.0);
      e.communication_bytes = bytes((stage >= 2 ? bucket : n) * bpp.wire);
      if (stage >= 3) {
        double largest = 0.0;
        for (const LayerCost& l : model.layer_costs())
          largest = std::max(largest, static_cast<double>(l.param_end - l.param_begin));
        e.communication_bytes += bytes(2.0 * largest * bpp.weights);
      }
    }
  } else {
    e.weights_bytes = bytes(n * bpp.weights);
    e.master_weights_bytes = bytes(n * bpp.master);
    e.gradients_bytes = bytes(n * bpp.gradients);
    if (sync == "allreduce") e.gradients_bytes += bytes(static_cast<double>(c.sync.staleness) * n * bpp.gradients);
    e.optimizer_bytes = bytes(n * bpp.optimizer_state);
    // DDP copies the gradient into its bucket buffers (gradient_as_bucket_view=False, PyTorch's default: "the saved
    // memory size will be equal to the total gradients size" when it is True); local SGD averages the parameters
    // through the same buckets. One rank alone communicates nothing.
    if (sync != "independent" && c.cluster.ranks > 1) e.communication_bytes = bytes(n * bpp.wire);
  }
  // 0/1 Adam: its momentum_accumulator (fp32, beside m and v); 1-bit LAMB: exp_avg_sq_fresh and the clone of the
  // momentum each compressed step keeps (exp_avg_last_step), fp32.
  if (c.training.optimizer.kind == "zero_one_adam") e.optimizer_bytes += bytes(4.0 * n);
  if (c.training.optimizer.kind == "onebit_lamb") e.optimizer_bytes += bytes(8.0 * n);
  if (owns_communication(c.training.optimizer) && c.cluster.ranks > 1) {
    // 1-bit Adam, 0/1 Adam and 1-bit LAMB (strategy/onebit_adam.cpp, zero_one_adam.cpp, onebit_lamb.cpp; 1-bit Adam
    // with uncompressed_tensors: P of the compressed tensors): worker error (padded P) and server error
    // (P / N) in fp32; the compressed all-reduce's workspace (onebit_workspace_bytes: the compensated momentum, the
    // server's chunk, the messages sent and the N received of both phases, 1-bit Adam's flat compressed group).
    const double N = static_cast<double>(c.cluster.ranks);
    size_t compressed = 0;
    for (const TensorInfo& t : model.tensors())
      if (!onebit_non_freeze(c.training.optimizer, t)) compressed += t.count;
    const auto P = static_cast<double>(onebit_padded_elements(compressed, static_cast<int>(N)));
    e.error_feedback_bytes = bytes(4.0 * (P + P / N));
    e.compression_bytes = onebit_workspace_bytes(compressed, compressed < model.num_params(), static_cast<int>(N));
  }
  if (c.compression.kind != "none") {
    e.compression_bytes = compression_buffer_bytes(c, model);
    if (c.compression.kind == "dgc") e.error_feedback_bytes = bytes(8.0 * n);  // velocity u and accumulation v
    else if (c.compression.error_feedback == "gradient") e.error_feedback_bytes = bytes(4.0 * n);
    // momentum correction (velocity u and residual v) and ef21 (the rank's h and the mean G): two per rank
    else if (c.compression.error_feedback != "none") e.error_feedback_bytes = bytes(8.0 * n);
  }
  e.activation_element_bytes = activation_element_bytes(mode);
  e.activations = model.activation_memory(c.data.batch_per_rank, e.activation_element_bytes,
                                          c.training.activation_checkpointing);
  e.activations_bytes = bytes(e.activations.total_bytes());
  return e;
}

std::string gpu_memory_skip_reason(const RunConfig& c, const Model& model) {
  const GpuMemoryEstimate e = estimate_gpu_memory(c, model);
  if (e.fits()) return "";
  std::string parts;
  const std::pair<const char*, int64_t> terms[] = {
      {"weights", e.weights_bytes},           {"master weights", e.master_weights_bytes},
      {"gradients", e.gradients_bytes},       {"optimizer state", e.optimizer_bytes},
      {"activations", e.activations_bytes},   {"communication buffers", e.communication_bytes},
      {"compression buffers", e.compression_bytes}, {"error feedback", e.error_feedback_bytes}};
  for (const auto& [name, b] : terms)
    if (b > 0) parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", name, size_1dp(static_cast<double>(b)));
  const double n = static_cast<double>(model.num_params());
  const auto hw = load_hardware_profile(e.hardware);
  // The largest micro-batch that fits, the rest unchanged (activations grow with it; nothing else does).
  auto fits_with = [&](int64_t b, bool ckpt) {
    RunConfig x = c;
    x.data.batch_per_rank = b;
    x.training.activation_checkpointing = ckpt;
    return estimate_gpu_memory(x, model).fits();
  };
  auto largest = [&](bool ckpt) -> int64_t {  // in [1, the configured batch]; 0 when none fits
    if (!fits_with(1, ckpt)) return 0;
    int64_t lo = 1, hi = c.data.batch_per_rank;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (fits_with(mid, ckpt)) lo = mid; else hi = mid - 1;
    }
    return lo;
  };
  const bool can_checkpoint = e.activations.blocks > 0 && !c.training.activation_checkpointing;
  // What checkpointing would let fit: the configured micro-batch, or the largest below it (0: none).
  std::string with_checkpointing;
  if (can_checkpoint) {
    if (fits_with(c.data.batch_per_rank, true))
      with_checkpointing = "with training.activation_checkpointing true it fits as configured";
    else if (const int64_t bc = largest(true); bc > 0)
      with_checkpointing = fmt::format("with training.activation_checkpointing true the largest that fits is {}", bc);
  }
  std::string hint;
  if (const int64_t b = largest(c.training.activation_checkpointing); b > 0) {
    hint = fmt::format("the largest data.batch_per_rank that fits is {} (training.accumulation_steps keeps the "
                       "global batch)", b);
    if (!with_checkpointing.empty()) hint += "; " + with_checkpointing;
  } else if (!with_checkpointing.empty()) {
    hint = "no data.batch_per_rank fits without checkpointing; " + with_checkpointing;
  } else {
    const double buffers = static_cast<double>(e.communication_bytes + e.compression_bytes + e.error_feedback_bytes);
    const std::string shard =
        c.sync.kind == "zero"
            ? (c.sync.stage < 3 ? fmt::format("without sharding more of them than sync.stage {} does (sync.stage 3 "
                                              "shards the most)",
                                              c.sync.stage)
                                : std::string("even at sync.stage 3 (every state sharded) without more ranks"))
            : std::string("without sharding the states over the ranks (ZeRO / FSDP: sync.kind \"zero\", sync.stage "
                          "3 shards the most)");
    hint = fmt::format("the model states (weights, master weights, gradients, optimizer state) take {} ({:.1f} GB, "
                       "{:.1f} bytes per parameter){}: no micro-batch fits beside them {}, a smaller precision.mode or "
                       "another optimizer",
                       size_1dp(static_cast<double>(e.model_states_bytes())),
                       static_cast<double>(e.model_states_bytes()) / 1e9,
                       n > 0 ? static_cast<double>(e.model_states_bytes()) / n : 0.0,
                       buffers > 0 ? " and the buffers " + size_1dp(buffers) : std::string(), shard);
  }
  if (const std::string zero = zero_stage_hint(c, model); !zero.empty()) hint += "; " + zero;
  // The built-in profiles whose GPU holds it as configured.
  std::string others;
  for (const std::string& name : hardware_profile_names()) {
    if (name == e.hardware) continue;
    RunConfig x = c;
    x.cluster.hardware = name;
    if (estimate_gpu_memory(x, model).fits()) others += (others.empty() ? "" : ", ") + name;
  }
  return fmt::format("does not fit one GPU of hardware profile \"{}\" ({}): the GPU memory estimate per rank is {} "
                     "({:.1f} GB: {}) but {:.0f} GiB x memory.usable_fraction {} = {} is usable (docs/memory.md); {}{}",
                     e.hardware, e.gpu, size_1dp(static_cast<double>(e.total_bytes())),
                     static_cast<double>(e.total_bytes()) / 1e9, parts, hw->memory_capacity_GiB,
                     hw->memory_usable_fraction, size_1dp(static_cast<double>(e.usable_bytes)), hint,
                     others.empty() ? "" : "; as configured it fits one GPU of " + others);
}

std::string binary_size_text(double bytes, int decimals) {
  static constexpr const char* kUnits[] = {"GiB", "MiB", "KiB"};
  double scale = 1073741824.0;
  for (const char* unit : kUnits) {
    if (bytes >= scale) return fmt::format("{:.{}f} {}", bytes / scale, decimals, unit);
    scale /= 1024.0;
  }
  return fmt::format("{:.0f} B", bytes);
}

}  // namespace gs
