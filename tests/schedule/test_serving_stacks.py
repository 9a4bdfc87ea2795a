"""What a serving stack does by itself, as its sources describe it: trtllm-bench's own batch limits, the layout an
engine runs when a knob is not given, how TensorRT-LLM moves tokens to the experts, the pre-0.7 generation kernel's
K/V re-reads, and a static session's serial kernel launches."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model, system
from narrowpath.catalog.serving import serving_stack
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import resolve_layout_defaults, resolve_limits, trtllm_bench_limits
from narrowpath.spec.parse import model_from_dict
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from narrowpath.workload.serving import Formats, decode_attention_op, kv_group_reads
from narrowpath.workload.serving_comm import layer_transfers

DSV3 = dict(name="deepseek-v3", layers=61, hidden=7168, heads=128, kv_heads=128, ffn=2048, vocab=129280,
            experts=256, top_k=8, ffn_act="swiglu", shared_experts=1, dense_layers=3, dense_ffn=18432,
            attention="mla", q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
            v_head_dim=128, seq_len=4096)


def _scn(name: str, gpus: int, framework: str, arrival: str = "offline", **plan) -> ServingScenario:
    p = ServingPlan(framework=framework, **plan)
    load = Load(arrival=arrival, input_tokens=128, output_tokens=128, batch_size=8 if arrival == "fixed-batch" else 0)
    return ServingScenario(system=system("dgx-h100"), model=model(name), plan=p, load=load, num_gpus=gpus)


@pytest.mark.parametrize("isl, osl, chunked, want", [
    (128, 2048, True, (512, 2048)),
    (2048, 128, True, (512, 9216)),
    (2048, 128, False, (512, 9216)),
])
def test_trtllm_bench_heuristic_llama3_8b_fp8_on_one_h100(isl, osl, chunked, want):
    """tuning.py by hand, Llama-3 8B (8.030e9 parameters) in FP8 on one 85.9e9-byte H100, KV fraction 0.9:
    (85.9e9 − 8.030e9) · 0.9 = 70.08e9 bytes hold 70.08e9 / (2·32 layers·8 kv heads·128·1 byte = 65,536 B per
    token) / 2,176 tokens = 491.4 requests → batch 128·⌈491.4/128⌉ = 512. Tokens 491.4·(1 + 128/2048) = 522 →
    2,048 (the floor); 491.4·(1 + 2048/128) = 8,354 → 1,024·⌈8,354/1,024⌉ = 9,216, already above 2,048 + 512."""
    scn = _scn("llama3-8b", 1, "TensorRT-LLM 1.0", weight_precision="fp8", kv_precision="fp8")
    assert trtllm_bench_limits(scn, isl, osl, 0.9, isl, chunked) == want


def test_trtllm_bench_without_chunking_fits_the_longest_prompt_beside_the_batch():
    """Llama-3 70B FP8 on 8 H100 at tp 8, 2,048 / 2,048: (687.2e9 − 70.55e9)·0.9 = 554.98e9 bytes over
    2·80·8·128 = 163,840 B per token · 4,096 tokens = 827.0 requests → batch 128·7 = 896, tokens 1,654 → 2,048;
    without chunking get_settings raises the budget to the longest prompt + the batch, 2,048 + 896 = 2,944."""
    scn = _scn("llama3-70b", 8, "TensorRT-LLM 1.0", tp=8, weight_precision="fp8", kv_precision="fp8")
    assert trtllm_bench_limits(scn, 2048, 2048, 0.9, 2048, True) == (896, 2048)
    assert trtllm_bench_limits(scn, 2048, 2048, 0.9, 2048, False) == (896, 2944)


def test_trtllm_bench_heuristic_sees_tp_size_not_attention_dp():
    """trtllm-bench's --tp is tp·dp with attention DP on: the heuristic is the same for attention tp 8 and for 8
    attention-DP ranks of one GPU (each rank then gets the whole figure)."""
    a = _scn("mixtral-8x7b", 8, "TensorRT-LLM 1.0", tp=8, ep=8)
    b = dataclasses.replace(a, plan=dataclasses.replace(a.plan, tp=1, dp=8))
    assert trtllm_bench_limits(a, 1000, 1000, 0.9, 1000, False) == trtllm_bench_limits(b, 1000, 1000, 0.9, 1000,
                                                                                         False)


def test_trtllm_bench_runs_guaranteed_no_evict_unchunked_at_fixed_limits():
    """TensorRT-LLM 1.0 trtllm-bench (PyTorch backend) defaults: GUARANTEED_NO_EVICT, no chunked prefill, and no
    run-time batch tuning, so the lane's sequence limit is the heuristic's max batch."""
    scn = _scn("llama3-8b", 1, "TensorRT-LLM 1.0 (PyTorch backend)", weight_precision="fp8", kv_precision="fp8")
    r, lim = resolve_limits(scn)
    assert (r.plan.admission, r.plan.chunked_prefill, r.plan.policy) == ("reserve", False, "decode-first")
    assert lim.max_batch == r.plan.max_batch


def test_unpublished_ep_takes_the_engines_default_moe_tensor_parallelism():
    """Without --ep TensorRT-LLM's Mapping runs the experts in tensor parallelism (moe_ep 1); a stack without such a
    default leaves ep open for the fastest-layout choice."""
    scn = _scn("mixtral-8x7b", 8, "TensorRT-LLM 1.0", tp=8, ep=1)
    chosen, still = resolve_layout_defaults(scn, ("ep", "kv_precision"))
    assert chosen.plan.ep == 1 and still == ("kv_precision",)
    assert any(k == "ep" and "default of the trtllm-bench stack" in why for k, why in chosen.chosen)
    vllm = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, framework="vLLM 0.8"))
    assert resolve_layout_defaults(vllm, ("ep",))[1] == ("ep",)


def test_gqa_reads_per_query_head_before_tensorrt_llm_0_7():
    """Llama-3 70B (64 query heads, 8 kv heads): a per-query-head kernel reads each kv head 8 times at tp 1 and at
    tp 8 (8 query heads over 1 kv head); at tp 16 the 4 query heads share one replicated kv head; MLA has one
    latent. The 0.5/0.6 stack uses it, 0.7 does not."""
    m = model("llama3-70b")
    assert kv_group_reads(m, ServingPlan(tp=1), shared=False) == 8
    assert kv_group_reads(m, ServingPlan(tp=8), shared=False) == 8
    assert kv_group_reads(m, ServingPlan(tp=16), shared=False) == 4
    assert kv_group_reads(m, ServingPlan(tp=1), shared=True) == 1
    assert kv_group_reads(model_from_dict(DSV3), ServingPlan(tp=1), shared=False) == 1
    assert serving_stack("TensorRT-LLM 0.5.0").get("decode_kv_per_query_head") is True
    assert not serving_stack("TensorRT-LLM 0.7a").get("decode_kv_per_query_head")
    p = ServingPlan(kv_precision="fp8")
    f = Formats.of(p, True, m)
    one, eight = decode_attention_op(m, p, f, 4, 4000, 1, 1.0), decode_attention_op(m, p, f, 4, 4000, 1, 8.0)
    kv = 4000 * 2 * 8 * 128 * 1  # context · K and V · kv heads · head dim · fp8
    assert eight.hbm_bytes - one.hbm_bytes == pytest.approx(7 * kv)


def test_tensorrt_llm_moe_gathers_with_attention_dp_and_all_reduces_with_attention_tp():
    """Mixtral (h 4096) at T = 100 tokens per rank. Attention DP over 8 GPUs: an all-gather of the 8 ranks' tokens
    in the GEMM format (fp8: 100·8·4096·1 B) and a reduce-scatter of the 16-bit outputs (100·8·4096·2 B), no
    all-to-all. Attention tp 8: tokens already everywhere, two all-reduces per layer as a dense layer's."""
    m = model("mixtral-8x7b")
    adp = ServingPlan(tp=1, dp=8, ep=8, weight_precision="fp8")
    got = {tr.name: (tr.op, tr.axis, tr.message_bytes, c)
           for tr, c in layer_transfers(m, adp, Formats.of(adp, True, m), 100.0, True, exchange="gather")}
    assert got == {"dp.moe_all_gather": ("all_gather", "dp", 100 * 8 * 4096 * 1.0, 1.0),
                   "dp.moe_reduce_scatter": ("reduce_scatter", "dp", 100 * 8 * 4096 * 2.0, 1.0)}
    tp = ServingPlan(tp=8, ep=8, weight_precision="fp8")
    got = [(tr.name, c) for tr, c in layer_transfers(m, tp, Formats.of(tp, True, m), 100.0, True, exchange="gather")]
    assert got == [("tp.all_reduce", 2.0)]
    a2a = [tr.name for tr, _ in layer_transfers(m, adp, Formats.of(adp, True, m), 100.0, True)]
    assert "ep.dispatch" in a2a and "ep.combine" in a2a


def test_static_session_adds_the_serial_kernel_launches_to_every_step():
    """TensorRT-LLM 0.x GptSession waits for each step before enqueuing the next kernel by kernel: an iteration
    lasts its GPU time plus (layer-op kernels + one attention core per layer + the output layer's 4) ·
    host_dispatch_s. An in-flight-batching stack (vLLM) adds nothing to a decode step."""
    scn, lim = resolve_limits(_scn("llama3-8b", 1, "TensorRT-LLM 0.5.0", arrival="fixed-batch"))
    cost = ServingCost(scn, lim.max_num_tokens)
    m = scn.model
    launch = (float(cost.kernels[0]) + m.layers + 4) * cost.cal.host_dispatch_s
    assert cost.launch_s == [pytest.approx(launch)] and launch > 0
    with_launch = cost.iteration_s(8, 8, 8 * 200)
    cost.launch_s = None
    assert with_launch - cost.iteration_s(8, 8, 8 * 200) == pytest.approx(launch)
    vscn, vlim = resolve_limits(_scn("llama3-8b", 1, "vLLM 0.8"))
    assert ServingCost(vscn, vlim.max_num_tokens).launch_s is None


def test_python_executor_bookkeeping_bounds_a_large_decode_iteration():
    """TensorRT-LLM's PyTorch backend handles each request of an iteration on the host (PR #10273: 45.11 ms per
    iteration at 1,536 requests a rank → 29 us each), overlapped with the GPU. Llama-3 8B FP8 on one H100
    decoding 1,536 sequences of 128 tokens: the host needs 1,536 · 29 us = 44.54 ms, more than the GPU (weights
    8 GB and 1,536·128·65,536 B = 12.9 GB of KV at ~2.85 TB/s ≈ 8 ms + GEMMs), so the iteration takes exactly the
    host's time; a 0.x engine (C++ batch manager) and a pipeline stage's share follow the same rule with pp."""
    from narrowpath.schedule.serving_cost import host_bookkeeping_s
    assert host_bookkeeping_s(29e-6, 1536) == pytest.approx(44.544e-3)
    assert host_bookkeeping_s(29e-6, 100, pp=4) == pytest.approx(11.6e-3)
    scn = _scn("llama3-8b", 1, "TensorRT-LLM 1.0 (PyTorch backend)", weight_precision="fp8", kv_precision="fp8")
    cost = ServingCost(scn, 2048)
    assert serving_stack(scn.plan.framework)["host_per_request_s"] == 29e-6
    assert cost.iteration_s(1536, 1536, 1536 * 128.0) == pytest.approx(1536 * 29e-6, rel=1e-12)
    few = cost.iteration_s(16, 16, 16 * 128.0)
    assert few > 16 * 29e-6 * 2  # 16 requests: the GPU's weight read (~3 ms) sets the pace, not the host
    old = _scn("llama3-8b", 1, "TensorRT-LLM 0.9", weight_precision="fp8", kv_precision="fp8")
    assert ServingCost(old, 2048).host_per_request_s == 0.0


def test_trtllm_bench_rounds_the_batch_up_to_a_multiple_of_128():
    """Llama-3 8B FP8 on one H100 at 1000/1080: 70.08e9 B / 65,536 B per token / 2,080 tokens = 514.1 requests,
    just above 4·128, so the batch is 128·⌈514.1/128⌉ = 640 (not 512)."""
    scn = _scn("llama3-8b", 1, "TensorRT-LLM 1.0", weight_precision="fp8", kv_precision="fp8")
    assert trtllm_bench_limits(scn, 1000, 1080, 0.9, 1000, True)[0] == 640


def test_serving_cost_stage_items_by_hand():
    """DeepSeek-V3 at pp 2, FP8 weights, 64 tokens: the embedding (gather 64 rows of 7168, write them, 16 bit)
    only on the first stage, once; MLA's q and kv norms read and write the latents (2·64·1536·2 and 2·64·512·2 B);
    the shared expert is an MLP of inner width 2048 (one shared expert); the output layer samples over fp32 logits
    (3 reads/writes of rows·vocab·4 B) and the last stage's weights carry the vocabulary table and the final norm."""
    from narrowpath.workload.serving import stage_weight_bytes
    ds = model_from_dict(DSV3)
    scn = ServingScenario(system=system("dgx-h100"), model=ds,
                          plan=ServingPlan(pp=2, weight_precision="fp8", framework="TensorRT-LLM 1.0"),
                          load=Load(arrival="offline", input_tokens=128, output_tokens=128), num_gpus=2)
    cost = ServingCost(scn, 256)
    first = {op.name: (op, c) for op, c in cost.token_ops(0, 64.0)}
    last = {op.name: (op, c) for op, c in cost.token_ops(1, 64.0)}
    assert first["embedding"][1] == 1.0 and first["embedding"][0].hbm_bytes == 2 * 64 * 7168 * 2
    assert "embedding" not in last
    assert first["q_norm"][0].hbm_bytes == 2 * 64 * 1536 * 2 and first["kv_norm"][0].hbm_bytes == 2 * 64 * 512 * 2
    assert last["shared_up"][0].weight_bytes == 7168 * 2 * 2048 * 1.0
    ops, _ = cost.head(10.0)
    sampling = {op.name: op for op, _ in ops}["sampling"]
    assert sampling.hbm_bytes == 3 * 10 * 129280 * 4
    f = cost.f
    layers = cost.stages[1]
    body = stage_weight_bytes(ds, scn.plan, f, layers, False, False)
    assert stage_weight_bytes(ds, scn.plan, f, layers, False, True) == body + 129280 * 7168 * 2 + 7168 * 2


def test_a_sliding_window_layer_decodes_over_its_window():
    """GPT-OSS-like alternating layers, window 128: 4 sequences of 1,000 context tokens read 4·1000 tokens of K/V in
    a full layer but at most 4·128 in a window layer."""
    m = model_from_dict(dict(name="swa", layers=2, hidden=2048, heads=16, kv_heads=4, ffn=4096, vocab=32000,
                             seq_len=4096, ffn_act="swiglu", sliding_window=128, sliding_window_every=2))
    scn = ServingScenario(system=system("dgx-h100"), model=m, plan=ServingPlan(framework="TensorRT-LLM 1.0"),
                          load=Load(arrival="offline", input_tokens=128, output_tokens=128), num_gpus=1)
    cost = ServingCost(scn, 64)
    ops = cost.attention_ops(0, 4.0, 4000.0, 0.0, 0.0, 0.0)
    full = [op for op, _ in ops]
    assert len(full) == 2
    per_token = 2 * 4 * 128 * 2  # K and V, 4 kv heads of 128, 16 bit
    assert sorted(op.hbm_bytes - 4 * 16 * 256 * 2 for op in full) == [4 * 128 * per_token, 4000 * per_token]


@pytest.mark.parametrize("framework, stack", [
    ("TensorRT-LLM 0.17", "tensorrt-llm-0.1x"),
    ("TensorRT-LLM 0.10.0", "tensorrt-llm-0.1x"),
    ("TensorRT-LLM 0.21 (trtllm-bench)", "tensorrt-llm-0.1x"),  # the C++ engine flow, not 1.0's PyTorch backend
    ("TensorRT-LLM 0.7a", "tensorrt-llm-0"),  # static GptSession era
    ("TensorRT-LLM 0.5.0", "tensorrt-llm-0.5"),
    ("TensorRT-LLM 1.0 (PyTorch backend)", "trtllm-bench"),
    ("TensorRT-LLM v0.17.0", "tensorrt-llm-0.1x"),  # however the source spells it: a version's v, the module name
    ("tensorrt_llm 0.17", "tensorrt-llm-0.1x"),
    ("TRT-LLM 0.17", "tensorrt-llm-0.1x"),
    ("tensorrt-llm==0.17.0", "tensorrt-llm-0.1x"),
    ("TensorRT-LLM (v0.17.0)", "tensorrt-llm-0.1x"),
    ("TensorRT LLM 1.0", "trtllm-bench"),
    ("trtllm-serve (TensorRT-LLM 0.19)", "trtllm-serve"),  # a named front end wins over a version
    ("TensorRT-LLM 0.20 (PyTorch backend)", "trtllm-bench"),  # the 0.18-0.21 PyTorch backend is the 1.x executor
    ("vLLM v0.2.x", "vllm-0.5"),  # V0: a release line of its own (tests/schedule/test_vllm0_stack.py)
])
def test_a_tensorrt_llm_version_picks_its_runtime(framework, stack):
    """0.10-0.21 measured throughput with in-flight batching on the C++ executor and TensorRT engines (the v0.17
    performance overview: 'As of TensorRT-LLM v0.10 ... in-flight batching and no longer ... static benchmarking');
    earlier builds ran static GptSession batches, 1.x the PyTorch backend."""
    assert serving_stack(framework)["id"] == stack


def test_a_cpp_engine_run_tunes_its_batch_chunks_its_prompts_and_has_no_python_loop():
    """On the 0.1x C++ engine flow a Llama-3 8B FP8 offline run gets trtllm-bench's engine-build limits, the
    executor's dynamic batch tuning, chunked context (on for TensorRT engines) and blocks of 64 tokens; no host time
    per request or per kernel (a compiled engine enqueued from C++), unlike the 1.0 PyTorch executor's 29 µs."""
    scn = _scn("llama3-8b", 1, "TensorRT-LLM 0.17", weight_precision="fp8", kv_precision="fp8")
    cpp = serving_stack("TensorRT-LLM 0.17")
    assert (cpp["batch_limits"], cpp["runtime_batch_tuning"], cpp["eager_prefill"]) == ("trtllm-bench", True, False)
    assert cpp.get("host_per_request_s", 0.0) == 0.0 and serving_stack("TensorRT-LLM 1.0")["host_per_request_s"] > 0
    resolved, limits = resolve_limits(scn)
    assert resolved.plan.chunked_prefill is True and limits.block_tokens == 64
    assert limits.max_batch < resolved.plan.max_batch and "runtime batch" in dict(resolved.chosen)  # tuned down
    long = dataclasses.replace(scn, load=Load(arrival="offline", input_tokens=20000, output_tokens=2000))
    resolved, _ = resolve_limits(long)  # a 20,000-token prompt: chunking keeps the budget, unchunked it must hold it
    chunked, unchunked = (trtllm_bench_limits(long, 20000, 2000, 0.9, 20000, c) for c in (True, False))
    assert chunked != unchunked and (resolved.plan.max_batch, resolved.plan.max_num_tokens) == chunked
