"""The step engine: plays every stage's program over arrays of unit clocks, as max-plus dataflow.

Each stage's program fixes the order of its work (passes and batched exchanges), so an event's time is the max
of its dependencies' times plus its duration: a pass starts when its stage is free; a collective when the last
member of its group arrives (a max over each group); a pipeline message when both ends have posted it. The
engine walks the stages round-robin, advancing each until it waits for a message; one program event updates all
of a stage's units at once (numpy), so the cost is events × units, not kernels × ranks. Times are seconds from the
step's start; `t0` (the step's start in the job) places the periodic pauses.

Attribution rides along: every unit carries, per cause, the extra seconds on its critical history; a max hands
the winner's vector to the whole group (max-plus provenance), so at the step's end the last unit's vector says
where the lost time came from. Waiting is tallied per collective kind (mean seconds a rank waits there).
"""
from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np

from narrowpath.errors import SimulationError
from narrowpath.schedule.sim.layout import Layout
from narrowpath.schedule.sim.passplan import PassPlan, Run, compile_pass, run_excess
from narrowpath.schedule.sim.perturb import Perturbation
from narrowpath.schedule.sim.playback import play
from narrowpath.schedule.sim.programs import Exchange, Pass, StageProgram, completing_passes, message_peers, \
    sync_launches
from narrowpath.schedule.sim.work import SimWork, Sync


@dataclass
class StageState:
    clock: np.ndarray
    cause: np.ndarray | None
    pc: int = 0
    last_bwd: dict = field(default_factory=dict)
    """chunk → (start, end, cause) of the window over which its gradient buckets are released (programs.
    sync_launches: the pass that completes them, or the end of the pass that launches them together); a chunk
    missing is launched at the stage's end."""


class StepEngine:
    def __init__(self, work: SimWork, programs: tuple[StageProgram, ...], layout: Layout, cp: int,
                 pert: Perturbation | None, exact: bool = False, recorder=None, p2p_mode: str = "rendezvous",
                 batch: int = 1):
        self.work, self.programs, self.layout, self.cp, self.pert = work, programs, layout, cp, pert
        self.p2p_mode = p2p_mode
        """`rendezvous`, `eager` or `async` pipeline messages (sim.playback)."""
        self.eager = p2p_mode != "rendezvous"
        self.p = layout.pp
        self._groups: dict = {}
        self.set_batch(batch)
        self.kernel = pert.kernel if pert is not None else None
        self.num_causes = len(pert.causes) if pert is not None else 0
        self.recorder = recorder
        self.plans: dict[tuple, PassPlan] = {}
        for st in work.stages:
            for (kind, chunk), pw in st.passes.items():
                self.plans[(st.index, kind, chunk)] = compile_pass(pw, self._group1, self.kernel, layout.tp, exact)
            for (kind, chunk), pw in st.last_passes.items():  # the last micro-batch's, where it differs
                self.plans[(st.index, kind, chunk, work.num_microbatches - 1)] = compile_pass(
                    pw, self._group1, self.kernel, layout.tp, exact)
        self.launches = sync_launches(programs, work.sync_launch)
        """(stage, kind, chunk, micro-batch) of the pass that releases a chunk's gradient buckets → (chunk,
        streamed)."""
        completes = completing_passes(programs)
        self.chunk_order = []
        """Per stage, its chunks in the order their buckets are released (those launched at the end last)."""
        for prog in programs:
            keys = [(prog.stage, x.kind, x.chunk, x.mb) for x in prog.items if isinstance(x, Pass)]
            order = [self.launches[k][0] for k in keys if k in self.launches]
            self.chunk_order.append(tuple(order + [k[2] for k in keys if k in completes and k[2] not in order]))
        self.ci = pert.cause_index if pert is not None else {}

    def set_batch(self, batch: int) -> None:
        """Play `batch` independent steps at once: step s's units are lanes s·U … s·U + U − 1 of every array
        (steps start together after the previous step's global barrier, so they only share the fixed noise)."""
        self.batch = batch
        self.unit1 = self.layout.num_units
        self.units = self.unit1 * batch
        self._groups = {}

    def _group1(self, axis: str) -> np.ndarray | None:
        return None if self.layout.symmetric else self.layout.group(axis, self.cp)

    def group(self, axis: str) -> np.ndarray | None:
        """Unit groups of an axis over all lanes of the batch (None: the collective stays inside a unit)."""
        if axis not in self._groups:
            g = self._group1(axis)
            if g is not None and self.batch > 1:
                g = (g[None, :, :] + self.unit1 * np.arange(self.batch)[:, None, None]).reshape(-1, g.shape[1])
            self._groups[axis] = g
        return self._groups[axis]

    # ------------------------------------------------------------------------------------------------------
    def run_pipeline(self, rng: np.random.Generator, t0: float) -> tuple[list[StageState], dict]:
        """All stages' programs for one step; returns the stage states at their last exchange and the waits."""
        if self.layout.symmetric and self.pert is None and self.recorder is None:
            return self._run_scalar(t0)
        U = self.units
        states = [StageState(np.zeros(U), np.zeros((self.num_causes, U)) if self.num_causes else None)
                  for _ in range(self.p)]
        msgs: dict = {}
        self._link_free: dict = {}  # (sender, receiver) → when the last message on that path ends (playback.play)
        self.waits: dict = defaultdict(float)
        self._pp_wait = 0.0
        self.rng, self.t0 = rng, t0
        self._wake: dict = {}
        ready = deque(range(self.p))
        done = 0
        while ready:
            i = ready.popleft()
            st = states[i]
            items = self.programs[i].items
            while st.pc < len(items):
                it = items[st.pc]
                if isinstance(it, Exchange):
                    if not self._exchange(i, it, st, msgs, ready):
                        break
                else:
                    self._pass(i, it, st)
                st.pc += 1
            done += st.pc == len(items)
        if done < self.p:
            stuck = [(i, self.programs[i].items[s.pc]) for i, s in enumerate(states) if s.pc < len(self.programs[i].items)]
            raise SimulationError(f"pipeline program deadlocks at {stuck[:3]}")
        if self.p > 1:
            self.waits["pp (send/recv, incl. bubble)"] += float(np.mean(self._pp_wait)) / self.p
        return states, self.waits

    def _run_scalar(self, t0: float) -> tuple[list[StageState], dict]:
        """The noise-free step with one unit per stage, on Python floats (`playback`: the same rules, ~10x faster)."""
        self.t0, self.waits = t0, defaultdict(float)
        dur = {k: sum(x.compute_s + x.comm_s if isinstance(x, Run) else x.cost_s for x in plan.items)
               for k, plan in self.plans.items()}
        pb = play(self.programs, dur, {k: v[0] for k, v in self.work.p2p_s.items()}, mode=self.p2p_mode,
                  launches=self.launches)
        if self.p > 1:
            self.waits["pp (send/recv, incl. bubble)"] += pb.pp_wait_s / self.p
        return [StageState(np.array([c]), None, len(prog.items),
                           {ch: (np.array([a]), np.array([b]), None) for ch, (a, b) in lb.items()})
                for c, prog, lb in zip(pb.ends_s, self.programs, pb.completes)], self.waits

    # ------------------------------------------------------------------------------------------------------
    def _exchange(self, i: int, ex: Exchange, st: StageState, msgs: dict, ready: deque) -> bool:
        messages = ex.messages
        if not messages:
            return True
        clock, cause = st.clock, st.cause
        missing = None
        for mid, is_send in messages:
            rec = msgs.get(mid)
            if rec is None:
                rec = msgs[mid] = [None, None, None, None, None, 0]
            slot = 0 if is_send else 2
            if rec[slot] is None:
                rec[slot], rec[slot + 1] = clock, cause
                waiter = self._wake.pop((mid, slot), None)
                if waiter is not None:
                    ready.append(waiter)
            if rec[4] is None:
                if rec[0] is None:
                    missing = (mid, 0)
                elif rec[2] is None and not self.eager:
                    missing = (mid, 2)
        if missing is not None:
            self._wake[missing] = i
            return False
        t, cz = clock, cause
        for mid, is_send in messages:
            rec = msgs[mid]
            if rec[4] is None:
                rec[4] = self._message(mid, rec)
            end, end_cause, start = rec[4]
            if is_send and self.p2p_mode == "async":
                if self.recorder is not None:
                    self.recorder.message(i, mid, is_send, start + self.t0, end + self.t0)
                rec[5] += 1
                if rec[5] == 2:
                    del msgs[mid]
                continue
            later = end > t
            if later.any():
                t = np.maximum(t, end)
                if cz is not None:
                    cz = end_cause if later.all() else np.where(later, end_cause, cz)
            if self.recorder is not None:
                self.recorder.message(i, mid, is_send, start + self.t0, end + self.t0)
            rec[5] += 1
            if rec[5] == 2:
                del msgs[mid]
        self._pp_wait = self._pp_wait + (t - clock)  # the exchange's wall time: its messages overlap in time
        st.clock, st.cause = t, cz
        return True

    def _message(self, mid: tuple, rec: list):
        """(end, cause at end, start) of a pipeline message once its sender (and, rendezvous, its receiver) posted."""
        post_s, cause_s, post_r, cause_r = rec[:4]
        if self.eager:
            start, cz = post_s, cause_s
        else:
            first = post_s >= post_r
            start = np.maximum(post_s, post_r)
            cz = cause_s
            if cause_s is not None and not first.all():
                cz = cause_r if not first.any() else np.where(first, cause_s, cause_r)
        cost, lat, tiers = self.work.p2p_s[mid[0]]
        src, dst = message_peers(mid, self.p)
        if cost > 0:  # behind the messages already on its path (playback.play)
            free = self._link_free.get((src, dst))
            if free is not None:
                start = np.maximum(start, free)
        end = start + cost
        pert = self.pert
        if pert is not None and tiers and (pert.slow_link or pert.flap_at):
            cz = cz.copy()
            for tier in tiers:
                frac = pert.slow_link.get(tier)
                if frac is not None:
                    extra = np.maximum(frac[src], frac[dst]) * max(0.0, cost - lat)
                    end = end + extra
                    cz[self.ci["slow-link"]] += extra
                at = pert.flap_at.get(tier)
                if at is not None:
                    hit = (at[src] <= start) | (at[dst] <= start)
                    if hit.any():
                        at[src][hit & (at[src] <= start)] = np.inf
                        at[dst][hit & (at[dst] <= start)] = np.inf
                        extra = hit * pert.flap_penalty[tier]
                        end = end + extra
                        cz[self.ci["link-flap"]] += extra
        if cost > 0:
            self._link_free[(src, dst)] = end
        return end, cz, start

    # ------------------------------------------------------------------------------------------------------
    def _pass(self, i: int, op: Pass, st: StageState) -> None:
        plan = self.plans.get((i, op.kind, op.chunk, op.mb)) or self.plans[(i, op.kind, op.chunk)]
        t, cz = st.clock, st.cause
        start = t
        for item in plan.items:
            if isinstance(item, Run):
                t, cz = self._run(i, item, t, cz)
            else:
                t, cz = self._sync(i, item, t, cz)
        st.clock, st.cause = t, cz
        hit = self.launches.get((i, op.kind, op.chunk, op.mb))
        if hit is not None:
            st.last_bwd[hit[0]] = (start if hit[1] else t, t, cz)
        if self.recorder is not None:
            self.recorder.compute(i, op, start + self.t0, t + self.t0, plan)

    def _run(self, i: int, run: Run, t: np.ndarray, cz):
        pert = self.pert
        if pert is None:
            return t + (run.compute_s + run.comm_s), cz
        if cz is not None:
            cz = cz.copy()
        base = run.compute_s
        if run.mode != "none":
            ext = run_excess(run, self.kernel, self.rng, self.units, self.layout.tp)
            base = base + ext
            cz[self.ci["jitter"]] += ext
        if pert.factor is not None:
            f = pert.factor[i]
            slow = base * (f - 1.0)
            cz[pert.slow_label[i], pert.lanes] += slow
            base = base + slow
        end = t + base + run.comm_s
        for tier in run.tiers:
            frac = pert.slow_link.get(tier)
            if frac is not None:
                extra = frac[i] * run.comm_bw_s
                end = end + extra
                cz[self.ci["slow-link"]] += extra
            at = pert.flap_at.get(tier)
            if at is not None:
                hit = at[i] <= end
                if hit.any():
                    at[i][hit] = np.inf
                    end = end + hit * pert.flap_penalty[tier]
                    cz[self.ci["link-flap"]] += hit * pert.flap_penalty[tier]
        if pert.phases:
            for ci, pause in pert.paused_end(i, t + self.t0, end + self.t0):
                end = end + pause
                cz[ci] += pause
        return end, cz

    def _sync(self, i: int, s: Sync, t: np.ndarray, cz):
        g = self.group(s.axis)
        if g is None:
            return t + s.cost_s, cz
        rows = np.arange(g.shape[0])
        vals = t[g]
        arg = vals.argmax(axis=1)
        mx = vals[rows, arg]
        self.waits[f"{s.axis} ({s.name})"] += float((mx[:, None] - vals).mean()) / self.p
        cost = np.full(g.shape[0], s.cost_s)
        new_cz = None
        if cz is not None:
            new_cz = np.empty_like(cz)
            new_cz[:, g] = cz[:, g[rows, arg]][:, :, None]
        pert = self.pert
        if pert is not None:
            for tier in s.tiers:
                frac = pert.slow_link.get(tier)
                if frac is not None:
                    extra = frac[i][g].max(axis=1) * max(0.0, s.cost_s - s.latency_s)
                    cost = cost + extra
                    new_cz[self.ci["slow-link"]][g] += extra[:, None]
                at = pert.flap_at.get(tier)
                if at is not None:
                    pend = at[i][g]
                    hitm = pend <= mx[:, None]
                    hit = hitm.any(axis=1)
                    if hit.any():
                        at[i][g[hitm]] = np.inf
                        extra = hit * pert.flap_penalty[tier]
                        cost = cost + extra
                        new_cz[self.ci["link-flap"]][g] += extra[:, None]
        out = np.empty_like(t)
        out[g] = (mx + cost)[:, None]
        if self.recorder is not None:
            self.recorder.sync(i, s, g, mx + self.t0, mx + cost + self.t0)
        return out, new_cz
