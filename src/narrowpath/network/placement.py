"""Placement: where each parallel axis's groups land on ranks, and which tiers a group spans.

Ranks are laid out with the plan's `placement` order, fastest-varying first (Megatron: tp, cp, dp, pp).
The layout axes are tp, cp, dp, pp (sizes multiply to the GPU count); the expert axes re-factor the tp·cp·dp
ranks of one pipeline stage as etp × ep × edp (Megatron-Core; `expert_coordinates`). Rank r lives on node
r // gpus_per_node and in scale-up domain r // the job's share of a domain (NVL72: a domain holds several nodes; a
job larger than one rack gets 64 of its 72 GPUs, System.job_domain). A group that straddles domains unevenly is
slower than one that does not: every group is measured, and a collective is priced on each shape the groups take
(`GroupSpan.others`), the slowest setting the step's pace.

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
"""The plan's parallel axes as a user names them."""


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
    busiest_domain: int = 0
    """Most members inside one scale-up domain (9 ranks on 8-GPU domains: 8, beside ranks_per_domain 1); 0 = as
    many as ranks_per_domain (every domain alike)."""
    others: tuple["GroupSpan", ...] = ()
    """The other shapes the groups of this axis take, where the layout fills domains or nodes unevenly (NVL72
    racks packed 72 ranks a rack under 64-rank groups): the groups run their collective at once and the step
    waits for the last, so a collective costs what it costs on the slowest of them (cost.collectives)."""

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
    """Span of the group of ranks 0..num_gpus-1 (an nccl-tests run over whole nodes); a count that does not fill
    its last domain (node) leaves that one the fewest members, which bound the rails (12 GPUs on 8-GPU nodes: a
    ring's cross-node bandwidth is 4 NICs', not 8)."""
    if num_gpus < 1:
        raise SpecError("gpus", f"must be >= 1, got {num_gpus}")
    ranks = np.arange(num_gpus)[None, :]
    (per_dom,), (doms,), (most,) = _per_block_rows(ranks, system.job_domain(num_gpus))
    (per_node,), (nodes,), _ = _per_block_rows(ranks, system.gpus_per_node)
    return GroupSpan(axis="custom", size=num_gpus, stride=1, ranks_per_domain=int(per_dom), domains=int(doms),
                     ranks_per_node=int(per_node), nodes=int(nodes),
                     busiest_domain=0 if most == per_dom else int(most))


DENSE_AXES = ("tp", "cp", "dp", "pp")
"""Axes of the rank layout. Expert parallelism is not a layout axis of its own: Megatron-Core re-factors the
tp·cp·dp ranks of one pipeline stage as etp × ep × edp for the expert layers (`expert_coordinates`)."""


def axis_sizes(plan: Plan) -> dict[str, int]:
    """Layout size of each dense axis."""
    return {"tp": plan.tp, "cp": plan.cp, "dp": plan.dp, "pp": plan.pp}


def layout_order(plan: Plan) -> tuple[str, ...]:
    """The dense axes in the plan's placement order, fastest-varying first (`ep` in a placement is ignored)."""
    return tuple(a for a in plan.placement if a != "ep")


def axis_strides(plan: Plan) -> dict[str, int]:
    """Rank distance between neighbours along each dense axis."""
    strides, acc = {}, 1
    sizes = axis_sizes(plan)
    for ax in layout_order(plan):
        strides[ax] = acc
        acc *= sizes[ax]
    return strides


GROUP_AXES = {"dpcp": ("cp", "dp"), "ep": ("ep",), "edp": ("edp",), "etp": ("etp",)}
"""Composite groups: `dpcp` is the gradient / optimizer-sharding group of a context-parallel job (Megatron reduces
gradients and shards the distributed optimizer over dp × cp, since cp ranks hold the same weights); `ep` the
expert-parallel group, `etp` the expert-tensor-parallel group and `edp` the expert-data-parallel group (the ranks of a stage holding the same expert
shard, which spans the context-parallel ranks too in Megatron-Core's expert layout)."""


def _coordinates(plan: Plan) -> dict[str, np.ndarray]:
    """Every rank's coordinate on each layout axis and on the expert axes etp, ep, edp."""
    n = plan.num_gpus
    dtype = np.int32 if n < 2**31 else np.int64
    rank = np.arange(n, dtype=dtype)
    sizes, strides = axis_sizes(plan), axis_strides(plan)
    coords = {ax: (rank // strides[ax]) % sizes[ax] for ax in DENSE_AXES}
    coords.update(expert_coordinates(plan, coords))
    return coords


def expert_coordinates(plan: Plan, coords: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Megatron-Core's expert layout: a rank's index inside its pipeline stage (tp, cp, dp in placement order)
    split as etp fastest, then ep, then edp (megatron.core.parallel_state, expert RankGenerator 'tp-ep-dp')."""
    idx = np.zeros_like(coords["tp"])
    acc = 1
    for ax in layout_order(plan):
        if ax != "pp":
            idx = idx + coords[ax] * acc
            acc *= axis_sizes(plan)[ax]
    etp, ep = plan.expert_tp, plan.ep
    if (plan.tp * plan.cp * plan.dp) % (etp * ep):
        raise SpecError("plan.ep", f"ep·etp = {ep}·{etp} must divide tp·cp·dp = {plan.tp * plan.cp * plan.dp}")
    return {"etp": idx % etp, "ep": (idx // etp) % ep, "edp": idx // (etp * ep)}


def _member_axes(axis: str) -> tuple[str, ...]:
    """Coordinates that vary inside one group of `axis`."""
    if axis in GROUP_AXES:
        return GROUP_AXES[axis]
    if axis not in DENSE_AXES:
        raise SpecError("axis", f"unknown parallel axis {axis!r}; known: {', '.join(DENSE_AXES + tuple(GROUP_AXES))}")
    return (axis,)


_FIXED = {"tp": ("cp", "dp", "pp"), "cp": ("tp", "dp", "pp"), "dp": ("tp", "cp", "pp"), "pp": ("tp", "cp", "dp"),
          "dpcp": ("tp", "pp"), "ep": ("pp", "etp", "edp"), "edp": ("pp", "etp", "ep"),
          "etp": ("pp", "ep", "edp")}
"""Coordinates every member of a group of that axis shares."""


def group_ranks(plan: Plan, axis: str, group: int = 0) -> np.ndarray:
    """Ranks of one group of `axis` (group 0 contains rank 0), in ring order (ascending rank)."""
    return all_groups(plan, axis)[group]


@lru_cache(maxsize=8)
def all_groups(plan: Plan, axis: str) -> np.ndarray:
    """Every group of `axis` as rows of ranks, shape (num_groups, group size); rows partition the ranks and are
    ordered by their smallest rank, members ascending. Read-only (cached)."""
    _member_axes(axis)
    coords = _coordinates(plan)
    key = np.zeros(plan.num_gpus, dtype=np.int64)
    n_groups = 1
    for a in _FIXED[axis]:  # one mixed-radix key over the coordinates a group's members share
        radix = int(coords[a].max()) + 1
        key = key * radix + coords[a]
        n_groups *= radix
    order = np.argsort(key, kind="stable")  # stable: members stay in ascending rank order
    rows = order.astype(coords["tp"].dtype).reshape(n_groups, -1)
    rows = rows[np.argsort(rows[:, 0], kind="stable")]
    rows.setflags(write=False)
    return rows


def _per_block_rows(groups: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fewest members in one block, blocks touched, most members in one block) of every row of `groups` (each
    row's ranks ascending) for blocks of `block` consecutive ranks, each (groups,). A row's ranks ascend, so a
    block's members are consecutive in it: the runs of equal block numbers are the blocks."""
    b = groups // block
    n, s = b.shape
    start = np.ones((n, s), dtype=bool)
    start[:, 1:] = b[:, 1:] != b[:, :-1]
    flat = np.flatnonzero(start)  # every run's first position, row by row (each row's first position starts one)
    blocks = np.bincount(flat // s, minlength=n)
    if (blocks == 1).all():
        return np.full(n, s), blocks, np.full(n, s)
    runs = np.diff(np.append(flat, n * s))
    first = np.cumsum(blocks) - blocks
    return np.minimum.reduceat(runs, first), blocks, np.maximum.reduceat(runs, first)


@lru_cache(maxsize=512)
def _span_cached(plan: Plan, gpus_per_node: int, domain: int, axis: str) -> GroupSpan:
    """Group 0's span, with the other shapes the axis's groups take (`GroupSpan.others`; none where the layout
    fills nodes and domains evenly)."""
    groups = all_groups(plan, axis)
    size = int(groups.shape[1])
    per_dom, doms, most = _per_block_rows(groups, domain)
    per_node, nodes, _ = (per_dom, doms, most) if domain == gpus_per_node else _per_block_rows(groups, gpus_per_node)
    busy = np.where(most == per_dom, 0, most)  # 0: every domain of the group alike
    cols = np.stack([per_dom, doms, per_node, nodes, busy], axis=1).astype(np.int64)
    if (cols == cols[0]).all():  # the usual layout: every group alike
        shapes = cols[:1]
    else:  # one key per shape (every column is at most the group's size): far cheaper than unique rows
        r = size + 1
        key = ((cols[:, 0] * r + cols[:, 1]) * r + cols[:, 2]) * r + cols[:, 3]
        key = key * r + cols[:, 4] if r ** 5 < 2 ** 62 else key
        _, first = np.unique(key, return_index=True)
        shapes = cols[first]
    ranks = groups[0]
    stride = int(np.diff(ranks).min()) if size > 1 else 1
    node0 = groups // gpus_per_node == 0
    common = dict(axis=axis, size=size, stride=stride, num_groups=int(groups.shape[0]),
                  groups_per_node=max(1, int(node0.any(axis=1).sum())))
    own = (int(per_dom[0]), int(doms[0]), int(per_node[0]), int(nodes[0]), int(busy[0]))
    others = tuple(GroupSpan(ranks_per_domain=a, domains=b, ranks_per_node=c, nodes=d, busiest_domain=e, **common)
                   for a, b, c, d, e in (tuple(int(x) for x in row) for row in shapes) if (a, b, c, d, e) != own)
    return GroupSpan(ranks_per_domain=own[0], domains=own[1], ranks_per_node=own[2], nodes=own[3],
                     busiest_domain=own[4], others=others, **common)


_LAYOUTS: dict[tuple, Plan] = {}


def layout_plan(plan: Plan) -> Plan:
    """One plan per rank layout (tp, cp, dp, pp, ep, expert tp, placement order): the layout is all that the
    groups, spans and contention read, so plans that share it share their cached results (a search prices
    millions of plans on a few hundred layouts)."""
    key = (plan.tp, plan.cp, plan.dp, plan.pp, plan.ep, plan.expert_tp, layout_order(plan))
    hit = _LAYOUTS.get(key)
    if hit is None:
        if len(_LAYOUTS) > 4096:
            _LAYOUTS.clear()
        hit = _LAYOUTS[key] = plan
    return hit


def group_span(plan: Plan, system: System, axis: str) -> GroupSpan:
    """Span of the group of `axis` that contains rank 0, with the other shapes its groups take (`_span_cached`),
    on the job's share of each scale-up domain (System.job_domain)."""
    return _span_cached(layout_plan(plan), system.gpus_per_node, system.job_domain(plan.num_gpus), axis)
