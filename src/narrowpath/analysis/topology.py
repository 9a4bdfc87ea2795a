"""Account 4 — topology fit: which tier each parallel dimension's groups span, how busy each tier's busiest link
is over a step, and flags for high-frequency traffic placed on a far tier.

Utilisation of a tier's busiest link = bytes one GPU injects into the tier per step / (its per-GPU bandwidth ×
step time); every rank of the critical stage injects the same, so the GPU's own link is the busiest. Above a
leaf switch with oversubscription o, uplinks carry o times that share (scale-out only; rail-optimised fabrics
keep same-rail traffic below the spine, so this is the worst case). `busy_fraction` is the share of the step
the core model has the tier's transfers running.
High frequency = issued at least once per layer per micro-batch (tp, cp, ep and pp patterns); such traffic on
scale_out or front_end is flagged (Narayanan et al. SC'21 §3.2: keep TP inside a server).
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.analysis.context import Context
from narrowpath.analysis.ledger import network_bytes
from narrowpath.analysis.traffic import tier_bytes_per_rank

HIGH_FREQUENCY_AXES = ("tp", "cp", "ep")
FAR_TIERS = ("scale_out", "front_end")


@dataclass(frozen=True, slots=True)
class AxisFit:
    axis: str
    degree: int
    tiers: tuple[str, ...]
    domains: int
    nodes: int
    groups_per_node: int
    bytes_per_step: dict[str, float]
    """Bytes per GPU per step on each tier for this axis's traffic."""
    flag: str
    """Empty when the placement fits; otherwise why it does not."""


@dataclass(frozen=True, slots=True)
class TierLoad:
    tier: str
    bytes_per_step: float
    bw_bytes_per_s: float
    utilisation: float
    """Busiest link: bytes / (bandwidth × step), × oversubscription on scale_out."""
    busy_fraction: float


@dataclass(frozen=True, slots=True)
class TopologyFit:
    axes: tuple[AxisFit, ...]
    tiers: tuple[TierLoad, ...]

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(a.flag for a in self.axes if a.flag)


def build_topology(ctx: Context) -> TopologyFit:
    pred = ctx.pred
    system = pred.scenario.system
    axes = []
    for ax, span in ctx.spans.items():
        by_tier: dict[str, float] = {}
        for t in pred.transfers:
            if t.axis != ax:
                continue
            sp = None if ax == "pp" else span
            for tier, b in tier_bytes_per_rank(t.op, t.message_bytes, sp, t.tier).items():
                by_tier[tier] = by_tier.get(tier, 0.0) + b * t.count
        tiers = span.tiers if ax != "pp" else tuple(dict.fromkeys(
            t.tier for t in pred.transfers if t.axis == "pp" and t.tier != "none"))
        flag = ""
        far = [t for t in tiers if t in FAR_TIERS]
        if ax in HIGH_FREQUENCY_AXES and far:
            flag = (f"{ax.upper()} groups of {span.size} span {span.domains} scale-up domains: per-layer traffic "
                    f"({by_tier.get(far[0], 0) / 1e9:.2f} GB/step per GPU) crosses {far[0]}")
        axes.append(AxisFit(ax, span.size, tiers, span.domains, span.nodes, span.groups_per_node, by_tier, flag))
    net = network_bytes(ctx)
    step = pred.step_time_s
    loads = []
    for tier in ("scale_up", "scale_out"):
        tr = system.tier(tier)
        util = net[tier] / (tr.bw_bytes_per_s_per_gpu * step)
        if tier == "scale_out":
            util *= tr.oversubscription
        busy = sum(t.total_s for t in pred.transfers if t.tier == tier) / step
        loads.append(TierLoad(tier, net[tier], tr.bw_bytes_per_s_per_gpu, util, busy))
    return TopologyFit(tuple(axes), tuple(loads))
