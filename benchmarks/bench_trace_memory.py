"""Benchmark: a 2 GB (uncompressed) Kineto trace is read and fully analysed within 1 GB peak RSS.

The trace is generated into /tmp (never into the repository) by repeating the events of the real
a100-16rank-rank0.json.gz trace, each copy moved 100 s later (the 8-digit timestamp prefix is advanced),
with its correlation ids and ProfilerStep numbers made unique, in Kineto's own layout. The analysis runs in a
fresh process; peak RSS is that process's VmHWM (includes the interpreter and numpy, ~30 MB).

Run: python benchmarks/bench_trace_memory.py [--gb 2.0] [--keep]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
if not TRACES.is_dir():
    TRACES = Path("/work/shared/traces")
SOURCE = TRACES / "a100-16rank-rank0.json.gz"
TS_PREFIX = "16835649"
"""Every timestamp of the source file starts with these 8 digits (checked), so a copy k rewrites them to
16835649 + k: +k × 100 s."""
TARGET = Path("/tmp/narrowpath_bench_trace_2gb.json")


def generate(path: Path, target_bytes: float) -> tuple[int, int]:
    """Write the big trace; returns (bytes written, copies)."""
    text = gzip.decompress(SOURCE.read_bytes()).decode()
    assert text.count('"ts": ') == text.count(f'"ts": {TS_PREFIX}'), "timestamp prefix assumption broken"
    start = text.index("[", text.index('"traceEvents"')) + 1
    end = text.rindex("]")
    head, body = text[:start], text[start:end].strip()
    written, copies = 0, 0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(head + "\n  ")
        while written < target_bytes:
            k = copies
            chunk = body.replace(f'"ts": {TS_PREFIX}', f'"ts": {int(TS_PREFIX) + k}')
            chunk = chunk.replace('"correlation": ', f'"correlation": 1{k:03d}')
            chunk = chunk.replace('"External id": ', f'"External id": 1{k:03d}')
            chunk = chunk.replace("ProfilerStep#", f"ProfilerStep#{k + 1:03d}")
            fh.write(("" if k == 0 else ",\n  ") + chunk)
            written += len(chunk) + 4
            copies += 1
        fh.write("\n  ]\n}\n")
    return os.path.getsize(path), copies


def child(path: str) -> dict:
    from narrowpath.trace.analyze import analyze, report_to_dict
    from narrowpath.trace.reader import read_trace
    t0 = time.perf_counter()
    trace = read_trace(path)
    t1 = time.perf_counter()
    out = report_to_dict(analyze(trace))
    t2 = time.perf_counter()
    r = trace.ranks[0]
    with open("/proc/self/status") as fh:
        hwm = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024
    return {"read_s": t1 - t0, "analyze_s": t2 - t1, "peak_rss_mb": hwm, "events": r.num_events,
            "activities": r.num_activities, "runtime_calls": int(r.rt_start_s.size), "steps": int(r.step_number.size),
            "overlap_pct": out["ranks"][0]["overlap_pct"], "breakdown_pct": out["ranks"][0]["breakdown_pct"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=2.0, help="uncompressed size to generate, in GB (1e9 bytes)")
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    t0 = time.perf_counter()
    size, copies = generate(TARGET, args.gb * 1e9)
    print(f"generated {TARGET}: {size / 1e9:.2f} GB ({copies} copies of {SOURCE.name}) "
          f"in {time.perf_counter() - t0:.0f} s")
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", str(TARGET)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-3000:])
        res = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        if not args.keep:
            TARGET.unlink(missing_ok=True)
    print(f"events {res['events']:,} (kept {res['activities']:,} activities, {res['runtime_calls']:,} runtime "
          f"calls, {res['steps']} steps)")
    print(f"read {res['read_s']:.1f} s ({size / 1e6 / res['read_s']:.0f} MB/s), all analyses {res['analyze_s']:.1f} s")
    print(f"peak RSS {res['peak_rss_mb']:.0f} MB (target <= 1000 MB = 1 GB) — "
          f"{'PASS' if res['peak_rss_mb'] <= 1000 else 'FAIL'}")
    print(f"overlap {res['overlap_pct']:.2f}%, breakdown {json.dumps({k: round(v, 2) for k, v in res['breakdown_pct'].items()})}")


if __name__ == "__main__":
    main()
