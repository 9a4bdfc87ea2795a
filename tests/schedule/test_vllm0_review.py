"""Review of the vLLM V0 stacks (tests/schedule/test_vllm0_stack.py): how a framework text picks the engine, the
V0 scheduler's order once chunked prefill is on, when V0 turns chunking on by itself, and the per-sequence host time
where the asynchronous output processor is off. Values by hand from vLLM's sources (catalog/serving_stacks.yaml)."""
from __future__ import annotations

import pytest

from narrowpath.catalog.serving import serving_stack


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

