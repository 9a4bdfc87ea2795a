"""Energy per step and per token: FLOPs × pJ/FLOP + bytes × pJ/byte per level and tier + static power × time.

Shape after Horowitz, 'Computing's energy problem (and what we can do about it)', ISSCC 2014: arithmetic is
cheap, moving a byte farther costs orders of magnitude more. Coefficients (and their sources) come only from the
catalog device entry (`energy_pj_per_flop`, `energy_pj_per_byte`, `idle_w`, `tdp_w`).
Assumptions: every GPU moves what the critical stage's rank moves (the ledger); static power is `idle_w` for the
whole step on every GPU; element-wise work is charged through its bytes (its FLOPs are counted in the matrix
dtype's coefficient only when it has any).

Levels, each including the ones before it (catalog facility.yaml, each figure with its source):
- gpu: the account above;
- node: + the rest of every node (CPUs, memory, NICs, NVSwitches, fans, PSU losses) for the step;
- cluster: + the job's share of the scale-out switches of the generated fabric (the ports its GPUs use of the
  leaves, spines and core; none when the job fits in one scale-up domain) for the step; the front-end and storage networks are not counted;
- facility: cluster × PUE (cooling, power conversion).
The NIC and optics energy per byte in the GPU level's scale-out coefficient is also inside the node and switch
power: a double count of < 0.1 % of the total for the catalog scenarios, left in rather than guessed out.
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.analysis.context import Context, build_context
from narrowpath.analysis.ledger import LedgerRow, build_ledger
from narrowpath.catalog.facility import facility_for
from narrowpath.cost.power import clock_fraction
from narrowpath.network.fabric import fabric_for
from narrowpath.spec.device import FORMAT_DTYPE
from narrowpath.spec.system import System

ENERGY_LEVELS = ("gpu", "node", "cluster", "facility")


@dataclass(frozen=True, slots=True)
class EnergyLevel:
    level: str
    """`gpu`, `node`, `cluster` (+ scale-out switches) or `facility` (× PUE); each includes the ones before."""
    total_j: float
    """Whole job, one step."""
    per_token_j: float
    power_w: float
    """Average power of the whole job at this level."""
    added: str
    """What this level adds, with its count and figure."""
    source: str


@dataclass(frozen=True, slots=True)
class EnergyAccount:
    flop_j: float
    """Dynamic arithmetic energy of the whole job per step."""
    bytes_j: dict[str, float]
    """Dynamic data-movement energy per level/tier of the whole job per step."""
    static_j: float
    total_j: float
    per_token_j: float
    avg_power_per_gpu_w: float
    tdp_w: float
    pj_per_flop: float
    """Effective coefficient (FLOP-weighted over the step's ops)."""
    missing: tuple[str, ...]
    """Coefficients the catalog lacks (counted as 0)."""
    source: str
    levels: tuple[EnergyLevel, ...] = ()
    """GPU, node, cluster and facility totals (module docstring)."""


def pj_per_flop(coeffs, dtype: str, device=None) -> float | None:
    """Catalog coefficient for `dtype`: a training format's element type's (mxfp8 → fp8, nvfp4 → fp4); else a
    neighbour's (fp4→fp8, fp8→fp16, bf16↔fp16, tf32↔fp32) — scaled, when `device` rates both, by the neighbour's
    matrix rate over this type's, as the catalog's coefficients are derived ((TDP − idle − HBM power) / sustained
    rate: B200's FP4 at twice its FP8 rate costs half FP8's energy a FLOP)."""
    if dtype in coeffs:
        return coeffs[dtype]
    dtype = FORMAT_DTYPE.get(dtype, dtype)
    if dtype in coeffs:
        return coeffs[dtype]
    fb = {"fp4": "fp8", "fp8": "fp16", "bf16": "fp16", "fp16": "bf16", "tf32": "fp32", "fp32": "tf32"}.get(dtype)
    c = coeffs.get(fb)
    if c is None or device is None:
        return c
    rates = device.peak_matrix_flop_per_s
    return c * rates[fb] / rates[dtype] if fb in rates and dtype in rates else c


def energy_j(flop: float, pj_flop: float, bytes_by_level: dict[str, float], pj_byte: dict[str, float],
             static_w: float, time_s: float) -> tuple[float, dict[str, float], float]:
    """(flop J, bytes J per level, static J) — Horowitz ISSCC 2014 decomposition."""
    return (flop * pj_flop * 1e-12, {k: b * pj_byte.get(k, 0.0) * 1e-12 for k, b in bytes_by_level.items()},
            static_w * time_s)


def switch_count(system: System, num_gpus: int) -> float:
    """Scale-out switches charged to the job, in switches' worth of ports: its GPUs' share of the generated fabric
    (network.fabric) — leaves at one down port per GPU of their k/2, spines above them (k/2 uplinks per leaf over the
    leaf oversubscription, k ports per spine; pod spines take k/2 of them), and the core of a 3-level tree (Al-Fares
    et al. SIGCOMM 2008 folded-Clos counts); 0 when the job fits in one scale-up domain. A job that fills whole
    leaves pays whole switches; one that uses 2 ports of each of 8 rail leaves (two nodes) pays half a leaf, not 8
    switches and their spines: a fabric is shared by the jobs on it, and a switch's power is mostly its ports'
    (SerDes and optics)."""
    if num_gpus <= system.scale_up_domain:
        return 0.0
    fab = fabric_for(system, num_gpus)
    tree = fab.fat_tree()
    k = fab.switch_radix
    o1, o2 = fab.oversubscription
    leaves = tree.num_endpoints / (k / 2)
    if tree.levels == 2:
        return leaves + leaves * (k / 2) / o1 / k
    spines = leaves * (k / 2) / o1 / (k / 2)
    return leaves + spines + spines * (k / 2) / o2 / k


def energy_levels(ctx: Context, gpu_j: float) -> tuple[EnergyLevel, ...]:
    """GPU → node → cluster → facility energy of one step (module docstring)."""
    pred = ctx.pred
    system, n, step = pred.scenario.system, ctx.num_gpus, pred.step_time_s
    fac = facility_for(system)
    tokens = pred.workload.tokens_per_step
    nodes = -(-n // system.gpus_per_node)
    switches = switch_count(system, n)
    node_j = gpu_j + fac.node_non_gpu_w * nodes * step
    cluster_j = node_j + fac.switch_w * switches * step
    rows = [("gpu", gpu_j, f"{n} GPUs", pred.scenario.system.device.sources.get("energy", "catalog devices.yaml")),
            ("node", node_j, f"{nodes} nodes x {fac.node_non_gpu_w:,.0f} W besides the GPUs",
             fac.sources.get("node_non_gpu_w", "")),
            ("cluster", cluster_j, f"{switches:,.2f} scale-out switches' worth of ports x {fac.switch_w:,.0f} W",
             fac.sources.get("switch_w", "")),
            ("facility", cluster_j * fac.pue, f"PUE {fac.pue:g}", fac.sources.get("pue", ""))]
    return tuple(EnergyLevel(lv, j, j / tokens, j / step, added, f"{src} [{fac.basis}]" if lv != "gpu" else src)
                 for lv, j, added, src in rows)


def build_energy(ctx: Context, ledger: tuple[LedgerRow, ...]) -> EnergyAccount:
    pred = ctx.pred
    dev = pred.scenario.system.device
    n = ctx.num_gpus
    missing = []
    num, den = 0.0, 0.0
    for r in ctx.ops:
        if r.op.flop <= 0:
            continue
        c = pj_per_flop(dev.energy_pj_per_flop, r.op.dtype, dev)
        if c is None:
            missing.append(f"pj_per_flop.{r.op.dtype}")
            c = 0.0
        num += r.op.flop * r.count_per_step * c
        den += r.op.flop * r.count_per_step
    # under a power cap the clock runs at f of its rated value (cost.power): the dynamic power P − P_idle ∝ f²
    # over a rate ∝ f leaves f of the rated energy per FLOP (the coefficients are the rated board's)
    eff = (num / den if den else 0.0) * clock_fraction(dev.tdp_w, dev.idle_w, pred.scenario.system.power_limit_w)
    for row in ledger:
        if row.bytes_per_step > 0 and row.level not in dev.energy_pj_per_byte:
            missing.append(f"pj_per_byte.{row.level}")
    if not dev.idle_w:
        missing.append("idle_w")
    fj, bj, sj = energy_j(pred.hardware_flop_per_step, eff,
                          {r.level: r.bytes_per_step * n for r in ledger}, dict(dev.energy_pj_per_byte),
                          dev.idle_w * n, pred.step_time_s)
    total = fj + sum(bj.values()) + sj
    return EnergyAccount(fj, bj, sj, total, total / pred.workload.tokens_per_step,
                         total / (n * pred.step_time_s), dev.tdp_w, eff, tuple(dict.fromkeys(missing)),
                         dev.sources.get("energy", "catalog devices.yaml"), energy_levels(ctx, total))


def facility_energy_per_token_j(pred) -> float:
    """Facility-level energy per token of a prediction, from its ledger without the amortised checkpoint (what a
    what-if row shows; the analysis's own energy account adds the checkpoint's front-end bytes)."""
    ctx = build_context(pred)
    return build_energy(ctx, build_ledger(ctx)).levels[-1].per_token_j
