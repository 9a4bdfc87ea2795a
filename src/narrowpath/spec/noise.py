"""Noise and fault spec of the step simulator: what goes wrong, how often, how badly (`narrowpath simulate --noise`).

Immutable descriptions only; the grammar that builds them lives in `spec.noise_parse`, the physics in
`schedule.sim`. Every figure is SI (seconds, bytes/s); fractions are fractions, not percent.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from narrowpath.errors import SpecError
from narrowpath.spec._check import as_int, choice, positive_float, positive_int

DISTRIBUTIONS = ("normal", "lognormal", "pareto")
LINK_TIERS = ("scale_up", "scale_out")
INTERFERENCE_NAMES = ("gc", "data-loader", "checkpoint-io", "interference")
FAILURE_CLASSES = ("gpu", "node", "link", "switch", "software")

IB_RETRANSMIT_TIMEOUT_S = 4.096e-6 * 2 ** 18
"""InfiniBand transport retry timeout at NCCL_IB_TIMEOUT = 18 (4.096 µs · 2^18 ≈ 1.07 s; NCCL environment
variable docs, the default of NCCL 2.x before 2.14 raised it to 20): what one flap of a link costs the collective
that crosses it — the sender waits out one timeout before retrying on the recovered link."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Jitter:
    """Per-kernel duration noise: each compute kernel's time is multiplied by an independent factor of mean 1."""

    dist: str
    """`normal`, `lognormal` or `pareto` (shifted Pareto: heavy right tail of index `alpha`)."""
    cv: float
    """Coefficient of variation of one kernel's time (0.05 = 5 %)."""
    alpha: float = 2.5
    """Tail index of the Pareto factor (P(X > x) ~ x^-alpha); > 2 so that the variance is finite."""

    def __post_init__(self) -> None:
        choice("noise.jitter", self.dist, DISTRIBUTIONS)
        positive_float("noise.jitter.cv", self.cv)
        if self.dist == "normal" and self.cv > 0.3:
            raise SpecError("noise.jitter.cv", f"a normal factor with cv {self.cv} goes negative too often; "
                            "use lognormal or pareto above 0.3")
        if self.dist == "pareto" and (not math.isfinite(self.alpha) or self.alpha <= 2.0):
            raise SpecError("noise.jitter.alpha", f"Pareto tail index must be > 2 (finite variance), got {self.alpha}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SlowRanks:
    """Persistently slow devices (thermal throttling, a degraded part): their compute takes (1 + fraction)× as long."""

    kind: str
    """`node` (every GPU of the listed servers) or `gpu` (the listed ranks)."""
    ids: tuple[int, ...]
    """Node indices (rank // gpus_per_node) or ranks, 0-based."""
    fraction: float
    """0.2 = 20 % slower (compute time × 1.2), as analysis's one-node-slow budget."""

    def __post_init__(self) -> None:
        choice("noise.slow", self.kind, ("node", "gpu"))
        field_name = f"noise.slow-{self.kind}"
        if not self.ids:
            raise SpecError(field_name, "names no device")
        object.__setattr__(self, "ids", tuple(positive_int(field_name, i, minimum=0) for i in self.ids))
        positive_float(f"{field_name}.fraction", self.fraction)


@dataclass(frozen=True, slots=True, kw_only=True)
class SlowLink:
    """A persistently slow link: the NIC (scale_out) or NVLink port (scale_up) of one GPU runs below its rate, and
    every ring through it runs at its pace (the bandwidth term of its collectives × (1 + fraction))."""

    tier: str
    fraction: float
    rank: int = 0

    def __post_init__(self) -> None:
        choice("noise.slow-link.tier", self.tier, LINK_TIERS)
        positive_float("noise.slow-link.fraction", self.fraction)
        as_int(self, "rank", "noise.slow-link.rank", minimum=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkFlap:
    """Flapping links: in each step every link of `tier` (one per GPU: its NIC or NVLink port) flaps with
    probability `prob`, at a uniformly random moment; the next collective through it stalls `penalty_s`."""

    tier: str
    prob: float
    penalty_s: float = IB_RETRANSMIT_TIMEOUT_S

    def __post_init__(self) -> None:
        choice("noise.link-flap.tier", self.tier, LINK_TIERS)
        if not isinstance(self.prob, (int, float)) or isinstance(self.prob, bool) or not 0.0 < self.prob <= 1.0:
            raise SpecError("noise.link-flap.prob", f"must be a probability in (0, 1], got {self.prob!r}")
        positive_float("noise.link-flap.penalty_s", self.penalty_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class Interference:
    """Periodic pauses of a rank's compute stream: Python GC, a data-loader stall, a checkpoint write to local disk."""

    name: str
    """Cause label: `gc`, `data-loader`, `checkpoint-io` or `interference`."""
    period_s: float
    pause_s: float
    aligned: bool = False
    """True: every rank pauses at the same moments (e.g. Megatron --manual-gc); False: each rank at its own
    random phase, so a group of n waits for n pauses per period."""

    def __post_init__(self) -> None:
        choice("noise.interference", self.name, INTERFERENCE_NAMES)
        positive_float(f"noise.{self.name}.period_s", self.period_s)
        positive_float(f"noise.{self.name}.pause_s", self.pause_s)
        if self.pause_s >= self.period_s:
            raise SpecError(f"noise.{self.name}.pause_s", f"pause {self.pause_s} s must be shorter than the period "
                            f"{self.period_s} s")


@dataclass(frozen=True, slots=True, kw_only=True)
class Failures:
    """Interruptions of the whole job over a long horizon, and what each costs (synchronous training restarts all
    ranks from the last checkpoint)."""

    mtbf_h: tuple[tuple[str, float], ...] = ()
    """(component class, mean time between failures of ONE component, hours): gpu per GPU, node per server, link
    per scale-out NIC/cable, switch per fabric switch, software per job-GPU (bugs and hangs scale with the job)."""
    detect_s: float = 600.0
    """From the failure to the job noticing it (PyTorch's NCCL watchdog default timeout: 10 min)."""
    restart_s: float = 300.0
    """Relaunch: scheduling, process start, NCCL initialisation (before the checkpoint is read)."""
    checkpoint_interval_s: float = 0.0
    """Seconds of training between checkpoints; 0 = Daly 2006's optimum for the job's MTBF."""
    storage_bw_bytes_per_s: float = 0.0
    """Aggregate write bandwidth of the checkpoint store, shared by every writer and reader; 0 = the facility's
    provisioning per GPU × GPUs (catalog facility.yaml; the front-end network caps it either way)."""
    horizon_s: float = 86400.0
    """Wall time simulated (a day by default)."""
    maintenance_every_s: float = 0.0
    """Planned interruptions (a checkpoint, then a restart) every so often; 0 = none."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "mtbf_h", tuple(self.mtbf_h))
        seen = set()
        for cls, h in self.mtbf_h:
            choice("noise.fail", cls, FAILURE_CLASSES)
            positive_float(f"noise.fail.{cls}", h)
            if cls in seen:
                raise SpecError("noise.fail", f"class {cls!r} given twice")
            seen.add(cls)
        positive_float("noise.detect", self.detect_s, allow_zero=True)
        positive_float("noise.restart", self.restart_s, allow_zero=True)
        positive_float("noise.checkpoint-every", self.checkpoint_interval_s, allow_zero=True)
        positive_float("noise.storage", self.storage_bw_bytes_per_s, allow_zero=True)
        positive_float("noise.horizon", self.horizon_s)
        positive_float("noise.maintenance", self.maintenance_every_s, allow_zero=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class NoiseSpec:
    """Everything the simulator perturbs. The empty spec is the noise-free step (equal to `predict`)."""

    jitter: Jitter | None = None
    slow: tuple[SlowRanks, ...] = ()
    slow_links: tuple[SlowLink, ...] = ()
    flaps: tuple[LinkFlap, ...] = ()
    interference: tuple[Interference, ...] = ()
    failures: Failures | None = None
    notes: tuple[str, ...] = field(default=())
    """The spec items as given, for the report."""

    @property
    def step_noise(self) -> bool:
        """Whether anything changes a single step (failures only act over the long horizon)."""
        return bool(self.jitter or self.slow or self.slow_links or self.flaps or self.interference)

    def causes(self) -> tuple[str, ...]:
        """Cause labels of the per-step perturbations, in a fixed order (the attribution's keys)."""
        out = []
        if self.jitter:
            out.append("jitter")
        out += sorted({f"slow-{s.kind}" for s in self.slow})
        if self.slow_links:
            out.append("slow-link")
        if self.flaps:
            out.append("link-flap")
        out += sorted({i.name for i in self.interference})
        return tuple(out)
