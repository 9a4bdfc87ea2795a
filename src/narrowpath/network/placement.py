"""Placement: where each parallel axis's groups land on ranks, and which tiers a group spans.

Ranks are laid out with the plan's `placement` order, fastest-varying first (Megatron: tp, cp, dp, pp).
The expert axis `ep` is carved out of dp (its fastest-varying part), so the layout sizes are
tp, cp, ep, dp/ep, pp and multiply to the GPU count.
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.spec.plan import Plan
from narrowpath.spec.system import System


@dataclass(frozen=True, slots=True)
class GroupSpan:
    """Shape of one communication group of a parallel axis on the machine."""

    axis: str
    """Parallel axis: tp, cp, ep, dp or pp (pp groups are the point-to-point neighbours)."""
    size: int
    """Ranks in the group."""
    stride: int
    """Rank distance between consecutive members."""
    ranks_per_domain: int
    """Members inside one scale-up domain (NVLink domain)."""
    domains: int
    """Scale-up domains the group spans; > 1 means traffic crosses the scale-out fabric."""
    ranks_per_node: int
    """Members inside one server."""
    nodes: int
    """Servers the group spans."""

    @property
    def crosses_scale_out(self) -> bool:
        return self.domains > 1

    @property
    def tiers(self) -> tuple[str, ...]:
        """Tiers the group's traffic uses, nearest first."""
        if self.size <= 1:
            return ()
        if self.domains == 1:
            return ("scale_up",)
        if self.ranks_per_domain == 1:
            return ("scale_out",)
        return ("scale_up", "scale_out")


def axis_sizes(plan: Plan) -> dict[str, int]:
    """Layout size of each axis (ep carved out of dp)."""
    return {"tp": plan.tp, "cp": plan.cp, "ep": plan.ep, "dp": plan.dp // plan.ep, "pp": plan.pp}


def axis_strides(plan: Plan) -> dict[str, int]:
    strides, acc = {}, 1
    sizes = axis_sizes(plan)
    for ax in plan.placement:
        strides[ax] = acc
        acc *= sizes[ax]
    return strides


def _count_per_block(size: int, stride: int, block: int) -> tuple[int, int]:
    """(members per block, blocks spanned) for members 0, stride, 2·stride, … grouped into blocks of `block` ranks."""
    if size <= 1:
        return 1, 1
    if stride >= block:
        return 1, size
    per = min(size, max(1, block // stride))
    return per, -(-size // per)


def group_span(plan: Plan, system: System, axis: str) -> GroupSpan:
    """Span of the group of `axis` that contains rank 0 (all groups of an axis have the same shape)."""
    sizes, strides = axis_sizes(plan), axis_strides(plan)
    if axis == "dp":
        size = plan.dp
        order = list(plan.placement)
        # The full data-parallel group is ep × dp/ep; when ep sits right before dp they form one strided block.
        adjacent = order.index("ep") + 1 == order.index("dp")
        stride = strides["ep"] if (adjacent or plan.ep == 1) else strides["dp"]
        if plan.ep == 1:
            stride = strides["dp"]
    else:
        size, stride = sizes[axis], strides[axis]
    per_dom, doms = _count_per_block(size, stride, system.scale_up_domain)
    per_node, nodes = _count_per_block(size, stride, system.gpus_per_node)
    return GroupSpan(axis=axis, size=size, stride=stride, ranks_per_domain=per_dom, domains=doms,
                     ranks_per_node=per_node, nodes=nodes)
