"""System: devices joined by network tiers — scale-up domain, scale-out fabric, front-end."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Mapping

from narrowpath.errors import SpecError
from narrowpath.spec._check import as_int, boolean, choice, positive_float, text_mapping
from narrowpath.spec._pickle import reduce_spec
from narrowpath.spec.device import TIER_NAMES, Device

TOPOLOGIES = ("switched", "full_mesh", "rail_optimized", "fat_tree", "ethernet")
"""What a tier's `topology` may name (Tier.topology); another spelling would be priced as the default silently."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Tier:
    """One network tier as a GPU sees it."""

    name: str
    """`scale_up` (NVLink/NVSwitch domain), `scale_out` (back-end RDMA fabric), `front_end` (storage/data)."""
    bw_bytes_per_s_per_gpu: float
    """Unidirectional bandwidth one GPU can inject into this tier, bytes/s."""
    domain_size: int = 0
    """GPUs that share this tier as one flat domain (scale-up: NVLink domain size); 0 = the whole system."""
    latency_s: float = 0.0
    """One-hop latency (software + wire) of a message on this tier, seconds."""
    oversubscription: float = 1.0
    """Ratio of downlink to uplink bandwidth above the leaf switch; 1 = non-blocking, 2 = 2:1."""
    in_network_reduction: bool = False
    """Switches can reduce in-network (NVLink SHARP / InfiniBand SHARP)."""
    topology: str = "switched"
    """`switched` (NVSwitch), `full_mesh` (a direct link between every pair of GPUs, e.g. MI300X Infinity Fabric:
    two GPUs talk over one link of bw/(domain − 1)), `rail_optimized`, `fat_tree`, or `ethernet`."""
    pcie: bool = False
    """The GPUs of this scale-up tier talk over PCIe, not NVLink (L40S, RTX PRO 6000 servers). NCCL then runs no
    LL128: it enables the protocol only on an NVLink path (src/graph/tuning.cc: `typeIntra <= PATH_NVB`)."""

    def __post_init__(self) -> None:
        choice("tier.name", self.name, TIER_NAMES)
        choice(f"tier[{self.name}].topology", self.topology, TOPOLOGIES)
        boolean(f"tier[{self.name}].in_network_reduction", self.in_network_reduction)
        boolean(f"tier[{self.name}].pcie", self.pcie)
        if self.pcie and self.name != "scale_up":
            raise SpecError(f"tier[{self.name}].pcie", "only a scale_up tier's GPUs talk over PCIe")
        positive_float(f"tier[{self.name}].bw_bytes_per_s_per_gpu", self.bw_bytes_per_s_per_gpu)
        as_int(self, "domain_size", f"tier[{self.name}].domain_size", minimum=0)
        positive_float(f"tier[{self.name}].latency_s", self.latency_s, allow_zero=True)
        if not math.isfinite(self.oversubscription) or self.oversubscription < 1.0:
            raise SpecError(f"tier[{self.name}].oversubscription", f"must be >= 1, got {self.oversubscription}")


@dataclass(frozen=True, slots=True, kw_only=True)
class System:
    """A cluster built from one device type."""

    name: str
    device: Device
    gpus_per_node: int
    """GPUs per server (host); the scale-up domain may be larger (NVL72) but never smaller."""
    tiers: tuple[Tier, ...]
    """Network tiers, nearest first; must include `scale_up` and `scale_out`."""
    host_bw_bytes_per_s_per_gpu: float = 0.0
    """Host (PCIe/C2C) bandwidth per GPU for offload, bytes/s; 0 = unknown."""
    power_limit_w: float = 0.0
    """Board power cap every GPU runs under, watts (`nvidia-smi -pl`); 0 = the device's rated TDP. A cap below
    the rating lowers the sustained clock and with it the tensor-core rate (cost.power)."""
    segment_gpus: int = 0
    """GPUs of one scale-up domain a job larger than a domain is placed on (Slurm's topology/block plugin,
    `--segment`, here in GPUs: 16 compute trays of 4 = 64 of an NVL72 rack's 72); 0 = the whole domain
    (`job_domain`)."""
    sources: Mapping[str, str] = field(default_factory=dict)

    __reduce__ = reduce_spec

    def __post_init__(self) -> None:
        object.__setattr__(self, "tiers", tuple(self.tiers))
        object.__setattr__(self, "sources", text_mapping(f"system[{self.name}].sources", self.sources))
        as_int(self, "gpus_per_node", f"system[{self.name}].gpus_per_node")
        positive_float(f"system[{self.name}].host_bw_bytes_per_s_per_gpu", self.host_bw_bytes_per_s_per_gpu,
                       allow_zero=True)  # 0 = unknown; a negative or NaN rate priced a faster or NaN step
        positive_float(f"system[{self.name}].power_limit_w", self.power_limit_w, allow_zero=True)
        if self.device.tdp_w and self.power_limit_w > self.device.tdp_w:
            raise SpecError(f"system[{self.name}].power_limit_w", f"{self.power_limit_w:g} W exceeds the "
                            f"{self.device.name} rating of {self.device.tdp_w:g} W")
        names = [t.name for t in self.tiers]
        for need in ("scale_up", "scale_out"):
            if need not in names:
                raise SpecError(f"system[{self.name}].tiers", f"missing the `{need}` tier")
        if len(set(names)) != len(names):
            raise SpecError(f"system[{self.name}].tiers", f"duplicate tier names {names}")
        dom = self.tier("scale_up").domain_size
        if dom and dom < self.gpus_per_node:
            raise SpecError(f"system[{self.name}].scale_up.domain_size",
                            f"{dom} is smaller than gpus_per_node {self.gpus_per_node}")
        as_int(self, "segment_gpus", f"system[{self.name}].segment_gpus", minimum=0)
        if self.segment_gpus % self.gpus_per_node:
            raise SpecError(f"system[{self.name}].segment_gpus", f"{self.segment_gpus} is not a whole number of "
                            f"nodes of {self.gpus_per_node} GPUs")

    def tier(self, name: str) -> Tier:
        for t in self.tiers:
            if t.name == name:
                return t
        raise SpecError(f"system[{self.name}].tiers", f"no tier named {name!r}")

    def has_tier(self, name: str) -> bool:
        return any(t.name == name for t in self.tiers)

    @property
    def scale_up_domain(self) -> int:
        """GPUs in one scale-up (NVLink) domain."""
        return self.tier("scale_up").domain_size or self.gpus_per_node

    def job_domain(self, num_gpus: int) -> int:
        """GPUs of one scale-up domain a job of `num_gpus` GPUs holds, consecutive ranks filling each: the whole
        domain, or a segment of it (`segment_gpus`) when the job spans several domains. The layout of ranks over
        domains reads this; what one domain can do (its switches, its links) reads `scale_up_domain`."""
        dom, seg = self.scale_up_domain, self.segment_gpus
        return seg if 0 < seg < dom and num_gpus > dom else dom


def with_tier(system: System, tier: str, **changes) -> System:
    """`system` with the fields `changes` of its tier named `tier` replaced (what-ifs, a contended fabric)."""
    tiers = tuple(dataclasses.replace(t, **changes) if t.name == tier else t for t in system.tiers)
    return dataclasses.replace(system, tiers=tiers)
