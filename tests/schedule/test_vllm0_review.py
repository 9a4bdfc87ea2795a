"""Review of the vLLM V0 stacks (tests/schedule/test_vllm0_stack.py): how a framework text picks the engine, the
V0 scheduler's order once chunked prefill is on, when V0 turns chunking on by itself, and the per-sequence host time
where the asynchronous output processor is off. Values by hand from vLLM's sources (catalog/serving_stacks.yaml)."""
from __future__ import annotations

import pytest

from narrowpath.analysis.serving_whatif import candidates
from narrowpath.catalog import model, system
from narrowpath.catalog.serving import serving_stack
from narrowpath.errors import InfeasibleError
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import resolve_limits
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario


@pytest.mark.parametrize("framework, stack", [
    ("vllm/vllm-openai:v0.6.2", "vllm-0.6"),  # the docker image's tag names the release
    ("vllm-openai:v0.5.4", "vllm-0.5"),
    ("vllm/vllm-openai:v0.8.1", "vllm"),
    ("vLLM 0.8.1 (was vLLM 0.5.3)", "vllm"),  # the first version written is the run's, whatever the entry order
    ("vLLM 0.5.3 (later vLLM 0.8.1)", "vllm-0.5"),
    ("vLLM 0.7.3 (V1 engine, VLLM_USE_V1=1)", "vllm"),  # V1 opt-in before it became the default
    ("vLLM 0.7.3 (VLLM_USE_V1=1)", "vllm"),
    ("vLLM 0.9.2 (VLLM_USE_V1=0)", "vllm-v0"),  # V0 kept on after 0.8
    ("vLLM 0.6.3 (VLLM_USE_V1=0)", "vllm-0.6"),
    ("SGLang 0.4 (vLLM 0.6 kernels)", "sglang"),  # SGLang named, whatever it borrows
    ("SGLang 0.4 (vLLM kernels)", "sglang"),
])
def test_a_framework_text_picks_the_engine_it_names(framework, stack):
    assert serving_stack(framework)["id"] == stack


def _scn(mdl, framework: str, num_gpus: int = 1, sysm: str = "dgx-h100", **plan) -> ServingScenario:
    load = Load(arrival="offline", input_tokens=512, output_tokens=256, num_requests=200)
    return ServingScenario(system=system(sysm), model=mdl, plan=ServingPlan(framework=framework, **plan),
                           load=load, num_gpus=num_gpus)


def test_chunked_prefill_runs_v0s_decode_first_scheduler():
    """With chunked prefill V0 runs Scheduler._schedule_chunked_prefill: the running decodes first, then prompt
    chunks in the budget left (vllm/core/scheduler.py) — decode-first, whether V0 turned chunking on by itself or it
    was stated; a stated policy is kept."""
    kw = dict(num_gpus=8, tp=8, weight_precision="fp8")
    auto, _ = resolve_limits(_scn(model("llama3-405b"), "vLLM 0.7.3", **kw))
    assert auto.plan.chunked_prefill is True and auto.plan.policy == "decode-first"
    assert "chunked prefill" in dict(auto.chosen)["policy"]
    stated, lim = resolve_limits(_scn(model("llama3-8b"), "vLLM 0.6.3", tp=1, chunked_prefill=True))
    assert (stated.plan.policy, lim.max_num_tokens) == ("decode-first", 512)
    kept, _ = resolve_limits(_scn(model("llama3-405b"), "vLLM 0.7.3", policy="prefill-first", **kw))
    assert kept.plan.policy == "prefill-first" and kept.plan.chunked_prefill is True
    plain, _ = resolve_limits(_scn(model("llama3-8b"), "vLLM 0.7.3", tp=1))
    assert (plain.plan.policy, plain.plan.chunked_prefill) == ("prefill-first", False)


def test_no_automatic_chunking_for_mla_or_before_pr_6666():
    """V0 forces chunked prefill off for an MLA model ('MLA is enabled; forcing chunked prefill and prefix caching to
    be disabled', v0.7.1-v0.7.3; _set_default_args_v0 later): DeepSeek-V3's 163,840-token limit keeps the budget
    max(max_model_len, 2048). Releases before PR #6666 (v0.5.3) never chunk by themselves."""
    scn, lim = resolve_limits(_scn(model("deepseek-v3"), "vLLM 0.7.3", 8, "dgx-h200", tp=8, weight_precision="fp8"))
    assert scn.plan.chunked_prefill is False and lim.max_num_tokens == 163840
    # on H200s: a 131,072-token forward's workspace beside 405B's FP8 weights leaves an H100 no KV cache within
    # vLLM's 0.9 of the whole GPU (as vLLM refuses it: max_model_len has to come down)
    kw = dict(num_gpus=8, sysm="dgx-h200", tp=8, weight_precision="fp8")
    with pytest.raises(InfeasibleError, match="vLLM gpu_memory_utilization"):
        resolve_limits(_scn(model("llama3-405b"), "vLLM 0.5.2", **{**kw, "sysm": "dgx-h100"}))
    old, old_lim = resolve_limits(_scn(model("llama3-405b"), "vLLM 0.5.2", **kw))
    assert old.plan.chunked_prefill is False and old_lim.max_num_tokens == 131072
    assert resolve_limits(_scn(model("llama3-405b"), "vLLM 0.5.4", **kw))[0].plan.chunked_prefill is True
    assert resolve_limits(_scn(model("llama3-405b"), "vLLM 0.9 VLLM_USE_V1=0", **kw))[0].plan.chunked_prefill is True


def _host_s(framework: str, **plan) -> float:
    scn, lim = resolve_limits(_scn(model("llama3-8b"), framework, num_gpus=plan.pop("num_gpus", 1), **plan))
    return ServingCost(scn, lim.max_num_tokens).host_per_request_s


def test_the_async_output_processor_is_off_with_pipeline_parallelism_or_speculative_decoding():
    """ModelConfig.verify_async_output_proc (v0.6-v0.7) turns it off for pp > 1 and for speculative decoding: the
    output processing is serial again, 35 µs a sequence as before v0.6."""
    assert _host_s("vLLM 0.6.3", tp=1) == pytest.approx(28e-6)
    assert _host_s("vLLM 0.6.3", tp=1, pp=2, num_gpus=2) == pytest.approx(35e-6)
    assert _host_s("vLLM 0.7.3", tp=1, spec_tokens=2, spec_acceptance=0.7) == pytest.approx(35e-6)
    assert _host_s("vLLM 0.5.4", tp=1) == pytest.approx(35e-6)


def test_the_cuda_graph_whatif_says_why_it_does_not_apply_to_v0():
    """V0 waits for each step (a synchronous step), so 'does not wait for each step' would be false: its decode
    steps already replay captured graphs."""
    _, skipped = candidates(resolve_limits(_scn(model("llama3-8b"), "vLLM 0.5.3", tp=1))[0], False)
    assert dict(skipped)["CUDA graphs"] == "decode steps already replay captured graphs"

