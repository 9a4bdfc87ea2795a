"""What the simulator plays, priced: per stage and virtual chunk, the forward and backward passes of one
micro-batch (compute seconds, kernels, blocking collectives in order), the pipeline messages, the gradient sync
and the optimizer — all from the workload and cost stages `predict` uses (one physics, two compositions).

Chunk work: a chunk runs its layers' work (`workload.build._layer_work`, per dense or MoE layer) plus the
embedding on stage 0's first chunk and the output layer and loss on the last stage's last chunk
(`_embedding_work`, with their ZeRO traffic). Whatever the stage's work holds beyond these (a future item) is
spread over its chunks by layer count, so the chunks always add up to the stage `predict` prices.

Within a pass (Megatron order, not modelled op by op): blocking collectives are spread evenly through the pass,
kinds interleaved in proportion to their counts (kind q's j-th of n_q ordered by (j + ½)/n_q), the k-th of N at
(k + ½)/N of the compute; an overlappable transfer hides behind the
matrix work of its phase (a context-parallel ring exchange behind (cp − 1)/cp of its attention), the hidden part
slows that compute by the calibration's `overlap_compute_slowdown`, and what does not fit waits at the end of
the pass — the rule `schedule.step` applies per stage, applied per chunk pass.
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass

from narrowpath.cost.power import capped_device
from narrowpath.cost.roofline import host_time_s, op_time_s
from narrowpath.schedule.chunks import chunk_param_shares, sync_launch_mode
from narrowpath.schedule.step import PAIR_PARTNERS, StepPrediction, _price, paired_fraction, pass_pair_hidden_s, \
    transfer_span
from narrowpath.workload import transformer as T
from narrowpath.workload.build import _embedding_work, _layer_work, embedding_params, layer_kind_of, step_rank_params, \
    microbatch_share, zero2_per_microbatch, zero2_transfers, zero3_transfers
from narrowpath.workload.split import end_rerun_share, plan_layer_ranges, rerun_kind_counts, rerun_scaled
from narrowpath.workload.items import Op, StageWork, Transfer
from narrowpath.workload.ops import is_weight_gradient

PASS_PHASES = {"F": ("fwd",), "B": ("bwd", "recompute"), "W": ("bwd",), "BW": ("bwd", "recompute")}
"""Workload phases each pass runs: F forward, BW whole backward (1F1B), or B (input gradients + recompute) and W
(weight gradients) apart (zero-bubble schedules)."""


@dataclass(frozen=True, slots=True)
class Sync:
    """A blocking collective inside a pass: every member of its group waits for the last one, then all spend
    `cost_s` together."""

    name: str
    axis: str
    """Placement group: tp, cp, ep, dp, edp (dp/edp become dp×cp / cp×dp/ep groups with context parallelism)."""
    cost_s: float
    latency_s: float
    """Size-independent part of cost_s (a slow link stretches only the rest)."""
    tiers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PassWork:
    """One pass (F, B, W or BW) of one chunk for one micro-batch on one rank of a stage."""

    kind: str
    chunk: int
    compute_s: float
    """Kernel time including the overlap slowdown."""
    kernels: float
    syncs: tuple[Sync, ...]
    """Blocking collectives in the order they occur."""
    shares: tuple[float, ...]
    """Fraction of compute_s before the first sync, between syncs, after the last (len(syncs) + 1, sum 1)."""
    hidden_s: float = 0.0
    """Communication that ran hidden behind this pass's compute."""


@dataclass(frozen=True, slots=True)
class StepTransfer:
    """A once-per-step transfer of one stage (gradient sync, parameter all-gather, tied embeddings), priced."""

    name: str
    op: str
    axis: str
    message_bytes: float
    cost_s: float
    latency_s: float
    tiers: tuple[str, ...]
    overlappable: bool


@dataclass(frozen=True, slots=True)
class StageProgramWork:
    """Everything one stage does in a step, per chunk and pass kind."""

    index: int
    passes: dict
    """(kind, chunk) → PassWork."""
    chunk_layers: tuple[int, ...]
    step_transfers: tuple[StepTransfer, ...]
    chunk_param_share: tuple[float, ...]
    """Fraction of the stage's gradient bytes each chunk owns (bucket readiness)."""
    fwd_compute_s: float
    """Forward compute of one micro-batch over all chunks (the parameter all-gather's overlap window)."""
    last_passes: dict = dataclasses.field(default_factory=dict)
    """(kind, chunk) → PassWork of the step's last micro-batch where it differs: without ZeRO-2's per-micro-batch
    reduce-scatter (workload.build.zero2_transfers: the last one is the step's gradient sync)."""


@dataclass(frozen=True, slots=True)
class SimWork:
    stages: tuple[StageProgramWork, ...]
    vpp: int
    num_microbatches: int
    p2p_s: dict
    """`F`/`B` → (seconds, latency, tiers) of one pipeline message (activation / gradient)."""
    optimizer_s: float
    optimizer_kernels: float
    slowdown: float
    """Calibration overlap_compute_slowdown (compute sharing the chip with overlapped communication)."""
    sync_launch: str = "hooks"
    """How the gradient buckets are launched (schedule.chunks.sync_launch_mode; programs.sync_launches)."""


def _sync_axis(axis: str) -> str:
    return {"pp_ends": "pp_ends"}.get(axis, axis)


class _Pricer:
    """Cached op and transfer prices through the closed form's own functions."""

    def __init__(self, pred: StepPrediction):
        self.pred, self.scn, self.cal = pred, pred.scenario, pred.calibration
        self.dev = capped_device(self.scn.system)  # a power cap slows the arithmetic, as in predict (cost.power)
        self._ops: dict = {}
        self._coll: dict = {}
        self._spans: dict = {}

    def op(self, op: Op) -> float:
        """GPU time of one execution."""
        return self._op(op)[0]

    def host(self, op: Op) -> float:
        """Host time to issue one execution (its kernel launches)."""
        return self._op(op)[1]

    def _op(self, op: Op) -> tuple:
        k = id(op)
        if k not in self._ops:
            self._ops[k] = (op_time_s(op, self.dev, self.cal), host_time_s(op, self.cal), op)
        return self._ops[k]

    def transfer(self, tr: Transfer):
        cost = _price(tr, self.scn, self.cal, self._spans, self._coll)
        return cost, transfer_span(self.scn, tr.axis).tiers


def _counts(items) -> Counter:
    out: Counter = Counter()
    for it, c in items:
        out[it] += c
    return out


def chunk_items(scn, kernel: str, st: StageWork, ranges: list[range]) -> list[tuple[Counter, Counter]]:
    """(op counts, transfer counts) per chunk of stage `st`; they add up to the stage's items exactly."""
    plan, model = scn.plan, scn.model
    n_chunks = len(ranges)
    weights = [len(r) for r in ranges] if sum(len(r) for r in ranges) else [1] * n_chunks
    ops = [Counter() for _ in ranges]
    xfs = [Counter() for _ in ranges]
    if model.arch == "transformer":
        kind_of = layer_kind_of(model)
        per_kind = {kind: _layer_work(scn, kernel, *kind) for kind in set(kind_of)}
        rerun = rerun_kind_counts(plan, ranges, kind_of)  # the layers each chunk's recompute runs in
        for j, r in enumerate(ranges):
            n_kind = Counter(kind_of[li] for li in r)
            for kind, n in n_kind.items():
                o, x = per_kind[kind]
                ops[j].update(dict(rerun_scaled(o, n, rerun[j].get(kind, 0))))
                xfs[j].update(dict(rerun_scaled(x, n, rerun[j].get(kind, 0))))
        first, last = st.index == 0, st.index == plan.head_stage
        f_end = end_rerun_share(plan)  # the MTP modules' recompute (none under the block method)
        for j, is_edge in ((0, first), (n_chunks - 1, last)):
            if is_edge:
                e_ops, e_xf = _embedding_work(scn, j == 0 and first, j == n_chunks - 1 and last)
                ops[j].update(dict(rerun_scaled(_counts(e_ops).items(), 1, f_end)))
                xfs[j].update(dict(rerun_scaled(_counts(e_xf).items(), 1, f_end)))
                emb = embedding_params(scn, j == 0 and first, j == n_chunks - 1 and last)
                if plan.comm_zero_stage == 3:
                    xfs[j].update(dict(_counts(zero3_transfers(plan, emb, 0.0))))
                elif zero2_per_microbatch(plan):
                    xfs[j].update(dict(_counts(zero2_transfers(plan, emb, 0.0))))
    # the stage's own items are the reference: spread any difference over the chunks by layer count
    total = sum(weights)
    # pipeline sends are messages between passes; overlapped ones (interleaving) also share their pass's compute
    # window with the other overlapped traffic, as in predict: they stay in the chunks' items for that
    ref_xf = _counts((t, c) for t, c in st.transfers if t.axis != "pp" or t.overlappable)
    for mine, ref in ((ops, _counts(st.ops)), (xfs, ref_xf)):
        have: Counter = Counter()
        for cnt in mine:
            have.update(cnt)
        for item in sorted(set(ref) | set(have), key=repr):  # a fixed order: the adds below round by it
            diff = ref.get(item, 0.0) - have.get(item, 0.0)
            if abs(diff) > 1e-9 * max(1.0, abs(ref.get(item, 0.0))):
                for j in range(n_chunks):
                    mine[j][item] += diff * weights[j] / total
    return list(zip(ops, xfs))


def _pair_hidden(ops: Counter, xfs: Counter, pr: _Pricer, cp: int, paired: float, share: float = 1.0
                 ) -> tuple[dict, dict]:
    """(hidden, traffic) per phase of a chunk's pass-pair traffic (the expert all-to-all with ep_overlap): what
    hides behind the merged pass of another micro-batch once every phase's own overlapped traffic has taken its
    share of the phase's matrix work (schedule.step.pass_pair_hidden_s, as predict), `paired` the stage's share of
    passes with a partner (schedule.step.paired_fraction: its warm-up and cool-down passes run alone). Every pass
    of the stage is priced at that mix, as predict prices the stage's mean pass."""
    gemm = {ph: 0.0 for ph in PAIR_PARTNERS}
    attn = {ph: 0.0 for ph in PAIR_PARTNERS}
    for op, c in ops.items():
        if c and op.phase in gemm:
            t = pr.op(op) * c
            if op.kind != "vector":
                gemm[op.phase] += t
            if T.is_attention_core(op):
                attn[op.phase] += t
    own = {ph: 0.0 for ph in gemm}
    own_attn = {ph: 0.0 for ph in gemm}
    own_share = {ph: 0.0 for ph in gemm}
    pair = {ph: 0.0 for ph in gemm}
    for tr, c in xfs.items():
        if not c or not tr.overlappable or tr.phase not in gemm:  # overlapped pipeline sends take their share too
            continue
        t = pr.transfer(tr)[0].time_s * c
        {"pass_pair": pair, "attention": own_attn, "share": own_share}.get(tr.hides_behind, own)[tr.phase] += t
    left = {ph: gemm[ph] - min(gemm[ph], own[ph] + min(own_attn[ph], attn[ph] * (cp - 1) / cp)
                               + min(own_share[ph], share * gemm[ph])) for ph in gemm}
    return pass_pair_hidden_s(pair, left, paired), pair


def _pass_work(kind: str, chunk: int, ops: Counter, xfs: Counter, pr: _Pricer, cp: int, slowdown: float,
               pair_hidden: tuple[dict, dict] | None = None, share: float = 1.0) -> PassWork:
    """One pass's work; `share`: the part of its phase's matrix work `share` traffic may hide behind (the mean
    micro-batch's (m − 1)/m where that traffic is played at its mean count, else all of it)."""
    phases = PASS_PHASES[kind]
    wgrad = kind in ("B", "W")

    def in_pass(op: Op) -> bool:
        if op.phase not in phases:
            return False
        if not wgrad or op.phase != "bwd":
            return True
        is_w = is_weight_gradient(op)
        return is_w == (kind == "W")

    kernels = 0.0
    gpu = {ph: 0.0 for ph in phases}
    host = {ph: 0.0 for ph in phases}
    host_syncs = {ph: 0.0 for ph in phases}
    gemm = {ph: 0.0 for ph in phases}
    attn = {ph: 0.0 for ph in phases}
    for op, c in ops.items():
        if c and in_pass(op):
            t = pr.op(op) * c
            gpu[op.phase] += t
            host[op.phase] += pr.host(op) * c
            host_syncs[op.phase] += op.host_syncs * c
            kernels += op.kernels * c
            if op.kind != "vector":
                gemm[op.phase] += t
            if T.is_attention_core(op):
                attn[op.phase] += t
    # a phase runs at the slower of the GPU's pace and the host's pace of issuing its kernels, and the GPU idles at
    # every host synchronisation until the host has issued work again (as predict)
    compute = sum(max(gpu[ph], host[ph]) + host_syncs[ph] * pr.cal.host_sync_s for ph in phases)
    blocking: list[tuple[float, int, Sync]] = []
    tail: list[Sync] = []
    hide = dict(gemm)
    attn_budget = {ph: t * (cp - 1) / cp for ph, t in attn.items()}
    share_budget = {ph: t * share for ph, t in gemm.items()}
    hidden_total = 0.0
    for order, (tr, c) in enumerate(sorted(xfs.items(), key=lambda kv: kv[0].name)):
        if not c or tr.phase not in phases or (tr.axis == "pp" and not tr.overlappable):
            continue
        grad_sync = "grad_reduce_scatter" in tr.name
        if wgrad and tr.phase == "bwd" and grad_sync != (kind == "W"):
            continue
        if kind == "W" and not grad_sync:
            continue
        cost, tiers = pr.transfer(tr)
        total = cost.time_s * c
        if tr.overlappable and tr.hides_behind == "pass_pair" and pair_hidden is not None:
            hid, traffic = pair_hidden
            hidden = hid[tr.phase] * total / traffic[tr.phase] if traffic[tr.phase] > 0 else 0.0
            hidden_total += hidden
            compute += slowdown * hidden
            tail += _exposed(tr, total - hidden, tiers)
        elif tr.overlappable:
            window = {"attention": attn_budget, "share": share_budget}.get(tr.hides_behind, hide)
            hidden = min(total, window.get(tr.phase, 0.0), hide.get(tr.phase, 0.0))
            hide[tr.phase] -= hidden
            if window is not hide:
                window[tr.phase] -= hidden
            hidden_total += hidden
            compute += slowdown * hidden
            tail += _exposed(tr, total - hidden, tiers)
        else:
            n = max(1, round(c))
            for j in range(n):
                blocking.append(((j + 0.5) / n, order, Sync(tr.name, tr.axis, total / n, cost.latency_s, tiers)))
    blocking.sort(key=lambda x: (x[0], x[1]))
    # kinds interleave in proportion to their counts; the compute splits evenly between consecutive collectives
    pos = [(k + 0.5) / len(blocking) for k in range(len(blocking))] + [1.0] * len(tail)
    edges = [0.0] + pos + [1.0]
    shares = tuple(b - a for a, b in zip(edges[:-1], edges[1:]))
    return PassWork(kind, chunk, compute, kernels, tuple(s for _, _, s in blocking) + tuple(tail), shares,
                    hidden_total)


AWAITED_AXES = ("cp", "ep", "ep_inter", "ep_intra", "etp", "dp", "edp")
"""Axes whose overlapped transfers can make a group of units meet (`awaited`)."""


def awaited(tr: Transfer) -> bool:
    """Whether a rank's own later work reads what an overlapped transfer brings — an expert exchange, a context-
    parallel KV exchange, a ZeRO-3 parameter gather — so its group meets even when the transfer hides entirely: a
    slow member delays the data everyone waits for. A weight-gradient reduction is not read before the step's end
    (the step's tail syncs it); tensor-parallel traffic stays inside a unit, pipeline messages are the engine's and
    a host copy is the rank's own."""
    return tr.axis in AWAITED_AXES and not tr.name.endswith(("zero2_grad_reduce_scatter", "zero3_grad_reduce_scatter"))


def _exposed(tr: Transfer, exposed_s: float, tiers: tuple[str, ...]) -> list[Sync]:
    """The tail collective an overlapped transfer leaves: its exposed part, or a rendezvous of its group (no cost)
    when it hid entirely and is `awaited`; nothing else."""
    if exposed_s > 1e-15:
        return [Sync(tr.name, tr.axis, exposed_s, 0.0, tiers)]
    return [Sync(tr.name, tr.axis, 0.0, 0.0, tiers)] if awaited(tr) else []


def _step_transfers(pr: _Pricer, st: StageWork, top: tuple[float, float], pp: int,
                    twin: StageWork | None = None) -> tuple[StepTransfer, ...]:
    """The most loaded rank's step transfers (what `predict` prices; `top` its (dense, expert) parameters), scaled to
    this stage's parameters (DualPipe: to the parameters of the rank's two stages, `st` and `twin`)."""
    dense = st.params - st.expert_params + (twin.params - twin.expert_params if twin is not None else 0.0)
    expert = st.expert_params + (twin.expert_params if twin is not None else 0.0)
    dense_ratio = dense / max(1e-30, top[0])
    expert_ratio = expert / top[1] if top[1] > 0 else 0.0
    out = []
    for tr, c in pr.pred.workload.step_transfers:
        if tr.axis == "pp_ends" and st.index not in (0, pp - 1):
            continue
        ratio = {"dp": dense_ratio, "edp": expert_ratio}.get(tr.axis, 1.0)
        if ratio <= 0:
            continue
        scaled = tr if ratio == 1.0 else dataclasses.replace(tr, message_bytes=tr.message_bytes * ratio)
        cost, tiers = pr.transfer(scaled)
        out.append(StepTransfer(tr.name, tr.op, tr.axis, scaled.message_bytes, cost.time_s * c, cost.latency_s * c,
                                tiers, tr.overlappable))
    return tuple(out)


def build_sim_work(pred: StepPrediction, schedule: str = "") -> SimWork:
    """Price every pass of every chunk of every stage (see module docstring) for the program `schedule`
    (schedule.sim.programs.SCHEDULES; "" for the plan's 1F1B or interleaving). zb-h1 prices B and W apart (zero
    bubble) instead of one BW pass; under dualpipe rank i's chunk 0 is stage i's work, its chunk 1 stage
    p − 1 − i's (DeepSeek-V3's two directions); under dualpipev a stage's two chunks are the arms of the V; both
    with whole and split backwards priced."""
    scn, wl = pred.scenario, pred.workload
    plan = scn.plan
    pr = _Pricer(pred)
    slowdown = pred.calibration.overlap_compute_slowdown
    vpp = plan.vpp if scn.model.arch == "transformer" else 1
    layer_ranges = plan_layer_ranges(scn.model, plan) if scn.model.arch == "transformer" \
        else [[range(st.layers)] for st in wl.stages]
    params, expert = step_rank_params(plan, wl.stages)  # the rank the workload's step transfers are sized for
    top = (params - expert, expert)
    kinds = ("F", "B", "W", "BW") if schedule in ("dualpipe", "dualpipev") else ("F", "B", "W") if schedule == "zb-h1" else ("F", "BW")
    stages = []
    share, dual = microbatch_share(plan), schedule in ("dualpipe", "dualpipev") or plan.dualpipe or plan.dualpipev
    for st, ranges in zip(wl.stages, layer_ranges):
        passes, last_passes = {}, {}
        paired = paired_fraction(st.index, plan.pp, plan.vpp, wl.num_microbatches, schedule, plan.interleave_group)
        for j, (ops, xfs) in enumerate(chunk_items(scn, pred.attention_kernel, st, ranges)):
            # `share` traffic (ZeRO-2's per-micro-batch reduce-scatter, count (m − 1)/m) played whole on every
            # micro-batch but the last, which runs none (the closed form prices the mean: schedule.step)
            # (DualPipe / DualPipeV number each direction's micro-batches apart: the mean there, as predict)
            last_xfs = Counter({tr: c for tr, c in xfs.items() if tr.hides_behind != "share" or dual})
            split = len(last_xfs) < len(xfs)
            if split:
                xfs = Counter({tr: c / share if tr.hides_behind == "share" else c for tr, c in xfs.items()})
            cap = share if dual else 1.0
            paired_traffic = any(tr.hides_behind == "pass_pair" and tr.overlappable for tr in xfs)
            pairs = _pair_hidden(ops, xfs, pr, plan.cp, paired, cap) if paired_traffic else None
            last_pairs = _pair_hidden(ops, last_xfs, pr, plan.cp, paired) if paired_traffic and split else None
            for kind in kinds:
                passes[(kind, j)] = _pass_work(kind, j, ops, xfs, pr, plan.cp, slowdown, pairs, cap)
                if split:
                    last_passes[(kind, j)] = _pass_work(kind, j, ops, last_xfs, pr, plan.cp, slowdown, last_pairs)
        fwd = sum(passes[("F", j)].compute_s for j in range(len(ranges)))
        stages.append(StageProgramWork(st.index, passes, tuple(len(r) for r in ranges),
                                       _step_transfers(pr, st, top, plan.pp),
                                       tuple(chunk_param_shares(scn, st.index, ranges)),
                                       fwd, last_passes))
    if schedule == "dualpipe":
        stages = _dualpipe_ranks(stages, wl.stages, pr, top, plan.pp)
    p2p = {}
    for st in wl.stages:
        for tr, _ in st.transfers:
            if tr.axis == "pp" and tr.phase in ("fwd", "bwd"):
                cost, tiers = pr.transfer(tr)
                p2p["F" if tr.phase == "fwd" else "B"] = (cost.time_s, cost.latency_s, tiers)
    opt_s = sum(max(pr.op(op), pr.host(op)) * c for op, c in wl.optimizer_ops)
    opt_k = sum(op.kernels * c for op, c in wl.optimizer_ops)
    return SimWork(tuple(stages), vpp, wl.num_microbatches, p2p, opt_s, opt_k, slowdown,
                   sync_launch_mode(plan, schedule or plan.schedule))


def _dualpipe_ranks(stages: list[StageProgramWork], wl_stages, pr: _Pricer, top: tuple[float, float],
                    pp: int) -> list[StageProgramWork]:
    """DualPipe ranks from per-stage work: rank i runs stage i as chunk 0 and stage p − 1 − i as chunk 1; its
    gradient sync carries both stages' parameters."""
    out = []
    for i in range(pp):
        a, b = stages[i], stages[pp - 1 - i]
        passes = {(k, 0): pw for (k, c), pw in a.passes.items() if c == 0}
        passes.update({(k, 1): dataclasses.replace(pw, chunk=1) for (k, c), pw in b.passes.items() if c == 0})
        pa, pb = wl_stages[i].params, wl_stages[pp - 1 - i].params
        share = (pa / (pa + pb), pb / (pa + pb)) if pa + pb > 0 else (0.5, 0.5)
        out.append(StageProgramWork(i, passes, a.chunk_layers + b.chunk_layers,
                                    _step_transfers(pr, wl_stages[i], top, pp, wl_stages[pp - 1 - i]), share,
                                    a.fwd_compute_s))
    return out


def num_buckets(message_bytes: float, bucket_bytes: float) -> int:
    """Gradient buckets of a stage's sync (DDP/Megatron fill buckets of `bucket_bytes` in backward order)."""
    return max(1, math.ceil(message_bytes / bucket_bytes)) if bucket_bytes > 0 else 1
