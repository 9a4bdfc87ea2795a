"""Turn a serving file (or an `inference-corpus/1` case) into a ServingScenario.

The file has the corpus case's shape: `system` (catalog id or inline) or a `hardware` block, `model`, `num_gpus`,
`plan` (tp, pp, dp, ep, replicas, weights_precision, kv_precision, framework and the ServingPlan knobs) and
`workload` (scenario, request_rate_per_s, batch_size, concurrency, input_tokens, output_tokens, num_requests,
seed, requests_file). A null plan knob was not published: it is left open for schedule.serving_defaults, which
fills it from the serving stack's defaults or chooses it without looking at any measurement.

`dp` follows the corpus convention (shared/validation/README.md): for a dense model it counts replicas; for an MoE
model it is attention data parallelism. Where tp·dp·pp exceeds the GPUs while tp·pp matches them, `tp` is
TensorRT-LLM's tp_size with attention DP on (the dp ranks split the tp GPUs: attention tp = tp/dp).
"""
from __future__ import annotations

import csv
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from narrowpath.catalog import store
from narrowpath.catalog.known_models import with_catalog_architecture
from narrowpath.catalog.resolve import calibration_from, check_name, read_data_file, resolve_model, system_and_gpus
from narrowpath.errors import NarrowpathError, SpecError, shown
from narrowpath.spec._check import positive_float, positive_int
from narrowpath.spec.parse import _check_keys, _num
from narrowpath.spec.serving import MAX_TOKENS, PREFILL_KNOBS, Load, ServingPlan, ServingScenario

_TOP_KEYS = {"name", "system", "hardware", "model", "plan", "workload", "num_gpus", "mode", "calibration", "kind",
             "measured", "assumed"}
_PLAN_ALIASES = {"weights_precision": "weight_precision"}
_PLAN_KEYS = {"tp", "pp", "dp", "ep", "replicas", "prefill_replicas", "weights_precision", "weight_precision",
              "kv_precision", "max_batch", "max_num_tokens", "kv_block_tokens", "kv_memory_fraction",
              "chunked_prefill", "policy", "admission", "spec_tokens", "spec_acceptance", "spec_draft_layers",
              "ep_dispatch", "expert_balance", "redundant_experts", "graph_batch_sizes", "graph_padding",
              "framework"} | set(PREFILL_KNOBS)
_WORKLOAD_KEYS = {"scenario", "request_rate_per_s", "batch_size", "concurrency", "input_tokens", "output_tokens",
                  "num_requests", "seed", "requests_file"}
OPEN_OK = ("tp", "pp", "ep", "dp", "weight_precision", "kv_precision", "framework")
"""Plan knobs a case may leave null: chosen by schedule.serving_defaults, or settled by the case (`dp`: the GPUs
the other degrees leave; `framework`: the default stack)."""


@lru_cache(maxsize=4096)
def serving_stack(framework: str) -> dict[str, Any]:
    """The serving-stack entry whose `match` words occur in `framework` (first match), else `default`. Memoised (the
    entries are read once; release lines parse the version out of the text): a search prices many plans of one
    framework, each looking its stack up several times. The entry is shared: read it, never change it."""
    table = store.entries("serving_stacks")
    for entry in table.values():
        if store.stack_matches(entry, framework):
            return entry
    return table["default"]


def device_formats(plan: ServingPlan, device, stated: Mapping[str, Any]) -> dict[str, str]:
    """The weight and KV formats a plan holds as bf16 (the default, or a file written for another GPU) that run on
    `device` in its own 16-bit format instead — fp16 on Volta, whose tensor cores take no BF16 — unless `stated`
    (the flags given) names them."""
    half = device.half_format
    return {k: half for k in ("weight_precision", "kv_precision")
            if k not in stated and getattr(plan, k) == "bf16" and half != "bf16"}


def read_request_trace(path: str | Path) -> tuple[tuple[float, int, int], ...]:
    """Requests of a trace file: CSV with a header or JSON/JSONL records, each with `arrival_s` (or `timestamp_s`),
    `input_tokens`, `output_tokens`. Errors name the file, the row and the field."""
    p = Path(path)
    if not p.exists():
        raise NarrowpathError(f"workload.requests_file: {p}: no such file")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise NarrowpathError(f"workload.requests_file: {p}: cannot read ({exc})") from None
    if p.suffix == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
    elif p.suffix == ".jsonl":
        rows = []
        for i, line in enumerate(text.splitlines()):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    raise NarrowpathError(f"workload.requests_file: {p} line {i + 1}: not valid JSON") from None
    else:
        data = read_data_file(p)
        rows = data.get("requests") if isinstance(data, Mapping) else data
        if not isinstance(rows, list):
            raise NarrowpathError(f"workload.requests_file: {p}: needs a list of requests (or `requests:`)")
    if not rows:
        raise NarrowpathError(f"workload.requests_file: {p}: holds no requests")
    out = []
    for i, r in enumerate(rows):
        where = f"workload.requests_file: {p} request {i + 1}"
        if not isinstance(r, Mapping):
            raise NarrowpathError(f"{where}: must be a record, got {r!r}")
        t = r.get("arrival_s", r.get("timestamp_s"))
        try:
            t = positive_float("arrival_s", float(t), allow_zero=True)
            # float, not int(float(..)): a fractional length is refused (positive_int), not truncated
            n_in = positive_int("input_tokens", float(r["input_tokens"]), maximum=MAX_TOKENS)
            n_out = positive_int("output_tokens", float(r["output_tokens"]), maximum=MAX_TOKENS)
        except KeyError as exc:
            raise NarrowpathError(f"{where}: missing field {exc.args[0]}") from None
        except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite length (`inf`, JSON 1e400)
            raise NarrowpathError(f"{where}: arrival_s, input_tokens and output_tokens must be finite numbers, got "
                                  f"{shown(dict(r))}") from None
        except SpecError as exc:
            raise NarrowpathError(f"{where}: {exc}") from None
        out.append((t, n_in, n_out))
    out.sort(key=lambda x: x[0])
    return tuple(out)


def load_from_dict(data: Any, base_dir: Path | None = None) -> Load:
    """The `workload` block as a Load."""
    if not isinstance(data, Mapping):
        raise SpecError("workload", f"must be a mapping, got {data!r}")
    _check_keys("workload", data, _WORKLOAD_KEYS)
    d = {k: v for k, v in data.items() if v is not None}
    scenario = d.get("scenario", "offline")
    if not isinstance(scenario, str):
        raise SpecError("workload.scenario", f"must be offline, server, fixed-batch or trace; got {scenario!r}")
    arrival = {"server": "poisson", "offline": "offline", "fixed-batch": "fixed-batch", "poisson": "poisson",
               "trace": "trace"}.get(scenario)
    if arrival is None:
        raise SpecError("workload.scenario", f"must be offline, server (Poisson arrivals), fixed-batch or trace; "
                        f"got {scenario!r}")
    requests = ()
    if "requests_file" in d:
        if not isinstance(d["requests_file"], str):
            raise SpecError("workload.requests_file", f"must be a trace file path, got {shown(d['requests_file'])}")
        path = Path(d["requests_file"]) if base_dir is None else base_dir / d["requests_file"]
        requests, arrival = read_request_trace(path), "trace"
    kw = {"arrival": arrival, "requests": requests}
    for src, dst in (("request_rate_per_s", "rate_per_s"), ("batch_size", "batch_size"),
                     ("concurrency", "concurrency"), ("input_tokens", "input_tokens"),
                     ("output_tokens", "output_tokens"), ("num_requests", "num_requests"), ("seed", "seed")):
        if src in d:
            v = _num(f"workload.{src}", d[src]) if src == "request_rate_per_s" else d[src]  # real-valued (_num)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise SpecError(f"workload.{src}", f"must be a number, got {v!r}")
            if src in ("input_tokens", "output_tokens") and v < 1:
                raise SpecError(f"workload.{src}", f"must be >= 1 token, got {v!r}")
            kw[dst] = float(v) if dst == "rate_per_s" else (int(v) if float(v).is_integer() else v)
    return Load(**kw)


def _plan(data: Any, model, num_gpus: int | None, allow_null: bool, half: str = "bf16"
          ) -> tuple[ServingPlan, tuple[str, ...], int, tuple[tuple[str, str], ...]]:
    """(plan with placeholders for open knobs, the open knobs, num_gpus, (knob, note) for the null knobs the case
    itself settles). An unstated weight or KV format is `half`, the device's 16-bit format (fp16 on Volta)."""
    if not isinstance(data, Mapping):
        raise SpecError("plan", f"must be a mapping, got {data!r}")
    _check_keys("plan", data, _PLAN_KEYS)
    kw = {_PLAN_ALIASES.get(k, k): v for k, v in data.items()
          if not (v is None and k in ("graph_batch_sizes", "graph_padding"))}  # not published: the stack's
    open_ = tuple(k for k, v in kw.items() if v is None)
    bad = [k for k in open_ if k not in OPEN_OK] if allow_null else list(open_)
    if bad:
        raise SpecError(f"plan.{bad[0]}", "is null (not published); give a value")
    kw = {k: v for k, v in kw.items() if v is not None}
    for k in ("weight_precision", "kv_precision"):
        kw.setdefault(k, half)  # unstated, or a placeholder until schedule.serving_defaults.resolve_formats
        if k in kw and not isinstance(kw[k], str):
            raise SpecError(f"plan.{k}", f"must be a format name, got {kw[k]!r}")
    for k in ("kv_memory_fraction", "spec_acceptance"):  # real-valued: a quoted number as everywhere (parse._num)
        if k in kw:
            kw[k] = _num(f"plan.{k}", kw[k])
    for k in ("tp", "pp", "dp", "ep", "replicas"):
        if k in kw:
            kw[k] = positive_int(f"plan.{k}", kw[k], maximum=1 << 20)
    if "graph_batch_sizes" in kw:
        sizes = kw["graph_batch_sizes"]
        if not isinstance(sizes, (list, tuple)) or not sizes:
            raise SpecError("plan.graph_batch_sizes", f"must be a non-empty list of batch sizes, got {sizes!r}")
        kw["graph_batch_sizes"] = tuple(positive_int(f"plan.graph_batch_sizes[{i}]", b, maximum=1 << 20)
                                        for i, b in enumerate(sizes))
    tp, pp, dp = kw.get("tp", 1), kw.get("pp", 1), kw.get("dp", 1)
    settled = []
    if "dp" in open_ and num_gpus is not None and "tp" not in open_ and "pp" not in open_:
        rest = tp * pp * kw.get("replicas", 1)
        if num_gpus % rest == 0:
            kw["dp"] = dp = num_gpus // rest  # replicas, or attention data parallelism beside the experts
            why = "attention data parallelism off, the engines' default" if model.moe is not None and dp == 1 \
                else f"what the GPU count leaves: {num_gpus} GPUs over tp·pp"
            settled.append(("dp", f"{dp} — {why} (not published)"))
    if "dp" in open_ and "dp" not in kw:
        raise SpecError("plan.dp", "is null (not published) and the GPU count does not settle it (give tp and pp)")
    if "framework" in open_:
        settled.append(("framework", "the default serving stack (not published)"))
    open_ = tuple(k for k in open_ if k not in ("dp", "framework"))
    if model.moe is None and dp > 1:  # a dense model's dp instances are replicas
        kw["replicas"] = kw.get("replicas", 1) * dp
        kw["dp"] = dp = 1
    reps = kw.get("replicas", 1)
    if any(kw.get(k) for k in PREFILL_KNOBS):  # a prefill pool of its own layout: the knobs are as stated
        if open_:
            raise SpecError(f"plan.{open_[0]}", "is null (not published); a prefill pool of its own layout needs "
                            "every layout knob stated")
        plan = ServingPlan(**kw)
        return plan, (), plan.num_gpus if num_gpus is None else num_gpus, tuple(settled)
    if num_gpus is None:
        num_gpus = tp * dp * pp * reps
    elif tp * dp * pp * reps != num_gpus:
        # an open tp (else pp) takes the GPUs the published knobs leave, as its placeholder, so that the layout
        # choice (schedule.serving_choose) starts from a consistent plan and varies it over the same GPU count
        for k in ("tp", "pp"):
            rest = tp * dp * pp * reps // kw.get(k, 1)
            if k in open_ and num_gpus % rest == 0:
                kw[k] = num_gpus // rest
                tp, pp = kw.get("tp", 1), kw.get("pp", 1)
                break
    if model.moe is not None and dp > 1 and tp * dp * pp * reps != num_gpus and tp * pp * reps == num_gpus \
            and tp % dp == 0:
        kw["tp"] = tp // dp  # TensorRT-LLM tp_size with attention DP: the dp ranks share the tp GPUs
    if "ep" in open_:
        kw["ep"] = 1
    return (ServingPlan(**kw), tuple("weight_precision" if k == "weights_precision" else k for k in open_), num_gpus,
            tuple(settled))


def serving_scenario_from_dict(data: Mapping[str, Any], *, name: str | None = None, base_dir: Path | None = None,
                               allow_null: bool = False, corpus: bool = False
                               ) -> tuple[ServingScenario, tuple[str, ...]]:
    """(scenario, open knobs) from a serving file or an inference-corpus case (module docstring); `corpus`: an
    inference-corpus case, whose model the catalog may recognise (catalog.known_models)."""
    _check_keys("serving", data, _TOP_KEYS)
    check_name(data)
    for need in ("model", "plan", "workload"):
        if need not in data:
            raise SpecError(need, "is required")
    system, num_gpus = system_and_gpus(data, base_dir)
    if num_gpus is not None:
        num_gpus = positive_int("num_gpus", num_gpus, maximum=1 << 24)
    load = load_from_dict(data["workload"], base_dir)
    raw_model = data["model"]
    if isinstance(raw_model, Mapping) and "seq_len" not in raw_model and "hf_config" not in raw_model:
        raw_model = {**raw_model, "seq_len": load.max_seq_tokens}  # a serving model needs no training length
    model = resolve_model(raw_model, base_dir)
    known: tuple = ()
    if corpus:  # an inference-corpus case: what its schema cannot state comes from the catalog model it is
        model, known = with_catalog_architecture(model, data["model"], "inference")
    plan, open_, num_gpus, settled = _plan(data["plan"], model, num_gpus, allow_null, system.device.half_format)
    settled = known + settled
    mode = data.get("mode", "inference")
    if mode != "inference":
        raise SpecError("mode", f"a serving file describes inference, got mode {mode!r}")
    # a profile file is read as a training scenario reads it (it was taken for a device name)
    cal = calibration_from(data["calibration"], base_dir) if data.get("calibration") else None
    scn = ServingScenario(name=str(name or data.get("name") or "serving"), system=system, model=model, plan=plan,
                          load=load, num_gpus=num_gpus, calibration=cal, chosen=settled)
    return scn, open_


def load_serving_scenario(path: str | Path) -> tuple[ServingScenario, tuple[str, ...]]:
    """A serving scenario from a YAML/JSON file."""
    p = Path(path)
    if not p.exists():
        raise NarrowpathError(f"{p}: no such file")
    data = read_data_file(p)
    if not isinstance(data, Mapping):
        raise SpecError("serving", f"{p}: must hold a mapping at top level")
    check_name(data)
    return serving_scenario_from_dict(data, name=data.get("name", p.stem), base_dir=p.parent, allow_null=True)
