#!/usr/bin/env bash
# Builds gradsweep with a sanitizer preset (CMakePresets.json) and runs its tests; .ci/run calls it. Add a test to a
# job by naming it so the job's filter below matches. Ends with one line "<job>: N passed, N failed".
#   tools/sanitize.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer: every cpu test (ctest -L cpu)
#   tools/sanitize.sh tsan   ThreadSanitizer: the runtime, communicator and strategy tests only (see below)
# GRADSWEEP_SANITIZE_DIR overrides the build folder (default build-<job>/ in the repository). Extra arguments go to
# ctest. Exit status 0 only when the build succeeded and no test failed.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
job=${1:-}
shift || true
case "$job" in
  asan)
    filter=(-L cpu)
    # Every error stops the test with a stack (halt_on_error; UBSan also via -fno-sanitize-recover=all). No
    # suppressions are needed.
    export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1:print_summary=1"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:print_summary=1"
    ;;
  tsan)
    # Only the tests that start rank threads: collectives (the host communicator), training (World, rank loop,
    # stop requests, every sync strategy through run_training), the strategy cases, the delayed all-reduce and
    # local SGD tests (shared ring, replica averaging), and the driver/fault tests.
    # Config, data, model, optimizer, RNG and report tests run single-threaded: TSan adds nothing there but minutes
    # (it runs code 5-15x slower), and ASan already covers them.
    filter=(-R '^(Collectives|Training|Cases|Strateg|Compression|Driver|Faults|DelayedAllReduce\.|LocalSgd\.)')
    # OpenBLAS is not instrumented and synchronizes its own worker threads with spin locks TSan cannot see, so
    # its threads would produce false reports; one BLAS thread per rank thread is also what the driver uses.
    export OPENBLAS_NUM_THREADS=1
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:print_summary=1"
    ;;
  *)
    echo "usage: tools/sanitize.sh asan|tsan [ctest arguments]" >&2
    exit 2
    ;;
esac
build=${GRADSWEEP_SANITIZE_DIR:-$root/build-$job}
start=$(date +%s)
mkdir -p "$build"
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$root" --preset "$job" -B "$build" > "$build/configure.log" 2>&1 || {
    cat "$build/configure.log" >&2
    echo "$job: configure failed; 0 passed, 1 failed"
    exit 1
  }
fi
if ! ninja -C "$build" -j "$(nproc)" gradsweep_tests > "$build/build.log" 2>&1; then
  grep -v '^\[' "$build/build.log" | tail -60 >&2
  echo "$job: build failed (full log: $build/build.log); 0 passed, 1 failed"
  exit 1
fi
built=$(date +%s)
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
(cd "$build" && ctest -j "$(nproc)" --timeout 900 --output-on-failure --output-junit "$results/ctest.xml" \
  "${filter[@]}" "$@") > "$results/ctest.log" 2>&1
rc=$?
# Failing tests with their sanitizer report (ctest prints each failing test's whole output); quiet when all pass.
if [[ $rc -ne 0 ]]; then
  cat "$results/ctest.log" >&2
fi
counts=$(python3 - "$results/ctest.xml" "$rc" <<'PY'
import sys, xml.etree.ElementTree as ET
passed = failed = 0
try:
    for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
        bad = case.find("failure") is not None or case.find("error") is not None or case.get("status") == "fail"
        failed += bad
        passed += not bad
except Exception:
    failed += 1
if failed == 0 and (sys.argv[2] != "0" or passed == 0):  # ctest failed without a failing test, or ran none
    failed = 1
print(f"{passed} passed, {failed} failed")
PY
)
end=$(date +%s)
echo "$job: build $((built - start)) s, tests $((end - built)) s; $counts"
[[ $counts == *" 0 failed" ]]
