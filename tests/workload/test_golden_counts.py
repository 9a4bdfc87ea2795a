"""Golden parameter and model-FLOP counts, each against a published figure or a hand calculation written out here
(never a value computed with the function under test)."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model
from narrowpath.spec.model import Model
from narrowpath.workload.counts import (active_parameter_count, attention_parameters, model_flop_per_token,
                                        parameter_count)
from tests.workload.golden_models import deepseek_v3


def test_mla_attention_parameters_of_one_deepseek_v3_layer_by_hand():
    """MLA matrices of one layer (DeepSeek-V3 §2.1.1), h = 7168, 128 heads:
    W_DQ 7168·1536 = 11,010,048;  W_UQ+W_QR 1536·128·(128+64) = 37,748,736;
    W_DKV+W_KR 7168·(512+64) = 4,128,768;  W_UK+W_UV 512·128·(128+128) = 16,777,216;
    W_O 128·128·7168 = 117,440,512;  total 187,105,280."""
    assert attention_parameters(deepseek_v3()) == 187_105_280


def test_deepseek_v3_has_671b_parameters_with_mtp_excluded_and_37b_active():
    """DeepSeek-V3 report: 671 B total, 37 B activated per token; the 14 B of the MTP module are not in the 671 B.
    By hand: per layer attention 187,105,280 + norms (2·7168 + 1536 + 512) 16,384;
    dense MLP 3·7168·18432 = 396,361,728 (3 layers: 3 × 583,483,392 = 1,750,450,176);
    MoE MLP 256·3·7168·2048 + 3·7168·2048 (shared) + 7168·256 (router) = 11,320,164,352
    (58 layers: 58 × 11,507,286,016 = 667,422,588,928); embedding + output 2·129280·7168 = 1,853,358,080;
    final norm 7168.  Total 671,026,404,352.  Active: minus 58 layers × 248 idle experts × 44,040,192
    = 633,474,121,728 → 37,552,282,624."""
    m = deepseek_v3()
    assert parameter_count(m) == 671_026_404_352
    assert parameter_count(m) == pytest.approx(671e9, rel=1e-3)
    assert active_parameter_count(m) == 37_552_282_624
    assert parameter_count(dataclasses.replace(m, mtp_layers=0)) == parameter_count(m)  # MTP excluded


def test_llama3_8b_parameter_count_is_the_published_8_03b():
    """Llama-3 8B (HF meta-llama/Meta-Llama-3-8B: 8,030,261,248 parameters). By hand: per layer attention
    4096·(4096 + 2·1024) + 4096·4096 = 41,943,040, SwiGLU MLP 3·4096·14336 = 176,160,768 (three matrices: gate,
    up, down), two RMSNorms 8,192 → 218,112,000 × 32 = 6,979,584,000; untied embedding and output
    2·128256·4096 = 1,050,673,152; final norm 4,096."""
    assert parameter_count(model("llama3-8b")) == 8_030_261_248


def test_mixtral_parameter_counts_are_the_published_46_7b_and_12_9b_active():
    """Mixtral 8x7B (Jiang et al. 2024: 47 B total, 13 B active; HF: 46,702,792,704). By hand: per layer attention
    41,943,040 + 8 experts × 3·4096·14336 = 1,409,286,144 + router 4096·8 = 32,768 + norms 8,192
    = 1,451,270,144 × 32 = 46,440,644,608; embedding + output 2·32000·4096 = 262,144,000; final norm 4,096.
    Active: minus 32 × 6 idle experts × 176,160,768 = 33,822,867,456 → 12,879,925,248."""
    m = model("mixtral-8x7b")
    assert parameter_count(m) == 46_702_792_704
    assert active_parameter_count(m) == 12_879_925_248


def test_gpt3_175b_model_flops_per_token_match_korthikanti():
    """Korthikanti et al. 2022 §6: model FLOPs per token 72·l·h²·(1 + s/(6h) + V/(12·l·h)); GPT-3 175B
    (l 96, h 12288, s 2048, V 51200): 1,043,677,052,928 + 28,991,029,248 + 3,774,873,600 = 1,076,442,955,776."""
    assert model_flop_per_token(model("gpt3-175b")) == pytest.approx(1_076_442_955_776, rel=1e-12)


def test_gqa_swiglu_model_flops_per_token_by_hand():
    """Llama-3 8B at s = 8192, per layer forward per token: 2 × 41,943,040 attention matrices = 83,886,080;
    scores and weighted sum over all keys (non-causal convention) 2·32·8192·(128 + 128) = 134,217,728;
    SwiGLU MLP 2·3·4096·14336 = 352,321,536 → 570,425,344 × 32 = 18,253,611,008; output layer
    2·4096·128256 = 1,050,673,152; forward 19,304,284,160; × 3 (forward + backward) = 57,912,852,480."""
    assert model_flop_per_token(model("llama3-8b")) == 57_912_852_480


def test_moe_model_flops_per_token_by_hand():
    """Mixtral 8x7B at s = 4096, per layer forward per token: attention matrices 83,886,080; scores and weighted
    sum 2·32·4096·256 = 67,108,864; top-2 experts 2·3·4096·(2·14336) = 704,643,072; router 2·4096·8 = 65,536
    → 855,703,552 × 32 = 27,382,513,664; output 2·4096·32000 = 262,144,000; × 3 = 82,933,972,992."""
    assert model_flop_per_token(model("mixtral-8x7b")) == 82_933_972_992


def test_mla_moe_model_flops_per_token_by_hand():
    """DeepSeek-V3 at s = 4096 without MTP: attention 2·187,105,280 + 2·128·4096·(192 + 128) = 374,210,560 +
    335,544,320 = 709,754,880 per layer; dense MLP 2·396,361,728 = 792,723,456; MoE MLP
    2·3·7168·(8·2048 + 2048) + 2·7168·256 = 792,723,456 + 3,670,016 = 796,393,472.
    Forward: 61 × 709,754,880 + 3 × 792,723,456 + 58 × 796,393,472 + 2·7168·129280 (1,853,358,080)
    = 43,295,047,680 + 2,378,170,368 + 46,190,821,376 + 1,853,358,080 = 93,717,397,504; × 3 = 281,152,192,512.
    One MTP module adds a 2h → h projection 2·2·7168² = 205,520,896, one MoE layer 1,506,148,352 and the output
    layer 1,853,358,080 to the forward: + 3,565,027,328 × 3 = 10,695,081,984."""
    assert model_flop_per_token(deepseek_v3(mtp_layers=0)) == 281_152_192_512
    assert model_flop_per_token(deepseek_v3(mtp_layers=1)) == 281_152_192_512 + 10_695_081_984


def test_gpt_style_moe_parameters_with_biases_by_hand():
    """A LayerNorm/GeLU MoE model (biases, learned positions): 2 layers, h 64, 4 heads, V 100, s 32, 4 experts of
    f 128. Per layer: attention 4·64² = 16,384; biases of Q, K, V, O (4·64 = 256) and of the MLP as counts.py counts
    them, f + h = 256 + 64 = 320 (one dense MLP's, not one per expert); two LayerNorms 2·2·64 = 256; experts
    4·2·64·128 = 65,536; router 64·4 = 256 → 83,008 × 2 = 166,016; tables 2·100·64 = 12,800; positions 32·64 =
    2,048; final LayerNorm 128: 180,992."""
    from narrowpath.spec.model import MoE
    m = Model(layers=2, hidden=64, heads=4, ffn=256, vocab=100, seq_len=32,
              moe=MoE(num_experts=4, top_k=1, expert_ffn=128))
    assert parameter_count(m) == 180_992


def test_sliding_window_layers_count_only_the_keys_they_attend():
    """A window layer attends min(s, window) keys (GPT-OSS: 128 on alternate layers). Two layers, h = 1024, 8 heads
    of 128, s = 4096, window 128, f = 4096 GeLU, V = 1000: per layer matrices 2·4·1024² = 8,388,608 and MLP
    2·2·1024·4096 = 16,777,216; scores 2·8·keys·256 = 4096·keys → 524,288 (window) and 16,777,216 (full);
    output 2·1024·1000 = 2,048,000. Forward 2·25,165,824 + 524,288 + 16,777,216 + 2,048,000 = 69,681,152; × 3."""
    m = Model(layers=2, hidden=1024, heads=8, vocab=1000, seq_len=4096, sliding_window=128, sliding_window_every=2)
    assert model_flop_per_token(m) == 3 * 69_681_152
