"""The time of Megatron's block recompute over mixed layer kinds: a full recompute of `recompute_layers` re-runs the
first layers of each chunk (Megatron-Core's TransformerBlock._checkpointed_forward, method `block`), which are
DeepSeek-V3-style leading dense layers on stage 0 — the fifty-second session's review found the time priced at the
stage's mean share of every kind (30 % under-priced on a 3 dense + 3 MoE stage at 3), while the memory was already
per layer. Here: the workload, the closed form's chunk shares, the simulator's chunk items and the search's bulk
twin, each against a hand count of the layers re-run."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from narrowpath.catalog import system
from narrowpath.cost.memory import layer_activation_bytes, stage_memory
from narrowpath.schedule.sim.work import chunk_items
from narrowpath.schedule.step import predict
from narrowpath.search import SearchSpace
from narrowpath.search.bulk import Bulk
from narrowpath.search.each import scenario_of
from narrowpath.search.exact import Exact
from narrowpath.search.parts import Parts
from narrowpath.search.table import build_table
from narrowpath.spec import Plan, Scenario
from narrowpath.spec.parse import model_from_dict
from narrowpath.workload.build import build_workload, layer_kind_of
from narrowpath.workload.split import (end_rerun_share, mtp_recomputed, plan_layer_ranges, rerun_kind_counts,
                                      rerun_layers)


def _model(**kw):
    base = dict(name="dense-then-moe", layers=12, hidden=2048, heads=16, kv_heads=16, ffn=2048, vocab=32000,
                seq_len=4096, experts=16, top_k=2, ffn_act="swiglu", dense_layers=3, dense_ffn=16384)
    return model_from_dict({**base, **kw})


def _scn(model, **plan) -> Scenario:
    p = Plan(**{**dict(tp=1, pp=2, dp=4, ep=1, mbs=1, gbs=64, zero_stage=1), **plan})
    return Scenario(name="t", system=system("dgx-h100"), model=model, plan=p, num_gpus=8)


def _flop(ops, phase: str) -> float:
    return sum(op.flop * c for op, c in ops if op.phase == phase)


def _layer_fwd_flop(wl, moe: bool) -> float:
    """Forward FLOPs of one layer of a kind (its recompute re-runs exactly these)."""
    return sum(_flop(ops, "fwd") for kind, ops, _ in wl.layer_work if kind[0] == moe)


def test_rerun_counts_by_hand():
    """Chunks of 4 layers on pp 2 × vpp 2 over 16 layers, 3 dense first: stage 0 holds chunks 0–3 (3 dense, 1 MoE)
    and 8–11 (MoE). A block recompute of 2 re-runs layers 0, 1 (dense) and 8, 9 (MoE); of 0, every layer; a module
    recompute runs its items in every layer. The MTP modules re-run nothing under the block method (Megatron-Core's
    MultiTokenPredictionLayer skips it), all of themselves under a recompute of every layer."""
    model = _model(layers=16)
    scn = _scn(model, vpp=2, recompute="full", recompute_layers=2, gbs=32)
    ranges = plan_layer_ranges(model, scn.plan)[0]
    dense, moe = (False, False), (True, False)
    assert layer_kind_of(model)[0] == dense and layer_kind_of(model)[3] == moe
    assert rerun_kind_counts(scn.plan, ranges, layer_kind_of(model)) == [{dense: 2}, {moe: 2}]
    assert rerun_layers(scn.plan, 4) == 2 and rerun_layers(scn.plan, 1) == 1
    assert end_rerun_share(scn.plan) == 0.0 and not mtp_recomputed(scn.plan)
    every = _scn(model, vpp=2, recompute="full", gbs=32)
    assert rerun_kind_counts(every.plan, ranges, layer_kind_of(model)) == [{dense: 3, moe: 1}, {moe: 4}]
    assert end_rerun_share(every.plan) == 1.0 and mtp_recomputed(every.plan)
    sel = _scn(model, vpp=2, recompute="selective", gbs=32)
    assert rerun_layers(sel.plan, 4) == 4 and end_rerun_share(sel.plan) == 1.0 and not mtp_recomputed(sel.plan)


def test_stage_recompute_reruns_its_first_layers():
    """Stage 0 of pp 2 holds layers 0–5: three dense layers (a 16,384-wide MLP) then three MoE layers (16 experts,
    top 2, 2,048 wide). A block recompute of 3 re-runs the three dense layers' forward: 3·F_dense FLOPs, where the
    stage's mean share gave ½·(3·F_dense + 3·F_moe). Of 0 (every layer): 3·F_dense + 3·F_moe."""
    model = _model()
    part = build_workload(_scn(model, recompute="full", recompute_layers=3), "flash")
    whole = build_workload(_scn(model, recompute="full"), "flash")
    f_dense, f_moe = _layer_fwd_flop(whole, False), _layer_fwd_flop(whole, True)
    assert f_dense > 2 * f_moe  # the kinds' costs differ enough for a mean to be wrong
    assert _flop(part.stages[0].ops, "recompute") == pytest.approx(3 * f_dense, rel=1e-12)
    assert _flop(whole.stages[0].ops, "recompute") == pytest.approx(3 * f_dense + 3 * f_moe, rel=1e-12)
    assert _flop(part.stages[1].ops, "recompute") == pytest.approx(3 * f_moe, rel=1e-12)  # layers 6–8 of 6–11


def test_mtp_modules_skip_the_block_method():
    """One MTP module on the head stage (layers 6–11, one chunk of 6). Megatron-Core's
    MultiTokenPredictionLayer._checkpointed_forward warns that the block method "is not supported for MTP yet" and
    runs the module without recompute: a block recompute of 3 re-runs the chunk's first three MoE layers only, and
    the module keeps its whole activations; a recompute of every layer (its uniform method) re-runs the module too
    and keeps its input (a fifty-third session review: the module had been given its chunk's block share)."""
    model = _model(mtp_layers=1)
    part_scn, whole_scn = _scn(model, recompute="full", recompute_layers=3), _scn(model, recompute="full")
    part, whole = build_workload(part_scn, "flash"), build_workload(whole_scn, "flash")
    f_moe = _layer_fwd_flop(whole, True)
    mtp_whole = _flop(whole.stages[1].ops, "recompute") - 6 * f_moe
    assert mtp_whole > f_moe  # the module's block and its projection
    assert _flop(part.stages[1].ops, "recompute") == pytest.approx(3 * f_moe, rel=1e-12)
    no_rc = _scn(model)
    a_moe = layer_activation_bytes(no_rc, "flash", moe_layer=True)
    inp = layer_activation_bytes(part_scn, "flash")
    acts = stage_memory(part_scn, part, "flash")[1].items["activations"]
    # stage 1 of pp 2 holds one micro-batch in flight: 3 inputs, 3 MoE layers' and the MTP module's whole activations
    assert acts == pytest.approx(3 * inp + 3 * a_moe + a_moe, rel=1e-12)
    acts_whole = stage_memory(whole_scn, whole, "flash")[1].items["activations"]
    assert acts_whole == pytest.approx(7 * inp, rel=1e-12)


def test_simulator_chunks_rerun_their_own_layers():
    """The simulator's chunk items (schedule.sim.work.chunk_items) on the 16-layer pp 2 × vpp 2 stage 0 at 2: chunk
    0's recompute re-runs two dense layers, chunk 1's two MoE layers — and they add up to the stage's items, so
    nothing is spread over the chunks by layer count."""
    model = _model(layers=16)
    scn = _scn(model, vpp=2, recompute="full", recompute_layers=2, gbs=32)
    wl = build_workload(scn, "flash")
    st = wl.stages[0]
    chunks = chunk_items(scn, "flash", st, plan_layer_ranges(model, scn.plan)[0])
    f_dense, f_moe = _layer_fwd_flop(wl, False), _layer_fwd_flop(wl, True)
    got = [_flop(ops.items(), "recompute") for ops, _ in chunks]
    assert got == pytest.approx([2 * f_dense, 2 * f_moe], rel=1e-12)
    total = Counter()
    for ops, _ in chunks:
        total.update(ops)
    assert _flop(total.items(), "recompute") == pytest.approx(_flop(st.ops, "recompute"), rel=1e-12)


def test_search_prices_block_recompute_as_predict():
    """Every plan of the search space with a partial block recompute (1F1B and interleaved, with an MTP module on
    the last stage) of the dense-then-MoE model: the search's step time and memory are predict's."""
    model = _model(mtp_layers=1, layers=16)
    scn = _scn(model, recompute="full", gbs=32)
    space = SearchSpace(model, scn.system, 8, 32, scn.plan, {"tp": 1, "ep": 1, "cp": 1, "mbs": 1})
    table = build_table(space)
    partial = {i for i, s in enumerate(table.strategies) if s[0] == "full" and s[1]}
    rows = np.array([r for r in range(table.num_structural) if int(table.cols["strat"][r]) in partial
                     and table.cols["pp"][r] > 1])
    assert rows.size and (table.cols["vpp"][rows] > 1).any()
    rows = np.sort(np.random.default_rng(53).choice(rows, size=min(40, rows.size), replace=False))
    bulk = Bulk(table, Parts(scenario_of(scn, space, space.base), None))
    sp = bulk.structural(rows)
    idx, times = Exact(bulk).price_rows(sp, np.arange(rows.size))
    pick = np.random.default_rng(7).choice(idx.size, size=min(40, idx.size), replace=False)
    for k in pick:
        plan = table.plan(int(idx[k]))
        pred = predict(scenario_of(scn, space, plan))
        at = int(np.searchsorted(rows, int(np.searchsorted(table.starts, idx[k], side="right") - 1)))
        assert times[k] == pytest.approx(pred.step_time_s, rel=1e-12), plan
        assert sp.memory_bytes[at] == pytest.approx(pred.memory.total_bytes, rel=1e-12), plan


def test_search_prices_chunks_that_rerun_different_kinds_as_predict():
    """GPT-OSS-120B (window and full attention layers alternating, 36 layers) on 16 H100 at pp 4 × vpp 5 with a
    block recompute of 1: stage 1's chunks (layers 2–3, 10–11, 18–19, 25–26, 31–32) each hold one layer of each kind
    — alike — but re-run a window layer in the first three and a full one in the last two, so its backward splits
    unevenly. The search's twin had split such a stage evenly (1/5 each: +3.6e-4 on this plan, a review of this
    session's change); every plan of the pinned space is predict's."""
    from narrowpath.catalog import model as catalog_model
    m = catalog_model("gpt-oss-120b")
    plan = Plan(tp=1, pp=4, vpp=5, dp=4, ep=4, mbs=1, gbs=64, zero_stage=1, recompute="full", recompute_layers=1,
                ep_dispatch="all_to_all")
    scn = Scenario(name="gpt-oss", system=system("dgx-h100"), model=m, plan=plan, num_gpus=16)
    pins = dict(tp=1, pp=4, vpp=5, ep=4, mbs=1, zero_stage=1, cp=1, recompute="full", recompute_layers=1)
    space = SearchSpace(m, scn.system, 16, 64, plan, pins)
    table = build_table(space)
    bulk = Bulk(table, Parts(scenario_of(scn, space, space.base), None))
    rows = np.arange(table.num_structural)
    sp = bulk.structural(rows)
    idx, times = Exact(bulk).price_rows(sp, np.arange(rows.size))
    pick = np.random.default_rng(5).choice(idx.size, size=min(12, idx.size), replace=False)
    for k in pick:
        p = table.plan(int(idx[k]))
        assert times[k] == pytest.approx(predict(scenario_of(scn, space, p)).step_time_s, rel=1e-12), p
