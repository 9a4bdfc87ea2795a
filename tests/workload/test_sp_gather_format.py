"""Sequence-parallel gathers in a low-precision recipe move the GEMM operand format, quantized on the local shard
(workload.precision.gather_bytes, ops.linear's gathered_in / scattered_out), by hand for Llama-3 8B (h 4096, 32
heads, 8 KV heads of 128, f 14336, s 8192, micro-batch 1).

Transformer Engine's LayerNormLinear casts the norm output to FP8 and all-gathers that buffer, re-gathers the saved
FP8 copy for the weight gradient, and casts a row-parallel layer's output gradient before gathering it; the
reduce-scatters sum 16-bit partial outputs."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model, system
from narrowpath.spec import Plan, Scenario
from narrowpath.workload.build import build_workload
from narrowpath.workload.ops import backward_ops
from narrowpath.workload.precision import gather_bytes
from narrowpath.workload.transformer import layer_forward_ops

LLAMA = model("llama3-8b")
TOKENS_H = 8192 * 4096  # b·s·h = 33,554,432 elements


@pytest.mark.parametrize("precision, expected", [("bf16", 2.0), ("fp16", 2.0), ("fp32", 4.0), ("fp8", 1.0),
                                                 ("mxfp8", 1.0 + 1 / 32), ("nvfp4", 0.5 + 1 / 16)])
def test_gather_bytes_per_element(precision, expected):
    """FP8 per-tensor: the 1-byte values only (one scale per tensor); MXFP8 one E8M0 scale byte per 32 values;
    NVFP4 half a byte per value and one E4M3 scale per 16; 16-bit and fp32 runs gather what they hold."""
    assert gather_bytes(Plan(precision=precision)) == expected


def _tp_layer_transfers(precision: str, sp: bool = True):
    plan = Plan(tp=8, sequence_parallel=sp, precision=precision)
    box = "dgx-b200" if precision in ("mxfp8", "nvfp4") else "dgx-h100"
    scn = Scenario(system=system(box), model=LLAMA, plan=plan, num_gpus=plan.num_gpus)
    wl = build_workload(scn, "flash")
    return [(tr.name, tr.phase, tr.message_bytes, c / 32) for tr, c in wl.stages[0].transfers
            if tr.axis == "tp" and not tr.name.startswith(("tp.embedding", "tp.logits", "tp.cross"))]


def test_fp8_gathers_move_one_byte_and_reduce_scatters_two():
    """Per layer, both blocks: the forward gather of the input and the backward gathers of the output gradient and
    of the saved input move 33,554,432 B (1 B each); the reduce-scatters of partial sums 67,108,864 B (bf16)."""
    assert _tp_layer_transfers("fp8") == [
        ("tp.all_gather", "fwd", TOKENS_H, 2.0), ("tp.reduce_scatter", "fwd", 2 * TOKENS_H, 2.0),
        ("tp.all_gather", "bwd", TOKENS_H, 2.0), ("tp.reduce_scatter", "bwd", 2 * TOKENS_H, 2.0),
        ("tp.wgrad_input_all_gather", "bwd", TOKENS_H, 2.0)]


def test_bf16_and_all_reduce_traffic_unchanged():
    """A bf16 run gathers 2 B per element (67,108,864 B); without sequence parallelism an FP8 run all-reduces
    16-bit partial sums (nothing is gathered into a GEMM)."""
    assert {m for _, _, m, _ in _tp_layer_transfers("bf16")} == {2 * TOKENS_H}
    assert _tp_layer_transfers("fp8", sp=False) == [("tp.all_reduce", "fwd", 2 * TOKENS_H, 2.0),
                                                    ("tp.all_reduce", "bwd", 2 * TOKENS_H, 2.0)]


def test_mxfp8_gather_carries_its_block_scales():
    """MXFP8: 33,554,432 values + 33,554,432 / 32 = 1,048,576 scale bytes = 34,603,008 B per gather."""
    gathers = {m for name, _, m, _ in _tp_layer_transfers("mxfp8") if "all_gather" in name}
    assert gathers == {34_603_008}


def _ops(precision: str, sp: bool):
    fwd = layer_forward_ops(LLAMA, Plan(tp=8, sequence_parallel=sp, precision=precision), "flash")
    plan = Plan(tp=8, sequence_parallel=sp, precision=precision)
    return {op.name: op for op in fwd}, {op.name: op for op in backward_ops(fwd, plan)}


def test_fp8_quantizes_the_local_shard_before_a_gather():
    """FP8 current scaling moves 6 B per quantized element: read bf16 twice (amax, cast), write the value and its
    transpose. A tensor gathered after quantizing is cast row-wise on the rank's 1,024 rows (5 B each) and
    transposed from the gathered 8192 rows (read + write 1 B each): 1024·4096·5 + 2·8192·4096 = 88,080,384 B for the
    QKV and MLP-up inputs and for the output gradients of the row-parallel attention and MLP-down projections
    (gathered in backward); the column-parallel QKV's output gradient is local, all 8192 rows × its 512 + 2·128 =
    768 columns with the fused transpose (8192·768·6 = 37,748,736 B)."""
    fwd, bwd = _ops("fp8", sp=True)
    gathered = 1024 * 4096 * 5 + 2 * 8192 * 4096
    assert gathered == 88_080_384
    assert fwd["qkv.quantize"].hbm_bytes == gathered
    assert fwd["mlp_up.quantize"].hbm_bytes == gathered
    assert bwd["attn_proj.grad_quantize"].hbm_bytes == gathered
    assert bwd["mlp_down.grad_quantize"].hbm_bytes == gathered
    assert bwd["attn_proj.grad_quantize"].transpose_bytes == 2 * 8192 * 4096
    assert bwd["qkv.grad_quantize"].hbm_bytes == 37_748_736
    # the attention projection's input (the core's output) and the MLP-down input (the activation) are local
    assert fwd["attn_proj.quantize"].hbm_bytes == 8192 * 512 * 6
    assert fwd["mlp_down.quantize"].hbm_bytes == 8192 * 1792 * 6


def test_on_any_layout_fp8_devices_only_the_local_cast_is_paid():
    """B200 runs FP8 GEMMs in any layout (Device.fp8_any_layout): no transpose at all, so a gathered input costs its
    local row-wise cast only (1024·4096·5 = 20,971,520 B: cost.roofline.hbm_bytes leaves the transpose bytes out)."""
    from narrowpath.catalog import device
    from narrowpath.cost.roofline import hbm_bytes
    fwd, _ = _ops("fp8", sp=True)
    assert hbm_bytes(fwd["qkv.quantize"], device("B200")) == 20_971_520
    assert hbm_bytes(fwd["qkv.quantize"], device("H100-SXM5-80GB")) == 88_080_384


def test_block_scaled_gathers_carry_their_column_copy_quantized_locally():
    """MXFP8 quantizes both copies on the local rows (fused in the norm: 2·(1 + 1/32) − 2 bytes over the bf16 output
    it no longer writes = 0.0625 B per element) and gathers them with their scales: 1024·4096·0.0625 = 262,144 B."""
    fwd = {op.name: op for op in layer_forward_ops(LLAMA, Plan(tp=8, sequence_parallel=True, precision="mxfp8"),
                                                   "flash")}
    assert fwd["qkv.quantize"].hbm_bytes == 262_144 and fwd["qkv.quantize"].transpose_bytes == 0.0


def test_tensor_parallel_experts_alone_gather_their_tokens_in_16_bit():
    """Mixtral (8 experts, no shared expert, h 4096, s 4096) on tp 4 with etp 4 under FP8: only the attention block
    enters and leaves tensor parallelism — its gathers feed the QKV GEMM (1 B: 4096·4096 = 16,777,216 B), the
    reduce-scatters 2 B; the routed experts take their tokens from the dispatcher, which gathers the copies over the
    expert-tp ranks in 16 bit before the experts quantize (Megatron-Core MoEAlltoAllTokenDispatcher): 1,024 local
    tokens × top 2 × 4 ranks × 4096 × 2 B = 67,108,864 B, and reduce-scatters the outputs back."""
    from narrowpath.spec.parse import model_from_dict
    mix = model_from_dict(dict(name="mixtral-ish", layers=4, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                               vocab=32000, seq_len=4096, experts=8, top_k=2, ffn_act="swiglu"))
    plan = Plan(tp=4, sequence_parallel=True, ep=1, etp=4, precision="fp8")
    scn = Scenario(system=system("dgx-h100"), model=mix, plan=plan, num_gpus=4)
    from narrowpath.workload.build import layer_comm
    comm = layer_comm(scn, "flash", True)
    got = [(tr.name, tr.phase, tr.message_bytes, c) for tr, c in comm if tr.axis == "tp"]
    one, two = 4096 * 4096, 2 * 4096 * 4096
    assert got == [("tp.all_gather", "fwd", one, 1.0), ("tp.reduce_scatter", "fwd", two, 1.0),
                   ("tp.all_gather", "bwd", one, 1.0), ("tp.reduce_scatter", "bwd", two, 1.0),
                   ("tp.wgrad_input_all_gather", "bwd", one, 1.0)]
    etp = [(tr.name, tr.phase, tr.message_bytes, c) for tr, c in comm if tr.axis == "etp"]
    copies = 1024 * 2 * 4 * 4096 * 2
    assert etp == [(f"ep.expert_tp_{w}", ph, copies, 1.0) for ph in ("fwd", "bwd")
                   for w in ("all_gather", "reduce_scatter")]


def test_without_sequence_parallelism_every_rank_quantizes_all_rows():
    """No gather: each of the 8 ranks holds all 8192 rows and casts them (8192·4096·6 = 201,326,592 B); the
    row-parallel outputs are all-reduced, their gradients whole on every rank (8192·4096·6 B)."""
    fwd, bwd = _ops("fp8", sp=False)
    assert fwd["qkv.quantize"].hbm_bytes == 201_326_592
    assert bwd["attn_proj.grad_quantize"].hbm_bytes == 201_326_592


def test_shared_expert_input_is_cast_before_its_gather():
    """An MoE layer's shared experts are a tp-sharded MLP entered by the same gather: DeepSeek-V3 (h 7168) at
    s 4096 on tp 8 casts its 512 local rows row-wise (512·7168·5 = 18,350,080 B) and transposes the 4096 gathered
    ones (2·4096·7168 = 58,720,256 B): 77,070,336 B, and the same for the down projection's output gradient."""
    from tests.workload.test_golden_mla_mtp import deepseek_v3
    plan = Plan(tp=8, sequence_parallel=True, ep=8, precision="fp8")
    fwd = layer_forward_ops(deepseek_v3(), plan, "flash", moe_layer=True)
    bwd = {op.name: op for op in backward_ops(fwd, plan)}
    fwd = {op.name: op for op in fwd}
    assert fwd["shared_up.quantize"].hbm_bytes == 77_070_336
    assert bwd["shared_down.grad_quantize"].hbm_bytes == 77_070_336


def test_two_shared_experts_double_the_shared_mlp_and_its_quantized_gather():
    """Two shared experts of 2,048 (DeepSeek-V3's width) on tp 8: the shared up projection is n = 2·(2·2048)/8 =
    1,024 wide; its input is still cast once on the 512 local rows and transposed once gathered (77,070,336 B)."""
    from tests.workload.test_golden_mla_mtp import deepseek_v3
    import dataclasses
    m = deepseek_v3()
    m = dataclasses.replace(m, moe=dataclasses.replace(m.moe, shared_experts=2))
    plan = Plan(tp=8, sequence_parallel=True, ep=8, precision="fp8")
    fwd = {op.name: op for op in layer_forward_ops(m, plan, "flash", moe_layer=True)}
    assert fwd["shared_up"].flop == 2 * 4096 * 7168 * 1024
    assert fwd["shared_up.quantize"].hbm_bytes == 77_070_336


def test_mla_without_a_query_latent_keeps_its_norm_before_the_gathered_projection():
    """DeepSeek-V2-Lite style MLA (no query latent): the block still opens with its input norm (on the 512 local
    rows of 7168: 2·512·7168·2 = 14,680,064 B) and the direct q_proj's input is cast on those rows."""
    from tests.workload.test_golden_mla_mtp import deepseek_v3
    import dataclasses
    from narrowpath.workload.attention import attention_block_ops
    lite = dataclasses.replace(deepseek_v3(), mla=dataclasses.replace(deepseek_v3().mla, q_lora_rank=0))
    ops = attention_block_ops(lite, Plan(tp=8, sequence_parallel=True, precision="fp8"), "flash")
    names = [op.name for op in ops]
    assert names[:3] == ["ln1", "q_proj.quantize", "q_proj"]
    assert ops[0].hbm_bytes == 14_680_064


def test_a_selectively_recomputed_moe_block_gathers_its_shared_experts_input_again():
    """DeepSeek-V3 (a shared expert) on tp 8 with selective recompute of `moe`: the recompute pass re-runs the MoE
    block, shared experts included, so their sequence-parallel input is gathered once more, in FP8 (4096·7168 B =
    29,360,128 B) and scattered back in 16 bit; the attention block is not re-run (no second pair)."""
    from tests.workload.test_golden_mla_mtp import deepseek_v3
    from narrowpath.workload.build import layer_comm
    plan = Plan(tp=8, sequence_parallel=True, ep=8, etp=1, dp=1, precision="fp8", recompute="selective",
                recompute_modules=("moe",))
    scn = Scenario(system=system("dgx-h100"), model=deepseek_v3(), plan=plan, num_gpus=8)
    again = [(tr.name, tr.message_bytes, c) for tr, c in layer_comm(scn, "flash", True)
             if tr.axis == "tp" and tr.phase == "recompute"]
    assert again == [("tp.all_gather", 4096 * 7168, 1.0), ("tp.reduce_scatter", 2 * 4096 * 7168, 1.0)]


def test_mtp_modules_exchange_as_their_layers_do():
    """Llama-3 8B with two MTP modules on tp 2 with SP and cp 2 (one stage): each module's block enters and leaves
    tensor parallelism twice like a layer, so the forward all-gathers are 2 · (32 + 2) = 68 per micro-batch; a
    selective recompute of `core_attn` re-runs the flash core of every layer and module, so the context-parallel
    ring exchanges their keys and values again in the recompute pass, as often as in the forward (34)."""
    import dataclasses
    from narrowpath.schedule.step import predict
    m = dataclasses.replace(LLAMA, mtp_layers=2)
    plan = Plan(tp=2, cp=2, sequence_parallel=True, recompute="selective", recompute_modules=("core_attn",),
                gbs=1)
    pred = predict(Scenario(system=system("dgx-h100"), model=m, plan=plan, num_gpus=4))
    ag = [t for t in pred.transfers if t.name == "tp.all_gather" and t.phase == "fwd"]
    assert len(ag) == 1 and ag[0].count == 68
    again = [(t.name, t.count) for t in pred.transfers if t.axis == "cp" and t.phase == "recompute"]
    assert again == [(t.name, t.count) for t in pred.transfers if t.axis == "cp" and t.phase == "fwd"]
    assert again == [("cp.kv_all_gather", 34.0)]
