"""Calibration: how close one device type (and its software stack) gets to its peaks.

One profile per device type serves every case (never one per case). Profiles ship in
`narrowpath/catalog/calibration.yaml` with a source for every figure; `narrowpath calibrate` fits new ones
from probes and nccl-tests logs in the same schema.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from narrowpath.errors import SpecError
from narrowpath.spec._check import choice, fraction, positive_float, size_points, text_mapping
from narrowpath.spec._pickle import reduce_spec
from narrowpath.spec.device import DTYPES, FORMAT_DTYPE, LEVEL_NAMES, TIER_NAMES, Level

SCHEMA = "narrowpath-calibration/1"
"""Schema tag of a calibration profile file (`{schema: …, profiles: [ … ]}`)."""
EFFICIENCY_KEYS = DTYPES + tuple(FORMAT_DTYPE)
"""What a profile's GEMM efficiencies may be keyed by: a device dtype or a block-scaled training format
(Calibration.matrix_eff reads the format's own entry first). Another key would never be read: the lookup would
fall back to the default silently."""
_MEASURED_LEVEL = re.compile(r"(sram|l[1-4]d?|hbm|host|dram|c\d+)", re.IGNORECASE)
"""Names a measured memory level may carry: a device's level (spec.device.LEVEL_NAMES) in any case, or what the
memory probes write (measure.memory_probe, gpu_memory_probe: an OS cache `L1d`..`L4`, `HBM`, `DRAM`, `C<n>` for a
plateau no cache is known for)."""


def check_keys(field_: str, keys, known: tuple[str, ...]) -> None:
    """Refuse a key outside `known`: a profile entry under a misspelt dtype or tier would be ignored and the
    default used in its place."""
    for key in keys:
        choice(field_, key, known)

@dataclass(frozen=True, slots=True, kw_only=True)
class TierCalibration:
    """Attained collective performance on one network tier."""

    bw_efficiency: float
    """Large-message bus bandwidth / line rate for ring-style collectives (nccl-tests busbw convention)."""
    alpha_s: float
    """Latency per algorithm step (one ring hop or tree level), seconds: software + wire + sync."""
    nvls_busbw_bytes_per_s: float = 0.0
    """Attained all-reduce busbw with in-switch reduction (NVLS/SHARP), bytes/s; 0 = not available."""
    busbw_efficiency_by_size: tuple[tuple[float, float], ...] = ()
    """Measured (message bytes, busbw / line rate) pairs, ascending in size; () = not measured (use the α-β form)."""
    measured_num_ranks: int = 0
    """Group size the tier figures were measured with; 0 = not recorded."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "busbw_efficiency_by_size",
                           size_points("calibration.tiers.busbw_efficiency_by_size", self.busbw_efficiency_by_size))
        fraction("calibration.tiers.bw_efficiency", self.bw_efficiency)
        positive_float("calibration.tiers.alpha_s", self.alpha_s, allow_zero=True)
        positive_float("calibration.tiers.nvls_busbw_bytes_per_s", self.nvls_busbw_bytes_per_s, allow_zero=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """Efficiency profile of one device type. Fractions are of the device's peak figures."""

    name: str
    """Profile id (usually the device name)."""
    device: str
    """Device the profile was measured or derived for."""
    matrix_efficiency: Mapping[str, float]
    """Attained / peak matrix FLOP/s for large GEMMs, by dtype."""
    matrix_half_flop: float = 2e9
    """GEMM size (FLOPs) at which the attained rate is half of the large-GEMM rate (size ramp)."""
    vector_bw_efficiency: float = 0.8
    """Attained / peak HBM bandwidth for streaming element-wise kernels."""
    kernel_overhead_s: float = 4e-6
    """Fixed cost per kernel (launch, ramp-up, tail), seconds."""
    host_dispatch_s: float = 0.0
    """CPU time the framework spends to issue one kernel (Python, dispatcher, launch), seconds; a pass whose kernels
    take less GPU time than this to issue runs at the host's pace. 0 = the host never binds."""
    host_sync_s: float = 0.0
    """Time the GPU idles at a host synchronisation (the host waits for a value, then issues the next kernels),
    seconds; 0 = free."""
    attention_kernel: str = "flash"
    """Attention kernel the `auto` plan setting means on this device's usual software stack."""
    flash_efficiency: float = 0.7
    """Attained rate of a flash-attention kernel relative to a large GEMM of the same dtype."""
    overlap_compute_slowdown: float = 0.1
    """Fraction by which compute slows while it shares the chip with overlapped communication."""
    tiers: Mapping[str, TierCalibration] = field(default_factory=dict)
    """Per network tier (`scale_up`, `scale_out`, `front_end`)."""
    sources: Mapping[str, str] = field(default_factory=dict)
    matrix_efficiency_by_size: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    """Measured (GEMM FLOPs, attained / peak) pairs by dtype, ascending in FLOPs; empty = use the
    `matrix_efficiency` + `matrix_half_flop` ramp."""
    memory_levels: tuple[Level, ...] = ()
    """Measured memory hierarchy, nearest first (capacity, STREAM-convention bandwidth); () = not measured."""
    fit_residuals: Mapping[str, float] = field(default_factory=dict)
    """RMS relative residual of the fit behind each entry (e.g. `matrix_half_flop.fp32`, `tiers.scale_up`)."""

    __reduce__ = reduce_spec

    def __post_init__(self) -> None:
        object.__setattr__(self, "matrix_efficiency_by_size", MappingProxyType(
            {dt: size_points(f"calibration[{self.name}].matrix_efficiency_by_size.{dt}", pts)
             for dt, pts in self.matrix_efficiency_by_size.items()}))
        object.__setattr__(self, "memory_levels", tuple(self.memory_levels))
        object.__setattr__(self, "fit_residuals", MappingProxyType(dict(self.fit_residuals)))
        object.__setattr__(self, "matrix_efficiency", MappingProxyType(dict(self.matrix_efficiency)))
        object.__setattr__(self, "tiers", MappingProxyType(dict(self.tiers)))
        object.__setattr__(self, "sources", text_mapping(f"calibration[{self.name}].sources", self.sources))
        where = f"calibration[{self.name}]"
        check_keys(f"{where}.matrix_efficiency", self.matrix_efficiency, EFFICIENCY_KEYS)
        check_keys(f"{where}.matrix_efficiency_by_size", self.matrix_efficiency_by_size, EFFICIENCY_KEYS)
        check_keys(f"{where}.tiers", self.tiers, TIER_NAMES)
        for i, lv in enumerate(self.memory_levels):
            if not isinstance(lv.name, str) or not _MEASURED_LEVEL.fullmatch(lv.name):
                raise SpecError(f"{where}.memory_levels[{i}].name", f"unknown level {lv.name!r}; known: "
                                f"{', '.join(LEVEL_NAMES)}, or a probe's L1d, L1..L4, HBM, DRAM, C<n>")
        for dt, v in self.matrix_efficiency.items():
            fraction(f"calibration[{self.name}].matrix_efficiency.{dt}", v)
        positive_float(f"calibration[{self.name}].matrix_half_flop", self.matrix_half_flop, allow_zero=True)
        fraction(f"calibration[{self.name}].vector_bw_efficiency", self.vector_bw_efficiency)
        positive_float(f"calibration[{self.name}].kernel_overhead_s", self.kernel_overhead_s, allow_zero=True)
        positive_float(f"calibration[{self.name}].host_dispatch_s", self.host_dispatch_s, allow_zero=True)
        positive_float(f"calibration[{self.name}].host_sync_s", self.host_sync_s, allow_zero=True)
        choice(f"calibration[{self.name}].attention_kernel", self.attention_kernel, ("flash", "unfused"))
        fraction(f"calibration[{self.name}].flash_efficiency", self.flash_efficiency)
        if not 0.0 <= self.overlap_compute_slowdown < 1.0:
            raise SpecError(f"calibration[{self.name}].overlap_compute_slowdown",
                            f"must be in [0, 1), got {self.overlap_compute_slowdown}")

    def matrix_eff(self, dtype: str) -> float:
        """Large-GEMM efficiency for a dtype or a training format: the format's own entry (the block-scaled
        formats' GEMMs load scale factors in their main loop), else its tensor-core dtype's (mxfp8 → fp8,
        nvfp4 → fp4), else the nearest 16-bit entry."""
        table = self.matrix_efficiency
        base = {"mxfp8": "fp8", "nvfp4": "fp4"}.get(dtype, dtype)
        for key in (dtype, base, {"fp4": "fp8", "fp8": "bf16", "bf16": "fp16", "fp16": "bf16",
                                  "tf32": "fp32"}.get(base, ""), "bf16"):
            if key in table:
                return table[key]
        return 0.7

    def tier(self, name: str) -> TierCalibration:
        if name in self.tiers:
            return self.tiers[name]
        return _DEFAULT_TIER


_DEFAULT_TIER = TierCalibration(bw_efficiency=0.8, alpha_s=5e-6)
