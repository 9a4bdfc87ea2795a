"""Price plans one by one with `predict` (in worker processes when asked): the search's exact path.

Used where the bulk path does not reach: every plan of a recurrent (LSTM) model's small space, the energy of the
plans an energy-ranked search must compare (the analysis energy ledger needs a whole prediction), and the plans a
search shows. Worker processes ignore SIGINT and are terminated the moment the search is left early (Ctrl-C,
SIGTERM turned into an exception by the CLI, an error), so no worker outlives it.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable

from narrowpath.analysis.scaling import ledger_energy_j
from narrowpath.errors import NarrowpathError
from narrowpath.schedule.step import StepPrediction, predict
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.plan import Plan
from narrowpath.spec.scenario import Scenario
from narrowpath.search.table import replace_unchecked

PROGRESS_EVERY_S = 3.0
"""Seconds between progress lines."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One evaluated plan."""

    plan: Plan
    step_time_s: float
    mfu: float
    tokens_per_s: float
    memory_bytes: float
    """Memory per rank of the most loaded pipeline stage."""
    capacity_bytes: float
    energy_per_step_j: float | None
    """Filled for the ranked plans shown (and the plans an energy ranking compares)."""

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.capacity_bytes

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.memory_bytes


def candidate(pred: StepPrediction, energy: bool) -> Candidate:
    return Candidate(pred.scenario.plan, pred.step_time_s, pred.mfu, pred.tokens_per_s, pred.memory.total_bytes,
                     pred.memory.capacity_bytes, ledger_energy_j(pred) if energy else None)


def leaves_free(pred: StepPrediction, min_free_bytes: float) -> bool:
    """Whether a predicted plan fits as the search counts fitting: with `min_free_bytes` (--min-free-gb) left free."""
    return pred.memory.capacity_bytes - pred.memory.total_bytes >= min_free_bytes


def scenario_of(base: Scenario, space, plan: Plan) -> Scenario:
    """The scenario a searched plan is priced as: the base's, with the space's model, system and GPU count, and no
    knobs left to choose (the plan is the search's)."""
    return dataclasses.replace(base, model=space.model, system=space.system, num_gpus=space.num_gpus, plan=plan,
                               open_knobs=(), chosen=())


def space_scenario(base: Scenario, space) -> Scenario:
    """The base scenario at the space's size, for a search's caches (search.parts.Parts): `scenario_of` its own plan
    where that plan describes the space's GPU count and batch; else (a --gpus / --gbs the plan cannot take: it is
    not ranked) its knobs at the space's size, built unchecked — every plan priced replaces the degrees and the
    batch with a table row's, which passed the checks."""
    b = space.base
    if b.num_gpus == space.num_gpus and b.gbs == space.gbs:
        return scenario_of(base, space, b)
    return replace_unchecked(base, {"model": space.model, "system": space.system, "num_gpus": space.num_gpus,
                                    "plan": replace_unchecked(b, {"gbs": space.gbs}), "open_knobs": (), "chosen": ()})


@dataclass(frozen=True, slots=True)
class Priced:
    """What pricing a batch of plans gives: all the plans' candidates (fitting or not), and the failures."""

    candidates: list[tuple[int, Candidate]]
    """(position of the plan in the enumeration, candidate)."""
    failures: list[tuple[int, str]]
    """(position of the plan in the enumeration, message)."""


def describe_plan(plan: Plan) -> str:
    """One-line summary of a plan's searched knobs."""
    return (f"tp={plan.tp} pp={plan.pp} vpp={plan.vpp} cp={plan.cp} dp={plan.dp} ep={plan.ep} mbs={plan.mbs} "
            f"zero={plan.zero_stage} recompute={plan.recompute}"
            + (f"[{','.join(plan.recompute_modules)}]" if plan.recompute == "selective" and plan.recompute_modules
               else "")
            + (f" recompute_layers={plan.recompute_layers}" if plan.recompute != "none" and plan.recompute_layers
               else "")
            + (f" offload_layers={plan.offload_layers}" if plan.offload_layers else "")
            + f" sp={plan.sequence_parallel}")


def price(job: tuple) -> Priced:
    """Price `plans` (each with its position); top level so that worker processes can run it."""
    base, space, plans, calibration, min_free_bytes, energy = job
    cands, failures = [], []
    for i, plan in plans:
        try:
            pred = predict(scenario_of(base, space, plan), calibration)
        except NarrowpathError as exc:
            failures.append((i, f"{describe_plan(plan)}: {exc}"))
            continue
        fits = leaves_free(pred, min_free_bytes)
        cands.append((i, candidate(pred, energy and fits)))
    return Priced(cands, failures)


class Progress:
    """Progress lines for a long pricing run: done/total, rate and time left, at most every PROGRESS_EVERY_S."""

    def __init__(self, total: int, sink: Callable[[str], None] | None, done: int = 0, what: str = "plans",
                 every_s: Callable[[], float] = lambda: PROGRESS_EVERY_S):
        self.total, self.sink, self.done, self.what, self.every_s = total, sink, done, what, every_s
        self.t0 = self.last = time.perf_counter()

    def add(self, n: int) -> None:
        self.done += n
        now = time.perf_counter()
        if self.sink is None or now - self.last < self.every_s() or self.done >= self.total:
            return
        self.last = now
        left = (now - self.t0) / max(1, self.done) * (self.total - self.done) if self.done else float("nan")
        self.sink(f"search: priced {self.done:,} of {self.total:,} {self.what} ({self.done / self.total:.0%}), "
                  f"about {human_duration(left)} left")


def human_duration(seconds: float) -> str:
    """12 s, 3.5 min, 4.2 h, 3.1 days."""
    if not seconds == seconds:  # NaN
        return "? s"
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def _leave(signum, frame) -> None:
    raise SystemExit(128 + signum)


def worker_init() -> None:
    """In a pricing worker: Ctrl-C is the parent's to handle (it terminates the pool); SIGTERM — the parent's
    terminate, or `timeout` / a batch scheduler signalling the whole group — ends the worker by unwinding it
    (SystemExit: not caught by the pool's task loop, and every queue lock it holds is released on the way out; killed
    outright, a worker inside a queue's lock left it held and the parent's terminate blocked on it for ever); and the
    worker dies with its parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _leave)
    try:  # Linux: SIGTERM when the parent dies, even by SIGKILL
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS reports one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def merge(parts: list[Priced]) -> Priced:
    return Priced([c for p in parts for c in p.candidates], sorted(f for p in parts for f in p.failures))


_WORK: tuple = (None, ())
"""In a pool worker: the function and the arguments of the pool's tasks (`_pool_worker`)."""


def _pool_worker(fn, jobs_args: list) -> None:
    global _WORK
    worker_init()
    _WORK = (fn, jobs_args)


def _task(k: int):
    fn, jobs_args = _WORK
    return fn(jobs_args[k])


def run_pool(fn, jobs_args: list, jobs: int, on_result: Callable[[object], None]) -> None:
    """fn(arg) for every argument in `jobs` worker processes, results (in any order) to `on_result`; no worker
    outlives the call. The arguments reach each worker once, with the process (a fork inherits them), and a task
    travels as its index: the pool's task pipe then never holds more than a few bytes. (Sent whole, a large task
    could fill the pipe after the workers were gone, and the pool's terminate, which joins the thread sending it,
    waited for ever: `timeout` signalling an energy search's process group hung it, 2 times in 4.)"""
    pool = multiprocessing.get_context().Pool(jobs, initializer=_pool_worker, initargs=(fn, jobs_args))
    try:
        for part in pool.imap_unordered(_task, range(len(jobs_args))):
            on_result(part)
        pool.close()
        pool.join()
    except BaseException:  # Ctrl-C, SIGTERM (as an exception), an error: no worker outlives the search
        _abandon(pool)
        raise


ABANDON_WAIT_S = 1.0
"""How long an interrupted pool's own terminate may take before its workers are killed outright."""


def _abandon(pool) -> None:
    """End an interrupted pool without waiting for ever: a worker ended in the middle of sending a result can leave
    part of a message the pool's result thread then waits on (its terminate and join wait for that thread), so the
    terminate runs in a thread of its own for ABANDON_WAIT_S, and whatever child is left is killed; the process is
    on its way out, its pool threads are daemons."""
    t = threading.Thread(target=pool.terminate, daemon=True)
    t.start()
    t.join(ABANDON_WAIT_S)
    if t.is_alive():
        for child in multiprocessing.active_children():
            child.kill()


def price_all(jobs: int, base: Scenario, space, numbered: list[tuple[int, Plan]], calibration: Calibration | None,
              min_free_bytes: float, energy: bool, progress: Progress) -> Priced:
    """Price the numbered plans in `jobs` processes (in-process for 1), in interleaved chunks (neighbouring plans
    cost alike) so that progress can be reported as chunks finish."""
    job = lambda chunk: (base, space, chunk, calibration, min_free_bytes, energy)  # noqa: E731
    if jobs <= 1 or len(numbered) < 2 * jobs:
        size = max(1, len(numbered) // 100)
        parts = []
        for k in range(0, len(numbered), size):
            parts.append(price(job(numbered[k:k + size])))
            progress.add(len(numbered[k:k + size]))
        return merge(parts)
    num_chunks = min(len(numbered), jobs * 16)
    chunks = [numbered[k::num_chunks] for k in range(num_chunks)]
    parts: list[Priced] = []

    def got(part):
        parts.append(part)
        progress.add(len(part.candidates) + len(part.failures))
    run_pool(price, [job(c) for c in chunks], jobs, got)
    return merge(parts)
