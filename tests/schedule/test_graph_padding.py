"""A decode iteration runs on a captured CUDA graph of a fixed batch size: TensorRT-LLM's PyTorch backend keeps the
configured sizes a pure decode batch can reach, pads a generation-only batch with one-token dummy requests up to the
next captured size, and runs eagerly when no graph fits (model_engine.py `_filter_cuda_graph_batch_sizes`,
`_get_padded_batch`; tech blog 20 measures what the padding costs). Values by hand from those rules."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model, system
from narrowpath.catalog.serving import serving_stack
from narrowpath.schedule import serving_cost as serving_cost_mod
from narrowpath.schedule.serving_cost import ServingCost, captured_graph_sizes, graph_batch
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario

PERF = [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192]
"""The performance overview's llm_options.yml (TensorRT-LLM 1.0 perf-overview.md)."""
X2 = [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 256, 512, 1024, 2048]
"""The default 'x2' list of tech blog 20."""


def test_the_engine_keeps_the_sizes_a_decode_batch_can_reach():
    """max_batch 512, max_num_tokens 2048: every size up to 512 (1024 and above dropped). max_batch 469: the sizes
    to 384, then 469 itself (padding on: a batch of 400 may pad to the ceiling); without padding the list stops at
    384. Speculative decoding with 3 draft tokens spends 4 tokens a request: max_num_tokens 2048 → a ceiling of
    512 even at max_batch 4096. A token budget below the batch limit: 300 / 200 → ceiling 200. Limits not yet
    chosen (0) bound nothing. The ceiling is added only when a configured size lies above it."""
    assert captured_graph_sizes(PERF, 512, 2048, 1, True) == PERF[:11]
    assert captured_graph_sizes(PERF, 469, 2048, 1, True) == PERF[:10] + [469]
    assert captured_graph_sizes(PERF, 469, 2048, 1, False) == PERF[:10]
    assert captured_graph_sizes(PERF, 4096, 2048, 4, True) == PERF[:11]
    assert captured_graph_sizes(PERF, 4096, 2050, 4, True) == PERF[:11]  # ⌊2050 / 4⌋ = 512, a listed size
    assert captured_graph_sizes(PERF, 512, 2048, 1, False) == PERF[:11]  # the limit itself listed: kept
    assert captured_graph_sizes(PERF, 1, 2048, 1, True) == [1]  # max_batch 1: one graph
    assert captured_graph_sizes(PERF, 300, 200, 1, True) == PERF[:8] + [200]
    assert captured_graph_sizes(PERF, 0, 0, 1, True) == PERF
    # sorted first; no configured size above the ceiling, so none is added: a batch of 600 has no graph
    assert captured_graph_sizes([512, 1, 128], 1000, 8192, 1, True) == [1, 128, 512]
    assert graph_batch(600, [1, 128, 512], True) is None


def test_a_decode_batch_runs_at_the_next_captured_size_or_eagerly():
    """469 sequences on the list to 512 run as 512 (43 dummies); 384 is captured; 513 fits no graph (eager).
    Without padding only a captured size has a graph. Tech blog 20's 'up to 50 % padding waste' with the x2 list:
    257 sequences pad to 512 (255 of 512 slots empty)."""
    sizes = PERF[:11]
    assert graph_batch(469, sizes, True) == 512
    assert graph_batch(384, sizes, True) == 384
    assert graph_batch(384, sizes, False) == 384
    assert graph_batch(513, sizes, True) is None
    assert graph_batch(469, sizes, False) is None
    assert graph_batch(1, sizes, True) == 1
    padded = graph_batch(257, X2, True)
    assert padded == 512 and (padded - 257) / padded == pytest.approx(0.498, abs=1e-3)


def _cost(framework: str = "TensorRT-LLM 1.0 (PyTorch backend)", max_batch: int = 512, max_num_tokens: int = 2048,
          **plan) -> ServingCost:
    p = ServingPlan(framework=framework, weight_precision="fp8", kv_precision="fp8", max_batch=max_batch,
                    max_num_tokens=max_num_tokens, **plan)
    scn = ServingScenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=p,
                          load=Load(arrival="offline", input_tokens=128, output_tokens=2048), num_gpus=p.num_gpus)
    return ServingCost(scn, 2048)


def test_trtllm_bench_pads_a_decode_iteration_with_one_token_dummies():
    """Llama-3 8B FP8 on one H100 under trtllm-bench's stack (the performance overview's sizes, max_batch 512):
    469 decodes over 469·1,000 context tokens cost what 512 decodes over 469·1,000 + 43 tokens cost without a size
    list, the output layer over 512 rows, the host's bookkeeping over the 469 real requests. 512 decodes are
    captured: no change. A prompt iteration is never padded."""
    assert serving_stack("TensorRT-LLM 1.0")["graph_batch_sizes"] == PERF
    assert serving_stack("TensorRT-LLM 1.0")["graph_padding"] is True
    cost = _cost()
    assert cost.graph_sizes == PERF[:11] and cost.graph_padding
    assert _cost(max_batch=469).graph_sizes == PERF[:10] + [469]  # padding on: the limit becomes a graph
    ctx = 469 * 1000.0
    padded = cost.iteration_s(469, 469, ctx)
    cost.graph_sizes = None
    assert padded == pytest.approx(cost.iteration_s(512, 512, ctx + 43, rows=512, requests=469), rel=1e-12)
    assert padded > cost.iteration_s(469, 469, ctx)  # the dummies cost GEMM rows and logits
    full = cost.iteration_s(512, 512, 512 * 1000.0)
    cost.graph_sizes = PERF[:11]
    assert cost.iteration_s(512, 512, 512 * 1000.0) == full
    prompt = cost.iteration_s(469 + 700, 469, ctx, 700, 700 * 701 / 2, 700)
    cost.graph_sizes = None
    assert cost.iteration_s(469 + 700, 469, ctx, 700, 700 * 701 / 2, 700) == prompt


def _stack(monkeypatch, **changes):
    real = serving_cost_mod.serving_stack

    def patched(framework):
        entry = dict(real(framework), **changes)
        return {k: v for k, v in entry.items() if v is not None}
    monkeypatch.setattr(serving_cost_mod, "serving_stack", patched)


def test_an_eager_decode_iteration_adds_the_kernel_dispatch_to_the_host_thread(monkeypatch):
    """Under a stack whose executor spends 0.1 s per request (the host binds) and captures graphs without padding,
    469 decodes (no graph) take 469 · 0.1 s plus the dispatch of Llama-3 8B's 293 kernels (8 per layer · 32 + the
    embedding, one attention core per layer, the output layer's 4) at host_dispatch_s; 384 decodes (captured) take
    384 · 0.1 s exactly. A stack whose prompt iterations replay graphs (no `eager_prefill`) still issues a decode
    batch no graph fits kernel by kernel, but not its prompt iterations. A size list without a `graph_padding`
    entry does not pad."""
    _stack(monkeypatch, host_per_request_s=0.1, graph_padding=False)
    cost = _cost()
    assert cost.stage_kernels == [293.0] and not cost.graph_padding
    assert cost.iteration_s(469, 469, 469e3) == pytest.approx(46.9 + 293 * cost.cal.host_dispatch_s, rel=1e-12)
    assert cost.iteration_s(384, 384, 384e3) == pytest.approx(38.4, rel=1e-12)
    _stack(monkeypatch, host_per_request_s=0.1, graph_padding=False, eager_prefill=False)
    c = _cost()  # an engine whose prompts replay graphs still issues a decode no graph fits kernel by kernel
    assert c.iteration_s(469, 469, 469e3) == pytest.approx(46.9 + 293 * c.cal.host_dispatch_s, rel=1e-12)
    assert c.iteration_s(469 + 100, 469, 469e3, 100, 5050.0, 100) == pytest.approx(46.9, rel=1e-12)
    _stack(monkeypatch, graph_padding=None)
    assert _cost(max_batch=469).graph_sizes == PERF[:10] and not _cost().graph_padding


def test_a_decode_batch_no_graph_fits_is_issued_kernel_by_kernel():
    """Padding off and 469 decodes not captured: the framework issues each kernel of the iteration (the profile's
    host_dispatch_s per kernel), on the same thread as the 469 requests' bookkeeping (29 µs each), overlapped with
    the GPU: max(GPU time, 469 · 29 µs + kernels · host_dispatch_s)."""
    cost = _cost()
    cost.graph_padding = False
    cost.graph_sizes = captured_graph_sizes(PERF, 512, 2048, 1, False)
    ctx = 469 * 1000.0
    gpu = cost.token_time_s(0, 469) + cost.attention_s(0, 469, ctx, 0, 0, 0) + cost.head_time_s(469)
    host = 469 * 29e-6 + cost.stage_kernels[0] * cost.cal.host_dispatch_s
    assert cost.cal.host_dispatch_s > 0
    assert cost.iteration_s(469, 469, ctx) == pytest.approx(max(gpu, host), rel=1e-12)
    assert cost.iteration_s(384, 384, 384 * 1000.0) == pytest.approx(
        max(cost.token_time_s(0, 384) + cost.attention_s(0, 384, 384e3, 0, 0, 0) + cost.head_time_s(384),
            384 * 29e-6), rel=1e-12)  # captured: replayed, the host does only the bookkeeping


def test_stacks_without_a_size_list_price_the_batch_as_it_is():
    """The tool's default stack and TensorRT-LLM 0.x (compiled engines) carry no size list: 469 decodes are priced
    as 469."""
    for fw in ("", "TensorRT-LLM 0.9"):
        assert not serving_stack(fw).get("graph_batch_sizes")
        cost = _cost(fw)
        assert cost.graph_sizes is None
    cost = _cost("")
    a = cost.iteration_s(469, 469, 469e3)
    assert a < cost.iteration_s(512, 512, 469e3 + 43)


def test_speculative_decoding_pads_every_query_of_a_dummy():
    """With 3 draft tokens each request verifies 4 tokens: a 1,024-token budget holds 256 decoding requests, so the
    graphs stop at 256; 100 requests pad to 128, the 28 dummies adding 4 · 28 = 112 tokens."""
    cost = _cost(max_num_tokens=1024, spec_tokens=3, spec_acceptance=0.7)
    assert cost.graph_sizes == PERF[:9]
    padded = cost.iteration_s(400, 100, 100e3, queries_per_seq=4.0)
    cost.graph_sizes = None
    assert padded == pytest.approx(cost.iteration_s(512, 128, 100e3 + 28, rows=128, queries_per_seq=4.0,
                                                    requests=100), rel=1e-12)


def test_a_plan_states_its_own_sizes_and_padding():
    """The DeepSeek-R1 blog's B200 c3072 run captures 1, 2, …, 256, 384 with padding and max batch 384: a plan that
    says so replaces the stack's list (300 decodes pad to 384, not 512); padding off in the plan wins over the
    stack's on; sizes on a stack without a list (the tool's default stack) apply."""
    own = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384)
    cost = _cost(max_batch=1024, graph_batch_sizes=own)
    assert cost.graph_sizes == list(own) and cost.graph_padding
    assert graph_batch(300, cost.graph_sizes, cost.graph_padding) == 384
    assert _cost(max_batch=1024).graph_sizes[-3:] == [384, 512, 1024]
    assert not _cost(graph_padding=False).graph_padding
    plain = _cost("", graph_batch_sizes=(64, 128))
    assert plain.graph_sizes == [64, 128] and not plain.graph_padding  # the default entry states no padding


def test_tech_blog_20s_list():
    """'+64': 1, 2, 4, every 8 to 128 (16 sizes), every 64 from 192 to 2,048 (30 sizes) = 49 graphs, the blog's
    count; a batch limit of 4,096 continues the steps (32 more); a limit between two steps gets a graph of its own
    (2,111: …, 2,048, 2,111), so the top batches do not run eagerly."""
    from narrowpath.schedule.serving_cost import finer_graph_sizes
    fine = finer_graph_sizes(512)
    assert len(fine) == 49 and fine[:5] == (1, 2, 4, 8, 16) and fine[18:21] == (128, 192, 256) and fine[-1] == 2048
    assert len(finer_graph_sizes(4096)) == 49 + 32 and finer_graph_sizes(4096)[-1] == 4096
    assert graph_batch(469, list(fine), True) == 512 and graph_batch(300, list(fine), True) == 320
    odd = finer_graph_sizes(2111)
    assert odd[-2:] == (2048, 2111) and len(odd) == 50 and graph_batch(2080, list(odd), True) == 2111
    assert finer_graph_sizes(2048)[-1] == 2048 and len(finer_graph_sizes(100)) == 49


def test_trtllm_serve_captures_the_llm_apis_default_sizes_without_padding():
    """The LLM API's default CudaGraphConfig generates sizes for a graph batch limit of 128 without padding: 1–31,
    32, 64, 128. Under trtllm-serve 100 decodes match no graph and run eagerly (the host issues every kernel beside
    its 29 µs a request), 64 replay a graph, and 200 (above 128) run eagerly too."""
    stack = serving_stack("trtllm-serve")
    assert stack["graph_batch_sizes"] == list(range(1, 33)) + [64, 128] and stack["graph_padding"] is False
    assert stack["eager_prefill"] is True
    cost = _cost("trtllm-serve")
    assert cost.graph_sizes == list(range(1, 33)) + [64, 128] and not cost.graph_padding
    dispatch = cost.stage_kernels[0] * cost.cal.host_dispatch_s

    def gpu(n):
        return cost.token_time_s(0, n) + cost.attention_s(0, n, n * 500.0, 0, 0, 0) + cost.head_time_s(n)
    for n, eager in ((100, True), (64, False), (200, True), (31, False)):
        host = n * 29e-6 + (dispatch if eager else 0.0)
        assert not eager or host > gpu(n)  # the eager dispatch binds: the case tells eager from replayed
        assert cost.iteration_s(n, n, n * 500.0) == pytest.approx(max(gpu(n), host), rel=1e-12)


def test_a_cost_shared_across_batch_limits_keeps_each_limits_graphs():
    """A search prices one layout for all its batch limits with the cost model of the largest: the sizes
    1 … 64, 100, 200, 400 under max_batch 400 keep 400; under 128 the engine keeps 1 … 100 and adds 128 (a listed
    size lies above it), so 128 decodes run unpadded — a shared cost must give what its own would."""
    from narrowpath.schedule.serving_run import simulate
    own = (1, 2, 4, 8, 16, 32, 64, 100, 200, 400)
    big = _cost(max_batch=400, max_num_tokens=4096, graph_batch_sizes=own)
    small = big.for_limits(128, 4096)
    assert big.graph_sizes == list(own) and small.graph_sizes == [1, 2, 4, 8, 16, 32, 64, 100, 128]
    assert big.for_limits(400, 4096) is big and big.graph_sizes == list(own)  # the original is not touched
    alone = _cost(max_batch=128, max_num_tokens=4096, graph_batch_sizes=own)
    assert small.iteration_s(128, 128, 128e3) == alone.iteration_s(128, 128, 128e3) < big.iteration_s(128, 128, 128e3)
    scn = dataclasses.replace(alone.scn, load=Load(arrival="offline", input_tokens=64, output_tokens=16,
                                                   num_requests=300))
    shared = simulate(scn, (), cost=big).result.output_tokens_per_s
    assert shared == pytest.approx(simulate(scn, ()).result.output_tokens_per_s, rel=1e-12)


def test_pipeline_stages_pad_their_decode_iteration_too():
    """pp 2: 469 decodes under the list to 512 cost what 512 decodes over 43 more context tokens cost unpadded."""
    p = ServingPlan(framework="TensorRT-LLM 1.0", weight_precision="fp8", kv_precision="fp8", max_batch=512,
                    max_num_tokens=2048, pp=2)
    scn = ServingScenario(system=system("dgx-h100"), model=model("llama3-70b"), plan=p, num_gpus=2,
                          load=Load(arrival="offline", input_tokens=128, output_tokens=2048))
    cost = ServingCost(scn, 2048)
    padded = cost.iteration_s(469, 469, 469e3)
    cost.graph_sizes = None
    assert padded == pytest.approx(cost.iteration_s(512, 512, 469e3 + 43, rows=512, requests=469), rel=1e-12)


@pytest.mark.parametrize("prompt, rows", [(0, 128), (100, 100)])
def test_the_draft_head_runs_at_the_graphs_size(prompt, rows):
    """Speculative decoding, 3 draft tokens, 100 decoding requests: a decode-only iteration pads to 128 and so does
    the draft head's work (per draft token one layer of 128 rows and the output layer over 128); an iteration with
    100 prompt tokens runs eagerly (no graph, no padding) and its draft works on the 100 real requests."""
    from narrowpath.schedule.serving_run import step_pricer
    cost = _cost(max_num_tokens=1024, spec_tokens=3, spec_acceptance=0.7)
    ops, trs = cost.head(rows)
    draft = 3 * (cost.token_time_s(0, rows) / cost.scn.model.layers + cost.op_s(ops)
                 + sum(x.cost.time_s for x in trs))
    args = (400 + prompt, 100, 1e5, prompt, prompt * (prompt + 1) / 2, prompt, 100 + (prompt > 0), 4.0)
    assert step_pricer(cost, 1, 3)(*args) == pytest.approx(cost.iteration_s(*args, None, draft), rel=1e-12)


def test_the_steady_state_of_a_search_uses_each_limits_graphs():
    """`search --serve` runs each batch limit's steady state on the layout's one cost model: with the list
    1 … 64, 100, 200, 400 a 128-sequence lane (shared cost built for 400) gives what its own cost gives, colocated
    and disaggregated (1 prefill + 1 decode instance)."""
    from narrowpath.schedule.serving_steady import steady_lane
    own = (1, 2, 4, 8, 16, 32, 64, 100, 200, 400)
    big = _cost(max_batch=400, max_num_tokens=4096, graph_batch_sizes=own)
    for plan in (dict(), dict(replicas=2, prefill_replicas=1)):
        alone = _cost(max_batch=128, max_num_tokens=4096, graph_batch_sizes=own, **plan)
        scn = dataclasses.replace(alone.scn, load=Load(arrival="offline", input_tokens=64, output_tokens=16))
        shared, fresh = steady_lane(scn, big), steady_lane(scn)
        assert shared.output_tokens_per_s == pytest.approx(fresh.output_tokens_per_s, rel=1e-12)
        assert shared.tpot_s["p50"] == pytest.approx(fresh.tpot_s["p50"], rel=1e-12)


def test_decode_rows_follow_the_graph():
    """The rows a decode-only iteration computes: 100 → 128 on the list to 512; 0 stays 0; without a list, or with
    no graph to fit (padding off, 100 not captured) the batch as it is. Speculative decoding's 4 tokens a request
    bound the graphs at 1,024 / 4 = 256 under other limits too."""
    cost = _cost()
    assert cost.decode_rows(100) == 128 and cost.decode_rows(0) == 0 and cost.decode_rows(512) == 512
    assert _cost("").decode_rows(100) == 100
    cost.graph_padding = False
    assert cost.decode_rows(100) == 100
    spec = _cost(max_num_tokens=1024, spec_tokens=3, spec_acceptance=0.7)
    assert spec.for_limits(512, 1024).graph_sizes == PERF[:9]
    assert spec.for_limits(512, 2048).graph_sizes == PERF[:11]
