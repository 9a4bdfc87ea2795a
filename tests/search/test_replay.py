"""The compiled playback is `schedule.sim.playback.play`, and the bulk pipeline time is
`schedule.pipeline.pipeline_time_s`, on random stage times of every branch (equal stages, the 1F1B closed form,
1F1B and interleaved schedules played, an interleaved split Megatron refuses, fill and drain of overlapped
sends)."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.schedule.pipeline import pipeline_time_s
from narrowpath.schedule.sim.playback import play
from narrowpath.schedule.sim.programs import build_programs
from narrowpath.search.pipeline_bulk import fill_bound, pipeline_times
from narrowpath.search.replay import graph_1f1b, graph_interleaved, makespan


@pytest.mark.parametrize("schedule,p,v,m", [("1f1b", 4, 1, 16), ("1f1b", 8, 1, 5), ("1f1b", 2, 1, 7),
                                            ("1f1b", 5, 1, 20), ("1f1b", 1, 1, 3), ("interleaved", 4, 2, 8),
                                            ("interleaved", 3, 4, 9), ("interleaved", 2, 3, 2),
                                            ("interleaved", 4, 3, 12)])
def test_graph_is_play(schedule, p, v, m):
    """The max-plus graph of a program gives `play`'s latest clock (1F1B rendezvous, interleaved async)."""
    rng = np.random.default_rng(p * 100 + v * 10 + m)
    n = 25
    durations = rng.random((n, p, 2, v)) + 0.05
    durations[: n // 5] = 1.0  # equal passes too (ties between paths)
    mode = "rendezvous" if schedule == "1f1b" else "async"
    graph = graph_1f1b(p, m) if schedule == "1f1b" else graph_interleaved(p, v, m)
    got = makespan(graph, durations)
    programs = build_programs(schedule, p, v, m, mode == "async")
    for j in range(n):
        times = {(i, kind, c): float(durations[j, i, k, c]) for i in range(p) for k, kind in enumerate(("F", "BW"))
                 for c in range(v)}
        want = max(play(programs, times, {"F": 0.0, "B": 0.0}, mode=mode).ends_s)
        assert got[j] == pytest.approx(want, rel=1e-14), j


def _stages(rng, n, p, kind):
    base = rng.random((n, 1)) + 0.5
    T = np.repeat(base, p, axis=1)
    if kind == "cheap_first":
        T[:, 0] *= 0.8
        T[:, -1] *= 1.3
    elif kind == "heavy_first":
        T[:, 0] *= 1.1
        T[:, -1] *= 1.3
    elif kind == "random":
        T *= rng.random((n, p)) + 0.5
    return T


@pytest.mark.parametrize("p,v,kind", [(1, 1, "random"), (4, 1, "equal"), (4, 1, "cheap_first"), (4, 1, "heavy_first"),
                                      (6, 1, "random"), (2, 1, "random"), (4, 2, "equal"), (4, 2, "random"),
                                      (3, 3, "heavy_first")])
def test_bulk_pipeline_is_the_scalar_one(p, v, kind):
    rng = np.random.default_rng(p * 7 + v)
    n = 24
    T = _stages(rng, n, p, kind)
    F = T * (0.25 + 0.2 * rng.random((n, p)))
    m = rng.choice([p, 2 * p, 4 * p, 5 * p + (1 if v > 1 else 3), 13 * p], size=n)
    shares = None
    if v > 1:
        w = rng.random((n, p, v)) + 0.5
        w[: n // 3] = 1.0  # equal chunks for a third of the plans
        shares = w / w.sum(axis=2, keepdims=True)
    send = rng.random(n) * 0.01
    got = pipeline_times(T, F, m, v, shares, send)
    for j in range(n):
        want = pipeline_time_s(T[j].tolist(), int(m[j]), v, fwd_times_s=F[j].tolist(),
                               chunk_weights=None if shares is None else shares[j].tolist(),
                               overlapped_send_s=float(send[j]))
        assert got[j] == pytest.approx(want, rel=1e-12), (j, m[j])
        assert got[j] >= m[j] * T[j].max() * (1 - 1e-12)  # the bounds the search prunes with
        if v == 1:
            assert got[j] >= fill_bound(T[j:j + 1], F[j:j + 1], m[j:j + 1])[0] * (1 - 1e-12)
