"""The search space: every plan consistent, each once, pins respected, the base plan always included."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario, model, system
from narrowpath.errors import SpecError
from narrowpath.search.space import SearchSpace, candidate_plans, divisors, knob_values
from narrowpath.spec import Plan
from narrowpath.spec.scenario import consistency_errors


def _space(scn, **pinned):
    return SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, pinned)


@pytest.mark.parametrize("n", [1, 2, 12, 36, 97, 1024])
def test_divisors(n):
    assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


@pytest.mark.parametrize("scenario", ["llama3-8b-h100-8", "gpt3-175b-a100-1024", "gnmt-lstm-a100-8"])
def test_every_plan_is_consistent_and_unique(scenario):
    scn = load_scenario(scenario)
    plans = list(candidate_plans(_space(scn)))
    assert plans and len(plans) == len(set(plans))
    for p in plans:
        assert p.num_gpus == scn.num_gpus and p.gbs == scn.plan.gbs
        assert not consistency_errors(scn.model, p, scn.num_gpus, scn.system)
        assert p.tp <= scn.system.scale_up_domain or p == scn.plan
        if p != scn.plan:
            assert p.sequence_parallel == (p.tp > 1 and scn.model.arch != "lstm")
            shards = p.dp * p.cp
            allowed = {0} if shards == 1 or scn.model.arch == "lstm" else {1, 2, 3}
            assert p.zero_stage in allowed
        # fixed knobs come from the base plan
        assert (p.precision, p.attention, p.dp_overlap, p.tp_comm_overlap, p.placement) == \
            (scn.plan.precision, scn.plan.attention, scn.plan.dp_overlap, scn.plan.tp_comm_overlap, scn.plan.placement)
    assert scn.plan in plans


def test_space_covers_the_obvious_plans():
    scn = load_scenario("llama3-8b-h100-8")  # 8 GPUs, gbs 64 (see catalog)
    plans = set(candidate_plans(_space(scn)))
    want = dataclasses.replace(scn.plan, tp=8, pp=1, dp=1, cp=1, vpp=1, mbs=1, zero_stage=0, recompute="full",
                               sequence_parallel=True)
    assert want in plans
    want = dataclasses.replace(scn.plan, tp=2, pp=2, dp=2, cp=1, vpp=2, mbs=2, zero_stage=1, recompute="selective",
                               sequence_parallel=True)
    assert (scn.plan.gbs % 4) or want in plans


def test_pins_restrict_every_plan():
    scn = load_scenario("gpt3-175b-a100-1024")
    plans = list(candidate_plans(_space(scn, tp=8, recompute="full", dp=16)))
    assert plans and all(p.tp == 8 and p.recompute == "full" and p.dp == 16 for p in plans)
    assert knob_values(_space(scn, tp=8))["tp"] == (8,)


def test_pin_to_a_non_default_value_is_searched():
    scn = load_scenario("llama3-8b-h100-8")
    plans = list(candidate_plans(_space(scn, zero_stage=2, sequence_parallel=False)))
    assert plans and all(p.zero_stage == 2 and not p.sequence_parallel for p in plans)


def test_moe_space_searches_expert_parallelism():
    m, sysm = model("mixtral-8x7b"), system("dgx-h100")
    base = Plan(tp=1, pp=1, dp=64, mbs=1, gbs=256)
    plans = list(candidate_plans(SearchSpace(m, sysm, 64, 256, base)))
    eps = {p.ep for p in plans}
    assert {1, 2, 4, 8} <= eps
    assert all(p.dp % p.ep == 0 and m.moe.num_experts % p.ep == 0 for p in plans)


def test_lstm_space_searches_only_what_the_recurrent_workload_models():
    """The LSTM workload has no pipeline, CP, SP, recompute or ZeRO sharding: those knobs stay off (a ZeRO-3 LSTM
    plan got sharded memory at no cost in time and ranked first); tp and dp are still searched."""
    scn = load_scenario("gnmt-lstm-a100-8")
    plans = list(candidate_plans(_space(scn)))
    assert all(p.pp == 1 and p.cp == 1 for p in plans)
    assert all(p.zero_stage == 0 and p.recompute == "none" and not p.sequence_parallel for p in plans)
    assert {p.tp for p in plans} >= {1, 2, 4, 8}


def test_uneven_pipeline_splits_are_searched():
    """Llama 3 405B (126 layers) trained on 16 pipeline stages (Dubey et al. 2024 §3.3); the model prices uneven
    splits, so pp need only be at most the layer count. Interleaving still splits the layers evenly."""
    scn = load_scenario("llama3-405b-h100-16k")
    base = Plan(tp=8, pp=1, dp=16, mbs=1, gbs=64, zero_stage=1, sequence_parallel=True)
    plans = list(candidate_plans(SearchSpace(scn.model, scn.system, 128, 64, base,
                                             {"tp": 8, "recompute": "full", "mbs": 1})))
    assert {p.pp for p in plans} == {1, 2, 4, 8, 16}
    assert all(p.vpp == 1 or scn.model.layers % (p.pp * p.vpp) == 0 for p in plans)
    assert knob_values(_space(load_scenario("llama3-8b-h100-8")))["pp"] == (1, 2, 4, 8)


def test_zero_stages_tried():
    """ZeRO-0 only where there is nothing to shard over; else 1, 2 (priced with its per-micro-batch
    reduce-scatter under accumulation) and 3, with or without gradient accumulation."""
    scn = load_scenario("llama3-8b-h100-8")
    plans = list(candidate_plans(_space(scn, tp=8, pp=1, cp=1)))  # dp 1: nothing to shard
    assert {p.zero_stage for p in plans} == {0}
    plans = list(candidate_plans(_space(scn, tp=1, pp=1, cp=1)))  # dp 8, gbs 64: mbs 8 gives one micro-batch
    assert {p.zero_stage for p in plans if p.num_microbatches == 1} == {1, 2, 3}
    assert {p.zero_stage for p in plans if p.num_microbatches > 1} == {1, 2, 3}


@pytest.mark.parametrize("field,kw,msg", [
    ("search.pinned", {"pinned": {"tensor": 2}}, "unknown knob"),
    ("search.num_gpus", {"num_gpus": 0}, "must be >= 1"),
    ("search.gbs", {"gbs": 0}, "must be >= 1"),
])
def test_bad_space_names_the_field(field, kw, msg):
    scn = load_scenario("llama3-8b-h100-8")
    args = dict(model=scn.model, system=scn.system, num_gpus=8, gbs=64, base=scn.plan) | kw
    with pytest.raises(SpecError, match=msg) as e:
        SearchSpace(**args)
    assert field in str(e.value)
