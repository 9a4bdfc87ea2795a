"""Account 2 — the collective inventory: every collective and point-to-point pattern of a step.

One row per (pattern name, kind, axis): the prediction's transfer rows of all phases of that pattern merged.
Totals are sums of the core model's `TransferCost.total_s` / `exposed_s`, so they agree with `predict`.
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.analysis.context import Context


@dataclass(frozen=True, slots=True)
class InventoryRow:
    name: str
    kind: str
    """Collective: all_reduce, all_gather, reduce_scatter, all_to_all, send_recv."""
    axis: str
    group_size: int
    tiers: tuple[str, ...]
    """Tiers the group's traffic crosses, nearest first."""
    bottleneck_tier: str
    algorithm: str
    phases: tuple[str, ...]
    count_per_step: float
    min_message_bytes: float
    max_message_bytes: float
    time_each_s: float
    """Mean time of one occurrence."""
    total_s: float
    critical_path_s: float
    """Part of total_s that is exposed (on the critical path)."""


def build_inventory(ctx: Context) -> tuple[InventoryRow, ...]:
    groups: dict[tuple[str, str, str], list] = {}
    for t in ctx.pred.transfers:
        groups.setdefault((t.name, t.op, t.axis), []).append(t)
    rows = []
    for (name, op, axis), ts in groups.items():
        span = ctx.spans.get(axis)
        if span is not None and axis != "pp":
            tiers = span.tiers
        else:
            tiers = tuple(dict.fromkeys(t.tier for t in ts if t.tier != "none"))
        count = sum(t.count for t in ts)
        total = sum(t.total_s for t in ts)
        rows.append(InventoryRow(name, op, axis, ts[0].group_size, tiers, ts[0].tier, ts[0].algorithm,
                                 tuple(dict.fromkeys(t.phase for t in ts)), count,
                                 min(t.message_bytes for t in ts), max(t.message_bytes for t in ts),
                                 total / count if count else 0.0, total, sum(t.exposed_s for t in ts)))
    rows.sort(key=lambda r: -r.total_s)
    return tuple(rows)
