"""A pipeline program played once, without noise, on Python floats: the engine's rules for one unit per stage.

Used by the engine for the noise-free step (symmetry) and by the closed form (`schedule.pipeline`) to time
schedules whose stages or chunks differ. A pass takes its stage's time for its (kind, chunk); a batched exchange
ends when all its messages have moved; a message moves when its sender (and, rendezvous, its receiver) has posted
it and takes `p2p_s[kind]` — after the messages between the same two ranks in the same direction that moved
before it (they share that path's bandwidth: DualPipe's steady exchange receives an activation and a gradient from
one neighbour in one `batch_isend_irecv`, deepseek-ai/DualPipe `_forward_backward_chunk`). Modes: `rendezvous` (NCCL: a message starts when both ends have posted it, both
wait for its end), `eager` (it starts when the sender posts; the sender waits for its end, the receiver for its
arrival), `async` (as eager, but the sender does not wait: Megatron-Core's overlap_p2p_comm, the default for
interleaving). Ready stages run in FIFO order; a stage waiting for a post is woken by it.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from narrowpath.errors import SimulationError
from narrowpath.schedule.sim.programs import Exchange, StageProgram, message_peers


@dataclass(frozen=True, slots=True)
class Playback:
    ends_s: tuple[float, ...]
    """Each stage's clock after its last exchange."""
    completes: tuple[dict, ...]
    """Per stage: chunk → (start, end) of the window over which its gradient buckets are released (programs.
    sync_launches: the pass that completes them, or the end of the pass that launches them together)."""
    pp_wait_s: float
    """Seconds all stages together spent in pipeline exchanges (waiting and transferring; bubbles included)."""


def play(programs: tuple[StageProgram, ...], pass_s: dict, p2p_s: dict, *, mode: str = "rendezvous",
         launches: dict | None = None) -> Playback:
    """`pass_s[(stage, kind, chunk)]` seconds (`(stage, kind, chunk, micro-batch)` for one that differs);
    `launches`: (stage, kind, chunk, micro-batch) of the passes to report → (chunk, streamed)
    (programs.sync_launches)."""
    launches = launches or {}
    p = len(programs)
    clock, pcs = [0.0] * p, [0] * p
    last: list[dict] = [{} for _ in range(p)]
    posts: dict = {}
    ends: dict = {}
    wake: dict = {}
    wait = 0.0
    link_free: dict = {}  # (sender, receiver) → when the last message on that path ends
    eager = mode != "rendezvous"
    sides = (True,) if eager else (True, False)
    ready = deque(range(p))
    while ready:
        i = ready.popleft()
        items = programs[i].items
        pc, t = pcs[i], clock[i]
        while pc < len(items):
            it = items[pc]
            if isinstance(it, Exchange):
                missing = None
                for key in it.messages:
                    if key not in posts:
                        posts[key] = t
                        waiter = wake.pop(key, None)
                        if waiter is not None:
                            ready.append(waiter)
                for mid, _ in it.messages:
                    if mid not in ends:
                        for side in sides:
                            if (mid, side) not in posts:
                                missing = (mid, side)
                if missing is not None:
                    wake[missing] = i
                    break
                t_in = t
                for key in it.messages:
                    mid = key[0]
                    if mid not in ends:
                        s0 = posts[(mid, True)] if eager else max(posts[(mid, True)], posts[(mid, False)])
                        d = p2p_s[mid[0]]
                        if d > 0:  # behind the messages already on its path
                            path = message_peers(mid, p)
                            s0 = max(s0, link_free.get(path, s0))
                            link_free[path] = s0 + d
                        ends[mid] = (s0, s0 + d)
                    s0, e = ends[mid]
                    if mode == "async" and key[1]:
                        continue  # the send runs beside the next pass
                    if e > t:
                        t = e
                wait += t - t_in  # the exchange's wall time: its messages overlap in time
            else:
                start = t
                d = pass_s.get((i, it.kind, it.chunk, it.mb))  # a micro-batch's own pass, where it differs
                t += pass_s[(i, it.kind, it.chunk)] if d is None else d
                hit = launches.get((i, it.kind, it.chunk, it.mb))
                if hit is not None:
                    last[i][hit[0]] = (start if hit[1] else t, t)
            pc += 1
        pcs[i], clock[i] = pc, t
    stuck = [i for i in range(p) if pcs[i] < len(programs[i].items)]
    if stuck:
        raise SimulationError(f"pipeline program deadlocks at stages {stuck[:3]}")
    return Playback(tuple(clock), tuple(last), wait)
