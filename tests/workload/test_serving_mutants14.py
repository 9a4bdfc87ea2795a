"""Serving work items checked by hand where mutation testing (benchmarks/mutation.py, seed 14) found them loose:
the QKV preprocessing of a multi-head-latent-attention layer and the output layer's final norm."""
from __future__ import annotations

from narrowpath.catalog import model
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.serving import Formats, attention_token_ops, head_ops


def test_mla_qkv_preprocessing_moves_every_local_heads_query_and_the_latent():
    """DeepSeek-V3 (128 heads, q/k head width 128 nope + 64 rope = 192, latent 512 + 64 = 576) at tp 8, bf16:
    a_t = 128/8 = 16 heads per GPU. Per token the preprocessing kernel (rotary embedding, KV-cache write) moves
    the query of every local head and the latent once at 16 bit, a_t·192 + 576 = 3,648 values (7,296 B), plus the
    token's KV-cache entry, (512 + 64)·2 = 1,152 B: 8,448 B per token, 84,480 B at T = 10 (workload.serving
    attention_token_ops, MLA branch: T·(a_t·qk_head_dim + latent)·A + T·kv_tok)."""
    m, p = model("deepseek-v3"), ServingPlan(tp=8)
    by = {op.name: op for op in attention_token_ops(m, p, Formats.of(p, True, m), 10.0)}
    assert by["qkv_preprocess"].hbm_bytes == 10 * ((16 * 192 + 576) * 2 + 576 * 2) == 84_480
    # twice the tokens, twice the bytes; at tp 1 the 128 heads' queries: 10·((128·192 + 576)·2 + 1152)
    assert attention_token_ops(m, p, Formats.of(p, True, m), 20.0)[-2].hbm_bytes == 2 * 84_480
    p1 = ServingPlan(tp=1)
    by1 = {op.name: op for op in attention_token_ops(m, p1, Formats.of(p1, True, m), 10.0)}
    assert by1["qkv_preprocess"].hbm_bytes == 10 * ((128 * 192 + 576) * 2 + 1152) == 514_560


def test_the_final_norm_reads_and_writes_every_rows_hidden_state():
    """Llama-3 8B (h 4,096): the output layer's RMSNorm over 4 rows reads and writes 4·4096 16-bit values,
    2·4·4096·2 = 65,536 B; 8 rows twice that, one row a quarter (the bytes are linear in the rows)."""
    m, p = model("llama3-8b"), ServingPlan()
    norm4 = head_ops(m, p, 4.0)[0]
    assert norm4.name == "final_norm" and norm4.hbm_bytes == 65_536
    assert head_ops(m, p, 8.0)[0].hbm_bytes == 131_072
    assert head_ops(m, p, 1.0)[0].hbm_bytes == 16_384
