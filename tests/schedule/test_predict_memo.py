"""predict adds up a stage's ops once for every stage holding the same ops (the middle stages of a pipeline) and
caches the model-wide counts per model; these tests hold the shortcuts to the long way round."""
from __future__ import annotations

import dataclasses

import pytest

import narrowpath.schedule.step as step
from narrowpath.catalog import calibration_for, load_scenario
from narrowpath.spec.model import MoE, Model
from narrowpath.workload.attention import kernel_of
from narrowpath.workload.build import build_workload, layer_kind_of, layer_kinds
from narrowpath.workload.counts import model_flop_per_token, parameter_count


def _workload(scn):
    cal = calibration_for(scn.system.device.name)
    return build_workload(scn, kernel_of(scn.plan.attention, cal.attention_kernel))


def test_stages_with_equal_counts_but_other_ops_are_priced_apart(monkeypatch):
    """Stage 2 gets ops of twice the FLOPs of stage 1's, in the same order with the same counts (new objects): a
    memo keyed on the counts alone would price it as stage 1. Stages 1 and 3 keep the same ops: priced alike."""
    scn = load_scenario("gpt3-175b-a100-1024")
    wl = _workload(scn)
    assert wl.stages[1].ops is wl.stages[2].ops is wl.stages[3].ops  # the middle stages share one ops tuple
    heavier = tuple((dataclasses.replace(op, flop=2 * op.flop), c) for op, c in wl.stages[2].ops)
    stages = list(wl.stages)
    stages[2] = dataclasses.replace(stages[2], ops=heavier)
    monkeypatch.setattr(step, "build_workload", lambda s, k: dataclasses.replace(wl, stages=tuple(stages)))
    pred = step.predict(scn)
    s1, s2, s3 = pred.stages[1], pred.stages[2], pred.stages[3]
    assert s1.fwd_compute_s == s3.fwd_compute_s and s1.bwd_compute_s == s3.bwd_compute_s
    # the GEMMs are compute-bound at these sizes: twice the FLOPs, well over 1.5x the forward time
    assert s2.fwd_compute_s > 1.5 * s1.fwd_compute_s


def test_stages_with_the_same_ops_but_other_transfers_are_priced_apart(monkeypatch):
    """Stage 2 keeps stage 1's ops tuple but gets its transfers at twice the message size (new objects): the
    tensor-parallel traffic GPT-3 on A100 exposes grows on stage 2 only; stages 1 and 3 still expose alike."""
    scn = load_scenario("gpt3-175b-a100-1024")
    wl = _workload(scn)
    assert wl.stages[1].transfers is wl.stages[3].transfers  # the middle stages share one tuple
    bigger = tuple((dataclasses.replace(tr, message_bytes=2 * tr.message_bytes), c) for tr, c in wl.stages[2].transfers)
    stages = list(wl.stages)
    stages[2] = dataclasses.replace(stages[2], transfers=bigger)
    monkeypatch.setattr(step, "build_workload", lambda s, k: dataclasses.replace(wl, stages=tuple(stages)))
    pred = step.predict(scn)
    tp = [st.exposed_comm_s["tp"] for st in pred.stages]
    assert tp[1] > 0 and tp[1] == tp[3]
    assert tp[2] > 1.5 * tp[1]


def test_the_memo_changes_nothing_against_a_stage_priced_alone():
    """Every stage's forward time equals its ops added up one by one (GPU time or the host's pace, whichever is
    slower, plus the synchronisations), with no sharing between stages (without the slowdown of overlapped
    compute, which adds the forward's hidden traffic to it)."""
    scn = load_scenario("llama3-405b-h100-16k")
    pred = step.predict(scn)
    pred = step.predict(pred.scenario, dataclasses.replace(pred.calibration, overlap_compute_slowdown=0.0))
    dev, cal = pred.scenario.system.device, pred.calibration
    from narrowpath.cost.roofline import host_time_s, op_time_s
    for st, times in zip(pred.workload.stages, pred.stages):
        gpu = sum(op_time_s(op, dev, cal) * c for op, c in st.ops if op.phase == "fwd")
        host = sum(host_time_s(op, cal) * c for op, c in st.ops if op.phase == "fwd")
        syncs = sum(op.host_syncs * c for op, c in st.ops if op.phase == "fwd")
        assert times.fwd_compute_s == pytest.approx(max(gpu, host) + syncs * cal.host_sync_s, rel=1e-12)


def test_layer_kinds_give_each_layers_index_by_kind():
    """Two leading dense layers, then MoE layers; every second layer attends over a window (GPT-OSS-like)."""
    m = Model(name="m", layers=6, hidden=256, heads=8, vocab=1000, seq_len=512, sliding_window=128,
              sliding_window_every=2, moe=MoE(num_experts=8, top_k=2, expert_ffn=512, first_dense_layers=2))
    kinds = layer_kinds(m)
    assert sorted(i for idx in kinds.values() for i in idx) == list(range(6))
    for kind, idx in kinds.items():
        for li in idx:
            assert kind == (m.is_moe_layer(li), m.is_window_layer(li))
    assert kinds[(False, m.is_window_layer(0))][0] == 0 and not any(k[0] for k in layer_kind_of(m)[:2])
    assert all(k[0] for k in layer_kind_of(m)[2:])


def test_model_counts_are_cached_per_model_value():
    """Equal models (two objects) share one cache entry; a different model gets its own count."""
    a = Model(name="a", layers=4, hidden=256, heads=8, vocab=1000, seq_len=512)
    b = Model(name="a", layers=4, hidden=256, heads=8, vocab=1000, seq_len=512)
    c = dataclasses.replace(a, layers=8)
    assert parameter_count(a) == parameter_count(b) and model_flop_per_token(a) == model_flop_per_token(b)
    assert parameter_count(c) > parameter_count(a) and model_flop_per_token(c) > model_flop_per_token(a)
