"""Account 1 — the data-movement ledger: bytes per step at each level, per useful FLOP, and time at that level.

Levels, nearest first: sram, l2, hbm, host, scale_up, scale_out, front_end. Bytes are per GPU (one rank of the
critical stage) per training step.
- hbm: the workload's `hbm_bytes` of every op, exactly what the roofline prices (core model).
- sram, l2 (not in the core model; stated here): a tiled GEMM reads its operands from shared memory once per
  warp(-group) tile and from L2 once per thread-block (cluster) tile. With square tiles of 128 on chip and 256
  at L2 (CUTLASS 3 Hopper shapes: 128×128 warpgroup MMA, 2-CTA clusters of 128×256 with multicast), operand
  bytes per FLOP are A/128 at SRAM and A/256 at L2 (A = bytes per element): (T+T)·k·A / (2·T·T·k) = A/T.
  L2 traffic is at least the HBM traffic. Element-wise kernels pass their
  HBM bytes once through both.
- host: no offload is modelled, so 0.
A device without an `sram` or `l2` level (every level but hbm is optional, spec.device.Device.has_level) has no row
for it: nothing states its bandwidth, and its bytes are neither timed nor charged energy.
- scale_up, scale_out: bytes each rank sends (analysis.traffic) over every transfer of the step; "modelled" is
  the core model's time of every transfer split over the tiers its bytes cross (analysis.traffic.tier_seconds),
  so a tier that carries bytes is never charged 0 s and the tiers add up to the transfers' time.
- front_end: input token ids and labels (2 × 4 bytes per token) plus the checkpoint written, amortised per step.
Useful FLOP convention: the core model's model FLOPs (3 × forward matrix + attention FLOPs, no recompute)
divided by the GPU count. "Time at bandwidth" is bytes / peak bandwidth of the level (a floor); "modelled"
is the time the core model charges to that level (memory-bound op time; transfer time bound by that tier).
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.analysis.context import Context
from narrowpath.analysis.traffic import NETWORK_TIERS, row_tier_bytes, tier_seconds
from narrowpath.cost.roofline import hbm_bytes
from narrowpath.spec.device import FORMAT_DTYPE

LEVELS = ("sram", "l2", "hbm", "host", "scale_up", "scale_out", "front_end")
DTYPE_BYTES = {"fp4": 0.5, "fp8": 1, "bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4}
"""Bytes of an operand element by type; a training format by its element type (spec.device.FORMAT_DTYPE: mxfp8 one
byte, nvfp4 half of one — their block scales, 1/32 and 1/16 of a byte an element, left out)."""
SRAM_TILE = 128
L2_TILE = 256
TOKEN_BYTES = 8.0
"""int32 input id + int32 label per token."""


@dataclass(frozen=True, slots=True)
class LedgerRow:
    level: str
    bytes_per_step: float
    bytes_per_useful_flop: float
    bw_bytes_per_s: float
    time_at_bw_s: float
    """bytes_per_step / bw_bytes_per_s."""
    share_of_step: float
    """time_at_bw_s / step time."""
    modelled_s: float | None
    """Time the core model charges to this level (None: the core model does not price this level)."""
    source: str


def element_bytes(dtype: str, default: float = 2) -> float:
    """Bytes of one element of a dtype or training format (mxfp8 takes fp8's, nvfp4 fp4's); `default` if unknown."""
    return DTYPE_BYTES.get(FORMAT_DTYPE.get(dtype, dtype), default)


def op_level_bytes(op, level: str, device) -> float:
    """Bytes one execution of `op` moves at `level` on `device` (module docstring convention; the HBM bytes are
    those the roofline prices, cost.roofline.hbm_bytes)."""
    hbm = hbm_bytes(op, device)
    if level == "hbm" or op.kind == "vector" or op.flop <= 0:
        return hbm
    a = element_bytes(op.dtype)
    per_flop = a / (SRAM_TILE if level == "sram" else L2_TILE)
    return max(hbm, op.flop * per_flop)


def network_bytes(ctx: Context) -> dict[str, float]:
    """Bytes per step one rank sends on scale_up and scale_out, summed over the prediction's transfers."""
    out = dict.fromkeys(NETWORK_TIERS, 0.0)
    for t in ctx.pred.transfers:
        for tier, b in row_tier_bytes(ctx.pred.scenario, t).items():
            out[tier] += b
    return out


def network_seconds(ctx: Context, exposed: bool = False) -> dict[str, float]:
    """Core-model transfer time (or its exposed part) per step charged to each network tier (tier_seconds)."""
    out = dict.fromkeys(NETWORK_TIERS, 0.0)
    for t in ctx.pred.transfers:
        for tier, s in tier_seconds(ctx.pred.scenario, t, t.exposed_s if exposed else None).items():
            out[tier] += s
    return out


def host_level(transfers, host_bw: float) -> tuple[float, float, float, str]:
    """(bytes, bandwidth, modelled seconds, source) of the host link per step on one rank: the activations a plan
    offloads to host memory in forward and fetches back for backward (`plan.offload_layers`; the `host` axis
    transfers of workload.build.offload_transfers), at the time the step priced for them."""
    rows = [t for t in transfers if t.axis == "host"]
    if not rows:
        return 0.0, host_bw, 0.0, "no activations offloaded"
    return (sum(t.message_bytes * t.count for t in rows), host_bw, sum(t.total_s for t in rows),
            "activations offloaded to host memory and fetched back (plan.offload_layers)")


def build_ledger(ctx: Context, checkpoint_bytes_per_step: float = 0.0) -> tuple[LedgerRow, ...]:
    pred = ctx.pred
    scn = pred.scenario
    dev, system = scn.system.device, scn.system
    step = pred.step_time_s
    useful = ctx.useful_flop_per_rank
    net = network_bytes(ctx)
    by_level: dict[str, tuple[float, float, float | None, str]] = {}
    for lv in ("sram", "l2", "hbm"):
        if not dev.has_level(lv):
            continue
        b = sum(op_level_bytes(r.op, lv, dev) * r.count_per_step for r in ctx.ops)
        modelled = sum(r.total_s for r in ctx.ops if r.bound == "memory") if lv == "hbm" else None
        src = "workload hbm_bytes (core model)" if lv == "hbm" else f"GEMM tile {SRAM_TILE if lv == 'sram' else L2_TILE} operand reuse"
        by_level[lv] = (b, dev.level(lv).bw_bytes_per_s, modelled, src)
    host_bw = system.host_bw_bytes_per_s_per_gpu or (dev.level("host").bw_bytes_per_s if dev.has_level("host")
                                                     else 0.0)
    by_level["host"] = host_level(pred.transfers, host_bw)
    secs = network_seconds(ctx)
    for tier in NETWORK_TIERS:
        by_level[tier] = (net[tier], system.tier(tier).bw_bytes_per_s_per_gpu, secs[tier],
                          "transfers of the step (analysis.traffic)")
    fe_bw = system.tier("front_end").bw_bytes_per_s_per_gpu if system.has_tier("front_end") else 0.0
    tokens_per_rank = pred.workload.tokens_per_step / scn.plan.dp
    fe = tokens_per_rank * TOKEN_BYTES + checkpoint_bytes_per_step
    by_level["front_end"] = (fe, fe_bw, None, "input tokens + amortised checkpoint")
    rows = []
    for lv in (lv for lv in LEVELS if lv in by_level):
        b, bw, modelled, src = by_level[lv]
        t = b / bw if bw > 0 else 0.0
        rows.append(LedgerRow(lv, b, b / useful if useful > 0 else 0.0, bw, t, t / step, modelled, src))
    return tuple(rows)
