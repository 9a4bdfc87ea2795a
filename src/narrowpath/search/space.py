"""The plans a search may try: every consistent combination of the parallel knobs for a fixed GPU count and
global batch.

Knobs searched (the base plan itself is added to the space when it is consistent and matches the pins, so the
plan a user starts from is always ranked against the rest):
    tp      divisors of the GPU count up to the scale-up (NVLink) domain: a tensor-parallel group that leaves
            the domain puts two collectives per layer on the scale-out fabric (Narayanan et al. SC'21 §5.4 keep
            tp ≤ 8 for that reason); pin `tp` to try larger ones
    pp      divisors of the GPU count up to the layer count; an uneven split (Llama 3 405B: 126 layers on 16
            stages; DeepSeek-V3: 61 on 16) is priced as the model lays it out, the slowest stage pacing the rest
    vpp     1, or chunks per stage splitting the layers evenly over pp·vpp chunks (Megatron interleaving), at
            most 8
    cp      powers of two dividing the sequence length and the GPU count, at most 32
    ep      MoE only: divisors of the expert count that divide dp (placement carves experts out of dp)
    mbs     powers of two up to 64 dividing the per-replica batch
    zero    0 when there is no data/context parallelism; else 1 (Megatron distributed optimizer), 2 (DeepSpeed
            stage 2: with gradient accumulation the gradients are reduce-scattered after every backward, which
            the step model prices) and 3 (FSDP). ZeRO-0 costs the model ZeRO-1's step time with more memory per
            rank, so it is left out where there is something to shard over. Pin `zero_stage` to include any stage
    recompute  none, selective, full
    sp      on whenever tp > 1 (Megatron-LM: sequence parallelism is the norm with tp; Korthikanti et al. 2022)
LSTM models search tp, dp and mbs only (the recurrent workload has no pipeline, context parallelism, sequence
parallelism, recompute or ZeRO sharding): zero 0, no recompute and no sequence parallelism unless pinned.
Kept from the base plan: precision, attention kernel, the CP exchange (`cp_comm`), the overlap switches, bucket
size and placement order.
A pinned knob takes only the value given.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator

from narrowpath.errors import SpecError
from narrowpath.spec.model import Model
from narrowpath.spec.plan import RECOMPUTE, Plan
from narrowpath.spec.scenario import consistency_errors
from narrowpath.spec.system import System

KNOBS = ("tp", "pp", "vpp", "cp", "ep", "mbs", "zero_stage", "recompute", "sequence_parallel")
MAX_VPP = 8
MAX_CP = 32
MBS_CHOICES = (1, 2, 4, 8, 16, 32, 64)


def divisors(n: int) -> list[int]:
    """Positive divisors of n, ascending."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """What to search: the model on `num_gpus` GPUs of `system` with `gbs` sequences per step, starting from
    `base` (fixed knobs come from it); `pinned` knobs take only the given value."""

    model: Model
    system: System
    num_gpus: int
    gbs: int
    base: Plan
    pinned: dict[str, object] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.pinned) - set(KNOBS) - {"dp"})
        if unknown:
            raise SpecError("search.pinned", f"unknown knob(s) {unknown}; knobs are {', '.join(KNOBS + ('dp',))}")
        if self.num_gpus < 1:
            raise SpecError("search.num_gpus", f"must be >= 1, got {self.num_gpus}")
        if self.gbs < 1:
            raise SpecError("search.gbs", f"must be >= 1, got {self.gbs}")


def knob_values(space: SearchSpace) -> dict[str, tuple]:
    """Candidate values of every knob before the cross-knob checks (a pinned knob: its one value)."""
    m, n, b = space.model, space.num_gpus, space.base
    lstm = m.arch == "lstm"
    vals: dict[str, tuple] = {
        "tp": tuple(d for d in divisors(n) if d <= space.system.scale_up_domain),
        "pp": (1,) if lstm else tuple(d for d in divisors(n) if d <= m.layers),
        "cp": (1,) if lstm else tuple(d for d in divisors(n) if d <= MAX_CP and d & (d - 1) == 0
                                      and m.seq_len % d == 0),
        "ep": tuple(divisors(m.moe.num_experts)) if m.moe is not None else (1,),
        "vpp": tuple(range(1, MAX_VPP + 1)),
        "mbs": MBS_CHOICES,
        "zero_stage": (0,) if lstm else (0, 1, 2, 3),
        "recompute": ("none",) if lstm else RECOMPUTE,
        "sequence_parallel": (False,) if lstm else (False, True),
    }
    for knob, value in space.pinned.items():
        if knob != "dp":
            vals[knob] = (value,)
    return vals


def candidate_plans(space: SearchSpace) -> Iterator[Plan]:
    """Every consistent plan of the space, each once, in a fixed order; the base plan last if not yet seen."""
    m, n, gbs, b = space.model, space.num_gpus, space.gbs, space.base
    v = knob_values(space)
    pinned = space.pinned
    seen_base = False
    for tp in v["tp"]:
        if n % tp:
            continue
        for pp in v["pp"]:
            if (n // tp) % pp:
                continue
            for cp in v["cp"]:
                if (n // (tp * pp)) % cp:
                    continue
                dp = n // (tp * pp * cp)
                if "dp" in pinned and dp != pinned["dp"]:
                    continue
                for sp in v["sequence_parallel"]:
                    if sp and tp == 1 or ("sequence_parallel" not in pinned and m.arch != "lstm"
                                          and sp != (tp > 1)):
                        continue
                    for plan in _inner(space, v, tp, pp, cp, dp, sp):
                        seen_base = seen_base or plan == b
                        yield plan
    if not seen_base and b.gbs == gbs and b.num_gpus == n and _matches_pins(b, pinned) \
            and not consistency_errors(m, b, n, space.system):
        yield b


def _default_zero(zero: int, shards: int, micro: int, arch: str) -> bool:
    """Whether an unpinned search tries ZeRO stage `zero` (see the module docstring): 0 exactly where there is
    nothing to shard over (and always for an LSTM), else 1, 2 and 3."""
    if shards == 1 or arch == "lstm":
        return zero == 0
    return zero in (1, 2, 3)


def _matches_pins(plan: Plan, pinned: dict[str, object]) -> bool:
    return all(getattr(plan, k) == v for k, v in pinned.items())


def _inner(space: SearchSpace, v: dict[str, tuple], tp: int, pp: int, cp: int, dp: int, sp: bool) -> Iterator[Plan]:
    m, n, gbs, b, pinned = space.model, space.num_gpus, space.gbs, space.base, space.pinned
    for ep in v["ep"]:
        if ep > 1 and dp % ep:
            continue
        for mbs in v["mbs"]:
            if gbs % (dp * mbs):
                continue
            micro = gbs // (dp * mbs)
            for vpp in v["vpp"]:
                if vpp > 1 and (pp == 1 or m.layers % (pp * vpp) or micro % pp):
                    continue
                for zero in v["zero_stage"]:
                    if "zero_stage" not in pinned and not _default_zero(zero, dp * cp, micro, m.arch):
                        continue
                    for rc in v["recompute"]:
                        plan = dataclasses.replace(b, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, mbs=mbs, gbs=gbs,
                                                   zero_stage=zero, recompute=rc, sequence_parallel=sp)
                        if not consistency_errors(m, plan, n, space.system):
                            yield plan
