"""Pipeline schedules as programs: the exact order of passes each stage runs, and the messages between them.

- `1f1b`: PipeDream-Flush (Narayanan et al. SC'21 §2.2.1; Megatron-LM `forward_backward_pipelining_without_
  interleaving`): stage i runs min(p − i − 1, m) warm-up forwards, then alternates one forward and one backward,
  then drains the remaining backwards.
- `interleaved`: Megatron-Core `forward_backward_pipelining_with_interleaving` (SC'21 §2.2.2): virtual micro-batch
  k runs (micro-batch, chunk) = `schedule_table[k]`, micro-batches taken in groups of p per chunk; backwards use
  the chunks in reverse; warm-up = 2(p − i − 1) + (v − 1)·p passes (all of them when that exceeds m·v).
- `zb-h1`: zero-bubble ZB-H1 (Qi et al., 'Zero Bubble Pipeline Parallelism', ICLR 2024, §3; sail-sg's
  ZeroBubbleH1Pipeline): backward split into B (input gradients, on the critical path) and W (weight gradients);
  stage i defers i of its W passes to the end, where they fill the drain's bubbles, with 1F1B's memory.

Messages: a forward's output goes to the next stage (the last stage's chunk c to stage 0's chunk c + 1), a
backward's input gradient to the previous stage (stage 0's chunk c to the last stage's chunk c − 1). Between two
groups of passes a stage posts one batched exchange (`torch.distributed.batch_isend_irecv`, as Megatron's
`send_forward_recv_backward` and friends): the sends of the group it finished and the receives of the group it
starts next; the exchange ends when all its messages have moved, and each message moves once both ends have posted
it. A group is one pass, except in the interleaved steady state: a forward and a backward, then one
`send_forward_backward_recv_forward_backward` (Megatron-Core) — batching per pass there deadlocks.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from narrowpath.errors import SimulationError

SCHEDULES = ("1f1b", "interleaved", "zb-h1")


@dataclass(frozen=True, slots=True)
class Pass:
    kind: str
    """F, BW (whole backward), B (input gradients) or W (weight gradients)."""
    chunk: int
    mb: int


@dataclass(frozen=True, slots=True)
class Exchange:
    """A batched point-to-point op between two passes: (message id, is_send) pairs."""

    messages: tuple[tuple[tuple, bool], ...]


@dataclass(frozen=True, slots=True)
class StageProgram:
    stage: int
    items: tuple
    """Exchange and Pass items: an Exchange before every group of passes and one at the end."""


def order_1f1b(p: int, m: int, i: int) -> list[Pass]:
    w = min(p - i - 1, m)
    out = [Pass("F", 0, j) for j in range(w)]
    for k in range(m - w):
        out += [Pass("F", 0, w + k), Pass("BW", 0, k)]
    out += [Pass("BW", 0, k) for k in range(m - w, m)]
    return out


def schedule_table(m: int, v: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) of each virtual micro-batch (Megatron-Core `get_schedule_table`)."""
    out = []
    for lo in range(0, m, group):
        hi = min(lo + group, m)
        out += [(mb, c) for c in range(v) for mb in range(lo, hi)]
    return out


def order_interleaved(p: int, v: int, m: int, i: int) -> list[list[Pass]]:
    """Groups of passes between two exchanges: Megatron's steady state runs a forward and a backward, then one
    `send_forward_backward_recv_forward_backward`."""
    table = schedule_table(m, v, p)
    total = m * v
    warm = min((p - i - 1) * 2 + (v - 1) * p, total)
    fwd = [Pass("F", c, mb) for mb, c in table]
    bwd = [Pass("BW", v - 1 - c, mb) for mb, c in table]
    out = [[f] for f in fwd[:warm]]
    for k in range(total - warm):
        out.append([fwd[warm + k], bwd[k]])
    return out + [[b] for b in bwd[total - warm:]]


def order_zbh1(p: int, m: int, i: int) -> list[Pass]:
    out: list[Pass] = []
    f = b = w = 0
    for _ in range(p - i - 1):
        if f < m:
            out.append(Pass("F", 0, f))
            f += 1
    for _ in range(i):
        if f < m:
            out += [Pass("F", 0, f), Pass("B", 0, b)]
            f, b = f + 1, b + 1
    while f < m:
        out += [Pass("F", 0, f), Pass("B", 0, b), Pass("W", 0, w)]
        f, b, w = f + 1, b + 1, w + 1
    while b < m:
        out += [Pass("B", 0, b), Pass("W", 0, w)]
        b, w = b + 1, w + 1
    out += [Pass("W", 0, k) for k in range(w, m)]
    return out


def _output_to(op: Pass, i: int, p: int, v: int) -> tuple | None:
    """Message id of a pass's output that another stage consumes, or None (local or nothing)."""
    if op.kind == "F":
        nxt = (i + 1, op.chunk) if i < p - 1 else (0, op.chunk + 1)
        return ("F", i, op.chunk, op.mb) if nxt[1] < v and p > 1 else None
    if op.kind in ("B", "BW"):
        prv = (i - 1, op.chunk) if i > 0 else (p - 1, op.chunk - 1)
        return ("B", i, op.chunk, op.mb) if prv[1] >= 0 and p > 1 else None
    return None


def _input_from(op: Pass, i: int, p: int, v: int) -> tuple | None:
    if p == 1:
        return None
    if op.kind == "F":
        src = (i - 1, op.chunk) if i > 0 else (p - 1, op.chunk - 1)
        return ("F", src[0], src[1], op.mb) if src[1] >= 0 else None
    if op.kind in ("B", "BW"):
        src = (i + 1, op.chunk) if i < p - 1 else (0, op.chunk + 1)
        return ("B", src[0], src[1], op.mb) if src[1] < v else None
    return None


@lru_cache(maxsize=64)
def build_programs(schedule: str, p: int, v: int, m: int, overlap: bool = False) -> tuple[StageProgram, ...]:
    """Every stage's program for one step. `overlap` (Megatron-Core overlap_p2p_comm): every pass posts its send
    as soon as it ends and the receive of the pass after it (no batching of a forward with a backward)."""
    if schedule not in SCHEDULES:
        raise SimulationError(f"--schedule: unknown pipeline schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    if schedule != "interleaved" and v > 1:
        raise SimulationError(f"--schedule {schedule}: needs one chunk per stage, the plan has vpp={v}")
    if schedule == "interleaved" and v == 1:
        schedule = "1f1b"
    if schedule == "interleaved" and m % p:
        raise SimulationError(f"interleaved schedule: {m} micro-batches are not divisible by the {p} pipeline stages "
                              "(Megatron-LM refuses this split too)")
    out = []
    for i in range(p):
        if schedule == "interleaved":
            groups = order_interleaved(p, v, m, i)
            if overlap:
                groups = [[x] for grp in groups for x in grp]
        else:
            groups = [[x] for x in (order_zbh1(p, m, i) if schedule == "zb-h1" else order_1f1b(p, m, i))]
        items: list = []
        prev: list[Pass] = []
        for grp in groups + [[]]:
            msgs = [(mid, True) for op in prev if (mid := _output_to(op, i, p, v)) is not None]
            msgs += [(mid, False) for op in grp if (mid := _input_from(op, i, p, v)) is not None]
            items.append(Exchange(tuple(msgs)))
            items += grp
            prev = grp
        out.append(StageProgram(i, tuple(items)))
    return tuple(out)
