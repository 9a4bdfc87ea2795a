"""Serving values the seed-23 mutation sample (benchmarks/mutation.py) found unguarded in schedule/: trtllm-bench's
batch rounding just above a multiple of 32, an unpublished ep taking the stack's default, the KV hand-off note's
fabric, a prefill-only lane's reserve admission and the warm-up cut of a static steady state — each pinned by a
hand value."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.schedule.serving_defaults import resolve_layout_defaults, trtllm_bench_limits
from narrowpath.schedule.serving_run import simulate
from narrowpath.schedule.serving_sim import LaneSpec
from narrowpath.schedule.serving_steady import steady_lane
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from narrowpath.workload.counts import parameter_count
from tests.schedule.lanes import bare_lane

H100 = system("dgx-h100")


def _scn(plan: ServingPlan, load: Load | None = None, mdl: str = "llama3-8b") -> ServingScenario:
    load = load or Load(arrival="offline", input_tokens=2048, output_tokens=128, num_requests=8)
    return ServingScenario(system=H100, model=model(mdl), plan=plan, load=load, num_gpus=plan.num_gpus)


def test_trtllm_bench_rounds_a_small_batch_up_to_a_multiple_of_32():
    """tuning.py rounds max_batch_size up to a multiple of 32 (at least 64) below 256. Llama-3 8B FP8 on one H100
    (65,536 B of KV a token: 2·32 layers·8 kv heads·128·1 B), the KV fraction set so that the engine's free
    memory holds 130 requests of 2,048 + 128 tokens: batch 32·⌈130/32 = 4.06⌉ = 160 (32·⌈130/33⌉ = 128 would
    be a multiple of 32 too small for 130); tokens 130·(1 + 2,048/128) = 2,210 → 256·⌈8.63⌉ = 2,304."""
    scn = _scn(ServingPlan(framework="TensorRT-LLM 1.0", weight_precision="fp8", kv_precision="fp8"))
    m = scn.model
    per_token = 2 * m.layers * m.kv_heads * m.head_dim * 1
    assert per_token == 65_536
    free = H100.device.hbm.capacity_bytes - parameter_count(m) * 1.0
    fraction = 130 * 2176 * per_token / free
    assert 0.0 < fraction < 1.0
    assert trtllm_bench_limits(scn, 2048, 128, fraction, 2048, True) == (160, 2304)


def test_an_unpublished_ep_takes_the_stacks_default_even_when_the_plan_holds_another():
    """An open ep under TensorRT-LLM 1.0 (layout_defaults ep 1: the experts run tensor-parallel over tp) becomes
    1 in the plan, whatever placeholder the plan held: Mixtral 8x7B at tp 8 with ep 8 on 8 GPUs comes out at ep 1,
    noted as the stack's default."""
    scn = _scn(ServingPlan(framework="TensorRT-LLM 1.0", tp=8, ep=8), mdl="mixtral-8x7b")
    out, still = resolve_layout_defaults(scn, ("ep",))
    assert out.plan.ep == 1 and still == ()
    assert out.chosen == (("ep", "1 — default of the trtllm-bench stack (not published)"),)


def test_a_one_gpu_instance_hands_its_kv_off_over_the_scale_up_fabric():
    """A disaggregated Llama-3 8B run of one prefill and one decode instance of 1 GPU each on a DGX H100: the two
    instances fit one 8-GPU NVLink domain (2·1 <= 8), so the hand-off note names the scale-up fabric."""
    load = Load(arrival="offline", input_tokens=128, output_tokens=8, num_requests=8)
    run = simulate(_scn(ServingPlan(replicas=2, prefill_replicas=1), load))
    assert run.scenario.plan.instance_gpus == 1
    [note] = [n for n in run.result.notes if n.startswith("KV hand-off")]
    assert note.endswith("per request (scale-up fabric)")


def test_a_prefill_only_lane_reserves_only_the_prompts_blocks():
    """A prefill-only lane (the prefill side of a disaggregated deployment) under reserve admission holds a
    request's KV only until the hand-off, so it reserves the prompt's blocks, not prompt + output: two requests of
    16 + 100 tokens with 16-token blocks need 1 block each of the lane's 8 and are prefilled together in the first
    1-s iteration (both ready at 1 s, 2 blocks at the peak). Reserving ⌈116 / 16⌉ = 8 blocks each would run them
    one after the other (ready at 1 s and 2 s, 8 blocks at the peak)."""
    spec = LaneSpec(4, 64, 8, 16, "prefill-only", "reserve", True)
    lane, arrays = bare_lane(spec, lambda *a, **kw: 1.0, [16, 16], [100, 100])
    lane.run()
    assert lane.ready == [(1.0, 0), (1.0, 1)]
    assert lane.tot.kv_peak_blocks == 2
    assert arrays["first"].tolist() == [1.0, 1.0]


def test_a_static_steady_state_skips_the_warm_up_batch_of_every_lane():
    """steady_lane of a static plan serves fixed batches of max_batch · lanes requests and measures after the first
    (warm-up) one of all lanes: 2 replicas of max_batch 2 → 4 requests a batch, 12 in all, the last 8 measured.
    Every batch waits for the one before it: batch k's TTFT is t0 + k·T (t0 the first batch's TTFT, T its finish
    time), so the measured TTFTs are 4 × (t0 + T) and 4 × (t0 + 2T): mean and median t0 + 1.5·T, p90 t0 + 2T."""
    plan = ServingPlan(policy="static", replicas=2, max_batch=2)
    scn = _scn(plan, Load(arrival="offline", input_tokens=128, output_tokens=16, num_requests=8))
    fixed = dataclasses.replace(scn.load, arrival="fixed-batch", batch_size=4, num_requests=12)
    res = simulate(dataclasses.replace(scn, load=fixed), (), None, log_lane=False).result
    ttft = res.first_token_s - res.arrival_s
    t0, T = float(ttft[0]), float(res.finish_s[0])
    assert np.allclose(ttft, np.repeat([t0, t0 + T, t0 + 2 * T], 4))
    s = steady_lane(scn)
    assert s.lanes == 2
    assert s.ttft_s["mean"] == pytest.approx(t0 + 1.5 * T)
    assert s.ttft_s["p50"] == pytest.approx(t0 + 1.5 * T)
    assert s.ttft_s["p90"] == pytest.approx(t0 + 2 * T)
