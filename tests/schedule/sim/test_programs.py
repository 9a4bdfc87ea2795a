"""Pipeline schedules played exactly: deadlock-free, every pass once, and equal to the published closed forms
where those are exact (equal stages); ZB-H1's bubble is Qi et al.'s (p − 1)(F + B − W)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from narrowpath.errors import SimulationError
from narrowpath.schedule.pipeline import interleaved_time_s, one_f_one_b_time_s, pipeline_time_s
from narrowpath.schedule.sim.engine import StepEngine
from narrowpath.schedule.sim.layout import Layout
from narrowpath.schedule.sim.programs import Pass, build_programs
from narrowpath.schedule.sim.work import PassWork, SimWork, StageProgramWork


def play(p, v, m, fwd, bwd, schedule, wgt=None, p2p_s=0.0, mode=None):
    """Makespan of a synthetic pipeline: fwd/bwd (p, v) per-pass seconds; wgt: W part of bwd (zero-bubble)."""
    stages = []
    for i in range(p):
        passes = {}
        for c in range(v):
            passes[("F", c)] = PassWork("F", c, fwd[i][c], 0, (), (1.0,))
            if schedule == "zb-h1":
                passes[("B", c)] = PassWork("B", c, bwd[i][c] - wgt[i][c], 0, (), (1.0,))
                passes[("W", c)] = PassWork("W", c, wgt[i][c], 0, (), (1.0,))
            else:
                passes[("BW", c)] = PassWork("BW", c, bwd[i][c], 0, (), (1.0,))
        stages.append(StageProgramWork(i, passes, (1,) * v, (), (1.0 / v,) * v, 0.0))
    work = SimWork(tuple(stages), v, m, {"F": (p2p_s, 0.0, ()), "B": (p2p_s, 0.0, ())}, 0.0, 0, 0.0)
    lay = Layout(p, 1, 1, np.zeros((p, 1, 1), dtype=int), {}, True)
    mode = mode or {"zb-h1": "eager", "interleaved": "async"}.get(schedule, "rendezvous")
    eng = StepEngine(work, build_programs(schedule, p, v, m, mode == "async"), lay, 1, None, p2p_mode=mode)
    states, _ = eng.run_pipeline(np.random.default_rng(0), 0.0)
    return max(float(s.clock.max()) for s in states)


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "zb-h1"])
def test_every_pass_runs_once_and_messages_pair_up(schedule):
    p, v, m = 4, (2 if schedule == "interleaved" else 1), 8
    progs = build_programs(schedule, p, v, m)
    sends, recvs = Counter(), Counter()
    for prog in progs:
        passes = [x for x in prog.items if isinstance(x, Pass)]
        kinds = ("F", "B", "W") if schedule == "zb-h1" else ("F", "BW")
        assert Counter((x.kind, x.chunk, x.mb) for x in passes) == Counter(
            (k, c, mb) for k in kinds for c in range(v) for mb in range(m))
        for x in prog.items:
            for mid, is_send in getattr(x, "messages", ()):
                (sends if is_send else recvs)[mid] += 1
    assert sends == recvs and set(sends.values()) == {1}


@pytest.mark.parametrize("p,v,m", [(2, 1, 1), (4, 1, 3), (4, 1, 8), (8, 1, 16), (4, 2, 8), (4, 4, 8), (8, 2, 16),
                                   (16, 7, 16), (4, 3, 12)])
def test_equal_stages_match_narayanan(p, v, m):
    """(m + p − 1)·T for 1F1B, m·T + (p − 1)·T/v interleaved (Narayanan et al. SC'21 §2.2), to rounding."""
    f, b = 1.0 / v, 2.0 / v
    t = play(p, v, m, [[f] * v] * p, [[b] * v] * p, "interleaved" if v > 1 else "1f1b")
    assert t == pytest.approx(m * 3.0 + (p - 1) * 3.0 / v, rel=1e-12)


@pytest.mark.parametrize("p,m", [(2, 2), (4, 8), (8, 16)])
def test_zero_bubble_h1_bubble(p, m):
    """ZB-H1 with F = B = W = 1 (B input gradients, W weight gradients): bubble (p − 1)(F + B − W) against
    1F1B's (p − 1)(F + B + W) (Qi et al. ICLR 2024, Table 1), same number of passes in flight."""
    ones = [[1.0]] * p
    zb = play(p, 1, m, ones, [[2.0]] * p, "zb-h1", wgt=ones)
    one_f = play(p, 1, m, ones, [[2.0]] * p, "1f1b")
    assert zb - 3 * m == pytest.approx((p - 1) * 1.0)
    assert one_f - 3 * m == pytest.approx((p - 1) * 3.0)


def test_unequal_stages_closed_form_follows_the_schedule():
    """pipeline.py's 1F1B path form equals the played schedule when the first stage is lighter and the last heavier
    than equal middle stages (a cheap embedding, the output layer); other imbalance is played, so it is exact
    too; the path form alone stays within 6 % for any imbalance of the ends (the simulator is the reference)."""
    rng = np.random.default_rng(7)
    for _ in range(40):
        p, m = int(rng.integers(2, 9)), int(rng.integers(1, 24))
        ratio = rng.uniform(1.8, 3.2)
        s = np.ones(p)
        s[0] *= rng.uniform(0.6, 1.0)
        s[-1] *= rng.uniform(1.0, 1.8)
        fwd, bwd = list(s), list(ratio * s)
        played = play(p, 1, m, [[x] for x in fwd], [[x] for x in bwd], "1f1b")
        assert one_f_one_b_time_s(fwd, bwd, m) == pytest.approx(played, rel=1e-9)
        s[0], s[-1] = rng.uniform(0.6, 1.6), rng.uniform(0.6, 1.6)
        fwd, bwd = list(s), list(ratio * s)
        played = play(p, 1, m, [[x] for x in fwd], [[x] for x in bwd], "1f1b")
        assert one_f_one_b_time_s(fwd, bwd, m) == pytest.approx(played, rel=0.06)
        assert pipeline_time_s([f + b for f, b in zip(fwd, bwd)], m, fwd_times_s=fwd) == \
            pytest.approx(played, rel=1e-9 if m <= 4 * p else 0.01)
        s[p // 2] *= 1.3  # an uneven layer split: unequal middle stages
        fwd, bwd = list(s), list(ratio * s)
        played = play(p, 1, m, [[x] for x in fwd], [[x] for x in bwd], "1f1b")
        totals = [f + b for f, b in zip(fwd, bwd)]  # played exactly for 4p micro-batches, then at the busiest pace
        assert pipeline_time_s(totals, m, fwd_times_s=fwd) == pytest.approx(played, rel=1e-9 if m <= 4 * p else 0.01)


def test_interleaved_closed_form_is_the_schedule_with_unequal_chunks():
    """Unequal chunks (Llama 3 405B's split: two-layer first chunks on the middle stages) cost more than the busiest
    stage's work: pipeline.py evaluates Megatron's program, extrapolating past 3p micro-batches, equal to the
    simulator."""
    p, v = 8, 3
    for m in (8, 16, 40):
        fwd = [[2.0 if (c == 0 and 0 < i < p - 1) else 1.0 for c in range(v)] for i in range(p)]
        bwd = [[3 * x for x in row] for row in fwd]
        played = play(p, v, m, fwd, bwd, "interleaved")
        assert interleaved_time_s(fwd, bwd, m) == pytest.approx(played, rel=1e-9)
        totals = [4 * sum(r) for r in fwd]
        assert played > m * max(totals) + (p - 1) * sum(totals) / p / v  # the old form's optimism
        weights = [[x / sum(r) for x in r] for r in fwd]
        assert pipeline_time_s(totals, m, v, fwd_times_s=[sum(r) for r in fwd], chunk_weights=weights) == \
            pytest.approx(played, rel=1e-9)


def test_interleaving_needs_divisible_micro_batches():
    with pytest.raises(SimulationError, match="not divisible"):
        build_programs("interleaved", 4, 2, 6)
    with pytest.raises(SimulationError, match="vpp"):
        build_programs("zb-h1", 4, 2, 8)


def test_pipeline_messages_cost_what_the_closed_form_charges():
    """With a pipeline message time c, equal stages still follow the closed form whose stage time includes the
    exchanges (2c per micro-batch in the middle, c at the ends) to within the fill's single messages."""
    p, m, c = 4, 8, 0.05
    t = play(p, 1, m, [[1.0]] * p, [[2.0]] * p, "1f1b", p2p_s=c)
    totals = [3 + c] + [3 + 2 * c] * (p - 2) + [3 + c]
    assert t == pytest.approx(pipeline_time_s(totals, m), rel=0.01)
