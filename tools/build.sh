#!/usr/bin/env bash
# Configures (once) and builds gradsweep in build/ with Ninja; prints one line before a first build (no build.ninja
# yet: it takes minutes), nothing when there is nothing to do, and the compiler's output only when the build fails.
# Extra arguments go to ninja (targets). CI=true turns warnings into errors. GRADSWEEP_BUILD_DIR overrides the folder.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GRADSWEEP_BUILD_DIR:-$root/build}
werror=OFF
[[ "${CI:-}" == "true" ]] && werror=ON
mkdir -p "$build"
log="$build/configure.log"
if [[ ! -f "$build/build.ninja" ]]; then  # a first build: minutes of silence otherwise (tools/gradsweep, tools/test)
  echo "build: configuring and building in $build (a first build takes minutes; log: $build/build.log)" >&2
fi
if [[ ! -f "$build/build.ninja" ]] || ! grep -q "GRADSWEEP_WERROR:BOOL=$werror" "$build/CMakeCache.txt" 2>/dev/null; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRADSWEEP_WERROR=$werror \
    > "$log" 2>&1 || { cat "$log" >&2; exit 1; }
fi
jobs=$(nproc)
if ! ninja -C "$build" -j "$jobs" "$@" > "$build/build.log" 2>&1; then
  grep -v '^\[' "$build/build.log" | tail -60 >&2
  echo "build: failed (full log: $build/build.log)" >&2
  exit 1
fi
