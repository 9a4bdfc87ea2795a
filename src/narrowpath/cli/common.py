"""Shared CLI plumbing: scenario arguments (a file, a catalog name, or flags) and the calibration profile."""
from __future__ import annotations

import argparse
import dataclasses
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from narrowpath.catalog import load_scenario, system as catalog_system
from narrowpath.catalog.resolve import DEFAULT_SCENARIO, calibration_from, resolve_model
from narrowpath.errors import NarrowpathError, SpecError
from narrowpath.spec.plan import Plan
from narrowpath.spec.scenario import Scenario

PLAN_INT_FLAGS = ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "gbs")
_PLAN_HELP = {"tp": "tensor-parallel size", "pp": "pipeline-parallel stages", "dp": "data-parallel size",
              "cp": "context-parallel size", "ep": "expert-parallel size", "vpp": "virtual stages per pipeline rank",
              "mbs": "micro-batch size (sequences)", "gbs": "global batch size (sequences)"}


def add_scenario_args(p: argparse.ArgumentParser, *, positional: bool = True) -> None:
    if positional:
        p.add_argument("scenario", nargs="?", help="scenario file (.yaml/.json) or catalog scenario id "
                       f"(default: {DEFAULT_SCENARIO} unless --model/--system are given)")
    g = p.add_argument_group("scenario flags (override the scenario's fields)")
    g.add_argument("--model", help="catalog model id or a HuggingFace config.json path")
    g.add_argument("--system", help="catalog system id, e.g. dgx-h100")
    g.add_argument("--gpus", type=int, help="number of GPUs (dp is derived when not given)")
    for f in PLAN_INT_FLAGS:
        g.add_argument(f"--{f}", type=int, help=_PLAN_HELP[f])
    g.add_argument("--zero", dest="zero_stage", type=int, choices=(0, 1, 2, 3))
    g.add_argument("--recompute", choices=("none", "selective", "full"))
    g.add_argument("--sp", dest="sequence_parallel", action=argparse.BooleanOptionalAction, default=None,
                   help="sequence parallelism")
    g.add_argument("--precision", choices=("fp32", "bf16", "fp16", "fp8"))
    g.add_argument("--dp-overlap", dest="dp_overlap", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--tp-comm-overlap", dest="tp_comm_overlap", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--cp-comm", dest="cp_comm", choices=("p2p", "all_gather", "a2a"),
                   help="context-parallel K/V exchange: ring p2p (default), all_gather (Llama 3), a2a (Ulysses)")
    g.add_argument("--attention", choices=("auto", "flash", "unfused"))
    g.add_argument("--seq-len", dest="seq_len", type=int, help="training sequence length (overrides the model's)")
    p.add_argument("--profile", help="calibration profile YAML (from `narrowpath calibrate`) or a device name")


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    """Build the scenario: start from the positional scenario (or the default), then apply flags."""
    flagged = any(getattr(args, k, None) is not None for k in ("model", "system"))
    source = getattr(args, "scenario", None)
    base = load_scenario(source) if (source or not flagged) else None
    plan_kw = {f: getattr(args, f) for f in PLAN_INT_FLAGS + ("zero_stage", "recompute", "sequence_parallel",
                                                              "precision", "dp_overlap", "tp_comm_overlap",
                                                              "attention", "cp_comm")
               if getattr(args, f, None) is not None}
    if base is None:
        if not (args.model and args.system):
            raise SpecError("--model/--system", "give both --model and --system (or a scenario)")
        model = resolve_model(args.model)
        system = catalog_system(args.system)
        plan0 = Plan()
    else:
        model = resolve_model(args.model) if args.model else base.model
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
    plan = dataclasses.replace(plan0, **plan_kw)
    num_gpus = gpus or plan.num_gpus
    name = base.name if base is not None and not flagged else f"{model.name}@{system.name}"
    cal = calibration_from(args.profile) if getattr(args, "profile", None) else (base.calibration if base else None)
    return Scenario(name=name, system=system, model=model, plan=plan, num_gpus=num_gpus,
                    mode=base.mode if base is not None else "training", calibration=cal)


def check_output_dir(flag: str, path: str | None) -> None:
    """Fail before any work when an output directory flag names a file or sits under an unwritable one."""
    if not path:
        return
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise NarrowpathError(f"{flag} {path}: exists and is not a directory")
    parent = next((q for q in (d, *d.parents) if q.exists()), Path("."))
    if not (parent.is_dir() and os.access(parent, os.W_OK)):
        raise NarrowpathError(f"{flag} {path}: {parent} is not a writable directory")


def check_output_file(flag: str, path: str | None) -> None:
    """Fail before any work when an output file flag names a directory or sits under an unwritable one."""
    if not path:
        return
    f = Path(path)
    if f.is_dir():
        raise NarrowpathError(f"{flag} {path}: is a directory, give a file name")
    parent = next((q for q in f.parents if q.exists()), Path("."))
    if not (parent.is_dir() and os.access(parent, os.W_OK)):
        raise NarrowpathError(f"{flag} {path}: {parent} is not a writable directory")


@contextmanager
def writing(flag: str) -> Iterator[None]:
    """Turn an OSError while writing an output into one line naming the flag and the file."""
    try:
        yield
    except OSError as exc:
        raise NarrowpathError(f"{flag}: cannot write {exc.filename or 'output'}: {exc.strerror or exc}") from None
