"""The live progress line under a pseudo-terminal (python's pty module) of 80 and 40 columns: every refresh fits the
width (so it redraws in place instead of leaving a line behind), keeps i/N, the step, the loss and the ETA of the run
and of the whole sweep, and cuts a long run id in its middle; the lines that stay are wrapped to the width; a --filter that matches no run says how many runs there
are and what their ids look like."""
import fcntl
import json
import os
import re
import select
import struct
import subprocess
import termios
import time

import pytest

from test_cli import BIN, run, scenario, write

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} is not built")

NAME = "a_scenario_with_a_long_name_like_the_strategies"
STEPS = 30


def long_ids(tmp_path):
    doc = scenario(name=NAME, steps=STEPS, axes={"training.optimizer.lr": [0.1, 0.05, 0.02]})
    doc["sweep"] = {"zip": {"training.optimizer.lr": [0.1, 0.05, 0.02],
                            "training.optimizer.momentum": [0.9, 0.8, 0.0]}, "repeats": 1}
    doc["training"]["eval_every"] = 0
    return write(tmp_path, doc)


def run_in_pty(args, columns, timeout=300, command=None, faults="step_delay_ms=50", cwd=None):
    """Runs gradsweep ARGS (or `command`, a whole argv) with stdin/stdout/stderr on a pseudo-terminal `columns` wide
    and $COLUMNS unset (the width is the terminal's); returns (exit status, output)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = dict(os.environ)
    env.pop("GRADSWEEP_TEST_FAULTS", None)
    if faults:
        env["GRADSWEEP_TEST_FAULTS"] = faults
    env.pop("COLUMNS", None)
    argv = [str(a) for a in command] if command is not None else [str(BIN), *map(str, args)]
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
                            cwd=None if cwd is None else str(cwd))
    os.close(slave)
    out, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return code, out.decode("utf-8", "replace")


def frames(output):
    """(frame text, what ends it) for every refresh: the text between "\\r\\033[K" erasures, ended by the next
    erasure ("redraw") or by a newline ("newline")."""
    out = []
    for line in output.replace("\r\n", "\n").split("\n"):
        parts = [p for p in line.split("\r\x1b[K")]
        for k, part in enumerate(parts):
            if part:
                out.append((part, "newline" if k == len(parts) - 1 else "redraw"))
    return out


LIVE = re.compile(r"^\[(\d+)/3\] ")
ETA = re.compile(r"ETA (\d+):(\d\d)(?: \(sweep |/)(\d+):(\d\d)\)?$")


@pytest.mark.parametrize("columns", [80, 40])
def test_the_live_line_fits_the_terminal_and_redraws_in_place(tmp_path, columns):
    path = long_ids(tmp_path)
    code, output = run_in_pty(["run", path, "--out", tmp_path / "out"], columns)
    assert code == 0, output
    live = [(text, end) for text, end in frames(output) if LIVE.match(text) and "ETA" in text]
    finished = [text for text, end in frames(output) if "passed in " in text]
    assert len(finished) == 3, output
    # The lines that stay (the sweep's first line, each finished run, the last line) are wrapped to the width too.
    assert all(len(text) <= columns - 1 for text, _ in frames(output)), [t for t, _ in frames(output)
                                                                        if len(t) > columns - 1]
    assert len(live) >= 6, output  # 30 steps of 50 ms each, refreshed every 0.2 s
    ids = [f"{NAME}.lr=0.1.momentum=0.9.r0", f"{NAME}.lr=0.05.momentum=0.8.r0", f"{NAME}.lr=0.02.momentum=0.0.r0"]
    assert all(len(i) > 60 for i in ids)  # longer than what an 80-column line leaves beside i/N, step, loss and ETA
    for text, end in live:
        assert len(text) <= columns - 1, (columns, text)
        assert end == "redraw", f"a live line was left behind: {text!r}"
        run_index = int(LIVE.match(text).group(1))
        assert re.search(rf" (step )?\d+/{STEPS} loss ", text), text
        eta = ETA.search(text)
        assert eta, text
        run_s = int(eta.group(1)) * 60 + int(eta.group(2))
        sweep_s = int(eta.group(3)) * 60 + int(eta.group(4))
        assert sweep_s >= run_s, text
        if run_index == 1:  # two more runs of about 1.5 s each to come
            assert sweep_s >= run_s + 2, text
        if columns == 80:  # the id without the sweep's name (which the header prints): the swept values whole
            short = ids[run_index - 1][len(NAME) + 1:]
            assert LIVE.sub("", text).startswith(short + " "), text


def test_a_filter_that_matches_no_run_says_what_the_ids_look_like(tmp_path):
    path = long_ids(tmp_path)
    p = run("run", path, "--filter", "lr=0.5", "--out", tmp_path / "out")
    assert p.returncode == 2, p.stderr
    assert f'--filter "lr=0.5": 0 of 3 runs match; ids look like {NAME}.lr=0.1.momentum=0.9.r0, ' in p.stderr
    assert "a --set on a swept path changes the ids" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


def test_a_skipped_timing_only_run_says_why_in_one_clause(tmp_path):
    """A run that does not fit one GPU is skipped before it starts: its line is "[i/N] ID skipped: why", one clause,
    with no time ("in 0.0s" for a run that never started), no timing-only note ("no loss or accuracy") and no reason
    in parentheses after it; the run that fits still prints its time and modeled step."""
    doc = {"name": "llm", "model": {"kind": "llama-7b"}, "data": {"kind": "none", "batch_per_rank": 1},
           "cluster": {"ranks": 8, "hardware": "h100-sxm-8"},
           "training": {"mode": "timing", "steps": 2, "eval_every": 0, "optimizer": {"kind": "adamw", "lr": 1e-4}},
           "precision": {"mode": "bf16_mixed"},
           # 121.3 GB of weights, gradients and AdamW states do not fit an 80 GB H100; fp16_pure with checkpointing
           # fits an H200's 141 GB.
           "sweep": {"zip": {"cluster.hardware": ["h100-sxm-8", "h200-sxm-8"],
                             "precision.mode": ["bf16_mixed", "fp16_pure"],
                             "training.activation_checkpointing": [False, True]}}}
    out = tmp_path / "out"
    p = run("run", write(tmp_path, doc), "--out", out)
    assert p.returncode == 0, p.stderr
    skipped, passed = json.loads((out / "report.json").read_text())["runs"]
    assert skipped["disposition"] == "skipped" and passed["disposition"] == "passed"
    lines = p.stderr.splitlines()
    assert f"[1/2] {skipped['id']} skipped: {skipped['message']}" in lines, p.stderr
    assert skipped["message"].startswith('does not fit one GPU of hardware profile "h100-sxm-8"'), skipped["message"]
    first = next(t for t in lines if t.startswith("[1/2] "))
    assert " in 0.0s" not in first and "timing-only" not in first and ") (" not in first, first
    second = next(t for t in lines if t.startswith("[2/2] "))
    assert re.match(rf"\[2/2\] {re.escape(passed['id'])} passed in \d+\.\ds: modeled step ", second), second
