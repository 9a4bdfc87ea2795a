"""`simulate`: play N training steps of a scenario as events, with noise and faults; the facade of the simulator.

The noise-free step is played first with one unit per stage (every rank alike: symmetry); with per-step noise the
job is played with every unit, the same seed giving the same result bit for bit (one `numpy.random.Generator`,
drawn in program order).
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from narrowpath.errors import SimulationError
from narrowpath.network.fabric import fabric_for
from narrowpath.schedule.sim.engine import StepEngine
from narrowpath.schedule.sim.faults import LOSS_CAUSES, LongRun, Population, long_run
from narrowpath.schedule.sim.layout import build_layout
from narrowpath.schedule.sim.perturb import Perturbation
from narrowpath.schedule.sim.programs import build_programs, check_dualpipe, check_dualpipev
from narrowpath.schedule.sim.record import Event, Recorder
from narrowpath.schedule.sim.tail import step_tail
from narrowpath.schedule.sim.work import build_sim_work
from narrowpath.schedule.step import StepPrediction, predict
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.noise import NoiseSpec
from narrowpath.spec.plan import SPLIT_DEFAULTS
from narrowpath.spec.scenario import Scenario

SLACK = "slack (delays off the critical path)"
MAX_PASSES = 2_000_000
"""Most passes a step may have (a few seconds of playing); beyond, the closed form is the tool."""
MAX_LANES = 4096
"""Steps are played side by side up to this many units per stage array (numpy work per event vs its overhead)."""


@dataclass(frozen=True, slots=True)
class CheckpointInputs:
    """What the long-horizon run needs that the analysis stage computes (analysis.checkpoint, failures)."""

    checkpoint_bytes: float
    write_s: float
    """A blocking checkpoint write: staging through host memory and the transfer every writer shares."""
    restore_s: float
    """Reading it back after a failure."""
    interval_s: float
    """Used when the noise spec does not set `checkpoint-every`."""


@dataclass(frozen=True, slots=True)
class SimResult:
    prediction: StepPrediction
    seed: int
    steps: int
    schedule: str
    step_times_s: np.ndarray
    noise_free_step_time_s: float
    """The simulator's own step without noise (the reference for schedules)."""
    lost_time_s_by_cause: dict
    """Mean seconds per step each cause added on the critical path; with faults, the long run's losses too."""
    waits_s: dict
    """Mean seconds per step a rank waits at each collective kind."""
    slowest: tuple
    """(first rank of the unit, stage, steps it arrived last at the step barrier, mean lead over the median s)."""
    long_run: LongRun | None
    noise: NoiseSpec
    units_per_stage: int
    events: tuple[Event, ...] = field(default=())

    @property
    def closed_form_step_time_s(self) -> float:
        return self.prediction.step_time_s

    def stats(self) -> dict:
        t = self.step_times_s
        return {"mean": float(t.mean()), "p50": float(np.percentile(t, 50)), "p90": float(np.percentile(t, 90)),
                "p99": float(np.percentile(t, 99)), "max": float(t.max())}

    @property
    def goodput(self) -> float:
        """Useful work (at the noise-free step time) over wall time: the long run's with faults, else the ratio of
        the noise-free to the mean simulated step; at most 1 (a sample of steps that ran faster than the noise-free
        one, or the rounding of equal ones, does no more than the work it does)."""
        if self.long_run is not None:
            return min(1.0, self.long_run.goodput)
        return min(1.0, self.noise_free_step_time_s / float(self.step_times_s.mean()))


def default_schedule(scn: Scenario) -> str:
    if scn.plan.dualpipe or scn.plan.dualpipev:
        return scn.plan.schedule
    return "interleaved" if scn.plan.vpp > 1 else "1f1b"


def p2p_mode(pred: StepPrediction, schedule: str) -> str:
    """How pipeline messages behave: ZB-H1 posts its receives ahead (eager sends, which its bubble relies on); an
    interleaved schedule whose workload overlaps pipeline sends with compute (Megatron-Core overlap_p2p_comm)
    sends asynchronously; otherwise NCCL's rendezvous (Megatron's blocking batched send/recv)."""
    if schedule in ("zb-h1", "dualpipe", "dualpipev"):  # DualPipe(V) posts asynchronous isend / irecv
        return "eager"
    overlapped = any(tr.axis == "pp" and tr.overlappable for st in pred.workload.stages for tr, _ in st.transfers)
    return "async" if schedule == "interleaved" and overlapped else "rendezvous"


def population_of(scn: Scenario) -> Population:
    """Components that can fail: GPUs, servers, scale-out links (one NIC and cable per GPU, rail-optimised) and
    fabric switches (the generated fat tree's leaves plus half as many spines: a two-level folded Clos)."""
    gpus = scn.num_gpus
    nodes = -(-gpus // scn.system.gpus_per_node)
    leaves = fabric_for(scn.system, gpus).fat_tree().num_leaves if nodes > 1 else 0
    return Population(gpus, nodes, gpus if nodes > 1 else 0, leaves + -(-leaves // 2))


def simulate(scenario: Scenario, noise: NoiseSpec | None = None, *, steps: int = 20, seed: int = 0,
             schedule: str | None = None, exact: bool = False, timeline_ranks: tuple[int, ...] = (),
             timeline_steps: int = 2,
             checkpoint: CheckpointInputs | Callable[[StepPrediction, NoiseSpec], CheckpointInputs] | None = None,
             calibration: Calibration | None = None) -> SimResult:
    """Simulate `steps` steps (see module docstring). `exact` draws kernel noise member by member everywhere.
    `checkpoint` (needed with failures): the checkpoint's size, bandwidth and interval, or a function of the
    prediction and the noise that gives them (`analysis.synchronisation.checkpoint_inputs`)."""
    noise = noise or NoiseSpec()
    if steps < 1:
        raise SimulationError(f"--steps: must be >= 1, got {steps}")
    if seed < 0:
        raise SimulationError(f"--seed: must be >= 0, got {seed}")
    if schedule == "dualpipe":
        if scenario.plan.vpp > 1:
            raise SimulationError(f"--schedule dualpipe: needs one chunk per stage, the plan has vpp="
                                  f"{scenario.plan.vpp}")
        check_dualpipe(scenario.plan.pp, scenario.plan.num_microbatches, "--schedule dualpipe")
    if schedule == "dualpipev":
        check_dualpipev(scenario.plan.pp, scenario.plan.num_microbatches, "--schedule dualpipev")
        if scenario.plan.vpp != 2:
            raise SimulationError(f"--schedule dualpipev: runs two chunks per stage (a V), the plan has vpp="
                                  f"{scenario.plan.vpp}: give --vpp 2")
    if schedule == "interleaved" and scenario.plan.vpp == 1:
        schedule = "1f1b"  # what build_programs plays for one chunk: say so
    own = scenario.plan.pipeline_schedule if scenario.plan.pipeline_schedule in ("dualpipe", "dualpipev") else "auto"
    want = schedule if schedule in ("dualpipe", "dualpipev") else "auto"
    if want != own and scenario.plan.pp > 1 and schedule is not None:
        # DualPipe(V) changes what a rank holds and syncs, not only the order: price the plan that runs it (a chunk
        # layout written for Megatron's placement means other stages on a V, and back: the split is automatic)
        split = SPLIT_DEFAULTS if "dualpipev" in (want, own) else {}
        if split and scenario.plan.custom_split:
            raise SimulationError(f"--schedule {schedule}: the plan's layer split is laid out for "
                                  f"{'the V' if own == 'dualpipev' else 'Megatron placement'}; give the plan with "
                                  f"--pipeline-schedule {want} and its own split, or drop the split")
        scenario = dataclasses.replace(scenario, plan=dataclasses.replace(scenario.plan, pipeline_schedule=want,
                                                                          vp_group=0 if want != "auto" else
                                                                          scenario.plan.vp_group, **split))
    pred = predict(scenario, calibration)
    scn = pred.scenario
    passes = 2 * scn.plan.pp * scn.plan.vpp * pred.workload.num_microbatches
    if passes > MAX_PASSES:
        raise SimulationError(f"the step has {passes:,} pipeline passes (pp·vpp·2 per micro-batch); the simulator "
                              f"plays each one and stops at {MAX_PASSES:,}: fewer micro-batches (gbs)")
    schedule = schedule or default_schedule(scn)
    work = build_sim_work(pred, schedule)
    mode = p2p_mode(pred, schedule)
    programs = build_programs(schedule, scn.plan.pp, work.vpp, work.num_microbatches, mode == "async",
                              scn.plan.vp_group if schedule == "interleaved" else 0)
    bucket = scn.plan.bucket_bytes
    rng = np.random.default_rng(seed)

    sym = build_layout(scn, symmetric=True)
    noisy = noise.step_noise
    layout = build_layout(scn, symmetric=False) if noisy else sym
    _check_ranks(timeline_ranks, scn.num_gpus)
    recorder = Recorder(layout, tuple(timeline_ranks), timeline_steps) if timeline_ranks else None
    base_eng = StepEngine(work, programs, sym, scn.plan.cp, None, recorder=None if noisy else recorder, p2p_mode=mode)
    states, base_waits = base_eng.run_pipeline(rng, 0.0)
    base = float(step_tail(base_eng, states, rng, bucket)[0][0])

    lost: Counter = Counter()
    waits: Counter = Counter()
    last: Counter = Counter()
    lead: Counter = Counter()
    if noisy:
        pert = Perturbation(noise, scn, layout, base)
        pert.draw_phases(rng)
        batch = 1 if (noise.interference or recorder is not None) else max(1, min(steps, MAX_LANES // layout.num_units))
        eng = StepEngine(work, programs, layout, scn.plan.cp, pert, exact=exact, recorder=recorder, p2p_mode=mode,
                         batch=batch)
        times = np.empty(steps)
        t0, k = 0.0, 0
        while k < steps:
            n = min(batch, steps - k)
            if n != eng.batch:
                eng.set_batch(n)
            pert.set_batch(n)
            pert.new_step(rng)
            states, w = eng.run_pipeline(rng, t0)
            ends, cz, who, ahead = step_tail(eng, states, rng, bucket)
            times[k:k + n] = ends
            t0 += float(ends.sum())
            waits.update({key: v * n for key, v in w.items()})
            for c, v in zip(pert.causes, cz):
                lost[c] += float(v.sum())
            lost[SLACK] += float((ends - base).sum() - cz.sum())
            for s, u in enumerate(who):
                last[u] += 1
                lead[u] += float(ahead[s])
            k += n
    else:
        if recorder is not None:
            t0 = base
            for _ in range(1, min(steps, timeline_steps)):
                more, _ = base_eng.run_pipeline(rng, t0)
                step_tail(base_eng, more, rng, bucket)
                t0 += base
        times = np.full(steps, base)
        waits.update({k: v * steps for k, v in base_waits.items()})
    lost_per_step = {k: v / steps for k, v in lost.items()}
    waits_per_step = {k: v / steps for k, v in waits.items()}
    slowest = tuple((int(layout.unit_ranks[s, u, 0]), s, n, lead[(s, u)] / n) for (s, u), n in last.most_common(5))
    lr = None
    if noise.failures is not None:
        if checkpoint is None:
            raise SimulationError("faults need the checkpoint size and interval (CheckpointInputs)")
        ck = checkpoint(pred, noise) if callable(checkpoint) else checkpoint
        lr = long_run(noise.failures, population_of(scn), ck.write_s, ck.restore_s, ck.interval_s,
                      float(times.mean()), base, rng)
        if lr.steps_kept > 0:
            for k in LOSS_CAUSES:
                if lr.lost_s[k] > 0:
                    lost_per_step[k] = lr.lost_s[k] / lr.steps_kept
    return SimResult(pred, seed, steps, schedule, times, base, lost_per_step, waits_per_step, slowest, lr, noise,
                     layout.num_units, tuple(recorder.events) if recorder is not None else ())


def _check_ranks(ranks: tuple[int, ...], num_gpus: int) -> None:
    for r in ranks:
        if not 0 <= r < num_gpus:
            raise SimulationError(f"--timeline-ranks: rank {r} does not exist (the job has {num_gpus} GPUs)")
