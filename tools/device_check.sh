#!/usr/bin/env bash
# The device check (docs/device.md): on the lent GPU machine (CUDA, CMake, ninja, PyTorch; no apt, no internet) build
# gradsweep Release for sm_90 against the carried Debian -dev packages, run the GPU tests, the cuda end-to-end test,
# the backend and NVTX tests, a short scenario on host/auto and on cuda and the GPU microbenchmarks, and leave at most
# 5 files under $OUT: summary.txt, machine.txt, report.json, report_cuda.json and logs.tar.gz. A new step is one
# `step NAME TIMEOUT_S command...` line below.
#
#   tools/device_check.sh --fetch-debs   here (Debian, apt): download the .deb files into device_debs/ (gitignored;
#                                        ~20 MiB, carried to the device with carry ["device_debs"])
#   tools/device_check.sh                on the device machine: the check (OUT defaults to ./device_out)
#   tools/device_check.sh --rehearse     here, without a GPU: every step of the check from the same .deb files, with
#                                        OUT a scratch folder unless set; the GPU tests must be skipped (exit 77)
#
# Exit status 0 when no step failed. The whole check has one deadline (280 s on the device, so a run fits under 5
# minutes with the machine's start and a second try fits the 15-minute device budget); each step gets its own limit or
# what is left of the deadline, whichever is less, and a step with under 5 s left is not started (it fails as
# "no time left"). The archive is always written, also when a step fails or the deadline is reached.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
debs="$root/device_debs"
# The build's Debian packages (tools/setup.sh) and the runtime libraries they need that a CUDA image may lack.
packages=(libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev zlib1g-dev librandom123-dev libgtest-dev libgmock-dev
          libbenchmark-dev libbenchmark1debian libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread
          libgfortran5 libquadmath0 zlib1g libre2-dev libre2-9 libssl-dev libssl3)

mode=device
case "${1:-}" in
  --fetch-debs)
    mkdir -p "$debs" && cd "$debs" || exit 1
    rm -f ./*.deb
    apt-get download "${packages[@]}" || exit 1
    du -sh "$debs"
    exit 0
    ;;
  --rehearse) mode=rehearse ;;
  "") ;;
  *) echo "usage: tools/device_check.sh [--fetch-debs | --rehearse]" >&2; exit 2 ;;
esac

# The build's time limit: on the device (16 cores) the whole check must fit in 5 minutes; a rehearsal on 2 shared
# cores builds from nothing in about 15 minutes.
if [[ $mode == rehearse ]]; then
  out=${OUT:-$(mktemp -d /tmp/gradsweep_device_out.XXXXXX)}
  build_limit_s=3600
  deadline_s=${GRADSWEEP_DEVICE_DEADLINE_S:-4200}
else
  out=${OUT:-$root/device_out}
  build_limit_s=200
  deadline_s=${GRADSWEEP_DEVICE_DEADLINE_S:-280}
fi
jobs=$(nproc)
mkdir -p "$out"
work=${GRADSWEEP_DEVICE_WORK:-/tmp/gradsweep_device}
build=${GRADSWEEP_BUILD_DIR:-$work/build}
prefix=$work/deps
logs=$work/logs
rm -rf "$logs" "$work/runs"
mkdir -p "$logs" "$work/runs"
summary="$out/summary.txt"
: > "$summary"
passed=0
failed=0
t_start=$(date +%s)

say() { echo "$*" | tee -a "$summary"; }
pack() {
  tar -czf "$out/logs.tar.gz" -C "$work" logs 2>/dev/null
  say "device_check ($mode): $((passed)) passed, $((failed)) failed in $(($(date +%s) - t_start)) s"
}
trap pack EXIT

# step NAME TIMEOUT_S COMMAND...: runs COMMAND (a program or a function of this script) with a time limit, its output
# in logs/NAME.log; one summary line. The command runs in its own process group, which a watchdog ends at the limit.
step() {
  local name=$1 limit=$2
  shift 2
  local t0 rc pid watchdog left
  t0=$(date +%s)
  left=$((t_start + deadline_s - t0))
  if [[ $left -lt 5 ]]; then
    failed=$((failed + 1))
    say "FAIL  $name (no time left: the check's ${deadline_s} s deadline is reached)"
    return 124
  fi
  [[ $left -lt $limit ]] && limit=$left
  set -m
  ("$@") > "$logs/$name.log" 2>&1 &
  pid=$!
  (sleep "$limit"; kill -TERM -- "-$pid" 2>/dev/null; sleep 5; kill -KILL -- "-$pid" 2>/dev/null) > /dev/null 2>&1 &
  watchdog=$!
  set +m
  wait "$pid"
  rc=$?
  kill -- "-$watchdog" 2>/dev/null
  wait "$watchdog" 2>/dev/null
  local took=$(($(date +%s) - t0))
  if [[ $rc -eq 0 ]]; then
    passed=$((passed + 1))
    say "ok    $name ($took s)"
  else
    failed=$((failed + 1))
    say "FAIL  $name (exit $rc$([[ $took -ge $limit ]] && echo ", stopped at its ${limit} s limit"); $took s; last lines:)"
    tail -15 "$logs/$name.log" | sed 's/^/      /' | tee -a "$summary"
  fi
  return $rc
}

# ---- the machine ----------------------------------------------------------------------------------------------------
{
  echo "date: $(date -u +%FT%TZ)"
  echo "mode: $mode"
  echo "commit: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1
  else
    echo "nvidia-smi: not available"
  fi
  nvcc --version 2>&1 | tail -1
  echo "g++: $(g++ --version 2>&1 | head -1)"
  echo "cmake: $(cmake --version 2>&1 | head -1); ninja: $(ninja --version 2>&1)"
  echo "cores: $(nproc)"
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt" | tee -a "$summary"

# ---- the dependencies: the carried .deb files unpacked into a prefix (dpkg -x: no root, no apt, nothing installed) --
unpack() {
  ls "$debs"/*.deb > /dev/null 2>&1 || { echo "no .deb files in $debs: run tools/device_check.sh --fetch-debs here first and carry device_debs"; return 1; }
  rm -rf "$prefix"
  mkdir -p "$prefix"
  for f in "$debs"/*.deb; do dpkg -x "$f" "$prefix" || return 1; done
  # Debian's development links are absolute (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13): point them into the
  # prefix where the carried package has the target, so the link step never depends on the image's copy.
  local l t
  while IFS= read -r l; do
    t=$(readlink "$l")
    if [[ $t == /* && -e "$prefix$t" ]]; then ln -sfn "$prefix$t" "$l"; fi
  done < <(find "$prefix" -type l)
  # pkg-config files name absolute /usr paths (re2.pc: includedir=/usr/include): point them into the prefix, so
  # pkg-config (CMake searches the prefix's pkgconfig folders first through CMAKE_PREFIX_PATH) hands out the carried
  # RE2 and OpenSSL. Without pkg-config on the image, CMake finds RE2 by name under the prefix instead.
  find "$prefix" -name '*.pc' -exec sed -i -E "s#^([A-Za-z_]+)=/usr#\1=$prefix/usr#" {} +
  ls "$prefix/usr/lib/x86_64-linux-gnu/cmake"
}
step unpack_debs 60 unpack || exit 1
libdir=$prefix/usr/lib/x86_64-linux-gnu
# Our binaries find fmt, OpenBLAS, zlib and benchmark in the prefix through their build-tree RUNPATH; OpenBLAS's own
# Fortran runtime (not a direct dependency) through LD_LIBRARY_PATH, which holds only those two libraries so the
# image's own programs (python3, cmake) keep their libraries.
runtime_libs=$work/runtime_libs
rm -rf "$runtime_libs" && mkdir -p "$runtime_libs"
ln -s "$libdir/libgfortran.so.5" "$libdir/libquadmath.so.0" "$runtime_libs/"
export LD_LIBRARY_PATH="$runtime_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# NCCL: the toolkit's, else the one PyTorch ships (nvidia-nccl wheel: include/nccl.h, lib/libnccl.so.2).
nccl_args=()
if ! ls /usr/local/cuda/include/nccl.h > /dev/null 2>&1; then
  nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) or list(nvidia.nccl.__path__)[0])' 2>/dev/null ||
             python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
  if [[ -n "${nccl_dir:-}" && -f "$nccl_dir/include/nccl.h" ]]; then
    nccl_args=(-DNCCL_INCLUDE_DIR="$nccl_dir/include" -DNCCL_LIBRARY="$(ls "$nccl_dir"/lib/libnccl.so* | head -1)")
    export LD_LIBRARY_PATH="$nccl_dir/lib:$LD_LIBRARY_PATH"
  fi
fi

# ---- configure and build: Release, sm_90, everything found in the prefix first --------------------------------------
configure() {
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRADSWEEP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_LIBRARY_PATH="$libdir/openblas-pthread" \
    -DCBLAS_INCLUDE_DIR="$prefix/usr/include/x86_64-linux-gnu/openblas-pthread" "${nccl_args[@]}" || return 1
  # Proof that the build uses the carried packages, not ones that happen to be installed: every dependency's
  # location in the cache lies under the prefix.
  local bad=0 v
  # RE2 comes through pkg-config (pkgcfg_lib_RE2_re2) or, without pkg-config on the image, by name (RE2_LIBRARY).
  local re2_var=RE2_LIBRARY
  grep -qE "^pkgcfg_lib_RE2_re2(:[A-Z]+)?=/" "$build/CMakeCache.txt" && re2_var=pkgcfg_lib_RE2_re2
  for v in fmt_DIR nlohmann_json_DIR CLI11_DIR GTest_DIR benchmark_DIR RANDOM123_INCLUDE_DIR CBLAS_INCLUDE_DIR \
           ZLIB_INCLUDE_DIR BLAS_openblas_LIBRARY $re2_var OPENSSL_INCLUDE_DIR OPENSSL_CRYPTO_LIBRARY \
           OPENSSL_CONFIGURATION_INCLUDE_DIR; do
    local val
    val=$(grep -E "^$v(:[A-Z]+)?=" "$build/CMakeCache.txt" | head -1 | cut -d= -f2-)
    echo "$v = $val"
    [[ "$val" == "$prefix"* ]] || { echo "  not from the carried packages"; bad=1; }
  done
  grep -E "^(NCCL_LIBRARY|CMAKE_CUDA_ARCHITECTURES|CMAKE_BUILD_TYPE)" "$build/CMakeCache.txt"
  return $bad
}
step configure 120 configure || exit 1
# The binary, the CPU test binary (Backend and NvtxRanges tests) and every executable a `gpu`-labelled test runs (read
# from CTestTestfile.cmake: before the build, ctest cannot name commands whose executables do not exist yet).
mapfile -t gpu_test_targets < <(python3 - "$build/CTestTestfile.cmake" <<'PY'
import os, re, sys
text = open(sys.argv[1]).read()
exe = dict(re.findall(r'add_test\(\[=\[(.+?)\]=\] "([^"]+)"', text))
gpu = re.findall(r'set_tests_properties\(\[=\[(.+?)\]=\] PROPERTIES .*?LABELS "gpu"', text)
print("\n".join(sorted({os.path.basename(exe[t]) for t in gpu if t in exe})))
PY
)
mapfile -t gpu_benches < <(ninja -C "$build" -t targets all 2>/dev/null | grep -oE '^bench_gpu[a-z0-9_]*' | sort -u)
targets=(gradsweep gradsweep_tests)
for t in "${gpu_test_targets[@]}" "${gpu_benches[@]}"; do [[ -n "$t" ]] && targets+=("$t"); done
say "      targets: ${targets[*]}"
build_and_check() {
  ninja -C "$build" -j "$jobs" "${targets[@]}" || return 1
  # The libraries the binary loads: all found, and fmt, OpenBLAS and its Fortran runtime, RE2 and libcrypto the
  # carried ones (zlib may be the image's own libz.so.1: zlib keeps its ABI).
  local bad=0 lib
  ldd "$build/gradsweep" | tee "$logs/ldd_gradsweep.txt"
  if grep -q "not found" "$logs/ldd_gradsweep.txt"; then echo "a library is missing"; bad=1; fi
  for lib in libfmt libopenblas libgfortran libre2 libcrypto; do
    grep "$lib" "$logs/ldd_gradsweep.txt" | grep -q -e "$prefix" -e "$runtime_libs" || { echo "$lib: not from the carried packages"; bad=1; }
  done
  return $bad
}
step build "$build_limit_s" build_and_check || exit 1

# ---- tests ------------------------------------------------------------------------------------------------------------
# GPU tests: on the device they must pass; in the rehearsal (no GPU) every one must be skipped (exit 77), not fail.
gpu_tests() {
  local text rc total skipped
  text=$(cd "$build" && ctest -L gpu -E '^gpu[.]e2e$' --output-on-failure --timeout 120 2>&1)
  rc=$?
  echo "$text"
  [[ $rc -eq 0 ]] || return 1
  total=$(grep -cE "Test +#[0-9]+:" <<< "$text")
  skipped=$(grep -cE "Test +#[0-9]+:.*Skipped" <<< "$text")
  echo "gpu tests: $total, skipped: $skipped"
  if [[ $mode == rehearse ]]; then
    [[ $total -gt 0 && $skipped -eq $total ]] || { echo "expected every GPU test to skip (exit 77) without a GPU"; return 1; }
  else
    [[ $total -gt 0 && $skipped -eq 0 ]] || { echo "a GPU test was skipped on the GPU machine"; return 1; }
  fi
}
step gpu_tests 100 gpu_tests
# The cuda rank loop end to end (quickstart on cuda vs host, 8 ranks on one GPU through local, injected stragglers,
# cluster.hardware detect): must pass on the device, skip (exit 77) in the rehearsal.
gpu_e2e() {
  local text rc
  text=$(cd "$build" && ctest -R '^gpu[.]e2e$' --output-on-failure --timeout 120 2>&1)
  rc=$?
  echo "$text"
  [[ $rc -eq 0 ]] || return 1
  if [[ $mode == rehearse ]]; then
    grep -qE "Test +#[0-9]+: gpu[.]e2e .*Skipped" <<< "$text" || { echo "expected gpu.e2e to skip without a GPU"; return 1; }
  else
    grep -qE "Test +#[0-9]+: gpu[.]e2e .*Passed" <<< "$text" || { echo "gpu.e2e did not pass"; return 1; }
  fi
}
step gpu_e2e 100 gpu_e2e
# Backend selection and NVTX ranges (CPU tests that read the device query; on the device they see a real GPU).
backend_nvtx_tests() { cd "$build" && ctest -R '^(Backend|NvtxRanges)\.' --output-on-failure --timeout 60; }
step backend_nvtx_tests 120 backend_nvtx_tests

# ---- a short scenario -------------------------------------------------------------------------------------------------
scenario() {
  "$build/gradsweep" run "$root/tests/data/tiny_sweep.json" --out "$work/runs/tiny" --quiet || return 1
  cp "$work/runs/tiny/report.json" "$out/report.json"
  python3 - "$out/report.json" "$root/tools" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
import report_lib  # the one report loader (bad files: ReportError naming the file)
r = report_lib.load_report(sys.argv[1], validate=False)
c = r["context"]
print("context.cuda:", json.dumps(c["cuda"]))
print("context.gpus:", json.dumps(c["gpus"]))
for run in r["runs"]:
    fin = run["convergence"]["final"]
    print(run["id"], run["disposition"], "backend", run.get("backend"), "eval_accuracy", fin["eval_accuracy"],
          "wall_s", round(run["wall_s"], 3))
sys.exit(0 if all(x["disposition"] == "passed" for x in r["runs"]) else 1)
PY
}
step scenario 90 scenario
# cluster.backend cuda: runs once the cuda rank loop exists; until then validation refuses it with exit 2 and says
# why (no usable GPU, naming the device query's error, or "not available yet"). The message is recorded either way.
cuda_backend() {
  "$build/gradsweep" validate "$root/tests/data/tiny_sweep.json" --set cluster.backend=cuda
  local rc=$?
  echo "validate with cluster.backend=cuda: exit $rc"
  [[ $rc -eq 0 || $rc -eq 2 ]]
}
step cuda_backend 30 cuda_backend
grep -h "cluster.backend\|exit" "$logs/cuda_backend.log" | head -3 | sed 's/^/      /' | tee -a "$summary"
# The short scenario on cluster.backend cuda with the detected GPU's profile: on the device every run passes on cuda
# (ranks 2 share the one GPU through local) and report_cuda.json comes back; in the rehearsal it is refused (exit 2).
cuda_scenario() {
  "$build/gradsweep" run "$root/tests/data/tiny_sweep.json" --out "$work/runs/tiny_cuda" --quiet \
    --set cluster.backend=cuda --set cluster.hardware=detect
  local rc=$?
  echo "run with cluster.backend=cuda: exit $rc"
  if [[ $mode == rehearse ]]; then
    [[ $rc -eq 2 ]]
    return
  fi
  [[ $rc -eq 0 ]] || return 1
  cp "$work/runs/tiny_cuda/report.json" "$out/report_cuda.json"
  python3 - "$out/report_cuda.json" "$root/tools" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
import report_lib  # the one report loader (bad files: ReportError naming the file)
r = report_lib.load_report(sys.argv[1], validate=False)
ok = True
for run in r["runs"]:
    t = run.get("timing") or {}
    print(run["id"], run["disposition"], "backend", run.get("backend"), "reason", run.get("backend_reason"),
          "hardware", (t.get("modeled") or {}).get("hardware"), "eval_accuracy",
          run["convergence"]["final"]["eval_accuracy"], "model_error", json.dumps(t.get("model_error")))
    ok = ok and run["disposition"] == "passed" and run.get("backend") == "cuda"
sys.exit(0 if ok else 1)
PY
}
step cuda_scenario 60 cuda_scenario

# ---- GPU microbenchmarks (Google Benchmark targets named bench_gpu*; none before the CUDA kernels land) ----------------
if [[ ${#gpu_benches[@]} -eq 0 || -z "${gpu_benches[0]}" ]]; then
  say "skip  gpu_benchmarks (no bench_gpu* targets in this version)"
else
  # bench_gpu: an estimated 10-20 s on an H200 (not measured yet): the setup of 64 Mi values, the memory-bound kernels,
  # then the 3 MLP steps vs cuBLAS alone (about 1-2 s each with their setup); under its 60 s limit.
  for b in "${gpu_benches[@]}"; do
    step "$b" 60 "$build/$b" --benchmark_min_time=0.05s --benchmark_out="$logs/$b.json" --benchmark_out_format=json
    # The ratios against the same run's baselines (of_copy, of_cublas; issue 9's targets >= 0.70) into the summary.
    python3 - "$logs/$b.json" <<'PY' 2>/dev/null | sed 's/^/      /' | tee -a "$summary"
import json, sys
for r in json.load(open(sys.argv[1])).get("benchmarks", []):  # not a report: Google Benchmark's JSON
    ratios = {k: r[k] for k in ("of_copy", "of_cublas") if k in r}
    if ratios:
        print(r["name"], " ".join(f"{k} {v:.3f}" for k, v in ratios.items()))
PY
  done
fi
[[ $failed -eq 0 ]]
