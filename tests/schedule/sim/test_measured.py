"""Checks against what was measured: Llama 3's 54-day run (Dubey et al. 2024 §3.3.4, Table 5) and the cross-rank
skew `narrowpath trace` measures on the real multi-rank traces in shared/traces (docs/simulate.md)."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.analysis.synchronisation import checkpoint_inputs
from narrowpath.catalog import load_scenario
from narrowpath.schedule.sim import simulate
from narrowpath.schedule.sim.distributions import KernelNoise
from narrowpath.spec.noise import Jitter
from narrowpath.spec.noise_parse import parse_noise
from narrowpath.trace import analyze, read_trace, schema
from tests.shared_paths import TRACES

PP_PAIR = [TRACES / "pp-128rank-sampled-rank0.json.gz", TRACES / "pp-128rank-sampled-rank1.json.gz"]


def llama3_run(extra: str = "") -> dict:
    r = simulate(load_scenario("llama3-405b-h100-16k"), parse_noise([f"fail=llama3,horizon=54d{extra}"]), steps=1,
                 checkpoint=checkpoint_inputs)
    lr = r.long_run
    return {"unexpected": sum(lr.interruptions_by_class.values()), "sd": lr.interruptions_sd,
            "planned": lr.planned_interruptions, "by_class": lr.interruptions_by_class,
            "ettr": lr.effective_training_time_ratio, "lost_h": {k: v / 3600 for k, v in lr.lost_s.items()}}


def test_llama3_interruptions_and_effective_training_time():
    """466 interruptions in 54 days, 419 unexpected (78-85 % hardware) and 47 planned; > 90 % effective training
    time. Rates come from Table 5's counts, so the counts check the event simulation (failures on the machine's
    clock, during relaunches too); the training-time ratio depends on detection and relaunch times the paper does
    not give: 10 min (PyTorch's NCCL watchdog default) lands at 90 %, 2 min at 94 %."""
    base = llama3_run()
    assert base["unexpected"] == pytest.approx(419, abs=2 * base["sd"] / np.sqrt(20) + 5)
    assert base["planned"] == pytest.approx(47, abs=2)
    hw = sum(v for k, v in base["by_class"].items() if k != "software") / base["unexpected"]
    assert 0.78 <= hw <= 0.87
    assert 0.88 < base["ettr"] < 0.92
    assert llama3_run(",detect=2min")["ettr"] > 0.92


def trace_skew() -> dict:
    """Measured lateness of rank 1 behind rank 0 at the matched collectives, beside the skew the simulator's
    kernel-noise model gives for the same compute between collectives, with the per-kernel cv fitted on the
    trace (the i-th kernel of a name in one step against the i-th in the next)."""
    trace = read_trace([str(p) for p in PP_PAIR])
    strag = analyze(trace).stragglers
    segs, kernels, cvs, busy = [], [], [], []
    for r in trace.ranks:
        comp = r.act_class == schema.CLASS_COMPUTE
        step = np.searchsorted(r.step_start_s, r.act_start_s, side="right") - 1
        rel = []
        for name in np.unique(r.act_name[comp]):
            a = r.act_dur_s[comp & (r.act_name == name) & (step == 0)]
            b = r.act_dur_s[comp & (r.act_name == name) & (step == 1)]
            k = min(a.size, b.size)
            mean = (a[:k] + b[:k]) / 2
            keep = mean > 0
            rel.append(((a[:k] - b[:k])[keep] / mean[keep], mean[keep]))
        d = np.concatenate([x for x, _ in rel])
        w = np.concatenate([y for _, y in rel])
        cvs.append(float(np.sqrt(np.average(d * d, weights=w) / 2)))
        edges = np.concatenate([[0.0], r.act_start_s[r.act_class == schema.CLASS_COMM]])
        for lo, hi in zip(edges[:-1], edges[1:]):
            inside = comp & (r.act_start_s >= lo) & (r.act_start_s < hi)
            segs.append(float(r.act_dur_s[inside].sum()))
            kernels.append(int(inside.sum()))
        busy.append(float(r.act_dur_s[comp].sum()))
    cv = float(np.mean(cvs))
    noise = KernelNoise(Jitter(dist="lognormal", cv=cv))
    rng = np.random.default_rng(0)
    seg, n = np.array(segs), np.maximum(1, np.array(kernels))
    draws = seg[None, :] * (noise.factor(rng, n[None, :], (20000, seg.size)) - noise.factor(rng, n[None, :],
                                                                                           (20000, seg.size)))
    jitter_skew = float(np.abs(draws).mean())
    imbalance = max(busy) / min(busy) - 1.0
    return {"measured_mean_s": strag.mean_lateness_s[1], "measured_max_s": strag.max_lateness_s[1],
            "cv_kernel": cv, "segment_s": float(seg.mean()), "kernels_per_segment": float(n.mean()),
            "jitter_skew_s": jitter_skew, "device_imbalance": imbalance,
            "imbalance_skew_s": imbalance * float(seg.mean()) + jitter_skew}


@pytest.mark.skipif(not all(p.exists() for p in PP_PAIR), reason="shared/traces not present")
def test_measured_skew_lies_between_kernel_jitter_and_a_persistent_imbalance():
    """On pp-128rank-sampled (ranks 0 and 1) the two collectives the ranks really share (their kernels overlap; the
    other three order-matched pairs were different collectives, which read as 62 ms of lateness until the
    fifty-sixth session) find rank 1 1.7 ms late on average (max 3.3 ms). Kernel jitter fitted on the same trace
    (cv ≈ 0.23 per kernel, ~105 kernels between collectives) gives ~0.7 ms; rank 1's extra device work (+29 %
    compute-kernel time) held as a persistent slowdown of every segment, ~7.8 ms: the measurement lies between —
    the extra work does not fall evenly between collectives. Two pairs are a weak sample; the test pins the orders
    of magnitude the docs state."""
    s = trace_skew()
    assert s["measured_mean_s"] == pytest.approx(0.00169, rel=0.02)
    assert 0.1 < s["cv_kernel"] < 0.4
    assert s["jitter_skew_s"] < s["measured_mean_s"] < s["imbalance_skew_s"]
