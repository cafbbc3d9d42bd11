#!/usr/bin/env python3
"""Fails on an include that points up the layer order of docs/design.md section 6 (ctest `layering`, so CI runs it).

Layers, bottom to top; a file may include its own layer and the ones below:
  core < config < model, cost, comm, compress, optim < strategy, backend < runtime < validate < report < app
kernels/ stands beside them and includes nothing of sim/. A new folder under sim/ gets its layer in LAYERS.
Exit status 1 with one line per upward include ("file:line: ..."), 0 when there is none.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAYERS = {
    "core": 0,
    "config": 1,
    "model": 2, "cost": 2, "comm": 2, "compress": 2, "optim": 2,
    "strategy": 3, "backend": 3,
    "runtime": 4,
    "validate": 5,
    "report": 6,
    "app": 7,
}
# Known upward includes that a later change removes: (file, included header). Empty is the goal; nothing may be added.
ALLOWED = set()
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = ("*.h", "*.cpp", "*.cu", "*.cuh")


def layer_of(path):
    parts = pathlib.PurePosixPath(path).parts
    if parts[0] == "kernels":
        return "kernels"
    if parts[0] == "sim" and len(parts) > 2:
        return parts[1]
    return None


def main():
    problems = []
    used_allowances = set()
    for pattern in SOURCES:
        for file in sorted((ROOT / "sim").rglob(pattern)) + sorted((ROOT / "kernels").rglob(pattern)):
            rel = file.relative_to(ROOT).as_posix()
            src = layer_of(rel)
            if src is None:
                problems.append(f"{rel}: a file directly under sim/ has no layer (put it in a layer's folder)")
                continue
            if src != "kernels" and src not in LAYERS:
                problems.append(f"{rel}: folder sim/{src}/ has no layer in tools/check_layers.py LAYERS")
                continue
            for lineno, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                dst = layer_of(inc)
                if dst is None:
                    continue
                if src == "kernels":
                    if dst != "kernels":
                        problems.append(f"{rel}:{lineno}: kernels/ includes {inc}: kernels/ includes nothing of sim/")
                    continue
                if dst == "kernels" or dst not in LAYERS:
                    continue
                if LAYERS[dst] > LAYERS[src]:
                    if (rel, inc) in ALLOWED:
                        used_allowances.add((rel, inc))
                        continue
                    problems.append(f"{rel}:{lineno}: includes {inc}: layer {dst} is above {src}")
    for rel, inc in sorted(ALLOWED - used_allowances):
        problems.append(f"{rel}: no longer includes {inc}: remove the entry from ALLOWED in tools/check_layers.py")
    for p in problems:
        print(p)
    groups = [", ".join(d for d in LAYERS if LAYERS[d] == r) for r in sorted(set(LAYERS.values()))]
    if problems:
        print(f"check_layers: {len(problems)} problem(s); the order is {' < '.join(groups)}")
    else:
        print("check_layers: every include points down")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
