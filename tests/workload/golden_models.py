"""Models of the golden tests that the catalog does not hold as published (the catalog's DeepSeek-V3 approximates
MLA as plain attention)."""
from __future__ import annotations

from narrowpath.spec.model import MLA, MoE, Model


def deepseek_v3(mtp_layers: int = 1) -> Model:
    """DeepSeek-V3 as its technical report (§2.1, §4.2) and HF config.json describe it: 61 layers, hidden 7168,
    128 heads, MLA (q_lora 1536, kv_lora 512, qk_nope 128, qk_rope 64, v 128), first 3 layers dense (ffn 18432),
    then 256 routed experts of 2048 (top 8) and one shared expert of 2048, vocab 129280, untied, one MTP module."""
    return Model(name="deepseek-v3", layers=61, hidden=7168, heads=128, head_dim=128, ffn=18432, ffn_act="swiglu",
                 norm="rmsnorm", vocab=129280, seq_len=4096, mtp_layers=mtp_layers,
                 mla=MLA(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                         q_lora_rank=1536),
                 moe=MoE(num_experts=256, top_k=8, expert_ffn=2048, shared_experts=1, first_dense_layers=3))
