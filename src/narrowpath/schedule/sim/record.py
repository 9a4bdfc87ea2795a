"""What the engine did on a few chosen ranks, for a timeline: passes, pipeline messages, collectives across
units, gradient sync and the step's end. Times are absolute seconds of the simulated job. Flow ids link the two
ends of a message and the members of one collective that were recorded."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from narrowpath.schedule.sim.layout import Layout


@dataclass(frozen=True, slots=True)
class Event:
    rank: int
    track: str
    """`compute`, `tp`, `pp`, `collective`, `dp`, `step`."""
    name: str
    start_s: float
    end_s: float
    args: dict = field(default_factory=dict)
    flow: int | None = None
    """Events with the same flow id are one message or one collective seen from several ranks."""


class Recorder:
    """Collects events of `ranks` during the first `max_steps` steps."""

    def __init__(self, layout: Layout, ranks: tuple[int, ...], max_steps: int = 2):
        self.layout = layout
        self.where: dict[tuple[int, int], list[int]] = {}
        for r in ranks:
            s, u, _ = layout.locate(r) if not layout.symmetric else (_locate_symmetric(layout, r))
            self.where.setdefault((s, u), []).append(r)
        self.events: list[Event] = []
        self.step = 0
        self.max_steps = max_steps
        self._flows: dict = {}
        self._next_flow = 1

    @property
    def active(self) -> bool:
        return self.step < self.max_steps

    def _flow(self, key) -> int:
        if key not in self._flows:
            self._flows[key] = self._next_flow
            self._next_flow += 1
        return self._flows[key]

    def _units(self, stage: int):
        return [(u, ranks) for (s, u), ranks in self.where.items() if s == stage]

    def compute(self, stage: int, op, start: np.ndarray, end: np.ndarray, plan=None) -> None:
        if not self.active:
            return
        for u, ranks in self._units(stage):
            for r in ranks:
                self.events.append(Event(r, "compute", f"{op.kind}{op.mb}" + (f".c{op.chunk}" if op.chunk else ""),
                                         float(start[u]), float(end[u]),
                                         {"pass": op.kind, "microbatch": op.mb, "chunk": op.chunk, "step": self.step}))
            if plan is not None:
                self._tp(stage, u, ranks, op, plan, float(start[u]), float(end[u]))

    def _tp(self, stage: int, u: int, ranks: list[int], op, plan, t0: float, t1: float) -> None:
        """Tensor-parallel collectives of a pass, placed where they fall in its nominal layout (a run folds them:
        their exact moments are not simulated) and stretched to the pass's simulated length; one flow per
        collective links the recorded members of the unit."""
        nominal = sum(getattr(x, "compute_s", 0.0) + getattr(x, "comm_s", 0.0) for x in plan.items) + \
            sum(getattr(x, "cost_s", 0.0) for x in plan.items)
        scale = (t1 - t0) / nominal if nominal > 0 else 0.0
        t = t0
        for x in plan.items:
            if not hasattr(x, "seg_s"):
                t += getattr(x, "cost_s", 0.0) * scale
                continue
            n = max(1, x.syncs)
            segs = list(x.seg_s) or [0.0]
            each = x.comm_s / x.syncs if x.syncs else 0.0
            for j in range(max(len(segs), x.syncs)):
                t += (segs[j] if j < len(segs) else 0.0) * scale
                if j < x.syncs:
                    flow = self._flow((self.step, stage, u, op.kind, op.chunk, op.mb, j, id(x)))
                    for r in ranks:
                        self.events.append(Event(r, "tp", f"tp collective {j + 1}/{n}", t, t + each * scale,
                                                 {"pass": op.kind, "microbatch": op.mb, "step": self.step}, flow))
                    t += each * scale

    def message(self, stage: int, mid: tuple, is_send: bool, start: np.ndarray, end: np.ndarray) -> None:
        if not self.active:
            return
        kind = "activation" if mid[0] == "F" else "gradient"
        for u, ranks in self._units(stage):
            for r in ranks:
                self.events.append(Event(r, "pp", f"{'send' if is_send else 'recv'} {kind} mb{mid[3]}",
                                         float(start[u]), float(end[u]), {"from_stage": mid[1], "chunk": mid[2],
                                                                         "step": self.step},
                                         self._flow((self.step, mid))))

    def sync(self, stage: int, s, g: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        if not self.active:
            return
        for u, ranks in self._units(stage):
            row = int(np.nonzero((g == u).any(axis=1))[0][0])
            flow = self._flow((self.step, stage, s.name, row, float(start[row])))
            for r in ranks:
                self.events.append(Event(r, "collective", s.name, float(start[row]), float(end[row]),
                                         {"axis": s.axis, "group_units": int(g.shape[1]), "step": self.step}, flow))

    def step_transfer(self, stage: int, tr, start: np.ndarray, end: np.ndarray) -> None:
        if not self.active:
            return
        for u, ranks in self._units(stage):
            for r in ranks:
                self.events.append(Event(r, "dp", tr.name, float(start[u]), float(end[u]),
                                         {"bytes": tr.message_bytes, "step": self.step}))

    def tail(self, barrier_s: float, opt_end_s: float, end_s: float) -> None:
        if not self.active:
            return
        for ranks in self.where.values():
            for r in ranks:
                self.events.append(Event(r, "step", "optimizer", barrier_s, opt_end_s, {"step": self.step}))
                if end_s > opt_end_s:
                    self.events.append(Event(r, "step", "param all-gather (exposed)", opt_end_s, end_s,
                                             {"step": self.step}))
        self.step += 1


def _locate_symmetric(layout: Layout, rank: int) -> tuple[int, int, int]:
    """Under symmetry every unit of a stage is unit 0: find the stage (and tp index) from the pp stride."""
    ranks = layout.unit_ranks
    pp_stride = int(ranks[1, 0, 0] - ranks[0, 0, 0]) if layout.pp > 1 else None
    if pp_stride is None:
        return 0, 0, 0
    return (rank // pp_stride) % layout.pp, 0, 0
