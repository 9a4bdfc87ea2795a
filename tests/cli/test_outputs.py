"""Every file a command writes: an output path that is an input is refused before any work (the input is kept),
a write is atomic (temp file + rename: a failure leaves the earlier file whole), the command says on stderr
where it wrote, and a failed write to stdout (`> /dev/full`) is one line with exit 2, never a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from narrowpath.cli.common import atomic_dir, atomic_file, atomic_write_text
from narrowpath.cli.main import main
from narrowpath.errors import NarrowpathError
from tests.cli.one_line import one_line_error

SCN = "system: dgx-h100\nmodel: llama3-8b\nnum_gpus: 8\nplan: {tp: 8, gbs: 16}\n"
NCCL_LOG = """\
# Collective test starting: all_reduce_perf
#  Rank  0 Group  0 Pid  1 on host device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid  1 on host device  1 [0x0f] NVIDIA A100-SXM4-80GB
     1048576        262144     float     sum      -1    62.78   16.70   29.23      0    61.42   17.07   29.88      0
    16777216       4194304     float     sum      -1    163.9  102.36  179.13      0    162.1  103.50  181.12      0
"""


def _trace_file(tmp_path: Path) -> Path:
    """A one-rank Kineto trace (one kernel on one stream) in tmp_path/traces/."""
    d = tmp_path / "traces"
    d.mkdir()
    out = d / "rank0.json"
    out.write_text(json.dumps({"deviceProperties": [{"name": "X"}], "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
         "args": {"stream": 7, "correlation": 1}}]}))
    return out


@pytest.mark.parametrize("make_argv", [
    lambda t: (["analyze", str(t / "s.yaml"), "--timeline", str(t / "s.yaml")], t / "s.yaml"),
    lambda t: (["analyze", str(t / "s.yaml"), "--timeline", str(t / "sub" / ".." / "s.yaml")], t / "s.yaml"),
    lambda t: (["analyze", str(t / "link.yaml"), "--timeline", str(t / "s.yaml")], t / "s.yaml"),
    lambda t: (["analyze", "--model", "llama3-8b", "--system", "dgx-h100", "--profile", str(t / "p.yaml"),
                "--timeline", str(t / "p.yaml")], t / "p.yaml"),
    lambda t: (["calibrate", str(t / "probe.json"), "-o", str(t / "probe.json")], t / "probe.json"),
    lambda t: (["calibrate", "--nccl-log", str(t / "x.log"), "-o", str(t / "x.log")], t / "x.log"),
    lambda t: (["calibrate", "--nccl-log", str(t / "x.log"), "--base", str(t / "p.yaml"), "-o", str(t / "p.yaml")],
               t / "p.yaml"),
    lambda t: (["probe", "locality", "--memory-json", str(t / "probe.json"), "-o", str(t / "probe.json")],
               t / "probe.json"),
])
def test_an_output_that_is_an_input_is_refused(tmp_path, capsys, make_argv):
    (tmp_path / "s.yaml").write_text(SCN)
    (tmp_path / "link.yaml").symlink_to(tmp_path / "s.yaml")
    (tmp_path / "p.yaml").write_text("device: H100-SXM5-80GB\nmatrix_efficiency: {bf16: 0.5}\n")
    (tmp_path / "probe.json").write_text('{"probe": "memory"}')
    (tmp_path / "x.log").write_text(NCCL_LOG)
    argv, victim = make_argv(tmp_path)
    before = victim.read_bytes()
    err = one_line_error(capsys, argv, "is an input", "the input is kept")
    assert err.split(": ")[2].startswith("--")  # names the flag
    assert victim.read_bytes() == before
    assert not (tmp_path / "sub").exists()


def test_trace_timeline_onto_its_trace_is_refused(tmp_path, capsys):
    trace = _trace_file(tmp_path)
    before = trace.read_bytes()
    one_line_error(capsys, ["trace", str(trace), "--timeline", str(trace)], "--timeline", "is an input")
    one_line_error(capsys, ["trace", str(trace.parent), "--timeline", str(trace.parent / "new.json")],
                   "--timeline", "would land among the traces read from")
    assert trace.read_bytes() == before and not (trace.parent / "new.json").exists()


def test_analyze_says_where_it_wrote(tmp_path, capsys):
    assert main(["analyze", "gnmt-lstm-a100-8", "--no-what-ifs", "--timeline", str(tmp_path / "t.json"),
                 "--plots", str(tmp_path / "plots")]) == 0
    err = capsys.readouterr().err
    assert f"wrote timeline {tmp_path / 't.json'}" in err
    assert "wrote 6 plots: " in err and str(tmp_path / "plots" / "memory.png") in err
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert not [p for p in (tmp_path / "plots").iterdir() if p.name.startswith(".")]  # no temporary left


def test_trace_says_where_it_wrote(tmp_path, capsys):
    trace = _trace_file(tmp_path)
    assert main(["trace", str(trace), "--timeline", str(tmp_path / "tl.json")]) == 0
    assert f"wrote {tmp_path / 'tl.json'}" in capsys.readouterr().err
    assert json.loads((tmp_path / "tl.json").read_text())["traceEvents"]


def test_atomic_file_keeps_the_earlier_file_on_failure(tmp_path):
    out = tmp_path / "out.json"
    out.write_text("earlier")
    with pytest.raises(RuntimeError):
        with atomic_file("--timeline", out) as tmp:
            tmp.write_text("half a fi")
            raise RuntimeError("disk full halfway")
    assert out.read_text() == "earlier" and os.listdir(tmp_path) == ["out.json"]
    atomic_write_text("--timeline", out, "new")
    assert out.read_text() == "new" and os.listdir(tmp_path) == ["out.json"]
    mask = os.umask(0)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~mask  # the mode a plain write gives, not mkstemp's 0600


def test_atomic_dir_moves_every_file_or_none(tmp_path):
    d = tmp_path / "plots"
    with pytest.raises(RuntimeError):
        with atomic_dir("--plots", d) as tmp:
            (tmp / "a.png").write_bytes(b"x")
            raise RuntimeError("second plot failed")
    assert list(d.iterdir()) == []
    with atomic_dir("--plots", d) as tmp:
        (tmp / "a.png").write_bytes(b"x")
    assert [p.name for p in d.iterdir()] == ["a.png"]


def test_a_failed_file_write_names_the_flag(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NarrowpathError, match="^--timeline: cannot write"):
        atomic_write_text("--timeline", tmp_path / "file" / "t.json", "x")


@pytest.mark.parametrize("argv", [["predict"], ["catalog", "--json"], ["analyze", "gnmt-lstm-a100-8", "--no-what-ifs"]])
def test_a_full_stdout_is_one_line(argv):
    """`narrowpath … > /dev/full`: exit 2, one line naming standard output, no traceback (a real subprocess: the
    write fails at the interpreter's flush)."""
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "narrowpath", *argv], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(lines) == 1, r.stderr
    assert lines[0] == "narrowpath: error: cannot write to standard output: No space left on device"


def test_a_closed_pipe_ends_quietly():
    r = subprocess.run(f"{sys.executable} -m narrowpath catalog --json | head -c 10", shell=True,
                       capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("narrowpath ") and any(ch.isdigit() for ch in out)
