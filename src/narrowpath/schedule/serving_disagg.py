"""A disaggregated deployment under a closed loop: clients whose next request goes out when their last one finishes,
prefill lanes that hand each prompt's KV cache to a decode lane, decode lanes whose finishes release the next
requests. The lanes depend on each other both ways, so they cannot run one after another (schedule.serving_run's
open-loop path runs every prefill lane, then every decode lane); they run here in one conservative discrete-event
loop (Chandy & Misra 1979):

- a *unit* is a lane or a lockstep group of lanes (the attention-DP ranks of one instance micro-batch,
  serving_sim.LaneGroup); its *action time* is when it next decides an iteration: its clock when it holds work,
  else its next known arrival;
- events in flight — a prompt whose hand-off ends at t (it reaches a decode lane then), a request finished at t
  (its client sends the next one then) — are final once no unit can still produce an earlier one: every unit's next
  event lies after its action time, so events up to the least action time T are final. They are handed out in time
  order: the j-th prompt ready goes to decode lane j mod D (round robin, as the open-loop path), the k-th request
  sent to prefill lane k mod P;
- then the unit at T runs one iteration (or merged decode steps). A merged run that could admit a request stops at
  the first boundary after the earliest time one not yet known could reach it (`Lane.horizon`): the next prompt in
  flight, or the earliest a prompt a prefill unit has not finished, or a request not yet sent, could be handed off
  — a unit's next output lies at least its cheapest iteration ahead (a decode unit's first finish, as many
  cheapest steps ahead as its nearest-done sequence or a newly admitted one has left), and a prompt needs at least
  one prefill iteration and the shortest hand-off. A run ends anyway at its batch's first finish, so a unit
  waits on its own output only where a request of one output token finishes as it is admitted (then its own
  action time bounds it too).
Events are handed out one instant at a time (all those at the earliest time, then the action times again): a unit
an event wakes may produce an event before the next one in flight.
The result equals running every lane one iteration at a time in global time order.
"""
from __future__ import annotations

import heapq
import math

import numpy as np

from narrowpath.schedule.serving_sim import Lane, LaneGroup
from narrowpath.schedule.serving_stats import LaneTotals


def lane_action_s(ln: Lane) -> float:
    """When the lane next decides an iteration: now if it holds work or a request has arrived, else its next
    known arrival (inf: none known)."""
    if ln.n or ln.pre or ln.waiting:
        return ln.now
    if ln.p < ln.released:
        return max(ln.now, float(ln.arr[ln.rids[ln.p]]))
    return math.inf


class Unit:
    """A lane, or a lockstep group of lanes, the event loop advances one iteration at a time."""

    __slots__ = ("lanes", "stepper", "decode")

    def __init__(self, lanes: list[Lane], decode: bool):
        self.lanes, self.decode = lanes, decode
        self.stepper = LaneGroup(lanes) if len(lanes) > 1 else lanes[0]

    def next_output_s(self, action_s: float, floor_s: float, new_steps: int) -> float:
        """Earliest time of the unit's next output (a prompt done, a request finished), given its action time, its
        cheapest iteration `floor_s` and the fewest decode steps a newly admitted request needs (`new_steps`)."""
        if not self.decode:
            return action_s + floor_s
        steps = new_steps
        for ln in self.lanes:
            if ln.n:
                steps = min(steps, math.ceil(float(ln.r_rem[:ln.n].min()) / ln.s.spec_gain - 1e-9))
        return action_s + max(steps, 0) * floor_s

    def action_s(self) -> float:
        lanes = self.lanes
        if len(lanes) == 1:
            return lane_action_s(lanes[0])
        if any(ln.n or ln.pre or ln.waiting for ln in lanes):
            return max(ln.now for ln in lanes)  # a group's lanes share one clock once they have stepped
        now = max(ln.now for ln in lanes)
        return max(now, min(lane_action_s(ln) for ln in lanes))

    def advance(self, horizon: float) -> None:
        self.stepper.advance(horizon)


def run_closed_loop(pre: list[list[Lane]], dec: list[list[Lane]], order: np.ndarray, arr: np.ndarray,
                    ready: np.ndarray, handoff_s: np.ndarray, concurrency: int, tot: LaneTotals,
                    floors_s: tuple[float, float], new_steps: int, earliest: np.ndarray) -> None:
    """Run a disaggregated deployment's lanes to the end (module docstring). `pre`: lockstep groups of prefill
    lanes, lane i of P holding the requests order[i::P] (sent in `order`; `arr` inf for those beyond the first
    `concurrency`, set here when a request finishes); `dec`: groups of decode lanes with empty request buffers
    (`rids` of ⌈n/D⌉ slots, `released` 0, reading `ready`); `handoff_s` per request; hand-offs are added to `tot`.
    `floors_s`: the cheapest iteration of a prefill and of a decode lane; `new_steps`: the fewest decode steps of
    any request (its output less the prefill's token, over the tokens a step yields); `earliest`: each request's own
    arrival, before which it is not sent."""
    units = [Unit(g, False) for g in pre] + [Unit(g, True) for g in dec]
    pre_lanes = [ln for g in pre for ln in g]
    dec_lanes = [ln for g in dec for ln in g]
    finished: list[float] = []  # finish times not yet turned into the next requests' arrivals

    def on_finish(rid: int, t: float) -> None:
        heapq.heappush(finished, t)

    for ln in dec_lanes:
        ln.on_finish = on_finish
    in_flight: list[tuple[float, int]] = []  # (hand-off end, rid)
    seen = [0] * len(pre_lanes)
    sent, handed, n = concurrency, 0, len(order)
    pre_floor, dec_floor = floors_s
    lead = pre_floor + float(handoff_s.min())  # a request sent → its prompt handed off
    while True:
        for i, ln in enumerate(pre_lanes):
            for t, rid in ln.ready[seen[i]:]:
                h = float(handoff_s[rid])
                heapq.heappush(in_flight, (t + h, rid))
                tot.handoff_s += h
            seen[i] = len(ln.ready)
        acts = [u.action_s() for u in units]
        t_min = min(acts)
        next_handed = in_flight[0][0] if in_flight else math.inf
        next_sent = finished[0] if finished else math.inf
        first_event = min(next_handed, next_sent)
        if first_event <= t_min and not math.isinf(first_event):
            # final; hand out only the earliest (the unit it wakes may produce events before the next one)
            while in_flight and in_flight[0][0] == first_event:
                t, rid = heapq.heappop(in_flight)
                ln = dec_lanes[handed % len(dec_lanes)]
                handed += 1
                ready[rid] = t
                ln.rids[ln.released] = rid
                ln.released += 1
            while finished and finished[0] == first_event:
                t = heapq.heappop(finished)
                if sent < n:
                    nxt = order[sent]
                    arr[nxt] = max(t, float(earliest[nxt]))
                    sent += 1
            continue
        if math.isinf(t_min):
            return
        k = acts.index(t_min)
        unit = units[k]
        if unit.decode:
            horizon = min(next_handed, next_sent + lead)
            for j, u in enumerate(units):  # itself too when a request can finish on admission (one output token)
                if (j != k or not new_steps) and not math.isinf(acts[j]):
                    out = u.next_output_s(acts[j], dec_floor if u.decode else 0.0, new_steps)
                    horizon = min(horizon, out + lead)
        else:  # a prefill iteration is never merged
            horizon = math.inf
        unit.advance(horizon)
