"""Pipeline time forms against Narayanan et al. (SC'21) by hand, on every path played_time_s and pipeline_time_s
take (the compiled graphs, the program playback, the closed interleaved form for unequal stages)."""
from __future__ import annotations

import pytest

from narrowpath.schedule.pipeline import pipeline_time_s, played_time_s
from narrowpath.schedule.step import PAIR_PARTNERS, pass_pair_hidden_s


@pytest.mark.parametrize("schedule,mode", [("1f1b", "rendezvous"), ("1f1b", "async"),
                                           ("interleaved", "async"), ("interleaved", "rendezvous")])
def test_played_equal_stages_match_narayanan(schedule, mode):
    """Equal stages, forward F, backward B per micro-batch, p stages, m micro-batches, v chunks of F/v, B/v:
    (m + (p − 1)/v)·(F + B). p 2, m 4, F 1, B 2: v 1 → 5·3 = 15; v 2 → (4 + 1/2)·3 = 13.5."""
    v = 1 if schedule == "1f1b" else 2
    fwd = [[1.0 / v] * v for _ in range(2)]
    bwd = [[2.0 / v] * v for _ in range(2)]
    assert played_time_s(schedule, fwd, bwd, 4, mode=mode) == pytest.approx(15.0 if v == 1 else 13.5)


def test_played_backward_time_counts():
    """Doubling the backward passes of equal stages adds (m + p − 1)·ΔB: p 2, m 4, F 1, B 2 → 4: 15 + 5·2 = 25."""
    assert played_time_s("1f1b", [[1.0], [1.0]], [[4.0], [4.0]], 4) == pytest.approx(25.0)


def test_interleaved_unequal_stages_closed_form():
    """Unequal stages with equal chunks, interleaved (v 2), m divisible by p: Narayanan's form with the busiest stage
    in the steady state and the mean stage in the fill, m·t_max + (p − 1)·t_mean/v.
    Stages 1, 2, 1, 2 s, m 8: 8·2 + 3·1.5/2 = 18.25 s. More chunks shrink only the fill: v 4 → 16 + 3·1.5/4."""
    t = [1.0, 2.0, 1.0, 2.0]
    assert pipeline_time_s(t, 8, 2) == pytest.approx(18.25)
    assert pipeline_time_s(t, 8, 4) == pytest.approx(16.0 + 4.5 / 4)
    for v in (2, 4):  # never below the busiest stage's own work
        assert pipeline_time_s(t, 8, v) >= 8 * max(t)


@pytest.mark.parametrize("phase", list(PAIR_PARTNERS))
def test_pass_pair_hides_behind_the_listed_partners_only(phase):
    """A pass-pair transfer of one phase alone, every pass paired: it hides min(traffic, matrix work its partner
    phases leave) (PAIR_PARTNERS: a forward's behind the backward and recompute, a backward's or recompute's behind
    the forward), and work left in a phase that is not its partner changes nothing."""
    traffic = {ph: (5.0 if ph == phase else 0.0) for ph in PAIR_PARTNERS}
    left = {ph: 1.0 for ph in PAIR_PARTNERS}
    partners = PAIR_PARTNERS[phase]
    assert set(partners) <= set(PAIR_PARTNERS) and phase not in partners
    h = pass_pair_hidden_s(traffic, left, 1.0)
    assert h[phase] == pytest.approx(min(5.0, len(partners) * 1.0))
    for other in set(PAIR_PARTNERS) - set(partners):
        more = dict(left, **{other: 100.0})
        assert pass_pair_hidden_s(traffic, more, 1.0)[phase] == pytest.approx(h[phase])
