"""Budget 3 — synchronisation: sync points, waiting for the slowest, one slow node, bubble, failures, goodput.

- Sync points: every blocking (exposed) collective or point-to-point occurrence of the critical rank per step,
  plus the optimizer step (global gradient-norm all-reduce over all GPUs; none on a single GPU). A group of one
  rank waits for nobody (E[max of 1] = 0).
- Jitter: compute between consecutive sync points is split evenly (segment = compute / sync points); each
  sync point of a group of n ranks costs σ·E[max of n normals] with σ = cv·segment (analysis.jitter).
- One node x slow: synchronous training runs at the slowest rank's pace, so compute and the bubble (idle time
  made of other stages' compute) stretch by x: Δ = x·(compute + bubble).
- Failures: analysis.failures (Young 1974 / Daly 2006); the checkpoint is staged through host memory and goes over
  the front-end network to a storage system all writers share (analysis.checkpoint, catalog facility.yaml).
- Simulated (`AnalysisOptions.simulate`, on by default): the step event simulator (schedule.sim, docs/simulate.md)
  plays the same step with the same jitter (per-kernel cv = cv·√(kernels per segment of the simulator's own, whose
  groups meet at hidden collectives too, so each of its segments has the budget's cv; normal, lognormal above a
  per-kernel cv of 0.3, where a normal kernel time could go negative; a single GPU waits for nobody) and with one
  node x slow (the critical stage's first node); its numbers sit beside the closed form's in `simulated`, which
  lists the fields it computed (`from_simulator`). The closed-form fields keep their meaning; `goodput` uses the
  simulated jitter wait when there is one.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from narrowpath.analysis.checkpoint import CheckpointCost, checkpoint_cost
from narrowpath.analysis.context import Context, critical_stage
from narrowpath.analysis.failures import FailureBudget, daly_interval_s, failure_budget
from narrowpath.analysis.inventory import InventoryRow
from narrowpath.analysis.jitter import expected_wait_s
from narrowpath.analysis.options import AnalysisOptions
from narrowpath.catalog.facility import facility_for
from narrowpath.errors import NarrowpathError
from narrowpath.network.placement import axis_strides
from narrowpath.schedule.sim.faults import class_rates_per_s
from narrowpath.schedule.sim.run import CheckpointInputs, default_schedule, population_of, simulate
from narrowpath.schedule.sim.work import build_sim_work
from narrowpath.schedule.step import StepPrediction
from narrowpath.spec.noise import NoiseSpec
from narrowpath.spec.noise_parse import parse_noise


@dataclass(frozen=True, slots=True)
class SyncPoint:
    name: str
    group_size: int
    count_per_step: float
    wait_each_s: float
    wait_total_s: float


@dataclass(frozen=True, slots=True)
class SimulatedSync:
    """The synchronisation budget's numbers from the step event simulator (docs/simulate.md)."""

    source: str
    """Which simulator, and with what (`narrowpath simulate` equivalent)."""
    steps: int
    seed: int
    jitter_spec: str
    jitter_wait_s: float
    """Mean simulated step minus the noise-free simulated step, under the budget's jitter."""
    jitter_wait_p99_s: float
    slow_node_spec: str
    slow_node_step_s: float
    noise_free_step_s: float
    lost_time_s_by_cause: tuple[tuple[str, float], ...]
    """(cause, seconds per step) on the critical path, from the jitter run."""
    wait_s_by_collective: tuple[tuple[str, float], ...]
    """(collective kind, mean seconds a rank waits there per step), from the jitter run."""
    from_simulator: tuple[str, ...] = ("jitter_wait_s", "jitter_wait_p99_s", "slow_node_step_s",
                                       "noise_free_step_s", "lost_time_s_by_cause", "wait_s_by_collective",
                                       "goodput")
    """Fields of the budget that came from the simulator (`goodput` is the budget's own field)."""
    note: str = ""


@dataclass(frozen=True, slots=True)
class SyncBudget:
    sync_points_per_step: float
    points: tuple[SyncPoint, ...]
    jitter_cv: float
    jitter_method: str
    segment_s: float
    jitter_wait_s: float
    """Expected extra time per step waiting for the slowest participants."""
    slow_node_fraction: float
    slow_node_step_s: float
    bubble_s: float
    bubble_fraction: float
    failures: FailureBudget
    checkpoint: CheckpointCost
    goodput: float
    """Failure goodput × step / (step + jitter wait); the simulated jitter wait when `simulated` is set."""
    simulated: SimulatedSync | None = field(default=None)
    """The simulator's numbers (None when AnalysisOptions.simulate is off or it cannot play the plan)."""


def checkpoint_of(pred: StepPrediction, opts: AnalysisOptions) -> CheckpointCost:
    """Checkpoint write and restore of the job (analysis.checkpoint) on its system's facility."""
    return checkpoint_cost(pred, facility_for(pred.scenario.system), opts.storage_bw_bytes_per_s)


def checkpoint_inputs(pred: StepPrediction, noise: NoiseSpec) -> CheckpointInputs:
    """What the simulator's long run needs: the checkpoint's write and restore (analysis.checkpoint on the system's
    facility; the noise spec's `storage=` sets the shared store's bandwidth) and Daly's interval for the job's
    MTBF under the spec's failure rates."""
    f = noise.failures
    c = checkpoint_cost(pred, facility_for(pred.scenario.system), f.storage_bw_bytes_per_s or None)
    rate = sum(class_rates_per_s(f, population_of(pred.scenario)).values())
    interval = daly_interval_s(c.write_s, 1.0 / rate) if rate > 0 else f.horizon_s
    return CheckpointInputs(c.checkpoint_bytes, c.write_s, c.restore_s, interval)


def failures_of(pred: StepPrediction, opts: AnalysisOptions) -> FailureBudget:
    """Failure budget of the job with its checkpoint priced by analysis.checkpoint."""
    c = checkpoint_of(pred, opts)
    return failure_budget(pred.scenario.num_gpus, c.checkpoint_bytes, c.write_bw_bytes_per_s, c.write_s,
                          c.restore_s, opts.failures_per_gpu_hour, opts.restart_s)


def build_synchronisation(ctx: Context, inventory: tuple[InventoryRow, ...], opts: AnalysisOptions) -> SyncBudget:
    pred = ctx.pred
    blocking = [(r.name, r.group_size, r.count_per_step) for r in inventory if r.critical_path_s > 0]
    if ctx.num_gpus > 1:  # a single device waits for nobody
        blocking.append(("optimizer step (global grad-norm all-reduce)", ctx.num_gpus, 1.0))
    n_sync = sum(c for _, _, c in blocking)
    compute = pred.breakdown_s["compute"]
    seg = compute / n_sync if n_sync else compute
    rng = np.random.default_rng(opts.seed)
    points = []
    for name, n, c in blocking:
        w = expected_wait_s(opts.jitter_cv * seg, n, opts.jitter_method, rng, opts.num_samples)
        points.append(SyncPoint(name, n, c, w, w * c))
    wait = sum(p.wait_total_s for p in points)
    bubble = pred.breakdown_s["bubble"]
    slow_step = pred.step_time_s + opts.slow_node_fraction * (compute + bubble)
    fb = failures_of(pred, opts)
    step = pred.step_time_s
    sim = simulated_sync(pred, opts) if opts.simulate else None
    used_wait = sim.jitter_wait_s if sim is not None and sim.steps else wait
    return SyncBudget(n_sync, tuple(points), opts.jitter_cv, opts.jitter_method, seg, wait,
                      opts.slow_node_fraction, slow_step, bubble, bubble / step, fb, checkpoint_of(pred, opts),
                      fb.goodput * step / (step + max(0.0, used_wait)), sim)


SIM_STEPS = 8
"""Steps the budget simulates under jitter (the mean wait's standard error is well under 1 % of it)."""


def kernels_per_segment(pred: StepPrediction) -> float:
    """Kernels between two consecutive meeting points of the simulator's first rank: its passes' kernels over their
    segments of compute (a pass is split by its blocking collectives, the exposed tails of overlapped ones and the
    rendezvous of hidden ones its later work reads; schedule.sim.work). The closed form's segment runs between
    exposed collectives only; the simulator's groups also meet at hidden ones (ZeRO-3 gathers, expert exchanges),
    so a per-kernel cv sized on the closed form's segments would give each of the simulator's far more spread:
    100x the budget's wait on an 8-GPU ZeRO-3 step whose every collective hides."""
    work = build_sim_work(pred, default_schedule(pred.scenario))
    passes = work.stages[0].passes.values()
    segments = sum(sum(1 for share in p.shares if share > 0) for p in passes)
    return max(1.0, sum(p.kernels for p in passes) / segments) if segments else 1.0


def simulated_sync(pred: StepPrediction, opts: AnalysisOptions) -> SimulatedSync:
    """Play the step with the budget's jitter and with one node slow (module docstring)."""
    scn = pred.scenario
    crit = critical_stage(pred)  # the critical pipeline rank (under DualPipe: of two stages)
    cv_kernel = opts.jitter_cv * float(np.sqrt(kernels_per_segment(pred)))
    dist = "normal" if cv_kernel <= 0.3 else "lognormal"
    jitter = f"jitter={dist}:{cv_kernel:.6g}"
    node = (axis_strides(scn.plan)["pp"] * crit) // scn.system.gpus_per_node if scn.plan.pp > 1 else 0
    slow = f"slow-node={node}:{opts.slow_node_fraction:g}"
    source = (f"narrowpath.schedule.sim.simulate (narrowpath simulate --noise {jitter} --steps {SIM_STEPS} "
              f"--seed {opts.seed}; --noise {slow} --steps 1)")
    try:
        jr = simulate(scn, parse_noise([jitter]) if opts.jitter_cv > 0 else None, steps=SIM_STEPS, seed=opts.seed,
                      calibration=pred.calibration)
        sr = simulate(scn, parse_noise([slow]) if opts.slow_node_fraction > 0 else None, steps=1,
                      calibration=pred.calibration)
    except NarrowpathError as exc:  # a plan the simulator cannot play: the closed form stands alone
        return SimulatedSync(source, 0, opts.seed, jitter, float("nan"), float("nan"), slow, float("nan"),
                             float("nan"), (), (), (), f"not simulated: {exc}")
    # a single device waits for nobody: the spread of its own step is noise, not a wait (as the closed form)
    alone = scn.num_gpus <= 1
    waits = np.zeros(SIM_STEPS) if alone else jr.step_times_s - jr.noise_free_step_time_s
    lost = () if alone else tuple(jr.lost_time_s_by_cause.items())  # nor any time lost waiting, by any cause
    return SimulatedSync(source, SIM_STEPS, opts.seed, jitter, float(waits.mean()), float(np.percentile(waits, 99)),
                         slow, float(sr.stats()["mean"]), jr.noise_free_step_time_s,
                         lost, () if alone else tuple(jr.waits_s.items()))
