"""Schedule values the seed-19 mutation sample (benchmarks/mutation.py) found unguarded — the lane simulator's
on-demand KV need and prompt budget, the serving cost's spans, the split of an iteration into parts and the
defaults of its context line, and when interleaved chunks need shares — each pinned by a hand calculation or a
documented property."""
from __future__ import annotations

import dataclasses

from narrowpath.catalog import load_scenario, model, system
from narrowpath.network.placement import span_of
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_sim import LaneSpec
from narrowpath.schedule.chunks import chunk_shares
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from tests.schedule.lanes import bare_lane

LOAD = Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=32)


def _scn(plan: ServingPlan, mdl: str = "llama3-8b", sys_id: str = "dgx-h100") -> ServingScenario:
    return ServingScenario(system=system(sys_id), model=model(mdl), plan=plan, load=LOAD, num_gpus=plan.num_gpus)


def _one_second(*a, **kw):
    return 1.0


# ---- the lane simulator -----------------------------------------------------------------------------------------

def test_on_demand_admission_takes_the_prompts_blocks_and_a_decode_lane_one_token_more():
    """On-demand KV, 16-token blocks, one request of a 64-token prompt. A decode-first lane admits it with the
    blocks of its prompt, ⌈64/16⌉ = 4, and (one output token, made by the prompt's iteration) never holds more:
    peak 4 blocks. A decode-only lane (the decode side of a disaggregated deployment) receives the prompt's KV
    and writes the first token's too: ⌈(64 + 1)/16⌉ = 5 blocks from admission on."""
    lane, _ = bare_lane(LaneSpec(4, 256, 100, 16, "decode-first", "on-demand", True), _one_second, [64], [1])
    lane.run()
    assert lane.tot.kv_peak_blocks == 4
    lane, _ = bare_lane(LaneSpec(4, 256, 100, 16, "decode-only", "on-demand", True), _one_second, [64], [3])
    lane.run()
    assert lane.tot.kv_peak_blocks == 5


def test_a_one_token_budget_still_admits_a_chunked_prompt():
    """Chunked prefill, a 5-token budget, iterations of 1 s: request 0 (4-token prompt, 2 output tokens) and request
    1 (10-token prompt, 1 output token). Iteration 1 runs request 0's whole prompt (4 tokens) and, with the 1 token
    left, the first token of request 1's prompt. Iteration 2: request 0's decode (1 token) and 4 more of request
    1's prompt (5 of 10 done); request 0 finishes at 2 s. Iteration 3: the last 5 prompt tokens — request 1's
    first (and only) token at 3 s. Without the 1-token chunk in iteration 1 it would end a second later."""
    lane, a = bare_lane(LaneSpec(4, 5, 100, 16, "decode-first", "reserve", True), _one_second, [4, 10], [2, 1])
    lane.run()
    assert a["first"].tolist() == [1.0, 3.0]
    assert a["finish"].tolist() == [2.0, 3.0]


def test_an_unchunked_prompt_that_fills_the_budget_exactly_is_admitted():
    """No chunked prefill, an 8-token budget, two 4-token prompts of one output token each, iterations of 1 s:
    the first takes 4 tokens, the second exactly fills the 4 left (it fits whole), so both run in the first
    iteration and both finish at 1 s."""
    lane, a = bare_lane(LaneSpec(4, 8, 100, 16, "decode-first", "reserve", False), _one_second, [4, 4], [1, 1])
    lane.run()
    assert a["first"].tolist() == [1.0, 1.0]
    assert a["finish"].tolist() == [1.0, 1.0]


# ---- the serving cost's spans -----------------------------------------------------------------------------------

def test_the_legs_of_a_dedup_dispatch_are_spans_of_their_own_axes():
    """DeepSeek-V3 with attention DP 16 and ep 16 on two DGX H200s (8-GPU NVLink domains): the ep group is 8 ranks
    in each of 2 domains. The fabric leg of a deduplicating dispatch is the 2 ranks of one local index, one per
    domain (axis ep_inter); the NVLink leg the 8 ranks of one domain (axis ep_intra)."""
    p = ServingPlan(tp=1, dp=16, ep=16, ep_dispatch="dedup", weight_precision="fp8", kv_precision="fp8",
                    max_batch=64, max_num_tokens=512)
    c = ServingCost(_scn(p, "deepseek-v3", "dgx-h200"), 512)
    ep = c.span("ep")
    assert (ep.size, ep.ranks_per_domain, ep.domains) == (16, 8, 2)
    assert c.span("ep_inter") == span_of(2, ranks_per_domain=1, domains=2, axis="ep_inter")
    assert c.span("ep_intra") == span_of(8, ranks_per_domain=8, domains=1, axis="ep_intra")


def test_a_hand_off_inside_one_domain_is_a_two_rank_group_in_that_domain():
    """Llama-3 8B at tp 4 × pp 2 on a DGX H100 (8-GPU domain): stage 0 on GPUs 0-3, stage 1 on 4-7, one domain.
    The activations' hand-off runs on a group of 2 ranks, both in that domain: size 2, 2 ranks per domain (and
    per node), 1 domain."""
    c = ServingCost(_scn(ServingPlan(tp=4, pp=2, max_batch=64, max_num_tokens=2048)), 2048)
    hand = c.token_transfers(0, 512.0)[-1]
    assert hand.transfer.name == "pp.activations"
    assert hand.span == span_of(2, ranks_per_domain=2, domains=1, axis="pp")
    assert hand.span.ranks_per_domain <= hand.span.size


# ---- an iteration's parts and its context line ------------------------------------------------------------------

def test_an_eager_prompt_iterations_dispatch_is_its_own_part_and_not_a_launch():
    """trtllm-serve (eager prompt iterations: the framework issues each kernel, no static session's serial launch)
    with a calibration whose host dispatch is 100 µs a kernel: a 1-token prompt iteration of Llama-3 8B issues
    hundreds of kernels, tens of ms of host work, more than its GPU time (a few ms). iteration_parts switches on
    padding, launch, host and dispatch in that order: the launch part is 0 (this stack has no serial launch), the
    host part 0 (its per-request work, 29 µs, is under the GPU time) and the whole excess over the GPU is the
    dispatch part; the parts sum to iteration_s."""
    scn = _scn(ServingPlan(framework="trtllm-serve", max_batch=64, max_num_tokens=2048))
    base = ServingCost(scn, 2048)
    c = ServingCost(scn, 2048, dataclasses.replace(base.cal, host_dispatch_s=1e-4))
    assert c.launch_s is None and c.eager_prefill and c.stage_kernels[0] * 1e-4 > 0.02
    parts = c.iteration_parts(1.0, 0.0, 0.0, 1.0, 1.0, 1.0, rows=1.0)
    total = c.iteration_s(1.0, 0.0, 0.0, 1.0, 1.0, 1.0, rows=1.0)
    assert parts["launch"] == 0.0 and parts["padding"] == 0.0 and parts["host"] == 0.0
    assert parts["gpu"] < 0.02 < parts["dispatch"]
    assert abs(sum(parts.values()) - total) <= 1e-12 * total


def test_a_context_line_defaults_to_no_prompt_pairs_and_no_prompt_context():
    """context_line is documented as a function of (dec_ctx, pre_pairs=0, pre_ctx=0) equal to iteration_s with the
    same arguments, whose own defaults are pre_pairs = pre_ctx = 0. With pp = 2 (Llama-3 8B, 2 stages) and an
    iteration of 4 decodes over 100 tokens of context plus 64 prompt tokens (68 tokens), the line called with the
    decode context alone gives iteration_s called without the prompt's pairs and context, and so does the line
    called with both zeros given."""
    c = ServingCost(_scn(ServingPlan(tp=1, pp=2, max_batch=64, max_num_tokens=2048)), 2048)
    line = c.context_line(68.0, 4.0, 64.0)
    expect = c.iteration_s(68.0, 4.0, 100.0, 64.0)
    assert line(100.0) == expect == line(100.0, 0.0, 0.0)
    one = ServingCost(_scn(ServingPlan(max_batch=64, max_num_tokens=2048)), 2048)
    assert one.context_line(68.0, 4.0, 64.0)(100.0) == one.iteration_s(68.0, 4.0, 100.0, 64.0)


# ---- interleaved chunks -----------------------------------------------------------------------------------------

def test_equal_chunks_need_no_shares():
    """Llama-3 70B (80 layers) at pp 4 × vpp 5: every stage holds 5 chunks of 4 layers of one kind. With no
    embedding or head work each chunk is a fifth of its stage's forward and backward on every stage, so
    chunk_shares returns None (the closed form needs no shares). With an embedding end of 0.5 s forward beside
    layers of 0.025 s (20 layers a stage), stage 0's first chunk takes 0.1 + 0.5 of its 1.0 s forward: shares
    [0.6, 0.1, 0.1, 0.1, 0.1] there (its backward, with no embedding backward, a fifth each), a fifth elsewhere."""
    s = load_scenario(None)
    scn = dataclasses.replace(s, plan=dataclasses.replace(s.plan, tp=4, pp=4, vpp=5, cp=2, dp=8))
    assert scn.model.layers == 80
    zero = ((0.0,) * 3,) * 4
    layer = {(False, False): ((0.025, 0.05, 0.0), (0.0,) * 3, (0.0,) * 3, (0.0,) * 3)}
    exposed = [(1.0, 1.0)] * 4
    assert chunk_shares(scn, layer, (zero, zero), exposed, 0.001) is None
    emb = ((0.5, 0.0, 0.0), (0.0,) * 3, (0.0,) * 3, (0.0,) * 3)
    fwd, bwd = chunk_shares(scn, layer, (emb, zero), exposed, 0.001)
    assert [round(x, 12) for x in fwd[0]] == [0.6, 0.1, 0.1, 0.1, 0.1]
    assert all([round(x, 12) for x in w] == [0.2] * 5 for w in fwd[1:] + bwd)
