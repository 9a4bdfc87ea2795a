"""DualPipeV (DualPipe cut in half along its V; deepseek-ai/DualPipe `DualPipeV`, PyTorch `ScheduleDualPipeV`): the
program pass for pass against PyTorch's own order, its messages, its legality and its play."""
from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.pipelining.schedules import ScheduleDualPipeV, _ComputationType

from narrowpath.catalog import load_scenario
from narrowpath.cli.main import main
from narrowpath.cost.memory import in_flight_chunk_passes, in_flight_microbatches, layer_activation_bytes
from narrowpath.errors import SimulationError, SpecError
from narrowpath.schedule.pipeline import dualpipev_paired_fraction, dualpipev_time_s
from narrowpath.schedule.sim import simulate
from narrowpath.schedule.sim.playback import play
from narrowpath.schedule.sim.programs import Exchange, build_programs, order_dualpipev
from narrowpath.schedule.step import paired_fraction, predict
from narrowpath.spec.plan import Plan
from narrowpath.workload.build import build_workload
from narrowpath.workload.split import chunk_stage, stage_layer_ranges
from tests.cli.one_line import one_line_error
from tests.schedule.program_messages import posted_messages

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
    for _, mid, is_send in posted_messages(build_programs("dualpipev", p, 2, m)):
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



# --- the plan on a V: split, workload, memory, closed form, simulator, analysis and CLI -----------------------------

def _v(scn, **kw):
    """The scenario under DualPipeV (vpp 2), other plan fields as given."""
    return dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, pipeline_schedule="dualpipev", vpp=2, **kw))


def test_the_split_lays_chunks_on_a_v_with_both_ends_on_rank_0():
    """Chunk j on stage j for j < p and on 2p − 1 − j after (PyTorch's stage-to-rank style "v"): 8 layers on pp 2 →
    stage 0 holds layers 0-1 and 6-7, stage 1 layers 2-5; 10 layers on pp 2 (2 left over after 2 each on 4 chunks)
    give the extras to the chunks off rank 0, which holds the embedding and the output layer; chunk_layers are read in
    virtual-stage order."""
    assert stage_layer_ranges(8, 2, 2, v_shape=True) == ((range(0, 2), range(6, 8)), (range(2, 4), range(4, 6)))
    assert [[len(r) for r in st] for st in stage_layer_ranges(10, 2, 2, v_shape=True)] == [[2, 2], [3, 3]]
    assert [chunk_stage(j, 4, True) for j in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0]
    assert [[len(r) for r in st] for st in stage_layer_ranges(12, 3, 2, chunk_layers=(1, 2, 3, 3, 2, 1),
                                                              v_shape=True)] == [[1, 1], [2, 2], [3, 3]]


def test_rank_0_holds_the_embedding_the_output_layer_and_mtp_and_rank_p_minus_1_hands_off_locally():
    """DeepSeek-V3 (tied embeddings off, one MTP module) on pp 4 under DualPipeV: stage 0 runs the embedding, the
    logits and the MTP block, no other stage does; pipeline messages per micro-batch and direction: 1 on stage 0 (chunk
    0 out, chunk 1 in), 1 on stage 3 (the turn is local), 2 elsewhere — not overlapped (DualPipe's source waits for
    its batched isend / irecv); no tied-embedding all-reduce (both ends on one rank)."""
    s = load_scenario("deepseek-v3-h800-2048")
    scn = _v(s, pp=4, dp=512, ep=64)
    wl = build_workload(scn, "flash")
    names = [{op.name.split(".", 1)[0] for op, _ in st.ops} for st in wl.stages]
    assert {"embedding_lookup", "logits", "mtp_proj"} <= names[0]
    assert all(not ({"embedding_lookup", "logits", "mtp_proj"} & n) for n in names[1:])
    sends = [sum(c for tr, c in st.transfers if tr.axis == "pp" and tr.phase == "fwd") for st in wl.stages]
    assert sends == [1.0, 2.0, 2.0, 1.0]
    assert not any(tr.overlappable for st in wl.stages for tr, _ in st.transfers if tr.axis == "pp")


def test_a_tied_table_is_held_once_on_rank_0_and_never_synced():
    """Llama-3 8B with tied embeddings on pp 2 under DualPipeV: rank 0 holds the embedding and the output layer, one
    shared table — its parameters are the 1F1B pipeline's two ends less one table (128,256 × 4,096 / tp) — and no
    tied-embedding all-reduce runs between ranks."""
    s = load_scenario("llama3-8b-h100-8")
    tied = dataclasses.replace(s, model=dataclasses.replace(s.model, tied_embeddings=True))
    v = _v(tied, pp=2, dp=4, zero_stage=1, gbs=64)
    auto = dataclasses.replace(v, plan=dataclasses.replace(v.plan, pipeline_schedule="auto"))
    wv, wa = build_workload(v, "flash"), build_workload(auto, "flash")
    table = 128256 * 4096
    assert sum(st.params for st in wv.stages) == pytest.approx(sum(st.params for st in wa.stages) - table, rel=1e-12)
    assert not any(tr.axis == "pp_ends" for tr, _ in wv.step_transfers)
    assert any(tr.axis == "pp_ends" for tr, _ in wa.step_transfers)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 8), st.integers(0, 9))
def test_peak_in_flight_is_2p_plus_1_chunk_forwards_on_every_rank_as_the_program_holds(p, extra):
    """cost.memory.in_flight_chunk_passes on a V (2p + 1) is the program's own peak: chunk forwards run and not yet
    through their whole or weight-gradient backward, counted pass by pass on order_dualpipev."""
    m = 2 * p + extra
    for i in range(p):
        held = peak = 0
        for grp in order_dualpipev(p, m, i):
            held += sum(x.kind == "F" for x in grp)
            peak = max(peak, held)
            held -= sum(x.kind in ("BW", "W") for x in grp)
        assert peak == in_flight_chunk_passes(i, p, 2, m, v_shape=True) == 2 * p + 1


def test_each_chunk_is_held_as_often_as_the_program_holds_it():
    """Activations of a V with unequal chunks (Llama-3 70B, pp 4, chunk_layers 4, 12, 10, 14 | 6, 10, 12, 12 in
    virtual-stage order: stage s holds chunks s and 7 − s): stage s keeps (2p − s)·n0 + (s + 1)·n1 layers' worth at
    its peak (n0, n1 its chunks' layers) — stage 3: 5·14 + 4·6 = 94 layers, not (2p + 1)/2 · 20 = 90 — and stage 0
    also 2p = 8 embedding outputs (b·s·h 16-bit)."""
    s = load_scenario("llama3-70b-h100-256")
    scn = _v(s, pp=4, dp=8, gbs=64, chunk_layers=(4, 12, 10, 14, 6, 10, 12, 12))
    mem = predict(scn).memory_by_stage
    one = layer_activation_bytes(scn, "flash")  # one dense layer, selective recompute, micro-batch 1
    held = {0: 8 * 4 + 1 * 12, 1: 7 * 12 + 2 * 12, 2: 6 * 10 + 3 * 10, 3: 5 * 14 + 4 * 6}
    emb_out = 2 * 1 * 8192 * 8192 / (8 if scn.plan.sequence_parallel else 1)
    for st_, n in held.items():
        want = n * one + (8 * emb_out if st_ == 0 else 0.0)
        assert mem[st_].items["activations"] == pytest.approx(want, rel=1e-9), st_


def test_memory_is_one_model_copy_with_the_logits_on_rank_0():
    """DualPipeV keeps one copy of the parameters (the stages' weights add up to the 1F1B pipeline's) and puts the
    output layer's logits temporaries on rank 0, where DualPipe keeps two copies."""
    s = load_scenario("llama3-70b-h100-256")
    auto = dataclasses.replace(s, plan=dataclasses.replace(s.plan, pp=4, vpp=2, dp=8, gbs=64))
    v = _v(s, pp=4, dp=8, gbs=64)
    dual = dataclasses.replace(s, plan=dataclasses.replace(s.plan, pp=4, vpp=1, dp=8, gbs=64,
                                                           pipeline_schedule="dualpipe"))
    weights = {k: sum(m.items["weights"] for m in predict(x).memory_by_stage) for k, x in
               (("auto", auto), ("v", v), ("dual", dual))}
    assert weights["v"] == pytest.approx(weights["auto"], rel=1e-9)
    assert weights["dual"] == pytest.approx(2 * weights["auto"], rel=0.01)
    mem = predict(v).memory_by_stage
    assert mem[0].items["temporaries"] > mem[-1].items["temporaries"]


def test_paired_share_is_the_programs_hand_count():
    """F&B pairs on rank i: steady state 2(m − 2p + i + 1) less the last rank's first pair, plus p − i − 1 in step
    5 (module docstring of programs.py, torch's step 4 and 5 counts), over the rank's 4m forward and backward passes;
    p 2, m 5: 5 pairs on both ranks → 0.5."""
    for p, m in ((2, 5), (4, 8), (4, 13), (8, 20)):
        for i in range(p):
            pairs = 2 * (m - 2 * p + i + 1) - (i == p - 1) + (p - i - 1)
            assert dualpipev_paired_fraction(i, p, m) == pytest.approx(2 * pairs / (4 * m))
            assert paired_fraction(i, p, 2, m, "dualpipev") == dualpipev_paired_fraction(i, p, m)


def test_closed_form_is_the_played_program_and_the_simulator_agrees():
    """predict's pipeline time for DualPipeV is the program played on its chunks' times; the event simulator (ranks
    playing the same program with messages of their own length) agrees within 1 % on a dense Llama-3 70B (pp 8) and
    within 2 % on DeepSeek-V3 (pp 16, ep 64), whose rank-0 chunks hold a dense layer and an MoE layer that the closed
    form's per-layer-count chunk shares price alike."""
    s = load_scenario("llama3-70b-h100-256")
    llama = _v(s, pp=8, dp=4)
    ds = _v(load_scenario("deepseek-v3-h800-2048"))
    for scn, tol in ((llama, 0.01), (ds, 0.02)):
        r = simulate(scn, steps=1)
        assert r.schedule == "dualpipev"
        assert r.noise_free_step_time_s == pytest.approx(r.closed_form_step_time_s, rel=tol)
    for p in (2, 4):  # equal chunks F 1, B 3 (W 1): within one F of Table 2's bubble at PP = 2p, beyond the work
        m = 3 * p
        t = dualpipev_time_s([[1.0, 1.0]] * p, [[3.0, 3.0]] * p, [[1.0, 1.0]] * p, m)
        assert abs(t - m * 2 * 4.0 - (p - 1) * (4.0 + 3.0 - 3.0)) <= 1.0


def test_a_chunk_layout_that_lightens_rank_0_balances_deepseek_v3():
    """DeepSeek-V3 on 2,048 H800 under DualPipeV: the automatic split gives rank 0 a layer in each chunk beside the
    output layer and the MTP block, so rank 0 paces the pipeline; the what-if's chunk layout (1 layer in chunk 0,
    2 in each middle chunk, none beside the head) is faster, and then within 7 % of DualPipe (4.6 % before the
    deduplicated NVLink dispatch shortened both, DualPipe's exposed exchange more: 5.1 %; 6.5 % since the
    embedding's dense weight gradient is added into the FP32 main gradient every micro-batch — 11 GB of HBM traffic
    on the rank that holds it, rank 0 here, which also holds the head) with less parameter
    memory per rank (rank 1: 4 layers against DualPipe's stages 1 and 14, 4 + 3 layers: 4/7 of the expert-sharded
    layers, the same embedding-free share of the rest)."""
    s = load_scenario("deepseek-v3-h800-2048")
    auto = predict(_v(s))
    layout = (1,) + (2,) * 30 + (0,)
    even = predict(_v(s, chunk_layers=layout))
    dual = predict(s)
    assert even.step_time_s < 0.9 * auto.step_time_s
    assert even.step_time_s == pytest.approx(dual.step_time_s, rel=0.07)
    assert even.memory_by_stage[1].items["weights"] < 0.75 * dual.memory_by_stage[1].items["weights"]


def test_plan_cli_and_simulator_refuse_what_dualpipev_cannot_run(capsys):
    """vpp other than 2, an end-stage layer count, fewer than 2·pp micro-batches, the LSTM: one line naming the
    field, exit 2; a plan with pp 1 has no pipeline and nothing changes."""
    with pytest.raises(SpecError, match="plan.vpp"):
        Plan(pp=4, vpp=1, pipeline_schedule="dualpipev")
    with pytest.raises(SpecError, match="plan.first_stage_layers"):
        Plan(pp=4, vpp=2, pipeline_schedule="dualpipev", first_stage_layers=2)
    one_line_error(capsys, ["predict", "llama3-70b-h100-256", "--pipeline-schedule", "dualpipev"],
                   "plan.vpp", "needs vpp 2")
    one_line_error(capsys, ["predict", "llama3-70b-h100-256", "--pipeline-schedule", "dualpipev", "--vpp", "2",
                            "--pp", "8", "--gbs", "32"], "plan.pipeline_schedule", "2·pp = 16")
    one_line_error(capsys, ["predict", "gnmt-lstm-a100-8", "--pipeline-schedule", "dualpipev", "--vpp", "2",
                            "--pp", "2"], "plan")
    one_line_error(capsys, ["simulate", "llama3-70b-h100-256", "--schedule", "dualpipev", "--steps", "1"],
                   "plan.vpp", "needs vpp 2, got vpp 5")
    flat = Plan(pp=1, vpp=1, pipeline_schedule="dualpipev")
    assert not flat.dualpipev and flat.schedule == "1f1b" and flat.head_stage == 0


def test_console_json_analysis_and_search_say_dualpipev(capsys):
    """predict names the schedule; analyze offers Megatron's schedule and DualPipe as what-ifs of a DualPipeV plan,
    and DualPipeV as one of a 1F1B plan; the search prices its best plans under DualPipeV (JSON `best_dualpipev`)."""
    assert main(["predict", "deepseek-v3-h800-2048", "--pipeline-schedule", "dualpipev", "--vpp", "2"]) == 0
    assert "schedule=dualpipev" in capsys.readouterr().out
    assert main(["analyze", "deepseek-v3-h800-2048", "--pipeline-schedule", "dualpipev", "--vpp", "2",
                 "--json"]) == 0
    changes = {w["change"] for w in json.loads(capsys.readouterr().out)["verdict"]["what_ifs"]}
    assert {"interleave_pipeline", "dualpipe", "rebalance_chunks"} <= changes and "dualpipev" not in changes
    assert main(["analyze", "llama3-70b-h100-256", "--json"]) == 0
    assert "dualpipev" in {w["change"] for w in json.loads(capsys.readouterr().out)["verdict"]["what_ifs"]}
    args = ["search", "deepseek-v3-h800-2048", "--space", "basic", "--pp", "16", "--top", "1",
            "--pipeline-schedule", "dualpipev", "--vpp", "2", "--json"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "DualPipeV is priced for the best plans" in captured.err
    out = json.loads(captured.out)
    best = out["best_dualpipev"]
    assert best["pp"] == 16 and best["step_time_s"] > 0
    # the table's "yours" row is the Megatron twin; the plan as given is priced under its own schedule beside it
    given = predict(_v(load_scenario("deepseek-v3-h800-2048")))
    assert out["yours_dualpipev"]["step_time_s"] == pytest.approx(given.step_time_s, rel=1e-12)


def test_chunk_layers_are_checked_on_the_v():
    """chunk_layers on a V are read in virtual-stage order: 20, 20, 20, 0 | 0, 0, 0, 20 leaves stage 3 (chunks 3
    and 4) empty and is refused; 20, 20, 20, 0 | 20, 0, 0, 0 gives stage 3 its layers through chunk 4 and runs —
    the reverse of what Megatron's placement (chunk j on stage j mod pp) would say of each."""
    with pytest.raises(SpecError, match="stage 3 without a layer"):
        Plan(pp=4, vpp=2, pipeline_schedule="dualpipev", chunk_layers=(20, 20, 20, 0, 0, 0, 0, 20))
    ok = Plan(pp=4, vpp=2, pipeline_schedule="dualpipev", chunk_layers=(20, 20, 20, 0, 20, 0, 0, 0))
    assert [[len(r) for r in st] for st in stage_layer_ranges(80, 4, 2, chunk_layers=ok.chunk_layers,
                                                              v_shape=True)] == [[20, 0], [20, 0], [20, 0], [0, 20]]
    with pytest.raises(SpecError, match="stage 3 without a layer"):
        Plan(pp=4, vpp=2, chunk_layers=(20, 20, 20, 0, 20, 0, 0, 0))


def test_moving_between_megatrons_placement_and_the_v_resets_a_split(capsys):
    """A chunk layout means other stages on the other placement, so a what-if or a simulate --schedule that moves a
    plan between them lays its layers out automatically and says so: the Megatron what-if of a DualPipeV plan with a
    chunk layout prices the automatic split (as predict does), and DualPipeV is offered to a plan with an end-stage
    layer count instead of refused."""
    args = ["analyze", "llama3-70b-h100-256", "--pipeline-schedule", "dualpipev", "--vpp", "2", "--chunk-layers",
            "5,15,10,10,10,10,5,15", "--json"]
    assert main(args) == 0
    meg = next(w for w in json.loads(capsys.readouterr().out)["verdict"]["what_ifs"]
               if w["change"] == "interleave_pipeline")
    assert any("automatic" in r for r in meg["repairs"])
    assert main(["predict", "llama3-70b-h100-256", "--vpp", "2", "--json"]) == 0
    assert meg["step_s"] == pytest.approx(json.loads(capsys.readouterr().out)["step_time_s"], rel=1e-9)
    assert main(["analyze", "llama3-70b-h100-256", "--vpp", "2", "--first-stage-layers", "8", "--json"]) == 0
    v = next(w for w in json.loads(capsys.readouterr().out)["verdict"]["what_ifs"] if w["change"] == "dualpipev")
    assert v["status"] not in ("invalid", "not applicable") and v["step_s"] > 0


def test_simulate_schedule_builds_the_plan_that_runs_it(capsys):
    """`simulate --schedule dualpipev --vpp 2` on the DualPipe scenario plays DualPipeV (the plan is built as
    DualPipeV, not first as DualPipe at vpp 2, which the spec refuses)."""
    assert main(["simulate", "deepseek-v3-h800-2048", "--schedule", "dualpipev", "--vpp", "2", "--steps", "1",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schedule"] == "dualpipev"


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 6), st.integers(0, 6), st.floats(0.0, 0.4), st.sampled_from(["dualpipev", "dualpipe", "1f1b"]))
def test_a_stages_clock_is_its_passes_plus_its_exchanges(p, extra, msg_s, sched):
    """Played, a stage's end is the sum of its passes and of the wall time of its exchanges, so the reported pipeline
    wait is every stage's end less its passes — however many messages an exchange batches (they overlap in time)."""
    if sched == "dualpipe":
        p += p % 2
    m = 2 * p + 2 * extra
    v = 2 if sched == "dualpipev" else 1
    dur = {(i, k, c): 1.0 + 0.1 * i + 0.2 * c + {"F": 0.0, "BW": 1.0, "B": 0.5, "W": 0.3}[k]
           for i in range(p) for k in ("F", "BW", "B", "W") for c in (0, 1)}
    progs = build_programs(sched, p, v, m)
    pb = play(progs, dur, {"F": msg_s, "B": msg_s}, mode="eager")
    busy = [sum(dur[(prog.stage, x.kind, x.chunk)] for x in prog.items if not isinstance(x, Exchange))
            for prog in progs]
    assert pb.pp_wait_s == pytest.approx(sum(pb.ends_s) - sum(busy), abs=1e-9)


def test_the_distance_budget_reads_the_vs_mean_in_flight_depth():
    """cost.memory.in_flight_microbatches on a V: (2p + 1)/2 micro-batches of the stage on every rank (2p + 1 chunk
    forwards of half the stage each) — what the distance budget's activation traffic reads; Megatron's interleaved
    vpp 2 on the same stages would hold 2(p − s − 1) + p + 1 chunk forwards instead."""
    s = load_scenario("llama3-70b-h100-256")
    v, inter = _v(s, pp=4, dp=8, gbs=64), dataclasses.replace(s, plan=dataclasses.replace(s.plan, pp=4, vpp=2,
                                                                                           dp=8, gbs=64))
    assert [in_flight_microbatches(i, v) for i in range(4)] == [4.5] * 4
    assert [in_flight_microbatches(i, inter) for i in range(4)] == [5.5, 4.5, 3.5, 2.5]


def test_partial_recompute_and_offload_count_per_chunk_on_the_v():
    """recompute_layers / offload_layers count per chunk (Megatron's block method), so on a V with uneven chunks each
    chunk keeps min(R, n_c) layers' inputs or offloads min(R, n_c) layers: Llama-3 70B, pp 4, chunks 4, 12, 10, 14 |
    6, 10, 12, 12, full recompute of 4 layers per chunk — stage 0 holds 8 forwards of chunk 0 (4 layers, all
    recomputed: 4 inputs) and 1 of chunk 1 (12 layers: 4 inputs + 8 whole layers); offloading 4 layers per chunk
    instead keeps 8·0 + 1·8 whole layers there."""
    s = load_scenario("llama3-70b-h100-256")
    layout = (4, 12, 10, 14, 6, 10, 12, 12)
    rc = _v(s, pp=4, dp=8, gbs=64, chunk_layers=layout, recompute="full", recompute_layers=4)
    off = _v(s, pp=4, dp=8, gbs=64, chunk_layers=layout, offload_layers=4)
    whole = layer_activation_bytes(dataclasses.replace(rc, plan=dataclasses.replace(rc.plan, recompute="selective",
                                                                                    recompute_layers=0)), "flash")
    inp = layer_activation_bytes(rc, "flash")  # a fully recomputed layer keeps its input
    emb_out = 2 * 1 * 8192 * 8192 / 8  # b·s·h 16-bit, sequence parallel over tp 8
    a_rc = predict(rc).memory_by_stage[0].items["activations"]
    assert a_rc == pytest.approx(8 * (4 * inp) + 1 * (4 * inp + 8 * whole) + 8 * emb_out, rel=1e-9)
    a_off = predict(off).memory_by_stage[0].items["activations"]
    assert a_off == pytest.approx(8 * 0.0 + 1 * (8 * whole) + 8 * emb_out, rel=1e-9)


def test_simulate_refuses_to_move_a_stated_split_between_placements(capsys):
    """A chunk layout written for Megatron's placement means other stages on a V: simulate --schedule dualpipev on
    such a plan refuses in one line rather than dropping the split; a pipeline of one stage is refused first."""
    one_line_error(capsys, ["simulate", "llama3-70b-h100-256", "--vpp", "2", "--chunk-layers",
                            "5,15,10,10,10,10,5,15", "--pipeline-schedule", "auto", "--schedule", "dualpipev",
                            "--steps", "1"], "--schedule dualpipev", "layer split")
    one_line_error(capsys, ["simulate", "llama3-70b-h100-256", "--pp", "1", "--schedule", "dualpipev",
                            "--steps", "1"], "pp >= 2")


def test_search_skips_plans_dualpipe_cannot_pair_instead_of_failing(capsys):
    """DeepSeek-V3's 2,048-H800 scenario runs DualPipe, so the search prices its first 20 ranked plans under it; at
    pp 2 some of them have an odd number of micro-batches (15,360 sequences over dp 1,024: 15), which DualPipe
    cannot pair. Building their scenario refused them and the whole search exited 2 with that plan's error; now they
    are skipped as plans that cannot run it, and the fastest that can is reported."""
    assert main(["search", "deepseek-v3-h800-2048", "--space", "basic", "--pp", "2", "--top", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    best = out["best_dualpipe"]
    assert best["pp"] == 2 and best["step_time_s"] > 0
    assert (15360 // (best["dp"] * best["mbs"])) % 2 == 0  # an even number of micro-batches
