"""Workload values the seed-21 mutation sample (benchmarks/mutation.py) found unguarded: the LSTM's backward
per-step kernels issued inside cuDNN, MLA's input norm read by a plain query projection (no query LoRA), an MoE
layer's tensor-parallel experts under `moe` recompute, and the intra-node leg of a deduplicating serving dispatch
over two GPUs a domain — each pinned by a hand calculation."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario, model, system
from narrowpath.cost.memory import layer_activation_bytes
from narrowpath.spec import Plan, Scenario
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.build import build_workload
from narrowpath.workload.recompute import tp_block_recomputed
from narrowpath.workload.serving import ACT_BYTES, Formats
from narrowpath.workload.serving_comm import layer_transfers


def test_the_lstm_backward_time_loop_issues_no_host_kernels_either():
    """cuDNN runs the whole time loop, backward as well as forward, inside one library call: none of the per-step
    ops (gate GEMM's dgrad and wgrad, the cell's backward; 2,048 executions each on GNMT's 8 layers × 256 steps)
    is launched by the framework, so each issues 0 host kernels. Only the output layer and the loss (executed
    once) issue their own."""
    plan = Plan(tp=2, dp=4, mbs=64, gbs=256, precision="fp16")
    wl = build_workload(Scenario(system=system("dgx-a100"), model=model("gnmt-lstm"), plan=plan, num_gpus=8),
                        "flash")
    per_step = [(op, c) for op, c in wl.stages[0].ops if op.name.startswith("lstm_")]
    bwd = {op.name: op for op, c in per_step if op.phase == "bwd"}
    assert sorted(bwd) == ["lstm_cell", "lstm_gates.dgrad", "lstm_gates.wgrad"]
    assert all(c == 2048 for _, c in per_step)
    assert [op.host_kernels for op in bwd.values()] == [0, 0, 0]


def test_layernorm_recompute_drops_the_plain_query_projections_input_too():
    """DeepSeek-V3's layer with the query LoRA removed (q_lora_rank 0: DeepSeek-V2-Lite's plain q_proj): MLA's
    separate input norm is then read by q_proj and kv_down, each keeping the FP8 copy of the normed input,
    7,168 B a token (hidden 7,168, tp 1). `layernorm` recompute drops both: 2 · 7,168 B a token of the 4,096
    tokens of a micro-batch (a dense layer, so no router or shared expert input)."""
    s = load_scenario("deepseek-v3-h800-2048")
    m = dataclasses.replace(s.model, mla=dataclasses.replace(s.model.mla, q_lora_rank=0))

    def kept(mods):
        plan = dataclasses.replace(s.plan, activation_cache="default", recompute="selective" if mods else "none",
                                   recompute_modules=mods)
        return layer_activation_bytes(dataclasses.replace(s, model=m, plan=plan), "flash", moe_layer=False)

    assert (s.model.hidden, s.plan.tp, s.plan.mbs * s.model.seq_len) == (7168, 1, 4096)
    assert kept(()) - kept(("layernorm",)) == pytest.approx(4096 * (7168 + 7168))


def test_moe_recompute_reruns_the_dispatch_not_a_tp_block_of_a_layer_without_shared_ones():
    """Mixtral 8x7B has no shared experts; at tp 2 (etp 0: the experts split tp-wise too, expert_tp 2) the `moe`
    module re-runs the routed experts, which take their tokens from the dispatcher — its all-to-all and its gather
    of the copies over the expert-tp ranks run again (recomputes_dispatch) — and no tp gather / scatter pair of the
    layer's input surrounds them (Megatron-Core MoEAlltoAllTokenDispatcher); with a shared expert (DeepSeek-V3)
    the `moe` module re-runs that tp-sharded block with its pair."""
    from narrowpath.workload.recompute import recomputes_dispatch
    m = model("mixtral-8x7b")
    assert not m.moe.shared_experts
    moe = Plan(tp=2, recompute="selective", recompute_modules=("moe",))
    assert moe.expert_tp == 2 and recomputes_dispatch(moe)
    assert not tp_block_recomputed(m, moe, True)
    assert not tp_block_recomputed(m, dataclasses.replace(moe, recompute_modules=("core_attn",)), True)
    assert tp_block_recomputed(model("deepseek-v3"), moe, True)


def test_a_dedup_dispatch_over_two_gpus_a_domain_fans_out_inside_it():
    """Mixtral 8x7B served at ep 4 (dp 4, tp 1) on 2 domains × 2 GPUs, deduplicating dispatch, T = 100 tokens:
    after the once-per-node inter-domain leg each token goes inside the domains to every rank holding one of its 2
    experts once — 4·(1 − C(6, 2)/C(8, 2)) = 4·13/28 = 1.857 ranks of 2 experts each, not its 2 copies — an
    all-to-all of T · 13/7 · hidden · bytes = 100 · 13/7 · 4,096 · 2 = 1,521,371 B for the dispatch (bf16 weights:
    2 B) and the same for the combine (16-bit activations)."""
    m = model("mixtral-8x7b")
    p = ServingPlan(dp=4, ep=4, ep_dispatch="dedup")
    f = Formats.of(p, True, m)
    out = layer_transfers(m, p, f, 100.0, True, ep_domains=2, ep_per_domain=2)
    intra = {tr.name: tr.message_bytes for tr, _ in out if tr.name.endswith("_intranode")}
    assert (m.moe.top_k, m.hidden, f.W, ACT_BYTES) == (2, 4096, 2, 2)
    assert intra == pytest.approx({"ep.dispatch_intranode": 100 * 13 / 7 * 4096 * 2,
                                   "ep.combine_intranode": 100 * 13 / 7 * 4096 * 2}, rel=1e-12)
