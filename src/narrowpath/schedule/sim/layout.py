"""Where the simulator's state lives: per pipeline stage, one clock per *unit* — the tp ranks of one (cp, ep, dp)
coordinate, which meet at every tensor-parallel collective — and the groups other axes form over those units.

Every rank of a stage runs the same program, so a stage's state is a numpy array over its units and one program
event updates all of them at once; a collective of axis A is a max over each group's members (an index array of
shape groups × members). Units keep the placement's rank order, so unit u of stage i and unit u of stage i + 1
are pipeline neighbours. Without noise every unit behaves alike and one unit per stage stands for all (symmetry).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from narrowpath.network.placement import all_groups, axis_sizes, axis_strides
from narrowpath.spec.scenario import Scenario

UNIT_AXES = ("cp", "ep", "dp", "edp")
"""Axes whose groups span several units (tp stays inside a unit; pp links stages)."""


@dataclass(frozen=True, slots=True, eq=False)
class Layout:
    pp: int
    tp: int
    num_units: int
    """Units per stage (cp·dp, or 1 under symmetry)."""
    unit_ranks: np.ndarray
    """(pp, units, tp) global rank of every member."""
    groups: dict
    """Placement axis (cp, ep, dp, edp, dpcp, edpcp) → (groups, members) unit indices; None for groups of one."""
    symmetric: bool

    def group(self, axis: str, cp: int) -> np.ndarray | None:
        """Unit groups a transfer of `axis` synchronises (dp/edp span dp×cp / cp×dp/ep with context parallelism)."""
        key = {"dp": "dpcp", "edp": "edpcp"}.get(axis, axis) if cp > 1 else axis
        return self.groups.get(key)

    def locate(self, rank: int) -> tuple[int, int, int]:
        """(stage, unit, tp index) of a global rank."""
        hit = np.argwhere(self.unit_ranks == rank)
        if hit.size == 0:
            raise IndexError(rank)
        s, u, t = hit[0]
        return int(s), int(u), int(t)


def build_layout(scn: Scenario, symmetric: bool) -> Layout:
    plan = scn.plan
    sizes, strides = axis_sizes(plan), axis_strides(plan)
    pp, tp = plan.pp, plan.tp
    base = np.zeros(1, dtype=np.int64)
    for ax in ("cp", "ep", "dp"):
        base = (base[:, None] + strides[ax] * np.arange(sizes[ax])[None, :]).reshape(-1)
    base = np.sort(base)
    if symmetric:
        base = base[:1]
    stage_off = strides["pp"] * np.arange(pp)
    tp_off = strides["tp"] * np.arange(tp)
    unit_ranks = stage_off[:, None, None] + base[None, :, None] + tp_off[None, None, :]
    groups: dict = {}
    if not symmetric:
        unit_of = np.full(plan.num_gpus, -1, dtype=np.int64)
        unit_of[unit_ranks[0, :, 0]] = np.arange(base.size)
        for axis in ("cp", "ep", "dp", "edp", "dpcp", "edpcp"):
            if axis in ("cp", "dpcp", "edpcp") and plan.cp == 1:
                continue
            rows = all_groups(plan, axis)
            if rows.shape[1] <= 1:
                groups[axis] = None
                continue
            mask = (unit_of[rows] >= 0).all(axis=1)
            groups[axis] = unit_of[rows[mask]]
    return Layout(pp, tp, int(base.size), unit_ranks, groups, symmetric)


def unit_factor(layout: Layout, rank_factor: np.ndarray) -> np.ndarray:
    """(pp, units) pace of each unit from per-rank compute-time factors: a unit waits for its slowest member at
    every tensor-parallel collective, so it runs at the largest factor of its members."""
    return rank_factor[layout.unit_ranks].max(axis=2)
