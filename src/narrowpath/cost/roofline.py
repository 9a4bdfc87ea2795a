"""Roofline time of one Op on one device with size-dependent efficiency.

t = max(FLOP / (peak · eff(FLOP)), bytes / (BW_hbm · eff_bw)) + kernels · overhead      (Williams et al.,
'Roofline', CACM 2009, plus a per-kernel launch/tail cost). eff(F) = eff_max · F / (F + F_half): a saturating
size ramp — small GEMMs leave SMs idle (wave quantisation) and cannot amortise prologue/epilogue.
"""
from __future__ import annotations

from narrowpath.spec.calibration import Calibration
from narrowpath.spec.device import Device
from narrowpath.workload.items import Op


def matrix_efficiency(flop: float, dtype: str, cal: Calibration) -> float:
    """Attained / peak matrix rate for a GEMM of `flop` FLOPs."""
    eff_max = cal.matrix_eff(dtype)
    half = cal.matrix_half_flop
    return eff_max * flop / (flop + half) if half > 0 else eff_max


def compute_time_s(op: Op, device: Device, cal: Calibration) -> float:
    """Time the arithmetic alone needs."""
    if op.flop <= 0:
        return 0.0
    if op.kind == "vector":
        return op.flop / device.vector_peak(op.dtype)
    eff = matrix_efficiency(op.flop, op.dtype, cal)
    if op.kind == "flash":
        eff *= cal.flash_efficiency
    return op.flop / (device.matrix_peak(op.dtype) * eff)


def memory_time_s(op: Op, device: Device, cal: Calibration) -> float:
    """Time the HBM traffic alone needs."""
    return op.hbm_bytes / (device.hbm.bw_bytes_per_s * cal.vector_bw_efficiency)


def op_time_s(op: Op, device: Device, cal: Calibration) -> float:
    """Roofline time of one execution of `op` (see module docstring)."""
    return max(compute_time_s(op, device, cal), memory_time_s(op, device, cal)) + op.kernels * cal.kernel_overhead_s


def bound(op: Op, device: Device, cal: Calibration) -> str:
    """`compute` or `memory`: which roof limits the op."""
    return "compute" if compute_time_s(op, device, cal) >= memory_time_s(op, device, cal) else "memory"
