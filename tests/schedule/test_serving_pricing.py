"""The serving iteration cost (schedule.serving_cost) and the limits a stack fills in (schedule.serving_defaults):
the token grid, the pipeline composition of stage times, the attention fast path against the roofline at every
size, the limits of static sessions, trtllm-bench and TensorRT-LLM's run-time batch tuning, the layout choice, the
disaggregated steady state's load and the refusals."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.catalog.serving import serving_stack
from narrowpath.cost.serving_memory import serving_memory
from narrowpath.errors import InfeasibleError, SpecError
from narrowpath.schedule import serving_defaults, serving_steady
from narrowpath.schedule.serving_cost import ServingCost, token_grid
from narrowpath.schedule.serving_defaults import (resolve_formats, resolve_limits, trtllm_bench_limits,
                                                  trtllm_runtime_batch)
from narrowpath.schedule.serving_run import check_fits, simulate, spec_gain
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from narrowpath.workload.serving import Formats

LOAD = Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=32)


def _scn(plan: ServingPlan = ServingPlan(), load: Load = LOAD, mdl: str = "llama3-8b", gpus: int | None = None):
    return ServingScenario(system=system("dgx-h100"), model=model(mdl), plan=plan, load=load,
                           num_gpus=gpus or plan.num_gpus)


def _cost(plan: ServingPlan, max_tokens: int = 2048) -> ServingCost:
    scn, _ = resolve_limits(resolve_formats(_scn(plan), ()))
    return ServingCost(scn, max_tokens)


# ---- the cost model ---------------------------------------------------------------------------------------------

def test_token_grid_is_every_count_to_8_then_steps_of_a_quarter():
    """1..8, then ×1.25 rounded: 10, 12 (12.5 rounds to even), 16 (15.6), 20 (19.5), 24 (24.4), 31, 38, 48, 60,
    75, 93, then the end 100."""
    assert token_grid(100).tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 31, 38, 48, 60, 75, 93, 100]
    g = token_grid(8192)
    assert g[-1] == 8192 and np.all(g[9:] / g[8:-1] <= 1.25 + 1 / g[8:-1])


def test_a_single_token_still_pays_for_every_weight():
    """The grid starts at T = 1: one decode token runs every layer (reads all weights), so its time is the
    exactly-priced grid point, not an extrapolation to zero; only T = 0 costs nothing."""
    cost = _cost(ServingPlan())
    assert cost.token_time_s(0, 1) == pytest.approx(cost._token_time(0, 1.0), rel=1e-12)
    assert cost.head_time_s(1) == pytest.approx(cost._head_time(1.0), rel=1e-12)
    assert cost.token_time_s(0, 1) > 0 and cost.head_time_s(1) > 0
    assert cost.token_time_s(0, 0) == 0.0 and cost.head_time_s(0) == 0.0
    assert cost.token_time_s(0, 1) < cost.token_time_s(0, 1.5) < cost.token_time_s(0, 2)


def test_a_decode_reads_its_kv_cache():
    """The same 8 decodes over longer contexts read more KV bytes: the iteration gets longer (memory-bound
    attention, pp 1 and pp 2 alike)."""
    for pp in (1, 2):
        cost = _cost(ServingPlan(pp=pp))
        short, long_ = cost.iteration_s(8, 8, 8 * 256), cost.iteration_s(8, 8, 8 * 8192)
        assert long_ > short > 0


@pytest.mark.parametrize("pp", [2, 3])
def test_pipeline_period_is_the_gpipe_steady_state(pp):
    """A lane's period with pp stages is max(Σ stages, pp · slowest stage); the output layer runs once, on the last
    stage (the embedding on the first)."""
    cost = _cost(ServingPlan(pp=pp))
    T, dec, ctx, rows = 40.0, 40.0, 40 * 900.0, 40.0
    stages = [cost.token_time_s(s, T) + cost.attention_s(s, dec, ctx, 0, 0, 0) for s in range(pp)]
    stages[-1] += cost.head_time_s(rows)
    assert cost.iteration_s(T, dec, ctx) == pytest.approx(max(sum(stages), pp * max(stages)), rel=1e-12)


def test_a_pipeline_loop_that_waits_for_each_stage_puts_the_host_work_between_the_forwards():
    """TensorRT-LLM 1.0's PyTorch pipeline loop synchronises on each stage's forward before the host handles a
    micro-batch's requests, so a micro-batch comes round every pp · (slowest stage + host work): stages of 10, 12
    and 11 ms with 3 ms of host work each → 3 · 15 = 45 ms (not max(33, 36) = 36 ms); without host work it is the
    GPipe period; one 30 ms stage among two of 2 ms: 3 · 30 = 90 ms (the slowest rank paces the ring). The serving
    cost uses it under a stack that says so: at pp 2 with trtllm-bench's 29 µs per
    request the period of 32 decodes (a captured graph size: no padding) is 2 · (slowest stage + 32 · 29 µs), where
    vLLM's overlapped loop takes max(GPipe period, 2 · 32 · 29 µs)."""
    from narrowpath.schedule.serving_cost import pp_serial_period_s
    assert pp_serial_period_s([0.010, 0.012, 0.011], 0.003) == pytest.approx(0.045)
    assert pp_serial_period_s([0.010, 0.012, 0.011], 0.0) == pytest.approx(0.036)
    assert pp_serial_period_s([0.030, 0.002, 0.002], 0.0) == pytest.approx(0.090)
    assert pp_serial_period_s([0.010], 0.001) == pytest.approx(0.011)  # one stage: its forward then its host work
    assert serving_stack("TensorRT-LLM 1.0 (PyTorch backend)")["pp_host_serial"] is True
    assert not serving_stack("vLLM 0.10").get("pp_host_serial")
    T, dec, ctx = 32.0, 32.0, 32 * 900.0
    serial = _cost(ServingPlan(pp=2, framework="TensorRT-LLM 1.0 (PyTorch backend)"))
    stages = [serial.token_time_s(s, T) + serial.attention_s(s, dec, ctx, 0, 0, 0) for s in range(2)]
    stages[-1] += serial.head_time_s(dec)
    assert serial.iteration_s(T, dec, ctx) == pytest.approx(2 * (max(stages) + 32 * 29e-6), rel=1e-12)
    overlapped = _cost(ServingPlan(pp=2, framework="vLLM 0.10"))
    st2 = [overlapped.token_time_s(s, T) + overlapped.attention_s(s, dec, ctx, 0, 0, 0) for s in range(2)]
    st2[-1] += overlapped.head_time_s(dec)
    assert overlapped.iteration_s(T, dec, ctx) == pytest.approx(max(sum(st2), 2 * max(st2)), rel=1e-12)


def test_attention_fast_path_equals_the_roofline_at_every_size():
    """The affine attention pricing equals cost.roofline on the ops at any sizes — several queries per sequence
    (speculative decoding) and a prompt chunk with no causal pairs (zero FLOPs) included."""
    cost = _cost(ServingPlan())
    for args, q in (((3, 5000, 0, 0, 0), 3.0), ((16, 16 * 2000, 0, 0, 0), 4.0), ((0, 0, 700, 0, 900), 1.0),
                    ((5, 9000, 64, 64 * 40, 600), 2.0)):
        assert cost.attention_s(0, *args, q) == pytest.approx(cost.op_s(cost.attention_ops(0, *args, q)),
                                                              rel=1e-12)


def test_attention_fast_path_equals_the_roofline_where_exponentials_bind():
    """On B200 an FP8 KV cache runs the attention core in FP8, whose tensor-core rate leaves the SFUs' one
    exponential per score the binding roof (cost.roofline.exp_time_s); a 64-wide-head model is exp-bound in any
    format there. The affine fast path still equals the op roofline, prompt chunks and decodes alike."""
    for mdl, kv in (("llama3-8b", "fp8"), ("llama3-8b", "bf16")):
        m = model(mdl)
        if kv == "bf16":
            m = dataclasses.replace(m, heads=64, head_dim=64)
        scn = ServingScenario(system=system("dgx-b200"), model=m, plan=ServingPlan(kv_precision=kv,
                              weight_precision="fp8"), load=LOAD, num_gpus=1)
        scn, _ = resolve_limits(resolve_formats(scn, ()))
        cost = ServingCost(scn, 2048)
        ops = cost.attention_ops(0, 0, 0, 700, 700 * 900, 1500)
        from narrowpath.cost.roofline import compute_time_s, exp_time_s
        assert any(compute_time_s(op, cost.dev, cost.cal) > compute_time_s(dataclasses.replace(op, exps=0.0),
                                                                            cost.dev, cost.cal)
                   for op, _ in ops), (mdl, kv)  # the exponentials bind somewhere
        assert exp_time_s(0.0, cost.dev, 1.0) == 0.0
        for args in ((3, 5000, 0, 0, 0), (0, 0, 700, 700 * 900, 1500), (40, 90000, 300, 300 * 2000, 4000)):
            assert cost.attention_s(0, *args) == pytest.approx(cost.op_s(cost.attention_ops(0, *args)), rel=1e-12)


def test_decode_attention_flops_scale_with_the_queries_per_sequence():
    """Each query of a sequence attends to its whole context: 3 queries per sequence, 3× the FLOPs of one."""
    cost = _cost(ServingPlan())
    one = sum(op.flop * n for op, n in cost.attention_ops(0, 4, 4 * 1000, 0, 0, 0, 1.0))
    three = sum(op.flop * n for op, n in cost.attention_ops(0, 4, 4 * 1000, 0, 0, 0, 3.0))
    assert one > 0 and three == pytest.approx(3 * one, rel=1e-12)


def test_speculative_gain_at_full_acceptance_is_every_draft_token():
    """α → 1 in (1 − α^(k+1))/(1 − α) = 1 + α + … + α^k: every one of the k drafts is accepted, k + 1 tokens."""
    assert spec_gain(3, 1.0) == 4.0
    assert spec_gain(3, 0.999999) == pytest.approx(4.0, rel=1e-5)


# ---- limits -----------------------------------------------------------------------------------------------------

def test_decode_first_is_the_stacks_default_and_says_so():
    scn, _ = resolve_limits(_scn())
    assert scn.plan.policy == "decode-first"
    why = dict(scn.chosen)["policy"]
    assert "default of the default stack" in why


def test_a_static_session_allocates_its_whole_kv_cache_unless_told():
    """TensorRT-LLM 0.x GptSession sizes the cache for its batch: fraction 1.0 when none is given, the given one
    otherwise."""
    fixed = Load(arrival="fixed-batch", batch_size=8, input_tokens=128, output_tokens=32)
    _, lim = resolve_limits(_scn(ServingPlan(framework="TensorRT-LLM 0.9"), fixed))
    assert lim.kv_fraction == 1.0
    _, lim = resolve_limits(_scn(ServingPlan(framework="TensorRT-LLM 0.9", kv_memory_fraction=0.5), fixed))
    assert lim.kv_fraction == 0.5


def test_a_static_policy_without_a_fixed_batch_takes_the_stacks_max_batch():
    """policy static on an offline load (no batch size): the stack's max_batch — trtllm-serve's LLM API 2048 —
    and a token budget of the whole batch's prompts."""
    scn, lim = resolve_limits(_scn(ServingPlan(policy="static", framework="trtllm-serve")))
    assert lim.max_batch == 2048 and lim.max_num_tokens == 2048 * 256
    assert "static batch per micro-batch" in dict(scn.chosen)["max_batch"]


def test_trtllm_bench_sizes_the_limits_by_its_heuristic():
    """TensorRT-LLM 1.0 (trtllm-bench) without max_batch / max_num_tokens: its own heuristic for the load's ISL /
    OSL (tests/schedule/test_serving_stacks.py works it by hand), not fixed defaults."""
    scn = _scn(ServingPlan(framework="TensorRT-LLM 1.0", weight_precision="fp8", kv_precision="fp8"))
    r, lim = resolve_limits(scn)
    want = trtllm_bench_limits(dataclasses.replace(scn, plan=r.plan), 256, 64, 0.9, 256, False)
    assert (lim.max_batch, lim.max_num_tokens) == want
    assert "trtllm-bench's heuristic for ISL 256 / OSL 64" in dict(r.chosen)["max_batch"]


def test_runtime_batch_tuning_caps_the_sequences_by_the_kv_capacity(monkeypatch):
    """A stack with TensorRT-LLM's dynamic batch tuning (DynamicBatchTuner::getRuntimeBatchSize) runs at most the
    table's batch for the KV capacity in sequences of ISL + OSL: trtllm-serve's 2048 on one H100 with Llama-3 8B
    falls to the entry for the cache's capacity."""
    real = serving_stack

    def tuned(framework):
        return dict(real(framework), runtime_batch_tuning=True)
    monkeypatch.setattr(serving_defaults, "serving_stack", tuned)
    scn, lim = resolve_limits(_scn(ServingPlan(framework="trtllm-serve")))
    capacity = int(lim.memory.kv_tokens // 1 / (256 + 64))
    table = [(144, 128), (336, 256), (672, 512), (832, 768), (1280, 1024), (1664, 1536)]
    want = next((bs for limit, bs in table if capacity < limit), None)
    assert want is not None and want < 2048
    assert lim.max_batch == want and scn.plan.max_batch == 2048
    assert any(k == "runtime batch" and f"{capacity} sequences" in why for k, why in scn.chosen)


def test_runtime_batch_table_and_fallback():
    """Below 144 sequences 128; below 1664 the table; above, the capacity rounded down to 512 when within 128."""
    assert [trtllm_runtime_batch(c) for c in (100, 300, 1100, 1600)] == [128, 256, 1024, 1536]
    assert trtllm_runtime_batch(2100) == 2048 and trtllm_runtime_batch(2200) == 2200


def test_an_fp8_checkpoint_brings_the_stacks_quantized_kv():
    """KV format left open with FP8 weights: trtllm-bench's quantized checkpoints carry an FP8 KV cache (on an
    FP8-capable H100); bf16 weights keep a bf16 cache."""
    scn = _scn(ServingPlan(framework="TensorRT-LLM 1.0", weight_precision="fp8"))
    out = resolve_formats(scn, ("kv_precision",))
    assert out.plan.kv_precision == "fp8" and "quantized checkpoints" in dict(out.chosen)["kv_precision"]
    bf = resolve_formats(_scn(ServingPlan(framework="TensorRT-LLM 1.0")), ("kv_precision",))
    assert bf.plan.kv_precision == "bf16"


def test_a_request_longer_than_a_lanes_cache_is_refused_before_simulating():
    scn = _scn(ServingPlan(kv_memory_fraction=0.001), Load(arrival="offline", input_tokens=60000, output_tokens=10,
                                                           num_requests=2))
    with pytest.raises(SpecError, match=r"a request of 60010 tokens needs \d+ KV blocks; one lane"):
        check_fits(scn)
    check_fits(_scn())


def test_a_model_too_large_names_what_it_needs_against_the_device():
    """Llama-3 405B in bf16 on one H100: weights alone exceed 80 GB; the message's runtime reserve is a part of the
    device, and weights + activations + runtime exceed its capacity."""
    m, s, p = model("llama3-405b"), system("dgx-h100"), ServingPlan()
    with pytest.raises(InfeasibleError) as exc:
        serving_memory(m, p, s, Formats.of(p, True, m), max_num_tokens=2048, max_batch=64, kv_fraction=0.9,
                       block_tokens=16)
    w, a, r, cap = (float(x) for x in re.search(r"needs ([\d.]+) GB of weights \+ ([\d.]+) GB of activations \+ "
                                                r"([\d.]+) GB runtime per GPU, more than the ([\d.]+) GB",
                                                str(exc.value)).groups())
    assert w > cap and 0 < r < cap and w + a + r > cap


# ---- layout choice and the steady state ------------------------------------------------------------------------

def test_open_layout_knobs_take_the_fastest_consistent_candidate():
    """tp and pp left open on 2 GPUs: the candidates (tp 1, pp 2) and (tp 2, pp 1) are each simulated on the load;
    the faster is chosen and noted."""
    load = Load(arrival="offline", input_tokens=256, output_tokens=32, num_requests=16)
    base = ServingPlan(tp=2)
    run = simulate(_scn(base, load), ("tp", "pp"))
    tput = {}
    for tp, pp in ((1, 2), (2, 1)):
        plan = dataclasses.replace(base, tp=tp, pp=pp)
        tput[(tp, pp)] = simulate(_scn(plan, load)).result.output_tokens_per_s
    best = max(tput, key=tput.get)
    assert tput[(1, 2)] != tput[(2, 1)]
    assert (run.scenario.plan.tp, run.scenario.plan.pp) == best
    assert {k for k, _ in run.scenario.chosen} >= {"tp", "pp"}


def test_open_expert_parallelism_is_chosen_by_simulation():
    """ep left open for Mixtral on 2 GPUs (a stack without an engine default): ep 1 or 2, the faster, noted."""
    load = Load(arrival="offline", input_tokens=256, output_tokens=16, num_requests=16)
    base = ServingPlan(tp=2)
    run = simulate(_scn(base, load, "mixtral-8x7b"), ("ep",))
    tput = {ep: simulate(_scn(dataclasses.replace(base, ep=ep), load, "mixtral-8x7b")).result.output_tokens_per_s
            for ep in (1, 2)}
    assert run.scenario.plan.ep == max(tput, key=tput.get)
    assert any(k == "ep" and "fastest" in why for k, why in run.scenario.chosen)


@pytest.mark.parametrize("isl, osl", [(4000, 8), (64, 1500)])
def test_a_disaggregated_steady_state_is_fed_below_its_capacity(monkeypatch, isl, osl):
    """The Poisson rate is DISAGG_LOAD × the smaller of the prefill capacity (prefill lanes × budget/ISL prompts per
    prompt-only iteration of `budget` tokens) and the decode capacity (decode lanes × B/OSL per full-batch step at
    the mean context ISL + OSL/2): long prompts are prefill-bound, long outputs decode-bound."""
    seen = {}
    real = serving_steady.simulate

    def spy(scn, *a, **kw):
        seen["scn"], seen["cost"] = scn, kw.get("cost")
        return real(scn, *a, **kw)
    monkeypatch.setattr(serving_steady, "simulate", spy)
    plan = ServingPlan(replicas=2, prefill_replicas=1, max_batch=32, max_num_tokens=4096)
    load = Load(arrival="offline", input_tokens=isl, output_tokens=osl, num_requests=8)
    serving_steady.steady_lane(_scn(plan, load))
    cost, budget, B = seen["cost"], 4096, 32
    prompts = max(1.0, budget / isl)
    pre = budget / isl / cost.iteration_s(budget, 0, 0, budget, budget * (isl + 1) / 2, budget, prompts)
    dec = B / osl / cost.iteration_s(B, B, B * (isl + osl / 2))
    assert (pre < dec) == (isl > osl)
    assert seen["scn"].load.rate_per_s == pytest.approx(serving_steady.DISAGG_LOAD * min(pre, dec), rel=1e-12)


@pytest.mark.parametrize("tp, tier", [(1, "scale_up"), (8, "scale_out")])
def test_kv_hand_off_runs_at_the_fabric_that_joins_two_instances(tp, tier):
    """Two 1-GPU instances share an 8-GPU NVLink domain: a 4,000-token Llama-3 8B prompt's KV (4000·128 KiB =
    524 MB) crosses NVLink (450 GB/s: ≥ 1.17 ms); two 8-GPU instances fill a domain each, so each GPU sends its
    share (65.5 MB) over its NIC (50 GB/s: ≥ 1.31 ms). Either runs at no less than half its line rate."""
    c = _cost(ServingPlan(tp=tp, replicas=2, prefill_replicas=1))
    nbytes = 4000 * c.kv_bytes_per_token
    assert nbytes == 4000 * 32 * 2 * (8 / tp) * 128 * 2
    line = nbytes / c.scn.system.tier(tier).bw_bytes_per_s_per_gpu
    assert line <= c.handoff_s(4000) <= 2 * line


def test_a_pipeline_stage_hands_its_activations_on_once_per_iteration():
    """Llama-3 8B, pp 2, tp 1: stage 0 sends T·h·2 bytes (64·4096·2 = 524,288 B) to stage 1 once per iteration,
    and has no other transfer; the last stage sends nothing."""
    c = _cost(ServingPlan(pp=2))
    (pt,) = c.token_transfers(0, 64.0)
    assert (pt.transfer.op, pt.transfer.message_bytes, pt.count) == ("send_recv", 64 * 4096 * 2, 1.0)
    assert c.token_transfers(1, 64.0) == []


def test_trtllm_bench_divides_the_requests_by_the_pipeline_stages():
    """Llama-3 70B FP8 on 8 H100 at tp 4 × pp 2, 2,048 / 2,048 (tuning.py by hand): the engine's memory is still
    8 GPUs', (687.2e9 − 70.55e9)·0.9 = 554.98e9 bytes over 2·80·max(4, 8)·128 = 163,840 B per token · 4,096 =
    827.0 requests; divided by pp 2 → 413.5 → batch 128·⌈413.5/128⌉ = 512, tokens 413.5·2 = 827 → 2,048."""
    scn = _scn(ServingPlan(tp=4, pp=2, weight_precision="fp8", kv_precision="fp8", framework="TensorRT-LLM 1.0"),
               mdl="llama3-70b")
    assert trtllm_bench_limits(scn, 2048, 2048, 0.9, 2048, True) == (512, 2048)


def test_a_sliding_window_caps_the_prompt_pairs_at_the_window():
    """A 1,000-token prompt chunk after 3,000 cached tokens: 1,000·(3,000 + 500) = 3.5e6 causal pairs in a full
    layer, but at most 1,000·128 in a layer with a 128-token window; its FLOPs are 2·(heads)·(d_qk + d_v)·pairs."""
    from narrowpath.spec.parse import model_from_dict
    swa = model_from_dict(dict(name="swa", layers=4, hidden=2048, heads=16, kv_heads=4, ffn=8192, vocab=32000,
                               ffn_act="swiglu", seq_len=8192, sliding_window=128, sliding_window_every=2))
    scn = ServingScenario(system=system("dgx-h100"), model=swa, plan=ServingPlan(), load=LOAD, num_gpus=1)
    cost = ServingCost(resolve_limits(resolve_formats(scn, ()))[0], 2048)
    ops = cost.attention_ops(0, 0, 0, 1000, 3.5e6, 4000)
    flops = sorted(op.flop for op, _ in ops)
    per_pair = 2 * 16 * (128 + 128)
    assert flops == [per_pair * 1000 * 128, per_pair * 3.5e6]


def test_the_output_layer_is_priced_once_per_iteration():
    """The head of the last stage for 16 sequences: the final norm, the lm_head GEMM and sampling, each once
    (tp 1: no logits gather) — the grid-interpolated time equals their roofline at a grid point."""
    from narrowpath.cost.roofline import op_time_s
    from narrowpath.workload.serving import head_ops
    cost = _cost(ServingPlan())
    by_hand = sum(op_time_s(op, cost.dev, cost.cal) for op in head_ops(cost.scn.model, cost.scn.plan, 16.0))
    assert cost.head_time_s(16.0) == pytest.approx(by_hand, rel=1e-12)
