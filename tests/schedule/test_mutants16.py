"""Serving values the seed-16 mutation sample (benchmarks/mutation.py) found unguarded in schedule/ — the pipeline
hand-off's link, TensorRT-LLM's run-time batch tuning at its edges, the calibration `simulate` is given, the lane
simulator's prompt budget and busy time, and the kernel overhead the calibration provenance prints — each pinned by
a hand calculation."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import calibration_for, model, system
from narrowpath.cost.collectives import collective_time
from narrowpath.network.placement import span_of
from narrowpath.schedule import serving_defaults
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import resolve_limits, trtllm_runtime_batch
from narrowpath.schedule.serving_run import simulate
from narrowpath.schedule.serving_sim import LaneSpec
from narrowpath.schedule.step import profile_usage
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from tests.schedule.lanes import bare_lane

H100 = system("dgx-h100")
LOAD = Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=32)


def _scn(plan: ServingPlan = ServingPlan(), load: Load = LOAD, mdl: str = "llama3-8b") -> ServingScenario:
    return ServingScenario(system=H100, model=model(mdl), plan=plan, load=load, num_gpus=plan.num_gpus)


# ---- the pipeline hand-off ------------------------------------------------------------------------------------

def test_each_stage_hands_its_activations_over_its_own_neighbours_link():
    """Llama-3 8B at tp 4 × pp 4 on DGX H100s (8-GPU NVLink domains): stage s runs on GPUs 4s..4s+3, so stages 0-1
    share node 0 and stages 2-3 node 1 — the hand-offs after stages 0 and 2 stay on NVLink (a 2-rank group in one
    domain), the one after stage 1 crosses the fabric (2 domains). The pp group as a whole (4 ranks over 2 domains)
    is not the link any single hand-off uses; the last stage hands nothing on."""
    plan = ServingPlan(tp=4, pp=4, max_batch=64, max_num_tokens=2048, framework="TensorRT-LLM 1.0")
    c = ServingCost(_scn(plan), 2048)
    near = span_of(2, ranks_per_domain=2, domains=1, axis="pp")
    far = span_of(2, ranks_per_domain=1, domains=2, axis="pp")
    hand = {s: c.token_transfers(s, 512.0)[-1] for s in range(3)}
    assert all(h.transfer.name == "pp.activations" for h in hand.values())
    assert [(h.span.size, h.span.domains) for h in hand.values()] == [(2, 1), (2, 2), (2, 1)]
    tr = hand[0].transfer
    assert tr.message_bytes == 512 * 4096 * 2
    for h, span in ((hand[0], near), (hand[1], far), (hand[2], near)):
        assert h.cost.time_s == pytest.approx(collective_time("send_recv", tr.message_bytes, span, H100, c.cal).time_s)
    assert hand[1].cost.time_s > 2 * hand[0].cost.time_s
    assert all(t.transfer.name != "pp.activations" for t in c.token_transfers(3, 512.0))


# ---- TensorRT-LLM's run-time batch tuning -----------------------------------------------------------------------

def test_runtime_batch_falls_back_to_the_512_multiple_only_strictly_within_128():
    """DynamicBatchTuner::getRuntimeBatchSize above the table (capacity ≥ 1,664): the capacity rounded down to a
    multiple of 512 when it lies less than 128 sequences above it, else the capacity itself. 2,048 + 127 = 2,175 is
    within: 2,048; 2,048 + 128 = 2,176 is not: 2,176 (and 4,096 + 128 = 4,224 likewise, 4,223 → 4,096)."""
    assert trtllm_runtime_batch(2175) == 2048
    assert trtllm_runtime_batch(2176) == 2176
    assert trtllm_runtime_batch(4223) == 4096
    assert trtllm_runtime_batch(4224) == 4224


def test_runtime_batch_capacity_counts_whole_tokens_per_stage(monkeypatch):
    """A stack with dynamic batch tuning (trtllm-serve here, 2,048 sequences) at pp 2, whose KV pool is set to
    1,015,963 tokens (about what the memory model gives Llama-3 8B on two H100s at fraction 0.9; fixed so the case
    does not move with it): each stage holds 1,015,963 // 2 = 507,981 whole tokens. A trace of 4 requests of 600
    prompt tokens and 144, 144, 144, 143 output tokens has a mean length of 600 + 143.75 = 743.75; 683 of them
    need 683 × 743.75 = 507,981.25 tokens, a quarter token more than a stage holds, so the cache holds 682 (the
    half token of 1,015,963 / 2 would have fit 683). 682 < 832: the table's 768, stated with the 682."""
    real_stack, real_memory = serving_defaults.serving_stack, serving_defaults.serving_memory
    monkeypatch.setattr(serving_defaults, "serving_stack",
                        lambda framework: dict(real_stack(framework), runtime_batch_tuning=True))
    monkeypatch.setattr(serving_defaults, "serving_memory",
                        lambda *a, **kw: dataclasses.replace(real_memory(*a, **kw), kv_tokens=1_015_963))
    trace = Load(arrival="trace", requests=tuple((0.0, 600, o) for o in (144, 144, 144, 143)))
    scn, lim = resolve_limits(_scn(ServingPlan(pp=2, framework="trtllm-serve"), trace))
    assert lim.memory.kv_tokens == 1_015_963 and scn.plan.max_batch == 2048
    assert 682 * 743.75 <= 507_981 < 683 * 743.75 <= 1_015_963 / 2
    assert lim.max_batch == 768
    assert dict(scn.chosen)["runtime batch"] == (
        "768 — TensorRT-LLM's dynamic batch tuning for a KV cache holding 682 sequences of 743.75 tokens "
        "(max_batch 2048)")


# ---- the calibration a simulation is given ----------------------------------------------------------------------

def test_simulate_prices_with_the_calibration_it_is_given():
    """`simulate(scn, calibration=cal)` prices every iteration with `cal`, exactly as a scenario that carries `cal`
    itself; a profile with 40 us of fixed cost per kernel instead of the H100 profile's 4 us makes the run slower
    than the default profile's."""
    base = calibration_for(H100.device.name)
    slow = dataclasses.replace(base, kernel_overhead_s=40e-6)
    load = Load(arrival="offline", input_tokens=128, output_tokens=16, num_requests=8)
    scn = _scn(load=load)
    given = simulate(scn, calibration=slow)
    carried = simulate(dataclasses.replace(scn, calibration=slow))
    default = simulate(scn)
    assert given.cost.cal is slow
    assert given.result.makespan_s == pytest.approx(carried.result.makespan_s, rel=1e-12)
    assert given.result.makespan_s > 1.5 * default.result.makespan_s


# ---- the lane simulator -----------------------------------------------------------------------------------------

def _spec_lane(log: list):
    """Decode-first, chunked prefill, a 4-token budget, one draft token (q = 2 query tokens per decode, spec gain 1),
    iterations of 1 s: requests A and B of 1 prompt + 3 output tokens, C of 10 + 2."""
    spec = LaneSpec(8, 4, 100, 16, "decode-first", "reserve", True, spec_tokens=1, spec_gain=1.0)
    return bare_lane(spec, lambda *args, **kw: 1.0, [1, 1, 10], [3, 3, 2], log)


def test_decodes_that_fill_the_budget_run_without_a_prompt_chunk():
    """(`_spec_lane`) 0-1 s: A (1), B (1) and C's first 2 prompt tokens fill the budget; A and B emit their first
    token. 1-3 s: A and B decode with 2 query tokens each = 4, the whole budget: C's prompt waits (no empty chunk),
    so these are 2 merged decode-only steps and A, B finish at 3 s. 3-5 s: C's remaining 8 tokens in two chunks of
    4 (first token at 5 s); 5-6 s its last decode. Prompt iterations: the three with prompt tokens, no more."""
    log: list = []
    lane, a = _spec_lane(log)
    lane.run()
    assert [(r.start_s, r.duration_s, r.steps, r.decodes, r.prompt_tokens) for r in log] == [
        (0.0, 1.0, 1, 0, 4), (1.0, 2.0, 2, 2, 0), (3.0, 1.0, 1, 0, 4), (4.0, 1.0, 1, 0, 4), (5.0, 1.0, 1, 1, 0)]
    assert a["first"].tolist() == [1.0, 1.0, 5.0] and a["finish"].tolist() == [3.0, 3.0, 6.0]
    assert lane.tot.prompt_iterations == 3 and lane.tot.prompt_iteration_chunks == 5
    assert lane.tot.prompt_iteration_decodes == 0


def test_a_lanes_busy_time_is_the_sum_of_its_iterations():
    """(`_spec_lane`) The lane's totals add up every iteration's time: 1 + 2 + 1 + 1 + 1 = 6 s over 6 iterations
    (the merged record counts 2), the sum of the log's durations — not the last iteration's 1 s."""
    log: list = []
    lane, _ = _spec_lane(log)
    lane.run()
    assert lane.tot.busy_s == 6.0 == sum(r.duration_s for r in log)
    assert lane.tot.iterations == 6


# ---- the calibration provenance ---------------------------------------------------------------------------------

def test_profile_usage_prints_the_kernel_overhead_in_microseconds():
    """The kernel overhead is printed in microseconds, seconds × 10^6 to one decimal: 1 s (an extreme profile, where
    a wrong factor shows in the printed digits) is 1000000.0 us, 4 us is 4.0 us."""
    cal = calibration_for(H100.device.name)
    assert "; kernel overhead 1000000.0 us" in profile_usage(dataclasses.replace(cal, kernel_overhead_s=1.0), "bf16",
                                                             set())
    assert "; kernel overhead 4.0 us" in profile_usage(dataclasses.replace(cal, kernel_overhead_s=4e-6), "bf16", set())
