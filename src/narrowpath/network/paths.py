"""Path model: the bandwidths and hop latencies a group's collective can use on the tiers it spans.

One small frozen record per (group span, system, calibration), which the algorithms of `cost/collectives.py`
read. Bandwidths are attained ones (line rate × the calibration's `bw_efficiency`), per GPU, one direction.

- Inside one scale-up domain a GPU drives its NVLink/NVSwitch ports: `up_bw`.
- Across domains NCCL lays one ring per NIC rail (NCCL rings/trees are built rail-aligned, PXN since 2.12), so
  the r members of a domain drive r NICs: a ring's inter-domain bus bandwidth is r × `nic_bw`, capped by
  `up_bw` when r > 1 (nccl-tests #290: 8 NICs × 47 GB/s = 376 GB/s busbw on 2 DGX H100).
- A sparse group (r = 1) has no NVLink leg at all: its bus bandwidth is one NIC.
- A full-mesh scale-up tier (AMD Infinity Fabric on MI300X, GH200 / H200 NVL quads: no switch) gives each pair of
  GPUs one link, `pair_bw` = up_bw/(D − 1): r members of a D-GPU domain reach each other over r − 1 links, so their
  ring or all-to-all runs at (r − 1)·pair_bw, the whole up_bw only when r = D (AMD ROCm blog, 'Understanding RCCL
  Bandwidth and xGMI Performance on MI300X', 2025: ~48 GB/s per link usable of 64).
- The record prices one group alone on the fabric. When many groups of an axis run at once and share NICs, leaf
  uplinks or an oversubscribed spine, `network.contention.concurrent_slowdown` gives the factor (>= 1) by which
  their transfer is slowed (flow-level max-min fair sharing).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from narrowpath.network.placement import GroupSpan
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.system import System

NVLS_REFERENCE_GPUS = 8
"""GPUs of the all-reduce a calibration's `nvls_busbw_bytes_per_s` was measured on (nccl-tests on one 8-GPU HGX
board, the figures the profiles cite): its algbw S/t = busbw·g/(2(g − 1)) is the in-switch rate a GPU sees whatever
the domain's size, so an NVL72 profile that carries the 8-GPU figure gets the same algbw as the HGX board."""

NVLS_LATENCY_S = 25e-6
"""Fixed latency of an NVLS all-reduce (NVIDIA/nccl src/graph/tuning.cc hwLat[NVLINK][NVLS][Simple], 2.18-2.19)."""


@dataclass(frozen=True, slots=True)
class PathModel:
    """What a collective on one group can use. Legend: r members per domain, d domains."""

    size: int
    """Ranks in the (sub-)group."""
    ranks_per_domain: int
    """Fewest members in one domain (they bound the rails across domains)."""
    domains: int
    up_bw: float
    """Attained scale-up bandwidth per GPU, bytes/s."""
    nic_bw: float
    """Attained scale-out (NIC) bandwidth per GPU, bytes/s."""
    alpha_up_s: float
    """Simple-protocol hop latency on the scale-up tier, s."""
    alpha_out_s: float
    """Simple-protocol hop latency on the scale-out tier, s."""
    busiest_domain: int = 0
    """Most members in one domain (its ring inside the domain is the longest one a hierarchical or tree collective
    waits for); 0 = ranks_per_domain (every domain holds as many)."""
    nvls_algbw: float = 0.0
    """Attained NVLS all-reduce algbw (S/t) for large messages, bytes/s; 0 = no in-switch reduction."""
    nvls_latency_s: float = NVLS_LATENCY_S
    out_in_network: bool = False
    """The scale-out switches reduce in-network (InfiniBand SHARP)."""
    up_line_bw: float = 0.0
    """Scale-up line rate per GPU (for measured busbw/line tables), bytes/s."""
    nic_line_bw: float = 0.0
    """Scale-out line rate per GPU, bytes/s."""
    up_measured: tuple[tuple[float, float], ...] = ()
    """Calibration's measured (message bytes, ring busbw / line rate) on the scale-up tier; () = use α-β."""
    out_measured: tuple[tuple[float, float], ...] = ()
    """Same for the scale-out tier."""
    pair_bw: float = 0.0
    """Attained scale-up bandwidth between two GPUs, bytes/s: up_bw behind a switch, one link's share
    up_bw/(domain − 1) on a full mesh; 0 = up_bw."""
    ll128: bool = True
    """NCCL may run LL128 (an NVLink scale-up path; `Tier.pcie` turns it off)."""
    up_measured_ranks: int = 0
    """Group size the scale-up table was measured on (calibration `measured_num_ranks`); 0 = not recorded."""
    out_measured_ranks: int = 0
    """Same for the scale-out table."""

    def measured_busbw(self, message_bytes: float) -> float:
        """Ring busbw from the calibration's measured table of the tier the group spans (log-size interpolation,
        clamped at the ends); 0 when that tier has no table. A group inside one domain reads the scale-up table;
        one across domains the scale-out table, whose line rate is its r members' NICs — as `calibrate
        --nccl-log` records a multi-node log (a 16-rank log of 2 DGX H100, r × NIC = 400 GB/s), whichever tier's
        bandwidth bounds the ring (there NVLink's 369 GB/s attained is below the 8 NICs' 376)."""
        table = self.up_measured if self.tier == "scale_up" else self.out_measured
        if not table:
            return 0.0
        line = self.up_line_bw if self.tier == "scale_up" else self.ranks_per_domain * self.nic_line_bw
        return line * interpolate_log(table, message_bytes)

    @property
    def measured_min_bytes(self) -> float:
        """Smallest message size of the spanned tier's measured table (0 when none)."""
        table = self.up_measured if self.tier == "scale_up" else self.out_measured
        return table[0][0] if table else 0.0

    @property
    def measured_ranks(self) -> int:
        """Group size the spanned tier's table was measured on (0 = not recorded)."""
        return self.up_measured_ranks if self.tier == "scale_up" else self.out_measured_ranks

    @property
    def ring_busbw(self) -> float:
        """Large-message ring bus bandwidth: NVLink inside one domain, else r rails of NICs (NVLink caps)."""
        if self.domains <= 1:
            return self.up_bw
        out = self.ranks_per_domain * self.nic_bw
        return min(self.up_bw, out) if self.ranks_per_domain > 1 else out

    @property
    def ring_tier(self) -> str:
        if self.domains <= 1:
            return "scale_up"
        return "scale_up" if self.ranks_per_domain > 1 and self.up_bw < self.ranks_per_domain * self.nic_bw \
            else "scale_out"

    @property
    def tier(self) -> str:
        """The tier whose hop latency dominates: scale_out when the group leaves its domain."""
        return "scale_out" if self.domains > 1 else "scale_up"

    @property
    def alpha_s(self) -> float:
        return self.alpha_out_s if self.domains > 1 else self.alpha_up_s

    def restricted(self, *, domains: int | None = None, ranks_per_domain: int | None = None) -> "PathModel":
        """The sub-group one level of a hierarchical algorithm runs on: one domain (r ranks) or one rail (d)."""
        if domains == 1:  # the busiest domain: the others finish their part first
            r = self.busiest_domain or self.ranks_per_domain
            return dataclasses.replace(self, size=r, ranks_per_domain=r, busiest_domain=0, domains=1)
        if ranks_per_domain == 1:
            return dataclasses.replace(self, size=self.domains, ranks_per_domain=1)
        return self


def interpolate_log(table: tuple[tuple[float, float], ...], x: float) -> float:
    """Piecewise-linear interpolation of (x, y) pairs in log x, clamped outside the measured range."""
    if x <= table[0][0]:
        return table[0][1]
    for (x0, y0), (x1, y1) in zip(table, table[1:]):
        if x <= x1:
            f = math.log(x / x0) / math.log(x1 / x0) if x1 > x0 else 1.0
            return y0 + f * (y1 - y0)
    return table[-1][1]


def _alpha(system: System, cal: Calibration, tier: str) -> float:
    """Hop latency of one algorithm step: the calibrated software/sync part plus the tier's wire/switch hop
    (the convention of the skeleton model, kept so that training predictions stay comparable)."""
    return cal.tier(tier).alpha_s + system.tier(tier).latency_s


_CACHE: dict = {}


def path_model(span: GroupSpan, system: System, cal: Calibration) -> PathModel:
    """PathModel of `span` on `system` with `cal` (memoised per objects: this sits on the hot path)."""
    key = (span, id(system), id(cal))
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is system and hit[1] is cal:
        return hit[2]
    up, out = system.tier("scale_up"), system.tier("scale_out")
    cu, co = cal.tier("scale_up"), cal.tier("scale_out")
    dom = system.scale_up_domain
    nvls_algbw = 0.0
    if up.in_network_reduction and cu.nvls_busbw_bytes_per_s > 0 and dom > 1:
        g = min(dom, NVLS_REFERENCE_GPUS)
        nvls_algbw = cu.nvls_busbw_bytes_per_s * g / (2.0 * (g - 1))
    full_mesh = up.topology == "full_mesh" and dom > 1
    pair_bw = up.bw_bytes_per_s_per_gpu * cu.bw_efficiency / (dom - 1) if full_mesh else 0.0
    # a full mesh: r members reach each other over r − 1 of a GPU's D − 1 links, the attained rate and the line
    # rate a measured busbw table is a share of alike
    links = min(1.0, (span.ranks_per_domain - 1) / (dom - 1)) if full_mesh and span.ranks_per_domain > 1 else 1.0
    pm = PathModel(size=span.size, ranks_per_domain=span.ranks_per_domain, domains=span.domains,
                   busiest_domain=span.busiest_domain,
                   up_bw=up.bw_bytes_per_s_per_gpu * cu.bw_efficiency * links,
                   nic_bw=out.bw_bytes_per_s_per_gpu * co.bw_efficiency,
                   alpha_up_s=_alpha(system, cal, "scale_up"), alpha_out_s=_alpha(system, cal, "scale_out"),
                   nvls_algbw=nvls_algbw, out_in_network=out.in_network_reduction,
                   up_line_bw=up.bw_bytes_per_s_per_gpu * links, nic_line_bw=out.bw_bytes_per_s_per_gpu,
                   up_measured=tuple(getattr(cu, "busbw_efficiency_by_size", ())),
                   out_measured=tuple(getattr(co, "busbw_efficiency_by_size", ())),
                   pair_bw=pair_bw, ll128=not up.pcie, up_measured_ranks=int(getattr(cu, "measured_num_ranks", 0)),
                   out_measured_ranks=int(getattr(co, "measured_num_ranks", 0)))
    if len(_CACHE) > 1024:
        _CACHE.clear()
    _CACHE[key] = (system, cal, pm)
    return pm
