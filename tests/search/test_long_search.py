"""A search that cannot finish in reasonable time says so before it starts; a long one announces itself and prints
progress on stderr; SIGINT or SIGTERM end the whole process tree (parent and pricing workers) within 2 s — real
subprocesses, real signals."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from narrowpath.cli.main import main
from narrowpath.search import rank

HUGE = ["search", "--model", "llama3-405b", "--system", "dgx-h100", "--gbs", "{n}", "--gpus", "{n}"]


def _argv(n: int) -> list[str]:
    return [a.format(n=n) for a in HUGE]


def test_a_space_too_large_to_price_is_refused_up_front(capsys):
    """The issue's search (16.7 M GPUs) hung silently for > 120 s. Now the work that grows with the GPU count (laying
    out every placement the plans use: every rank is placed) is timed on a few placements and a search estimated
    beyond --max-minutes is refused with the estimate, naming the flag that allows it (here 4 M GPUs, one process,
    6 s allowed: ~450 placements at ~0.1 s each are over a minute)."""
    t0 = time.perf_counter()
    assert main([*_argv(4_194_304), "--jobs", "1", "--max-minutes", "0.1"]) == 2
    assert time.perf_counter() - t0 < 40
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.search(r"[0-9,]+ plans of llama3-405b on 4,194,304 GPUs with [0-9,]+ placements to lay out", lines[0])
    assert "would take about" in lines[0]
    assert "more than the 6 s allowed" in lines[0] and "--max-minutes" in lines[0]


def test_max_minutes_must_be_positive(capsys):
    assert main(["search", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--gbs", "8",
                 "--max-minutes", "0"]) == 2
    assert "--max-minutes: must be a finite number > 0" in capsys.readouterr().err


def test_progress_lines(monkeypatch):
    lines: list[str] = []
    monkeypatch.setattr(rank, "PROGRESS_EVERY_S", 0.0)
    p = rank._Progress(100, lines.append)
    p.add(10)
    p.add(40)
    p.add(50)  # the end is not announced as progress
    assert len(lines) == 2 and lines[0].startswith("search: priced 10 of 100 plans (10%), about ")
    assert lines[1].startswith("search: priced 50 of 100 plans (50%)") and lines[1].endswith(" left")
    assert [rank.human_duration(s) for s in (12, 300, 4 * 3600, 3 * 86400)] == ["12 s", "5.0 min", "4.0 h",
                                                                                 "3.0 days"]


def _alive_in_group(pgid: int) -> list[int]:
    """Processes of a process group that are still running (zombies waiting for a reaper do not count)."""
    alive = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                alive.append(int(d))
    return alive


def _sigint_default():
    """Give the child SIGINT's default disposition, as a terminal's foreground job has: a test runner started in the
    background of a non-interactive shell (`cmd &`, nohup) ignores SIGINT, its children inherit the ignore, and
    Python then installs no KeyboardInterrupt handler — correct for such a job, but not the case under test."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGINT to the group", "SIGTERM to the group"])
def test_a_signal_ends_the_whole_process_tree_within_2_s(how):
    proc = subprocess.Popen([sys.executable, "-m", "narrowpath", *_argv(4_194_304), "--max-minutes", "100000",
                             "--jobs", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_sigint_default)
    try:
        announce = proc.stderr.readline()  # printed once the plans are timed, just before the workers start
        assert "plans of llama3-405b on 4,194,304 GPUs" in announce and "Ctrl-C stops it" in announce, announce
        deadline = time.monotonic() + 30
        while len(_alive_in_group(proc.pid)) < min(3, 1 + rank.usable_cpus()) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the workers are pricing
        before = _alive_in_group(proc.pid)
        sig = signal.SIGTERM if how.startswith("SIGTERM") else signal.SIGINT
        t0 = time.monotonic()
        if how.endswith("group"):  # a terminal's Ctrl-C, or `timeout` / a batch scheduler: the whole group
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        proc.wait(timeout=10)
        while _alive_in_group(proc.pid) and time.monotonic() - t0 < 10:
            time.sleep(0.02)
        gone_s = time.monotonic() - t0
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert len(before) >= (3 if rank.usable_cpus() >= 2 else 1), f"the workers never started: {before}"
    assert gone_s < 2.0, f"process tree alive {gone_s:.1f} s after {how}: {_alive_in_group(proc.pid)}"
    assert proc.returncode == (143 if how.startswith("SIGTERM") else 130)
    assert "Traceback" not in err and err.strip().splitlines()[-1] in ("narrowpath: terminated",
                                                                       "narrowpath: interrupted"), err


_STUCK_POOL = """
import multiprocessing, multiprocessing.pool, sys, time
from narrowpath.search import each
each.ABANDON_WAIT_S = 0.2

def hangs(self):
    # as Pool.terminate does: no more workers started, the pool's exit finalizer taken (a Finalize leaves the
    # registry before it runs), then it waits for ever on a result thread stuck in a partial message
    self._worker_handler._state = multiprocessing.pool.TERMINATE
    self._terminate.cancel()
    time.sleep(3600)

def stuck(part):
    assert multiprocessing.active_children()
    multiprocessing.pool.Pool.terminate = hangs
    raise KeyboardInterrupt

t0 = time.monotonic()
try:
    each.run_pool(abs, [-1, -2, -3, -4], 2, stuck)
except KeyboardInterrupt:
    pass
deadline = time.monotonic() + 5
while multiprocessing.active_children() and time.monotonic() < deadline:
    time.sleep(0.05)
print(f"abandoned in {time.monotonic() - t0:.2f} s, children left {len(multiprocessing.active_children())}")
"""


def test_an_interrupted_pool_whose_terminate_hangs_is_abandoned_and_the_process_exits():
    """A worker ended in the middle of sending a result can leave a partial message the pool's result thread waits
    on for ever, and with it the pool's terminate (seen: an energy search's process group signalled by `timeout`,
    its parent stuck in Pool.join). The interrupted pool's terminate gets ABANDON_WAIT_S; its workers are then
    killed, the interruption goes on and the process exits. In a process of its own: a pool left half terminated
    in pytest's process once held pytest at its exit, after its summary, past CI's 90 minutes."""
    proc = subprocess.run([sys.executable, "-c", _STUCK_POOL], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    m = re.fullmatch(r"abandoned in ([0-9.]+) s, children left 0\n", proc.stdout)
    assert m and float(m.group(1)) < 5, proc.stdout
