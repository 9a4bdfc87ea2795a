"""Account 3 — overlap: hidden versus exposed time per overlappable transfer, and what the overlap really buys.

Per row: hidden = total − exposed (core model); the hidden part slows the compute it shares the chip with by the
calibration's `overlap_compute_slowdown` s (SMs and HBM bandwidth taken by the communication kernels), so the net
saving is hidden·(1 − s). For data-parallel rows the core model already folds that slowdown into `exposed_s`; a 1F1B
sync's rows also count what the cool-down's backwards on the stages below hid (`sync_drain_hidden_s`: no slowdown).
The serialised step (every transfer exposed, no slowdown) re-runs the closed-form pipeline formula
(schedule.pipeline) with each stage's per-micro-batch time raised by the critical stage's per-micro-batch net
saving (assumption: stages are alike), then adds the data-parallel saving.
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.analysis.context import Context
from narrowpath.schedule.pipeline import pipeline_time_s
from narrowpath.schedule.step import is_grad_sync


@dataclass(frozen=True, slots=True)
class OverlapRow:
    name: str
    axis: str
    phase: str
    total_s: float
    hidden_s: float
    exposed_s: float
    compute_slowdown_s: float
    """Extra compute time caused by running the hidden part concurrently."""
    net_saving_s: float
    """hidden_s − compute_slowdown_s."""


@dataclass(frozen=True, slots=True)
class OverlapAccount:
    rows: tuple[OverlapRow, ...]
    step_s: float
    serialised_step_s: float
    """Step time with every transfer exposed and no sharing slowdown."""
    hidden_s: float
    compute_slowdown_s: float

    @property
    def reduction_s(self) -> float:
        return self.serialised_step_s - self.step_s

    @property
    def reduction_fraction(self) -> float:
        return self.reduction_s / self.serialised_step_s if self.serialised_step_s else 0.0


def build_overlap(ctx: Context) -> OverlapAccount:
    pred = ctx.pred
    slow = pred.calibration.overlap_compute_slowdown
    overlappable = {tr.name for st in pred.workload.stages for tr, _ in st.transfers if tr.overlappable}
    overlappable |= {tr.name for tr, _ in pred.workload.step_transfers if tr.overlappable}
    rows = []
    stage_net, step_net = 0.0, 0.0
    # a 1F1B sync's rows carry the step's exposure; before the cool-down hid `drain` of it, the binding stage's own
    # (schedule.step._staged_sync): that part hides behind other ranks' backwards and slows no compute
    drain = pred.sync_drain_hidden_s
    sync = [t for t in pred.transfers if t.phase == "step" and is_grad_sync(t)]
    sync_exp, sync_tot = sum(t.exposed_s for t in sync), sum(t.total_s for t in sync)
    for t in pred.transfers:
        if t.name not in overlappable:
            continue
        if t.phase == "step":
            own = t.exposed_s
            if drain > 0 and is_grad_sync(t):  # its share of the drain: by exposure, or by size if none is left
                own += drain * (t.exposed_s / sync_exp if sync_exp > 0 else t.total_s / sync_tot)
            # own = total − hidden + slow·hidden  (schedule.step)
            hidden = (t.total_s - own) / (1.0 - slow) if slow < 1 else 0.0
            hidden = max(0.0, min(hidden, t.total_s))
            slowdown = slow * hidden
            hidden += max(0.0, own - t.exposed_s)
            exposed = t.total_s - hidden
            step_net += hidden - slowdown
        else:
            hidden = t.total_s - t.exposed_s
            slowdown = slow * hidden
            exposed = t.exposed_s
            stage_net += hidden - slowdown
        rows.append(OverlapRow(t.name, t.axis, t.phase, t.total_s, hidden, exposed, slowdown, hidden - slowdown))
    m = pred.workload.num_microbatches
    per_mb = stage_net / m
    totals = [s.total_s + per_mb for s in pred.stages]
    plan = pred.scenario.plan
    old = pipeline_time_s([s.total_s for s in pred.stages], m, plan.vpp, group=plan.interleave_group)
    serial = pred.step_time_s + (pipeline_time_s(totals, m, plan.vpp, group=plan.interleave_group) - old) + step_net
    return OverlapAccount(tuple(rows), pred.step_time_s, serial, sum(r.hidden_s for r in rows),
                          sum(r.compute_slowdown_s for r in rows))
