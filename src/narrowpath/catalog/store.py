"""Strict loader of the catalog YAML files (read once, cached)."""
from __future__ import annotations

import re

import difflib
from functools import lru_cache
from importlib import resources
from typing import Any

from narrowpath.catalog.gpu_names import resolve_gpu_name
from narrowpath.errors import CatalogError, shown
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.device import Device
from narrowpath.spec.model import Model
from narrowpath.spec.parse import calibration_from_dict, device_from_dict, model_from_dict, system_from_dict
from narrowpath.spec.strict_load import load_yaml
from narrowpath.spec.system import System

_FILES = {"devices": "devices.yaml", "systems": "systems.yaml", "models": "models.yaml",
          "profiles": "calibration.yaml", "scenarios": "scenarios.yaml", "stacks": "stacks.yaml",
          "serving_stacks": "serving_stacks.yaml"}


@lru_cache(maxsize=None)
def entries(kind: str) -> dict[str, dict[str, Any]]:
    """Entries of one catalog file by id, each with what it `extends` filled in (and that key dropped: `parents`)."""
    out = _raw_entries(kind)
    if kind in _INHERITING:
        out = {eid: _inherit(kind, entry, out) for eid, entry in out.items()}
    return out


@lru_cache(maxsize=None)
def parents(kind: str) -> dict[str, str]:
    """Entry id → the id of the entry it `extends`, for the entries that extend one."""
    return {eid: e["extends"] for eid, e in _raw_entries(kind).items() if e.get("extends")}


@lru_cache(maxsize=None)
def _raw_entries(kind: str) -> dict[str, dict[str, Any]]:
    """Entries of one catalog file by id, as written."""
    text = resources.files("narrowpath.catalog").joinpath(_FILES[kind]).read_text()
    data = load_yaml(text)
    out: dict[str, dict[str, Any]] = {}
    for entry in data.get(kind, []):
        eid = entry.get("id")
        if not eid:
            raise CatalogError(f"{_FILES[kind]}: an entry has no id: {shown(entry)}")
        if eid in out:
            raise CatalogError(f"{_FILES[kind]}: duplicate id {eid!r}")
        out[eid] = entry
    return out


_INHERITING = {"devices": ("id", "aliases", "extends", "default_system"), "profiles": ("id", "device", "extends"),
               "serving_stacks": ("id", "extends", "match", "unless", "versions_from", "versions_below")}
"""Catalog files whose entries may `extends` another (the keys never inherited: a serving stack's release line names
its own versions). Training stacks have their own `extends` (stack_defaults), applied per training format."""


def _inherit(kind: str, entry: dict[str, Any], table: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """An entry that `extends` an earlier one of the same file (a variant of a device, the profile of a device that
    shares another's die): the parent's keys, each replaced whole by the entry's own, `sources` merged key by key;
    the parent must not extend another (no chains). One place to change a figure two devices share."""
    parent_id = entry.get("extends")
    if parent_id is None:
        return entry
    parent = table.get(parent_id) if isinstance(parent_id, str) else None
    if parent is None or parent.get("extends") or list(table).index(parent_id) > list(table).index(entry["id"]):
        raise CatalogError(f"{_FILES[kind]}: {entry['id']} extends {shown(parent_id)}, which is not an earlier "
                           f"entry without an `extends` of its own")
    out = {k: v for k, v in parent.items() if k not in _INHERITING[kind]}
    out.update({k: v for k, v in entry.items() if k != "extends"})
    if "sources" in parent or "sources" in entry:
        out["sources"] = {**(parent.get("sources") or {}), **(entry.get("sources") or {})}
    return out


@lru_cache(maxsize=None)
def aliases(kind: str) -> dict[str, str]:
    """Other names of catalog entries (descriptive GPU names in published corpora: `GB200-NVL72-186GB` → GB200),
    each listed once, exactly (no substring matching)."""
    out: dict[str, str] = {}
    for eid, entry in entries(kind).items():
        for alias in entry.get("aliases") or ():
            if alias in out or alias in entries(kind):
                raise CatalogError(f"{_FILES[kind]}: alias {alias!r} names two entries")
            out[alias] = eid
    return out


def canonical_id(kind: str, eid: str) -> str:
    """The catalog id an id or alias names, or for a device a descriptive name that states one device's chip and
    memory (catalog.gpu_names); unchanged when it names nothing: the lookup then says so."""
    table = entries(kind)
    if eid in table:
        return eid
    alias = aliases(kind).get(eid)
    if alias is not None or kind != "devices" or not isinstance(eid, str):
        return eid if alias is None else alias
    return resolve_gpu_name(eid, table)[0] or eid


def _lookup(kind: str, eid: str, what: str) -> dict[str, Any]:
    table = entries(kind)
    eid = canonical_id(kind, eid)
    if eid in table:
        return table[eid]
    why = f" ({resolve_gpu_name(eid, table)[1]})" if kind == "devices" and isinstance(eid, str) else ""
    near = difflib.get_close_matches(str(eid)[:100], list(table), n=3, cutoff=0.3)
    hint = f"; nearest: {', '.join(near)}" if near else f"; known: {', '.join(table)}"
    raise CatalogError(f"unknown {what} {shown(eid)}{why}{hint}")


def device_ids() -> list[str]:
    return list(entries("devices"))


def system_ids() -> list[str]:
    return list(entries("systems"))


def model_ids() -> list[str]:
    return list(entries("models"))


def scenario_ids() -> list[str]:
    return list(entries("scenarios"))


@lru_cache(maxsize=None)
def device(eid: str) -> Device:
    return device_from_dict(_lookup("devices", eid, "device"), name=canonical_id("devices", eid))


@lru_cache(maxsize=None)
def system(eid: str) -> System:
    data = _lookup("systems", eid, "system")
    return system_from_dict(data, device(data["device"]), name=eid)


@lru_cache(maxsize=None)
def model(eid: str) -> Model:
    return model_from_dict(_lookup("models", eid, "model"), name=eid)


@lru_cache(maxsize=None)
def calibration_for(device_name: str) -> Calibration:
    """The shipped calibration profile of a device type, the device named as `--system` and `hardware.gpu` name it:
    its id, an alias, or a descriptive GPU name in any case (canonical_id): `--profile H100-80GB` found no profile
    where `--system H100-80GB` found the device."""
    for name in dict.fromkeys((device_name, canonical_id("devices", device_name))):
        for pid, data in entries("profiles").items():
            if data.get("device", pid) == name:
                return calibration_from_dict(data, name=pid)
    raise CatalogError(f"no calibration profile for device {device_name!r}; known: {', '.join(entries('profiles'))}")


def scenario_data(eid: str) -> dict[str, Any]:
    return _lookup("scenarios", eid, "scenario")


@lru_cache(maxsize=4096)
def framework_text(framework: str) -> str:
    """`plan.framework` (free text), or a stack's `match` word, in one spelling: lower case, single spaces,
    TensorRT-LLM however written (`tensorrt_llm`, `TensorRT LLM`, `TensorRTLLM`, `TRT-LLM`, `tensorrt-llm==0.17`,
    `tensorrt-llm-0.17`, `TensorRT-LLM (v0.17)`), a version's `v` dropped after a space or bracket (`v0.17` → `0.17`;
    `core_v0` is kept). Memoised: the stacks are looked up for every plan a search prices."""
    text = re.sub(r"\s+", " ", str(framework or "").lower())
    text = re.sub(r"tensorrt[ _]?llm|(?<![a-z])trt[ -]llm", "tensorrt-llm", text)
    text = re.sub(r"(?<=[ (\[=-])v(?=\d)", "", text)
    return re.sub(r"tensorrt-llm(?:==|-| \()(?=\d)", "tensorrt-llm ", text)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def _stated(word: str, text: str) -> list[tuple[int, tuple[int, ...]]]:
    """(position, version) of each version number written right after `word` in `text` (both through
    framework_text); an image name's suffix and a tag's `v` may sit between (`vllm-openai:v0.6.2`)."""
    pattern = re.escape(framework_text(word)) + r"(?:-[a-z]+)?[ =:/(-]*v?(\d+(?:\.\d+)*)"
    return [(m.start(), _version(m.group(1))) for m in re.finditer(pattern, framework_text(text))]


def stated_versions(word: str, text: str) -> list[tuple[int, ...]]:
    """The version numbers written right after `word` in `text`, in the order written: `vllm 0.6.3`, `vllm==0.5.4`,
    `vllm (0.6.0)`, a docker image's tag `vllm/vllm-openai:v0.6.2` → (0, 6, 3), (0, 5, 4), (0, 6, 0), (0, 6, 2)."""
    return [v for _, v in _stated(word, text)]


def stack_version(entry: dict[str, Any], framework: str) -> tuple[int, ...] | None:
    """The release `framework` names for a stack entry: the first version written after one of its `match` words
    (the text's first mention wins: `vLLM 0.8.1 (was vLLM 0.5.3)` is 0.8.1); None when it writes none."""
    found = [hit for w in entry.get("match") or () for hit in _stated(w, framework)]
    return min(found)[1] if found else None


def release_from(entry: dict[str, Any], framework: str, since: Any) -> bool:
    """Whether the release `framework` names for `entry` (stack_version) is `since` or later; True when either is
    not given (a text without a version is taken for the entry's latest release)."""
    v = stack_version(entry, framework)
    return since is None or v is None or v >= _version(str(since))


def stack_matches(entry: dict[str, Any], framework: str) -> bool:
    """Whether a stack entry names `framework`: one of its `match` words occurs in it and none of its `unless` words
    (both read through framework_text; an `unless` word also as written, lower case: `v1 engine`, whose `v`
    framework_text drops). An entry with `versions_from` / `versions_below` (a release line: vLLM's V0 engine before
    0.8) matches only a framework whose version (stack_version, the first written after a match word) lies within
    [versions_from, versions_below), compared number by number (0.10 is after 0.8)."""
    text = framework_text(framework)
    plain = re.sub(r"\s+", " ", str(framework or "").lower())
    if not any(framework_text(w) in text for w in entry.get("match") or ()) or \
            any(framework_text(w) in text or str(w).lower() in plain for w in entry.get("unless") or ()):
        return False
    low, high = entry.get("versions_from"), entry.get("versions_below")
    if low is None and high is None:
        return True
    v = stack_version(entry, framework)
    return v is not None and (low is None or v >= _version(str(low))) and (high is None or v < _version(str(high)))


def stack_for(framework: str | None) -> dict[str, Any] | None:
    """The software-stack entry whose `match` words occur in `framework` (free text), first match wins; None when
    the text names no known stack, or is None or empty (the tool's own defaults apply)."""
    for entry in entries("stacks").values():
        if stack_matches(entry, framework):
            return entry
    return None


UNKNOWN_STACK_OPEN_KNOBS = ("vpp", "dp_overlap")
"""Knobs a validation case leaves open when it does not state them (left out or null) and its `plan.framework` names
an engine that no entry of stacks.yaml matches: no documented default is known for them (the tool's own,
Megatron-LM's, is one engine's), so schedule.choose tries the settings such engines run and takes the fastest that
fits. A case with no framework keeps the tool's defaults (the Megatron-LM papers of training-public.yaml state
none)."""


NOT_STATED = ("", "none", "null", "unknown", "n/a", "na", "-", "?", "not stated", "not published", "unpublished")
"""`plan.framework` texts that state no engine at all (the tool's defaults apply, as for an empty one)."""


def unknown_stack(framework: str | None) -> bool:
    """Whether `framework` names an engine (text that is not one of NOT_STATED) that no stacks.yaml entry matches."""
    if not isinstance(framework, str) or framework.strip().lower() in NOT_STATED:
        return False
    return stack_for(framework) is None


@lru_cache(maxsize=256)
def stack_mtp_layout(framework: str) -> str | None:
    """Id of the software stack `framework` names when that stack lays out the pipeline chunks of a
    multi-token-prediction model itself (stacks.yaml `mtp_layout: front_filled`: Megatron-Bridge's DeepSeek-V3
    layouts, workload.split.mtp_front_filled), else None."""
    stack = stack_for(framework)
    return stack["id"] if stack and stack.get("mtp_layout") == "front_filled" else None


@lru_cache(maxsize=256)
def stack_cpu_offload(framework: str | None) -> str | None:
    """How the software stack `framework` names offloads activations to host memory (stacks.yaml `cpu_offload`:
    `megatron-core`, Megatron-Core's CPU offloading with its limits, schedule.choose.activation_patches), or None
    where the catalog does not know."""
    stack = stack_for(framework)
    return stack.get("cpu_offload") if stack else None


def stack_defaults(stack: dict[str, Any] | None, precision: str) -> dict[str, Any]:
    """The knob defaults of a software-stack entry for a run in training format `precision`: its `defaults` with its
    `defaults_by_precision` for that format over them, over the defaults of the entry it `extends` (an earlier
    version of the same stack); {} for no stack."""
    if not stack:
        return {}
    base = {}
    if stack.get("extends"):  # an earlier version of the same stack restates only what differs (no chains)
        parent = entries("stacks").get(stack["extends"])
        if parent is None or parent.get("extends"):
            raise CatalogError(f"stacks.yaml: {stack['id']} extends {stack['extends']!r}, which is not a stack "
                               "without an `extends` of its own")
        base = stack_defaults(parent, precision)
    return {**base, **(stack.get("defaults") or {}),
            **((stack.get("defaults_by_precision") or {}).get(precision) or {})}


STACK_DEFAULT_MARK = " — default of the {} stack"
"""How a training scenario's `chosen` note says that the software stack's defaults set a knob (see `stack_note`;
serving scenarios write their own notes, schedule.serving_defaults, and nothing re-derives them)."""


def stack_note(value: Any, stack_id: str, suffix: str = "") -> str:
    """The `chosen` note of a knob the stack `stack_id` set to `value` (`suffix`: e.g. ' (not published)')."""
    return f"{value!r}{STACK_DEFAULT_MARK.format(stack_id)}{suffix}"


def set_by_stack(note: str) -> bool:
    """Whether a `chosen` note is a `stack_note`: the knob holds its stack's default, not a stated value."""
    head, _, tail = STACK_DEFAULT_MARK.partition("{}")
    start = note.find(head)
    return start >= 0 and note.find(tail, start + len(head)) >= 0
