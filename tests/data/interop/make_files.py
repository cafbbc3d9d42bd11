#!/usr/bin/env python3
"""Writes the tensor files tests/unit/test_tensor_file.cpp reads, with NumPy's own writers (np.savez, stored entries;
np.savez_compressed, deflated) and a safetensors file from PyTorch tensors (the safetensors package is not in
Debian 12: the format is written here by hand, as its documentation gives it: 8-byte little-endian header length,
the JSON header padded with spaces to a multiple of 8 bytes, then the buffer). Run from anywhere:

    python3 tests/data/interop/make_files.py

The values are formulas the C++ test recomputes:
  w   float32 [2, 3]   (i - 2.5) * 0.25 for i = 0..5
  b   float32 [2]      [1e-3, -7.0], stored big-endian ('>f4') in the .npz files
  d   float64 [2]      [0.1, 1/3] (read as their nearest float32)
  h   float16 [2]      [0.5, -65504.0]
  bf  bfloat16 [3]     [1.0, -0.5, 3.140625] (safetensors only; NumPy has no bfloat16)
"""
import json
import os
import struct

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def arrays():
    return {
        "w": ((np.arange(6, dtype=np.float32) - 2.5) * 0.25).reshape(2, 3),
        "b": np.array([1e-3, -7.0], dtype=">f4"),
        "d": np.array([0.1, 1.0 / 3.0], dtype=np.float64),
        "h": np.array([0.5, -65504.0], dtype=np.float16),
    }


def write_safetensors(path, tensors):
    """tensors: name -> torch tensor (contiguous). The dtype names of the format: F32, F64, F16, BF16."""
    names = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16"}
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes() if t.dtype != torch.bfloat16 else \
            t.contiguous().view(torch.int16).numpy().astype("<i2").tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    a = arrays()
    np.savez(os.path.join(HERE, "numpy_stored.npz"), **a)
    np.savez_compressed(os.path.join(HERE, "numpy_deflated.npz"), **a)
    tensors = {k: torch.from_numpy(v.astype(v.dtype.newbyteorder("="))) for k, v in a.items()}
    tensors["bf"] = torch.tensor([1.0, -0.5, 3.140625], dtype=torch.bfloat16)
    write_safetensors(os.path.join(HERE, "torch.safetensors"), tensors)


if __name__ == "__main__":
    main()
