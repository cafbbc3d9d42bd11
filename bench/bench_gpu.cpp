// GPU microbenchmarks (Google Benchmark, manual timing by CUDA events) of the memory-bound kernels of
// kernels/cuda_kernels.h on 64 Mi fp32 values against the device-to-device copy bandwidth measured first in the same
// run (counter of_copy = kernel GB/s / copy GB/s; target >= 0.70), and top-k of 1% of 64 Mi values (compare
// with bench/topk_torch.py on the same GPU), and the forward + backward of dense stacks (bf16_mixed and fp32) against
// their GEMMs through cuBLAS alone (counter of_cublas; target >= 0.70). Without a usable GPU it prints SKIP
// and exits 0. A new kernel gets one BENCHMARK line below with the bytes it must move. Run: bench_gpu
// --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda_dense.h"
#include "kernels/cuda_dense_mixed.h"
#include "kernels/cuda_kernels.h"

namespace {

using gs::gpu::DeviceBuffer;

constexpr size_t kValues = size_t{64} << 20;

struct State {
  gs::gpu::Stream stream;
  gs::gpu::Scratch scratch;
  DeviceBuffer<float> a{kValues, "bench a"}, b{kValues, "bench b"}, c{kValues, "bench c"}, d{kValues, "bench d"};
  DeviceBuffer<uint8_t> bytes{kValues * 2, "bench bytes"};
  DeviceBuffer<uint32_t> idx{kValues, "bench indices"};
  double copy_GBps = 0.0;
  State() {
    std::vector<float> host(kValues);
    std::mt19937 gen(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& x : host) x = normal(gen);
    for (float* p : {a.get(), b.get(), c.get(), d.get()}) gs::gpu::copy_to_device(p, host.data(), kValues * 4);
    for (size_t i = 0; i < kValues; i += 3) host[i] = host[i] * host[i];  // v >= 0 for Adam's second moment
    for (auto& x : host) x = x < 0 ? -x : x;
    gs::gpu::copy_to_device(d.get(), host.data(), kValues * 4);
  }
};

State& state() {
  static State s;
  return s;
}

// Runs `op` on the bench stream `warmups` times, then once per benchmark iteration between two CUDA events; each
// iteration's seconds (event time) are its manual time. Returns them in iteration order.
std::vector<double> event_timed(benchmark::State& bs, const std::function<void(cudaStream_t)>& op, int warmups) {
  State& s = state();
  gs::gpu::Event start, stop;
  for (int w = 0; w < warmups; ++w) op(s.stream.get());
  s.stream.synchronize();
  std::vector<double> times;
  for (auto _ : bs) {
    start.record(s.stream.get());
    op(s.stream.get());
    stop.record(s.stream.get());
    stop.synchronize();
    const double secs = gs::gpu::Event::elapsed_ms(start, stop) / 1e3;
    times.push_back(secs);
    bs.SetIterationTime(secs);
  }
  return times;
}

// Times `op` with CUDA events per iteration (one warm-up, which also grows scratch); bytes = the memory traffic one
// call must move at least.
void run_timed(benchmark::State& bs, double bytes, const std::function<void(cudaStream_t)>& op, bool is_copy = false) {
  State& s = state();
  double total_s = 0.0;
  for (double secs : event_timed(bs, op, 1)) total_s += secs;
  const double GBps = bytes * static_cast<double>(bs.iterations()) / total_s / 1e9;
  bs.counters["GBps"] = GBps;
  if (is_copy) s.copy_GBps = GBps;
  if (s.copy_GBps > 0) bs.counters["of_copy"] = GBps / s.copy_GBps;
}

constexpr double kF = 4.0 * kValues;  // bytes of one fp32 array

void BM_CopyDeviceToDevice(benchmark::State& bs) {
  State& s = state();
  run_timed(bs, 2 * kF, [&](cudaStream_t st) {
    GS_CUDA_CHECK(cudaMemcpyAsync(s.b.get(), s.a.get(), kValues * 4, cudaMemcpyDeviceToDevice, st));
  }, true);
}

void BM_RoundThroughBf16(benchmark::State& bs) {
  State& s = state();
  run_timed(bs, 2 * kF, [&](cudaStream_t st) {
    gs::gpu::round_through_format(gs::FloatFormat::kBf16, s.b.get(), s.a.get(), kValues, gs::Fp8Overflow::kSatFinite, st);
  });
}

void BM_EncodeFp8E4M3(benchmark::State& bs) {
  State& s = state();
  run_timed(bs, kF + kValues, [&](cudaStream_t st) {
    gs::gpu::encode_format(gs::FloatFormat::kFp8E4M3, s.bytes.get(), s.a.get(), kValues, gs::Fp8Overflow::kSatFinite, st);
  });
}

void BM_QsgdEncodeS4(benchmark::State& bs) {
  State& s = state();
  // Norm pass (read) + encode pass (read, write 4 bits per value).
  run_timed(bs, 2 * kF + kValues / 2.0, [&](cudaStream_t st) {
    gs::gpu::qsgd_encode(s.bytes.get(), s.a.get(), kValues, 4, 1, 2, s.scratch, st);
  });
}

void BM_SignEncode(benchmark::State& bs) {
  State& s = state();
  // Planes pass (read, write 2 bits per value) + sums pass (read).
  run_timed(bs, 2 * kF + kValues / 4.0, [&](cudaStream_t st) {
    gs::gpu::sign_encode(s.bytes.get(), s.a.get(), kValues, s.scratch, st);
  });
}

void BM_OnebitEncode(benchmark::State& bs) {
  State& s = state();
  run_timed(bs, 2 * kF + kValues / 4.0, [&](cudaStream_t st) {
    gs::gpu::onebit_encode(s.bytes.get(), s.a.get(), kValues, s.scratch, st);
  });
}

void BM_ErrorFeedbackAdd(benchmark::State& bs) {
  State& s = state();
  run_timed(bs, 3 * kF, [&](cudaStream_t st) { gs::gpu::add_into(s.b.get(), s.a.get(), kValues, st); });
}

void BM_SgdMomentum(benchmark::State& bs) {
  State& s = state();
  gs::SgdScalars sc{1e-6f, 0.9f, 0.0f, false, false};
  run_timed(bs, 5 * kF, [&](cudaStream_t st) { gs::gpu::sgd_update(s.b.get(), s.a.get(), s.c.get(), kValues, sc, st); });
}

void BM_Adam(benchmark::State& bs) {
  State& s = state();
  const gs::AdamScalars sc = gs::adam_scalars(1e-6, 0.9, 0.999, 1e-8, 0.0, true, 10);
  run_timed(bs, 7 * kF, [&](cudaStream_t st) {
    gs::gpu::adam_update(s.b.get(), s.a.get(), s.c.get(), s.d.get(), kValues, sc, st);
  });
}

void BM_TopK1Percent(benchmark::State& bs) {
  State& s = state();
  run_timed(bs, kF, [&](cudaStream_t st) {
    gs::gpu::topk_select(s.a.get(), kValues, kValues / 100, s.idx.get(), s.scratch, st);
  });
  bs.SetLabel("compare: python3 bench/topk_torch.py (torch.topk of |x|, same size and k)");
}

// ---- GEMM phases of MLP steps against cuBLAS alone ------------------------------------------------------------------
// The GEMM target: the forward + backward of a dense stack with widths >= 4096 and >= 1024 rows per rank should reach >= 70%
// of the GEMM rate cuBLAS reaches alone on the same shapes. The step (kernels/cuda_dense_mixed.h for bf16_mixed,
// kernels/cuda_dense.h for fp32) runs its GEMMs plus everything between them (format casts, bias, activation,
// rounding counts, accumulation into the fp32 gradient); the baseline runs only its GEMMs, through cublasGemmEx (bf16
// operands, fp32 output and compute, CUBLAS_GEMM_DEFAULT) or cublasSgemm (fp32, default math mode: no TF32), on
// buffers of the same shapes, in the same process right before the step is timed.

// One GEMM of the step, row-major as kernels/cuda_dense*.cpp call it: C (m x n) = op(A) op(B), op(A) m x k.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  gs::Transpose trans_a = gs::Transpose::kNo, trans_b = gs::Transpose::kNo;
  int64_t layer = 0;
  int role = 0;  // 0 forward Z = A W^T, 1 weight gradient dW = dZ^T A, 2 input gradient dA = dZ W
};

// The GEMMs of one forward + backward over `rows` samples, in the step's order (forward layers 0..L-1, then backward
// layers L-1..0: weight gradient, then input gradient). Layer l has in = widths[l], out = widths[l + 1]:
//   forward          Z  = A W^T   m = rows, n = out, k = in    (A: rows x in, W: out x in)
//   weight gradient  dW = dZ^T A  m = out,  n = in,  k = rows
//   input gradient   dA = dZ W    m = rows, n = in,  k = out   (none for layer 0: nothing consumes the input's gradient)
std::vector<GemmShape> step_gemms(const std::vector<int64_t>& widths, int64_t rows) {
  std::vector<GemmShape> g;
  const auto layers = static_cast<int64_t>(widths.size()) - 1;
  using gs::Transpose;
  for (int64_t l = 0; l < layers; ++l)
    g.push_back({rows, widths[l + 1], widths[l], Transpose::kNo, Transpose::kYes, l, 0});
  for (int64_t l = layers - 1; l >= 0; --l) {
    g.push_back({widths[l + 1], widths[l], rows, Transpose::kYes, Transpose::kNo, l, 1});
    if (l > 0) g.push_back({rows, widths[l], widths[l + 1], Transpose::kNo, Transpose::kNo, l, 2});
  }
  return g;
}

// A GEMM of m x n x k takes 2 m n k flops (a multiply and an add per term). Summed over step_gemms every layer's three
// GEMMs have m n k = rows in_l out_l, so a step has 2 rows (3 sum_l in_l out_l - in_0 out_0) flops: for widths
// 4096-4096-4096 at 1024 rows 2 x 1024 x 5 x 4096^2 = 171.8 GFLOP.
double gemm_flops(const std::vector<GemmShape>& gemms) {
  double f = 0.0;
  for (const GemmShape& g : gemms) f += 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  return f;
}

// Row-major C = op(A) op(B) through cuBLAS directly (column-major C^T = op(B)^T op(A)^T), alpha 1, beta 0; bf16
// operands (bit patterns) or fp32.
void cublas_gemm(cublasHandle_t h, bool bf16, float* c, const void* a, const void* b, const GemmShape& g) {
  const auto m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  const bool ta = g.trans_a == gs::Transpose::kYes, tb = g.trans_b == gs::Transpose::kYes;
  const int lda = ta ? m : k, ldb = tb ? k : n;
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float one = 1.0f, zero = 0.0f;
  if (bf16) {
    GS_CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, n, m, k, &one, b, CUDA_R_16BF, ldb, a, CUDA_R_16BF, lda, &zero, c,
                                 CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    GS_CUBLAS_CHECK(cublasSgemm(h, op_b, op_a, n, m, k, &one, static_cast<const float*>(b), ldb,
                                static_cast<const float*>(a), lda, &zero, c, n));
  }
}

// Uniform values in [-scale, scale) (a xorshift: the setup of 10^8 values must not take seconds).
void fill_uniform(float* device, size_t n, float scale, uint64_t seed) {
  std::vector<float> host(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& v : host) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = scale * (static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
  gs::gpu::copy_to_device(device, host.data(), n * sizeof(float));
}

// One dense stack widths {width, width, width} (2 layers, MSE loss, bias, relu) at `rows` rows, with the step's
// buffers and the baseline's per-GEMM operands. Made once per (precision, width, rows) and kept for the run.
struct MlpBench {
  bool bf16 = true;
  gs::DenseStack stack;
  int64_t rows = 0;
  std::vector<GemmShape> gemms;
  gs::gpu::Stream stream;
  gs::gpu::BlasHandle blas{stream.get()};
  DeviceBuffer<float> params, grad, x, y;
  DeviceBuffer<double> loss;
  gs::gpu::DenseScratchGpu scratch;
  std::optional<gs::gpu::MixedScratchGpu> mixed;
  std::vector<DeviceBuffer<float>> base_a32, base_b32;      // fp32 baseline operands, one pair per GEMM
  std::vector<DeviceBuffer<uint16_t>> base_a16, base_b16;   // bf16 baseline operands (bit patterns)
  DeviceBuffer<float> base_c;                               // the baseline's outputs (the largest C)
  double baseline_flops_per_s = 0.0;

  MlpBench(bool use_bf16, int64_t width, int64_t r) : bf16(use_bf16), rows(r) {
    stack.widths = {width, width, width};
    stack.activation = gs::Activation::kRelu;
    stack.loss = gs::LossKind::kMse;
    stack.bias = true;
    gemms = step_gemms(stack.widths, rows);
    const size_t n = stack.num_params();
    params = DeviceBuffer<float>(n, "bench mlp parameters");
    grad = DeviceBuffer<float>(n, "bench mlp gradient");
    x = DeviceBuffer<float>(static_cast<size_t>(rows * width), "bench mlp inputs");
    y = DeviceBuffer<float>(static_cast<size_t>(rows * width), "bench mlp targets");
    loss = DeviceBuffer<double>(1, "bench mlp loss");
    fill_uniform(params.get(), n, 1.0f / std::sqrt(static_cast<float>(width)), 1);  // keeps activations O(1)
    fill_uniform(x.get(), x.size(), 1.0f, 2);
    fill_uniform(y.get(), y.size(), 1.0f, 3);
    GS_CUDA_CHECK(cudaMemset(grad.get(), 0, grad.bytes()));
    scratch = gs::gpu::make_dense_scratch_gpu(stack, rows);
    if (bf16) mixed = gs::gpu::make_mixed_scratch_gpu(stack, rows, gs::FloatFormat::kBf16, 1);
    size_t c_max = 0;
    uint64_t seed = 10;
    for (const GemmShape& g : gemms) {
      const auto a_n = static_cast<size_t>(g.m * g.k), b_n = static_cast<size_t>(g.k * g.n);
      c_max = std::max(c_max, static_cast<size_t>(g.m * g.n));
      DeviceBuffer<float> a32(a_n, "bench baseline A"), b32(b_n, "bench baseline B");
      fill_uniform(a32.get(), a_n, 1.0f, seed++);
      fill_uniform(b32.get(), b_n, 1.0f, seed++);
      if (bf16) {
        DeviceBuffer<uint16_t> a16(a_n, "bench baseline A bf16"), b16(b_n, "bench baseline B bf16");
        gs::gpu::encode_format(gs::FloatFormat::kBf16, a16.get(), a32.get(), a_n, gs::Fp8Overflow::kSatFinite,
                               stream.get());
        gs::gpu::encode_format(gs::FloatFormat::kBf16, b16.get(), b32.get(), b_n, gs::Fp8Overflow::kSatFinite,
                               stream.get());
        stream.synchronize();
        base_a16.push_back(std::move(a16));
        base_b16.push_back(std::move(b16));
      } else {
        base_a32.push_back(std::move(a32));
        base_b32.push_back(std::move(b32));
      }
    }
    base_c = DeviceBuffer<float>(c_max, "bench baseline C");
  }

  // The step's GEMMs through cuBLAS alone, in the step's order.
  void enqueue_baseline() const {
    auto h = static_cast<cublasHandle_t>(blas.get());
    for (size_t i = 0; i < gemms.size(); ++i) {
      const void* a = bf16 ? static_cast<const void*>(base_a16[i].get()) : base_a32[i].get();
      const void* b = bf16 ? static_cast<const void*>(base_b16[i].get()) : base_b32[i].get();
      cublas_gemm(h, bf16, base_c.get(), a, b, gemms[i]);
    }
  }

  // Forward + backward of one micro-batch, as the cuda rank loop enqueues it (kernels/cuda_dense*.h).
  void enqueue_step() {
    if (bf16) {
      gs::gpu::dense_stack_forward_mixed_gpu(blas, scratch, *mixed, stack, params.get(), x.get(), rows, y.get(),
                                             nullptr, loss.get());
      gs::gpu::dense_stack_backward_mixed_gpu(blas, grad.get(), scratch, *mixed, stack, rows, y.get(), nullptr, 1.0f);
    } else {
      gs::gpu::dense_stack_forward_gpu(blas, scratch, stack, params.get(), x.get(), rows, y.get(), nullptr,
                                       loss.get());
      gs::gpu::dense_stack_backward_gpu(blas, grad.get(), scratch, stack, params.get(), x.get(), rows, y.get(),
                                        nullptr);
    }
  }

  // cuBLAS's rate on the step's GEMMs (flops/s): 3 warm-up passes, then 20 passes between one pair of events.
  double measure_baseline() {
    gs::gpu::Event start, stop;
    for (int i = 0; i < 3; ++i) enqueue_baseline();
    constexpr int kPasses = 20;
    start.record(stream.get());
    for (int i = 0; i < kPasses; ++i) enqueue_baseline();
    stop.record(stream.get());
    stop.synchronize();
    const double secs = gs::gpu::Event::elapsed_ms(start, stop) / 1e3;
    return gemm_flops(gemms) * kPasses / secs;
  }
};

MlpBench& mlp_bench(bool bf16, int64_t width, int64_t rows) {
  static std::map<std::tuple<bool, int64_t, int64_t>, std::unique_ptr<MlpBench>> benches;
  auto& b = benches[{bf16, width, rows}];
  if (!b) b = std::make_unique<MlpBench>(bf16, width, rows);
  return *b;
}

// Args: width, rows. Counters: TFLOPS (the step's GEMM flops over the step's time), cublas_TFLOPS (the same GEMMs
// through cuBLAS alone, measured just before), of_cublas (their ratio; target >= 0.70).
void mlp_step(benchmark::State& bs, bool bf16) {
  MlpBench& m = mlp_bench(bf16, bs.range(0), bs.range(1));
  const double flops = gemm_flops(m.gemms);
  m.baseline_flops_per_s = m.measure_baseline();
  cudaStream_t st = m.stream.get();
  gs::gpu::Event start, stop;
  if (m.mixed) gs::gpu::reset_counts(*m.mixed, st);
  m.enqueue_step();  // warm-up
  m.stream.synchronize();
  double total_s = 0.0;
  for (auto _ : bs) {
    // The rounding counts hold one backward per reset (micro_batches 1): reset outside the timed span (the rank loop
    // does it once per optimizer step).
    if (m.mixed) gs::gpu::reset_counts(*m.mixed, st);
    start.record(st);
    m.enqueue_step();
    stop.record(st);
    stop.synchronize();
    const double secs = gs::gpu::Event::elapsed_ms(start, stop) / 1e3;
    total_s += secs;
    bs.SetIterationTime(secs);
  }
  const double rate = flops * static_cast<double>(bs.iterations()) / total_s;
  bs.counters["TFLOPS"] = rate / 1e12;
  bs.counters["cublas_TFLOPS"] = m.baseline_flops_per_s / 1e12;
  bs.counters["of_cublas"] = rate / m.baseline_flops_per_s;
  bs.counters["gemm_GFLOP"] = flops / 1e9;
  bs.SetLabel(std::string(bf16 ? "bf16_mixed" : "fp32") + " widths " + std::to_string(bs.range(0)) + "x3, rows " +
              std::to_string(bs.range(1)) + "; baseline cuBLAS alone, same GEMMs");
}

void BM_MlpStepBf16Mixed(benchmark::State& bs) { mlp_step(bs, true); }
void BM_MlpStepFp32(benchmark::State& bs) { mlp_step(bs, false); }

}  // namespace

// fp8_mixed's operand quantization (gpu::fp8_quantize_delayed: E4M3 with the delayed scale, amax reduction, the
// history update): reads 4 bytes and writes 2 (the bf16 pattern of the fp8 value) per value.
void BM_Fp8QuantizeDelayedE4M3(benchmark::State& bs) {
  State& s = state();
  static DeviceBuffer<gs::gpu::Fp8ScalingState> scaling(1, "bench fp8 scaling");
  static DeviceBuffer<float> history(1024, "bench amax history");
  gs::gpu::fp8_scaling_init(scaling.get(), 1, s.stream.get());
  run_timed(bs, kF + 2.0 * kValues, [&](cudaStream_t st) {
    gs::gpu::fp8_quantize_delayed(gs::FloatFormat::kFp8E4M3, reinterpret_cast<uint16_t*>(s.bytes.get()), s.a.get(),
                                  kValues, scaling.get(), history.get(), 1024, nullptr, st);
  });
}

BENCHMARK(BM_CopyDeviceToDevice)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RoundThroughBf16)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeFp8E4M3)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QsgdEncodeS4)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SignEncode)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OnebitEncode)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ErrorFeedbackAdd)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SgdMomentum)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Adam)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TopK1Percent)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Fp8QuantizeDelayedE4M3)->UseManualTime()->Unit(benchmark::kMillisecond);
// GEMM phases of MLP steps vs cuBLAS alone (args: width, rows per rank); about 1 s each on an H200, setup included.
BENCHMARK(BM_MlpStepBf16Mixed)->Args({4096, 1024})->Args({4096, 4096})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MlpStepFp32)->Args({4096, 1024})->UseManualTime()->Unit(benchmark::kMillisecond);

// GEMM sweep for `gradsweep calibrate --gemm` (docs/cost-model.md): one bf16 GEMM C = A B (bf16 operands and result,
// fp32 compute, CUBLAS_GEMM_DEFAULT) per shape, m = the tokens of a micro-batch, n x k the transformer presets'
// matrices (q/k/v, projection, MLP, vocabulary head) and the published cuBLASLt sweep's squares. Counters m, n, k
// and TFLOPS (2 m n k over the median iteration), the JSON calibrate reads: bench_gpu --benchmark_filter=Gemm
// --benchmark_format=json > gemm.json. Written without a GPU here: compiled, never run.
void BM_GemmBf16(benchmark::State& bs) {
  const int64_t m = bs.range(0), n = bs.range(1), k = bs.range(2);
  static DeviceBuffer<uint16_t>* a = nullptr;
  static DeviceBuffer<uint16_t>* b = nullptr;
  static DeviceBuffer<uint16_t>* c = nullptr;
  constexpr size_t kMax = size_t{1} << 30;  // elements per operand: 2 GiB of bf16 (802816 x 768 is 0.6 G)
  const size_t need = static_cast<size_t>(std::max({m * k, k * n, m * n}));
  if (need > kMax) {
    bs.SkipWithError("shape too large for the sweep's buffers");
    return;
  }
  if (a == nullptr) {
    a = new DeviceBuffer<uint16_t>(kMax, "gemm A");
    b = new DeviceBuffer<uint16_t>(kMax, "gemm B");
    c = new DeviceBuffer<uint16_t>(kMax, "gemm C");
    constexpr size_t kBlock = size_t{1} << 24;  // one random block, copied over the whole buffer
    std::vector<uint16_t> host(kBlock);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (auto& v : host) {  // bf16 of uniform values in [-1, 1): the top half of the float's bits
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const float f = static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
      uint32_t bits = 0;
      std::memcpy(&bits, &f, sizeof bits);
      v = static_cast<uint16_t>(bits >> 16);
    }
    for (size_t off = 0; off < kMax; off += kBlock) {
      gs::gpu::copy_to_device(a->get() + off, host.data(), kBlock * sizeof(uint16_t));
      gs::gpu::copy_to_device(b->get() + off, host.data(), kBlock * sizeof(uint16_t));
    }
  }
  State& s = state();
  static gs::gpu::BlasHandle blas{s.stream.get()};
  auto h = static_cast<cublasHandle_t>(blas.get());
  const float one = 1.0f, zero = 0.0f;
  // Row-major C (m x n) = A (m x k) B (k x n): column-major C^T = B^T A^T.
  auto op = [&](cudaStream_t) {
    GS_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                 static_cast<int>(k), &one, b->get(), CUDA_R_16BF, static_cast<int>(n), a->get(),
                                 CUDA_R_16BF, static_cast<int>(k), &zero, c->get(), CUDA_R_16BF, static_cast<int>(n),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  std::vector<double> times = event_timed(bs, op, 3);  // 3 warm-ups: cuBLAS picks and loads its kernel
  std::sort(times.begin(), times.end());
  const double median = times.empty() ? 0.0 : times[times.size() / 2];
  bs.counters["m"] = static_cast<double>(m);
  bs.counters["n"] = static_cast<double>(n);
  bs.counters["k"] = static_cast<double>(k);
  bs.counters["TFLOPS"] = median > 0 ? flops / median / 1e12 : 0.0;
}

void gemm_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t sq : {1024, 2048, 4096, 8192, 16384}) b->Args({sq, sq, sq});
  b->Args({802816, 192, 768});
  // m = 8192 tokens (4 x 2048) against each preset width's matrices: q/k/v (3d x d), projection (d x d), MLP up and
  // down (4d x d, d x 4d), and the 50368-word head.
  for (int64_t d : {768, 1024, 1536, 2048, 2560, 4096}) {
    b->Args({8192, 3 * d, d});
    b->Args({8192, d, d});
    b->Args({8192, 4 * d, d});
    b->Args({8192, d, 4 * d});
    b->Args({8192, 50368, d});
  }
}
BENCHMARK(BM_GemmBf16)->Apply(gemm_shapes)->UseManualTime()->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  std::string why;
  if (!gs::gpu::device_usable(&why)) {
    std::printf("SKIP: no usable GPU (%s)\n", why.c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
