"""Multi-head latent attention's chunked prefill rebuilds the keys and values of the prefix already cached ahead of
each prompt chunk: the cached latents are gathered and up-projected again (`kv_b_proj`) before the chunk attends to
them — vLLM's MLA `_compute_prefill_context`, as TensorRT-LLM and SGLang run chunked MLA prefill. Worked by hand for
DeepSeek-V3 at tp 8 (128 heads of qk_nope 128 + v 128, latent 512), and tracked through the simulator's tallies
into the accounts."""
from __future__ import annotations

import pytest

from narrowpath.analysis.serving_accounts import iteration_kinds, serving_accounts
from narrowpath.catalog import model, system
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import resolve_formats, resolve_limits
from narrowpath.schedule.serving_run import simulate
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from narrowpath.workload.serving import prefix_rebuild_op

DSV3 = model("deepseek-v3")
ONE_LONG_PROMPT = Load(arrival="offline", input_tokens=32768, output_tokens=4, num_requests=1)


def _scn(mdl, plan, load=ONE_LONG_PROMPT, sysm="dgx-h200"):
    return ServingScenario(system=system(sysm), model=model(mdl), plan=plan, load=load, num_gpus=plan.num_gpus)


def _cost(mdl: str, plan: ServingPlan) -> ServingCost:
    scn, _ = resolve_limits(resolve_formats(_scn(mdl, plan), ()))
    return ServingCost(scn, 8192)


def test_the_rebuild_is_the_latent_up_projection_of_the_prefix_by_hand():
    """24,576 cached tokens (a 32k prompt's fourth 8k chunk) at tp 8: 2·24576·512·(128/8)·(128 + 128) =
    103,079,215,104 FLOPs per layer, reading the gathered latents and the weights, writing per-head K/V in 16 bit."""
    plan = ServingPlan(tp=8, weight_precision="fp8")
    f = _cost("deepseek-v3", plan).f
    op = prefix_rebuild_op(DSV3, plan, f, 24576)
    assert op.name == "kv_up_prefix" and op.flop == 103_079_215_104
    assert op.flop == 2 * 24576 * 512 * 16 * 256
    assert prefix_rebuild_op(DSV3, plan, f, 0) is None
    assert prefix_rebuild_op(model("llama3-8b"), ServingPlan(), f, 24576) is None  # its cache holds K/V already


def test_a_chunk_after_a_cached_prefix_pays_the_rebuild_and_the_fast_path_agrees():
    cost = _cost("deepseek-v3", ServingPlan(tp=8, weight_precision="fp8"))
    layers = len(cost.kinds[0])
    first = cost.attention_ops(0, 0, 0, 8192, 8192 * 4096.5, 8192)
    fourth = cost.attention_ops(0, 0, 0, 8192, 8192 * (24576 + 4096.5), 8192 + 24576)
    assert "kv_up_prefix" not in {op.name for op, _ in first}
    rebuild = [(op, n) for op, n in fourth if op.name == "kv_up_prefix"]
    assert len(rebuild) == 1 and rebuild[0][1] == layers and rebuild[0][0].flop == 2 * 24576 * 512 * 16 * 256
    for args in ((0, 0, 8192, 8192 * 4096.5, 8192), (0, 0, 8192, 8192 * 28672.5, 32768),
                 (6, 6 * 3000, 2048, 2048 * 5000.0, 2048 + 4000), (3, 9000, 0, 0, 0)):
        assert cost.attention_s(0, *args) == pytest.approx(cost.op_s(cost.attention_ops(0, *args)), rel=1e-12)
    without = cost.op_s([(op, n) for op, n in fourth if op.name != "kv_up_prefix"])
    assert cost.attention_s(0, 0, 0, 8192, 8192 * 28672.5, 32768) > without


def test_the_simulator_tallies_the_cached_prefix_and_the_accounts_read_it():
    """One 32,768-token prompt in chunks of 8,192: the chunks run after 0, 8,192, 16,384 and 24,576 cached tokens,
    49,152 in all; the prompt iterations' mean context is their chunk plus 12,288 cached tokens."""
    plan = ServingPlan(tp=8, weight_precision="fp8", chunked_prefill=True, max_num_tokens=8192)
    run = simulate(_scn("deepseek-v3", plan))
    t = run.result.totals
    assert (t.prompt_tokens, t.prompt_prefix_tokens, t.prompt_iterations) == (32768, 49152, 4)
    kind = next(k for k in iteration_kinds(run) if k.prompt_tokens)
    assert kind.prompt_prefix == 12288 and kind.prompt_tokens == 8192
    assert serving_accounts(run) is not None
    whole = simulate(_scn("deepseek-v3", ServingPlan(tp=8, weight_precision="fp8", chunked_prefill=False,
                                                     max_num_tokens=32768)))
    assert whole.result.totals.prompt_prefix_tokens == 0  # one chunk: nothing cached ahead of it


def test_the_steady_prefill_capacity_prices_the_chunks_cached_prefix():
    """serving_steady.prefill_rate_per_s (the disaggregated split, the serving what-ifs): a 32,768-token prompt in
    8,192-token budgets runs 4 chunks after 0, 8,192, 16,384 and 24,576 cached tokens — 12,288 on average — so each
    budget iteration reads (and for MLA rebuilds) 8,192 + 12,288 context tokens; a prompt within the budget none."""
    from narrowpath.schedule.serving_steady import prefill_rate_per_s
    cost = _cost("deepseek-v3", ServingPlan(tp=8, weight_precision="fp8"))
    it = cost.iteration_s(8192, 0, 0, 8192, 8192 * 32769 / 2, 8192 + 12288, 1.0)
    assert prefill_rate_per_s(cost, 1, 8192, 32768) == pytest.approx(8192 / 32768 / it, rel=1e-12)
    no_prefix = cost.iteration_s(8192, 0, 0, 8192, 8192 * 32769 / 2, 8192, 1.0)
    assert it > no_prefix
    short = cost.iteration_s(8192, 0, 0, 8192, 8192 * 2049 / 2, 8192, 4.0)
    assert prefill_rate_per_s(cost, 1, 8192, 2048) == pytest.approx(8192 / 2048 / short, rel=1e-12)
