"""Which trace files belong to one job: a folder such as shared/traces holds several jobs' ranks side by side.

Evidence, strongest first:
1. `distributedInfo` (backend, world size): files that disagree are different jobs.
2. The file-name pattern: the name with its rank number masked (`pp-128rank-sampled-rank*.json.gz`). Files of a
   job are written by one profiler call, so they share it; two patterns are two jobs (two jobs profiled at the
   same time on one cluster are told apart by their names).
3. Time: a file whose name carries no rank number (`host1.12345.pt.trace.json`, a renamed copy) joins the job
   of the same distributedInfo whose ranks ran at the same time (wall-clock windows within `JOB_SLACK_S`), when
   exactly one does; such files with no job to join form jobs among themselves, by the same overlap.
Grouping is O(n log n) in the number of files. Within a job two files claiming one rank are an error naming both
(a copy of a rank's file lands in that rank's job by the time rule, so it is reported, not read twice).
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence

from narrowpath.errors import TraceFormatError
from narrowpath.trace.model import RankTrace, Trace

JOB_SLACK_S = 1.0
"""Two ranks' wall-clock windows closer than this count as running at the same time (host clocks of one
job agree to well under a second; two jobs profiled apart are minutes or days apart)."""
_RANK_IN_NAME = re.compile(r"(rank[-_]?)(\d+)", re.IGNORECASE)


def name_pattern(path: str) -> str | None:
    """The file name with its last rank number masked (`a100-16rank-rank*.json.gz`); None without one."""
    name = os.path.basename(path)
    found = list(_RANK_IN_NAME.finditer(name))
    if not found:
        return None
    m = found[-1]
    return name[:m.start(2)] + "*" + name[m.end(2):]


def _signature(rank: RankTrace) -> tuple:
    return (rank.backend, rank.world_size)


def _window_ns(rank: RankTrace) -> tuple[int, int]:
    """The rank's wall-clock extent in ns (trace clock plus `baseTimeNanoseconds`)."""
    start = rank.origin_ns + rank.clock_offset_ns
    last = max([float(a.max()) for a in (rank.act_end_s, rank.rt_start_s + rank.rt_dur_s,
                                         rank.step_start_s + rank.step_dur_s) if a.size] or [0.0])
    return start, start + int(last * 1e9)


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    slack = int(JOB_SLACK_S * 1e9)
    return a[0] <= b[1] + slack and b[0] <= a[1] + slack


def _by_overlap(items: list[tuple[tuple[int, int], RankTrace]]) -> list[list[RankTrace]]:
    """Connected groups of overlapping windows: sort by start, cut where a start passes the running end."""
    groups: list[list[RankTrace]] = []
    reach = None
    for window, rank in sorted(items, key=lambda item: item[0]):
        if reach is None or window[0] > reach + int(JOB_SLACK_S * 1e9):
            groups.append([])
            reach = window[1]
        groups[-1].append(rank)
        reach = max(reach, window[1])
    return groups


def group_jobs(ranks: Sequence[RankTrace]) -> tuple[Trace, ...]:
    """The jobs among `ranks` (each rank once, in file order), ordered by their first file."""
    order = {id(r): i for i, r in enumerate(ranks)}
    named: dict[tuple, list[RankTrace]] = {}
    loose: list[RankTrace] = []
    for r in ranks:
        pattern = name_pattern(r.path)
        if pattern is None:
            loose.append(r)
        else:
            named.setdefault((_signature(r), pattern), []).append(r)
    windows = {key: [_window_ns(r) for r in members] for key, members in named.items()}
    extent = {key: (min(w[0] for w in ws), max(w[1] for w in ws)) for key, ws in windows.items()}
    pool: dict[tuple, list[tuple[tuple[int, int], RankTrace]]] = {}
    for r in loose:
        w = _window_ns(r)
        hosts = [key for key in named if key[0] == _signature(r) and _overlaps(extent[key], w)]
        if len(hosts) == 1:
            named[hosts[0]].append(r)
        else:
            pool.setdefault(_signature(r), []).append((w, r))
    groups = list(named.values()) + [g for items in pool.values() for g in _by_overlap(items)]
    groups = [sorted(g, key=lambda r: order[id(r)]) for g in groups]
    return tuple(_job(g) for g in sorted(groups, key=lambda g: order[id(g[0])]))


def _job(members: list[RankTrace]) -> Trace:
    """One job's ranks, ranks taken from the file order renumbered within the job; a rank claimed twice is an
    error naming both files."""
    by_order = [r for r in members if r.rank_source == "file order"]
    if by_order:
        taken = {r.rank for r in members if r.rank_source != "file order"}
        free = (k for k in range(len(members) + len(taken)) if k not in taken)
        renumbered = {id(r): dataclasses.replace(r, rank=next(free)) for r in by_order}
        members = [renumbered.get(id(r), r) for r in members]
    seen: dict[int, RankTrace] = {}
    for r in members:
        if r.rank in seen:
            raise TraceFormatError(f"{r.path}: rank {r.rank} ({r.rank_source}) already read from {seen[r.rank].path} "
                                   f"(the two files belong to one job by {_why_together(seen[r.rank], r)})")
        seen[r.rank] = r
    return Trace(ranks=tuple(sorted(members, key=lambda r: r.rank)))


def _why_together(a: RankTrace, b: RankTrace) -> str:
    pa, pb = name_pattern(a.path), name_pattern(b.path)
    if pa is not None and pa == pb:
        return f"their names ({pa})"
    return "running at the same time" + (f" with the same distributedInfo (world size {a.world_size})"
                                         if a.world_size is not None else "")


def describe_job(trace: Trace) -> str:
    """`2 of 128 ranks (distributedInfo) from pp-128rank-sampled-rank*.json.gz`: what a job header says."""
    files = [os.path.basename(r.path) for r in trace.ranks]
    patterns = {name_pattern(r.path) for r in trace.ranks}
    where = patterns.pop() if len(patterns) == 1 and None not in patterns else ", ".join(files[:4]) + (
        f" and {len(files) - 4} more" if len(files) > 4 else "")
    world = trace.ranks[0].world_size
    ranks = f"{len(trace.ranks)} of {world} ranks" if world else f"{len(trace.ranks)} rank" + (
        "s" if len(trace.ranks) > 1 else "")
    return f"{ranks} from {where}"
