"""The serving search's steady state (schedule.serving_steady) against the simulator it summarises: a saturated
lane's rate and latencies, a static batch's measured batches, and a disaggregated plan reduced to its smallest
deployment of the same prefill : decode ratio."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.schedule.serving_run import simulate
from narrowpath.schedule.serving_stats import summary, window_output_tokens_per_s
from narrowpath.schedule.serving_steady import steady_lane
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario


def _scn(plan: ServingPlan, gpus: int, load: Load | None = None) -> ServingScenario:
    load = load or Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=64)
    return ServingScenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=plan, load=load, num_gpus=gpus)


def test_a_static_batch_is_measured_after_its_warm_up_batches():
    """A static session (TensorRT-LLM 0.x) serves batches of max_batch one after another: the steady state is the
    simulation of (warm-up + measured) batches over all lanes, its latencies read on the measured batches only —
    whose first tokens wait for the whole warm-up batch, so their TTFT exceeds the first batch's makespan."""
    plan = ServingPlan(max_batch=8, policy="static", framework="TensorRT-LLM 0.9")
    scn = _scn(plan, 1)
    st = steady_lane(scn, warmup_batches=1, measured_batches=2)
    assert st.lanes == 1 and st.tpot_s is not None and st.ttft_s is not None
    load = dataclasses.replace(scn.load, num_requests=24, concurrency=0, arrival="fixed-batch", batch_size=8)
    res = simulate(dataclasses.replace(scn, load=load), (), log_lane=False).result
    assert st.output_tokens_per_s == pytest.approx(res.output_tokens_per_s)
    ttft = res.first_token_s - res.arrival_s
    assert st.ttft_s == summary(ttft[8:])
    assert st.ttft_s["p50"] > float(res.finish_s[:8].max())
    tpot = (res.finish_s - res.first_token_s)[8:] / (res.output_tokens[8:] - 1)
    assert st.tpot_s == summary(tpot)


def test_a_disaggregated_plan_is_its_smallest_deployment_scaled():
    """4 instances of which 2 prefill-only and 2 of which 1: the same ratio, so the same smallest deployment (one
    prefill + one decode instance) is simulated; the larger serves twice the tokens per second with the same
    latencies, over twice the lanes."""
    small = steady_lane(_scn(ServingPlan(replicas=2, prefill_replicas=1), 2))
    big = steady_lane(_scn(ServingPlan(replicas=4, prefill_replicas=2), 4))
    assert big.output_tokens_per_s == pytest.approx(2 * small.output_tokens_per_s, rel=1e-12)
    assert big.ttft_s == small.ttft_s and big.tpot_s == small.tpot_s
    assert (small.lanes, big.lanes) == (2, 4)
    three = steady_lane(_scn(ServingPlan(replicas=3, prefill_replicas=1), 3))  # 1 : 2, another deployment
    assert three.lanes == 3 and three.output_tokens_per_s != pytest.approx(1.5 * small.output_tokens_per_s)


def test_a_saturated_lane_keeps_its_batch_full():
    """Continuous batching in a closed loop: the lane's TPOT is the iteration of a full batch, so its rate is close
    to max_batch / TPOT, and the deployment's rate is the lane's times its lanes (tp 1, 2 replicas: 2 lanes)."""
    one = steady_lane(_scn(ServingPlan(max_batch=16, framework="TensorRT-LLM 1.0"), 1))
    two = steady_lane(_scn(ServingPlan(max_batch=16, replicas=2, framework="TensorRT-LLM 1.0"), 2))
    assert two.output_tokens_per_s == pytest.approx(2 * one.output_tokens_per_s, rel=1e-12) and two.lanes == 2
    assert one.output_tokens_per_s <= 16 / one.tpot_s["p50"] * 1.05
    assert np.isfinite(one.ttft_s["p99"]) and one.ttft_s["p99"] >= one.ttft_s["p50"]


def _poisson_disagg(decode_replicas: int, dp: int = 1, pp: int = 1) -> ServingScenario:
    plan = ServingPlan(replicas=1 + decode_replicas, prefill_replicas=1, dp=dp, pp=pp, max_batch=8,
                       max_num_tokens=1024)
    load = Load(arrival="poisson", rate_per_s=40.0, input_tokens=200, output_tokens=24, num_requests=90)
    m = "mixtral-8x7b" if dp > 1 else "llama3-8b"
    gpus = (1 + decode_replicas) * dp * pp
    return ServingScenario(system=system("dgx-h100"), model=model(m), plan=plan, load=load, num_gpus=gpus)


@pytest.fixture
def steady_runs(monkeypatch) -> list:
    """The runs the steady state simulates (with the keywords it passes), newest last."""
    from narrowpath.schedule import serving_steady
    runs = []
    real = serving_steady.simulate

    def spy(scn, *a, **kw):
        run = real(scn, *a, **kw)
        runs.append((run, kw))
        return run
    monkeypatch.setattr(serving_steady, "simulate", spy)
    return runs


@pytest.mark.parametrize("decode_replicas, dp, pp", [(3, 1, 1), (2, 1, 2), (2, 2, 1)])
def test_a_sampled_decode_group_serves_exactly_what_it_serves_in_the_whole_run(decode_replicas, dp, pp):
    """Decode lanes take the prefill stream round-robin (in the order prompts become ready) and only the dp ranks
    of one instance micro-batch iterate together, so running the first group alone changes nothing it does: its
    requests' first tokens and finishes are those of the whole run, bit for bit, and they are the requests at
    positions i (mod lanes) < dp of the ready order."""
    scn = _poisson_disagg(decode_replicas, dp, pp)
    whole = simulate(scn, (), log_lane=False)
    part = simulate(scn, (), log_lane=False, decode_groups=1)
    assert whole.sampled is None and part.sampled is not None
    lanes = decode_replicas * dp * pp
    ready = whole.result.kv_ready_s
    assert np.all(whole.result.first_token_s >= ready)  # the client's first token: admitted by a decode lane
    order = np.argsort(ready, kind="stable")
    expect = np.sort(np.concatenate([order[i::lanes] for i in range(dp)]))
    assert part.sampled.tolist() == expect.tolist()
    for name in ("arrival_s", "first_token_s", "finish_s", "output_tokens", "kv_ready_s"):
        assert getattr(part.result, name).tolist() == getattr(whole.result, name)[expect].tolist()
    assert f"decode lanes sampled: {dp} of {lanes} (the requests they served)" in part.result.notes
    assert part.result.lanes == dp * pp + dp  # the prefill instance's lanes and the sampled group's
    assert part.sample_scale == lanes / dp and whole.sample_scale == 1.0
    every = simulate(scn, (), log_lane=False, decode_groups=decode_replicas * pp)  # every group: nothing sampled
    assert every.sampled is None and every.result.finish_s.tolist() == whole.result.finish_s.tolist()


def test_the_disaggregated_steady_state_reads_one_decode_group(steady_runs):
    """1 prefill + 3 decode replicas (max_batch 8): 3 decode groups, so the Poisson load is one batch per decode
    lane (24) plus at least 16 per group (48): 72 requests; one group is simulated and the deployment's rate is
    its rate times 3 — the group's output tokens generated between the first measured arrival and the last arrival
    (its load still on: no drain), per second —, its TPOT and TTFT those of the group's requests after the warm-up
    (the client's first token comes when a decode lane admits the request)."""
    plan = ServingPlan(replicas=4, prefill_replicas=1, max_batch=8, max_num_tokens=1024)
    st = steady_lane(_scn(plan, 4, Load(arrival="offline", input_tokens=200, output_tokens=24, num_requests=8)))
    run, kw = steady_runs[-1]
    assert kw["decode_groups"] == 1 and run.scenario.load.num_requests == 72
    res = run.result
    assert res.arrival_s.size == 24 and run.sampled.size == 24 and run.sample_scale == 3
    keep = run.sampled >= 24
    window = window_output_tokens_per_s(res.first_token_s, res.finish_s, res.output_tokens,
                                        res.arrival_s[keep].min(), res.arrival_s.max())
    assert st.output_tokens_per_s == pytest.approx(3 * window, rel=1e-12)
    assert 0 < keep.sum() < 24
    assert st.ttft_s == summary(res.ttft_s[keep])
    assert st.tpot_s == summary(((res.finish_s - res.first_token_s) / 23)[keep])
    assert st.lanes == 4


def test_a_negative_decode_group_count_is_refused():
    with pytest.raises(ValueError, match="decode_groups must be >= 0, got -1"):
        simulate(_poisson_disagg(2), (), log_lane=False, decode_groups=-1)


def test_a_disaggregated_steady_state_serves_a_trace_s_requests_on_its_stream(steady_runs):
    """A trace load (a serving file's requests_file) keeps its requests' lengths: cycled over the same seeded Poisson
    stream a fixed load gets, the capacity taken from their mean lengths — so a trace of identical 100 + 20 requests
    has exactly the steady state of a fixed 100 + 20 load, and a mixed trace is served in its order (before, the
    trace became a Poisson load without lengths and every disaggregated plan of it was refused)."""
    plan = ServingPlan(replicas=2, prefill_replicas=1, max_batch=8)
    same = Load(arrival="trace", requests=((0.0, 100, 20), (0.5, 100, 20)))
    assert steady_lane(_scn(plan, 2, same)) == steady_lane(_scn(plan, 2, Load(input_tokens=100, output_tokens=20)))
    mixed = Load(arrival="trace", requests=((0.0, 100, 20), (0.1, 300, 40), (0.2, 200, 10)))
    st = steady_lane(_scn(plan, 2, mixed))
    sent = steady_runs[-1][0].scenario.load
    reqs = sent.requests
    assert sent.arrival == "trace" and len(reqs) == 8 + 16  # a batch of 8, then at least 16
    assert [r[1:] for r in reqs[:4]] == [(100, 20), (300, 40), (200, 10), (100, 20)]
    assert all(b[0] > a[0] for a, b in zip(reqs, reqs[1:])) and reqs[0][0] == 0.0
    assert st.output_tokens_per_s > 0 and st.tpot_s["p50"] > 0


def test_ties_in_the_ready_order_go_to_the_decode_lanes_in_arrival_order():
    """200 requests queued at 0 with prompts of 32, 64 or 1,000 tokens (seeded) on 2 prefill and 2 decode instances:
    prompts finished in one iteration with the same length are ready at the same instant (200 requests, a few dozen
    distinct ready times) and out of arrival order across lengths; the decode lanes take the ready order
    round-robin with ties in arrival order (a FIFO, a stable sort), so the sampled first lane serves the requests
    at positions 0, 2, 4, … of that order."""
    lens = np.random.default_rng(1).choice([32, 64, 1000], 200)
    load = Load(arrival="trace", requests=tuple((0.0, int(n), 8) for n in lens))
    plan = ServingPlan(replicas=4, prefill_replicas=2, max_batch=64, max_num_tokens=4096)
    scn = ServingScenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=plan, load=load, num_gpus=4)
    whole = simulate(scn, (), log_lane=False)
    ready = whole.result.kv_ready_s
    assert len(set(ready.tolist())) < 100
    fifo = np.argsort(ready, kind="stable")
    assert fifo.tolist() != np.argsort(ready, kind="quicksort").tolist()  # the ties are not in order by accident
    part = simulate(scn, (), log_lane=False, decode_groups=1)
    assert part.sampled.tolist() == sorted(fifo[0::2].tolist())


def test_a_one_token_load_prices_its_capacity_with_one_token(steady_runs):
    """The capacity estimate divides by the prompt and output lengths (at least 1): a 1-token prompt with a 1-token
    output offers DISAGG_LOAD × min(prefill, decode capacity) requests/s, each capacity priced at those lengths —
    prefill: budget / 1 prompts per iteration of `budget` one-token prompts; decode: a batch per 1-step OSL."""
    from narrowpath.schedule import serving_steady
    for load in (Load(arrival="poisson", rate_per_s=1.0, input_tokens=1, output_tokens=1, num_requests=8),
                 Load(arrival="trace", requests=((0.0, 1, 1),))):
        plan = ServingPlan(replicas=2, prefill_replicas=1, max_batch=8, max_num_tokens=512)
        steady_lane(_scn(plan, 2, load))
        run = steady_runs[-1][0]
        cost, B, budget = run.cost, 8, 512
        pre = budget / 1 / cost.iteration_s(budget, 0, 0, budget, budget * (1 + 1) / 2, budget, budget)
        dec = B / 1 / cost.iteration_s(B, B, B * (1 + 1 / 2))
        rate = serving_steady.DISAGG_LOAD * min(pre, dec)
        sent = run.scenario.load
        if sent.arrival == "poisson":
            assert sent.rate_per_s == pytest.approx(rate, rel=1e-12)
        else:  # the same seeded stream: the first gap of the next request is the stream's second gap
            gaps = np.random.default_rng(0).exponential(1.0 / rate, len(sent.requests))
            assert [r[0] for r in sent.requests] == pytest.approx((np.cumsum(gaps) - gaps[0]).tolist(), rel=1e-12)


def test_a_disaggregated_steady_state_counts_every_lane_of_the_deployment():
    """pp 2: each of the 2 instances (1 prefill, 1 decode) has 2 micro-batch lanes, so the deployment has 4 lanes."""
    st = steady_lane(_scn(ServingPlan(replicas=2, prefill_replicas=1, pp=2, max_batch=8), 4,
                          Load(arrival="offline", input_tokens=200, output_tokens=24, num_requests=8)))
    assert st.lanes == 4 and st.output_tokens_per_s > 0


def test_a_run_keeps_the_deployment_before_its_limits_and_the_block_size_it_ran():
    """`simulate` returns the scenario before the stack's limits were filled (what-ifs start there, so a changed
    layout gets limits of its own) and the result carries the KV block size the lanes used (serve --json prints
    it): TensorRT-LLM's trtllm-bench stack pages KV in 32-token blocks and, left unset, fills max_batch by its
    heuristic."""
    scn = ServingScenario(system=system("dgx-h100"), model=model("llama3-8b"),
                          plan=ServingPlan(framework="TensorRT-LLM 1.0"),
                          load=Load(arrival="offline", input_tokens=128, output_tokens=16, num_requests=8), num_gpus=1)
    run = simulate(scn, (), log_lane=False)
    assert run.given is not None and run.given.plan.max_batch == 0 and run.scenario.plan.max_batch > 0
    assert run.limits.block_tokens == run.result.block_tokens == 32


def test_a_saturated_lane_runs_the_plan_s_policy_admission_and_drafts():
    """The closed-loop lane is built with the plan's own iteration policy, KV admission and speculative gain (each
    changes what the lane does, so each changes its figures): prefill-first runs a waiting prompt in an iteration
    of its own where decode-first folds it into the decodes' iterations, so the two differ in both TTFT and TPOT;
    on-demand admission takes blocks as contexts grow, so a KV cache too small for 16 whole sequences holds more of
    them at once than under reserve (more tokens per second); a higher draft acceptance yields more tokens per
    decode step (a shorter TPOT)."""
    load = Load(arrival="offline", input_tokens=1024, output_tokens=256, num_requests=64)

    def lane(**kw):
        return steady_lane(_scn(ServingPlan(max_batch=16, **kw), 1, load))

    dec, pre = lane(policy="decode-first"), lane(policy="prefill-first")
    assert pre.ttft_s["p50"] != pytest.approx(dec.ttft_s["p50"], rel=1e-3)
    assert pre.tpot_s["p50"] != pytest.approx(dec.tpot_s["p50"], rel=1e-3)
    tight = {"kv_memory_fraction": 0.02, "policy": "decode-first"}
    reserve, on_demand = lane(admission="reserve", **tight), lane(admission="on-demand", **tight)
    assert on_demand.output_tokens_per_s > 1.05 * reserve.output_tokens_per_s
    low = lane(spec_tokens=2, spec_acceptance=0.2, policy="decode-first")
    high = lane(spec_tokens=2, spec_acceptance=0.9, policy="decode-first")
    assert high.tpot_s["p50"] < low.tpot_s["p50"]
