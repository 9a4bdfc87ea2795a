"""Time of one collective on the tiers its group spans — the single entry point `collective_time`.

α-β model (Hockney; Thakur, Rabenseifner & Gropp, IJHPCA 2005; Patarasuk & Yuan 2009 for ring optimality):
    t = steps · α + message_bytes · traffic_factor / busbw
with the nccl-tests conventions: algbw = S / t; busbw = algbw · 2(n−1)/n for all_reduce, · (n−1)/n for
all_gather, reduce_scatter and all_to_all, · 1 for broadcast and send/recv. `message_bytes` is the nccl-tests
"size": the whole buffer (all_reduce), the gathered output (all_gather), the input (reduce_scatter), the
data each rank sends in total (all_to_all), the payload (send_recv, broadcast).

Where a group spans several scale-up domains, NCCL lays one ring per NIC rail: a node's members each drive their own
NIC, so the inter-domain bus bandwidth is ranks_per_domain × NIC rate (the NVLink rate caps it), divided by the
fabric's oversubscription when groups leave the leaf. The intra-domain part runs on NVLink concurrently; the slower
of the two bounds the ring.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from narrowpath.errors import SpecError
from narrowpath.network.placement import GroupSpan
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.system import System

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
ALGORITHMS = ("auto", "ring", "tree", "nvls")


@dataclass(frozen=True, slots=True)
class CollectiveCost:
    """Result of costing one collective."""

    time_s: float
    algorithm: str
    """Algorithm used (`ring`, `tree`, `nvls`, `direct`, `p2p`); with `auto`, the fastest."""
    busbw_bytes_per_s: float
    """Bus bandwidth in the nccl-tests convention for this op and size."""
    bottleneck_tier: str
    """Tier whose bandwidth bounds the transfer (`scale_up`, `scale_out`, or `none` for one rank)."""
    wire_bytes_per_rank: float
    """Bytes each rank sends over the network for this collective."""


def bus_factor(op: str, n: int) -> float:
    """nccl-tests busbw/algbw factor (nccl-tests doc/PERFORMANCE.md)."""
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def ring_steps(op: str, n: int) -> int:
    """Sequential α-steps of a ring: 2(n−1) for all_reduce, n−1 for the others, 1 for point-to-point."""
    if op == "all_reduce":
        return 2 * (n - 1)
    if op in ("all_gather", "reduce_scatter", "all_to_all", "broadcast"):
        return n - 1
    return 1


def _tier_busbw(system: System, cal: Calibration, span: GroupSpan) -> tuple[float, str]:
    """Large-message ring busbw available to the group and the tier that bounds it."""
    up = system.tier("scale_up")
    up_bw = up.bw_bytes_per_s_per_gpu * cal.tier("scale_up").bw_efficiency
    if span.domains <= 1:
        return up_bw, "scale_up"
    out = system.tier("scale_out")
    nic_bw = out.bw_bytes_per_s_per_gpu * cal.tier("scale_out").bw_efficiency
    out_bw = span.ranks_per_domain * nic_bw / out.oversubscription if out.oversubscription > 1 else \
        span.ranks_per_domain * nic_bw
    if span.ranks_per_domain > 1 and up_bw < out_bw:
        return up_bw, "scale_up"
    return out_bw, "scale_out"


def _alpha(system: System, cal: Calibration, span: GroupSpan) -> float:
    tier = "scale_out" if span.domains > 1 else "scale_up"
    return cal.tier(tier).alpha_s + system.tier(tier).latency_s


def collective_time(op: str, message_bytes: float, span: GroupSpan, system: System, calibration: Calibration,
                    algorithm: str = "auto") -> CollectiveCost:
    """Seconds for one collective of `message_bytes` on the group `span` (see module docstring)."""
    if op not in OPS:
        raise SpecError("collective.op", f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if algorithm not in ALGORITHMS:
        raise SpecError("collective.algorithm", f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    if message_bytes < 0:
        raise SpecError("collective.message_bytes", f"must be >= 0, got {message_bytes}")
    n = span.size
    if n <= 1 or message_bytes == 0:
        return CollectiveCost(0.0, "none", 0.0, "none", 0.0)
    busbw, tier = _tier_busbw(system, calibration, span)
    alpha = _alpha(system, calibration, span)
    candidates: list[CollectiveCost] = []
    if op == "send_recv":
        t = alpha + message_bytes / busbw
        return CollectiveCost(t, "p2p", message_bytes / t, tier, message_bytes)
    factor = bus_factor(op, n)
    wire = message_bytes * factor
    if algorithm in ("auto", "ring") or op != "all_reduce":
        t = ring_steps(op, n) * alpha + wire / busbw
        name = "direct" if op == "all_to_all" else "ring"
        candidates.append(CollectiveCost(t, name, wire / t, tier, wire))
    if op == "all_reduce" and algorithm in ("auto", "tree"):
        # Double binary tree (Sanders et al. 2009; NCCL 2.4): log-depth latency, pipelined bandwidth ~ ring's
        # for large messages but limited by the intra-node chain, so it helps mostly at small sizes / many nodes.
        steps = 2 * max(1, math.ceil(math.log2(max(2, span.domains)))) + 2 * max(0, span.ranks_per_domain - 1)
        t = steps * alpha + wire / (0.9 * busbw)
        candidates.append(CollectiveCost(t, "tree", wire / t, tier, wire))
    if op == "all_reduce" and algorithm in ("auto", "nvls"):
        nvls = calibration.tier("scale_up").nvls_busbw_bytes_per_s
        if nvls > 0 and system.tier("scale_up").in_network_reduction and span.domains == 1:
            t = 2 * alpha + wire / nvls
            candidates.append(CollectiveCost(t, "nvls", wire / t, "scale_up", message_bytes))
        elif algorithm == "nvls":
            raise SpecError("collective.algorithm", "nvls needs in-switch reduction inside one scale-up domain "
                            f"(system {system.name}, group spans {span.domains} domain(s))")
    return min(candidates, key=lambda c: c.time_s)
