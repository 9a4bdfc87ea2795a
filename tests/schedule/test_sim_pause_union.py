"""Periodic pauses of a unit's members (noise `gc=PERIOD:PAUSE:random|aligned`): the unit stalls while any member
is paused, and a run ends when its work is done outside the union of the pauses — including the pauses that start
in the delay earlier pauses caused (fifty-sixth session's review: the simulator summed the pauses starting in the
run's unpaused span and stopped, so a tp-8 unit pausing 10 % of each period per member ran 1.92x slower where an
event Monte Carlo gives 2.43x)."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.schedule.sim.perturb import finish_time, pause_pattern, paused_before

TWO = pause_pattern(np.array([[0.0, 0.5]]), 1.0, 0.1)  # pauses [0, 0.1) and [0.5, 0.6) of every second


def test_union_of_two_members_by_hand():
    s, c, per = TWO
    assert s.tolist() == [[0.0, 0.5]] and c.tolist() == [[0.1, 0.1]] and per.tolist() == [pytest.approx(0.2)]
    # overlapping pauses count once: [0, 0.1) ∪ [0.05, 0.15) = 0.15 s a period
    assert pause_pattern(np.array([[0.05, 0.0]]), 1.0, 0.1)[2] == pytest.approx([0.15])
    # a pause running over the period's end: [0.95, 1.05) and [0.3, 0.4); up to 1.05 s: 0.05 + 0.1 + 0.1 = 0.25
    wrap = pause_pattern(np.array([[0.95, 0.3]]), 1.0, 0.1)
    assert paused_before(np.array([1.0, 1.05, 2.0]), wrap, 1.0) == pytest.approx([0.2, 0.25, 0.4])


@pytest.mark.parametrize("start, work, end", [
    (0.1, 0.35, 0.45),   # all inside the free span [0.1, 0.5)
    (0.1, 0.45, 0.65),   # 0.4 before the pause at 0.5, the rest after it ends at 0.6
    (0.1, 1.0, 1.3),     # 0.4 + 0.4 in the first period, pause [1.0, 1.1), 0.2 more
    (0.55, 0.1, 0.7),    # starts inside a pause: waits for 0.6
    (2.2, 0.75, 3.15),   # 0.3 in [2.2, 2.5), 0.4 in [2.6, 3.0), pause [3.0, 3.1), 0.05 more
])
def test_finish_time_by_hand(start, work, end):
    assert finish_time(np.array([start]), np.array([work]), TWO, 1.0) == pytest.approx([end])


def test_finish_time_matches_a_brute_force_clock():
    """Random phases of 8 members, random starts and works: the run's end against a 10 µs clock that advances work
    only while no member is paused."""
    rng = np.random.default_rng(7)
    period, pause, dt = 0.05, 0.004, 1e-5
    phases = rng.random((6, 8)) * period
    pat = pause_pattern(phases, period, pause)
    start = rng.random(6) * 0.2
    work = rng.random(6) * 0.05
    got = finish_time(start, work, pat, period)
    for u in range(6):
        t = np.arange(start[u], start[u] + 1.0, dt)
        paused = (np.mod(t[:, None] - phases[u], period) < pause).any(axis=1)
        done = np.cumsum(~paused) * dt
        want = t[np.searchsorted(done, work[u] - 1e-12)] + dt
        assert got[u] == pytest.approx(want, abs=3 * dt)


def test_the_unit_slows_by_the_inverse_of_its_free_share_on_average():
    """A long run slows by period / free time per period for its draw of phases; over draws the mean is at least
    1 / E[free share] = (1 − d)^−M (Jensen; a moment is free when none of M uniform phases covers it): M = 8,
    d = 0.1, ≥ 2.32 — the old sum-and-stop rule gave 1 + M·d = 1.8."""
    rng = np.random.default_rng(1)
    period, pause, m = 1.0, 0.1, 8
    pat = pause_pattern(rng.random((4000, m)) * period, period, pause)
    keep = pat[2] < period * 0.999
    pat = tuple(a[keep] for a in pat)
    n = keep.sum()
    slow = (finish_time(np.zeros(n), np.full(n, 50.0), pat, period) / 50.0)
    assert slow.mean() >= (1 - 0.1) ** -m * 0.995
    assert slow.mean() == pytest.approx(1 / (period - pat[2]).mean() * period, rel=0.15)
