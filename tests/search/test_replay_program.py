"""The search's compiled playback (search/replay.py: distinct plans played once, several graphs in one program,
nodes two graphs compute alike played once) gives, to the bit, what the plain level-by-level evaluation of each
graph gives — on random pass times with ties, repeated plans, zeros and negative times (where reading the zero
row or not changes a maximum)."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.search import replay
from narrowpath.search.replay import graph_1f1b, graph_interleaved, makespan, makespans


def _plain(graph, durations: np.ndarray) -> np.ndarray:
    """The evaluation replay.makespan replaced: per level, the node's dependency columns some node of the level
    has (a missing one reads the zero row `nodes`), maxima in column order, then the passes added (a missing one
    adds the zero row −1)."""
    n, nodes = durations.shape[0], len(graph.deps)
    d = np.concatenate([durations.reshape(n, -1).T, np.zeros((1, n))])
    clock = np.zeros((nodes + 1, n))
    for lv in graph.levels:
        dcols = [np.where(graph.deps[lv, j] >= 0, graph.deps[lv, j], nodes) for j in range(graph.deps.shape[1])
                 if (graph.deps[lv, j] >= 0).any()]
        pcols = [graph.passes[lv, j] for j in range(graph.passes.shape[1]) if (graph.passes[lv, j] >= 0).any()]
        x = clock[dcols[0]] if dcols else np.zeros((lv.size, n))
        for c in dcols[1:]:
            np.maximum(x, clock[c], out=x)
        for q in pcols:
            x += d[q]
        clock[lv] = x
    fin = np.where(graph.final >= 0, graph.final, nodes)
    return np.maximum(clock[fin[:, 0]], clock[fin[:, 1]]).max(axis=0)


def _durations(rng, n: int, p: int, v: int, signed: bool) -> np.ndarray:
    d = rng.random((n, p, 2, v)) + (-0.5 if signed else 0.05)
    d[: n // 5] = 1.0  # equal passes: ties between paths
    d[n // 5: n // 4] = -0.0 if signed else 0.0  # a sum's sign of zero shows what was added
    d[n // 4: n // 3] = d[n // 3: n // 3 + (n // 3 - n // 4)]  # repeated plans
    return d[rng.permutation(n)]


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("kind,p,v,ms", [("1f1b", 4, 1, (16,)), ("1f1b", 8, 1, (5,)), ("1f1b", 1, 1, (3,)),
                                         ("1f1b", 3, 1, (6, 12)), ("1f1b", 5, 1, (20, 3, 10)),
                                         ("interleaved", 4, 2, (8,)), ("interleaved", 2, 3, (2,)),
                                         ("interleaved", 4, 3, (8, 12)), ("interleaved", 3, 4, (3, 6, 9)),
                                         ("interleaved", 8, 2, (24, 16)), ("interleaved", 1, 3, (2, 3))])
def test_program_is_the_plain_evaluation(kind, p, v, ms, signed):
    rng = np.random.default_rng(p * 1000 + v * 100 + sum(ms) + signed)
    durations = _durations(rng, 40, p, v, signed)
    graphs = tuple(graph_1f1b(p, m) if kind == "1f1b" else graph_interleaved(p, v, m) for m in ms)
    got = makespans(graphs, durations)
    for graph, g in zip(graphs, got):
        assert _same(g, _plain(graph, durations))
        assert _same(makespan(graph, durations), g)


def test_blocks_and_empty(monkeypatch):
    """Plans played in blocks of a few columns give the same; no plans give none."""
    graphs = (graph_interleaved(4, 2, 8), graph_interleaved(4, 2, 12))
    durations = _durations(np.random.default_rng(3), 50, 4, 2, False)
    whole = makespans(graphs, durations)
    monkeypatch.setattr(replay, "_CELLS", 3 * (sum(len(g.deps) for g in graphs) + 2))
    assert all(_same(a, b) for a, b in zip(makespans(graphs, durations), whole))
    assert [x.shape for x in makespans(graphs, durations[:0])] == [(0,), (0,)]


def test_twins_are_played_once():
    """The interleaved programs of 2p and 3p micro-batches share their first three quarters: played together,
    the 2p program adds a quarter of its nodes."""
    p, v = 8, 3
    g2, g3 = graph_interleaved(p, v, 2 * p), graph_interleaved(p, v, 3 * p)
    program = replay._Program((g2, g3))
    assert program.nodes < len(g3.deps) + 0.3 * len(g2.deps)
    assert replay._Program((g2,)).nodes == len(g2.deps)


def _random_graph(rng, p: int, v: int, per_stage: int, base=None, changed: float = 0.0):
    """A random program shaped like the builders': p stages of per_stage nodes (numbered stage by stage), each
    node after the first of its stage reading the one before it (column 0) and, at random, up to two nodes
    earlier in a random interleaving of the stages (columns 1 and 2: some missing, so a level's nodes read the
    zero row), one or two passes (the first rarely missing). With `base` (deps, passes, order, its per_stage),
    its nodes are copied to the same stage and position — a share of them (`changed`) with another pass, so they
    and what reads them are not twins — and the rest come after them."""
    n = p * per_stage
    deps, passes = np.full((n, 3), -1), np.full((n, 2), -1)
    order, start = [], 0
    if base is not None:
        b_deps, b_passes, b_order, b_per = base
        at = lambda x: np.where(x >= 0, (x // b_per) * per_stage + x % b_per, -1)  # noqa: E731
        order = at(b_order).tolist()
        deps[order], passes[order] = at(b_deps[b_order]), b_passes[b_order]
        flip = np.array(order)[rng.random(len(order)) < changed]
        passes[flip, 0] = (passes[flip, 0] + 1) % (2 * p * v)
        for i in np.flatnonzero(rng.random(len(order)) < changed)[1:]:  # or another dependency
            deps[order[i], 1] = order[rng.integers(0, i)]
        start = len(order)
    stages = rng.permutation(np.repeat(np.arange(p), per_stage - start // p))  # the rest, stages interleaved
    seen = np.full(p, start // p)
    for s in stages:
        node = s * per_stage + seen[s]
        seen[s] += 1
        if node % per_stage:
            deps[node, 0] = node - 1
        for j in (1, 2):
            if order and rng.random() < 0.4:
                deps[node, j] = order[rng.integers(0, len(order))]
        passes[node, 0] = rng.integers(0, 2 * p * v) if rng.random() < 0.95 else -1
        passes[node, 1] = rng.integers(0, 2 * p * v) if rng.random() < 0.1 else -1
        order.append(node)
    final = np.stack([np.arange(p) * per_stage + per_stage - 1, rng.integers(-1, n, size=p)], axis=1)
    return replay.Graph(deps, passes, final, p, v), (deps, passes, np.array(order), per_stage)


@pytest.mark.parametrize("seed", range(8))
def test_random_programs(seed):
    """Random graphs played together — one a copy of another's nodes with more after them, some copies changed —
    give each graph's plain evaluation, with negative pass times where a stray zero would show."""
    rng = np.random.default_rng(seed)
    p, v = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    g1, base = _random_graph(rng, p, v, int(rng.integers(2, 9)))
    g2, _ = _random_graph(rng, p, v, base[3] + int(rng.integers(0, 5)), base, changed=0.1)
    g3, _ = _random_graph(rng, p, v, int(rng.integers(2, 6)))
    durations = _durations(rng, 30, p, v, signed=True)
    for graphs in [(g1, g2), (g3, g1, g2), (g2, g1), (g1, g3)]:
        got = makespans(graphs, durations)
        assert all(_same(g, _plain(graph, durations)) for graph, g in zip(graphs, got)), graphs
    assert replay._Program((g1, g2)).nodes < len(g1.deps) + len(g2.deps)  # the unchanged copies are twins
