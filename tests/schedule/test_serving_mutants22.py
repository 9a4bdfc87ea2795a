"""Serving values the seed-22 mutation sample (benchmarks/mutation.py) found unguarded in schedule/: trtllm-bench's
token budget just above 8,192 and the peak KV blocks of a static batch — each pinned by a hand value."""
from __future__ import annotations

import math

from narrowpath.catalog import model, system
from narrowpath.schedule.serving_defaults import trtllm_bench_limits
from narrowpath.schedule.serving_run import simulate
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from narrowpath.workload.counts import parameter_count

H100 = system("dgx-h100")


def _scn(plan: ServingPlan, load: Load | None = None) -> ServingScenario:
    load = load or Load(arrival="offline", input_tokens=2048, output_tokens=128, num_requests=8)
    return ServingScenario(system=H100, model=model("llama3-8b"), plan=plan, load=load, num_gpus=plan.num_gpus)


def test_trtllm_bench_rounds_a_token_budget_just_over_8192_to_1024():
    """tuning.py's finetune_setting rounds max_num_tokens up to a multiple of 512 below 8,192 and of 1,024 from
    8,192 on. Llama-3 8B FP8 on one H100 (65,536 B of KV a token: 2·32 layers·8 kv heads·128·1 B), with the KV
    fraction set so that the engine's free memory holds 2^20 + 64 = 1,048,640 tokens: at ISL 2,048 / OSL 128 that
    is 1,048,640 / 2,176 = 481.9 requests → batch 128·⌈3.77⌉ = 512, and tokens 481.9 · (1 + 2,048/128) =
    1,048,640 / 128 = 8,192.5 → 1,024·⌈8.0005⌉ = 9,216 (512·⌈16.001⌉ = 8,704 if 8,192.5 counted as below 8,192)."""
    scn = _scn(ServingPlan(framework="TensorRT-LLM 1.0", weight_precision="fp8", kv_precision="fp8"))
    m = scn.model
    per_token = 2 * m.layers * m.kv_heads * m.head_dim * 1
    assert per_token == 65_536
    free = H100.device.hbm.capacity_bytes - parameter_count(m) * 1.0
    fraction = (2**20 + 64) * per_token / free
    assert 0.0 < fraction < 1.0
    assert trtllm_bench_limits(scn, 2048, 128, fraction, 2048, True) == (512, 9216)


def test_a_static_batch_peaks_at_the_kv_blocks_of_all_its_sequences():
    """A fixed batch of 8 requests of 128 + 16 tokens is served as one static batch whose sequences hold their
    whole KV from the start: ⌈144 / 16⌉ = 9 blocks of 16 tokens each, 72 blocks at the peak (TensorRT-LLM 0.x
    GptSession allocates the batch's KV whole)."""
    load = Load(arrival="fixed-batch", input_tokens=128, output_tokens=16, batch_size=8)
    run = simulate(_scn(ServingPlan(), load))
    res = run.result
    assert run.scenario.plan.policy == "static" and res.block_tokens == 16
    assert res.totals.kv_peak_blocks == 8 * math.ceil((128 + 16) / 16) == 72
    assert res.kv_peak_utilisation == 72 / res.kv_blocks_per_lane
