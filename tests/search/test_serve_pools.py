"""`search --serve` pairs prefill instances of a layout of their own with decode instances (DistServe's placement,
Zhong et al. OSDI 2024 §4.1): each phase's capacity per instance read off the first pass, the best layouts of each
phase paired, instance counts matched to the two rates on the GPUs given, then served at the steady state."""
from __future__ import annotations

import dataclasses
import json

import pytest

from narrowpath.catalog import model, system
from narrowpath.cli.main import main
from narrowpath.schedule.serving_steady import steady_lane
from narrowpath.search.serve_space import PhaseCapacity, ServeSpace, count_plans, pool_pairs, search_serve
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario, serving_consistency


def _cap(tp, dp, pre_per_s, pre_s, decode):
    return PhaseCapacity(ServingPlan(tp=tp, dp=dp, ep=dp), pre_per_s, pre_s, 0, decode)


def test_pool_pairs_pick_each_phase_by_its_own_capacity():
    """8 GPUs, TTFT 1 s, TPOT 50 ms. Prefill per GPU: A (tp1) 10, B (tp2) 8 / 2 = 4, C (tp4) 30 / 4 = 7.5 but its
    iteration takes 2 s (misses the TTFT). Decode per GPU at a batch whose step fits 50 ms: A 1 / 1, B 6 / 2 = 3
    (batch 64 at 80 ms left out), C 8 / 4 = 2. With one prefill layout and two decode layouts: A prefills, paired
    with B (batch 16 only) then C; A does not decode beside itself."""
    a = _cap(1, 1, 10.0, 0.1, {16: (1.0, 0.01), 64: (0.5, 0.2)})
    b = _cap(2, 1, 8.0, 0.2, {16: (6.0, 0.03), 64: (9.0, 0.08)})
    c = _cap(4, 1, 30.0, 2.0, {16: (8.0, 0.04)})
    space = ServeSpace(model("llama3-8b"), system("dgx-h100"), 8, Load(input_tokens=512, output_tokens=64),
                       ServingPlan(), prefill_layouts=1, decode_layouts=2)
    pairs = pool_pairs(space, [a, b, c], 1.0, 0.05)
    assert [(d.layout.tp, p.layout.tp, ok) for d, p, ok in pairs] == [(2, 1, (16,)), (4, 1, (16,))]
    # the room left decides too: a 7-GPU decode layout (the best decoder, 100 / 7 per GPU) pairs with A's 1-GPU
    # prefill instances but not with B's 2 (9 > 8 GPUs), which take the next two decode layouts, C and A
    big = _cap(7, 1, 1.0, 0.1, {16: (100.0, 0.01)})
    space2 = dataclasses.replace(space, prefill_layouts=2)
    assert [(d.layout.tp, p.layout.tp) for d, p, _ in pool_pairs(space2, [a, b, c, big], 1.0, 0.05)] == \
        [(7, 1), (2, 1), (4, 2), (1, 2)]


SPACE = ServeSpace(model("llama3-8b"), system("dgx-h100"), 4, Load(input_tokens=512, output_tokens=64),
                   ServingPlan(), batches=(16, 64))


@pytest.fixture(scope="module")
def searched():
    return search_serve(SPACE, 5.0, 0.05)


def test_search_serves_prefill_pools_of_their_own_layout(searched):
    own = [c for c in searched.ranked + searched.missed if c.plan.prefill_pool() is not None]
    assert own, "no disaggregated plan with a prefill layout of its own"
    assert searched.num_plans == count_plans(SPACE) + len([c for c in searched.ranked + searched.missed
                                                           if c.plan.prefill_pool() is not None])
    for c in own:
        p = c.plan
        assert not serving_consistency(SPACE.model, p, 4, SPACE.system)
        assert p.num_gpus == 4 and p.prefill_replicas >= 1 and p.replicas > p.prefill_replicas
        assert (p.prefill_tp, p.prefill_dp, p.prefill_ep, p.prefill_pp) != (p.tp, p.dp, p.ep, p.pp)


def test_a_paired_plan_s_figure_is_its_own_steady_state(searched):
    """The search's figure for a paired plan is the steady state of that plan asked for directly (no state of the
    search — a reused cost model, the matched counts — leaks into it)."""
    c = next(c for c in searched.ranked + searched.missed if c.plan.prefill_pool() is not None)
    scn = ServingScenario(name="x", system=SPACE.system, model=SPACE.model, plan=c.plan, load=SPACE.load,
                          num_gpus=4)
    s = steady_lane(scn)
    assert s.output_tokens_per_s / 4 == pytest.approx(c.output_tokens_per_s_per_gpu, rel=1e-9)
    assert s.ttft_s["p90"] == pytest.approx(c.ttft_s, rel=1e-9) and s.tpot_s["p90"] == pytest.approx(c.tpot_s,
                                                                                                     rel=1e-9)


def test_no_pools_of_their_own_when_disaggregation_is_off_or_none_asked():
    for space in (dataclasses.replace(SPACE, disaggregation=False), dataclasses.replace(SPACE, prefill_layouts=0)):
        res = search_serve(space, 5.0, 0.05)
        assert res.num_plans == count_plans(space)
        assert not any(c.plan.prefill_pool() is not None for c in res.ranked + res.missed)


def test_cli_shows_the_prefill_layout(capsys):
    args = ["search", "--serve", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "4", "--input-len", "512",
            "--output-len", "64", "--jobs", "1", "--slo-ttft", "5", "--slo-tpot", "0.05", "--top", "500"]
    assert main(args + ["--json"]) == 0
    ranked = json.loads(capsys.readouterr().out)["ranked"]
    own = [r["plan"] for r in ranked if r["plan"]["prefill_tp"]]
    assert own and all([q[f"prefill_{k}"] for k in ("tp", "dp", "ep", "pp")] != [q[k] for k in ("tp", "dp", "ep", "pp")]
                       for q in own)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert " × tp" in out


def test_a_small_base_token_budget_still_pairs():
    """The prefill pool takes its stack's own budget (a prefill-only instance is given no limits), so a base plan
    held to 256 tokens per iteration — below that budget, so the pool's cost model is built apart — still gets
    pairs (a review found none: the pool's cost was built for the whole deployment's GPU count and failed)."""
    space = dataclasses.replace(SPACE, base=ServingPlan(max_num_tokens=256))
    res = search_serve(space, 5.0, 0.05)
    assert res.num_plans > count_plans(space)
    assert any(c.plan.prefill_pool() is not None for c in res.ranked + res.missed)


def test_no_pairs_for_a_static_batch():
    """A fixed batch runs static sessions, which cannot be disaggregated: no pair is tried (they would all fail)."""
    space = dataclasses.replace(SPACE, load=Load(arrival="fixed-batch", batch_size=8, input_tokens=512,
                                                 output_tokens=64, num_requests=8))
    res = search_serve(space, 5.0, 0.5)
    assert res.num_plans == count_plans(space)


def test_pools_pair_only_with_the_same_expert_copies():
    """Both pools keep the plan's redundant expert copies, so a decode layout with copies (ep 4) does not pair with
    a prefill layout without (ep 1): the prefill pool would refuse them."""
    with_copies = PhaseCapacity(ServingPlan(tp=1, dp=4, ep=4, expert_balance="eplb", redundant_experts=8), 1.0, 0.1,
                                0, {16: (5.0, 0.01)})
    without = PhaseCapacity(ServingPlan(tp=1, dp=1, ep=1), 10.0, 0.1, 0, {16: (1.0, 0.01)})
    other = PhaseCapacity(ServingPlan(tp=1, dp=2, ep=2, expert_balance="eplb", redundant_experts=8), 0.5, 0.1,
                          0, {16: (0.1, 0.01)})
    space = ServeSpace(model("mixtral-8x7b"), system("dgx-h100"), 8, Load(input_tokens=512, output_tokens=64),
                       ServingPlan(), prefill_layouts=3, decode_layouts=3)
    pairs = [(d.layout.dp, p.layout.dp) for d, p, _ in pool_pairs(space, [with_copies, without, other], 1.0, 0.05)]
    assert (4, 1) not in pairs and (1, 4) not in pairs and (1, 2) not in pairs
    assert (4, 2) in pairs and (2, 4) in pairs


def test_decode_capacity_is_what_the_kv_cache_holds():
    """Llama-3 70B at 8,192 + 1,024 tokens on two H100s as two pipeline stages (bf16): a lane's KV cache holds a
    handful of such sequences, so batch limits 16 and 64 decode the same batch — the same step and rate — and far
    less per GPU than a tp 4 instance's (a review found the tp 1 · pp 2 layout picked as the best decoder at its
    nominal 64, then its paired plan overloaded: TTFT 1,447 s)."""
    from narrowpath.search.serve_space import _capacity, _layout_cost
    space = ServeSpace(model("llama3-70b"), system("dgx-h100"), 8, Load(input_tokens=8192, output_tokens=1024),
                       ServingPlan(), batches=(16, 64))
    caps = {}
    for tp, pp in ((1, 2), (4, 1)):
        lay = ServingPlan(tp=tp, pp=pp, replicas=8 // (tp * pp))
        cost, _ = _layout_cost(space, lay, 64, None)
        caps[(tp, pp)] = _capacity(space, lay, cost, (16, 64), None)
    starved = caps[(1, 2)].decode
    assert starved[16] == starved[64]
    assert starved[64][0] / 2 < caps[(4, 1)].decode[64][0] / 4


def test_prefill_budgets_halve_down_to_one_prompt():
    from narrowpath.search.serve_space import prefill_budgets
    assert prefill_budgets(8192, 1024) == [8192, 4096, 2048, 1024]
    assert prefill_budgets(8192, 1500) == [8192, 4096, 2048]
    assert prefill_budgets(8192, 20000) == [8192]  # a prompt longer than the budget: chunked at the stack's


def test_a_tight_ttft_takes_a_smaller_prefill_budget():
    """Llama-3 8B on H100, 1,024-token prompts: one instance's full iteration at the default stack's 8,192-token
    budget takes longer than a 50 ms TTFT; the screen takes the largest halving that fits, the paired plans carry
    it as the prefill pool's own token budget, and pairs exist where the stack's budget would have left none."""
    from narrowpath.search.serve_space import _capacity, _layout_cost
    space = ServeSpace(model("llama3-8b"), system("dgx-h100"), 4, Load(input_tokens=1024, output_tokens=64),
                       ServingPlan(), batches=(16, 64))
    lay = ServingPlan(tp=1, replicas=4)
    cost, _ = _layout_cost(space, lay, 64, None)
    loose, tight = _capacity(space, lay, cost, (16, 64), None), _capacity(space, lay, cost, (16, 64), None, 0.05)
    assert loose.prefill_tokens == 0 and loose.prefill_iteration_s > 0.05
    assert 1024 <= tight.prefill_tokens < 8192 and tight.prefill_iteration_s <= 0.05
    res = search_serve(space, 0.05, 0.05)
    own = [c.plan for c in res.ranked + res.missed if c.plan.prefill_pool() is not None]
    assert own and all(p.prefill_max_num_tokens and p.prefill_max_num_tokens < 8192 for p in own)


def test_cli_shows_a_prefill_pool_s_own_budget(capsys):
    args = ["search", "--serve", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "4", "--input-len", "1024",
            "--output-len", "64", "--jobs", "1", "--slo-ttft", "0.1", "--slo-tpot", "0.05", "--top", "500"]
    assert main(args + ["--json"]) == 0
    plans = [r["plan"] for r in json.loads(capsys.readouterr().out)["ranked"] if r["plan"]["prefill_tp"]]
    assert plans and all(0 < q["prefill_max_num_tokens"] < 8192 for q in plans)
    assert main(args) == 0
    assert " tok" in capsys.readouterr().out
