#!/usr/bin/env python3
"""Baseline for bench_gpu's BM_TopK1Percent: torch.topk of |x| for k = 1% of 64 Mi normal fp32 values on the same
GPU, timed with CUDA events (median of 20 after 3 warm-ups). Prints one line: "torch.topk 1% of 64 Mi fp32: M ms".
Needs PyTorch with CUDA (the device machine has it); exits 0 with a SKIP line without one."""
import statistics
import sys

try:
    import torch
except ImportError:
    print("SKIP: no PyTorch")
    sys.exit(0)
if not torch.cuda.is_available():
    print("SKIP: no usable GPU for PyTorch")
    sys.exit(0)

n = 64 << 20
k = n // 100
x = torch.randn(n, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
times = []
for i in range(23):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.topk(x.abs(), k, sorted=False)
    stop.record()
    stop.synchronize()
    if i >= 3:
        times.append(start.elapsed_time(stop))
print(f"torch.topk 1% of 64 Mi fp32: {statistics.median(times):.3f} ms (median of {len(times)}, |x| included)")
