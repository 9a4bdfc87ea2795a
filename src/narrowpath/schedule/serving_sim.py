"""Request-level simulation of one serving lane (one micro-batch of one attention-DP rank; schedule.serving_run
spreads requests over the lanes): continuous batching under a sequence limit and a per-iteration token budget,
chunked prefill, decode-first or prefill-first iterations, paged KV with reserve-ahead admission or on-demand
allocation with preemption, prefill-only and decode-only lanes of a disaggregated deployment, speculative
decoding, and static batches.

Semantics (Yu et al. 2022, Orca; Kwon et al. 2023, vLLM; Agrawal et al. 2024, Sarathi-Serve; TensorRT-LLM
in-flight batching):
- an iteration runs every running decode (q query tokens each: 1, or 1 + draft tokens under speculative decoding)
  and prompt work: `decode-first` fills the token budget left by the decodes with prompt chunks (the prompt in
  progress first, then waiting requests in arrival order; without chunked prefill a prompt is admitted only if it
  fits whole); `prefill-first` runs an iteration of prompts alone whenever a waiting request can be admitted;
- the iteration that finishes a prompt emits the request's first token — in a disaggregated deployment the client
  reads it when a decode lane admits the request (its KV cache handed off and a slot free: TensorRT-LLM's
  disaggregated server, SGLang's and Dynamo's stream the decode instance's response); each decode iteration one
  more (under speculative decoding (1 − α^(k+1))/(1 − α) on average, Leviathan et al. 2023 eq. 1);
- `reserve` admission takes blocks for prompt + output up front and never preempts; `on-demand` takes blocks as
  the context grows and, when a step would overflow, preempts the newest running request, which re-queues at the
  head and recomputes its prompt plus what it generated (vLLM recompute preemption);
- closed loop (`concurrency`): a new request is sent when one finishes.
Between events (an arrival that could be admitted, a finish, a KV overflow) a decode-only batch is unchanged and
its step time grows linearly with the context, so the steps up to the next event advance together (trapezoid
sum, exact for a linear step time); the result equals stepping one iteration at a time.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from narrowpath.cost.serving_memory import kv_footprint_tokens
from narrowpath.errors import SimulationError
from narrowpath.schedule.serving_stats import IterationRecord, LaneTotals

_sum, _min = np.add.reduce, np.minimum.reduce  # ndarray.sum / .min without their Python wrappers (hot loops)

NO_GROWTH = (0, None, 0)
ROLES = {"prefill-only": "prefill", "decode-only": "decode"}
"""The role a logged lane's records carry (IterationRecord.role)."""

LOG_LIMIT = 50_000
"""Iteration records kept for a logged lane (timelines, plots); a disaggregated run logs one lane of each
instance into one list, each up to this many."""


@dataclass(frozen=True, slots=True)
class LaneSpec:
    """Limits and policy of one lane."""

    max_seqs: int
    max_tokens: int
    kv_blocks: int
    block_tokens: int
    policy: str
    """decode-first, prefill-first, prefill-only or decode-only."""
    admission: str
    chunked: bool
    spec_tokens: int = 0
    spec_gain: float = 1.0
    """Tokens a decode step yields per sequence."""
    merge: bool = True
    """Advance identical decode steps together up to the next event (False: one iteration at a time, the
    reference the merged run is checked against)."""
    kv_window_share: float = 0.0
    """Share of the KV bytes a token costs that sits on sliding-window layers (`ServingMemory.window_share`)."""
    kv_window_tokens: int = 0
    """Tokens a sliding-window layer keeps per sequence (`ServingMemory.window_tokens`)."""


def decode_lane_seqs(max_seqs: int, max_tokens: int, q: int) -> int:
    """Sequences a decode-only lane runs at once: its sequence limit, and no more than its token budget holds at q
    tokens a decode (1, or 1 + draft tokens under speculative decoding) — a generation request counts against
    max_num_tokens as a prompt token does (TensorRT-LLM's MicroBatchScheduler, vLLM's token budget); at least one."""
    return max(1, min(max_seqs, max_tokens // q))


def linear_span(t_at, n: int) -> int:
    """Largest m ≤ n such that the step times t_at(1..m) lie on one line, so that m merged steps are priced
    exactly by their trapezoid. A step's GPU time is linear in the context, but the iteration takes the larger of
    it and the executor's host time, or pp × the slowest stage: a convex piecewise-linear function whose first kink
    ends the run (the times leave the line through t_at(1), t_at(2) there and never come back)."""
    if n <= 2:
        return n
    t1 = t_at(1)
    slope = t_at(2) - t1

    def on_line(m: int) -> bool:
        return abs(t_at(m) - (t1 + (m - 1) * slope)) <= 1e-9 * max(abs(t1), 1e-30)

    if on_line(n):
        return n
    lo, hi = 2, n  # on_line(lo) holds, on_line(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if on_line(mid) else (lo, mid)
    return lo


def steps_to_pass(duration, gap_s: float, n: int) -> int:
    """Fewest k ≤ n merged steps whose time `duration(k)` (increasing in k) reaches `gap_s`: the run that ends at
    the first iteration boundary at or after an event `gap_s` ahead, where the next iteration sees it (a lane admits
    what arrived by `now`); n if none."""
    if n <= 1 or duration(n) < gap_s:
        return max(1, n)
    if gap_s <= 0:
        return 1
    if duration(n - 1) < gap_s:  # the usual answer (the caller's n is its bound on the steps to the event)
        return n
    lo, hi = 0, n - 1  # duration(lo) = 0 < gap, duration(hi) >= gap
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if duration(mid) < gap_s else (lo, mid)
    return hi


def linear_runs_s(t_at, n: int) -> float:
    """Exact time of n consecutive steps whose times t_at(1..n) are convex piecewise linear: a trapezoid per
    linear stretch (see linear_span)."""
    total, start = 0.0, 0
    while start < n:
        m = linear_span(lambda k: t_at(start + k), n - start)
        total += m * (t_at(start + 1) + t_at(start + m)) / 2
        start += m
    return total


class Step:
    """An iteration a lane has decided on: `decodes` running sequences, prompt `chunks`, and (decode-only) up to
    `n_max` identical steps whose time grows linearly from `t0` (`t_at(k)` prices the k-th)."""

    __slots__ = ("decodes", "chunks", "n_max", "t0", "t1", "dctx", "pre_tokens", "pairs", "q", "t_at", "wake",
                 "slope")

    def __init__(self, decodes, chunks, n_max, t0, t1, dctx, pre_tokens, pairs, q):
        self.decodes, self.chunks, self.n_max, self.t0, self.t1 = decodes, chunks, n_max, t0, t1
        self.dctx, self.pre_tokens, self.pairs, self.q = dctx, pre_tokens, pairs, q
        self.t_at = None
        self.slope = None
        self.wake = math.inf
        """When the lane next needs an iteration boundary (an arrival it could admit): a merged run ends at the
        first boundary after it."""

    def duration(self, n: int) -> float:
        """Time of the first n steps: the trapezoid of the first and n-th step times (exact for a linear growth)."""
        if n <= 1 or self.t_at is None:
            return self.t0 * n
        return n * (self.t0 + self.t_at(n)) / 2

    def run_s(self, n: int) -> float:
        """`duration(n)` for n within the run's linear span (linear_span) from the first two step times alone:
        n·t0 + slope·n(n − 1)/2, without pricing the n-th step (what a search for a run's end needs)."""
        if n <= 1 or self.t_at is None:
            return self.t0 * n
        if self.slope is None:
            self.slope = self.t_at(2) - self.t0
        return n * self.t0 + self.slope * n * (n - 1) / 2


class Lane:
    """State and loop of one lane. `step_s(T, dec, dec_ctx, pre_tok, pre_pairs, pre_ctx, rows, q[, requests])`
    prices an iteration; `arr` (arrival times; inf = released by the closed loop), `n_in`, `n_out`, `first`, `finish` are
    global per-request arrays the lane reads and writes for its requests `rids` (sorted by arrival). Under a closed
    loop (`concurrency` > 0) a request is sent when a slot frees, first in first out, and never before its own
    arrival (`earliest`, the arrivals before the loop held them back: an open-loop rate or a trace under a
    concurrency cap, as vLLM's benchmark runs --request-rate with --max-concurrency)."""

    def __init__(self, spec: LaneSpec, step_s, rids: np.ndarray, arr, n_in, n_out, first, finish,
                 totals: LaneTotals, log: list | None, concurrency: int = 0, earliest: np.ndarray | None = None):
        self.s, self.step_s, self.rids = spec, step_s, rids
        self.arr, self.n_in, self.n_out, self.first, self.finish = arr, n_in, n_out, first, finish
        self.tot, self.log, self.conc, self.earliest = totals, log, concurrency, earliest
        self.logged = 0  # records this lane has put in the log
        self.now = 0.0
        self.p = 0  # next request of `rids` not yet arrived
        self.released = len(rids) if not concurrency else min(concurrency, len(rids))
        self.waiting: deque = deque()
        self.pre: list[list] = []  # [rid, done, prompt, resumed]
        cap = spec.max_seqs + 1
        self.seqs = spec.max_seqs if spec.policy != "decode-only" else decode_lane_seqs(
            spec.max_seqs, spec.max_tokens, 1 + spec.spec_tokens)  # sequences it runs at once
        self.n = 0  # running sequences: the first n entries, oldest admission first
        self.r_id = np.zeros(cap, dtype=np.int64)
        self.r_ctx = np.zeros(cap)
        self.r_rem = np.zeros(cap)
        self.r_blk = np.zeros(cap)  # blocks held (reserve: the whole budget; whole numbers, kept as floats to be
        # compared with the ceilings of the contexts without a cast)
        self._grow = NO_GROWTH  # (steps, blocks each decode gains over them, their sum) of the last overflow search
        self.free = spec.kv_blocks
        self.prompt_of: dict[int, int] = {}  # recompute length of preempted requests
        self._need_cache: dict[int, int] = {}
        self.ready: list[tuple[float, int]] = []  # prefill-only lanes: (first token time, rid)
        self.horizon = math.inf
        """Earliest time a request not yet among `rids` could reach the lane (a disaggregated closed loop hands
        requests out as other lanes produce them, schedule.serving_disagg): a merged decode run that could admit one
        ends at the first boundary after it. inf: every request is known."""
        self.on_finish = None
        """Called with (rid, time) when a request finishes (the closed loop across a disaggregated deployment)."""

    # ---- admission -------------------------------------------------------------------------------------------
    def _blocks(self, tokens: float) -> int:
        return int(math.ceil(self._footprint(tokens) / self.s.block_tokens))

    def _footprint(self, tokens):
        """Full-context tokens' worth of KV a sequence of `tokens` holds (cost.serving_memory.kv_footprint_tokens)."""
        return kv_footprint_tokens(tokens, self.s.kv_window_share, self.s.kv_window_tokens)

    def _need(self, rid: int) -> int:
        """Blocks a waiting request needs to be admitted."""
        if rid in self.prompt_of:
            prompt = self.prompt_of[rid]
        else:
            need = self._need_cache.get(rid)
            if need is None:
                need = self._need_cache[rid] = self._need_of(int(self.n_in[rid]), rid)
            return need
        return self._need_of(prompt, rid)

    def _need_of(self, prompt: int, rid: int) -> int:
        if self.s.admission == "reserve" and self.s.policy != "prefill-only":
            return self._blocks(self.n_in[rid] + self.n_out[rid] + self.s.spec_tokens)
        if self.s.policy == "decode-only":
            return self._blocks(prompt + 1 + self.s.spec_tokens)
        return self._blocks(prompt)

    def _arrivals(self) -> None:
        while self.p < self.released and self.arr[self.rids[self.p]] <= self.now:
            self.waiting.append(int(self.rids[self.p]))
            self.p += 1

    def _next_arrival(self) -> float:
        return float(self.arr[self.rids[self.p]]) if self.p < self.released else math.inf

    def _finish(self, rid: int) -> None:
        self.finish[rid] = self.now
        if self.on_finish is not None:
            self.on_finish(rid, self.now)
        if self.conc and self.released < len(self.rids):  # closed loop: the next request goes out now (or arrives)
            nxt = self.rids[self.released]
            self.arr[nxt] = self.now if self.earliest is None else max(self.now, float(self.earliest[nxt]))
            self.released += 1

    def _admissible(self) -> bool:
        if not self.waiting or self.n + len(self.pre) >= self.seqs:
            return False
        return self._need(self.waiting[0]) <= self.free

    # ---- one iteration -----------------------------------------------------------------------------------------
    def _plan_prompts(self, budget: int) -> list[tuple[list, int]]:
        """Prompt chunks of this iteration within `budget` tokens: the prompts in progress, then admissions."""
        chunks = []
        for item in self.pre:
            if budget <= 0:
                break
            c = min(item[2] - item[1], budget)  # a prompt in progress always continues
            chunks.append((item, c))
            budget -= c
        while budget > 0 and self._admissible():
            rid = self.waiting[0]
            prompt = self.prompt_of.get(rid, int(self.n_in[rid]))
            if prompt > budget and not self.s.chunked and (chunks or prompt <= self.s.max_tokens):
                break  # waits for an iteration whose budget holds it whole
            self.waiting.popleft()
            need = self._need(rid)
            self.free -= need
            item = [rid, 0, prompt, rid in self.prompt_of, need]
            self.pre.append(item)
            c = min(prompt, budget)
            chunks.append((item, c))
            budget -= c
        return chunks

    def _preempt_for(self, g: float) -> None:
        """On-demand KV: take the blocks every decode needs to grow by g tokens, preempting the newest running
        requests while they do not fit."""
        B = self.s.block_tokens
        while self.n:
            n = self.n
            grow = np.ceil(self._footprint(self.r_ctx[:n] + g) / B) - self.r_blk[:n]
            np.maximum(grow, 0.0, out=grow)
            need = int(_sum(grow))
            if need <= self.free:
                self.free -= need
                self.r_blk[:n] += grow
                return
            self.n = n - 1
            rid, ctx, blk = int(self.r_id[n - 1]), self.r_ctx[n - 1], int(self.r_blk[n - 1])
            self.free += blk
            self.prompt_of[rid] = int(round(ctx))
            self.waiting.appendleft(rid)
            self.tot.preemptions += 1

    def _admit_decode(self, rid: int, ctx: float, rem: float, blocks: int) -> None:
        i = self.n
        self.r_id[i], self.r_ctx[i], self.r_rem[i], self.r_blk[i] = rid, ctx, rem, blocks
        self.n = i + 1

    def _record(self, start: float, dt: float, steps: int, dec: int, prompt_tokens: int, first: int,
                last: int) -> None:
        """Account and log an iteration (or merged decode steps) that started at `start` and held `first` KV blocks
        in its first step and `last` in its last. Blocks held during merged steps grow by a block whenever a
        sequence's context crosses one: the run holds their mean, the trapezoid of its first and last steps (exact
        when the crossings are spread evenly over the steps, as a batch's staggered contexts spread them; off by
        under a block per sequence otherwise)."""
        used = (first + last) / 2
        self.tot.kv_block_s += used * dt
        self.tot.kv_peak_blocks = max(self.tot.kv_peak_blocks, last)
        if self.log is not None and self.logged < LOG_LIMIT:
            self.logged += 1
            role = ROLES.get(self.s.policy, "lane")
            self.log.append(IterationRecord(start, dt, steps, dec, prompt_tokens, used, role))

    def run(self) -> None:
        """Serve the lane's requests to the end, one iteration (or merged decode steps) at a time."""
        while self.advance():
            pass

    def advance(self, horizon: float = math.inf) -> bool:
        """One iteration (or merged decode steps), or the wait for the next arrival; False when idle with no known
        arrival. `horizon`: `self.horizon` for this step."""
        self.horizon = horizon
        step = self.prepare()
        if not isinstance(step, Step):
            if math.isinf(step):
                return False
            self.now = step
            return True
        self.commit(step, step.n_max, step.duration(step.n_max))
        return True

    def prepare(self) -> "Step | float":
        """Decide the next iteration (admissions, preemptions and block allocations included) and return it, or
        the time until which the lane has nothing to do (inf: it is done)."""
        s = self.s
        q = 1 + s.spec_tokens
        decode_lane = s.policy == "decode-only"
        while True:
            self._arrivals()
            if decode_lane:
                while self._admissible():
                    rid = self.waiting.popleft()
                    if rid not in self.prompt_of:  # the client reads the decode instance's stream (not again
                        self.first[rid] = self.now  # when a preempted request is admitted anew)
                    if self.n_out[rid] <= 1:  # the prefill instance produced its only token
                        self._finish(rid)
                        continue
                    need = self._need(rid)
                    self.free -= need
                    self._admit_decode(rid, self.n_in[rid] + 1, self.n_out[rid] - 1, need)
            if not self.n and not self.pre and not self._admissible():
                nxt = self._next_arrival()
                if math.isinf(nxt) and self.waiting:
                    rid = self.waiting[0]
                    raise SimulationError(
                        f"a request of {int(self.n_in[rid])} + {int(self.n_out[rid])} tokens needs "
                        f"{self._need(rid)} KV blocks of {s.block_tokens} tokens; a lane holds {s.kv_blocks}")
                if nxt > self.now or math.isinf(nxt):
                    return nxt
                continue
            prefill_turn = s.policy == "prefill-only" or (s.policy == "prefill-first" and (self.pre or
                                                                                            self._admissible()))
            decodes = 0 if prefill_turn else self.n
            if s.admission == "on-demand" and decodes:
                self._preempt_for(s.spec_gain)  # blocks for this step's tokens
                decodes = self.n
            chunks = [] if decode_lane else self._plan_prompts(s.max_tokens - decodes * q)
            if not decodes and not chunks:
                if not self.n:  # nothing fits the budget yet: wait for the next arrival
                    nxt = self._next_arrival()
                    if nxt > self.now or math.isinf(nxt):
                        return nxt
                    continue
                decodes = self.n
                if s.admission == "on-demand":
                    self._preempt_for(s.spec_gain)
                    decodes = self.n
            return self._mixed_step(decodes, chunks, q) if chunks else self._decode_step(q)

    def _mixed_step(self, decodes: int, chunks: list, q: int) -> "Step":
        pre_tok = sum(c for _, c in chunks)
        pairs = sum(c * (item[1] + (c + 1) / 2) for item, c in chunks)
        pctx = sum(item[1] + c for item, c in chunks)
        done = sum(1 for item, c in chunks if item[1] + c >= item[2])
        dctx = float(_sum(self.r_ctx[:decodes])) if decodes else 0.0
        t0 = self.step_s(decodes * q + pre_tok, decodes, dctx, pre_tok, pairs, pctx, decodes + done, q,
                         decodes + len(chunks))
        return Step(decodes, chunks, 1, t0, t0, dctx, pre_tok, pairs, q)

    def commit(self, step: "Step", n: int, dt: float) -> None:
        """Carry out `n` (≤ step.n_max) steps of `step`, which take `dt` (the slowest lane's time in a group)."""
        start = self.now
        self.now += dt
        if step.chunks:
            self._commit_mixed(step, start, dt)
            return
        D, g = step.decodes, self.s.spec_gain
        dctx = n * step.dctx + D * g * n * (n - 1) / 2
        self._account(dt, n, D, n * D * step.q, 0, dctx, 0.0)
        graph = getattr(self.step_s, "decode_graph", None)  # the batch a captured graph runs it at, None: eager
        self.tot.decode_only(n, D, dctx, graph(D) if graph is not None else D)
        first = self.s.kv_blocks - self.free  # the first step's blocks are taken before it
        self._advance(n)
        self._record(start, dt, n, D, 0, first, self.s.kv_blocks - self.free)
        self._retire()

    def _commit_mixed(self, step: "Step", start: float, dt: float) -> None:
        """One iteration with prompt chunks (and the running decodes unless there are none)."""
        s, decodes, chunks = self.s, step.decodes, step.chunks
        done = [item for item, c in chunks if item[1] + c >= item[2]]
        self._account(dt, 1, decodes, decodes * step.q, step.pre_tokens, step.dctx, step.pairs)
        self.tot.prompt_iteration(decodes, step.dctx, len(chunks), len(done))
        self.tot.prompt_prefix_tokens += sum(item[1] for item, _ in chunks)
        used = s.kv_blocks - self.free
        self._record(start, dt, 1, decodes, step.pre_tokens, used, used)
        if decodes:
            self._advance(1)
            self._retire()
        for item, c in chunks:
            item[1] += c
        for item in done:
            self.pre.remove(item)
            rid, prompt, resumed, blocks = item[0], item[2], item[3], item[4]
            if not resumed:
                self.first[rid] = self.now
            rem = float(self.n_out[rid] - 1) if not resumed else self._resumed_rem(rid)
            if s.policy == "prefill-only":
                self.free += blocks
                self.ready.append((self.now, rid))
            elif rem <= 0:
                self.free += blocks
                self._finish(rid)
            else:
                self.prompt_of.pop(rid, None)
                self._admit_decode(rid, prompt + 1, rem, blocks)

    def _resumed_rem(self, rid: int) -> float:
        generated = self.prompt_of[rid] - int(self.n_in[rid])  # the recomputed prompt then emits one more
        return float(self.n_out[rid] - generated - 1)

    def _decode_step(self, q: int) -> "Step":
        """Decode-only iterations: as many at once as pass before the lane's next event."""
        s, g = self.s, self.s.spec_gain
        D = self.n
        L0 = float(_sum(self.r_ctx[:D]))
        n = max(1, int(math.ceil(float(_min(self.r_rem[:D])) / g - 1e-9)))
        line = getattr(self.step_s, "decode_line", None)
        at = line(D * q, D, D, q) if line is not None else (lambda c: self.step_s(D * q, D, c, 0, 0, 0, D, q))
        t0 = at(L0)
        step = Step(D, [], n, t0, t0, L0, 0, 0.0, q)
        priced = {1: t0}  # steps priced: the second and the run's end are asked for by its span, cuts and duration

        def t_at(k: int) -> float:
            t = priced.get(k)
            if t is None:
                t = priced[k] = at(L0 + (k - 1) * D * g)
            return t
        step.t_at = t_at
        if self._admissible():
            n = 1
        elif not self.waiting and D + len(self.pre) < self.seqs:
            step.wake = min(self._next_arrival(), self.horizon)  # an arrival could be admitted: stop at the
            # step that sees it
        if not s.merge:
            n = 1
        # each cut below takes the smaller of n and a bound of its own (at least 1, independent of n: `run_s` is one
        # fixed line, the overflow's block need grows with the steps), so their order does not matter; cheap first
        if not math.isinf(step.wake):
            # steps never get shorter: at most the steps of t0 that reach the arrival; of those, the steps to it on
            # the run's line (exact within its linear stretch, which linear_span then keeps)
            n = min(n, max(1, math.ceil((step.wake - self.now) / t0)))
            n = steps_to_pass(step.run_s, step.wake - self.now, n)
        if s.admission == "on-demand" and n > 1:
            n = self._steps_until_overflow(n)
        step.n_max = linear_span(step.t_at, n)
        return step

    def _steps_until_overflow(self, n_max: int) -> int:
        """Largest n ≤ n_max decode steps whose block growth fits the free blocks (≥ 1)."""
        g, B = self.s.spec_gain, self.s.block_tokens

        ctx, blk = self.r_ctx[:self.n], self.r_blk[:self.n]
        grown = {}

        def need(n: int) -> int:  # blocks beyond those held (the first step's are already taken)
            grow = np.ceil(self._footprint(ctx + n * g) / B) - blk
            np.maximum(grow, 0.0, out=grow)
            total = int(_sum(grow))
            grown[n] = (n, grow, total)
            return total

        lo, hi = 1, n_max
        if need(hi) > self.free:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if need(mid) <= self.free else (lo, mid)
            hi = lo
        self._grow = grown.get(hi, NO_GROWTH)  # what _advance takes if the lane runs these steps
        return hi

    def _advance(self, n: int) -> None:
        """n decode steps of every running sequence (`_retire` then retires the finished ones). With on-demand KV
        the first step's blocks were taken before the step (`_preempt_for`); the rest are taken here (as the
        overflow search priced them when the lane runs the steps it allowed)."""
        g = self.s.spec_gain
        k = self.n
        ctx, rem, blk = self.r_ctx[:k], self.r_rem[:k], self.r_blk[:k]
        ctx += n * g
        rem -= n * g
        steps, grow, total = self._grow
        self._grow = NO_GROWTH  # it belongs to this step's search only
        if self.s.admission == "on-demand" and n > 1:
            if steps != n:  # a lockstep group ran fewer steps than this lane's overflow search allowed
                grow = np.ceil(self._footprint(ctx) / self.s.block_tokens) - blk
                np.maximum(grow, 0.0, out=grow)
                total = int(_sum(grow))
            self.free -= total
            blk += grow

    def _retire(self) -> None:
        """Free the blocks of the running sequences that have produced their last token, and finish them."""
        k = self.n
        rem, blk = self.r_rem[:k], self.r_blk[:k]
        if _min(rem) > 1e-9:
            return
        done = rem <= 1e-9
        ids = self.r_id[:k][done].tolist()
        for rid, b in zip(ids, blk[done].tolist()):
            self.free += int(b)
            self._finish(rid)
        keep = ~done
        m = k - int(np.count_nonzero(done))
        for a in (self.r_id, self.r_ctx, self.r_rem, self.r_blk):
            a[:m] = a[:k][keep]
        self.n = m

    def _account(self, dt, steps, dec, dec_tok, pre_tok, dctx, pairs) -> None:
        t = self.tot
        t.iterations += steps
        t.busy_s += dt
        t.tokens += dec_tok + pre_tok
        t.decode_tokens += dec_tok
        t.prompt_tokens += pre_tok
        t.decode_ctx_tokens += dctx
        t.prompt_pairs += pairs


class LaneGroup:
    """Lanes that iterate in lockstep: the attention data-parallel ranks of one instance (and micro-batch), which
    every MoE layer synchronises — the experts serve the tokens of all ranks at once — so an iteration lasts as long
    as its slowest rank's (a rank with a prompt chunk holds up the others; a rank with nothing to do waits in the
    collective). TensorRT-LLM attention DP; DeepSeek-V3 §3.4 decoding with DP attention and EP experts."""

    def __init__(self, lanes: list[Lane]):
        self.lanes = lanes

    def run(self) -> None:
        while self.advance():
            pass

    def advance(self, horizon: float = math.inf) -> bool:
        """One iteration (or merged decode steps) of the group, or its wait for the next arrival; False when every
        lane is idle with no known arrival. `horizon`: the earliest time a request not yet known could reach a lane
        (a merged run that an idle rank could join stops at the boundary after it)."""
        lanes = self.lanes
        for ln in lanes:
            ln.horizon = horizon
        steps = [ln.prepare() for ln in lanes]
        act = [(ln, st) for ln, st in zip(lanes, steps) if isinstance(st, Step)]
        idle = [st for st in steps if not isinstance(st, Step)]
        now = max(ln.now for ln in lanes)
        if not act:
            t = min(idle)
            if math.isinf(t):
                return False
            for ln in lanes:
                ln.now = max(ln.now, t)
            return True
        n = min(st.n_max for _, st in act)
        # every rank steps at the slowest rank's pace: stop at the boundary after the first event any rank
        # waits for (an idle rank's next request, an arrival a decoding rank could admit)
        nxt = min(min(idle, default=math.inf), min(st.wake for _, st in act))
        if idle:
            nxt = min(nxt, horizon)
        if n > 1 and not math.isinf(nxt):
            n = steps_to_pass(lambda k: max(st.run_s(k) for _, st in act), nxt - now, n)
        dt = max(st.duration(n) for _, st in act)
        for ln, st in zip(lanes, steps):
            ln.now = now
            if isinstance(st, Step):
                ln.commit(st, n, dt)
            else:
                ln.now = now + dt
        return True
