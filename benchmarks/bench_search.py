"""Speed and memory of `search` on the catalog scenarios, side by side with a bare loop of predict() over the
same plans (the floor: what pricing alone costs). No issue sets a target yet; the figures go in docs/search.md.

    python benchmarks/bench_search.py [--rounds N]

Each round runs, interleaved, the bare loop, the search and the search with 2 worker processes on one scenario, so
the load of a shared machine hits all alike; medians are reported with their ratios. Peak RSS of a search is
measured in a fresh subprocess.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time

from narrowpath.catalog import load_scenario
from narrowpath.schedule import predict
from narrowpath.search import SearchSpace, candidate_plans, search

SCENARIOS = ["llama3-8b-h100-8", "gpt3-175b-a100-1024", "llama3-70b-h100-256"]

_RSS = """
import resource, sys
from narrowpath.catalog import load_scenario
from narrowpath.search import SearchSpace, search
scn = load_scenario(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
search(scn, SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan))
print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def bare_loop_s(scn, space) -> float:
    t0 = time.perf_counter()
    for plan in candidate_plans(space):
        predict(dataclasses.replace(scn, plan=plan))
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    out = {}
    for name in SCENARIOS:
        scn = load_scenario(name)
        space = SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan)
        loops, searches, searches2, res = [], [], [], None
        for _ in range(args.rounds):
            loops.append(bare_loop_s(scn, space))
            t0 = time.perf_counter()
            res = search(scn, space)
            searches.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            search(scn, space, jobs=2)
            searches2.append(time.perf_counter() - t0)
        rss = subprocess.run([sys.executable, "-c", _RSS, name], capture_output=True, text=True, check=True)
        before_kib, after_kib = map(int, rss.stdout.split())
        t_loop, t_search, t_two = statistics.median(loops), statistics.median(searches), statistics.median(searches2)
        out[name] = {"plans": res.num_plans, "fit": res.num_fit, "search_s": t_search, "bare_loop_s": t_loop,
                     "plans_per_s": res.num_plans / t_search, "ratio_search_to_loop": t_search / t_loop,
                     "search_jobs2_s": t_two, "speedup_jobs2": t_search / t_two,
                     "peak_rss_mib": after_kib / 1024, "rss_growth_mib": (after_kib - before_kib) / 1024,
                     "baseline_rank": res.baseline_rank,
                     "best_vs_baseline": (res.ranked[0].step_time_s / res.baseline.step_time_s
                                          if res.baseline and res.baseline_rank else None)}
        o = out[name]
        print(f"{name:22s} {o['plans']:6,d} plans ({o['fit']:,} fit)  search {t_search:6.2f} s "
              f"({o['plans_per_s']:,.0f} plans/s)  bare predict loop {t_loop:6.2f} s  ratio {o['ratio_search_to_loop']:.2f}"
              f"  --jobs 2 {t_two:6.2f} s (x{o['speedup_jobs2']:.2f})"
              f"  peak RSS {o['peak_rss_mib']:.0f} MiB (+{o['rss_growth_mib']:.0f} during the search)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
