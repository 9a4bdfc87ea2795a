"""Megatron-Core's aligned launch of the overlapped gradient sync (plan.align_grad_reduce, its default and
Megatron-Bridge's / NeMo's): which pass launches which chunk's buckets on which rank (schedule.sim.programs.
sync_launches, checked against the schedules' own rule by hand), the closed form's whole-chunk exposure
(schedule.chunks.chunked_sync_exposed_s) by hand and as a property, and the closed form against the event
simulator with the aligned launch."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from narrowpath.catalog import load_scenario
from narrowpath.catalog.resolve import plan_with_stack_defaults
from narrowpath.schedule.chunks import aligned_grad_sync, chunked_sync_exposed_s
from narrowpath.schedule.sim import simulate
from narrowpath.schedule.sim.programs import build_programs, completing_passes, sync_launches
from narrowpath.schedule.step import predict
from narrowpath.spec.plan import Plan


def test_interleaved_ranks_launch_a_chunk_rank_many_backwards_after_its_last():
    """pp 2 × vpp 2, 4 micro-batches. Megatron-Core's table takes micro-batches in groups of pp per chunk, and the
    backwards run the chunks in reverse: virtual backward ids 0-7 are (chunk, micro-batch) (1,0) (1,1) (0,0) (0,1)
    (1,2) (1,3) (0,2) (0,3). Chunk 1's last backward is id 5, chunk 0's id 7. backward_step_helper_postprocess
    launches chunk c on rank r after id (its last) + r: rank 0 after ids 5 and 7 (no streaming: the hooks are off),
    rank 1 chunk 1 after id 6 = (0, 2), and chunk 0 (7 + 1 is past the end) once the program is done."""
    progs = build_programs("interleaved", 2, 2, 4)
    got = sync_launches(progs, aligned=True)
    assert got == {(0, "BW", 1, 3): (1, False), (0, "BW", 0, 3): (0, False), (1, "BW", 0, 2): (1, False)}


def test_1f1b_rank_0_streams_and_the_others_launch_after_their_cool_down():
    """forward_backward_pipelining_without_interleaving enables the hooks for the last backward only on rank 0
    ("Other pipeline stages do grad reduction during pipeline bubble"): pp 3, 6 micro-batches."""
    progs = build_programs("1f1b", 3, 1, 6)
    assert sync_launches(progs, aligned=True) == {(0, "BW", 0, 5): (0, True)}


def test_unaligned_launches_are_the_completing_passes_streaming():
    """PyTorch DDP's hooks (--no-align-grad-reduce): every chunk's completing pass releases its buckets as it runs."""
    progs = build_programs("interleaved", 4, 3, 8)
    done = completing_passes(progs)
    got = sync_launches(progs, aligned=False)
    assert set(got) == done and len(done) == 4 * 3
    assert all(v == (k[2], True) for k, v in got.items())


def test_aligned_only_on_megatrons_pipelined_schedules_with_an_overlapped_sync():
    base = Plan(pp=4, vpp=2, dp=2, mbs=1, gbs=16, dp_overlap=True, align_grad_reduce=True)
    assert aligned_grad_sync(base, "interleaved") and aligned_grad_sync(base, base.schedule)
    assert aligned_grad_sync(base, "1f1b")
    for sched in ("zb-h1", "dualpipe", "dualpipev"):
        assert not aligned_grad_sync(base, sched)
    assert not aligned_grad_sync(dataclasses.replace(base, dp_overlap=False), "interleaved")
    assert not aligned_grad_sync(dataclasses.replace(base, align_grad_reduce=False), "interleaved")
    assert not aligned_grad_sync(Plan(pp=1, dp=8, mbs=1, gbs=16, dp_overlap=True, align_grad_reduce=True), "1f1b")


def test_whole_chunks_expose_what_their_last_backward_hid():
    """10 s of sync, two chunks of 5 s in 100 buckets each, last backwards 2 s each, pp 2, no slowdown. Streaming:
    chunk 0 (launched last) hides 2 s behind its last backward → 3 s; chunk 1 finishes 5 + 3 = 8 s after its last
    backward, which ended pp · 2 = 4 s before the stage's end → 4 s; the most is 4. Whole: chunk 0 is 5 s after
    the end; chunk 1 starts at its backward's end, so 5 + 5 − 4 = 6 s; the most is 6."""
    args = (10.0, 1e9, 5e6, [0.5, 0.5], [2.0, 2.0], 2, 0.0)
    assert chunked_sync_exposed_s(*args) == pytest.approx(4.0)
    assert chunked_sync_exposed_s(*args, whole=True) == pytest.approx(6.0)


@settings(max_examples=200, deadline=None)
@given(total=st.floats(0.0, 50.0), shares=st.lists(st.floats(0.01, 1.0), min_size=1, max_size=6),
       bwd=st.floats(0.0, 5.0), pp=st.integers(1, 16), buckets=st.floats(1.0, 500.0))
def test_launching_whole_never_hides_more(total, shares, bwd, pp, buckets):
    """A chunk launched once its last backward is done cannot finish before one that streamed out during it, and
    nothing can expose more than the whole sync (no slowdown: exposure only)."""
    s = sum(shares)
    shares = [x / s for x in shares]
    b = [bwd] * len(shares)
    args = (total, buckets * 1e6, 1e6, shares, b, pp, 0.0)
    streamed, whole = chunked_sync_exposed_s(*args), chunked_sync_exposed_s(*args, whole=True)
    assert streamed <= whole + 1e-9
    assert whole <= total + 1e-9


@pytest.mark.parametrize("name,vpp", [("gpt3-175b-a100-1024", 2), ("llama3-405b-h100-16k", 7),
                                      ("llama3-70b-h100-256", 1)])
def test_closed_form_follows_the_simulator_with_the_aligned_launch(name, vpp):
    """The event simulator plays each rank's launches (programs.sync_launches); the closed form prices rank 0's
    whole chunks and, under 1F1B, rank 0's streamed sync (the other ranks' launches after their cool-down fall in
    the slack of the backwards still to run below them). Within 1 %, and aligned costs at least as much."""
    scn = load_scenario(name)
    out = {}
    for align in (False, True):
        s = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, dp_overlap=True, vpp=vpp,
                                                              align_grad_reduce=align))
        pred = predict(s)
        sim = simulate(s, steps=1).noise_free_step_time_s
        assert pred.step_time_s == pytest.approx(sim, rel=0.01), (name, align)
        out[align] = pred.step_time_s
    assert out[True] >= out[False] * (1 - 1e-12)
    if vpp > 1:
        assert out[True] > out[False]  # rank 0's last chunk can no longer hide behind its last backward


def test_megatron_stacks_launch_aligned_and_torchtitan_does_not():
    """Stack defaults (catalog/stacks.yaml), filled only where the file leaves the knob out."""
    mb = plan_with_stack_defaults({"pp": 2, "dp": 4, "mbs": 1, "gbs": 8, "framework": "Megatron-Bridge 25.11"})[0]
    assert mb.align_grad_reduce and mb.dp_overlap
    nemo = plan_with_stack_defaults({"pp": 2, "dp": 4, "mbs": 1, "gbs": 8, "framework": "NeMo 25.04"})[0]
    assert nemo.align_grad_reduce
    given_off = plan_with_stack_defaults({"pp": 2, "dp": 4, "mbs": 1, "gbs": 8, "align_grad_reduce": False,
                                          "framework": "Megatron-Bridge 25.11"})[0]
    assert not given_off.align_grad_reduce
    tt = plan_with_stack_defaults({"pp": 2, "dp": 4, "mbs": 1, "gbs": 8, "framework": "torchtitan"})[0]
    assert not tt.align_grad_reduce
