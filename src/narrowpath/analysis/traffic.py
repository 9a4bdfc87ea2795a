"""Bytes each rank puts on each network tier for one collective, from its group's span.

Hierarchical decomposition (NCCL's tree/ring over NVLink then NICs; Sanders et al. 'Two-tree algorithms',
Parallel Computing 2009, for the bandwidth terms): a group of n = d·r ranks, r per scale-up domain, d domains.
- all_reduce: scale-up 2·S·(r−1)/r (reduce-scatter + all-gather inside the domain), scale-out 2·S·(d−1)/(d·r)
  (all-reduce of the S/r shard across domains). With d = 1 this is the ring's 2·S·(n−1)/n.
- all_gather / reduce_scatter: half of the all-reduce figures.
- all_to_all: S·(r−1)/n stays in the domain, S·(n−r)/n leaves it.
- send_recv / broadcast: the payload S on the tier the core model priced it on.
S is the nccl-tests message size (cost.collectives). A sparse group (one member per domain) has no NVLink leg.
"""
from __future__ import annotations

from narrowpath.network.placement import GroupSpan


def tier_bytes_per_rank(op: str, message_bytes: float, span: GroupSpan | None, priced_tier: str) -> dict[str, float]:
    """Bytes one rank sends per execution on each tier (`scale_up`, `scale_out`)."""
    S = message_bytes
    if op in ("send_recv", "broadcast") or span is None:
        return {priced_tier: S} if priced_tier in ("scale_up", "scale_out") else {}
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
