"""Pipeline programs played for many plans at once: the max-plus graphs of `schedule.sim.graph` evaluated level by
level on numpy arrays (one column per plan); each node's end is max(its dependencies) + its pass, as in `play`."""
from __future__ import annotations

import numpy as np

from narrowpath.schedule.sim.graph import Graph, graph_1f1b, graph_interleaved

__all__ = ["Graph", "graph_1f1b", "graph_interleaved", "makespan"]
_CELLS = 8_000_000
"""Nodes × plans evaluated at once."""


def makespan(graph: Graph, durations: np.ndarray) -> np.ndarray:
    """The latest stage clock, (n,), for durations (n, p, 2, v) (kind 0 forward, 1 backward)."""
    n = durations.shape[0]
    flat = durations.reshape(n, -1)
    nodes = len(graph.deps)
    out = np.zeros(n)
    step = max(1, _CELLS // max(1, nodes))
    fin = np.where(graph.final >= 0, graph.final, nodes)
    for a in range(0, n, step):
        d = np.concatenate([flat[a:a + step].T, np.zeros((1, min(step, n - a)))])  # row −1: no pass
        clock = np.zeros((nodes + 1, d.shape[1]))  # row `nodes`: no dependency (time 0)
        for lv, cols, pas in graph.steps:
            x = clock[cols[0]] if cols else np.zeros((lv.size, d.shape[1]))
            for c in cols[1:]:
                np.maximum(x, clock[c], out=x)
            for q in pas:
                x += d[q]
            clock[lv] = x
        out[a:a + step] = np.maximum(clock[fin[:, 0]], clock[fin[:, 1]]).max(axis=0)
    return out
