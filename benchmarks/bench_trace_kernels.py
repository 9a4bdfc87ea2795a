"""Benchmark: `narrowpath trace` on one rank with 1,000,000 kernels on one CUDA stream, as a whole process.

Target (issue 11): at most 10 s and 1 GB peak RSS. Before the critical path was made O(n log n), its walk back
over every earlier kernel of the same stream made this quadratic (50k kernels 63 s, 100k 261 s).

The trace is generated into /tmp (never into the repository) in Kineto's own layout: per kernel a
`cudaLaunchKernel` runtime event on the host thread (correlation id) and the kernel on stream 7, durations and
gaps drawn from a seeded generator (a few kernels wait for a late launch, as on a CPU-bound step), and
ProfilerStep markers every `kernels / steps` kernels. The command runs in a fresh process; peak RSS is its
maximum resident set (getrusage of the child).

Run: python benchmarks/bench_trace_kernels.py [--kernels 1000000] [--steps 10] [--keep]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TARGET = Path("/tmp/narrowpath_bench_1m_kernels.json")
NAMES = ("ampere_sgemm_128x64_tn", "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
         "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>", "ncclDevKernel_AllReduce_Sum_f32_RING_LL")


def generate(path: Path, num_kernels: int, num_steps: int, seed: int = 0) -> int:
    """Write the trace; returns its size in bytes."""
    rng = np.random.default_rng(seed)
    dur_us = rng.uniform(2.0, 40.0, num_kernels).round(3)
    gap_us = np.where(rng.random(num_kernels) < 0.05, rng.uniform(5.0, 60.0, num_kernels), 0.5).round(3)
    launch_lead_us = np.where(rng.random(num_kernels) < 0.02, -3.0, 15.0)  # 2 %: the launch comes late
    start_us = 1_000_000.0 + np.cumsum(dur_us + gap_us)
    launch_us = (start_us - launch_lead_us - 4.0).round(3)
    names = rng.integers(0, len(NAMES), num_kernels)
    per_step = max(1, num_kernels // num_steps)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],\n'
                 '  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},\n  "traceEvents": [\n  ')
        first = True
        for step in range(num_steps):
            lo, hi = step * per_step, min(num_kernels, (step + 1) * per_step)
            if lo >= hi:
                break
            step_ts = float(launch_us[lo]) - 10.0
            step_dur = float(launch_us[hi - 1]) + 10.0 - step_ts
            parts = [f'{{\n    "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step + 1}", "pid": 1, '
                     f'"tid": 1,\n    "ts": {step_ts:.3f}, "dur": {step_dur:.3f},\n    "args": {{}}\n  }}']
            for i in range(lo, hi):
                name = NAMES[names[i]]
                parts.append(f'{{\n    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, '
                             f'"tid": 1,\n    "ts": {launch_us[i]:.3f}, "dur": 3.0,\n    "args": {{\n      '
                             f'"cbid": 211, "correlation": {i + 1}\n    }}\n  }}')
                parts.append(f'{{\n    "ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": 7,\n    '
                             f'"ts": {start_us[i]:.3f}, "dur": {dur_us[i]:.3f},\n    "args": {{\n      '
                             f'"queued": 0, "device": 0, "context": 1,\n      "stream": 7, "correlation": {i + 1},'
                             f'\n      "grid": [8, 1, 1], "block": [128, 1, 1]\n    }}\n  }}')
            fh.write(("" if first else ",\n  ") + ",\n  ".join(parts))
            first = False
        fh.write("\n  ]\n}\n")
    return os.path.getsize(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    args = ap.parse_args()
    t0 = time.perf_counter()
    size = generate(TARGET, args.kernels, args.steps)
    print(f"generated {TARGET}: {size / 1e6:.0f} MB, {args.kernels:,} kernels on one stream + as many launches, "
          f"{args.steps} steps, in {time.perf_counter() - t0:.0f} s")
    try:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "narrowpath", "trace", str(TARGET), "--json"],
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    finally:
        if not args.keep:
            TARGET.unlink(missing_ok=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    rank = json.loads(proc.stdout)["ranks"][0]
    cp = rank["critical_path"]
    print(f"narrowpath trace (whole process): {wall:.1f} s (target <= 10 s), peak RSS {peak_mb:.0f} MB "
          f"(target <= 1000 MB) — {'PASS' if wall <= 10 and peak_mb <= 1000 else 'FAIL'}")
    print(f"  {len(rank['steps'])} steps; critical path of step {cp['step']}: {cp['num_nodes']:,} nodes, "
          f"{', '.join(f'{k} {v:.1f}%' for k, v in cp['by_category_pct'].items() if v >= 0.05)}")
    print(f"  idle causes: {', '.join(f'{k} {v:.1f}%' for k, v in rank['idle_causes_pct'].items())}")


if __name__ == "__main__":
    main()
