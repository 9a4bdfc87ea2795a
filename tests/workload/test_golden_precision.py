"""Golden bytes of the low-precision recipes (Transformer Engine FP8 per-tensor current scaling, MXFP8, NVFP4),
from the format definitions: OCP Microscaling Formats v1.0 (MXFP8: E4M3 values, one E8M0 scale byte per 32),
NVIDIA's NVFP4 (E2M1 values, half a byte, one E4M3 scale byte per 16)."""
from __future__ import annotations

import pytest

from narrowpath.spec import Plan
from narrowpath.workload.ops import backward_ops, linear
from narrowpath.workload.precision import act_bytes, core_dtype, operand_bytes, quantize_cost


@pytest.mark.parametrize("precision, nbytes", [("fp8", 1.0), ("mxfp8", 1 + 1 / 32), ("nvfp4", 0.5 + 1 / 16),
                                               ("bf16", 2.0), ("fp16", 2.0), ("fp32", 4.0)])
def test_operand_bytes_per_element(precision, nbytes):
    """A GEMM operand element: FP8 1 B; MXFP8 1 + 1/32 = 1.03125 B; NVFP4 0.5 + 1/16 = 0.5625 B; 16-bit 2 B;
    fp32 4 B."""
    assert operand_bytes(Plan(precision=precision)) == nbytes


@pytest.mark.parametrize("precision, standalone, fused, kernels", [
    # FP8 current scaling: amax pass reads BF16 (2 B), cast reads it again (2 B) and writes row-wise and
    # column-wise FP8 copies (2 × 1 B): 6 B, and the amax forbids fusing it into the norm: 6 B there too; 4
    # launches: the amax buffer zeroed, the amax, the scale from it, the cast (TE's current-scaling quantizer)
    ("fp8", 6.0, 6.0, 4),
    # MXFP8: one pass reads BF16 (2 B) and writes two copies with their block scales 2 × (1 + 1/32) = 2.0625 B:
    # 4.0625 B; fused into the norm it writes the copies instead of its BF16 output: 2.0625 − 2 = 0.0625 B more
    ("mxfp8", 4.0625, 0.0625, 1),
    # NVFP4: amax pass (2 B) + cast (2 B) + two copies 2 × (0.5 + 1/16) = 1.125 B: 5.125 B; fused: the norm
    # computes the amax, the cast still writes both copies: 1.125 B
    ("nvfp4", 5.125, 1.125, 2),
])
def test_quantize_bytes_per_element(precision, standalone, fused, kernels):
    q = quantize_cost(precision)
    assert (q.standalone_bytes, q.fused_bytes, q.kernels) == (standalone, fused, kernels)


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_sixteen_and_thirty_two_bit_gemms_need_no_quantize(precision):
    assert quantize_cost(precision) is None
    ops = linear("l", Plan(precision=precision), 10, 20, 30)
    assert [op.name for op in ops] == ["l"] and ops[0].grad_elements == 0


def test_activations_stay_16_bit_and_the_attention_core_bf16_under_low_precision():
    """TE recipes keep BF16 activations between layers and run the attention core, router and output layer in
    BF16; fp32 runs move 4-byte activations."""
    assert act_bytes(Plan(precision="nvfp4")) == 2 and act_bytes(Plan(precision="fp32")) == 4
    assert core_dtype(Plan(precision="mxfp8")) == "bf16" and core_dtype(Plan(precision="fp16")) == "fp16"


def test_fp8_linear_layer_by_hand():
    """FP8 linear [m×k]·[k×n], m = 100, k = 200, n = 300, input quantized in its own kernel: quantize
    100·200·6 = 120,000 B in 4 launches (amax zeroed, amax, scale, cast); GEMM 2·100·200·300 = 12,000,000 FLOPs reading 1-byte operands and writing
    BF16: 20,000 + 60,000 + 60,000 = 140,000 B; keeps the quantized input (20,000 B); in backward its output
    gradient (100·300 = 30,000 elements) is quantized too: 180,000 B in 4 launches, then dgrad and wgrad."""
    plan = Plan(precision="fp8")
    quant, g = linear("l", plan, 100, 200, 300)
    assert (quant.name, quant.hbm_bytes, quant.kernels) == ("l.quantize", 120_000, 4)
    assert (g.flop, g.hbm_bytes, g.saved_bytes, g.grad_elements, g.dtype) == (12_000_000, 140_000, 20_000, 30_000,
                                                                               "fp8")
    bwd = backward_ops([quant, g], plan)
    assert [op.name for op in bwd] == ["l.grad_quantize", "l.dgrad", "l.wgrad"]  # the input quantize has none
    assert (bwd[0].hbm_bytes, bwd[0].kernels) == (180_000, 4)


def test_mxfp8_linear_fused_into_the_norm_and_grouped_split_by_split():
    """MXFP8, input quantized inside the norm (TE LayerNormLinear): 100·200·0.0625 = 1,250 B and no kernel of its
    own; operands 1.03125 B: 20,625 + 61,875 + 60,000 (BF16 out) = 142,500 B. A grouped GEMM of 4 experts with a
    standalone quantize: Transformer Engine's split_quantize casts each expert's rows on its own (cast.cpp,
    multi_tensor_quantize_impl: a fused multi-tensor kernel for FP8 delayed scaling only), 4 kernels for the same
    20,000 · 4.0625 = 81,250 B; its output-gradient quantize likewise, 30,000 · 4.0625 = 121,875 B in 4 kernels.
    Per-tensor FP8 (amax zeroed, amax, scale, cast per expert): 16 each. NVFP4's split quantize is grouped: 2 whatever the experts."""
    plan = Plan(precision="mxfp8")
    quant, g = linear("l", plan, 100, 200, 300, fused_input=True)
    assert (quant.hbm_bytes, quant.kernels) == (1_250, 0)
    assert g.hbm_bytes == 142_500
    quant4, g4 = linear("e", plan, 100, 200, 300, groups=4)
    assert (quant4.hbm_bytes, quant4.kernels) == (81_250, 4)
    grad_q = backward_ops([g4], plan)[0]
    assert (grad_q.hbm_bytes, grad_q.kernels) == (121_875, 4)
    assert linear("l", plan, 100, 200, 300)[0].kernels == 1  # one expert, one cast
    fp8 = Plan(precision="fp8")
    q8, g8 = linear("e", fp8, 100, 200, 300, groups=4)
    assert (q8.kernels, backward_ops([g8], fp8)[0].kernels) == (16, 16)
    nv = Plan(precision="nvfp4")
    q4, g4n = linear("e", nv, 100, 200, 300, groups=4)
    assert (q4.kernels, backward_ops([g4n], nv)[0].kernels) == (2, 2)


def test_nvfp4_linear_keeps_a_half_byte_input_with_its_scales():
    """NVFP4 keeps the quantized input for the weight gradient: 100·200·0.5625 = 11,250 B (saved_rows 40 of 100
    rows when the input is a sequence-parallel all-gather: 4,500 B)."""
    plan = Plan(precision="nvfp4")
    assert linear("l", plan, 100, 200, 300)[1].saved_bytes == 11_250
    assert linear("l", plan, 100, 200, 300, saved_rows=40)[1].saved_bytes == 4_500
