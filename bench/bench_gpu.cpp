// GPU microbenchmarks (Google Benchmark, manual timing by CUDA events) of the memory-bound kernels of
// kernels/cuda_kernels.h on 64 Mi fp32 values against the device-to-device copy bandwidth measured first in the same
// run (counter of_copy = kernel GB/s / copy GB/s; issue 9's target >= 0.70), and top-k of 1% of 64 Mi values (compare
// with bench/topk_torch.py on the same GPU). Without a usable GPU it prints SKIP and exits 0. A new kernel gets one
// BENCHMARK line below with the bytes it must move. Run: bench_gpu --benchmark_repetitions=3
// --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

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
  DeviceBuffer<float> scale{1, "bench scale"};
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

// Times `op` with CUDA events per iteration; bytes = the memory traffic one call must move at least.
void run_timed(benchmark::State& bs, double bytes, const std::function<void(cudaStream_t)>& op, bool is_copy = false) {
  State& s = state();
  gs::gpu::Event start, stop;
  op(s.stream.get());  // warm-up (also grows scratch)
  s.stream.synchronize();
  double total_s = 0.0;
  for (auto _ : bs) {
    start.record(s.stream.get());
    op(s.stream.get());
    stop.record(s.stream.get());
    stop.synchronize();
    const double secs = gs::gpu::Event::elapsed_ms(start, stop) / 1e3;
    total_s += secs;
    bs.SetIterationTime(secs);
  }
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

void BM_SignPack(benchmark::State& bs) {
  State& s = state();
  run_timed(bs, 2 * kF + kValues / 8.0, [&](cudaStream_t st) {
    gs::gpu::sign_pack(s.bytes.get(), s.scale.get(), s.a.get(), kValues, s.scratch, st);
  });
}

void BM_OnebitEncode(benchmark::State& bs) {
  State& s = state();
  run_timed(bs, 2 * kF + kValues / 8.0, [&](cudaStream_t st) {
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
BENCHMARK(BM_SignPack)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OnebitEncode)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ErrorFeedbackAdd)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SgdMomentum)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Adam)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TopK1Percent)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Fp8QuantizeDelayedE4M3)->UseManualTime()->Unit(benchmark::kMillisecond);

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
