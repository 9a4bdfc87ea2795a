"""Pipeline programs played for many plans at once: the max-plus graphs of `schedule.sim.graph` evaluated level by
level on numpy arrays (one column per plan); each node's end is max(its dependencies) + its pass, as in `play`.

What makes it fast, none of which moves a bit of the result:
- plans with the same pass times (bit for bit) are played once (`_distinct`): a search's groups repeat them;
- graphs played on the same plans (the interleaved extrapolation's plays of 2p and 3p micro-batches) are compiled
  into one program whose level k holds every graph's level k, so Python walks the deepest graph's levels once,
  and a node that computes what a node of the last graph computes is played once (`_twins`: three quarters of
  the 2p program's nodes);
- the clock is laid out level by level, so a level's ends are written into one contiguous block, and
  dependencies are read with `ndarray.take` (cheaper per call than fancy indexing);
- plans are played in blocks small enough for a level's rows to stay in cache.
The arithmetic is the plain evaluation's (one graph, a level at a time: tests/search/test_replay_program.py keeps
it as the reference): the same maxima, in the same dependency-column order, over the same values, then the same
additions. A node lacking a dependency column its own graph's level has reads the zero row, as there; one
lacking a column only another graph's level has reads a −inf row, which leaves a maximum as it is. A missing
pass adds the zero row's 0 (the plain evaluation adds 0 or nothing: the same, as no clock is ever −0.0 — they
start from the zero row's +0.0, and a sum is −0.0 only when both terms are). tests/search/test_replay.py holds
the result to `play`.
"""
from __future__ import annotations

from functools import lru_cache
from itertools import compress

import numpy as np

from narrowpath.schedule.sim.graph import Graph, graph_1f1b, graph_interleaved

__all__ = ["Graph", "graph_1f1b", "graph_interleaved", "makespan", "makespans"]
_CELLS = 2_000_000
"""Nodes × plans evaluated at once (a block of 16 MB of clocks; smaller blocks keep a level's rows in cache)."""


class _Program:
    """Graphs compiled into one level-major layout: clock rows 0..nodes−1 the nodes in level order, row `nodes`
    held at 0 and row `nodes + 1` at −inf; duration rows 0..passes−1 the (stage, kind, chunk) table, then a zero
    row. `steps`: per level, (first row, end row, dependency rows per column, pass rows per column);
    `finals`: per graph, its stages' final rows (p, 2). A node that computes what a node of the last graph
    computes (`_twins`) is not played: what reads it reads its twin."""

    __slots__ = ("nodes", "passes", "steps", "finals")

    def __init__(self, graphs: tuple[Graph, ...]):
        offsets = np.cumsum([0] + [len(g.deps) for g in graphs])
        total, self.passes = int(offsets[-1]), 2 * graphs[0].p * graphs[0].v
        # the nodes (offset by their graph) level-major: level k of every graph, in graph order
        segs = sorted((k, gi) for gi, g in enumerate(graphs) for k in range(len(g.levels)))
        order = np.concatenate([graphs[gi].levels[k] + offsets[gi] for k, gi in segs])
        seg_len = [len(graphs[gi].levels[k]) for k, gi in segs]
        level = np.repeat([k for k, _ in segs], seg_len)
        deps = np.concatenate([np.where(g.deps >= 0, g.deps + off, -1) for g, off in zip(graphs, offsets)])[order]
        passes = np.concatenate([g.passes for g in graphs])[order]
        dep_ids, dep_cols = _entries(deps, seg_len, level, total, total + 1)
        pass_ids, pass_cols = _entries(passes, seg_len, level, self.passes, self.passes)  # adding 0 is exact (above)
        twin = _twins(graphs, offsets, order, dep_ids, pass_ids)
        played = twin[order] == order
        self.nodes = int(played.sum())
        row = np.empty(total + 2, dtype=np.intp)  # clock row of each node id, then of the zero and −inf ids
        row[order[played]] = np.arange(self.nodes)
        row[:total] = row[twin]
        row[total:] = self.nodes, self.nodes + 1
        lv_len = np.bincount(level[played]).tolist()
        self.steps = _steps(lv_len, row[dep_ids[played]], dep_cols, pass_ids[played], pass_cols, self.nodes)
        self.finals = [row[np.where(g.final >= 0, g.final + off, total)] for g, off in zip(graphs, offsets)]

    def run(self, flat: np.ndarray) -> list[np.ndarray]:
        """Each graph's latest stage clock, (n,), for duration rows (n, passes)."""
        n = flat.shape[0]
        outs = [np.empty(n) for _ in self.finals]
        width = max(1, _CELLS // (self.nodes + 2))
        for a in range(0, n, width):
            clock = self._play(flat[a:a + width])
            for out, fin in zip(outs, self.finals):
                out[a:a + width] = np.maximum(clock[fin[:, 0]], clock[fin[:, 1]]).max(axis=0)
        return outs

    def _play(self, flat: np.ndarray) -> np.ndarray:
        """The clock (rows, plans) after every level of one block of plans."""
        c = flat.shape[0]
        d = np.empty((self.passes + 1, c))
        d[:self.passes] = flat.T
        d[self.passes] = 0.0
        clock = np.empty((self.nodes + 2, c))
        clock[self.nodes], clock[self.nodes + 1] = 0.0, -np.inf
        take, dtake, maximum, add = clock.take, d.take, np.maximum, np.add
        for a, b, cols, pas in self.steps:
            x = clock[a:b]
            if len(cols) == 1:
                x[...] = take(cols[0], 0)
            else:
                maximum(take(cols[0], 0), take(cols[1], 0), out=x)
                for col in cols[2:]:
                    maximum(x, take(col, 0), out=x)
            for q in pas:
                add(x, dtake(q, 0), out=x)
        return clock


def _entries(ids: np.ndarray, seg_len: list, level: np.ndarray, zero: int, neutral: int) -> tuple[np.ndarray,
                                                                                                  np.ndarray]:
    """(the entry each node reads in each column (nodes, columns), the columns each level has (levels, columns))
    from `ids` (nodes, columns) in level-major order, −1 where a node has no entry (a level has a column when some
    node of it has an entry there). A node lacking an entry reads `zero` where its own graph's level has the
    column (the single-graph evaluator's zero row) and `neutral` where only another graph's has. (A node without
    dependencies is in level 0, whose nodes all lack them: the level reads the zero row, `_steps`.)"""
    has = ids >= 0
    seg_has = np.repeat(np.logical_or.reduceat(has, np.cumsum([0] + seg_len[:-1])), seg_len, axis=0)
    lv_len = np.bincount(level)
    lv_has = np.logical_or.reduceat(has, np.cumsum(lv_len) - lv_len)
    return np.where(has, ids, np.where(seg_has, zero, neutral)), lv_has


def _twins(graphs: tuple[Graph, ...], offsets: np.ndarray, order: np.ndarray, dep_ids: np.ndarray,
           pass_ids: np.ndarray) -> np.ndarray:
    """Each node id's twin: the node of the last graph at the same stage and position where both compute the same
    value — the same passes and fallback entries, and dependencies that are twins in turn (so the same level; the
    largest such set, found by dropping nodes whose dependencies are not twins until none is left; one pass for
    the interleaved programs of 2p and 3p micro-batches, whose first three quarters match) — else the node
    itself. Candidates come from the builders' numbering (stage × passes a stage + position); only the check
    decides."""
    total = int(offsets[-1])
    node = np.arange(total)
    if len(graphs) < 2:
        return node
    per_stage = np.array([max(1, len(g.deps) // g.p) for g in graphs])
    gi = np.searchsorted(offsets, node, side="right") - 1
    stage, pos = np.divmod(node - offsets[gi], per_stage[gi])
    twin = np.where((gi < len(graphs) - 1) & (pos < per_stage[-1]), offsets[-2] + stage * per_stage[-1] + pos, -1)
    at = np.empty(total, dtype=np.intp)
    at[order] = np.arange(total)  # position of a node id in the level-major arrays
    t = at[np.maximum(twin, 0)]
    ext = np.append(twin, [total, total + 1])  # a dependency's twin; the zero and −inf entries stay themselves
    same = (twin >= 0) & (pass_ids[at] == pass_ids[t]).all(axis=1) & (ext[dep_ids[at]] == dep_ids[t]).all(axis=1)
    while True:
        kept = same & np.append(same, [True, True])[dep_ids[at]].all(axis=1)
        if np.array_equal(kept, same):
            return np.where(same, twin, node)
        same = kept


def _steps(lv_len: list, dep_rows: np.ndarray, dep_cols: np.ndarray, pass_rows: np.ndarray, pass_cols: np.ndarray,
           zero: int) -> list[tuple]:
    """Per level, (first row, end row, dependency rows of each column it has, pass rows of each column it has),
    the rows contiguous index arrays (`ndarray.take` reads them as they are); a level without dependencies reads
    the zero row."""
    bounds = list(zip(np.cumsum([0] + lv_len[:-1]).tolist(), np.cumsum(lv_len).tolist()))

    def per_level(rows, cols):
        rows = np.ascontiguousarray(rows.T, dtype=np.intp)  # (columns, nodes)
        every = zip(*([r[a:b] for a, b in bounds] for r in rows))
        return [tuple(compress(c, f)) for c, f in zip(every, cols.tolist())]

    deps = [c or (np.full(b - a, zero, dtype=np.intp),) for c, (a, b) in zip(per_level(dep_rows, dep_cols), bounds)]
    return [(a, b, d, q) for (a, b), d, q in zip(bounds, deps, per_level(pass_rows, pass_cols))]


@lru_cache(maxsize=256)
def _program(graphs: tuple[Graph, ...]) -> _Program:
    """The compiled program of graphs (the graphs themselves are cached per shape by `schedule.sim.graph`)."""
    return _Program(graphs)


def _distinct(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(the distinct rows of flat (n, k), bit for bit (compared as bytes), and each row's index among them; None
    when all rows differ)."""
    keys = flat.view(np.dtype((np.void, flat.itemsize * flat.shape[1]))).reshape(-1)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    if first.size == flat.shape[0]:
        return flat, None
    return flat[first], inverse.reshape(-1)


def makespans(graphs: tuple[Graph, ...], durations: np.ndarray) -> list[np.ndarray]:
    """Each graph's latest stage clock, (n,), for durations (n, p, 2, v) (kind 0 forward, 1 backward); the
    graphs share p and v."""
    n = durations.shape[0]
    rows, inverse = _distinct(np.ascontiguousarray(durations.reshape(n, int(np.prod(durations.shape[1:]))),
                                                   dtype=np.float64))
    outs = _program(tuple(graphs)).run(rows)
    return outs if inverse is None else [out[inverse] for out in outs]


def makespan(graph: Graph, durations: np.ndarray) -> np.ndarray:
    """The latest stage clock, (n,), for durations (n, p, 2, v) (kind 0 forward, 1 backward)."""
    return makespans((graph,), durations)[0]
