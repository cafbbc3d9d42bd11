"""report.save_weights and report.save_batches (docs/parity.md, "Files"): the files appear beside the report, are
named in it relative to its folder, hold what the run used (the trace's parameters; the sampling rule of
docs/design.md / sim/model/dataset.h recomputed here), and round-trip: a run started with model.init.from on the
saved initial file has the same initial trace, one started from the final file starts where the first ended."""
import json
import os
import struct
import sys
import zipfile

import numpy as np
import pytest

from test_cli import BIN, REPO, SCHEMA, run, scenario, write

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} is not built")


def read_safetensors(path):
    """A reader written from the format's documentation (independent of gradsweep's and of tools/replay_data.py)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    buf = raw[8 + n:]
    return {k: np.frombuffer(buf[v["data_offsets"][0]:v["data_offsets"][1]], "<f4").reshape(v["shape"])
            for k, v in header.items()}, header, meta


def sweep(tmp_path, name, **report):
    s = scenario(name=name, steps=4, axes={})
    s["model"]["layers"] = [16, 8, 4]
    s["training"]["accumulation_steps"] = 2
    s["data"]["shuffle"] = False  # the indices are then the sampling rule's positions, computed below
    s["report"] = {"trace": True, **report}
    out = tmp_path / f"out_{name}"
    p = run("run", write(tmp_path, s, f"{name}.json"), "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "report.json").read_text())
    return out, report, report["runs"][0]


def test_saved_files_are_named_in_the_report_and_hold_what_the_run_used(tmp_path):
    out, report, r = sweep(tmp_path, "files", save_weights="both", save_batches=True)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(report, SCHEMA)
    w, b = r["weights"], r["batches"]
    assert w["initial"] == f"weights/{r['id']}.initial.safetensors" and w["final"] == f"weights/{r['id']}.final.safetensors"
    assert w["final_step"] == 4 and b["file"] == f"batches/{r['id']}.npz"
    tensors, header, meta = read_safetensors(out / w["initial"])
    # torch's nn.Sequential names and nn.Linear shapes, in the flat buffer's order.
    assert list(header) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert [tuple(t.shape) for t in tensors.values()] == [(8, 16), (8,), (4, 8), (4,)]
    assert meta["format"] == "pt" and meta["run_id"] == r["id"] and meta["step"] == "0"
    flat = np.concatenate([t.reshape(-1) for t in tensors.values()])
    assert np.array_equal(flat, np.array(r["trace"]["initial"], np.float32))
    final, _, meta = read_safetensors(out / w["final"])
    assert meta["step"] == "4"
    assert np.array_equal(np.concatenate([t.reshape(-1) for t in final.values()]),
                          np.array(r["trace"]["params"][-1][0], np.float32))
    # The batches: np.load reads the archive; without shuffling, step t's micro-batch k of rank r is positions
    # t*G + (k*N + r)*b ... + b - 1 of the training set (G = N*K*b; dataset.h).
    assert zipfile.ZipFile(out / b["file"]).namelist() == ["indices.npy"]
    idx = np.load(out / b["file"])["indices"]
    N, K, B = 2, 2, 8
    assert idx.dtype == np.int32 and list(idx.shape) == b["shape"] == [4, N, K, B]
    want = np.array([[[[t * N * K * B + (k * N + rank) * B + i for i in range(B)] for k in range(K)]
                      for rank in range(N)] for t in range(4)])
    assert np.array_equal(idx, want)


def test_save_weights_then_init_from_round_trips(tmp_path):
    out, _, first = sweep(tmp_path, "first", save_weights="both")
    assert first["batches"] is None
    s = scenario(name="again", steps=2, axes={})
    s["model"]["layers"] = [16, 8, 4]
    s["report"] = {"trace": True}
    (tmp_path / "scen").mkdir()
    cases = (("initial", "file", first["trace"]["initial"]), ("final", "set", first["trace"]["params"][-1][0]),
             ("final", "set_section", first["trace"]["params"][-1][0]))
    for which, how, expect in cases:
        o = tmp_path / f"out_again_{which}_{how}"
        if how == "file":  # in the file, relative to the file's folder
            s["model"]["init"] = {"from": "../out_first/" + first["weights"][which]}
            p = run("run", write(tmp_path / "scen", s, "again.json"), "--out", o, "--quiet")
        else:  # --set, relative to the current folder: the field, or the section holding it as an object
            s["model"].pop("init", None)
            rel = "out_first/" + first["weights"][which]
            value = f"model.init.from={rel}" if how == "set" else 'model.init={"from": "%s"}' % rel
            p = run("run", write(tmp_path / "scen", s, "again.json"), "--out", o, "--quiet", "--set", value,
                    cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        again = json.loads((o / "report.json").read_text())["runs"][0]
        assert again["config"]["model"]["init"]["from"] == str(out / first["weights"][which])
        assert again["trace"]["initial"] == expect, which  # identical numbers


def test_bad_files_and_settings_are_refused_before_any_run(tmp_path):
    s = scenario(name="bad", steps=2, axes={})
    (tmp_path / "w.npz").write_bytes(b"PK\x03\x04 cut")
    s["model"]["init"] = {"from": "w.npz"}
    s["report"] = {"save_batches": True}
    s["data"]["kind"] = "teacher"
    p = run("validate", write(tmp_path, s))
    assert p.returncode == 2
    assert f"model.init.from: {tmp_path}/w.npz: not a zip archive" in p.stderr, p.stderr
    s["model"]["init"] = {"from": "missing.safetensors"}
    s["training"]["mode"] = "timing"
    p = run("validate", write(tmp_path, s))
    assert p.returncode == 2 and "report.save_batches: timing-only runs draw no batches" in p.stderr, p.stderr
    s = scenario(name="big", steps=100000, axes={})
    s["report"] = {"save_batches": True}
    p = run("validate", write(tmp_path, s))
    assert p.returncode == 0, p.stderr  # 100000 x 2 x 1 x 8 = 1.6e6 indices: within the limit
    s["training"]["steps"] = 2000000
    p = run("validate", write(tmp_path, s))
    # 2e6 steps x 2 ranks x 1 x 8 = 3.2e7 indices, past the 16,777,216 limit: at most 1048576 steps.
    assert p.returncode == 2 and "report.save_batches: the file would hold 32000000 indices" in p.stderr, p.stderr
    assert "at most 1048576 steps" in p.stderr


def test_a_trace_above_10000_parameters_on_request_within_its_size_limit(tmp_path):
    s = scenario(name="wide", steps=2, axes={})
    s["model"]["layers"] = [16, 1024, 4]  # 16*1024 + 1024 + 1024*4 + 4 = 21508 parameters
    s["report"] = {"trace": True}
    n, ranks = 21508, 2
    p = run("validate", write(tmp_path, s))
    mib = round(3 * ranks * n * 28 / 2**20)  # (steps + 1) x ranks x parameters numbers at about 28 bytes each
    assert p.returncode == 2 and (f"report.trace: trace is refused above 10000 parameters; this model has {n} "
                                  f"(report.trace_max_params {n} takes it: a trace of about {mib} MiB of report for "
                                  f"2 steps x 2 ranks)") in p.stderr, p.stderr
    s["report"]["trace_max_params"] = n
    out = tmp_path / "out"
    p = run("run", write(tmp_path, s), "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    r = json.loads((out / "report.json").read_text())["runs"][0]
    assert len(r["trace"]["initial"]) == n and len(r["trace"]["params"]) == 2 and len(r["trace"]["params"][1][1]) == n
    s["training"]["steps"] = 1000  # 1001 x 2 x 21508 x 28 bytes: past 256 MiB
    p = run("validate", write(tmp_path, s))
    most = int(2**28 / 28 / (ranks * n)) - 1
    assert p.returncode == 2 and f"more than the limit of 256 MiB: at most {most} steps of this run" in p.stderr, p.stderr
    # Past both limits the refusal names the way that passes (the parameter limit and fewer steps), not the parameter
    # limit alone, which the size limit would refuse next.
    del s["report"]["trace_max_params"]
    p = run("validate", write(tmp_path, s))
    mib = round(1001 * ranks * n * 28 / 2**20)
    assert p.returncode == 2 and (f"(report.trace_max_params {n} with training.steps at most {most} takes it: the "
                                  f"trace of 1000 steps would be about {mib} MiB of report, more than the limit of "
                                  f"256 MiB)") in p.stderr.replace("\n", " "), p.stderr


def test_save_batches_is_refused_where_there_is_no_index_array(tmp_path):
    s = scenario(name="inl", steps=2, axes={})
    s["model"]["layers"] = [2, 2]
    s["model"]["kind"] = "linear"
    s["model"]["loss"] = "mse"
    s["data"] = {"kind": "inline", "batch_per_rank": 1, "ranks": [[{"x": [[1, 2]], "y": [[0, 1]]}]] * 2}
    s["training"].pop("target")
    s["report"] = {"save_batches": True}
    p = run("validate", write(tmp_path, s))
    assert p.returncode == 2 and ('report.save_batches: the indices are of an indexed training set (data.kind '
                                  'fashion_mnist or teacher); data.kind "inline" has none') in p.stderr, p.stderr
    s = scenario(name="ssp", steps=2, axes={})
    s["sync"] = {"kind": "parameter_server", "staleness": 1}
    s["report"] = {"save_batches": True}
    p = run("validate", write(tmp_path, s))
    assert p.returncode == 2 and "report.save_batches: SSP and asynchronous workers" in p.stderr, p.stderr
    s["sync"]["staleness"] = 0  # BSP: every worker takes every step
    p = run("validate", write(tmp_path, s))
    assert p.returncode == 0, p.stderr


def test_a_file_without_the_models_tensors_gets_one_short_message(tmp_path):
    """A deep MLP (40 layers, 80 tensors) started from a file whose only tensor is "x": one problem at model.init.from
    naming the file, the first problems, how many more, and the model's first tensors with their count; the whole
    list of 80 names made it about 2,000 characters."""
    np.savez(tmp_path / "x.npz", x=np.zeros(3, dtype=np.float32))
    s = scenario(name="deep", steps=2, axes={})
    s["model"] = {"kind": "mlp", "layers": [4] * 41, "loss": "cross_entropy", "init": {"from": "x.npz"}}
    s["data"]["teacher"].update(in_dim=4, out_dim=4)
    p = run("validate", write(tmp_path, s))
    assert p.returncode == 2, p.stderr
    problems = [t for t in p.stderr.splitlines() if ": model.init.from: " in t]
    assert len(problems) == 1 and "1 problem; nothing was run" in p.stderr, p.stderr
    text = problems[0]
    assert text.startswith(f"{tmp_path}/s.json: model.init.from: {tmp_path}/x.npz: "), text
    assert 'tensor "0.weight" (shape [4, 4]) is missing' in text and "; and 75 more" in text, text
    assert "the model's tensors are 0.weight [4, 4], 0.bias [4], 2.weight [4, 4]" in text, text
    assert "(80 tensors in all)" in text and len(text) < 800, (len(text), text)


def test_the_report_names_the_blas_kernel_the_gemms_ran_on(tmp_path):
    # OpenBLAS reads OPENBLAS_CORETYPE when it loads, so the kernel named in the report is the one asked for, not the
    # one this CPU would get by default (Haswell runs on every x86-64 CPU with AVX2); the config names the same core.
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["OPENBLAS_CORETYPE"] = "Haswell"
    out = tmp_path / "out"
    p = run("run", write(tmp_path, scenario(steps=2, axes={})), "--out", out, "--quiet", env=env)
    assert p.returncode == 0, p.stderr
    blas = json.loads((out / "report.json").read_text())["context"]["blas"]
    assert blas["core"] == "Haswell", blas
    assert blas["config"].startswith("OpenBLAS "), blas
