#!/usr/bin/env python3
"""Golden reports: the scenarios of tests/golden/ run by two builds, reports compared byte for byte.

The host backend is bit-reproducible, so a change that should not change any number (a refactor) must give the same
reports as the reference build, apart from the fields that name the build, the machine or measured time (NOISE below:
the measured clock, wall times, the date). The modeled clock, parameters, losses, bytes and dispositions are compared.

  tools/golden.py                      # working tree's build/gradsweep against a build of `main` (cached per commit)
  tools/golden.py --ref origin/x       # against another git ref
  tools/golden.py --self               # the same binary twice (determinism and the NOISE list; CI runs this)
  tools/golden.py --scenario strategies --keep /tmp/g   # one scenario, reports kept for a look

A developer script, not part of CI: it needs a second full build (minutes on 2 cores), and changes that alter numbers
on purpose (fault fixes, cost-model changes) fail it by design. CI runs `--self` over a small subset instead
(tests/e2e/test_golden.py): every field outside NOISE must be reproducible, which is what makes the comparison valid.
Extend: a new scenario is one more file in tests/golden/; a new measured field goes into NOISE with its reason.
Exit status: 0 same, 1 different, 2 could not build or run.
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "tests" / "golden"

# Keys that are not reproducible, as paths from a report's top level ("*" is any list index or any object key). Each
# names the build, the machine, or the measured clock of this process.
NOISE = [
    ("tool",),                                       # program version, git commit, compiler
    ("context",),                                    # date, host, CPU, argv, scenario path, GPUs
    ("runs", "*", "wall_s"),                         # wall-clock time of the run
    ("runs", "*", "timing", "measured"),             # the measured clock (steady clock per phase)
    ("runs", "*", "throughput", "samples_per_s"),    # measured samples per second
    ("runs", "*", "convergence", "series", "*", "measured_s"),
    ("runs", "*", "time_to_target", "measured_s"),
    ("runs", "*", "memory", "available_bytes"),      # MemAvailable of this machine
    ("runs", "*", "compression", "compress_time"),   # measured encode / decode times
    ("runs", "*", "compression", "decompress_time"),
    ("runs", "*", "communication", "algbw_GBps"),    # bytes over the measured communicate time
    ("runs", "*", "communication", "busbw_GBps"),
    ("runs", "*", "data", "max_queue_depth"),        # how far each loader thread ran ahead: a thread race
] + [("runs", "*", "data", "per_rank", "*", "epochs", "*", key)
     for key in ("stall_measured_s", "stall_share_measured", "step_measured_s")] + [
    ("runs", "*", "data", "totals", key) for key in ("stall_measured_s", "stall_share_measured")
]


def drop(node, path):
    if not path:
        return
    head, rest = path[0], path[1:]
    if head == "*":
        children = node if isinstance(node, list) else list(node.values()) if isinstance(node, dict) else []
        for child in children:
            drop(child, rest)
        return
    if isinstance(node, dict) and head in node:
        if rest:
            drop(node[head], rest)
        else:
            del node[head]


def normalized(report_path):
    report = json.loads(pathlib.Path(report_path).read_text())
    for path in NOISE:
        drop(report, path)
    return report


def differences(a, b, path="", out=None, limit=20):
    """Paths where a and b differ (up to limit), each with both values shortened."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: {'missing' if k not in a else 'present'} in reference, "
                           f"{'missing' if k not in b else 'present'} in candidate")
            else:
                differences(a[k], b[k], f"{path}.{k}", out, limit)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            differences(x, y, f"{path}[{i}]", out, limit)
    elif json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
        short = lambda v: (lambda s: s if len(s) <= 100 else s[:97] + "...")(json.dumps(v, sort_keys=True))
        out.append(f"{path}: reference {short(a)} | candidate {short(b)}")
    return out


def git(*args, cwd=ROOT):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def cuda_setting(build_dir):
    cache = pathlib.Path(build_dir) / "CMakeCache.txt"
    if cache.exists():
        for line in cache.read_text().splitlines():
            if line.startswith("GRADSWEEP_CUDA:"):
                return line.split("=", 1)[1]
    return "AUTO"


def reference_binary(ref, cache_root, cuda):
    """build/gradsweep of `ref` in a detached worktree under cache_root, built once per commit."""
    commit = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    src = pathlib.Path(cache_root) / commit[:12]
    binary = src / "build" / "gradsweep"
    if binary.exists():
        return commit, binary
    if src.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(src)], cwd=ROOT, capture_output=True)
        shutil.rmtree(src, ignore_errors=True)
    src.parent.mkdir(parents=True, exist_ok=True)
    git("worktree", "add", "--detach", str(src), commit)
    env = dict(os.environ, CCACHE_BASEDIR=os.environ.get("CCACHE_BASEDIR", str(pathlib.Path(cache_root).parent)))
    print(f"golden: building {ref} ({commit[:12]}) in {src}/build (target gradsweep)", file=sys.stderr)
    for cmd in (["cmake", "-S", str(src), "-B", str(src / "build"), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                 f"-DGRADSWEEP_CUDA={cuda}"],
                ["ninja", "-C", str(src / "build"), "gradsweep"]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
            raise SystemExit(2)
    # Older reference builds than the newest two are removed (each holds a source tree and its build).
    builds = sorted((p for p in pathlib.Path(cache_root).iterdir() if p.is_dir() and p != src),
                    key=lambda p: p.stat().st_mtime)
    for old in builds[:-1]:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
        shutil.rmtree(old, ignore_errors=True)
    return commit, binary


def run_scenario(binary, scenario, out_dir):
    # --overwrite: a --keep folder of an earlier comparison is moved aside, never compared again as if it were new.
    r = subprocess.run([str(binary), "run", str(scenario), "--out", str(out_dir), "--quiet", "--overwrite"],
                       capture_output=True, text=True)
    report = pathlib.Path(out_dir) / "report.json"
    if not report.exists():
        sys.stderr.write(f"golden: {binary} wrote no report for {scenario} (exit {r.returncode}):\n{r.stderr[-3000:]}")
        raise SystemExit(2)
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", default="main", help="git ref of the reference build (default main)")
    ap.add_argument("--bin", default=str(ROOT / "build" / "gradsweep"), help="candidate binary")
    ap.add_argument("--ref-bin", help="reference binary (instead of building --ref)")
    ap.add_argument("--self", action="store_true", help="compare --bin with itself (determinism)")
    ap.add_argument("--scenario", action="append", help="only tests/golden/NAME.json (repeatable)")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "gradsweep-golden"),
                    help="where reference builds are kept")
    ap.add_argument("--keep", help="keep the reports in this folder (ref/ and cand/)")
    args = ap.parse_args()

    candidate = pathlib.Path(args.bin)
    if not candidate.exists():
        print(f"golden: no candidate binary {candidate} (tools/build.sh)", file=sys.stderr)
        return 2
    if args.self:
        reference, label = candidate, "the same binary"
    elif args.ref_bin:
        reference, label = pathlib.Path(args.ref_bin), str(args.ref_bin)
    else:
        commit, reference = reference_binary(args.ref, args.cache, cuda_setting(candidate.parent))
        label = f"{args.ref} ({commit[:12]})"
    names = args.scenario or sorted(p.stem for p in SCENARIOS.glob("*.json"))
    work = pathlib.Path(args.keep) if args.keep else pathlib.Path(tempfile.mkdtemp(prefix="golden-"))
    failed = 0
    runs = 0
    try:
        for name in names:
            scenario = SCENARIOS / f"{name}.json"
            a = normalized(run_scenario(reference, scenario, work / "ref" / name))
            b = normalized(run_scenario(candidate, scenario, work / "cand" / name))
            runs += len(b.get("runs", []))
            if json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True):
                print(f"golden: {name}: {len(b.get('runs', []))} runs identical")
                continue
            failed += 1
            print(f"golden: {name}: DIFFERENT")
            for line in differences(a, b):
                print("  " + line)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"golden: {len(names) - failed} of {len(names)} scenarios ({runs} runs) identical to {label}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
