"""Failures over a long horizon: interruptions by component class, and what each costs a synchronous job.

An event simulation over wall time, replicated with the run's seed. Failures of each class arrive as a Poisson
process (components × 1/MTBF; software failures scale with the job's GPUs); any one stops the whole job, which
notices after `detect_s`, relaunches (`restart_s`), reads the last checkpoint back (`restore_s`: analysis.checkpoint, over the
storage every reader shares) and redoes the training since that checkpoint. Checkpoints are written every
`interval_s` of training, blocking (`write_s`); a failure during a write loses that write.
Planned maintenance (every `maintenance_every_s`) writes a checkpoint first, then restarts: no rework. A failure
while the job is down restarts the relaunch; maintenance due then is taken inside the downtime (both counted:
failures happen on the machine's clock, not the job's). Training progresses at the simulated mean step time.

Reported: interruptions per class, the wall time lost per cause, the effective training-time ratio (time spent
on steps that are kept, over wall time; the Llama 3 paper's "effective training time") and goodput (the same
kept work valued at the noise-free step time, so slow steps count as lost too).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from narrowpath.errors import SimulationError
from narrowpath.spec.noise import Failures

LOSS_CAUSES = ("failure rework", "failure detection", "restart", "checkpoint reload", "checkpoint writes",
               "planned maintenance")


@dataclass(frozen=True, slots=True)
class Population:
    """How many components of each class can fail."""

    gpu: int
    node: int
    link: int
    switch: int

    def count(self, cls: str) -> int:
        return {"gpu": self.gpu, "node": self.node, "link": self.link, "switch": self.switch,
                "software": self.gpu}[cls]


@dataclass(frozen=True, slots=True)
class LongRun:
    horizon_s: float
    replications: int
    interruptions_by_class: dict
    """Mean unexpected interruptions per class over the horizon."""
    planned_interruptions: float
    interruptions_sd: float
    """Standard deviation of the total unexpected count across replications."""
    checkpoint_interval_s: float
    checkpoint_write_s: float
    reload_s: float
    lost_s: dict
    """Mean wall seconds lost per cause (LOSS_CAUSES) over the horizon."""
    effective_training_time_ratio: float
    goodput: float
    steps_kept: float


def class_rates_per_s(f: Failures, pop: Population) -> dict[str, float]:
    """Interruptions per second of the whole job from each component class (components / MTBF)."""
    return {c: pop.count(c) / (h * 3600.0) for c, h in f.mtbf_h}


MAX_EVENTS = 2_000_000
"""Events (failures, maintenance windows, checkpoints) all replications of a long run may expect: beyond, the run is
refused rather than left to loop (an MTBF typed in seconds as hours, a maintenance every microsecond)."""


def expected_events(f: Failures, rates: np.ndarray, interval_s: float, replications: int) -> float:
    """Failures, maintenance windows and checkpoints the replications expect over the horizon."""
    per_s = float(rates.sum()) + (1.0 / f.maintenance_every_s if f.maintenance_every_s > 0 else 0.0) \
        + (1.0 / interval_s if interval_s > 0 else 0.0)
    return replications * f.horizon_s * per_s


def book(lost: dict, phases: list[tuple[str, float]], elapsed: float) -> None:
    """Add the first `elapsed` seconds of a downtime made of `phases` ((cause, seconds) in order) to `lost`."""
    for cause, seconds in phases:
        part = min(seconds, max(0.0, elapsed))
        lost[cause] += part
        elapsed -= part


def _one(rng: np.random.Generator, f: Failures, rates: np.ndarray, classes: tuple[str, ...], interval_s: float,
         write_s: float, reload_s: float) -> tuple[dict, int, dict, float]:
    """One horizon: (interruptions per class, planned ones, wall seconds lost per cause, training seconds kept).
    Every second of the horizon is booked once — kept training, or a cause — so the losses and the kept time add
    up to the horizon."""
    horizon = f.horizon_s
    total_rate = float(rates.sum())
    draw = (lambda: rng.exponential(1.0 / total_rate)) if total_rate > 0 else (lambda: np.inf)
    t, saved, pending = 0.0, 0.0, 0.0
    lost = dict.fromkeys(LOSS_CAUSES, 0.0)
    counts = dict.fromkeys(classes, 0)
    planned = 0
    next_fail = draw()
    next_maint = f.maintenance_every_s if f.maintenance_every_s > 0 else np.inf

    def fail() -> None:
        counts[classes[int(rng.choice(len(classes), p=rates / total_rate))]] += 1

    def downtime(start: float, phases: list[tuple[str, float]]) -> float:
        """The job down from `start` through `phases`: a failure then restarts the relaunch (it is seen at once; one
        during the detection of another is covered by the relaunch under way), a maintenance window due is taken
        inside the downtime; both are counted. Only the time that elapses before the horizon is booked."""
        nonlocal next_fail, next_maint, planned
        end = start + sum(d for _, d in phases)
        relaunch = [("restart", f.restart_s), ("checkpoint reload", reload_s)]
        while min(next_fail, next_maint) < min(end, horizon):
            if next_fail <= next_maint:
                fail()
                if next_fail + f.restart_s + reload_s > end:
                    book(lost, phases, next_fail - start)
                    start, phases, end = next_fail, relaunch, next_fail + f.restart_s + reload_s
                next_fail += draw()
            else:
                planned += 1
                next_maint += f.maintenance_every_s
        book(lost, phases, min(end, horizon) - start)
        return end

    while t < horizon:
        event = min(next_fail, next_maint, horizon, t + interval_s - pending)
        pending += event - t
        t = event
        if t >= horizon:
            break
        if t == next_fail:
            fail()
            lost["failure rework"] += pending
            pending = 0.0
            next_fail = t + draw()
            t = downtime(t, [("failure detection", f.detect_s), ("restart", f.restart_s),
                             ("checkpoint reload", reload_s)])
        elif t == next_maint:
            planned += 1
            saved += pending
            pending = 0.0
            next_maint += f.maintenance_every_s
            t = downtime(t, [("planned maintenance", write_s + f.restart_s + reload_s)])
        else:  # checkpoint due: blocking write; a failure during it loses the write
            if next_fail < min(t + write_s, horizon):
                lost["checkpoint writes"] += next_fail - t
                t = next_fail
                continue
            lost["checkpoint writes"] += min(write_s, horizon - t)
            t += write_s
            if t > horizon:  # the write was not done when the horizon ended: nothing saved by it
                break
            saved += pending
            pending = 0.0
    return counts, planned, lost, min(saved + pending, horizon)


def long_run(f: Failures, pop: Population, write_s: float, restore_s: float, interval_s: float,
             mean_step_s: float, noise_free_step_s: float, rng: np.random.Generator, replications: int = 20
             ) -> LongRun:
    """Replicate the horizon `replications` times (module docstring); `write_s`/`restore_s` of one checkpoint."""
    by_class = class_rates_per_s(f, pop)
    classes = tuple(by_class)
    rates = np.array([by_class[c] for c in classes]) if classes else np.zeros(0)
    interval = f.checkpoint_interval_s or interval_s
    events = expected_events(f, rates, interval, replications)
    if events > MAX_EVENTS:
        raise SimulationError(f"noise: the long run would play ~{events:,.0f} failures, maintenance windows and "
                              f"checkpoints over {replications} replications of {f.horizon_s:g} s (at most "
                              f"{MAX_EVENTS:,}); check the MTBFs (hours per component), the maintenance period, the "
                              "checkpoint interval and the horizon")
    totals: dict = dict.fromkeys(classes, 0.0)
    lost_sum = dict.fromkeys(LOSS_CAUSES, 0.0)
    planned = useful = 0.0
    per_rep = []
    for _ in range(replications):
        counts, pl, lost, u = _one(rng, f, rates, classes, interval, write_s, restore_s)
        for c in classes:
            totals[c] += counts[c] / replications
        for k in LOSS_CAUSES:
            lost_sum[k] += lost[k] / replications
        planned += pl / replications
        useful += u / replications
        per_rep.append(sum(counts.values()))
    ettr = useful / f.horizon_s
    return LongRun(f.horizon_s, replications, totals, planned, float(np.std(per_rep)), interval, write_s, restore_s,
                   lost_sum, ettr, min(1.0, ettr * noise_free_step_s / mean_step_s), useful / mean_step_s)
