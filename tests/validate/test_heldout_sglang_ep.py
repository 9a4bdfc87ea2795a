"""SGLang's DeepSeek-V3 prefill at EP 32 over four H100 nodes (benchmarks/heldout_sglang_ep.py; LMSYS's 96-H100
blog, nothing fitted to it) held to bounds, so that a regression in multi-node expert parallelism for serving (the
deduplicated dispatch, the balancer, FP8 prompt GEMMs, MLA prefill attention) fails here. Today -21 … -25 %: the
exchange is left exposed where the run overlaps it with the other micro-batch; the blog's ablation credits two-batch
overlap with +27 … +35 %, which puts the run without it at or 10–15 % above the model's non-overlapped figure
(docs/serving.md) — a change that models the overlap should move these bounds, and say so."""
from __future__ import annotations

import pytest

from narrowpath.validate.inference import run_case
from tests.validate.benchmark_module import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("heldout_sglang_ep")


@pytest.fixture(scope="module")
def rows(bench):
    out = {}
    for isl, per_node in bench.PREFILL.items():
        case = run_case(bench.prefill_case(isl, per_node), 0)
        assert case.failure is None, case.failure
        out[isl] = case
    return out


def test_every_row_within_its_bounds(rows):
    errors = {isl: c.figures["total_tokens_per_s"].error for isl, c in rows.items()}
    assert all(-0.30 <= e <= -0.15 for e in errors.values()), errors


def test_longer_prompts_cost_more_per_token_as_measured(rows):
    """Measured input tokens/s per node fall 57,674 -> 54,543 -> 50,302 from 1 k to 4 k prompts (attention grows
    with the prompt); the predictions fall too."""
    pred = [rows[isl].figures["total_tokens_per_s"].predicted * isl / (isl + 1) for isl in (1024, 2048, 4096)]
    assert pred[0] > pred[1] > pred[2]


def test_the_stated_dispatch_and_balancer_are_what_is_priced(rows):
    plan = rows[4096].run.scenario.plan
    assert (plan.ep_dispatch, plan.expert_balance, plan.redundant_experts, plan.dp, plan.ep, plan.weight_precision) \
        == ("dedup", "eplb", 32, 32, 32, "fp8")


def test_the_ep72_decode_row_within_its_bounds(bench):
    """9 nodes, EP 72 over 256 + 32 expert slots, DeepEP's low-latency kernels (one send per token and expert: priced
    as an all-to-all), 256 sequences per GPU at 2,000 tokens: 22,282 output tokens/s per node measured with two-batch
    overlap, ~17,755 without (the blog's +25.5 %); today -21 % against the former, -1 % against the latter."""
    assert bench.decode_case()["plan"]["ep_dispatch"] == "all_to_all"
    error = bench.decode_per_node() / bench.DECODE_PER_NODE - 1
    assert -0.30 <= error <= -0.10, error
