"""Every line that `gradsweep run` and the quickstart (tools/gradsweep: the sweep, then tools/plot.py on its report)
leave on an 80-column output fits in it: under a pseudo-terminal 80 columns wide and, with the output in a pipe, under
COLUMNS=80. A line fits when it has at most 79 characters (a terminal wraps a line that fills its last column on the
next character). The quickstart's scenario runs with few steps; its ids, header and figure notes are the real ones.
Also: the figure paths print relative to the current folder, as the report's path does; figures that do not apply to
the sweep are not mentioned; the ranks-over-GPUs note is printed once."""
import json
import os
import re
import subprocess
import sys

import pytest

from test_cli import BIN, REPO, scenario, write
from test_progress import frames, run_in_pty

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} is not built")

COLUMNS = 80
QUICKSTART = REPO / "scenarios" / "quickstart.json"
PLOT = REPO / "tools" / "plot.py"
FAST = ["--set", "training.steps=4", "--set", "training.eval_every=2"]
needs_fashion_mnist = pytest.mark.skipif(not os.path.isdir("/usr/share/datasets/fashion-mnist"),
                                         reason="Fashion-MNIST (dataset-fashion-mnist) is not installed")


KEY = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*=")


def id_parts(run_id):
    """A run id's parts: its name, each key=value (a key may be a dotted path: model.kind=), the repeat rN. A part
    starts after a '.' followed by a key and '=' or by the repeat at the end; the dots inside a key start none."""
    parts, start, i = [], 0, 0
    while i < len(run_id):
        if run_id[i] == ".":
            rest = run_id[i + 1:]
            if re.fullmatch(r"r\d+", rest):
                parts.append(run_id[start:i])
                start = i + 1
                break
            m = KEY.match(rest)
            if m:
                parts.append(run_id[start:i])
                start = i + 1
                i += 1 + m.end()
                continue
        i += 1
    parts.append(run_id[start:])
    return parts


def id_forms(run_id):
    """The forms a run id is shown in where it does not fit, longest first, from the documented rule (driver.h,
    fit_progress_line): the id; without the sweep's name (its first part, before the first "key=" part); also without
    its "key=null" parts; its values alone joined by '/'. The last form is the one cut in its middle."""
    parts = id_parts(run_id)
    forms = [run_id]
    if len(parts) > 1 and "=" not in parts[0]:
        parts = parts[1:]
        forms.append(".".join(parts))
    kept = [p for p in parts if not (p.endswith("=null") and len(p) > len("=null"))]
    if not kept:
        return forms
    if kept != parts:
        forms.append(".".join(kept))
    forms.append("/".join(p.split("=", 1)[1] if "=" in p else p for p in kept))
    return forms


def is_shown_form(shown, run_id):
    """shown is one of run_id's forms whole, or the last form's head and tail around "..." (the id's own dots may
    touch the cut's)."""
    forms = id_forms(run_id)
    if shown in forms:
        return True
    cuts = [(shown[:n], shown[n + 3:]) for n in range(len(shown)) if shown.startswith("...", n)]
    return any(forms[-1].startswith(h) and forms[-1].endswith(t) and len(h) + len(t) < len(forms[-1]) for h, t in cuts)


def lines_of(output):
    """The lines a terminal shows at the end: each frame between erasures and newlines (test_progress.frames)."""
    return [text for text, _ in frames(output)]


def too_long(lines):
    return [(len(t), t) for t in lines if len(t) > COLUMNS - 1]


def quickstart_in_pty(tmp_path):
    """The quickstart's two commands, as tools/gradsweep runs them, in tmp_path under an 80-column terminal."""
    code, sweep = run_in_pty(["run", QUICKSTART, "--overwrite", *FAST], COLUMNS, faults=None, cwd=tmp_path)
    assert code == 0, sweep
    code, plot = run_in_pty([], COLUMNS, command=[sys.executable, PLOT, "reports/quickstart/report.json"],
                            faults=None, cwd=tmp_path)
    assert code == 0, plot
    return lines_of(sweep), lines_of(plot)


@needs_fashion_mnist
def test_the_quickstart_fits_an_80_column_terminal(tmp_path):
    sweep, plot = quickstart_in_pty(tmp_path)
    assert not too_long(sweep + plot), too_long(sweep + plot)
    # 12 runs: each one's finished line, with its full id (42 characters fit) and its metrics on the line below, under the id.
    ids = [r["id"] for r in json.loads((tmp_path / "reports/quickstart/report.json").read_text())["runs"]]
    assert len(ids) == 12
    for k, run_id in enumerate(ids, start=1):
        head = [n for n, t in enumerate(sweep) if t.startswith(f"[{k}/12] {run_id} passed in ")]
        assert len(head) == 1, (run_id, sweep)
        indent = " " * len(f"[{k}/12] ")  # under the id
        assert re.fullmatch(indent + r"eval_accuracy 0\.\d{4} eval_loss \S+ train_loss \S+", sweep[head[0] + 1]), sweep
    # The header keeps "12 to run" whole and the report path with its arrow.
    text = "\n".join(sweep)
    assert "12 to run" in text and "-> reports/quickstart/report.json" in text, text
    # Figures: relative paths, like the report's; no note about figures a two-axis sweep without compression,
    # parameter server, modeled clock or cache axis does not have.
    figures = [t for t in plot if t.endswith(".png")]
    assert "reports/quickstart/heatmap_eval_accuracy.png" in figures, plot
    assert all(t.startswith("reports/quickstart/") for t in figures), plot
    assert not [t for t in plot if "not written" in t], plot


@needs_fashion_mnist
def test_the_quickstart_fits_80_columns_in_a_pipe_under_COLUMNS(tmp_path):
    env = dict(os.environ, COLUMNS=str(COLUMNS))
    env.pop("GRADSWEEP_TEST_FAULTS", None)
    sweep = subprocess.run([str(BIN), "run", str(QUICKSTART), "--overwrite", "--filter", "ranks=4", *FAST],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert sweep.returncode == 0, sweep.stderr
    plot = subprocess.run([sys.executable, str(PLOT), "reports/quickstart/report.json"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=600)
    assert plot.returncode == 0, plot.stderr
    lines = (sweep.stderr + plot.stdout + plot.stderr).splitlines()
    assert not too_long(lines), too_long(lines)
    assert len([t for t in lines if re.match(r"\[\d/4\] quickstart\.accumulation_steps=\d\.ranks=4\.r0 passed", t)]) \
        == 4, lines
    # The header (117 characters unwrapped) on two lines, broken between its parts.
    assert lines[:2] == ["gradsweep: 12 runs = 4 [training.accumulation_steps] x 3 [cluster.ranks];",
                         "           4 to run -> reports/quickstart/report.json"], lines


def test_a_pipe_without_COLUMNS_gets_one_line_per_run_with_plain_spaces(tmp_path):
    """Unknown width (a pipe, no $COLUMNS): a finished run is one line as it is, the spaces between a metric's name
    and its value plain spaces (the wrap's no-break marker, 0x1f, was printed raw: 'eval_accuracy\\x1f0.8')."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "GRADSWEEP_TEST_FAULTS")}
    path = write(tmp_path, scenario(steps=4, axes={"training.accumulation_steps": [1, 2]}), "s.json")
    p = subprocess.run([str(BIN), "run", str(path), "--out", str(tmp_path / "out")], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "\x1f" not in p.stderr, repr(p.stderr)
    done = [t for t in p.stderr.splitlines() if re.match(r"\[\d/2\] \S+ passed in ", t)]
    assert len(done) == 2, p.stderr
    assert all(re.search(r": eval_accuracy \d\.\d{4} eval_loss \S+ train_loss \S+$", t) for t in done), done


def test_long_ids_and_a_skip_reason_fit_80_columns(tmp_path):
    """A run id longer than the line drops the sweep's name (printed in the header), as on the live line; a skip's
    reason (long) follows "skipped:" and goes on on the lines below, indented under the id."""
    name = "a_scenario_with_a_long_name_like_the_strategies_of_the_guide"
    doc = scenario(name=name, steps=4, axes={"training.optimizer.lr": [0.1, 0.05]})
    doc["training"]["eval_every"] = 0
    path = write(tmp_path, doc)
    env = dict(os.environ, COLUMNS=str(COLUMNS), GRADSWEEP_MEMORY_AVAILABLE_BYTES="1000")
    p = subprocess.run([str(BIN), "run", str(path), "--out", str(tmp_path / "out")], capture_output=True, text=True,
                       env=env, timeout=300)
    lines = p.stderr.splitlines()
    assert not too_long(lines), too_long(lines)
    run_lines = [n for n, t in enumerate(lines) if re.match(r"\[\d/2\] ", t)]
    assert len(run_lines) == 2, p.stderr
    for n, lr in zip(run_lines, ["0.1", "0.05"]):
        # The whole id does not fit beside "[i/2] " and " skipped:"; without the name it does, whole.
        assert len(f"[1/2] {name}.lr={lr}.r0 skipped:") > COLUMNS - 1
        assert re.match(rf"\[\d/2\] lr={lr}\.r0 skipped: needs an estimated ", lines[n]), lines[n]
        assert lines[n + 1].startswith("      ") and lines[n + 1][6] != " ", p.stderr


def test_cut_ids_keep_the_values_that_tell_runs_apart(tmp_path):
    """scenarios/strategies/onebit_adam.json at 80 columns (timing-only, 2 steps): its 16 ids end in
    "...var_freeze_step=null.local_step_scaler=null.r0", so a middle cut of the whole id printed runs 2 and 3
    (freeze_step 20 and 100) alike. Without the sweep's name and the null parts every run's line is told apart, and
    each shown id is one of its documented forms."""
    out = tmp_path / "out"
    env = dict(os.environ, COLUMNS=str(COLUMNS))
    p = subprocess.run([str(BIN), "run", str(REPO / "scenarios" / "strategies" / "onebit_adam.json"), "--timing-only",
                        "--set", "training.steps=2", "--out", str(out)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert not too_long(lines), too_long(lines)
    ids = [r["id"] for r in json.loads((out / "report.json").read_text())["runs"]]
    assert len(ids) == 16 and len(set(ids)) == 16
    shown = []
    for k, run_id in enumerate(ids, start=1):
        at = [t for t in lines if t.startswith(f"[{k}/16] ")]
        assert len(at) == 1, lines
        shown.append(at[0].split()[1])
        assert is_shown_form(shown[-1], run_id), (shown[-1], run_id)
    assert len(set(shown)) == 16, shown
    # The plain middle cut of the whole id, for the record: it does not tell runs 2 and 3 apart at this width.
    room = 44
    middle = [i[:(room - 2) // 2] + "..." + i[len(i) - (room - 3) // 2:] for i in ids[1:3]]
    assert middle[0] == middle[1], middle


@pytest.mark.parametrize("columns", [80, 120])
def test_ids_of_whole_paths_are_cut_at_their_parts(tmp_path, columns):
    """scenarios/compression_llm.json spells whole paths in its ids (model.kind=, compression.kind=, sync.stage=: two
    swept paths share a last part). Dropping the name drops only "compression_llm.", a null part goes whole
    (sync.stage=null, not "stage=null" leaving "sync."), and every run prints apart at 80 and 120 columns."""
    out = tmp_path / "out"
    env = dict(os.environ, COLUMNS=str(columns))
    p = subprocess.run([str(BIN), "run", str(REPO / "scenarios" / "compression_llm.json"), "--timing-only",
                        "--set", "training.steps=2", "--out", str(out)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert all(len(t) <= columns - 1 for t in lines), [t for t in lines if len(t) > columns - 1]
    ids = [r["id"] for r in json.loads((out / "report.json").read_text())["runs"]]
    assert id_parts(ids[0])[:2] == ["compression_llm", "model.kind=gpt2-xl"], ids[0]
    shown = []
    for k, run_id in enumerate(ids, start=1):
        at = [t for t in lines if t.startswith(f"[{k}/{len(ids)}] ")]
        assert len(at) == 1, lines
        shown.append(at[0].split()[1])
        assert is_shown_form(shown[-1], run_id), (shown[-1], run_id)
        assert not shown[-1].startswith("kind=") and ".sync.r0" not in shown[-1], shown[-1]
    assert len(set(shown)) == len(ids), shown


def test_ranks_over_the_gpus_of_two_profiles_is_noted_once(tmp_path):
    """scenarios/scaling.json sweeps two 8-GPU profiles; with 16 ranks validate and a dry run say so in one note
    naming both profiles (it printed the note once per profile)."""
    scaling = REPO / "scenarios" / "scaling.json"
    profiles = json.loads(scaling.read_text())["sweep"]["axes"]["cluster.hardware"]
    assert len(profiles) == 2
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    for args in (["validate", scaling], ["run", scaling, "--dry-run", "--out", tmp_path / "out"]):
        p = subprocess.run([str(BIN), *map(str, args), "--set", "cluster.ranks=16"], capture_output=True, text=True,
                           env=env, timeout=120)
        assert p.returncode == 0, p.stderr
        notes = [t for t in p.stderr.splitlines() if t.startswith("note: ")]
        assert len(notes) == 1, p.stderr
        files = [f'"{name}" (scenarios/hardware/{name}.json)' for name in sorted(profiles)]
        assert f"16 is more than the 8 GPUs of hardware profiles {files[0]} and {files[1]}: allowed" in notes[0], notes


def long_axes(tmp_path):
    """Four runs over cluster.ranks and a zip of three long paths: the header's second part (86 characters) is longer
    than a line of 80 or 40 columns."""
    doc = scenario(name="hdr", steps=2, axes={"cluster.ranks": [1, 2]})
    doc["training"]["eval_every"] = 0
    doc["sweep"]["zip"] = {"training.optimizer.lr": [0.1, 0.05], "training.optimizer.momentum": [0.9, 0.0],
                           "training.accumulation_steps": [1, 2]}
    return write(tmp_path, doc)


AXES = "2 [cluster.ranks] x 2 [training.optimizer.lr, training.optimizer.momentum, training.accumulation_steps]"
NAMES = ["cluster.ranks", "training.optimizer.lr", "training.optimizer.momentum", "training.accumulation_steps"]


def env_columns(columns):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "GRADSWEEP_TEST_FAULTS")}
    if columns:
        env["COLUMNS"] = str(columns)
    return env


@pytest.mark.parametrize("columns", [80, 40])
def test_the_sweep_header_breaks_between_words_never_inside_a_name(tmp_path, columns):
    """The header wraps to the width with every axis name whole (it was cut inside one: 'training.optimizer.mom' |
    'entum'); its words are those of the one-line header a pipe without COLUMNS gets."""
    path, out = long_axes(tmp_path), "out"  # relative: the report's path fits a line of 40
    p = subprocess.run([str(BIN), "run", str(path), "--out", out], capture_output=True, text=True,
                       env=env_columns(columns), timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    header = lines[:next(n for n, t in enumerate(lines) if t.startswith("[1/4] "))]
    assert len(header) > 1 and all(len(t) <= columns - 1 for t in header), header
    one_line = f"gradsweep: 4 runs = {AXES}; 4 to run -> {out}/report.json"
    assert " ".join(header).split() == one_line.split(), header
    for name in NAMES:
        assert any(name in t for t in header), (name, header)
    # 80 columns: continuation lines under the text after "gradsweep: "; 40: two spaces (11 would leave too little).
    assert all(t.startswith(" " * (11 if columns == 80 else 2)) for t in header[1:]), header
    p = subprocess.run([str(BIN), "run", str(path), "--out", str(tmp_path / "pipe")], capture_output=True, text=True,
                       env=env_columns(None), timeout=300)
    assert p.stderr.splitlines()[0] == f"gradsweep: 4 runs = {AXES}; 4 to run -> {tmp_path}/pipe/report.json"


def dry_run_lines(tmp_path, path):
    """The dry run of long_axes without a width (a pipe, no COLUMNS), as scenarios/README.md describes it: the
    expansion, then "  [i] ID  path=value ..." per run (the last axis fastest), ids by leaf name."""
    lines = [f"4 runs = {AXES}"]
    for i, (ranks, (lr, momentum, acc)) in enumerate((r, z) for r in (1, 2) for z in ((0.1, 0.9, 1), (0.05, 0.0, 2))):
        run_id = f"hdr.ranks={ranks}.lr={lr}.momentum={momentum}.accumulation_steps={acc}.r0"
        lines.append(f"  [{i}] {run_id}  cluster.ranks={ranks} training.optimizer.lr={lr} "
                     f"training.optimizer.momentum={momentum} training.accumulation_steps={acc}")
    return lines


@pytest.mark.parametrize("columns", [80, 40, None])
def test_validate_and_the_dry_run_honor_COLUMNS(tmp_path, columns):
    """validate and --dry-run print to stdout at the output's width as the run's own lines do: $COLUMNS when set;
    unknown (a pipe without it), each line as it is. A run's line that does not fit has its id on a line of its own
    (on lines of its own, broken after a '.', when longer than the line) and its values below, under the id; nothing
    is lost (the words are those of the one-line output, the id's pieces joined)."""
    path = long_axes(tmp_path)
    p = subprocess.run([str(BIN), "validate", str(path)], capture_output=True, text=True, env=env_columns(columns),
                       timeout=120)
    assert p.returncode == 0, p.stderr
    one_line = f"{path}: valid; 4 runs = {AXES}"
    if columns is None:
        assert p.stdout.splitlines() == [one_line]
    else:
        lines = p.stdout.splitlines()
        assert len(lines) > 1 and "".join("".join(lines).split()) == "".join(one_line.split()), lines
        assert all(len(t) <= columns - 1 for t in lines), lines
        assert all(any(name in t for t in lines) for name in NAMES), lines
    p = subprocess.run([str(BIN), "run", str(path), "--dry-run", "--out", str(tmp_path / "out")], capture_output=True,
                       text=True, env=env_columns(columns), timeout=120)
    assert p.returncode == 0, p.stderr
    lines, expected = p.stdout.splitlines(), dry_run_lines(tmp_path, path)
    if columns is None:
        assert lines == expected
        return
    assert all(len(t) <= columns - 1 for t in lines), [t for t in lines if len(t) > columns - 1]
    assert joined_ids(lines) == " ".join(expected).split(), lines
    for k, want in enumerate(expected[1:]):
        head, run_id = want.split()[:2]
        at, pieces = id_at(lines, head)
        assert "".join(pieces) == run_id, (run_id, lines)
        if columns == 80:  # the id (61 characters with its head) alone on its line: each run's line is over 80
            assert pieces == [run_id], lines
        else:  # broken after a '.' between its parts, 2 further in than the id
            assert len(pieces) > 1 and all(p.endswith(".") for p in pieces[:-1]), lines
            assert all(t.startswith(" " * (len(f"  {head} ") + 2) + p) for t, p in zip(lines[at + 1:], pieces[1:]))
        assert lines[at + len(pieces)].startswith(" " * len(f"  {head} ") + "cluster.ranks="), lines


def id_at(lines, head):
    """The line of run `head` ("[3]") in a dry run's listing and the pieces of its id: the rest of that line and the
    lines below indented 2 past the id (id_lines in sim/app/driver.cpp)."""
    lead = f"  {head} "
    at = next(n for n, t in enumerate(lines) if t.startswith(lead))
    pieces = [lines[at][len(lead):]]
    for t in lines[at + 1:]:
        if not (t.startswith(" " * (len(lead) + 2)) and t[len(lead) + 2] != " "):
            break
        pieces.append(t.strip())
    return at, pieces


def joined_ids(lines):
    """The words of a dry run's listing with each run id's pieces joined back."""
    words, n = [], 0
    while n < len(lines):
        m = re.match(r"  (\[\d+\]) ", lines[n])
        if not m:
            words += lines[n].split()
            n += 1
            continue
        at, pieces = id_at(lines[n:], m.group(1))
        words += [m.group(1), "".join(pieces)]
        n += len(pieces)
    return words


def test_a_count_of_one_is_singular(tmp_path):
    """Counts printed with their noun read "1 run", never "1 runs": the sweep's last line, a filter's count, the
    expansion."""
    path = write(tmp_path, scenario(name="one", steps=2, axes={}), "one.json")
    p = subprocess.run([str(BIN), "run", str(path), "--out", str(tmp_path / "out")], capture_output=True, text=True,
                       env=env_columns(None), timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines()[0] == f"gradsweep: 1 run = 1 (no sweep); 1 to run -> {tmp_path}/out/report.json"
    assert p.stderr.splitlines()[-1].startswith(f"gradsweep: wrote {tmp_path}/out/report.json (1 run) in "), p.stderr
    p = subprocess.run([str(BIN), "run", str(path), "--filter", "nothing", "--dry-run"], capture_output=True,
                       text=True, env=env_columns(None), timeout=120)
    assert p.returncode == 2 and '--filter "nothing": 0 of 1 run match; ids look like one.r0 ' in p.stderr, p.stderr
    p = subprocess.run([str(BIN), "run", str(path), "--filter", "one", "--dry-run"], capture_output=True, text=True,
                       env=env_columns(None), timeout=120)
    assert p.returncode == 0 and "1 of 1 run match --filter one" in p.stdout, p.stdout


COMMANDS = [[], ["run"], ["validate"], ["list"], ["fields"], ["price"], ["calibrate"], ["merge"]]
FILTER_DOC = ("run only the runs whose id this pattern matches somewhere: RE2 syntax (linear-time matching), at most "
              "512 characters (scenarios/README.md)")


def help_of(command, columns):
    p = subprocess.run([str(BIN), *command, "--help"], capture_output=True, text=True, env=env_columns(columns),
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "gradsweep")
def test_help_wraps_to_COLUMNS_with_the_option_column_kept(command):
    """--help (of gradsweep and of every command) follows the width rule of validate and list: COLUMNS, else the
    terminal's, else unwrapped. At 80 every line fits (its lines ran to 159 characters) with the same words as the
    unwrapped help, each description's lines starting at the column its first line starts at."""
    whole, lines = help_of(command, None), help_of(command, COLUMNS)
    assert not too_long(lines), too_long(lines)
    assert " ".join(lines).split() == " ".join(whole).split(), lines
    # A row of the option or command table: "  name" then its description at column 30 (CLI11's), or on the lines
    # below when the name reaches it; every continuation line starts there too.
    rows = [n for n, t in enumerate(lines) if re.match(r"  \S", t)]
    assert rows, lines
    for n in rows:
        for t in lines[n + 1:]:
            if not t.startswith(" " * 30):
                break
            assert t[30] != " ", (t, lines)
    if command == ["run"]:
        at = next(n for n, t in enumerate(lines) if t.startswith("  --filter TEXT "))
        assert lines[at] == f"{'  --filter TEXT':<30}run only the runs whose id this pattern matches", lines
        assert [t[30:] for t in lines[at + 1:at + 3]] == ["somewhere: RE2 syntax (linear-time matching), at",
                                                         "most 512 characters (scenarios/README.md)"], lines


def test_help_keeps_a_long_description_on_one_line_where_it_fits():
    """At COLUMNS=200 the --filter description (140 characters) is whole on its option's line, as without a width."""
    want = f"{'  --filter TEXT':<30}{FILTER_DOC}"
    assert want in help_of(["run"], 200) and want in help_of(["run"], None)
    assert help_of([], 200) == help_of([], None)  # its longest line, 159 characters, fits in 199


SHIPPED = sorted(p for p in (REPO / "scenarios").rglob("*.json") if "hardware" not in p.parts)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO / "scenarios")))
def test_every_shipped_scenarios_dry_run_fits_80_columns(tmp_path, path):
    """A dry run at COLUMNS=80 fits every line in 80 columns (long run ids were printed whole: up to 277 characters
    in scenarios/strategies/all.json); an id too long for its line is broken after the '.' between its key=value
    parts and reads back whole, as the one-line listing of a pipe without COLUMNS prints it."""
    args = [str(BIN), "run", str(path), "--dry-run", "--out", str(tmp_path / "out")]
    whole = subprocess.run(args, capture_output=True, text=True, env=env_columns(None), timeout=120)
    assert whole.returncode == 0, whole.stderr
    p = subprocess.run(args, capture_output=True, text=True, env=env_columns(COLUMNS), timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert not too_long(lines), too_long(lines)
    runs = [t.split()[1:] for t in whole.stdout.splitlines() if re.match(r"  \[\d+\] ", t)]
    assert runs, whole.stdout
    for k, (run_id, *values) in enumerate(runs):
        at, pieces = id_at(lines, f"[{k}]")
        assert "".join(pieces) == run_id, (run_id, pieces)
        # Broken only after the '.' before a part: "key=" of a swept path (its last name or the whole path) or the
        # repeat "r<k>" at the end, never inside a value.
        keys = {w.split("=")[0] for w in values if "=" in w}
        keys |= {key.rsplit(".", 1)[-1] for key in keys}
        for n in range(1, len(pieces)):
            rest = "".join(pieces[n:])
            assert pieces[n - 1].endswith(".") and (re.fullmatch(r"r\d+", rest) or
                                                   any(rest.startswith(key + "=") for key in keys)), pieces
    assert joined_ids(lines) == whole.stdout.split()


@pytest.mark.parametrize("columns", [40, 30])
def test_a_finished_runs_line_keeps_its_outcome_and_time_at_narrow_widths(tmp_path, columns):
    """At COLUMNS=40 a finished run's line cut its time ("passed in 0" | ".0s:") to keep 20 characters of the id: the
    id is shortened first (id_forms, then the last form's head and tail around "..."), the outcome and time stay
    whole on one line; at 30,
    with too little room beside them for the id, the id has the line and the outcome starts the next, under it.
    The runs: scenarios/zero_llm.json, timing-only, 2 steps, its 8 ZeRO stage 1 and 2 runs of 16."""
    out = tmp_path / "out"
    p = subprocess.run([str(BIN), "run", str(REPO / "scenarios" / "zero_llm.json"), "--set", "training.steps=2",
                        "--filter", "stage=[12]", "--out", str(out)], capture_output=True, text=True,
                       env=env_columns(columns), timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert all(len(t) <= columns - 1 for t in lines), [t for t in lines if len(t) > columns - 1]
    runs = [(r["id"], r["disposition"]) for r in json.loads((out / "report.json").read_text())["runs"]]
    assert len(runs) == 8 and {d for _, d in runs} <= {"passed", "skipped"}, runs  # skipped: over the GPU's memory
    for k, (run_id, disposition) in enumerate(runs, start=1):
        at = [n for n, t in enumerate(lines) if t.startswith(f"[{k}/8] ")]
        assert len(at) == 1, lines
        first, below = lines[at[0]], lines[at[0] + 1]
        shown = first.split()[1]
        # One of its forms whole, or the last form's head and tail around "...".
        assert is_shown_form(shown, run_id), (shown, run_id)
        timed = r" in \d+\.\ds" if disposition != "skipped" else ""  # a skipped run never started: no time
        outcome = re.compile(disposition + timed + r"(:|$)")
        # At 30, "skipped:" (no time) leaves 14 characters beside it, more than the 8 the id needs: it stays beside.
        if columns == 40 or disposition == "skipped":
            assert re.fullmatch(rf"\[{k}/8\] \S+ {disposition}{timed}:?", first), first
        else:
            assert first == f"[{k}/8] {shown}" and outcome.match(below[len(f'[{k}/8] '):]), (first, below)
            assert below.startswith(" " * len(f"[{k}/8] ")), below
        assert len(outcome.findall(first + "\n" + below)) == 1, (first, below)
