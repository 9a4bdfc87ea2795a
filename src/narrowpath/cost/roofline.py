"""Roofline time of one Op on one device with size-dependent efficiency.

t = max(FLOP / (peak · eff(FLOP)), bytes / (BW_hbm · eff_bw)) + kernels · overhead      (Williams et al.,
'Roofline', CACM 2009, plus a per-kernel launch/tail cost). eff(F) = eff_max · F / (F + F_half): a saturating
size ramp — small GEMMs leave SMs idle (wave quantisation) and cannot amortise prologue/epilogue. A GEMM with
fewer rows r than one tensor-core MMA tile (`MMA_TILE_ROWS`: a decode step's few tokens against a weight matrix)
runs as a weight stream — GEMV and split-K kernels spread the k·n weights over every SM — so its arithmetic takes
r/64 of a one-tile GEMM's: the ramp is read at the FLOPs of the 64-row GEMM of the same weights, F·64/r
(continuous at 64 rows; at one row the ramp's floor falls to 1/64 and the time is the weights over the bandwidth:
TensorRT-LLM's GEMV / weight-only kernels for m ≤ 16; cuBLAS split-K for skinny GEMMs; Pope et al. 2022 §2:
small-batch decode is the weights over the memory bandwidth). A decode step's attention core is the same stream
of its KV cache: its tiles' rows are the query heads that share one kv head's load (`Op.rows`, set by
workload.serving.decode_attention_op). A kernel that streams bytes from L2 beyond its HBM
traffic (`Op.l2_bytes`) has a second memory roof, those bytes over the L2 bandwidth (`memory_time_s`).
"""
from __future__ import annotations

import math

from narrowpath.network.paths import interpolate_log
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.device import Device
from narrowpath.workload.items import Op


def table_efficiency(flop: float, points: tuple[tuple[float, float], ...]) -> float:
    """Measured (FLOPs, efficiency) points, interpolated linearly in log FLOPs and held flat beyond the ends."""
    if flop <= points[0][0]:
        return points[0][1] * flop / points[0][0]  # below the smallest measured GEMM: latency-bound, same time
    if flop >= points[-1][0]:
        return points[-1][1]
    for (f0, e0), (f1, e1) in zip(points, points[1:]):
        if f0 <= flop <= f1:
            w = (math.log(flop) - math.log(f0)) / (math.log(f1) - math.log(f0)) if f1 > f0 else 1.0
            return e0 + w * (e1 - e0)
    return points[-1][1]


def matrix_table(dtype: str, cal: Calibration) -> tuple[tuple[float, float], ...]:
    """The profile's measured efficiency-by-size table for `dtype` (fp8 falls back to no table), or ()."""
    return cal.matrix_efficiency_by_size.get(dtype, ())


def matrix_efficiency(flop: float, dtype: str, cal: Calibration) -> float:
    """Attained / peak matrix rate for a GEMM of `flop` FLOPs: the profile's measured table when it has one for
    this dtype (`narrowpath calibrate`), else the saturating ramp eff_max · F / (F + F_half)."""
    points = matrix_table(dtype, cal)
    if points:
        return table_efficiency(flop, points)
    eff_max = cal.matrix_eff(dtype)
    half = cal.matrix_half_flop
    return eff_max * flop / (flop + half) if half > 0 else eff_max


MMA_TILE_ROWS = 64
"""Rows of one warpgroup tensor-core MMA on Hopper and Blackwell (PTX ISA: wgmma.mma_async shapes m64nNk16;
tcgen05.mma m64/m128): a GEMM with fewer rows fills less than one tile and runs as a weight stream (module
docstring)."""


FLASH_HEAD_DIM_RATES = ((64.0, 408.0 / 609.0, 417.0 / 499.0), (128.0, 1.0, 1.0), (256.0, 581.0 / 609.0, 1.0))
"""(head dim, forward rate, backward rate) of a tiled attention kernel relative to head dim 128: cuDNN's fused
attention (the kernel Transformer Engine runs) at sequence 4k on H100 SXM5, FP16, no causal mask — FlashAttention-3
(Shah et al. 2024, arXiv:2407.08608) Fig. 5 forward 408 / 609 / 581 TFLOP/s at head dim 64 / 128 / 256 and Fig. 6
backward 417 / 499 at 64 / 128. A narrower head halves each tile's depth while the softmax and the per-tile
bookkeeping stay: at 64 the forward keeps 67 %, the backward 84 %. The backward is not measured above 128 (held
at 1); outside 64–256 the ends hold. The calibration's `flash_efficiency` is the rate at head dim 128."""


FLASH_BWD_PER_FWD = 499.0 / 609.0
"""A fused attention kernel's backward rate per FLOP relative to its forward's at head width 128: cuDNN on H100 SXM5
at sequence 4k, 499 against 609 TFLOP/s (FlashAttention-3, Shah et al. 2024, Figs. 5-6: the figures of
FLASH_HEAD_DIM_RATES); measured on an H200 (benchmarks/data/h200, cuDNN, causal, sequence 2k-16k) 0.79-0.91. The
backward does more work per exponential (five GEMMs to the forward's two, dQ accumulated across key blocks)."""
FLASH_BWD_FLOP = 2.5
"""Backward FLOPs of a fused attention kernel per forward FLOP (workload.ops.backward_ops)."""


def flash_phase_rate(phase: str) -> float:
    """Rate of a fused attention kernel in pass `phase` relative to the calibration's `flash_efficiency`, which is
    fitted on whole training steps — forward and backward together: the forward runs faster and the backward
    slower by FLASH_BWD_PER_FWD, their time for one forward and its backward unchanged
    (1/f + 2.5/(ρ·f) = 3.5, so f = (1 + 2.5/ρ) / 3.5 = 1.16 forward, ρ·f = 0.95 backward). A forward-only pass — a
    prompt's prefill in serving, a recomputed forward — runs at the forward's rate. The factor scales the kernel's
    whole efficiency, its exponentials' bound (exp_time_s) too, so the pair's time is exactly the fitted one when
    both passes are bound by their tensor cores; a pair whose forward waits on its exponentials (64-wide heads, or
    FP8, on Blackwell) comes out a few per cent faster (the forward gains 1/1.16, the backward loses 1/0.95). The
    ratio is cuDNN's on H100, applied to every device and kernel (FlashAttention-2's per-pass shares multiply it)."""
    fwd = (1.0 + FLASH_BWD_FLOP / FLASH_BWD_PER_FWD) / (1.0 + FLASH_BWD_FLOP)
    return fwd * FLASH_BWD_PER_FWD if phase == "bwd" else fwd


def flash_phase_note() -> str:
    """The pass split as predict's assumptions state it."""
    return (f"; the fitted rate split between the passes: forward {flash_phase_rate('fwd'):.2f}x, backward "
            f"{flash_phase_rate('bwd'):.2f}x (cuDNN's backward at 499/609 of its forward per FLOP, FlashAttention-3)")


def flash_head_dim_rate(head_dim: float, phase: str) -> float:
    """Rate of a flash attention kernel of query-key head width `head_dim` relative to 128 (FLASH_HEAD_DIM_RATES),
    interpolated linearly in log(head_dim) and held at the ends (network.paths.interpolate_log); `phase` `bwd` reads the backward column, any other the forward. 1 for
    an op without a head width (0)."""
    if head_dim <= 0:
        return 1.0
    col = 2 if phase == "bwd" else 1
    return interpolate_log(tuple((row[0], row[col]) for row in FLASH_HEAD_DIM_RATES), head_dim)


def compute_time_s(op: Op, device: Device, cal: Calibration) -> float:
    """Time the arithmetic alone needs."""
    if op.flop <= 0:
        return 0.0
    if op.kind == "vector":
        return op.flop / device.vector_peak(op.dtype)
    size = op.flop / op.groups  # a grouped GEMM ramps like one of its groups
    if op.kind != "vector" and 0 < op.rows < MMA_TILE_ROWS:  # a weight (or a decode step's kv cache) stream
        size *= MMA_TILE_ROWS / op.rows
    eff = matrix_efficiency(size, op.dtype, cal)
    if op.kind == "flash":
        eff *= cal.flash_efficiency
        if op.head_dim > 0:  # a tiled attention kernel (training, prefill): its forward and backward rates
            eff *= flash_phase_rate(op.phase)
        if op.impl == "fa2":
            # FlashAttention-2 at its measured share of the fused kernel's rate at head width 128
            # (Device.flash2_rate); cuDNN's head-width table is not FA2's (flatter: 0.87 forward at 64), so none
            eff *= device.flash2_share(op.phase)
            width = 1.0
        else:
            width = flash_head_dim_rate(op.head_dim, op.phase)
        mma = op.flop / (device.matrix_peak(op.dtype) * eff * width)
        return max(mma, exp_time_s(op.exps, device, eff))
    return op.flop / (device.matrix_peak(op.dtype) * eff)


def exp_time_s(exps: float, device: Device, eff: float) -> float:
    """Time a fused attention kernel's exponentials need on the special-function units at the fraction `eff` of
    their peak the kernel reaches of the tensor cores' (one pipeline feeds both: FlashAttention-3 §3.2 overlaps the
    softmax of one tile with the GEMMs of the next, so the kernel runs at the slower of the two); 0 on a device that
    does not rate them. Per score the tensor cores do 2·(d_qk + d_v) FLOPs forward and the SFUs one exponential:
    at 16 exponentials per clock per SM (CUDA C++ Programming Guide, arithmetic instruction throughput) against a
    Blackwell SM's 8,192 dense BF16 FLOPs per clock the two balance at head width 128, so a 64-wide head waits on its
    exponentials and FP8 attention at 128 too; Hopper's 4,096 balance at 64; Blackwell Ultra doubles the SFU rate
    (NVIDIA, 'Making Softmax More Efficient with NVIDIA Blackwell Ultra', 2026)."""
    if exps <= 0 or device.peak_exp_per_s <= 0:
        return 0.0
    return exps / (device.peak_exp_per_s * eff)


def hbm_bytes(op: Op, device: Device) -> float:
    """Bytes one execution of `op` moves at HBM on `device`: without the transposed FP8 copy where FP8 GEMMs take
    any layout (Device.fp8_any_layout)."""
    return op.hbm_bytes - op.transpose_bytes if device.fp8_any_layout else op.hbm_bytes


def l2_bw_bytes_per_s(device: Device) -> float:
    """The device's L2 bandwidth; its HBM's where the device gives no L2 level (re-reads then priced as if no
    cache held them)."""
    return device.level("l2").bw_bytes_per_s if device.has_level("l2") else device.hbm.bw_bytes_per_s


def memory_time_s(op: Op, device: Device, cal: Calibration) -> float:
    """Time the memory traffic alone needs: the HBM bytes at HBM bandwidth, or the bytes streamed from L2
    (`Op.l2_bytes`) at L2 bandwidth where those take longer — a two-level roofline (Williams et al. 2009, 'Roofline:
    an insightful visual performance model', one roof per memory level), both at the profile's achieved share."""
    if op.l2_bytes > 0:
        t = max(hbm_bytes(op, device) / device.hbm.bw_bytes_per_s, op.l2_bytes / l2_bw_bytes_per_s(device))
        return t / cal.vector_bw_efficiency
    return hbm_bytes(op, device) / (device.hbm.bw_bytes_per_s * cal.vector_bw_efficiency)


def op_time_s(op: Op, device: Device, cal: Calibration) -> float:
    """Roofline time of one execution of `op` (see module docstring)."""
    return max(compute_time_s(op, device, cal), memory_time_s(op, device, cal)) + op.kernels * cal.kernel_overhead_s


def bound(op: Op, device: Device, cal: Calibration) -> str:
    """`compute` or `memory`: which roof limits the op."""
    return "compute" if compute_time_s(op, device, cal) >= memory_time_s(op, device, cal) else "memory"


def host_time_s(op: Op, cal: Calibration) -> float:
    """CPU time to issue one execution of `op`: its kernel launches at the profile's per-kernel dispatch cost."""
    issued = op.kernels if op.host_kernels is None else op.host_kernels
    return issued * cal.host_dispatch_s
