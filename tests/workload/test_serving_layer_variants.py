"""Serving layer ops of the less common layer shapes, by hand: MLA without a query low-rank (DeepSeek-V2-Lite),
GPT-J's parallel attention and MLP, the attention core's arithmetic under an FP8 KV cache; and every training
transfer names its group."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model, system
from narrowpath.spec import Plan, Scenario
from narrowpath.spec.parse import model_from_dict
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.build import build_workload
from narrowpath.workload.serving import Formats, core_dtype, decode_attention_op, layer_token_ops

V2_LITE = dict(name="deepseek-v2-lite", layers=27, hidden=2048, heads=16, kv_heads=16, ffn=10944, vocab=102400,
               ffn_act="swiglu", attention="mla", q_lora_rank=0, kv_lora_rank=512, qk_nope_head_dim=128,
               qk_rope_head_dim=64, v_head_dim=128, seq_len=4096)
GPTJ = dict(name="gpt-j-6b", layers=28, hidden=4096, heads=16, kv_heads=16, ffn=16384, vocab=50400, ffn_act="gelu",
            parallel_attn_mlp=True, seq_len=2048)


def _ops(m, plan, T):
    return {op.name: op for op in layer_token_ops(m, plan, Formats.of(plan, True, m), T, False)}


def test_mla_without_query_low_rank_projects_queries_directly():
    """DeepSeek-V2-Lite: no q_lora, so one q_proj [T × 2048]·[2048 × 16·(128+64)] = 2·T·2048·3072 FLOPs (tp 1),
    half the heads per GPU at tp 2; kv_down [2048 × (512+64)] as with a query low-rank."""
    m = model_from_dict(V2_LITE)
    T = 10.0
    ops = _ops(m, ServingPlan(), T)
    assert "q_down" not in ops and "q_up" not in ops
    assert ops["q_proj"].flop == 2 * T * 2048 * 16 * 192
    assert ops["kv_down"].flop == 2 * T * 2048 * 576
    assert _ops(m, ServingPlan(tp=2), T)["q_proj"].flop == 2 * T * 2048 * 8 * 192


def test_gptj_parallel_block_has_one_norm_and_both_halves():
    """GPT-J: attention and MLP read one LayerNorm and add one residual: a single add_norm moving 5·T·h·2 bytes
    (reads x, attn, mlp; writes the sum and the next norm), then the gelu MLP up [h × ffn] and down [ffn × h]."""
    m = model_from_dict(GPTJ)
    T = 4.0
    ops = layer_token_ops(m, ServingPlan(), Formats.of(ServingPlan(), True, m), T, False)
    norms = [op for op in ops if op.name == "add_norm"]
    assert len(norms) == 1 and norms[0].hbm_bytes == 5 * T * 4096 * 2
    by = {op.name: op for op in ops}
    assert by["mlp_up"].flop == by["mlp_down"].flop == 2 * T * 4096 * 16384
    assert by["qkv"].flop == 2 * T * 4096 * 3 * 4096 and by["o_proj"].flop == 2 * T * 4096 * 4096


@pytest.mark.parametrize("kv, fp8_device, want", [("fp8", True, "fp8"), ("fp4", True, "fp8"), ("fp8", False, "bf16"),
                                                  ("bf16", True, "bf16")])
def test_attention_core_runs_fp8_only_with_a_quantized_cache_on_fp8_hardware(kv, fp8_device, want):
    """TensorRT-LLM's FP8 context FMHA / XQA: FP8 arithmetic when the KV cache is FP8 (or FP4) and the tensor cores
    have FP8; the decode attention op carries that rate."""
    plan = ServingPlan(kv_precision=kv)
    assert core_dtype(plan, fp8_device) == want
    m = model("llama3-8b")
    op = decode_attention_op(m, plan, Formats.of(plan, fp8_device, m), 4, 4000, 1.0, 1.0)
    assert op.dtype == want


@pytest.mark.parametrize("mdl, plan", [("gnmt-lstm", Plan(tp=2, dp=4, mbs=64, gbs=256, precision="fp16")),
                                       ("llama3-8b", Plan(tp=2, dp=2, pp=2, mbs=1, gbs=8, sequence_parallel=True))])
def test_every_transfer_names_its_group(mdl, plan):
    """Transfers are reported and merged by name: each is `<group>.<what>`, the group its axis (ep legs under
    `ep`)."""
    wl = build_workload(Scenario(system=system("dgx-a100"), model=model(mdl), plan=plan, num_gpus=8), "flash")
    items = [tr for st in wl.stages for tr, _ in st.transfers] + [tr for tr, _ in wl.step_transfers]
    assert items
    for tr in items:
        assert isinstance(tr.name, str) and tr.name.split(".")[0] == tr.axis.split("_")[0], tr
