"""The plans a search may try: every consistent combination of the parallel knobs for a fixed GPU count and
global batch.

Two extents. `full` (the default) varies every knob the step model prices; `basic` is the space of the first
search (the structural knobs only, everything else kept from the base plan). Knobs and the values tried:

    tp      divisors of the GPU count up to the scale-up (NVLink) domain: a tensor-parallel group that leaves
            the domain puts two collectives per layer on the scale-out fabric (Narayanan et al. SC'21 §5.4 keep
            tp ≤ 8 for that reason); pin `tp` to try larger ones
    pp      divisors of the GPU count up to the layer count; an uneven split (Llama 3 405B: 126 layers on 16
            stages; DeepSeek-V3: 61 on 16) is priced as the model lays it out, the slowest stage pacing the rest
    vpp     1, or chunks per stage (Megatron interleaving) when the micro-batches divide by pp: full, 2-16 chunks
            whenever pp·vpp chunks fit the layers (uneven chunks and the embedding/loss-as-layers split of
            `workload.split.stage_layer_ranges` included); basic, 2-8 chunks splitting the layers evenly
    cp      powers of two dividing the sequence length and the GPU count, at most 32
    ep      MoE only: divisors of the expert count; ep·etp must divide the tp·cp·dp ranks of a stage (basic: ep
            divides dp)
    etp     MoE only (full): tp (0, Megatron-Core's default) or 1 (whole experts per rank, Megatron-Bridge's MoE
            recipes)
    mbs     powers of two up to 64 dividing the per-replica batch
    zero    0 when there is nothing to shard over (dp·cp = 1 and, for MoE, an expert data-parallel group
            tp·cp·dp / (ep·etp) of 1); else 1 (Megatron distributed optimizer), 2 (DeepSpeed stage 2: with gradient
            accumulation the gradients are reduce-scattered after every backward, which the step model prices) and
            3 (FSDP). ZeRO-0 holds more memory per rank than ZeRO-1 and is left out where there is something to
            shard over (it would add a third to the space); it is not always slower (its all-reduce can hide in the
            backward where ZeRO-1's all-gather of the updated weights cannot: docs/search.md). Pin `zero_stage` to
            include any stage
    recompute  none, selective, full; full: also the first quarter, half or three quarters of the layers of each
            chunk (`recompute_layers`, Megatron --recompute-method block), and with none the saved activations of
            that share of the layers (or all of them) offloaded to host memory (`offload_layers`; under a stack on
            Megatron-Core's CPU offloading not with pp > 1 or CUDA graphs, and never every layer): the activation
            strategies of `schedule.choose.activation_patches`; selective recomputes the base plan's modules, and
            for a model with MoE or MLA layers also each module set of `schedule.choose.module_patches`
            (`recompute_modules`, Megatron-Core --recompute-modules: the MoE activation, the norms with it, the
            whole MoE layer; the dense MLP; MLA's up-projections; `module_sets`) (basic: none, selective, full)
    sp      on whenever tp > 1 (Megatron-LM: sequence parallelism is the norm with tp; Korthikanti et al. 2022)
    dp_overlap        off/on when gradients are synchronised (full)
    bucket_bytes      with dp_overlap: the base plan's, 10, 40 and 160 MB (full)
    tp_comm_overlap   off/on when tp > 1 (full)
    cp_comm           p2p, all_gather, a2a when cp > 1 (full)
    ep_overlap        off/on for MoE with expert or expert-tensor parallelism (full)
    ep_dispatch       all_to_all, dedup for MoE when the expert-parallel group leaves its scale-up domain, dedup
                      inside one (it never moves more bytes there) (full)
    placement         the base plan's order, Megatron's tp-cp-dp-pp, pipeline inside data parallel tp-cp-pp-dp,
                      and data inside context parallel tp-dp-cp-pp; orders that lay out the same ranks (they differ
                      only in axes of size 1) are tried once (full)
A knob that cannot change a plan's numbers (tp_comm_overlap at tp = 1, cp_comm at cp = 1, a bucket size without
dp_overlap, ...) keeps the base plan's value. LSTM models search tp, dp, mbs (and in full the DP overlap, bucket and
placement) only: the recurrent workload has no pipeline, context parallelism, sequence parallelism, recompute or
ZeRO sharding. Kept from the base plan: precision, attention kernel, MoE routing, framework. The base plan itself
is added when it is consistent and matches the pins, so the plan a user starts from is always ranked. A pinned
knob takes only the value given.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator

from narrowpath.errors import SpecError
from narrowpath.spec.model import Model
from narrowpath.spec._check import choice
from narrowpath.spec.plan import CP_COMM, EP_DISPATCH, RECOMPUTE, RECOMPUTE_MODULES, SPLIT_DEFAULTS, Plan
from narrowpath.spec.system import System

KNOBS = ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "zero_stage", "recompute", "recompute_layers",
         "offload_layers", "sequence_parallel", "dp_overlap", "bucket_bytes", "tp_comm_overlap", "cp_comm",
         "ep_overlap", "ep_dispatch", "placement")
"""Plan fields a search varies (and a pin may fix); `dp` can be pinned too."""
EXTENTS = ("full", "basic")
MAX_VPP = 16
MAX_VPP_BASIC = 8
MAX_CP = 32
MBS_CHOICES = (1, 2, 4, 8, 16, 32, 64)
BUCKET_CHOICES = (10e6, 40e6, 160e6)
PLACEMENT_CHOICES = (("tp", "cp", "ep", "dp", "pp"), ("tp", "cp", "ep", "pp", "dp"), ("tp", "dp", "cp", "ep", "pp"))


def divisors(n: int) -> list[int]:
    """Positive divisors of n, ascending."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """What to search: the model on `num_gpus` GPUs of `system` with `gbs` sequences per step, starting from
    `base` (fixed knobs come from it); `pinned` knobs take only the given value; `extent` is `full` (every knob
    the model prices) or `basic` (the structural knobs only)."""

    model: Model
    system: System
    num_gpus: int
    gbs: int
    base: Plan
    pinned: dict[str, object] = dataclasses.field(default_factory=dict)
    extent: str = "full"

    def __post_init__(self) -> None:
        if self.base.custom_split:  # every plan here splits its layers automatically
            object.__setattr__(self, "base", dataclasses.replace(self.base, **SPLIT_DEFAULTS))
        if self.base.pipeline_schedule != "auto":  # the bulk pricing plays Megatron's schedules (search.pipeline_bulk)
            object.__setattr__(self, "base", dataclasses.replace(self.base, pipeline_schedule="auto"))
        if self.base.vp_group:  # ... with Megatron-Core's default micro-batch groups (pp) on every interleaved plan
            object.__setattr__(self, "base", dataclasses.replace(self.base, vp_group=0))
        unknown = sorted(set(self.pinned) - set(KNOBS) - {"dp", "recompute_modules"})
        if unknown:
            raise SpecError("search.pinned", f"unknown knob(s) {unknown}; knobs are "
                            f"{', '.join(KNOBS + ('dp', 'recompute_modules'))}")
        if "recompute_modules" in self.pinned:
            mods = tuple(self.pinned["recompute_modules"])
            for mod in mods:
                choice("search.recompute_modules", mod, RECOMPUTE_MODULES)
            if not mods:
                raise SpecError("search.recompute_modules", "names no module; give one or more of "
                                f"{', '.join(RECOMPUTE_MODULES)}")
            object.__setattr__(self, "pinned", {**self.pinned, "recompute_modules": mods})
        if self.num_gpus < 1:
            raise SpecError("search.num_gpus", f"must be >= 1, got {self.num_gpus}")
        if self.gbs < 1:
            raise SpecError("search.gbs", f"must be >= 1, got {self.gbs}")
        if self.extent not in EXTENTS:
            raise SpecError("search.extent", f"must be one of {', '.join(EXTENTS)}, got {self.extent!r}")
        if "placement" in self.pinned:
            object.__setattr__(self, "pinned", {**self.pinned, "placement": tuple(self.pinned["placement"])})

    @property
    def full(self) -> bool:
        return self.extent == "full"


def knob_values(space: SearchSpace) -> dict[str, tuple]:
    """Candidate values of every knob before the cross-knob checks (a pinned knob: its one value). The activation
    strategy (recompute, recompute_layers, offload_layers) depends on the layers per chunk; here `recompute` lists
    the recompute modes and the other two the base plan's values (see `activation_strategies`)."""
    m, n, b, full = space.model, space.num_gpus, space.base, space.full
    lstm = m.arch == "lstm"
    moe = m.moe is not None
    vals: dict[str, tuple] = {
        "tp": tuple(d for d in divisors(n) if d <= space.system.job_domain(n)),
        "pp": (1,) if lstm else tuple(d for d in divisors(n) if d <= m.layers),
        "cp": (1,) if lstm else tuple(d for d in divisors(n) if d <= MAX_CP and d & (d - 1) == 0
                                      and m.seq_len % d == 0),
        "ep": tuple(divisors(m.moe.num_experts)) if moe else (1,),
        "etp": (0, 1) if moe and full else (b.etp,),
        "vpp": tuple(range(1, (MAX_VPP if full else MAX_VPP_BASIC) + 1)),
        "mbs": MBS_CHOICES,
        "zero_stage": (0,) if lstm else (0, 1, 2, 3),
        "recompute": ("none",) if lstm else RECOMPUTE,
        "recompute_layers": (b.recompute_layers,),
        "offload_layers": (b.offload_layers,),
        "sequence_parallel": (False,) if lstm else (False, True),
        "dp_overlap": (False, True) if full else (b.dp_overlap,),
        "bucket_bytes": tuple(sorted({b.bucket_bytes, *BUCKET_CHOICES})) if full else (b.bucket_bytes,),
        "tp_comm_overlap": (False, True) if full and not lstm else (b.tp_comm_overlap,),
        "cp_comm": CP_COMM if full and not lstm else (b.cp_comm,),
        "ep_overlap": (False, True) if full and moe else (b.ep_overlap,),
        "ep_dispatch": EP_DISPATCH if full and moe else (b.ep_dispatch,),
        "placement": tuple(dict.fromkeys((b.placement,) + PLACEMENT_CHOICES)) if full else (b.placement,),
    }
    for knob, value in space.pinned.items():
        if knob not in ("dp", "recompute_modules"):  # a module set pins the activation strategy (below)
            vals[knob] = (value,)
    return vals


Strategy = tuple[str, int, int, tuple[str, ...]]
"""An activation strategy: (recompute, recompute_layers, offload_layers, recompute_modules); the modules are () unless
the mode is selective."""


def recomputed_modules(s: Strategy, activation_cache: str = "default") -> frozenset[str]:
    """The modules a strategy recomputes selectively (workload.recompute.modules_of: the order of
    `recompute_modules` does not matter, none named is Megatron-Core's default core_attn, and DeepSeek-V3's FP8
    cache recomputes the MoE activation under any mode but full)."""
    from narrowpath.workload.recompute import modules_of
    return modules_of(_Modes(recompute=s[0], recompute_modules=s[3], activation_cache=activation_cache))


def strategy_key(s: Strategy) -> tuple:
    """A strategy as a plan states it: its mode, its shares of layers recomputed and offloaded, and under selective
    the set of modules it names (the order does not matter; none named is Megatron-Core's default, core_attn)."""
    return s[:3] + (frozenset(s[3] or ("core_attn",)) if s[0] == "selective" else frozenset(),)


@dataclass(frozen=True, slots=True)
class _Modes:
    """The plan fields workload.recompute.modules_of reads."""

    recompute: str
    recompute_modules: tuple[str, ...]
    activation_cache: str


def module_sets(model: Model) -> tuple[dict, ...]:
    """The selective recompute module sets the full extent tries: `schedule.choose.module_patches` for a model with
    MoE or MLA layers, where NVIDIA's tuned recipes recompute by module (DeepSeek-V3, GPT-OSS, Qwen3); none for a
    dense model with standard attention. Its sets, the dense MLP with or without its (fused) norm, would add a quarter
    to the GPT-3 and Llama-3 405B full spaces and take their searches past 10 s (13.8 s and 11.2 s; docs/search.md,
    Speed); a dense base plan's own modules are still tried."""
    from narrowpath.schedule.choose import module_patches
    return module_patches(model) if model.moe is not None or model.mla is not None else ()


def activation_strategies(space: SearchSpace, layers_per_chunk: int, pp: int = 1) -> tuple[Strategy, ...]:
    """(recompute, recompute_layers, offload_layers, recompute_modules) tried for pipeline chunks of
    `layers_per_chunk` layers: in the full extent the activation strategies of `schedule.choose.activation_patches`
    (selective with the base plan's modules) and selective recompute of each module set of `module_sets` (the
    chooser's, for MoE and MLA models), in the basic one the three recompute modes (offload as in the base plan);
    pins on the mode, the recomputed layers or the offloaded layers filter them; under a stack on Megatron-Core's CPU
    offloading the offloading it refuses with `pp` > 1 is not tried. Strategies that name the same set of
    modules (`strategy_key`) are tried once, as the first listed (the base plan's own), and a module set that
    recomputes what a strategy listed before it already does is not tried (with DeepSeek-V3's FP8 cache, which
    recomputes the MoE activation anyway, (moe_act) is recompute none); other strategies that price the same count
    once in the ranking (search.table.twin_strategies)."""
    from narrowpath.schedule.choose import activation_patches, offload_pipelined
    b, v = space.base, knob_values(space)
    mods = b.recompute_modules if b.recompute == "selective" else ()
    extra: list[Strategy] = []  # the module sets (full extent)
    if space.model.arch == "lstm":
        out = [("none", 0, 0, ())]
    elif space.full:
        patches = activation_patches(layers_per_chunk, b.activation_cache, b.cuda_graphs, offload_pipelined(b, pp))
        out = [(p["recompute"], p.get("recompute_layers", 0), p.get("offload_layers", 0),
                mods if p["recompute"] == "selective" else ()) for p in patches]
        extra = [("selective", 0, 0, tuple(p["recompute_modules"])) for p in module_sets(space.model)]
    else:
        out = [(rc, b.recompute_layers if rc == "full" else 0, b.offload_layers, mods if rc == "selective" else ())
               for rc in RECOMPUTE if not (rc == "full" and b.cuda_graphs)]  # spec.plan: no graphs with full
    pins = space.pinned
    out += _pinned_counts(space, layers_per_chunk, pp)
    first: dict[tuple, Strategy] = {}
    effect = set()  # (shares, recomputed modules) of the strategies kept without full recompute
    for i, s in enumerate(out + extra):
        if s[0] not in v["recompute"] or pins.get("recompute_layers", s[1]) != s[1] \
                or pins.get("offload_layers", s[2]) != s[2]:
            continue
        does = s[1:3] + (recomputed_modules(s, b.activation_cache),) if s[0] != "full" else None
        if strategy_key(s) in first or (i >= len(out) and does in effect):
            continue
        first[strategy_key(s)] = s
        effect.add(does)
    if "recompute_modules" in pins:  # a pinned module set: selective recompute of exactly those modules
        pinned = ("selective", 0, 0, tuple(pins["recompute_modules"]))
        return (pinned,) if "selective" in v["recompute"] and pins.get("recompute_layers", 0) == 0 \
            and pins.get("offload_layers", 0) == 0 and space.model.arch != "lstm" else ()
    return tuple(first.values())


def _pinned_counts(space: SearchSpace, n: int, pp: int) -> list[Strategy]:
    """A pinned `recompute_layers` or `offload_layers` as a strategy of its own (a pin takes the value given, not
    only one of the tried shares): a full recompute of that many of a chunk's `n` layers (not with DeepSeek-V3's
    FP8 cache or CUDA graphs, which spec.plan refuses), offloading that many beside no recompute where the stack
    takes it (schedule.choose.activation_patches: Megatron-Core none with pp > 1 or CUDA graphs, and fewer than
    the layers; an engine the catalog does not know up to all of them)."""
    from narrowpath.schedule.choose import offload_limit, offload_pipelined, partial_recompute_allowed
    b, pins, out = space.base, space.pinned, []
    if space.model.arch == "lstm":
        return out
    rl, ol = pins.get("recompute_layers", 0), pins.get("offload_layers", 0)
    if 0 < rl < n and partial_recompute_allowed(b.activation_cache, b.cuda_graphs):
        out.append(("full", rl, 0, ()))
    if 0 < ol <= offload_limit(n, b.cuda_graphs, offload_pipelined(b, pp)):
        out.append(("none", 0, ol, ()))
    return out


def candidate_plans(space: SearchSpace) -> Iterator[Plan]:
    """Every consistent plan of the space, each once, in a fixed order; the base plan last if not yet seen."""
    from narrowpath.search.table import build_table
    table = build_table(space)
    for i in range(len(table)):
        yield table.plan(i)


def count_plans(space: SearchSpace) -> int:
    """How many plans the space holds (without building a Plan for each)."""
    from narrowpath.search.table import build_table
    return len(build_table(space))
