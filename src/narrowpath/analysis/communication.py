"""Budget 2 — communication: bytes per useful FLOP per tier, the dominant pattern, and what three remedies save.

- In-network reduction: the tier switched to in-network reduction (NVLS / SHARP), re-run (analysis.whatif).
- Compression: gradient (dp) transfers re-priced at message_bytes / ratio with `cost.collectives.collective_time`
  on the same group; the exposed part shrinks in proportion (exposed × t(S/ρ)/t(S)). Compression compute is
  not charged (an optimistic bound; cf. Vogels et al. 'PowerSGD', NeurIPS 2019).
- Nearer tier: each axis whose groups cross the scale-out fabric is moved first in the placement order (so its
  groups are packed into scale-up domains) and the model re-run.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from narrowpath.analysis.context import Context
from narrowpath.analysis.inventory import InventoryRow
from narrowpath.analysis.ledger import LedgerRow, network_seconds
from narrowpath.analysis.remedies import ep_in_scale_up
from narrowpath.analysis.verdict import tier_carries_traffic
from narrowpath.analysis.whatif import WhatIf, evaluate, with_plan
from narrowpath.spec.system import with_tier
from narrowpath.cost.collectives import collective_time
from narrowpath.schedule.step import transfer_span


@dataclass(frozen=True, slots=True)
class TierTraffic:
    tier: str
    bytes_per_step: float
    bytes_per_useful_flop: float
    modelled_s: float
    exposed_s: float


@dataclass(frozen=True, slots=True)
class CommBudget:
    tiers: tuple[TierTraffic, ...]
    dominant: str
    """Pattern with the most critical-path time."""
    dominant_exposed_s: float
    in_network_reduction: tuple[WhatIf, ...]
    compression_ratio: float
    compression_saving_s: float
    nearer_tier: tuple[WhatIf, ...]


def compression_saving_s(ctx: Context, ratio: float) -> float:
    """Critical-path seconds saved by compressing the dp gradient transfers by `ratio` (module docstring)."""
    pred = ctx.pred
    scn = pred.scenario
    if ratio <= 1:
        return 0.0
    saved = 0.0
    for t in pred.transfers:
        if t.axis not in ("dp", "edp") or "grad" not in t.name or t.exposed_s <= 0:
            continue
        span = transfer_span(scn, t.axis)
        small = collective_time(t.op, t.message_bytes / ratio, span, scn.system, pred.calibration).time_s
        saved += t.exposed_s * (1.0 - small / t.time_each_s) if t.time_each_s > 0 else 0.0
    return saved


def build_communication(ctx: Context, ledger: tuple[LedgerRow, ...], inventory: tuple[InventoryRow, ...],
                        ratio: float, run_what_ifs: bool = True) -> CommBudget:
    pred = ctx.pred
    scn = pred.scenario
    rows = []
    exposed_by_tier = network_seconds(ctx, exposed=True)
    for lr in ledger:
        if lr.level == "host" and lr.bytes_per_step > 0:  # activations offloaded and fetched back (plan.offload_layers)
            exposed = sum(t.exposed_s for t in pred.transfers if t.axis == "host")
        elif lr.level in ("scale_up", "scale_out", "front_end"):
            exposed = exposed_by_tier.get(lr.level, 0.0)
        else:
            continue
        rows.append(TierTraffic(lr.level, lr.bytes_per_step, lr.bytes_per_useful_flop, lr.modelled_s or 0.0, exposed))
    dom = max(inventory, key=lambda r: r.critical_path_s, default=None)
    inr, nearer = [], []
    if run_what_ifs:
        for tier in ("scale_up", "scale_out"):
            if not scn.system.tier(tier).in_network_reduction and tier_carries_traffic(ctx, tier):
                inr.append(evaluate(pred, f"in_network_reduction_{tier}", f"in-network reduction on {tier}",
                                    lambda t=tier: dataclasses.replace(
                                        scn, system=with_tier(scn.system, t, in_network_reduction=True)),
                                    kind="fabric"))
        for ax, span in ctx.spans.items():
            if ax == "ep" and span.crosses_scale_out:  # no layout axis: what places its groups is etp and the order
                nearer += [evaluate(pred, "ep_nearer", c.description, c.make)
                           for c in ep_in_scale_up(scn, scn.system.job_domain(scn.num_gpus))]
            elif span.crosses_scale_out and ax != "pp" and scn.plan.placement[0] != ax:
                order = (ax,) + tuple(a for a in scn.plan.placement if a != ax)
                nearer.append(evaluate(pred, f"{ax}_nearer", f"place {ax.upper()} first (inside scale-up domains)",
                                       lambda o=order: with_plan(scn, placement=o)))
    return CommBudget(tuple(rows), dom.name if dom else "", dom.critical_path_s if dom else 0.0, tuple(inr), ratio,
                      compression_saving_s(ctx, ratio), tuple(nearer))
