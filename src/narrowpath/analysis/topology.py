"""Account 4 — topology fit: which tier each parallel dimension's groups span, how busy each tier's busiest link
is over a step, and flags for high-frequency traffic placed on a far tier.

Utilisation of a tier's busiest link, a fraction in [0, 1]: on scale-up, the bytes one GPU injects per step /
(its NVLink bandwidth × step time) — every rank of the critical stage injects the same, so the GPU's own ports are
the busiest; on scale-out, the most loaded link of the generated fabric (NIC, leaf or spine trunk) with every
group's flows laid on it (analysis.link_load), so an oversubscribed leaf counts only the bytes that really leave
it. `busy_fraction` is the share of the step the core model has the tier's transfers running (each transfer's
time split over the tiers it crosses, analysis.traffic.tier_seconds), capped at 1.
High frequency = issued at least once per layer per micro-batch (tp, cp, ep and pp patterns); such traffic on
scale_out or front_end is flagged (Narayanan et al. SC'21 §3.2: keep TP inside a server).
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.analysis.context import Context
from narrowpath.analysis.ledger import network_bytes, network_seconds
from narrowpath.analysis.link_load import busiest_scale_out_link
from narrowpath.analysis.traffic import row_tier_bytes

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


EP_PARTS = {"ep_inter": "ep", "ep_intra": "ep"}
"""The deduplicating dispatch's two legs (across scale-up domains, then within one) are the ep axis's traffic."""


@dataclass(frozen=True, slots=True)
class TierLoad:
    tier: str
    bytes_per_step: float
    bw_bytes_per_s: float
    utilisation: float
    """Busiest link: its bytes / (its capacity × step), a fraction in [0, 1] (module docstring)."""
    busy_fraction: float
    busiest_link: str
    """Which link that is: `NVLink ports`, `NIC`, `leaf uplink`, … ('' when the tier carries nothing)."""
    saturated: bool
    """The busiest link would need more than the step for its bytes (utilisation is then capped at 1)."""


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
            if EP_PARTS.get(t.axis, t.axis) != ax:
                continue
            for tier, b in row_tier_bytes(pred.scenario, t).items():
                by_tier[tier] = by_tier.get(tier, 0.0) + b
        tiers = span.tiers if ax != "pp" else tuple(dict.fromkeys(
            t.tier for t in pred.transfers if t.axis == "pp" and t.tier != "none"))
        flag = ""
        far = [t for t in tiers if t in FAR_TIERS]
        if ax in HIGH_FREQUENCY_AXES and far:
            flag = (f"{ax.upper()} groups of {span.size} span {span.domains} scale-up domains: per-layer traffic "
                    f"({by_tier.get(far[0], 0) / 1e9:.2f} GB/step per GPU) crosses {far[0]}")
        axes.append(AxisFit(ax, span.size, tiers, span.domains, span.nodes, span.groups_per_node, by_tier, flag))
    net = network_bytes(ctx)
    secs = network_seconds(ctx)
    step = pred.step_time_s
    up = system.tier("scale_up")
    raw = net["scale_up"] / (up.bw_bytes_per_s_per_gpu * step)
    loads = [TierLoad("scale_up", net["scale_up"], up.bw_bytes_per_s_per_gpu, min(1.0, raw),
                      min(1.0, secs["scale_up"] / step), "NVLink ports" if net["scale_up"] > 0 else "", raw > 1.0)]
    link = busiest_scale_out_link(pred)
    loads.append(TierLoad("scale_out", net["scale_out"], system.tier("scale_out").bw_bytes_per_s_per_gpu,
                          link.utilisation, min(1.0, secs["scale_out"] / step), link.kind, link.saturated))
    return TopologyFit(tuple(axes), tuple(loads))
