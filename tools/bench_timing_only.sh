#!/usr/bin/env bash
# Benchmark of timing-only runs: each transformer preset alone (target < 2 s per run) and a 1,000-run
# timing-only sweep with its report written (target < 60 s on the 2-core CI machine). Prints the seconds and the
# ratio to each target; exit 1 when a target is missed. Usage: tools/bench_timing_only.sh [path/to/gradsweep]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${1:-${GRADSWEEP_BIN:-$root/build/gradsweep}}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
# fp16_pure and activation checkpointing keep each preset inside one 80 GB GPU of the modeled node (docs/memory.md);
# a run that does not fit is skipped before it starts, which would time nothing.
for preset in gpt2-small gpt2-xl llama-7b; do
  cat > "$work/$preset.json" <<JSON
{"name": "bench-$preset", "model": {"kind": "$preset"}, "data": {"kind": "none", "batch_per_rank": 8},
 "cluster": {"ranks": 8}, "precision": {"mode": "fp16_pure"},
 "training": {"mode": "timing", "steps": 100, "eval_every": 0, "activation_checkpointing": true}}
JSON
  s=$(seconds "$bin" run "$work/$preset.json" --out "$work/out-$preset" --quiet)
  ratio=$(echo "$s / 2.0" | bc -l)
  printf "preset %-10s 100 steps x 8 ranks: %.3f s (target < 2 s: ratio %.3f)\n" "$preset" "$s" "$ratio"
  (( $(echo "$s < 2.0" | bc -l) )) || status=1
done
# 1,000 runs = 10 ranks-or-hardware x 10 bucket sizes x 10 accumulation steps, gpt2-small, 20 steps each.
cat > "$work/sweep.json" <<JSON
{"name": "bench-sweep", "model": {"kind": "gpt2-small"}, "data": {"kind": "none", "batch_per_rank": 8},
 "cluster": {"ranks": 8}, "training": {"mode": "timing", "steps": 20, "eval_every": 0},
 "sweep": {"axes": {"cluster.ranks": [1, 2, 3, 4, 5, 6, 7, 8, 12, 16],
                    "sync.bucket_mb": [1, 2, 5, 10, 25, 50, 100, 200, 400, 800],
                    "training.accumulation_steps": [1, 2, 3, 4, 5, 6, 7, 8, 12, 16]}}}
JSON
s=$(seconds "$bin" run "$work/sweep.json" --out "$work/out-sweep" --quiet)
runs=$(python3 -c "import sys; sys.path.insert(0, sys.argv[2]); import report_lib as rl
print(len(rl.load_report(sys.argv[1], validate=False)['runs']))" "$work/out-sweep/report.json" "$(dirname "$0")")
ratio=$(echo "$s / 60.0" | bc -l)
printf "sweep: %s timing-only runs with report: %.2f s (target < 60 s: ratio %.3f)\n" "$runs" "$s" "$ratio"
(( $(echo "$s < 60.0" | bc -l) )) || status=1
[ "$runs" = 1000 ] || { echo "expected 1000 runs, got $runs"; status=1; }
exit $status
