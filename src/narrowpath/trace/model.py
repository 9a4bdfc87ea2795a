"""Typed per-rank tables of an observed trace: compact numpy columns with interned names, SI units.

Times are seconds relative to `origin_ns` (the rank's earliest kept event, in the trace clock's
nanoseconds), so float64 keeps nanosecond resolution; cross-rank analyses add `origin_ns` back.
An "activity" is device work: a GPU kernel, memcpy or memset on a CUDA stream (`lane` = stream id). In a
trace without any GPU activity (a CPU-only gloo job) activities are the host operators instead, `lane` being
the thread id, and `host_mode` is True.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from narrowpath.trace.schema import COLLECTIVE_KINDS


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessGroup:
    """A process group from `distributedInfo.pg_config`."""

    name: str
    size: int
    """Number of ranks in the group."""
    ranks: tuple[int, ...]
    """Global ranks, when the trace lists them (empty otherwise)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankTrace:
    """Everything narrowpath keeps of one rank's trace file."""

    path: str
    rank: int
    rank_source: str
    """Where `rank` came from: "distributedInfo", "file name" or "file order"."""
    world_size: int | None
    """From distributedInfo; None when the trace does not say."""
    device_name: str | None
    host_mode: bool
    """True when the trace has no GPU activity and host operators stand in for device work."""
    names: tuple[str, ...]
    """Interned event names; the *_name columns index into it."""
    origin_ns: int
    clock_offset_ns: int
    """`baseTimeNanoseconds` of the file (0 when absent): origin_ns + clock_offset_ns is Unix time in ns."""
    process_groups: tuple[ProcessGroup, ...]
    # Activities (device work), sorted by start.
    act_name: np.ndarray
    act_start_s: np.ndarray
    act_dur_s: np.ndarray
    act_lane: np.ndarray
    """CUDA stream id (or host thread id in host mode)."""
    act_kind: np.ndarray
    """schema.KIND_* code."""
    act_class: np.ndarray
    """HTA kernel class (schema.CLASS_*)."""
    act_corr: np.ndarray
    """Correlation id linking the activity to its launch; -1 when absent."""
    act_launch_s: np.ndarray
    """Start of the runtime call that launched it; NaN when unknown (host mode: its own start)."""
    act_launch_tid: np.ndarray
    """Host thread of the launch; -1 when unknown."""
    act_coll: np.ndarray
    """Index into schema.COLLECTIVE_KINDS for communication, -1 otherwise."""
    act_message_bytes: np.ndarray
    """Collective message size (nccl-tests convention: max of in/out bytes); NaN when unknown."""
    act_group_size: np.ndarray
    """Ranks in the collective's group; 0 when unknown."""
    # CUDA runtime / driver calls, sorted by start.
    rt_name: np.ndarray
    rt_start_s: np.ndarray
    rt_dur_s: np.ndarray
    rt_corr: np.ndarray
    rt_tid: np.ndarray
    # ProfilerStep markers, sorted by start.
    step_number: np.ndarray
    step_start_s: np.ndarray
    step_dur_s: np.ndarray
    num_events: int
    """Events in the file's traceEvents (decoded or skipped)."""
    backend: str | None = None
    """`distributedInfo.backend` (nccl, gloo, ...); None when the trace does not say."""

    @property
    def act_end_s(self) -> np.ndarray:
        return self.act_start_s + self.act_dur_s

    @property
    def num_activities(self) -> int:
        return int(self.act_start_s.size)

    def coll_kind(self, index: int) -> str:
        return COLLECTIVE_KINDS[int(self.act_coll[index])]


@dataclass(frozen=True, slots=True, kw_only=True)
class Trace:
    """The ranks of one job, ordered by rank."""

    ranks: tuple[RankTrace, ...]

    def rank(self, rank: int) -> RankTrace:
        for r in self.ranks:
            if r.rank == rank:
                return r
        raise KeyError(rank)
