"""Stragglers across ranks: per collective, which rank arrived last and by how much; per-rank skew.

Collectives are matched across ranks by order: the i-th collective of a kind on one rank meets the i-th of
that kind on every other rank (NCCL issues the collectives of a group in the same order on all members).
Arrival = start of the communication activity on the trace clock (`baseTimeNanoseconds` + `origin_ns` +
start), which assumes the
ranks' clocks agree (one host, or hosts synchronised by NTP/PTP, typically to well under a millisecond).
A rank's skew is its mean lateness behind the earliest arrival. Kinds whose counts differ between ranks are
matched up to the shortest count (sampled traces), and that is reported.
A collective ends together on all its ranks (every member waits for the last to arrive), so an order-matched set
whose intervals have no common instant (`one_collective`) is not one collective — in sampled traces the i-th of a
kind on one rank can be another call than the i-th on the next (pp-128rank-sampled: rank 0's all_reduce #1 at
269.2-316.9 ms against rank 1's at 433.2-450.8 ms, read as 164 ms of lateness). Such sets are dropped and counted.
The process groups (`distributedInfo.pg_config`) are not used for matching; the report says whether the traces
carried them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from narrowpath.trace import schema
from narrowpath.trace.intervals import distinct
from narrowpath.trace.model import RankTrace
from narrowpath.trace.windows import Window


@dataclass(frozen=True, slots=True, kw_only=True)
class StragglerReport:
    """Cross-rank arrival skew of the matched collectives."""

    ranks: tuple[int, ...]
    num_matched: int
    """Collectives matched on every rank."""
    unmatched_kinds: tuple[str, ...]
    """Kinds whose counts differ between ranks (matched up to the shortest)."""
    last_arrival_count: dict[int, int]
    """Per rank, how many matched collectives it arrived at last."""
    mean_lateness_s: dict[int, float]
    """Per rank, mean arrival behind the earliest rank (its skew)."""
    max_lateness_s: dict[int, float]
    worst: tuple[tuple[str, int, int, float], ...]
    """Largest spreads: (kind, ordinal, last rank, spread seconds), at most 10."""
    mean_step_s: dict[int, float]
    """Per rank, mean ProfilerStep duration on the CPU (NaN without markers): the step-time skew."""
    num_dropped: int = 0
    """Order-matched sets whose intervals do not overlap on every rank (not one collective), left out."""
    groups_known: bool = False
    """Whether every trace carried its process groups (`distributedInfo.pg_config`)."""


def one_collective(start_s: np.ndarray, end_s: np.ndarray) -> np.ndarray:
    """Per column of a ranks x collectives table: whether the intervals share an instant (latest start <= earliest
    end), which every rank's part of one collective does, since all of them end when the last one has arrived."""
    return start_s.max(axis=0) <= end_s.min(axis=0)


def _t0(rank: RankTrace, ref: RankTrace) -> float:
    """Seconds from the reference rank's origin to this rank's origin (in ns integers first: no rounding)."""
    return ((rank.origin_ns + rank.clock_offset_ns) - (ref.origin_ns + ref.clock_offset_ns)) * 1e-9


def straggler_report(ranks: tuple[RankTrace, ...], windows: tuple[Window, ...]) -> StragglerReport | None:
    """None with fewer than two ranks or no communication."""
    if len(ranks) < 2:
        return None
    comm = [w.index[r.act_class[w.index] == schema.CLASS_COMM] for r, w in zip(ranks, windows)]
    codes = sorted({int(c) for r, i in zip(ranks, comm) for c in distinct(r.act_coll[i])})
    sel = [[i[r.act_coll[i] == c] for r, i in zip(ranks, comm)] for c in codes]
    arrivals = {schema.COLLECTIVE_KINDS[c]: [_t0(r, ranks[0]) + r.act_start_s[j] for r, j in zip(ranks, js)]
                for c, js in zip(codes, sel)}
    ends = {schema.COLLECTIVE_KINDS[c]: [_t0(r, ranks[0]) + r.act_end_s[j] for r, j in zip(ranks, js)]
            for c, js in zip(codes, sel)}
    rank_ids = tuple(r.rank for r in ranks)
    late_sum = np.zeros(len(ranks))
    late_max = np.zeros(len(ranks))
    last_count = np.zeros(len(ranks), dtype=int)
    matched, dropped, unmatched, worst = 0, 0, [], []
    for kind, per_rank in arrivals.items():
        counts = [a.size for a in per_rank]
        n = min(counts)
        if len(set(counts)) > 1:
            unmatched.append(kind)
        if n == 0:
            continue
        table = np.stack([a[:n] for a in per_rank])  # ranks x collectives
        keep = one_collective(table, np.stack([e[:n] for e in ends[kind]]))
        dropped += int(n - keep.sum())
        table, n = table[:, keep], int(keep.sum())
        if n == 0:
            continue
        late = table - table.min(axis=0)
        late_sum += late.sum(axis=1)
        late_max = np.maximum(late_max, late.max(axis=1))
        last = late.argmax(axis=0)
        last_count += np.bincount(last, minlength=len(ranks))
        spread = late.max(axis=0)
        for i in np.argsort(-spread)[:10]:
            worst.append((kind, int(i), rank_ids[last[i]], float(spread[i])))
        matched += n
    if matched == 0 and dropped == 0:
        return None
    return StragglerReport(
        ranks=rank_ids, num_matched=matched, unmatched_kinds=tuple(unmatched),
        last_arrival_count={rk: int(c) for rk, c in zip(rank_ids, last_count)},
        mean_lateness_s={rk: float(s / max(matched, 1)) for rk, s in zip(rank_ids, late_sum)},
        max_lateness_s={rk: float(m) for rk, m in zip(rank_ids, late_max)},
        worst=tuple(sorted(worst, key=lambda w: -w[3])[:10]),
        mean_step_s={r.rank: float(r.step_dur_s.mean()) if r.step_dur_s.size else float("nan") for r in ranks},
        num_dropped=dropped, groups_known=all(r.process_groups for r in ranks))
