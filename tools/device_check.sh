#!/usr/bin/env bash
# The device check (docs/device.md): on the lent GPU machine (CUDA, CMake, ninja, PyTorch; no apt, no internet) build
# gradsweep Release for sm_90 against the carried Debian -dev packages, run the GPU tests one gtest suite at a time,
# the backend and NVTX tests, short scenarios on host/auto and on cuda, a measurement on cuda and the GPU
# microbenchmarks, and leave at most 7 files under $OUT: summary.txt, machine.txt, log.txt, report.json,
# report_cuda.json, report_measure.json and logs.tar.gz. A new step is one `step NAME TIMEOUT_S command...` line below;
# a new GPU test suite one `suite` line.
#
#   tools/device_check.sh --fetch-debs   here (Debian, apt): download the .deb files into device_debs/ (gitignored;
#                                        ~20 MiB, carried to the device with carry ["device_debs"])
#   tools/device_check.sh                on the device machine: the check (OUT defaults to ./device_out)
#   tools/device_check.sh --rehearse     here, without a GPU: every step of the check from the same .deb files, with
#                                        OUT a scratch folder unless set; the GPU suites must be skipped (exit 77)
#
# What comes back even when the call is cut short: summary.txt (one line per step as it ends) and log.txt (every
# step's output, appended as it is printed) are written while the check runs; logs.tar.gz (each step's own log, the
# JUnit XML of every suite and of ctest, ctest's LastTest.log, ldd listings) is written at the end, also after a
# failure or the deadline.
#
# Exit status 0 when no step failed. The whole check has one deadline (380 s on the device; the first device run,
# 2026-12-04, took 55 s to build and about 110 s for the rest, so it ends well before that, and with the machine's
# start, ~30 s, a second try fits the 15-minute device budget); each step gets its own limit or
# what is left of the deadline, whichever is less, and a step with under 5 s left is not started (it fails as
# "no time left"). Inside a step every timeout (ctest's, a suite's `timeout`) is below the step's limit, so the inner
# one fires first and its output says which test was running. A failing step never stops the check: the next one runs.
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

# The build's time limits: on the device (16 cores) the whole check must fit in 5 minutes; a rehearsal on 2 shared
# cores builds from nothing in about 15 minutes.
if [[ $mode == rehearse ]]; then
  out=${OUT:-$(mktemp -d /tmp/gradsweep_device_out.XXXXXX)}
  build_limit_s=3600
  deadline_s=${GRADSWEEP_DEVICE_DEADLINE_S:-4200}
else
  out=${OUT:-$root/device_out}
  build_limit_s=170
  deadline_s=${GRADSWEEP_DEVICE_DEADLINE_S:-380}
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
streamed="$out/log.txt"
: > "$summary"
: > "$streamed"
passed=0
failed=0
skipped=0
warnings=0
t_start=$(date +%s)
# NCCL says what went wrong (and nothing else) in every log.
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

say() { echo "$*" | tee -a "$summary"; }
warn() {
  warnings=$((warnings + 1))
  say "WARN  $*"
}
pack() {
  [[ -f "$build/Testing/Temporary/LastTest.log" ]] && cp "$build/Testing/Temporary/LastTest.log" "$logs/ctest_LastTest.log"
  tar -czf "$out/logs.tar.gz" -C "$work" logs 2>/dev/null
  say "device_check ($mode): $passed passed, $failed failed, $skipped skipped, $warnings warnings in $(($(date +%s) - t_start)) s"
}
trap pack EXIT

# step NAME LIMIT_S COMMAND...: runs COMMAND (a program or a function of this script) with a time limit; its output
# goes, as it is printed, to logs/NAME.log and to $OUT/log.txt. One summary line with the step's seconds. The command
# runs in its own process group, which a watchdog ends at the limit. Exit 77 is a skip: fine in the rehearsal (no
# GPU), a failure on the device. The step's limit is exported as STEP_LIMIT_S for the inner timeouts.
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
  export STEP_LIMIT_S=$limit
  echo "==== $name (limit ${limit} s) $(date -u +%T)" >> "$streamed"
  set -m
  (
    "$@" 2>&1 | tee -a "$streamed" > "$logs/$name.log"
    exit "${PIPESTATUS[0]}"
  ) &
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
    say "ok    $name ($took s)$(step_note "$name")"
  elif [[ $rc -eq 77 && $mode == rehearse ]]; then
    skipped=$((skipped + 1))
    say "skip  $name ($took s: exit 77, no GPU here)"
    rc=0
  else
    failed=$((failed + 1))
    say "FAIL  $name (exit $rc$([[ $rc -eq 77 ]] && echo ": skipped on the GPU machine")$([[ $took -ge $limit ]] && echo ", stopped at its ${limit} s limit"); $took s)$(step_note "$name"); last lines:"
    tail -15 "$logs/$name.log" | sed 's/^/      /' | tee -a "$summary"
  fi
  return $rc
}

# The tests a step's JUnit XML (logs/NAME.xml, gtest's or ctest's) counts, for its summary line.
step_note() {
  [[ -f "$logs/$1.xml" ]] || return 0
  python3 - "$logs/$1.xml" <<'PY' 2>/dev/null
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
n = sum(int(s.get("tests", 0)) for s in suites)
f = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
sk = sum(int(s.get("skipped", 0) or s.get("disabled", 0) or 0) for s in suites)
print(f": {n} tests, {f} failed, {sk} skipped", end="")
PY
}

# An inner timeout below the step's limit (a margin of 10 s, at least 5 s left to the command).
inner_limit() { local l=$((STEP_LIMIT_S - 10)); [[ $l -lt 5 ]] && l=5; echo $l; }

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
  echo "NCCL_DEBUG: $NCCL_DEBUG"
} > "$out/machine.txt" 2>&1
tee -a "$summary" < "$out/machine.txt"

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
  # Where each dependency was found (logs/provenance.txt; a summary WARN line for each one outside the carried
  # packages: the build goes on, the image's copy may do).
  local v val
  local re2_var=RE2_LIBRARY  # RE2 comes through pkg-config (pkgcfg_lib_RE2_re2) or, without it, by name
  grep -qE "^pkgcfg_lib_RE2_re2(:[A-Z]+)?=/" "$build/CMakeCache.txt" && re2_var=pkgcfg_lib_RE2_re2
  for v in fmt_DIR nlohmann_json_DIR CLI11_DIR GTest_DIR benchmark_DIR RANDOM123_INCLUDE_DIR CBLAS_INCLUDE_DIR \
           ZLIB_INCLUDE_DIR BLAS_openblas_LIBRARY $re2_var OPENSSL_INCLUDE_DIR OPENSSL_CRYPTO_LIBRARY \
           OPENSSL_CONFIGURATION_INCLUDE_DIR; do
    val=$(grep -E "^$v(:[A-Z]+)?=" "$build/CMakeCache.txt" | head -1 | cut -d= -f2-)
    echo "$v = $val"
    [[ "$val" == "$prefix"* ]] || echo "NOT-CARRIED $v = ${val:-(not found)}"
  done | tee "$logs/provenance.txt"
  grep -E "^(NCCL_LIBRARY|NCCL_INCLUDE_DIR|CUDAToolkit_LIBRARY_DIR|CUDA_cublas_LIBRARY|CMAKE_CUDA_COMPILER|CMAKE_CUDA_ARCHITECTURES|CMAKE_BUILD_TYPE)(:[A-Z]+)?=" \
    "$build/CMakeCache.txt" | tee -a "$logs/provenance.txt"
  return 0
}
step configure 120 configure || exit 1
grep "^NOT-CARRIED" "$logs/provenance.txt" 2>/dev/null | while read -r _ line; do echo "$line"; done > "$logs/not_carried.txt"
while read -r line; do warn "configure: $line (not from the carried packages)"; done < "$logs/not_carried.txt"
grep -hE "^(NCCL_LIBRARY|CUDAToolkit_LIBRARY_DIR)" "$logs/provenance.txt" | sed 's/^/      /' | tee -a "$summary"

# The first build: the binary, the test binaries the GPU suites and the backend tests run (every executable a
# `gpu`-labelled test runs, read from CTestTestfile.cmake: before the build, ctest cannot name commands whose
# executables do not exist yet) and gradsweep_tests. Then, only with time left, everything else (the GPU benchmarks).
# `ninja -k 0`: one target that fails to build does not keep the others from building.
mapfile -t gpu_test_targets < <(python3 - "$build/CTestTestfile.cmake" <<'PY'
import os, re, sys
text = open(sys.argv[1]).read()
exe = dict(re.findall(r'add_test\(\[=\[(.+?)\]=\] "([^"]+)"', text))
gpu = re.findall(r'set_tests_properties\(\[=\[(.+?)\]=\] PROPERTIES .*?LABELS "gpu"', text)
print("\n".join(sorted({os.path.basename(exe[t]) for t in gpu if t in exe})))
PY
)
# CMake 4 writes CTestTestfile.cmake differently (on the device, 2026-12-04, the parse above found nothing and the GPU
# suites were "not built"): the build's own targets named gradsweep_gpu* are GPU test binaries too.
mapfile -t -O "${#gpu_test_targets[@]}" gpu_test_targets < <(ninja -C "$build" -t targets all 2>/dev/null |
  grep -oE '^gradsweep_gpu[a-z0-9_]*' | sort -u)
mapfile -t gpu_test_targets < <(printf '%s\n' "${gpu_test_targets[@]}" | grep . | sort -u)
mapfile -t gpu_benches < <(ninja -C "$build" -t targets all 2>/dev/null | grep -oE '^bench_gpu[a-z0-9_]*' | sort -u)
first_targets=(gradsweep)
for t in "${gpu_test_targets[@]}"; do [[ -n "$t" ]] && first_targets+=("$t"); done
first_targets+=(gradsweep_tests)
say "      first targets: ${first_targets[*]}"
build_first() { ninja -C "$build" -k 0 -j "$jobs" "${first_targets[@]}"; }
step build "$build_limit_s" build_first
for t in "${first_targets[@]}"; do
  [[ -x "$build/$t" ]] || say "      not built: $t (its steps fail as not built)"
done
# Each distinct compiler warning is a WARN line (the host CI builds with -Werror; this build does not, so that one
# warning from another compiler version keeps no GPU test from running, but the summary must say it: a
# -Winfinite-recursion in the cuda backend once passed a rehearsal as "0 warnings").
while read -r line; do warn "build: $line"; done < <(grep -E "warning:" "$logs/build.log" 2>/dev/null |
  sed -E 's|^.*/(sim\|kernels\|tests\|bench)/|\1/|' | sort -u | head -20)
# The libraries the binaries load and where they were found (cuBLAS, cuBLASLt, NCCL, cudart: logs/ldd_*.txt and the
# summary); a missing library or one of fmt, OpenBLAS and its Fortran runtime, RE2 and libcrypto outside the carried
# packages is a WARN line (zlib may be the image's own libz.so.1: zlib keeps its ABI).
libraries() {
  local exe lib bad=0
  for exe in gradsweep gradsweep_gpu_kernel_tests; do
    [[ -x "$build/$exe" ]] || continue
    ldd "$build/$exe" > "$logs/ldd_$exe.txt" 2>&1
    grep -E "not found" "$logs/ldd_$exe.txt" | sed "s/^/NOT-FOUND $exe: /"
  done
  [[ -f "$logs/ldd_gradsweep.txt" ]] || return 1
  for lib in libfmt libopenblas libgfortran libre2 libcrypto; do
    grep "$lib" "$logs/ldd_gradsweep.txt" | grep -q -e "$prefix" -e "$runtime_libs" || echo "NOT-CARRIED $lib"
  done
  for lib in libcudart libcublas libcublasLt libnccl; do
    grep -h "$lib[.]" "$logs"/ldd_*.txt | head -1 | awk -v l="$lib" '{print "FOUND " l " " $3}'
  done
  return $bad
}
step libraries 20 libraries
grep -E "^FOUND" "$logs/libraries.log" 2>/dev/null | sed 's/^FOUND /      /' | tee -a "$summary"
while read -r _ line; do warn "libraries: $line"; done < <(grep -E "^(NOT-FOUND|NOT-CARRIED)" "$logs/libraries.log" 2>/dev/null)

# ---- GPU test suites, one gtest suite at a time ---------------------------------------------------------------------
# Each runs the GPU test binary with a --gtest_filter under `timeout` (below the step's limit), with its own log and
# JUnit XML (logs/gpu_NAME.xml); on the device every suite must pass, in the rehearsal every one must exit 77 (no GPU:
# the binary's main skips before any test). The 2^24+3-element kernel sizes run last, as a suite of their own
# (GRADSWEEP_GPU_SIZES, tests/gpu/gpu_test_util.h).
gpu_bin=$build/gradsweep_gpu_kernel_tests
linebuf=()
command -v stdbuf > /dev/null && linebuf=(stdbuf -oL -eL)  # gtest's output line by line into the logs
gtest_suite() {  # gtest_suite NAME FILTER [SIZES]
  local name=$1 filter=$2
  [[ -x "$gpu_bin" ]] || { echo "not built: $gpu_bin"; return 1; }
  GRADSWEEP_GPU_SIZES=${3:-} ${linebuf[@]+"${linebuf[@]}"} timeout -k 5 "$(inner_limit)" "$gpu_bin" --gtest_filter="$filter" \
    --gtest_output="xml:$logs/gpu_$name.xml"
}
suite() { step "gpu_$1" "$2" gtest_suite "$1" "$3" "${4:-}"; }  # suite NAME LIMIT_S FILTER [SIZES]: a step of its own
device_query() { [[ -x "$build/gradsweep_gpu_tests" ]] || { echo "not built"; return 1; }; timeout -k 5 "$(inner_limit)" "$build/gradsweep_gpu_tests"; }
step gpu_device_query 20 device_query
suite kernels 40 'GpuKernels.*' small
suite mixed_dense 30 'GpuMixedDense.*'
suite local_communicator 30 'GpuLocalCommunicator.*'
suite nccl_communicator 30 'GpuNcclCommunicator.*'
suite staged 60 'GpuStagedModel.*:GpuStaged.*'
suite element_ops 60 'GpuElementOps.*'
suite seam 120 'GpuSeam.*'
# Backend selection and NVTX ranges (CPU tests that read the device query; on the device they see a real GPU).
backend_nvtx_tests() {
  cd "$build" && ctest -R '^(Backend|NvtxRanges)\.' --output-on-failure --timeout "$(inner_limit)" \
    --output-junit "$logs/backend_nvtx_tests.xml"
}
step backend_nvtx_tests 60 backend_nvtx_tests
suite end_to_end 90 'GpuEndToEnd.*'

# ---- a short scenario -------------------------------------------------------------------------------------------------
scenario() {
  timeout -k 5 "$(inner_limit)" "$build/gradsweep" run "$root/tests/data/tiny_sweep.json" --out "$work/runs/tiny" --quiet || return 1
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
step scenario 40 scenario
# cluster.backend cuda at validation: exit 0 on the device, 2 in the rehearsal (no usable GPU, naming the device
# query's error). The message is recorded either way.
cuda_backend() {
  "$build/gradsweep" validate "$root/tests/data/tiny_sweep.json" --set cluster.backend=cuda
  local rc=$?
  echo "validate with cluster.backend=cuda: exit $rc"
  [[ $rc -eq 0 || $rc -eq 2 ]]
}
step cuda_backend 15 cuda_backend
grep -h "cluster.backend\|exit" "$logs/cuda_backend.log" 2>/dev/null | head -3 | sed 's/^/      /' | tee -a "$summary"
# The short scenario on cluster.backend cuda with the detected GPU's profile: on the device every run passes on cuda
# (ranks 2 share the one GPU through local) and report_cuda.json comes back; in the rehearsal it is refused (exit 2).
cuda_scenario() {
  timeout -k 5 "$(inner_limit)" "$build/gradsweep" run "$root/tests/data/tiny_sweep.json" --out "$work/runs/tiny_cuda" \
    --quiet --set cluster.backend=cuda --set cluster.hardware=detect
  local rc=$?
  echo "run with cluster.backend=cuda: exit $rc"
  if [[ $mode == rehearse ]]; then
    [[ $rc -eq 2 ]]
    return
  fi
  [[ -f "$work/runs/tiny_cuda/report.json" ]] && cp "$work/runs/tiny_cuda/report.json" "$out/report_cuda.json"
  [[ $rc -eq 0 ]] || return 1
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
step cuda_scenario 45 cuda_scenario
# A GEMM-bound MLP on one GPU in fp32, tf32 and bf16_mixed (tests/data/device_mlp.json): measured step and phase
# medians against the modeled clock of the detected GPU, one line per run into the summary; the report comes back as
# report_measure.json (device only; refused in the rehearsal, exit 2).
cuda_measure() {  # cuda_measure NAME: device_mlp on cuda (its device path) into runs/NAME
  local name=$1
  timeout -k 5 "$(inner_limit)" "$build/gradsweep" run "$root/tests/data/device_mlp.json" \
    --out "$work/runs/$name" --quiet --set cluster.backend=cuda --set cluster.hardware=detect
  local rc=$?
  echo "run of device_mlp with cluster.backend=cuda: exit $rc"
  if [[ $mode == rehearse ]]; then
    [[ $rc -eq 2 ]]
    return
  fi
  local report=$out/report_$name.json
  [[ -f "$work/runs/$name/report.json" ]] && cp "$work/runs/$name/report.json" "$report"
  [[ $rc -eq 0 ]] || return 1
  python3 - "$report" "$root/tools" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
import report_lib  # the one report loader (bad files: ReportError naming the file)
r = report_lib.load_report(sys.argv[1], validate=False)
ok = True
for run in r["runs"]:
    t = run.get("timing") or {}
    p50 = lambda clock, phase=None: (((t.get(clock) or {}).get("phases", {}).get(phase) if phase else
                                      (t.get(clock) or {}).get("step")) or {}).get("all", {}).get("p50_ms")
    fmt = lambda v: "-" if v is None else f"{v:.3f}"
    phases = " ".join(f"{ph} {fmt(p50('measured', ph))}/{fmt(p50('modeled', ph))}"
                      for ph in ("forward", "backward", "optimizer", "communicate"))
    err = (t.get("model_error") or {}).get("step")
    print(f"MEASURE {run['id']} {run['disposition']} {run.get('cuda_path')} step p50 ms measured/modeled "
          f"{fmt(p50('measured'))}/{fmt(p50('modeled'))} (model_error {fmt(err)}); {phases}; eval_accuracy "
          f"{run['convergence']['final']['eval_accuracy']}")
    ok = ok and run["disposition"] == "passed" and run.get("backend") == "cuda" and run.get("cuda_path") == "device"
sys.exit(0 if ok else 1)
PY
}
step cuda_measure 60 cuda_measure measure
grep -h "^MEASURE" "$logs/cuda_measure.log" 2>/dev/null | sed 's/^MEASURE /      /' | tee -a "$summary"
# The 2^24+3-element kernel sizes: last of the GPU tests (the longest; index and grid arithmetic past 2^24).
suite kernels_large 150 'GpuKernels.*' large

# ---- the rest of the build, then the GPU microbenchmarks (Google Benchmark targets named bench_gpu*) ------------------
if [[ ${#gpu_benches[@]} -eq 0 || -z "${gpu_benches[0]}" ]]; then
  say "skip  gpu_benchmarks (no bench_gpu* targets in this version)"
else
  build_benches() { ninja -C "$build" -k 0 -j "$jobs" "${gpu_benches[@]}"; }
  bench_run() {
    timeout -k 5 "$(inner_limit)" "$build/$1" --benchmark_min_time=0.05 --benchmark_out="$logs/$1.json" \
      --benchmark_out_format=json
  }
  step build_benchmarks 60 build_benches
  for b in "${gpu_benches[@]}"; do
    [[ -x "$build/$b" ]] || { failed=$((failed + 1)); say "FAIL  $b (not built)"; continue; }
    # bench_gpu: an estimated 10-20 s on an H200 (not measured yet).
    step "$b" 60 bench_run "$b"
    # The ratios against the same run's baselines (of_copy, of_cublas; targets >= 0.70) into the summary.
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
