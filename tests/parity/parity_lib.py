"""Shared helpers of the PyTorch parity suite (imported by its tests; not a conftest, whose module name tests/tools/ uses): small inline-data scenarios, a gradsweep run with its trace, and the replay of that run in PyTorch through tools/torch_replay.py (the same engine users run by hand).

Batch sizes, accumulation steps and rank counts are powers of two: PyTorch scales each micro-batch's loss by
1/(K b) and DDP divides by N, gradsweep divides the summed gradient by S = N K b once; both are exact only then
(docs/parity.md, "What differs and why")."""
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("GRADSWEEP_BIN", REPO / "build" / "gradsweep"))
sys.path.insert(0, str(REPO / "tools"))

# Outside CI a missing torch or binary skips the suite; in CI (CI=true, .ci/run) it fails: tools/setup.sh installs
# python3-torch and tools/test builds the binary, so a skip there would hide a broken setup.
_IN_CI = os.environ.get("CI") == "true"
try:
    import torch
except ImportError:
    if _IN_CI:
        raise RuntimeError("CI=true: PyTorch (Debian's python3-torch, tools/setup.sh) is not importable: the parity "
                           "suite must run in CI")
    pytest.skip("PyTorch (Debian's python3-torch) is not installed", allow_module_level=True)
import torch_replay  # noqa: E402

if not BIN.exists():
    if _IN_CI:
        raise RuntimeError(f"CI=true: {BIN} is not built")
    pytest.skip(f"{BIN} is not built", allow_module_level=True)


def inline_data(ranks, micro_batches, batch, in_dim, out_dim, seed, classification=False):
    """Per rank, `micro_batches` micro-batches of `batch` random samples (float32 values written exactly)."""
    rng = np.random.default_rng(seed)
    data = []
    for _ in range(ranks):
        lst = []
        for _ in range(micro_batches):
            x = rng.standard_normal((batch, in_dim)).astype(np.float32)
            if classification:
                y = rng.integers(0, out_dim, batch).tolist()
            else:
                y = rng.standard_normal((batch, out_dim)).astype(np.float32).tolist()
            lst.append({"x": x.tolist(), "y": y})
        data.append(lst)
    return data


def scenario(name, *, ranks=2, K=1, batch=8, layers=(8, 16, 4), steps=6, optimizer=None, schedule=None,
             clip=0.0, sync=None, compression=None, bias=True, loss="mse", seed=3, micro_batches=None):
    """A run configuration on inline data: an mlp (relu) or, with two widths, a linear model."""
    in_dim, out_dim = layers[0], layers[-1]
    cfg = {
        "name": name,
        "model": {"kind": "mlp" if len(layers) > 2 else "linear", "layers": list(layers), "loss": loss,
                  "bias": bias},
        "data": {"kind": "inline", "batch_per_rank": batch,
                 "ranks": inline_data(ranks, micro_batches or 2 * K, batch, in_dim, out_dim, seed,
                                      loss == "cross_entropy")},
        "cluster": {"ranks": ranks, "backend": "host"},
        "training": {"steps": steps, "accumulation_steps": K, "eval_every": 0, "seed": seed,
                     "optimizer": optimizer or {"kind": "sgd", "lr": 0.1}, "clip_grad_norm": clip},
        "sync": sync or {"kind": "allreduce"},
        "report": {"trace": True},
    }
    if schedule:
        cfg["training"]["schedule"] = schedule
    if compression:
        cfg["compression"] = compression
    return cfg


def run_gradsweep(tmp_path, cfg):
    """Runs one configuration through the CLI; returns its run object (config, trace) from report.json, with the
    report's folder under the key "_dir" (the run's saved files are relative to it)."""
    path = tmp_path / f"{cfg['name']}.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / f"out_{cfg['name']}"
    proc = subprocess.run([str(BIN), "run", str(path), "--out", str(out), "--quiet"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    (run,) = report["runs"]
    assert run["disposition"] == "passed", run.get("message")
    run["_dir"] = str(out)
    return run


def replay_max(run, **kw):
    """Largest |torch - gradsweep| per step over every rank and parameter, and the torch learning rates."""
    got, want, lrs = torch_replay.replay(run, base_dir=run.get("_dir", "."), **kw)
    return torch_replay.max_differences(got, want), lrs


def write_safetensors(path, state_dict):
    """A safetensors file of float32 torch tensors, written by hand from the format's documentation (the safetensors
    package is not in Debian 12): 8-byte little-endian header length, the JSON header (name -> dtype, shape,
    data_offsets into the buffer), padded with spaces to a multiple of 8 bytes, then the row-major little-endian
    buffer."""
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in state_dict.items():
        raw = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
