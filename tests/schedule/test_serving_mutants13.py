"""Serving iteration cost, defaults, simulator and steady state checked by hand where mutation testing
(benchmarks/mutation.py, seed 13) found them loose: the stack's per-query-head KV reads, the attention fast and
slow paths, eager prompt dispatch on the host, the KV hand-off at the scale-up domain's edge, the formats and limits
a stack fills in, chunked prefill, the logged lane, the closed loop, the merged-step arithmetic and the steady
state's loads."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.catalog.serving import serving_stack
from narrowpath.cost.roofline import op_time_s
from narrowpath.schedule import serving_cost as serving_cost_mod
from narrowpath.schedule import serving_defaults, serving_steady
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import resolve_formats, resolve_limits
from narrowpath.schedule.serving_run import simulate
from narrowpath.schedule.serving_sim import Lane, LaneSpec, Step, steps_to_pass
from narrowpath.schedule.serving_stats import LaneTotals
from narrowpath.schedule.serving_steady import steady_lane
from narrowpath.spec.parse import model_from_dict
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from narrowpath.workload.serving import decode_attention_op, prefill_attention_op, prefix_rebuild_op

LOAD = Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=32)
V2_LITE = dict(name="deepseek-v2-lite", layers=27, hidden=2048, heads=16, kv_heads=16, ffn=10944, vocab=102400,
               ffn_act="swiglu", attention="mla", q_lora_rank=0, kv_lora_rank=512, qk_nope_head_dim=128,
               qk_rope_head_dim=64, v_head_dim=128, seq_len=4096)
SWA = dict(name="swa", layers=4, hidden=2048, heads=16, kv_heads=4, ffn=8192, vocab=32000, ffn_act="swiglu",
           seq_len=8192, sliding_window=128, sliding_window_every=2)


def _scn(plan: ServingPlan = ServingPlan(), load: Load = LOAD, mdl="llama3-8b", gpus: int | None = None):
    m = model(mdl) if isinstance(mdl, str) else mdl
    return ServingScenario(system=system("dgx-h100"), model=m, plan=plan, load=load, num_gpus=gpus or plan.num_gpus)


def _cost(plan: ServingPlan = ServingPlan(), max_tokens: int = 2048, mdl="llama3-8b") -> ServingCost:
    scn, _ = resolve_limits(resolve_formats(_scn(plan, mdl=mdl), ()))
    return ServingCost(scn, max_tokens)


def _const_step(t: float):
    """A lane's pricing stub: every iteration takes `t` seconds, whatever it holds."""
    def step(T, dec, dctx, pre_tok, pairs, pctx, rows, q, requests=None):
        return t
    return step


def _lane(spec: LaneSpec, step, n_in, n_out, **kw):
    n = len(n_in)
    arrays = dict(arr=np.zeros(n), n_in=np.asarray(n_in, dtype=np.int64), n_out=np.asarray(n_out, dtype=np.int64),
                  first=np.full(n, np.nan), finish=np.full(n, np.nan))
    lane = Lane(spec, step, np.arange(n), arrays["arr"], arrays["n_in"], arrays["n_out"], arrays["first"],
                arrays["finish"], LaneTotals(), None, **kw)
    return lane, arrays


# ---- the iteration cost ---------------------------------------------------------------------------------------

def test_tensorrt_llm_05_reads_a_kv_head_once_per_query_head():
    """TensorRT-LLM 0.5 (stack decode_kv_per_query_head: masked MHA, one block per query head) on Llama-3 8B, tp 1:
    32 query heads over 8 kv heads, so each kv head's cache is read 32/8 = 4 times. 4 decodes over 4,000 context
    tokens read 4000 · (2·8·128·2 = 4,096 B) · 4 = 65,536,000 B of KV plus 4 queries' q and output
    (4·32·(128 + 128)·2 = 65,536 B); vLLM's kernel shares the read across the group: 16,384,000 + 65,536 B."""
    old = _cost(ServingPlan(framework="TensorRT-LLM 0.5"))
    new = _cost(ServingPlan(framework="vLLM 0.8"))
    assert old.kv_reads == 4.0 and new.kv_reads == 1.0
    (op_old, n_old), = old.attention_ops(0, 4, 4000, 0, 0, 0)
    (op_new, _), = new.attention_ops(0, 4, 4000, 0, 0, 0)
    assert n_old == 32
    assert op_old.hbm_bytes == 65_536_000 + 65_536
    assert op_new.hbm_bytes == 16_384_000 + 65_536


@pytest.mark.parametrize("mdl, framework", [("llama3-8b", "TensorRT-LLM 0.5"), ("v2-lite", ""),
                                             ("llama3-8b", "")])
@pytest.mark.parametrize("args", [(8, 8 * 3000, 0, 0, 0), (1, 17, 0, 0, 0), (0, 0, 512, 512 * 256.5, 512),
                                  (0, 0, 64, 64 * 2000, 4000), (4, 0, 0, 0, 0)])
def test_attention_fast_path_prices_decodes_and_prompts_by_their_own_lines(mdl, framework, args):
    """Decodes only, or prompt chunks only: the affine fast path (no sliding window, no measured efficiency table
    on H100) equals cost.roofline on the one op the workload builds for that iteration, times the layers — each op
    kind priced by its own line. The two kinds' lines differ where a decode reads a kv head once per query head
    (TensorRT-LLM 0.5: 4x the KV bytes per context token of Llama-3 8B's prompt core) and under MLA (decodes
    attend over the 576/512-wide latent, prompts over 192/128-wide heads); for GQA under a sharing kernel they
    happen to coincide. Four decodes over no context: no FLOPs, the queries' bytes alone (the compute line's
    intercept must not count)."""
    m = model_from_dict(V2_LITE) if mdl == "v2-lite" else model(mdl)
    cost = _cost(ServingPlan(framework=framework), mdl=m)
    assert cost._affine[0] is not None
    p = cost.scn.plan
    dec, dctx, pre, pairs, pctx = args
    op = decode_attention_op(m, p, cost.f, dec, dctx, 1.0, cost.kv_reads, cost.kv_reread) if dec else \
        prefill_attention_op(m, p, cost.f, pre, pairs, pctx)
    want = m.layers * op_time_s(op, cost.dev, cost.cal)
    rebuild = prefix_rebuild_op(m, p, cost.f, pctx - pre) if pre else None  # MLA chunks after a cached prefix
    if rebuild is not None:
        want += m.layers * op_time_s(rebuild, cost.dev, cost.cal)
    assert (rebuild is not None) == (mdl == "v2-lite" and pctx > pre)
    assert cost.attention_s(0, *args) == pytest.approx(want, rel=1e-12)


def test_a_sliding_window_model_prices_each_prompt_op_on_the_roofline():
    """A 4-layer model whose even layers attend over a 128-token window takes the exact (per-op) path: a
    1,000-token chunk after 3,000 cached tokens has 3.5e6 causal pairs over 4,000 context tokens in the 2 full
    layers, and min(3.5e6, 1000·128) pairs over min(4000, 1000 + 128) = 1,128 context tokens in the 2 window
    layers; the attention time is the roofline of those two ops, twice each."""
    m = model_from_dict(SWA)
    cost = _cost(mdl=m)
    p = cost.scn.plan
    full = prefill_attention_op(m, p, cost.f, 1000, 3.5e6, 4000)
    win = prefill_attention_op(m, p, cost.f, 1000, 1000 * 128, 1128)
    want = 2 * op_time_s(full, cost.dev, cost.cal) + 2 * op_time_s(win, cost.dev, cost.cal)
    assert cost.attention_s(0, 0, 0, 1000, 3.5e6, 4000) == pytest.approx(want, rel=1e-12)
    # decodes too: 8 sequences over 8,000 tokens; a window layer reads at most 8·128 of them
    d_full = decode_attention_op(m, p, cost.f, 8, 8000, 1.0, cost.kv_reads)
    d_win = decode_attention_op(m, p, cost.f, 8, 8 * 128, 1.0, cost.kv_reads)
    want_d = 2 * op_time_s(d_full, cost.dev, cost.cal) + 2 * op_time_s(d_win, cost.dev, cost.cal)
    assert cost.attention_s(0, 8, 8000, 0, 0, 0) == pytest.approx(want_d, rel=1e-12)


def test_an_eager_prompt_iteration_runs_at_the_hosts_dispatch_pace():
    """TensorRT-LLM 1.0 (PyTorch backend: eager_prefill, 29 us of host work per request) on Llama-3 8B with a
    profile whose host takes 1 ms to dispatch a kernel: a layer issues 8 kernels (add+norm, qkv, qkv preprocess,
    o_proj, add+norm, mlp up, act, down), the embedding one more: 8·32 + 1 = 257 token-op kernels; the host also
    issues each layer's attention core (32) and the output layer's 4 (final norm, logits, their gather, sampling):
    293 kernels, 0.293 s. A prompt-only iteration (512 tokens, one request) is then host-bound: 29e-6 + 0.293 s; a
    decode-only iteration replays a CUDA graph and pays no dispatch."""
    base = _cost(ServingPlan(framework="TensorRT-LLM 1.0"))
    cal = dataclasses.replace(base.cal, host_dispatch_s=1e-3)
    cost = ServingCost(base.scn, 2048, cal)
    assert cost.eager_prefill and cost.host_per_request_s == 29e-6
    assert float(cost.kernels.sum()) == 257 and cost.stage_kernels == [293.0]
    pairs = 512 * 513 / 2
    gpu = cost.token_time_s(0, 512) + cost.attention_s(0, 0, 0, 512, pairs, 512) + cost.head_time_s(1)
    assert 0 < gpu < 0.293
    assert cost.iteration_s(512, 0, 0, 512, pairs, 512, 1) == pytest.approx(29e-6 + 0.293, rel=1e-12)
    assert cost.iteration_s(8, 8, 8 * 512) < 0.293 / 2


def test_two_instances_that_exactly_fill_a_domain_hand_off_over_nvlink():
    """Two 4-GPU instances (tp 4) on an 8-GPU H100 NVLink domain: 2·4 ≤ 8, so the KV of a 4,000-token prompt
    (each GPU's share: 4000 · 32 layers · 2 · (8/4) · 128 · 2 B = 131,072,000 B) crosses NVLink at 450 GB/s
    (≥ 0.29 ms), at no less than half that rate, well below its time over a 50 GB/s NIC (≥ 2.6 ms)."""
    c = _cost(ServingPlan(tp=4, replicas=2, prefill_replicas=1))
    nbytes = 4000 * c.kv_bytes_per_token
    assert nbytes == 131_072_000
    up = nbytes / c.scn.system.tier("scale_up").bw_bytes_per_s_per_gpu
    out = nbytes / c.scn.system.tier("scale_out").bw_bytes_per_s_per_gpu
    assert up <= c.handoff_s(4000) <= 2 * up < out


# ---- what a stack fills in ------------------------------------------------------------------------------------

def test_an_open_weight_format_takes_the_stacks_checkpoint_format():
    """weight_precision left open: the default stack's checkpoint format, bf16 (serving_stacks.yaml), whatever
    the plan held, noted as not published; the KV format stays as given."""
    scn = _scn(ServingPlan(weight_precision="fp8", kv_precision="fp8"))
    out = resolve_formats(scn, ("weight_precision",))
    assert out.plan.weight_precision == "bf16" and out.plan.kv_precision == "fp8"
    assert dict(out.chosen)["weight_precision"] == "bf16 — checkpoint format of the default stack (not published)"


def test_a_fixed_batch_load_is_served_statically_and_says_why():
    """A fixed-batch load with no policy given runs as a static batch; the note gives the reason."""
    load = Load(arrival="fixed-batch", batch_size=8, input_tokens=128, output_tokens=16)
    scn, lim = resolve_limits(_scn(ServingPlan(), load))
    assert scn.plan.policy == "static"
    assert dict(scn.chosen)["policy"] == "'static' — the load is a static batch"
    assert lim.max_batch == 8 and lim.max_num_tokens == 8 * 128


def test_a_fixed_limit_stack_gives_its_own_token_budget(monkeypatch):
    """A stack with fixed batch limits supplies its own max_num_tokens (serving_stacks.yaml: `fixed` = the
    max_batch / max_num_tokens given in `defaults`): a default entry whose budget is 4,096 gives 4,096, not the
    8,192 every shipped entry happens to carry."""
    real = serving_stack

    def small(framework):
        e = real(framework)
        return dict(e, defaults=dict(e["defaults"], max_num_tokens=4096))
    monkeypatch.setattr(serving_defaults, "serving_stack", small)
    scn, lim = resolve_limits(_scn(ServingPlan()))
    assert (lim.max_batch, lim.max_num_tokens) == (256, 4096)
    assert dict(scn.chosen)["max_num_tokens"] == "4096 — default of the default stack"


def test_a_fixed_limit_stack_without_a_batch_size_takes_256(monkeypatch):
    """A fixed-limit stack entry that names no max_batch falls back to 256 sequences (vLLM's max_num_seqs, the
    tool's default stack), its token budget still its own."""
    real = serving_stack

    def no_batch(framework):
        e = real(framework)
        d = {k: v for k, v in e["defaults"].items() if k != "max_batch"}
        return dict(e, defaults=dict(d, max_num_tokens=2048))
    monkeypatch.setattr(serving_defaults, "serving_stack", no_batch)
    _, lim = resolve_limits(_scn(ServingPlan()))
    assert (lim.max_batch, lim.max_num_tokens) == (256, 2048)


# ---- the simulator ----------------------------------------------------------------------------------------------

TWO_PROMPTS = Load(arrival="offline", input_tokens=300, output_tokens=4, num_requests=2)


def test_chunked_prefill_fills_the_token_budget_with_the_next_prompt():
    """Chunked prefill (the default stack's), a 512-token budget, two 300-token prompts at t = 0: the first
    iteration runs prompt 1 whole and the first 512 − 300 = 212 tokens of prompt 2; the next runs prompt 1's
    first decode and prompt 2's last 88 tokens."""
    log = simulate(_scn(ServingPlan(max_batch=8, max_num_tokens=512), TWO_PROMPTS)).result.log
    assert [(r.decodes, r.prompt_tokens) for r in log[:2]] == [(0, 512), (1, 88)]


def test_without_chunking_a_prompt_waits_for_a_budget_that_holds_it_whole():
    """The same two prompts without chunked prefill: prompt 2 (300 tokens) does not fit the 212 left beside
    prompt 1, so it waits and runs whole in the next iteration beside prompt 1's first decode (1 + 300 ≤ 512)."""
    plan = ServingPlan(max_batch=8, max_num_tokens=512, chunked_prefill=False)
    log = simulate(_scn(plan, TWO_PROMPTS)).result.log
    assert [(r.decodes, r.prompt_tokens) for r in log[:2]] == [(0, 300), (1, 300)]


def test_a_prompt_iteration_is_priced_with_its_prompt_tokens():
    """One 300-token prompt alone: its iteration is cost.iteration_s of T = 300 tokens, no decodes, 300 prompt
    tokens with 300·(0 + 301/2) = 45,150 causal pairs over 300 context tokens, one sequence producing its first
    token, one request."""
    run = simulate(_scn(ServingPlan(max_batch=8, max_num_tokens=512),
                        Load(arrival="offline", input_tokens=300, output_tokens=4, num_requests=1)))
    want = run.cost.iteration_s(300, 0, 0.0, 300, 45_150.0, 300, 1, 1, 1)
    assert run.result.log[0].duration_s == pytest.approx(want, rel=1e-12)
    assert run.result.log[0].prompt_tokens == 300


def test_a_pending_prompt_chunk_still_costs_its_requests_bookkeeping(monkeypatch):
    """TensorRT-LLM 1.0 with chunked prefill, a 256-token budget and one 600-token prompt, under a stack whose
    executor spends 0.1 s per request: the first iteration runs a 256-token chunk that does not finish the prompt,
    yet the executor handles that request, so the iteration takes its 0.1 s plus the eager dispatch of the 293
    kernels of Llama-3 8B (8 per layer · 32 + the embedding, one attention core per layer, the output layer's 4) at
    the profile's host_dispatch_s — the GPU's part (256 tokens, well under 0.1 s) hidden behind it."""
    real = serving_cost_mod.serving_stack

    def slow_host(framework):
        return dict(real(framework), host_per_request_s=0.1)
    monkeypatch.setattr(serving_cost_mod, "serving_stack", slow_host)
    plan = ServingPlan(framework="TensorRT-LLM 1.0", chunked_prefill=True, max_batch=8, max_num_tokens=256)
    run = simulate(_scn(plan, Load(arrival="offline", input_tokens=600, output_tokens=2, num_requests=1)))
    first = run.result.log[0]
    assert (first.decodes, first.prompt_tokens) == (0, 256)
    c = run.cost
    assert c.host_per_request_s == 0.1 and float(c.kernels.sum()) == 257 and c.stage_kernels == [293.0]
    gpu = c.token_time_s(0, 256) + c.attention_s(0, 0, 0, 256, 256 * 257 / 2, 256)
    assert gpu < 0.05
    assert first.duration_s == pytest.approx(0.1 + 293 * c.cal.host_dispatch_s, rel=1e-12)


def test_a_sliding_window_model_decodes_through_the_simulator():
    """The 4-layer sliding-window model serves one request of 100 + 3 tokens: a prompt iteration, then its 2
    remaining decode steps merged, over contexts 101 and 102 (a decode-only iteration has no prompt tokens), their
    time the sum of those two iterations."""
    run = simulate(_scn(ServingPlan(), Load(arrival="offline", input_tokens=100, output_tokens=3, num_requests=1),
                        mdl=model_from_dict(SWA)))
    log, c = run.result.log, run.cost
    assert [(r.steps, r.decodes, r.prompt_tokens) for r in log] == [(1, 0, 100), (2, 1, 0)]
    want = c.iteration_s(1, 1, 101.0, 0, 0, 0, 1, 1) + c.iteration_s(1, 1, 102.0, 0, 0, 0, 1, 1)
    assert log[1].duration_s == pytest.approx(want, rel=1e-12)


def test_only_lane_zero_is_logged_and_only_when_asked():
    """Two replicas (two lanes), four 100-token prompts dealt round-robin: lane 0 serves requests 0 and 2, so its
    log holds 200 prompt tokens; with log_lane=False no lane is logged."""
    scn = _scn(ServingPlan(replicas=2), Load(arrival="offline", input_tokens=100, output_tokens=4, num_requests=4))
    log = simulate(scn).result.log
    assert sum(r.prompt_tokens for r in log) == 200
    assert simulate(scn, log_lane=False).result.log == []


def test_a_disaggregated_deployment_closes_the_loop_across_its_pools():
    """Closed-loop concurrency on a disaggregated deployment (1 prefill + 1 decode replica): 2 clients, so the
    third and fourth requests go out at the first two finishes, and the run's notes say so."""
    scn = _scn(ServingPlan(replicas=2, prefill_replicas=1),
               Load(arrival="offline", input_tokens=100, output_tokens=4, num_requests=4, concurrency=2))
    res = simulate(scn).result
    assert ("closed loop across the pools: 2 clients, each sending its next request when its last one finishes "
            "decoding") in res.notes
    assert res.arrival_s.tolist()[:2] == [0.0, 0.0]
    assert sorted(res.arrival_s.tolist()[2:]) == sorted(res.finish_s.tolist())[:2]


def test_steps_to_pass_is_one_when_the_first_step_reaches_the_event():
    """Steps of 1 s each: an event 0.5 s ahead is seen after the first step (k = 1); 2.5 s ahead after the third;
    exactly 3 s ahead also after the third (duration(3) = 3 ≥ 3)."""
    assert steps_to_pass(lambda k: 1.0 * k, 0.5, 10) == 1
    assert steps_to_pass(lambda k: 1.0 * k, 2.5, 10) == 3
    assert steps_to_pass(lambda k: 1.0 * k, 3.0, 10) == 3
    assert steps_to_pass(lambda k: 1.0 * k, 1.0, 2) == 1
    # the caller's bound is the answer: 2 steps fall short of 2.5 s, the third reaches it
    assert steps_to_pass(lambda k: 1.0 * k, 2.5, 3) == 3


def test_steps_of_a_constant_time_take_n_times_it():
    """A Step with no step-time function repeats its first step's time: n steps take n·t0, as run_s (duration
    from the first step times alone) says; 0 steps take nothing."""
    s = Step(4, [], 5, 0.25, 0.25, 100.0, 0, 0.0, 1)
    for n in (0, 1, 2, 3, 5):
        assert s.duration(n) == s.run_s(n) == 0.25 * n


def test_a_lane_without_a_concurrency_is_open_loop():
    """A Lane built without `concurrency` releases every request at its arrival: two 10-token prompts at t = 0
    fit one iteration (budget 1,024), so both first tokens come at t = 1 (iterations of 1 s), and both finish
    after their 2 further decode steps at t = 3."""
    spec = LaneSpec(4, 1024, 1000, 16, "decode-first", "reserve", True)
    lane, a = _lane(spec, _const_step(1.0), [10, 10], [3, 3])
    lane.run()
    assert a["first"].tolist() == [1.0, 1.0]
    assert a["finish"].tolist() == [3.0, 3.0]


# ---- the serving search's steady state ----------------------------------------------------------------------------

def test_the_disaggregated_steady_state_serves_a_batch_and_a_half(monkeypatch):
    """1 prefill + 1 decode replica with max_batch 40: the warm-up is one batch per decode lane (40 requests),
    then half a batch more (20, at least 16): the Poisson load simulated has 60 requests."""
    seen = {}
    real = serving_steady.simulate

    def spy(scn, *a, **kw):
        seen["scn"] = scn
        return real(scn, *a, **kw)
    monkeypatch.setattr(serving_steady, "simulate", spy)
    plan = ServingPlan(replicas=2, prefill_replicas=1, max_batch=40, max_num_tokens=2048)
    steady_lane(_scn(plan, Load(arrival="offline", input_tokens=128, output_tokens=16, num_requests=8)))
    assert seen["scn"].load.num_requests == 60 and seen["scn"].load.arrival == "poisson"


def test_a_trace_of_identical_requests_has_the_steady_state_of_its_fixed_load():
    """The steady state keeps the lane full with copies of the load's requests: a trace whose every request is
    64 + 9 tokens gives exactly the steady state of a fixed 64 + 9 load."""
    plan = ServingPlan(max_batch=4)
    trace = Load(arrival="trace", requests=tuple((0.1 * i, 64, 9) for i in range(5)))
    fixed = Load(arrival="offline", input_tokens=64, output_tokens=9, num_requests=5)
    assert steady_lane(_scn(plan, trace)) == steady_lane(_scn(plan, fixed))


def test_one_token_requests_have_no_time_per_output_token():
    """TPOT counts requests with more than one output token (serving_stats conventions): a trace mixing 1-token
    and 9-token outputs gives finite, positive TPOT figures from the 9-token ones alone."""
    trace = Load(arrival="trace", requests=tuple((0.0, 64, 1 if i % 2 else 9) for i in range(6)))
    st = steady_lane(_scn(ServingPlan(max_batch=4), trace))
    assert all(math.isfinite(v) and v > 0 for v in st.tpot_s.values())


def test_the_steady_state_chunks_prompts_when_the_plan_does(monkeypatch):
    """The default stack chunks prompts: the steady lane runs with chunking on, and its latencies differ from the
    same plan without chunking (300-token prompts against a 512-token budget: the second prompt starts in the
    first iteration only when chunked)."""
    seen = []
    real = serving_steady.Lane

    def spy(spec, *a, **kw):
        seen.append(spec.chunked)
        return real(spec, *a, **kw)
    monkeypatch.setattr(serving_steady, "Lane", spy)
    load = Load(arrival="offline", input_tokens=300, output_tokens=8, num_requests=8)
    on = steady_lane(_scn(ServingPlan(max_batch=4, max_num_tokens=512), load))
    off = steady_lane(_scn(ServingPlan(max_batch=4, max_num_tokens=512, chunked_prefill=False), load))
    assert seen == [True, False]
    assert on.ttft_s != off.ttft_s


def test_serve_figures_carry_both_throughputs():
    """`serve --json` figures: output and total (prompt + output) tokens per second over one makespan, so for a
    uniform 256 + 32 load total = output · (256 + 32)/32 = 9 × output."""
    res = simulate(_scn(ServingPlan(), Load(arrival="offline", input_tokens=256, output_tokens=32,
                                            num_requests=8))).result
    fig = res.figures()
    assert set(fig) == {"output_tokens_per_s", "total_tokens_per_s", "ttft_s", "tpot_s", "e2e_latency_s"}
    assert fig["total_tokens_per_s"] == pytest.approx(9 * fig["output_tokens_per_s"], rel=1e-12)
    assert fig["output_tokens_per_s"] > 0


def test_each_pipeline_rank_issues_only_its_own_stages_kernels():
    """Under pp 2 an eager prompt iteration is issued by two host threads, one per rank, each its own stage's
    kernels (16 layers: 16·(8 + 1) = 144, plus the embedding's 1 on the first and the output layer's 4 on the last):
    at 1 ms a kernel a stage takes 145 ms and 148 ms of issuing, so the micro-batch period is 2 · (0.148 s + 29 µs of
    bookkeeping) under TensorRT-LLM 1.0's serial pipeline loop — not the 293 kernels of both stages on one thread."""
    base = _cost(ServingPlan(pp=2, framework="TensorRT-LLM 1.0"))
    cal = dataclasses.replace(base.cal, host_dispatch_s=1e-3)
    cost = ServingCost(base.scn, 2048, cal)
    assert cost.stage_kernels == [145.0, 148.0]
    pairs = 512 * 513 / 2
    assert cost.iteration_s(512, 0, 0, 512, pairs, 512, 1) == pytest.approx(2 * (0.148 + 29e-6), rel=1e-12)
