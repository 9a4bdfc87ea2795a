"""How a model's transformer layers are split over pipeline stages and their interleaved chunks (Megatron-Core's
rules): which layer indices each stage's chunks hold."""
from __future__ import annotations

from functools import lru_cache

from narrowpath.catalog import store
from narrowpath.spec.model import Model
from narrowpath.spec.plan import Plan, chunk_stage, uneven_split_error


@lru_cache(maxsize=1024)
def stage_layer_ranges(layers: int, pp: int, vpp: int, first: int = 0, last: int = 0,
                       chunk_layers: tuple[int, ...] = (), v_shape: bool = False) -> tuple[tuple[range, ...], ...]:
    """Layer index ranges of each stage's chunks: chunk j on stage `chunk_stage(j)` (immutable, cached: every stage
    of the workload, its memory and its pipeline schedule read the split). On a V (`v_shape`, DualPipeV) the ends
    that hold the embedding and the output layer are both stage 0.

    `chunk_layers`: every chunk's count as given (Megatron-Core's pipeline_model_parallel_layout).

    `first` / `last` (> 0): that many layers on the first / last stage, the rest shared evenly by the other stages
    and every stage's layers split evenly over its chunks (Megatron-Core's uneven pipeline,
    num_layers_in_first/last_pipeline_stage; `spec.plan.uneven_split_error` says when it refuses a split).

    When the chunks do not divide the layers but divide layers + 2, the embedding and the loss count as one
    layer each (Megatron-Core's account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split, used
    by Megatron-Bridge's Llama-3.1 405B recipes: 126 layers on 16 × 8 chunks): the first and the last chunk hold
    one layer fewer, possibly none. Otherwise, when the layers do not split evenly, the extra layers go to chunks of
    the middle stages first, since the first stage also runs the embedding and the last the output layer and loss
    (Llama 3, Dubey et al. 2024 §3.3.2: one layer fewer on the first and last stage for 126 layers on 16 stages);
    only then to the first and last stages."""
    chunks = pp * vpp
    if chunk_layers:
        sizes = list(chunk_layers)
    elif first or last:
        left = pp - (first > 0) - (last > 0)
        middle = (layers - first - last) // left if left else 0
        per_stage = [first or middle] + [middle] * (pp - 2) + [last or middle]
        sizes = [per_stage[j % pp] // vpp for j in range(chunks)]
    elif layers % chunks and (layers + 2) % chunks == 0:
        per = (layers + 2) // chunks
        sizes = [per - (1 if j in (0, chunks - 1) else 0) for j in range(chunks)]
        if chunks == 1:
            sizes = [layers]
    else:
        base, extra = divmod(layers, chunks)
        end_stages = (0,) if v_shape else (0, pp - 1)
        middle = [j for j in range(chunks) if chunk_stage(j, pp, v_shape) not in end_stages]
        ends = [j for j in range(chunks) if chunk_stage(j, pp, v_shape) in end_stages]
        plus = set((middle + ends)[:extra])
        sizes = [base + (1 if j in plus else 0) for j in range(chunks)]
    out: list[list[range]] = [[] for _ in range(pp)]
    start = 0
    for j, n in enumerate(sizes):
        out[chunk_stage(j, pp, v_shape)].append(range(start, start + n))
        start += n
    return tuple(tuple(chunks) for chunks in out)


DEEPSEEK_V3_LAYOUTS = frozenset({(4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4)})
"""(pp, vpp) shapes of Megatron-Bridge's DeepSeek-V3 layout map (recipes/deepseek/deepseek_v3.py
set_deepseek_v3_pipeline_model_parallel_layout). For other shapes the recipe sets no layout (an earlier revision
raised ValueError) and Megatron-Core refuses 61 layers' uneven split unless a config writes one out, as the H100
performance config does for pp 8 × vpp 4: `Et|(tt|)*30mL`, 1, 30 × 2, 0."""
DEEPSEEK_V3_LAYERS = 61
"""Decoder layers the map's layouts hold (Megatron-Core's validate_layer_layout asserts they equal num_layers, so the
stack runs them for that depth only)."""


@lru_cache(maxsize=256)
def mtp_front_filled(layers: int, pp: int, vpp: int) -> tuple[int, ...]:
    """Chunk layer counts of Megatron-Bridge's DeepSeek-V3 pipeline layouts (DEEPSEEK_V3_LAYOUTS; the map for
    61 layers gives pp × vpp 4 × 1: 16, 16, 16, 13; 8 × 1 and 4 × 2: 7 × 8, 5; 16 × 1, 8 × 2 and 4 × 4: 15 × 4, 1):
    every chunk from the first holds ceil(layers / chunks) layers until the layers run out — the last of them holds
    the remainder, any chunk after it none — and the last chunk also carries the multi-token-prediction layers and
    the loss. () when the chunks divide the layers or a stage (chunks j ≡ i mod pp) would hold none."""
    chunks = pp * vpp
    if layers % chunks == 0:
        return ()
    per = -(-layers // chunks)
    sizes = tuple(max(0, min(per, layers - per * j)) for j in range(chunks))
    if any(sum(sizes[i::pp]) == 0 for i in range(pp)):
        return ()
    return sizes


def plan_layer_ranges(model: Model, plan: Plan) -> tuple[tuple[range, ...], ...]:
    """`stage_layer_ranges` of a transformer under a plan, with its chunk or first / last stage layer counts, or
    the layout its software stack gives an automatic split (`stack_chunk_layers`)."""
    return stage_layer_ranges(model.layers, plan.pp, plan.vpp, plan.first_stage_layers, plan.last_stage_layers,
                              plan.chunk_layers or stack_chunk_layers(model, plan), plan.dualpipev)


def plan_stage_layers(model: Model, plan: Plan) -> list[int]:
    """Layers each pipeline stage holds under the plan (`plan_layer_ranges`)."""
    return [sum(len(r) for r in st) for st in plan_layer_ranges(model, plan)]


def stack_chunk_layers(model: Model, plan: Plan) -> tuple[int, ...]:
    """Chunk layer counts the plan's software stack gives a split the plan leaves automatic (`stack_layout`); ()
    for a stated split and under DualPipe or DualPipeV (DeepSeek's own schedules, which Megatron-Bridge does not run:
    their split stays the tool's automatic one)."""
    if plan.dualpipe or plan.dualpipev or plan.custom_split:
        return ()
    return stack_layout(model, plan.framework, plan.pp, plan.vpp)


def stack_layout(model: Model, framework: str, pp: int, vpp: int) -> tuple[int, ...]:
    """The chunk layout of Megatron-Bridge's DeepSeek-V3 recipe (catalog/stacks.yaml `mtp_layout`;
    DEEPSEEK_V3_LAYOUTS, mtp_front_filled) for a model of that family and depth — 61 layers of multi-head
    latent attention with multi-token prediction, whose MTP block, second output head and loss would otherwise make
    the last stage the slowest — on the pipeline shapes the recipe's map lists, under a stack that runs it; ()
    otherwise (other shapes and depths, for which the stack needs a layout written out, keep the automatic
    split)."""
    if ((pp, vpp) not in DEEPSEEK_V3_LAYOUTS or model.layers != DEEPSEEK_V3_LAYERS or model.mla is None
            or not model.mtp_layers or store.stack_mtp_layout(framework) is None):
        return ()
    return mtp_front_filled(model.layers, pp, vpp)


def split_notes(model: Model, plan: Plan) -> tuple[str, ...]:
    """The prediction's assumption line for a layout the stack chose (`stack_chunk_layers`), if any."""
    sizes = stack_chunk_layers(model, plan)
    if not sizes:
        return ()
    return (f"pipeline split: {store.stack_mtp_layout(plan.framework)}'s DeepSeek-V3 layout for a model with "
            f"multi-token prediction, chunks of {sizes[0]} layers from the first and {sizes[-1]} in the last, beside "
            "the MTP block and the loss (the split was not given)",)


def max_pipeline_chunks(layers: int) -> int:
    """Most pipeline chunks (pp·vpp) a model of `layers` layers splits into: one layer each, or layers + 2 when
    the embedding and the loss count as layers (see `stage_layer_ranges`)."""
    return layers + 2


def balanced_end_layers(layers: int, pp: int, vpp: int, stage_s: list[float], stage_layers: list[int],
                        auto_counts: list[int] | None = None) -> tuple[int, int] | None:
    """(first, last) stage layer counts — 0 for the automatic split of that end — under which the slowest stage
    is fastest, from the per-micro-batch times `stage_s` of the stages under the current split holding
    `stage_layers` layers. A layer costs what one costs on the busiest-per-layer stage between the ends (the first
    stage when there is none); what an end stage takes beyond its layers (the embedding, the output layer, the
    loss, multi-token prediction) stays with it. Only splits Megatron-Core accepts are tried
    (spec.plan.uneven_split_error); None when none beats the current split by more than 0.1 %. `auto_counts`: the
    stage layer counts the plan's automatic split (0, 0) gives it — the stack's own layout where it has one
    (`stack_chunk_layers`); Megatron-Core's even split when not given."""
    inner = [t / n for t, n in zip(stage_s[1:-1], stage_layers[1:-1]) if n] or \
        [stage_s[0] / stage_layers[0] if stage_layers[0] else 0.0]
    per_layer = max(inner)
    extra_first = stage_s[0] - stage_layers[0] * per_layer
    extra_last = stage_s[-1] - stage_layers[-1] * per_layer
    best, best_key = None, max(stage_s) * (1 - 1e-3)
    options = [0] + list(range(vpp, layers + 1, vpp))
    for first in options:
        for last in options:
            if (first or last) and uneven_split_error(layers, pp, vpp, first, last):
                continue
            counts = list(auto_counts) if auto_counts and not (first or last) else \
                [sum(len(r) for r in st) for st in stage_layer_ranges(layers, pp, vpp, first, last)]
            times = [n * per_layer for n in counts]
            times[0] += extra_first
            times[-1] += extra_last
            key = max(times)
            if key < best_key:
                best, best_key = (first, last), key
    return best


def end_chunk_layouts(layers: int, pp: int, vpp: int) -> list[tuple[int, ...]]:
    """Per-chunk layouts of the form Megatron-Bridge gives DeepSeek-V3 (recipes/deepseek/deepseek_v3.py): a layers
    in the first chunk (beside the embedding), c in each of the pp·vpp − 2 others, b ≤ c in the last (beside the
    output layer, the loss and multi-token prediction), every stage holding a layer; for the analysis to price."""
    n = pp * vpp
    out = []
    for c in range(1, layers // max(1, n - 2) + 1) if n > 2 else ():
        for a in range(c + 1):
            b = layers - a - (n - 2) * c
            if 0 <= b <= c and min(a + (vpp - 1) * c, b + (vpp - 1) * c) >= 1:
                out.append((a,) + (c,) * (n - 2) + (b,))
    return out


def recompute_fraction(plan, layers: int | tuple[int, ...]) -> float:
    """Share of a stage's layers a full recompute re-runs: recompute_layers per chunk (Megatron's block method; all
    when recompute_layers is 0; none without full recompute). `layers`: the stage's chunks' layer counts — a chunk
    re-runs min(its layers, recompute_layers) — or the stage's count with its layers split evenly over vpp chunks."""
    if plan.recompute != "full":
        return 0.0
    return _per_chunk_share(plan.recompute_layers, plan.vpp, layers, 1.0)


def block_recompute(plan) -> bool:
    """A full recompute of only the first `recompute_layers` layers of each chunk (Megatron-Core's `recompute_method:
    block`, `recompute_num_layers` per virtual stage: TransformerBlock._checkpointed_forward)."""
    return plan.recompute == "full" and bool(plan.recompute_layers)


def rerun_layers(plan, n: int) -> int:
    """Layers of a chunk of n whose recompute-phase items run: the first `recompute_layers` under a block recompute
    (`block_recompute`), every layer otherwise (a full recompute of all, or a module recompute in each layer)."""
    return min(n, plan.recompute_layers) if block_recompute(plan) else n


def rerun_kind_counts(plan, ranges, kind_of) -> list[dict]:
    """Per chunk (`ranges`: its layer indices), how many layers of each kind (`kind_of[layer]`) its recompute-phase
    items run in (`rerun_layers`: the first ones of the chunk, which are DeepSeek-V3's dense layers on stage 0)."""
    out = []
    for r in ranges:
        counts: dict = {}
        for li in r[:rerun_layers(plan, len(r))]:
            counts[kind_of[li]] = counts.get(kind_of[li], 0) + 1
        out.append(counts)
    return out


def end_rerun_share(plan) -> float:
    """Share of the multi-token-prediction modules' recompute-phase items that runs: none under a block recompute
    of some layers — Megatron-Core's MultiTokenPredictionLayer._checkpointed_forward skips the block method ("not
    supported for MTP yet. Skipping recompute.") and keeps the module's activations (cost.memory) —, all of them
    under a full recompute of every layer (its uniform method, one layer) or a module recompute."""
    return 0.0 if block_recompute(plan) else 1.0


def mtp_recomputed(plan) -> bool:
    """Whether the multi-token-prediction modules keep only their inputs (`end_rerun_share`: a full recompute of
    every layer)."""
    return plan.recompute == "full" and not block_recompute(plan)


def rerun_scaled(items, n: float, rerun: float) -> list:
    """(item, count) pairs of one layer's (or an end's) items repeated over n layers of which `rerun` run the
    recompute phase: a recompute-phase item's count times `rerun`, any other's times n."""
    return [(it, c * (rerun if it.phase == "recompute" else n)) for it, c in items]


def offload_fraction(plan, layers: int | tuple[int, ...]) -> float:
    """Share of a stage's layers whose saved activations live in host memory (offload_layers per chunk; `layers` as
    in recompute_fraction)."""
    return _per_chunk_share(plan.offload_layers, plan.vpp, layers, 0.0)


def _per_chunk_share(k: int, vpp: int, layers: int | tuple[int, ...], unset: float) -> float:
    """Share of a stage's layers that k layers per chunk cover (`unset` when k is 0 or the stage has none)."""
    total = sum(layers) if isinstance(layers, tuple) else layers
    if not k or not total:
        return unset
    if isinstance(layers, tuple):
        return sum(min(n, k) for n in layers) / total
    return min(1.0, k * vpp / total)
