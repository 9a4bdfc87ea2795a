"""What a serving simulation measured: per-request times, the iteration log of one lane, and the summary figures
(throughput, TTFT / TPOT / end-to-end latency at mean, p50, p90, p99, KV-cache utilisation).

Conventions (vLLM `benchmark_serving.py`, trtllm-bench): TTFT = first token time − arrival (queueing included);
TPOT = (finish − first token) / (output tokens − 1) per request, over requests with more than one output token;
end-to-end = finish − arrival; throughput = tokens / (last finish − first arrival).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

STATS = ("mean", "p50", "p90", "p99")


def summary(values: np.ndarray) -> dict[str, float]:
    """mean, p50, p90, p99 of `values` (linear interpolation between order statistics, numpy's default)."""
    if values.size == 0:
        return {k: 0.0 for k in STATS}
    p = np.percentile(values, (50, 90, 99))
    return {"mean": float(values.mean()), "p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2])}


def window_output_tokens_per_s(first_token_s: np.ndarray, finish_s: np.ndarray, output_tokens: np.ndarray,
                               start_s: float, end_s: float) -> float:
    """Output tokens per second generated inside the window [start_s, end_s]: a request's first token at its
    first_token_s, its other n − 1 spread evenly over (first_token_s, finish_s] (its TPOT), each counted for the
    share of that span inside the window. The rate of a system while its load is on, free of the ramp before the
    window and the drain after it (the steady-state throughput of a queue: tokens per second of the interval,
    not of first arrival to last finish). 0 for an empty window."""
    if not end_s > start_s:
        return 0.0
    first = ((first_token_s >= start_s) & (first_token_s <= end_s)).sum()
    span = finish_s - first_token_s
    inside = np.clip(np.minimum(finish_s, end_s) - np.maximum(first_token_s, start_s), 0.0, None)
    share = np.divide(inside, span, out=np.zeros_like(inside), where=span > 0)
    return float(first + ((output_tokens - 1) * share).sum()) / (end_s - start_s)


@dataclass(frozen=True, slots=True)
class IterationRecord:
    """One iteration (or `steps` identical decode iterations merged) of the logged lane."""

    start_s: float
    duration_s: float
    steps: int
    decodes: int
    prompt_tokens: int
    kv_blocks_used: float
    """Blocks held, the mean over merged steps (Lane._record)."""
    role: str = "lane"
    """Which lane: `lane` (serves prompts and decodes), or a disaggregated deployment's `prefill` or `decode`
    instance lane (the log holds one lane of each)."""


@dataclass
class LaneTotals:
    """Sums over a lane's iterations (the accounts read them)."""

    iterations: int = 0
    busy_s: float = 0.0
    tokens: float = 0.0
    """Σ T over iterations (decode query tokens + prompt tokens)."""
    decode_tokens: float = 0.0
    prompt_tokens: float = 0.0
    decode_ctx_tokens: float = 0.0
    """Σ over iterations of the context tokens decodes read."""
    prompt_pairs: float = 0.0
    prompt_prefix_tokens: float = 0.0
    """Σ over iterations of the tokens already cached ahead of their prompt chunks (Σ p: a chunked prompt's earlier
    chunks, a prefix-cache hit); the chunks' context is prompt_tokens + this."""
    kv_block_s: float = 0.0
    """∫ used KV blocks dt."""
    kv_peak_blocks: int = 0
    preemptions: int = 0
    handoff_s: float = 0.0
    prompt_iterations: int = 0
    """Iterations that carry prompt tokens (their decodes, prompt chunks and finished prompts below)."""
    prompt_iteration_decodes: float = 0.0
    prompt_iteration_decode_ctx: float = 0.0
    prompt_iteration_chunks: float = 0.0
    prompt_iteration_done: float = 0.0
    padded_decodes: float = 0.0
    """Σ over decode-only iterations run on a captured graph (or not held to graph sizes) of the batch they run at
    (their CUDA graph's size when padded)."""
    eager_iterations: int = 0
    """Decode-only iterations no captured graph fits (run eagerly), their decodes and context below."""
    eager_decodes: float = 0.0
    eager_decode_ctx: float = 0.0

    def add(self, other: "LaneTotals") -> None:
        """Add another set of lanes' sums to these (the peak is the larger of the two)."""
        for f in self.__dataclass_fields__:
            if f == "kv_peak_blocks":
                self.kv_peak_blocks = max(self.kv_peak_blocks, other.kv_peak_blocks)
            else:
                setattr(self, f, getattr(self, f) + getattr(other, f))

    def prompt_iteration(self, decodes: float, ctx: float, chunks: int, done: int) -> None:
        """Count an iteration with `chunks` prompt chunks (`done` of them finishing their prompt) beside `decodes`
        decodes reading `ctx` context tokens in all."""
        self.prompt_iterations += 1
        self.prompt_iteration_decodes += decodes
        self.prompt_iteration_decode_ctx += ctx
        self.prompt_iteration_chunks += chunks
        self.prompt_iteration_done += done

    def decode_only(self, n: int, decodes: float, ctx: float, graph: float | None) -> None:
        """Count n decode-only iterations of `decodes` sequences reading `ctx` context tokens in all, run at a
        captured graph's batch `graph` (None: eagerly)."""
        if graph is None:
            self.eager_iterations += n
            self.eager_decodes += n * decodes
            self.eager_decode_ctx += ctx
        else:
            self.padded_decodes += n * graph


@dataclass
class PoolTotals:
    """The lanes of one pool of a disaggregated deployment: how many, of how many GPUs, and their sums."""

    lanes: int
    gpus: int
    kv_blocks_per_lane: int
    totals: LaneTotals

    def busy_share(self, makespan_s: float) -> float:
        """Mean share of the run its lanes spend iterating: the pool's own load (one near 1 is the narrow pool)."""
        return self.totals.busy_s / (self.lanes * makespan_s) if self.lanes and makespan_s > 0 else 0.0

    def kv_utilisation(self, makespan_s: float) -> float:
        cap = self.kv_blocks_per_lane * self.lanes * makespan_s
        return self.totals.kv_block_s / cap if cap > 0 else 0.0


@dataclass
class ServingResult:
    """A simulated run."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    lanes: int
    kv_blocks_per_lane: int
    block_tokens: int
    totals: LaneTotals
    log: list[IterationRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kv_ready_s: np.ndarray | None = None
    """Disaggregated: when each prompt's KV cache reaches the decode pool (prompt done + hand-off; the client's first
    token comes when a decode lane then admits it); None when colocated."""
    pools: dict[str, PoolTotals] | None = None
    """Disaggregated: the `prefill` and `decode` pools' lanes and sums apart (`totals` holds both); None when
    colocated."""

    @property
    def makespan_s(self) -> float:
        return float(self.finish_s.max() - self.arrival_s.min()) if self.finish_s.size else 0.0

    @property
    def output_tokens_per_s(self) -> float:
        return float(self.output_tokens.sum()) / self.makespan_s if self.makespan_s > 0 else 0.0

    @property
    def total_tokens_per_s(self) -> float:
        return float(self.output_tokens.sum() + self.input_tokens.sum()) / self.makespan_s if self.makespan_s else 0.0

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        many = self.output_tokens > 1
        return (self.finish_s[many] - self.first_token_s[many]) / (self.output_tokens[many] - 1)

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finish_s - self.arrival_s

    @property
    def kv_utilisation(self) -> float:
        """Time-averaged share of the deployment's KV blocks in use over the run: Σ block·s over Σ blocks × the
        makespan — each pool at its own lanes' capacity when disaggregated (a prefill lane's pool is not a decode
        lane's)."""
        if self.pools:
            used = sum(p.totals.kv_block_s for p in self.pools.values())
            cap = sum(p.kv_blocks_per_lane * p.lanes for p in self.pools.values()) * self.makespan_s
        else:
            used, cap = self.totals.kv_block_s, self.kv_blocks_per_lane * self.lanes * self.makespan_s
        return used / cap if cap > 0 else 0.0

    @property
    def kv_peak_utilisation(self) -> float:
        """The fullest lane's peak share of its KV blocks (of the fuller pool when disaggregated)."""
        if self.pools:
            return max(p.totals.kv_peak_blocks / p.kv_blocks_per_lane if p.kv_blocks_per_lane else 0.0
                       for p in self.pools.values())
        return self.totals.kv_peak_blocks / self.kv_blocks_per_lane if self.kv_blocks_per_lane else 0.0

    def figures(self) -> dict:
        """The JSON contract of `serve --json`: throughputs and latency summaries."""
        return {"output_tokens_per_s": self.output_tokens_per_s, "total_tokens_per_s": self.total_tokens_per_s,
                "ttft_s": summary(self.ttft_s), "tpot_s": summary(self.tpot_s), "e2e_latency_s": summary(self.e2e_s)}
