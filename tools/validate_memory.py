#!/usr/bin/env python3
"""Checks gradsweep's GPU memory estimate (docs/memory.md) against published figures and against what PyTorch's
autograd saves, and prints the comparison as a Markdown table (the one in docs/memory.md).

    tools/validate_memory.py [--bin build/gradsweep] [--no-torch] [--torch-python /usr/bin/python3]

Each row runs one timing-only run of a transformer preset (one step, one rank: no buckets) and reads its report's
`memory.gpu`; the expected value is a published figure (its source in the row) or, for the activation rows, the
bytes PyTorch saves for one block of the same shape (tools/torch_activation_memory.py; needs PyTorch, skipped with
--no-torch). Exit status 1 when a row that should match (tolerance in the row) does not.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import report_lib as rl  # noqa: E402
LLAMA_7B = 6738415616   # parameters (Touvron et al. 2023; Hugging Face's count of LLaMA-7B)
GPT2_XL = 1557611200    # parameters (Hugging Face gpt2-xl)
GPT2_XL_LARGEST = 50257 * 1600  # its largest module's parameters: the (tied) token embedding
SHAPES = {"gpt2-small": (768, 12, 3072, "gpt2"), "gpt2-xl": (1600, 25, 6400, "gpt2"), "llama-7b": (4096, 32, 11008, "llama")}


def estimate(binary, work, model, mode="bf16_mixed", optimizer="adamw", momentum=None, seq=None, batch=1,
             checkpointing=False):
    """The memory.gpu object of one timing-only run on h100-sxm-8."""
    opt = {"kind": optimizer, "lr": 1e-4}
    if momentum is not None:
        opt["momentum"] = momentum
    doc = {"name": "memcheck", "model": {"kind": model}, "data": {"kind": "none", "batch_per_rank": batch},
           "cluster": {"ranks": 1, "hardware": "h100-sxm-8"},
           "training": {"mode": "timing", "steps": 1, "eval_every": 0, "optimizer": opt,
                        "activation_checkpointing": checkpointing},
           "precision": {"mode": mode}}
    if seq is not None:
        doc["model"]["sequence_length"] = seq
    work.mkdir(parents=True, exist_ok=True)
    path = work / "scenario.json"
    path.write_text(json.dumps(doc))
    out = work / "out"
    p = subprocess.run([str(binary), "run", str(path), "--out", str(out), "--quiet"], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"gradsweep failed ({p.returncode}): {p.stderr}")
    run = rl.load_report(out / "report.json")["runs"][0]
    return run["memory"]["gpu"], run


def model_states(gpu):
    return gpu["weights_bytes"] + gpu["master_weights_bytes"] + gpu["gradients_bytes"] + gpu["optimizer_bytes"]


def torch_block(python, arch, h, a, f, seq, dtype):
    p = subprocess.run([python, str(ROOT / "tools" / "torch_activation_memory.py"), "--arch", arch, "--hidden", str(h),
                        "--heads", str(a), "--ffn", str(f), "--seq", str(seq), "--dtype", dtype, "--json"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"torch_activation_memory.py failed: {p.stderr}")
    r = json.loads(p.stdout)
    return r["saved_bytes"] - r["norm_statistics_bytes"], r["torch"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.environ.get("GRADSWEEP_BIN", str(ROOT / "build" / "gradsweep")))
    ap.add_argument("--no-torch", action="store_true", help="leave out the rows measured with PyTorch")
    ap.add_argument("--torch-python", default="/usr/bin/python3", help="a Python with torch (Debian's python3-torch)")
    a = ap.parse_args(argv)
    rows, bad = [], 0

    def row(what, ours, published, source, unit, tol):
        nonlocal bad
        err = (ours - published) / published
        ok = abs(err) <= tol
        bad += 0 if ok else 1
        fmt = (lambda v: f"{v:.2f}") if unit == "B/param" else (lambda v: f"{v / 1e9:.3f}" if unit == "GB" else f"{v / 2**20:.2f}")
        rows.append(f"| {what} | {fmt(ours)} | {fmt(published)} | {unit} | {err * 100:+.1f}% | {source} |")

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # Model states per parameter (Hugging Face, "Model training anatomy": weights 4 (fp32) or 6 (mixed: fp32 and
        # 16-bit copies), gradients 4 ("always kept in fp32"), AdamW 8, SGD with momentum 4).
        hf = "Hugging Face Transformers docs, model memory anatomy"
        for mode, opt, mom, published in [("fp32", "adamw", None, 16), ("bf16_mixed", "adamw", None, 18),
                                           ("fp32", "sgd", 0.9, 12), ("bf16_mixed", "sgd", 0.9, 14)]:
            gpu, _ = estimate(a.bin, work / f"{mode}-{opt}", "llama-7b", mode, opt, mom, seq=16)
            name = f"LLaMA-7B model states, {mode}, {opt}{' momentum' if mom else ''}"
            row(name, model_states(gpu) / LLAMA_7B, published, hf, "B/param", 1e-9)
        gpu, run = estimate(a.bin, work / "issue", "llama-7b", "bf16_mixed", "adamw")
        row("LLaMA-7B bf16 weights, fp32 master and gradients, AdamW: model states", model_states(gpu),
            18 * LLAMA_7B, f"18 bytes per parameter (Hugging Face, as above); the run is {run['disposition']} on "
            "h100-sxm-8", "GB", 1e-9)
        # GPT-2 XL against the ZeRO paper and DeepSpeed's helpers (one GPU: nothing sharded).
        gpu, _ = estimate(a.bin, work / "xl", "gpt2-xl", "bf16_mixed", "adamw", seq=16)
        xl = model_states(gpu)
        row("GPT-2 1.5B mixed-precision Adam: model states", xl / GPT2_XL * 1.5e9, 24e9,
            "ZeRO (Rajbhandari et al. 2020) section 3.1: 16 bytes per parameter, 24 GB for 1.5B (fp16 gradients)",
            "GB", 0.13)
        row("GPT-2 XL (1.56B), one GPU: model states", xl, 4 * GPT2_XL + 16 * GPT2_XL,
            "DeepSpeed estimate_zero2_model_states_mem_needs (stage_1_and_2.py), 1 GPU, no offload: 4n + 16n / GPUs",
            "GB", 0.11)
        row("GPT-2 XL (1.56B), one GPU: model states", xl, 4 * GPT2_XL_LARGEST + 18 * GPT2_XL,
            "DeepSpeed estimate_zero3_model_states_mem_needs (stage3.py), 1 GPU, no offload: 4 x largest layer + 18n "
            "/ GPUs", "GB", 0.02)
        # Activations of one block: Korthikanti et al. 2022 (e = 2, f = 4h).
        kor = "Korthikanti et al. 2022 (arXiv 2205.05198) section 4.1: s b h (34 + 5 a s / h)"
        for model in ("gpt2-small", "gpt2-xl"):
            h, heads, f, _ = SHAPES[model]
            gpu, _ = estimate(a.bin, work / f"act-{model}", model, "bf16_mixed", "adamw", seq=1024)
            row(f"{model} one block, s = 1024, b = 1, 16-bit", gpu["activations"]["per_block_bytes"],
                1024 * h * (34 + 5 * heads * 1024 / h), kor, "MiB", 1e-9)
        h, heads, f, _ = SHAPES["gpt2-xl"]
        gpu, _ = estimate(a.bin, work / "ckpt", "gpt2-xl", "bf16_mixed", "adamw", seq=1024, checkpointing=True)
        row("gpt2-xl checkpoints (activation checkpointing), s = 1024, b = 1", gpu["activations"]["stored_bytes"],
            2 * 1024 * h * 48, "Korthikanti et al. 2022 Table 2, full recomputation: 2 s b h L (the ids, labels and "
            "embedding dropout mask besides)", "MiB", 0.02)
        if not a.no_torch:
            for model, seq, mode, dtype in [("gpt2-small", 256, "bf16_mixed", "bf16"), ("gpt2-xl", 256, "bf16_mixed", "bf16"),
                                            ("llama-7b", 256, "fp32", "fp32"), ("llama-7b", 64, "bf16_mixed", "bf16")]:
                h, heads, f, arch = SHAPES[model]
                gpu, _ = estimate(a.bin, work / f"torch-{model}-{seq}-{mode}", model, mode, "adamw", seq=seq)
                saved, version = torch_block(a.torch_python, arch, h, heads, f, seq, dtype)
                row(f"{model} one block, s = {seq}, b = 1, {dtype}", gpu["activations"]["per_block_bytes"], saved,
                    f"PyTorch {version} autograd, saved tensors of an eager block (tools/torch_activation_memory.py)",
                    "MiB", 1e-9)
    print("| quantity | gradsweep | published | unit | difference | published figure |")
    print("| --- | ---: | ---: | --- | ---: | --- |")
    print("\n".join(rows))
    print(f"\n{len(rows) - bad} of {len(rows)} rows within their tolerance")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
