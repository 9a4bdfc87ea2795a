"""Shared pieces every account reads: the critical stage, per-op times and the group span of each axis.

All numbers come from the core model's public pieces (StepPrediction, the workload, `op_time_s`,
`group_span`) — nothing is re-derived a second way.
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.cost.power import capped_device
from narrowpath.cost.roofline import bound, op_time_s
from narrowpath.network.placement import GroupSpan, group_span
from narrowpath.schedule.step import StepPrediction, dualpipe_ranks, sync_axis
from narrowpath.workload.items import Op

AXES = ("tp", "cp", "ep", "dp", "pp")


@dataclass(frozen=True, slots=True)
class OpRow:
    """One op of the critical stage's rank over a whole step."""

    op: Op
    count_per_step: float
    """Executions per step (per micro-batch count × micro-batches, or once-per-step count)."""
    time_each_s: float
    """Roofline time of one execution (cost.roofline.op_time_s)."""
    bound: str
    """`compute` or `memory`."""

    @property
    def total_s(self) -> float:
        return self.time_each_s * self.count_per_step


@dataclass(frozen=True, slots=True)
class Context:
    pred: StepPrediction
    critical_stage: int
    ops: tuple[OpRow, ...]
    """Per-micro-batch ops of the critical stage (× micro-batches) then the optimizer ops."""
    spans: dict[str, GroupSpan]
    """Group span of every parallel axis with degree > 1."""

    @property
    def num_gpus(self) -> int:
        return self.pred.scenario.num_gpus

    @property
    def useful_flop_per_rank(self) -> float:
        """Model FLOPs per step per GPU (the useful-FLOP convention of the core model: 3 × forward matmuls +
        attention, no recompute)."""
        return self.pred.model_flop_per_step / self.num_gpus


def critical_times(pred: StepPrediction) -> list:
    """Per-micro-batch times of each pipeline rank: its stage's, or under DualPipe the mean of its two stages'
    (schedule.step.dualpipe_ranks)."""
    return dualpipe_ranks(list(pred.stages)) if pred.scenario.plan.dualpipe else list(pred.stages)


def critical_stage(pred: StepPrediction) -> int:
    """Index of the pipeline rank with the largest per-micro-batch time (the one schedule.step calls critical): a
    stage, or under DualPipe the rank that runs stages i and p − 1 − i."""
    totals = [s.total_s for s in critical_times(pred)]
    return max(range(len(totals)), key=lambda i: totals[i])


def rank_stages(pred: StepPrediction, rank: int) -> list[tuple[int, float]]:
    """(stage, share of the step's micro-batches) a pipeline rank runs: its own stage for all of them, or under
    DualPipe stage i and stage p − 1 − i for half each."""
    p = pred.scenario.plan.pp
    if pred.scenario.plan.dualpipe:
        return [(rank, 0.5), (p - 1 - rank, 0.5)]
    return [(rank, 1.0)]


def build_context(pred: StepPrediction) -> Context:
    scn = pred.scenario
    dev, cal = capped_device(scn.system), pred.calibration
    crit = critical_stage(pred)
    m = pred.workload.num_microbatches
    cache: dict[int, tuple[float, str]] = {}

    def row(op: Op, n: float) -> OpRow:
        if id(op) not in cache:
            cache[id(op)] = (op_time_s(op, dev, cal), bound(op, dev, cal))
        t, b = cache[id(op)]
        return OpRow(op, n, t, b)

    rows = [row(op, c * m * share) for st, share in rank_stages(pred, crit) for op, c in pred.workload.stages[st].ops]
    rows += [row(op, c) for op, c in pred.workload.optimizer_ops]
    # the groups the step's transfers run on (schedule.step.sync_axis: with context parallelism the gradient sync
    # spans dp × cp)
    spans = {ax: group_span(scn.plan, scn.system, sync_axis(ax, scn.plan.cp)) for ax in AXES
             if getattr(scn.plan, ax) > 1}
    return Context(pred, crit, tuple(rows), spans)


def components(ctx: Context) -> dict[str, float]:
    """The step split into paths: breakdown entries, with compute split into the time the GPU waits for the host
    (the critical rank's host waits: kernels issued slower than they run, host synchronisations; schedule.step) and
    the rest by the roof that limits each op."""
    b = dict(ctx.pred.breakdown_s)
    compute = b.pop("compute")
    host = ctx.pred.host_wait_s
    gpu = compute - host
    mem = sum(r.total_s for r in ctx.ops if r.bound == "memory" and r.op.phase != "optimizer")
    mat = sum(r.total_s for r in ctx.ops if r.bound == "compute" and r.op.phase != "optimizer")
    mem_part = gpu * mem / (mem + mat) if mem + mat else 0.0
    return {"matrix_compute": gpu - mem_part, "hbm_bound_compute": mem_part, "host_wait": host, **b}
