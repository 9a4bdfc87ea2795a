"""AnalysisOptions: the stated assumptions of the analysis that are not in the scenario (jitter, failures, …).

Every default names its source; the CLI can override the common ones.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from narrowpath.errors import SpecError
from narrowpath.spec._check import as_int, choice

LLAMA3_FAILURES_PER_GPU_HOUR = 419 / (54 * 24 * 16384)
"""Dubey et al., 'The Llama 3 Herd of Models' (2024) §3.3.4: 419 unexpected interruptions in 54 days on 16,384
H100 GPUs ≈ 1.97e-5 failures per GPU-hour (about one per 5.8 GPU-years)."""


def in_range(field: str, value: object, low: float, high: float = math.inf) -> None:
    """Raise SpecError naming `field` unless `value` is a finite number in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value)
                                                                              and low <= value <= high):
        bound = f">= {low:g}" if high == math.inf else f"from {low:g} to {high:g}"
        raise SpecError(field, f"must be a finite number {bound}, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class AnalysisOptions:
    """Knobs of the synchronisation, communication and scaling accounts."""

    jitter_cv: float = 0.02
    """Per-rank jitter of compute time between two sync points: normal, std = jitter_cv × segment time."""
    jitter_method: str = "closed_form"
    """`closed_form` (Gumbel/extreme-value approximation) or `sampled` (seeded Monte Carlo)."""
    seed: int = 0
    """Seed of the numpy Generator used for sampling."""
    num_samples: int = 2000
    """Monte-Carlo samples for `sampled` jitter."""
    slow_node_fraction: float = 0.10
    """One node runs this much slower, a fraction: 0.10 = 10 % slower compute, 1.0 = twice as slow; at most 10
    (the CLI's `--slow-node` takes percent)."""
    failures_per_gpu_hour: float = LLAMA3_FAILURES_PER_GPU_HOUR
    """Per-device interruption rate (see LLAMA3_FAILURES_PER_GPU_HOUR)."""
    restart_s: float = 600.0
    """Time to detect a failure and reschedule the job, seconds (assumed 10 min); reading the checkpoint back is
    priced on top (analysis.checkpoint)."""
    storage_bw_bytes_per_s: float | None = None
    """Aggregate checkpoint write bandwidth of the storage system, bytes/s; None = the cluster's provisioning in
    catalog facility.yaml (per GPU × GPUs). The front-end network can still cap it."""
    compression_ratio: float = 4.0
    """Gradient compression ratio for the communication budget's what-if (4 = fp32 → 8 bit)."""
    sram_usable_fraction: float = 0.75
    """Part of on-chip SRAM (registers + shared memory) a persistent kernel can give to weights
    (Diamos et al., ICML 2016: the rest holds activations, gate buffers and the kernel's own registers)."""
    sweep_factors: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    """Device counts of the scaling sweep, as multiples of the scenario's data-parallel degree."""
    what_ifs: bool = True
    """Evaluate the verdict's what-if changes (each re-runs the model)."""
    simulate: bool = True
    """Play the synchronisation budget's jitter and slow node on the step event simulator too (schedule.sim)."""

    def __post_init__(self) -> None:
        """Range checks (the CLI re-raises them under its flag names)."""
        for name, low, high in (("jitter_cv", 0.0, 1.0),  # T + cv·T·Z: beyond cv 1 many segment times go negative
                                ("slow_node_fraction", 0.0, 10.0),
                                ("failures_per_gpu_hour", 0.0, math.inf), ("restart_s", 0.0, math.inf),
                                ("compression_ratio", 1.0, math.inf),
                                ("sram_usable_fraction", 0.0, 1.0)):
            in_range(f"options.{name}", getattr(self, name), low, high)
        if self.storage_bw_bytes_per_s is not None and not (math.isfinite(self.storage_bw_bytes_per_s)
                                                            and self.storage_bw_bytes_per_s > 0):
            raise SpecError("options.storage_bw_bytes_per_s", f"must be a finite number > 0, got "
                            f"{self.storage_bw_bytes_per_s!r}")
        choice("options.jitter_method", self.jitter_method, ("closed_form", "sampled"))
        as_int(self, "seed", "options.seed", minimum=0)
        as_int(self, "num_samples", "options.num_samples")
        if not self.sweep_factors or any(not (math.isfinite(f) and f > 0) for f in self.sweep_factors):
            raise SpecError("options.sweep_factors", f"must be positive finite numbers, got {self.sweep_factors!r}")
