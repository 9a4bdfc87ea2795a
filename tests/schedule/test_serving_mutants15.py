"""Serving layout choice, iteration parts, trtllm-bench's limits, static batches, the lane simulator's log and pricer
protocol and the steady state checked by hand where mutation testing (benchmarks/mutation.py, seed 15) found them
loose."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model, system
from narrowpath.schedule.serving_choose import layout_candidates
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import resolve_limits
from narrowpath.schedule.serving_run import simulate
from narrowpath.schedule.serving_sim import LaneSpec
from narrowpath.schedule.serving_steady import steady_lane
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from tests.schedule.lanes import bare_lane

LOAD = Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=32)
TRTLLM = "TensorRT-LLM 1.0 (PyTorch backend)"


def _scn(plan: ServingPlan = ServingPlan(), load: Load = LOAD, mdl: str = "llama3-8b"):
    return ServingScenario(system=system("dgx-h100"), model=model(mdl), plan=plan, load=load, num_gpus=plan.num_gpus)


def _trtllm_cost(**plan) -> ServingCost:
    """trtllm-bench's stack (29 us of host work per request, decode graphs 1, 2, 4, ..., 512 with padding, no
    static session launch) on Llama-3 8B, fp8, limits 512 sequences / 2,048 tokens."""
    kw = {"weight_precision": "fp8", "kv_precision": "fp8", "max_batch": 512, "max_num_tokens": 2048,
          "framework": TRTLLM} | plan
    return ServingCost(_scn(ServingPlan(**kw)), 2048)




# ---- the layout choice ----------------------------------------------------------------------------------------

def test_an_open_ep_offers_every_divisor_of_the_stage():
    """Mixtral 8x7B (8 experts, expert ffn 14,336) with ep left open: ep ranges over the divisors of the stage's
    tp·dp GPUs that divide the 8 experts (the expert tp = tp·dp/ep, 4, 2 or 1, divides 14,336): at tp 4 ep 1, 2
    and 4; at tp 2 × attention DP 2 the same 4 GPUs, the same three. With ep not open it stays as given."""
    tp4 = _scn(ServingPlan(tp=4), mdl="mixtral-8x7b")
    assert [(c.tp, c.ep) for c in layout_candidates(tp4, ("ep",))] == [(4, 1), (4, 2), (4, 4)]
    dp2 = _scn(ServingPlan(tp=2, dp=2), mdl="mixtral-8x7b")
    assert [(c.tp, c.dp, c.ep) for c in layout_candidates(dp2, ("ep",))] == [(2, 2, 1), (2, 2, 2), (2, 2, 4)]
    assert [(c.tp, c.ep) for c in layout_candidates(_scn(ServingPlan(tp=4, ep=2), mdl="mixtral-8x7b"), ("tp",))] \
        == [(4, 2)]


# ---- the iteration's parts --------------------------------------------------------------------------------------

def test_a_host_bound_decode_puts_the_excess_in_host_not_launch():
    """trtllm-bench, 512 decodes over 100 context tokens each (512 is a captured size: no padding): the executor's
    bookkeeping, 512 × 29 us = 14.85 ms, outlasts the GPU's work; trtllm-bench has no static session launch, so
    `launch` is 0 and `host` is the excess 14.85 ms − gpu (iteration_parts: each part is the iteration with one
    more mechanism switched on — gpu, padding, launch, host, dispatch — so the host's excess lands in `host`)."""
    c = _trtllm_cost()
    assert c.launch_s is None and c.host_per_request_s == pytest.approx(29e-6)
    parts = c.iteration_parts(512.0, 512.0, 512 * 100.0)
    host = 512 * 29e-6
    assert 0 < parts["gpu"] < host
    assert parts["padding"] == 0.0 and parts["launch"] == 0.0 and parts["dispatch"] == 0.0
    assert parts["host"] == pytest.approx(host - parts["gpu"], rel=1e-12)
    assert sum(parts.values()) == pytest.approx(c.iteration_s(512.0, 512.0, 512 * 100.0), rel=1e-12)


@pytest.mark.parametrize("graph", [True, False])
def test_a_forced_graph_choice_holds_for_every_part(graph):
    """40 decodes (trtllm-bench's captured sizes 32 and 64 around it, padding on; the GPU outlasts 40 × 29 us of
    host work): with `graph` True (a graph of its own size: what the accounts use for a mean batch) or False
    (eager) no part may pad it to 64 — padding and launch are 0 (no static session), no part is negative and the
    parts sum to the iteration priced with that choice; the GPU part is the 40 decodes' own work. Left to the size
    list (graph None) the same iteration pads to 64 and shows a positive padding part."""
    c = _trtllm_cost()
    args = (40.0, 40.0, 40_000.0)
    parts = c.iteration_parts(*args, graph=graph)
    bare = c.context_line(40.0, 40.0, pad=False, launch=False, host=False, eager=False, graph=graph)(40_000.0)
    assert parts["gpu"] == pytest.approx(bare, rel=1e-12) and bare > 40 * 29e-6
    assert parts["padding"] == 0.0 and parts["launch"] == 0.0
    assert min(parts.values()) >= 0.0
    assert sum(parts.values()) == pytest.approx(c.context_line(40.0, 40.0, graph=graph)(40_000.0), rel=1e-12)
    assert c.iteration_parts(*args)["padding"] > 0 and c.decode_graph(40.0) == 64


# ---- trtllm-bench's limits ------------------------------------------------------------------------------------

def test_trtllm_bench_rounds_a_mid_size_token_budget_up_to_512():
    """trtllm-bench on Llama-3 8B, pp 8 (8 H100s, 8 × 85.9 GB less a 16 GB engine, 90 % of it, over
    131,072 B/token × (801 + 100) tokens: over 5,000 requests), ISL 801 / OSL 100: the requests are capped at
    4,096 and divided by pp → 512, a multiple of 128 between 256 and 1,024 → batch 512; tokens 512·(1 + 801/100)
    = 4,613.12, between 4,096 and 8,192, rounded up to a multiple of 512 → 5,120 (not 4,608, which is below the
    raw figure); without chunking the longest prompt + batch, 801 + 512, does not raise it."""
    load = Load(arrival="offline", input_tokens=801, output_tokens=100, num_requests=8)
    scn, lim = resolve_limits(_scn(ServingPlan(framework="TensorRT-LLM 1.0", pp=8), load))
    assert not scn.plan.chunked_prefill
    assert (lim.max_batch, lim.max_num_tokens) == (512, 5120)
    assert lim.max_num_tokens >= 512 * (1 + 801 / 100) and lim.max_num_tokens % 512 == 0


# ---- static batches -------------------------------------------------------------------------------------------

def test_static_batches_count_every_token_they_run():
    """Two static batches of 4 requests of 64 + 5 tokens: each runs a 256-token context pass and 4 decode steps
    of 4 sequences (16 tokens), so the iterations carry 2·(256 + 16) = 544 tokens in all — the totals' prompt
    tokens (512) plus decode tokens (32), and the sum of steps × decodes + prompt tokens over the log."""
    load = Load(arrival="fixed-batch", batch_size=4, input_tokens=64, output_tokens=5, num_requests=8)
    res = simulate(_scn(ServingPlan(), load)).result
    t = res.totals
    assert [(r.steps, r.decodes, r.prompt_tokens) for r in res.log] == [(1, 0, 256), (4, 4, 0)] * 2
    assert (t.prompt_tokens, t.decode_tokens) == (512, 32)
    assert t.tokens == 544 == t.prompt_tokens + t.decode_tokens
    assert t.tokens == sum(r.steps * r.decodes + r.prompt_tokens for r in res.log)


# ---- the lane simulator -----------------------------------------------------------------------------------------

def test_the_log_is_a_contiguous_timeline_of_the_lanes_iterations():
    """Chunked prefill, a 64-token budget, one 100-token prompt of 4 output tokens, iterations of 1 s: the prompt
    chunks run 0-1 s (64 tokens) and 1-2 s (36 tokens, the first token), then the 3 remaining decode steps merge
    into one record 2-5 s. Each record starts where the previous one ended, prompt iterations included; the
    reserved KV is ceil(104/16) = 7 blocks throughout."""
    log: list = []
    spec = LaneSpec(4, 64, 100, 16, "decode-first", "reserve", True)
    lane, a = bare_lane(spec, lambda *args, **kw: 1.0, [100], [4], log)
    lane.run()
    assert [(r.start_s, r.duration_s, r.steps, r.prompt_tokens) for r in log] == [
        (0.0, 1.0, 1, 64), (1.0, 1.0, 1, 36), (2.0, 3.0, 3, 0)]
    assert all(b.start_s == r.start_s + r.duration_s for r, b in zip(log, log[1:]))
    assert [r.kv_blocks_used for r in log] == [7.0] * 3
    assert a["first"].tolist() == [2.0] and a["finish"].tolist() == [5.0]


def test_a_plain_pricer_is_asked_for_decode_steps_without_prompt_work():
    """A lane's pricer may be any callable (T, dec, dctx, pre_tok, pairs, pctx, rows, q): one without a
    `decode_line` is called for each decode-only step with no prompt tokens, pairs or prompt context (all 0), so a
    linear model of them prices it. Here 1 s + 1 ms per prompt pair + 1 ms per context token read: the 100-token
    prompt in chunks of 64 and 36 tokens (pairs 64·65/2 = 2,080 and 36·(64 + 37/2) = 2,970) takes 3.08 + 3.97 s
    (first token at 7.05 s); the 3 decode steps read 101, 102 and 103 tokens: 1.101 + 1.102 + 1.103 s, finish
    10.356 s."""
    seen: list = []

    def step(T, dec, dctx, pre_tok, pairs, pctx, rows, q, requests=None):
        seen.append((T, dec, dctx, pre_tok, pairs, pctx, rows, q))
        return 1.0 + 1e-3 * pairs + 1e-3 * dctx

    spec = LaneSpec(4, 64, 100, 16, "decode-first", "reserve", True)
    lane, a = bare_lane(spec, step, [100], [4])
    lane.run()
    decode_calls = [s for s in seen if s[1] and not s[3]]
    assert decode_calls and all(s[3:6] == (0, 0, 0) and s[0] == s[1] == s[6] == 1 for s in decode_calls)
    assert [s[4] for s in seen if s[3]] == [2080.0, 2970.0]
    assert a["first"][0] == pytest.approx(3.08 + 3.97, rel=1e-12)
    assert a["finish"][0] == pytest.approx(7.05 + 1.101 + 1.102 + 1.103, rel=1e-12)


# ---- the serving search's steady state ----------------------------------------------------------------------------

def test_a_closed_loop_of_identical_batches_measures_the_same_whatever_the_warmup():
    """A closed loop of max_batch 4 identical requests (64 + 8 tokens): each batch is released when the previous
    one finishes, onto an empty lane, and runs the same timeline; the measured requests are those after
    `warmup_batches` batches. So 1 warm-up + 2 measured batches and 2 warm-up + 1 measured give the same rate,
    and it is one batch's tokens over one batch's period: 4·8 / (TTFT + 7·TPOT)."""
    scn = _scn(ServingPlan(max_batch=4), Load(arrival="offline", input_tokens=64, output_tokens=8, num_requests=8))
    one = steady_lane(scn, warmup_batches=1, measured_batches=2)
    two = steady_lane(scn, warmup_batches=2, measured_batches=1)
    assert two.output_tokens_per_s == pytest.approx(one.output_tokens_per_s, rel=1e-9)
    period = two.ttft_s["p50"] + 7 * two.tpot_s["p50"]
    assert two.output_tokens_per_s == pytest.approx(4 * 8 / period, rel=1e-9)
    assert two.ttft_s["p50"] == pytest.approx(one.ttft_s["p50"], rel=1e-9)


def test_the_measured_batch_summary_of_equal_latencies_is_that_latency():
    """A closed loop of max_batch 16 identical requests (64 + 16 tokens), one warm-up and one measured batch: the
    16 measured requests get their first token in the same iteration and finish in the same one, so their TPOTs
    are one float64 value and its summary is that value exactly — mean = p50 = p99 (the mean of 16 equal float64
    values, summed pairwise, is exact), and likewise the TTFT."""
    scn = _scn(ServingPlan(max_batch=16), Load(arrival="offline", input_tokens=64, output_tokens=16,
                                                num_requests=16))
    s = steady_lane(scn, warmup_batches=1, measured_batches=1)
    assert s.tpot_s["mean"] == s.tpot_s["p50"] == s.tpot_s["p90"] == s.tpot_s["p99"] > 0
    assert s.ttft_s["mean"] == s.ttft_s["p50"] == s.ttft_s["p99"] > 0
