"""When the overlapped gradient sync's buckets are launched (plan.grad_sync_launch): PyTorch's hooks (`hooks`),
Megatron-Core's DDP without alignment (`megatron`: buckets only on pipeline rank 0's first chunk) and with it
(`aligned`, Megatron-Core's and Megatron-Bridge's default). Which pass launches which chunk on which rank
(schedule.sim.programs.sync_launches, against the schedules' own rule by hand), the windows the simulator takes
from them, its end-of-program launch, the closed form's exposure (schedule.chunks.chunked_sync_exposed_s) by hand
and as a property, and the closed form against the simulator, uneven stages included."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from narrowpath.catalog import load_scenario
from narrowpath.catalog.resolve import plan_with_stack_defaults
from narrowpath.schedule.chunks import chunk_streams, chunked_sync_exposed_s, sync_launch_mode
from narrowpath.schedule.exposure import staged_sync_exposed_s
from narrowpath.schedule.sim import simulate
from narrowpath.schedule.sim.engine import StepEngine
from narrowpath.schedule.sim.layout import build_layout
from narrowpath.schedule.sim.playback import play
from narrowpath.schedule.sim.programs import Pass, build_programs, completing_passes, sync_launches
from narrowpath.schedule.sim.tail import grad_sync
from narrowpath.schedule.sim.work import build_sim_work
from narrowpath.schedule.step import predict
from narrowpath.spec.plan import Plan


def test_interleaved_ranks_launch_a_chunk_rank_many_backwards_after_its_last():
    """pp 2 × vpp 2, 4 micro-batches. Megatron-Core's table takes micro-batches in groups of pp per chunk, and the
    backwards run the chunks in reverse: virtual backward ids 0-7 are (chunk, micro-batch) (1,0) (1,1) (0,0) (0,1)
    (1,2) (1,3) (0,2) (0,3). Chunk 1's last backward is id 5, chunk 0's id 7. backward_step_helper_postprocess
    launches chunk c on rank r after id (its last) + r: rank 0 after ids 5 and 7 (no streaming: the hooks are off),
    rank 1 chunk 1 after id 6 = (0, 2), and chunk 0 (7 + 1 is past the end) once the program is done."""
    progs = build_programs("interleaved", 2, 2, 4)
    got = sync_launches(progs, "aligned")
    assert got == {(0, "BW", 1, 3): (1, False), (0, "BW", 0, 3): (0, False), (1, "BW", 0, 2): (1, False)}


def test_megatron_streams_only_rank_0s_first_chunk():
    """Megatron-Core's DDP without alignment: each chunk goes out after its own last backward (ids 5 and 7 above, on
    both ranks), in buckets only on rank 0's chunk 0 (no bucketing on a pipeline rank > 0 nor on a chunk > 0)."""
    progs = build_programs("interleaved", 2, 2, 4)
    assert sync_launches(progs, "megatron") == {(0, "BW", 1, 3): (1, False), (0, "BW", 0, 3): (0, True),
                                                (1, "BW", 1, 3): (1, False), (1, "BW", 0, 3): (0, False)}


def test_1f1b_rank_0_streams_and_the_others_launch_after_their_cool_down():
    """forward_backward_pipelining_without_interleaving enables the hooks for the last backward only on rank 0
    ("Other pipeline stages do grad reduction during pipeline bubble"): pp 3, 6 micro-batches."""
    progs = build_programs("1f1b", 3, 1, 6)
    assert sync_launches(progs, "aligned") == {(0, "BW", 0, 5): (0, True)}


def test_hooks_launch_at_the_completing_passes_streaming():
    """PyTorch DDP's hooks: every chunk's completing pass releases its buckets as it runs."""
    progs = build_programs("interleaved", 4, 3, 8)
    done = completing_passes(progs)
    got = sync_launches(progs, "hooks")
    assert set(got) == done and len(done) == 4 * 3
    assert all(v == (k[2], True) for k, v in got.items())


@pytest.mark.parametrize("mode", ["megatron", "aligned"])
def test_megatrons_launch_refuses_a_program_with_split_backwards(mode):
    with pytest.raises(ValueError, match="zero bubble"):
        sync_launches(build_programs("zb-h1", 4, 1, 8), mode)


def test_only_megatrons_pipelined_schedules_with_an_overlapped_sync_launch_its_way():
    base = Plan(pp=4, vpp=2, dp=2, mbs=1, gbs=16, dp_overlap=True, grad_sync_launch="aligned")
    assert sync_launch_mode(base, "interleaved") == sync_launch_mode(base, base.schedule) == "aligned"
    assert sync_launch_mode(base, "1f1b") == "aligned"
    for sched in ("zb-h1", "dualpipe", "dualpipev"):
        assert sync_launch_mode(base, sched) == "hooks"
    assert sync_launch_mode(dataclasses.replace(base, dp_overlap=False), "interleaved") == "hooks"
    assert sync_launch_mode(dataclasses.replace(base, grad_sync_launch="megatron"), "interleaved") == "megatron"
    one = Plan(pp=1, dp=8, mbs=1, gbs=16, dp_overlap=True, grad_sync_launch="aligned")
    assert sync_launch_mode(one, "1f1b") == "hooks"  # forward_backward_no_pipelining: the hooks, as ready


def test_the_played_windows_are_the_launching_passes():
    """The playback reports, per stage and chunk, the window its buckets are released over: the whole completing
    pass when they stream, the launching pass's end (a window of length 0) when they go out whole. Pass times all
    differ, so a window taken from the wrong pass or the wrong end shows."""
    progs = build_programs("interleaved", 2, 2, 4)
    pass_s = {(i, k, c): 1.0 + 0.37 * i + 0.11 * c + (0.5 if k == "BW" else 0.0)
              for i in range(2) for k in ("F", "BW") for c in range(2)}
    every = {(p.stage, x.kind, x.chunk, x.mb): ((p.stage, x.kind, x.chunk, x.mb), True)
             for p in progs for x in p.items if isinstance(x, Pass)}
    span = {k: w for st_ in play(progs, pass_s, {"F": 0.01, "B": 0.01}, launches=every).completes
            for k, w in st_.items()}  # (start, end) of every pass
    for mode in ("hooks", "megatron", "aligned"):
        launches = sync_launches(progs, mode)
        got = play(progs, pass_s, {"F": 0.01, "B": 0.01}, launches=launches).completes
        for key, (chunk, streamed) in launches.items():
            start, end = span[key]
            assert got[key[0]][chunk] == ((start, end) if streamed else (end, end)), (mode, key)
        if mode == "aligned":
            assert 0 not in got[1]  # rank 1's chunk 0: launched once its program is done


def _engine(launch: str):
    """The simulator's noise-free engine for Llama-3 70B on pp 4 × vpp 2 with light end stages (8 layers each)."""
    scn = load_scenario("llama3-70b-h100-256")
    plan = dataclasses.replace(scn.plan, pp=4, vpp=2, gbs=64, first_stage_layers=8, last_stage_layers=8,
                               dp_overlap=True, grad_sync_launch=launch)
    scn = dataclasses.replace(scn, plan=plan)
    pred = predict(scn)
    work = build_sim_work(pred, "interleaved")
    progs = build_programs("interleaved", plan.pp, work.vpp, work.num_microbatches, True)
    eng = StepEngine(work, progs, build_layout(pred.scenario, symmetric=True), plan.cp, None, p2p_mode="async")
    states, _ = eng.run_pipeline(np.random.default_rng(0), 0.0)
    return eng, states, work, plan


def test_a_chunk_launched_at_the_programs_end_starts_there():
    """Aligned, rank 1 launches its chunk 0 once its program is done: its sync cannot end before the stage's end plus
    chunk 0's share of the sync (chunk 1's went out earlier); under the hooks chunk 0 streams during its last
    backward and ends sooner."""
    ends = {}
    for launch in ("aligned", "hooks"):
        eng, states, work, plan = _engine(launch)
        st1, w = states[1], work.stages[1]
        assert eng.chunk_order[1][-1] == 0
        assert (0 in st1.last_bwd) == (launch == "hooks")
        tr = next(t for t in w.step_transfers if t.axis == "dp" and t.op in ("reduce_scatter", "all_reduce"))
        before = float(st1.clock[0])
        grad_sync(eng, 1, st1, tr, plan.bucket_bytes)
        ends[launch] = float(st1.clock[0]) - before
        if launch == "aligned":
            assert ends[launch] >= tr.cost_s * w.chunk_param_share[0] - 1e-12
    assert ends["hooks"] < ends["aligned"]


def test_exposure_by_launch_by_hand():
    """10 s of sync, chunks of 7 and 3 s in 140 and 60 buckets of 5 MB, last backwards 2 s each, pp 2, no slowdown;
    chunk 1's last backward ends pp · 2 = 4 s before the stage's. Hooks: chunk 0 hides its backward less the 2/140 s
    before its first bucket is ready → 5 + 1/70; chunk 1 hides 2 − 2/60 of its 3 s, then chunk 0's 7 follow:
    1 + 1/30 + 7 − 4 ≈ 4.03; the most is 5.014. Megatron (chunk 1 whole): 3 + 7 − 4 = 6 → 6. Aligned (both whole):
    chunk 0 alone is 7 → 7."""
    args = (10.0, 1e9, 5e6, [0.7, 0.3], [2.0, 2.0], 2, 0.0)
    assert chunked_sync_exposed_s(*args) == pytest.approx(5.0 + 1 / 70)
    assert chunked_sync_exposed_s(*args, chunk_streams("megatron", 2)) == pytest.approx(6.0)
    assert chunked_sync_exposed_s(*args, chunk_streams("aligned", 2)) == pytest.approx(7.0)
    assert chunk_streams("hooks", 2) is None


@settings(max_examples=200, deadline=None)
@given(total=st.floats(0.0, 50.0), shares=st.lists(st.floats(0.01, 1.0), min_size=1, max_size=6),
       bwd=st.floats(0.0, 5.0), pp=st.integers(1, 16), buckets=st.floats(1.0, 500.0))
def test_fewer_streaming_chunks_never_hide_more(total, shares, bwd, pp, buckets):
    """A chunk launched once its last backward is done cannot finish before one that streamed out during it:
    hooks ≤ megatron ≤ aligned, none above the whole sync (no slowdown: exposure only)."""
    s = sum(shares)
    shares = [x / s for x in shares]
    args = (total, buckets * 1e6, 1e6, shares, [bwd] * len(shares), pp, 0.0)
    e = [chunked_sync_exposed_s(*args, chunk_streams(m, len(shares))) for m in ("hooks", "megatron", "aligned")]
    assert e[0] <= e[1] + 1e-9 <= e[2] + 2e-9
    assert e[2] <= total + 1e-9


def test_staged_sync_by_hand():
    """1F1B, four stages whose own syncs would expose 3, 5, 4 and 6 s after their own last backwards of 1, 2, 2 and
    3 s. The cool-down's last backward runs stage 3 → 0, so stage s's ends 0, 1, 3 and 5 s before stage 0's: the
    step sees 3, 5 − 1 = 4, 4 − 3 = 1 and 6 − 5 = 1 past its pipeline → 4 s, bound by stage 1. A sync smaller than
    the drain below it costs nothing; stage 0's never goes below zero."""
    assert staged_sync_exposed_s([3.0, 5.0, 4.0, 6.0], [1.0, 2.0, 2.0, 3.0]) == (4.0, 1)
    assert staged_sync_exposed_s([0.5, 1.0, 1.0], [2.0, 2.0, 2.0]) == (0.5, 0)
    assert staged_sync_exposed_s([0.0, 0.5, 0.5], [2.0, 2.0, 2.0]) == (0.0, 0)


@settings(max_examples=200, deadline=None)
@given(exp=st.lists(st.floats(0.0, 20.0), min_size=1, max_size=12), bwd=st.floats(0.0, 5.0))
def test_staged_sync_lies_between_stage_0s_and_the_largest(exp, bwd):
    """No stage's sync can end before stage 0's own (it ends the pipeline), and none is charged more than it takes:
    stage 0's exposure ≤ the staged one ≤ the largest stage's, equal to it with nothing left to drain."""
    got, s = staged_sync_exposed_s(exp, [bwd] * len(exp))
    assert exp[0] <= got <= max(exp) and 0 <= s < len(exp)
    assert staged_sync_exposed_s(exp, [0.0] * len(exp))[0] == max(exp)


CASES = [("gpt3-175b-a100-1024", dict(vpp=2)), ("llama3-405b-h100-16k", dict()),
         ("llama3-70b-h100-256", dict(pp=4, vpp=1, gbs=32, first_stage_layers=8)),
         ("llama3-70b-h100-256", dict(pp=4, vpp=1, gbs=64, first_stage_layers=10, last_stage_layers=10)),
         ("llama3-70b-h100-256", dict(pp=4, vpp=1, gbs=64, first_stage_layers=16, last_stage_layers=24)),
         ("llama3-70b-h100-256", dict(pp=4, vpp=2, gbs=64, first_stage_layers=8, last_stage_layers=8))]


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_closed_form_follows_the_simulator_for_every_launch(name, kw):
    """The simulator plays each rank's launches; the closed form prices rank 0's timeline with the critical stage's
    chunks and, under 1F1B, every stage's own sync after its own last backward (Megatron-Core's DDP: rank 0's
    streaming, a later rank's whole after its cool-down, beside the backwards of the ranks below it). Uneven end
    stages were 3.8 % off before the window was rank 0's, 1.7 % (16 / 20 / 20 / 24 layers) while every stage's sync
    was sized as the largest stage's. Within 1.5 %, 1F1B within 0.3 %; the simulator's step never shrinks from hooks
    to aligned."""
    scn = load_scenario(name)
    sims = {}
    for launch in ("hooks", "megatron", "aligned"):
        s = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, dp_overlap=True, grad_sync_launch=launch,
                                                              **kw))
        sims[launch] = simulate(s, steps=1).noise_free_step_time_s
        rel = 0.003 if s.plan.vpp == 1 and s.plan.pp > 1 else 0.015
        assert predict(s).step_time_s == pytest.approx(sims[launch], rel=rel), launch
    assert sims["hooks"] <= sims["aligned"] * (1 + 1e-9)


def test_the_stacks_launch_as_their_code_does():
    """Stack defaults (catalog/stacks.yaml), filled only where the file leaves the knob out: Megatron-Bridge and
    NeMo 1 aligned, NeMo 2 Megatron-Core's DDP unaligned (it looks align_grad_reduce up on a config without it),
    torchtitan the hooks."""
    def plan(**kw):
        return plan_with_stack_defaults({"pp": 2, "dp": 4, "mbs": 1, "gbs": 8, **kw})[0]
    mb = plan(framework="Megatron-Bridge 25.11")
    assert mb.grad_sync_launch == "aligned" and mb.dp_overlap
    assert plan(framework="NeMo 24.07 (NeMo 1.0, Megatron-Core)").grad_sync_launch == "aligned"
    assert plan(framework="NeMo 25.04").grad_sync_launch == "megatron"
    assert plan(framework="Megatron-Bridge 25.11", grad_sync_launch="hooks").grad_sync_launch == "hooks"
    assert plan(framework="torchtitan").grad_sync_launch == "hooks"


def test_the_overlap_account_books_the_cool_down_apart():
    """Llama-3 70B pp 4 with 16 / 20 / 20 / 24 layers under Megatron-Core's DDP (ZeRO 0): stage 1's sync binds, and
    that stage launches it whole after its cool-down — nothing of it runs beside its own compute. The rows carry the
    step's exposure; the overlap account adds back what the backwards below stage 1 hid (the prediction's
    sync_drain_hidden_s) as hidden time that slows no compute, so hidden + exposed = total and no slowdown."""
    from narrowpath.analysis.context import build_context
    from narrowpath.analysis.overlap import build_overlap
    scn = load_scenario("llama3-70b-h100-256")
    scn = dataclasses.replace(scn, plan=dataclasses.replace(
        scn.plan, pp=4, vpp=1, gbs=64, zero_stage=0, dp_overlap=True, grad_sync_launch="megatron",
        first_stage_layers=16, last_stage_layers=24))
    pred = predict(scn)
    sync = [t for t in pred.transfers if t.phase == "step" and t.axis == "dp"]
    assert pred.sync_drain_hidden_s > 0 and sync
    assert sum(t.exposed_s for t in sync) == pytest.approx(pred.breakdown_s["exposed_dp_comm"])
    rows = {r.name: r for r in build_overlap(build_context(pred)).rows}
    for t in sync:
        r = rows[t.name]
        assert r.compute_slowdown_s == 0.0 and r.hidden_s + r.exposed_s == pytest.approx(t.total_s)
        assert r.exposed_s == pytest.approx(t.exposed_s)
    # without a pipeline nothing drains: the rows are the whole story
    flat = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, pp=1, dp=scn.plan.dp * 4,
                                                             first_stage_layers=0, last_stage_layers=0))
    assert predict(flat).sync_drain_hidden_s == 0.0


def test_a_reshaped_rack_keeps_no_segment():
    """A segment is so many trays of the home system's racks: the stated NVL72 keeps 64 GPUs, another rack size or
    tray size has none the catalog knows."""
    from narrowpath.catalog import system_for_hardware
    assert system_for_hardware("GB200", gpus_per_node=4, scale_up_gpus=72).segment_gpus == 64
    assert system_for_hardware("GB200", scale_up_gpus=144).segment_gpus == 0
    assert system_for_hardware("GB200", gpus_per_node=8, scale_up_gpus=72).segment_gpus == 0
    assert system_for_hardware("GB200", scale_up_gpus=144).job_domain(1152) == 144
