#!/usr/bin/env bash
# Installs whatever gradsweep needs that is missing (Debian packages through apt-get, the tools' Python virtual
# environment from tools/requirements.txt) and does nothing when everything is there. Quiet unless it has work to do.
# Usage: tools/setup.sh            (CI runs it as root; elsewhere it uses sudo when available)
#        tools/setup.sh --fuzz     also clang and its runtime libraries (libFuzzer) for tools/fuzz.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fuzz=0
[[ "${1:-}" == "--fuzz" ]] && fuzz=1

packages=(
  build-essential cmake ninja-build ccache git pkg-config
  libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev zlib1g-dev librandom123-dev libre2-dev libssl-dev
  libopenmpi-dev openmpi-bin
  dataset-fashion-mnist
  python3 python3-venv python3-pip python3-matplotlib python3-numpy python3-jsonschema python3-pytest
  python3-torch
)
((fuzz)) && packages+=(clang libclang-rt-dev)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then sudo=(sudo); else
      echo "setup: missing packages and not root: apt-get install ${missing[*]}" >&2; exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq >&2
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# The tools' virtual environment: Debian's Python with its packages visible; pip adds only what they lack.
venv="$root/.venv"
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$root/tools/requirements.txt" | cut -d' ' -f1)
if [[ ! -x "$venv/bin/python" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "setup: preparing $venv" >&2
  /usr/bin/python3 -m venv --system-site-packages "$venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/tools/requirements.txt" >&2
  echo "$want" > "$stamp"
fi
