"""The paired share of a pipeline stage's passes (schedule.step.paired_fraction): under Megatron-Core's combined
1F1B a stage's warm-up forwards (one more than the schedule's own) and its cool-down backwards run alone, so the
first stage pairs the fewest. predict, the event simulator and the search's closed form price each stage with its
own share."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from narrowpath.catalog import load_scenario
from narrowpath.schedule.sim.programs import Pass, build_programs
from narrowpath.schedule.step import paired_fraction, predict
from tests.search.scenarios import deepseek_v3_1f1b


def test_hand_worked_1f1b():
    """1F1B, pp 4, m 8: stage s runs 3 − s warm-up forwards, plus the one that starts the merged steady state
    (F0 alone on the last stage, then F1 + B0, ...): 4, 3, 2, 1 of 8 forwards alone (and as many cool-down
    backwards)."""
    for s, alone in enumerate((4, 3, 2, 1)):
        assert paired_fraction(s, 4, 1, 8) == (8 - alone) / 8
    assert paired_fraction(0, 4, 1, 8) == 0.5
    assert paired_fraction(3, 4, 1, 8) == 0.875


def test_hand_worked_interleaved():
    """Interleaved, pp 4, v 2, m 8 (16 chunk passes a stage): Megatron's warm-up 2·(3 − s) + (2 − 1)·4 chunk
    forwards plus one: 11, 9, 7, 5 of 16 alone. With m 4 (8 chunk passes) stage 0's 11 are capped at all 8: no pass
    has a partner; the last stage keeps 5 of 8 alone."""
    for s, alone in enumerate((11, 9, 7, 5)):
        assert paired_fraction(s, 4, 2, 8) == (16 - alone) / 16
    assert paired_fraction(0, 4, 2, 4) == 0.0
    assert paired_fraction(3, 4, 2, 4) == 3 / 8


def test_deepseek_b200_pp16():
    """pp 16, m 128, one chunk: stage 0 has 16 of 128 passes alone (12.5 %), the last stage 1 of 128."""
    assert 1 - paired_fraction(0, 16, 1, 128) == 0.125
    assert 1 - paired_fraction(15, 16, 1, 128) == 1 / 128


@pytest.mark.parametrize("p, v, m", [(2, 1, 1), (4, 1, 2), (4, 1, 8), (8, 1, 5), (4, 2, 8), (4, 3, 4), (2, 4, 6),
                                     (8, 2, 16)])
def test_counts_are_the_forwards_before_the_first_backward(p, v, m):
    """In the simulator's programs (Megatron's plain order) a stage's steady state runs each forward just before a
    backward; combined 1F1B merges every backward with the forward after it instead (one more warm-up forward), so
    the forwards a stage runs before its first backward are the ones without a partner, and as many backwards after
    its last forward."""
    for prog in build_programs("interleaved" if v > 1 else "1f1b", p, v, m):
        kinds = [x.kind for x in prog.items if isinstance(x, Pass)]
        first_b = kinds.index("BW")
        after_last_f = len(kinds) - 1 - max(k for k, x in enumerate(kinds) if x == "F")
        assert first_b == after_last_f
        assert (1 - paired_fraction(prog.stage, p, v, m)) * m * v == pytest.approx(first_b, abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 32), st.integers(0, 31), st.sampled_from([1, 2, 3, 4, 8]), st.integers(1, 256))
def test_share_properties(pp, s, vpp, m):
    s = s % pp
    f = paired_fraction(s, pp, vpp, m)
    assert 0.0 <= f <= 1.0
    if s + 1 < pp:  # a later stage warms up less: the first stage has the fewest paired passes
        assert f <= paired_fraction(s + 1, pp, vpp, m)
    assert f <= paired_fraction(s, pp, vpp, m + 1)  # more micro-batches never lower the share
    if pp == 1:  # no pipeline: only the first forward and the last backward run alone
        assert f == (m - 1) / m


def _deepseek_all_to_all():
    """DeepSeek-V3 on 2,048 H800 (pp 16, 120 micro-batches) with a plain NCCL all-to-all dispatch, whose exchange
    outgrows the backward's matrix work, and the MLA up-projections recomputed (matrix work in the recompute phase
    that a forward's exchange can hide behind only when paired)."""
    scn = deepseek_v3_1f1b()
    return dataclasses.replace(scn, plan=dataclasses.replace(
        scn.plan, ep_dispatch="all_to_all", recompute="selective", recompute_modules=("mla_up_proj",)))


def test_first_expert_stage_exposes_the_most_expert_traffic():
    """The stages with the same layers (1-13: four MoE layers each) differ only in their warm-up: exposure falls
    stage by stage, in proportion to the paired share; the first stage with experts exposes more than the last."""
    pred = predict(_deepseek_all_to_all())
    p, m = pred.scenario.plan.pp, pred.workload.num_microbatches
    ep = [s.exposed_comm_s["ep"] for s in pred.stages]
    moe = [i for i, s in enumerate(pred.workload.stages) if any(tr.axis.startswith("ep") for tr, _ in s.transfers)]
    same = [i for i in moe if pred.stages[i].layers == pred.stages[moe[0]].layers and i < p - 1]
    assert moe[0] == 1 and len(same) >= 10
    assert all(a > b for a, b in zip([ep[i] for i in same], [ep[i] for i in same[1:]]))
    f = [paired_fraction(i, p, 1, m) for i in range(p)]
    slope = (ep[same[0]] - ep[same[1]]) / (f[same[1]] - f[same[0]])
    assert (ep[same[0]] - ep[same[-1]]) / (f[same[-1]] - f[same[0]]) == pytest.approx(slope, rel=1e-6)
    assert ep[moe[0]] > ep[-1]


def _deepseek_gb200_interleaved():
    from narrowpath.validate.corpus import load_corpus
    case = next(c for c in load_corpus(None)
                if c.id == "mb26-02-deepseek-v3-gb200-n256-gbs4096-mxfp8-tp1pp4cp1ep64vp4mbs1")
    return dataclasses.replace(case.scenario, plan=dataclasses.replace(case.scenario.plan, ep_overlap=True))


@pytest.mark.parametrize("make", [_deepseek_all_to_all, _deepseek_gb200_interleaved], ids=["pp16", "pp4-vpp4"])
def test_simulator_prices_every_stage_as_predict(make):
    """The simulator's passes of a stage (every chunk, forward and backward) add up to predict's stage time without
    its pipeline sends, stage by stage, each with its own paired share; noise-free, its step is predict's."""
    from narrowpath.schedule.sim.run import simulate
    from narrowpath.schedule.sim.work import build_sim_work
    scn = make()
    pred = predict(scn)
    work = build_sim_work(pred)
    for sw, ps in zip(work.stages, pred.stages):
        sim = sum(pw.compute_s + sum(s.cost_s for s in pw.syncs) for pw in sw.passes.values())
        assert sim == pytest.approx(ps.total_s - ps.exposed_comm_s["pp"], rel=1e-12), sw.index
    r = simulate(scn, steps=1)
    assert r.noise_free_step_time_s == pytest.approx(r.closed_form_step_time_s, rel=0.005)


@pytest.mark.parametrize("pins", [{"pp": 16, "vpp": 1}, {"pp": 4, "vpp": 2}, {"pp": 8, "vpp": 2}],
                         ids=["pp16", "pp4-vpp2", "pp8-vpp2"])
def test_search_prices_every_stage_as_predict(pins):
    """The search's closed form (search.exact, stage times per stage) gives predict's step time for overlapped MoE
    plans with a pipeline, with one chunk and interleaved."""
    from tests.search.scenarios import bulk_sample
    base = deepseek_v3_1f1b()
    sample = bulk_sample(base, {"ep_overlap": True, "ep_dispatch": "all_to_all", **pins}, 8, 5)
    assert sample
    for plan, t, _, scn in sample:
        assert plan.ep_overlap and plan.pp == pins["pp"] and plan.vpp == pins["vpp"]
        assert t == pytest.approx(predict(scn).step_time_s, rel=1e-12), plan


@pytest.mark.parametrize("pp,vpp", [(4, 1), (4, 2), (1, 1)])
def test_the_extra_warm_up_forward_does_not_deepen_the_memory_peak(pp, vpp):
    """Without the overlap a stage's activation peak is reached when its first steady-state forward ends, before its
    first backward: its warm-up forwards + 1 chunk passes (1F1B pp 4 stage 0: 3 + 1 = 4 micro-batches). With the
    overlap the warm-up itself runs that one forward more and ends at the same count, and each merged step then adds
    its forward layer by layer while the partner backward frees layer by layer (combined_1f1b.py), so the peak
    grows by at most a layer, not a micro-batch. Memory is the same with and without ep_overlap."""
    s = deepseek_v3_1f1b()
    from narrowpath.spec.parse import model_from_dict
    m = model_from_dict(dict(name="small-moe", layers=8, hidden=2048, heads=16, kv_heads=16, ffn=2048, vocab=32000,
                             seq_len=4096, experts=16, top_k=2, ffn_act="swiglu"))
    plan = dataclasses.replace(s.plan, tp=1, pp=pp, vpp=vpp, dp=8 // pp if pp > 1 else 8, ep=2, mbs=1, gbs=64,
                               recompute="none", recompute_modules=(), activation_cache="default", precision="bf16",
                               optimizer_moments="fp32", ep_dispatch_format="default")
    scn = dataclasses.replace(s, model=m, num_gpus=8, plan=plan)
    on, off = (predict(dataclasses.replace(scn, plan=dataclasses.replace(plan, ep_overlap=e))) for e in (True, False))
    assert on.memory.total_bytes == off.memory.total_bytes
    assert on.memory.items["activations"] > 0
