"""The noise of one simulated job, resolved onto its units: per-unit pace (slow GPUs and nodes), kernel noise of a
run of segments, interference pauses, slow links and flapping links. Validation against the job (a node, rank or
tier that does not exist) raises SpecError naming the field.

Approximations, stated:
- A unit runs at its slowest member's pace (exact without noise: every tensor-parallel collective waits for it).
- Random-phase pauses of the members of a unit each stall the unit (their sum, an upper bound when two members
  pause inside the same segment); aligned pauses stall it once. A pause delays the run it starts in.
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
            ph = 0.0 if it.aligned else rng.random((lay.pp, lay.num_units, lay.tp)) * it.period_s
            self.phases.append((it, ph, self.cause_index[it.name]))

    # --- per step ----------------------------------------------------------------------------------------
    def new_step(self, rng: np.random.Generator) -> None:
        """Draw which links flap in this step and when (seconds after the step's start)."""
        lay = self.layout
        for f in self.noise.flaps:
            hit = rng.random((lay.pp, lay.num_units * self.batch, lay.tp)) < f.prob
            when = rng.random(hit.shape) * self.nominal_step_s
            self.flap_at[f.tier] = np.where(hit, when, np.inf).min(axis=2)

    # --- queries the engine makes ------------------------------------------------------------------------
    def pauses(self, stage: int, start_abs: np.ndarray, end_abs: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """(cause index, pause seconds per unit) of the periodic pauses starting inside [start, end)."""
        out = []
        for it, ph, ci in self.phases:
            if it.aligned:
                k = np.floor((end_abs - ph) / it.period_s) - np.floor((start_abs - ph) / it.period_s)
            else:
                p = ph[stage]
                k = (np.floor((end_abs[:, None] - p) / it.period_s)
                     - np.floor((start_abs[:, None] - p) / it.period_s)).sum(axis=1)
            if k.any():
                out.append((ci, k * it.pause_s))
        return out
