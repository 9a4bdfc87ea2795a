"""Query- and key-head norms (`model.qk_norm`: Qwen3, OLMo 2, Gemma 3; Megatron-Core `qk_layernorm`).

Qwen3's attention normalises every query and every key head (RMSNorm of head width) after the QKV projection and
before the rotary embedding. The corpora's 55 Qwen3 training rows could not say so (their schema has no key for it)
and were priced as LayerNorm models with biases and learned positions; the catalog's Qwen3 entries, from the HF
configs, now carry the architecture and the rows are recognised as those models."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model as catalog_model
from narrowpath.cli.common import load_any_scenario
from narrowpath.errors import SpecError
from narrowpath.spec.hf_config import model_from_hf_config
from narrowpath.spec.plan import Plan
from narrowpath.validate.corpus import shipped_corpus_path
from narrowpath.workload.attention import attention_block_ops
from narrowpath.workload.counts import parameter_count

QWEN3_MOE_HF = {"model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 32,
                "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
                "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936, "rms_norm_eps": 1e-6,
                "tie_word_embeddings": False, "max_position_embeddings": 40960}


def _ops(m, **plan):
    p = Plan(**{"tp": 1, "pp": 1, "dp": 1, "mbs": 1, "gbs": 1, **plan})
    return {op.name: op for op in attention_block_ops(m, p, "flash")}


def test_the_qwen3_layer_normalises_its_query_and_key_heads():
    """Qwen3-30B-A3B, one sequence of 4,096 on one GPU: (32 + 4) heads × 128 × 4,096 = 18,874,368 elements; read and
    written in forward (75.5 MB in BF16), the input kept (37.7 MB), read twice and written once backward (113 MB),
    two launches each way (the query norm and the key norm)."""
    m = catalog_model("qwen3-30b-a3b")
    assert m.qk_norm and m.norm == "rmsnorm"
    op = _ops(m)["qk_norm"]
    e = (32 + 4) * 128 * 4096
    assert e == 18_874_368
    assert (op.hbm_bytes, op.saved_bytes, op.bwd_bytes) == (2 * e * 2, e * 2, 3 * e * 2)
    assert (op.kernels, op.bwd_kernels) == (2, 2)
    # tensor parallelism splits the query heads over 4 ranks; the 4 key heads too, one each
    assert _ops(m, tp=4, dp=1)["qk_norm"].saved_bytes == (8 + 1) * 128 * 4096 * 2
    assert "qk_norm" not in _ops(catalog_model("llama3-8b"))


def test_parameter_counts_match_the_published_totals():
    """Qwen3-30B-A3B: 30.5 B parameters; Qwen3-235B-A22B: 235 B (the models' HF cards) — the head norms add 256 a
    layer (two RMSNorm scales of 128)."""
    assert parameter_count(catalog_model("qwen3-30b-a3b")) / 1e9 == pytest.approx(30.5, abs=0.05)
    assert parameter_count(catalog_model("qwen3-235b-a22b")) / 1e9 == pytest.approx(235.1, abs=0.1)
    m = catalog_model("qwen3-30b-a3b")
    assert parameter_count(m) - parameter_count(dataclasses.replace(m, qk_norm=False)) == 48 * 2 * 128


def test_hf_configs_say_it_by_type_or_by_key():
    assert model_from_hf_config(QWEN3_MOE_HF, seq_len=4096).qk_norm
    llama = {**QWEN3_MOE_HF, "model_type": "llama"}
    for k in ("moe_intermediate_size", "num_experts", "num_experts_per_tok"):
        llama.pop(k)
    assert not model_from_hf_config(llama, seq_len=4096).qk_norm
    assert model_from_hf_config({**llama, "use_qk_norm": True}, seq_len=4096).qk_norm
    assert not model_from_hf_config({**QWEN3_MOE_HF, "use_qk_norm": False}, seq_len=4096).qk_norm


def test_the_corpus_qwen3_rows_are_the_catalog_models():
    path = shipped_corpus_path("training-sweeps-public.yaml")
    scn = load_any_scenario(f"{path}#mb26-04-qwen3-30b-a3b-b200-n8-gbs512-mxfp8-tp1pp1cp1ep8vp1mbs4")
    assert scn.model.qk_norm and scn.model.norm == "rmsnorm"
    note = dict(scn.chosen)["model"]
    assert note.startswith("rmsnorm, query and key heads normalised — the catalog's qwen3-30b-a3b")


def test_latent_attention_refuses_head_norms():
    with pytest.raises(SpecError, match="model.qk_norm"):
        dataclasses.replace(catalog_model("deepseek-v3"), qk_norm=True)


def test_the_head_norms_scales_count_by_norm_kind_on_every_rank():
    """The head norms add two scales of head width a layer — and two biases with LayerNorm (weight and bias, as the
    layer's own norms count) — held whole on every tensor-parallel rank: Qwen3-30B-A3B's 2 × 128 = 256 a layer;
    a LayerNorm model's 512."""
    from narrowpath.workload.attention import attention_params
    rms = catalog_model("qwen3-30b-a3b")
    ln = dataclasses.replace(rms, norm="layernorm")
    for tp in (1, 4):
        p = Plan(tp=tp, pp=1, dp=1, mbs=1, gbs=1)
        assert attention_params(rms, p) - attention_params(dataclasses.replace(rms, qk_norm=False), p) == 256
        assert attention_params(ln, p) - attention_params(dataclasses.replace(ln, qk_norm=False), p) == 512
    assert parameter_count(ln) - parameter_count(dataclasses.replace(ln, qk_norm=False)) == 48 * 512
