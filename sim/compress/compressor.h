// Gradient compressors (docs/design.md, section 2): the interface every compressor implements, the per-bucket job
// the compressed reduction hands it, and the registry. A new compressor is one file under sim/compress/ (its class and
// its CompressorEntry) plus one line in kCompressors (sim/compress/registry.cpp) (README, "Adding a compressor").
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/compress_math.h"
#include "sim/comm/communicator.h"
#include "sim/config/run_config.h"
#include "sim/core/element_ops.h"
#include "sim/model/model.h"

namespace gs {

// Random draws: every stochastic compressor keys its draws by (training.seed, stream) with stream =
// compress_stream(step, rank, bucket) (kernels/compress_math.h: the ONE place the stream is built; BucketJob::stream()
// is its only caller here). Draws shared by every rank (random-k with shared_indices) use rank kSharedRank.
constexpr uint32_t kSharedRank = 0xffff;

// Which collective carries the encoded gradient (the report's compression.collective).
enum class WireCollective { kAllReduce, kAllGather, kReduceScatter };
const char* collective_name(WireCollective c);

// One collective a compressor issued for a bucket, for the modeled clock: NCCL's nBytes (all-reduce: the buffer;
// all-gather: the whole gathered output; reduce-scatter: the whole input).
struct WireCall {
  WireCollective kind = WireCollective::kAllReduce;
  double bytes = 0.0;
};

// Seconds and bytes one rank spends on one step's compression (filled by the jobs, read by the reducer).
struct CompressTally {
  double compress_s = 0.0;    // encode (and error-feedback bookkeeping)
  double decompress_s = 0.0;  // decode and sum of the received payloads
  double communicate_s = 0.0; // inside collectives (waiting included; the reducer splits out the wait)
  uint64_t payload_bytes = 0; // this rank's encoded gradient: index + value bytes, bit-packed sizes, norms, scales
  uint64_t wire_bytes = 0;    // bytes this rank puts on the wire (ring conventions of CommStats)
  // The collectives the job issued, in issue order (the reducer clears them before each job). The modeled clock prices
  // a bucket with price_compressed_bucket (sim/compress/modeled.h), which takes from them only the largest payload of
  // a gather; tests check them against its calls.
  std::vector<WireCall> calls;
  // The rank's measured clock, or nullptr: each CompressSpan adds its span, timed on the jobs' memory, to its compress
  // phase (the reducer's steps; the parameter server times its own).
  PhaseClock* clock = nullptr;
  // Where a device memory's span times go (the report's per-step compress / decompress times on the device's clock,
  // CUDA events): each CompressSpan with a clock on non-host memory adds its span there when the memory settles, so
  // they must outlive the rank's next settle (the reducer points them into its step record). Null: the host seconds
  // go to compress_s / decompress_s as on host memory.
  double* settled_compress_s = nullptr;
  double* settled_decompress_s = nullptr;
};

// One encode / decode span of a rank's compression: from construction to end(), where the tally carries the rank's
// clock, the span timed on `ops`' memory (ElementOps::phase_begin / phase_end: CUDA events on the rank's stream on a
// device, the steady clock on the host) goes to its compress phase; the report's per-step time (the tally's `seconds`
// field, compress_s or decompress_s) gets the host seconds around the span on host memory, and on a device the same
// event-timed span through the tally's settled_compress_s / settled_decompress_s where set (else the host seconds:
// the time to enqueue the work and to wait where a result comes back). The destructor ends a span not ended.
class CompressSpan {
 public:
  CompressSpan(ElementOps& ops, int rank, CompressTally& tally, double CompressTally::*seconds)
      : ops_(ops), rank_(rank), tally_(tally), seconds_(seconds), host0_(now_s()),
        mark_(tally.clock != nullptr ? ops.phase_begin(rank) : 0.0) {}
  ~CompressSpan() { end(); }
  CompressSpan(const CompressSpan&) = delete;
  CompressSpan& operator=(const CompressSpan&) = delete;
  void end() {
    if (done_) return;
    done_ = true;
    double* settled = nullptr;
    if (tally_.clock != nullptr && !ops_.host())
      settled = seconds_ == &CompressTally::compress_s ? tally_.settled_compress_s : tally_.settled_decompress_s;
    if (settled == nullptr) tally_.*seconds_ += now_s() - host0_;
    if (tally_.clock != nullptr) ops_.phase_end(rank_, mark_, Phase::kCompress, *tally_.clock, settled);
  }

 private:
  ElementOps& ops_;
  int rank_;
  CompressTally& tally_;
  double CompressTally::*seconds_;
  double host0_;
  double mark_;
  bool done_ = false;
};

// One rank's buffers of the default gather path (Compressor::reduce_bucket) in the memory of its jobs, kept by the
// reducer across steps and grown on demand: this rank's message, every rank's messages as the all-gather lays them
// out, and a compressor's index scratch (uint32 indices stored in float words).
struct CompressSpace {
  FloatBuffer payload;
  FloatBuffer gathered;
  FloatBuffer indices;
  // b's storage with room for at least `words` floats, reallocated (zeroed) in `memory` when smaller.
  static float* room(ElementOps& memory, int rank, FloatBuffer& b, size_t words);
};

// One bucket of one rank's step. The compressor reads p (the rank's gradient sum plus the error-feedback residual),
// writes own_decoded = decode(C(p)) (what the other ranks will reconstruct from this rank's message, used for error
// feedback) and sum = the sum over ranks, in rank order, of the decoded messages (divided by `divisor` already when
// the compressor says divides_itself()).
struct BucketJob {
  Communicator* comm = nullptr;
  int rank = 0;
  int ranks = 1;
  int64_t step = 0;              // 0-based optimizer step
  uint32_t bucket = 0;           // bucket index within the step (compress_stream)
  uint64_t seed = 0;             // training.seed
  size_t offset = 0;             // first element of the bucket in the flat gradient
  size_t n = 0;                  // elements
  const float* p = nullptr;      // [n] input
  float* own_decoded = nullptr;  // [n] output: decode(C(p))
  float* sum = nullptr;          // [n] output: sum over ranks of the decoded messages (or the average, see above)
  double divisor = 1.0;          // S: the step's global sample count (the average is sum / S)
  const std::vector<TensorInfo>* tensors = nullptr;  // the model's tensor table (PowerSGD's matrices)
  CompressTally* tally = nullptr;
  // The memory p, own_decoded and sum live in (nullptr: host memory), and the reducer's buffers there (the default
  // gather path needs them; a compressor's encode / decode_add alone do not).
  ElementOps* memory = nullptr;
  CompressSpace* space = nullptr;
  ElementOps& ops() const { return memory != nullptr ? *memory : host_element_ops(); }
  // The memory's compressor operations (sim/core/compress_ops.h). Throws gs::Error where the memory has none.
  CompressOps& compress_ops() const;
  uint64_t stream() const { return stream_for(static_cast<uint32_t>(rank)); }
  uint64_t stream_for(uint32_t r) const { return compress_stream(static_cast<uint32_t>(step), r, bucket); }
};

// One rank's compressor. Instances are per rank (state such as PowerSGD's Q or DGC's velocity lives inside).
class Compressor {
 public:
  virtual ~Compressor() = default;
  virtual WireCollective collective() const = 0;
  // Whole-model compression (top-k with scope "model"): the reducer hands one job covering every element.
  virtual bool whole_model() const { return false; }
  // True when the compressor keeps its own residual (DGC's velocity) instead of the reducer's plain error feedback.
  virtual bool own_feedback() const { return false; }
  // True when job.sum is already the average (casts divide in the wire format as `divide` says).
  virtual bool divides_itself() const { return false; }
  // The compressor's own residual (own_feedback compressors: DGC's velocity v, flat, the model's n floats in the
  // memory of its jobs), else nullptr (also before its first job).
  virtual const float* own_residual() const { return nullptr; }
  // Does this rank's part of the bucket: encode, exchange, decode. Collective: every rank calls it for the same
  // bucket. The default (gather compressors) is encode -> all-gather of the payloads -> decode_add in rank order.
  virtual void reduce_bucket(const BucketJob& job);

  // Gather compressors: the most bytes encode_into writes for a bucket of n values (the room it is given).
  virtual size_t max_payload_bytes(size_t n) const { return 0; }
  // Gather compressors: encode p[0..n) into out (the job's memory, room for max_payload_bytes(n) bytes, 4-byte
  // aligned) through job.compress_ops(), or host loops where the compressor runs on host memory only
  // (CompressorEntry::element_ops false); returns the message's bytes (bit-packed).
  virtual size_t encode_into(const BucketJob& job, uint8_t* out) { return 0; }
  // Host memory: encode p[0..n) into payload (replacing its contents). The default: encode_into a payload of
  // max_payload_bytes(n), then cut to the message's bytes.
  virtual void encode(const BucketJob& job, std::vector<uint8_t>& payload);
  // Gather compressors: out[0..n) += decode(payload of rank `src`), in the job's memory (payload 4-byte aligned).
  virtual void decode_add(const BucketJob& job, int src, const uint8_t* payload, size_t bytes, float* out) {}
  // Gather compressors whose receivers combine messages in another way than a sum (signSGD majority vote):
  // overwrite job.sum from all payloads (payloads[r], pointers into the job's memory, sizes[r]). Return false to use
  // the decode_add sum.
  virtual bool combine(const BucketJob& job, const std::vector<const uint8_t*>& payloads,
                       const std::vector<size_t>& sizes) {
    return false;
  }
};

// One rank's payload in bytes for a bucket of n values, from the settings alone (a gather compressor whose payload
// size does not depend on the values, or its size without the value-dependent part): what the modeled clock prices
// where no training run measured it (timing-only runs) and what the GPU memory estimate holds for it.
using PayloadBytes = double (*)(const CompressionConfig& c, size_t n);

// A compressor's registry line, returned by `CompressorEntry <name>_compressor()` in sim/compress/<name>.cpp.
struct CompressorEntry {
  const char* name;
  const char* doc;
  std::unique_ptr<Compressor> (*make)(const RunConfig& config, const Model& model, int ranks);
  // The fields that apply under this kind (compression.ratio, ...): compression.kind's choices, its fields' "only
  // applies when compression.kind is ..." rules and the kinds at the start of their docs are derived from them
  // (sim/validate/kinds.cpp).
  std::vector<std::string> options;
  KindIssues issues = nullptr;  // its cross-field rule beyond the options (sim/validate: validate_config)
  // Its payload from the settings (a gather compressor's); nullptr where sim/compress/modeled.cpp prices the kind's
  // wire itself (the casts' all-reduce, PowerSGD's factors, threshold's and DGC's expected density).
  PayloadBytes payload_bytes = nullptr;
  // True when every element operation of the kind goes through CompressOps (sim/core/compress_ops.h), so that it runs
  // on a backend's device memory; false for a kind with host loops (host_memory_reason names it).
  bool element_ops = false;
};

// Every compressor, in registry order ("none" first: the foundation's uncompressed path, no Compressor object).
const std::vector<CompressorEntry>& compressor_registry();
// The registry line of `kind`, or nullptr for a kind it does not hold.
const CompressorEntry* find_compressor(const std::string& kind);
// A new instance for one rank; nullptr for "none". Throws gs::Error on an unknown kind.
std::unique_ptr<Compressor> make_compressor(const RunConfig& config, const Model& model, int ranks);

// The fields every lossy kind takes (compression.measure_error, compression.error_feedback: error feedback sits in the
// reducer), then `more`.
std::vector<std::string> lossy_options(std::vector<std::string> more = {});
// threshold's and DGC's rule: the share of values they keep depends on the gradient, so a timing-only run needs
// compression.expected_density in (0, 1] and a training run (which measures it) must not set it.
void expected_density_issues(const RunConfig& c, std::vector<ConfigIssue>& issues);

// The cast all-reduce's pre- and post-divisors of the world size N (`compression.divide`): pre (N, 1), post (1, N),
// split (2^floor(log2(N)/2), N / that); pre * post = N. Shared by the cast compressor and ZeRO's cast reduce-scatter.
std::pair<double, double> cast_divisors(const std::string& divide, int ranks);

// The cast all-reduce's sum, shared by the cast compressor and ZeRO's cast reduce-scatter, on rank `rank`'s buffers of
// `memory`: out[i] = wires[0][i] + wires[1][i] + ... in rank order, each add rounded to `format` (add_in_format) or,
// with fp32_sum (compression.accumulate "fp32"), in fp32; then divided by `post` in the format (cast_post_divide) or,
// with fp32_sum, in fp32 (post is an integer, exact in fp32; 1: no division). wires: one pointer per rank, n values.
void sum_cast_wires(ElementOps& memory, int rank, float* out, const std::vector<const float*>& wires, size_t n,
                    FloatFormat format, bool fp32_sum, double post);

// The compressor operations of `memory` (ElementOps::compress_ops()). Throws gs::Error where the memory has none.
CompressOps& compress_ops_of(ElementOps& memory);

// PowerSGD's initial Q of every matrix it compresses (the same on every rank: Philox normals of training.seed, not
// orthogonalized; sim/compress/powersgd.cpp), for export beside the report (sim/report/run_files.h): tensor is the
// index in model.tensors(), q is cols x rank row-major (cols = the tensor's count / shape[0]; PyTorch's powerSGD_hook
// holds the same matrix as its q of shape [cols, rank]).
struct PowerSgdInitialQ {
  size_t tensor = 0;
  size_t cols = 0, rank = 0;
  std::vector<float> q;
};
std::vector<PowerSgdInitialQ> powersgd_initial_q(const RunConfig& c, const Model& m);

// DGC's exponential warm-up (Lin et al. 2018, section 3.4) of the fraction kept at 0-based step t:
// target^((t + 1) / (W + 1)) for t < W = warmup (0.25 -> 0.0625 -> ... for target 0.001, W = 4), then target. The dgc
// compressor's ratio follows it with target compression.ratio; a timing-only run's density with target
// compression.expected_density (sim/compress/modeled.cpp).
double dgc_density_at(double target, int64_t warmup, int64_t step);

// Number of values kept out of n for ratio/k settings: k if k > 0, else max(1, round(ratio * n)), at most n.
size_t kept_count(size_t n, double ratio, int64_t k);

// Sparse wire format shared by topk, randomk, threshold and dgc: count uint32 indices (ascending) then count fp32
// values (value j = scale * p[idx[j]]), 8 bytes per kept value; with indices_implied only the values (4 bytes each).
// encode_sparse writes the values into out after the count indices already there (or at out with indices_implied;
// idx may be out itself), through job.compress_ops() on the job's memory, and returns the message's bytes.
size_t encode_sparse(const BucketJob& job, const uint32_t* idx, size_t count, float scale, bool indices_implied,
                     uint8_t* out);
// out[idx[j]] += value j of a sparse payload of `bytes` bytes (the job's memory); idx is read from the payload unless
// given.
void decode_sparse_add(const BucketJob& job, const uint8_t* payload, size_t bytes, const uint32_t* implied_idx,
                       float* out);

// Byte helpers of the wire formats (little-endian host layout).
template <class T>
inline void put(std::vector<uint8_t>& out, const T& v) {
  const auto* b = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), b, b + sizeof(T));
}
template <class T>
inline T get_at(const uint8_t* in, size_t byte_offset) {
  T v;
  std::memcpy(&v, in + byte_offset, sizeof(T));
  return v;
}

}  // namespace gs
