"""Where the simulator's state lives: per pipeline stage, one clock per *unit* — the tp ranks of one (cp, ep, dp)
coordinate, which meet at every tensor-parallel collective — and the groups other axes form over those units.

Every rank of a stage runs the same program, so a stage's state is a numpy array over its units and one program
event updates all of them at once; a collective of axis A is a max over each group's members (an index array of
shape groups × members). Expert groups (etp × ep × edp over a stage's ranks, Megatron-Core) may cut across
tensor-parallel groups: the units they touch are synchronised together. Units keep the placement's rank order, so unit u of stage i and unit u of stage i + 1
are pipeline neighbours. Without noise every unit behaves alike and one unit per stage stands for all (symmetry).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from narrowpath.network.placement import all_groups, axis_sizes, axis_strides
from narrowpath.schedule.step import sync_axis
from narrowpath.spec.scenario import Scenario

UNIT_AXES = ("cp", "dp", "dpcp", "ep", "edp", "etp")
"""Axes whose groups can span several units (tp stays inside a unit; pp links stages)."""


@dataclass(frozen=True, slots=True, eq=False)
class Layout:
    pp: int
    tp: int
    num_units: int
    """Units per stage (cp·dp, or 1 under symmetry)."""
    unit_ranks: np.ndarray
    """(pp, units, tp) global rank of every member."""
    groups: dict
    """Placement axis (UNIT_AXES) → (groups, members) unit indices; None when its groups stay inside units."""
    symmetric: bool

    def group(self, axis: str, cp: int) -> np.ndarray | None:
        """Unit groups a transfer of `axis` synchronises (dp spans dp × cp with context parallelism, and a
        deduplicating expert dispatch's two legs, `ep_inter` and `ep_intra`, the ep group, as `schedule.step`'s
        sync_group prices them)."""
        return self.groups.get(sync_axis(axis, cp))

    def locate(self, rank: int) -> tuple[int, int, int]:
        """(stage, unit, tp index) of a global rank."""
        hit = np.argwhere(self.unit_ranks == rank)
        if hit.size == 0:
            raise IndexError(rank)
        s, u, t = hit[0]
        return int(s), int(u), int(t)


def _unit_groups(rows: np.ndarray, unit_of: np.ndarray) -> np.ndarray | None:
    """Groups of units an axis's collectives synchronise: units sharing a member group, merged when groups overlap
    (Megatron-Core's expert layout can cut across tensor-parallel groups: etp × ep × edp over a stage's ranks).
    Rows are padded with their first unit when the merged groups differ in size; None when every group stays
    inside one unit."""
    mine = rows[(unit_of[rows] >= 0).all(axis=1)]
    parent = list(range(int(unit_of.max()) + 1))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for row in unit_of[mine]:
        first = find(int(row[0]))
        for u in np.unique(row[1:]):
            root = find(int(u))
            if root != first:
                parent[root] = first
    comps: dict[int, list[int]] = {}
    for u in range(len(parent)):
        comps.setdefault(find(u), []).append(u)
    size = max(len(c) for c in comps.values())
    if size == 1:
        return None
    return np.array([c + [c[0]] * (size - len(c)) for c in sorted(comps.values())], dtype=np.int64)


def build_layout(scn: Scenario, symmetric: bool) -> Layout:
    plan = scn.plan
    sizes, strides = axis_sizes(plan), axis_strides(plan)
    pp, tp = plan.pp, plan.tp
    base = np.zeros(1, dtype=np.int64)
    for ax in ("cp", "dp"):
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
        unit_of[unit_ranks[0]] = np.arange(base.size)[:, None]
        for axis in UNIT_AXES:
            if axis in ("cp", "dpcp") and plan.cp == 1:
                continue
            groups[axis] = _unit_groups(all_groups(plan, axis), unit_of)
    return Layout(pp, tp, int(base.size), unit_ranks, groups, symmetric)


def unit_factor(layout: Layout, rank_factor: np.ndarray) -> np.ndarray:
    """(pp, units) pace of each unit from per-rank compute-time factors: a unit waits for its slowest member at
    every tensor-parallel collective, so it runs at the largest factor of its members."""
    return rank_factor[layout.unit_ranks].max(axis=2)
