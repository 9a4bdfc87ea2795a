"""Serving values the seed-24 mutation sample (benchmarks/mutation.py) found unguarded in schedule/: the FP8
attention core on a device with FP8 tensor cores, a static session's launch as its own iteration part,
trtllm-bench's token cap, the note of a static batch's token budget, a run of decode steps that leaves its line at
the third, a decode-only lane's admission of a prompt that ends on a block boundary, and the padded-decode total
— each pinned by a hand value."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model, system
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import resolve_limits, trtllm_bench_limits
from narrowpath.schedule.serving_sim import LaneSpec, linear_runs_s, linear_span
from narrowpath.schedule.serving_stats import LaneTotals
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from narrowpath.workload.counts import parameter_count
from tests.schedule.lanes import bare_lane

H100 = system("dgx-h100")
LOAD = Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=32)


def _scn(plan: ServingPlan, load: Load = LOAD, mdl: str = "llama3-8b") -> ServingScenario:
    return ServingScenario(system=H100, model=model(mdl), plan=plan, load=load, num_gpus=plan.num_gpus)


def test_an_fp8_kv_cache_on_an_h100_runs_the_attention_core_in_fp8():
    """TensorRT-LLM's FP8 context FMHA and XQA read an FP8 KV cache on a device with FP8 tensor cores: the H100
    has them (its datasheet's FP8 peak), so Llama-3 8B with an fp8 cache prices its attention core in fp8."""
    assert "fp8" in H100.device.peak_matrix_flop_per_s
    c = ServingCost(_scn(ServingPlan(framework="TensorRT-LLM 1.0", weight_precision="fp8", kv_precision="fp8",
                                     max_batch=64, max_num_tokens=2048)), 2048)
    assert c.f.core == "fp8"


def test_a_static_sessions_serial_launch_is_its_own_iteration_part():
    """TensorRT-LLM 0.5's GptSession waits for each step before enqueuing the next kernel by kernel
    (host_sync_per_step): a decode iteration of 64 sequences on Llama-3 8B (no captured graphs) pays the stage's
    kernels × the profile's host dispatch each (293 × 10 µs = 2.93 ms) after its GPU work. iteration_parts
    switches the mechanisms on one at a time — gpu, padding, launch, host, dispatch — so the GPU part is the bare
    GPU period and the launch part those 2.93 ms, not 0 with the launch folded into the GPU part."""
    c = ServingCost(_scn(ServingPlan(framework="TensorRT-LLM 0.5", weight_precision="bf16", kv_precision="bf16",
                                     max_batch=64, max_num_tokens=2048)), 2048)
    assert c.graph_sizes is None and c.launch_s is not None
    launch = c.stage_kernels[0] * c.cal.host_dispatch_s
    assert launch > 0
    parts = c.iteration_parts(64.0, 64.0, 64 * 100.0)
    bare = c.context_line(64.0, 64.0, pad=False, launch=False, host=False, eager=False)(64 * 100.0)
    assert parts["gpu"] == pytest.approx(bare, rel=1e-12)
    assert parts["launch"] == pytest.approx(launch, rel=1e-9)


def test_trtllm_bench_caps_the_token_budget_at_32768():
    """tuning.py caps max_num_tokens at 32,768 before rounding (to a multiple of 1,024 above 8,192). Llama-3 8B
    FP8 on one H100: (85.9 GB − 8,030,261,248 B of engine)·0.9 over 65,536 B a token (2·32 layers·8 kv heads·128
    ·1 B) × (4,096 + 16) tokens = 260.06 requests → batch 128·⌈260.06/128⌉ = 384; tokens 260.06·(1 + 4,096/16)
    = 66,836, capped at 32,768 (a multiple of 1,024 already). With chunking the longest prompt does not raise it."""
    scn = _scn(ServingPlan(framework="TensorRT-LLM 1.0", weight_precision="fp8", kv_precision="fp8"))
    assert parameter_count(scn.model) == 8_030_261_248
    requests = (85.9e9 - 8_030_261_248) * 0.9 / (65_536 * 4112)
    assert 256 < requests < 384 and requests * (1 + 4096 / 16) > 32_768
    assert trtllm_bench_limits(scn, 4096.0, 16.0, 0.9, 4096, True) == (384, 32_768)


def test_a_static_batchs_token_budget_is_noted_as_its_prompts():
    """A static batch of 4 requests of 64 prompt tokens on one lane: the budget is filled as the whole batch's
    prompts, 4·64 = 256 tokens, and the note says so."""
    load = Load(arrival="fixed-batch", batch_size=4, input_tokens=64, output_tokens=5, num_requests=8)
    scn, lim = resolve_limits(_scn(ServingPlan(), load))
    assert lim.max_num_tokens == 256
    assert dict(scn.chosen)["max_num_tokens"] == "256 — the whole batch's prompts"


def test_a_run_that_leaves_its_line_at_the_third_step_is_two_steps_long():
    """Step times 1, 2, 5 s: the first two lie on a line (slope 1 s), the third (5 s, not 3 s) does not, so the
    linear span is 2 and the run's exact time is 1 + 2 + 5 = 8 s (a trapezoid over all three would give
    3·(1 + 5)/2 = 9 s)."""
    times = [1.0, 2.0, 5.0]
    t_at = lambda k: times[k - 1]  # noqa: E731
    assert linear_span(t_at, 3) == 2
    assert linear_runs_s(t_at, 3) == 8.0


def test_a_decode_only_lane_admits_a_prompt_and_its_first_token_in_one_block():
    """A decode-only lane (the decode side of a disaggregated deployment) under on-demand KV takes a handed-off
    request's prompt and the one token the prefill instance produced: 15 + 1 = 16 tokens, one 16-token block
    (not ⌈17/16⌉ = 2)."""
    spec = LaneSpec(4, 64, 8, 16, "decode-only", "on-demand", True)
    lane, _ = bare_lane(spec, lambda *a, **kw: 1.0, [15], [4])
    assert lane._need(0) == 1


def test_padded_decodes_add_up_over_runs_of_decode_only_iterations():
    """Two runs of decode-only iterations on a captured graph of 8: 3 iterations of 5 decodes, then 2 of 6, run
    3·8 + 2·8 = 40 padded decodes in all."""
    t = LaneTotals()
    t.decode_only(3, 5.0, 300.0, 8)
    t.decode_only(2, 6.0, 240.0, 8)
    assert t.padded_decodes == 40.0
