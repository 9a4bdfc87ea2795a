"""A pass compiled for the engine: runs of compute that only tensor-parallel collectives interrupt (they stay
inside a unit), separated by collectives of other axes (a max over unit groups).

A run's kernel noise for one unit is Σ_j (largest of the tp members' segment-j factors − 1)·d_j: drawn member by
member (`exact`: heavy tails, or when asked), as one draw of the whole run's sum (`single`: one member per unit,
exact for normal noise), or as a normal with the exact mean and variance of that sum (`clt`: light tails at
scale — one draw per unit and run; the test suite holds it against `exact`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from narrowpath.schedule.sim.distributions import KernelNoise
from narrowpath.schedule.sim.work import PassWork, Sync


@dataclass(frozen=True, slots=True)
class Run:
    compute_s: float
    comm_s: float
    """Tensor-parallel (unit-internal) collectives inside the run."""
    comm_bw_s: float
    """Part of comm_s a slow link stretches (bandwidth term)."""
    tiers: tuple[str, ...]
    """Tiers the unit-internal collectives cross (flaps, slow links)."""
    syncs: int
    seg_s: np.ndarray
    seg_kernels: np.ndarray
    mode: str
    """`none`, `single`, `clt` or `exact` (module docstring)."""
    mean_s: float = 0.0
    sd_s: float = 0.0


@dataclass(frozen=True, slots=True)
class PassPlan:
    kind: str
    chunk: int
    items: tuple
    """Run and Sync items in order."""
    compute_s: float


def compile_pass(pw: PassWork, group_of, kernel: KernelNoise | None, tp: int, exact: bool) -> PassPlan:
    """`group_of(axis)` gives the unit groups of an axis (None: the collective stays inside a unit)."""
    items: list = []
    acc = {"comp": 0.0, "comm": 0.0, "bw": 0.0, "tiers": set(), "segs": [], "kern": [], "n": 0}

    def close() -> None:
        if acc["comp"] <= 0 and acc["comm"] <= 0:
            return
        items.append(_run(acc, kernel, tp, exact))
        acc.update(comp=0.0, comm=0.0, bw=0.0, tiers=set(), segs=[], kern=[], n=0)

    n_seg = len(pw.shares)
    for j in range(n_seg):
        d = pw.compute_s * pw.shares[j]
        acc["comp"] += d
        acc["segs"].append(d)
        acc["kern"].append(pw.kernels * pw.shares[j])
        if j < len(pw.syncs):
            s: Sync = pw.syncs[j]
            if s.axis == "tp" or group_of(s.axis) is None:
                acc["comm"] += s.cost_s
                acc["bw"] += max(0.0, s.cost_s - s.latency_s)
                acc["tiers"].update(s.tiers)
                acc["n"] += 1
            else:
                close()
                items.append(s)
    close()
    return PassPlan(pw.kind, pw.chunk, tuple(items), pw.compute_s)


def _run(acc: dict, kernel: KernelNoise | None, tp: int, exact: bool) -> Run:
    seg = np.array([d for d in acc["segs"] if d > 0])
    kern = np.array([k for d, k in zip(acc["segs"], acc["kern"]) if d > 0])
    common = dict(compute_s=acc["comp"], comm_s=acc["comm"], comm_bw_s=acc["bw"], tiers=tuple(sorted(acc["tiers"])),
                  syncs=acc["n"], seg_s=seg, seg_kernels=kern)
    if kernel is None or seg.size == 0:
        return Run(mode="none", **common)
    if tp == 1:
        return Run(mode="single", **common)
    if exact or not kernel.light:
        return Run(mode="exact", **common)
    mean = var = 0.0
    for d, n in zip(seg, kern):
        m, v = kernel.max_moments(float(n), tp)
        mean += d * (m - 1.0)
        var += d * d * v
    return Run(mode="clt", mean_s=mean, sd_s=math.sqrt(var), **common)


def run_excess(run: Run, kernel: KernelNoise, rng: np.random.Generator, units: int, tp: int) -> np.ndarray:
    """Kernel-noise seconds a run adds to each unit (module docstring)."""
    if run.mode == "clt":
        return run.mean_s + run.sd_s * rng.standard_normal(units)
    if run.mode == "single":
        n = float(run.seg_kernels.sum())
        return run.compute_s * (kernel.factor(rng, n, units) - 1.0)
    f = kernel.factor(rng, run.seg_kernels[:, None, None], (run.seg_s.size, units, tp)).max(axis=2)
    return ((f - 1.0) * run.seg_s[:, None]).sum(axis=0)
