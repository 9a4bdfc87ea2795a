"""Fabrics generated from a few parameters: scale-up domains, a rail-optimised or fat-tree scale-out, front-end.

Never a hand-listed set of links: `FabricSpec` holds the knobs (GPUs, node size, NVLink domain, NICs per GPU,
link rate, switch radix, oversubscription per level) and `FatTree` is the generated link set in arrays, with a
vectorised path function, so a 16k-GPU (or 2k-node) fabric costs a few arrays.

Model of the scale-out tree (folded Clos; Leiserson 1985, Al-Fares et al. SIGCOMM 2008): a leaf switch of radix k
gives k/2 ports to endpoints; the parallel uplinks of one switch are one *trunk* link whose capacity is the
downlink capacity over the level's oversubscription (ECMP spreads flows evenly over the parallel links). Two
levels while the leaves fit under one spine layer (≤ k leaves); three levels otherwise, with pods of k/2 leaves.
Rail-optimised (NVIDIA DGX SuperPOD reference architecture): NIC i of every node of a scalable unit of k/2 nodes
goes to leaf i of that unit, so rail-aligned traffic inside a unit never leaves its leaf.
Legend: E endpoints, L leaves, P pods, k switch radix.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from narrowpath.errors import SpecError
from narrowpath.spec.system import System

TOPOLOGIES = ("rail_optimized", "fat_tree")
DEFAULT_RADIX = 64
"""Ports per switch (NVIDIA Quantum-2 QM9700: 64 × 400 Gb/s)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FabricSpec:
    """The parameters a fabric is generated from."""

    num_gpus: int
    gpus_per_node: int
    scale_up_domain: int
    """GPUs per NVLink domain (8 on HGX, 72 on NVL72)."""
    scale_up_bw_bytes_per_s: float
    """Per-GPU NVLink bandwidth, one direction."""
    in_switch_reduction: bool = False
    """NVLink SHARP (NVLS) in the scale-up switches."""
    nics_per_gpu: float = 1.0
    """Scale-out NICs per GPU (0.5 = one NIC shared by two GPUs)."""
    nic_bw_bytes_per_s: float
    """Line rate of one NIC, one direction."""
    topology: str = "rail_optimized"
    switch_radix: int = DEFAULT_RADIX
    oversubscription: tuple[float, ...] = (1.0, 1.0)
    """Downlink/uplink ratio at the leaf (first) and spine (second) level; 1 = non-blocking."""
    front_end_bw_bytes_per_s_per_gpu: float = 0.0
    """Storage/data network per GPU; 0 = none modelled."""

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES:
            raise SpecError("fabric.topology", f"unknown {self.topology!r}; known: {', '.join(TOPOLOGIES)}")
        if self.num_gpus < 1 or self.gpus_per_node < 1 or self.switch_radix < 4:
            raise SpecError("fabric", f"num_gpus {self.num_gpus}, gpus_per_node {self.gpus_per_node} and "
                            f"switch_radix {self.switch_radix} must be positive (radix >= 4)")
        if any(o < 1.0 for o in self.oversubscription):
            raise SpecError("fabric.oversubscription", f"must be >= 1 per level, got {self.oversubscription}")
        if self.nics_per_gpu <= 0:
            raise SpecError("fabric.nics_per_gpu", f"must be > 0, got {self.nics_per_gpu}")

    @property
    def num_nodes(self) -> int:
        return -(-self.num_gpus // self.gpus_per_node)

    @property
    def gpu_nic_bw(self) -> float:
        """Scale-out bandwidth one GPU can inject, bytes/s."""
        return self.nics_per_gpu * self.nic_bw_bytes_per_s

    def leaf_of_gpu(self) -> np.ndarray:
        """Leaf switch of every GPU's NIC, shape (num_gpus,)."""
        g = np.arange(self.num_gpus)
        half = self.switch_radix // 2
        if self.topology == "rail_optimized":
            nodes_per_unit = max(1, int(half / self.nics_per_gpu))
            units = -(-self.num_nodes // nodes_per_unit)
            return (g % self.gpus_per_node) * units + (g // self.gpus_per_node) // nodes_per_unit
        gpus_per_leaf = max(1, int(half / self.nics_per_gpu))
        return g // gpus_per_leaf

    def fat_tree(self) -> "FatTree":
        """The scale-out fabric with one endpoint per GPU."""
        leaf_of = self.leaf_of_gpu()
        return FatTree.build(leaf_of=leaf_of, endpoint_bw=self.gpu_nic_bw, radix=self.switch_radix,
                             oversubscription=self.oversubscription)


def fabric_for(system: System, num_gpus: int, *, switch_radix: int = DEFAULT_RADIX, nics_per_gpu: float = 1.0,
               spine_oversubscription: float = 1.0) -> FabricSpec:
    """The fabric of `num_gpus` GPUs of `system`: its tiers give rates, topology and leaf oversubscription."""
    up, out = system.tier("scale_up"), system.tier("scale_out")
    fe = system.tier("front_end").bw_bytes_per_s_per_gpu if system.has_tier("front_end") else 0.0
    return FabricSpec(num_gpus=num_gpus, gpus_per_node=system.gpus_per_node,
                      scale_up_domain=system.job_domain(num_gpus),
                      scale_up_bw_bytes_per_s=up.bw_bytes_per_s_per_gpu, in_switch_reduction=up.in_network_reduction,
                      nics_per_gpu=nics_per_gpu, nic_bw_bytes_per_s=out.bw_bytes_per_s_per_gpu / nics_per_gpu,
                      topology="rail_optimized" if out.topology == "rail_optimized" else "fat_tree",
                      switch_radix=switch_radix, oversubscription=(out.oversubscription, spine_oversubscription),
                      front_end_bw_bytes_per_s_per_gpu=fe)


def nodes_per_leaf(system: System, switch_radix: int = DEFAULT_RADIX) -> int:
    """Nodes whose rail-aligned NICs share one leaf: the scalable unit (k/2 nodes) on a rail-optimised fabric,
    k/2 ports / NICs per node on a plain fat tree (at least 1)."""
    half = switch_radix // 2
    if system.tier("scale_out").topology == "rail_optimized":
        return half
    return max(1, half // system.gpus_per_node)


@dataclass(frozen=True, slots=True, eq=False)
class FatTree:
    """Generated link set of a 2- or 3-level folded Clos. Links, in order: endpoint up (E), endpoint down (E),
    leaf up trunks (L), leaf down trunks (L), pod up trunks (P), pod down trunks (P), one padding link (∞)."""

    leaf_of: np.ndarray
    """Leaf of each endpoint, shape (E,)."""
    pod_of_leaf: np.ndarray
    """Pod of each leaf, shape (L,); all zeros for a 2-level tree."""
    endpoint_bw: np.ndarray
    """Injection capacity of each endpoint, bytes/s, shape (E,)."""
    leaf_up_bw: np.ndarray
    """Trunk capacity from each leaf to the spines, bytes/s, shape (L,)."""
    pod_up_bw: np.ndarray
    """Trunk capacity from each pod to the core, bytes/s, shape (P,)."""
    levels: int = field(default=2)

    @classmethod
    def build(cls, *, leaf_of: np.ndarray, endpoint_bw: float, radix: int,
              oversubscription: tuple[float, ...] = (1.0, 1.0)) -> "FatTree":
        leaf_of = np.asarray(leaf_of, dtype=np.int64)
        num_leaves = int(leaf_of.max()) + 1
        ep_bw = np.full(leaf_of.size, float(endpoint_bw))
        down = np.bincount(leaf_of, weights=ep_bw, minlength=num_leaves)
        o1 = oversubscription[0] if oversubscription else 1.0
        o2 = oversubscription[1] if len(oversubscription) > 1 else 1.0
        leaf_up = down / o1
        if num_leaves <= radix:
            return cls(leaf_of, np.zeros(num_leaves, dtype=np.int64), ep_bw, leaf_up, np.zeros(1), 2)
        pod_of_leaf = np.arange(num_leaves) // (radix // 2)
        pod_up = np.bincount(pod_of_leaf, weights=leaf_up) / o2
        return cls(leaf_of, pod_of_leaf, ep_bw, leaf_up, pod_up, 3)

    @classmethod
    def uniform(cls, *, num_endpoints: int, endpoint_bw: float, endpoints_per_leaf: int, radix: int,
                oversubscription: tuple[float, ...] = (1.0, 1.0)) -> "FatTree":
        """Endpoints filled leaf by leaf (e.g. whole nodes as endpoints with their NICs as one trunk)."""
        return cls.build(leaf_of=np.arange(num_endpoints) // endpoints_per_leaf, endpoint_bw=endpoint_bw,
                         radix=radix, oversubscription=oversubscription)

    @property
    def num_endpoints(self) -> int:
        return int(self.leaf_of.size)

    @property
    def num_leaves(self) -> int:
        return int(self.pod_of_leaf.size)

    @property
    def num_pods(self) -> int:
        return int(self.pod_up_bw.size)

    def capacities(self) -> np.ndarray:
        """Capacity of every link, bytes/s (the last one is the ∞ padding link)."""
        return np.concatenate([self.endpoint_bw, self.endpoint_bw, self.leaf_up_bw, self.leaf_up_bw,
                               self.pod_up_bw, self.pod_up_bw, [np.inf]])

    @property
    def pad_link(self) -> int:
        return 2 * self.num_endpoints + 2 * self.num_leaves + 2 * self.num_pods

    def paths(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Links crossed by flows src→dst, shape (F, 6), padded with `pad_link`; up-down routing through the
        lowest common level (src ≠ dst)."""
        E, L, P = self.num_endpoints, self.num_leaves, self.num_pods
        pad = self.pad_link
        src = np.asarray(src, dtype=np.int32)
        dst = np.asarray(dst, dtype=np.int32)
        leaf_of = self.leaf_of.astype(np.int32)
        ls, ld = leaf_of[src], leaf_of[dst]
        out = np.empty((src.size, 6), dtype=np.int32)
        out[:, 0] = src
        np.add(dst, E, out=out[:, 1])
        same_leaf = ls == ld
        np.add(ls, 2 * E, out=out[:, 2])
        np.add(ld, 2 * E + L, out=out[:, 3])
        out[same_leaf, 2:4] = pad
        if P > 1:
            pod_of = self.pod_of_leaf.astype(np.int32)
            ps, pd = pod_of[ls], pod_of[ld]
            same_pod = ps == pd
            np.add(ps, 2 * E + 2 * L, out=out[:, 4])
            np.add(pd, 2 * E + 2 * L + P, out=out[:, 5])
            out[same_pod, 4:6] = pad
        else:
            out[:, 4:6] = pad
        return out
