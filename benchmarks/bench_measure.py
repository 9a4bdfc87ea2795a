"""Measure-stage targets, side by side in one run (not a unit test: it takes about 4 minutes).

    python benchmarks/bench_measure.py [--quick] [--json OUT] [--rounds N]

1. `narrowpath probe all` (full sweep, a subprocess) must finish in <= 120 s on this machine; its collectives
   part gives the alpha-beta held-out error (gloo, 2 ranks; target <= 20 %) and its memory part the detected
   cache boundaries vs the OS-reported sizes (target within 2x).
2. Then, in this process and interleaved (reference, probe, reference, probe, ..., reference) so that the
   load of a shared machine hits both alike, medians compared:
   - memory: the probe's DRAM bandwidth ('add', one thread) vs a STREAM triad a[i] = b[i] + s*c[i] — the C
     kernel of McCalpin's STREAM compiled with gcc -O2, one thread, 3 x 512 MiB arrays, best of 5 (STREAM's
     rule) — target within 15 %. A one-pass PyTorch triad (`torch.add(b, c, alpha=s, out=a)`, 1 thread) and a
     NumPy triad (no fused kernel: two passes per cache block) are printed beside it for reference.
   - compute: the probe's best FP32 vs an independently timed NumPy 4096^3 matmul (target within 10 %).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def stream_triad_numpy_bytes_per_s(n: int = 2**27, block: int = 32768, repeats: int = 5) -> float:
    """STREAM triad a = b + 3c over float64 arrays of n elements, counting 24 bytes/element (McCalpin).

    NumPy has no fused triad, so each block computes tmp = 3c then a = b + tmp with tmp cache-resident: the
    DRAM traffic is STREAM's (read b, c; write a).
    """
    a, b, c = np.zeros(n), np.ones(n), np.ones(n)
    tmp = np.empty(block)

    def triad():
        for i in range(0, n, block):
            m = min(block, n - i)
            np.multiply(c[i:i + m], 3.0, out=tmp[:m])
            np.add(b[i:i + m], tmp[:m], out=a[i:i + m])
    triad()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        triad()
        times.append(time.perf_counter() - t0)
    return 24.0 * n / min(times)  # STREAM reports the best of its trials


_TRIAD_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    long n = atol(argv[1]); int reps = atoi(argv[2]);
    double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double)), *c = malloc(n * sizeof(double));
    for (long j = 0; j < n; j++) { a[j] = 1.0; b[j] = 2.0; c[j] = 0.0; }
    double best = 1e30, s = 3.0;
    for (int k = 0; k <= reps; k++) {
        double t = now();
        for (long j = 0; j < n; j++) a[j] = b[j] + s * c[j];
        t = now() - t;
        if (k && t < best) best = t;   /* STREAM: first pass is the warm-up, best of the rest */
        c[k % n] += a[(k * 7) % n];   /* keep the loop live */
    }
    printf("%.6e\n", 24.0 * n / best);
    return 0;
}
"""


def stream_triad_c_bytes_per_s(n: int = 2**26, repeats: int = 5) -> float | None:
    """McCalpin's STREAM triad kernel in C (gcc -O2, one thread), bytes/s; None without a C compiler."""
    import shutil
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "triad.c"), os.path.join(tmp, "triad")
        with open(src, "w") as f:
            f.write(_TRIAD_C)
        subprocess.run([cc, "-O2", "-o", exe, src], check=True)
        return float(subprocess.run([exe, str(n), str(repeats)], check=True, capture_output=True, text=True).stdout)


def stream_triad_torch_bytes_per_s(n: int = 2**27, repeats: int = 5) -> float:
    import torch
    torch.set_num_threads(1)
    a, b, c = torch.zeros(n, dtype=torch.float64), torch.ones(n, dtype=torch.float64), torch.ones(n, dtype=torch.float64)
    torch.add(b, c, alpha=3.0, out=a)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        times.append(time.perf_counter() - t0)
    torch.set_num_threads(os.cpu_count() or 1)
    return 24.0 * n / min(times)


def _best_matmul_flops_per_s(a, b, n: int, repeats: int) -> float:
    """Best of `repeats` timed products after one warm-up (best of the trials, as STREAM; the probe's "best" is a
    max too)."""
    a @ b
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2.0 * n ** 3 / min(times)


def matmul_numpy_flops_per_s(n: int = 4096, repeats: int = 5) -> float:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    return _best_matmul_flops_per_s(a, b, n, repeats)


def matmul_torch_flops_per_s(n: int = 4096, repeats: int = 5) -> float:
    import torch
    a, b = torch.randn(n, n), torch.randn(n, n)
    return _best_matmul_flops_per_s(a, b, n, repeats)


def _references() -> dict[str, float]:
    out = {"triad_numpy_2pass": stream_triad_numpy_bytes_per_s(), "matmul_numpy": matmul_numpy_flops_per_s()}
    c = stream_triad_c_bytes_per_s()
    if c:
        out["triad_c"] = c
    try:
        out.update(triad_torch=stream_triad_torch_bytes_per_s())
    except ImportError:
        pass
    return out


def _interleaved(rounds: int, quick: bool) -> tuple[list[dict], list[dict], list[dict]]:
    """(references, compute probes, memory probes), run alternately: ref, compute, memory, ref, ..., ref."""
    from narrowpath.measure.compute_probe import probe_compute
    from narrowpath.measure.memory_probe import probe_memory
    refs, comps, mems = [_references()], [], []
    for _ in range(rounds):
        comps.append(probe_compute(quick=quick, progress=False))
        mems.append(probe_memory(quick=quick, progress=False))
        refs.append(_references())
    return refs, comps, mems


def _row(name: str, probe: float, ref: float, unit: float, tol: float, label: str) -> dict:
    err = probe / ref - 1
    ok = abs(err) <= tol
    print(f"{name:<44} probe {probe / unit:9.2f}  reference {ref / unit:9.2f} {label:<8} "
          f"diff {err * 100:+6.1f} %  target ±{tol * 100:.0f} %  {'PASS' if ok else 'MISS'}")
    return {"check": name, "probe": probe, "reference": ref, "rel_diff": err, "tolerance": tol, "pass": ok}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="quick probes (the targets then read loosely)")
    ap.add_argument("--json", help="write the checks as JSON")
    ap.add_argument("--plots", help="pass --plots DIR to probe all")
    ap.add_argument("--save", help="keep the probe-all JSON at this path")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved probe/reference rounds (default 2)")
    args = ap.parse_args()
    checks = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "all.json")
        cmd = [sys.executable, "-m", "narrowpath.cli.main", "probe", "all", "--no-progress", "-o", out]
        t0 = time.perf_counter()
        extra = (["--quick"] if args.quick else []) + (["--plots", args.plots] if args.plots else [])
        subprocess.run(cmd + extra, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        res = json.loads(open(out).read())
        if args.save:
            with open(args.save, "w") as f:
                json.dump(res, f)
    print(f"load average (1 min) at start of probe all: {res['memory']['provenance']['load_avg_1min']}")
    print(f"{'narrowpath probe all wall time (s)':<44} {wall:9.1f}  target <= 120 s  {'PASS' if wall <= 120 else 'MISS'}")
    checks.append({"check": "probe all wall time", "probe": wall, "reference": 120.0, "pass": wall <= 120})
    mem = res["memory"]
    for c in mem["comparison"]:
        ok = 0.5 <= c["ratio"] <= 2.0
        print(f"{'level ' + c['level'] + ' boundary vs OS ' + c['os_cache']:<44} probe {c['detected_capacity_bytes'] / 2**20:9.2f}"
              f"  OS {c['os_capacity_bytes'] / 2**20:9.2f} MiB      ratio {c['ratio']:.2f}  target 0.5-2  "
              f"{'PASS' if ok else 'MISS'}")
        checks.append({"check": f"boundary {c['level']} vs OS {c['os_cache']}", "probe": c["detected_capacity_bytes"],
                       "reference": c["os_capacity_bytes"], "ratio": c["ratio"], "pass": ok})
    for lv in mem["levels"][:-1]:
        if lv["name"] not in {c["level"] for c in mem["comparison"]}:
            print(f"{'level ' + lv['name'] + ' (no OS counterpart)':<44} probe {lv['capacity_bytes'] / 2**20:9.2f} MiB")
    coll = res["collectives"]
    for op, f in coll["fits"].items():
        if "heldout_max_rel_error" not in f:
            continue
        ok = f["heldout_mean_rel_error"] <= 0.20
        print(f"{'alpha-beta held-out error, ' + op:<44} mean {f['heldout_mean_rel_error'] * 100:6.1f} %  "
              f"max {f['heldout_max_rel_error'] * 100:6.1f} %  target mean <= 20 %  {'PASS' if ok else 'MISS'}"
              f"  (one line: mean {f['line_heldout_mean_rel_error'] * 100:.1f} %, "
              f"max {f['line_heldout_max_rel_error'] * 100:.1f} %)")
        checks.append({"check": f"held-out {op}", "probe": f["heldout_mean_rel_error"], "reference": 0.20,
                       "max": f["heldout_max_rel_error"], "line_mean": f["line_heldout_mean_rel_error"],
                       "line_max": f["line_heldout_max_rel_error"], "pass": ok})
    loc = res["locality"]
    for c in loc["comparison"]:
        if c["measured_weight_bytes"]:
            print(f"{'locality cliff ' + c['level']:<44} measured {c['measured_weight_bytes'] / 2**20:8.2f} MiB  "
                  f"predicted {c['predicted_weight_bytes'] / 2**20:8.2f} MiB  ratio {c['ratio']:.2f}  (reported, no target)")

    refs, comps, mems = _interleaved(args.rounds, args.quick)
    med = statistics.median
    ref = {k: med(r[k] for r in refs) for k in refs[0]}
    print(f"interleaved: {len(refs)} reference runs, {args.rounds} probe runs; load average now "
          f"{os.getloadavg()[0]:.2f}")
    print("  references per run: " + "; ".join(", ".join(f"{k} {r[k] / 1e9:.1f}" for k in r) for r in refs))
    dram = med(m["levels"][-1]["bandwidth_bytes_per_s"] for m in mems)
    print("  probe DRAM 'add' per run (GB/s): " + ", ".join(f"{m['levels'][-1]['bandwidth_bytes_per_s'] / 1e9:.1f}"
                                                       for m in mems))
    if "triad_c" in ref:
        checks.append(_row("DRAM bandwidth ('add') vs STREAM triad (C)", dram, ref["triad_c"], 1e9, 0.15, "GB/s"))
    if "triad_torch" in ref:
        checks.append(_row("DRAM bandwidth ('add') vs torch 1-pass triad", dram, ref["triad_torch"], 1e9, 0.15, "GB/s"))
    checks.append(_row("DRAM bandwidth ('add') vs NumPy 2-pass triad", dram, ref["triad_numpy_2pass"], 1e9, 0.15,
                       "GB/s"))
    best = med(c["best_flops_per_s"]["fp32"] for c in comps)
    best_np = med(c["best_flops_per_s_by_backend"]["numpy"]["fp32"] for c in comps)
    print("  probe best FP32 per run (GFLOP/s): " + ", ".join(f"{c['best_flops_per_s']['fp32'] / 1e9:.1f}" for c in comps))
    checks.append(_row("best FP32 (any backend) vs NumPy 4096^3", best, ref["matmul_numpy"], 1e9, 0.10, "GFLOP/s"))
    checks.append(_row("best FP32 (numpy backend) vs NumPy 4096^3", best_np, ref["matmul_numpy"], 1e9, 0.10, "GFLOP/s"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"wall_time_s": wall, "checks": checks, "references": refs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
