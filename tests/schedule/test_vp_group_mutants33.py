"""Mutants of the thirty-third session's changed lines (plan.vp_group) that the first tests let through: the
overlapped sends' fill and drain by hand, what pipeline_time_s hands that formula, a split Megatron-Core refuses
with unequal stages, and the played program's refusal of a group Megatron-Core refuses."""
from __future__ import annotations

import pytest

import narrowpath.schedule.pipeline as P
from narrowpath.errors import SimulationError


def test_fill_and_drain_by_hand():
    """pp 4, vpp 3, message 0.1 s, groups of 6, a last group of 5. Fill: (p − 1)·0.1 = 0.3 plus, for the wraps after
    chunks 0 and 1, max(0, 4·0.1 − (6 − 4)·F_c) with F = 0.1, 0.3: 0.2 + 0 = 0.2. Drain: 0.3 plus, for the wraps
    after chunks 2 and 1, max(0, 0.4 − (5 − 4)·B_c) with B_1 = 0.1, B_2 = 0.3: 0.3 + 0.1 = 0.4. Total 1.2 s.
    Without chunk times (no slack anywhere): 0.6 + 2·0.4 + 2·0.4 = 2.2 s; the default groups 2·(4·3 − 1)·0.1."""
    assert P.fill_drain_latency_s(4, 3, 0.1, 6, 5, [0.1, 0.3, 0.5], [0.2, 0.1, 0.3]) == pytest.approx(1.2)
    assert P.fill_drain_latency_s(4, 3, 0.1, 6, 5) == pytest.approx(2.2)
    assert P.fill_drain_latency_s(4, 3, 0.1) == pytest.approx(2.2)
    assert P.fill_drain_latency_s(4, 3, 0.1, 6, 6, [1.0] * 3, [1.0] * 3) == pytest.approx(0.6)
    assert P.fill_drain_latency_s(1, 3, 0.1, 6, 6) == 0.0


def test_pipeline_time_hands_the_fill_and_drain_stage_0s_forwards_and_the_last_stages_backwards(monkeypatch):
    seen = []

    def spy(*a):
        seen.append(a)
        return 0.0
    monkeypatch.setattr(P, "fill_drain_latency_s", spy)
    T, F = [3.0, 4.0, 5.0, 6.0], [0.8, 1.2, 1.5, 2.5]
    fw = [[0.25, 0.75], [0.5, 0.5], [0.5, 0.5], [0.6, 0.4]]
    bw = [[0.5, 0.5], [0.5, 0.5], [0.5, 0.5], [0.3, 0.7]]
    P.pipeline_time_s(T, 22, 2, fwd_times_s=F, chunk_weights=fw, bwd_chunk_weights=bw, overlapped_send_s=0.01,
                      group=6)
    p, v, msg, g, last, fwd, bwd = seen[-1]
    assert (p, v, msg, g, last) == (4, 2, 0.01, 6, 4)  # 22 = 3·6 + 4
    assert fwd == pytest.approx([0.2, 0.6]) and bwd == pytest.approx([3.5 * 0.3, 3.5 * 0.7])
    P.pipeline_time_s([3.0, 6.0, 6.0, 9.0], 24, 2, overlapped_send_s=0.01, group=8)  # forwards a third of a stage
    assert seen[-1][4] == 8 and seen[-1][5] == pytest.approx([0.5, 0.5]) and seen[-1][6] == pytest.approx([3.0, 3.0])
    P.pipeline_time_s([3.0] * 4, 24, 2, fwd_times_s=[1.0] * 4, chunk_weights=[[0.2, 0.8]] * 4,
                      overlapped_send_s=0.01, group=8)  # the backward takes the forward's chunk shares
    assert seen[-1][6] == pytest.approx([0.4, 1.6])


def test_a_split_megatron_core_refuses_keeps_narayanans_form_for_unequal_stages():
    """22 micro-batches on pp 4 (default groups): Megatron-Core refuses it, the closed form prices it by
    Narayanan's m·T_max + (p − 1)·T_mean / v instead of playing a program that cannot run."""
    T = [3.0, 4.0, 5.0, 6.0]
    assert P.pipeline_time_s(T, 22, 2) == pytest.approx(22 * 6.0 + 3 * 4.5 / 2)
    assert P.pipeline_time_s(T, 22, 2, group=7) == pytest.approx(22 * 6.0 + 3 * 4.5 / 2)  # a last group of 1
    uneven = [[0.3, 0.7]] * 4  # unequal chunks would otherwise be played
    assert P.pipeline_time_s(T, 22, 2, chunk_weights=uneven) == pytest.approx(22 * 6.0 + 3 * 4.5 / 2)


def test_the_played_program_refuses_a_group_megatron_core_refuses():
    f, b = [[1.0, 1.0]] * 4, [[2.0, 2.0]] * 4
    for g in (3, 7, 30):  # below pp, a last group of 1 (22 = 3·7 + 1), above m
        with pytest.raises(SimulationError):
            P.played_time_s("interleaved", f, b, 22 if g == 7 else 24, "async", g)
