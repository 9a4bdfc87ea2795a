"""Workload values the seed-26 mutation sample (benchmarks/mutation.py) found unguarded: whether an LSTM's data-parallel
gradient all-reduce may overlap the backward, the bytes of a grouped-query layer's QKV preprocessing in serving, and
the end split proposed when the first stage holds fewer layers than the second — each pinned by the plan's own knob
or a hand calculation."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario, model
from narrowpath.schedule.step import predict
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.build import build_workload
from narrowpath.workload.serving import Formats, attention_token_ops
from narrowpath.workload.split import balanced_end_layers


def test_an_lstm_with_dp_overlap_hides_part_of_its_gradient_all_reduce():
    """GNMT-style LSTM on one DGX A100 (dp 8) with `dp_overlap`: the plan says the gradient all-reduce over dp runs
    beside the backward (Plan.dp_overlap), so the step's one dp.grad_all_reduce is overlappable and part of its time
    is hidden (exposed < total); without the knob it is not overlappable and wholly exposed."""
    base = load_scenario("gnmt-lstm-a100-8")
    assert base.plan.dp == 8 and not base.plan.dp_overlap
    for overlap in (False, True):
        scn = dataclasses.replace(base, plan=dataclasses.replace(base.plan, dp_overlap=overlap))
        ((sync, _),) = build_workload(scn, "flash").step_transfers
        assert (sync.name, sync.axis, sync.overlappable) == ("dp.grad_all_reduce", "dp", overlap)
        (row,) = [t for t in predict(scn).transfers if t.name == "dp.grad_all_reduce"]
        assert 0 < row.total_s
        if overlap:
            assert row.exposed_s < row.total_s
        else:
            assert row.exposed_s == row.total_s


@pytest.mark.parametrize("tp, per_token", [(1, 28_672), (2, 14_336)])
def test_qkv_preprocessing_reads_and_writes_q_k_v_once_and_writes_the_tokens_kv(tp, per_token):
    """Llama-3 8B (32 query heads and 8 kv heads of 128) in bf16 (A = K = 2 B). Per token the preprocessing kernel
    (rotary embedding, KV-cache write) reads the QKV projection's output and writes it back at 16 bit, 2 passes over
    q + k + v, and writes the token's cache entry: tp 1: q 4,096 + k, v 2·1,024 = 6,144 values → 6,144·2·2 =
    24,576 B, plus 2·1,024·2 = 4,096 B of cache, 28,672 B; tp 2 halves every width: 14,336 B. At T = 10 tokens ten
    times that."""
    m, p = model("llama3-8b"), ServingPlan(tp=tp, weight_precision="bf16", kv_precision="bf16")
    by = {op.name: op for op in attention_token_ops(m, p, Formats.of(p, True, m), 10.0)}
    assert (m.q_dim, m.kv_heads * m.head_dim) == (4096, 1024)
    assert by["qkv_preprocess"].hbm_bytes == 10 * per_token


def test_the_end_split_keeps_the_first_stage_at_its_own_layers_time():
    """pp 2, 4 layers, the current split 1 / 3 with stage times 2 s and 6 s. With no stage between the ends a layer
    costs what one costs on the first stage, 2 s / 1 layer = 2 s; the first stage takes 2 − 1·2 = 0 s beyond its one
    layer and the last 6 − 3·2 = 0 s beyond its three. So every split costs 2 s a layer and nothing else: the even
    2 / 2 split (4 s, against the current 6 s) is best, and Megatron-Core's automatic split (0, 0) gives it and is
    tried first (2 / 2 stated as (2, 0) or (0, 2) only ties). Charging the first stage against the second stage's
    three layers (2 − 3·2 = −4 s) would make it look 4 s cheaper and move a layer onto it."""
    assert balanced_end_layers(4, 2, 1, [2.0, 6.0], [1, 3]) == (0, 0)
