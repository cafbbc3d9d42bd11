"""gradsweep's training samples in Python, bit for bit, for tools/torch_replay.py: the files a run saves beside its
report (report.save_weights: safetensors; report.save_batches: the sample indices, .npz) and the samples those
indices address (docs/parity.md, "Files").

  teacher         regenerated from data.teacher.seed as sim/model/teacher.cpp draws them: Philox4x32-10
                  (Random123's constants) keyed by the seed, counter (purpose, step, rank, index); Box-Muller in double
                  through the C library's log / cos / sin (Python's math module calls them), rounded to float32; the
                  teacher's float32 forward summed in gradsweep's order, tanh through the C library's tanhf (ctypes).
  fashion_mnist   read from the IDX files (data.path, or Debian's dataset-fashion-mnist), pixels / 255 in float32.
  inline          the samples are in the run's configuration (tools/torch_replay.py).
"""
import ctypes
import ctypes.util
import gzip
import json
import math
import os
import struct

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57  # Philox4x32 multipliers (Random123 philox.h)
W0, W1 = 0x9E3779B9, 0xBB67AE85  # its Weyl key increments
MASK = np.uint64(0xFFFFFFFF)
PURPOSE_TEACHER, PURPOSE_TEACHER_DATA = 3, 4  # kernels/rng.h Purpose
FASHION_DIR = "/usr/share/datasets/fashion-mnist"

_libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_libm.tanhf.restype = ctypes.c_float
_libm.tanhf.argtypes = [ctypes.c_float]


def read_safetensors(path):
    """{name: float32 array} of a safetensors file (F32, F64, F16, BF16), as its format documents it: 8-byte
    little-endian header length, the JSON header, then the buffer the data_offsets index."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    buf = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        data = buf[b:end]
        if e["dtype"] == "BF16":
            a = (np.frombuffer(data, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(data, {"F32": "<f4", "F64": "<f8", "F16": "<f2"}[e["dtype"]]).astype(np.float32)
        out[name] = a.reshape(e["shape"])
    return out


def philox(seed, purpose, step, rank, index):
    """Philox4x32-10 of counter (purpose, step, rank, index), key (seed low, seed high): four uint32 arrays. step,
    rank and index broadcast (numpy arrays or ints)."""
    c = np.broadcast_arrays(*[np.asarray(v, dtype=np.uint64) for v in (purpose, step, rank, index)])
    c0, c1, c2, c3 = [x.copy() for x in c]
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    for r in range(10):
        if r:
            k0, k1 = (k0 + np.uint64(W0)) & MASK, (k1 + np.uint64(W1)) & MASK
        p0, p1 = c0 * np.uint64(M0), c2 * np.uint64(M1)
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & MASK, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & MASK
    return c0, c1, c2, c3


def _box_muller(w0, w1):
    """kernels/rng.h normal_pair: two float32 normals from two words, in double through the C library."""
    u1 = (float(w0) + 0.5) * 2.3283064365386963e-10
    u2 = (float(w1) + 0.5) * 2.3283064365386963e-10
    r = math.sqrt(-2.0 * math.log(u1))
    t = 6.283185307179586 * u2
    return np.float32(r * math.cos(t)), np.float32(r * math.sin(t))


def normals(n, seed, purpose, step, rank):
    """kernels/rng.h fill_normal: n float32 normals, element i from draw i // 4 (words 0, 1 and 2, 3 as pairs)."""
    draws = (n + 3) // 4
    w = philox(seed, purpose, step, rank, np.arange(draws))
    out = np.empty(4 * draws, np.float32)
    for d in range(draws):
        out[4 * d], out[4 * d + 1] = _box_muller(int(w[0][d]), int(w[1][d]))
        out[4 * d + 2], out[4 * d + 3] = _box_muller(int(w[2][d]), int(w[3][d]))
    return out[:n]


class Teacher:
    """The `teacher` dataset of a run configuration's data.teacher (sim/model/teacher.cpp), training samples only."""

    def __init__(self, t):
        self.t = t
        self.seed, i, h, o = t["seed"], t["in_dim"], t["hidden"], t["out_dim"]
        s1, s2 = np.float32(1.0 / math.sqrt(i)), np.float32(1.0 / math.sqrt(h))
        self.w1 = (normals(h * i, self.seed, PURPOSE_TEACHER, 0, 0) * s1).reshape(h, i)  # W1[h][i]
        self.w2 = (normals(o * h, self.seed, PURPOSE_TEACHER, 1, 0) * s2).reshape(o, h)  # W2[o][h]
        self.classification = t["task"] == "classification"

    def sample(self, index):
        """(x float32 [in_dim], target: int label or float32 [out_dim]) of training sample `index`."""
        t = self.t
        x = normals(t["in_dim"], self.seed, PURPOSE_TEACHER_DATA, index, 0)
        h = np.zeros(t["hidden"], np.float32)
        for k in range(t["in_dim"]):  # h_j = sum over k of W1[j][k] x_k, k = 0, 1, ... (one rounding per op)
            h = h + self.w1[:, k] * x[k]
        h = np.array([_libm.tanhf(float(v)) for v in h], np.float32)
        f = np.zeros(t["out_dim"], np.float32)
        for j in range(t["hidden"]):
            f = f + self.w2[:, j] * h[j]
        if self.classification:
            label = int(np.argmax(f))  # the lowest index on ties, as gradsweep's strict comparison
            w = philox(self.seed, PURPOSE_TEACHER_DATA, index, 1, 0)
            u = (np.float32(int(w[0]) >> 9) + np.float32(0.5)) * np.float32(1.1920929e-7)
            if float(u) < t["noise"]:
                shift = (int(w[1]) * (t["out_dim"] - 1)) >> 32
                label = (label + 1 + shift) % t["out_dim"]
            return x, label
        noise = normals(t["out_dim"], self.seed, PURPOSE_TEACHER_DATA, index, 1)
        y = (f.astype(np.float64) + t["noise"] * noise.astype(np.float64)).astype(np.float32)
        return x, y


def _idx(path, magic):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    got, = struct.unpack(">I", raw[:4])
    if got != magic:
        raise ValueError(f"{path}: IDX magic {got}, expected {magic}")
    dims = struct.unpack(f">{magic & 0xFF}I", raw[4:4 + 4 * (magic & 0xFF)])
    return np.frombuffer(raw[4 + 4 * len(dims):], np.uint8).reshape(dims)


class FashionMnist:
    """The training split of Fashion-MNIST as gradsweep decodes it (pixels / 255 in float32, integer labels)."""

    def __init__(self, data):
        folder = data.get("path") or FASHION_DIR
        self.images = _idx(os.path.join(folder, "train-images-idx3-ubyte.gz"), 2051).reshape(-1, 784)
        self.labels = _idx(os.path.join(folder, "train-labels-idx1-ubyte.gz"), 2049)
        self.classification = True

    def sample(self, index):
        return self.images[index].astype(np.float32) / np.float32(255.0), int(self.labels[index])


def dataset(cfg):
    """The dataset of a run configuration whose samples this module regenerates, or None (inline, none)."""
    kind = cfg["data"]["kind"]
    if kind == "teacher":
        return Teacher(cfg["data"]["teacher"])
    if kind == "fashion_mnist":
        return FashionMnist(cfg["data"])
    return None


def micro_batches(ds, indices, rank):
    """Rank `rank`'s micro-batches of every step from the saved indices [steps, ranks, K, b]: a list of steps x K
    (x float32 [b, in], y float32 [b, out] or int64 labels [b]), in step-major order."""
    out = {}
    batches = []
    for t in range(indices.shape[0]):
        for k in range(indices.shape[2]):
            xs, ys = [], []
            for i in indices[t, rank, k]:
                i = int(i)
                if i not in out:
                    out[i] = ds.sample(i)
                xs.append(out[i][0])
                ys.append(out[i][1])
            y = np.array(ys, np.int64) if ds.classification else np.stack(ys).astype(np.float32)
            batches.append((np.stack(xs).astype(np.float32), y))
    return batches
