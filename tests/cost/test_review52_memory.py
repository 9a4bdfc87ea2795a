"""Activation memory per rank, from the fifty-first session's review of cost/memory.py (fixed in the fifty-second):
an interleaved stage holds its chunks unequally often at its peak (Megatron-Core's order runs a group of micro-batches
through chunk 0 before chunk 1, and frees them backwards in the reverse chunk order), and Megatron's block recompute
re-runs the first recompute_layers layers of each chunk — which ones matters where the layer kinds differ."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from narrowpath.catalog import system
from narrowpath.cost.memory import chunk_held_counts, in_flight_chunk_passes, layer_activation_bytes, stage_memory
from narrowpath.schedule.sim.programs import order_interleaved
from narrowpath.schedule.step import predict
from narrowpath.search import SearchSpace
from narrowpath.search.bulk import Bulk
from narrowpath.search.each import scenario_of
from narrowpath.search.parts import Parts
from narrowpath.search.table import build_table
from narrowpath.spec import Plan, Scenario
from narrowpath.spec.parse import model_from_dict
from narrowpath.workload import transformer as T
from narrowpath.workload.build import build_workload


def _model(drop=(), **kw):
    base = dict(name="dense-then-moe", layers=12, hidden=2048, heads=16, kv_heads=16, ffn=2048, vocab=32000,
                seq_len=4096, experts=16, top_k=2, ffn_act="swiglu", dense_layers=3, dense_ffn=16384)
    return model_from_dict({k: v for k, v in {**base, **kw}.items() if k not in drop})


def _scn(model, **plan) -> Scenario:
    p = Plan(**{**dict(tp=1, pp=2, dp=4, ep=1, mbs=1, gbs=64, zero_stage=1), **plan})
    return Scenario(name="t", system=system("dgx-h100"), model=model, plan=p, num_gpus=8)


def _acts(scn, stage=0):
    return stage_memory(scn, build_workload(scn, "flash"), "flash")[stage].items["activations"]


def _program_peaks(p, v, m, s, g):
    """Per-chunk forwards held at the moments the simulator's program of stage s holds the most of them."""
    held, seen = [0] * v, set()
    for group in order_interleaved(p, v, m, s, g):
        for ps in group:
            held[ps.chunk] += 1 if ps.kind == "F" else -1
            if ps.kind == "F":
                seen.add(tuple(held))
    top = max(sum(x) for x in seen)
    return {x for x in seen if sum(x) == top}


def test_held_counts_are_the_simulators_program():
    """Moments of peak depth the simulator's program of a stage reaches, and among them one that weighs any
    non-negative per-chunk bytes most, for random pipelines (micro-batch groups of pp and wider, micro-batch counts
    not a multiple of the group, the warm-up cap)."""
    rng = random.Random(52)
    for _ in range(400):
        p, v, m = rng.randint(2, 8), rng.randint(2, 6), rng.randint(1, 90)
        g, s = rng.choice([0, p, p + 1, 2 * p, 3 * p + 1]), rng.randrange(p)
        got, want = set(chunk_held_counts(s, p, v, m, group=g)), _program_peaks(p, v, m, s, g)
        assert got <= want, (p, v, m, s, g)
        for _ in range(10):
            w = [rng.random() ** 3 for _ in range(v)]
            assert max(np.dot(c, w) for c in got) == pytest.approx(max(np.dot(c, w) for c in want), rel=1e-12)
        assert {sum(c) for c in got} == {in_flight_chunk_passes(s, p, v, m, group=g)}


def test_held_counts_stay_few_however_many_micro_batches():
    """A million micro-batches on pp 16 × vpp 8: the runs' ends of the first two groups and the last ones — O(v)
    moments, not one per micro-batch (the first version listed every moment and the validation fuzz test, which
    draws batches that large, ran out of memory)."""
    got = chunk_held_counts(0, 16, 8, 10 ** 6)
    assert len(got) <= 8 * 8 and {sum(c) for c in got} == {in_flight_chunk_passes(0, 16, 8, 10 ** 6)}


def test_held_counts_by_hand():
    """p 2, v 2, m 8, stage 0: a warm-up of 2(p − 1) + (v − 1)·p = 4 forwards (chunk 0, 0, 1, 1); then forward
    chunk 0 → (3, 2), backward chunk 1 → (3, 1), forward chunk 0 → (4, 1), backward chunk 1 → (4, 0), forward
    chunk 1 → (4, 1), backward chunk 0 → (3, 1), forward chunk 1 → (3, 2), … . p 8, v 2: stage 0 holds 15 + 8
    at its first backward and 16 + 7 two forwards later; 1F1B and DualPipeV as in_flight_chunk_passes says."""
    assert set(chunk_held_counts(0, 2, 2, 8)) == {(3, 2), (4, 1)}
    assert (16, 7) in chunk_held_counts(0, 8, 2, 64) and set(chunk_held_counts(0, 8, 2, 64)) <= {(15, 8), (16, 7)}
    assert chunk_held_counts(1, 4, 1, 16) == ((3,),)
    assert chunk_held_counts(1, 4, 2, 16, v_shape=True) == ((7, 2),)


def test_an_interleaved_stage_weighs_its_heavier_chunk_at_its_peak():
    """12 layers on pp 2 × vpp 2 as 5, 5, 1, 1 (stage 0: chunk 0 of five layers and the embedding's output, chunk 2
    of one), m = 8 (gbs 32 over dp 4): stage 0's moments hold (3, 2) and (4, 1) chunk forwards, so its peak is 4·(5a + e) + a = 21a + 4e — the stage average said 2.5·(6a + e)."""
    model = _model(drop=("experts", "top_k", "dense_layers", "dense_ffn"))
    scn = _scn(model, vpp=2, chunk_layers=(5, 5, 1, 1), gbs=32)
    assert scn.plan.num_microbatches == 8
    a = layer_activation_bytes(scn, "flash")
    e = T.act_bytes(scn.plan) * scn.plan.mbs * model.seq_len * model.hidden
    assert _acts(scn) == pytest.approx(21 * a + 4 * e, rel=1e-12)


def test_block_recompute_reruns_each_chunks_first_layers():
    """Stage 0 of pp 2 holds layers 0–5: three dense layers then three MoE layers. A block recompute of 3 re-runs
    layers 0–2 (Megatron-Core's `_checkpointed_forward`, method block: the first num_layers of the chunk), so the
    stage keeps 3 inputs and the three MoE layers whole per micro-batch — not half of each kind's bytes. Two
    micro-batches in flight (1F1B stage 0 of 2), the embedding output with each."""
    model = _model()
    scn = _scn(model, recompute="full", recompute_layers=3)
    inp = layer_activation_bytes(scn, "flash")
    none = _scn(model)
    a_moe = layer_activation_bytes(none, "flash", moe_layer=True)
    a_dense = layer_activation_bytes(none, "flash", moe_layer=False)
    assert a_moe != a_dense
    e = T.act_bytes(scn.plan) * scn.plan.mbs * model.seq_len * model.hidden
    assert _acts(scn) == pytest.approx(2 * (3 * inp + 3 * a_moe + e), rel=1e-12)


def test_search_memory_is_predicts_on_interleaved_block_recompute():
    """The search's bulk memory (search/bulk.py) against predict's on every interleaved plan with a partial block
    recompute or offload of a model with leading dense layers and an MTP layer on its last stage."""
    model = _model(mtp_layers=1)
    scn = _scn(model, recompute="full")
    space = SearchSpace(model, scn.system, 8, 64, scn.plan, {})
    table = build_table(space)
    rows = np.flatnonzero(table.cols["vpp"] > 1)
    partial = {i for i, s in enumerate(table.strategies) if s[1] or s[2]}
    rows = np.array([r for r in rows if int(table.cols["strat"][r]) in partial])
    rows = np.sort(np.random.default_rng(52).choice(rows, size=min(60, rows.size), replace=False))
    bulk = Bulk(table, Parts(scenario_of(scn, space, space.base), None))
    sp = bulk.structural(rows)
    for i, r in enumerate(rows):
        plan = table.plan(int(table.starts[r]))
        pred = predict(scenario_of(scn, space, plan))
        assert sp.memory_bytes[i] == pytest.approx(pred.memory.total_bytes, rel=1e-12), plan


def test_offload_takes_each_chunks_first_layers():
    """The same stage with offload_layers 3 and no recompute: the three dense layers' saved tensors go to host
    memory (Transformer Engine's offload context takes layers in the order they run), the three MoE layers stay —
    2·(3·a_moe + e) on the device, where the chunk's mean share had kept half of every kind (a review of this
    session's change: with a recompute of the same 3 layers the mean share kept 46 % too little)."""
    model = _model()
    scn = _scn(model, offload_layers=3)
    a_moe = layer_activation_bytes(_scn(model), "flash", moe_layer=True)
    e = T.act_bytes(scn.plan) * scn.plan.mbs * model.seq_len * model.hidden
    assert _acts(scn) == pytest.approx(2 * (3 * a_moe + e), rel=1e-12)
    both = _scn(model, recompute="full", recompute_layers=3, offload_layers=3)
    assert _acts(both) == pytest.approx(2 * (3 * a_moe + e), rel=1e-12)  # the inputs kept are offloaded too
    more = _scn(model, recompute="full", recompute_layers=4, offload_layers=3)  # layer 3 (MoE) keeps its input
    assert _acts(more) == pytest.approx(2 * (layer_activation_bytes(more, "flash") + 2 * a_moe + e), rel=1e-12)
