"""Benchmark: narrowpath's trace stage against Holistic Trace Analysis (HTA), side by side in one run.

1. Agreement: communication-computation overlap and temporal breakdown (compute, idle, non-compute) on each
   real trace of ../shared/traces, narrowpath minus HTA in percentage points (target: within 1 point).
2. Speed and memory on a100-16rank-rank0.json.gz: narrowpath's load plus *all* analyses (breakdown,
   overlap, per-step accounts, kernels, collectives, idle causes, critical path, stragglers) against HTA's
   load plus overlap plus temporal breakdown. Each side runs in its own fresh process (so peak RSS is its
   own), imports done before the clock starts; peak RSS = VmHWM of that process. The two sides alternate
   for `--rounds` rounds of `--repeats` runs each (so load from other processes on a shared machine hits
   both alike); the best run of each side is compared. Target: at least 5x faster, lower peak memory.

HTA is a development-only dependency: `pip install HolisticTraceAnalysis` (it is never imported by
narrowpath itself); give its interpreter with --hta-python when it lives in another environment.
Run: python benchmarks/bench_trace_hta.py [--repeats 5] [--hta-python PATH]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
if not TRACES.is_dir():
    TRACES = Path("/work/shared/traces")
SETS = {"a100-ddp-2rank": ["a100-ddp-2rank-rank0.json.gz"], "a100-16rank": ["a100-16rank-rank0.json.gz"],
        "pp-128rank-sampled": ["pp-128rank-sampled-rank0.json.gz", "pp-128rank-sampled-rank1.json.gz"]}
SPEED_SET = "a100-16rank"


def _rss_mb(field: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _quiet_hta() -> None:
    import logging
    logging.disable(logging.WARNING)


def child(side: str, trace_dir: str, repeats: int) -> dict:
    """Runs in a fresh process: imports, then times `repeats` loads + analyses; returns numbers as JSON."""
    import gc
    if side == "hta":
        _quiet_hta()
        from hta.trace_analysis import TraceAnalysis
    else:
        from narrowpath.trace.analyze import analyze, report_to_dict
        from narrowpath.trace.reader import read_trace
    baseline = _rss_mb("VmRSS")
    times, result = [], {}
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        if side == "hta":
            ta = TraceAnalysis(trace_dir=trace_dir)
            ov = ta.get_comm_comp_overlap(visualize=False)
            tb = ta.get_temporal_breakdown(visualize=False)
            times.append(time.perf_counter() - t0)
            result = {int(r): {"overlap": float(o), "compute": float(b.compute_time_pctg),
                               "idle": float(b.idle_time_pctg), "non_compute": float(b.non_compute_time_pctg)}
                      for r, o, (_, b) in zip(ov["rank"], ov["comp_comm_overlap_pctg"], tb.iterrows())}
            del ta, ov, tb
        else:
            report = analyze(read_trace(trace_dir))
            out = report_to_dict(report)
            times.append(time.perf_counter() - t0)
            result = {r["rank"]: {"overlap": r["overlap_pct"], "compute": r["breakdown_pct"]["compute"],
                                  "idle": r["breakdown_pct"]["idle"],
                                  "non_compute": 100 - r["breakdown_pct"]["compute"] - r["breakdown_pct"]["idle"]}
                      for r in out["ranks"]}
            del report, out
    return {"best_s": min(times), "median_s": sorted(times)[len(times) // 2], "peak_rss_mb": _rss_mb("VmHWM"),
            "baseline_rss_mb": baseline, "result": result}


HTA_PYTHON = [sys.executable]
"""The interpreter with HTA installed (--hta-python): HTA need not share narrowpath's environment."""


def run_child(side: str, trace_dir: str, repeats: int) -> dict:
    python = HTA_PYTHON[0] if side == "hta" else sys.executable
    proc = subprocess.run([python, __file__, "--child", side, trace_dir, "--repeats", str(repeats)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{side} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", nargs=2, metavar=("SIDE", "DIR"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hta-python", default=sys.executable, help="interpreter with HolisticTraceAnalysis installed")
    args = ap.parse_args()
    HTA_PYTHON[0] = args.hta_python
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.repeats)))
        return
    work = Path(tempfile.mkdtemp(prefix="bench_trace_hta_"))
    try:
        print("Agreement with HTA (percentage points, narrowpath - HTA)")
        print(f"{'trace':<22}{'rank':>5}{'overlap':>18}{'compute':>18}{'idle':>18}{'non-compute':>18}")
        worst = 0.0
        timings = {}
        for name, files in SETS.items():
            d = work / name
            d.mkdir()
            for f in files:  # HTA wants a directory; copy, never touch ../shared/traces
                shutil.copy(TRACES / f, d / f)
            if name == SPEED_SET:
                runs = [(run_child("ours", str(d), args.repeats), run_child("hta", str(d), args.repeats))
                        for _ in range(args.rounds)]
                ours = min((r[0] for r in runs), key=lambda x: x["best_s"])
                hta = min((r[1] for r in runs), key=lambda x: x["best_s"])
                timings[name] = (ours, hta, [h["best_s"] / o["best_s"] for o, h in runs])
            else:
                ours, hta = run_child("ours", str(d), 1), run_child("hta", str(d), 1)
            for rank, h in sorted(hta["result"].items()):
                o = ours["result"][rank]
                cells = []
                for k in ("overlap", "compute", "idle", "non_compute"):
                    worst = max(worst, abs(o[k] - h[k]))
                    cells.append(f"{o[k]:6.2f} vs {h[k]:6.2f}".rjust(18))
                print(f"{name:<22}{rank:>5}" + "".join(cells))
        print(f"largest difference: {worst:.2f} percentage points (target <= 1)")
        ours, hta, ratios = timings[SPEED_SET]
        print(f"\nSpeed and memory on {SETS[SPEED_SET][0]} (best of {args.rounds} alternating rounds x "
              f"{args.repeats} runs, fresh process each side and round)")
        print(f"  narrowpath load + all analyses : {ours['best_s']:.3f} s   peak RSS {ours['peak_rss_mb']:.0f} MB "
              f"(after imports {ours['baseline_rss_mb']:.0f} MB)")
        print(f"  HTA load + overlap + breakdown : {hta['best_s']:.3f} s   peak RSS {hta['peak_rss_mb']:.0f} MB "
              f"(after imports {hta['baseline_rss_mb']:.0f} MB)")
        print(f"  speed-up {hta['best_s'] / ours['best_s']:.1f}x (target >= 5x); per round "
              f"{', '.join(f'{r:.1f}x' for r in ratios)}; peak RSS ratio HTA/narrowpath "
              f"{hta['peak_rss_mb'] / ours['peak_rss_mb']:.2f}; increment over imports "
              f"{ours['peak_rss_mb'] - ours['baseline_rss_mb']:.0f} MB vs "
              f"{hta['peak_rss_mb'] - hta['baseline_rss_mb']:.0f} MB")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
