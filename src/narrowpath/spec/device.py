"""Device: one accelerator — peak rates per dtype and its memory hierarchy of Levels."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from narrowpath.errors import SpecError, shown
from narrowpath.spec._check import choice, fraction, positive_float, text_mapping
from narrowpath.spec._pickle import reduce_spec

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
LEVEL_NAMES = ("sram", "l2", "hbm", "host")
"""Memory levels the cost model reads by name (Level.name); `hbm` is required, the others optional."""
TIER_NAMES = ("scale_up", "scale_out", "front_end")
"""Network tiers of a system (spec.system.Tier.name), here because a device's energy per byte is keyed by them."""
FORMAT_DTYPE = {"mxfp8": "fp8", "nvfp4": "fp4"}
"""Tensor-core rate a block-scaled training format runs at: MXFP8 at the FP8 rate, NVFP4 at the FP4 rate (NVIDIA
Blackwell architecture technical brief, 2024; Transformer Engine docs, 'Using FP8 and FP4 with Transformer
Engine')."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Level:
    """One level of the memory hierarchy, nearest (SRAM) to farthest (host)."""

    name: str
    """Level id: `sram` (registers + shared memory, whole chip), `l2`, `hbm`, `host`."""
    capacity_bytes: float
    """Capacity of the level for the whole device, bytes."""
    bw_bytes_per_s: float
    """Peak bandwidth the compute units see from this level, bytes/s (one direction summed over the chip)."""
    latency_s: float = 0.0
    """Load-to-use latency of one access, seconds; 0 = unknown/negligible."""

    def __post_init__(self) -> None:
        positive_float(f"level[{self.name}].capacity_bytes", self.capacity_bytes)
        positive_float(f"level[{self.name}].bw_bytes_per_s", self.bw_bytes_per_s)
        positive_float(f"level[{self.name}].latency_s", self.latency_s, allow_zero=True)


UNFALLEN = {"fp8": "FP8 needs Ada, Hopper or later", "bf16": "BF16 needs Ampere or later"}
"""Formats a device must rate itself to train in: their rate never falls back to another format's (matrix_peak's
fallback prices what-ifs and weight-only serving formats, not a training run the hardware cannot do)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Device:
    """An accelerator. Peak rates are dense (no sparsity), per device."""

    name: str
    """Catalog id, e.g. `A100-SXM4-80GB`."""
    peak_matrix_flop_per_s: Mapping[str, float]
    """Dense matrix-unit (tensor core) peak FLOP/s by dtype (`fp32` means FP32 inputs without TF32)."""
    peak_vector_flop_per_s: Mapping[str, float]
    """Vector-unit (CUDA core / SIMD) peak FLOP/s by dtype, for element-wise work."""
    levels: tuple[Level, ...]
    """Memory hierarchy, nearest first; must contain an `hbm` level."""
    generation: str = ""
    """Architecture generation (`ampere`, `hopper`, `blackwell`, `blackwell-ultra`, `cdna3`, ...): groups
    validation errors and names the next generation for what-ifs; empty = unknown."""
    block_scaled_formats: bool = False
    """Tensor cores scale 16/32-element blocks in hardware (MXFP8, NVFP4): Blackwell and later. Without them
    Transformer Engine refuses the mxfp8 and nvfp4 recipes."""
    fp8_any_layout: bool = False
    """FP8 tensor cores take their operands in any layout (non-TN GEMMs): data-center Blackwell and later. Transformer
    Engine then keeps one FP8 copy of a per-tensor-scaled tensor and writes no transposed (column-wise) copy
    (`transformer_engine.pytorch.utils.is_non_tn_fp8_gemm_supported`: compute capability 10.x-11.x or >= 13; not
    Hopper, not the 12.x RTX Blackwell parts). Block-scaled formats still need both copies (their scales run along
    different axes)."""
    fused_attention: bool = True
    """The device runs fused (FlashAttention / cuDNN) attention kernels: Ampere and later. Volta has none
    (FlashAttention needs compute capability 8.0); its runs materialise the scores."""
    unsupported_formats: tuple[str, ...] = ()
    """Training formats the tensor cores do not run although the device has block-scaled units: NVFP4 (16-element
    blocks with E4M3 scales) is NVIDIA's, CDNA 4 runs the OCP MX formats only."""
    peak_exp_per_s: float = 0.0
    """Exponentials per second of the special-function units (MUFU.EX2), at the clock of the matrix peak; 0 = not
    rated (no bound). A fused attention kernel takes one per score it computes (cost.roofline)."""
    flash2_rate: Mapping[str, float] = field(default_factory=dict)
    """Rate of FlashAttention-2 (the kernel PyTorch's `scaled_dot_product_attention` runs as its flash backend)
    relative to the device's fused attention kernel (the calibration's `flash_efficiency`), by pass: `fwd` (also
    the recompute) and `bwd`. Empty = the same kernel class (A100, where FlashAttention-2 is the fused kernel the
    calibration describes). Hopper: FlashAttention-2 issues Ampere-style mma.sync without TMA or warpgroup MMA."""
    tdp_w: float = 0.0
    """Board power limit, watts; 0 = unknown."""
    idle_w: float = 0.0
    """Static (idle) power, watts; 0 = unknown."""
    energy_pj_per_flop: Mapping[str, float] = field(default_factory=dict)
    """Dynamic energy per FLOP on the matrix units by dtype, picojoules; empty = unknown."""
    energy_pj_per_byte: Mapping[str, float] = field(default_factory=dict)
    """Dynamic energy per byte moved at each level or network tier name, picojoules; empty = unknown."""
    sources: Mapping[str, str] = field(default_factory=dict)
    """Where each figure comes from, by field name."""

    __reduce__ = reduce_spec

    def __post_init__(self) -> None:
        for attr in ("peak_matrix_flop_per_s", "peak_vector_flop_per_s", "energy_pj_per_flop",
                     "energy_pj_per_byte", "flash2_rate"):
            object.__setattr__(self, attr, MappingProxyType(dict(getattr(self, attr))))
        object.__setattr__(self, "sources", text_mapping(f"device[{self.name}].sources", self.sources))
        object.__setattr__(self, "levels", tuple(self.levels))
        if not self.peak_matrix_flop_per_s:
            raise SpecError(f"device[{self.name}].peak_matrix_flop_per_s", "needs at least one dtype")
        for dt, v in {**self.peak_matrix_flop_per_s, **self.peak_vector_flop_per_s}.items():
            if dt not in DTYPES:
                raise SpecError(f"device[{self.name}].peak_flop_per_s", f"unknown dtype {dt!r}; known: {', '.join(DTYPES)}")
            positive_float(f"device[{self.name}].peak_flop_per_s.{dt}", v)
        if not self.has_level("hbm"):
            raise SpecError(f"device[{self.name}].levels", "must include an `hbm` level")
        self._check_unsupported_formats()
        for flag in ("block_scaled_formats", "fp8_any_layout", "fused_attention"):
            if not isinstance(getattr(self, flag), bool):
                raise SpecError(f"device[{self.name}].{flag}", f"must be true or false, got {getattr(self, flag)!r}")
        positive_float(f"device[{self.name}].peak_exp_per_s", self.peak_exp_per_s, allow_zero=True)
        for ph, r in self.flash2_rate.items():
            if ph not in ("fwd", "bwd"):
                raise SpecError(f"device[{self.name}].flash2_rate", f"unknown pass {ph!r}; known: fwd, bwd")
            fraction(f"device[{self.name}].flash2_rate.{ph}", r)
        positive_float(f"device[{self.name}].tdp_w", self.tdp_w, allow_zero=True)
        positive_float(f"device[{self.name}].idle_w", self.idle_w, allow_zero=True)
        self._check_energy()

    def _check_unsupported_formats(self) -> None:
        """A list of format names the device knows (a bare string is refused, as plan.recompute_modules refuses
        one: `nvfp4` was read as the formats n, v, f, p, 4 and the device then ran NVFP4)."""
        where = f"device[{self.name}].unsupported_formats"
        if isinstance(self.unsupported_formats, str) or not isinstance(self.unsupported_formats, (list, tuple)):
            raise SpecError(where, f"must list format names (e.g. [nvfp4]); got {shown(self.unsupported_formats)}")
        object.__setattr__(self, "unsupported_formats", tuple(self.unsupported_formats))
        for fmt in self.unsupported_formats:
            choice(where, fmt, DTYPES + tuple(FORMAT_DTYPE))

    def _check_energy(self) -> None:
        """Energy coefficients are finite and >= 0 under a key analysis.energy reads (a dtype or training format per
        FLOP; a memory level or network tier per byte): a negative one gave negative joules, NaN a null figure, a
        misspelt key an unpriced share."""
        for attr, known in (("energy_pj_per_flop", DTYPES + tuple(FORMAT_DTYPE)),
                            ("energy_pj_per_byte", LEVEL_NAMES + TIER_NAMES)):
            for key, value in getattr(self, attr).items():
                choice(f"device[{self.name}].{attr}", key, known)
                positive_float(f"device[{self.name}].{attr}.{key}", value, allow_zero=True)

    def flash2_share(self, phase: str) -> float:
        """FlashAttention-2's rate relative to the fused kernel in pass `phase` (`bwd` reads the backward rate, any
        other the forward one); 1 for a pass the device does not rate (flash2_rate)."""
        return self.flash2_rate.get("bwd" if phase == "bwd" else "fwd", 1.0)

    @property
    def half_format(self) -> str:
        """The 16-bit format a run on this device defaults to: bf16, or fp16 where the tensor cores take no BF16
        (Volta)."""
        return "bf16" if "bf16" in self.peak_matrix_flop_per_s else "fp16"

    def has_level(self, name: str) -> bool:
        """Whether the device gives a memory level of that name (every level but `hbm` is optional)."""
        return any(lv.name == name for lv in self.levels)

    def level(self, name: str) -> Level:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise SpecError(f"device[{self.name}].levels", f"no level named {name!r}")

    @property
    def hbm(self) -> Level:
        return self.level("hbm")

    def supports(self, fmt: str) -> str | None:
        """None when the tensor cores run `fmt` (a dtype or a training format); else why not, in words. FP8 needs
        FP8 tensor cores (Ada, Hopper and later: Transformer Engine refuses FP8 below compute capability 8.9), BF16
        needs Ampere or later (Volta's tensor cores take FP16 only)."""
        if fmt in self.unsupported_formats:
            return f"{self.name} does not run {fmt} in its tensor cores"
        if fmt in FORMAT_DTYPE:
            if not self.block_scaled_formats:
                return (f"{self.name} has no block-scaled tensor-core formats (MXFP8/NVFP4 need Blackwell, CDNA 4 or "
                        "later)")
            if FORMAT_DTYPE[fmt] not in self.peak_matrix_flop_per_s:
                return f"{self.name} lists no {FORMAT_DTYPE[fmt].upper()} tensor-core rate for {fmt}"
        elif fmt in UNFALLEN and fmt not in self.peak_matrix_flop_per_s:
            return f"{self.name} has no {fmt.upper()} tensor cores ({UNFALLEN[fmt]})"
        return None

    def matrix_peak(self, dtype: str) -> float:
        """Peak matrix FLOP/s for `dtype` (or a training format: mxfp8 → fp8, nvfp4 → fp4); fp8 falls back to the
        fp16 rate on devices without FP8 units."""
        dtype = FORMAT_DTYPE.get(dtype, dtype)
        table = self.peak_matrix_flop_per_s
        if dtype in table:
            return table[dtype]
        fallback = {"fp4": "fp8", "fp8": "fp16", "bf16": "fp16", "fp16": "bf16", "tf32": "fp32", "fp32": "tf32"}.get(dtype)
        if fallback in table:
            return table[fallback]
        raise SpecError(f"device[{self.name}].peak_matrix_flop_per_s", f"no rate for dtype {dtype!r}")

    def vector_peak(self, dtype: str) -> float:
        table = self.peak_vector_flop_per_s
        if dtype in table:
            return table[dtype]
        if "fp32" in table:
            return table["fp32"]
        return self.matrix_peak(dtype) / 8.0
