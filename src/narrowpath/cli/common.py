"""Shared CLI plumbing: scenario arguments (a file, a catalog name, or flags) and the calibration profile.

Imports of the catalog and the specs sit inside the functions that need them, so a command that only checks
output paths (`trace`, `sweep`) does not load the catalog at start-up.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import shlex
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping

from narrowpath.errors import NarrowpathError, SpecError
from narrowpath.spec.plan import ACTIVATION_CACHE, ATTENTION, CP_COMM, CROSS_ENTROPY, EP_DISPATCH_FORMAT, \
    GRAD_PRECISION, GRAD_SYNC_LAUNCH, OPTIMIZER_MOMENTS, PIPELINE_SCHEDULES, PRECISIONS, RECOMPUTE, SPLIT_DEFAULTS, \
    ZERO3_RESHARD

if TYPE_CHECKING:
    from narrowpath.spec.scenario import Scenario

PLAN_INT_FLAGS = ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "gbs")
_PLAN_HELP = {"tp": "tensor-parallel size", "pp": "pipeline-parallel stages", "dp": "data-parallel size",
              "cp": "context-parallel size", "ep": "expert-parallel size", "vpp": "virtual stages per pipeline rank",
              "mbs": "micro-batch size (sequences)", "gbs": "global batch size (sequences)"}


def add_scenario_args(p: argparse.ArgumentParser, *, positional: bool = True) -> None:
    from narrowpath.catalog.resolve import DEFAULT_SCENARIO
    if positional:
        p.add_argument("scenario", nargs="?", help="scenario file (.yaml/.json), catalog scenario id, or one case of "
                       "a validation corpus as FILE#CASE_ID (its unpublished knobs chosen as `validate` chooses "
                       f"them) (default: {DEFAULT_SCENARIO} unless --model/--system are given)")
    g = p.add_argument_group("scenario flags (override the scenario's fields)")
    g.add_argument("--model", help="catalog model id, a model file (.yaml/.json: a models.yaml entry's fields) or "
                   "a HuggingFace config.json path")
    g.add_argument("--system", help="catalog system id, e.g. dgx-h100, or a GPU (its home system): an id or a "
                   "descriptive name such as 'NVIDIA H100 80GB HBM3' or B200-SXM-192GB")
    g.add_argument("--gpus", type=int, help="number of GPUs (dp is derived when not given)")
    for f in PLAN_INT_FLAGS:
        g.add_argument(f"--{f}", type=int, help=_PLAN_HELP[f])
    g.add_argument("--vp-group", dest="vp_group", type=int,
                   help="interleaved schedule (--vpp > 1): micro-batches run through one chunk before the next "
                        "(Megatron-Core --microbatch-group-size-per-virtual-pipeline-stage; 0 = pp, its default)")
    g.add_argument("--first-stage-layers", dest="first_stage_layers", type=int,
                   help="transformer layers on the first pipeline stage, the other stages sharing the rest evenly "
                        "(Megatron-Core --decoder-first-pipeline-num-layers; 0 = the automatic split)")
    g.add_argument("--last-stage-layers", dest="last_stage_layers", type=int,
                   help="transformer layers on the last pipeline stage, which also runs the output layer and the "
                        "loss (--decoder-last-pipeline-num-layers; 0 = the automatic split)")
    g.add_argument("--chunk-layers", dest="chunk_layers",
                   help="transformer layers of every virtual pipeline chunk, comma-separated, pp·vpp counts in "
                        "Megatron-Core's order (pipeline_model_parallel_layout; e.g. 1,2,...,2,0); under dualpipev "
                        "in virtual-stage order on its V")
    g.add_argument("--zero", dest="zero_stage", type=int, choices=(0, 1, 2, 3),
                   help="ZeRO stage: 0 none, 1 optimizer state sharded over data parallelism (Megatron distributed "
                        "optimizer), 2 + gradients, 3 + weights (FSDP)")
    g.add_argument("--zero3-reshard", dest="zero3_reshard", choices=ZERO3_RESHARD,
                   help="when ZeRO-3 frees its gathered weights: always (every micro-batch), never (kept through the "
                        "step, gradients reduced once), unless_pp (never with pipeline parallelism: torchtitan)")
    g.add_argument("--recompute", choices=RECOMPUTE,
                   help="activation recomputation: none, selective (attention core), full (whole layer)")
    g.add_argument("--recompute-modules", dest="recompute_modules",
                   help="with --recompute selective: the parts recomputed, comma-separated (Megatron-Core "
                        "--recompute-modules: core_attn, layernorm, mla_up_proj, moe_act, mlp, shared_experts, moe)")
    g.add_argument("--sp", dest="sequence_parallel", action=argparse.BooleanOptionalAction, default=None,
                   help="sequence parallelism")
    g.add_argument("--precision", choices=PRECISIONS, help="format of the matrix multiplies (fp8, mxfp8 and nvfp4: "
                   "Transformer Engine low-precision recipes)")
    g.add_argument("--optimizer-moments", dest="optimizer_moments", choices=OPTIMIZER_MOMENTS,
                   help="format of Adam's two moments: fp32 (12 bytes of optimizer state per parameter) or bf16 "
                        "(8; Megatron-Core precision-aware optimizer, DeepSeek-V3)")
    g.add_argument("--grad-precision", dest="grad_precision", choices=GRAD_PRECISION,
                   help="format of the accumulated and data-parallel-reduced gradients: auto (fp16 for fp16 runs, "
                        "else fp32), fp32, or bf16 (Megatron-Core grad_reduce_in_fp32=False, as NVIDIA's "
                        "performance recipes run)")
    g.add_argument("--cross-entropy", dest="cross_entropy", choices=CROSS_ENTROPY,
                   help="the loss's kernel: unfused (Megatron's vocab-parallel cross entropy over FP32 logits) or te "
                        "(Transformer Engine's fused one in the logits' format, as Megatron-Bridge runs it)")
    g.add_argument("--fp8-params", dest="fp8_params", action=argparse.BooleanOptionalAction, default=None,
                   help="keep the weights only as FP8/MXFP8 tensors, all-gathered in FP8 (Transformer Engine "
                        "fp8_model_init, Megatron-Core --fp8-param-gather)")
    g.add_argument("--activation-cache", dest="activation_cache", choices=ACTIVATION_CACHE,
                   help="what layers keep for backward: default, or fp8 (DeepSeek-V3's low-precision storage: "
                        "E5M6 attention output, FP8 SwiGLU inputs with the SwiGLU recomputed)")
    g.add_argument("--ep-dispatch-format", dest="ep_dispatch_format", choices=EP_DISPATCH_FORMAT,
                   help="format of the MoE exchange: default (16 bit both ways) or fp8 (DeepSeek-V3's low-precision "
                        "communication: FP8 dispatch with 1x128 scales, BF16 combine)")
    g.add_argument("--pipeline-schedule", dest="pipeline_schedule", choices=PIPELINE_SCHEDULES,
                   help="pipeline schedule: auto (1F1B, interleaved with --vpp > 1), dualpipe (DeepSeek-V3: "
                        "micro-batches enter at both ends, two stages and two parameter copies per rank) or "
                        "dualpipev (DualPipe on a V: one copy, chunks i and 2pp-1-i on rank i; needs --vpp 2)")
    g.add_argument("--dp-overlap", dest="dp_overlap", action=argparse.BooleanOptionalAction, default=None,
                   help="overlap the gradient sync with the backward pass in buckets")
    g.add_argument("--grad-sync-launch", dest="grad_sync_launch", choices=GRAD_SYNC_LAUNCH,
                   help="with --dp-overlap, when gradient buckets are launched: hooks (as each is ready, PyTorch "
                        "DDP/FSDP), megatron (Megatron-Core DDP with --no-align-grad-reduce: buckets only on "
                        "pipeline rank 0's first chunk) or aligned (Megatron-Core's default)")
    g.add_argument("--tp-comm-overlap", dest="tp_comm_overlap", action=argparse.BooleanOptionalAction, default=None,
                   help="overlap tensor-parallel communication with the matrix multiplies")
    g.add_argument("--cuda-graphs", dest="cuda_graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="replay each layer's kernels from CUDA graphs (Megatron-Core --cuda-graph-impl): no "
                        "per-kernel host issue cost")
    g.add_argument("--moe-sync-free", dest="moe_sync_free", action=argparse.BooleanOptionalAction, default=None,
                   help="dropless MoE layers keep their tokens-per-expert counts on the GPU (no host "
                        "synchronisation per layer: Transformer Engine >= 2.15 fused grouped MLP)")
    g.add_argument("--cp-comm", dest="cp_comm", choices=CP_COMM,
                   help="context-parallel K/V exchange: ring p2p (default), all_gather (Llama 3), a2a (Ulysses)")
    g.add_argument("--attention", choices=ATTENTION,
                   help="attention kernel (auto: the calibration profile's default for the device; flash2: "
                        "FlashAttention-2, PyTorch scaled_dot_product_attention's flash backend)")
    g.add_argument("--seq-len", dest="seq_len", type=int,
                   help="training sequence length, tokens (overrides a catalog model's; required with a HuggingFace "
                        "config.json, which states only the position limit max_position_embeddings)")
    p.add_argument("--profile", help="calibration profile YAML (from `narrowpath calibrate`) or a device name")


def comma_items(text: str) -> tuple[str, ...]:
    """The non-empty, stripped items of a comma-separated command-line value (`a, b,` -> ('a', 'b'))."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


CASE_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def case_reference(source: str | None) -> tuple[str, str] | None:
    """(corpus file, case id) when `source` reads FILE#CASE_ID: an existing file is itself, never a reference; else
    the first '#' whose left side names a YAML/JSON file (any case of suffix) splits it, so an id may hold '#'. None
    for anything else (a scenario file, a catalog id)."""
    if not source or Path(source).exists():
        return None
    at = source.find("#")
    while at > 0:
        path = source[:at]
        if Path(path).suffix.lower() in CASE_FILE_SUFFIXES and (Path(path).is_file() or "#" not in source[at + 1:]):
            return path, source[at + 1:]
        at = source.find("#", at + 1)
    return None


CASE_COMMANDS = {"validation-corpus/1": "a training corpus: take its case apart with `narrowpath analyze",
                 "inference-corpus/1": "an inference corpus: serve its case with `narrowpath serve"}
"""What a corpus of each kind is, and the command that takes one of its cases (for the error on the other kind)."""


def corpus_case(path: str, case_id: str, schema: str, cases: Callable[[str], Mapping]):
    """The case `case_id` of the corpus file `path`, which must declare `schema`; `cases(path)` reads its cases by
    id. One line (exit 2) for a missing file, a corpus of the other kind (naming the command that takes it) or an
    id it lacks (listing its first five)."""
    from narrowpath.validate.corpus import corpus_schema
    if not Path(path).exists():
        raise NarrowpathError(f"{path}: no such file")
    found = corpus_schema(path)
    if found != schema and found in CASE_COMMANDS:
        raise NarrowpathError(f"{path} is {CASE_COMMANDS[found]} {shlex.quote(path + '#' + case_id)}`")
    by_id = cases(path)
    if case_id not in by_id:
        shown_ids = ", ".join(list(by_id)[:5]) + (", ..." if len(by_id) > 5 else "")
        raise NarrowpathError(f"{path}: no case {case_id!r} (its {len(by_id)} cases: {shown_ids})")
    return by_id[case_id]


def load_any_scenario(source: str | None, *, seq_len: int | None = None, resolve: bool = True) -> Scenario:
    """A scenario from `source` as catalog.load_scenario reads it, or — for `FILE#CASE_ID` — the case of that id in
    a validation corpus file (validation-corpus/1) with the knobs its source did not publish chosen exactly as
    `narrowpath validate` chooses them (schedule.choose: the stack's default, else the fastest that fits; the choices
    stay in `chosen`), so a validated run can be analysed, simulated or searched from where validate priced it.
    `resolve=False` leaves them open (`open_knobs`), for a caller that changes the plan or the profile first
    (scenario_from_args: flags and --profile, then the choice)."""
    from narrowpath.catalog import load_scenario
    ref = case_reference(source)
    if ref is None:
        return load_scenario(source, seq_len=seq_len)
    path, case_id = ref
    from narrowpath.schedule.step import predict
    from narrowpath.validate.corpus import load_corpus
    case = corpus_case(path, case_id, "validation-corpus/1", lambda p: {c.id: c for c in load_corpus(p)})
    if case.scenario is None:
        raise NarrowpathError(f"{path}#{case_id}: {case.error}")
    if seq_len is not None:
        raise SpecError("--seq-len", "a corpus case states its own sequence length; give it as model.seq_len in "
                        "the case")
    if resolve and case.scenario.open_knobs:
        return predict(case.scenario).scenario
    return case.scenario


LEAST = {"tp": 1, "pp": 1, "cp": 1, "dp": 1, "mbs": 1, "gbs": 1, "vpp": 1, "ep": 1, "etp": 0, "recompute_layers": 0,
         "offload_layers": 0}
"""The least value of each numeric plan flag."""


def check_least(values: dict, flag=lambda knob: f"--{knob}") -> None:
    """Refuse a plan flag below its least value (LEAST), before any arithmetic on it (a 0 divides); `flag` names
    a knob's flag."""
    for knob, least in LEAST.items():
        if knob in values and values[knob] < least:
            raise SpecError(flag(knob), f"must be >= {least}, got {values[knob]}")


def scenario_from_args(args: argparse.Namespace, *, one_plan: bool = True) -> Scenario:
    """Build the scenario: start from the positional scenario (or the default), then apply flags. `one_plan`: the
    command prices this plan alone (not `search`, whose other plans may read a flag this one cannot)."""
    from narrowpath.catalog.resolve import system_or_device as catalog_system
    from narrowpath.catalog.resolve import calibration_from, resolve_model, restack_for_precision
    from narrowpath.spec.plan import Plan, check_launch_is_read, check_modules_need_selective
    from narrowpath.spec.scenario import Scenario
    flagged = any(getattr(args, k, None) is not None for k in ("model", "system"))
    source = getattr(args, "scenario", None)
    profile = calibration_from(args.profile) if getattr(args, "profile", None) else None
    base = load_any_scenario(source, seq_len=args.seq_len, resolve=False) if (source or not flagged) else None
    plan_kw = {f: getattr(args, f) for f in PLAN_INT_FLAGS + ("zero_stage", "zero3_reshard", "recompute",
                                                              "sequence_parallel",
                                                              "precision", "dp_overlap", "grad_sync_launch",
                                                              "tp_comm_overlap",
                                                              "attention", "cp_comm", "optimizer_moments",
                                                              "grad_precision", "fp8_params", "activation_cache",
                                                              "cross_entropy",
                                                              "ep_dispatch_format", "pipeline_schedule", "vp_group",
                                                              "first_stage_layers", "last_stage_layers", "cuda_graphs",
                                                              "moe_sync_free")
               if getattr(args, f, None) is not None}
    check_least(plan_kw)
    if base is None:
        if not (args.model and args.system):
            raise SpecError("--model/--system", "give both --model and --system (or a scenario)")
        model = resolve_model(args.model, seq_len=args.seq_len)
        system = catalog_system(args.system)
        plan0 = Plan(precision=system.device.half_format)  # fp16 where the tensor cores take no BF16 (Volta)
    else:
        model = resolve_model(args.model, seq_len=args.seq_len) if args.model else base.model
        system = catalog_system(args.system) if args.system else base.system
        plan0 = base.plan
    if args.seq_len is not None:
        model = dataclasses.replace(model, seq_len=args.seq_len)
    if args.gpus is not None and args.gpus < 1:
        raise SpecError("--gpus", f"must be >= 1, got {args.gpus}")
    # a scenario keeps its GPU count when tp/pp/cp change (dp is re-derived); an explicit --dp sets it instead
    gpus = args.gpus or (base.num_gpus if base is not None and "dp" not in plan_kw else None)
    tp = plan_kw.get("tp", plan0.tp)
    pp = plan_kw.get("pp", plan0.pp)
    cp = plan_kw.get("cp", plan0.cp)
    if "dp" not in plan_kw:
        if gpus:
            if gpus % (tp * pp * cp):
                raise SpecError("--gpus", f"{gpus} GPUs are not divisible by tp·pp·cp = {tp * pp * cp}")
            plan_kw["dp"] = gpus // (tp * pp * cp)
        elif base is None:
            plan_kw["dp"] = 1
    dp = plan_kw.get("dp", plan0.dp)
    mbs = plan_kw.get("mbs", plan0.mbs)
    if "gbs" not in plan_kw and (base is None or (plan0.gbs % (dp * mbs))):
        plan_kw["gbs"] = dp * mbs * max(1, 4 * pp) if base is None else dp * mbs * plan0.num_microbatches
    if "vpp" not in plan_kw and plan0.vpp > 1 and pp == 1:
        plan_kw["vpp"] = 1
    chunks = getattr(args, "chunk_layers", None)
    if chunks is not None:
        try:
            plan_kw["chunk_layers"] = tuple(int(n) for n in comma_items(chunks))
        except ValueError:
            raise SpecError("--chunk-layers", f"must list whole numbers separated by commas, got {chunks!r}") from None
    v_moves = (plan_kw.get("pipeline_schedule", plan0.pipeline_schedule) == "dualpipev") != \
        (plan0.pipeline_schedule == "dualpipev")  # chunks move between Megatron's placement and the V
    if pp != plan0.pp or plan_kw.get("vpp", plan0.vpp) != plan0.vpp or args.model or v_moves:  # a split is its pipeline's
        for knob, auto in SPLIT_DEFAULTS.items():
            plan_kw.setdefault(knob, auto)
    mods = getattr(args, "recompute_modules", None)
    if mods is not None:
        plan_kw["recompute_modules"] = comma_items(mods)
    elif plan_kw.get("recompute", "selective") != "selective":
        plan_kw["recompute_modules"] = ()  # another mode replaces the scenario's selective modules
    if plan_kw.get("recompute", "full") != "full":
        plan_kw.setdefault("recompute_layers", 0)  # a full recompute's layer count goes with it
    if plan_kw.get("recompute", "none") != "none":
        plan_kw.setdefault("offload_layers", 0)  # Megatron-Core offloads no activations beside a recompute
    check_modules_need_selective("--recompute-modules", plan_kw.get("recompute", plan0.recompute),
                                 plan_kw.get("recompute_modules"))
    swapped = {"model"} if args.model else set()  # a model given by flag replaces the case's, and what was said of it
    chosen = tuple((k, n) for k, n in base.chosen if k not in plan_kw and k not in swapped) if base is not None else ()
    if "attention" not in plan_kw and plan0.attention in ("flash", "flash2") and not system.device.fused_attention:
        plan_kw["attention"] = "auto"  # a scenario moved to Volta runs the profile's materialised scores
        chosen = tuple((k, n) for k, n in chosen if k != "attention")
    half = system.device.half_format
    if "precision" not in plan_kw and plan0.precision == "bf16" and half != "bf16":  # a scenario moved to Volta
        plan_kw["precision"] = half
        chosen += (("precision", f"{half} — the scenario's bf16 on {system.device.name}, which has no BF16 tensor "
                                 "cores"),)
    if base is not None and plan_kw.get("precision", plan0.precision) != plan0.precision:
        # knobs the scenario's software stack filled for its own training format follow the new one
        restacked, chosen = restack_for_precision(plan0, chosen, plan_kw["precision"], set(plan_kw))
        plan_kw = {**restacked, **plan_kw}
    reopen: tuple[str, ...] = ()
    if base is not None and _moved(base, plan0, plan_kw, gpus, system, args):
        from narrowpath.catalog import store
        from narrowpath.catalog.perf_configs import off_its_layout
        precision = plan_kw.get("precision", plan0.precision)
        defaults = store.stack_defaults(store.stack_for(plan0.framework), precision)
        reset, reopen, chosen = off_its_layout(chosen, defaults)
        plan_kw = {**reset, **plan_kw}
    plan = dataclasses.replace(plan0, **plan_kw)
    num_gpus = gpus or plan.num_gpus
    name = base.name if base is not None and not flagged else f"{model.name}@{system.name}"
    cal = profile or (base.calibration if base else None)
    # a corpus case's unpublished knobs the flags did not set are chosen on the final plan, as validate would
    still_open = tuple(k for k in (*base.open_knobs, *reopen) if k not in plan_kw) if base is not None else ()
    scn = Scenario(name=name, system=system, model=model, plan=plan, num_gpus=num_gpus,
                   mode=base.mode if base is not None else "training", calibration=cal, chosen=chosen,
                   open_knobs=still_open)
    if still_open:
        from narrowpath.schedule.step import predict
        scn = predict(scn, cal).scenario
    if one_plan and getattr(args, "grad_sync_launch", None) is not None:  # it was ignored, as modules would be
        check_launch_is_read("--grad-sync-launch", scn.plan)
    return scn


def _moved(base, plan0, plan_kw: Mapping, gpus, system, args) -> bool:
    """Whether the command line moves a scenario off the layout, format, GPU count, board or model it was built on."""
    from narrowpath.catalog.perf_configs import PLAN_FIELDS
    return (any(plan_kw.get(f, getattr(plan0, f)) != getattr(plan0, f) for f in PLAN_FIELDS)
            or (gpus or base.num_gpus) != base.num_gpus or system.device.name != base.system.device.name
            or bool(args.model) or args.seq_len is not None)


def has_module(name: str) -> bool:
    """Whether `import name` would find the module, without importing it (a None entry in sys.modules, as a
    test's block leaves it, counts as missing)."""
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def require_extra(module: str, extra: str, what: str) -> None:
    """Fail before any work when an optional dependency is missing, naming the extra that installs it."""
    if not has_module(module):
        raise NarrowpathError(f"{what} needs {module}, which is not installed: pip install 'narrowpath[{extra}]' "
                              f"(the `{extra}` extra)")


def refuse_empty(flag: str, path: str | None) -> None:
    """Fail when an output flag is given an empty name (`--html ""` would otherwise write nothing, silently)."""
    if path is not None and not str(path).strip():
        raise NarrowpathError(f"{flag}: empty name; give the path to write")


def check_output_dir(flag: str, path: str | None) -> None:
    """Fail before any work when an output directory flag is empty, names a file or sits under an unwritable one
    (and, for --plots, when matplotlib is missing)."""
    refuse_empty(flag, path)
    if not path:
        return
    if flag == "--plots":
        require_extra("matplotlib", "plots", "--plots")
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise NarrowpathError(f"{flag} {path}: exists and is not a directory")
    parent = next((q for q in (d, *d.parents) if q.exists()), Path("."))
    if not (parent.is_dir() and os.access(parent, os.W_OK)):
        raise NarrowpathError(f"{flag} {path}: {parent} is not a writable directory")


def check_output_file(flag: str, path: str | None) -> None:
    """Fail before any work when an output file flag is empty, names a directory or sits under an unwritable one."""
    refuse_empty(flag, path)
    if not path:
        return
    f = Path(path)
    if f.is_dir():
        raise NarrowpathError(f"{flag} {path}: is a directory, give a file name")
    parent = next((q for q in f.parents if q.exists()), Path("."))
    if not (parent.is_dir() and os.access(parent, os.W_OK)):
        raise NarrowpathError(f"{flag} {path}: {parent} is not a writable directory")


def check_html_file(flag: str, path: str | None) -> None:
    """check_output_file, and the name must say HTML (.html / .htm): a page written under another name opens as
    text (`report -o`, `analyze --html`, `compare --html`)."""
    check_output_file(flag, path)
    if path and not path.lower().endswith((".html", ".htm")):
        raise SpecError(flag, f"{path}: give a .html file name")


@contextmanager
def writing(flag: str, path: str | os.PathLike | None = None) -> Iterator[None]:
    """Turn an OSError while writing an output into one line naming the flag and the file: `path`, the one the user
    gave, when known (not the temporary file beside it that failed), else the OSError's."""
    try:
        yield
    except OSError as exc:
        name = path if path is not None else exc.filename or "output"
        raise NarrowpathError(f"{flag}: cannot write {name}: {exc.strerror or exc}") from None


def scenario_inputs(args: argparse.Namespace) -> list[Path]:
    """The files the scenario arguments read: the scenario file, --model config.json, --profile, and the model
    config and profile files a scenario file names (relative to its folder)."""
    from narrowpath.catalog.resolve import read_data_file
    files = [Path(v) for v in (getattr(args, "scenario", None), getattr(args, "model", None),
                               getattr(args, "profile", None)) if v and Path(v).is_file()]
    src = getattr(args, "scenario", None)
    if src and Path(src).is_file():
        data = read_data_file(src)
        if isinstance(data, Mapping):
            model = data.get("model")
            named = [model, model.get("hf_config") if isinstance(model, Mapping) else None, data.get("calibration")]
            files += [Path(src).parent / v for v in named if isinstance(v, str) and (Path(src).parent / v).is_file()]
    return files


def refuse_inputs_as_outputs(outputs: Mapping[str, str | None], inputs: Iterable[str | os.PathLike | None]) -> None:
    """Fail before any work when an output file flag names one of the inputs (the same file by any name or link),
    or a trace file inside an input directory (it would be read as a rank next time)."""
    ins = [Path(i) for i in inputs if i]
    for flag, out in outputs.items():
        if not out:
            continue
        o = Path(out)
        for i in ins:
            same = os.path.realpath(o) == os.path.realpath(i) or (o.exists() and i.exists() and os.path.samefile(o, i))
            inside = i.is_dir() and o.parent.exists() and os.path.samefile(o.parent, i) \
                and o.name.endswith((".json", ".json.gz"))
            if same or inside:
                what = "is an input" if same else "would land among the traces read from"
                raise NarrowpathError(f"{flag} {out}: {what} {i}; give another output path (the input is kept)")


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def atomic_file(flag: str, path: str | os.PathLike) -> Iterator[Path]:
    """A temporary file beside `path` to write; renamed onto `path` when the block succeeds, removed when it fails.
    A reader never sees half a file, a failed run leaves an earlier file intact, and an OSError is one line
    naming the flag. The temporary name keeps the suffix (matplotlib picks the format from it)."""
    final = Path(path)
    with writing(flag, path):
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=final.suffix or ".tmp")
        os.close(fd)
        try:
            yield Path(tmp)
            os.chmod(tmp, _umask_mode())
            os.replace(tmp, final)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def atomic_write_text(flag: str, path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` through atomic_file."""
    with atomic_file(flag, path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


@contextmanager
def atomic_dir(flag: str, path: str | os.PathLike) -> Iterator[Path]:
    """A temporary directory inside output directory `path`; each file written there is renamed into `path` when
    the block succeeds (an earlier plot is replaced whole or not at all); the directory is removed either way."""
    final = Path(path)
    with writing(flag, path):
        final.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final, prefix=".narrowpath-"))
        try:
            yield tmp
            mode = _umask_mode()
            for f in sorted(tmp.iterdir()):
                os.chmod(f, mode)
                os.replace(f, final / f.name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def moved(paths: Iterable[str | os.PathLike], tmp: Path, final: str | os.PathLike) -> list[Path]:
    """The final paths of files a writer reported under `tmp`, once atomic_dir moved them into `final`."""
    return [Path(final) / Path(p).relative_to(tmp) for p in paths]
