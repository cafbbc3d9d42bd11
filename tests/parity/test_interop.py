"""Files shared with PyTorch (docs/parity.md, "Files"): a gradsweep run started from a safetensors file that PyTorch
wrote (by hand, from the format's documentation) trains as PyTorch does from the same tensors, and a run on the
teacher dataset is replayed in PyTorch from its saved initial weights and saved batches alone (no inline data, no
trace of the initial parameters): the samples are regenerated in Python from the seed (tools/replay_data.py)."""
import json
import os

import numpy as np
import pytest

from parity_lib import inline_data, replay_max, run_gradsweep, torch, torch_replay, write_safetensors


@pytest.mark.parametrize("fmt", ["safetensors", "npz"])
def test_a_run_starts_from_torchs_state_dict_file_and_its_first_steps_match_torch(tmp_path, fmt):
    torch.manual_seed(11)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    if fmt == "safetensors":
        write_safetensors(tmp_path / "init.safetensors", model.state_dict())
    else:  # NumPy's own writer: np.savez of the state_dict's arrays
        np.savez(tmp_path / "init.npz", **{k: v.detach().numpy() for k, v in model.state_dict().items()})
    cfg = {
        "name": "from_torch",
        # A relative path: taken from the scenario file's folder (run_gradsweep writes it into tmp_path).
        "model": {"kind": "mlp", "layers": [8, 16, 4], "loss": "mse", "init": {"from": f"init.{fmt}"}},
        "data": {"kind": "inline", "batch_per_rank": 8, "ranks": inline_data(2, 2, 8, 8, 4, seed=5)},
        "cluster": {"ranks": 2, "backend": "host"},
        "training": {"steps": 3, "eval_every": 0, "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9}},
        "report": {"trace": True},
    }
    run = run_gradsweep(tmp_path, cfg)
    assert run["config"]["model"]["init"]["from"] == str(tmp_path / f"init.{fmt}")
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    assert np.array_equal(np.array(run["trace"]["initial"], np.float32), flat)  # bit for bit
    diffs, _ = replay_max(run)  # torch from its own state_dict (the trace's initial), the run's batches
    assert diffs[0] == 0.0 and diffs.max() == 0.0, diffs


def test_teacher_run_replays_from_saved_weights_and_batches(tmp_path):
    # Regression teacher (mse: bit-level), shuffled, 2 ranks x K 2 x b 8, more steps than one epoch of 64 samples:
    # the saved indices cross an epoch boundary (a new permutation).
    cfg = {
        "name": "teacher_files",
        "model": {"kind": "mlp", "layers": [6, 12, 3], "loss": "mse"},
        "data": {"kind": "teacher", "batch_per_rank": 8,
                 "teacher": {"task": "regression", "in_dim": 6, "hidden": 10, "out_dim": 3, "noise": 0.1,
                             "train_samples": 64, "eval_samples": 8, "seed": 77}},
        "cluster": {"ranks": 2, "backend": "host"},
        "training": {"steps": 5, "accumulation_steps": 2, "eval_every": 0, "seed": 4,
                     "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9}},
        "report": {"trace": True, "save_weights": "initial", "save_batches": True},
    }
    run = run_gradsweep(tmp_path, cfg)
    batches = np.load(f"{run['_dir']}/{run['batches']['file']}")["indices"]
    assert batches.dtype == np.int32 and batches.shape == (5, 2, 2, 8)
    # Each global batch of 32 is 32 distinct samples; steps 0-1 are epoch 0's first 64 positions, a permutation.
    assert all(len(set(batches[t].reshape(-1).tolist())) == 32 for t in range(5))
    assert sorted(batches[:2].reshape(-1).tolist()) == list(range(64))
    # The replay takes the initial parameters from the saved file and the samples from the indices, not the trace.
    run_without_initial = json.loads(json.dumps(run))
    run_without_initial["trace"]["initial"] = None
    diffs, _ = replay_max(run_without_initial)
    assert diffs.max() == 0.0, diffs


def test_replay_refuses_indexed_data_without_saved_batches():
    cfg = {"model": {"kind": "mlp", "activation": "relu"}, "data": {"kind": "teacher"}, "sync": {"kind": "allreduce"},
           "compression": {"kind": "none"}, "precision": {"mode": "fp32"}, "training": {"pitfall": "none"}}
    why = torch_replay.check_replayable(cfg, {"trace": None})
    assert any("report.save_batches" in w for w in why), why
    assert any("no initial parameters" in w for w in why), why


def test_fashion_mnist_run_replays_from_saved_batches(tmp_path):
    if not os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    # 784-16-10 has 12,730 parameters: a trace above the default 10,000 on request. Cross-entropy: PyTorch's
    # log_softmax rounds its exp/log differently in the last bit (docs/parity.md), so within 1e-6, not bit for bit.
    cfg = {
        "name": "fashion_files",
        "model": {"kind": "mlp", "layers": [784, 16, 10], "loss": "cross_entropy"},
        "data": {"kind": "fashion_mnist", "batch_per_rank": 8, "eval_samples": 100},
        "cluster": {"ranks": 2, "backend": "host"},
        "training": {"steps": 4, "eval_every": 0, "seed": 9, "optimizer": {"kind": "sgd", "lr": 0.1}},
        "report": {"trace": True, "trace_max_params": 13000, "save_weights": "initial", "save_batches": True},
    }
    run = run_gradsweep(tmp_path, cfg)
    diffs, _ = replay_max(run)
    assert diffs.max() <= 1e-6, diffs
    moved = np.abs(np.array(run["trace"]["params"][-1][0]) - np.array(run["trace"]["initial"])).max()
    assert moved > 1e-3, moved  # the comparison is of parameters that moved, not of the initial ones
