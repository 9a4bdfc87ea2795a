"""Number formats of a training step: what each tensor is stored and moved in, and what quantizing costs.

Transformer Engine's low-precision recipes (TE docs, 'Using FP8 and FP4 with Transformer Engine', 2025; Megatron
Core 'Low-Precision Training Guide') run the linear layers' GEMMs in FP8 (per-tensor scaling), MXFP8 (E4M3
values, one E8M0 scale per 32 elements) or NVFP4 (E2M1 values, one E4M3 scale per 16 elements plus a per-tensor
FP32 scale); activations between layers, the attention core, the router, the embedding and the output layer stay
BF16, and master weights and optimizer state stay FP32. Each GEMM operand is quantized first — the layer's input
in forward, the output gradient in backward, the weights once per step — into the row-wise copy the forward GEMM
reads and the column-wise (transposed) copy the weight-gradient GEMM reads; TE keeps the quantized input for
backward instead of the BF16 one.
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.spec.plan import Plan

BLOCK_SCALE_BYTES = {"mxfp8": 1 / 32, "nvfp4": 1 / 16}
"""Scale bytes per element: MXFP8 one E8M0 byte per 32 values, NVFP4 one E4M3 byte per 16 (OCP Microscaling
Formats spec v1.0, 2023; NVIDIA Blackwell architecture brief)."""
VALUE_BYTES = {"fp8": 1.0, "mxfp8": 1.0, "nvfp4": 0.5}


def act_bytes(plan: Plan) -> int:
    """Bytes per activation element between layers: BF16/FP16 (also under FP8/FP4 recipes), 4 for fp32 runs."""
    return 4 if plan.precision == "fp32" else 2


def operand_bytes(plan: Plan) -> float:
    """Bytes per element of a linear layer's GEMM operands as the tensor cores read them: the quantized value plus
    its block scale for the low-precision recipes, the activation width otherwise."""
    fmt = plan.precision
    if fmt in VALUE_BYTES:
        return VALUE_BYTES[fmt] + BLOCK_SCALE_BYTES.get(fmt, 0.0)
    return float(act_bytes(plan))


def gather_bytes(plan: Plan) -> float:
    """Bytes per element a tensor-parallel all-gather moves when it feeds a linear layer's GEMM: a sequence-parallel
    input in forward, the same input again for the weight gradient, and the output gradient of a row-parallel layer
    in backward. Low-precision recipes quantize the local shard first and gather the quantized values (with their
    block scales), so the gather moves the GEMM operand format; 16-bit runs gather 16-bit values. Reduce-scatters
    stay 16-bit: they sum partial outputs.

    Sources: Transformer Engine's LayerNormLinear writes the norm's output as FP8 and all-gathers that buffer
    (`gather_along_first_dim(ln_out)` with `ln_out` uint8 under fp8), re-gathers the saved FP8 copy in backward, and
    casts the output gradient before gathering it (`grad_output_preprocess`: "FP8 case with gather: unfused bgrad,
    cast, transpose for efficient gather"); TE 2.x routes `gather_along_first_dim` by format (per-tensor FP8: data
    only; MXFP8 and NVFP4: data and scales). torchao's Float8ColwiseParallel / Float8RowwiseParallel (torchtitan)
    cast to float8 before the forward gather of the input and the backward gather of the output gradient."""
    return operand_bytes(plan)


FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128
"""Bytes per element of a token dispatched in FP8 (plan.ep_dispatch_format `fp8`): the E4M3 value and one FP32 scale
per 1×128 tile (DeepSeek-V3 §3.3.1's fine-grained activation scaling; DeepEP's `dispatch` takes the FP8 tensor and
its [tokens, hidden/128] float scales)."""


def dispatch_bytes(plan: Plan) -> float:
    """Bytes per element of the MoE dispatch (and of the combine's backward, which also feeds an expert GEMM): FP8
    with its scales under DeepSeek-V3's low-precision communication, else the activation width. The combine (and
    the dispatch's backward) stays 16 bit."""
    return FP8_DISPATCH_BYTES if plan.ep_dispatch_format == "fp8" else float(act_bytes(plan))


CACHE_BYTES = {"attention_output": 1.5, "swiglu_input": 1.0}
"""Bytes per element of what DeepSeek-V3's low-precision storage (plan.activation_cache `fp8`; DeepSeek-AI 2024,
§3.3.2) keeps for backward: the input of the linear layer after attention in its custom E5M6 format (12 bits), the
routed experts' SwiGLU input in FP8 (E4M3, 1 byte; the fine-grained scales, one per 128 values, are left out)."""


def cached_bytes(plan: Plan, tensor: str) -> float | None:
    """Bytes per element a layer keeps of `tensor` under the plan's activation cache; None = as the op keeps it."""
    return CACHE_BYTES[tensor] if plan.activation_cache == "fp8" else None


def quantized_weight_copies(fmt: str, fp8_any_layout: bool) -> int:
    """Quantized copies of each weight Transformer Engine caches between optimizer steps: row-wise for the forward
    GEMM and column-wise for the data-gradient GEMM, or one per-tensor FP8 copy where FP8 GEMMs take any layout."""
    return 1 if fmt == "fp8" and fp8_any_layout else 2


def matrix_dtype(plan: Plan) -> str:
    """Format of the linear layers' GEMMs (the plan's precision)."""
    return plan.precision


def core_dtype(plan: Plan) -> str:
    """Format of the GEMM-like work that stays in 16 bit under a low-precision recipe: the attention core, the
    router, the output layer."""
    return "bf16" if plan.low_precision else plan.precision


@dataclass(frozen=True, slots=True)
class QuantizeCost:
    """HBM traffic of quantizing one BF16 element into a recipe's row-wise and column-wise copies."""

    standalone_bytes: float
    """A quantize kernel of its own: read BF16 (twice for per-tensor current scaling: an amax pass first), write
    both copies and their scales."""
    fused_bytes: float
    """Fused into the kernel that produces the tensor (a norm): what that kernel moves beyond writing its BF16
    output, which the fused form no longer writes."""
    kernels: int
    """Kernel launches of the standalone form (per-tensor current scaling: zero the amax, amax, scale, cast)."""
    per_split: bool = True
    """A grouped GEMM's operands are quantized split by split (one launch set per expert) rather than by one grouped
    kernel (workload.ops.grouped_quantize_kernels)."""
    transpose_bytes: float = 0.0
    """Of those bytes, the column-wise copy of a per-tensor-scaled format: the same values transposed, which a
    device whose FP8 GEMMs take any layout does not need (Device.fp8_any_layout). A block-scaled format's
    column-wise copy has its own scales along the other axis and is needed everywhere."""


def quantize_cost(fmt: str) -> QuantizeCost | None:
    """Per-element cost of quantizing for `fmt`; None for formats the GEMMs read directly (bf16, fp16, fp32).

    fp8 is per-tensor *current* scaling, the recipe Megatron-Bridge and NeMo 2 ship: its scale needs the tensor's
    amax before the cast, so it reads the input twice and cannot fuse into the norm (TE Float8CurrentScaling).
    MXFP8 and NVFP4 compute their block scales inside the cast, which TE fuses into LayerNorm/RMSNorm; NVFP4 also
    needs a per-tensor amax for its second-level scale and applies a 16×16 random Hadamard transform to the
    weight-gradient operands inside the cast (Pretraining LLMs with NVFP4, NVIDIA 2025, §4)."""
    if fmt not in VALUE_BYTES:
        return None
    copies = 2 * (VALUE_BYTES[fmt] + BLOCK_SCALE_BYTES.get(fmt, 0.0))  # row-wise + column-wise
    bf16 = 2.0
    if fmt == "fp8":  # four launches: the amax buffer zeroed, the amax, the scale from it, the cast (TE 2.8
        # Float8CurrentScalingQuantizer::quantize, quantizer.cpp; current_scaling.cu launch_amax_kernel's
        # cudaMemsetAsync, compute_scale_from_amax_kernel)
        return QuantizeCost(standalone_bytes=2 * bf16 + copies, fused_bytes=2 * bf16 + copies, kernels=4,
                            transpose_bytes=VALUE_BYTES[fmt])
    if fmt == "mxfp8":
        return QuantizeCost(standalone_bytes=bf16 + copies, fused_bytes=copies - bf16, kernels=1)
    return QuantizeCost(standalone_bytes=2 * bf16 + copies, fused_bytes=copies, kernels=2,  # nvfp4: amax pass
                        per_split=False)
