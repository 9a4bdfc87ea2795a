"""A stack's published performance configurations: the knobs its own benchmark ran a model with, per layout.

Megatron-Bridge publishes its training tables together with the configs that produced them (scripts/performance/
configs/<family>/*_workload_base_configs.py, one constant per model, GPU, format and batch): beside the parallel
layout a table states, each sets knobs a table row never states — whether the expert all-to-all is overlapped with
another micro-batch's computation (`moe_a2a_overlap`), the token dispatcher, the recompute modules, the CUDA-graph
scope. `recipes.yaml` holds them as data, each with the file, commit and constant it was read from. A validation
case whose stack, model, GPU, format and whole stated layout (GPUs, tensor, pipeline, virtual pipeline, expert
parallel degrees, micro-batch and global batch) equal a config's is that config's run: the knobs the case leaves
unstated (absent, or null: not published) take the config's values, and the case's `chosen` notes name the config.

This is identity, not fitting (as catalog.known_models is for a model's unstated architecture): nothing is read from
a measurement, and a layout equal in every stated degree is what ties a table row to its config. Where several
stored versions of a config file hold the same layout with different values of a knob (the configs change between
container releases, and a table row does not say which commit it ran), that knob is left to the stack's default or
to the chooser, and the note says so. A knob the case states is never changed. Only validation cases are matched
(`validate`, `FILE#ID`): a scenario file states its own knobs.
"""
from __future__ import annotations

import dataclasses
import re
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

from narrowpath.errors import CatalogError, NarrowpathError, shown
from narrowpath.spec.model import Model
from narrowpath.spec.plan import Plan
from narrowpath.spec.strict_load import load_yaml

LAYOUT_KEYS = ("num_gpus", "tp", "pp", "vpp", "cp", "ep", "mbs", "gbs")
"""The stated layout a case must equal, degree for degree, to be a config's run."""
MODEL_KEYS = {"layers": lambda m: m.layers, "hidden": lambda m: m.hidden,
              "experts": lambda m: m.moe.num_experts if m.moe else None,
              "top_k": lambda m: m.moe.top_k if m.moe else None}
"""The architecture fields a recipe names its model by (the shapes the tables' models differ in)."""
UNITS = (("ep_overlap",), ("ep_dispatch",), ("recompute", "recompute_modules"), ("cuda_graphs",), ("moe_sync_free",))
"""The knobs in the order a config's values are applied, those that only mean something together as one unit."""
VERSION = re.compile(r"[0-9a-f]{40}|library id [0-9]+")
"""A file version a config was read in: its commit, or the reference library's id of a stored copy whose commit the
library did not name."""
KNOBS = ("ep_overlap", "ep_dispatch", "recompute", "recompute_modules", "cuda_graphs", "moe_sync_free")
"""Plan knobs a recipe may set (spec.plan.Plan); how each config value maps onto them is written per entry."""


@lru_cache(maxsize=None)
def recipes() -> tuple[dict[str, Any], ...]:
    """The entries of the shipped recipes.yaml, checked once."""
    return checked_recipes(load_yaml(resources.files("narrowpath.catalog").joinpath("recipes.yaml").read_text()))


def checked_recipes(data: Any) -> tuple[dict[str, Any], ...]:
    """The entries of a recipes file's mapping, each checked (CatalogError: one line naming the entry and field)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("recipes"), list):
        raise CatalogError("recipes.yaml: needs a top-level `recipes` list")
    out = []
    for i, r in enumerate(data["recipes"]):
        where = f"recipes.yaml: recipes[{i}]"
        if not isinstance(r, Mapping):
            raise CatalogError(f"{where}: must be a mapping, got {shown(r)}")
        where += f" ({r.get('config', '?')})"
        for key in ("stack", "config", "versions", "source", "gpu", "precision", "model", "layout", "knobs"):
            if key not in r:
                raise CatalogError(f"{where}: `{key}` is required")
        if not isinstance(r["versions"], list) or not r["versions"] or not all(
                isinstance(v, str) and VERSION.fullmatch(v) for v in r["versions"]):
            raise CatalogError(f"{where}.versions: must list the file versions the config was read in (a 40-hex "
                               f"commit, or 'library id N' for a stored version whose commit was not named), got "
                               f"{shown(r['versions'])}")
        if not isinstance(r["precision"], list) or not r["precision"]:
            raise CatalogError(f"{where}.precision: must list the training formats, got {shown(r['precision'])}")
        if not isinstance(r["layout"], Mapping) or set(r["layout"]) != set(LAYOUT_KEYS):
            raise CatalogError(f"{where}.layout: must give exactly {', '.join(LAYOUT_KEYS)}; got {shown(r['layout'])}")
        if not isinstance(r["model"], Mapping) or not r["model"] or not set(r["model"]) <= set(MODEL_KEYS):
            raise CatalogError(f"{where}.model: must name some of {', '.join(MODEL_KEYS)}; got {shown(r['model'])}")
        if not isinstance(r["knobs"], Mapping) or not r["knobs"] or not set(r["knobs"]) <= set(KNOBS):
            raise CatalogError(f"{where}.knobs: must set some of {', '.join(KNOBS)}; got {shown(r['knobs'])}")
        if "recompute_modules" in r["knobs"] and r["knobs"].get("recompute") != "selective":
            raise CatalogError(f"{where}.knobs: recompute_modules needs recompute: selective")
        try:  # values a plan takes
            Plan(**{k: tuple(v) if k == "recompute_modules" else v for k, v in r["knobs"].items()})
        except NarrowpathError as exc:
            raise CatalogError(f"{where}.knobs: {exc}") from None
        out.append(dict(r))
    return tuple(out)


def _matches(r: Mapping[str, Any], stack_id: str, model: Model, device: str, plan: Plan, num_gpus: int) -> bool:
    layout = {"num_gpus": num_gpus, "tp": plan.tp, "pp": plan.pp, "vpp": plan.vpp, "cp": plan.cp, "ep": plan.ep,
              "mbs": plan.mbs, "gbs": plan.gbs}
    return (r["stack"] == stack_id and r["gpu"] == device and plan.precision in r["precision"]
            and all(MODEL_KEYS[k](model) == v for k, v in r["model"].items())
            and all(layout[k] == r["layout"][k] for k in LAYOUT_KEYS))


def _short(version: str) -> str:
    return version[:7] if len(version) == 40 else version


def recipe_knobs(stack_id: str, model: Model, device: str, plan: Plan, num_gpus: int
                 ) -> tuple[dict[str, Any], tuple[tuple[str, str], ...]]:
    """(knob values, (knob, note) pairs) the configs of `stack_id` whose model, GPU (`device`: the catalog device
    name), format and layout the plan equals agree on; a knob they disagree on is left out, with a note."""
    found = [r for r in recipes() if _matches(r, stack_id, model, device, plan, num_gpus)]
    values: dict[str, Any] = {}
    notes: list[tuple[str, str]] = []
    for knob in KNOBS:
        given = [(r, r["knobs"][knob]) for r in found if knob in r["knobs"]]
        if not given:
            continue
        distinct = {repr(v) for _, v in given}
        names = ", ".join(f"{r['config']} @ {_short(r['versions'][0])}" + (f" +{len(r['versions']) - 1}" if
                                                                               len(r["versions"]) > 1 else "")
                          for r, _ in given)
        if len(distinct) > 1:
            notes.append((knob, f"not taken from {stack_id}'s performance configs of this layout, which disagree "
                                f"({names})"))
            continue
        value = given[0][1]
        values[knob] = tuple(value) if knob == "recompute_modules" else value
        notes.append((knob, f"{values[knob]!r} — {stack_id}'s performance config of this model, GPU and layout "
                            f"({names}; catalog/recipes.yaml)"))
    return values, tuple(notes)


def with_recipe(plan: Plan, stated: Mapping[str, Any], unpublished: tuple[str, ...], chosen: tuple,
                stack_id: str | None, model: Model, device: str, num_gpus: int) -> tuple[Plan, tuple, tuple]:
    """(plan, knobs still unpublished, chosen notes) of a validation case after its stack's matching performance
    config fills the knobs `stated` (the case's plan mapping) does not give a value."""
    if not stack_id:
        return plan, unpublished, chosen
    values, notes = recipe_knobs(stack_id, model, device, plan, num_gpus)
    take = {k: v for k, v in values.items() if stated.get(k) is None}
    if "recompute_modules" in take and stated.get("recompute") not in (None, "selective"):
        take.pop("recompute_modules")  # modules mean something only under selective recompute
    if not take and not notes:
        return plan, unpublished, chosen
    taken: dict[str, Any] = {}
    refused: list[tuple[str, str]] = []
    for group in UNITS:  # one unit at a time: a knob the case's stated ones rule out is not taken
        unit = {k: take[k] for k in group if k in take}
        if not unit:
            continue
        try:
            plan = dataclasses.replace(plan, **unit)
            taken.update(unit)
        except NarrowpathError as exc:
            refused += [(k, f"not taken from {stack_id}'s performance config: with the case's stated knobs {exc}")
                        for k in unit]
    kept = tuple((k, n) for k, n in notes if k in taken or (k not in values and stated.get(k) is None))
    unpublished = tuple(k for k in unpublished if k not in taken)
    chosen = tuple((k, n) for k, n in chosen if k not in taken) + kept + tuple(refused)
    return plan, unpublished, chosen
