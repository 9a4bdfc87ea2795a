"""The disaggregation what-if splits the replicas as the two phases' rates ask (DistServe's replication step,
schedule.serving_steady.matched_split), not a fixed quarter: long prompts with short outputs want most instances
prefilling, short prompts with long outputs most decoding."""
from __future__ import annotations

import pytest

from narrowpath.analysis.serving_whatif import candidates, matched_prefill_replicas
from narrowpath.catalog import model, system
from narrowpath.schedule.serving_run import simulate
from narrowpath.schedule.serving_steady import decode_batch, decode_rate_per_s, matched_split, prefill_rate_per_s
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario


def _run(isl, osl, replicas=8):
    plan = ServingPlan(tp=1, replicas=replicas)
    load = Load(arrival="poisson", rate_per_s=10.0, input_tokens=isl, output_tokens=osl, num_requests=60)
    return simulate(ServingScenario(name="w", system=system("dgx-h100"), model=model("llama3-8b"), plan=plan,
                                    load=load, num_gpus=plan.num_gpus))


@pytest.fixture(scope="module")
def runs():
    return {"prompt-heavy": _run(4096, 64), "output-heavy": _run(256, 1024)}


def test_the_split_follows_the_phases(runs):
    heavy, light = matched_prefill_replicas(runs["prompt-heavy"]), matched_prefill_replicas(runs["output-heavy"])
    assert 1 <= light < 4 < heavy <= 7  # a quarter of 8 would be 2 for both


def test_the_split_is_matched_split_of_the_run_s_own_rates(runs):
    """The decode rate at the batch the lane's KV cache holds: 4,096 + 64-token requests fill it at 111 of the 256
    the limit allows (as the steady state and the search price a decode instance)."""
    run = runs["prompt-heavy"]
    lim = run.limits
    batch = decode_batch(lim, 1, lim.max_batch, 4096, 64, run.scenario.plan.admission)
    assert batch < lim.max_batch
    pre = prefill_rate_per_s(run.cost, 1, lim.max_num_tokens, 4096)
    dec = decode_rate_per_s(run.cost, 1, batch, 4096, 64)
    assert matched_prefill_replicas(run) == matched_split(8, 1, 1, dec, pre)[1]


def test_a_kv_bound_decode_gets_more_decode_instances():
    """1,024 + 512 tokens on eight Llama-3 8B instances: with the whole KV share 3 of 8 prefill; with 5 % of the
    free memory for KV a lane decodes 19 sequences, not 256, and the split gives decoding all but one instance
    (priced at the nominal limit it stayed at 3 prefill, overloading the decode pool)."""
    def split(fraction):
        plan = ServingPlan(tp=1, replicas=8, kv_memory_fraction=fraction)
        load = Load(arrival="poisson", rate_per_s=10.0, input_tokens=1024, output_tokens=512, num_requests=60)
        return matched_prefill_replicas(simulate(ServingScenario(name="w", system=system("dgx-h100"),
                                                                 model=model("llama3-8b"), plan=plan, load=load,
                                                                 num_gpus=8)))
    assert split(0.9) == 3 and split(0.05) == 1


def test_one_instance_is_split_over_two(runs):
    assert matched_prefill_replicas(_run(1024, 128, replicas=1)) == 1


def test_the_what_if_states_the_matched_split(runs):
    scn = runs["prompt-heavy"].scenario
    out, _ = candidates(scn, False, prefill_replicas=6)
    name, change, alt = next(c for c in out if c[0] == "disaggregation")
    assert change == "6 prefill + 2 decode instances, matched to the two phases' rates"
    assert alt.plan.prefill_replicas == 6 and alt.plan.replicas == 8 and alt.num_gpus == 8
    out, _ = candidates(scn, False)  # no split given: a quarter, as before
    change = next(c[1] for c in out if c[0] == "disaggregation")
    assert change == "2 prefill + 6 decode instances"
    out, _ = candidates(scn, False, prefill_replicas=8)  # not a split of 8: the quarter rule
    assert next(c[1] for c in out if c[0] == "disaggregation") == "2 prefill + 6 decode instances"
