"""A pipeline program played for many plans at once: `schedule.sim.playback.play` compiled into a fixed list of
steps, then replayed on numpy arrays (one entry per plan).

Which message a stage waits for, and in what order stages run, depend on the program only, never on the pass
times: `play` is a dataflow over max and +. So one run of its algorithm on placeholder times fixes the order of
its primitive steps (a stage runs a pass, posts a message, a message ends, a stage waits for a message), and
replaying those steps with arrays of pass times gives `play`'s clocks for every plan. tests/search/test_replay.py
holds the replay to `play` on random times for every schedule shape the search uses.
"""
from __future__ import annotations

from collections import deque
from functools import lru_cache

import numpy as np

from narrowpath.errors import SimulationError
from narrowpath.schedule.sim.programs import Exchange, build_programs

PASS, POST, END, WAIT = 0, 1, 2, 3


@lru_cache(maxsize=256)
def compile_play(schedule: str, p: int, v: int, m: int, mode: str) -> tuple:
    """(steps, pass keys): the primitive steps of playing `build_programs(schedule, p, v, m, mode == "async")`
    in `mode`, in an order valid for any pass times (module docstring). A step is (PASS, stage, pass key index),
    (POST, stage, post slot), (END, message slot, send post slot, receive post slot or −1) or (WAIT, stage,
    message slot); pass keys are (stage, kind, chunk)."""
    programs = build_programs(schedule, p, v, m, mode == "async")
    eager = mode != "rendezvous"
    sides = (True,) if eager else (True, False)
    pcs = [0] * p
    posted: dict = {}
    ended: dict = {}
    wake: dict = {}
    keys: dict = {}
    steps: list[tuple] = []
    ready = deque(range(p))
    slot = lambda d, k: d.setdefault(k, len(d))  # noqa: E731
    while ready:
        i = ready.popleft()
        items = programs[i].items
        pc = pcs[i]
        while pc < len(items):
            it = items[pc]
            if isinstance(it, Exchange):
                missing = None
                for key in it.messages:
                    if key not in posted:
                        posted[key] = len(posted)
                        steps.append((POST, i, posted[key]))
                        waiter = wake.pop(key, None)
                        if waiter is not None:
                            ready.append(waiter)
                for mid, _ in it.messages:
                    if mid not in ended:
                        for side in sides:
                            if (mid, side) not in posted:
                                missing = (mid, side)
                if missing is not None:
                    wake[missing] = i
                    break
                for key in it.messages:
                    mid = key[0]
                    if mid not in ended:
                        ended[mid] = len(ended)
                        steps.append((END, ended[mid], posted[(mid, True)],
                                      -1 if eager else posted[(mid, False)], mid[0]))
                    if mode == "async" and key[1]:
                        continue  # the send runs beside the next pass
                    steps.append((WAIT, i, ended[mid]))
            else:
                steps.append((PASS, i, slot(keys, (i, it.kind, it.chunk))))
            pc += 1
        pcs[i] = pc
    if any(pcs[i] < len(programs[i].items) for i in range(p)):
        raise SimulationError("pipeline program deadlocks")
    return tuple(steps), tuple(keys), len(posted), len(ended)


def replay(compiled: tuple, pass_s: dict, p2p_s: dict, n: int) -> np.ndarray:
    """Every stage's clock after its program, (p, n): `pass_s[(stage, kind, chunk)]` arrays (n,) of seconds,
    `p2p_s[kind]` the message time per kind (scalars)."""
    steps, keys, n_posts, n_ends = compiled
    p = 1 + max(k[0] for k in keys)
    dur = [np.asarray(pass_s[k], dtype=float) for k in keys]
    clock = [np.zeros(n) for _ in range(p)]
    posts: list = [None] * n_posts
    ends: list = [None] * n_ends
    for st in steps:
        kind = st[0]
        if kind == PASS:
            clock[st[1]] = clock[st[1]] + dur[st[2]]
        elif kind == POST:
            posts[st[2]] = clock[st[1]]
        elif kind == END:
            s0 = posts[st[2]] if st[3] < 0 else np.maximum(posts[st[2]], posts[st[3]])
            ends[st[1]] = s0 + p2p_s[st[4]] if p2p_s[st[4]] else s0
        else:
            clock[st[1]] = np.maximum(clock[st[1]], ends[st[2]])
    return np.stack(clock)
