"""Speed and memory of `search` (issue 15 targets), measured side by side in one run:

    GPT-3 175B on 1,024 A100, the first search's 21,799-plan space (`--space basic`)   ≤ 1 s
    the same scenario's full space (≥ 1 M plans)                                        ≤ 10 s
    Llama-3 405B on 16,384 H100, full space                                             ≤ 10 s
    predict, in-process                                                                  ≤ 2 ms

beside what the first search cost: one `predict` per plan (a bare loop of predict over the same 21,799 plans, and
that loop's rate applied to the full spaces). Every search runs in a fresh process (imports and the catalog
loaded, then one small unrelated search to load the calibration profiles, then the timed search: nothing it prices
is cached), `--rounds` times, interleaved with the bare loop; medians are reported, with the peak RSS of the
searching process and the machine's load average.

    python benchmarks/bench_search.py [--rounds N] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

TARGETS = [("gpt3-175b-a100-1024", "basic", 1.0), ("gpt3-175b-a100-1024", "full", 10.0),
           ("llama3-405b-h100-16k", "full", 10.0)]

_SEARCH = r"""
import json, resource, sys, time
from narrowpath.catalog import load_scenario
from narrowpath.search import SearchSpace, search
name, extent = sys.argv[1], sys.argv[2]
warm = load_scenario("llama3-8b-h100-8")
search(warm, SearchSpace(warm.model, warm.system, 8, warm.plan.gbs, warm.plan, {"tp": 8, "cp": 1, "mbs": 1}))
scn = load_scenario(name)
space = SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, extent=extent)
t0, c0 = time.perf_counter(), time.process_time()
r = search(scn, space)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"seconds": wall, "cpu_s": cpu, "num_candidates": r.num_candidates, "num_priced": r.num_priced,
                  "num_fit": r.num_fit, "baseline_rank": r.baseline_rank, "best_s": r.ranked[0].step_time_s,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_LOOP = r"""
import dataclasses, json, sys, time
from narrowpath.catalog import load_scenario
from narrowpath.schedule import predict
from narrowpath.search import SearchSpace, candidate_plans
name, limit = sys.argv[1], int(sys.argv[2])
scn = load_scenario(name)
plans = list(candidate_plans(SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan,
                                         extent="basic")))[:limit]
predict(scn)
t0 = time.perf_counter()
for p in plans:
    predict(dataclasses.replace(scn, plan=p))
print(json.dumps({"seconds": time.perf_counter() - t0, "plans": len(plans)}))
"""

_PREDICT = r"""
import json, statistics, sys, time
from narrowpath.catalog import load_scenario
from narrowpath.schedule import predict
out = {}
for name in sys.argv[1:]:
    scn = load_scenario(name)
    predict(scn)
    times = []
    for _ in range(200):
        t0 = time.perf_counter()
        predict(scn)
        times.append(time.perf_counter() - t0)
    out[name] = statistics.median(times)
print(json.dumps(out))
"""


def _run(code: str, *args: str) -> dict:
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loop-plans", type=int, default=21_799, help="plans of the bare predict loop (all: 21,799)")
    ap.add_argument("--json")
    args = ap.parse_args()
    runs: dict[tuple, list[dict]] = {t[:2]: [] for t in TARGETS}
    loops, predicts, loads = [], [], []
    for _ in range(args.rounds):
        loads.append(os.getloadavg()[0])
        loops.append(_run(_LOOP, "gpt3-175b-a100-1024", str(args.loop_plans)))
        for name, extent, _ in TARGETS:
            runs[(name, extent)].append(_run(_SEARCH, name, extent))
        predicts.append(_run(_PREDICT, "gpt3-175b-a100-1024", "llama3-405b-h100-16k", "llama3-70b-h100-256",
                             "llama3-8b-h100-8"))
    per_plan = statistics.median(r["seconds"] / r["plans"] for r in loops)
    out: dict = {"load_average": loads, "predict_per_plan_s": per_plan, "searches": {}, "predict_in_process_s": {}}
    print(f"load average {', '.join(f'{x:.1f}' for x in loads)}; bare predict loop over the first search's plans: "
          f"{per_plan * 1e3:.2f} ms a plan ({1 / per_plan:,.0f} plans/s)")
    ok = True
    for name, extent, target in TARGETS:
        rs = runs[(name, extent)]
        wall = statistics.median(r["seconds"] for r in rs)
        cpu = statistics.median(r["cpu_s"] for r in rs)
        first = rs[0]
        old = first["num_candidates"] * per_plan
        ok &= wall <= target
        out["searches"][f"{name}/{extent}"] = {"seconds": wall, "cpu_s": cpu, "target_s": target,
                                               "first_search_estimate_s": old, **{k: first[k] for k in first
                                                                                  if k not in ("seconds", "cpu_s")}}
        print(f"{name:22s} {extent:5s} {first['num_candidates']:>11,} plans ({first['num_priced']:,} priced in full) "
              f"search {wall:6.2f} s (cpu {cpu:5.2f} s) target <= {target:g} s {'OK  ' if wall <= target else 'MISS'}"
              f" | one predict per plan: {old:,.0f} s (x{old / wall:,.0f}) | peak RSS "
              f"{max(r['peak_rss_mib'] for r in rs):.0f} MiB")
    for name in predicts[0]:
        t = statistics.median(p[name] for p in predicts)
        ok &= t <= 2e-3
        out["predict_in_process_s"][name] = t
        print(f"predict in-process {name:24s} median {t * 1e3:6.3f} ms  target <= 2 ms {'OK' if t <= 2e-3 else 'MISS'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
