"""Derived sizes of the specs, by hand from the published architectures."""
from __future__ import annotations

from narrowpath.catalog import model
from narrowpath.spec import Plan
from narrowpath.spec.model import MoE, Model


def test_llama3_8b_derived_widths():
    """32 heads × 128 = 4096 query width, 8 KV heads × 128 = 1024; SwiGLU has 3 matrices, GeLU 2; RMSNorm Llama
    trains without dropout, GPT (LayerNorm, GeLU) with."""
    m = model("llama3-8b")
    assert (m.head_dim, m.q_dim, m.kv_dim, m.mlp_matrices, m.dropout) == (128, 4096, 1024, 3, False)
    g = model("gpt-1.7b")
    assert (g.head_dim, g.kv_heads, g.ffn, g.mlp_matrices, g.dropout) == (96, 24, 9216, 2, True)


def test_moe_layer_pattern_and_window_layers():
    """Llama 4 Maverick style: 1 leading dense layer, then every 2nd layer MoE → layers 2, 4, 6 of 0..6 (0-based);
    DeepSeek: first 3 dense. GPT-OSS: window on even layers."""
    m = Model(layers=7, hidden=64, heads=4, vocab=10, seq_len=16,
              moe=MoE(num_experts=4, top_k=1, expert_ffn=64, first_dense_layers=1, layer_every=2))
    assert [i for i in range(7) if m.is_moe_layer(i)] == [2, 4, 6]
    ds = model("deepseek-v3")
    assert [ds.is_moe_layer(i) for i in range(5)] == [False, False, False, True, True]
    w = Model(layers=4, hidden=64, heads=4, vocab=10, seq_len=16, sliding_window=8, sliding_window_every=2)
    assert [w.is_window_layer(i) for i in range(4)] == [True, False, True, False]


def test_plan_derived_degrees():
    """tp 2 · cp 2 · dp 8 · pp 4 = 128 GPUs; gbs 256 / (dp 8 · mbs 2) = 16 micro-batches; ep 8 with etp 1 leaves
    an expert-dp group of 2·2·8 / (1·8) = 4; etp 0 means etp = tp = 2 → 32 / 16 = 2."""
    p = Plan(tp=2, cp=2, dp=8, pp=4, ep=8, etp=1, mbs=2, gbs=256)
    assert (p.num_gpus, p.num_microbatches, p.expert_tp, p.expert_dp) == (128, 16, 1, 4)
    q = Plan(tp=2, cp=2, dp=8, pp=4, ep=8, mbs=2, gbs=256)
    assert (q.expert_tp, q.expert_dp, q.schedule) == (2, 2, "1f1b")
