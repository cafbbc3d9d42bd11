#!/usr/bin/env bash
# Regenerates the strategy guide's figures (docs/img/strategies_*.png, docs/strategies.md) from the shipped scenarios
# in scenarios/strategies/: runs each one (and again on a second hardware profile where that profile matters), draws
# it with tools/plot.py --summary and reduces the PNG to 64 colors. A new strategy is one line in SCENARIOS.
#
#   tools/guide_figures.sh [NAME...]        # default: every scenario below; NAME: async_ps, compression, ...
#
# Environment: GRADSWEEP (the binary, default build/gradsweep), PYTHON (default .venv/bin/python), OUT (the reports,
# default /tmp/gradsweep-guide; each scenario's report is OUT/NAME/PROFILE/report.json, an earlier one moved aside), IMG (default docs/img).
# OPENBLAS_CORETYPE (default Haswell, which every x86-64 CPU with AVX2 runs): the BLAS kernel of the host GEMMs. The
# accuracies in docs/strategies.md move in their last digits from one kernel to another (docs/parity.md, "The BLAS
# kernel"), so the guide is made with one named kernel; each report names it in context.blas.
# Prints each scenario's wall time; docs/strategies.md lists the total on the 2-core development machine.
set -euo pipefail
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
cd "$(dirname "$0")/.."

GRADSWEEP=${GRADSWEEP:-build/gradsweep}
PYTHON=${PYTHON:-.venv/bin/python}
OUT=${OUT:-/tmp/gradsweep-guide}
IMG=${IMG:-docs/img}

# NAME and the hardware profiles it runs on: the first is the scenario's own (cluster.hardware, h100-pcie-8), a
# second one (NVLink, h100-sxm-8) shows how the payoff depends on the interconnect. The data cache's payoff depends
# on the storage profile, which the scenario sweeps itself, so it runs on its own profile only.
SCENARIOS=(
  "async_ps h100-pcie-8 h100-sxm-8"
  "compression h100-pcie-8 h100-sxm-8"
  "mixed_precision h100-pcie-8 h100-sxm-8"
  "accumulation h100-pcie-8 h100-sxm-8"
  "data_cache h100-pcie-8"
  "ps_sharded h100-pcie-8 h100-sxm-8"
  "delayed_sync h100-pcie-8 h100-sxm-8"
  "all h100-pcie-8 h100-sxm-8"
)

wanted=("$@")
known=()
for line in "${SCENARIOS[@]}"; do known+=("${line%% *}"); done
for name in "${wanted[@]}"; do
  if [[ " ${known[*]} " != *" $name "* ]]; then
    echo "error: unknown scenario \"$name\"; valid names: ${known[*]}" >&2
    exit 2
  fi
done

if [[ ! -x "$GRADSWEEP" ]]; then
  echo "error: $GRADSWEEP: no gradsweep binary (set GRADSWEEP or run tools/build.sh)" >&2
  exit 2
fi
[[ -x "$PYTHON" ]] || { echo "error: $PYTHON: no Python (set PYTHON or run tools/setup.sh)" >&2; exit 2; }
mkdir -p "$IMG" "$OUT"

quantize() {  # 64 colors keep the figures small (a few tens of kB) without visible loss for flat bar charts
  "$PYTHON" -c 'import sys; from PIL import Image
for p in sys.argv[1:]:
    Image.open(p).convert("RGB").quantize(64).save(p, optimize=True)' "$@"
}

total_start=$SECONDS
for line in "${SCENARIOS[@]}"; do
  read -r name profiles <<<"$line"
  if ((${#wanted[@]})) && [[ " ${wanted[*]} " != *" $name "* ]]; then continue; fi
  start=$SECONDS
  reports=()
  for profile in $profiles; do
    dir="$OUT/$name/$profile"
    run_start=$SECONDS
    "$GRADSWEEP" run "scenarios/strategies/$name.json" --hardware "$profile" --out "$dir" --overwrite --quiet
    echo "$name on $profile: $((SECONDS - run_start)) s"
    reports+=("$dir/report.json")
  done
  "$PYTHON" tools/plot.py --summary "$IMG/strategies_$name.png" "${reports[@]}"
  quantize "$IMG/strategies_$name.png"
  case $name in  # the curve figures the guide also shows (the scenario's own profile)
    delayed_sync)
      "$PYTHON" tools/plot.py "${reports[0]}" --out "$OUT/$name/figures" >/dev/null 2>&1
      cp "$OUT/$name/figures/accuracy_vs_modeled_time.png" "$IMG/strategies_delayed_sync_accuracy.png"
      quantize "$IMG/strategies_delayed_sync_accuracy.png" ;;
    accumulation)
      "$PYTHON" tools/plot.py "${reports[0]}" --out "$OUT/$name/figures" >/dev/null 2>&1
      cp "$OUT/$name/figures/step_breakdown_modeled.png" "$IMG/strategies_accumulation_breakdown.png"
      quantize "$IMG/strategies_accumulation_breakdown.png" ;;
  esac
  echo "$name: $((SECONDS - start)) s in all"
done
echo "total: $((SECONDS - total_start)) s"
