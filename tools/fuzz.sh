#!/usr/bin/env bash
# Builds the libFuzzer targets over the scenario loader and validator and over the IDX reader (CMakePresets.json
# "fuzz": clang, ASan+UBSan) and runs them for a bounded time (SECONDS for the scenarios, 10 s for IDX); .ci/run
# calls it. Installs clang through tools/setup.sh --fuzz when missing.
#   tools/fuzz.sh [SECONDS]   (default 60)
# Corpus: the inputs of tests/fuzz/corpus/ (every input that once failed; replayed first, each must pass) plus the
# scenario files of scenarios/ and tests/data/ as seeds; new inputs go to a scratch folder, never into the repo.
# A failure leaves the crashing input as build-fuzz/crash-* (add it to tests/fuzz/corpus/ once fixed). Ends with one
# line "fuzz: N passed, N failed". GRADSWEEP_FUZZ_DIR overrides the build folder.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-60}
build=${GRADSWEEP_FUZZ_DIR:-$root/build-fuzz}
"$root/tools/setup.sh" --fuzz || { echo "fuzz: setup failed; 0 passed, 1 failed"; exit 1; }
start=$(date +%s)
mkdir -p "$build"
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$root" --preset fuzz -B "$build" > "$build/configure.log" 2>&1 || {
    cat "$build/configure.log" >&2
    echo "fuzz: configure failed; 0 passed, 1 failed"
    exit 1
  }
fi
if ! ninja -C "$build" -j "$(nproc)" fuzz_scenario fuzz_idx > "$build/build.log" 2>&1; then
  grep -v '^\[' "$build/build.log" | tail -60 >&2
  echo "fuzz: build failed (full log: $build/build.log); 0 passed, 1 failed"
  exit 1
fi
built=$(date +%s)
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# 1. Regression corpus: every input that once failed must now load cleanly (libFuzzer runs each file once).
failed=0
regressions=("$root"/tests/fuzz/corpus/*)
if [[ -e "${regressions[0]}" ]]; then
  if ! (cd "$build" && ./fuzz_scenario -rss_limit_mb=2048 -timeout=30 "${regressions[@]}") > "$build/regress.log" 2>&1; then
    tail -60 "$build/regress.log" >&2
    failed=1
  fi
fi
# 2. Bounded fuzzing from the seeds: 2 GB of memory and 30 s per input at most (a larger allocation or a slower
# input is a finding; 30 s, not less, because a 4 KB sweep may expand into the limit of 100000 runs, each validated,
# and the machine is shared); -max_len 4096 keeps inputs the size of hand-written scenarios.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/seeds"
find "$root/scenarios" "$root/tests/data" -name '*.json' -not -path '*/hardware/*' -size -64k -exec cp {} "$scratch/seeds/" \;
cp "$root"/tests/fuzz/corpus/* "$scratch/seeds/" 2>/dev/null || true
mkdir -p "$scratch/work"
if ! (cd "$build" && ./fuzz_scenario -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=30 \
      -max_len=4096 -print_final_stats=1 "$scratch/work" "$scratch/seeds") > "$build/fuzz.log" 2>&1; then
  tail -80 "$build/fuzz.log" >&2
  failed=$((failed + 1))
fi
# 3. The IDX reader (tests/fuzz/fuzz_idx.cpp): 10 s from two valid seeds (a labels and an images file); inputs are
# small files, so this is cheap next to the scenario fuzzing.
mkdir -p "$scratch/idx_seeds" "$scratch/idx_work"
printf '\x00\x00\x00\x08\x01\x00\x00\x00\x03\x04\x09\x01' > "$scratch/idx_seeds/labels"
printf '\x01\x00\x00\x08\x03\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x02\x00\x7f\xff\x10' > "$scratch/idx_seeds/images"
if ! (cd "$build" && ./fuzz_idx -max_total_time=10 -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 -max_len=4096 \
      -print_final_stats=1 "$scratch/idx_work" "$scratch/idx_seeds") > "$build/fuzz_idx.log" 2>&1; then
  tail -40 "$build/fuzz_idx.log" >&2
  failed=$((failed + 1))
fi
runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/fuzz.log" | grep -o '[0-9]*$' || echo 0)
end=$(date +%s)
echo "fuzz: build $((built - start)) s, fuzzing $((end - built)) s, ${runs:-0} inputs; $((failed == 0 ? 1 : 0)) passed, $failed failed"
[[ $failed -eq 0 ]]
