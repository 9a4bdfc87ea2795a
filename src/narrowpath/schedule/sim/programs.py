"""Pipeline schedules as programs: the exact order of passes each stage runs, and the messages between them.

- `1f1b`: PipeDream-Flush (Narayanan et al. SC'21 §2.2.1; Megatron-LM `forward_backward_pipelining_without_
  interleaving`): stage i runs min(p − i − 1, m) warm-up forwards, then alternates one forward and one backward,
  then drains the remaining backwards.
- `interleaved`: Megatron-Core `forward_backward_pipelining_with_interleaving` (SC'21 §2.2.2): virtual micro-batch
  k runs (micro-batch, chunk) = `schedule_table[k]`, micro-batches taken in groups of g per chunk (g = p, or
  `microbatch_group_size_per_vp_stage`: Plan.vp_group); backwards use the chunks in reverse; warm-up =
  2(p − i − 1) + (v − 1)·g passes (all of them when that exceeds m·v).
- `zb-h1`: zero-bubble ZB-H1 (Qi et al., 'Zero Bubble Pipeline Parallelism', ICLR 2024, §3; sail-sg's
  ZeroBubbleH1Pipeline): backward split into B (input gradients, on the critical path) and W (weight gradients);
  stage i defers i of its W passes to the end, where they fill the drain's bubbles, with 1F1B's memory.
- `dualpipe`: DeepSeek-V3's bidirectional pipeline (DeepSeek-AI, 'DeepSeek-V3 Technical Report', 2024, §3.2.1,
  Fig. 5, Table 2; the order of deepseek-ai/DualPipe's `DualPipe.step`, re-derived here): half the micro-batches
  enter at stage 0 and flow up the ranks (direction 0), half enter at the last rank and flow down (direction 1), so
  rank i runs stage i of direction 0 and stage p − 1 − i of direction 1 — two copies of the model's stages. Chunk c
  of a DualPipe pass is its direction. Rank i's half-rank h = min(i, p − 1 − i) and n = m/2 micro-batches per
  direction give its eight steps (`order_dualpipe`); the steady state runs a forward of one direction merged with a
  backward of the other (F&B), and the fill and drain split some backwards into B and a deferred W (zero bubble).
- `dualpipev`: DualPipe cut in half along its V (deepseek-ai/DualPipe `DualPipeV`; PyTorch `ScheduleDualPipeV`,
  torchtitan's `DualPipeV`): one copy of the model in 2p virtual stages, rank i holding stage i (chunk 0) and stage
  2p − 1 − i (chunk 1), so the embedding and the output layer both sit on rank 0; every micro-batch goes up the
  ranks through chunk 0, turns on rank p − 1 (chunk 0 to chunk 1 there needs no message) and comes back down
  through chunk 1. DualPipe's eight steps with the rank for the half-rank and m for m/2 (`order_dualpipev`); the
  same messages as DualPipe (chunk 0 flows up in forward, chunk 1 down).

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
from narrowpath.spec.plan import interleave_groups_ok, interleaved_warmup

SCHEDULES = ("1f1b", "interleaved", "zb-h1", "dualpipe", "dualpipev")


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


def order_interleaved(p: int, v: int, m: int, i: int, group: int = 0) -> list[list[Pass]]:
    """Groups of passes between two exchanges: Megatron's steady state runs a forward and a backward, then one
    `send_forward_backward_recv_forward_backward`. Micro-batches run through a chunk in groups of `group` (Megatron-Core
    `microbatch_group_size_per_vp_stage`, default p); rank i warms up with 2(p − i − 1) + (v − 1)·group chunk
    forwards (`get_pp_rank_microbatches`)."""
    g = group or p
    table = schedule_table(m, v, g)
    total = m * v
    warm = interleaved_warmup(p, i, v, g, total)
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


def order_dualpipe(p: int, m: int, i: int) -> list[list[Pass]]:
    """Rank i's groups of passes under DualPipe (module docstring): a group of two is an F&B pair (the forward of
    one direction merged with the backward of the other, each one's communication hidden behind the other's
    compute). Local direction 0 is the one in which rank i is stage h (its early stage), local 1 the one in which it
    is stage p − 1 − h; ranks of the second half see the directions swapped. Backwards are whole (BW) or, where the
    source enables zero bubble, B now and W later (a FIFO of deferred weight gradients)."""
    half = p // 2
    h = min(i, p - 1 - i)
    return _two_chunk_order(half, m // 2, h, int(i >= half), "DualPipe", i)


def order_dualpipev(p: int, m: int, i: int) -> list[list[Pass]]:
    """Rank i's groups of passes under DualPipeV (module docstring): DualPipe's eight steps on a V — chunk 0 is
    virtual stage i, chunk 1 virtual stage 2p − 1 − i, every micro-batch runs both — with DualPipe's half-rank h,
    half-pipeline p/2 and per-direction count m/2 replaced by the rank i, the ranks p and the micro-batches m
    (deepseek-ai/DualPipe `DualPipeV.step`; PyTorch `ScheduleDualPipeV._calculate_single_rank_operations`, which
    tests/schedule/test_dualpipev.py checks this order against pass for pass)."""
    return _two_chunk_order(p, m, i, 0, "DualPipeV", i)


def _two_chunk_order(half: int, n: int, h: int, swap: int, name: str, rank: int) -> list[list[Pass]]:
    """The eight steps DualPipe and DualPipeV share, for a rank at depth h of a pipeline of `half` ranks per chunk
    and n micro-batches per chunk; `swap` maps the local chunk (0: the one the rank meets early) to the program's."""
    middle = h == half - 1
    nf, nb = [0, 0], [0, 0]
    deferred: list[Pass] = []
    out: list[list[Pass]] = []

    def f(loc: int) -> Pass:
        c = loc ^ swap
        nf[loc] += 1
        return Pass("F", c, nf[loc] - 1)

    def b(loc: int, zb: bool = False) -> Pass:
        c = loc ^ swap
        nb[loc] += 1
        if zb:
            deferred.append(Pass("W", c, nb[loc] - 1))
            return Pass("B", c, nb[loc] - 1)
        return Pass("BW", c, nb[loc] - 1)

    def w() -> Pass:
        return deferred.pop(0)

    out += [[f(0)] for _ in range((half - h - 1) * 2)]                     # 1: F0 warm-up
    for _ in range(h + 1):                                                 # 2: F0 F1
        out += [[f(0)], [f(1)]]
    for _ in range(half - h - 1):                                          # 3: B1 W1 F1 (zero bubble)
        out += [[b(1, True)], [w()], [f(1)]]
    for k in range(n - 2 * half + h + 1):                                  # 4: F0&B1, F1&B0 (steady state)
        if k == 0 and middle:  # the source does not overlap the middle ranks' first pair
            out += [[f(0)], [b(1)]]
        else:
            out.append([f(0), b(1)])
        out.append([f(1), b(0)])
    for _ in range(half - h - 1):                                          # 5: B1, F1&B0
        out += [[b(1)], [f(1), b(0)]]
    zb = False
    for k in range(h + 1):                                                 # 6: B1 B0 (second half zero bubble)
        if k == (h + 1) // 2 and h % 2 == 1:
            zb = True
        out.append([b(1, zb)])
        if k == (h + 1) // 2 and h % 2 == 0:
            zb = True
        out.append([b(0, zb)])
    for _ in range(half - h - 1):                                          # 7: W, B0 (zero bubble)
        out += [[w()], [b(0, True)]]
    out += [[w()] for _ in range(h + 1)]                                   # 8: W drain
    if deferred or nf != [n, n] or nb != [n, n]:
        raise SimulationError(f"{name} program of rank {rank}: unbalanced passes (internal error)")
    return out


def _dual_next(i: int, chunk: int, p: int, forward: bool) -> int | None:
    """DualPipe: the rank a pass's output goes to (forward: activations; else input gradients), None at an end.
    Direction 0 flows up the ranks in forward, direction 1 down. DualPipeV alike: chunk 0 up, chunk 1 down, and
    None at rank p − 1 too, where chunk 0 hands to chunk 1 on the same rank (and its gradient back)."""
    up = (chunk == 0) == forward
    j = i + 1 if up else i - 1
    return j if 0 <= j < p else None


def _output_to(op: Pass, i: int, p: int, v: int, dual: bool = False) -> tuple | None:
    """Message id of a pass's output that another stage consumes, or None (local or nothing). DualPipe ids carry
    the receiving rank last (the two directions flow opposite ways)."""
    if dual:
        if op.kind == "W":
            return None
        j = _dual_next(i, op.chunk, p, op.kind == "F")
        return None if j is None else ("F" if op.kind == "F" else "B", i, op.chunk, op.mb, j)
    if op.kind == "F":
        nxt = (i + 1, op.chunk) if i < p - 1 else (0, op.chunk + 1)
        return ("F", i, op.chunk, op.mb) if nxt[1] < v and p > 1 else None
    if op.kind in ("B", "BW"):
        prv = (i - 1, op.chunk) if i > 0 else (p - 1, op.chunk - 1)
        return ("B", i, op.chunk, op.mb) if prv[1] >= 0 and p > 1 else None
    return None


def message_peers(mid: tuple, p: int) -> tuple[int, int]:
    """(sending, receiving) rank of a message id (`_output_to`): DualPipe ids name the receiver last; otherwise a
    forward's output goes up one stage (the last stage's to stage 0) and an input gradient down one."""
    src = mid[1]
    return src, mid[4] if len(mid) > 4 else (src + 1) % p if mid[0] == "F" else (src - 1) % p


def _input_from(op: Pass, i: int, p: int, v: int, dual: bool = False) -> tuple | None:
    if p == 1:
        return None
    if dual:
        if op.kind == "W":
            return None
        j = _dual_next(i, op.chunk, p, op.kind != "F")  # a forward's input comes from where gradients go
        return None if j is None else ("F" if op.kind == "F" else "B", j, op.chunk, op.mb, i)
    if op.kind == "F":
        src = (i - 1, op.chunk) if i > 0 else (p - 1, op.chunk - 1)
        return ("F", src[0], src[1], op.mb) if src[1] >= 0 else None
    if op.kind in ("B", "BW"):
        src = (i + 1, op.chunk) if i < p - 1 else (0, op.chunk + 1)
        return ("B", src[0], src[1], op.mb) if src[1] < v else None
    return None


def check_dualpipe(p: int, m: int, field: str = "plan.pipeline_schedule: dualpipe") -> None:
    """DualPipe's own preconditions (deepseek-ai/DualPipe asserts them): an even number of ranks, and an even number
    of micro-batches, at least two per rank."""
    if p < 2 or p % 2:
        raise SimulationError(f"{field}: needs an even number of pipeline stages (>= 2), got pp {p}")
    if m % 2 or m < 2 * p:
        raise SimulationError(f"{field}: needs an even number of micro-batches, at least 2·pp = {2 * p}; got {m}")


def check_dualpipev(p: int, m: int, field: str = "plan.pipeline_schedule: dualpipev") -> None:
    """DualPipeV's precondition (PyTorch ScheduleDualPipeV refuses fewer): at least as many micro-batches as its 2p
    virtual stages."""
    if p < 2:
        raise SimulationError(f"{field}: needs a pipeline (pp >= 2), got pp {p}")
    if m < 2 * p:
        raise SimulationError(f"{field}: needs at least as many micro-batches as its 2·pp = {2 * p} virtual stages; "
                              f"got {m}")


@lru_cache(maxsize=64)
def build_programs(schedule: str, p: int, v: int, m: int, overlap: bool = False,
                   group: int = 0) -> tuple[StageProgram, ...]:
    """Every stage's program for one step. `overlap` (Megatron-Core overlap_p2p_comm): every pass posts its send
    as soon as it ends and the receive of the pass after it (no batching of a forward with a backward). `group`:
    the interleaved schedule's micro-batch group (0: p, Megatron-Core's default)."""
    if schedule not in SCHEDULES:
        raise SimulationError(f"--schedule: unknown pipeline schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    if schedule == "dualpipe":
        check_dualpipe(p, m)
    if schedule == "dualpipev":
        check_dualpipev(p, m)
        if v != 2:
            raise SimulationError(f"--schedule dualpipev: runs two chunks per stage (a V), the plan has vpp={v}")
    elif schedule != "interleaved" and v > 1:
        raise SimulationError(f"--schedule {schedule}: needs one chunk per stage, the plan has vpp={v}")
    if schedule == "interleaved" and v == 1:
        schedule = "1f1b"
    g = group or p
    if schedule == "interleaved" and not interleave_groups_ok(p, m, group):
        raise SimulationError(f"interleaved schedule: micro-batch groups of {g} over {m} micro-batches on {p} stages "
                              "(Megatron-Core takes a group of p to m and a last group of none or at least p)"
                              if group else f"interleaved schedule: {m} micro-batches are not divisible by the {p} "
                              "pipeline stages (Megatron-LM refuses this split too)")
    dual = schedule in ("dualpipe", "dualpipev")
    out = []
    for i in range(p):
        if schedule == "interleaved":
            groups = order_interleaved(p, v, m, i, g)
            if overlap:
                groups = [[x] for grp in groups for x in grp]
        elif schedule == "dualpipe":
            groups = order_dualpipe(p, m, i)
        elif schedule == "dualpipev":
            groups = order_dualpipev(p, m, i)
        else:
            groups = [[x] for x in (order_zbh1(p, m, i) if schedule == "zb-h1" else order_1f1b(p, m, i))]
        items: list = []
        prev: list[Pass] = []
        for grp in groups + [[]]:
            msgs = [(mid, True) for op in prev if (mid := _output_to(op, i, p, v, dual)) is not None]
            msgs += [(mid, False) for op in grp if (mid := _input_from(op, i, p, v, dual)) is not None]
            items.append(Exchange(tuple(msgs)))
            items += grp
            prev = grp
        out.append(StageProgram(i, tuple(items)))
    return tuple(out)


def completing_passes(programs: tuple[StageProgram, ...]) -> frozenset:
    """(stage, kind, chunk, micro-batch) of each stage's last whole backward or weight-gradient pass of each chunk:
    the pass after which the chunk's gradients are complete (bucket readiness)."""
    out = set()
    for prog in programs:
        last = {}
        for x in prog.items:
            if isinstance(x, Pass) and x.kind in ("BW", "W"):
                last[x.chunk] = (prog.stage, x.kind, x.chunk, x.mb)
        out.update(last.values())
    return frozenset(out)


def sync_launches(programs: tuple[StageProgram, ...], mode: str = "hooks") -> dict:
    """(stage, kind, chunk, micro-batch) of the pass after which a chunk's gradient buckets are released → (that
    chunk, whether they stream out while the pass runs), for a launch `mode` (schedule.chunks.sync_launch_mode).
    `hooks`: each chunk's completing pass, streaming. `megatron` (Megatron-Core's DDP, --no-align-grad-reduce):
    the completing pass, streaming only for stage 0's chunk 0 (the one chunk in buckets), every other chunk whole
    at the pass's end. `aligned` (Megatron-Core's default): interleaved, stage i launches chunk c whole after its
    i-th backward past the one that completes c (`backward_step_helper_postprocess`:
    grad_sync_virtual_microbatch_id = virtual_microbatch_id − pipeline_parallel_rank); one chunk (1F1B), stage 0
    streams during its last backward. A chunk without an entry is launched once its stage's program is done
    ("Launch any remaining grad reductions", after the cool-down: chunk 0 on every stage but 0)."""
    done = completing_passes(programs)
    if mode == "hooks":
        return {k: (k[2], True) for k in done}
    if any(isinstance(x, Pass) and x.kind != "BW" and x.kind != "F" for prog in programs for x in prog.items):
        raise ValueError(f"sync_launches: the {mode} launch is Megatron-Core's, on its 1F1B and interleaved "
                         "programs (whole backwards); this program splits them (zero bubble, DualPipe)")
    if mode == "megatron":
        return {k: (k[2], k[0] == 0 and k[2] == 0) for k in done}
    out = {}
    for prog in programs:
        i = prog.stage
        bw = [(i, x.kind, x.chunk, x.mb) for x in prog.items if isinstance(x, Pass) and x.kind == "BW"]
        if len({k[2] for k in bw}) == 1:  # 1F1B: rank 0's hooks run during its last backward
            out.update({k: (k[2], True) for k in bw if k in done and i == 0})
            continue
        for j, k in enumerate(bw):
            if k in done and j + i < len(bw):
                out[bw[j + i]] = (k[2], False)
    return out
