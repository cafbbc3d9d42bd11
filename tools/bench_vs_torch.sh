#!/usr/bin/env bash
# End-to-end step time of the anchors' fmnist workload (MLP 784-512-512-10, batch 32 per rank, 4 ranks): gradsweep's
# bench_step against PyTorch DDP (bench/peers/torch_ddp.py, gloo), alternated ROUNDS times in one run; medians, ratio.
# Usage: tools/bench_vs_torch.sh [ROUNDS]  (default 3; GRADSWEEP_BUILD_DIR: build folder, GRADSWEEP_ANCHORS: another
# folder holding torch_ddp.py)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GRADSWEEP_BUILD_DIR:-$root/build}
rounds=${1:-3}
python=/usr/bin/python3  # Debian's python3-torch lives in the system Python
anchors=${GRADSWEEP_ANCHORS:-$root/bench/peers}
[[ -f "$anchors/torch_ddp.py" ]] || {
  echo "bench_vs_torch: $anchors/torch_ddp.py not found; set GRADSWEEP_ANCHORS to a folder holding it" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || {
  echo "bench_vs_torch: $python cannot import torch (apt-get install python3-torch)" >&2; exit 1; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench_vs_torch: ROUNDS must be a positive integer, got '$rounds'" >&2; exit 1; }

"$root/tools/build.sh" bench_step

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((i = 1; i <= rounds; ++i)); do
  "$build/bench_step" --benchmark_filter='^fmnist/shared/ranks:4/' --benchmark_format=json \
    > "$tmp/gs$i.json" 2> "$tmp/gs$i.err" || { cat "$tmp/gs$i.err" >&2; exit 1; }
  "$python" "$anchors/torch_ddp.py" 4 fmnist none > "$tmp/torch$i.txt" 2> "$tmp/torch$i.err" ||
    { cat "$tmp/torch$i.err" >&2; exit 1; }
done

"$python" - "$tmp" "$rounds" <<'EOF'
import json, re, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
phases = ["forward", "backward", "communicate", "optimizer", "wait", "data"]
gs, torch = [], []
for i in range(1, rounds + 1):
    runs = json.load(open(f"{tmp}/gs{i}.json"))["benchmarks"]
    if len(runs) != 1 or runs[0].get("error_occurred"):
        sys.exit(f"bench_vs_torch: bench_step round {i}: {runs[0].get('error_message') if runs else 'no run'}")
    gs.append(runs[0])
    m = re.search(r"step_ms=([0-9.]+)", open(f"{tmp}/torch{i}.txt").read())
    if not m:
        sys.exit(f"bench_vs_torch: torch_ddp.py round {i} printed no step_ms")
    torch.append(float(m.group(1)))
    print(f"round {i}: gradsweep step_ms={gs[-1]['step_ms']:.2f} (mean {gs[-1]['step_mean_ms']:.2f})  "
          f"torch step_ms={torch[-1]:.2f}")
med = lambda key: statistics.median(r[key] for r in gs)
g, gmean, t = med("step_ms"), med("step_mean_ms"), statistics.median(torch)
print(f"gradsweep fmnist 4 ranks step_ms = {g:.2f} (median over {rounds} runs of the median step of rank 0)")
print(f"gradsweep fmnist 4 ranks step_max_ms = {med('step_max_ms'):.2f} (median step of the slowest rank)")
print(f"gradsweep fmnist 4 ranks step_mean_ms = {gmean:.2f} (wall time / steps, as torch_ddp.py measures)")
print(f"gradsweep fmnist 4 ranks samples_per_s = {med('samples_per_s'):.0f}")
print("gradsweep fmnist 4 ranks phases (ms, per rank) = " + ", ".join(f"{p} {med(p + '_ms'):.3f}" for p in phases))
print(f"torch ddp fmnist 4 ranks step_ms = {t:.2f} (median over {rounds} runs)")
print(f"ratio gradsweep/torch (mean step) = {gmean / t:.3f}")
print(f"ratio gradsweep/torch = {g / t:.3f} (target <= 0.5)")
EOF
