// Cast compressors fp16, bf16, fp8_e4m3, fp8_e5m2: the cast sets the all-reduce's wire format and the sum runs in that
// format in rank order, rounding (RNE) after every add, as a ring/tree all-reduce in that dtype does on GPUs. What is
// cast is the rank's mean gradient (its sum / its samples, in fp32), as DDP's fp16_compress_hook casts the bucket of
// mean gradients; the division by the world size N happens in the format before the sum, after it, or split
// (`divide`). `accumulate: fp32` sums the cast values in fp32 instead (reduce_bucket). Element math: kernels/compress_math.h (cast_wire_value, cast_post_divide); conversions:
// kernels/float_formats.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/float_formats.h"
#include "kernels/nvtx.h"
#include "sim/compress/compressor.h"
#include "sim/core/error.h"
#include "sim/core/clock.h"

namespace gs {
namespace {

FloatFormat format_of(const std::string& kind) {
  if (kind == "fp16") return FloatFormat::kFp16;
  if (kind == "bf16") return FloatFormat::kBf16;
  if (kind == "fp8_e4m3") return FloatFormat::kFp8E4M3;
  if (kind == "fp8_e5m2") return FloatFormat::kFp8E5M2;
  throw Error("compression.kind: \"" + kind + "\" is not a cast");
}

class Cast final : public Compressor {
 public:
  Cast(FloatFormat f, std::string divide, bool fp32_sum)
      : format_(f), divide_(std::move(divide)), fp32_sum_(fp32_sum) {}
  WireCollective collective() const override { return WireCollective::kAllReduce; }
  bool divides_itself() const override { return true; }

  // Parameter-server pushes (sim/strategy/parameter_server.cpp), job.divisor = b, the pushing worker's samples (<= 0:
  // taken as 1): the worker's mean gradient m = p / b in fp32 (as the all-reduce casts it, DDP's fp16_compress_hook
  // order) cast element by element to the format's bit patterns (format_bytes each, little-endian), so an fp16 push
  // overflows where the mean does (|m| > 65504), not b times earlier. No division by N here (`divide` is an
  // all-reduce option). decode_add widens m exactly and rescales it by the same b (m * b in double, rounded to fp32:
  // back in the units of a gradient sum), so the server's fp32 sum over its pushes, divided by their samples, is the
  // update of the uncompressed server in exact arithmetic.
  static double push_samples(const BucketJob& job) { return job.divisor > 0 ? job.divisor : 1.0; }
  void encode(const BucketJob& job, std::vector<uint8_t>& payload) override {
    const size_t n = job.n;
    const size_t w = static_cast<size_t>(format_bytes(format_));
    const float b = static_cast<float>(push_samples(job));
    payload.resize(n * w);
    uint8_t* out = payload.data();
    for (size_t i = 0; i < n; ++i) {
      const float x = cast_wire_value(format_, job.p[i], b, 1.0);  // a value of the format: the casts below are exact
      switch (format_) {
        case FloatFormat::kFp16: {
          const uint16_t h = fp32_to_fp16(x);
          std::memcpy(out + 2 * i, &h, 2);
          break;
        }
        case FloatFormat::kBf16: {
          const uint16_t h = fp32_to_bf16(x);
          std::memcpy(out + 2 * i, &h, 2);
          break;
        }
        case FloatFormat::kFp8E4M3: out[i] = fp32_to_fp8_e4m3(x); break;
        case FloatFormat::kFp8E5M2: out[i] = fp32_to_fp8_e5m2(x); break;
        default: throw Error("cast compressor: fp32 is not a cast format");
      }
    }
  }
  void decode_add(const BucketJob& job, int, const uint8_t* payload, size_t, float* out) override {
    const double b = push_samples(job);
    for (size_t i = 0; i < job.n; ++i) {
      float x = 0.0f;
      switch (format_) {
        case FloatFormat::kFp16: x = fp16_to_fp32(get_at<uint16_t>(payload, 2 * i)); break;
        case FloatFormat::kBf16: x = bf16_to_fp32(get_at<uint16_t>(payload, 2 * i)); break;
        case FloatFormat::kFp8E4M3: x = fp8_e4m3_to_fp32(payload[i]); break;
        case FloatFormat::kFp8E5M2: x = fp8_e5m2_to_fp32(payload[i]); break;
        default: break;
      }
      out[i] += b == 1.0 ? x : static_cast<float>(static_cast<double>(x) * b);
    }
  }

  // Every element operation through the job's memory (CompressOps::cast_encode, add_in_format,
  // post_divide_in_format; ElementOps' copy, add and divide for the fp32 sum), the wire values all-gathered there.
  void reduce_bucket(const BucketJob& job) override {
    GS_EXPECT(job.space != nullptr, "a cast all-reduce needs the reducer's buffers (BucketJob::space)");
    CompressTally& t = *job.tally;
    ElementOps& ops = job.ops();
    CompressOps& cops = job.compress_ops();
    const auto [pre, post] = cast_divisors(divide_, job.ranks);
    GS_EXPECT(job.divisor > 0, "a cast all-reduce needs the step's sample count");
    // The rank's samples: S / N (the mean count where ranks' counts differ, so the all-reduced mean is still the sum
    // of every sample's gradient over S).
    const double b = job.divisor / static_cast<double>(job.ranks);
    const size_t n = job.n;
    CompressSpan encode(ops, job.rank, t, &CompressTally::compress_s);
    NvtxPhases nvtx(NvtxName::kCompress);
    float* wire = CompressSpace::room(ops, job.rank, job.space->payload, n);
    cops.cast_encode(job.rank, wire, job.own_decoded, job.p, n, format_, static_cast<float>(b), pre, b);
    encode.end();
    double t1 = now_s();
    nvtx.next(NvtxName::kCommunicate, static_cast<uint64_t>(n) * static_cast<uint64_t>(format_bytes(format_)));
    float* recv = CompressSpace::room(ops, job.rank, job.space->gathered, n * static_cast<size_t>(job.ranks));
    job.comm->all_gather(job.rank, recv, wire, n);
    t.communicate_s += now_s() - t1;
    nvtx.next(NvtxName::kCompress);
    CompressSpan decode(ops, job.rank, t, &CompressTally::decompress_s);
    // Element i summed over ranks 0..N-1: in the wire format, rounded after every add, then divided by `post` in it;
    // or (accumulate "fp32") in fp32, rounding only to fp32 (values of at most 11 significand bits: a sum of a few is
    // often exact), then divided by `post` in fp32: what Megatron's accumulate_allreduce_grads_in_fp32 or an fp32
    // reduce-scatter gives (one rank's large value no longer swamps the others' small ones at a wire-format add).
    std::vector<const float*> wires(static_cast<size_t>(job.ranks));
    for (size_t r = 0; r < wires.size(); ++r) wires[r] = recv + r * n;
    sum_cast_wires(ops, job.rank, job.sum, wires, n, format_, fp32_sum_, post);
    decode.end();
    const uint64_t bytes = static_cast<uint64_t>(n) * static_cast<uint64_t>(format_bytes(format_));
    t.payload_bytes += bytes;
    const double share = static_cast<double>(job.ranks - 1) / job.ranks;
    if (fp32_sum_) {
      // Reduce-scatter of the cast payload (each rank's chunk j goes, in the format, to chunk j's owner: (N-1)/N of
      // the payload per rank, NCCL's reduce-scatter bytes at the cast size), then an all-gather of the fp32 sums.
      t.calls.push_back({WireCollective::kReduceScatter, static_cast<double>(bytes)});
      t.calls.push_back({WireCollective::kAllGather, 4.0 * static_cast<double>(n)});
      t.wire_bytes += static_cast<uint64_t>(share * static_cast<double>(bytes) + share * 4.0 * static_cast<double>(n));
    } else {
      t.calls.push_back({WireCollective::kAllReduce, static_cast<double>(bytes)});
      t.wire_bytes += static_cast<uint64_t>(2.0 * share * static_cast<double>(bytes));
    }
  }

 private:
  FloatFormat format_;
  std::string divide_;
  bool fp32_sum_;
};

std::unique_ptr<Compressor> make(const RunConfig& rc, const Model&, int) {
  const CompressionConfig& c = rc.compression;
  return std::make_unique<Cast>(format_of(c.kind), c.divide, c.accumulate == "fp32");
}

CompressorEntry cast_entry(const char* name, const char* doc) {
  return {name, doc, make, lossy_options({"compression.divide", "compression.accumulate"}), nullptr, nullptr, true};
}

}  // namespace

void sum_cast_wires(ElementOps& memory, int rank, float* out, const std::vector<const float*>& wires, size_t n,
                    FloatFormat format, bool fp32_sum, double post) {
  CompressOps& cops = compress_ops_of(memory);
  memory.copy(rank, out, wires[0], n);
  for (size_t q = 1; q < wires.size(); ++q) {
    if (fp32_sum) {
      memory.add(rank, out, wires[q], n);
    } else {
      cops.add_in_format(rank, out, wires[q], n, format);
    }
  }
  if (post == 1.0) return;
  if (fp32_sum) {
    memory.divide(rank, out, n, static_cast<float>(post));  // N / 2^floor(log2(N)/2) or N: exact in fp32
  } else {
    cops.post_divide_in_format(rank, out, n, format, post);
  }
}

std::pair<double, double> cast_divisors(const std::string& divide, int ranks) {
  const double N = static_cast<double>(ranks);
  if (divide == "pre") return {N, 1.0};
  if (divide == "post") return {1.0, N};
  const double pre = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(N) / 2.0)));
  return {pre, N / pre};
}

CompressorEntry fp16_compressor() {
  return cast_entry("fp16", "cast to IEEE half: all-reduce summed in fp16 in rank order (RNE after every add); `divide`");
}
CompressorEntry bf16_compressor() {
  return cast_entry("bf16", "cast to bfloat16: all-reduce summed in bf16 in rank order; `divide`");
}
CompressorEntry fp8_e4m3_compressor() {
  return cast_entry("fp8_e4m3", "cast to OCP FP8 E4M3 (saturating): all-reduce summed in E4M3 in rank order; `divide`");
}
CompressorEntry fp8_e5m2_compressor() {
  return cast_entry("fp8_e5m2", "cast to OCP FP8 E5M2: all-reduce summed in E5M2 in rank order; `divide`");
}

}  // namespace gs
