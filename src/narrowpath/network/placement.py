"""Placement: where each parallel axis's groups land on ranks, and which tiers a group spans.

Ranks are laid out with the plan's `placement` order, fastest-varying first (Megatron: tp, cp, dp, pp).
The expert axis `ep` is carved out of dp (its fastest-varying part), so the layout sizes are
tp, cp, ep, dp/ep, pp and multiply to the GPU count. Rank r lives on node r // gpus_per_node and in scale-up
domain r // domain_size (NVL72: a domain holds several nodes).

A group's shape is measured on its real member ranks (mixed-radix layout), so any order — dense, strided or
irregular — gives the right members per node. A *sparse* group (one member per scale-up domain) has no NVLink
leg: its members talk over their own NICs only (`tiers == ("scale_out",)`), the case autoparallel #457/#527
mis-priced.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from narrowpath.errors import SpecError
from narrowpath.spec.plan import Plan
from narrowpath.spec.system import System

AXIS_NAMES = ("tp", "cp", "ep", "dp", "pp")


@dataclass(frozen=True, slots=True)
class GroupSpan:
    """Shape of one communication group of a parallel axis on the machine."""

    axis: str
    """Parallel axis: tp, cp, ep, dp or pp (pp groups are the point-to-point neighbours)."""
    size: int
    """Ranks in the group."""
    stride: int
    """Rank distance between consecutive members (the smallest one when the group is irregular)."""
    ranks_per_domain: int
    """Members inside one scale-up domain (NVLink domain); the fewest over the domains the group touches."""
    domains: int
    """Scale-up domains the group spans; > 1 means traffic crosses the scale-out fabric."""
    ranks_per_node: int
    """Members inside one server (the fewest over the servers the group touches)."""
    nodes: int
    """Servers the group spans."""
    num_groups: int = 1
    """Groups of this axis that exist side by side (and run at the same time): GPUs / size."""
    groups_per_node: int = 1
    """Groups of this axis with members on one server; > 1 means they share that server's NICs."""

    @property
    def crosses_scale_out(self) -> bool:
        return self.domains > 1

    @property
    def sparse(self) -> bool:
        """One member per scale-up domain: all traffic goes over NICs, none over NVLink."""
        return self.domains > 1 and self.ranks_per_domain == 1

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


def span_of(size: int, *, ranks_per_domain: int, domains: int, ranks_per_node: int | None = None,
            nodes: int | None = None, axis: str = "custom") -> GroupSpan:
    """A GroupSpan described directly (CLI, corpus cases, tests): `domains` × `ranks_per_domain` ranks."""
    if size < 1 or ranks_per_domain < 1 or domains < 1:
        raise SpecError("group", f"size, ranks_per_domain and domains must be >= 1, got {size}, "
                        f"{ranks_per_domain}, {domains}")
    return GroupSpan(axis=axis, size=size, stride=1, ranks_per_domain=ranks_per_domain, domains=domains,
                     ranks_per_node=ranks_per_node or ranks_per_domain, nodes=nodes or domains)


def contiguous_span(num_gpus: int, system: System) -> GroupSpan:
    """Span of the group of ranks 0..num_gpus-1 (an nccl-tests run over whole nodes)."""
    if num_gpus < 1:
        raise SpecError("gpus", f"must be >= 1, got {num_gpus}")
    per_dom = min(num_gpus, system.scale_up_domain)
    per_node = min(num_gpus, system.gpus_per_node)
    return GroupSpan(axis="custom", size=num_gpus, stride=1, ranks_per_domain=per_dom,
                     domains=-(-num_gpus // per_dom), ranks_per_node=per_node, nodes=-(-num_gpus // per_node))


def axis_sizes(plan: Plan) -> dict[str, int]:
    """Layout size of each axis (ep carved out of dp)."""
    if plan.dp % plan.ep:
        raise SpecError("plan.ep", f"expert parallelism {plan.ep} must divide dp {plan.dp}")
    return {"tp": plan.tp, "cp": plan.cp, "ep": plan.ep, "dp": plan.dp // plan.ep, "pp": plan.pp}


def axis_strides(plan: Plan) -> dict[str, int]:
    strides, acc = {}, 1
    sizes = axis_sizes(plan)
    for ax in plan.placement:
        strides[ax] = acc
        acc *= sizes[ax]
    return strides


GROUP_AXES = {"dp": ("ep", "dp"), "dpcp": ("cp", "ep", "dp"), "edp": ("dp",), "edpcp": ("cp", "dp")}
"""Composite groups: the full dp group is ep × dp/ep; `dpcp` is the gradient / optimizer-sharding group of a
context-parallel job (Megatron reduces gradients and shards the distributed optimizer over dp × cp, since cp ranks
hold the same weights); `edp` is the expert-data-parallel group (the dp/ep ranks holding the same experts) and
`edpcp` its context-parallel form (cp × dp/ep)."""


def _member_axes(axis: str) -> tuple[str, ...]:
    """Layout axes whose coordinates vary inside one group of `axis`."""
    if axis in GROUP_AXES:
        return GROUP_AXES[axis]
    if axis not in AXIS_NAMES:
        raise SpecError("axis", f"unknown parallel axis {axis!r}; known: {', '.join(AXIS_NAMES + tuple(GROUP_AXES))}")
    return (axis,)


def group_ranks(plan: Plan, axis: str, group: int = 0) -> np.ndarray:
    """Ranks of one group of `axis` (group 0 contains rank 0), in ring order (fastest-varying member first)."""
    return all_groups(plan, axis)[group]


def all_groups(plan: Plan, axis: str) -> np.ndarray:
    """Every group of `axis` as rows of ranks, shape (num_groups, group size); rows partition the ranks."""
    sizes, strides = axis_sizes(plan), axis_strides(plan)
    members = _member_axes(axis)
    rank = np.zeros(1, dtype=np.int64)
    for ax in [a for a in plan.placement if a in members]:  # members, fastest-varying first
        rank = (rank[None, :] + strides[ax] * np.arange(sizes[ax])[:, None]).reshape(-1)
    base = np.zeros(1, dtype=np.int64)
    for ax in [a for a in plan.placement if a not in members]:
        base = (base[:, None] + strides[ax] * np.arange(sizes[ax])[None, :]).reshape(-1)
    return np.sort(base)[:, None] + rank[None, :]


def _per_block(ranks: np.ndarray, block: int) -> tuple[int, int]:
    """(fewest members in one block, blocks touched) for blocks of `block` consecutive ranks."""
    _, counts = np.unique(ranks // block, return_counts=True)
    return int(counts.min()), int(counts.size)


@lru_cache(maxsize=512)
def _span_cached(plan: Plan, gpus_per_node: int, domain: int, axis: str) -> GroupSpan:
    groups = all_groups(plan, axis)
    ranks = groups[0]
    size = int(ranks.size)
    stride = int(np.diff(np.sort(ranks)).min()) if size > 1 else axis_strides(plan)[_member_axes(axis)[-1]]
    per_dom, doms = _per_block(ranks, domain)
    per_node, nodes = _per_block(ranks, gpus_per_node)
    node0 = groups // gpus_per_node == 0
    return GroupSpan(axis=axis, size=size, stride=stride, ranks_per_domain=per_dom, domains=doms,
                     ranks_per_node=per_node, nodes=nodes, num_groups=int(groups.shape[0]),
                     groups_per_node=max(1, int(node0.any(axis=1).sum())))


def group_span(plan: Plan, system: System, axis: str) -> GroupSpan:
    """Span of the group of `axis` that contains rank 0 (all groups of an axis have the same shape)."""
    return _span_cached(plan, system.gpus_per_node, system.scale_up_domain, axis)
