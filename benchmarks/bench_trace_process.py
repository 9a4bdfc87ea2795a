"""Benchmark: `narrowpath trace` against HTA 0.5.0 as whole processes, and `narrowpath --help`, side by side.

Issue 15's targets: `narrowpath trace` on the 16-rank trace (a100-16rank-rank0.json.gz) at least 10x faster than
HTA as whole processes (interpreter start, imports, reading, analyses, output), with a peak RSS at most a quarter
of HTA's; `narrowpath --help` within 0.15 s.

Each measurement is one fresh process: wall time from spawn to exit, peak RSS from the child's own rusage
(wait4). The sides alternate within each round, so load from other processes on a shared machine hits both
alike; the table gives the median and the best of `--rounds` rounds, and the ratio of medians.
- narrowpath: `python -m narrowpath trace DIR` (every analysis: breakdown, overlap, per-step accounts,
  kernels, collectives, idle causes, critical path, stragglers; tables printed);
- HTA: a script that imports HTA, builds `TraceAnalysis(trace_dir=DIR)` and runs `get_comm_comp_overlap` and
  `get_temporal_breakdown` (printing both), i.e. less than narrowpath computes;
- `narrowpath --help` through the console script next to the interpreter, and through `python -m narrowpath`.

Both sides run from bytecode: narrowpath's package is byte-compiled first (as `pip install` does; an editable
install under PYTHONDONTWRITEBYTECODE would otherwise compile every module from source in every process),
HTA's was compiled when pip installed it.

HTA is not a dependency of narrowpath: install it anywhere (`pip install HolisticTraceAnalysis==0.5.0`, e.g. in a
virtual environment) and pass that interpreter with --hta-python.
Run: python benchmarks/bench_trace_process.py [--hta-python PATH] [--rounds 7]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
if not TRACES.is_dir():
    TRACES = Path("/work/shared/traces")
TRACE = "a100-16rank-rank0.json.gz"
HTA_SCRIPT = """
import logging, sys
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
print(ta.get_comm_comp_overlap(visualize=False).to_string())
print(ta.get_temporal_breakdown(visualize=False).to_string())
"""


def run(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one fresh process; its output is discarded, a failure stops the run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode not in (0, 2) or (proc.returncode == 2 and "--help" not in argv):
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{err[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hta-python", default=sys.executable, help="interpreter with HolisticTraceAnalysis installed")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    import compileall
    import narrowpath
    compileall.compile_dir(os.path.dirname(narrowpath.__file__), quiet=1)
    work = Path(tempfile.mkdtemp(prefix="bench_trace_process_"))
    try:
        shutil.copy(TRACES / TRACE, work / TRACE)  # HTA wants a directory; never touch ../shared/traces
        script = Path(sys.executable).with_name("narrowpath")
        sides = {
            "narrowpath trace": [sys.executable, "-m", "narrowpath", "trace", str(work)],
            "HTA 0.5.0 (overlap + breakdown)": [args.hta_python, "-c", HTA_SCRIPT, str(work)],
            "narrowpath --help (console script)": [str(script), "--help"] if script.exists() else None,
            "python -m narrowpath --help": [sys.executable, "-m", "narrowpath", "--help"],
            "python -c pass (interpreter alone)": [sys.executable, "-c", "pass"],
        }
        sides = {k: v for k, v in sides.items() if v}
        for argv in sides.values():  # warm the page cache and .pyc files
            run(argv)
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
        for _ in range(args.rounds):
            for name, argv in sides.items():
                samples[name].append(run(argv))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"Whole processes on {TRACE}, {args.rounds} alternating rounds (load average "
          f"{os.getloadavg()[0]:.1f} at the end)")
    print(f"  {'command':<38}{'median s':>10}{'best s':>9}{'peak RSS MB':>13}")
    med = {}
    for name, vals in samples.items():
        walls = [w for w, _ in vals]
        med[name] = statistics.median(walls), max(r for _, r in vals)
        print(f"  {name:<38}{med[name][0]:>10.3f}{min(walls):>9.3f}{med[name][1]:>13.0f}")
    ours, hta = med["narrowpath trace"], med["HTA 0.5.0 (overlap + breakdown)"]
    per_round = [h[0] / o[0] for o, h in zip(samples["narrowpath trace"], samples["HTA 0.5.0 (overlap + breakdown)"])]
    print(f"  speed-up (HTA / narrowpath, medians): {hta[0] / ours[0]:.1f}x (target >= 10x); per round "
          f"{', '.join(f'{r:.1f}' for r in per_round)}")
    print(f"  peak RSS narrowpath / HTA: {ours[1] / hta[1]:.2f} (target <= 0.25)")
    helps = [k for k in med if k.endswith("--help") or "console script" in k]
    print("  --help: " + ", ".join(f"{k.split(' (')[0] if 'console' in k else k} {med[k][0]:.3f} s" for k in helps)
          + " (target <= 0.15 s)")


if __name__ == "__main__":
    main()
