"""The `ep_in_scale_up` what-if changes what places the expert groups — etp, or the order of a stage's ranks — not
`ep`'s place in `plan.placement`, which places nothing (it re-predicted the same plan: "no gain" beside "EP groups
of 8 span 2 scale-up domains"). From the fifty-fourth session's end-to-end review."""
from __future__ import annotations

import dataclasses


from narrowpath.analysis import analyze
from narrowpath.catalog import load_scenario, model, system
from narrowpath.network.placement import group_span
from narrowpath.schedule import predict
from narrowpath.spec.plan import Plan
from narrowpath.spec.scenario import Scenario
from narrowpath.analysis.context import build_context
from narrowpath.analysis.remedies import plan_candidates


def _mixtral(num_gpus: int, **plan) -> Scenario:
    p = Plan(mbs=1, zero_stage=1, recompute="selective", **plan)
    return Scenario(name="mx", system=system("dgx-h100"), model=model("mixtral-8x7b"), plan=p, num_gpus=num_gpus)


def _what_if(scn, change="ep_in_scale_up"):
    got = {w.change: w for w in analyze(scn).verdict.what_ifs}
    return got.get(change)


def test_ep_place_in_the_placement_places_nothing():
    a = _mixtral(32, tp=1, pp=2, dp=16, ep=8, gbs=256)
    b = dataclasses.replace(a, plan=dataclasses.replace(a.plan, placement=("tp", "cp", "dp", "ep", "pp")))
    assert predict(a).step_time_s == predict(b).step_time_s


def test_expert_tp_overflowing_the_domain_is_set_to_one():
    """tp 2 (etp = tp) × ep 8 = 16 ranks an EP group spans, on 8-GPU nodes: whole experts per rank fit it in one."""
    scn = _mixtral(16, tp=2, dp=8, ep=8, gbs=256, sequence_parallel=True, placement=("dp", "tp", "cp", "ep", "pp"))
    assert group_span(scn.plan, scn.system, "ep").crosses_scale_out
    w = _what_if(scn)
    assert w is not None and w.scenario.plan.etp == 1
    assert not group_span(w.scenario.plan, scn.system, "ep").crosses_scale_out
    assert w.step_s < predict(scn).step_time_s  # the all-to-all leaves the NICs


def test_a_spread_stage_is_put_back_in_megatron_order():
    """pp fastest: a stage's ranks are every other rank, so an EP group of 8 spans 16 ranks, two nodes."""
    scn = _mixtral(32, tp=1, pp=2, dp=16, ep=8, gbs=256, placement=("pp", "tp", "cp", "ep", "dp"))
    assert group_span(scn.plan, scn.system, "ep").crosses_scale_out
    w = _what_if(scn)
    assert w is not None and w.scenario.plan.placement == ("tp", "cp", "ep", "dp", "pp")
    assert not group_span(w.scenario.plan, scn.system, "ep").crosses_scale_out


def test_no_candidate_when_ep_exceeds_the_domain():
    ds = load_scenario("deepseek-v3-h800-2048")  # ep 64 on 8-GPU nodes: no plan change brings it inside a domain
    assert ds.plan.ep > ds.system.job_domain(ds.num_gpus)
    assert not [c for c in plan_candidates(build_context(predict(ds))) if c.change == "ep_in_scale_up"]


def test_a_group_that_would_fit_gets_the_order_not_expert_tp_1():
    """ep·etp = 2 × 4 = 8 = the domain: only the order (pp fastest) spreads the group, so Megatron's order — which
    fits and is faster — is offered, not whole experts per rank, which needed 87.7 of 85.9 GB (review of the
    change)."""
    scn = _mixtral(64, tp=4, etp=4, ep=2, pp=2, dp=8, gbs=256, sequence_parallel=True,
                   placement=("pp", "tp", "cp", "ep", "dp"))
    assert group_span(scn.plan, scn.system, "ep").crosses_scale_out
    w = _what_if(scn)
    assert w is not None and w.scenario.plan.etp == 4 and w.scenario.plan.placement == ("tp", "cp", "ep", "dp", "pp")
    assert w.fits and w.step_s < predict(scn).step_time_s


def test_the_communication_budget_agrees():
    """The communication budget's 'nearer' what-ifs moved `ep` in the placement too ("no gain") beside the
    verdict's 612 ms: it now runs the same change."""
    scn = _mixtral(32, tp=1, pp=2, dp=16, ep=8, gbs=256, placement=("pp", "tp", "cp", "ep", "dp"))
    a = analyze(scn)
    (near,) = [w for w in a.communication.nearer_tier if w.change == "ep_nearer"]
    (verdict,) = [w for w in a.verdict.what_ifs if w.change == "ep_in_scale_up"]
    assert near.step_s == verdict.step_s < a.prediction.step_time_s
