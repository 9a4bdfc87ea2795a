"""Speed and memory of `narrowpath.schedule.sim.simulate` (issue 12 targets; a benchmark, not a timed test).

- Llama-3 405B on 16,384 GPUs (catalog `llama3-405b-h100-16k`), 20 steps, per-kernel noise and one slow node:
  ≤ 10 s on 2 cores, ≤ 2 GB peak RSS;
- a 1,024-GPU job (`gpt3-175b-a100-1024`) for 1,000 steps: ≤ 30 s;
- cost at 1k, 4k, 16k, 64k ranks (the 405B plan with dp scaled, 16 micro-batches per pipeline): at most linear in
  ranks × steps.
Each case runs in a fresh interpreter (peak RSS is that process's; imports included in RSS, not in the times).
Wall time on a shared machine counts other users' load; CPU time of the process is reported beside it.
Run: python benchmarks/bench_simulate.py [--quick]
"""
from __future__ import annotations

import json
import subprocess
import sys

NOISE = "jitter=lognormal:0.05,slow-node=5:0.2"
CASE = r'''
import dataclasses, json, resource, sys, time
from narrowpath.catalog import load_scenario
from narrowpath.schedule.sim import simulate
from narrowpath.spec.noise_parse import parse_noise
name, dp, steps, noise = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
scn = load_scenario(name)
if dp:
    plan = dataclasses.replace(scn.plan, dp=dp, gbs=dp * scn.plan.mbs * scn.plan.num_microbatches)
    scn = dataclasses.replace(scn, plan=plan, num_gpus=plan.num_gpus)
t, c = time.perf_counter(), time.process_time()
r = simulate(scn, parse_noise([noise]), steps=steps, seed=1)
wall, cpu = time.perf_counter() - t, time.process_time() - c
print(json.dumps({"gpus": scn.num_gpus, "steps": steps, "wall_s": wall, "cpu_s": cpu,
                  "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
                  "units": r.units_per_stage, "mean_step_s": r.stats()["mean"],
                  "noise_free_s": r.noise_free_step_time_s}))
'''


def run(name: str, dp: int, steps: int, noise: str = NOISE) -> dict:
    out = subprocess.run([sys.executable, "-c", CASE, name, str(dp), str(steps), noise], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    quick = "--quick" in sys.argv
    ok = True
    r = run("llama3-405b-h100-16k", 0, 20)
    hit = r["cpu_s"] <= 10 and r["rss_gb"] <= 2
    ok &= hit
    print(f"405B, 16,384 GPUs, 20 steps, {NOISE}: wall {r['wall_s']:.2f} s, cpu {r['cpu_s']:.2f} s, "
          f"peak RSS {r['rss_gb']:.2f} GB (targets 10 s, 2 GB) {'OK' if hit else 'MISS'}")
    r = run("gpt3-175b-a100-1024", 0, 100 if quick else 1000)
    hit = r["cpu_s"] <= 30 * r["steps"] / 1000
    ok &= hit
    print(f"GPT-3 175B, 1,024 GPUs, {r['steps']} steps: wall {r['wall_s']:.2f} s, cpu {r['cpu_s']:.2f} s "
          f"(target 30 s per 1,000 steps) {'OK' if hit else 'MISS'}")
    print("\ncost by ranks (405B plan, dp scaled, 20 steps, same noise)")
    print("  GPUs    units/stage  wall (s)  cpu (s)  cpu per rank-step (us)  peak RSS (GB)")
    rows = []
    for dp in (8, 32, 128) + (() if quick else (512,)):
        r = run("llama3-405b-h100-16k", dp, 20)
        per = r["cpu_s"] / (r["gpus"] * r["steps"]) * 1e6
        rows.append(per)
        print(f"  {r['gpus']:6d}  {r['units']:11d}  {r['wall_s']:8.2f}  {r['cpu_s']:7.2f}  {per:22.3f}  "
              f"{r['rss_gb']:13.2f}")
    linear = all(b <= a * 1.15 for a, b in zip(rows, rows[1:]))
    ok &= linear
    print(f"  cost per rank-step does not grow with ranks: {'OK' if linear else 'MISS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
