"""The two pipeline programs the closed form plays (`schedule.pipeline.played_time_s`) as max-plus dataflow graphs,
evaluated fast for one set of pass times (`graph_time_s`, what predict calls) or, by the search, for many at once
(`search.replay.makespan`).

`schedule.sim.playback.play` runs a stage's passes between batched exchanges (with overlapped sends every pass is
its own group). A group starts when its exchange ends and its end is the sum
of its passes' times after that. A message's post time is its sender's clock when it reaches the exchange after the
group that produced it, or its receiver's clock when it reaches the exchange before the group that consumes it.
- 1F1B, rendezvous (NCCL): a message moves once both ends have posted it, and both ends wait for it, so an
  exchange ends at the latest of its stage's clock, the posts of the receivers of what it sends, and the posts of
  the senders of what it receives.
- interleaved, async (Megatron-Core overlap_p2p_comm): a sender does not wait, so an exchange ends at the latest of
  its stage's clock and the posts of the senders of what it receives.
Messages take no time (the stage times already hold them). Each group's end is then max(its dependencies) + its
passes' time: a graph whose nodes are groups, built here from the programs' closed-form order (`schedule.sim.
programs`) and levelled once per program shape. The evaluation does `play`'s arithmetic (the same sums, and
maxima, which are exact), so its result is `play`'s to the bit; tests/schedule/sim/test_graph.py holds it to `play`
on random times.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from narrowpath.errors import SimulationError
from narrowpath.spec.plan import interleaved_warmup

class Graph:
    """Groups of passes as nodes: dependencies (nodes, 3) (−1: none), the passes of each node (nodes, 2) as
    indexes into the (stage, kind, chunk) duration table (−1: none), evaluation levels, and each stage's final
    node and final dependencies. The search's array evaluation compiles its own layout from these
    (`search.replay`)."""

    __slots__ = ("deps", "passes", "levels", "final", "p", "v", "_seq", "_pairs")

    def __init__(self, deps, passes, final, p, v):
        self.deps, self.passes, self.final, self.p, self.v = deps, passes, final, p, v
        self.levels = _levels(deps)
        self._seq = None
        self._pairs = None

    def sequence(self) -> list[tuple[int, int, int, int, int]]:
        """(node, three dependencies, pass) in topological order, −1 mapped to the zero slot (one pass per node:
        both programs run every pass as its own group)."""
        if self._seq is None:
            n = len(self.deps)
            order = np.concatenate(self.levels)
            d = np.where(self.deps[order] >= 0, self.deps[order], n)
            q = self.passes[order, 0]
            self._seq = list(zip(order.tolist(), d[:, 0].tolist(), d[:, 1].tolist(), d[:, 2].tolist(), q.tolist()))
        return self._seq

    def pair_sequence(self) -> list[tuple[int, int, int, int]] | None:
        """`sequence` as (node, two dependencies, pass) when no node has a third dependency (the interleaved,
        async program: a pass waits for its stage's previous pass and one sender), else None."""
        if self._pairs is None:
            seq = self.sequence()
            n = len(self.deps)
            self._pairs = [(node, a, b, q) for node, a, b, _, q in seq] if all(c == n for _, _, _, c, _ in seq) \
                else []
        return self._pairs or None

def _levels(deps: np.ndarray) -> list[np.ndarray]:
    """Nodes grouped by topological level, each level sorted (Kahn's algorithm a level at a time over numpy
    arrays: the successors of a level's nodes whose dependencies are all placed form the next level)."""
    n = len(deps)
    src = np.repeat(np.arange(n), deps.shape[1])
    dst = deps.reshape(-1)
    keep = dst >= 0
    src, dst = src[keep], dst[keep]  # edge dst -> src (src depends on dst)
    order = np.argsort(dst, kind="stable")
    fan = np.bincount(dst, minlength=n)
    succ = np.full((n + 1, max(1, int(fan.max(initial=0)))), n)  # each node's successors, padded with n
    succ[dst[order], np.arange(dst.size) - (np.cumsum(fan) - fan)[dst[order]]] = src[order]
    dep = np.where(deps >= 0, deps, n)
    placed = np.zeros(n + 1, dtype=bool)
    placed[n] = True  # "no dependency" is always placed
    level = np.flatnonzero((deps < 0).all(axis=1))
    out = []
    while level.size:
        out.append(level)
        placed[level] = True
        cand = succ[level].reshape(-1)
        cand = cand[cand < n]
        cand = np.sort(cand[placed[dep[cand]].all(axis=1)])  # a node with two dependencies here comes twice
        level = cand[np.concatenate(([True], cand[1:] != cand[:-1]))] if cand.size > 1 else cand
    if sum(len(x) for x in out) != n:
        raise SimulationError("pipeline program deadlocks")
    return out


def _table_index(p: int, v: int, stage: np.ndarray, kind: np.ndarray, chunk: np.ndarray) -> np.ndarray:
    """Index of (stage, kind: 0 F / 1 BW, chunk) in a (p, 2, v) duration table."""
    return (stage * 2 + kind) * v + chunk


def _pos_f(j, w):
    """Position of forward j in a stage's pass sequence (w warm-up forwards, then forward/backward pairs)."""
    return np.where(j < w, j, w + 2 * (j - w))


def _pos_b(j, w, total):
    """Position of backward j (pairs after the warm-up forwards, then the remaining backwards)."""
    return np.where(j < total - w, w + 2 * j + 1, total + j)


def _sequence(p: int, total: int, warm: np.ndarray):
    """(stage, position, is forward, index in its kind's order) of every pass of p stages running `total`
    forwards and `total` backwards: warm[i] forwards, then pairs, then backwards (both programs' shape)."""
    stage = np.repeat(np.arange(p), 2 * total)
    k = np.tile(np.arange(2 * total), p)
    w = warm[stage]
    steady = (k >= w) & (k < 2 * total - w)
    is_f = (k < w) | (steady & ((k - w) % 2 == 0))
    idx = np.where(is_f, np.where(k < w, k, w + (k - w) // 2), np.where(steady, (k - w) // 2, k - total))
    return stage, k, is_f, idx


@lru_cache(maxsize=256)
def graph_1f1b(p: int, m: int) -> Graph:
    """1F1B (rendezvous), one node per pass: stage i runs w = min(p − i − 1, m) warm-up forwards, then forward and
    backward alternately, then the remaining backwards (schedule.sim.programs.order_1f1b)."""
    warm = np.minimum(p - np.arange(p) - 1, m)
    stage, k, is_f, mb = _sequence(p, m, warm)
    node = stage * 2 * m + k

    def at(i, pos):
        ok = (i >= 0) & (i < p) & (pos >= 0)
        return np.where(ok, np.clip(i, 0, p - 1) * 2 * m + pos, -1)

    def pos(i, f, j):
        ii = np.clip(i, 0, p - 1)
        return np.where(f, _pos_f(j, warm[ii]), _pos_b(j, warm[ii], m))

    prev = np.where(k > 0, node - 1, -1)
    # the pass's input, posted by its sender after the pass that produced it (previous stage's forward, next
    # stage's backward)
    s_stage = np.where(is_f, stage - 1, stage + 1)
    src = at(s_stage, pos(s_stage, is_f, mb))
    # the previous pass's output, posted by its receiver before the pass that consumes it
    p_is_f, p_mb = np.roll(is_f, 1), np.roll(mb, 1)
    r_stage = np.where(p_is_f, stage + 1, stage - 1)
    rcv = np.where(k > 0, at(r_stage, pos(r_stage, p_is_f, p_mb) - 1), -1)
    deps = np.stack([prev, src, rcv], axis=1)
    passes = np.stack([_table_index(p, 1, stage, np.where(is_f, 0, 1), np.zeros_like(stage)),
                       np.full(stage.size, -1)], axis=1)
    # the final exchange sends the last backward's output: its receiver's post before its own last pass
    i = np.arange(p)
    final = np.stack([i * 2 * m + 2 * m - 1, at(i - 1, pos(i - 1, np.zeros(p, dtype=bool), np.full(p, m - 1)) - 1)],
                     axis=1)
    return Graph(deps, passes, final, p, 1)


@lru_cache(maxsize=256)
def graph_interleaved(p: int, v: int, m: int, group: int = 0) -> Graph:
    """Interleaved 1F1B with overlapped sends (async; every pass its own group), one node per pass: virtual
    micro-batches in `schedule_table` order (micro-batches in groups of g = `group` per chunk, default p), warm-up
    forwards 2(p − i − 1) + (v − 1)·g, then forward/backward pairs, backwards in reverse chunk order
    (schedule.sim.programs.order_interleaved)."""
    g = group or p
    total = m * v
    t = np.arange(total)
    lo = np.arange(0, m, g)  # the groups: micro-batches [lo, lo + size), the last one the remainder
    size = np.minimum(g, m - lo)
    # forward t of the group at lo runs chunk (t − v·lo) // size on micro-batch lo + (t − v·lo) % size
    first, width = np.repeat(lo, v * size), np.repeat(size, v * size)
    chunk, mbs = (t - v * first) // width, first + (t - v * first) % width  # forward t: (chunk, micro-batch)
    table = np.zeros((v, m), dtype=np.int64)
    table[chunk, mbs] = t
    warm = np.array([interleaved_warmup(p, i, v, g, total) for i in range(p)], dtype=np.int64)
    stage, k, is_f, idx = _sequence(p, total, warm)
    node = stage * 2 * total + k
    c = np.where(is_f, chunk[idx], v - 1 - chunk[idx])
    mb = mbs[idx]
    prev = np.where(k > 0, node - 1, -1)
    # a forward (c, mb) comes from the previous stage's forward (c, mb) (stage 0: the last stage's chunk c − 1);
    # a backward from the next stage's backward (c, mb) (the last stage: stage 0's chunk c + 1)
    s_stage = np.where(is_f, np.where(stage > 0, stage - 1, p - 1), np.where(stage < p - 1, stage + 1, 0))
    s_chunk = np.where(is_f, np.where(stage > 0, c, c - 1), np.where(stage < p - 1, c, c + 1))
    ok = (s_chunk >= 0) & (s_chunk < v) & (p > 1)
    sc = np.clip(s_chunk, 0, v - 1)
    s_idx = np.where(is_f, table[sc, mb], table[v - 1 - sc, mb])
    s_pos = np.where(is_f, _pos_f(s_idx, warm[s_stage]), _pos_b(s_idx, warm[s_stage], total))
    src = np.where(ok, s_stage * 2 * total + s_pos, -1)
    deps = np.stack([prev, src, np.full(stage.size, -1)], axis=1)
    passes = np.stack([_table_index(p, v, stage, np.where(is_f, 0, 1), c), np.full(stage.size, -1)], axis=1)
    i = np.arange(p)
    final = np.stack([i * 2 * total + 2 * total - 1, np.full(p, -1)], axis=1)
    return Graph(deps, passes, final, p, v)


def graph_time_s(graph: Graph, pass_s: dict) -> float:
    """The latest stage clock for one set of pass times `pass_s[(stage, kind, chunk)]` (kind F or BW): `play`'s
    result without the message bookkeeping (a loop over the nodes in topological order)."""
    p, v = graph.p, graph.v
    dur = [0.0] * (2 * p * v)
    for (i, kind, c), t in pass_s.items():
        dur[(i * 2 + (0 if kind == "F" else 1)) * v + c] = t
    clock = [0.0] * (len(graph.deps) + 1)
    pairs = graph.pair_sequence()
    if pairs is not None:  # two dependencies a node (the same maxima: the missing third reads the zero slot)
        for node, a, b, q in pairs:
            x = clock[a]
            y = clock[b]
            clock[node] = (x if x >= y else y) + dur[q]
    else:
        for node, a, b, c, q in graph.sequence():
            x = clock[a]
            y = clock[b]
            if y > x:
                x = y
            y = clock[c]
            if y > x:
                x = y
            clock[node] = x + dur[q]
    n = len(graph.deps)
    best = 0.0
    for f0, f1 in graph.final.tolist():
        x = clock[f0 if f0 >= 0 else n]
        y = clock[f1 if f1 >= 0 else n]
        best = max(best, x if x >= y else y)
    return best
