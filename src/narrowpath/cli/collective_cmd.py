"""`narrowpath collective`: predicted nccl-tests tables, the collective corpus check, and a compare to a real log.

    narrowpath collective --system dgx-h100 --gpus 16 --op all_reduce [--algorithm auto] [-b 8 -e 8G -f 2]
    narrowpath collective --corpus [FILE] [--json]
    narrowpath collective --compare LOG --system dgx-h100 --gpus 8 [--op all_reduce]

Sizes take nccl-tests suffixes (K, M, G = 2^10, 2^20, 2^30 bytes, as `-b 8M` does there; also T and P).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
from importlib import resources
from typing import Any, Mapping

from narrowpath.catalog import calibration_for, system_for_hardware
from narrowpath.catalog.resolve import calibration_from, system_or_device
from narrowpath.cost.collectives import ALGORITHMS, ONLY_ALGORITHM, OPS, collective_time
from narrowpath.errors import CatalogError, NarrowpathError, SpecError
from narrowpath.measure.busbw import nccl_tests_count
from narrowpath.network.placement import contiguous_span
from narrowpath.spec._check import positive_float, positive_int
from narrowpath.spec.scenario import MAX_GPUS
from narrowpath.report.collective_table import (CorpusRow, SweepRow, compare_text, corpus_json, corpus_text,
                                                sweep_text)
from narrowpath.spec.system import System

_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
_DTYPE_BYTES = 4  # nccl-tests default type: float
_MAX_SIZE = 2**50  # 1 PiB: far beyond any message nccl-tests sends
_MAX_ROWS = 10_000
MAX_OVER_LINE = 3.0
"""A measured busbw above this multiple of the system's fastest link per GPU is not a measurement of that system
(in-switch reduction, NVLS/SHARP, reports busbw somewhat above the link rate, never several times it)."""


def parse_size(text: str) -> int:
    """`8`, `64K`, `8M`, `8G` (nccl-tests binary suffixes) → bytes."""
    t = str(text).strip().upper().removesuffix("B")
    unit = t[-1] if t and t[-1] in _SUFFIX else ""
    try:
        value = float(t[:-1] if unit else t)
    except ValueError:
        raise SpecError("collective.size", f"cannot read size {text!r} (use e.g. 8, 64K, 8M, 8G)") from None
    if not math.isfinite(value) or value < 0 or value * _SUFFIX[unit] > _MAX_SIZE:
        raise SpecError("collective.size", f"must be a size from 0 to 1P (2^50 bytes), got {text!r}")
    return int(value * _SUFFIX[unit])


def _system(name: str, gpus_per_node: int | None, nic_gbps: float | None) -> System:
    """A catalog system id, or a device name (its home system), reshaped by --gpus-per-node/--nic-gbps."""
    return system_or_device(name, gpus_per_node=gpus_per_node, nic_gbps_per_gpu=nic_gbps)


def _row(op: str, size: float, n: int, system: System, cal, algorithm: str) -> SweepRow:
    span = contiguous_span(n, system)
    c = collective_time(op, size, span, system, cal, algorithm)
    count = nccl_tests_count(op, size, n, _DTYPE_BYTES)
    algbw = size / c.time_s if c.time_s > 0 else 0.0
    return SweepRow(size, count, c.time_s, algbw, c.busbw_bytes_per_s, c.algorithm, c.protocol or "-")


def _sizes(lo: int, hi: int, factor: float) -> list[int]:
    if lo <= 0 or hi < lo or not factor > 1 or not math.isfinite(factor):
        raise SpecError("collective.sizes", f"need 0 < min-bytes <= max-bytes and a finite factor > 1 "
                        f"(got {lo}, {hi}, {factor})")
    if math.log(hi / lo) / math.log(factor) > _MAX_ROWS:
        raise SpecError("collective.factor", f"-f {factor} from {lo} to {hi} bytes gives more than "
                        f"{_MAX_ROWS:,} sizes; use a larger factor")
    out, s = [], float(lo)
    while s <= hi * (1 + 1e-12):
        out.append(int(s))
        s *= factor
    return out


def run_corpus(path: str | None, keep_going: bool = False
               ) -> tuple[list[CorpusRow], str, list[tuple[str, str]]]:
    """(rows, source, failed) for every case of a `collective-corpus/1` file, one calibration per device (the
    catalog's); a bad case stops it, naming the field. With `keep_going` (validate) each bad case is set aside in
    `failed` as (case id, reason) and the others are priced; without, `failed` is empty."""
    from narrowpath.catalog.resolve import read_data_file
    if path:
        data, source = read_data_file(path), str(path)
    else:
        text = resources.files("narrowpath.validate").joinpath("corpora/collectives-public.yaml").read_text()
        from narrowpath.spec.strict_load import load_yaml
        data, source = load_yaml(text), "collectives-public.yaml (shipped)"
    if not isinstance(data, dict) or data.get("schema") != "collective-corpus/1":
        raise SpecError("corpus.schema", f"{source}: expected schema collective-corpus/1, got "
                        f"{(data or {}).get('schema') if isinstance(data, dict) else type(data).__name__!r}")
    cases = data.get("cases") or []
    if not isinstance(cases, list):
        raise SpecError("corpus.cases", f"{source}: must be a list, got {type(cases).__name__} {cases!r}")
    if not cases:
        raise SpecError("corpus.cases", f"{source}: no cases")
    if not keep_going:
        return [_corpus_row(case, f"corpus.cases[{i}]") for i, case in enumerate(cases)], source, []
    rows, failed = [], []
    for i, case in enumerate(cases):
        try:
            rows.append(_corpus_row(case, f"corpus.cases[{i}]"))
        except NarrowpathError as exc:
            cid = case.get("id") if isinstance(case, Mapping) else None
            failed.append((str(cid) if cid is not None else f"corpus.cases[{i}]", str(exc)))
    return rows, source, failed


def _mapping(where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(where, f"must be a mapping, got {type(value).__name__} {value!r}")
    return value


def _number(where: str, value: Any) -> Any:
    """YAML 1.1 reads `1e6` as a string: accept numeric strings, name the field otherwise."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise SpecError(where, f"must be a number, got {value!r}") from None
    return value


def _corpus_row(case: Any, where: str) -> CorpusRow:
    """One `collective-corpus/1` case predicted; every bad field is named."""
    case = _mapping(where, case)
    try:
        hw, cid = _mapping(f"{where}.hardware", case["hardware"]), str(case.get("id", where))
        n = positive_int(f"{where}.hardware.num_gpus", _number(f"{where}.hardware.num_gpus", hw["num_gpus"]))
        size = positive_float(f"{where}.message_bytes", _number(f"{where}.message_bytes", case["message_bytes"]))
        busbw = _mapping(f"{where}.measured", case["measured"])["busbw_GBps"]
        measured = positive_float(f"{where}.measured.busbw_GBps", _number(f"{where}.measured.busbw_GBps", busbw)) * 1e9
        system = system_for_hardware(hw["gpu"], gpus_per_node=hw.get("gpus_per_node"),
                                     nic_gbps_per_gpu=hw.get("nic_gbps_per_gpu"))
        check_measured_busbw(f"{where}.measured.busbw_GBps", measured, system)
        alg, op = case.get("algorithm", "auto"), case["collective"]
        r = _row(op, size, n, system, calibration_for(system.device.name), alg)
    except KeyError as exc:
        raise SpecError(f"{where}.{exc.args[0]}", "is required") from None
    except CatalogError as exc:
        raise SpecError(f"{where}.hardware.gpu", str(exc)) from None
    except SpecError as exc:
        if exc.field.startswith(where):
            raise
        raise SpecError(where, str(exc)) from None
    return CorpusRow(cid, op, n, alg, r.busbw_bytes_per_s, measured, f"{r.algorithm}/{r.protocol}")


def check_measured_busbw(where: str, busbw_bytes_per_s: float, system: System, what: str = "measured busbw") -> None:
    """Refuse a busbw no link of `system` could carry (a log of another system, or wrong units)."""
    line = max((t.bw_bytes_per_s_per_gpu for t in system.tiers), default=0.0)
    if line > 0 and busbw_bytes_per_s > MAX_OVER_LINE * line:
        raise SpecError(where, f"{what} {busbw_bytes_per_s / 1e9:,.1f} GB/s is {busbw_bytes_per_s / line:,.0f}x the "
                        f"fastest link of {system.name} ({line / 1e9:,.0f} GB/s per GPU): not a measurement of this "
                        "system (check --system and the figures' units)")


def _compare(args, system: System, cal) -> str:
    """One table per test of the log (a file may hold several, one run after another)."""
    from narrowpath.measure.nccl_tests import describe_test, read_nccl_tests_logs
    logs = read_nccl_tests_logs(args.compare)
    return "\n\n".join(_compare_test(args, log, describe_test(args.compare, log, len(logs)), system, cal)
                       for log in logs)


def _compare_test(args, log, name: str, system: System, cal) -> str:
    from narrowpath.measure.nccl_tests import op_and_ranks
    op, n = op_and_ranks(log, name, op=args.op, num_ranks=args.gpus, ranks_flag="--gpus")
    op = op or "all_reduce"
    if op not in OPS:
        raise SpecError("--compare", f"{name}: a {op} test; the model prices {', '.join(OPS)}")
    if not n:
        raise SpecError("collective.gpus", f"{name}: the log does not list its ranks; give --gpus")
    for r in log.rows:
        check_measured_busbw("--compare", r.busbw_bytes_per_s, system,
                             f"{name}: the busbw at {int(r.size_bytes):,} bytes,")
    pairs = [(r.size_bytes, r.time_s, r.busbw_bytes_per_s, _row(op, r.size_bytes, n, system, cal, args.algorithm))
             for r in log.rows if r.size_bytes > 0]
    footer = f"  measured avg busbw {log.avg_busbw_bytes_per_s / 1e9:.2f} GB/s" if log.avg_busbw_bytes_per_s else ""
    return compare_text(pairs, title=f"{op} on {n} GPUs of {system.name}: nccl-tests log {name} vs model"
                        f" ({args.algorithm}){footer}")


def run(args: argparse.Namespace) -> int:
    if args.gpus is not None and not 1 <= args.gpus <= MAX_GPUS:
        raise SpecError("--gpus", f"must be from 1 to {MAX_GPUS:,}, got {args.gpus}")
    if args.gpus_per_node is not None and args.gpus_per_node < 1:
        raise SpecError("--gpus-per-node", f"must be >= 1, got {args.gpus_per_node}")
    if args.nic_gbps is not None and not (math.isfinite(args.nic_gbps) and args.nic_gbps > 0):
        raise SpecError("--nic-gbps", f"must be a finite number > 0, got {args.nic_gbps}")
    if args.corpus is not None:
        rows, source, _ = run_corpus(args.corpus or None)
        print(json.dumps(corpus_json(rows), indent=2) if args.json else corpus_text(rows, source))
        return 0
    if not args.system:
        raise SpecError("collective.system", "give --system (a catalog system or device), or --corpus")
    system = _system(args.system, args.gpus_per_node, args.nic_gbps)
    cal = calibration_from(args.calibration) if args.calibration else calibration_for(system.device.name)
    if args.algorithm != "auto" and args.op in ONLY_ALGORITHM and args.algorithm != ONLY_ALGORITHM[args.op]:
        raise SpecError("--algorithm", f"{args.algorithm} does not apply to {args.op}: NCCL runs it as "
                        f"{ONLY_ALGORITHM[args.op]} only (give auto or {ONLY_ALGORITHM[args.op]})")
    if args.compare:
        print(_compare(args, system, cal))
        return 0
    n, op = args.gpus or system.gpus_per_node, args.op or "all_reduce"
    rows = [_row(op, s, n, system, cal, args.algorithm)
            for s in _sizes(parse_size(args.min_bytes), parse_size(args.max_bytes), args.factor)]
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
    else:
        print(sweep_text(rows, title=f"{op} on {n} GPUs of {system.name} ({system.gpus_per_node} per node), "
                         f"algorithm {args.algorithm}: predicted by narrowpath"))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("collective", help="predicted nccl-tests table, collective corpus check, log compare",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", help="catalog system id (dgx-h100, …) or a GPU by id or descriptive name "
                   "(H100-SXM5-80GB, 'NVIDIA B200 192GB', …)")
    p.add_argument("--gpus", type=int, help="GPUs in the group (default: one node; with --compare, the log's "
                                            "'# Rank' lines, which --gpus must not contradict)")
    p.add_argument("--gpus-per-node", type=int, help="override the system's GPUs per node")
    p.add_argument("--nic-gbps", type=float, help="override the scale-out NIC rate per GPU, Gb/s")
    p.add_argument("--calibration", help="calibration profile: a device name or a profile YAML from `narrowpath "
                                         "calibrate` (default: the system's device)")
    p.add_argument("--op", choices=OPS, help="collective (default all_reduce; with --compare, the log's own test, "
                                             "which --op must not contradict)")
    p.add_argument("--algorithm", default="auto", choices=ALGORITHMS,
                   help="collective algorithm (default auto: the fastest that applies, as NCCL's tuner picks; "
                        "all_to_all runs direct and send_recv p2p only)")
    p.add_argument("-b", "--min-bytes", default="8", help="smallest message, e.g. 8, 64K, 8M (default 8)")
    p.add_argument("-e", "--max-bytes", default="8G", help="largest message (default 8G, at most 1P)")
    p.add_argument("-f", "--factor", type=float, default=2.0, help="size step factor, > 1 (default 2)")
    p.add_argument("--corpus", nargs="?", const="", default=None, metavar="FILE",
                   help="check a collective-corpus/1 file (default: the shipped collectives-public.yaml)")
    p.add_argument("--compare", metavar="LOG", help="an nccl-tests output log to put beside the model (one table per "
                                                    "test when the file holds several)")
    p.add_argument("--json", action="store_true", help="JSON instead of a table")
    p.set_defaults(func=run)
