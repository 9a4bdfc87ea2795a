"""Speed of the serving simulator and of `search --serve` (issue 13 targets; run apart from the tests).

    python benchmarks/bench_serve.py [--rounds N] [--jobs J] [--json FILE]

1. A 10,000-request simulation of Llama-3 70B on 8 H100 (target <= 2 s): open-loop Poisson arrivals that
   overload the server (every iteration mixes prompt chunks with decodes), offline (all queued at 0), and four
   tp-2 replicas with on-demand KV and preemption.
2. `search --serve` over >= 1,000 plans (target <= 30 s on 2 cores): Mixtral 8x7B on 16 H100 (tp, pp,
   attention dp, ep, replicas, disaggregated splits, 8 batch limits; then the pairs of prefill and decode layouts
   the first pass reads off, search.serve_space.pool_pairs).
Wall time and CPU time (this process and its workers) are both reported: on a shared machine the wall time
depends on the load, the CPU time much less. Medians over the rounds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from narrowpath.catalog import model, system
from narrowpath.schedule.serving_run import simulate
from narrowpath.search.serve_space import ServeSpace, count_plans, search_serve
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario

SIM_CASES = {
    "poisson 20 req/s, tp8": (ServingPlan(tp=8), Load(arrival="poisson", rate_per_s=20, input_tokens=1024,
                                                      output_tokens=256, num_requests=10_000)),
    "offline, tp8 fp8": (ServingPlan(tp=8, weight_precision="fp8", kv_precision="fp8"),
                         Load(arrival="offline", input_tokens=1024, output_tokens=256, num_requests=10_000)),
    "poisson 20 req/s, 4 x tp2 on-demand": (ServingPlan(tp=2, replicas=4, admission="on-demand"),
                                            Load(arrival="poisson", rate_per_s=20, input_tokens=1024,
                                                 output_tokens=256, num_requests=10_000)),
}


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def timed(fn):
    w0, c0 = time.perf_counter(), _cpu()
    out = fn()
    return out, time.perf_counter() - w0, _cpu() - c0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    report: dict = {"simulate": {}, "search": {}}
    h100, llama70 = system("dgx-h100"), model("llama3-70b")
    for name, (plan, load) in SIM_CASES.items():
        scn = ServingScenario(system=h100, model=llama70, plan=plan, load=load, num_gpus=8)
        walls, cpus = [], []
        for _ in range(args.rounds):
            run, w, c = timed(lambda: simulate(scn))
            walls.append(w)
            cpus.append(c)
        res = run.result
        report["simulate"][name] = {"requests": int(res.input_tokens.size), "iterations": res.totals.iterations,
                                    "wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus),
                                    "output_tokens_per_s": res.output_tokens_per_s}
        print(f"simulate {name}: {res.input_tokens.size:,} requests, {res.totals.iterations:,} iterations, "
              f"wall {statistics.median(walls):.2f} s, cpu {statistics.median(cpus):.2f} s (target <= 2 s)")
    space = ServeSpace(model("mixtral-8x7b"), h100, 16, Load(input_tokens=1024, output_tokens=256),
                       ServingPlan(weight_precision="fp8", kv_precision="fp8"))
    walls, cpus = [], []
    for _ in range(max(1, args.rounds - 1)):
        res, w, c = timed(lambda: search_serve(space, 2.0, 0.05, jobs=args.jobs))
        walls.append(w)
        cpus.append(c)
    report["search"] = {"plans": res.num_plans, "first_pass": count_plans(space), "meets_slo": len(res.ranked),
                        "jobs": args.jobs,
                        "wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus)}
    print(f"search --serve mixtral-8x7b on 16 H100: {res.num_plans:,} plans ({count_plans(space):,} in the first pass, "
          f"{len(res.ranked):,} meet the "
          f"SLOs), {args.jobs} jobs: wall {statistics.median(walls):.1f} s, cpu {statistics.median(cpus):.1f} s "
          f"(target <= 30 s on 2 cores)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
