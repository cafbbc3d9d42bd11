#!/usr/bin/env bash
# The device check: on a machine with a GPU (the `device` tool's machine: no apt, no internet), build with CUDA,
# run the GPU tests and the CPU suite, run a short scenario, and leave everything under $OUT (default ./device_out).
# Usage: tools/device_check.sh      (record the figures it prints in docs/device_notes.md with date, GPU and command)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$root/device_out}
mkdir -p "$out"
build=${GRADSWEEP_BUILD_DIR:-$root/build-device}
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "nvidia-smi: not available"
  nvcc --version 2>&1 | tail -1
} | tee "$out/machine.txt"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRADSWEEP_CUDA=ON > "$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; exit 1; }
ninja -C "$build" > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
(cd "$build" && ctest -L gpu --output-on-failure) 2>&1 | tee "$out/ctest_gpu.txt"
(cd "$build" && ctest -L cpu -j "$(nproc)" --output-on-failure) > "$out/ctest_cpu.txt" 2>&1
tail -3 "$out/ctest_cpu.txt"
"$build/gradsweep" run "$root/scenarios/quickstart.json" --out "$out/quickstart" --quiet --set training.steps=100 \
  2>&1 | tee "$out/quickstart.txt"
"$build/bench_allreduce" --benchmark_filter='MiB:64/ranks:4|Memcpy' > "$out/bench_allreduce.txt" 2>&1
tail -3 "$out/bench_allreduce.txt"
