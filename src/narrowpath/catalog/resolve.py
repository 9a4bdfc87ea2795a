"""Turn what a user gives (a file, a catalog name, a mapping) into a validated Scenario."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

import yaml

from narrowpath.catalog import store
from narrowpath.catalog.gpu_names import parse_gpu_name
from narrowpath.catalog.known_models import with_catalog_architecture
from narrowpath.catalog.perf_configs import with_perf_config
from narrowpath.errors import CatalogError, NarrowpathError, SpecError, shown
from narrowpath.spec._check import positive_float, positive_int
from narrowpath.spec.calibration import SCHEMA as CALIBRATION_SCHEMA, Calibration
from narrowpath.spec.hf_config import looks_like_hf_config, model_from_hf_config
from narrowpath.spec.model import Model
from narrowpath.spec.parse import (_check_keys, _num, calibration_from_dict, device_from_dict, model_from_dict,
                                   open_knobs, plan_from_dict, system_from_dict)
from narrowpath.spec.plan import Plan
from narrowpath.spec.scenario import Scenario
from narrowpath.spec.strict_load import load_json, load_yaml
from narrowpath.spec.system import System
from narrowpath.units import GBIT_PER_S

DEFAULT_SCENARIO = "llama3-70b-h100-256"
_HARDWARE_KEYS = {"gpu", "num_gpus", "gpus_per_node", "nic_gbps_per_gpu", "scale_up_gpus", "power_limit_w"}
_SCENARIO_KEYS = {"name", "system", "hardware", "model", "plan", "num_gpus", "mode", "calibration", "kind",
                  "measured", "assumed", "step_time_derived"}


def read_data_file(path: str | Path) -> Any:
    """Parse a YAML or JSON file; errors name the file."""
    p = Path(path)
    kind = "JSON" if p.suffix == ".json" else "YAML"
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise NarrowpathError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if raw[:2] == b"\x1f\x8b":
        raise NarrowpathError(f"{p}: is gzip-compressed; give the uncompressed {kind} file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NarrowpathError(f"{p}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    try:
        if p.suffix == ".json":
            return load_json(text)
        return load_yaml(text)
    except (ValueError, yaml.YAMLError) as exc:  # ValueError: JSONDecodeError, or an integer too long to convert
        first = yaml_problem(exc) or (str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        if "integer string conversion" in first:
            first = "an integer with more than 4300 digits"
        raise NarrowpathError(f"{p}: not valid {kind}: {first}") from None
    except RecursionError:
        raise NarrowpathError(f"{p}: not valid {kind}: nested too deeply") from None


def yaml_problem(exc: BaseException) -> str:
    """What a YAML parser found wrong and where ("mapping values are not allowed here (line 3, column 8)"), rather
    than the first line of its message, which is often only the context ("while scanning a simple key"); empty
    when the error carries no problem."""
    if not isinstance(exc, yaml.MarkedYAMLError) or not exc.problem:
        return ""
    mark = exc.problem_mark
    if mark is None or "line " in exc.problem:
        return exc.problem
    return f"{exc.problem} (line {mark.line + 1}, column {mark.column + 1})"


def system_for_hardware(gpu: str, *, gpus_per_node: int | None = None, nic_gbps_per_gpu: float | None = None,
                        scale_up_gpus: int | None = None, power_limit_w: float | None = None,
                        base: System | None = None) -> System:
    """The device's home system, re-shaped to the stated node size, NVLink domain, NIC rate and power cap
    (validation-corpus `hardware`). Without `scale_up_gpus` the NVLink domain is the one the GPU's name states
    (`GB200-NVL36`), else the node when the home system's domain is its node (DGX/HGX), else the home system's
    (NVL72)."""
    if gpus_per_node is not None:
        gpus_per_node = positive_int("hardware.gpus_per_node", gpus_per_node)
    if nic_gbps_per_gpu is not None:  # real-valued: a quoted number is read as everywhere (spec.parse._num)
        nic_gbps_per_gpu = positive_float("hardware.nic_gbps_per_gpu", _num("hardware.nic_gbps_per_gpu",
                                                                            nic_gbps_per_gpu))
    if scale_up_gpus is not None:
        scale_up_gpus = positive_int("hardware.scale_up_gpus", scale_up_gpus)
    if power_limit_w is not None:
        power_limit_w = positive_float("hardware.power_limit_w", _num("hardware.power_limit_w", power_limit_w))
    if base is None:
        if not isinstance(gpu, str):
            raise SpecError("hardware.gpu", f"must be a catalog device id, got {shown(gpu)}")
        dev_entry = store.entries("devices").get(store.canonical_id("devices", gpu))
        if dev_entry is None:
            store.device(gpu)  # raises CatalogError with nearest ids
        base = store.system(dev_entry["default_system"])
        stated = parse_gpu_name(gpu).nvl_domain  # `GB200 NVL36`: the NVLink domain the name states
        home = next((t.domain_size for t in base.tiers if t.name == "scale_up"), None)
        if scale_up_gpus is None and stated and stated != home:
            scale_up_gpus = stated
            if gpus_per_node is None and stated < base.gpus_per_node:  # `GH200 NVL2`: two superchips per node
                gpus_per_node = stated
    tiers = []
    for t in base.tiers:
        if t.name == "scale_up":
            grown = scale_up_gpus or (gpus_per_node if t.domain_size == base.gpus_per_node else None)
            if t.topology == "full_mesh" and grown and grown > t.domain_size:  # direct links cannot grow
                field = "hardware.scale_up_gpus" if scale_up_gpus else "hardware.gpus_per_node"
                raise SpecError(field, f"{grown} exceeds the {base.device.name}'s directly linked group of "
                                f"{t.domain_size} GPUs (NVLink bridges or a link mesh, no switch): give the group "
                                "as gpus_per_node; the rest of the server is reached as scale-out")
            if scale_up_gpus:
                t = dataclasses.replace(t, domain_size=int(scale_up_gpus))
            elif gpus_per_node and t.domain_size == base.gpus_per_node:
                t = dataclasses.replace(t, domain_size=int(gpus_per_node))
        if t.name == "scale_out" and nic_gbps_per_gpu:
            t = dataclasses.replace(t, bw_bytes_per_s_per_gpu=float(nic_gbps_per_gpu) * GBIT_PER_S)
        tiers.append(t)
    changed = any(v is not None for v in (gpus_per_node, nic_gbps_per_gpu, scale_up_gpus, power_limit_w))
    node = int(gpus_per_node or base.gpus_per_node)
    # a segment is so many of the home system's racks' trays: another rack or tray size has its own, unknown here
    up = next(t for t in tiers if t.name == "scale_up")
    same_racks = node == base.gpus_per_node and up.domain_size == base.tier("scale_up").domain_size
    return dataclasses.replace(base, gpus_per_node=node, tiers=tuple(tiers),
                               segment_gpus=base.segment_gpus if same_racks else 0,
                               power_limit_w=float(power_limit_w or base.power_limit_w),
                               name=f"{base.name}*" if changed else base.name)


def system_or_device(name: str, *, gpus_per_node: int | None = None,
                     nic_gbps_per_gpu: float | None = None) -> System:
    """A catalog system by id, or the home system of a device named by id, alias or a descriptive GPU name
    (catalog.gpu_names: `B200-SXM-192GB`, `NVIDIA H100 80GB HBM3`) — what a `--system` flag takes — re-shaped to
    `gpus_per_node` and `nic_gbps_per_gpu` when given (system_for_hardware)."""
    reshape = {"gpus_per_node": gpus_per_node, "nic_gbps_per_gpu": nic_gbps_per_gpu}
    try:
        base = store.system(name)
    except CatalogError as not_system:
        if store.canonical_id("devices", name) in store.entries("devices"):
            return system_for_hardware(name, **reshape)
        if parse_gpu_name(name).family is None:  # no GPU named: the system lookup's nearest ids say more
            raise
        try:
            store.device(name)  # the device lookup's reason (a PCIe board, a chip the catalog lacks, …)
        except CatalogError as exc:
            raise CatalogError(f"{not_system} — nor a device: {exc}") from None
        raise
    if gpus_per_node or nic_gbps_per_gpu:
        return system_for_hardware(base.device.name, **reshape, base=base)
    return base


def _system(value: Any, base_dir: Path | None) -> System:
    if isinstance(value, str):
        return store.system(value)
    if isinstance(value, Mapping):
        dev = value.get("device")
        device = store.device(dev) if isinstance(dev, str) else device_from_dict(dev or {})
        return system_from_dict({k: v for k, v in value.items() if k != "device"}, device)
    raise SpecError("system", f"must be a catalog id or a mapping, got {shown(value)}")


def resolve_system(value: Any, base_dir: Path | None = None) -> System:
    """A System from a catalog id, a YAML/JSON file holding one system (the fields of a `systems.yaml` entry,
    `device` a catalog id or a mapping), or such a mapping. A relative path is taken from `base_dir`."""
    if isinstance(value, str) and value.endswith((".yaml", ".yml", ".json")):
        p = Path(value) if base_dir is None else base_dir / value
        if not p.is_file():
            raise NarrowpathError(f"{p}: no such system file")
        data = read_data_file(p)
        if not isinstance(data, Mapping):
            raise SpecError("system", f"{p}: must hold a mapping (one system), got {type(data).__name__}")
        named = data if ("id" in data or "name" in data) else {**data, "name": p.stem}
        return _system(named, p.parent)
    return _system(value, base_dir)


def resolve_model(value: Any, base_dir: Path | None = None, *, seq_len: int | None = None) -> Model:
    """A Model from a catalog id, a model file (.yaml/.yml/.json: the fields of a `models.yaml` entry, named by its
    `name` or `id`, else the file's stem), a HuggingFace config.json path (a .json file with HF keys), or a mapping
    (spec fields or HF keys). A relative path is taken from `base_dir`.

    `seq_len` (the --seq-len flag) is the training sequence length a HuggingFace config needs (it states only the
    position limit); a `seq_len` beside `hf_config` in the mapping gives it too, the flag winning."""
    if isinstance(value, str):
        p = Path(value) if base_dir is None else base_dir / value
        if value.endswith((".yaml", ".yml", ".json")):
            if not p.is_file():
                raise NarrowpathError(f"{p}: no such model file")
            data = read_data_file(p)
            if not isinstance(data, Mapping):
                raise SpecError("model", f"{p}: must hold a mapping (one model), got {type(data).__name__}")
            if looks_like_hf_config(data):
                return model_from_hf_config(data, name=p.stem, seq_len=seq_len)
            return model_from_dict(data, name=None if ("name" in data or "id" in data) else p.stem)
        return store.model(value)
    if isinstance(value, Mapping):
        if "hf_config" in value:
            _check_keys("model", value, {"hf_config", "name", "seq_len"})
            if not isinstance(value["hf_config"], str):
                raise SpecError("model.hf_config", f"must be a config.json path, got {shown(value['hf_config'])}")
            p = Path(value["hf_config"]) if base_dir is None else base_dir / value["hf_config"]
            return model_from_hf_config(_hf_data(p), name=value.get("name"),
                                        seq_len=seq_len if seq_len is not None else value.get("seq_len"))
        if looks_like_hf_config(value):
            return model_from_hf_config(value, seq_len=seq_len)
        return model_from_dict(value)
    raise SpecError("model", f"must be a catalog id, a config.json path or a mapping, got {shown(value)}")


def _hf_data(p: Path) -> Mapping[str, Any]:
    data = read_data_file(p)
    if not isinstance(data, Mapping):
        raise SpecError("model", f"{p}: a config.json must hold a JSON object, got {type(data).__name__}")
    return data


def calibration_document(data: Any, source: str | Path) -> Calibration:
    """The profile of a parsed profile file: one profile mapping, or `{schema: narrowpath-calibration/1,
    profiles: [...]}` (the first profile is used; ids must be unique). An unknown `schema:` is refused."""
    p = Path(source)
    if isinstance(data, Mapping) and "schema" in data and data["schema"] != CALIBRATION_SCHEMA:
        raise SpecError("calibration.schema", f"{p}: unknown schema {shown(data['schema'])}; this version reads "
                        f"{CALIBRATION_SCHEMA}")
    if isinstance(data, Mapping) and "profiles" in data:
        profiles = data["profiles"]
        if not isinstance(profiles, list) or not profiles:
            raise SpecError("calibration.profiles", f"{p}: must be a non-empty list of profiles, "
                            f"got {shown(profiles)}")
        ids = [q.get("id") for q in profiles if isinstance(q, Mapping) and q.get("id") is not None]
        dup = next((i for n, i in enumerate(ids) if i in ids[:n]), None)
        if dup is not None:
            raise SpecError("calibration.profiles", f"{p}: duplicate profile id {shown(dup)}")
        data = profiles[0]
    if not isinstance(data, Mapping):
        raise SpecError("calibration", f"{p}: a profile must be a mapping, got {type(data).__name__} "
                        f"{shown(data)}")
    return calibration_from_dict(data, name=data.get("id") or p.stem)


def calibration_from(value: Any, base_dir: Path | None = None) -> Calibration:
    """A calibration profile from a catalog id (device name), a YAML file or a mapping."""
    if isinstance(value, Calibration):
        return value
    if isinstance(value, str):
        p = Path(value) if base_dir is None else base_dir / value
        if p.suffix in (".yaml", ".yml", ".json"):
            if not p.exists():
                raise NarrowpathError(f"{p}: no such file (calibration profile)")
            return calibration_document(read_data_file(p), p)
        return store.calibration_for(value)
    if isinstance(value, Mapping):
        return calibration_from_dict(value)
    raise SpecError("calibration", f"must be a device name, a profile file or a mapping, got {shown(value)}")


def check_name(data: Mapping[str, Any]) -> None:
    """A file's `name` is text: `name: [1]` was accepted and shown as '[1]'."""
    if data.get("name") is not None and not isinstance(data["name"], str):
        raise SpecError("name", f"must be a string, got {shown(data['name'])}")


def _hardware_gpus(hw: Mapping[str, Any], data: Mapping[str, Any]) -> Any:
    """The GPU count beside a `hardware` block: its own num_gpus, else the file's; both given, they must agree (the
    block's silently won: `hardware: {num_gpus: 8}` beside `num_gpus: 16` ran on 8)."""
    inner, outer = hw.get("num_gpus"), data.get("num_gpus")
    if inner is not None and outer is not None:
        n = positive_int("hardware.num_gpus", inner, maximum=1 << 24)
        if positive_int("num_gpus", outer, maximum=1 << 24) != n:
            raise SpecError("num_gpus", f"{shown(outer)} disagrees with hardware.num_gpus {shown(inner)}: give the GPU "
                            "count once")
    return hw.get("num_gpus", outer)


def system_and_gpus(data: Mapping[str, Any], base_dir: Path | None) -> tuple[System, Any]:
    """(system, num_gpus as given or None) from a file's `system` name/block or its corpus-style `hardware` block
    (one of the two; shared by training scenarios and serving files)."""
    hw = data.get("hardware")
    if hw is not None:
        if "system" in data:
            raise SpecError("hardware", "give either `system` or a `hardware` block, not both (the hardware block "
                            "would re-shape a system the file also names)")
        _check_keys("hardware", hw, _HARDWARE_KEYS)
        if "gpu" not in hw:
            raise SpecError("hardware.gpu", "is required")
        system = system_for_hardware(hw["gpu"], gpus_per_node=hw.get("gpus_per_node"),
                                     nic_gbps_per_gpu=hw.get("nic_gbps_per_gpu"),
                                     scale_up_gpus=hw.get("scale_up_gpus"), power_limit_w=hw.get("power_limit_w"))
        return system, _hardware_gpus(hw, data)
    if "system" in data:
        return _system(data["system"], base_dir), data.get("num_gpus")
    raise SpecError("system", "is required (or a `hardware` block)")


def scenario_from_dict(data: Mapping[str, Any], *, name: str | None = None, base_dir: Path | None = None,
                       allow_null: bool = False, seq_len: int | None = None, corpus: str | None = None) -> Scenario:
    """Build a Scenario from a mapping (scenario file, catalog entry, or a validation-corpus case); `seq_len` is the
    --seq-len flag, which a HuggingFace config.json model needs (see resolve_model); `corpus` names the schema of a
    validation-corpus case, whose model the catalog may recognise (catalog.known_models)."""
    _check_keys("scenario", data, _SCENARIO_KEYS)
    check_name(data)
    if "model" not in data:
        raise SpecError("model", "is required")
    if "plan" not in data:
        raise SpecError("plan", "is required")
    system, num_gpus = system_and_gpus(data, base_dir)
    model = resolve_model(data["model"], base_dir, seq_len=seq_len)
    known: tuple = ()
    if corpus:  # a validation case: what its schema cannot state comes from the catalog model it is
        model, known = with_catalog_architecture(model, data["model"], corpus)
    plan_data, implied = implied_knobs(data["plan"], num_gpus, model.moe is not None) if allow_null \
        else (data["plan"], ())
    half = system.device.half_format
    if isinstance(plan_data, Mapping) and plan_data.get("precision") is None and half != "bf16":
        plan_data = {**plan_data, "precision": half}  # a Volta board's tensor cores take FP16, not the default BF16
        implied += (("precision", f"{half} — {system.device.name} has no BF16 tensor cores (not stated)"),)
    plan, unpublished, chosen = plan_with_stack_defaults(plan_data, allow_null=allow_null)
    if corpus == "training":  # a validation case: its stack's published config for its layout fills unstated knobs
        stack = store.stack_for(plan.framework)
        plan, unpublished, chosen = with_perf_config(plan, plan_data, unpublished, chosen, stack and stack["id"],
                                                     model, system.device.name, num_gpus or plan.num_gpus)
    if not system.device.fused_attention and plan.attention in ("flash", "flash2") and "attention" not in plan_data:
        plan = dataclasses.replace(plan, attention="auto")  # the stack's fused kernel does not run on Volta
        chosen = tuple((k, n) for k, n in chosen if k != "attention")
    chosen = known + implied + chosen
    if num_gpus is None:
        num_gpus = plan.num_gpus
    calibration = calibration_from(data["calibration"], base_dir) if data.get("calibration") else None
    return Scenario(name=str(name or data.get("name") or data.get("id") or "scenario"), system=system, model=model,
                    plan=plan, num_gpus=num_gpus, mode=data.get("mode", "training"), calibration=calibration,
                    open_knobs=unpublished, chosen=chosen)


AXES_TAKING_THE_REST = ("dp", "pp", "tp", "cp")
"""Of several unpublished parallel degrees, the first here takes what the GPU count leaves; the others keep
Megatron-LM's defaults (tensor, pipeline and context parallel size 1)."""
PLACEHOLDERS = {"zero_stage": 1}
"""Values an unpublished knob holds until schedule.choose sets it, where the tool's default would make the plan
inconsistent before the choice (FP8 parameters need the distributed optimizer); the chooser tries every setting."""


def implied_knobs(data: Any, num_gpus: Any, moe: bool) -> tuple[dict, tuple]:
    """(plan mapping, (knob, note) each) with the unpublished knobs the case itself settles filled in: a parallel
    degree the GPU count leaves (tp·cp·dp·pp = GPUs: one null degree is arithmetic; of several, AXES_TAKING_THE_REST),
    and the expert-parallel degree of a dense model (1: it has no experts)."""
    if not isinstance(data, Mapping):
        return data, ()
    out, notes = dict(data), []
    if "gbs" in out and out["gbs"] is None:  # the tool's default (1) would only fail the batch's divisibility
        raise SpecError("plan.gbs", "is null (not published) and no rule can choose it without the measurement; "
                        "the case cannot be priced")
    open_axes = [a for a in ("tp", "pp", "cp", "dp") if a in out and out[a] is None]
    if open_axes and num_gpus is not None:
        n = positive_int("hardware.num_gpus", num_gpus, maximum=1 << 24)
        stated = 1
        for a in ("tp", "pp", "cp", "dp"):
            if a in out and a not in open_axes:
                out[a] = positive_int(f"plan.{a}", out[a], maximum=1 << 20)
                stated *= out[a]
        rest_axis = next(a for a in AXES_TAKING_THE_REST if a in open_axes)
        if n % stated:
            raise SpecError(f"plan.{rest_axis}", f"is null (not published) and the {n} GPUs are not a multiple of "
                            f"the stated degrees' product {stated}")
        for a in open_axes:
            if a != rest_axis:
                out[a] = 1
                notes.append((a, "1 — Megatron-LM's default, another unpublished degree takes the GPUs (not "
                              "published)"))
        out[rest_axis] = n // stated
        notes.append((rest_axis, f"{out[rest_axis]} — what the GPU count leaves: {n} GPUs over the stated "
                      "degrees (not published)"))
        need = (("pp", out.get("vpp") not in (None, 1), "interleaving (vpp > 1) needs pp > 1"),
                ("tp", out.get("sequence_parallel") is True, "sequence parallelism needs tp > 1"))
        for axis, stated_need, why in need:
            if axis in open_axes and out[axis] == 1 and stated_need:
                raise SpecError(f"plan.{axis}", f"is null (not published) and {why}; with "
                                f"{', '.join(a for a in open_axes if a != axis)} null too the GPU count does not "
                                "settle it")
    if "ep" in out and out["ep"] is None and not moe:
        out["ep"] = 1
        notes.append(("ep", "1 — a dense model has no experts (not published)"))
    return out, tuple(notes)


def plan_with_stack_defaults(data: Any, *, allow_null: bool = False) -> tuple[Plan, tuple[str, ...], tuple]:
    """(plan, knobs left null, (knob, note) for every knob the software stack's defaults filled). Knobs the data
    leaves out take the defaults of the stack `plan.framework` names (catalog/stacks.yaml); a null knob is left
    open for `schedule.choose` when `allow_null` (validation cases), else refused."""
    if not isinstance(data, Mapping):
        raise SpecError("plan", f"must be a mapping, got {type(data).__name__} {shown(data)}")
    published, unpublished = open_knobs(data)
    if unpublished and not allow_null:
        raise SpecError(f"plan.{unpublished[0]}", "is null (not published); give a value")
    framework = published.get("framework") or ""
    stack = store.stack_for(framework) if isinstance(framework, str) else None
    precision = published.get("precision", Plan.__dataclass_fields__["precision"].default)
    if not isinstance(precision, str):
        raise SpecError("plan.precision", f"must be a format name (bf16, fp16, fp8, mxfp8, nvfp4), got "
                        f"{shown(precision)}")
    defaults = {k: v for k, v in store.stack_defaults(stack, precision).items() if k not in data}
    if published.get("recompute") != "selective":  # a stack's selective modules mean something only under selective
        defaults.pop("recompute_modules", None)
    chosen = tuple((k, store.stack_note(v, stack["id"])) for k, v in defaults.items())
    if allow_null and store.unknown_stack(framework):  # an unnamed engine publishes none of these by omission
        unpublished += tuple(k for k in store.UNKNOWN_STACK_OPEN_KNOBS if k not in data)
    held = {k: v for k, v in PLACEHOLDERS.items() if k in unpublished}
    return plan_from_dict({**published, **held}, defaults=defaults), unpublished, chosen


def restack_for_precision(plan: Plan, chosen: tuple, precision: str, stated: set[str]) -> tuple[dict, tuple]:
    """(plan fields, chosen notes) after the training format of a plan changes to `precision` (a command-line
    --precision over a scenario): a knob the software stack filled for the old format (its `chosen` note is a
    `catalog.store.stack_note`) takes the stack's value for the new format, or the tool's default when the stack
    sets none for it (catalog/stacks.yaml `defaults_by_precision`); knobs in `stated` (given on the command line)
    and knobs the scenario stated stay as they are."""
    stack = store.stack_for(plan.framework)
    if stack is None:
        return {}, chosen
    filled = {k for k, note in chosen if store.set_by_stack(note) and k not in stated}
    new = store.stack_defaults(stack, precision)
    fields, notes = {}, []
    for knob, note in chosen:
        if knob not in filled:
            notes.append((knob, note))
    for knob in sorted(filled):
        if knob in new:
            fields[knob] = new[knob]
            notes.append((knob, store.stack_note(new[knob], stack["id"])))
        else:
            fields[knob] = Plan.__dataclass_fields__[knob].default
    return fields, tuple(notes)


def load_scenario(source: str | Path | Mapping[str, Any] | None = None, *, seq_len: int | None = None) -> Scenario:
    """A scenario from a file path (YAML/JSON), a catalog scenario id, a mapping, or None for the default;
    `seq_len` (--seq-len) reaches a HuggingFace config.json model (which needs it)."""
    if source is None:
        source = DEFAULT_SCENARIO
    if isinstance(source, Mapping):
        return scenario_from_dict(source, seq_len=seq_len)
    p = Path(source)
    if p.suffix in (".yaml", ".yml", ".json") or p.exists():
        if not p.exists():
            raise NarrowpathError(f"{p}: no such file")
        data = read_data_file(p)
        if not isinstance(data, Mapping):
            raise SpecError("scenario", f"{p}: must hold a mapping at top level")
        check_name(data)
        if looks_like_hf_config(data) and "plan" not in data:
            raise SpecError("plan", f"{p} is a model config.json; pass it as --model with a plan (--tp, --pp, ...)")
        return scenario_from_dict(data, name=data.get("name", p.stem), base_dir=p.parent, seq_len=seq_len)
    if str(source) in store.entries("scenarios"):
        return scenario_from_dict(store.scenario_data(str(source)), name=str(source))
    try:
        store.scenario_data(str(source))
    except CatalogError as exc:
        raise CatalogError(f"{exc} (or give a .yaml/.json file)") from None
    raise AssertionError("unreachable")
