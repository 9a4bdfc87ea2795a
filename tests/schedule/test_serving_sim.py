"""Serving simulator semantics: merged decode steps equal single steps, static batches match a hand sum, KV
admission and preemption, chunked prefill, policies, disaggregation, speculative decoding, closed loop, seeds."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.errors import SimulationError
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_run import simulate, spec_gain
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario


def scn(plan=ServingPlan(), load=Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=64),
        mdl="llama3-8b", sysm="dgx-h100"):
    return ServingScenario(system=system(sysm), model=model(mdl), plan=plan, load=load, num_gpus=plan.num_gpus)


@pytest.mark.parametrize("plan,load", [
    (ServingPlan(tp=2, replicas=2), Load(arrival="poisson", rate_per_s=8, input_tokens=512, output_tokens=96,
                                         num_requests=120)),
    (ServingPlan(max_batch=32, admission="on-demand", kv_memory_fraction=0.02),
     Load(arrival="offline", input_tokens=400, output_tokens=200, num_requests=80)),
    (ServingPlan(policy="prefill-first"), Load(arrival="poisson", rate_per_s=3, input_tokens=700, output_tokens=50,
                                               num_requests=60)),
])
def test_merged_decode_steps_equal_single_steps(plan, load):
    """Advancing a decode-only batch to its next event at once gives the same request times as stepping each
    iteration (the step time is linear in the context between events)."""
    a = simulate(scn(plan, load)).result
    b = simulate(scn(plan, load), merge=False).result
    np.testing.assert_allclose(a.finish_s, b.finish_s, rtol=1e-9)
    np.testing.assert_allclose(a.first_token_s, b.first_token_s, rtol=1e-9)
    assert a.totals.iterations == b.totals.iterations and a.totals.preemptions == b.totals.preemptions


@pytest.mark.parametrize("sysm, pp, spec", [("dgx-b200", 1, 0), ("dgx-h100", 1, 0), ("dgx-h100", 2, 0),
                                             ("dgx-b200", 1, 2)])
def test_merged_steps_stay_exact_where_the_host_sets_the_pace(sysm, pp, spec):
    """Under TensorRT-LLM's PyTorch executor an iteration takes max(GPU time, per-request host time): a decode batch
    starts host-bound and turns GPU-bound as its context grows, a kink inside a merged run (and pp adds another,
    pp × the slowest stage). Merged runs end at the kink, so they still equal single steps — on B200 (host-bound
    most of the run), H100 (crossing over), a pipeline and with draft tokens."""
    plan = ServingPlan(pp=pp, weight_precision="fp8", kv_precision="fp8", spec_tokens=spec, spec_acceptance=0.7,
                       framework="TensorRT-LLM 1.0 (PyTorch backend)")
    load = Load(arrival="offline", input_tokens=128, output_tokens=600, num_requests=1500)
    a = simulate(scn(plan, load, sysm=sysm)).result
    b = simulate(scn(plan, load, sysm=sysm), merge=False).result
    np.testing.assert_allclose(a.finish_s, b.finish_s, rtol=1e-9)
    np.testing.assert_allclose(a.first_token_s, b.first_token_s, rtol=1e-9)
    assert a.totals.iterations == b.totals.iterations and a.totals.preemptions == b.totals.preemptions


def test_static_batch_is_prefill_then_every_decode_step():
    """A fixed batch: one context pass over all prompts, then output − 1 decode steps over the whole batch; its
    throughput is B·output / (prefill + Σ steps), priced by the same iteration cost."""
    B, i, o = 16, 128, 32
    s = scn(load=Load(arrival="fixed-batch", batch_size=B, input_tokens=i, output_tokens=o))
    run = simulate(s)
    cost = run.cost
    t = cost.iteration_s(B * i, 0, 0, B * i, B * i * (i + 1) / 2, B * i, B)
    t += sum(cost.iteration_s(B, B, B * (i + 1) + k * B) for k in range(o - 1))
    assert run.scenario.plan.policy == "static"
    assert run.result.output_tokens_per_s == pytest.approx(B * o / t, rel=1e-6)
    assert run.result.ttft_s.mean() == pytest.approx(cost.iteration_s(B * i, 0, 0, B * i, B * i * (i + 1) / 2,
                                                                      B * i, B), rel=1e-9)


def test_reserve_never_preempts_on_demand_does_when_the_cache_is_small():
    load = Load(arrival="offline", input_tokens=400, output_tokens=400, num_requests=100)
    small = dict(max_batch=64, kv_memory_fraction=0.03)
    on_demand = simulate(scn(ServingPlan(admission="on-demand", **small), load)).result
    reserve = simulate(scn(ServingPlan(admission="reserve", **small), load)).result
    assert on_demand.totals.preemptions > 0 and reserve.totals.preemptions == 0
    assert reserve.kv_peak_utilisation <= 1.0 and on_demand.kv_peak_utilisation <= 1.0
    assert np.all(np.isfinite(on_demand.finish_s)) and np.all(on_demand.finish_s >= on_demand.first_token_s)


def test_a_request_larger_than_the_cache_is_refused():
    with pytest.raises(SimulationError, match="KV blocks"):
        simulate(scn(ServingPlan(kv_memory_fraction=0.001),
                     Load(arrival="offline", input_tokens=60000, output_tokens=10, num_requests=2)))


def test_chunked_prefill_splits_a_long_prompt_over_iterations():
    """A 10,000-token prompt with a 2,048-token budget takes ⌈10000/2048⌉ = 5 iterations before its first token."""
    s = scn(ServingPlan(max_num_tokens=2048, chunked_prefill=True),
            Load(arrival="offline", input_tokens=10000, output_tokens=4, num_requests=1))
    run = simulate(s)
    prompt_iters = [r for r in run.result.log if r.prompt_tokens]
    assert len(prompt_iters) == 5 and sum(r.prompt_tokens for r in prompt_iters) == 10000


def test_prefill_first_answers_sooner_but_decodes_slower_than_decode_first():
    load = Load(arrival="poisson", rate_per_s=6, input_tokens=1500, output_tokens=200, num_requests=150)
    pf = simulate(scn(ServingPlan(policy="prefill-first", chunked_prefill=False), load)).result
    df = simulate(scn(ServingPlan(policy="decode-first", chunked_prefill=True, max_num_tokens=512), load)).result
    assert np.median(pf.ttft_s) < np.median(df.ttft_s)
    assert np.median(pf.tpot_s) > np.median(df.tpot_s)


def test_disaggregated_prefill_hands_the_kv_over_the_fabric():
    """Prefill instances emit the first token; the decode instance receives the request one KV hand-off later;
    between two 8-GPU nodes the hand-off crosses the scale-out fabric."""
    load = Load(arrival="poisson", rate_per_s=4, input_tokens=2000, output_tokens=100, num_requests=80)
    run = simulate(scn(ServingPlan(tp=8, replicas=2, prefill_replicas=1), load, mdl="llama3-70b"))
    cost = run.cost
    assert run.result.totals.handoff_s == pytest.approx(80 * cost.handoff_s(2000))
    assert cost.handoff_s(2000) > cost.handoff_s(200) > 0
    assert any("scale-out" in n for n in run.result.notes)
    assert np.all(run.result.finish_s > run.result.first_token_s)


def test_speculative_decoding_gain_and_effect():
    """Expected tokens per verification step (1 − α^(k+1))/(1 − α); a memory-bound decode gets faster per token."""
    assert spec_gain(0, 0.9) == 1.0
    assert spec_gain(3, 0.8) == pytest.approx((1 - 0.8 ** 4) / 0.2)
    load = Load(arrival="offline", input_tokens=256, output_tokens=256, num_requests=8)
    base = simulate(scn(ServingPlan(max_batch=8), load)).result
    spec = simulate(scn(ServingPlan(max_batch=8, spec_tokens=3, spec_acceptance=0.8), load)).result
    assert np.median(spec.tpot_s) < np.median(base.tpot_s)


def test_closed_loop_keeps_at_most_concurrency_requests_outstanding():
    load = Load(arrival="offline", concurrency=6, input_tokens=300, output_tokens=40, num_requests=40)
    res = simulate(scn(load=load)).result
    events = sorted([(t, 1) for t in res.arrival_s] + [(t, -1) for t in res.finish_s], key=lambda e: (e[0], e[1]))
    live = np.cumsum([d for _, d in events])
    assert live.max() <= 6 and res.arrival_s.max() > 0


def test_poisson_arrivals_follow_the_seed():
    load = Load(arrival="poisson", rate_per_s=5, input_tokens=200, output_tokens=20, num_requests=50, seed=7)
    a = simulate(scn(load=load)).result
    b = simulate(scn(load=load)).result
    c = simulate(scn(load=dataclasses.replace(load, seed=8))).result
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    assert not np.array_equal(a.arrival_s, c.arrival_s)
    assert np.mean(np.diff(a.arrival_s)) == pytest.approx(1 / 5, rel=0.35)


def test_attention_fast_path_equals_the_op_roofline():
    """The affine attention pricing equals pricing the attention ops with cost.roofline."""
    run = simulate(scn())
    cost: ServingCost = run.cost
    for args in ((3, 5000, 0, 0, 0), (0, 0, 700, 700 * 900, 1500), (40, 90000, 300, 300 * 2000, 4000)):
        assert cost.attention_s(0, *args) == pytest.approx(cost.op_s(cost.attention_ops(0, *args)), rel=1e-12)


def test_deduplicating_dispatch_with_node_limited_routing_cuts_fabric_time():
    """DeepSeek-V3 (node-limited to 4 nodes) on 32 H800 (4 nodes, ep 32, attention DP): a dispatch that crosses the
    fabric once per destination node and fans out over NVLink (dedup, as training's) spends less time on the
    fabric than a flat all-to-all of the per-rank copies; the inter-node leg spans one rank per node."""
    load = Load(arrival="offline", input_tokens=512, output_tokens=32, num_requests=64)

    def ep_time(dispatch):
        plan = ServingPlan(tp=1, dp=32, ep=32, weight_precision="fp8", ep_dispatch=dispatch)
        s = ServingScenario(system=system("dgx-h800"), model=model("deepseek-v3"), plan=plan, load=load,
                            num_gpus=32)
        cost = simulate(s).cost
        rows = [pt for pt in cost.token_transfers(0, 64.0) if pt.transfer.axis.startswith("ep")]
        return sum(pt.cost.time_s * pt.count for pt in rows), {pt.transfer.axis: pt.span for pt in rows}

    flat, flat_spans = ep_time("all_to_all")
    dedup, spans = ep_time("dedup")
    assert dedup < flat and set(flat_spans) == {"ep"}
    assert (spans["ep_inter"].size, spans["ep_inter"].domains) == (4, 4) and spans["ep_intra"].domains == 1


def test_linear_span_and_runs_by_hand():
    """t(k) = max(5, 1 + k): flat at 5 up to k = 4, then rising by 1. From step 1 the times stay on one line for
    4 steps; a run of 10 steps is 4·5 + (6 + … + 11) = 20 + 51 = 71, the trapezoid of the two stretches; a line
    is one stretch; two steps are always a line."""
    from narrowpath.schedule.serving_sim import linear_runs_s, linear_span
    t = lambda k: max(5.0, 1.0 + k)  # noqa: E731
    assert linear_span(t, 10) == 4
    assert linear_span(lambda k: 3.0 + 0.5 * k, 10) == 10
    assert linear_span(t, 2) == 2 and linear_span(t, 1) == 1
    assert linear_span(lambda k: max(2.0 * k, 7.0 + k), 10) == 7  # 2k up to k = 7, then 7 + k
    assert linear_runs_s(t, 10) == pytest.approx(71.0)
    assert linear_runs_s(lambda k: 3.0 + 0.5 * k, 10) == pytest.approx(sum(3.0 + 0.5 * k for k in range(1, 11)))
    assert linear_runs_s(lambda k: max(2.0 * k, 7.0 + k), 12) == pytest.approx(
        sum(max(2.0 * k, 7.0 + k) for k in range(1, 13)))


def test_a_trace_starts_at_its_first_arrival():
    """A request trace stamped from 5.0 s: arrivals are taken relative to the first (0, 2.5, 2.5 s), lengths as
    given; the simulated first token of the first request comes after its prefill, not 5 s late."""
    from narrowpath.schedule.serving_run import arrivals
    load = Load(arrival="trace", requests=((5.0, 100, 4), (7.5, 200, 3), (7.5, 50, 2)))
    t, n_in, n_out = arrivals(scn(load=load))
    np.testing.assert_array_equal(t, [0.0, 2.5, 2.5])
    np.testing.assert_array_equal(n_in, [100, 200, 50])
    np.testing.assert_array_equal(n_out, [4, 3, 2])
    res = simulate(scn(load=load)).result
    assert 0 < res.first_token_s[0] < 1.0 and res.arrival_s[1] == pytest.approx(2.5)


def test_steps_to_pass_is_the_first_boundary_after_the_event():
    """Unit steps: an event 2.5 ahead is seen after 3 steps, one exactly 3 ahead after 3 too (a lane admits what
    arrived by the boundary); a run never passes its own cap, and at least one step is taken."""
    from narrowpath.schedule.serving_sim import steps_to_pass
    unit = float
    assert steps_to_pass(unit, 2.5, 10) == 3
    assert steps_to_pass(unit, 3.0, 10) == 3
    assert steps_to_pass(unit, 100.0, 10) == 10
    assert steps_to_pass(unit, -1.0, 10) == 1
    assert steps_to_pass(unit, 5.0, 1) == 1
    # growing steps 1, 2, 3, ...: boundaries at 1, 3, 6, 10 — an event at 5 is seen after the third step, one at
    # 6 after the third too
    assert steps_to_pass(lambda k: k * (k + 1) / 2, 5.0, 50) == 3
    assert steps_to_pass(lambda k: k * (k + 1) / 2, 6.0, 50) == 3


def test_run_s_is_the_trapezoid_of_a_linear_run():
    """Step.run_s prices n steps from the first two step times; on a linear run it equals duration(n)."""
    from narrowpath.schedule.serving_sim import Step
    st = Step(4, [], 20, 0.010, 0.010, 100.0, 0, 0.0, 1)
    st.t_at = lambda k: 0.010 + 0.0005 * (k - 1)
    for n in (1, 2, 7, 20):
        assert st.run_s(n) == pytest.approx(st.duration(n), rel=1e-12)
    assert st.run_s(3) == pytest.approx(0.010 + 0.0105 + 0.011)


def test_each_preemption_recomputes_one_context_and_emits_one_token():
    """vLLM recompute preemption: a preempted request re-queues and prefills its prompt plus what it generated
    again, and that prefill emits its next token. With 100 requests of 400 + 400 tokens in a small cache: the
    prompt tokens processed exceed Σ input by between 400 (preempted after its first token) and 800 (after its
    last) per preemption, and the decode tokens are Σ output − one first token per request − one per preemption."""
    load = Load(arrival="offline", input_tokens=400, output_tokens=400, num_requests=100)
    r = simulate(scn(ServingPlan(admission="on-demand", max_batch=64, kv_memory_fraction=0.03), load)).result
    t = r.totals
    assert t.preemptions > 0
    again = t.prompt_tokens - r.input_tokens.sum()
    assert 400 * t.preemptions < again < 800 * t.preemptions
    assert t.decode_tokens == r.output_tokens.sum() - 100 - t.preemptions


def test_a_disaggregated_decode_starts_one_hand_off_after_the_first_token():
    """The decode instance receives a request one KV hand-off after the prefill instance computed its first token
    (`kv_ready_s`), and the client reads that token when the decode instance admits it; then it needs at least one
    decode step (which reads every weight of the stage): finish − first token ≥ token time at T = 1 for every
    request (2 output tokens, Llama-3 70B, tp 8, over the scale-out fabric)."""
    load = Load(arrival="poisson", rate_per_s=4, input_tokens=2000, output_tokens=2, num_requests=40)
    run = simulate(scn(ServingPlan(tp=8, replicas=2, prefill_replicas=1), load, mdl="llama3-70b"))
    res, cost = run.result, run.cost
    assert np.all(res.first_token_s >= res.kv_ready_s)
    assert np.all(res.kv_ready_s - res.arrival_s >= cost.handoff_s(2000) * (1 - 1e-12))
    assert np.all(res.finish_s - res.first_token_s >= cost.token_time_s(0, 1.0) * (1 - 1e-12))
    assert res.totals.handoff_s == pytest.approx(40 * cost.handoff_s(2000))
