"""vLLM's V0 engine (the default before v0.8) as its releases run it: named by version, prefill-first without
chunked prefill unless the context limit exceeds 32K, 256 sequences, a token budget of max(max_model_len, 2048)
(512 / 2,048 when chunking), decode graphs every 8 to 256, and a synchronous step whose per-sequence CPU work adds
to the GPU's time instead of hiding behind it. Values by hand from those rules (catalog/serving_stacks.yaml)."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.analysis.serving_accounts import DISPATCH_KEY, HOST_KEY, IterationKind, kind_split
from narrowpath.catalog import model, system
from narrowpath.catalog.serving import serving_stack
from narrowpath.catalog.store import stack_matches, stated_versions
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import resolve_limits, vllm0_token_budget
from narrowpath.schedule.serving_run import simulate
from narrowpath.spec.hf_config import model_from_hf_config
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario

V0_SIZES = (1, 2, 4) + tuple(range(8, 257, 8))
"""_BATCH_SIZES_TO_CAPTURE = [1, 2, 4] + [8·i for i in 1..32] (vllm/worker/model_runner.py): 35 sizes to 256."""


@pytest.mark.parametrize("framework, stack", [
    ("vLLM 0.5.3", "vllm-0.5"),
    ("vllm==0.5.4", "vllm-0.5"),
    ("vLLM v0.4.0.post1", "vllm-0.5"),
    ("vLLM (v0.6.3)", "vllm-0.6"),
    ("vLLM v0.6.0", "vllm-0.6"),
    ("vllm-0.6.5", "vllm-0.6.5"),  # PR #10544's 2,048-token chunks
    ("vLLM 0.7.3", "vllm-0.6.5"),
    ("vLLM 0.8.1", "vllm"),  # V1 the default from 0.8.0
    ("vLLM 0.10.1", "vllm"),  # 0.10 is after 0.8 number by number, before it as text
    ("vLLM 0.27", "vllm"),
    ("vLLM", "vllm"),  # no version: the current engine
])
def test_a_vllm_version_picks_its_engine(framework, stack):
    assert serving_stack(framework)["id"] == stack


def test_versions_are_read_after_the_match_word_and_compared_number_by_number():
    assert stated_versions("vllm", "vLLM (v0.6.3) on 8 GPUs") == [(0, 6, 3)]
    assert stated_versions("vllm", "vllm==0.10.1") == [(0, 10, 1)]
    assert stated_versions("vllm", "SGLang 0.4") == []
    line = {"match": ["vllm"], "versions_from": "0.6", "versions_below": "0.8"}
    assert [stack_matches(line, f) for f in ("vLLM 0.6", "vLLM 0.7.9", "vLLM 0.8", "vLLM 0.10", "vLLM 0.5.9",
                                             "vLLM")] == [True, True, False, False, False, False]


def test_the_release_lines_share_the_v0_engine_and_differ_where_the_releases_do():
    """vllm-0.5 and vllm-0.6 extend vllm-0.6.5: the same defaults and graph list, each its own chunk budget and
    per-sequence host time (the asynchronous output processor arrived in v0.6.0)."""
    base, v6, v5 = (serving_stack(f) for f in ("vLLM 0.7", "vLLM 0.6.1", "vLLM 0.5.4"))
    for e in (base, v6, v5):
        assert tuple(e["graph_batch_sizes"]) == V0_SIZES and e["host_serial"] and e["eager_prefill"]
        assert e["defaults"]["policy"] == "prefill-first" and e["defaults"]["max_batch"] == 256
        assert e["defaults"]["chunked_prefill"] is False and e["defaults"]["kv_block_tokens"] == 16
    assert (base["chunked_budget"], v6["chunked_budget"], v5["chunked_budget"]) == (2048, 512, 512)
    assert v5["host_per_request_s"] > v6["host_per_request_s"] == base["host_per_request_s"]
    assert v5["match"] == ["vllm"] and "versions_from" not in v5  # its own line, not the parent's


def _scn(mdl, framework: str, load: Load | None = None, num_gpus: int = 1, sysm: str = "dgx-h100",
         **plan) -> ServingScenario:
    load = load or Load(arrival="offline", input_tokens=512, output_tokens=256, num_requests=200)
    return ServingScenario(system=system(sysm), model=mdl, plan=ServingPlan(framework=framework, **plan),
                           load=load, num_gpus=num_gpus)


def test_llama3_8b_takes_256_sequences_and_its_8k_context_as_the_token_budget():
    """Llama 3 8B states max_position_embeddings 8,192 (≤ 32K: no automatic chunking): max(8192, 2048) = 8,192."""
    scn, lim = resolve_limits(_scn(model("llama3-8b"), "vLLM 0.5.3", tp=1))
    p, why = scn.plan, dict(scn.chosen)
    assert (p.policy, p.chunked_prefill, p.admission, p.kv_block_tokens) == ("prefill-first", False, "on-demand", 16)
    assert (lim.max_batch, lim.max_num_tokens) == (256, 8192)
    assert "max_num_seqs" in why["max_batch"] and "max(max_model_len 8192, 2048)" in why["max_num_tokens"]


@pytest.mark.parametrize("framework, budget", [("vLLM 0.6.3", 512), ("vLLM 0.7.3", 2048), ("vLLM 0.5.4", 512)])
def test_a_128k_context_turns_chunked_prefill_on_with_the_releases_budget(framework, budget):
    """Llama 3.1 405B's 131,072-token limit exceeds 32K: V0 (0.5.3-0.7) chunks, 512 tokens before v0.6.5, and then
    schedules decode-first (_schedule_chunked_prefill)."""
    scn, lim = resolve_limits(_scn(model("llama3-405b"), framework, num_gpus=8, tp=8, weight_precision="fp8"))
    assert scn.plan.chunked_prefill is True and "131072" in dict(scn.chosen)["chunked_prefill"]
    assert (scn.plan.policy, lim.max_num_tokens) == ("decode-first", budget)  # the chunked scheduler's own order


def test_no_automatic_chunking_with_speculative_decoding_a_sliding_window_or_a_stated_setting():
    # H200s: unchunked, 405B's 131,072-token forward leaves an H100 no KV cache within vLLM's 0.9 of the GPU
    long, kw = model("llama3-405b"), dict(num_gpus=8, sysm="dgx-h200", tp=8, weight_precision="fp8",
                                          kv_precision="fp8")
    scn, _ = resolve_limits(_scn(long, "vLLM 0.7.3", spec_tokens=2, spec_acceptance=0.7, **kw))
    assert scn.plan.chunked_prefill is False
    windowed = dataclasses.replace(long, sliding_window=4096)
    assert resolve_limits(_scn(windowed, "vLLM 0.7.3", **kw))[0].plan.chunked_prefill is False
    stated = resolve_limits(_scn(long, "vLLM 0.7.3", chunked_prefill=False, **kw))[0]
    assert stated.plan.chunked_prefill is False and "chunked_prefill" not in dict(stated.chosen)
    # V1 ignores the rule: it always chunks
    assert resolve_limits(_scn(long, "vLLM 0.10", **kw))[0].plan.chunked_prefill is True


def test_a_model_without_a_context_limit_takes_its_longest_request():
    """No max_position_embeddings: the least max_model_len serving the load stands for it, at least 2,048."""
    assert vllm0_token_budget(0, 3000 + 1000, False, 512)[0] == 4000
    assert vllm0_token_budget(0, 500 + 500, False, 512)[0] == 2048
    assert vllm0_token_budget(32768, 500, False, 512)[0] == 32768
    assert vllm0_token_budget(200000, 500, True, 2048)[0] == 2048
    bare = dataclasses.replace(model("llama3-8b"), context_len=0)
    load = Load(arrival="offline", input_tokens=3000, output_tokens=1000, num_requests=10)
    scn, lim = resolve_limits(_scn(bare, "vLLM 0.6.0", load, tp=1))
    assert lim.max_num_tokens == 4000 and "longest request's 4000 tokens" in dict(scn.chosen)["max_num_tokens"]


def test_the_hf_position_limit_is_the_context_limit():
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
           "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 128256, "rms_norm_eps": 1e-5,
           "max_position_embeddings": 131072}
    m = model_from_hf_config(cfg, seq_len=8192)
    assert (m.context_len, m.seq_len) == (131072, 8192)
    assert model_from_hf_config({k: v for k, v in cfg.items() if k != "max_position_embeddings"},
                                seq_len=8192).context_len == 0


def _cost(framework: str, **plan) -> ServingCost:
    scn, lim = resolve_limits(_scn(model("llama3-8b"), framework, tp=1, **plan))
    return ServingCost(scn, lim.max_num_tokens)


def test_the_v0_step_adds_its_bookkeeping_to_the_gpu_time():
    """100 decodes at 512 tokens of context: the GPU part is the same as V1's (the same graph size, 104, padding
    the batch), and the step adds 100 × 35 µs = 3.5 ms of per-sequence CPU work (vllm-0.5), which an overlapped
    executor (TensorRT-LLM's, 29 µs a request) hides behind a longer GPU step."""
    v0 = _cost("vLLM 0.5.3")
    parts = v0.iteration_parts(100, 100, 100 * 512)
    assert parts["host"] == pytest.approx(100 * 35e-6, rel=1e-9)
    assert parts["dispatch"] == 0 and parts["launch"] == 0  # a decode step replays its graph
    assert v0.iteration_s(100, 100, 100 * 512) == pytest.approx(parts["gpu"] + parts["padding"] + 3.5e-3, rel=1e-12)
    assert v0.decode_graph(100) == 104 and v0.decode_graph(256) == 256 and v0.decode_graph(257) is None
    v6 = _cost("vLLM 0.6.6")
    assert v6.iteration_parts(100, 100, 100 * 512)["host"] == pytest.approx(100 * 28e-6, rel=1e-9)


def test_an_eager_prompt_iteration_pays_the_slower_of_gpu_and_issue_then_the_bookkeeping():
    """A prompt iteration runs eagerly: the host issues every kernel (10 µs each) while the GPU runs them, then
    does the bookkeeping of the iteration's sequences. 4 prompts of 512 tokens: max(GPU, issue) + 4 × 35 µs."""
    v0 = _cost("vLLM 0.5.3")
    T = 4 * 512
    gpu = v0.context_line(T, 0, T, 4, eager=False, host=False)(0, 4 * 512 * 513 / 2, 0)
    issue = v0.stage_kernels[0] * v0.cal.host_dispatch_s
    total = v0.iteration_s(T, 0, 0, T, 4 * 512 * 513 / 2, 0, rows=4, requests=4)
    assert total == pytest.approx(max(gpu, issue) + 4 * 35e-6, rel=1e-9)


def test_the_account_charges_the_bookkeeping_as_host_time_beside_the_gpu_work():
    """A decode-only kind of 64 sequences: the GPU's work is split by what bounds it and the 64 × 35 µs of CPU
    work is the host's share; nothing is charged to an eager dispatch."""
    load = Load(arrival="offline", input_tokens=256, output_tokens=256, num_requests=64)
    run = simulate(_scn(model("llama3-8b"), "vLLM 0.5.3", load, tp=1))
    kind = IterationKind(1, 64, 64 * 400.0, graph=True, padded_decodes=64, rows=64, requests=64)
    split, busy, whole = kind_split(run, kind)
    assert split[HOST_KEY] == pytest.approx(64 * 35e-6, rel=1e-9)
    assert DISPATCH_KEY not in split
    assert whole == pytest.approx(busy + 64 * 35e-6, rel=1e-9)


def test_a_v0_run_is_slower_than_v1_on_the_same_deployment_and_load():
    """Same model, GPU and limits (stated): the V0 engine's serial CPU work lowers the throughput."""
    load = Load(arrival="offline", input_tokens=256, output_tokens=256, num_requests=300)
    kw = dict(tp=1, max_batch=256, max_num_tokens=8192, chunked_prefill=False, policy="prefill-first")
    v0 = simulate(_scn(model("llama3-8b"), "vLLM 0.5.3", load, **kw)).result
    v1 = simulate(_scn(model("llama3-8b"), "vLLM 0.11", load, **kw)).result
    assert v0.output_tokens_per_s < v1.output_tokens_per_s


def test_a_request_longer_than_the_context_limit_is_said_once():
    """Llama 3 8B's 8,192-token limit: 8,000 + 1,000 tokens exceed it (an engine started at it refuses them); the
    run is still priced, with the note, which a second resolution does not repeat; a request within it adds none."""
    load = Load(arrival="offline", input_tokens=8000, output_tokens=1000, num_requests=4)
    scn, _ = resolve_limits(_scn(model("llama3-8b"), "vLLM 0.10", load, tp=1))
    said = [n for k, n in scn.chosen if k == "context limit"]
    assert len(said) == 1 and "9000 tokens exceed the model's 8192-token limit" in said[0]
    assert [k for k, _ in resolve_limits(scn)[0].chosen].count("context limit") == 1
    ok = Load(arrival="offline", input_tokens=4000, output_tokens=1000, num_requests=4)
    assert "context limit" not in dict(resolve_limits(_scn(model("llama3-8b"), "vLLM 0.10", ok, tp=1))[0].chosen)


def test_a_v0_deployment_is_offered_the_newer_engine_as_a_whatif():
    """The V0 lines name V1 (a version-less 'vLLM') as their successor: the what-if re-simulates the deployment on
    V1's defaults; V1 itself, and other engines, have none."""
    from narrowpath.analysis.serving_whatif import candidates
    load = Load(arrival="poisson", rate_per_s=4.0, input_tokens=256, output_tokens=128, num_requests=50)
    names = {n: (c, s) for n, c, s in candidates(_scn(model("llama3-8b"), "vLLM 0.5.3", load, tp=1), False)[0]}
    change, alt = names["newer engine"]
    assert alt.plan.framework == "vLLM" and serving_stack(alt.plan.framework)["id"] == "vllm"
    assert change.startswith("vLLM 0.5.3 → vLLM (vllm:")
    for other in ("vLLM 0.10", "SGLang 0.5.4", "TensorRT-LLM 1.0"):
        assert "newer engine" not in {n for n, _, _ in candidates(_scn(model("llama3-8b"), other, load, tp=1),
                                                                    False)[0]}


def test_the_step_prices_the_gpu_work_of_its_own_decodes_and_context():
    """104 decodes (a captured size: no padding) at 512 tokens each: the step is the token-dependent ops at 104
    tokens, the attention over 104 × 512 context tokens and the output layer for 104 rows — the same pieces any
    engine prices — plus 104 × 35 µs of bookkeeping."""
    v0 = _cost("vLLM 0.5.3")
    gpu = v0.token_time_s(0, 104) + v0.attention_s(0, 104, 104 * 512, 0, 0, 0) + v0.head_time_s(104)
    assert v0.iteration_s(104, 104, 104 * 512) == pytest.approx(gpu + 104 * 35e-6, rel=1e-12)
    assert v0.context_line(104, 104)(104 * 2048) == pytest.approx(  # a run of decode steps, priced by context
        v0.token_time_s(0, 104) + v0.attention_s(0, 104, 104 * 2048, 0, 0, 0) + v0.head_time_s(104)
        + 104 * 35e-6, rel=1e-12)


def test_a_context_limit_of_exactly_32k_does_not_chunk():
    """vLLM's use_long_context is max_model_len > 32768: Mixtral's 32,768 stays unchunked, with a budget of 32,768."""
    scn, lim = resolve_limits(_scn(model("mixtral-8x7b"), "vLLM 0.6.3", num_gpus=2, tp=2, weight_precision="fp8",
                                   kv_precision="fp8"))
    assert scn.plan.chunked_prefill is False and lim.max_num_tokens == 32768


def test_a_request_exactly_at_the_limit_is_served_and_a_trace_is_read_by_its_longest_request():
    """prompt + output ≤ max_model_len is accepted (8,000 + 192 = 8,192: no note). A trace's longest request decides
    the note and, for a model without a limit, V0's budget: 3,000 + 1,000 among shorter ones → 4,000."""
    at = Load(arrival="offline", input_tokens=8000, output_tokens=192, num_requests=2)
    assert "context limit" not in dict(resolve_limits(_scn(model("llama3-8b"), "vLLM 0.10", at, tp=1))[0].chosen)
    trace = Load(arrival="trace", requests=((0.0, 100, 50), (0.1, 3000, 1000), (0.2, 500, 200)))
    bare = dataclasses.replace(model("llama3-8b"), context_len=0)
    _, lim = resolve_limits(_scn(bare, "vLLM 0.6.0", trace, tp=1))
    assert lim.max_num_tokens == 4000
    short = dataclasses.replace(model("llama3-8b"), context_len=2048)
    said = dict(resolve_limits(_scn(short, "vLLM 0.10", trace, tp=1))[0].chosen)["context limit"]
    assert said == ("requests of up to 4000 tokens exceed the model's 2048-token limit (model.context_len): an engine "
                    "started at it refuses them (vLLM's max_model_len); priced as if served")


def test_a_prompt_chunk_reads_the_context_its_earlier_chunks_left():
    """A 16-token chunk of a prompt whose first 100,000 tokens ran earlier (chunked prefill on): its attention reads
    that context's K/V too (memory-bound at so few queries) — the same pieces as any engine's, the slower of GPU and
    eager issue, then one request's bookkeeping (vllm-0.6.5: 28 µs)."""
    v0 = _cost("vLLM 0.7.3", chunked_prefill=True)
    P, prefix = 16, 100_000
    pairs = P * prefix + P * (P + 1) / 2
    gpu = v0.token_time_s(0, P) + v0.attention_s(0, 0, 0, P, pairs, prefix) + v0.head_time_s(1)
    issue = v0.stage_kernels[0] * v0.cal.host_dispatch_s
    got = v0.iteration_s(P, 0, 0, P, pairs, prefix, rows=1, requests=1)
    assert got == pytest.approx(max(gpu, issue) + 28e-6, rel=1e-12)
    assert v0.attention_s(0, 0, 0, P, pairs, prefix) != v0.attention_s(0, 0, 0, P, pairs, 0)  # the context counts
