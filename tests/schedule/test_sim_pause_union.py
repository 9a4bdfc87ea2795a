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


def test_pieces_that_wrap_the_period_and_runs_that_end_as_a_pause_begins():
    """Phases 0 and 0.95 with 0.1 s pauses: the second runs to 1.05 and overlaps the first's [1.0, 1.1) — the union
    is 0.15 s a period (the wrap gap trimmed). A pause [0.95, 1.05): from 1.05 with 0.9 s of work the run ends at
    1.95, as the next pause begins (rounding had put it after that pause: 2.05; fifty-sixth session's review of its
    own change), and with 1.8 s at 2.95."""
    assert pause_pattern(np.array([[0.0, 0.95]]), 1.0, 0.1)[1].tolist() == [[0.1, pytest.approx(0.05)]]
    wrap = pause_pattern(np.array([[0.95]]), 1.0, 0.1)
    assert finish_time(np.array([1.05, 1.05]), np.array([0.9, 1.8]), wrap, 1.0) == pytest.approx([1.95, 2.95])
    both = pause_pattern(np.array([[0.95, 0.3]]), 1.0, 0.1)
    assert finish_time(np.array([0.9]), np.array([0.3]), both, 1.0) == pytest.approx([1.3])


def _kinds(*kinds):
    """A stand-in for Perturbation with one stage and one unit: (phases, period, pause) per pause kind."""
    from types import SimpleNamespace
    phases = [(SimpleNamespace(period_s=T), pause_pattern(np.array([[ph]]), T, d), i)
              for i, (ph, T, d) in enumerate(kinds)]
    return SimpleNamespace(phases=[(it, tuple(a[None] for a in pat), ci) for it, pat, ci in phases])


def test_several_pause_kinds_count_each_others_pauses_in_the_delay():
    """Kind A pauses [1.0, 1.5) every 10 s, kind B [0.9, 1.0). From 0 with 0.95 s of work the run gets 0.9 s, waits
    through B then A until 1.5, and ends at 1.55 — applied one kind after the other it ended at 1.05, A's pause
    inside B's delay never counted (fifty-sixth session's review). Each kind's share: B 0.1 s, A 0.5 s."""
    from narrowpath.schedule.sim.perturb import Perturbation
    fake = _kinds((1.0, 10.0, 0.5), (0.9, 10.0, 0.1))
    got = Perturbation.paused_end(fake, 0, np.array([0.0]), np.array([0.95]))
    assert [ci for ci, _ in got] == [0, 1]
    assert got[0][1] == pytest.approx([0.5]) and got[1][1] == pytest.approx([0.1])


def test_several_kinds_end_where_the_work_plus_every_kinds_pauses_fill_the_run():
    """Random kinds and runs: the end f satisfies f − start = work + Σ_k paused_k[start, f) (each kind's shares
    returned add up to the delay)."""
    from narrowpath.schedule.sim.perturb import Perturbation
    rng = np.random.default_rng(5)
    for _ in range(50):
        fake = _kinds(*[(rng.random() * T, T, rng.random() * 0.3 * T) for T in rng.random(3) * 2 + 0.1])
        start, work = rng.random(1) * 10, rng.random(1) * 3
        got = Perturbation.paused_end(fake, 0, start, start + work)
        delay = sum(p for _, p in got)
        end = start + work + delay
        assert all(float(p[0]) >= 0 for _, p in got)
        shares = [paused_before(end, (st[0], ln[0], per[0]), it.period_s)
                  - paused_before(start, (st[0], ln[0], per[0]), it.period_s) for it, (st, ln, per), _ in fake.phases]
        assert sum(shares) == pytest.approx(delay, abs=1e-9)


def test_members_whose_pauses_cover_the_period_are_refused(capsys):
    """Eight members pausing 0.99 s of every second at random phases leave the unit no time: one line naming the
    noise item, exit 2."""
    from narrowpath.cli.main import main
    assert main(["simulate", "llama3-8b-h100-8", "--tp", "8", "--dp", "1", "--gbs", "8", "--sp", "--noise",
                 "gc=1:0.99:random", "--steps", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "noise.gc" in err and "leave it no time to run" in err


def test_random_phases_spread_over_the_whole_period(capsys):
    """`gc=10:1:random` on a tp-8 unit: phases uniform over the 10 s period leave the unit free only where none of
    the eight members pauses, ≈ 0.9^8 of the time — a slowdown near 2.3-2.5x (Jensen over the draw); phases bunched
    at the period's start (a mutant drew them in [0, 1/period)) would pause the members together, ≈ 1.1x."""
    import json

    from narrowpath.cli.main import main
    assert main(["simulate", "llama3-8b-h100-8", "--tp", "8", "--dp", "1", "--gbs", "8", "--sp", "--noise",
                 "gc=10:1:random", "--steps", "40", "--seed", "3", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert 1.8 < d["step_time_s"]["mean"] / d["noise_free_step_time_s"] < 3.5
