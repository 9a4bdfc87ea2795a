"""`search --serve` pairs prefill instances of a layout of their own with decode instances (DistServe's placement,
Zhong et al. OSDI 2024 §4.1): each phase's capacity per instance read off the first pass, the best layouts of each
phase paired, instance counts matched to the two rates on the GPUs given, then served at the steady state."""
from __future__ import annotations

import dataclasses
import json

import pytest

from narrowpath.catalog import model, system
from narrowpath.cli.main import main
from narrowpath.schedule.serving_steady import decode_rate_per_s, matched_split, prefill_rate_per_s, steady_lane
from narrowpath.search.serve_space import PhaseCapacity, ServeSpace, count_plans, pool_pairs, search_serve
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario, serving_consistency


def test_matched_split_by_hand():
    """16 GPUs, decode instances of 4 GPUs at 10 requests/s, prefill instances of 2 GPUs at 7 prompts/s: the exact
    fills are (3 decode, 2 prefill) -> min(14, 30) = 14, (2, 4) -> min(28, 20) = 20 and (1, 6) -> min(42, 10) = 10
    (1, 3, 5 prefill instances leave 14, 10, 6 GPUs, no whole decode instance count): (2, 4)."""
    assert matched_split(16, 4, 2, 10.0, 7.0) == (2, 4)
    assert matched_split(16, 4, 2, 100.0, 1.0) == (1, 6)  # prefill-bound: as many prefill instances as fit
    assert matched_split(16, 4, 2, 1.0, 100.0) == (3, 2)  # decode-bound: the fewest prefill GPUs that leave room
    assert matched_split(5, 2, 2, 1.0, 1.0) is None  # 1 prefill leaves 3 GPUs (odd), 2 leave 1: no exact fill
    assert matched_split(8, 8, 1, 1.0, 1.0) is None  # no room for both
    assert matched_split(8, 2, 2, 2.0, 2.0) == (2, 2)  # (3, 1): min(2, 6) = 2; (2, 2): min(4, 4) = 4; (1, 3): 2
    # a tie goes to the fewer prefill GPUs: 5 GPUs of 1, prefill 3/s, decode 1/s: (4, 1) and (3, 2) both serve 3
    assert matched_split(5, 1, 1, 1.0, 3.0) == (4, 1)


@pytest.mark.parametrize("n,dg,pg,dr,pr", [(16, 4, 2, 3.0, 5.0), (12, 3, 1, 0.5, 0.2), (24, 8, 4, 1.0, 9.0),
                                           (10, 1, 1, 2.0, 3.0)])
def test_matched_split_is_the_best_exact_fill(n, dg, pg, dr, pr):
    """Against every exact fill enumerated independently: none serves a higher rate."""
    got = matched_split(n, dg, pg, dr, pr)
    fills = [(d, p) for p in range(1, n) for d in range(1, n) if d * dg + p * pg == n]
    assert got in fills
    assert min(got[1] * pr, got[0] * dr) == max(min(p * pr, d * dr) for d, p in fills)


class _Cost:
    """A cost model whose every iteration takes `s` seconds (records what it was asked)."""

    def __init__(self, s):
        self.s, self.calls = s, []

    def iteration_s(self, *args):
        self.calls.append(args)
        return self.s


def test_phase_rates_by_hand():
    """Prefill: 2 lanes, a budget of 8,192 tokens of 1,024-token prompts in 0.5 s per iteration -> 2 · 8 / 0.5 = 32
    prompts/s, priced as one iteration of 8 whole prompts (8,192 · 1,025 / 2 causal pairs). Decode: 2 lanes of 64
    sequences, 128 outputs each, 20 ms per step -> 2 · 64 / 128 / 0.02 = 50 requests/s, the step priced at the mean
    context 64 · (1,024 + 64)."""
    c = _Cost(0.5)
    assert prefill_rate_per_s(c, 2, 8192, 1024) == pytest.approx(32.0)
    assert c.calls == [(8192, 0, 0, 8192, 8192 * 1025 / 2, 8192, 8.0)]
    c = _Cost(0.02)
    assert decode_rate_per_s(c, 2, 64, 1024, 128) == pytest.approx(50.0)
    assert c.calls == [(64, 64, 64 * (1024 + 64))]


def _cap(tp, dp, pre_per_s, pre_s, decode):
    return PhaseCapacity(ServingPlan(tp=tp, dp=dp, ep=dp), pre_per_s, pre_s, decode)


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


def test_a_paired_plan_is_served_as_serve_would(searched):
    """The search's figure for a paired plan is its steady state, the same as asking for that plan directly."""
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
    own = [r for r in ranked if r["plan"]["prefill_tp"]]
    assert own and all({"prefill_dp", "prefill_ep", "prefill_pp"} <= set(r["plan"]) for r in own)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert " × tp" in out
