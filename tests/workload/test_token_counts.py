"""Before its tokens move, an MoE layer's forward gathers every rank's tokens per expert over the ep group
(Megatron-Core's MoEAlltoAllTokenDispatcher.preprocess: gather_from_sequence_parallel_region of the int64 counts on
the tp×ep group, then a copy to the host that sizes the all-to-all; DeepEP's notify step exchanges the same counts):
a latency-bound exchange the host waits for, in every forward and a recompute that re-runs the dispatch, never in
backward (the splits are reused), never hidden."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model, system
from narrowpath.schedule import predict
from narrowpath.spec import Plan
from narrowpath.spec.scenario import Scenario
from narrowpath.workload.moe import TOKEN_COUNT_BYTES, token_count_transfers

MIXTRAL = model("mixtral-8x7b")


def test_one_gather_of_int64_counts_per_forward():
    """Mixtral's 8 experts on ep 8: each rank contributes 8 counts of 8 B, the gathered buffer 8 · 8 · 8 = 512 B."""
    assert TOKEN_COUNT_BYTES == 8
    (t, n), = token_count_transfers(MIXTRAL, Plan(dp=8, ep=8, gbs=8))
    assert (t.name, t.op, t.axis, t.message_bytes, t.phase, t.overlappable, n) == \
        ("ep.token_counts", "all_gather", "ep", 512, "fwd", False, 1.0)
    full = token_count_transfers(MIXTRAL, Plan(dp=8, ep=8, gbs=8, recompute="full"))
    assert [t.phase for t, _ in full] == ["fwd", "recompute"]


def test_none_without_expert_parallelism_or_experts():
    assert token_count_transfers(MIXTRAL, Plan(dp=8, gbs=8)) == []
    assert token_count_transfers(model("llama3-8b"), Plan(dp=8, gbs=8)) == []


def test_it_is_exposed_in_every_forward():
    """32 MoE layers × 8 micro-batches of its time each, on the step (nothing hides it)."""
    base = Scenario(name="mx", system=system("dgx-h100"), model=MIXTRAL,
                    plan=Plan(tp=1, dp=8, ep=8, mbs=1, gbs=64, zero_stage=1, recompute="selective"), num_gpus=8)
    p = predict(base)
    (t,) = [t for t in p.transfers if t.name == "ep.token_counts"]
    assert t.exposed_s == pytest.approx(t.total_s) and t.total_s == pytest.approx(32 * 8 * t.time_each_s)
    assert 1e-6 < t.time_each_s < 1e-4  # latency, not bandwidth: 512 B
    one = predict(dataclasses.replace(base, plan=dataclasses.replace(base.plan, ep=1)))
    assert not [t for t in one.transfers if t.name == "ep.token_counts"]
