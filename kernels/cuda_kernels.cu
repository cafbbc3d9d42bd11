// The CUDA kernels (declared in kernels/cuda_kernels.h): precision conversions, optimizer updates, dense ops,
// compressors and the `local` communicator's reductions. Element math comes from the shared GS_HD headers; this file
// holds only the parallel structure. Compiled with --fmad=false (CMakeLists.txt) so a*b+c rounds twice, as on the
// host. A new op adds its kernel and launcher in its section here.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/cuda_kernels.h"
#include "kernels/dense_math.h"

namespace gs::gpu {

namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 65535;

unsigned blocks_for(size_t n, size_t per_block = kThreads) {
  return static_cast<unsigned>(std::min(kMaxBlocks, std::max<size_t>(1, (n + per_block - 1) / per_block)));
}

void check_launch(const char* what) { check_cuda(cudaGetLastError(), what, __FILE__, __LINE__); }

size_t align_up(size_t x, size_t a = 256) { return (x + a - 1) / a * a; }

// for (i < n) f(i), grid-stride.
template <class F>
__global__ void map_kernel(size_t n, F f) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    f(i);
  }
}

template <class F>
void launch_map(size_t n, const F& f, cudaStream_t stream, const char* what) {
  if (n == 0) return;
  map_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, f);
  check_launch(what);
}

template <class T>
__global__ void store_value_kernel(T* dst, T value) {
  *dst = value;
}

__device__ inline float load_float(const uint8_t* p) {
  float v;
  memcpy(&v, p, sizeof v);
  return v;
}
__device__ inline void store_float(uint8_t* p, float v) { memcpy(p, &v, sizeof v); }

__device__ inline float float_from_key(uint32_t key) { return fp32_from_bits(key); }

// ---- Deterministic sums in double ---------------------------------------------------------------------------------
// K sums of per-element terms: a fixed grid (kReduceBlocks) writes per-block partials, one block adds them in a tree.
// The result has the same bits on every call (not the host's order).

constexpr unsigned kReduceBlocks = 1024;

template <int K>
struct Sums {
  double v[K];
};

template <int K>
struct SumsAdd {
  __device__ Sums<K> operator()(const Sums<K>& a, const Sums<K>& b) const {
    Sums<K> r;
    for (int j = 0; j < K; ++j) r.v[j] = a.v[j] + b.v[j];
    return r;
  }
};

template <int K, class F>
__global__ void partial_sums_kernel(size_t n, F f, Sums<K>* partial) {
  using Reduce = cub::BlockReduce<Sums<K>, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  Sums<K> acc;
  for (int j = 0; j < K; ++j) acc.v[j] = 0.0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const Sums<K> t = f(i);
    for (int j = 0; j < K; ++j) acc.v[j] += t.v[j];
  }
  const Sums<K> total = Reduce(tmp).Reduce(acc, SumsAdd<K>());
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

template <int K>
__global__ void final_sums_kernel(const Sums<K>* partial, unsigned count, Sums<K>* out) {
  using Reduce = cub::BlockReduce<Sums<K>, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  Sums<K> acc;
  for (int j = 0; j < K; ++j) acc.v[j] = 0.0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) {
    for (int j = 0; j < K; ++j) acc.v[j] += partial[i].v[j];
  }
  const Sums<K> total = Reduce(tmp).Reduce(acc, SumsAdd<K>());
  if (threadIdx.x == 0) *out = total;
}

// Sums of f(i) over i < n into *out (device); scratch must hold kReduceBlocks Sums<K>.
template <int K, class F>
void launch_sums(size_t n, const F& f, Sums<K>* partial, Sums<K>* out, cudaStream_t stream, const char* what) {
  const unsigned grid = static_cast<unsigned>(std::min<size_t>(kReduceBlocks, std::max<size_t>(1, (n + 255) / 256)));
  partial_sums_kernel<K><<<grid, kThreads, 0, stream>>>(n, f, partial);
  check_launch(what);
  final_sums_kernel<K><<<1, kThreads, 0, stream>>>(partial, grid, out);
  check_launch(what);
}

}  // namespace

void* Scratch::get(size_t bytes) {
  buf_.reserve(std::max<size_t>(bytes, 256), "kernel scratch");
  return buf_.get();
}

// ---- Precision conversions ----------------------------------------------------------------------------------------

namespace {

struct EncodeOp {
  FloatFormat f;
  Fp8Overflow overflow;
  void* out;
  const float* in;
  __device__ void operator()(size_t i) const {
    const float x = in[i];
    switch (f) {
      case FloatFormat::kFp16: static_cast<uint16_t*>(out)[i] = fp32_to_fp16(x); break;
      case FloatFormat::kBf16: static_cast<uint16_t*>(out)[i] = fp32_to_bf16(x); break;
      case FloatFormat::kFp8E4M3: static_cast<uint8_t*>(out)[i] = fp32_to_fp8_e4m3(x, overflow); break;
      case FloatFormat::kFp8E5M2: static_cast<uint8_t*>(out)[i] = fp32_to_fp8_e5m2(x, overflow); break;
      case FloatFormat::kFp32: static_cast<float*>(out)[i] = x; break;
    }
  }
};

struct DecodeOp {
  FloatFormat f;
  float* out;
  const void* in;
  __device__ void operator()(size_t i) const {
    float y = 0.0f;
    switch (f) {
      case FloatFormat::kFp16: y = fp16_to_fp32(static_cast<const uint16_t*>(in)[i]); break;
      case FloatFormat::kBf16: y = bf16_to_fp32(static_cast<const uint16_t*>(in)[i]); break;
      case FloatFormat::kFp8E4M3: y = fp8_e4m3_to_fp32(static_cast<const uint8_t*>(in)[i]); break;
      case FloatFormat::kFp8E5M2: y = fp8_e5m2_to_fp32(static_cast<const uint8_t*>(in)[i]); break;
      case FloatFormat::kFp32: y = static_cast<const float*>(in)[i]; break;
    }
    out[i] = y;
  }
};

__device__ inline float round_with(FloatFormat f, float x, Fp8Overflow overflow) {
  switch (f) {
    case FloatFormat::kFp16: return round_through_fp16(x);
    case FloatFormat::kBf16: return round_through_bf16(x);
    case FloatFormat::kFp8E4M3: return round_through_fp8_e4m3(x, overflow);
    case FloatFormat::kFp8E5M2: return round_through_fp8_e5m2(x, overflow);
    case FloatFormat::kFp32: break;
  }
  return x;
}

struct RoundOp {
  FloatFormat f;
  Fp8Overflow overflow;
  float* out;
  const float* in;
  __device__ void operator()(size_t i) const { out[i] = round_with(f, in[i], overflow); }
};

// Counts as count_rounding (convert.cpp): underflows_in and !isfinite(round_through).
__global__ void count_rounding_kernel(FloatFormat f, const float* in, size_t n, unsigned long long* counts) {
  using Reduce = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ typename Reduce::TempStorage tmp_u;
  __shared__ typename Reduce::TempStorage tmp_n;
  unsigned long long under = 0, nonfinite = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = in[i];
    const float r = round_through(f, x);
    under += (x != 0.0f && r == 0.0f) ? 1u : 0u;
    nonfinite += isfinite(r) ? 0u : 1u;
  }
  const unsigned long long u = Reduce(tmp_u).Sum(under);
  const unsigned long long nf = Reduce(tmp_n).Sum(nonfinite);
  if (threadIdx.x == 0) {
    if (u) atomicAdd(&counts[0], u);
    if (nf) atomicAdd(&counts[1], nf);
  }
}

struct NonfiniteOp {
  const float* x;
  int* flag;
  __device__ void operator()(size_t i) const {
    if (!isfinite(x[i])) *flag = 1;  // racing writes store the same value
  }
};

struct ScaleOp {
  float* x;
  float factor;
  __device__ void operator()(size_t i) const { x[i] = x[i] * factor; }
};

struct DivideOp {
  float* x;
  float divisor;
  __device__ void operator()(size_t i) const { x[i] = x[i] / divisor; }  // IEEE division (no --use_fast_math)
};

struct AddScaledOp {
  float* acc;
  const float* x;
  float f;
  __device__ void operator()(size_t i) const { acc[i] = acc[i] + f * x[i]; }  // two roundings (--fmad=false)
};

// Per element: [0] 1 when inf or NaN, [1] its square in double (exact) when asked for.
struct NonfiniteSquareTerm {
  const float* x;
  bool want_norm;
  __device__ Sums<2> operator()(size_t i) const {
    const float v = x[i];
    const double d = v;
    return Sums<2>{{isfinite(v) ? 0.0 : 1.0, want_norm ? d * d : 0.0}};
  }
};

// The count is a sum of ones in double: exact below 2^53 elements.
__global__ void store_totals_kernel(ElementTotals* out, const Sums<2>* s, bool want_norm, bool accumulate) {
  const auto count = static_cast<unsigned long long>(s->v[0]);
  if (accumulate) {
    out->nonfinite += count;
    if (want_norm) out->sum_squares += s->v[1];
  } else {
    *out = ElementTotals{count, s->v[1]};
  }
}

}  // namespace

void encode_format(FloatFormat f, void* out, const float* in, size_t n, Fp8Overflow overflow, cudaStream_t stream) {
  launch_map(n, EncodeOp{f, overflow, out, in}, stream, "encode_format");
}

void decode_format(FloatFormat f, float* out, const void* in, size_t n, cudaStream_t stream) {
  launch_map(n, DecodeOp{f, out, in}, stream, "decode_format");
}

void round_through_format(FloatFormat f, float* out, const float* in, size_t n, Fp8Overflow overflow,
                          cudaStream_t stream) {
  launch_map(n, RoundOp{f, overflow, out, in}, stream, "round_through_format");
}

void count_rounding(FloatFormat f, const float* in, size_t n, unsigned long long* counts, cudaStream_t stream) {
  GS_CUDA_CHECK(cudaMemsetAsync(counts, 0, 2 * sizeof(unsigned long long), stream));
  if (n == 0) return;
  count_rounding_kernel<<<std::min(blocks_for(n), 1024u), kThreads, 0, stream>>>(f, in, n, counts);
  check_launch("count_rounding");
}

void find_nonfinite(const float* x, size_t n, int* flag, cudaStream_t stream, bool accumulate) {
  if (!accumulate) GS_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream));
  launch_map(n, NonfiniteOp{x, flag}, stream, "find_nonfinite");
}

void scale(float* x, size_t n, float factor, cudaStream_t stream) {
  launch_map(n, ScaleOp{x, factor}, stream, "scale");
}

void divide(float* x, size_t n, float divisor, cudaStream_t stream) {
  launch_map(n, DivideOp{x, divisor}, stream, "divide");
}

void add_scaled_into(float* acc, const float* x, float f, size_t n, cudaStream_t stream) {
  launch_map(n, AddScaledOp{acc, x, f}, stream, "add_scaled_into");
}

void scan_elements(const float* x, size_t n, bool want_norm, ElementTotals* out, Scratch& scratch, cudaStream_t stream,
                   bool accumulate) {
  auto* partial = static_cast<Sums<2>*>(scratch.get((kReduceBlocks + 1) * sizeof(Sums<2>)));
  launch_sums<2>(n, NonfiniteSquareTerm{x, want_norm}, partial, partial + kReduceBlocks, stream, "scan_elements");
  store_totals_kernel<<<1, 1, 0, stream>>>(out, partial + kReduceBlocks, want_norm, accumulate);
  check_launch("scan_elements");
}

namespace {

struct MaxBits {
  __device__ uint32_t operator()(uint32_t a, uint32_t b) const { return a > b ? a : b; }
};
struct Fmax {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

struct AccumulateInFormatOp {
  FloatFormat f;
  float* acc;
  const float* g;
  float inv, multiplier;
  __device__ void operator()(size_t i) const {
    const float r = round_through(f, acc[i] * inv + g[i]);
    acc[i] = multiplier != 1.0f ? r * multiplier : r;
  }
};

__global__ void fp8_scaling_init_kernel(Fp8ScalingState* states, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    states[i] = Fp8ScalingState{1.0f, 1.0f, 0u, 0u, 0u};
  }
}

// Pass 1 of fp8_quantize_delayed (the element loop of the host's fp8_quantize): q = bf16(fp8(x * scale)), the counts,
// and the amax of the finite |x| as the largest magnitude bit pattern (block max, one atomicMax per block).
__global__ void fp8_quantize_kernel(FloatFormat f, uint16_t* q, const float* in, size_t n,
                                    Fp8ScalingState* state, unsigned long long* counts) {
  using ReduceU = cub::BlockReduce<unsigned long long, kThreads>;
  using ReduceM = cub::BlockReduce<uint32_t, kThreads>;
  __shared__ typename ReduceU::TempStorage tmp_u;
  __shared__ typename ReduceU::TempStorage tmp_n;
  __shared__ typename ReduceM::TempStorage tmp_m;
  const float scale = state->scale;
  uint32_t amax = 0;
  unsigned long long under = 0, nonfinite = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = in[i];
    const uint32_t a = fp32_bits(x) & 0x7fffffffu;
    const uint32_t finite_a = a < 0x7f800000u ? a : 0u;
    amax = finite_a > amax ? finite_a : amax;
    const float scaled = x * scale;
    const float r = f == FloatFormat::kFp8E4M3 ? round_through_fp8_e4m3(scaled, Fp8Overflow::kSatFinite)
                                               : round_through_fp8_e5m2(scaled, Fp8Overflow::kSatFinite);
    const uint32_t sb = fp32_bits(scaled) & 0x7fffffffu;
    const uint32_t rb = fp32_bits(r) & 0x7fffffffu;
    under += (sb != 0u && sb < 0x7f800000u && rb == 0u) ? 1u : 0u;
    nonfinite += rb >= 0x7f800000u ? 1u : 0u;
    q[i] = fp32_to_bf16(r);  // exact: an fp8 value (or NaN, canonical in both)
  }
  const uint32_t m = ReduceM(tmp_m).Reduce(amax, MaxBits());
  const unsigned long long u = ReduceU(tmp_u).Sum(under);
  const unsigned long long nf = ReduceU(tmp_n).Sum(nonfinite);
  if (threadIdx.x == 0) {
    if (m) atomicMax(&state->amax_bits, m);
    if (counts != nullptr) {
      if (u) atomicAdd(&counts[0], u);
      if (nf) atomicAdd(&counts[1], nf);
    }
  }
}

// Pass 2, one block: the amax joins the history, scale_inv = 1 / the scale used, scale = fmax / max(history) (the
// host's Fp8Scaling update; the max of non-negative finite values is the same in any order).
__global__ void fp8_scaling_update_kernel(Fp8ScalingState* state, float* history, uint32_t len, float format_max_value) {
  using Reduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  __shared__ uint32_t size;
  if (threadIdx.x == 0) {
    const float amax = fp32_from_bits(state->amax_bits);
    state->scale_inv = 1.0f / state->scale;
    if (state->size < len) {
      history[state->size] = amax;
      state->size = state->size + 1;
    } else {
      history[state->next] = amax;
      state->next = (state->next + 1) % len;
    }
    state->amax_bits = 0u;
    size = state->size;
  }
  __syncthreads();
  float hmax = 0.0f;
  for (uint32_t i = threadIdx.x; i < size; i += blockDim.x) hmax = fmaxf(hmax, history[i]);
  const float total = Reduce(tmp).Reduce(hmax, Fmax());
  if (threadIdx.x == 0 && total > 0.0f && isfinite(total)) state->scale = format_max_value / total;
}

__global__ void fp8_gemm_scalars_kernel(float* alpha_beta, const Fp8ScalingState* a, const Fp8ScalingState* b,
                                        float beta) {
  alpha_beta[0] = a->scale_inv * b->scale_inv;
  alpha_beta[1] = beta;
}

}  // namespace

void accumulate_in_format(FloatFormat f, float* acc, const float* g, size_t n, float multiplier, cudaStream_t stream) {
  const float inv = 1.0f / multiplier;  // on the host CPU, as the host twin computes it
  launch_map(n, AccumulateInFormatOp{f, acc, g, inv, multiplier}, stream, "accumulate_in_format");
}

void fp8_scaling_init(Fp8ScalingState* states, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  fp8_scaling_init_kernel<<<blocks_for(count), kThreads, 0, stream>>>(states, count);
  check_launch("fp8_scaling_init");
}

void fp8_quantize_delayed(FloatFormat f, uint16_t* q, const float* in, size_t n, Fp8ScalingState* state, float* history,
                          uint32_t history_len, unsigned long long* counts, cudaStream_t stream) {
  GS_EXPECT_GPU(f == FloatFormat::kFp8E4M3 || f == FloatFormat::kFp8E5M2, "fp8_quantize_delayed: an fp8 format");
  GS_EXPECT_GPU(history_len >= 1, "fp8_quantize_delayed: history_len >= 1");
  if (counts != nullptr) GS_CUDA_CHECK(cudaMemsetAsync(counts, 0, 2 * sizeof(unsigned long long), stream));
  if (n > 0) {
    fp8_quantize_kernel<<<std::min(blocks_for(n), 1024u), kThreads, 0, stream>>>(f, q, in, n, state, counts);
    check_launch("fp8_quantize_delayed");
  }
  fp8_scaling_update_kernel<<<1, kThreads, 0, stream>>>(state, history, history_len, format_max(f));
  check_launch("fp8_quantize_delayed (scaling update)");
}

void fp8_gemm_scalars(float* alpha_beta, const Fp8ScalingState* a, const Fp8ScalingState* b, float beta,
                      cudaStream_t stream) {
  fp8_gemm_scalars_kernel<<<1, 1, 0, stream>>>(alpha_beta, a, b, beta);
  check_launch("fp8_gemm_scalars");
}

// ---- Optimizers ---------------------------------------------------------------------------------------------------

namespace {

struct SgdOp {
  float* w;
  const float* g;
  float* buf;
  SgdScalars s;
  __device__ void operator()(size_t i) const {
    float dummy = 0.0f;
    float& b = buf ? buf[i] : dummy;
    sgd_element(w[i], g[i], b, s);
  }
};

struct AdamOp {
  float* w;
  const float* g;
  float* m;
  float* v;
  AdamScalars s;
  __device__ void operator()(size_t i) const { adam_element(w[i], g[i], m[i], v[i], s); }
};

}  // namespace

void sgd_update(float* w, const float* g, float* buf, size_t n, const SgdScalars& s, cudaStream_t stream) {
  launch_map(n, SgdOp{w, g, buf, s}, stream, "sgd_update");
}

void adam_update(float* w, const float* g, float* m, float* v, size_t n, const AdamScalars& s, cudaStream_t stream) {
  launch_map(n, AdamOp{w, g, m, v, s}, stream, "adam_update");
}

// ---- Dense ops ----------------------------------------------------------------------------------------------------

namespace {

cublasOperation_t op_of(Transpose t) { return t == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N; }

int checked_dim(int64_t v, const char* name) {
  GS_EXPECT_GPU(v >= 0 && v <= std::numeric_limits<int>::max(), name);
  return static_cast<int>(v);
}

struct AddBiasOp {
  float* y;
  const float* bias;
  int64_t cols;
  __device__ void operator()(size_t i) const { y[i] = y[i] + bias[static_cast<int64_t>(i) % cols]; }
};

struct BroadcastRowsOp {
  float* y;
  const float* row;
  int64_t cols;
  __device__ void operator()(size_t i) const { y[i] = row[static_cast<int64_t>(i) % cols]; }
};

// The micro-batch's column sums in PyTorch's CPU order (torch_column_sum, dense_math.h, as the host), written
// (accumulate false) or added to the gradient (true). A block takes 32 virtual columns (threadIdx.x: coalesced
// loads along a row) and 16 run threads (threadIdx.y). For each of a column's cascade units (torch_column_unit) the
// 16 threads sum 16 consecutive runs at a time (torch_run_sum) into shared memory, and thread y = 0 feeds them in
// order to the column's TorchCascade: the sequential loop's bits, with rows / 16 + 16 serial adds per unit round
// instead of rows. Thread y = 0 then sums the tail and combines the units and lanes as the host does.
constexpr int kBiasColumns = 32, kBiasRunThreads = 16;

__global__ void bias_grad_kernel(float* grad_bias, const float* dy, int64_t rows, int64_t cols, bool accumulate) {
  __shared__ float runs[kBiasRunThreads][kBiasColumns + 1];
  const int x = static_cast<int>(threadIdx.x), y = static_cast<int>(threadIdx.y);
  const int64_t virtuals = torch_virtual_columns(rows, cols);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kBiasColumns;
  const int64_t last = (first + kBiasColumns < virtuals ? first + kBiasColumns : virtuals) - 1;
  const int64_t v = first + x;
  const bool active = v < virtuals;
  float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int u = 0; u < 4; ++u) {
    const TorchSumUnit unit = torch_column_unit(rows, cols, active ? v : last, u);
    const int64_t step = torch_cascade_step(unit.count), whole = active ? torch_cascade_runs(unit.count) : 0;
    // The block's rounds: its first and last columns cover both of its kinds of unit (the kind is monotone in v).
    const int64_t most = max(torch_cascade_runs(torch_column_unit(rows, cols, first, u).count),
                             torch_cascade_runs(torch_column_unit(rows, cols, last, u).count));
    TorchCascade<float> cascade(step);
    for (int64_t r0 = 0; r0 < most; r0 += kBiasRunThreads) {
      const int64_t r = r0 + y;
      runs[y][x] = r < whole ? torch_run_sum(dy + unit.offset + r * step * unit.stride, step, unit.stride) : 0.0f;
      __syncthreads();
      if (y == 0)
        for (int t = 0; t < kBiasRunThreads && r0 + t < whole; ++t) cascade.add_run(runs[t][x]);
      __syncthreads();
    }
    if (y == 0 && active) {
      const float* tail = dy + unit.offset + whole * step * unit.stride;
      p[u] = cascade.finish(torch_run_sum(tail, unit.count - whole * step, unit.stride));
    }
  }
  const float column = y == 0 && active ? torch_virtual_column_sum(dy, rows, cols, v, p) : 0.0f;
  if (y == 0) runs[0][x] = column;
  __syncthreads();
  if (y != 0 || !active) return;
  float lanes[8];
  const bool lanes8 = torch_column_lanes(rows, cols);
  for (int k = 0; k < 8; ++k) lanes[k] = lanes8 ? runs[0][k] : column;
  if (lanes8 && x != 0) return;  // lane 0 writes the one column
  const int64_t j = lanes8 ? 0 : v;
  const float s = torch_column_total(dy, rows, cols, lanes);
  grad_bias[j] = accumulate ? grad_bias[j] + s : s;
}

void launch_bias_grad(float* grad_bias, const float* dy, int64_t rows, int64_t cols, bool accumulate,
                      cudaStream_t stream, const char* what) {
  if (cols <= 0) return;
  const int64_t blocks = (torch_virtual_columns(rows, cols) + kBiasColumns - 1) / kBiasColumns;
  bias_grad_kernel<<<static_cast<unsigned>(blocks), dim3(kBiasColumns, kBiasRunThreads), 0, stream>>>(
      grad_bias, dy, rows, cols, accumulate);
  check_launch(what);
}

struct ActForwardOp {
  float* out;
  const float* in;
  Activation act;
  __device__ void operator()(size_t i) const { out[i] = act == Activation::kRelu ? relu(in[i]) : gelu(in[i]); }
};

struct ActBackwardOp {
  float* dx;
  const float* dy;
  const float* x;
  Activation act;
  __device__ void operator()(size_t i) const {
    dx[i] = dy[i] * (act == Activation::kRelu ? relu_derivative(x[i]) : gelu_derivative(x[i]));
  }
};

struct MseGradOp {
  float* dy_hat;
  const float* y_hat;
  const float* y;
  __device__ void operator()(size_t i) const { dy_hat[i] = y_hat[i] - y[i]; }
};

// ---- Row kernels (losses, count-correct): one warp per row ------------------------------------------------------
// Lanes load a row's elements coalesced (lane l takes j = l, l + 32, ...) and compute their terms in parallel; sums
// are added by lane 0 in index order from a 32-value staging buffer per warp, so every row sum has the host twin's
// order and bits (dense_math.h: log_sum_exp_row, mse_row); maxima and the arg-max are order-free reductions with the
// host scan's step (max_scan_step; the first maximal index). A block holds kRowsPerBlock rows (one per warp).

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreads / kWarp;
constexpr unsigned kFullMask = 0xffffffffu;

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(static_cast<int64_t>(kMaxBlocks),
                                                 std::max<int64_t>(1, (rows + kRowsPerBlock - 1) / kRowsPerBlock)));
}

// max over z[0..n) as log_sum_exp_row's scan (m = z[0], then max_scan_step in order): every lane starts from z[0]
// (a NaN there stays, as in the scan) and the lanes' maxima combine with the same step. The same on every lane.
__device__ float warp_row_max(const float* z, int64_t n, int lane) {
  float m = z[0];
  for (int64_t j = lane; j < n; j += kWarp) m = max_scan_step(m, z[j]);
  for (int off = kWarp / 2; off > 0; off >>= 1) m = max_scan_step(m, __shfl_xor_sync(kFullMask, m, off));
  return __shfl_sync(kFullMask, m, 0);
}

// sum_{j < n} term(j) added in index order from 0 (the host loop's order and rounding), the terms computed by the
// lanes in parallel 32 at a time; buf is this warp's 32 floats of shared memory. The same on every lane.
template <class Term>
__device__ float warp_row_ordered_sum(int64_t n, int lane, float* buf, const Term& term) {
  float s = 0.0f;
  for (int64_t base = 0; base < n; base += kWarp) {
    const int64_t j = base + lane;
    if (j < n) buf[lane] = term(j);
    __syncwarp();
    if (lane == 0) {
      const int count = static_cast<int>(n - base < kWarp ? n - base : kWarp);
      for (int k = 0; k < count; ++k) s += buf[k];
    }
    __syncwarp();
  }
  return __shfl_sync(kFullMask, s, 0);
}

// log_sum_exp_row of row z (n >= 1) on every lane of the warp: the same bits as the host twin given the same expf/logf.
__device__ float warp_log_sum_exp(const float* z, int64_t n, int lane, float* buf) {
  const float m = warp_row_max(z, n, lane);
  const float s = warp_row_ordered_sum(n, lane, buf, [&](int64_t j) { return math_exp(z[j] - m); });
  return m + math_log(s);
}

// Grid-stride over rows, one warp each; f(row, lane, buf) with the warp's staging buffer.
template <class F>
__global__ void rows_kernel(int64_t rows, F f) {
  __shared__ float staging[kRowsPerBlock][kWarp];
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp; r < rows;
       r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    f(r, lane, staging[warp]);
  }
}

template <class F>
void launch_rows(int64_t rows, const F& f, cudaStream_t stream, const char* what) {
  if (rows <= 0) return;  // a row of 0 columns is still written (mse: 0), as by the host loop
  rows_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(rows, f);
  check_launch(what);
}

// As the host's count_correct: the first index holding the row's maximum (strict > while scanning; z[0] NaN: 0).
struct CountCorrectRow {
  unsigned long long* correct;
  const float* logits;
  const int32_t* labels;
  int64_t classes;
  __device__ void operator()(int64_t r, int lane, float*) const {
    const float* z = logits + r * classes;
    float best_v = z[0];
    int64_t best = 0;
    for (int64_t j = lane; j < classes; j += kWarp) {  // this lane's first maximum (its indices increase)
      if (z[j] > best_v) {
        best_v = z[j];
        best = j;
      }
    }
    for (int off = kWarp / 2; off > 0; off >>= 1) {  // the larger value, the lower index on a tie
      const float v = __shfl_xor_sync(kFullMask, best_v, off);
      const long long i = __shfl_xor_sync(kFullMask, static_cast<long long>(best), off);
      if (v > best_v || (v == best_v && i < best)) {
        best_v = v;
        best = i;
      }
    }
    if (lane == 0 && best == labels[r]) atomicAdd(correct, 1ull);
  }
};

struct CrossEntropyRow {
  float* row_loss;
  const float* logits;
  const int32_t* labels;
  int64_t classes;
  __device__ void operator()(int64_t r, int lane, float* buf) const {
    const float* z = logits + r * classes;
    const float lse = warp_log_sum_exp(z, classes, lane, buf);
    if (lane == 0) row_loss[r] = lse - z[labels[r]];
  }
};

// softmax_cross_entropy_grad_row: dz[j] = exp(z[j] - lse), then dz[label] - 1 (the same two roundings); dz may alias
// z (each lane reads z[j] before writing dz[j], and lse is computed before any write).
struct CrossEntropyGradRow {
  float* dlogits;
  const float* logits;
  const int32_t* labels;
  int64_t classes;
  __device__ void operator()(int64_t r, int lane, float* buf) const {
    const float* z = logits + r * classes;
    float* dz = dlogits + r * classes;
    const float lse = warp_log_sum_exp(z, classes, lane, buf);
    const int64_t label = labels[r];
    __syncwarp();  // every lane has read z for lse before any lane overwrites it in place
    for (int64_t j = lane; j < classes; j += kWarp) {
      float v = math_exp(z[j] - lse);
      if (j == label) v -= 1.0f;
      dz[j] = v;
    }
  }
};

struct MseRow {
  float* row_loss;
  const float* y_hat;
  const float* y;
  int64_t cols;
  __device__ void operator()(int64_t r, int lane, float* buf) const {
    const float* a = y_hat + r * cols;
    const float* b = y + r * cols;
    const float s = warp_row_ordered_sum(cols, lane, buf, [&](int64_t j) { return squared_error_term(a[j], b[j]); });
    if (lane == 0) row_loss[r] = 0.5f * s;
  }
};

struct FloatTerm {
  const float* x;
  __device__ Sums<1> operator()(size_t i) const { return Sums<1>{{static_cast<double>(x[i])}}; }
};

__global__ void copy_first_kernel(double* out, const Sums<1>* s) { *out = s->v[0]; }

}  // namespace

void gemm(const BlasHandle& blas, float* c, const float* a, const float* b, int64_t m, int64_t n, int64_t k,
          Transpose trans_a, Transpose trans_b, float alpha, float beta) {
  const int mi = checked_dim(m, "gemm: m fits in int"), ni = checked_dim(n, "gemm: n fits in int"),
            ki = checked_dim(k, "gemm: k fits in int");
  if (mi == 0 || ni == 0) return;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands, keep the transposes.
  const int lda = trans_a == Transpose::kYes ? mi : ki;
  const int ldb = trans_b == Transpose::kYes ? ki : ni;
  GS_CUBLAS_CHECK(cublasSgemm(static_cast<cublasHandle_t>(blas.get()), op_of(trans_b), op_of(trans_a), ni, mi, ki,
                              &alpha, b, std::max(ldb, 1), a, std::max(lda, 1), &beta, c, ni));
}

namespace {

// The row-major GEMM of gemm_mixed / gemm_mixed_scaled through cublasGemmEx (format operands, fp32 output and
// compute); alpha and beta point to host or device scalars as the handle's pointer mode says. Nothing for m or n 0.
void gemm_ex(cublasHandle_t h, FloatFormat storage, float* c, const void* a, const void* b, int64_t m, int64_t n,
             int64_t k, Transpose trans_a, Transpose trans_b, const float* alpha, const float* beta) {
  const int mi = checked_dim(m, "gemm: m fits in int"), ni = checked_dim(n, "gemm: n fits in int"),
            ki = checked_dim(k, "gemm: k fits in int");
  if (mi == 0 || ni == 0) return;
  const cudaDataType_t t = storage == FloatFormat::kFp16 ? CUDA_R_16F : CUDA_R_16BF;
  const int lda = trans_a == Transpose::kYes ? mi : ki;
  const int ldb = trans_b == Transpose::kYes ? ki : ni;
  GS_CUBLAS_CHECK(cublasGemmEx(h, op_of(trans_b), op_of(trans_a), ni, mi, ki, alpha, b, t, std::max(ldb, 1), a, t,
                               std::max(lda, 1), beta, c, CUDA_R_32F, ni, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void gemm_mixed(const BlasHandle& blas, FloatFormat storage, float* c, const void* a, const void* b, int64_t m,
                int64_t n, int64_t k, Transpose trans_a, Transpose trans_b, float alpha, float beta) {
  GS_EXPECT_GPU(storage == FloatFormat::kFp16 || storage == FloatFormat::kBf16,
                "gemm_mixed: storage fp16 or bf16 (fp8 GEMMs through cuBLASLt are not implemented)");
  gemm_ex(static_cast<cublasHandle_t>(blas.get()), storage, c, a, b, m, n, k, trans_a, trans_b, &alpha, &beta);
}

void gemm_mixed_scaled(const BlasHandle& blas, FloatFormat storage, float* c, const void* a, const void* b, int64_t m,
                       int64_t n, int64_t k, Transpose trans_a, Transpose trans_b, const float* alpha_beta) {
  GS_EXPECT_GPU(storage == FloatFormat::kFp16 || storage == FloatFormat::kBf16,
                "gemm_mixed_scaled: storage fp16 or bf16");
  const auto h = static_cast<cublasHandle_t>(blas.get());
  GS_CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  try {
    gemm_ex(h, storage, c, a, b, m, n, k, trans_a, trans_b, alpha_beta, alpha_beta + 1);
  } catch (...) {
    cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST);  // the handle's other calls pass host scalars
    throw;
  }
  GS_CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
}

void set_tf32_math(const BlasHandle& blas, bool on) {
  GS_CUBLAS_CHECK(cublasSetMathMode(static_cast<cublasHandle_t>(blas.get()),
                                    on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

void broadcast_rows(float* y, const float* row, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (cols <= 0) return;
  launch_map(static_cast<size_t>(rows * cols), BroadcastRowsOp{y, row, cols}, stream, "broadcast_rows");
}

void count_correct(unsigned long long* correct, const float* logits, const int32_t* labels, int64_t rows,
                   int64_t classes, cudaStream_t stream) {
  GS_CUDA_CHECK(cudaMemsetAsync(correct, 0, sizeof(unsigned long long), stream));
  launch_rows(rows, CountCorrectRow{correct, logits, labels, classes}, stream, "count_correct");
}

void add_bias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (cols <= 0) return;
  launch_map(static_cast<size_t>(rows * cols), AddBiasOp{y, bias, cols}, stream, "add_bias");
}

void bias_grad(float* db, const float* dy, int64_t rows, int64_t cols, cudaStream_t stream) {
  launch_bias_grad(db, dy, rows, cols, false, stream, "bias_grad");
}

void add_bias_grad(float* grad_bias, const float* dy, int64_t rows, int64_t cols, cudaStream_t stream) {
  launch_bias_grad(grad_bias, dy, rows, cols, true, stream, "add_bias_grad");
}

void activation_forward(float* out, const float* in, int64_t n, Activation act, cudaStream_t stream) {
  launch_map(static_cast<size_t>(n), ActForwardOp{out, in, act}, stream, "activation_forward");
}

void activation_backward(float* dx, const float* dy, const float* x, int64_t n, Activation act, cudaStream_t stream) {
  launch_map(static_cast<size_t>(n), ActBackwardOp{dx, dy, x, act}, stream, "activation_backward");
}

void softmax_cross_entropy_rows(float* row_loss, const float* logits, const int32_t* labels, int64_t rows,
                                int64_t classes, cudaStream_t stream) {
  launch_rows(rows, CrossEntropyRow{row_loss, logits, labels, classes}, stream, "softmax_cross_entropy_rows");
}

void softmax_cross_entropy_backward(float* dlogits, const float* logits, const int32_t* labels, int64_t rows,
                                    int64_t classes, cudaStream_t stream) {
  launch_rows(rows, CrossEntropyGradRow{dlogits, logits, labels, classes}, stream,
              "softmax_cross_entropy_backward");
}

void mse_rows(float* row_loss, const float* y_hat, const float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  launch_rows(rows, MseRow{row_loss, y_hat, y, cols}, stream, "mse_rows");
}

void mse_backward(float* dy_hat, const float* y_hat, const float* y, int64_t n, cudaStream_t stream) {
  launch_map(static_cast<size_t>(n), MseGradOp{dy_hat, y_hat, y}, stream, "mse_backward");
}

void sum_to_double(double* out, const float* x, size_t n, Scratch& scratch, cudaStream_t stream) {
  auto* partial = static_cast<Sums<1>*>(scratch.get((kReduceBlocks + 1) * sizeof(Sums<1>)));
  launch_sums<1>(n, FloatTerm{x}, partial, partial + kReduceBlocks, stream, "sum_to_double");
  copy_first_kernel<<<1, 1, 0, stream>>>(out, partial + kReduceBlocks);
  check_launch("sum_to_double");
}

namespace {

struct SquaredDifferenceTerm {
  const float* a;
  const float* b;
  __device__ Sums<1> operator()(size_t i) const {
    const double d = static_cast<double>(a[i]) - b[i];
    return Sums<1>{{d * d}};
  }
};

struct MomentumFeedInOp {
  float* u;
  float* e;
  float* g;
  float m;
  __device__ void operator()(size_t i) const {
    const float ui = u[i] * m + g[i];  // two roundings (--fmad=false)
    const float ei = e[i] + ui;
    u[i] = ui;
    e[i] = ei;
    g[i] = ei;
  }
};

// Terms that write as they are summed (each element read and written by the one thread that sums it).
struct ResidualTerm {
  float* e;
  const float* p;
  const float* own;
  __device__ Sums<1> operator()(size_t i) const {
    const float r = p[i] - own[i];
    e[i] = r;
    const double d = r;
    return Sums<1>{{d * d}};
  }
};

struct MaskSentTerm {
  float* u;
  float* e;
  const float* own;
  __device__ Sums<1> operator()(size_t i) const {
    if (own[i] != 0.0f) u[i] = e[i] = 0.0f;
    const double d = e[i];
    return Sums<1>{{d * d}};
  }
};

struct AverageOp {
  float* out;
  const float* sum;
  float s;
  __device__ void operator()(size_t i) const { out[i] = sum[i] / s; }
};

}  // namespace

void sum_squared_difference(double* out, const float* a, const float* b, size_t n, Scratch& scratch,
                            cudaStream_t stream) {
  auto* partial = static_cast<Sums<1>*>(scratch.get((kReduceBlocks + 1) * sizeof(Sums<1>)));
  launch_sums<1>(n, SquaredDifferenceTerm{a, b}, partial, partial + kReduceBlocks, stream, "sum_squared_difference");
  copy_first_kernel<<<1, 1, 0, stream>>>(out, partial + kReduceBlocks);
  check_launch("sum_squared_difference");
}

void momentum_feed_in(float* u, float* e, float* g, size_t n, float m, cudaStream_t stream) {
  launch_map(n, MomentumFeedInOp{u, e, g, m}, stream, "momentum_feed_in");
}

void residual_of(double* out, float* e, const float* p, const float* own, size_t n, Scratch& scratch,
                 cudaStream_t stream) {
  auto* partial = static_cast<Sums<1>*>(scratch.get((kReduceBlocks + 1) * sizeof(Sums<1>)));
  launch_sums<1>(n, ResidualTerm{e, p, own}, partial, partial + kReduceBlocks, stream, "residual_of");
  copy_first_kernel<<<1, 1, 0, stream>>>(out, partial + kReduceBlocks);
  check_launch("residual_of");
}

void mask_sent(double* out, float* u, float* e, const float* own, size_t n, Scratch& scratch, cudaStream_t stream) {
  auto* partial = static_cast<Sums<1>*>(scratch.get((kReduceBlocks + 1) * sizeof(Sums<1>)));
  launch_sums<1>(n, MaskSentTerm{u, e, own}, partial, partial + kReduceBlocks, stream, "mask_sent");
  copy_first_kernel<<<1, 1, 0, stream>>>(out, partial + kReduceBlocks);
  check_launch("mask_sent");
}

void average(float* out, const float* sum, size_t n, float s, cudaStream_t stream) {
  launch_map(n, AverageOp{out, sum, s}, stream, "average");
}

// ---- DeepSpeed's 1-bit optimizers (twins of sim/core/compress_ops.cpp's host loops) --------------------------------

namespace {

struct FirstMomentOp {
  float* m;
  const float* g;
  float b1, a1;
  __device__ void operator()(size_t i) const { m[i] = deepspeed_first_moment_value(m[i], g[i], b1, a1); }
};

struct SecondMomentOp {
  float* v;
  const float* g;
  float b2, a2;
  __device__ void operator()(size_t i) const { v[i] = deepspeed_second_moment_value(v[i], g[i], b2, a2); }
};

struct DeepSpeedUpdateOp {
  float* p;
  const float* m;
  const float* v;
  DeepSpeedUpdate s;
  float* accumulated;
  __device__ void operator()(size_t i) const {
    const float step = s.neg_lr * deepspeed_direction(m[i], v[i], p[i], s.eps, s.weight_decay, s.decay);
    p[i] = p[i] + step;
    if (accumulated != nullptr) accumulated[i] = accumulated[i] + step;
  }
};

// x += error, summing x^2 (each element read and written by the thread that sums it).
struct CompensateTerm {
  float* x;
  const float* error;
  __device__ Sums<1> operator()(size_t i) const {
    const float xi = x[i] + error[i];
    x[i] = xi;
    const double d = xi;
    return Sums<1>{{d * d}};
  }
};

// One 4-byte word w of the packed signs (elements 32 w .. 32 w + 31, numpy packbits order within each byte, bytes in
// memory order) and those elements' new error, summing its squares. The scale from the first sum (every thread
// computes the same value).
struct PackTerm {
  float* message;
  const float* x;
  float* error;
  size_t count;
  const Sums<1>* x_sum;
  __device__ Sums<1> operator()(size_t w) const {
    const float s = onebit_scale(x_sum->v[0], count);
    uint8_t bytes[4] = {0, 0, 0, 0};
    double ss = 0.0;
    for (size_t k = 0; k < 32; ++k) {
      const size_t i = 32 * w + k;
      if (i >= count) break;
      const float xi = x[i];
      const float e = xi - (xi < 0.0f ? -s : s);
      error[i] = e;
      ss += static_cast<double>(e) * static_cast<double>(e);
      if (onebit_sign_bit(xi)) bytes[k / 8] = static_cast<uint8_t>(bytes[k / 8] | (0x80u >> (k % 8)));
    }
    memcpy(message + 1 + w, bytes, 4);
    return Sums<1>{{ss}};
  }
};

__global__ void onebit_side_kernel(OnebitSideTotals* out, float* message, const Sums<1>* x_sum,
                                   const Sums<1>* error_sum, size_t count) {
  const float s = onebit_scale(x_sum->v[0], count);
  message[0] = s;
  out->scale = s;
  out->error_sum_squares = error_sum->v[0];
}

struct ServerSumOp {
  float* c;
  const float* messages;
  int ranks;
  size_t words, first;
  float inv;
  __device__ void operator()(size_t i) const {
    float acc = 0.0f;
    for (int j = 0; j < ranks; ++j) {
      const float* msg = messages + static_cast<size_t>(j) * words;
      const float sj = msg[0] * inv;
      const float v = onebit_message_bit(reinterpret_cast<const uint8_t*>(msg + 1), first + i) ? sj : -sj;
      acc = j == 0 ? v : acc + v;
    }
    c[i] = acc;
  }
};

struct OnebitDecodeOp {
  float* m;
  const float* messages;
  size_t words, chunk;
  __device__ void operator()(size_t i) const {
    const size_t q = i / chunk;
    const float* msg = messages + q * words;
    m[i] = onebit_message_bit(reinterpret_cast<const uint8_t*>(msg + 1), i - q * chunk) ? msg[0] : -msg[0];
  }
};

struct ZeroVarianceMaskOp {
  float* m;
  const float* v;
  __device__ void operator()(size_t i) const { m[i] = m[i] * (v[i] == 0.0f ? 0.0f : 1.0f); }
};

struct SyncBeginOp {
  float* p;
  float* cb;
  const float* v;
  float eps;
  __device__ void operator()(size_t i) const {
    p[i] = p[i] - cb[i];
    cb[i] = cb[i] * (sqrtf(v[i]) + eps);
  }
};

struct SyncEndOp {
  float* m;
  float* p;
  float* cb;
  const float* v;
  float lrs, eps;
  __device__ void operator()(size_t i) const {
    m[i] = 0.0f - cb[i] / lrs;
    p[i] = p[i] + cb[i] / (sqrtf(v[i]) + eps);
    cb[i] = 0.0f;
  }
};

struct LambDirectionOp {
  float* u;
  const float* m;
  const float* v;
  const float* p;
  float eps, weight_decay;
  bool decay;
  __device__ void operator()(size_t i) const { u[i] = deepspeed_direction(m[i], v[i], p[i], eps, weight_decay, decay); }
};

struct LambReconstructOp {
  float* u;
  const float* m;
  const float* last;
  float b1, a1;
  __device__ void operator()(size_t i) const { u[i] = (m[i] - last[i] * b1) / a1; }
};

// 1-bit LAMB's frozen update: per element pre, u and the ratio; reduced as (sum of pre^2, max ratio, NaN count).
struct LambAcc {
  double ss;
  float max;
  unsigned nan;
};

struct LambAccCombine {
  __device__ LambAcc operator()(const LambAcc& a, const LambAcc& b) const {
    return LambAcc{a.ss + b.ss, fmaxf(a.max, b.max), a.nan + b.nan};
  }
};

struct LambFrozenTerm {
  float* u;
  const float* m;
  const float* v;
  const float* fresh;
  const float* p;
  float eps, weight_decay;
  bool decay;
  __device__ LambAcc operator()(size_t i) const {
    const float denom = sqrtf(v[i]) + eps;
    const float pre = m[i] / denom;
    u[i] = decay ? pre + weight_decay * p[i] : pre;
    const float q = denom / (sqrtf(fresh[i]) + eps);
    const bool nan = isnan(q);
    return LambAcc{static_cast<double>(pre) * static_cast<double>(pre), nan ? -INFINITY : q, nan ? 1u : 0u};
  }
};

__global__ void lamb_partial_kernel(size_t n, LambFrozenTerm f, LambAcc* partial) {
  using Reduce = cub::BlockReduce<LambAcc, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  LambAcc acc{0.0, -INFINITY, 0u};
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    acc = LambAccCombine()(acc, f(i));
  }
  const LambAcc total = Reduce(tmp).Reduce(acc, LambAccCombine());
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void lamb_final_kernel(const LambAcc* partial, unsigned count, LambTermTotals* out) {
  using Reduce = cub::BlockReduce<LambAcc, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  LambAcc acc{0.0, -INFINITY, 0u};
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) acc = LambAccCombine()(acc, partial[i]);
  const LambAcc total = Reduce(tmp).Reduce(acc, LambAccCombine());
  if (threadIdx.x == 0) *out = LambTermTotals{total.ss, total.max, total.nan};
}

}  // namespace

void deepspeed_first_moment(float* m, const float* g, size_t n, float b1, float a1, cudaStream_t stream) {
  launch_map(n, FirstMomentOp{m, g, b1, a1}, stream, "deepspeed_first_moment");
}

void deepspeed_second_moment(float* v, const float* g, size_t n, float b2, float a2, cudaStream_t stream) {
  launch_map(n, SecondMomentOp{v, g, b2, a2}, stream, "deepspeed_second_moment");
}

void deepspeed_update(float* p, const float* m, const float* v, size_t n, const DeepSpeedUpdate& s,
                      float* accumulated, cudaStream_t stream) {
  launch_map(n, DeepSpeedUpdateOp{p, m, v, s, accumulated}, stream, "deepspeed_update");
}

void onebit_compensate(OnebitSideTotals* out, float* message, float* x, float* error, size_t count, Scratch& scratch,
                       cudaStream_t stream) {
  auto* partial = static_cast<Sums<1>*>(scratch.get(2 * (kReduceBlocks + 1) * sizeof(Sums<1>)));
  Sums<1>* x_sum = partial + kReduceBlocks;
  Sums<1>* second = x_sum + 1;
  Sums<1>* error_sum = second + kReduceBlocks;
  launch_sums<1>(count, CompensateTerm{x, error}, partial, x_sum, stream, "onebit_compensate x");
  const size_t words = onebit_message_words(count) - 1;
  launch_sums<1>(words, PackTerm{message, x, error, count, x_sum}, second, error_sum, stream,
                 "onebit_compensate pack");
  onebit_side_kernel<<<1, 1, 0, stream>>>(out, message, x_sum, error_sum, count);
  check_launch("onebit_compensate");
}

void onebit_server_sum(float* c, const float* messages, int ranks, size_t words, size_t first, size_t count,
                       float inv, cudaStream_t stream) {
  launch_map(count, ServerSumOp{c, messages, ranks, words, first, inv}, stream, "onebit_server_sum");
}

void onebit_decode_chunks(float* m, size_t n, const float* messages, size_t words, size_t chunk, cudaStream_t stream) {
  launch_map(n, OnebitDecodeOp{m, messages, words, chunk}, stream, "onebit_decode_chunks");
}

void zero_variance_mask(float* m, const float* v, size_t n, cudaStream_t stream) {
  launch_map(n, ZeroVarianceMaskOp{m, v}, stream, "zero_variance_mask");
}

void zero_one_sync_begin(float* p, float* cb, const float* v, size_t n, float eps, cudaStream_t stream) {
  launch_map(n, SyncBeginOp{p, cb, v, eps}, stream, "zero_one_sync_begin");
}

void zero_one_sync_end(float* m, float* p, float* cb, const float* v, size_t n, float lrs, float eps,
                       cudaStream_t stream) {
  launch_map(n, SyncEndOp{m, p, cb, v, lrs, eps}, stream, "zero_one_sync_end");
}

void lamb_direction(float* u, const float* m, const float* v, const float* p, size_t n, float eps, float weight_decay,
                    bool decay, cudaStream_t stream) {
  launch_map(n, LambDirectionOp{u, m, v, p, eps, weight_decay, decay}, stream, "lamb_direction");
}

void lamb_reconstruct(float* u, const float* m, const float* last, size_t n, float b1, float a1, cudaStream_t stream) {
  launch_map(n, LambReconstructOp{u, m, last, b1, a1}, stream, "lamb_reconstruct");
}

void lamb_frozen_direction(LambTermTotals* terms, float* u, const float* m, const float* v, const float* fresh,
                           const float* p, size_t n, float eps, float weight_decay, bool decay, Scratch& scratch,
                           cudaStream_t stream) {
  auto* partial = static_cast<LambAcc*>(scratch.get(kReduceBlocks * sizeof(LambAcc)));
  const unsigned grid = static_cast<unsigned>(std::min<size_t>(kReduceBlocks, std::max<size_t>(1, (n + 255) / 256)));
  lamb_partial_kernel<<<grid, kThreads, 0, stream>>>(n, LambFrozenTerm{u, m, v, fresh, p, eps, weight_decay, decay},
                                                      partial);
  check_launch("lamb_frozen_direction");
  lamb_final_kernel<<<1, kThreads, 0, stream>>>(partial, grid, terms);
  check_launch("lamb_frozen_direction");
}

namespace {

struct CastEncodeOp {
  FloatFormat f;
  float* wire;
  float* own;
  const float* p;
  float bf;
  double pre, b;
  __device__ void operator()(size_t i) const {
    const float w = cast_wire_value(f, p[i], bf, pre);
    wire[i] = w;
    if (own != nullptr) own[i] = static_cast<float>(static_cast<double>(w) * pre * b);
  }
};

struct AddInFormatOp {
  FloatFormat f;
  float* acc;
  const float* x;
  __device__ void operator()(size_t i) const { acc[i] = add_in_format(f, acc[i], x[i]); }
};

struct PostDivideOp {
  FloatFormat f;
  float* x;
  double post;
  __device__ void operator()(size_t i) const { x[i] = cast_post_divide(f, x[i], post); }
};

}  // namespace

void cast_encode(FloatFormat f, float* wire, float* own, const float* p, size_t n, float bf, double pre, double b,
                 cudaStream_t stream) {
  launch_map(n, CastEncodeOp{f, wire, own, p, bf, pre, b}, stream, "cast_encode");
}

void add_in_format_into(FloatFormat f, float* acc, const float* x, size_t n, cudaStream_t stream) {
  launch_map(n, AddInFormatOp{f, acc, x}, stream, "add_in_format_into");
}

void post_divide_in_format(FloatFormat f, float* x, size_t n, double post, cudaStream_t stream) {
  launch_map(n, PostDivideOp{f, x, post}, stream, "post_divide_in_format");
}

// ---- Selection: radix select on magnitude keys and tiled compaction ----------------------------------------------

namespace {

// The running state of a radix select: keys with (key & mask) == prefix are still candidates; `remaining` of them
// are still to be taken from the top. After the last digit: prefix = the k-th key, remaining = how many keys equal
// to it are taken (the lowest indices).
struct SelectState {
  uint32_t prefix;
  uint32_t mask;
  uint32_t remaining;
  uint32_t pad;
};

__global__ void select_init_kernel(SelectState* st, uint32_t k) { *st = SelectState{0u, 0u, k, 0u}; }

template <int kBits>
__global__ void digit_hist_kernel(const float* x, size_t n, int shift, const SelectState* st, uint32_t* hist) {
  constexpr int kBins = 1 << kBits;
  __shared__ uint32_t sh[kBins];
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) sh[b] = 0;
  __syncthreads();
  const uint32_t prefix = st->prefix, mask = st->mask;
  // Warp-aggregated counting: a gradient's magnitudes crowd into a few digits (its exponents), and shared-memory
  // atomics on one address serialise, so each warp adds once per distinct digit (__match_any_sync groups the lanes
  // holding the same digit; the lowest lane adds the group's size). The loop runs warp-uniformly (base is the same
  // for the 32 lanes) so that every lane reaches the match; lanes past n or not candidates carry kNone. The counts
  // are the same integers as one atomic per element.
  constexpr uint32_t kNone = 0xffffffffu;
  const unsigned lane = threadIdx.x % 32u;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t base = blockIdx.x * static_cast<size_t>(blockDim.x) + (threadIdx.x - lane); base < n; base += stride) {
    const size_t i = base + lane;
    uint32_t digit = kNone;
    if (i < n) {
      const uint32_t key = magnitude_key(x[i]);
      if ((key & mask) == prefix) digit = (key >> shift) & (kBins - 1);
    }
    const unsigned peers = __match_any_sync(0xffffffffu, digit);
    if (digit != kNone && lane == static_cast<unsigned>(__ffs(peers) - 1)) atomicAdd(&sh[digit], __popc(peers));
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
    if (sh[b]) atomicAdd(&hist[b], sh[b]);
  }
}

// Picks the digit holding the remaining-th largest candidate: the highest digit b whose candidates above it number
// fewer than `remaining` and, with its own, at least `remaining` (one block of kThreads; at most 4096 bins). Thread t
// holds kBins / kThreads consecutive digits from the top; an exclusive block scan of the threads' sums gives the
// count above each thread's digits, so exactly one thread finds b (the counts are exact integers: the same b as a
// walk from the top).
template <int kBits>
__global__ void digit_pick_kernel(const uint32_t* hist, int shift, SelectState* st) {
  constexpr int kBins = 1 << kBits;
  static_assert(kBins % kThreads == 0, "whole digits per thread");
  constexpr int kPer = kBins / kThreads;
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ uint32_t want_shared;
  if (threadIdx.x == 0) want_shared = st->remaining;
  const int top = kBins - 1 - static_cast<int>(threadIdx.x) * kPer;  // this thread's digits: top, top - 1, ...
  uint32_t counts[kPer];
  uint32_t mine = 0;
  for (int j = 0; j < kPer; ++j) {
    counts[j] = hist[top - j];
    mine += counts[j];
  }
  uint32_t above = 0;
  Scan(tmp).ExclusiveSum(mine, above);  // synchronises the block: want_shared is written before it is read
  const uint32_t want = want_shared;
  for (int j = 0; j < kPer; ++j) {
    if (above < want && above + counts[j] >= want) {
      st->prefix |= static_cast<uint32_t>(top - j) << shift;
      st->mask |= static_cast<uint32_t>(kBins - 1) << shift;
      st->remaining = want - above;
      return;
    }
    above += counts[j];
  }
}

template <int kBits>
void digit_pass(const float* x, size_t n, int shift, SelectState* st, uint32_t* hist, cudaStream_t stream) {
  GS_CUDA_CHECK(cudaMemsetAsync(hist, 0, (size_t{1} << kBits) * sizeof(uint32_t), stream));
  digit_hist_kernel<kBits><<<std::min(blocks_for(n), 2048u), kThreads, 0, stream>>>(x, n, shift, st, hist);
  check_launch("radix select histogram");
  digit_pick_kernel<kBits><<<1, kThreads, 0, stream>>>(hist, shift, st);
  check_launch("radix select pick");
}

// Full radix select over the 31-bit keys of x[0..n) for the k-th largest (1 <= k <= n): 11 + 12 + 8 bits.
void radix_select(const float* x, size_t n, size_t k, SelectState* st, uint32_t* hist, cudaStream_t stream) {
  select_init_kernel<<<1, 1, 0, stream>>>(st, static_cast<uint32_t>(k));
  check_launch("radix select init");
  digit_pass<11>(x, n, 20, st, hist, stream);
  digit_pass<12>(x, n, 8, st, hist, stream);
  digit_pass<8>(x, n, 0, st, hist, stream);
}

// Tiles of the compaction: 256 threads x 16 consecutive elements per thread (blocked), so that a block scan of the
// per-thread counts followed by an in-order walk writes ascending indices.
constexpr int kItems = 16;
constexpr size_t kTile = static_cast<size_t>(kThreads) * kItems;

// Class of an element: 0 not selected, 1 selected, 2 a tie (selected while fewer than `ties` ties precede it).
struct TopkClass {
  const float* x;
  const SelectState* st;
  __device__ uint32_t operator()(size_t i) const {
    const uint32_t key = magnitude_key(x[i]), kth = st->prefix;
    return key > kth ? 1u : (key == kth ? 2u : 0u);
  }
  __device__ uint32_t ties() const { return st->remaining; }
};

struct ThresholdClass {
  const float* x;
  float tau;
  __device__ uint32_t operator()(size_t i) const { return threshold_keep(x[i], tau) ? 1u : 0u; }
  __device__ uint32_t ties() const { return 0u; }
};

// Packed counts: selected in the high 32 bits, ties in the low 32 bits (both < 2^32 for n < 2^32).
__device__ inline uint64_t pack_counts(uint32_t take, uint32_t tie) {
  return (static_cast<uint64_t>(take) << 32) | tie;
}

template <class C>
__global__ void tile_count_kernel(C cls, size_t n, uint64_t* tile_counts) {
  using Reduce = cub::BlockReduce<uint64_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const size_t base = blockIdx.x * kTile + static_cast<size_t>(threadIdx.x) * kItems;
  uint32_t take = 0, tie = 0;
  for (int j = 0; j < kItems; ++j) {
    const size_t i = base + j;
    if (i >= n) break;
    const uint32_t c = cls(i);
    take += c == 1u;
    tie += c == 2u;
  }
  const uint64_t total = Reduce(tmp).Sum(pack_counts(take, tie));
  if (threadIdx.x == 0) tile_counts[blockIdx.x] = total;
}

template <class C>
__global__ void tile_write_kernel(C cls, size_t n, const uint64_t* tile_prefix, uint32_t* idx) {
  using Scan = cub::BlockScan<uint64_t, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const size_t base = blockIdx.x * kTile + static_cast<size_t>(threadIdx.x) * kItems;
  uint32_t classes[kItems];
  uint32_t take = 0, tie = 0;
  for (int j = 0; j < kItems; ++j) {
    const size_t i = base + j;
    classes[j] = i < n ? cls(i) : 0u;
    take += classes[j] == 1u;
    tie += classes[j] == 2u;
  }
  uint64_t before = 0;
  Scan(tmp).ExclusiveSum(pack_counts(take, tie), before);
  before += tile_prefix[blockIdx.x];
  uint64_t take_before = before >> 32;
  uint64_t tie_before = before & 0xffffffffu;
  const uint64_t ties = cls.ties();
  for (int j = 0; j < kItems; ++j) {
    const uint32_t c = classes[j];
    if (c == 1u || (c == 2u && tie_before < ties)) {
      idx[take_before + (tie_before < ties ? tie_before : ties)] = static_cast<uint32_t>(base + j);
    }
    take_before += c == 1u;
    tie_before += c == 2u;
  }
}

template <class C>
__global__ void compaction_total_kernel(C cls, const uint64_t* tile_prefix, const uint64_t* tile_counts,
                                        size_t tiles, uint32_t* count) {
  const uint64_t all = tile_prefix[tiles - 1] + tile_counts[tiles - 1];
  const uint64_t take = all >> 32, tie = all & 0xffffffffu, ties = cls.ties();
  *count = static_cast<uint32_t>(take + (tie < ties ? tie : ties));
}

// Bytes of compaction scratch for n elements: tile counts, their prefix and CUB's scan storage.
size_t compaction_scratch_bytes(size_t n, size_t* scan_bytes) {
  const size_t tiles = (n + kTile - 1) / kTile;
  *scan_bytes = 0;
  uint64_t* dummy = nullptr;
  GS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, *scan_bytes, dummy, dummy, static_cast<int64_t>(tiles)));
  return 2 * align_up(tiles * sizeof(uint64_t)) + align_up(*scan_bytes);
}

// Writes the ascending indices selected by cls (and their number into *count when count is not null).
template <class C>
void compact(const C& cls, size_t n, uint32_t* idx, uint32_t* count, uint8_t* scratch, size_t scan_bytes,
             cudaStream_t stream) {
  const size_t tiles = (n + kTile - 1) / kTile;
  auto* tile_counts = reinterpret_cast<uint64_t*>(scratch);
  auto* tile_prefix = reinterpret_cast<uint64_t*>(scratch + align_up(tiles * sizeof(uint64_t)));
  void* scan_tmp = scratch + 2 * align_up(tiles * sizeof(uint64_t));
  tile_count_kernel<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(cls, n, tile_counts);
  check_launch("compaction tile counts");
  size_t bytes = scan_bytes;
  GS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(scan_tmp, bytes, tile_counts, tile_prefix,
                                              static_cast<int64_t>(tiles), stream));
  tile_write_kernel<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(cls, n, tile_prefix, idx);
  check_launch("compaction write");
  if (count) {
    compaction_total_kernel<<<1, 1, 0, stream>>>(cls, tile_prefix, tile_counts, tiles, count);
    check_launch("compaction total");
  }
}

// Scratch layout shared by the selection ops: state, histogram (4096 bins), then the compaction block.
constexpr size_t kSelectHead = 256 + 4096 * sizeof(uint32_t);

__global__ void key_to_float_kernel(float* out, const SelectState* st) { *out = float_from_key(st->prefix); }

// Stratified samples of sampled_threshold (compress.cpp): sample j is x[lo_j + offset_j], lo_j = j q + floor(j r/m),
// width_j = q + floor((j+1) r/m) - floor(j r/m) (the host's carry loop in closed form), offset_j = (u_j width_j) >> 32
// with u_j word j%4 of draw (kSample, block j/4).
struct SampleOp {
  float* samples;
  const float* x;
  uint64_t n, m, seed, stream_id;
  __device__ void operator()(size_t j) const {
    const uint64_t q = n / m, r = n % m;
    const uint64_t lo = j * q + (j * r) / m;
    const uint64_t width = q + ((j + 1) * r) / m - (j * r) / m;
    const Draw4 d = compress_draw(seed, stream_id, CompressDraw::kSample, static_cast<uint32_t>(j / 4));
    const uint64_t offset = (static_cast<uint64_t>(d.v[j % 4]) * width) >> 32;
    samples[j] = x[lo + offset];
  }
};

// Random-k in the parallel form of compress_math.h (Floyd's steps resolved independently): thread per step t writes
// pick_t and t (RandomkPickOp); a stable radix sort of the (pick, t) pairs puts equal picks together in step order,
// so RandomkDupOp (thread per sorted position) marks dup_t; RandomkSetOp (thread per step) follows t's chain
// (randomk_collided) and sets pick_t, and j_t when collided, in the zeroed bitmap with atomicOr.
struct RandomkPickOp {
  uint32_t* picks;
  uint32_t* steps;
  uint64_t n, k, seed, stream_id;
  __device__ void operator()(size_t t) const {
    picks[t] = static_cast<uint32_t>(randomk_pick(seed, stream_id, n, k, t));
    steps[t] = static_cast<uint32_t>(t);
  }
};

struct RandomkDupOp {
  const uint32_t* sorted_picks;
  const uint32_t* sorted_steps;
  uint8_t* dup;
  __device__ void operator()(size_t i) const { dup[sorted_steps[i]] = randomk_sorted_dup(sorted_picks, i) ? 1 : 0; }
};

struct RandomkSetOp {
  uint64_t* bitmap;
  const uint32_t* picks;
  const uint8_t* dup;
  uint64_t first;
  __device__ void set(uint64_t i) const {
    atomicOr(reinterpret_cast<unsigned long long*>(bitmap + i / 64), 1ull << (i % 64));
  }
  __device__ void operator()(size_t t) const {
    set(picks[t]);
    if (randomk_collided(t, first, picks, dup)) set(first + t);
  }
};

struct PopcountOp {
  const uint64_t* bitmap;
  uint32_t* counts;
  __device__ void operator()(size_t w) const { counts[w] = static_cast<uint32_t>(__popcll(bitmap[w])); }
};

struct BitmapReadOp {
  const uint64_t* bitmap;
  const uint32_t* prefix;
  uint32_t* idx;
  __device__ void operator()(size_t w) const {
    uint64_t bits = bitmap[w];
    uint32_t pos = prefix[w];
    while (bits) {
      idx[pos++] = static_cast<uint32_t>(w * 64 + static_cast<uint64_t>(__ffsll(static_cast<long long>(bits)) - 1));
      bits &= bits - 1;
    }
  }
};

struct IotaOp {
  uint32_t* idx;
  __device__ void operator()(size_t i) const { idx[i] = static_cast<uint32_t>(i); }
};

struct GatherOp {
  float* vals;
  const float* x;
  const uint32_t* idx;
  __device__ void operator()(size_t j) const { vals[j] = x[idx[j]]; }
};

struct ScatterAddOp {
  float* out;
  const uint32_t* idx;
  const float* vals;
  __device__ void operator()(size_t j) const { out[idx[j]] = out[idx[j]] + vals[j]; }
};

struct ZeroAtOp {
  float* x;
  const uint32_t* idx;
  __device__ void operator()(size_t j) const { x[idx[j]] = 0.0f; }
};

struct AddIntoOp {
  float* acc;
  const float* x;
  __device__ void operator()(size_t i) const { acc[i] = acc[i] + x[i]; }
};

}  // namespace

size_t topk_select(const float* x, size_t n, size_t k, uint32_t* idx, Scratch& scratch, cudaStream_t stream) {
  k = std::min(k, n);
  if (k == 0) return 0;
  GS_EXPECT_GPU(n < (size_t{1} << 32), "topk_select: n < 2^32");
  if (k == n) {
    launch_map(n, IotaOp{idx}, stream, "topk_select iota");
    return n;
  }
  size_t scan_bytes = 0;
  const size_t comp = compaction_scratch_bytes(n, &scan_bytes);
  auto* base = static_cast<uint8_t*>(scratch.get(kSelectHead + comp));
  auto* st = reinterpret_cast<SelectState*>(base);
  auto* hist = reinterpret_cast<uint32_t*>(base + 256);
  radix_select(x, n, k, st, hist, stream);
  compact(TopkClass{x, st}, n, idx, nullptr, base + kSelectHead, scan_bytes, stream);
  return k;
}

void threshold_select(const float* x, size_t n, float tau, uint32_t* idx, uint32_t* count, Scratch& scratch,
                      cudaStream_t stream) {
  if (n == 0) {
    GS_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(uint32_t), stream));
    return;
  }
  GS_EXPECT_GPU(n < (size_t{1} << 32), "threshold_select: n < 2^32");
  size_t scan_bytes = 0;
  const size_t comp = compaction_scratch_bytes(n, &scan_bytes);
  auto* base = static_cast<uint8_t*>(scratch.get(comp));
  compact(ThresholdClass{x, tau}, n, idx, count, base, scan_bytes, stream);
}

void sampled_threshold(float* tau, const float* x, size_t n, double ratio, uint64_t seed, uint64_t stream_id,
                       size_t samples, Scratch& scratch, cudaStream_t stream) {
  if (n == 0 || !(ratio > 0.0)) {
    store_value_kernel<<<1, 1, 0, stream>>>(tau, std::numeric_limits<float>::infinity());
    check_launch("sampled_threshold");
    return;
  }
  const size_t m = std::clamp<size_t>(samples, 1, n);
  const double want = std::ceil(std::min(ratio, 1.0) * static_cast<double>(m));
  const size_t kk = std::clamp<size_t>(static_cast<size_t>(want), 1, m);
  auto* base = static_cast<uint8_t*>(scratch.get(kSelectHead + align_up(m * sizeof(float))));
  auto* st = reinterpret_cast<SelectState*>(base);
  auto* hist = reinterpret_cast<uint32_t*>(base + 256);
  const float* keys = x;
  if (m != n) {
    auto* sample = reinterpret_cast<float*>(base + kSelectHead);
    launch_map(m, SampleOp{sample, x, n, m, seed, stream_id}, stream, "sampled_threshold samples");
    keys = sample;
  }
  radix_select(keys, m, kk, st, hist, stream);
  key_to_float_kernel<<<1, 1, 0, stream>>>(tau, st);
  check_launch("sampled_threshold");
}

size_t randomk_indices(uint32_t* idx, size_t n, size_t k, uint64_t seed, uint64_t stream_id, Scratch& scratch,
                       cudaStream_t stream) {
  k = std::min(k, n);
  if (k == 0) return 0;
  if (k == n) {
    launch_map(n, IotaOp{idx}, stream, "randomk_indices iota");
    return n;
  }
  GS_EXPECT_GPU(n <= (size_t{1} << 32), "randomk_indices: n <= 2^32");
  const size_t words = (n + 63) / 64;
  int key_bits = 1;  // picks < n <= 2^key_bits (n >= 2 here)
  while ((uint64_t{1} << key_bits) < n) ++key_bits;
  size_t scan_bytes = 0, sort_bytes = 0;
  uint32_t* dummy = nullptr;
  GS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, dummy, dummy, static_cast<int64_t>(words)));
  GS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, dummy, dummy, dummy, dummy,
                                                static_cast<int64_t>(k), 0, key_bits));
  const size_t bitmap_bytes = align_up(words * sizeof(uint64_t)), counts_bytes = align_up(words * sizeof(uint32_t));
  const size_t step_bytes = align_up(k * sizeof(uint32_t)), dup_bytes = align_up(k);
  const size_t tmp_bytes = align_up(std::max(scan_bytes, sort_bytes));
  auto* base =
      static_cast<uint8_t*>(scratch.get(bitmap_bytes + 2 * counts_bytes + 4 * step_bytes + dup_bytes + tmp_bytes));
  auto* bitmap = reinterpret_cast<uint64_t*>(base);
  auto* counts = reinterpret_cast<uint32_t*>(base + bitmap_bytes);
  auto* prefix = reinterpret_cast<uint32_t*>(base + bitmap_bytes + counts_bytes);
  uint8_t* at = base + bitmap_bytes + 2 * counts_bytes;
  auto* picks = reinterpret_cast<uint32_t*>(at);
  auto* steps = reinterpret_cast<uint32_t*>(at + step_bytes);
  auto* sorted_picks = reinterpret_cast<uint32_t*>(at + 2 * step_bytes);
  auto* sorted_steps = reinterpret_cast<uint32_t*>(at + 3 * step_bytes);
  uint8_t* dup = at + 4 * step_bytes;
  void* tmp = at + 4 * step_bytes + dup_bytes;  // the sort's, then the scan's temporaries
  GS_CUDA_CHECK(cudaMemsetAsync(bitmap, 0, words * sizeof(uint64_t), stream));
  launch_map(k, RandomkPickOp{picks, steps, n, k, seed, stream_id}, stream, "randomk_indices picks");
  GS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(tmp, sort_bytes, picks, sorted_picks, steps, sorted_steps,
                                                static_cast<int64_t>(k), 0, key_bits, stream));
  launch_map(k, RandomkDupOp{sorted_picks, sorted_steps, dup}, stream, "randomk_indices duplicates");
  launch_map(k, RandomkSetOp{bitmap, picks, dup, n - k}, stream, "randomk_indices set");
  launch_map(words, PopcountOp{bitmap, counts}, stream, "randomk_indices popcount");
  GS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(tmp, scan_bytes, counts, prefix, static_cast<int64_t>(words), stream));
  launch_map(words, BitmapReadOp{bitmap, prefix, idx}, stream, "randomk_indices read-out");
  return k;
}

void gather(float* vals, const float* x, const uint32_t* idx, size_t k, cudaStream_t stream) {
  launch_map(k, GatherOp{vals, x, idx}, stream, "gather");
}
void scatter_add(float* out, const uint32_t* idx, const float* vals, size_t k, cudaStream_t stream) {
  launch_map(k, ScatterAddOp{out, idx, vals}, stream, "scatter_add");
}
void zero_at(float* x, const uint32_t* idx, size_t k, cudaStream_t stream) {
  launch_map(k, ZeroAtOp{x, idx}, stream, "zero_at");
}
void add_into(float* acc, const float* x, size_t n, cudaStream_t stream) {
  launch_map(n, AddIntoOp{acc, x}, stream, "add_into");
}

// ---- QSGD, TernGrad, sign, 1-bit ----------------------------------------------------------------------------------

namespace {

// The order of compress_math.h's kQsgdNormChunk / kQsgdNormPartials comment (gs::qsgd_sum_squares): per chunk of
// kQsgdNormChunk values, 16 float lanes (lane l sums the squares of elements l, l+16, ... in order), the lanes added
// in double in lane order (norm_chunks_kernel: 16 threads per chunk, 16 chunks per block); then norm_final_kernel.
// Same operations in the same order as the host, so the same bits.
__global__ void norm_chunks_kernel(const float* p, size_t chunks, double* chunk_sums) {
  __shared__ float lanes[kThreads];
  const size_t chunk = blockIdx.x * static_cast<size_t>(kThreads / 16) + threadIdx.x / 16;
  const int lane = threadIdx.x % 16;
  float acc = 0.0f;
  if (chunk < chunks) {
    const float* pc = p + chunk * kQsgdNormChunk;
    for (size_t j = 0; j < kQsgdNormChunk; j += 16) {
      const float v = pc[j + lane];
      acc = __fadd_rn(acc, __fmul_rn(v, v));
    }
  }
  lanes[threadIdx.x] = acc;
  __syncthreads();
  if (lane == 0 && chunk < chunks) {
    double s = 0.0;
    for (int l = 0; l < 16; ++l) s += static_cast<double>(lanes[threadIdx.x + l]);
    chunk_sums[chunk] = s;
  }
}

// One block of kQsgdNormPartials threads: thread q adds chunk sums q, q + P, q + 2P, ... in order from 0.0 (loads
// coalesced across the block), the block stages the tail (< kQsgdNormChunk values) in shared memory, then thread 0
// adds the P partials in order and the tail's double squares in order, and stores float(sqrt(total)).
static_assert(kQsgdNormPartials <= 1024 && kQsgdNormChunk % 16 == 0, "norm_final_kernel: one block, 16 lanes");
__global__ void norm_final_kernel(const double* chunk_sums, size_t chunks, const float* p, size_t n, uint8_t* out) {
  __shared__ double partial[kQsgdNormPartials];
  __shared__ float tail[kQsgdNormChunk];
  double acc = 0.0;
  for (size_t c = threadIdx.x; c < chunks; c += kQsgdNormPartials) acc += chunk_sums[c];
  partial[threadIdx.x] = acc;
  const size_t first = chunks * kQsgdNormChunk, m = n - first;  // m < kQsgdNormChunk
  for (size_t i = threadIdx.x; i < m; i += kQsgdNormPartials) tail[i] = p[first + i];
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0.0;
  for (size_t q = 0; q < kQsgdNormPartials; ++q) total += partial[q];
  for (size_t i = 0; i < m; ++i) total += static_cast<double>(tail[i]) * tail[i];
  store_float(out, static_cast<float>(sqrt(total)));
}

__global__ void store_norm_kernel(uint8_t* out, float norm) { store_float(out, norm); }

// Thread per 32-bit word of the code stream (bits [32 w, 32 w + 32) after the 4-byte norm).
struct QsgdEncodeOp {
  uint8_t* out;
  const float* p;
  uint64_t n;
  int s;
  int width;
  uint64_t code_bytes;
  uint64_t seed, stream_id;
  __device__ void operator()(size_t w) const {
    const float norm = load_float(out);
    const bool usable = norm > 0.0f && isfinite(norm);
    const float scale = usable ? static_cast<float>(static_cast<double>(s) / norm) : 0.0f;
    const uint64_t bit0 = 32 * static_cast<uint64_t>(w);
    const uint64_t i0 = bit0 / width;
    uint64_t i1 = (bit0 + 31) / width;
    if (i1 >= n) i1 = n - 1;
    uint64_t acc = 0;
    uint32_t block = 0xffffffffu;
    Draw4 d{};
    for (uint64_t i = i0; i <= i1; ++i) {
      if (static_cast<uint32_t>(i / 4) != block) {
        block = static_cast<uint32_t>(i / 4);
        d = compress_draw(seed, stream_id, CompressDraw::kQsgd, block);
      }
      const float v = p[i];
      const uint64_t code =
          qsgd_code(v, qsgd_level(fabsf(v), scale, uniform_open01(d.v[i % 4]), static_cast<uint32_t>(s)));
      const uint64_t at = i * width;
      acc |= at >= bit0 ? code << (at - bit0) : code >> (bit0 - at);
    }
    uint8_t* dst = out + 4 + 4 * static_cast<uint64_t>(w);
    for (int b = 0; b < 4; ++b) {
      if (4 * static_cast<uint64_t>(w) + b < code_bytes) dst[b] = static_cast<uint8_t>(acc >> (8 * b));
    }
  }
};

struct QsgdDecodeOp {
  float* out;
  const uint8_t* in;
  int s;
  int width;
  uint64_t code_bytes;
  __device__ void operator()(size_t i) const {
    const float unit = load_float(in) / static_cast<float>(s);
    const uint8_t* codes = in + 4;
    const uint64_t at = static_cast<uint64_t>(i) * width;
    uint64_t bits = 0;
    for (uint64_t b = at / 8, sh = 0; b <= (at + width - 1) / 8 && b < code_bytes; ++b, sh += 8) {
      bits |= static_cast<uint64_t>(codes[b]) << sh;
    }
    const uint32_t code = static_cast<uint32_t>((bits >> (at % 8)) & ((uint64_t{1} << width) - 1));
    out[i] = out[i] + qsgd_decode(code, unit);
  }
};

struct MaxU32 {
  __device__ uint32_t operator()(uint32_t a, uint32_t b) const { return a > b ? a : b; }
};

__global__ void max_key_kernel(const float* p, size_t n, uint32_t* max_key) {
  using Reduce = cub::BlockReduce<uint32_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  uint32_t m = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t key = magnitude_key(p[i]);
    m = key > m ? key : m;
  }
  const uint32_t block_max = Reduce(tmp).Reduce(m, MaxU32());
  if (threadIdx.x == 0) atomicMax(max_key, block_max);
}

__global__ void store_key_kernel(uint8_t* out, const uint32_t* key) { store_float(out, float_from_key(*key)); }

// Thread per code byte: elements 4b .. 4b+3, whose draws are words 0..3 of block b.
struct TernEncodeOp {
  uint8_t* out;
  const float* p;
  uint64_t n, seed, stream_id;
  __device__ void operator()(size_t b) const {
    const float scale = load_float(out);
    uint32_t byte = 0;
    if (scale > 0.0f) {
      const float inv_scale = 1.0f / scale;
      const Draw4 d = compress_draw(seed, stream_id, CompressDraw::kTernGrad, static_cast<uint32_t>(b));
      for (int j = 0; j < 4; ++j) {
        const uint64_t i = 4 * static_cast<uint64_t>(b) + j;
        if (i < n) byte |= terngrad_code(p[i], scale, inv_scale, uniform_open01(d.v[j])) << (2 * j);
      }
    }
    out[4 + b] = static_cast<uint8_t>(byte);
  }
};

struct TernDecodeOp {
  float* out;
  const uint8_t* in;
  __device__ void operator()(size_t i) const {
    const float scale = load_float(in);
    out[i] = out[i] + terngrad_decode((in[4 + i / 4] >> (2 * (i % 4))) & 3u, scale);
  }
};

// Thread per plane byte: bit j of byte b of the sign plane = negative_bit(p[8 b + j]), of the zero plane
// zero_bit(p[8 b + j]); unused high bits 0.
struct SignPackOp {
  uint8_t* bits;
  uint8_t* zeros;
  const float* p;
  uint64_t n;
  __device__ void operator()(size_t b) const {
    uint32_t byte = 0, zbyte = 0;
    for (int j = 0; j < 8; ++j) {
      const uint64_t i = 8 * static_cast<uint64_t>(b) + j;
      if (i < n) {
        byte |= negative_bit(p[i]) << j;
        zbyte |= zero_bit(p[i]) << j;
      }
    }
    bits[b] = static_cast<uint8_t>(byte);
    zeros[b] = static_cast<uint8_t>(zbyte);
  }
};

// Per element: |p|, the negative value (or 0), negative count, zero count.
struct SignTerms {
  const float* p;
  __device__ Sums<4> operator()(size_t i) const {
    const float v = p[i];
    const bool neg = v < 0.0f;
    return Sums<4>{{static_cast<double>(fabsf(v)), neg ? static_cast<double>(v) : 0.0, neg ? 1.0 : 0.0,
                    zero_bit(v) ? 1.0 : 0.0}};
  }
};

__device__ inline void store_u32_device(uint8_t* p, uint32_t v) { memcpy(p, &v, sizeof v); }
__device__ inline uint32_t load_u32_device(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

__global__ void sign_header_kernel(uint8_t* out, const Sums<4>* s, uint64_t n) {
  store_float(out, n ? static_cast<float>(s->v[0] / static_cast<double>(n)) : 0.0f);
  store_u32_device(out + 4, static_cast<uint32_t>(s->v[3]));
}

__global__ void onebit_header_kernel(uint8_t* out, const Sums<4>* s, uint64_t n) {
  const uint64_t negative_count = static_cast<uint64_t>(s->v[2]);
  const uint64_t zero_count = static_cast<uint64_t>(s->v[3]);
  const uint64_t positive_count = n - negative_count - zero_count;
  const double positive_sum = s->v[0] + s->v[1];
  float mean_positive = positive_count ? static_cast<float>(positive_sum / static_cast<double>(positive_count)) : 0.0f;
  float mean_negative = negative_count ? static_cast<float>(s->v[1] / static_cast<double>(negative_count)) : 0.0f;
  if (!isfinite(s->v[0])) mean_positive = mean_negative = __int_as_float(0x7fffffff);
  store_float(out, mean_positive);
  store_float(out + 4, mean_negative);
  store_u32_device(out + 8, static_cast<uint32_t>(zero_count));
}

// out[i] += decoded value i of a sign (onebit false) or 1-bit (onebit true) message.
struct SignDecodeOp {
  float* out;
  const uint8_t* in;
  uint64_t plane;  // bytes of one plane
  bool onebit;
  __device__ void operator()(size_t i) const {
    const size_t header = onebit ? kOnebitHeaderBytes : kSignHeaderBytes;
    const uint32_t zero_count = load_u32_device(in + header - 4);
    const uint32_t neg = (in[header + i / 8] >> (i % 8)) & 1u;
    const uint32_t zero = zero_count ? (in[header + plane + i / 8] >> (i % 8)) & 1u : 0u;
    const float v = onebit ? onebit_decode(neg, zero, load_float(in), load_float(in + 4))
                           : sign_decode(neg, zero, load_float(in));
    out[i] = out[i] + v;
  }
};

struct VoteOp {
  float* out;
  const uint8_t* const* msgs;
  int ranks;
  uint64_t plane;
  __device__ void operator()(size_t i) const {
    int negatives = 0, zeros = 0;
    for (int r = 0; r < ranks; ++r) {
      const uint8_t* m = msgs[r];
      negatives += (m[kSignHeaderBytes + i / 8] >> (i % 8)) & 1u;
      if (load_u32_device(m + 4) != 0) zeros += (m[kSignHeaderBytes + plane + i / 8] >> (i % 8)) & 1u;
    }
    out[i] = sign_vote_value(negatives, zeros, ranks);
  }
};

int qsgd_width(int s) { return qsgd_level_bits(s) + 1; }

}  // namespace

void qsgd_encode_with_norm(uint8_t* out, const float* p, size_t n, int s, float norm, uint64_t seed,
                           uint64_t stream_id, cudaStream_t stream) {
  GS_EXPECT_GPU(s >= 1, "qsgd: s >= 1");
  store_norm_kernel<<<1, 1, 0, stream>>>(out, norm);
  check_launch("qsgd_encode norm");
  const int width = qsgd_width(s);
  const uint64_t code_bytes = (static_cast<uint64_t>(n) * width + 7) / 8;
  const uint64_t words = (static_cast<uint64_t>(n) * width + 31) / 32;
  launch_map(words, QsgdEncodeOp{out, p, n, s, width, code_bytes, seed, stream_id}, stream, "qsgd_encode");
}

void qsgd_encode(uint8_t* out, const float* p, size_t n, int s, uint64_t seed, uint64_t stream_id, Scratch& scratch,
                 cudaStream_t stream) {
  GS_EXPECT_GPU(s >= 1, "qsgd: s >= 1");
  const size_t chunks = n / kQsgdNormChunk;
  auto* chunk_sums = static_cast<double*>(scratch.get(std::max<size_t>(chunks, 1) * sizeof(double)));
  if (chunks) {
    norm_chunks_kernel<<<static_cast<unsigned>((chunks + 15) / 16), kThreads, 0, stream>>>(p, chunks, chunk_sums);
    check_launch("qsgd_encode norm chunks");
  }
  norm_final_kernel<<<1, kQsgdNormPartials, 0, stream>>>(chunk_sums, chunks, p, n, out);
  check_launch("qsgd_encode norm");
  const int width = qsgd_width(s);
  const uint64_t code_bytes = (static_cast<uint64_t>(n) * width + 7) / 8;
  const uint64_t words = (static_cast<uint64_t>(n) * width + 31) / 32;
  launch_map(words, QsgdEncodeOp{out, p, n, s, width, code_bytes, seed, stream_id}, stream, "qsgd_encode");
}

void qsgd_decode_add(float* out, const uint8_t* in, size_t n, int s, cudaStream_t stream) {
  GS_EXPECT_GPU(s >= 1, "qsgd: s >= 1");
  const int width = qsgd_width(s);
  const uint64_t code_bytes = (static_cast<uint64_t>(n) * width + 7) / 8;
  launch_map(n, QsgdDecodeOp{out, in, s, width, code_bytes}, stream, "qsgd_decode_add");
}

void terngrad_encode(uint8_t* out, const float* p, size_t n, uint64_t seed, uint64_t stream_id, Scratch& scratch,
                     cudaStream_t stream) {
  auto* max_key = static_cast<uint32_t*>(scratch.get(sizeof(uint32_t)));
  GS_CUDA_CHECK(cudaMemsetAsync(max_key, 0, sizeof(uint32_t), stream));
  if (n) {
    max_key_kernel<<<std::min(blocks_for(n), 1024u), kThreads, 0, stream>>>(p, n, max_key);
    check_launch("terngrad_encode max");
  }
  store_key_kernel<<<1, 1, 0, stream>>>(out, max_key);
  check_launch("terngrad_encode scale");
  launch_map((n + 3) / 4, TernEncodeOp{out, p, n, seed, stream_id}, stream, "terngrad_encode");
}

void terngrad_decode_add(float* out, const uint8_t* in, size_t n, cudaStream_t stream) {
  launch_map(n, TernDecodeOp{out, in}, stream, "terngrad_decode_add");
}

void sign_encode(uint8_t* out, const float* p, size_t n, Scratch& scratch, cudaStream_t stream) {
  const uint64_t plane = (n + 7) / 8;
  launch_map(plane, SignPackOp{out + kSignHeaderBytes, out + kSignHeaderBytes + plane, p, n}, stream,
             "sign_encode planes");
  auto* partial = static_cast<Sums<4>*>(scratch.get((kReduceBlocks + 1) * sizeof(Sums<4>)));
  launch_sums<4>(n, SignTerms{p}, partial, partial + kReduceBlocks, stream, "sign_encode sums");
  sign_header_kernel<<<1, 1, 0, stream>>>(out, partial + kReduceBlocks, n);
  check_launch("sign_encode header");
}

void sign_decode_add(float* out, const uint8_t* in, size_t n, cudaStream_t stream) {
  launch_map(n, SignDecodeOp{out, in, (n + 7) / 8, false}, stream, "sign_decode_add");
}

void sign_vote(float* out, const uint8_t* const* msgs, int ranks, size_t n, cudaStream_t stream) {
  launch_map(n, VoteOp{out, msgs, ranks, (n + 7) / 8}, stream, "sign_vote");
}

void onebit_encode(uint8_t* out, const float* p, size_t n, Scratch& scratch, cudaStream_t stream) {
  const uint64_t plane = (n + 7) / 8;
  launch_map(plane, SignPackOp{out + kOnebitHeaderBytes, out + kOnebitHeaderBytes + plane, p, n}, stream,
             "onebit_encode planes");
  auto* partial = static_cast<Sums<4>*>(scratch.get((kReduceBlocks + 1) * sizeof(Sums<4>)));
  launch_sums<4>(n, SignTerms{p}, partial, partial + kReduceBlocks, stream, "onebit_encode sums");
  onebit_header_kernel<<<1, 1, 0, stream>>>(out, partial + kReduceBlocks, n);
  check_launch("onebit_encode header");
}

void onebit_decode_add(float* out, const uint8_t* in, size_t n, cudaStream_t stream) {
  launch_map(n, SignDecodeOp{out, in, (n + 7) / 8, true}, stream, "onebit_decode_add");
}

// ---- PowerSGD orthogonalization -------------------------------------------------------------------------------

namespace {

// One thread walks the columns in torch_gram_schmidt's orders (sequential float chains, as PyTorch's CPU kernels
// run them), so the result is the host's bit for bit.
__global__ void orthogonalize_kernel(float* m, size_t rows, size_t cols, float eps, float* scratch) {
  torch_gram_schmidt(m, rows, cols, eps, scratch);
}

}  // namespace

void orthogonalize_columns(float* m, size_t rows, size_t cols, float eps, Scratch& scratch, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  auto* products = static_cast<float*>(scratch.get(rows * sizeof(float)));
  orthogonalize_kernel<<<1, 1, 0, stream>>>(m, rows, cols, eps, products);
  check_launch("orthogonalize_columns");
}

// ---- Local communicator reductions --------------------------------------------------------------------------------

namespace {

template <class T>
struct RankOrderSumOp {
  T* const* outs;
  const T* const* ins;
  int ranks;
  __device__ void operator()(size_t i) const {
    T acc = ins[0][i];
    if (ranks > 1) acc = acc + ins[1][i];
    for (int r = 2; r < ranks; ++r) acc = acc + ins[r][i];
    for (int r = 0; r < ranks; ++r) outs[r][i] = acc;
  }
};

struct ReduceScatterOp {
  float* const* outs;
  const float* const* ins;
  int ranks;
  uint64_t count;
  __device__ void operator()(size_t t) const {
    const uint64_t r = t / count, i = t % count;
    const uint64_t off = r * count + i;
    float acc = ins[0][off];
    if (ranks > 1) acc = acc + ins[1][off];
    for (int q = 2; q < ranks; ++q) acc = acc + ins[q][off];
    outs[r][i] = acc;
  }
};

}  // namespace

void sum_in_rank_order(float* const* outs, const float* const* ins, int ranks, size_t count, cudaStream_t stream) {
  launch_map(count, RankOrderSumOp<float>{outs, ins, ranks}, stream, "sum_in_rank_order(float)");
}

void sum_in_rank_order(double* const* outs, const double* const* ins, int ranks, size_t count,
                       cudaStream_t stream) {
  launch_map(count, RankOrderSumOp<double>{outs, ins, ranks}, stream, "sum_in_rank_order(double)");
}

void reduce_scatter_in_rank_order(float* const* outs, const float* const* ins, int ranks, size_t count,
                                  cudaStream_t stream) {
  launch_map(count * static_cast<size_t>(ranks), ReduceScatterOp{outs, ins, ranks, count}, stream,
             "reduce_scatter_in_rank_order");
}

}  // namespace gs::gpu
