"""Workload values checked by hand where mutation testing (benchmarks/mutation.py, seed 16) found them loose: the
causal FLOP count of a sliding-window model with multi-token prediction, an fp32 serving checkpoint's element
size, and the bytes of a 16-bit expert-parallel dispatch."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model
from narrowpath.spec.parse import model_from_dict
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.counts import causal_model_flop_per_token, model_flop_per_token
from narrowpath.workload.serving import Formats, element_bytes
from narrowpath.workload.serving_comm import layer_transfers

_GPT_OSS_LIKE = dict(hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn=2880, ffn_act="swiglu", vocab=1000,
                     seq_len=4096, sliding_window=128, sliding_window_every=2, mtp_layers=1)


def test_causal_count_halves_an_mtp_module_after_a_full_last_layer_of_a_windowed_model():
    """Two layers windowed every other one (layer 0 windowed to 128 keys, layer 1 full over 4096) and one MTP
    module, which attends as the last layer does: in full. A full layer's scores and weighted sum cost
    2·64·4096·(64 + 64) = 67,108,864 forward FLOPs per token, × 3 (forward + backward) / 2 = 100,663,296 halved
    away under the causal count; layer 1 and the MTP module both: 201,326,592."""
    m = model_from_dict(dict(name="w2", layers=2, **_GPT_OSS_LIKE))
    assert [m.is_window_layer(i) for i in range(2)] == [True, False]
    assert model_flop_per_token(m) - causal_model_flop_per_token(m) == 2 * 100_663_296 == 201_326_592


def test_causal_count_keeps_an_mtp_module_after_a_windowed_last_layer_whole():
    """Three layers windowed every other one (0 and 2 windowed, 1 full) and one MTP module attending through the
    window as layer 2 does: only layer 1's scores are halved, 3 · 67,108,864 / 2 = 100,663,296."""
    m = model_from_dict(dict(name="w3", layers=3, **_GPT_OSS_LIKE))
    assert [m.is_window_layer(i) for i in range(3)] == [True, False, True]
    assert model_flop_per_token(m) - causal_model_flop_per_token(m) == 100_663_296


def test_an_fp32_serving_checkpoint_stores_four_bytes_per_weight():
    """plan.weight_precision accepts fp32 (spec.serving.WEIGHT_PRECISIONS): its linear layers, attention
    projections included, read 4-byte weights; the KV cache stays at its own 16-bit default (2 bytes)."""
    assert element_bytes("fp32") == 4.0
    f = Formats.of(ServingPlan(weight_precision="fp32"), True, model("llama3-8b"))
    assert (f.w_dtype, f.W, f.attn_dtype, f.attn_W, f.K) == ("fp32", 4.0, "fp32", 4.0, 2.0)


def test_a_16_bit_ep_dispatch_sends_two_bytes_per_hidden_element():
    """Mixtral 8x7B (h 4,096, top-2 of 8 experts) served with attention DP 8 and ep 8, bf16 weights (W = 2 bytes):
    one expert per rank, so a token's two distinct experts lie on ep·(1 − C(7, 2)/C(8, 2)) = 8·(1 − 21/28) = 2
    ranks. At T = 10 tokens per rank (tp 1) the dispatch all-to-all sends 10·2·4096·2 = 163,840 bytes and the
    16-bit combine the same; with fp8 weights (W = 1) the dispatch halves to 81,920 and the combine stays."""
    m = model("mixtral-8x7b")
    for precision, dispatch in (("bf16", 163_840), ("fp8", 81_920)):
        p = ServingPlan(tp=1, dp=8, ep=8, weight_precision=precision)
        f = Formats.of(p, True, m)
        out = {tr.name: (tr.op, tr.axis, tr.message_bytes, c) for tr, c in layer_transfers(m, p, f, 10.0, True)}
        assert set(out) == {"ep.dispatch", "ep.combine"}
        assert out["ep.dispatch"][:2] == ("all_to_all", "ep") and out["ep.dispatch"][3] == 1.0
        assert out["ep.dispatch"][2] == pytest.approx(dispatch, rel=1e-12)
        assert out["ep.combine"][2] == pytest.approx(163_840, rel=1e-12)
