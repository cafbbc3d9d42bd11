#!/usr/bin/env python3
"""What PyTorch's autograd keeps for the backward of one transformer block: the independent reference for the
activation formulas of the GPU memory estimate (sim/model/transformer_preset.cpp, docs/memory.md).

Builds one GPT-2 block or one LLaMA block in eager PyTorch at the given shape and dtype, runs its forward in training
mode under torch.autograd.graph.saved_tensors_hooks, and prints the bytes of the distinct storages autograd saved for
the backward (parameters and buffers left out: they are model states, not activations), with the part that is the
norms' per-token statistics (mean / rstd) shown apart. Nothing is trained; only shapes matter.

    python3 tools/torch_activation_memory.py --arch gpt2 --hidden 768 --heads 12 --ffn 3072 --seq 64 --batch 1 \
        --dtype fp32 [--json]

The blocks are the models' published structure as eager PyTorch runs it: GPT-2 (LayerNorm, fused QKV projection,
softmax attention with dropout 0.1 on the probabilities, the projection and the MLP output, tanh GELU as one op);
LLaMA (RMSNorm, separate Q/K/V projections, rotary embeddings from cached cos/sin, softmax attention, SwiGLU MLP). The
norms are one op each (a fused kernel saving its input and the per-token statistic, as Megatron-LM, Transformer Engine
and apex use); Hugging Face's Python-level RMSNorm and NewGELU save more intermediates than that.
"""
import argparse
import json
import math
import sys

import torch
import torch.nn.functional as F
from torch import nn


class FusedRmsNorm(torch.autograd.Function):
    """RMSNorm as one op: y = x / rms(x) * w, saving x and the fp32 per-token 1 / rms."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (x.float() * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad):  # pragma: no cover - the tool never runs a backward
        raise NotImplementedError


class FusedLayerNorm(nn.LayerNorm):
    """nn.LayerNorm (native_layer_norm saves its input, mean and rstd)."""


def dropout(x, p):
    """Dropout as on a GPU: torch.native_dropout keeps a 1-byte mask (CPU's F.dropout multiplies by a mask of the
    input's dtype instead)."""
    return torch.native_dropout(x, p, True)[0]


class Gpt2Block(nn.Module):
    def __init__(self, hidden, heads, ffn, seq, dropout=0.1):
        super().__init__()
        self.heads, self.p = heads, dropout
        self.ln1, self.ln2 = FusedLayerNorm(hidden), FusedLayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc, self.out = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
        self.register_buffer("future", torch.ones(seq, seq, dtype=torch.bool).triu(1))

    def forward(self, x):
        b, s, h = x.shape
        d = h // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, d).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        att = dropout(F.softmax(att.masked_fill(self.future[:s, :s], float("-inf")), dim=-1), self.p)
        y = (att @ v).transpose(1, 2).contiguous().view(b, s, h)
        x = x + dropout(self.proj(y), self.p)
        z = self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x + dropout(z, self.p)


class LlamaBlock(nn.Module):
    def __init__(self, hidden, heads, ffn, seq):
        super().__init__()
        self.heads = heads
        d = hidden // heads
        self.w1, self.w2 = nn.Parameter(torch.ones(hidden)), nn.Parameter(torch.ones(hidden))
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(hidden, ffn, bias=False), nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        freqs = torch.outer(torch.arange(seq).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())
        self.register_buffer("future", torch.ones(seq, seq, dtype=torch.bool).triu(1))

    @staticmethod
    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, x):
        b, s, h = x.shape
        d = h // self.heads
        y = FusedRmsNorm.apply(x, self.w1, 1e-6)
        q, k, v = (lin(y).view(b, s, self.heads, d).transpose(1, 2) for lin in (self.q, self.k, self.v))
        cos, sin = self.cos[:s].to(x.dtype), self.sin[:s].to(x.dtype)
        q = q * cos + self.rotate_half(q) * sin
        k = k * cos + self.rotate_half(k) * sin
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        att = F.softmax(att.masked_fill(self.future[:s, :s], float("-inf")), dim=-1)
        x = x + self.o((att @ v).transpose(1, 2).contiguous().view(b, s, h))
        z = FusedRmsNorm.apply(x, self.w2, 1e-6)
        return x + self.down(F.silu(self.gate(z)) * self.up(z))


def saved_bytes(block, x):
    """(bytes of the distinct storages saved for backward, of which the per-token norm statistics), leaving out the
    block's parameters and buffers (and cos / sin casts of buffers)."""
    skip = {t.data_ptr() for t in list(block.parameters()) + list(block.buffers())}
    storages = {}

    def pack(t):
        ptr = t.storage().data_ptr()
        if ptr not in skip and ptr != 0 and t.numel() > 1:  # not the 0-d scalars of a multiply by a constant
            nbytes = t.storage().size() * t.element_size()
            storages[ptr] = (nbytes, tuple(t.shape), t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x)
    b, s, _ = x.shape
    # Per-token statistics: tensors of b * s values (LayerNorm's mean and rstd, RMSNorm's rstd).
    stats = sum(n for n, shape, _ in storages.values() if math.prod(shape) == b * s)
    # cos / sin cast to the dtype are buffers too (not activations): s * head_dim values each.
    d = x.shape[2] // getattr(block, "heads", 1)
    buffers = sum(n for n, shape, _ in storages.values() if tuple(shape) == (s, d))
    total = sum(n for n, _, _ in storages.values())
    return total - buffers, stats


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", choices=["gpt2", "llama"], required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--ffn", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    dtype = torch.float32 if a.dtype == "fp32" else torch.bfloat16
    cls = Gpt2Block if a.arch == "gpt2" else LlamaBlock
    with torch.no_grad():
        block = cls(a.hidden, a.heads, a.ffn, a.seq).to(dtype)
    block.train()
    x = torch.randn(a.batch, a.seq, a.hidden, dtype=dtype, requires_grad=True)
    total, stats = saved_bytes(block, x)
    out = {"arch": a.arch, "hidden": a.hidden, "heads": a.heads, "ffn": a.ffn, "seq": a.seq, "batch": a.batch,
           "dtype": a.dtype, "saved_bytes": total, "norm_statistics_bytes": stats,
           "torch": torch.__version__}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{a.arch} block h={a.hidden} a={a.heads} f={a.ffn} s={a.seq} b={a.batch} {a.dtype}: autograd saves "
              f"{total} bytes ({stats} of them the norms' per-token statistics); torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
