"""Build spec dataclasses from plain mappings (parsed YAML/JSON), naming the field on every error."""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Mapping

from narrowpath.errors import SpecError, shown
from narrowpath.spec._check import positive_int
from narrowpath.spec.calibration import Calibration, TierCalibration
from narrowpath.spec.device import Device, Level
from narrowpath.spec.model import MLA, Model, MoE
from narrowpath.spec.plan import Plan, check_modules_need_selective
from narrowpath.spec.system import System, Tier

# Keys that carry provenance or notes and are not spec fields.
_META_KEYS = {"id", "source", "sources", "note", "notes", "default_system", "description", "aliases"}


def _fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _check_keys(where: str, data: Mapping[str, Any], allowed: set[str]) -> None:
    if not isinstance(data, Mapping):
        raise SpecError(where, f"must be a mapping, got {type(data).__name__} {shown(data)}")
    for key in data:
        if key in _META_KEYS or key in allowed:
            continue
        near = difflib.get_close_matches(str(key)[:100], sorted(allowed), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else f"; known: {', '.join(sorted(allowed))}"
        raise SpecError(f"{where}.{shown(key, 60) if not isinstance(key, str) else key[:60]}", f"unknown field{hint}")


_MAX_FLOAT = 1.7976931348623157e308


def _num(where: str, v: Any) -> Any:
    """A number. YAML 1.1 reads `312e12` as a string, so numeric strings are accepted for numeric fields;
    lists, mappings, null and booleans are not, nor integers too large for a float."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            raise SpecError(where, f"must be a number, got {shown(v)}") from None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(where, f"must be a number, got {shown(v)}")
    if isinstance(v, int) and abs(v) > _MAX_FLOAT:
        raise SpecError(where, f"must be a number below 1e308, got an integer of about "
                               f"{int(v.bit_length() * 0.30103) + 1} digits")
    return v


def _mapping(where: str, v: Any) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise SpecError(where, f"must be a mapping, got {type(v).__name__} {shown(v)}")
    return v


def _list(where: str, v: Any) -> list | tuple:
    if not isinstance(v, (list, tuple)):
        raise SpecError(where, f"must be a list, got {type(v).__name__} {shown(v)}")
    return v


def _numbers(where: str, v: Any) -> dict[str, float]:
    """A mapping of name → number (peaks by dtype, efficiencies, residuals)."""
    return {k: float(_num(f"{where}.{k}", x)) for k, x in _mapping(where, v).items()}


def _build(cls, where: str, data: Mapping[str, Any], **extra: Any):
    fields = _fields(cls)
    _check_keys(where, data, fields)
    kwargs = {k: v for k, v in data.items() if k not in _META_KEYS or k in fields}
    kwargs.update(extra)
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.name not in kwargs and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise SpecError(f"{where}.{missing[0]}", "is required") from None
        raise SpecError(where, str(exc)) from None


_FLAT_MOE = {"experts": "num_experts", "top_k": "top_k", "shared_experts": "shared_experts",
             "shared_ffn": "shared_ffn", "dense_layers": "first_dense_layers", "moe_layer_every": "layer_every",
             "capacity_factor": "capacity_factor"}
"""Validation-corpus spelling of an MoE model (flat keys; `ffn` is one expert's width and `dense_ffn` the dense
layers' width, shared/validation/README.md) → the `moe` block's fields."""
_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_BLOCK_MOE = {**{k: v for k, v in _FLAT_MOE.items() if k != v}, "ffn": "expert_ffn"}
"""The corpus spelling inside a nested `moe:` block (shared/validation/README.md: "a `moe` block appears only for MoE
models") → the block's own field names; `ffn` there is one expert's width."""


def _moe_block(moe: Mapping[str, Any]) -> dict:
    """A nested `moe:` block's fields in the spec's names, from either spelling (ours, or the corpus's `experts`,
    `dense_layers`, `moe_layer_every`, `ffn`); a null field is absent, as at the model's top level."""
    out = {}
    for key, value in moe.items():
        if value is None:
            continue
        dst = _BLOCK_MOE.get(key, key)
        if dst in out or (dst != key and dst in moe):
            raise SpecError(f"model.moe.{key}", f"gives {dst} twice (spell it once: {dst} or {key})")
        out[dst] = value
    return out


def _nested_moe(d: dict) -> None:
    """A model with a nested `moe:` block (in place): MoE fields given beside it in the corpus spelling join it; with
    `dense_ffn` beside it, `ffn` is one expert's width as in the flat corpus form; a block without an expert width
    takes the model's `ffn` only when every layer is an expert layer without shared experts (Mixtral), where the
    two cannot differ — otherwise `expert_ffn` stays required."""
    block = _moe_block(d["moe"])
    if "dense_ffn" in block:  # the dense layers' width, written inside the block
        if "dense_ffn" in d:
            raise SpecError("model.moe.dense_ffn", "is given beside model.dense_ffn: give it once")
        d["dense_ffn"] = block.pop("dense_ffn")
    for src, dst in _FLAT_MOE.items():
        if src in d:
            if dst in block:
                raise SpecError(f"model.{src}", f"is given beside model.moe.{dst}: give it once")
            block[dst] = d.pop(src)
    if "dense_ffn" in d:
        if "ffn" in d and "expert_ffn" not in block:
            block["expert_ffn"] = d["ffn"]
        d["ffn"] = d.pop("dense_ffn")
    elif "expert_ffn" not in block and "ffn" in d and not block.get("first_dense_layers") \
            and block.get("layer_every", 1) == 1 and not block.get("shared_experts"):
        block["expert_ffn"] = d["ffn"]
    d["moe"] = block


def _flat_to_nested(d: dict) -> dict:
    """Accept the corpus form of MoE and MLA models beside the nested `moe:` block; a null field = absent."""
    d = {k: v for k, v in d.items() if v is not None}
    if d.get("experts"):
        if "moe" in d:
            raise SpecError("model.experts", "give the experts either as a `moe` block or as flat fields, not both")
        moe = {dst: d.pop(src) for src, dst in _FLAT_MOE.items() if src in d}
        if "ffn" not in d:
            raise SpecError("model.ffn", "is required (one expert's inner size for an MoE model)")
        moe["expert_ffn"] = d["ffn"]
        d["ffn"] = d.pop("dense_ffn", d["ffn"])
        d["moe"] = moe
    elif isinstance(d.get("moe"), Mapping):
        d.pop("experts", None)
        _nested_moe(d)
    else:
        for src in _FLAT_MOE:
            if src != "experts" and src in d and src not in ("capacity_factor",):
                raise SpecError(f"model.{src}", "applies to MoE models only (no `experts` given)")
        d.pop("experts", None)
        if "dense_ffn" in d:
            raise SpecError("model.dense_ffn", "applies to MoE models only (no `experts` given)")
    attention = d.pop("attention", None)
    if attention not in (None, "mla", "mha", "gqa"):
        raise SpecError("model.attention", f"must be mla (multi-head latent attention) or omitted, got {attention!r}")
    if attention == "mla":
        if "mla" in d:
            raise SpecError("model.attention", "give MLA either as an `mla` block or as flat fields, not both")
        d["mla"] = {k: d.pop(k) for k in _MLA_KEYS if k in d}
    else:
        stray = [k for k in _MLA_KEYS if k in d]
        if stray:
            raise SpecError(f"model.{stray[0]}", "applies to multi-head latent attention only (attention: mla)")
    return d


def model_from_dict(data: Mapping[str, Any], *, name: str | None = None) -> Model:
    _mapping("model", data)
    allowed = _fields(Model) | set(_FLAT_MOE) | {"dense_ffn", "attention", *_MLA_KEYS}
    _check_keys("model", data, allowed)
    d = _flat_to_nested(dict(data))
    if name is not None or "id" in d:
        d.setdefault("name", name or d.get("id"))
    if d.get("moe") is not None:
        moe = d["moe"]
        if isinstance(moe, Mapping):  # a quoted number in a real-valued field, as everywhere (_num)
            moe = {**moe, **{k: _num(f"model.moe.{k}", moe[k]) for k in ("capacity_factor", "glu_clamp") if k in moe}}
        d["moe"] = _build(MoE, "model.moe", moe)
    if d.get("mla") is not None:
        d["mla"] = _build(MLA, "model", d["mla"])
    return _build(Model, "model", d)


def plan_from_dict(data: Mapping[str, Any], *, defaults: Mapping[str, Any] | None = None) -> Plan:
    """A Plan from a mapping. `defaults` fill the knobs the mapping leaves out (a software stack's defaults,
    catalog/stacks.yaml). A null knob must have been taken out by the caller (see `open_knobs`)."""
    _check_keys("plan", data, _fields(Plan))
    d = {**(defaults or {}), **dict(data)}
    for key, value in d.items():
        if value is None:
            raise SpecError(f"plan.{key}", "is null (not published); only a validation case may leave a knob "
                            "for the tool to choose")
    if "placement" in d:
        if not isinstance(d["placement"], (list, tuple)):
            raise SpecError("plan.placement", f"must be a list of the axes tp, cp, ep, dp, pp; got {shown(d['placement'])}")
        d["placement"] = tuple(d["placement"])
    if "bucket_bytes" in d:
        d["bucket_bytes"] = float(_num("plan.bucket_bytes", d["bucket_bytes"]))
    check_modules_need_selective("plan.recompute_modules", d.get("recompute", "none"), d.get("recompute_modules"))
    return _build(Plan, "plan", d)


def open_knobs(data: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Split a plan mapping into its published knobs and the names of those given as null (not published)."""
    _mapping("plan", data)
    return ({k: v for k, v in data.items() if v is not None}, tuple(k for k, v in data.items() if v is None))


def device_from_dict(data: Mapping[str, Any], *, name: str | None = None) -> Device:
    _mapping("device", data)
    name = name or data.get("id") or data.get("name") or "device"
    where = f"device[{name}]"
    _check_keys(where, data, _fields(Device))
    d = {k: v for k, v in data.items() if k not in _META_KEYS or k == "sources"}
    d["name"] = name
    for key in ("peak_matrix_flop_per_s", "peak_vector_flop_per_s", "energy_pj_per_flop", "energy_pj_per_byte"):
        if key in d:
            d[key] = _numbers(f"{where}.{key}", d[key])
    levels = _list(f"{where}.levels", d.get("levels", ()))
    d["levels"] = tuple(_build(Level, f"{where}.levels[{i}]",
                               {k: (_num(f"{where}.levels[{i}].{k}", v) if k != "name" else v)
                                for k, v in _mapping(f"{where}.levels[{i}]", lv).items()})
                        for i, lv in enumerate(levels))
    for key in ("tdp_w", "idle_w", "peak_exp_per_s"):
        if key in d:
            d[key] = float(_num(f"{where}.{key}", d[key]))
    return _build(Device, where, d)


def tier_from_dict(data: Mapping[str, Any], where: str) -> Tier:
    d = {k: (_num(f"{where}.{k}", v) if k in ("bw_bytes_per_s_per_gpu", "latency_s", "oversubscription") else v)
         for k, v in _mapping(where, data).items()}
    return _build(Tier, where, d)


def system_from_dict(data: Mapping[str, Any], device: Device, *, name: str | None = None) -> System:
    _mapping("system", data)
    name = name or data.get("id") or data.get("name") or "system"
    where = f"system[{name}]"
    _check_keys(where, data, _fields(System))
    d = {k: v for k, v in data.items() if k not in _META_KEYS or k == "sources"}
    d["name"] = name
    d["device"] = device
    d["tiers"] = tuple(tier_from_dict(t, f"{where}.tiers[{i}]") for i, t in enumerate(_list(f"{where}.tiers", d.get("tiers", ()))))
    for key in ("host_bw_bytes_per_s_per_gpu", "power_limit_w"):
        if key in d:
            d[key] = float(_num(f"{where}.{key}", d[key]))
    return _build(System, where, d)


def _pairs(where: str, value: Any) -> tuple[tuple[float, float], ...]:
    """A list of [x, y] number pairs (measured tables in calibration profiles)."""
    try:
        return tuple((float(_num(where, x)), float(_num(where, y))) for x, y in value)
    except (TypeError, ValueError):
        raise SpecError(where, f"must be a list of [x, y] number pairs, got {shown(value)}") from None


def _tier_value(where: str, key: str, value: Any) -> Any:
    if key == "busbw_efficiency_by_size":
        return _pairs(where, value)
    if key == "measured_num_ranks":
        return positive_int(where, _num(where, value), minimum=0)
    return float(_num(where, value))


def calibration_from_dict(data: Mapping[str, Any], *, name: str | None = None) -> Calibration:
    _mapping("calibration", data)
    name = name or data.get("id") or data.get("name") or "profile"
    where = f"calibration[{name}]"
    _check_keys(where, data, _fields(Calibration))
    d = {k: v for k, v in data.items() if k not in _META_KEYS or k == "sources"}
    d["name"] = name
    d.setdefault("device", name)
    if "matrix_efficiency" in d:
        d["matrix_efficiency"] = _numbers(f"{where}.matrix_efficiency", d["matrix_efficiency"])
    for key in ("matrix_half_flop", "vector_bw_efficiency", "kernel_overhead_s", "host_dispatch_s", "host_sync_s",
                "flash_efficiency",
                "overlap_compute_slowdown"):
        if key in d:
            d[key] = float(_num(f"{where}.{key}", d[key]))
    tiers = {}
    for tname, tdata in _mapping(f"{where}.tiers", d.get("tiers") or {}).items():
        tw = f"{where}.tiers.{tname}"
        tiers[tname] = _build(TierCalibration, tw, {k: _tier_value(f"{tw}.{k}", k, v)
                                                    for k, v in _mapping(tw, tdata).items()})
    d["tiers"] = tiers
    if "matrix_efficiency_by_size" in d:
        d["matrix_efficiency_by_size"] = {k: _pairs(f"{where}.matrix_efficiency_by_size.{k}", v)
                                          for k, v in _mapping(f"{where}.matrix_efficiency_by_size",
                                                               d["matrix_efficiency_by_size"]).items()}
    if "memory_levels" in d:
        d["memory_levels"] = tuple(
            _build(Level, f"{where}.memory_levels[{i}]",
                   {k: (v if k == "name" else float(_num(f"{where}.memory_levels[{i}].{k}", v)))
                    for k, v in _mapping(f"{where}.memory_levels[{i}]", lv).items()})
            for i, lv in enumerate(_list(f"{where}.memory_levels", d["memory_levels"] or ())))
    if "fit_residuals" in d:
        d["fit_residuals"] = _numbers(f"{where}.fit_residuals", d["fit_residuals"])
    return _build(Calibration, where, d)
