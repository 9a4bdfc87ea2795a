"""The noise of one simulated job, resolved onto its units: per-unit pace (slow GPUs and nodes), kernel noise of a
run of segments, interference pauses, slow links and flapping links. Validation against the job (a node, rank or
tier that does not exist) raises SpecError naming the field.

Approximations, stated:
- A unit runs at its slowest member's pace (exact without noise: every tensor-parallel collective waits for it).
- A unit stalls while any of its members is paused (its tensor-parallel collectives come every few kernels, so a
  paused member holds the others at the next one): a run that needs w seconds of work from t ends when the time
  outside the union of its members' pauses since t reaches w (`finish_time`, exact for one periodic pause of random
  or aligned phase; until the fifty-sixth session the pauses starting inside the run's unpaused span were summed and
  the ones starting in the delay they caused were never counted: a tp-8 unit pausing 10 % of each period per member
  ran 1.92x slower where an event Monte Carlo gives 2.43x). Several pause kinds: each kind's pauses are exact and
  the other kinds' pauses inside the run count as more work, repeated until the end stops moving (`paused_end`), so
  a pause of one kind inside another's is counted twice — an upper bound.
- A flap stalls the first collective through the link after the flap's moment; within a tensor-parallel run the
  check is made once per run.
"""
from __future__ import annotations

import numpy as np

from narrowpath.errors import SpecError
from narrowpath.schedule.sim.distributions import KernelNoise
from narrowpath.schedule.sim.layout import Layout, unit_factor
from narrowpath.spec.noise import NoiseSpec
from narrowpath.spec.scenario import Scenario


class Perturbation:
    """Noise state of a job: fixed parts resolved once, per-step parts redrawn by `new_step`."""

    def __init__(self, noise: NoiseSpec, scn: Scenario, layout: Layout, nominal_step_s: float):
        self.noise, self.layout = noise, layout
        self.causes = noise.causes()
        self.cause_index = {c: i for i, c in enumerate(self.causes)}
        n, gpn = scn.num_gpus, scn.system.gpus_per_node
        num_nodes = -(-n // gpn)
        self.kernel = KernelNoise(noise.jitter) if noise.jitter else None
        factor = np.ones(n)
        label = np.zeros(n, dtype=np.int64)
        for s in noise.slow:
            rank_f = np.ones(n)
            for i in s.ids:
                if s.kind == "node":
                    if i >= num_nodes:
                        raise SpecError("noise.slow-node", f"node {i} does not exist: the job has {num_nodes} nodes "
                                        f"(0..{num_nodes - 1}) of {gpn} GPUs")
                    rank_f[i * gpn:(i + 1) * gpn] = 1.0 + s.fraction
                else:
                    if i >= n:
                        raise SpecError("noise.slow-gpu", f"rank {i} does not exist: the job has {n} GPUs (0..{n - 1})")
                    rank_f[i] = 1.0 + s.fraction
            label = np.where(rank_f > factor, self.cause_index[f"slow-{s.kind}"], label)
            factor = np.maximum(factor, rank_f)
        self.factor1 = unit_factor(layout, factor) if noise.slow else None
        self.slow_label1 = None
        if noise.slow:
            members = factor[layout.unit_ranks]
            pick = members.argmax(axis=2)[..., None]
            self.slow_label1 = np.take_along_axis(label[layout.unit_ranks], pick, axis=2)[..., 0]
            """(pp, units) cause index of the slowness that sets each unit's pace (slow-node or slow-gpu)."""
        self.slow_link1: dict[str, np.ndarray] = {}
        for sl in noise.slow_links:
            if not scn.system.has_tier(sl.tier):
                raise SpecError("noise.slow-link.tier", f"the system has no {sl.tier} tier")
            if sl.rank >= n:
                raise SpecError("noise.slow-link.rank", f"rank {sl.rank} does not exist: the job has {n} GPUs")
            flag = np.zeros(n)
            flag[sl.rank] = sl.fraction
            self.slow_link1[sl.tier] = np.maximum(self.slow_link1.get(sl.tier, 0.0), unit_factor(layout, flag))
        self.nominal_step_s = nominal_step_s
        self.flap_at: dict[str, np.ndarray] = {}
        self.flap_penalty = {f.tier: f.penalty_s for f in noise.flaps}
        for f in noise.flaps:
            if not scn.system.has_tier(f.tier):
                raise SpecError("noise.link-flap.tier", f"the system has no {f.tier} tier")
        self.phases: list = []
        self.set_batch(1)

    def set_batch(self, batch: int) -> None:
        """Tile the fixed per-unit state over `batch` steps played side by side (see StepEngine.set_batch)."""
        self.batch = batch
        self.factor = None if self.factor1 is None else np.tile(self.factor1, (1, batch))
        self.slow_label = None if self.slow_label1 is None else np.tile(self.slow_label1, (1, batch))
        self.lanes = np.arange(self.layout.num_units * batch)
        self.slow_link = {k: np.tile(v, (1, batch)) for k, v in self.slow_link1.items()}

    # --- per job -----------------------------------------------------------------------------------------
    def draw_phases(self, rng: np.random.Generator) -> None:
        """Random phases of the periodic pauses, per member rank ((pp, units, tp) arrays); steps with pauses are
        played one at a time (a pause depends on where the step starts in wall time)."""
        lay = self.layout
        self.phases = []
        for it in self.noise.interference:
            ph = np.zeros((lay.pp, lay.num_units, 1)) if it.aligned else \
                rng.random((lay.pp, lay.num_units, lay.tp)) * it.period_s
            pattern = pause_pattern(ph, it.period_s, it.pause_s)
            if (pattern[2] >= it.period_s * (1 - 1e-9)).any():
                raise SpecError(f"noise.{it.name}", f"the {lay.tp} members of a unit pause {it.pause_s:g} s every "
                                f"{it.period_s:g} s at phases that leave it no time to run")
            self.phases.append((it, pattern, self.cause_index[it.name]))

    # --- per step ----------------------------------------------------------------------------------------
    def new_step(self, rng: np.random.Generator) -> None:
        """Draw which links flap in this step and when (seconds after the step's start)."""
        lay = self.layout
        for f in self.noise.flaps:
            hit = rng.random((lay.pp, lay.num_units * self.batch, lay.tp)) < f.prob
            when = rng.random(hit.shape) * self.nominal_step_s
            self.flap_at[f.tier] = np.where(hit, when, np.inf).min(axis=2)

    # --- queries the engine makes ------------------------------------------------------------------------
    def paused_end(self, stage: int, start_abs: np.ndarray, end_abs: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """(cause index, seconds per unit) by which each pause kind delays runs of `stage` that start at `start_abs`
        and, unpaused, would end at `end_abs` (wall-clock seconds): the run ends at the f where f − start = work +
        Σ_k paused_k[start, f) — each kind's pauses inverted exactly (`finish_time`) with the other kinds' pauses in
        [start, f) taken as more work, kind after kind until f stops moving (one kind: one inversion). Returns each
        kind's paused seconds in [start, f), which add up to f − end."""
        kinds = [((st[stage], ln[stage], per[stage]), it.period_s, ci) for it, (st, ln, per), ci in self.phases]
        work = end_abs - start_abs
        end = end_abs
        for _ in range(PAUSE_PASSES if len(kinds) > 1 else 1):
            before = end
            for k, (pattern, period, _) in enumerate(kinds):
                others = sum((paused_before(end, p, T) - paused_before(start_abs, p, T)
                              for j, (p, T, _) in enumerate(kinds) if j != k), np.zeros_like(end))
                end = finish_time(start_abs, work + others, pattern, period)
            if np.array_equal(end, before):
                break
        return [(ci, paused_before(end, p, T) - paused_before(start_abs, p, T)) for p, T, ci in kinds]


PAUSE_PASSES = 64
"""Rounds of `paused_end` over several pause kinds at most (each round can only lengthen the run; a few suffice)."""


def pause_pattern(phases_s: np.ndarray, period_s: float, pause_s: float):
    """The union of periodic pauses of a unit's members within one period: (starts (..., M) sorted in [0, period),
    lengths (..., M) — each member's pause trimmed where the next one's begins, the last one's where the first one's
    begins a period later, so the pieces are disjoint on the circle —, paused seconds per period (...)).
    `phases_s` (..., M): when each member's pauses start."""
    s = np.sort(np.mod(phases_s, period_s), axis=-1)
    gap = np.roll(s, -1, axis=-1) - s
    gap[..., -1] += period_s
    c = np.minimum(pause_s, gap)
    return s, c, c.sum(axis=-1)


def paused_before(x: np.ndarray, pattern, period_s: float) -> np.ndarray:
    """Seconds of [0, x) inside the union of the pauses (the pattern repeats every period, from −∞)."""
    s, c, per = pattern
    n = np.floor(x / period_s)
    y = (x - n * period_s)[..., None]
    wrap = np.clip(s + c - period_s, 0.0, None)  # the part of a pause that runs into the next period
    return n * per + (np.clip(y - s, 0.0, c).sum(axis=-1) + np.minimum(y, wrap).sum(axis=-1))


def finish_time(start_abs: np.ndarray, work_s: np.ndarray, pattern, period_s: float) -> np.ndarray:
    """The first moment f ≥ start at which the time outside the pauses in [start, f) reaches `work_s` (per unit):
    the free time up to x is x − paused_before(x), a non-decreasing piecewise-linear function; invert it — whole
    periods first, then, within one period, the first free gap whose end reaches the rest (the gaps: after the
    wrapped part of the last pause, between the pieces, and after the last piece)."""
    s, c, per = pattern
    free_per = period_s - per
    target = (start_abs - paused_before(start_abs, pattern, period_s)) + work_s
    n = np.floor(target / free_per)
    r = target - n * free_per
    last = r <= 0  # exactly at a period's free total: the previous period's last free moment
    n, r = np.where(last, n - 1, n), np.where(last, r + free_per, r)
    wrap = np.clip(s[..., -1:] + c[..., -1:] - period_s, 0.0, None)
    gap_start = np.concatenate([wrap, s + c], axis=-1)  # the last piece's end: its gap is empty when it wraps
    gap_end = np.concatenate([s, np.full(s.shape[:-1] + (1,), period_s)], axis=-1)
    length = np.maximum(gap_end - gap_start, 0.0)
    cum = np.cumsum(length, axis=-1)
    # the first gap whose end reaches r (to rounding: a run that ends as a pause begins ends there, not after it)
    j = np.minimum((cum < r[..., None] - 1e-12 * period_s).sum(axis=-1), length.shape[-1] - 1)[..., None]
    y = np.take_along_axis(gap_start + r[..., None] - (cum - length), j, axis=-1)[..., 0]
    return np.maximum(n * period_s + y, start_abs + work_s)
