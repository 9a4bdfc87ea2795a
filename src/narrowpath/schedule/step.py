"""Closed-form training step: compose op and transfer costs into one step's time, breakdown and memory.

Per stage and micro-batch: T = compute (fwd + bwd + recompute) + exposed communication (TP, CP, EP, PP,
ZeRO-3). Stages combine through the pipeline schedule (schedule.pipeline); then the data-parallel gradient
sync (exposed part) and the optimizer update follow.
Overlap: an overlappable transfer hides behind the compute of the same phase (or, for the expert all-to-all
with `ep_overlap`, behind the paired pass of another micro-batch: `pass_pair_hidden_s`); what does not fit is
exposed, and the hidden part slows the compute it shares the chip with by `overlap_compute_slowdown`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from narrowpath.catalog import calibration_for
from narrowpath.cost.collectives import CollectiveCost, collective_time
from narrowpath.cost.memory import MemoryBreakdown, stage_memory
from narrowpath.cost.power import capped_device
from narrowpath.cost.roofline import host_time_s, op_time_s
from narrowpath.errors import NarrowpathError
from narrowpath.network.contention import concurrent_slowdown
from narrowpath.network.placement import GroupSpan, axis_strides, group_span, span_of
from narrowpath.schedule.choose import resolve_open_knobs
from narrowpath.schedule.chunks import chunk_param_shares, chunk_shares, chunk_streams, chunked_sync_exposed_s, \
    exposed_shares, phase_times, sync_launch_mode
from narrowpath.schedule.exposure import (PAIR_PARTNERS, exposed_after_bucketed_overlap, paired_fraction,
                                         pass_pair_hidden_s, staged_sync_exposed_s)
from narrowpath.schedule.pipeline import dualpipe_time_s, dualpipev_time_s, pipeline_time_s
from narrowpath.schedule.provenance import attention_note, power_notes, profile_usage
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.scenario import Scenario
from narrowpath.spec.system import with_tier
from narrowpath.workload.attention import kernel_of
from narrowpath.workload.build import build_workload, grad_format, microbatch_share, step_transfers
from narrowpath.workload.items import Transfer, Workload
from narrowpath.workload.split import plan_layer_ranges
from narrowpath.workload.ops import is_weight_gradient
from narrowpath.workload.transformer import is_attention_core

_BUCKET = {"edp": "dp", "pp_ends": "pp", "etp": "ep", "host": "pp", "ep_inter": "ep", "ep_intra": "ep"}
"""Breakdown bucket of the axes that are not plain plan axes (expert-data-parallel, first/last pipeline stage)."""


def bucket_of(axis: str) -> str:
    """The breakdown bucket (`exposed_<bucket>_comm`) a transfer axis's exposed time lands in."""
    return _BUCKET.get(axis, axis)


def bucket_axes(bucket: str) -> tuple[str, ...]:
    """The transfer axes whose exposed time lands in the breakdown's `exposed_<bucket>_comm` (ep: ep, etp and the
    hierarchical ep_inter / ep_intra; dp: dp and edp; pp: pp, pp_ends and host)."""
    return (bucket, *(a for a, b in _BUCKET.items() if b == bucket))

BREAKDOWN_KEYS = ("compute", "exposed_tp_comm", "exposed_cp_comm", "exposed_ep_comm", "exposed_pp_comm",
                  "exposed_dp_comm", "bubble", "optimizer")


@dataclass(frozen=True, slots=True)
class TransferCost:
    """One communication pattern of a step on a rank of the most loaded stage, priced."""

    name: str
    op: str
    axis: str
    message_bytes: float
    count: float
    """Occurrences per step on one rank."""
    time_each_s: float
    total_s: float
    exposed_s: float
    """Part of total_s on the critical path."""
    tier: str
    algorithm: str
    group_size: int
    phase: str


@dataclass(frozen=True, slots=True)
class StageTimes:
    """Per-micro-batch times of one pipeline stage."""

    index: int
    layers: int
    fwd_compute_s: float
    """Forward compute, with the slowdown of the compute the forward's hidden traffic runs beside."""
    bwd_compute_s: float
    """Backward compute including recompute, with the slowdown of the compute its hidden traffic runs beside."""
    exposed_comm_s: dict[str, float]
    """Exposed communication per axis (tp, cp, ep, pp, dp for ZeRO-3)."""
    host_wait_s: float = 0.0
    """Part of the compute during which the GPU waits for the host (kernels issued slower than they run, host
    synchronisations), per micro-batch; included in fwd/bwd_compute_s."""
    fwd_exposed_s: float = 0.0
    """Part of exposed_comm_s the forward pass exposes (it waits for it before its next op)."""

    @property
    def total_s(self) -> float:
        return self.fwd_compute_s + self.bwd_compute_s + sum(self.exposed_comm_s.values())

    @property
    def fwd_s(self) -> float:
        """The forward pass: its compute and the communication it exposes (the rest is the backward's)."""
        return self.fwd_compute_s + self.fwd_exposed_s


@dataclass(frozen=True, slots=True)
class StepPrediction:
    """Prediction of one training step."""

    scenario: Scenario
    calibration: Calibration
    attention_kernel: str
    step_time_s: float
    breakdown_s: dict[str, float]
    """Keys BREAKDOWN_KEYS; values sum to step_time_s."""
    stages: tuple[StageTimes, ...]
    transfers: tuple[TransferCost, ...]
    model_flop_per_step: float
    hardware_flop_per_step: float
    mfu: float
    hfu: float
    tokens_per_s: float
    memory: MemoryBreakdown
    """The most loaded stage."""
    memory_by_stage: tuple[MemoryBreakdown, ...]
    workload: Workload
    host_wait_s: float
    """Part of breakdown_s["compute"] during which the critical rank's GPU waits for its host (StageTimes.host_wait_s
    over the step's micro-batches): kernels issued slower than they run, host synchronisations."""
    assumptions: tuple[str, ...] = field(default_factory=tuple)
    sync_drain_hidden_s: float = 0.0
    """Seconds of the 1F1B gradient sync that the pipeline's cool-down hides: the binding stage's own exposure
    less the step's (`_staged_sync`); the gradient-sync rows of `transfers` carry the step's."""

    @property
    def model_tflops_per_gpu(self) -> float:
        return self.model_flop_per_step / self.step_time_s / self.scenario.num_gpus / 1e12

    @property
    def hardware_tflops_per_gpu(self) -> float:
        return self.hardware_flop_per_step / self.step_time_s / self.scenario.num_gpus / 1e12

    def gpu_time_by_class_s(self) -> dict[str, float]:
        """GPU time per step of the most loaded stage's kernels by class, in a trace's kernel categories
        (`trace --against` puts them beside the observed ones): `gemm` (matrix ops), `attention` (the fused
        attention kernel; unfused, its score and weighted-sum GEMMs are `gemm` and its softmax `elementwise`, as a
        trace names their kernels), `elementwise` (vector ops: norms, activations, casts, rotary, losses),
        `optimizer` (the update). Each op at its roofline time (cost.roofline.op_time_s), times its count and the
        step's micro-batches; the host's waits and exposed communication are not kernel time and are left out.
        The rates are the profile's: a fitted profile's are whole-step rates (docs/model.md, 'Measured on an
        H200'), so a class split can differ where the step time agrees."""
        busiest = max(range(len(self.stages)), key=lambda i: self.stages[i].total_s)
        index = self.stages[busiest].index
        stage = next(st for st in self.workload.stages if st.index == index)
        dev = capped_device(self.scenario.system)
        out = {"gemm": 0.0, "attention": 0.0, "elementwise": 0.0}
        for op, count in stage.ops:
            cls = "attention" if op.kind == "flash" else "elementwise" if op.kind == "vector" else "gemm"
            out[cls] += op_time_s(op, dev, self.calibration) * count * self.workload.num_microbatches
        out["optimizer"] = self.breakdown_s["optimizer"]
        return out


def transfer_span(scn: Scenario, axis: str) -> GroupSpan:
    """Span of the group a transfer of `axis` runs on, including the derived axes `edp` (expert data parallel)
    and `pp_ends` (first and last pipeline stage) — the same span the step model prices it on."""
    return _span(scn, axis, {})


def _span(scn: Scenario, axis: str, cache: dict) -> GroupSpan:
    if axis in cache:
        return cache[axis]
    plan, system = scn.plan, scn.system
    if axis == "host":
        span = span_of(1, ranks_per_domain=1, domains=1, axis=axis)
    elif axis in ("ep_inter", "ep_intra"):
        # the two legs of a deduplicating MoE dispatch: the ep ranks with one local index across domains, and
        # the ep ranks inside one domain (workload.moe.moe_transfers)
        ep = group_span(plan, system, "ep")
        span = span_of(ep.domains, ranks_per_domain=1, domains=ep.domains, axis=axis) if axis == "ep_inter" else \
            span_of(ep.ranks_per_domain, ranks_per_domain=ep.ranks_per_domain, domains=1, axis=axis)
    elif axis in ("pp", "pp_ends"):
        # point-to-point between neighbouring stages (or first and last stage for tied embeddings), priced at
        # the slowest pair: the stages of a synchronous pipeline wait for each other
        stride = axis_strides(plan)["pp"]
        same_dom = _pipeline_in_one_block(plan.num_gpus, stride, plan.pp, system.job_domain(plan.num_gpus))
        same_node = _pipeline_in_one_block(plan.num_gpus, stride, plan.pp, system.gpus_per_node)
        span = span_of(2 if plan.pp > 1 else 1, ranks_per_domain=2 if same_dom else 1, domains=1 if same_dom else 2,
                       ranks_per_node=2 if same_node else 1, nodes=1 if same_node else 2, axis=axis)
    else:
        span = group_span(plan, system, sync_group(axis, plan))
    cache[axis] = span
    return span


def _pipeline_in_one_block(num_gpus: int, stride: int, pp: int, block: int) -> bool:
    """Whether every pair of neighbouring stages (ranks `stride` apart in pipeline groups of `pp` stages, each group
    pp·stride consecutive ranks) shares a block of `block` consecutive ranks (a node, a scale-up domain): the whole
    job fits in one block, or a group's span divides into it. Otherwise some pair straddles a block edge — e.g.
    tp 4 × pp 4 on 8-GPU nodes sends from stage 1 (ranks 4–7) to stage 2 (ranks 8–11) over the NICs — and so does
    the first / last stage pair."""
    return num_gpus <= block or block % (pp * stride) == 0


def sync_group(axis: str, plan) -> str:
    """Placement group a transfer of `axis` runs on: with context parallelism, gradient sync and ZeRO traffic
    (dp) spans the dp × cp ranks, since cp ranks hold the same weights; expert-dp traffic runs on the expert-data-
    parallel group, which Megatron-Core's expert layout already spreads over cp; a deduplicating dispatch's two
    legs (`ep_inter`, `ep_intra`) the ep group; otherwise the axis itself."""
    return sync_axis(axis, plan.cp)


def sync_axis(axis: str, cp: int) -> str:
    """`sync_group` for a plan of context parallelism `cp`."""
    if axis in ("ep_inter", "ep_intra"):
        return "ep"
    return "dpcp" if axis == "dp" and cp > 1 else axis


def _price(tr: Transfer, scn: Scenario, cal: Calibration, spans: dict, cache: dict) -> CollectiveCost:
    """Cost of one transfer; on an oversubscribed fabric a cross-node transfer runs its algorithm again with each
    NIC's rate divided by the max-min fair-share slowdown of all groups of its axis running at once
    (network.contention), so a ring that NVLink bounds slows only where the contended rails fall below it."""
    key = (tr.op, tr.axis, tr.message_bytes)
    if key not in cache and tr.axis == "host":
        cache[key] = host_copy_cost(tr.message_bytes, scn.system)
    if key not in cache:
        span = _span(scn, tr.axis, spans)
        cost = collective_time(tr.op, tr.message_bytes, span, scn.system, cal)
        out = scn.system.tier("scale_out")
        if span.crosses_scale_out and out.oversubscription > 1 and tr.axis in ("tp", "cp", "ep", "dp", "edp", "pp",
                                                                                "ep_inter"):
            slow_key = ("slowdown", tr.axis)
            if slow_key not in cache:
                cache[slow_key] = concurrent_slowdown(scn.plan, scn.system, sync_group(tr.axis, scn.plan))
            f = cache[slow_key]
            if f > 1.0:
                contended = cache.get(("contended", f))
                if contended is None:
                    contended = cache[("contended", f)] = contended_system(scn.system, f)
                cost = collective_time(tr.op, tr.message_bytes, span, contended, cal, cost.algorithm)
        cache[key] = cost
    return cache[key]


def contended_system(system, factor: float):
    """`system` with its scale-out rate per GPU divided by `factor` (a NIC's max-min share under contention)."""
    return with_tier(system, "scale_out",
                     bw_bytes_per_s_per_gpu=system.tier("scale_out").bw_bytes_per_s_per_gpu / factor)


def host_copy_cost(nbytes: float, system) -> CollectiveCost:
    """A copy between device and host memory over the GPU's host link (PCIe, or NVLink-C2C on Grace systems)."""
    bw = system.host_bw_bytes_per_s_per_gpu or system.device.level("host").bw_bytes_per_s
    lat = system.device.level("host").latency_s
    return CollectiveCost(time_s=lat + nbytes / bw, algorithm="copy", busbw_bytes_per_s=bw,
                          bottleneck_tier="host", wire_bytes_per_rank=0.0, latency_s=lat)


@dataclass(frozen=True, slots=True)
class _OpSums:
    """A stage's ops added up per phase (fwd, bwd, recompute) for one micro-batch."""

    comp: dict
    """GPU time."""
    host: dict
    """Host time to issue the kernels."""
    syncs: dict
    """Host synchronisations."""
    gemm_phase: dict
    """GPU time of the matrix ops (what overlapped traffic hides behind)."""
    attn_phase: dict
    """GPU time of the attention core (what a context-parallel KV exchange hides behind)."""
    flop: float
    """Executed FLOPs."""
    wgrad: float
    """GPU time of the weight-gradient GEMMs: the W a zero-bubble schedule defers (DualPipe)."""


def _op_sums(ops, t_op) -> _OpSums:
    """Add up a stage's ops (`t_op(op)` → GPU time, whether it is attention core, host time)."""
    comp = {"fwd": 0.0, "bwd": 0.0, "recompute": 0.0}
    host = {"fwd": 0.0, "bwd": 0.0, "recompute": 0.0}
    syncs = {"fwd": 0.0, "bwd": 0.0, "recompute": 0.0}
    gemm_phase = {"fwd": 0.0, "bwd": 0.0, "recompute": 0.0}
    attn_phase = {"fwd": 0.0, "bwd": 0.0, "recompute": 0.0}
    flop = wgrad = 0.0
    for op, c in ops:
        t1, attn, h1 = t_op(op)
        t = t1 * c
        comp[op.phase] += t
        if op.phase == "bwd" and is_weight_gradient(op):
            wgrad += t
        host[op.phase] += h1 * c
        syncs[op.phase] += op.host_syncs * c
        if op.kind != "vector":
            gemm_phase[op.phase] += t
        if attn:
            attn_phase[op.phase] += t
        flop += op.flop * c
    return _OpSums(comp, host, syncs, gemm_phase, attn_phase, flop, wgrad)


def predict(scenario: Scenario, calibration: Calibration | None = None) -> StepPrediction:
    """Predict one training step of `scenario` (closed form)."""
    scn = scenario
    if scn.mode != "training":  # refuse rather than price a training step under an inference label
        raise NarrowpathError(f"mode: {scn.mode!r} is not modelled yet by the training step (predict, analyze, "
                              "search); use `narrowpath serve` for inference")
    if scn.open_knobs:  # knobs the source did not publish: chosen without any measurement (schedule.choose)
        scn = resolve_open_knobs(scn, lambda s: predict(s, calibration))
    cal = calibration or scn.calibration or calibration_for(scn.system.device.name)
    kernel = kernel_of(scn.plan.attention, cal.attention_kernel)
    wl = build_workload(scn, kernel)
    dev, plan = capped_device(scn.system), scn.plan  # a power cap slows the arithmetic (cost.power)
    slow, share = cal.overlap_compute_slowdown, microbatch_share(plan)  # share: items.Transfer `share` traffic
    op_cache: dict[int, tuple[float, bool]] = {}
    coll_cache: dict = {}
    spans: dict = {}

    def t_op(op) -> tuple[float, bool, float]:
        """(GPU time of one execution, whether it is part of the attention core, host time to issue it), once per
        op object."""
        k = id(op)
        if k not in op_cache:
            op_cache[k] = (op_time_s(op, dev, cal), is_attention_core(op), host_time_s(op, cal))
        return op_cache[k]

    stage_times: list[StageTimes] = []
    per_stage_xfer: list[list[tuple[Transfer, float, CollectiveCost, float]]] = []
    hw_flop_per_mb: list[float] = []
    wgrad_s: list[float] = []
    op_sums: dict[int, _OpSums] = {}  # stages sharing one ops tuple (build_workload's middle stages) add it up once
    traffic: dict[tuple[int, int], tuple] = {}  # (exposed, rows, extra compute, has pass-pair traffic) per stage kind
    for st in wl.stages:
        key = id(st.ops)  # the workload holds every tuple for the whole call: ids stay distinct
        if key not in op_sums:
            op_sums[key] = _op_sums(st.ops, t_op)
        sums = op_sums[key]  # read only below
        comp, host, syncs = sums.comp, sums.host, sums.syncs
        hw_flop_per_mb.append(sums.flop)
        # a pass runs at the slower of the GPU's pace and the host's pace of issuing its kernels, and the GPU idles
        # at every host synchronisation until the host has issued work again
        waited = {ph: max(0.0, host[ph] - comp[ph]) + syncs[ph] * cal.host_sync_s for ph in comp}
        comp = {ph: comp[ph] + waited[ph] for ph in comp}
        # stages sharing their ops and transfers (the middle stages) expose the same traffic, unless pass-pair
        # traffic makes it depend on the stage's place in the schedule
        xkey = (key, id(st.transfers))
        memo = traffic.get(xkey)
        if memo is not None and not memo[3]:
            exposed, rows, extra_compute = dict(memo[0]), memo[1], memo[2]
        else:
            exposed = {"tp": 0.0, "cp": 0.0, "ep": 0.0, "pp": 0.0, "dp": 0.0}
            rows = []
            # overlappable traffic per phase hides behind that phase's matrix work (a CP KV exchange: its attention)
            hide_budget = dict(sums.gemm_phase)
            # of the cp blocks of a ring, the first uses local K, V: cp − 1 transfers hide behind cp − 1 blocks
            attn_budget = {ph: t * (plan.cp - 1) / plan.cp for ph, t in sums.attn_phase.items()}
            # `share` traffic (items.Transfer): on the first m − 1 micro-batches only, behind their matrix work
            share_budget = {ph: t * share for ph, t in sums.gemm_phase.items()}
            extra_compute = {"fwd": 0.0, "bwd": 0.0}  # the slowdown of the compute hidden traffic runs beside
            pairs = []  # pass-pair traffic: hides after the phases' own overlapped traffic (pass_pair_hidden_s)
            for tr, c in st.transfers:
                cost = _price(tr, scn, cal, spans, coll_cache)
                total = cost.time_s * c
                if tr.overlappable and tr.hides_behind == "pass_pair":
                    pairs.append((tr, c, cost, total))
                    continue
                if tr.overlappable:
                    window = {"attention": attn_budget, "share": share_budget}.get(tr.hides_behind, hide_budget)
                    hidden = min(total, window.get(tr.phase, 0.0), hide_budget.get(tr.phase, 0.0))
                    hide_budget[tr.phase] = hide_budget.get(tr.phase, 0.0) - hidden
                    if window is not hide_budget:
                        window[tr.phase] -= hidden
                    extra_compute["fwd" if tr.phase == "fwd" else "bwd"] += slow * hidden
                    exp = total - hidden
                else:
                    exp = total
                exposed[bucket_of(tr.axis)] += exp
                rows.append((tr, c, cost, exp))
            if pairs:
                pair_s = {ph: 0.0 for ph in PAIR_PARTNERS}
                for tr, _, _, total in pairs:
                    pair_s[tr.phase] += total
                # warm-up forwards and cool-down backwards have no partner: the share depends on the stage
                paired = paired_fraction(st.index, plan.pp, plan.vpp, wl.num_microbatches, plan.schedule,
                                         plan.interleave_group)
                hid = pass_pair_hidden_s(pair_s, hide_budget, paired)
                for tr, c, cost, total in pairs:
                    hidden = hid[tr.phase] * total / pair_s[tr.phase] if pair_s[tr.phase] > 0 else 0.0
                    extra_compute["fwd" if tr.phase == "fwd" else "bwd"] += slow * hidden
                    exposed[bucket_of(tr.axis)] += total - hidden
                    rows.append((tr, c, cost, total - hidden))
            traffic[xkey] = (dict(exposed), rows, extra_compute, bool(pairs))
        per_stage_xfer.append(rows)
        wgrad_s.append(sums.wgrad)
        stage_times.append(StageTimes(st.index, st.layers, comp["fwd"] + extra_compute["fwd"],
                                      comp["bwd"] + comp["recompute"] + extra_compute["bwd"], exposed,
                                      sum(waited.values()), sum(r[3] for r in rows if r[0].phase == "fwd")))

    m = wl.num_microbatches
    totals = [s.total_s for s in stage_times]
    # overlapped interleaved sends still sit on the fill's and the drain's chain (pipeline.fill_drain_latency_s)
    send_s = max((cost.time_s for rows in per_stage_xfer for tr, _, cost, _ in rows
                  if tr.axis == "pp" and tr.overlappable), default=0.0)
    shares = None
    if plan.dualpipe:  # rank i runs stage i of one direction and stage p − 1 − i of the other, m/2 micro-batches each
        pipe = dualpipe_time_s([s.fwd_s for s in stage_times], [s.total_s - s.fwd_s for s in stage_times], wgrad_s,
                               m)
        ranks = dualpipe_ranks(stage_times)
        crit = max(range(len(ranks)), key=lambda i: ranks[i].total_s)
        cs = ranks[crit]
        crit_rows = [(tr, c / 2, cost, exp / 2) for s in (crit, plan.pp - 1 - crit) for tr, c, cost, exp in
                     per_stage_xfer[s]]
    else:
        shares = _chunk_shares(scn, wl, per_stage_xfer, t_op, lambda tr: _price(tr, scn, cal, spans, coll_cache),
                               cal.host_sync_s) if plan.vpp > 1 else None
        fwd = [s.fwd_s for s in stage_times]
        if plan.dualpipev:  # rank i runs virtual stages i and 2p − 1 − i, every micro-batch through both
            wf, wb = shares or ([[0.5, 0.5]] * plan.pp,) * 2
            pipe = dualpipev_time_s(*([[x * w for w in ws] for x, ws in zip(col, sh)] for col, sh in (
                (fwd, wf), ([t - f for t, f in zip(totals, fwd)], wb), (wgrad_s, wb))), m)
        else:
            pipe = pipeline_time_s(totals, m, plan.vpp, fwd_times_s=fwd, chunk_weights=shares and shares[0],
                                   bwd_chunk_weights=shares and shares[1], overlapped_send_s=send_s,
                                   group=plan.interleave_group)
    if not plan.dualpipe:
        crit = max(range(len(stage_times)), key=lambda i: totals[i])
        cs = stage_times[crit]
        crit_rows = per_stage_xfer[crit]
    bubble = pipe - m * cs.total_s

    # once-per-step work: gradient sync (overlapped with the last micro-batch's backward), the ZeRO-1/2 parameter
    # all-gather (overlapped with the next step's first forward), tied-embedding sync, optimizer
    step_rows = []
    dp_exposed, other_step = 0.0, 0.0
    chunked = None  # an interleaved stage's sync goes chunk by chunk: its chunks' parameter shares and backwards
    launch = sync_launch_mode(plan, plan.schedule)
    sync_window = cs.bwd_compute_s  # 1F1B with a pipeline: stage by stage below (_staged_sync)
    drain_hidden = 0.0
    if plan.vpp > 1 and not plan.dualpipev:
        ranges = plan_layer_ranges(scn.model, plan)[cs.index]
        bwd = cs.total_s - cs.fwd_s
        w_bwd = shares[1] if shares else [[1.0 / len(ranges)] * len(ranges)] * plan.pp
        chunked = (chunk_param_shares(scn, cs.index, ranges), [bwd * w for w in w_bwd[cs.index]])
        first = (stage_times[0].total_s - stage_times[0].fwd_s) * w_bwd[0][0] if launch == "megatron" else None
    for tr, c in wl.step_transfers:
        cost = _price(tr, scn, cal, spans, coll_cache)
        total = cost.time_s * c
        if tr.axis in ("dp", "edp"):
            window = cs.fwd_compute_s if tr.op == "all_gather" else sync_window
            if not tr.overlappable:
                exp = total
            elif tr.op != "all_gather" and chunked:  # one bucket group per chunk
                exp = chunked_sync_exposed_s(total, tr.message_bytes, plan.bucket_bytes, *chunked,
                                             plan.interleave_last_group, slow,
                                             chunk_streams(launch, len(chunked[0])), first)
            else:
                exp = exposed_after_bucketed_overlap(total, tr.message_bytes, plan.bucket_bytes, window, slow)
            dp_exposed += exp
        else:
            exp = total
            other_step += total
        step_rows.append((tr, c, cost, exp))
    if plan.schedule == "1f1b" and plan.pp > 1:  # each stage syncs its own gradients as the cool-down reaches it
        dp_exposed, step_rows, drain_hidden = _staged_sync(scn, wl, stage_times, step_rows, launch, slow,
                                                           lambda tr: _price(tr, scn, cal, spans, coll_cache))
    opt = sum(max(t_op(op)[0], t_op(op)[2]) * c for op, c in wl.optimizer_ops)

    breakdown = {
        "compute": m * (cs.fwd_compute_s + cs.bwd_compute_s),
        "exposed_tp_comm": m * cs.exposed_comm_s["tp"],
        "exposed_cp_comm": m * cs.exposed_comm_s["cp"],
        "exposed_ep_comm": m * cs.exposed_comm_s["ep"],
        "exposed_pp_comm": m * cs.exposed_comm_s["pp"] + other_step,
        "exposed_dp_comm": m * cs.exposed_comm_s["dp"] + dp_exposed,
        "bubble": bubble,
        "optimizer": opt,
    }
    step = sum(breakdown.values())

    transfers = []
    for tr, c, cost, exp in crit_rows:
        transfers.append(TransferCost(tr.name, tr.op, tr.axis, tr.message_bytes, c * m, cost.time_s,
                                      cost.time_s * c * m, exp * m, cost.bottleneck_tier, cost.algorithm,
                                      _span(scn, tr.axis, spans).size, tr.phase))
    for tr, c, cost, exp in step_rows:
        total = cost.time_s * c
        transfers.append(TransferCost(tr.name, tr.op, tr.axis, tr.message_bytes, c, cost.time_s, total, exp,
                                      cost.bottleneck_tier, cost.algorithm, _span(scn, tr.axis, spans).size,
                                      tr.phase))
    transfers = _merge(transfers)

    ranks_per_stage = plan.tp * plan.cp * plan.dp
    hw_flop = sum(hw_flop_per_mb) * m * ranks_per_stage
    peak = scn.system.device.matrix_peak(plan.precision)  # MFU against the rated peak, capped or not
    mems = stage_memory(scn, wl, kernel)
    mem = max(mems, key=lambda b: b.total_bytes)
    assumptions = (
        profile_usage(cal, plan.precision, {t.tier for t in transfers if t.tier not in ("none", "", "host")},
                      scn.system.device.name),
        attention_note(scn, kernel), *power_notes(scn.system),
        f"pipeline schedule: {plan.schedule}, {m} micro-batches"
        + (f" in groups of {plan.vp_group} per chunk" if plan.vp_group else ""),
        "MFU counts model FLOPs: 3x forward matmul + attention FLOPs, no recompute, full (non-causal) scores "
        "(Korthikanti et al. 2022 §6); HFU counts executed FLOPs incl. recompute; both against the "
        f"{plan.precision} dense matrix peak, {peak / 1e12:.0f} TFLOP/s per GPU",
        f"gradients accumulated and communicated in {grad_format(plan)}"
        + ("; FP8 primary weights (no 16-bit copy of the linear layers' weights)" if plan.fp8_params else ""),
    ) + tuple(f"{knob}: {note}" for knob, note in scn.chosen) + wl.notes
    return StepPrediction(scn, cal, kernel, step, breakdown, tuple(stage_times), tuple(transfers),
                          wl.model_flop_per_step, hw_flop, wl.model_flop_per_step / (step * scn.num_gpus * peak),
                          hw_flop / (step * scn.num_gpus * peak), wl.tokens_per_step / step, mem, tuple(mems), wl,
                          m * cs.host_wait_s, assumptions, drain_hidden)


def dualpipe_ranks(stages: list[StageTimes]) -> list[StageTimes]:
    """DualPipe: each rank's mean per-micro-batch times — half its micro-batches run stage i, half stage p − 1 − i
    (DeepSeek-V3 §3.2.1)."""
    p = len(stages)
    out = []
    for i in range(p):
        a, b = stages[i], stages[p - 1 - i]
        out.append(StageTimes(i, a.layers + b.layers, (a.fwd_compute_s + b.fwd_compute_s) / 2,
                              (a.bwd_compute_s + b.bwd_compute_s) / 2,
                              {k: (a.exposed_comm_s[k] + b.exposed_comm_s[k]) / 2 for k in a.exposed_comm_s},
                              (a.host_wait_s + b.host_wait_s) / 2, (a.fwd_exposed_s + b.fwd_exposed_s) / 2))
    return out


def is_grad_sync(tr) -> bool:
    """A gradient sync (all-reduce or reduce-scatter over a data-parallel group), of a Transfer or a TransferCost."""
    return tr.axis in ("dp", "edp") and tr.op != "all_gather"


def _staged_sync(scn: Scenario, wl: Workload, stage_times: list[StageTimes], step_rows: list, launch: str,
                 slow: float, price) -> tuple[float, list, float]:
    """A 1F1B pipeline's gradient sync stage by stage (schedule.exposure.staged_sync_exposed_s): every stage's sync
    sized for its own parameters, hidden behind its own last backward where its buckets stream (`hooks`; rank 0
    under Megatron-Core's DDP, whose other ranks launch theirs whole after the cool-down: sync_launch_mode). →
    (data-parallel exposure, `step_rows` with the gradient-sync rows of the stage that binds, each row's exposure
    its share of that stage's, the seconds of that stage's own exposure the cool-down hides)."""
    plan = scn.plan
    memo: dict = {}
    exposed, rows_of = [], []
    for st, times in zip(wl.stages, stage_times):
        streams = launch == "hooks" or st.index == 0
        key = (st.params, st.expert_params, times.bwd_compute_s if streams else None)
        if key not in memo:
            rows = []
            for tr, c in step_transfers(scn, st.params, st.expert_params):
                if not is_grad_sync(tr):
                    continue
                cost = price(tr)
                total = cost.time_s * c
                exp = exposed_after_bucketed_overlap(total, tr.message_bytes, plan.bucket_bytes, key[2], slow) \
                    if tr.overlappable and streams else total
                rows.append((tr, c, cost, exp))
            memo[key] = rows
        rows_of.append(memo[key])
        exposed.append(sum(r[3] for r in memo[key]))
    total, s = staged_sync_exposed_s(exposed, [t.total_s - t.fwd_s for t in stage_times])
    share = total / exposed[s] if exposed[s] > 0 else 0.0
    kept = [r for r in step_rows if not is_grad_sync(r[0])]
    gathers = sum(r[3] for r in kept if r[0].axis in ("dp", "edp"))
    return total + gathers, [(tr, c, cost, exp * share) for tr, c, cost, exp in rows_of[s]] + kept, exposed[s] - total


def _chunk_shares(scn: Scenario, wl: Workload, rows: list, t_op, transfer, host_sync_s: float):
    """schedule.chunks.chunk_shares of the plan: each layer kind's and each end's items priced once, each stage's
    exposed shares from its priced rows."""
    def price(ops, xfs) -> tuple:
        return phase_times(ops, xfs, lambda op: t_op(op)[::2], lambda tr: transfer(tr).time_s)
    return chunk_shares(scn, {kind: price(ops, xfs) for kind, ops, xfs in wl.layer_work},
                        tuple(price(*e) for e in wl.end_work), _per_rows(rows, exposed_shares), host_sync_s)


def _per_rows(rows: list, fn) -> list:
    """fn(rows) of each stage's priced rows, once per list (stages alike share theirs)."""
    seen: dict[int, object] = {}
    return [seen[id(r)] if id(r) in seen else seen.setdefault(id(r), fn(r)) for r in rows]


def _merge(rows: list[TransferCost]) -> list[TransferCost]:
    """Merge rows of the same pattern (name, op, size, phase) that appear in several layer kinds."""
    out: dict[tuple, TransferCost] = {}
    for r in rows:
        key = (r.name, r.op, r.message_bytes, r.phase)
        if key in out:
            o = out[key]
            out[key] = TransferCost(o.name, o.op, o.axis, o.message_bytes, o.count + r.count, o.time_each_s,
                                    o.total_s + r.total_s, o.exposed_s + r.exposed_s, o.tier, o.algorithm,
                                    o.group_size, o.phase)
        else:
            out[key] = r
    return list(out.values())
