"""Bytes each rank puts on each network tier for one collective, from its group's span; and how the core model's
time of a transfer row splits over those tiers.

Hierarchical decomposition (NCCL's tree/ring over NVLink then NICs; Sanders et al. 'Two-tree algorithms',
Parallel Computing 2009, for the bandwidth terms): a group of n = d·r ranks, r per scale-up domain, d domains.
- all_reduce: scale-up 2·S·(r−1)/r (reduce-scatter + all-gather inside the domain), scale-out 2·S·(d−1)/(d·r)
  (all-reduce of the S/r shard across domains). With d = 1 this is the ring's 2·S·(n−1)/n.
- all_gather / reduce_scatter: half of the all-reduce figures.
- all_to_all: S·(r−1)/n stays in the domain, S·(n−r)/n leaves it.
- send_recv / broadcast: the payload S on the tier the core model priced it on.
S is the nccl-tests message size (cost.collectives). A sparse group (one member per domain) has no NVLink leg.

Time per tier: the core model prices a transfer as one number with one bottleneck tier, but a hierarchical
collective keeps every tier it crosses busy for that tier's bytes. `tier_seconds` splits the row's time over the
tiers in proportion to the time each tier's bytes need at that tier's line rate, so the parts add up to the
core model's time and a tier that carries bytes is never charged 0 s.
"""
from __future__ import annotations

from narrowpath.network.placement import GroupSpan
from narrowpath.schedule.step import TransferCost, bucket_axes, transfer_span
from narrowpath.spec.scenario import Scenario

NETWORK_TIERS = ("scale_up", "scale_out")


def pp_bucket_contents(pred) -> tuple[tuple[str, ...], bool]:
    """What the breakdown's exposed pipeline bucket holds (schedule.step.bucket_axes: the pipeline's sends and the
    activation offload's host copies): the tiers of its exposed pipeline sends, and whether offload copies are
    exposed (`host` transfers, plan.offload_layers)."""
    exposed = [t for t in pred.transfers if t.axis in bucket_axes("pp") and t.exposed_s > 0]
    return tuple(sorted({t.tier for t in exposed if t.axis != "host"})), any(t.axis == "host" for t in exposed)


def tier_bytes_per_rank(op: str, message_bytes: float, span: GroupSpan | None, priced_tier: str) -> dict[str, float]:
    """Bytes one rank sends per execution on each tier (`scale_up`, `scale_out`)."""
    S = message_bytes
    if op in ("send_recv", "broadcast") or span is None:
        return {priced_tier: S} if priced_tier in NETWORK_TIERS else {}
    n = span.size
    if n <= 1:
        return {}
    d = max(1, span.domains)
    r = max(1, n // d)
    if op == "all_to_all":
        out = {"scale_up": S * (r - 1) / n, "scale_out": S * (n - r) / n}
    else:
        f = 2.0 if op == "all_reduce" else 1.0
        out = {"scale_up": f * S * (r - 1) / r, "scale_out": f * S * (d - 1) / (d * r)}
    return {k: v for k, v in out.items() if v > 0}


def row_span(scn: Scenario, axis: str) -> GroupSpan | None:
    """The group a transfer row of `axis` runs on, exactly as the core model prices it (schedule.step); None for
    pipeline point-to-point, whose bytes go to the tier the core model priced them on."""
    if axis in ("pp", "pp_ends"):
        return None
    return transfer_span(scn, axis)


def row_tier_bytes(scn: Scenario, t: TransferCost) -> dict[str, float]:
    """Bytes one rank sends on each tier over all executions of one transfer row per step."""
    return {k: v * t.count for k, v in tier_bytes_per_rank(t.op, t.message_bytes, row_span(scn, t.axis),
                                                           t.tier).items()}


def tier_seconds(scn: Scenario, t: TransferCost, seconds: float | None = None) -> dict[str, float]:
    """`seconds` (default: the row's total time) split over the tiers the row's bytes cross, in proportion to
    bytes / line rate on each tier (module docstring); a row with no network bytes keeps its priced tier."""
    total = t.total_s if seconds is None else seconds
    need = {k: b / scn.system.tier(k).bw_bytes_per_s_per_gpu for k, b in row_tier_bytes(scn, t).items()}
    den = sum(need.values())
    if den <= 0:
        return {t.tier: total} if t.tier in NETWORK_TIERS else {}
    return {k: total * v / den for k, v in need.items()}
