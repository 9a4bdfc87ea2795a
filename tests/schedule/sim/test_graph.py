"""The compiled pipeline programs (sim/graph.py) give `play`'s result to the bit: the closed form plays 1F1B
(rendezvous) and interleaved (overlapped sends) schedules through them, and predict must not move."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.schedule.sim.graph import graph_1f1b, graph_interleaved, graph_time_s
from narrowpath.schedule.sim.playback import play
from narrowpath.schedule.sim.programs import build_programs


@pytest.mark.parametrize("schedule,p,v,m", [("1f1b", 4, 1, 16), ("1f1b", 8, 1, 5), ("1f1b", 2, 1, 1),
                                            ("1f1b", 16, 1, 64), ("1f1b", 1, 1, 3), ("interleaved", 4, 2, 8),
                                            ("interleaved", 3, 4, 9), ("interleaved", 2, 3, 2),
                                            ("interleaved", 16, 7, 48)])
def test_graph_is_play_to_the_bit(schedule, p, v, m):
    rng = np.random.default_rng(p * 1000 + v * 10 + m)
    mode = "rendezvous" if schedule == "1f1b" else "async"
    graph = graph_1f1b(p, m) if schedule == "1f1b" else graph_interleaved(p, v, m)
    programs = build_programs(schedule, p, v, m, mode == "async")
    for trial in range(6):
        times = {(i, kind, c): float(rng.random() + 0.05) if trial else 1.0
                 for i in range(p) for kind in ("F", "BW") for c in range(v)}
        want = max(play(programs, times, {"F": 0.0, "B": 0.0}, mode=mode).ends_s)
        assert graph_time_s(graph, times) == want
