"""Print the tables of docs/simulate.md: simulator vs closed form (noise-free, jitter, slow node, pauses) and the
checks against measurements (Llama 3's 54-day run, trace skew). Run: python benchmarks/sim_checks.py"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

from narrowpath.analysis import AnalysisOptions, analyze_prediction
from narrowpath.catalog import load_scenario
from narrowpath.schedule.sim import simulate
from narrowpath.schedule.sim.work import build_sim_work
from narrowpath.schedule.step import predict
from narrowpath.spec.noise_parse import parse_noise
from narrowpath.validate.corpus import load_corpus

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "schedule" / "sim"))
sys.path.insert(0, str(ROOT))  # the test helpers import tests.shared_paths
import test_measured  # noqa: E402  (the checks' own helpers)


def consistency() -> None:
    rows = []
    for path in (None,):  # every shipped training corpus (training-public, -sweeps-public, published-extra)
        for c in load_corpus(path):
            if c.scenario is None:
                continue
            r = simulate(c.scenario, steps=1)
            rows.append(((r.noise_free_step_time_s / r.closed_form_step_time_s - 1) * 100, c.id))
    rows.sort(key=lambda x: -abs(x[0]))
    print(f"noise-free simulated vs predict: {len(rows)} cases, largest differences:")
    for d, cid in rows[:6]:
        print(f"  {cid:40s} {d:+.3f} %")


def _tp_only():
    s = load_scenario("llama3-8b-h100-8")
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, tp=8, dp=1, gbs=8, sequence_parallel=True))


def jitter_table() -> None:
    print("\njitter: closed form (analysis, normal, per sync point) vs simulator, per-kernel cv 0.1, 30 steps")
    print("  case                          closed (ms)  sim mean (ms)  sim p99 (ms)  gap")
    for label, scn, spec in (("TP 8, one stage, normal", _tp_only(), "jitter=normal:0.1"),
                             ("TP 8, one stage, lognormal", _tp_only(), "jitter=lognormal:0.1"),
                             ("TP 8, one stage, Pareto a=2.5", _tp_only(), "jitter=pareto:0.1:2.5"),
                             ("TP 8, one stage, Pareto a=2.2", _tp_only(), "jitter=pareto:0.1:2.2"),
                             ("DP 8 (DDP), normal", load_scenario("llama3-8b-h100-8"), "jitter=normal:0.1"),
                             ("70B pp4 vpp5 dp8, normal", load_scenario("llama3-70b-h100-256"),
                              "jitter=normal:0.1")):
        pred = predict(scn)
        work = build_sim_work(pred)
        kernels = sum(pw.kernels for st in work.stages for pw in st.passes.values()) * work.num_microbatches
        n_sync = analyze_prediction(pred, AnalysisOptions(what_ifs=False)).synchronisation.sync_points_per_step
        cv_seg = 0.1 / np.sqrt(kernels / n_sync)
        closed = analyze_prediction(pred, AnalysisOptions(jitter_cv=cv_seg, what_ifs=False)).synchronisation
        r = simulate(scn, parse_noise([spec]), steps=30, seed=5)
        w = r.step_times_s - r.noise_free_step_time_s
        print(f"  {label:30s} {closed.jitter_wait_s * 1e3:11.2f}  {w.mean() * 1e3:13.2f}  "
              f"{np.percentile(w, 99) * 1e3:12.2f}  {(w.mean() / closed.jitter_wait_s - 1) * 100:+.1f} %")
    scn = load_scenario("llama3-70b-h100-256")
    pred = predict(scn)
    sync = analyze_prediction(pred, AnalysisOptions(slow_node_fraction=0.2, what_ifs=False)).synchronisation
    r = simulate(scn, parse_noise(["slow-node=1:0.2"]), steps=2)
    print(f"  one node 20 % slow (70B)       closed +{sync.slow_node_step_s - pred.step_time_s:.3f} s  "
          f"sim +{r.stats()['mean'] - r.noise_free_step_time_s:.3f} s")
    for ph in ("aligned", "random"):
        r = simulate(scn, parse_noise([f"gc=2:0.05:{ph}"]), steps=3, seed=1)
        print(f"  GC 50 ms every 2 s, {ph:7s}      sim +{r.stats()['mean'] - r.noise_free_step_time_s:.3f} s "
              f"(no closed form)")


def measured() -> None:
    for extra in ("", ",detect=2min"):
        d = test_measured.llama3_run(extra)
        print(f"\nLlama 3 405B, 54 days, fail=llama3{extra}: unexpected {d['unexpected']:.1f} (sd {d['sd']:.1f}), "
              f"planned {d['planned']:.1f}, by class { {k: round(v, 1) for k, v in d['by_class'].items()} }, "
              f"effective training time {d['ettr']:.3f}; lost hours { {k: round(v, 1) for k, v in d['lost_h'].items()} }")
    s = test_measured.trace_skew()
    print(f"\ntrace skew pp-128rank-sampled ranks 0/1: measured mean {s['measured_mean_s'] * 1e3:.1f} ms, "
          f"max {s['measured_max_s'] * 1e3:.1f} ms; kernel cv {s['cv_kernel']:.3f}, segment {s['segment_s'] * 1e3:.1f} ms "
          f"({s['kernels_per_segment']:.0f} kernels); simulated jitter skew {s['jitter_skew_s'] * 1e3:.2f} ms; with "
          f"rank 1's +{s['device_imbalance'] * 100:.0f} % device work {s['imbalance_skew_s'] * 1e3:.2f} ms")


if __name__ == "__main__":
    consistency()
    jitter_table()
    measured()
