"""DualPipeV (DualPipe cut in half along its V; deepseek-ai/DualPipe `DualPipeV`, PyTorch `ScheduleDualPipeV`): the
program pass for pass against PyTorch's own order, its messages, its legality and its play."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.pipelining.schedules import ScheduleDualPipeV, _ComputationType

from narrowpath.errors import SimulationError
from narrowpath.schedule.sim.playback import play
from narrowpath.schedule.sim.programs import Exchange, Pass, build_programs, order_dualpipev

_KIND = {_ComputationType.FORWARD: "F", _ComputationType.FULL_BACKWARD: "BW",
         _ComputationType.BACKWARD_INPUT: "B", _ComputationType.BACKWARD_WEIGHT: "W"}


def _torch_groups(p: int, m: int, rank: int) -> list[list[tuple[str, int, int]]]:
    """PyTorch's DualPipeV order for one rank as (kind, chunk, micro-batch) groups, an overlapped F&B as a group of
    two; its stage indices mapped to chunks (stage rank → 0, stage 2p − 1 − rank → 1: the V)."""
    sched = object.__new__(ScheduleDualPipeV)  # the order is a pure function of these two attributes
    sched.pp_group_size, sched._n_microbatches = p, m
    chunk = {rank: 0, 2 * p - 1 - rank: 1}
    out = []
    for a in sched._calculate_single_rank_operations(rank):
        subs = a.sub_actions if a.computation_type == _ComputationType.OVERLAP_F_B else (a,)
        out.append([(_KIND[s.computation_type], chunk[s.stage_index], s.microbatch_index) for s in subs])
    return out


def _ours(p: int, m: int, rank: int) -> list[list[tuple[str, int, int]]]:
    return [[(x.kind, x.chunk, x.mb) for x in grp] for grp in order_dualpipev(p, m, rank)]


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 9), st.integers(0, 14))
def test_the_order_is_pytorchs_pass_for_pass(p, extra):
    """Every rank's groups — kinds, chunks, micro-batches and which forward runs merged with which backward — equal
    PyTorch 2.13's ScheduleDualPipeV order (itself DeepSeek's DualPipeV.step), for any pp and m >= 2·pp."""
    m = 2 * p + extra
    for rank in range(p):
        assert _ours(p, m, rank) == _torch_groups(p, m, rank)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 8), st.integers(0, 10))
def test_every_micro_batch_runs_both_chunks_once_in_a_legal_order(p, extra):
    """Each rank runs, per chunk, m forwards and for each micro-batch one whole backward or an input-gradient
    backward followed later by its weight gradient, each after its forward; on the turning rank p − 1 a
    micro-batch's chunk-1 forward follows its chunk-0 forward and its chunk-0 backward follows its chunk-1 backward
    (the local hand-off that needs no message)."""
    m = 2 * p + extra
    for i in range(p):
        seq = [x for grp in order_dualpipev(p, m, i) for x in grp]
        at = {(x.kind, x.chunk, x.mb): k for k, x in enumerate(seq)}
        assert len(at) == len(seq)
        for c in (0, 1):
            for mb in range(m):
                whole, split = ("BW", c, mb) in at, ("B", c, mb) in at
                assert whole != split
                back = at[("BW" if whole else "B", c, mb)]
                assert back > at[("F", c, mb)]
                if split:
                    assert at[("W", c, mb)] > back
        if i == p - 1:
            for mb in range(m):
                assert at[("F", 1, mb)] > at[("F", 0, mb)]
                b1 = at.get(("BW", 1, mb), at.get(("B", 1, mb)))
                b0 = at.get(("BW", 0, mb), at.get(("B", 0, mb)))
                assert b0 > b1


def test_messages_go_up_through_chunk_0_and_down_through_chunk_1():
    """Chunk 0's forward on rank i sends to i + 1 (none from the turning rank p − 1), chunk 1's to i − 1 (none from
    rank 0, where the loss is); gradients the other way; every send has its matching receive."""
    p, m = 4, 8
    sends, recvs = set(), set()
    for prog in build_programs("dualpipev", p, 2, m):
        for it in prog.items:
            if isinstance(it, Exchange):
                for mid, is_send in it.messages:
                    (sends if is_send else recvs).add(mid)
    assert sends == recvs
    for kind, src, chunk, mb, dst in sends:
        up = (chunk == 0) == (kind == "F")
        assert dst == src + (1 if up else -1)
    fwd0 = {(s, d) for k, s, c, _, d in sends if k == "F" and c == 0}
    fwd1 = {(s, d) for k, s, c, _, d in sends if k == "F" and c == 1}
    assert fwd0 == {(0, 1), (1, 2), (2, 3)} and fwd1 == {(3, 2), (2, 1), (1, 0)}
    assert len(sends) == 2 * 2 * (p - 1) * m  # two directions of data, two chunks, p − 1 links, m micro-batches


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 7), st.integers(0, 9), st.floats(0.0, 0.5))
def test_it_plays_to_the_end_and_no_faster_than_the_busiest_rank(p, extra, msg_s):
    """Played with unequal chunk times and messages of any length it does not deadlock, and it takes at least the
    busiest rank's work (m forwards and m backwards of each of its chunks)."""
    m = 2 * p + extra
    dur = {}
    work = []
    for i in range(p):
        for c in (0, 1):
            f, b, w = 1.0 + 0.2 * i + 0.1 * c, 2.0 + 0.3 * c, 0.7
            dur.update({(i, "F", c): f, (i, "BW", c): b, (i, "B", c): b - w, (i, "W", c): w})
        work.append(m * sum(dur[(i, "F", c)] + dur[(i, "BW", c)] for c in (0, 1)))
    ends = play(build_programs("dualpipev", p, 2, m), dur, {"F": msg_s, "B": msg_s}, mode="eager").ends_s
    assert max(ends) >= max(work) - 1e-9


def test_its_bubble_is_smaller_than_1f1b_on_the_same_ranks():
    """Equal chunks (F = 1, whole B = 3 of which W = 1): a DualPipeV step exceeds a rank's work (m micro-batches of
    two chunks) by less than 1F1B's bubble on the same p ranks with both chunks as one stage, (p − 1)(F + B) at the
    stage's time 2·(1 + 3) (Narayanan et al. SC'21 §2.2.1); and it is, within one forward, DualPipe's Table-2 bubble
    (PP/2 − 1)(F&B + B − 3W) for the PP = 2p stages of the V, F&B = F + B (DeepSeek-V3 report; hand values: 4, 12 and
    28 for p = 2, 4, 8; played: 3, 11, 27 — the report's form is an estimate, not the played program)."""
    for p in (2, 4, 8):
        m = 4 * p
        dur = {(i, k, c): {"F": 1.0, "BW": 3.0, "B": 2.0, "W": 1.0}[k]
               for i in range(p) for k in ("F", "BW", "B", "W") for c in (0, 1)}
        t = max(play(build_programs("dualpipev", p, 2, m), dur, {"F": 0.0, "B": 0.0}, mode="eager").ends_s)
        work = m * 2 * (1.0 + 3.0)
        bubble_1f1b = (p - 1) * 2 * (1.0 + 3.0)
        assert work <= t < work + bubble_1f1b
        assert abs((t - work) - (p - 1) * ((1.0 + 3.0) + 3.0 - 3 * 1.0)) <= 1.0


def test_it_refuses_too_few_micro_batches_or_one_chunk():
    with pytest.raises(SimulationError, match="2·pp = 8"):
        build_programs("dualpipev", 4, 2, 7)
    with pytest.raises(SimulationError, match="vpp=1"):
        build_programs("dualpipev", 4, 1, 8)
    with pytest.raises(SimulationError, match="pp >= 2"):
        build_programs("dualpipev", 1, 2, 8)

