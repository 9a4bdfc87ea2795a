"""Golden memory per rank by hand: activations after Korthikanti et al. 2022 §4 component by component (extended
to GQA, SwiGLU, flash attention and FP8 saved inputs), weights, gradients, mixed-precision Adam state (ZeRO §3:
12 B/param), the largest temporaries."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model, system
from narrowpath.cost.memory import RUNTIME_RESERVE_BYTES, layer_activation_bytes, stage_memory
from narrowpath.spec import Plan, Scenario
from narrowpath.workload.build import build_workload


def _scn(mid="llama3-8b", sid="dgx-h100", **kw) -> Scenario:
    plan = Plan(**kw)
    return Scenario(system=system(sid), model=model(mid), plan=plan, num_gpus=plan.num_gpus)


def test_llama3_8b_layer_activations_bf16_and_fp8_by_hand():
    """Per token of one layer, tp 1, flash, BF16 (A = 2, h 4096, f 14336, 32 heads, 8 KV heads of 128):
    norm inputs 2 × 8,192; QKV input 8,192; flash Q 8,192 + K 2,048 + V 2,048 + O 8,192 + fp32 LSE 4·32 = 128;
    MLP input 8,192; SwiGLU inputs 2·14336·2 = 57,344; down-projection input 28,672: 139,392 B, × 8192 tokens =
    1,141,899,264 B. FP8 keeps the 1-byte quantized GEMM inputs instead (QKV 4,096; output projection, which now
    cannot share flash's O, 4,096; MLP 4,096; down 14,336): 120,960 B/token = 990,904,320 B."""
    assert layer_activation_bytes(_scn(), "flash") == 1_141_899_264
    assert layer_activation_bytes(_scn(precision="fp8"), "flash") == 990_904_320


def test_gpt_fp8_activations_are_korthikanti_with_one_byte_gemm_inputs():
    """Korthikanti §4.1 per layer, 16 bit: sbh·34 + 5·a·s²·b, where the 34 counts the QKV input 2, Q K V 6, the
    projection input 2, its dropout mask 1, the MLP input 2, GeLU input 8, fc2 input 8, its mask 1 and the two
    norms 4. With FP8 GEMMs the four GEMM inputs are kept as 1-byte copies: 1 + 1 + 1 + 4 instead of
    2 + 2 + 2 + 8, i.e. sbh·27 + 5·a·s²·b. GPT 18.4B (h 6144, 48 heads), s 2048, b 2, tp 1, unfused attention:
    2,692,743,168 B (16 bit: 2,868,903,936 B); the FP8 run on an H100 (an A100 has no FP8 tensor cores)."""
    kw = dict(mbs=2, gbs=2, attention="unfused")
    assert layer_activation_bytes(_scn("gpt-18.4b", "dgx-h100", precision="fp8", **kw), "unfused") == 2_692_743_168
    assert layer_activation_bytes(_scn("gpt-18.4b", "dgx-a100", precision="fp16", **kw), "unfused") == 2_868_903_936


def test_memory_of_one_rank_by_hand():
    """Llama-3 8B, tp 8 with SP, one stage, BF16, no ZeRO. A layer holds 4096·768 + 4096·4096/8 + 3·4096·14336/8 +
    8,192 = 27,271,168 parameters; the rank 32 layers + both tables 2·128256·4096/8 + the final norm 4,096:
    1,004,015,616. Weights 2 B, fp32 gradients 4 B, Adam 12 B per parameter. Activations per layer (see
    tests/workload/test_golden_layer_ops.py): 4 × 8,388,608 + 21,102,592 + 58,720,256 + 29,360,128 =
    142,737,408, × 32 + the embedding output 8192·4096·2/8 = 4,575,985,664 B. Temporaries: the logits,
    8192·128256/8 in 16 bit plus an fp32 copy: 788,004,864 B. Runtime reserve 2 GB."""
    scn = _scn(tp=8, sequence_parallel=True)
    (mem,) = stage_memory(scn, build_workload(scn, "flash"), "flash")
    p = 1_004_015_616
    assert mem.items == {"weights": 2 * p, "gradients": 4 * p, "optimizer_state": 12 * p,
                         "activations": 4_575_985_664, "temporaries": 788_004_864,
                         "runtime_reserve": RUNTIME_RESERVE_BYTES}
    assert mem.total_bytes == sum(mem.items.values()) and mem.fits == (mem.total_bytes <= 80e9)
    assert mem.largest_item == "optimizer_state" and mem.overflow_bytes == 0
    assert RUNTIME_RESERVE_BYTES == 2e9  # CUDA context, library workspaces, fragmentation: 2 GB


def test_zero_stages_and_fp8_weight_copies_by_hand():
    """Same rank with dp 4: ZeRO-1 shards Adam (12·P/4), ZeRO-2 also the gradients (4·P/4), ZeRO-3 also the weights
    (2·P/4) and adds two gathered layers (current + prefetched) of 16-bit weights to the temporaries:
    2 · (P/32) · 2 = 4·P/32. FP8 (ZeRO < 3) also keeps the row- and column-wise 1-byte copies of the linear layers'
    weights: + 2·(P − E), E = 2 · 128,256 · 4,096 / 8 + 4,096 = 131,338,240 embedding, output and final-norm
    parameters per rank (not Transformer Engine modules, 16-bit only)."""
    p = 1_004_015_616

    def mem(**kw):
        scn = _scn(tp=8, dp=4, gbs=4, sequence_parallel=True, **kw)
        return stage_memory(scn, build_workload(scn, "flash"), "flash")[0].items
    z1, z2, z3 = mem(zero_stage=1), mem(zero_stage=2), mem(zero_stage=3)
    assert (z1["optimizer_state"], z1["gradients"], z1["weights"]) == (12 * p / 4, 4 * p, 2 * p)
    assert (z2["optimizer_state"], z2["gradients"], z2["weights"]) == (12 * p / 4, 4 * p / 4, 2 * p)
    assert (z3["optimizer_state"], z3["gradients"], z3["weights"]) == (12 * p / 4, 4 * p / 4, 2 * p / 4)
    assert z3["temporaries"] == pytest.approx(788_004_864 + 4 * p / 32)
    e = 2 * 128_256 * 4_096 // 8 + 4_096
    assert mem(zero_stage=1, precision="fp8")["weights"] == 2 * p + 2 * (p - e)
    assert mem(zero_stage=3, precision="fp8")["weights"] == 2 * p / 4  # re-quantized per micro-batch, not cached


def test_full_recompute_keeps_layer_inputs_and_one_layer():
    """Full recompute keeps each layer's input, 8192·4096·2/8 = 8,388,608 B with SP. On pp 2 (16 layers a stage,
    8 micro-batches) the first stage holds 2 micro-batches of 16 inputs and the embedding output:
    2 · 17 · 8,388,608 = 285,212,672 B, and one layer re-materialised during its backward, 142,737,408 B of
    temporaries (the last stage's logits, 788,004,864 B, are larger). Block recompute of 4 of the 16 layers:
    12 keep everything, 4 their input: 2 · (12 · 142,737,408 + 4 · 8,388,608 + 8,388,608)."""
    def mems(**kw):
        scn = _scn(tp=8, pp=2, gbs=8, sequence_parallel=True, **kw)
        return [m.items for m in stage_memory(scn, build_workload(scn, "flash"), "flash")]
    first, last = mems(recompute="full")
    assert first["activations"] == 285_212_672 and first["temporaries"] == 142_737_408
    assert last["temporaries"] == 788_004_864
    part = mems(recompute="full", recompute_layers=4)[0]
    assert part["activations"] == pytest.approx(2 * (12 * 142_737_408 + 4 * 8_388_608 + 8_388_608))


def test_pipeline_stage_holds_its_in_flight_micro_batches():
    """1F1B on pp 4 (8 layers a stage, 8 micro-batches): stage 0 holds 4 micro-batches of 8 layers' activations
    (and the embedding output), the last stage 1 and the logits. Llama-3 8B, tp 8, SP: 4 · (8 · 142,737,408 +
    8,388,608) and 8 · 142,737,408."""
    scn = _scn(tp=8, pp=4, gbs=8, sequence_parallel=True)
    mems = stage_memory(scn, build_workload(scn, "flash"), "flash")
    assert mems[0].items["activations"] == 4 * (8 * 142_737_408 + 8_388_608)
    assert mems[3].items["activations"] == 8 * 142_737_408
    assert mems[3].items["temporaries"] == 788_004_864 and mems[1].items["temporaries"] == 0


def test_offloaded_layers_keep_their_activations_in_host_memory():
    """Offloading 4 of 8 layers per stage halves what the stage keeps on the device; one layer in each
    direction is in flight as temporaries (2 × 142,737,408)."""
    scn = _scn(tp=8, pp=4, gbs=8, sequence_parallel=True, offload_layers=4)
    mems = stage_memory(scn, build_workload(scn, "flash"), "flash")
    assert mems[3].items["activations"] == pytest.approx(0.5 * 8 * 142_737_408)
    assert mems[1].items["temporaries"] == 2 * 142_737_408


def test_lstm_activations_by_hand():
    """GNMT-style LSTM (h 1024, s 256, 8 layers), b 64, fp32 (A = 4): per layer six h-wide tensors per step
    (four gates, cell and hidden state): 64·256·1024·6·4 = 402,653,184 B; 8 layers: 3,221,225,472 B, plus the
    embedding output 64·256·1024·4 = 67,108,864 B."""
    plan = Plan(mbs=64, gbs=64, precision="fp32")
    scn = Scenario(system=system("dgx-a100"), model=model("gnmt-lstm"), plan=plan, num_gpus=1)
    (mem,) = stage_memory(scn, build_workload(scn, "flash"), "flash")
    assert mem.items["activations"] == 3_221_225_472 + 67_108_864
    assert dataclasses.replace(mem, capacity_bytes=1.0).fits is False


def test_a_stage_sizes_its_layer_temporary_by_its_own_largest_layer():
    """Under full recompute a stage re-materialises one layer at a time, so its temporary is its largest layer's
    activations. Eight layers on four stages, the first two dense with a 65,536-wide MLP (far larger than an MoE
    layer of 8 experts of 512): stage 0 holds the dense layer's size; stages 1 and 2 hold only MoE layers and size
    it by the MoE layer (not by the dense layer an earlier stage holds)."""
    from narrowpath.spec.parse import model_from_dict
    m = model_from_dict(dict(name="mixed", layers=8, hidden=1024, heads=8, kv_heads=8, ffn=512, vocab=32000,
                             seq_len=2048, experts=8, top_k=1, ffn_act="swiglu", dense_layers=2, dense_ffn=65536))
    plan = Plan(pp=4, dp=1, gbs=8, recompute="full")
    scn = Scenario(system=system("dgx-h100"), model=m, plan=plan, num_gpus=4)
    no_rc = dataclasses.replace(scn, plan=dataclasses.replace(plan, recompute="none"))
    dense, moe = (layer_activation_bytes(no_rc, "flash", moe_layer=x) for x in (False, True))
    assert dense > 4 * moe
    mems = stage_memory(scn, build_workload(scn, "flash"), "flash")
    assert mems[0].items["temporaries"] == dense
    assert mems[1].items["temporaries"] == mems[2].items["temporaries"] == moe
