"""The changes a practitioner would try, each aimed at components of the step (the verdict's paths).

Plan knobs (repaired to the nearest valid plan, analysis.repair); hardware and fabric (a NIC of twice the rate,
a non-blocking fabric, a 72-GPU NVLink domain, the vendor's next GPU generation, a board power cap at
POWER_CAP_FRACTION of TDP — aimed at energy, not time); software (FlashAttention, the fused attention kernel instead of FlashAttention-2 where it is faster, FP8 matrix multiplies, the
expert all-to-all overlapped with computation, CUDA graphs and sync-free MoE layers where the GPU waits for the host,
persistent recurrent kernels). Every candidate names the components it targets so that the
verdict can say whether its narrowest path had a remedy tried. A candidate is listed only where it can change
something (e.g. no in-network reduction on a tier without traffic, no interleaving without a pipeline).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from narrowpath.analysis.context import Context, rank_stages
from narrowpath.analysis.persistence import persistent_step_s, recurrent_weight_bytes
from narrowpath.analysis.whatif import (Make, WhatIf, evaluate, from_prediction, not_applicable, with_plan,
                                        with_plan_repaired, with_tier)
from narrowpath.catalog import system as catalog_system
from narrowpath.catalog.facility import facility_for
from narrowpath.units import GBIT_PER_S
from narrowpath.errors import NarrowpathError
from narrowpath.network.placement import group_span
from narrowpath.schedule.choose import layers_per_chunk, partial_recompute_allowed
from narrowpath.schedule.step import StepPrediction, bucket_of, predict
from narrowpath.spec.plan import SPLIT_DEFAULTS
from narrowpath.workload.split import balanced_end_layers, end_chunk_layouts, plan_stage_layers

HIGH_FREQUENCY = ("tp", "cp", "ep")
"""Axes whose collectives run per layer and micro-batch: they belong inside the scale-up domain."""
NVL_DOMAIN = 72
"""GPUs in one NVLink domain of an NVL72 rack (GB200 NVL72)."""
NVL_SEGMENT = 64
"""GPUs of an NVL72 rack a job larger than one rack is placed on: 16 of its 18 compute trays (the catalog's
gb200-nvl72 `segment_gpus`, with its source)."""
COMPUTE = ("matrix_compute", "hbm_bound_compute")
POWER_CAP_FRACTION = 0.8
"""Board power cap the what-if tries, as a fraction of TDP (a common data-centre setting for energy per token)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    change: str
    description: str
    make: Make | None
    """Factory of the changed scenario (with repairs); None for `evaluate_fn` candidates."""
    kind: str = "plan"
    targets: tuple[str, ...] = ()
    own_calibration: bool = False
    """A new device: the changed scenario takes its own calibration profile."""
    evaluate_fn: Callable[[], WhatIf] | None = None
    """A change the core model has no knob for, re-priced by the analysis (persistent kernels)."""

    def run(self, ctx: Context) -> WhatIf:
        if self.evaluate_fn is not None:
            return self.evaluate_fn()
        return evaluate(ctx.pred, self.change, self.description, self.make, kind=self.kind, targets=self.targets,
                        calibration=None if self.own_calibration else "same")


def exposed_key(axis: str) -> str:
    """The breakdown key of an axis's exposed communication (ep_inter / ep_intra / etp are ep's, edp dp's)."""
    return f"exposed_{bucket_of(axis)}_comm"


def tier_axes(ctx: Context, tier: str) -> tuple[str, ...]:
    """Breakdown keys of the exposed communication of every axis whose transfers use `tier`."""
    keys = []
    for t in ctx.pred.transfers:
        span = ctx.spans.get(t.axis)
        if t.tier == tier or (span is not None and t.axis != "pp" and tier in span.tiers):
            keys.append(exposed_key(t.axis))
    return tuple(dict.fromkeys(keys))


def ep_in_scale_up(scn, dom: int) -> list[Candidate]:
    """The expert-parallel groups brought inside the scale-up domain where a plan change can: moving `ep` in the
    placement does nothing (it is no layout axis: Megatron-Core splits each stage's tp·cp·dp ranks as etp fastest,
    then ep, then edp — network.placement.expert_coordinates), so the change is whole experts per rank (etp 1) when
    ep·etp overflows the domain, or Megatron's order (tp, cp, dp, pp: a stage's ranks side by side) when the
    placement spreads them; offered only when the changed plan's EP group then fits in one domain."""
    p = scn.plan
    if p.ep > dom:
        return []
    megatron = ("tp", "cp", "ep", "dp", "pp")
    spread = tuple(a for a in p.placement if a != "ep") != ("tp", "cp", "dp", "pp")
    tries = []
    if p.ep * p.expert_tp > dom:  # the group overflows a domain whatever the order: whole experts per rank
        tries.append(("whole experts per rank (expert TP 1) so each EP group of "
                      f"{p.ep} fits in the scale-up domain", dict(etp=1)))
        if spread:
            tries.append(("expert TP 1 and Megatron's rank order: EP groups inside the scale-up domain",
                          dict(etp=1, placement=megatron)))
    elif spread:  # it would fit: the order spreads a stage's ranks
        tries.append(("place each pipeline stage's ranks side by side (Megatron's tp, cp, dp, pp order) so the "
                      "EP groups stay inside the scale-up domain", dict(placement=megatron)))
    for words, change in tries:
        try:
            q = dataclasses.replace(p, **change)
            if not group_span(q, scn.system, "ep").crosses_scale_out:
                return [Candidate("ep_in_scale_up", words, lambda c=change: with_plan_repaired(scn, **c),
                                  targets=(exposed_key("ep"),))]
        except (NarrowpathError, ValueError):
            continue
    return []


def plan_candidates(ctx: Context) -> list[Candidate]:
    scn = ctx.pred.scenario
    p, system = scn.plan, scn.system
    out: list[Candidate] = []
    dom = system.job_domain(scn.num_gpus)
    recurrent = scn.model.arch == "lstm"  # its workload has no recompute, ZeRO or SP to price (spec.scenario)
    for ax in HIGH_FREQUENCY:
        span = ctx.spans.get(ax)
        if span is None or not span.crosses_scale_out:
            continue
        if ax == "ep":  # not a layout axis: Megatron-Core lays etp x ep x edp over a stage's ranks
            out += ep_in_scale_up(scn, dom)
        elif getattr(p, ax) <= dom:
            order = (ax,) + tuple(a for a in p.placement if a != ax)
            moved = dataclasses.replace(p, placement=order)
            pushed = [o.upper() for o in HIGH_FREQUENCY if o not in (ax, "ep") and getattr(p, o) > 1
                      and ctx.spans.get(o) is not None and not ctx.spans[o].crosses_scale_out
                      and group_span(moved, scn.system, o).crosses_scale_out]
            out.append(Candidate(f"{ax}_in_scale_up", f"place {ax.upper()} groups inside the scale-up domain"
                                 + (f" ({' and '.join(pushed)} groups then cross it)" if pushed else ""),
                                 lambda o=order: with_plan(scn, placement=o), targets=(exposed_key(ax),)))
        elif ax == "tp":
            out.append(Candidate("tp_in_scale_up", f"shrink TP to the scale-up domain ({dom}), raise DP",
                                 lambda: with_plan_repaired(scn, tp=dom), targets=("exposed_tp_comm",)))
    out.append(Candidate("raise_mbs", f"raise the micro-batch to {2 * p.mbs}",
                         lambda: with_plan_repaired(scn, mbs=2 * p.mbs), targets=COMPUTE + ("host_wait",)))
    if p.pp > 1:
        top = scn.model.layers // p.pp
        vpp = min(2 * p.vpp, top)
        if p.dualpipe or p.dualpipev:  # Megatron's schedule for comparison, interleaved where Megatron-LM allows it
            v = 2 if top >= 2 and p.num_microbatches % p.pp == 0 else 1
            out.append(Candidate("interleave_pipeline", "Megatron's " + ("interleaved 1F1B (vpp 2)" if v > 1 else "1F1B")
                                 + (" instead of DualPipeV" if p.dualpipev else " instead of DualPipe"),
                                 lambda: with_plan_repaired(scn, pipeline_schedule="auto", vpp=v), targets=("bubble",)))
        elif vpp > p.vpp:
            out.append(Candidate("interleave_pipeline", f"interleave the pipeline: vpp {p.vpp} -> {vpp}",
                                 lambda: with_plan_repaired(scn, vpp=vpp), targets=("bubble",)))
        m = p.num_microbatches
        moe = scn.model.moe is not None  # DualPipe's F&B pairs hide the expert all-to-all (ep_overlap)
        now = "DualPipe" if p.dualpipe else "DualPipeV" if p.dualpipev else \
            "interleaved 1F1B" if p.vpp > 1 else "1F1B"  # the plan's schedule, for the two candidates' words
        if not p.dualpipe and not recurrent and p.pp % 2 == 0 and m % 2 == 0 and m >= 2 * p.pp:
            out.append(Candidate("dualpipe", f"DualPipe instead of {now} (both ends feed the pipeline, two stages per "
                                 "rank" + ("; F&B pairs hide the expert all-to-all" if moe else "") + ")"
                                 + (f", vpp {p.vpp} -> 1" if p.vpp > 1 else ""),
                                 lambda: with_plan_repaired(scn, pipeline_schedule="dualpipe", vpp=1,
                                                            **({"ep_overlap": True} if moe else {})),
                                 targets=("bubble", "exposed_ep_comm") if moe else ("bubble",)))
        if not p.dualpipev and not recurrent and m >= 2 * p.pp and scn.model.layers >= 2 * p.pp:
            out.append(Candidate("dualpipev", f"DualPipeV instead of {now} (one model copy on a V of 2·pp chunks, "
                                 "its ends both on rank 0" + ("; F&B pairs hide the expert all-to-all" if moe else "")
                                 + ")" + (f", vpp {p.vpp} -> 2" if p.vpp != 2 else ""),
                                 lambda: with_plan_repaired(scn, pipeline_schedule="dualpipev", vpp=2,
                                                            **({"ep_overlap": True} if moe else {})),
                                 targets=("bubble", "exposed_ep_comm") if moe else ("bubble",)))
    split = end_split(ctx.pred) if p.pp > 1 and not recurrent else None
    if split is not None:
        counts = [st.layers for st in ctx.pred.stages]
        new = plan_stage_layers(scn.model, dataclasses.replace(p, **split))
        out.append(Candidate("rebalance_pipeline", f"rebalance the pipeline: layers first/middle/last "
                             f"{stage_layer_text(new)} (now {stage_layer_text(counts)})",
                             lambda: with_plan(scn, **split), targets=COMPUTE + ("bubble",)))
    fastest = fastest_layout(ctx.pred) if p.pp > 1 and p.vpp > 1 and not recurrent else None
    if fastest is not None:
        layout = fastest[0]["chunk_layers"]
        out.append(Candidate("rebalance_chunks", f"lay out the pipeline chunks: layers first/middle/last chunk "
                             f"{layout[0]}/{layout[1]}/{layout[-1]} (the last beside the output layer)",
                             lambda: with_plan(scn, **fastest[0]), targets=COMPUTE + ("bubble",)))
    if p.dp > 1 and not p.dp_overlap:
        out.append(Candidate("dp_overlap", "overlap the gradient sync with backward",
                             lambda: with_plan(scn, dp_overlap=True), targets=("exposed_dp_comm",)))
    if p.tp > 1 and not p.tp_comm_overlap:
        out.append(Candidate("tp_comm_overlap", "overlap TP communication with the GEMMs",
                             lambda: with_plan(scn, tp_comm_overlap=True), targets=("exposed_tp_comm",)))
    if p.tp > 1 and not p.sequence_parallel and not recurrent:
        out.append(Candidate("sequence_parallel", "enable sequence parallelism",
                             lambda: with_plan(scn, sequence_parallel=True),
                             targets=("exposed_tp_comm", "hbm_bound_compute")))
    for rc in ("none", "selective", "full"):
        if rc != p.recompute and not recurrent and not (rc == "full" and p.cuda_graphs):  # spec.plan refuses it
            # a recompute keeps nothing to offload (Megatron-Core refuses offloading beside it): the copies go
            off = " (offload none)" if p.offload_layers and rc != "none" else ""
            out.append(Candidate(f"recompute_{rc}", f"recompute {p.recompute} -> {rc}{off}",
                                 lambda r=rc, o=bool(off): with_plan(scn, recompute=r, **({"offload_layers": 0}
                                                                                          if o else {})),
                                 targets=COMPUTE + (("exposed_pp_comm",) if off else ())))
    if p.offload_layers and p.recompute == "none":  # the offload copies sit in the pipeline bucket
        # recomputing them instead: a full recompute of those layers only — where they are not the whole chunk
        # (the loop above tries that, offloading none) and a partial recompute can run (spec.plan: not under CUDA
        # graphs nor beside DeepSeek-V3's FP8 activation cache)
        k = p.offload_layers
        if k < layers_per_chunk(scn) and partial_recompute_allowed(p.activation_cache, p.cuda_graphs):
            out.append(Candidate(
                "recompute_offloaded", f"recompute the {k} offloaded layer{'s' * (k > 1)} a chunk instead of copying "
                f"{'them' if k > 1 else 'it'} to host memory",
                lambda: with_plan(scn, offload_layers=0, recompute="full", recompute_layers=k),
                targets=("exposed_pp_comm",) + COMPUTE))
        out.append(Candidate("no_offload", "keep every activation in HBM (offload none)",
                             lambda: with_plan(scn, offload_layers=0), targets=("exposed_pp_comm",)))
    if p.dp > 1 and p.zero_stage == 0 and not recurrent:
        out.append(Candidate("zero1", "shard the optimizer state over DP (ZeRO-1)",
                             lambda: with_plan(scn, zero_stage=1), targets=("optimizer",)))
    if p.tp >= 2:
        out.append(Candidate("halve_tp", f"TP {p.tp} -> {p.tp // 2}, DP follows",
                             lambda: with_plan_repaired(scn, tp=p.tp // 2), targets=("exposed_tp_comm",)))
    if p.pp >= 2:
        out.append(Candidate("halve_pp", f"PP {p.pp} -> {p.pp // 2}, DP follows",
                             lambda: with_plan_repaired(scn, pp=p.pp // 2), targets=("bubble", "exposed_pp_comm")))
    return out


def stage_layer_text(counts: list[int]) -> str:
    """Layers of the first, the middle (a range when they differ) and the last stage, e.g. `3/4/1`."""
    mid = counts[1:-1]
    middle = "-" if not mid else str(mid[0]) if min(mid) == max(mid) else f"{min(mid)}-{max(mid)}"
    return f"{counts[0]}/{middle}/{counts[-1]}"


def end_split(pred: StepPrediction) -> dict | None:
    """The split knobs with the first / last stage layer counts that even out the stages' per-micro-batch times
    (the slowest stage sets the pipeline's pace; workload.split.balanced_end_layers, Megatron-Core's uneven
    pipeline), or None when the plan's split is already as even."""
    p = pred.scenario.plan
    if p.dualpipev:  # both ends on rank 0: its split is a chunk layout (fastest_layout)
        return None
    auto = plan_stage_layers(pred.scenario.model, dataclasses.replace(p, **SPLIT_DEFAULTS))  # what (0, 0) gives
    ends = balanced_end_layers(pred.scenario.model.layers, p.pp, p.vpp, [s.total_s for s in pred.stages],
                               [s.layers for s in pred.stages], auto)
    if ends is None or (ends == (p.first_stage_layers, p.last_stage_layers) and not p.chunk_layers):
        return None
    return {"first_stage_layers": ends[0], "last_stage_layers": ends[1], "chunk_layers": ()}


def fastest_layout(pred: StepPrediction) -> tuple[dict, StepPrediction] | None:
    """For an interleaved pipeline, the split knobs of the Megatron-Bridge-style chunk layout
    (workload.split.end_chunk_layouts) that predict prices fastest and the prediction under them, if faster than the
    plan by more than 0.1 % and fitting when the plan fits: in an interleaved schedule the chunk that carries the
    output layer paces the steady state as well as the stages' totals do, which a stage-level estimate cannot see
    (DeepSeek-V3 on pp 8 × vpp 4: 1, 30 × 2, 0 is 8 % faster with the same layers per stage)."""
    scn = pred.scenario
    best = None
    for layout in end_chunk_layouts(scn.model.layers, scn.plan.pp, scn.plan.vpp):
        if layout != scn.plan.chunk_layers:
            best = _faster(pred, {"first_stage_layers": 0, "last_stage_layers": 0, "chunk_layers": layout}, best)
    return best


def _faster(pred: StepPrediction, knobs: dict, best: tuple[dict, StepPrediction] | None
            ) -> tuple[dict, StepPrediction] | None:
    """(knobs, prediction) of the plan with `knobs` when it beats `best` (or, without one, the plan by 0.1 %) and
    fits where the plan fits; else `best`."""
    try:
        trial = predict(with_plan(pred.scenario, **knobs), pred.calibration)
    except NarrowpathError:
        return best
    bar = best[1].step_time_s if best else pred.step_time_s * (1 - 1e-3)
    fits = trial.memory.fits or not pred.memory.fits  # a plan that fits is only offered one that fits too
    return (knobs, trial) if fits and trial.step_time_s < bar else best


def best_rebalance(pred: StepPrediction) -> tuple[dict, StepPrediction] | None:
    """The split knobs the pipeline what-ifs would propose for a prediction's plan (a chunk layout with
    interleaving, first / last stage counts without) and the prediction under them, when that is faster by more
    than 0.1 % and fits when the plan does — for the search, which keeps the automatic split, to say what balancing
    would add."""
    p = pred.scenario.plan
    if p.pp == 1 or pred.scenario.model.arch != "transformer":
        return None
    if p.vpp > 1:
        return fastest_layout(pred)
    split = end_split(pred)
    return None if split is None else _faster(pred, split, None)


def fabric_candidates(ctx: Context) -> list[Candidate]:
    scn = ctx.pred.scenario
    system = scn.system
    out: list[Candidate] = []
    for tier in ("scale_up", "scale_out"):
        axes = tier_axes(ctx, tier)
        if not system.tier(tier).in_network_reduction and axes:
            out.append(Candidate(f"in_network_reduction_{tier}", f"in-network reduction (SHARP) on {tier}",
                                 lambda t=tier: dataclasses.replace(scn, system=with_tier(system, t,
                                                                                          in_network_reduction=True)),
                                 kind="fabric", targets=axes))
    out_axes = tier_axes(ctx, "scale_out")
    if out_axes:
        nic = system.tier("scale_out").bw_bytes_per_s_per_gpu
        out.append(Candidate("nic_x2", f"NIC {nic / GBIT_PER_S:,.0f} -> {2 * nic / GBIT_PER_S:,.0f} Gb/s per GPU",
                             lambda: dataclasses.replace(scn, system=with_tier(system, "scale_out",
                                                                               bw_bytes_per_s_per_gpu=2 * nic)),
                             kind="fabric", targets=out_axes))
        o = system.tier("scale_out").oversubscription
        if o > 1:
            out.append(Candidate("non_blocking_fabric", f"scale-out oversubscription {o:g}:1 -> 1:1",
                                 lambda: dataclasses.replace(scn, system=with_tier(system, "scale_out",
                                                                                   oversubscription=1.0)),
                                 kind="fabric", targets=out_axes))
        if system.scale_up_domain < NVL_DOMAIN < scn.num_gpus or system.scale_up_domain < scn.num_gpus <= NVL_DOMAIN:
            out.append(Candidate("nvlink_72", f"a {NVL_DOMAIN}-GPU NVLink domain (NVL72-style) instead of "
                                              f"{system.scale_up_domain}",
                                 lambda: nvl72_system(scn), kind="hardware", targets=out_axes))
    return out


def nvl72_system(scn):
    """The scenario on NVL72-style racks as the catalog's NVL72 systems are built: a 72-GPU NVLink domain, and a job
    larger than a rack placed on 64-GPU segments of racks (a 72-GPU layout would straddle racks with 64-rank expert
    or 16-rank tensor groups that a real job never does)."""
    system = scn.system
    seg = NVL_SEGMENT if NVL_SEGMENT % system.gpus_per_node == 0 else 0
    return dataclasses.replace(scn, system=dataclasses.replace(with_tier(system, "scale_up", domain_size=NVL_DOMAIN),
                                                               segment_gpus=seg))


def power_cap_candidates(ctx: Context) -> list[Candidate]:
    scn = ctx.pred.scenario
    system, dev = scn.system, scn.system.device
    cap = POWER_CAP_FRACTION * dev.tdp_w
    if not dev.tdp_w or (system.power_limit_w and system.power_limit_w <= cap):
        return []
    now = system.power_limit_w or dev.tdp_w
    return [Candidate("power_cap", f"cap board power at {cap:,.0f} W ({now:,.0f} W now)",
                      lambda: dataclasses.replace(scn, system=dataclasses.replace(system, power_limit_w=cap)),
                      kind="hardware", targets=("energy",))]


def system_changes(old, new) -> list[str]:
    """What a swap of `old` for `new` changes besides the GPU: NIC rate, scale-up domain, GPUs per node, power cap
    (the next generation's catalog box brings its own: an 800 Gb/s NIC credited to the GPU until the fifty-sixth
    session's review)."""
    out = []
    nic = [s.tier("scale_out").bw_bytes_per_s_per_gpu if s.has_tier("scale_out") else 0.0 for s in (old, new)]
    if nic[0] != nic[1]:
        out.append(f"NIC {nic[0] / GBIT_PER_S:g} -> {nic[1] / GBIT_PER_S:g} Gb/s per GPU")
    if old.scale_up_domain != new.scale_up_domain:
        out.append(f"scale-up domain {old.scale_up_domain} -> {new.scale_up_domain} GPUs")
    if old.gpus_per_node != new.gpus_per_node:
        out.append(f"{old.gpus_per_node} -> {new.gpus_per_node} GPUs per node")
    if old.power_limit_w != new.power_limit_w:
        out.append(f"power cap {f'{old.power_limit_w:g} W' if old.power_limit_w else 'none'} -> "
                   f"{f'{new.power_limit_w:g} W' if new.power_limit_w else 'none'}")
    return out


def hardware_candidates(ctx: Context) -> list[Candidate]:
    scn = ctx.pred.scenario
    nxt = facility_for(scn.system).next_system
    if not nxt:
        return [Candidate("next_generation", "the next GPU generation", None, kind="hardware",
                          targets=COMPUTE + ("optimizer",),
                          evaluate_fn=lambda: not_applicable("next_generation", "the next GPU generation",
                                                             f"no later generation of {scn.system.device.name} "
                                                             "in the catalog", "hardware", COMPUTE + ("optimizer",)))]
    new = catalog_system(nxt)
    also = system_changes(scn.system, new)  # the catalog's box brings its own NIC, cap and shape: said, not hidden
    return [Candidate("next_generation", f"the next GPU generation: {scn.system.device.name} -> {new.device.name} "
                                         f"({nxt}{'; also ' + ', '.join(also) if also else ''})",
                      lambda: dataclasses.replace(scn, system=new, calibration=None),
                      kind="hardware", targets=COMPUTE + ("optimizer",), own_calibration=True)]


def software_candidates(ctx: Context, usable_fraction: float) -> list[Candidate]:
    pred = ctx.pred
    scn = pred.scenario
    p, dev = scn.plan, scn.system.device
    out: list[Candidate] = []
    if scn.model.arch != "lstm" and pred.attention_kernel != "flash" and dev.fused_attention:
        out.append(Candidate("flash_attention", f"FlashAttention instead of the {pred.attention_kernel} attention",
                             lambda: with_plan(scn, attention="flash"), kind="software",
                             targets=("hbm_bound_compute",)))
    if p.attention == "flash2" and dev.flash2_rate:
        # FlashAttention-2 on a device whose fused kernel is faster (Hopper): PyTorch's cuDNN backend
        # (SDPBackend.CUDNN_ATTENTION, opt-in since pytorch/pytorch#138522) or FlashAttention-3
        out.append(Candidate("fused_attention", "the fused attention kernel (cuDNN SDPA backend or FlashAttention-3) "
                             "instead of FlashAttention-2", lambda: with_plan(scn, attention="flash"),
                             kind="software", targets=COMPUTE))
    if p.precision in ("bf16", "fp16") and "fp8" in dev.peak_matrix_flop_per_s and scn.model.arch != "lstm":
        out.append(Candidate("fp8", "FP8 matrix multiplies", lambda: with_plan(scn, precision="fp8"),
                             kind="software", targets=COMPUTE))
    if scn.model.moe is not None and p.ep > 1 and not p.ep_overlap:
        out.append(Candidate("ep_overlap", "overlap the expert all-to-all with computation",
                             lambda: with_plan(scn, ep_overlap=True), kind="software",
                             targets=("exposed_ep_comm",)))
    if scn.model.moe is not None and p.ep > 1 and p.low_precision and p.ep_dispatch_format != "fp8":
        out.append(Candidate("fp8_dispatch", "dispatch the expert tokens in FP8, combine in BF16 (DeepSeek-V3's "
                             "low-precision communication)", lambda: with_plan(scn, ep_dispatch_format="fp8"),
                             kind="software", targets=("exposed_ep_comm",)))
    out += host_candidates(ctx)
    if scn.model.arch == "lstm":
        out.append(Candidate("persistent_rnn", "persistent recurrent kernels (weights kept in on-chip SRAM)", None,
                             kind="software", targets=("hbm_bound_compute",),
                             evaluate_fn=lambda: persistent_what_if(ctx, usable_fraction)))
    return out


def host_candidates(ctx: Context) -> list[Candidate]:
    """Changes aimed at the GPU waiting for the host (the verdict's `host_wait`), each only where the critical rank
    waits that way: its layers' kernels replayed from CUDA graphs (plan.cuda_graphs) where it waits for the host to
    issue them (not possible beside full recompute: spec.plan), and a dropless MoE's tokens-per-expert counts kept on
    the GPU (plan.moe_sync_free) where its layers synchronise with the host."""
    pred = ctx.pred
    scn, p = pred.scenario, pred.scenario.plan
    if scn.model.arch == "lstm" or pred.host_wait_s <= 0:
        return []
    m = pred.workload.num_microbatches
    syncs = m * sum(op.host_syncs * c * share for st, share in rank_stages(pred, ctx.critical_stage)
                    for op, c in pred.workload.stages[st].ops)
    issue_wait = pred.host_wait_s - syncs * pred.calibration.host_sync_s
    out = []
    if not p.cuda_graphs and p.recompute != "full" and issue_wait > 1e-9 * pred.step_time_s:
        out.append(Candidate("cuda_graphs", "replay each layer's kernels from CUDA graphs",
                             lambda: with_plan(scn, cuda_graphs=True), kind="software", targets=("host_wait",)))
    if syncs > 0 and scn.model.moe is not None and not p.moe_sync_free:
        out.append(Candidate("moe_sync_free", "sync-free MoE layers (tokens-per-expert counts "
                             "kept on the GPU)", lambda: with_plan(scn, moe_sync_free=True), kind="software",
                             targets=("host_wait",)))
    return out


def persistent_what_if(ctx: Context, usable_fraction: float = 0.75) -> WhatIf:
    """Persistent kernels (Diamos et al. ICML 2016): the recurrent GEMM re-priced without its weight reads from
    HBM and per-time-step launches (analysis.persistence) — only where one layer's weights fit the usable SRAM."""
    pred = ctx.pred
    desc = "persistent recurrent kernels (weights kept in on-chip SRAM)"
    targets = ("hbm_bound_compute",)
    if not pred.scenario.system.device.has_level("sram"):
        return not_applicable("persistent_rnn", desc, f"{pred.scenario.system.device.name} lists no SRAM level",
                              "software", targets)
    sram = pred.scenario.system.device.level("sram").capacity_bytes
    w = recurrent_weight_bytes(pred)
    if w > usable_fraction * sram:
        return not_applicable("persistent_rnn", desc, f"one layer's weights ({w / 1e6:.1f} MB) exceed "
                              f"{usable_fraction:.0%} of the {sram / 1e6:.1f} MB SRAM", "software", targets)
    return from_prediction(pred, "persistent_rnn", desc, step_s=persistent_step_s(pred), kind="software",
                           targets=targets)


def candidates(ctx: Context, usable_fraction: float = 0.75) -> list[Candidate]:
    """Every change worth a re-run for this scenario, plan knobs first (`usable_fraction`: the SRAM share a
    persistent kernel can give to weights, AnalysisOptions.sram_usable_fraction)."""
    return (plan_candidates(ctx) + fabric_candidates(ctx) + hardware_candidates(ctx) + power_cap_candidates(ctx)
            + software_candidates(ctx, usable_fraction))
