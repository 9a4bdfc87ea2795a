"""Ranking: the search's order is the step model's order, over plans that fit; the base plan is placed right."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario
from narrowpath.errors import NarrowpathError
from narrowpath.schedule.step import predict
from narrowpath.search import SearchSpace, candidate_plans, search
from narrowpath.search.rank import _without_recompute


@pytest.fixture(scope="module")
def small():
    """llama3-8b on one DGX H100 with a few knobs pinned, the first search's knobs only: a space small enough to
    brute-force."""
    scn = load_scenario("llama3-8b-h100-8")
    space = SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, {"cp": 1, "vpp": 1}, "basic")
    return scn, space


def test_best_plan_is_the_fastest_that_fits(small):
    scn, space = small
    res = search(scn, space, top=5)
    brute = []
    for plan in candidate_plans(space):
        p = predict(dataclasses.replace(scn, plan=plan))
        if p.memory.fits:
            brute.append(p.step_time_s)
    assert res.num_plans == len(list(candidate_plans(space)))
    assert res.num_fit == len(brute)
    assert res.ranked[0].step_time_s == pytest.approx(min(brute), rel=1e-12)
    times = [c.step_time_s for c in res.ranked]
    assert times == sorted(times)
    assert all(c.fits for c in res.ranked)
    assert all(c.energy_per_step_j and c.energy_per_step_j > 0 for c in res.ranked[:5])


def test_base_plan_rank_and_gain(small):
    scn, space = small
    res = search(scn, space)
    assert res.baseline is not None and res.baseline.plan == scn.plan
    if res.baseline.fits:
        assert res.baseline_rank == 1 + sum(c.step_time_s < res.baseline.step_time_s for c in res.ranked)
        assert res.ranked[0].step_time_s <= res.baseline.step_time_s
    else:
        assert res.baseline_rank is None


def test_catalog_scenarios_are_never_better_than_the_search(gpt175_a100):
    space = SearchSpace(gpt175_a100.model, gpt175_a100.system, gpt175_a100.num_gpus, gpt175_a100.plan.gbs,
                        gpt175_a100.plan, {"tp": 8, "pp": 8})
    res = search(gpt175_a100, space, top=3)
    assert res.baseline_rank is not None or res.baseline_rank_beyond == 10_000  # fits; over 10,000 plans faster
    assert res.ranked[0].step_time_s <= predict(gpt175_a100).step_time_s


@pytest.mark.parametrize("objective,metric", [("energy", "energy_per_step_j"), ("memory", "memory_bytes")])
def test_other_objectives_sort_by_their_metric(small, objective, metric):
    scn, space = small
    res = search(scn, space, objective=objective, top=3)
    values = [getattr(c, metric) for c in res.ranked]
    assert all(v is not None for v in values) and values == sorted(values)


def test_more_required_headroom_keeps_a_subset(small):
    scn, space = small
    loose = search(scn, space, top=1)
    tight = search(scn, space, top=1, min_free_bytes=30e9)
    assert tight.num_fit <= loose.num_fit
    assert {c.plan for c in tight.ranked} <= {c.plan for c in loose.ranked}
    assert all(c.headroom_bytes >= 30e9 for c in tight.ranked)


def test_equivalent_recompute_shown_once():
    """Plans that compute and hold the same are shown once. Selective recompute of the attention core re-runs a flash
    kernel's forward (Megatron-Core checkpoints the core whatever the kernel) and saves next to nothing beside it, so
    it is no longer `recompute none` in disguise: where it is ranked, it is slower than its `none` twin."""
    scn = load_scenario("llama3-8b-h100-8")
    space = SearchSpace(scn.model, scn.system, 8, scn.plan.gbs, scn.plan, {"cp": 1, "vpp": 1, "tp": 1, "pp": 1})
    res = search(scn, space)
    keys = [(_without_recompute(c.plan), c.step_time_s, c.memory_bytes) for c in res.ranked]
    assert len(keys) == len(set(keys))
    none = {_without_recompute(c.plan): c.step_time_s for c in res.ranked if c.plan.recompute == "none"}
    for c in res.ranked:
        if c.plan.recompute == "selective" and _without_recompute(c.plan) in none:
            assert c.step_time_s > none[_without_recompute(c.plan)]


def test_errors(small):
    scn, space = small
    with pytest.raises(NarrowpathError, match="more than 3 plans"):
        search(scn, space, max_plans=3)
    with pytest.raises(NarrowpathError, match="objective"):
        search(scn, space, objective="cost")
    with pytest.raises(NarrowpathError, match="mode: 'inference'"):
        search(dataclasses.replace(scn, mode="inference"), space)


def test_worker_processes_give_the_same_ranking(small, monkeypatch):
    monkeypatch.setattr("narrowpath.search.rank.usable_cpus", lambda: 2)  # workers even on a 1-CPU runner
    scn, space = small
    one = search(scn, space, top=3)
    two = search(scn, space, top=3, jobs=2)
    assert [c.plan for c in one.ranked] == [c.plan for c in two.ranked]
    assert [c.step_time_s for c in one.ranked] == [c.step_time_s for c in two.ranked]
    assert (one.num_plans, one.num_fit, one.baseline_rank) == (two.num_plans, two.num_fit, two.baseline_rank)


def test_own_plan_rank_counts_only_plans_better_on_the_objective():
    """ZeRO-1 and ZeRO-2 with one micro-batch cost the same time, ZeRO-2 less memory: the table lists the ZeRO-2
    plan first, but the base plan's competition rank counts only plans that are faster, so a tie shares the rank."""
    scn = load_scenario("llama3-8b-h100-8")
    plan = dataclasses.replace(scn.plan, tp=4, dp=2, mbs=8, gbs=16, zero_stage=1, recompute="full",
                               sequence_parallel=True)
    scn = dataclasses.replace(scn, plan=plan)
    space = SearchSpace(scn.model, scn.system, 8, plan.gbs, plan,
                        {"tp": 4, "pp": 1, "cp": 1, "mbs": 8, "recompute": "full"})
    res = search(scn, space)
    twin = next(c for c in res.ranked if c.plan == dataclasses.replace(plan, zero_stage=2))
    assert twin.step_time_s == res.baseline.step_time_s and twin.memory_bytes < res.baseline.memory_bytes
    position = [c.plan for c in res.ranked].index(plan) + 1
    faster = sum(c.step_time_s < res.baseline.step_time_s for c in res.ranked)
    assert res.baseline_rank == faster + 1 < position


def test_own_plan_outside_the_pins_is_priced_and_ranked():
    """Pins that exclude the scenario's plan still show it, priced apart and ranked against the pinned plans."""
    scn = load_scenario("llama3-8b-h100-8")  # tp 1
    space = SearchSpace(scn.model, scn.system, 8, scn.plan.gbs, scn.plan, {"tp": 2, "cp": 1, "vpp": 1})
    res = search(scn, space, top=2)
    assert not res.baseline_in_space and res.baseline is not None and res.baseline.plan == scn.plan
    assert scn.plan not in {c.plan for c in res.ranked}
    assert res.baseline.step_time_s == predict(scn).step_time_s
    if res.baseline.fits:
        assert res.baseline_rank == 1 + sum(c.step_time_s < res.baseline.step_time_s for c in res.ranked)
        assert res.baseline.energy_per_step_j > 0
    assert res.pinned == (("cp", 1), ("tp", 2), ("vpp", 1))


def test_energy_rank_ties_on_energy():
    scn = load_scenario("llama3-8b-h100-8")
    space = SearchSpace(scn.model, scn.system, 8, scn.plan.gbs, scn.plan, {"cp": 1, "vpp": 1, "tp": 1, "pp": 1})
    res = search(scn, space, objective="energy", top=2)
    assert res.baseline_rank == 1 + sum(c.energy_per_step_j < res.baseline.energy_per_step_j * (1 - 1e-9)
                                        for c in res.ranked)


def test_zero2_trades_traffic_for_memory_only_with_accumulation():
    """ZeRO-2 at one micro-batch: ZeRO-1's time with less memory. With gradient accumulation it reduce-scatters
    after every backward (DeepSpeed), so it may cost time; the search tries it either way (search/space.py)."""
    scn = load_scenario("llama3-8b-h100-8")
    one = dataclasses.replace(scn.plan, mbs=8, zero_stage=1, recompute="none")
    p1 = predict(dataclasses.replace(scn, plan=one))
    p2 = predict(dataclasses.replace(scn, plan=dataclasses.replace(one, zero_stage=2)))
    assert one.num_microbatches == 1
    assert p2.step_time_s == p1.step_time_s and p2.memory.total_bytes < p1.memory.total_bytes
    acc = dataclasses.replace(one, mbs=1)  # 8 micro-batches
    a1 = predict(dataclasses.replace(scn, plan=acc))
    a2 = predict(dataclasses.replace(scn, plan=dataclasses.replace(acc, zero_stage=2)))
    assert acc.num_microbatches > 1 and a2.step_time_s >= a1.step_time_s
    assert any(t.name == "dp.zero2_grad_reduce_scatter" for t in a2.transfers)


def test_jobs_capped_at_usable_cpus(small, monkeypatch):
    """`--jobs 200` on a small machine must not start 200 worker processes (each re-holds the interpreter and the
    space: a shared VM ran out of memory): one usable CPU prices in-process."""
    import concurrent.futures

    def no_pool(*a, **k):
        raise AssertionError("a process pool was started")

    monkeypatch.setattr("narrowpath.search.rank.usable_cpus", lambda: 1)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", no_pool)
    scn, space = small
    assert search(scn, space, top=1, jobs=200).ranked
