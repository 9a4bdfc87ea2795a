"""The search's candidate space, from the fifty-third session's review of the search against predict: a
deduplicating MoE dispatch inside one scale-up domain (priced per destination rank since the fifty-second session,
so never slower there, but only tried when the ep group left its domain), and a base plan with etp = tp (the
enumeration writes it as etp 0) appended as a second copy of a plan the table holds."""
from __future__ import annotations

import dataclasses

from narrowpath.network.placement import group_span
from narrowpath.schedule.step import predict
from narrowpath.search import SearchSpace, search
from narrowpath.search.each import scenario_of
from narrowpath.search.space import KNOBS
from narrowpath.search.table import build_table
from tests.search.scenarios import mixtral16


def _base(**kw):
    s = mixtral16()
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, **kw))


def test_inside_one_domain_the_deduplicating_dispatch_is_tried_and_wins():
    """Mixtral 8x7B on two DGX H100 with an all-to-all base plan: every plan whose ep group stays inside one
    8-GPU NVLink domain carries the deduplicating dispatch (a token once to each rank holding any of its two
    experts: 8·(1 − C(7, 2)/C(8, 2)) = 2 of 2 copies at ep 8 — equal — and 1.75 of 2 at ep 4) where a rank holds
    more than one expert, and the search's best plan is no slower than the same plan with the other dispatch, as
    predict prices both."""
    scn = _base(ep_dispatch="all_to_all")
    pins = dict(tp=2, pp=1, cp=1, mbs=1, zero_stage=1)
    space = SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, pins)
    table = build_table(space)
    inside = [p for p in (table.plan(int(i)) for i in range(len(table)))
              if p.ep > 1 and group_span(p, scn.system, "ep").domains == 1 and p != scn.plan]
    # more than one expert a rank (ep 2, 4): the deduplicating dispatch alone; one a rank (ep 8), where the
    # all-to-all dispatcher sorts nothing and permutes fewer rows than DeepEP receives (permute_traffic), both
    assert inside and {p.ep_dispatch for p in inside if p.ep < 8} == {"dedup"}
    assert {p.ep_dispatch for p in inside if p.ep == 8} == {"dedup", "all_to_all"}
    res = search(scn, space, top=3)
    best = res.ranked[0].plan
    assert best.ep > 1
    flip = {"dedup": "all_to_all", "all_to_all": "dedup"}[best.ep_dispatch]
    other = predict(scenario_of(scn, space, dataclasses.replace(best, ep_dispatch=flip))).step_time_s
    assert res.ranked[0].step_time_s <= other


def test_a_base_plan_with_etp_equal_to_tp_is_the_tables_etp_0_plan():
    """Every knob pinned to the base plan's but etp (base etp 2 = tp 2): the space holds expert_tp 2 (written etp 0)
    and 1 — one plan each —, and the base plan is the etp 0 one, not a copy appended beside it (which counted as a
    plan and a tie)."""
    scn = _base(etp=2)
    b = scn.plan
    pins = {k: getattr(b, k) for k in KNOBS if k != "etp"}
    space = SearchSpace(scn.model, scn.system, scn.num_gpus, b.gbs, b, pins)
    res = search(scn, space, top=5)
    table = build_table(space)
    assert sorted(table.plan(i).expert_tp for i in range(len(table))) == [1, 2] and res.num_plans == 2
    assert res.baseline_ties == 0 and res.baseline_rank == 1 and res.baseline.plan.expert_tp == 2
