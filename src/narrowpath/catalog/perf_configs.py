"""A stack's published performance configs: the knobs its own benchmark ran a model with, per layout.

Megatron-Bridge publishes its training tables together with the configs that produced them (scripts/performance/
configs/<family>/*_workload_base_configs.py, one constant per model, GPU, format and batch): beside the parallel
layout a table states, each sets knobs a table row never states — whether the expert all-to-all is overlapped with
another micro-batch's computation (`moe_a2a_overlap`), the token dispatcher, the recompute modules or layers, the
activations offloaded to host memory, the CUDA-graph scope. `perf_configs.yaml` holds them as data, each with the
file and the stored versions of it it was read in. A validation case whose stack, model (its shape and sequence
length), GPU, format and whole stated layout (GPUs, tensor, pipeline, virtual pipeline, context and expert parallel
degrees, micro-batch and global batch, and whether it shards with Megatron-FSDP: `zero_stage` 3) equal a config's is
that config's run: the knobs the case leaves unstated (absent, or null: not published) take the config's
values, and the case's `chosen` notes name the config. A layout field or format the case leaves null is not stated:
such a case matches nothing (the tool's placeholder is not the run's value).

This is identity, not fitting (as catalog.known_models is for a model's unstated architecture): nothing is read from
a measurement. The configs change between container releases and a table row does not say which commit it ran, so
where the stored versions of a matching layout differ on a knob — one sets another value, or one leaves it to code
that was not read (a builder, the library recipe) — it is not taken, and the note says so; the stack's default or
the chooser decides. Recompute (its modules, its layers) and the activations offloaded are one setting. A knob the
case states is never changed, and a knob the case's stated ones rule out (CUDA graphs beside a stated full
recompute) is not taken. Only validation cases are matched (`validate`, `FILE#ID`): a scenario file states its own
knobs.
"""
from __future__ import annotations

import dataclasses
import re
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

from narrowpath.catalog import store
from narrowpath.errors import CatalogError, NarrowpathError, shown
from narrowpath.spec.model import Model
from narrowpath.spec.plan import PRECISIONS, Plan
from narrowpath.spec.strict_load import load_yaml

SCHEMA = "narrowpath-perf-configs/1"
LAYOUT_KEYS = ("num_gpus", "tp", "pp", "vpp", "cp", "ep", "mbs", "gbs")
"""The stated layout a case must equal, degree for degree, to be a config's run."""
SHARDED = "fsdp"
"""The layout's other half: whether the config shards weights, gradients and optimizer state over the data-parallel
ranks (Megatron-FSDP, `use_megatron_fsdp`: the tables' FSDP column) — a case equals it when its `zero_stage` is 3."""
PLAN_FIELDS = LAYOUT_KEYS[1:] + ("zero_stage", "precision")
"""The plan fields a config is matched on: its layout but the GPU count, the sharding, and the training format."""
MODEL_KEYS = {"layers": lambda m: m.layers, "hidden": lambda m: m.hidden, "ffn": lambda m: m.ffn,
              "vocab": lambda m: m.vocab, "experts": lambda m: m.moe.num_experts if m.moe else None,
              "top_k": lambda m: m.moe.top_k if m.moe else None, "seq_len": lambda m: m.seq_len}
"""What a config names its model by: the shape the tables' models differ in, and the sequence length it trains at
(a dense model also by its MLP width and vocabulary: Llama-2 70B and Llama-3 70B share layers and width)."""
RECOMPUTE = ("recompute", "recompute_modules", "recompute_layers", "offload_layers")
"""How a layer's activations are kept for backward: recomputed (which modules, or whole layers and how many of a
chunk) or copied to host memory (how many layers of a chunk) — one choice (schedule.choose tries them together)."""
UNITS = (("ep_overlap", "ep_dispatch"), RECOMPUTE, ("cuda_graphs",), ("moe_sync_free",))
"""The plan knobs a config may set, in the order they are applied; knobs that only mean something together are one
unit (compared, taken or left as a whole): the activations' recompute and offloading; the expert exchange —
Megatron-Core's 1F1B all-to-all overlap schedules the dispatcher's own communication (NCCL's all-to-all, or DeepEP's
/ HybridEP's kernels), so how much of it hides depends on which dispatcher moves how many bytes, and an overlap
whose dispatcher a config leaves to code not read is not a run the model can price."""
KNOBS = tuple(k for unit in UNITS for k in unit)
VERSION = re.compile(r"(?:[\w.-]+/[\w.-]+@)?[0-9a-f]{40}|library id [0-9]+")
"""A file version a config was read in: its commit (prefixed `owner/repo@` when the copy is a fork's, the commit
then the fork's), or the reference library's id of a stored copy whose commit the library did not name."""

Note = tuple[str, str]
"""A `chosen` note: (knob, why it holds its value)."""


@lru_cache(maxsize=None)
def perf_configs() -> tuple[dict[str, Any], ...]:
    """The entries of the shipped perf_configs.yaml, checked once."""
    return checked(load_yaml(resources.files("narrowpath.catalog").joinpath("perf_configs.yaml").read_text()))


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def checked(data: Any) -> tuple[dict[str, Any], ...]:
    """The entries of a perf-configs mapping, each checked (CatalogError: one line naming the entry and field)."""
    if not isinstance(data, Mapping) or data.get("schema") != SCHEMA or not isinstance(data.get("configs"), list):
        raise CatalogError(f"perf_configs.yaml: needs `schema: {SCHEMA}` and a top-level `configs` list")
    out = []
    for i, r in enumerate(data["configs"]):
        where = f"perf_configs.yaml: configs[{i}]"
        if not isinstance(r, Mapping):
            raise CatalogError(f"{where}: must be a mapping, got {shown(r)}")
        where += f" ({r.get('config', '?')})"
        for key in ("stack", "config", "versions", "source", "gpu", "precision", "model", "layout", "knobs"):
            if key not in r:
                raise CatalogError(f"{where}: `{key}` is required")
        if r["stack"] not in store.entries("stacks"):
            raise CatalogError(f"{where}.stack: {shown(r['stack'])} is not a stacks.yaml entry")
        if r["gpu"] not in store.device_ids():
            raise CatalogError(f"{where}.gpu: {shown(r['gpu'])} is not a catalog device")
        if not isinstance(r["versions"], list) or not r["versions"] or not all(
                isinstance(v, str) and VERSION.fullmatch(v) for v in r["versions"]):
            raise CatalogError(f"{where}.versions: must list the file versions the config was read in (a 40-hex "
                               f"commit, or 'library id N' for a stored copy whose commit was not named), got "
                               f"{shown(r['versions'])}")
        if not isinstance(r["precision"], list) or not r["precision"] or not set(r["precision"]) <= set(PRECISIONS):
            raise CatalogError(f"{where}.precision: must list training formats of {', '.join(PRECISIONS)}, got "
                               f"{shown(r['precision'])}")
        if not isinstance(r["source"], str) or not r["source"].strip():
            raise CatalogError(f"{where}.source: must say where the config was read, got {shown(r['source'])}")
        layout = r["layout"]
        if not isinstance(layout, Mapping) or set(layout) != {*LAYOUT_KEYS, SHARDED} or not all(
                _positive_int(layout[k]) for k in LAYOUT_KEYS) or not isinstance(layout[SHARDED], bool):
            raise CatalogError(f"{where}.layout: must give exactly {', '.join(LAYOUT_KEYS)} as positive integers and "
                               f"{SHARDED} as true or false; got {shown(layout)}")
        if not isinstance(r["model"], Mapping) or not r["model"] or not set(r["model"]) <= set(MODEL_KEYS) or not all(
                _positive_int(v) for v in r["model"].values()):
            raise CatalogError(f"{where}.model: must name some of {', '.join(MODEL_KEYS)} as positive integers; got "
                               f"{shown(r['model'])}")
        if not isinstance(r["knobs"], Mapping) or not set(r["knobs"]) <= set(KNOBS):
            raise CatalogError(f"{where}.knobs: may set {', '.join(KNOBS)} (none: {{}}); got {shown(r['knobs'])}")
        if "recompute_modules" in r["knobs"] and r["knobs"].get("recompute") != "selective":
            raise CatalogError(f"{where}.knobs: recompute_modules needs recompute: selective")
        if any(k in r["knobs"] for k in RECOMPUTE) and "recompute" not in r["knobs"]:
            raise CatalogError(f"{where}.knobs: {', '.join(k for k in RECOMPUTE if k in r['knobs'])} without "
                               "recompute: the activations are one setting, given whole or not at all")
        if r["knobs"].get("offload_layers") and r["knobs"]["recompute"] != "none":
            raise CatalogError(f"{where}.knobs: offload_layers needs recompute: none (Megatron-Core's "
                               "TransformerConfig refuses CPU offloading beside activation recompute)")
        try:  # values a plan takes
            Plan(**r["knobs"])
        except NarrowpathError as exc:
            raise CatalogError(f"{where}.knobs: {exc}") from None
        out.append(dict(r))
    return tuple(out)


def _matches(r: Mapping[str, Any], stack_id: str, model: Model, device: str, plan: Plan,
             layout: Mapping[str, Any]) -> bool:
    """Whether config entry `r` is the run of this stack, model, GPU, format and `layout` (`_layout`)."""
    return (r["stack"] == stack_id and r["gpu"] == device and plan.precision in r["precision"]
            and all(MODEL_KEYS[k](model) == v for k, v in r["model"].items())
            and all(layout[k] == r["layout"][k] for k in (*LAYOUT_KEYS, SHARDED)))


def _layout(plan: Plan, num_gpus: int) -> dict[str, Any]:
    """A case's layout in a config's terms (LAYOUT_KEYS and SHARDED)."""
    return {"num_gpus": num_gpus, "tp": plan.tp, "pp": plan.pp, "vpp": plan.vpp, "cp": plan.cp, "ep": plan.ep,
            "mbs": plan.mbs, "gbs": plan.gbs, SHARDED: plan.zero_stage == 3}


def _named(entries: list) -> str:
    def one(r):
        v = r["versions"][0]
        return f"{r['config']} @ {v[:7] if len(v) == 40 else v}" + \
            (f" +{len(r['versions']) - 1}" if len(r["versions"]) > 1 else "")
    return ", ".join(one(r) for r in entries)


CONFIG_MARK = "'s performance config of this model, GPU and layout"
"""How a `chosen` note says a matching config set the knob (`off_its_layout` finds them again)."""
DIFFER = "the matching stored versions differ on it (one sets another value, or leaves it to code not read)"
NO_DISPATCHER = "the config overlaps the expert all-to-all but leaves its dispatcher to code not read"


def config_knobs(stack_id: str, model: Model, device: str, plan: Plan, num_gpus: int
                 ) -> tuple[dict[str, Any], dict[str, str], str]:
    """(knob values, why each knob not taken is not, the matching configs named) of the configs of `stack_id` whose
    model, GPU (`device`: the catalog device name), format and layout `plan` equals: a unit every matching config
    sets, to the same values, is taken; one they differ on — or that some leave to code not read, as an overlapped
    exchange whose dispatcher is left to it — is not."""
    layout = _layout(plan, num_gpus)
    found = [r for r in perf_configs() if _matches(r, stack_id, model, device, plan, layout)]
    values: dict[str, Any] = {}
    left: dict[str, str] = {}
    for unit in UNITS:
        given = [{k: r["knobs"][k] for k in unit if k in r["knobs"]} for r in found]
        if not any(given):
            continue
        if len({repr(sorted(v.items())) for v in given}) > 1:
            left.update((k, DIFFER) for k in unit)
        elif given[0].get("ep_overlap") and "ep_dispatch" not in given[0]:
            left.update((k, NO_DISPATCHER) for k in unit)
        else:
            values.update(given[0])
    return values, left, _named(found)


def with_perf_config(plan: Plan, stated: Mapping[str, Any], unpublished: tuple[str, ...], chosen: tuple[Note, ...],
                     stack_id: str | None, model: Model, device: str, num_gpus: int
                     ) -> tuple[Plan, tuple[str, ...], tuple[Note, ...]]:
    """(plan, knobs still unpublished, chosen notes) of a validation case after its stack's matching performance
    configs fill the knobs `stated` (the case's plan mapping) gives no value; a case whose layout or format is not
    stated in full is left as it is."""
    if not stack_id or any(stated.get(k) is None for k in PLAN_FIELDS):
        return plan, unpublished, chosen
    values, left, names = config_knobs(stack_id, model, device, plan, num_gpus)
    if not names:
        return plan, unpublished, chosen
    notes = dict(chosen)
    taken: dict[str, Any] = {}
    for unit in UNITS:  # one unit at a time; a unit the case states any part of is the case's
        if any(stated.get(k) is not None for k in unit):
            continue
        part = {k: values[k] for k in unit if k in values}
        if any(k in left for k in unit):
            for k in unit:
                why = f"not taken from {stack_id}'s performance config of this layout ({names}): {left[k]}"
                notes[k] = f"{notes[k]}; {why}" if k in notes else f"{getattr(plan, k)!r} — the tool's default; {why}"
            continue
        if not part:
            continue
        try:
            plan = dataclasses.replace(plan, **part)
        except NarrowpathError as exc:
            for k in part:
                notes[k] = f"not taken from {stack_id}'s performance config ({names}): beside the case's stated " \
                           f"knobs {exc}"
            continue
        taken.update(part)
        for k in part:
            notes[k] = f"{getattr(plan, k)!r} — {stack_id}{CONFIG_MARK} ({names}; catalog/perf_configs.yaml)"
    unpublished = tuple(k for k in unpublished if k not in taken)
    return plan, unpublished, tuple(notes.items())


def off_its_layout(chosen: tuple[Note, ...], defaults: Mapping[str, Any]
                   ) -> tuple[dict[str, Any], tuple[str, ...], tuple[Note, ...]]:
    """(plan fields, knobs to choose again, chosen notes) of a validation case whose layout, format, GPU or model the
    command line changed: the settings its performance config gave belonged to the layout it ran, so they go back —
    to `defaults` (the stack's for the new format; the tool's for a knob the stack sets none of), and a recompute the
    config had settled is chosen again. `chosen` holds no note of a knob the command line gives (its flag's value
    wins over these fields)."""
    fields: dict[str, Any] = {}
    reopen: list[str] = []
    notes: list[Note] = []
    for knob, note in chosen:
        if CONFIG_MARK not in note:
            notes.append((knob, note))
        elif knob == "recompute":
            reopen.append(knob)  # chosen again on the new plan, modules, layers and offloading all
        elif knob in RECOMPUTE:
            fields[knob] = Plan.__dataclass_fields__[knob].default
        else:
            fields[knob] = defaults.get(knob, Plan.__dataclass_fields__[knob].default)
            notes.append((knob, f"{fields[knob]!r} — the case's performance config was for the layout it ran, which "
                                f"the command line changed ({'the stack' if knob in defaults else 'the tool'}'s "
                                "default)"))
    return fields, tuple(reopen), tuple(notes)
