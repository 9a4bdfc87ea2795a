"""Review 51 of disaggregated serving: the steady state's rate window, decode capacity under speculative decoding,
decode lanes held to the token budget, and the hand-off fabric of pools laid out on several domains."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.schedule import serving_steady
from narrowpath.schedule.serving_run import simulate
from narrowpath.schedule.serving_stats import window_output_tokens_per_s
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario


def _scn(plan: ServingPlan, load: Load, mdl: str = "llama3-8b", sysm: str = "dgx-h100") -> ServingScenario:
    return ServingScenario(system=system(sysm), model=model(mdl), plan=plan, load=load, num_gpus=plan.num_gpus)


def test_window_output_rate_by_hand():
    """Window [2, 6] s. Request A: first token at 1 s, 9 tokens, finish at 9 s: its 8 later tokens over (1, 9], 4 s
    of 8 inside -> 4 tokens. Request B: first token at 3 s (inside: 1 token), 5 tokens, finish at 5 s: all 4 later
    ones inside -> 5. Request C: one token at 7 s, outside. (4 + 5) / 4 s = 2.25 tokens/s. An empty window: 0."""
    first, finish = np.array([1.0, 3.0, 7.0]), np.array([9.0, 5.0, 7.0])
    out = np.array([9, 5, 1])
    assert window_output_tokens_per_s(first, finish, out, 2.0, 6.0) == pytest.approx(2.25, rel=1e-12)
    assert window_output_tokens_per_s(first, finish, out, 6.0, 6.0) == 0.0


def test_the_disaggregated_steady_rate_is_what_the_deployment_sustains(monkeypatch):
    """Llama-3 8B on H100, tp 1, batch 128, 512 + 1,024 tokens, 1 prefill + 7 decode instances. The steady state
    offers 0.9 · min(68.77 prefill, 65.38 decode) = 58.84 requests/s and samples one decode lane: 192 requests
    arriving over 23.09 s, the last finishing 9.78 s later. Over first arrival -> last finish the lane read
    192 · 1,024 · 7 / 32.87 s = 41,876 tokens/s (5,234 per GPU), 0.71 of what the deployment sustains: fed the same
    stream for 4,000 requests, its middle half of finishes comes at 7,362 tokens/s per GPU (58.84 · 1,024 / 8 =
    7,531 offered). Read over the measured arrivals' span (the load still on) the steady state gives 7,391: within
    5 % of the long run."""
    seen = {}
    real = serving_steady.simulate

    def spy(scn, *a, **kw):
        seen["rate"] = scn.load.rate_per_s
        return real(scn, *a, **kw)

    monkeypatch.setattr(serving_steady, "simulate", spy)
    plan = ServingPlan(tp=1, replicas=8, prefill_replicas=1, max_batch=128)
    st = serving_steady.steady_lane(_scn(plan, Load(input_tokens=512, output_tokens=1024)))
    assert seen["rate"] == pytest.approx(58.84, rel=1e-3)
    load = Load(arrival="poisson", rate_per_s=seen["rate"], input_tokens=512, output_tokens=1024, num_requests=4000)
    res = simulate(_scn(plan, load), log_lane=False).result
    done = np.sort(res.finish_s)
    a, b = done.size // 4, 3 * done.size // 4
    sustained = (b - a) / (done[b] - done[a]) * 1024
    assert st.output_tokens_per_s == pytest.approx(sustained, rel=0.05)


def _decode_lane_rate(k: int, alpha: float) -> tuple[float, float]:
    """(decode_capacity's requests/s, a simulated decode lane's) for Llama-3 8B tp 1, batch 64, 512 + 1,024: the
    lane kept full by 64 clients behind 4 prefill instances (never short of prompts), its rate by Little's law
    (clients / mean end-to-end time)."""
    from narrowpath.schedule.serving_cost import ServingCost
    from narrowpath.schedule.serving_defaults import resolve_formats, resolve_limits
    one = ServingPlan(tp=1, replicas=1, max_batch=64, spec_tokens=k, spec_acceptance=alpha)
    s, lim = resolve_limits(resolve_formats(_scn(one, Load(input_tokens=512, output_tokens=1024)), ()))
    cost = ServingCost(s, max(lim.max_num_tokens, 64 * (1 + k)))
    est, _ = serving_steady.decode_capacity(cost, lim, 1, 1, 512, 1024, s.plan.admission, s.plan)
    dis = ServingPlan(tp=1, replicas=5, prefill_replicas=4, max_batch=64, spec_tokens=k, spec_acceptance=alpha)
    load = Load(arrival="offline", concurrency=64, input_tokens=512, output_tokens=1024, num_requests=256)
    res = simulate(_scn(dis, load), log_lane=False).result
    return est, 64 / res.e2e_s[res.arrival_s > 0].mean()


def test_decode_capacity_prices_speculative_decoding_as_the_decode_lane_does():
    """k = 3 draft tokens accepted at α = 0.7: a step yields (1 − 0.7⁴) / 0.3 = 2.533 tokens a sequence and runs
    64 · 4 = 256 query tokens plus three one-layer draft passes (1.86 ms): 15.01 ms at the mean context 64 · 1,024,
    so 64 · 2.533 / 1,024 / 0.01501 = 10.55 requests/s. Ignoring all three (64 tokens, 9.82 ms) read 6.37, the same
    as without drafts, where a simulated decode lane finishes ~10.2: now within 5 % of it, as without speculation
    (6.37 against ~6.2)."""
    from narrowpath.schedule.serving_run import spec_gain, step_pricer
    from narrowpath.schedule.serving_cost import ServingCost
    from narrowpath.schedule.serving_defaults import resolve_formats, resolve_limits
    plan = ServingPlan(tp=1, max_batch=64, spec_tokens=3, spec_acceptance=0.7)
    s, lim = resolve_limits(resolve_formats(_scn(plan, Load(input_tokens=512, output_tokens=1024)), ()))
    cost = ServingCost(s, 256)
    step = step_pricer(cost, 1, 3)(256, 64, 64 * 1024, 0, 0, 0, 64, 4)
    assert spec_gain(3, 0.7) == pytest.approx(2.533)
    rate = serving_steady.decode_rate_per_s(cost, 1, 64, 512, 1024, spec_tokens=3, spec_acceptance=0.7)
    assert rate == pytest.approx(64 * 2.533 / 1024 / step, rel=1e-12)
    assert rate == pytest.approx(10.55, rel=1e-3)
    for k, alpha in ((0, 0.0), (3, 0.7)):
        est, lane = _decode_lane_rate(k, alpha)
        assert est == pytest.approx(lane, rel=0.05)


def test_decode_lane_seqs_by_hand():
    """Batch 256 under a 128-token budget: 128 decodes of one token; with k = 3 drafts (4 tokens a decode) 32; a
    budget below one decode still runs one; the batch limit binds when the budget is loose."""
    from narrowpath.schedule.serving_sim import decode_lane_seqs
    assert decode_lane_seqs(256, 128, 1) == 128
    assert decode_lane_seqs(256, 128, 4) == 32
    assert decode_lane_seqs(256, 2, 4) == 1
    assert decode_lane_seqs(64, 8192, 4) == 64


@pytest.mark.parametrize("k", [0, 3])
def test_a_decode_lane_holds_its_token_budget(k):
    """1 prefill + 2 decode instances of Llama-3 8B tp 1, decode batch 256, token budget 128 (the prefill pool's
    8,192), 200 + 500 tokens offline: a decode iteration is at most 128 // (1 + k) decodes — 128, or 32 with 3
    drafts — where only the batch limit held it (256 an iteration, TPOT 15.23 ms as with a 256-token budget); the
    same deployment with a 256-token budget still reaches 256 // (1 + k)."""
    logs = {}
    for budget in (128, 256):
        p = ServingPlan(tp=1, replicas=3, prefill_replicas=1, max_batch=256, max_num_tokens=budget,
                        prefill_max_num_tokens=8192, spec_tokens=k, spec_acceptance=0.7 if k else 0.0)
        load = Load(arrival="offline", input_tokens=200, output_tokens=500, num_requests=600)
        res = simulate(_scn(p, load)).result
        logs[budget] = max(x.decodes for x in res.log if x.role == "decode")
    assert logs == {128: 128 // (1 + k), 256: 256 // (1 + k)}


def test_more_tp_keeps_a_disaggregated_plan_disaggregated():
    """1 prefill + 3 decode tp-1 instances: halving 4 replicas gave 2 with 1 // 2 = 0 prefill instances — a colocated
    plan compared against a disaggregated baseline, silently. Now every instance's tp doubles and, as neither pool's
    count (1, 3) is even, both keep their counts: 1 + 3 tp-2 instances on 8 GPUs. 2 + 6 halve to 1 + 3 on the same 8
    (the ratio kept); a prefill pool of its own tp 2 doubles to 4 (1 · 4 + 3 · 2 = 10 GPUs); colocated 4 → 2."""
    from narrowpath.analysis.serving_whatif import candidates, more_tp
    assert more_tp(ServingPlan(replicas=4, prefill_replicas=1)) == ServingPlan(tp=2, replicas=4, prefill_replicas=1)
    assert more_tp(ServingPlan(replicas=8, prefill_replicas=2)) == ServingPlan(tp=2, replicas=4, prefill_replicas=1)
    own = more_tp(ServingPlan(replicas=4, prefill_replicas=1, prefill_tp=2))
    assert (own.tp, own.prefill_tp, own.replicas, own.prefill_replicas, own.num_gpus) == (2, 4, 4, 1, 10)
    assert more_tp(ServingPlan(replicas=4)) == ServingPlan(tp=2, replicas=2)
    load = Load(arrival="poisson", rate_per_s=10, input_tokens=1024, output_tokens=128, num_requests=50)
    out, _ = candidates(_scn(ServingPlan(tp=1, replicas=4, prefill_replicas=1), load), False)
    (change, alt), = [(c, a) for n, c, a in out if n == "more TP"]
    assert alt.plan.disaggregated and alt.plan.prefill_replicas == 1 and alt.num_gpus == 8
    assert change == "tp 1 → 2 (8 GPUs)"
    out, _ = candidates(_scn(ServingPlan(tp=1, replicas=8, prefill_replicas=2), load), False)
    assert [c for n, c, _ in out if n == "more TP"] == ["tp 1 → 2, 2 + 6 → 1 + 3 prefill + decode instances"]


def test_packed_placement_by_hand():
    """Domains of 8 GPUs, instances laid out prefill first, each packed where the whole instance fits: 4, 4 | 4, 4;
    a 2 then three 4s: 2, 4 | 4, 4 (the second 4 does not fit the 2 left); a 16 takes domains 0 and 1, then 4 | 8 |
    4 (each 4 + 8 overflows); a 4, then a 16 (domains 1, 2), then a 4 in domain 3. Shares of hand-offs over
    scale-out: one tp-4 prefill to three tp-4 decode instances 2/3; one of each that fit one domain 0, that do not 1;
    2 one-GPU prefill + 6 decode instances all in domain 0: 0."""
    from narrowpath.schedule.serving_place import handoff_scale_out_share, packed_domains
    assert packed_domains([4, 4, 4, 4], 8) == [0, 0, 1, 1]
    assert packed_domains([2, 4, 4, 4], 8) == [0, 0, 1, 1]
    assert packed_domains([16, 4, 8, 4], 8) == [None, 2, 3, 4]
    assert packed_domains([4, 16, 4], 8) == [0, None, 3]
    # one GPU used in domain 0 is enough to push the 16 to domains 1-2; the 8 after it then fills domain 3 whole
    assert packed_domains([1, 16, 8], 8) == [0, None, 3]
    assert handoff_scale_out_share(1, 4, 3, 4, 8) == pytest.approx(2 / 3)
    assert handoff_scale_out_share(1, 4, 1, 4, 8) == 0.0 and handoff_scale_out_share(1, 8, 1, 1, 8) == 1.0
    assert handoff_scale_out_share(2, 1, 6, 1, 8) == 0.0
    assert handoff_scale_out_share(1, 8, 3, 1, 8) == 1.0  # a full-node prefill instance: every hand-off leaves it


def test_hand_offs_are_priced_on_where_the_pools_sit():
    """16 H100s (two 8-GPU NVLink domains), one tp-4 prefill and three tp-4 decode instances of Llama-3 8B: the
    prefill instance and the first decode instance fill domain 0, the other two decode instances domain 1, so 2 of
    3 hand-offs cross the NICs. A 4,096-token prompt's KV: 0.379 ms over NVLink, 2.877 ms over scale-out; the mean
    (0.379 + 2 · 2.877) / 3 = 2.044 ms per request, where every hand-off was priced on NVLink (one prefill and one
    decode instance fit a domain): 0.379."""
    plan = ServingPlan(tp=4, replicas=4, prefill_replicas=1)
    load = Load(arrival="offline", input_tokens=4096, output_tokens=8, num_requests=6)
    run = simulate(_scn(plan, load), log_lane=False)
    up, out = run.cost.handoff_s(4096, None, 0.0), run.cost.handoff_s(4096, None, 1.0)
    assert up == pytest.approx(0.379e-3, rel=1e-3) and out == pytest.approx(2.877e-3, rel=1e-3)
    assert run.result.totals.handoff_s / 6 == pytest.approx((up + 2 * out) / 3, rel=1e-12)
    assert any(n.startswith("KV hand-off of a 4096-token prompt: 2.04 ms per request (the mean of 67% over "
                            "scale-out") for n in run.result.notes)
