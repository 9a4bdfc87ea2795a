"""An unpublished ZeRO stage is chosen among the sharded stages wherever a group replicates state: the dense
data-parallel group, or for an MoE model the expert data-parallel group alone (as the search tries them)."""
from __future__ import annotations

import dataclasses

from narrowpath.catalog import load_scenario, model as catalog_model
from narrowpath.schedule.choose import CANDIDATES


def _mixtral(**plan):
    s = load_scenario("llama3-8b-h100-8")
    m = catalog_model("mixtral-8x7b")
    return dataclasses.replace(s, model=m, plan=dataclasses.replace(s.plan, **plan))


def test_experts_replicated_over_tp_ranks_try_every_stage():
    """Mixtral 8×7B on 8 GPUs at tp 8, ep 1, dp 1: the experts' state is replicated on the 8 tp ranks of the expert
    layout (etp 1: expert dp = 8 / (1 · 1) = 8) — ZeRO 1–3 shard it, so all four stages are tried, ZeRO-1 first."""
    s = _mixtral(tp=8, dp=1, ep=1, etp=1)
    assert s.plan.expert_dp == 8
    assert CANDIDATES["zero_stage"](s) == (1, 0, 2, 3)


def test_nothing_replicated_tries_none_or_one():
    """tp 8, ep 8 (etp 1): expert dp = 8 / 8 = 1 and dp·cp = 1 — nothing to shard: ZeRO-0, or ZeRO-1 as stated
    by some stacks (a no-op)."""
    s = _mixtral(tp=8, dp=1, ep=8, etp=1)
    assert s.plan.expert_dp == 1
    assert CANDIDATES["zero_stage"](s) == (0, 1)


def test_a_dense_model_keys_on_dp_and_cp_only():
    s = load_scenario("llama3-8b-h100-8")
    s = dataclasses.replace(s, plan=dataclasses.replace(s.plan, tp=8, dp=1))
    assert CANDIDATES["zero_stage"](s) == (0, 1)


def test_an_expert_group_of_two_is_enough_to_shard_over():
    """tp 8, ep 4 (etp 1): expert dp = 8 / 4 = 2 — two replicas of each expert's state to shard."""
    s = _mixtral(tp=8, dp=1, ep=4, etp=1)
    assert s.plan.expert_dp == 2
    assert CANDIDATES["zero_stage"](s) == (1, 0, 2, 3)
