"""Serving layout choice, iteration cost, defaults, static batches, disaggregation, the lane simulator and the
steady state checked by hand where mutation testing (benchmarks/mutation.py, seed 14) found them loose."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.errors import SpecError
from narrowpath.schedule.serving_choose import choose_layout, layout_candidates
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import resolve_formats, resolve_limits
from narrowpath.schedule.serving_run import simulate
from narrowpath.schedule.serving_sim import LaneSpec, linear_runs_s, linear_span
from narrowpath.schedule.serving_steady import steady_lane
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from tests.schedule.lanes import bare_lane

LOAD = Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=32)


def _scn(plan: ServingPlan = ServingPlan(), load: Load = LOAD, mdl="llama3-8b", gpus: int | None = None,
         sys_id: str = "dgx-h100"):
    m = model(mdl) if isinstance(mdl, str) else mdl
    return ServingScenario(system=system(sys_id), model=m, plan=plan, load=load, num_gpus=gpus or plan.num_gpus)


def _cost(plan: ServingPlan = ServingPlan(), max_tokens: int = 2048, mdl="llama3-8b") -> ServingCost:
    scn, _ = resolve_limits(resolve_formats(_scn(plan, mdl=mdl), ()))
    return ServingCost(scn, max_tokens)


def _const_step(t: float, seen: list | None = None):
    """A lane's pricing stub: every iteration takes `t` seconds, whatever it holds (its arguments recorded)."""
    def step(T, dec, dctx, pre_tok, pairs, pctx, rows, q, requests=None):
        if seen is not None:
            seen.append(dict(T=T, dec=dec, pre_tok=pre_tok, rows=rows, requests=requests))
        return t
    return step




# ---- the layout choice ----------------------------------------------------------------------------------------

def test_open_tp_and_pp_on_two_gpus_offer_both_splits():
    """Llama-3 8B (32 heads, 8 kv heads, ffn 14,336, 32 layers) on 2 GPUs with tp and pp open (placeholder tp 2):
    the consistent layouts with tp·pp = 2 are (tp 1, pp 2) and (tp 2, pp 1) — both divide the heads, kv heads and
    ffn, and pp ≤ 32 layers; with only pp open, tp stays 2 and pp must be 1."""
    scn = _scn(ServingPlan(tp=2))
    assert sorted((c.tp, c.pp) for c in layout_candidates(scn, ("tp", "pp"))) == [(1, 2), (2, 1)]
    assert [(c.tp, c.pp) for c in layout_candidates(scn, ("pp",))] == [(2, 1)]
    # the placeholder does not matter: from tp 1, pp 2 (the same 2 GPUs) tp 2 is offered too, and on 8 GPUs
    # (tp 1, pp 8) every split tp·pp = 8 the model admits
    two = _scn(ServingPlan(tp=1, pp=2))
    assert sorted((c.tp, c.pp) for c in layout_candidates(two, ("tp", "pp"))) == [(1, 2), (2, 1)]
    eight = _scn(ServingPlan(tp=1, pp=8))
    assert sorted((c.tp, c.pp) for c in layout_candidates(eight, ("tp", "pp"))) == [(1, 8), (2, 4), (4, 2), (8, 1)]


def test_no_layout_that_serves_the_load_names_the_open_knob():
    """Llama-3 70B (~70.6 B parameters, 141 GB in bf16) on one 80 GB H100 with tp left open: the only layout is
    tp 1, whose weights do not fit, so the choice fails with a SpecError on plan.tp that says no unpublished tp
    serves the load and quotes the candidate's own error."""
    scn = _scn(ServingPlan(), mdl="llama3-70b")
    with pytest.raises(SpecError) as exc:
        choose_layout(scn, ("tp",))
    assert exc.value.field == "plan.tp"
    assert str(exc.value).startswith("plan.tp: no value of the unpublished tp serves this load (")


# ---- the iteration cost -----------------------------------------------------------------------------------------

def test_tensorrt_llm_1_gathers_the_tokens_of_every_attention_dp_rank():
    """TensorRT-LLM 1.0 (stack moe_exchange: gather) serving Mixtral 8x7B with attention DP 2 on 2 GPUs (tp 1,
    ep 1): no all-to-all; each GPU all-gathers the 2 ranks' tokens in the GEMM format (bf16: 2·T·4096·2 B at T
    tokens per rank) and reduce-scatters the 16-bit outputs back. The default stack (all_to_all) instead splits
    the experts over the two GPUs (expert tp 2) with an etp all-gather / reduce-scatter."""
    plan = ServingPlan(dp=2, framework="TensorRT-LLM 1.0")
    trt = ServingCost(resolve_formats(_scn(plan, mdl="mixtral-8x7b"), ()), 64)
    assert trt.exchange == "gather"
    names = {pt.transfer.name: pt.transfer.message_bytes for pt in trt.token_transfers(0, 16.0)}
    assert names == {"dp.moe_all_gather": 2 * 16 * 4096 * 2, "dp.moe_reduce_scatter": 2 * 16 * 4096 * 2}
    dflt = ServingCost(resolve_formats(_scn(ServingPlan(dp=2), mdl="mixtral-8x7b"), ()), 64)
    assert dflt.exchange == "all_to_all"
    assert {pt.transfer.name for pt in dflt.token_transfers(0, 16.0)} == {"etp.all_gather", "etp.reduce_scatter"}


def test_draft_passes_add_to_a_pipelined_iteration():
    """pp 2 on the default stack (no host bookkeeping, no serial pipeline loop): `extra_gpu_s` (the draft passes of
    speculative decoding) is more GPU work in the same iteration, so it adds to the pipelined period: 0.5 s more
    than the same iteration without it."""
    c = _cost(ServingPlan(pp=2))
    assert not c.pp_host_serial and c.host_per_request_s == 0.0
    base = c.iteration_s(8, 8, 8 * 1000)
    assert base > 0
    assert c.iteration_s(8, 8, 8 * 1000, extra_gpu_s=0.5) == pytest.approx(base + 0.5, rel=1e-12)


# ---- what a stack fills in ------------------------------------------------------------------------------------

def test_fp16_weights_on_a_100_keep_an_fp16_kv_cache():
    """fp16 weights on an A100 (no FP8 tensor cores), KV format open: the KV cache takes the weights' 16-bit type,
    fp16 (resolve_formats: unquantized weights give fp16 for fp16, else bf16; only an fp8/fp4 KV falls back to bf16
    on a device without FP8); bf16 weights keep bf16."""
    scn = _scn(ServingPlan(weight_precision="fp16"), sys_id="dgx-a100")
    out = resolve_formats(scn, ("kv_precision",))
    assert out.plan.kv_precision == "fp16"
    assert dict(out.chosen)["kv_precision"] == "fp16 — the weights' 16-bit type (not published)"
    assert resolve_formats(_scn(sys_id="dgx-a100"), ("kv_precision",)).plan.kv_precision == "bf16"


def test_trtllm_bench_sizes_a_small_kv_cache_at_its_floor_of_64():
    """trtllm-bench (TensorRT-LLM 1.0) on Llama-3 8B, one H100 (85.9 GB), ISL = OSL = 16,000: one request's KV is
    2·32 layers·max(1, 8)·128·2 B = 131,072 B per token × 32,000 tokens = 4.19 GB, so at most 0.9·85.9 GB / 4.19 GB
    ≈ 18 requests fit (fewer after the 16 GB engine): raw batch < 32, rounded up to a multiple of 32 and at least 64
    → 64; the token budget (< 18·2 tokens → at least 2,048) is raised without chunking to the longest prompt + the
    batch, 16,000 + 64 = 16,064."""
    load = Load(arrival="offline", input_tokens=16_000, output_tokens=16_000, num_requests=8)
    scn, lim = resolve_limits(_scn(ServingPlan(framework="TensorRT-LLM 1.0"), load))
    assert not scn.plan.chunked_prefill
    assert (lim.max_batch, lim.max_num_tokens) == (64, 16_064)
    assert dict(scn.chosen)["max_batch"] == "64 — trtllm-bench's heuristic for ISL 16000 / OSL 16000"


def test_trtllm_bench_reads_a_traces_mean_lengths():
    """A two-request trace, prompts 100 and 300, outputs 50 and 150, under trtllm-bench: the heuristic is sized
    for the mean ISL (100 + 300)/2 = 200 and mean OSL (50 + 150)/2 = 100, which its note states."""
    trace = Load(arrival="trace", requests=((0.0, 100, 50), (1.0, 300, 150)))
    scn, _ = resolve_limits(_scn(ServingPlan(framework="TensorRT-LLM 1.0"), trace))
    assert dict(scn.chosen)["max_num_tokens"].endswith("trtllm-bench's heuristic for ISL 200 / OSL 100")


def test_trtllm_bench_without_chunking_fits_a_traces_longest_prompt():
    """A trace of prompts 100 and 20,000 tokens, outputs 10,000 each, under trtllm-bench (no chunked prefill):
    mean ISL 10,050, OSL 10,000, so at most 0.9·85.9 GB / (131,072 B · 20,050) ≈ 29 requests fit → batch 64, raw
    token budget < 4,096 → 2,048; without chunking it is raised to the longest prompt + the batch so that the
    20,000-token prompt fits an iteration: 20,000 + 64 = 20,064 (the mean, 10,050 + 64, would not hold it)."""
    trace = Load(arrival="trace", requests=((0.0, 100, 10_000), (1.0, 20_000, 10_000)))
    _, lim = resolve_limits(_scn(ServingPlan(framework="TensorRT-LLM 1.0"), trace))
    assert (lim.max_batch, lim.max_num_tokens) == (64, 20_064)


# ---- static batches -------------------------------------------------------------------------------------------

def test_a_static_batch_of_two_token_requests_runs_one_decode_step():
    """A fixed batch of 4 requests of 64 + 2 tokens: the context pass emits each first token, then one decode step
    of the 4 sequences emits the second: 4 decode tokens over 4·65 = 260 context tokens, and each request
    finishes after its first token."""
    load = Load(arrival="fixed-batch", batch_size=4, input_tokens=64, output_tokens=2)
    res = simulate(_scn(ServingPlan(), load)).result
    assert res.totals.decode_tokens == 4
    assert res.totals.decode_ctx_tokens == 260
    assert (res.finish_s > res.first_token_s).all()
    assert [(r.steps, r.decodes, r.prompt_tokens) for r in res.log] == [(1, 0, 256), (1, 4, 0)]


def test_a_static_batch_decodes_on_from_the_context_it_has_grown():
    """A static batch of two 10-token prompts with 3 and 5 output tokens (a trace, policy static): after the
    context pass the two sequences hold 11 tokens each (22); steps 1-2 read 22 and 24 context tokens (46), the
    first request ends, and steps 3-4 (finished slots stay in the batch) read 26 and 28 (54): 100 in all, 8 decode
    tokens."""
    trace = Load(arrival="trace", requests=((0.0, 10, 3), (0.0, 10, 5)))
    res = simulate(_scn(ServingPlan(policy="static"), trace)).result
    assert res.totals.decode_tokens == 8
    assert res.totals.decode_ctx_tokens == 100


# ---- disaggregation ---------------------------------------------------------------------------------------------

def test_every_prefill_lane_hands_its_prompts_to_the_decoders():
    """2 prefill replicas + 1 decode replica (Llama-3 8B, tp 1): the prefill lanes are two groups of one lane
    (dp 1); 4 requests dealt round-robin, two to each. Every prompt is handed off once (4 × the hand-off of a
    100-token prompt) and every request finishes after its first token."""
    scn = _scn(ServingPlan(replicas=3, prefill_replicas=2),
               Load(arrival="offline", input_tokens=100, output_tokens=4, num_requests=4))
    run = simulate(scn)
    res = run.result
    assert np.isfinite(res.finish_s).all() and (res.finish_s > res.first_token_s).all()
    assert res.totals.handoff_s == pytest.approx(4 * run.cost.handoff_s(100), rel=1e-12)


# ---- the lane simulator -----------------------------------------------------------------------------------------

def test_a_deviation_of_exactly_the_tolerance_is_still_on_the_line():
    """linear_span accepts step times within 1e-9·max(|t1|, 1e-30) of the line through the first two, bound
    included: times 0, 0, 1e-39 (t1 = 0, so the bound is 1e-9·1e-30) lie on one line, and the three steps are priced
    as one trapezoid, 3·(0 + 1e-39)/2."""
    tol = 1e-9 * max(abs(0.0), 1e-30)
    times = {1: 0.0, 2: 0.0, 3: tol}
    assert linear_span(times.__getitem__, 3) == 3
    assert linear_runs_s(times.__getitem__, 3) == pytest.approx(3 * tol / 2, rel=1e-12, abs=0)


def test_a_prompt_chunk_that_does_not_finish_produces_no_token():
    """Chunked prefill, a 64-token budget, one 100-token prompt: the first iteration's 64-token chunk leaves the
    prompt unfinished, so no sequence produces a token (rows 0) though the executor handles the request; the second
    iteration's 36-token chunk finishes it (rows 1)."""
    seen: list = []
    spec = LaneSpec(4, 64, 100, 16, "decode-first", "reserve", True)
    lane, a = bare_lane(spec, _const_step(1.0, seen), [100], [3])
    lane.run()
    assert [(s["pre_tok"], s["rows"], s["requests"]) for s in seen[:2]] == [(64, 0, 1), (36, 1, 1)]
    assert a["first"].tolist() == [2.0] and a["finish"].tolist() == [4.0]


def test_on_demand_decodes_merge_up_to_the_next_kv_overflow():
    """On-demand KV, 16-token blocks, 5 blocks, two 16-token prompts (1 block each) of 40 output tokens, steps of
    1 s: after the prompt iteration both hold 17 tokens; the next step takes a second block each (1 left). Each
    sequence then overflows its 2 blocks (32 tokens) at its 16th step, when two more blocks would be needed and one
    is free: the first merged decode run is 15 steps, logged as one record."""
    log: list = []
    spec = LaneSpec(4, 64, 5, 16, "decode-first", "on-demand", True)
    lane, _ = bare_lane(spec, _const_step(1.0), [16, 16], [40, 40], log)
    lane.run()
    assert (log[0].steps, log[0].prompt_tokens) == (1, 32)
    assert (log[1].steps, log[1].decodes, log[1].kv_blocks_used) == (15, 2, 4)


# ---- the serving search's steady state ----------------------------------------------------------------------------

def test_a_static_steady_state_queues_its_batches_whatever_the_arrival_process():
    """The steady state of a static plan serves fixed batches queued at 0 (serving_steady: the load becomes a
    fixed-batch one; only the load differs from `serve`), so a Poisson stream of 0.5 requests/s and an offline
    load of the same lengths have the same steady state, and its first batch's TTFT is the context pass alone
    (< 1 s, not the seconds a 0.5/s stream takes to deliver a batch)."""
    plan = ServingPlan(policy="static", max_batch=4)
    slow = Load(arrival="poisson", rate_per_s=0.5, input_tokens=64, output_tokens=8, num_requests=8)
    offline = Load(arrival="offline", input_tokens=64, output_tokens=8, num_requests=8)
    a, b = steady_lane(_scn(plan, slow)), steady_lane(_scn(plan, offline))
    assert a == b
    assert a.ttft_s["p50"] < 1.0
