#!/usr/bin/env python3
"""Benchmark of the memory estimate (sim/app/memory.h): for three model sizes, each run in a fresh child process,
the estimate the report records (runs[].memory) against the child's peak resident memory minus the peak of the same
child running zero steps of the smallest model (`gradsweep run --dry-run`: loads, validates, builds nothing of the
run). Prints one line per model and a verdict; exit 1 when an estimate is off by more than 25%. Figures go to
docs/benchmarks.md.

Usage: tools/bench_memory.py [--bin build/gradsweep] [--widths 1024 4096 8192]
The teacher dataset (about 1 MB, built by validation in the baseline too) is left out of the comparison."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import report_lib as rl  # noqa: E402  the one report loader


def scenario(width):
    return {
        "name": f"mem{width}",
        "model": {"kind": "mlp", "layers": [256, width, width, 10], "loss": "cross_entropy"},
        "data": {"kind": "teacher", "batch_per_rank": 32,
                 "teacher": {"in_dim": 256, "hidden": 64, "out_dim": 10, "train_samples": 65536,
                             "eval_samples": 1024}},
        "cluster": {"ranks": 2},
        "training": {"steps": 3, "eval_every": 0, "optimizer": {"kind": "adam", "lr": 1e-3}},
    }


def peak_rss_bytes(cmd):
    """Runs cmd in a fresh child and returns its peak resident set (ru_maxrss, KiB on Linux) in bytes."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): {err}")
    return usage.ru_maxrss * 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=str(REPO / "build" / "gradsweep"))
    ap.add_argument("--widths", type=int, nargs="+", default=[1024, 4096, 8192])
    args = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        paths = {}
        for w in args.widths:
            paths[w] = tmp / f"mem{w}.json"
            paths[w].write_text(json.dumps(scenario(w)))
        smallest = min(args.widths)
        baseline = peak_rss_bytes([args.bin, "run", str(paths[smallest]), "--dry-run"])
        print(f"baseline (zero steps, width {smallest}): peak RSS {baseline / 2**20:.1f} MiB")
        print(f"{'width':>6} {'params':>10} {'estimate MiB':>13} {'peak-baseline MiB':>18} {'ratio':>6}")
        for w in args.widths:
            out = tmp / f"out{w}"
            peak = peak_rss_bytes([args.bin, "run", str(paths[w]), "--out", str(out), "--quiet"])
            run = rl.load_report(out / "report.json", validate=False)["runs"][0]
            assert run["disposition"] == "passed", run["message"]
            mem = run["memory"]
            estimate = mem["total_bytes"] - mem["dataset_bytes"]
            measured = peak - baseline
            ratio = estimate / measured if measured > 0 else float("inf")
            ok &= 0.75 <= ratio <= 1.25
            print(f"{w:>6} {run['num_params']:>10} {estimate / 2**20:>13.1f} {measured / 2**20:>18.1f} {ratio:>6.3f}")
        # The dataset term on its own: Fashion-MNIST (both splits decoded, evaluation copy) against a baseline that
        # builds no dataset (a dry run of a one-weight inline scenario). Reported, not part of the verdict.
        if Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists():
            tiny = tmp / "tiny.json"
            tiny.write_text(json.dumps({"name": "tiny", "model": {"kind": "linear", "layers": [1, 1], "loss": "mse"},
                                        "data": {"kind": "inline", "ranks": [[{"x": [[1]], "y": [[1]]}]]},
                                        "training": {"steps": 1}}))
            fm = tmp / "fm.json"
            fm.write_text(json.dumps({"name": "fm", "model": {"kind": "mlp", "layers": [784, 256, 256, 10]},
                                      "data": {"kind": "fashion_mnist", "batch_per_rank": 32},
                                      "cluster": {"ranks": 2}, "training": {"steps": 3, "eval_every": 0}}))
            base = peak_rss_bytes([args.bin, "run", str(tiny), "--dry-run"])
            peak = peak_rss_bytes([args.bin, "run", str(fm), "--out", str(tmp / "fm"), "--quiet"])
            total = rl.load_report(tmp / "fm" / "report.json", validate=False)["runs"][0]["memory"]["total_bytes"]
            print(f"fashion_mnist MLP 784-256-256-10 (dataset included): estimate {total / 2**20:.1f} MiB, "
                  f"peak-baseline {(peak - base) / 2**20:.1f} MiB, ratio {total / (peak - base):.3f}")
    print("estimate within 25% for every size" if ok else "FAIL: an estimate is off by more than 25%")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
