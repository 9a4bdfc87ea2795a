"""Read Kineto trace files (plain or gzip; a file, several files or a directory) into per-rank tables.

Events are reduced to compact columns (`array.array`) batch by batch as the file streams in; no list of
event dicts outlives its batch. Tolerated quirks: missing `distributedInfo` (rank from the file name, then
file order), missing ProfilerStep markers (the whole trace is one window), `ncclKernel_*` and
`ncclDevKernel_*` names, collective metadata on the kernel or on the enclosing `record_param_comms` CPU op,
CUDA-graph launches (one `cudaGraphLaunch` correlation shared by many kernels), fractional-µs (ns) timestamps.
Kineto µs become SI seconds here.
"""
from __future__ import annotations

import gc
import os
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

from narrowpath.errors import TraceFormatError
from narrowpath.trace import schema
from narrowpath.trace.finalize import finalize_rank
from narrowpath.trace.jobs import describe_job, group_jobs
from narrowpath.trace.jsonstream import SkipRule, iter_trace
from narrowpath.trace.model import RankTrace, Trace



class RankColumns:
    """Growable compact columns of one rank while its file streams in (ts/dur in integer ns)."""

    def __init__(self) -> None:
        self.name_ids: dict[str, int] = {}
        self.act = {k: array(t) for k, t in (("name", "l"), ("ts", "q"), ("dur", "q"), ("lane", "q"),
                                              ("kind", "b"), ("corr", "q"))}
        self.rt = {k: array(t) for k, t in (("name", "l"), ("ts", "q"), ("dur", "q"), ("corr", "q"),
                                             ("tid", "q"))}
        self.host = {k: array(t) for k, t in (("name", "l"), ("ts", "q"), ("dur", "q"), ("tid", "q"))}
        self.steps = {k: array(t) for k, t in (("num", "q"), ("ts", "q"), ("dur", "q"))}
        self.coll_meta: list[tuple[str, int, str, int, int, int]] = []
        """(table "act" or "host", row, collective text, message bytes, group size, 0) of events with
        collective metadata."""
        self.rpc: list[tuple[int, int, int, str, int, int]] = []
        """record_param_comms with metadata: (ts_ns, end_ns, tid, collective text, message bytes, group)."""
        self.num_events = 0

    def intern(self, name: str) -> int:
        i = self.name_ids.get(name)
        if i is None:
            i = self.name_ids[name] = len(self.name_ids)
        return i


def _ns(value: Any) -> int:
    """Kineto µs (int, float or numeric string) to integer ns."""
    if isinstance(value, str):
        value = float(value)
    return int(round(value * 1000))


def _message(args: dict[str, Any]) -> tuple[str, int, int] | None:
    """(collective text, message bytes, group size) from Kineto collective args, or None."""
    text = args.get("Collective name")
    if text is None:
        return None
    try:
        elems = max(int(args.get("In msg nelems") or 0), int(args.get("Out msg nelems") or 0))
        group = int(args.get("Group size") or 0)
    except (TypeError, ValueError):
        elems, group = 0, 0
    return str(text), elems * schema.dtype_bytes(args.get("dtype")), group


def _host_message(args: dict[str, Any]) -> tuple[int, int]:
    """(message bytes, group size 0) of a gloo annotation from its `Input Dims` and `Input type`."""
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    total = 0
    for dim, dtype in zip(dims, types):
        if isinstance(dim, list) and all(isinstance(d, int) for d in dim):
            n = 1
            for d in dim:
                n *= d
            total += n * schema.dtype_bytes(dtype)
    return total, 0


_EMPTY: dict[str, Any] = {}


def reduce_batch(cols: RankColumns, events: list[dict[str, Any]], path: str) -> None:
    """Append the events of one batch to `cols` (the only place event dicts are looked at)."""
    act, rt = cols.act, cols.rt
    a_name, a_ts, a_dur, a_lane, a_kind, a_corr = (act[k].append for k in ("name", "ts", "dur", "lane", "kind",
                                                                            "corr"))
    r_name, r_ts, r_dur, r_corr, r_tid = (rt[k].append for k in ("name", "ts", "dur", "corr", "tid"))
    gpu_cats, rt_cats, host_cats = schema.GPU_CATEGORIES, schema.RUNTIME_CATEGORIES, schema.HOST_OP_CATEGORIES
    name_ids, intern = cols.name_ids, cols.intern
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat not in gpu_cats and cat not in rt_cats and cat not in host_cats:
            continue  # python_function, ac2g, ...: never looked at, so never held against the file
        try:
            ts, dur = round(e["ts"] * 1000), round(e["dur"] * 1000)
        except (KeyError, TypeError, ValueError, OverflowError):  # missing, a string, NaN, Infinity
            ts, dur = _slow_times(e, path)
        if dur < 0:
            raise TraceFormatError(f"{path}: complete event {str(e.get('name'))[:60]!r} (cat {cat!r}, ts "
                                   f"{e.get('ts')}) has a negative duration ({e.get('dur')} us)")
        name = e.get("name")
        if not isinstance(name, str):
            name = str(name)
        name_id = name_ids.get(name)
        if name_id is None:
            name_id = intern(name)
        kind = gpu_cats.get(cat)
        if kind is not None:
            args = e.get("args", _EMPTY)
            if type(args) is not dict:
                args = _bad_args(e, path)
            lane = args.get("stream", e.get("tid"))
            if type(lane) is not int:
                lane = _int(lane)
            if lane < 0:
                continue
            corr = args.get("correlation", -1)
            a_name(name_id); a_ts(ts); a_dur(dur); a_lane(lane); a_kind(kind)
            a_corr(corr if type(corr) is int else _int(corr))
            if "Collective name" in args:
                meta = _message(args)
                cols.coll_meta.append(("act", len(act["ts"]) - 1, meta[0], meta[1], meta[2], 0))
        elif cat in rt_cats:
            if name == POLL_CALL:
                continue
            args = e.get("args", _EMPTY)
            if type(args) is not dict:
                args = _bad_args(e, path)
            corr, tid = args.get("correlation", -1), e.get("tid")
            r_name(name_id); r_ts(ts); r_dur(dur)
            r_corr(corr if type(corr) is int else _int(corr)); r_tid(tid if type(tid) is int else _int(tid))
        elif cat in host_cats:
            _host_event(cols, e, name, name_id, ts, dur, path)


def _bad_args(e: dict[str, Any], path: str) -> dict[str, Any]:
    """`args` of a kept event that is not an object: refused (read as empty, a kernel loses its stream and
    launch, and a trace of such events measures 0 % everywhere). `null` counts as absent."""
    if e["args"] is None:
        return _EMPTY
    raise TraceFormatError(f"{path}: trace event {str(e.get('name'))[:60]!r} (cat {e.get('cat')!r}, ts {e.get('ts')}): "
                           f"'args' must be an object, got {_short(e['args'])}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _slow_times(e: dict[str, Any], path: str) -> tuple[int, int]:
    """ts and dur of an event whose fast conversion failed: numeric strings are accepted; a missing, non-numeric
    or non-finite (NaN, Infinity: JSON readers take them) value is an error naming the event (a complete event
    without `dur` has no extent)."""
    what = "missing" if "ts" not in e or "dur" not in e else "not a finite number"
    try:
        return _ns(e["ts"]), _ns(e["dur"])
    except (KeyError, TypeError, ValueError, OverflowError):
        raise TraceFormatError(f"{path}: complete event {str(e.get('name'))[:60]!r} (cat {e.get('cat')!r}) has "
                               f"no numeric 'ts'/'dur' ({what}: ts={e.get('ts')!r}, dur={e.get('dur')!r})"
                               ) from None


def _host_event(cols: RankColumns, e: dict[str, Any], name: str, name_id: int, ts: int, dur: int,
                path: str) -> None:
    """A CPU op or annotation: a step marker, collective metadata, or (CPU-only traces) host work."""
    args = e.get("args", _EMPTY)
    if type(args) is not dict:
        args = _bad_args(e, path)
    if name.startswith("ProfilerStep"):
        m = schema.STEP_RE.match(name)
        steps = cols.steps
        steps["num"].append(int(m.group(1)) if m else len(steps["num"]))
        steps["ts"].append(ts); steps["dur"].append(dur)
    elif name == "record_param_comms":
        meta = _message(args)
        if meta is not None:
            cols.rpc.append((ts, ts + dur, _int(e.get("tid")), meta[0], meta[1], meta[2]))
    else:
        host = cols.host
        host["name"].append(name_id); host["ts"].append(ts); host["dur"].append(dur)
        host["tid"].append(_int(e.get("tid")))
        if schema.HOST_COMM_RE.match(name) and not schema.HOST_COMM_EXCLUDE_RE.match(name):
            nbytes, group = _host_message(args)
            cols.coll_meta.append(("host", len(host["ts"]) - 1, name, nbytes, group, 0))


def _int(value: Any) -> int:
    """An integer id (stream, thread, correlation); -1 when absent or not numeric (e.g. "PyTorch Profiler")."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


POLL_CALL = "cudaEventQuery"
"""A non-blocking poll: launches nothing and waits for nothing, so it is dropped (on every parse path)."""
_HEAD = '\n    "ph": '
GPU_SKIP_RULE = SkipRule(
    skip=(_HEAD + '"f"', _HEAD + '"s"', _HEAD + '"X", "cat": "cpu_op"',
          _HEAD + f'"X", "cat": "cuda_runtime", "name": "{POLL_CALL}"'),
    unless=(_HEAD + '"X", "cat": "cpu_op", "name": "record_param_comms"',
            _HEAD + '"X", "cat": "cpu_op", "name": "ProfilerStep'))
"""GPU traces need kernels, launches, syncs, steps and record_param_comms (older PyTorch files mark
ProfilerStep as a cpu_op, hence the exception): flow arrows, plain CPU ops and `cudaEventQuery` polls (which
launch nothing and block nothing), written in Kineto's layout, are skipped undecoded."""


def read_rank(path: str, fallback_rank: int = 0) -> RankTrace:
    """Read one rank's trace file. Raises TraceFormatError naming the file when it cannot be read."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise TraceFormatError(f"{path}: no such trace file")
    rank = _read(path, fallback_rank, keep_host=False)
    if rank is None:  # no GPU activity: read again keeping host operators (CPU-only job)
        rank = _read(path, fallback_rank, keep_host=True)
    if rank.num_activities == 0:
        raise TraceFormatError(f"{path}: nothing to measure: no GPU activity (kernel, memcpy, memset) and no "
                               f"host operator among its {rank.num_events} trace events")
    return rank


def _read(path: str, fallback_rank: int, keep_host: bool) -> RankTrace | None:
    cols, header = RankColumns(), {}
    rules: list[SkipRule | None] = []

    def skip_for(head: dict[str, Any]) -> SkipRule | None:
        # deviceProperties precedes traceEvents in Kineto; absent or empty means a CPU-only trace.
        rules.append(None if keep_host or not head.get("deviceProperties") else GPU_SKIP_RULE)
        return rules[0]

    gc_was_enabled = gc.isenabled()
    gc.disable()  # the cyclic collector would rescan every batch of fresh dicts; nothing here is cyclic
    try:
        stats: dict[str, int] = {}
        for batch in iter_trace(path, header, skip_for, stats):
            cols.num_events += len(batch)
            try:
                reduce_batch(cols, batch, path)
            except (TypeError, ValueError, AttributeError, OverflowError) as exc:  # odd field types
                raise TraceFormatError(f"{path}: unexpected content in a trace event ({exc})") from None
        cols.num_events += stats.get("skipped", 0)
    finally:
        if gc_was_enabled:
            gc.enable()
    if not cols.act["ts"] and rules and rules[0] is not None:
        return None
    return finalize_rank(path, cols, header, fallback_rank)


def trace_paths(inputs: Iterable[str | os.PathLike]) -> list[str]:
    """Expand files and directories into the sorted list of trace files (.json, .json.gz)."""
    paths: list[str] = []
    for item in inputs:
        item = os.fspath(item)
        if os.path.isdir(item):
            found = sorted(os.path.join(item, f) for f in os.listdir(item) if f.endswith((".json", ".json.gz")))
            if not found:
                raise TraceFormatError(f"{item}: directory holds no .json or .json.gz trace files")
            paths.extend(found)
        elif os.path.isfile(item):
            paths.append(item)
        else:
            raise TraceFormatError(f"{item}: no such trace file or directory")
    seen: dict[str, str] = {}
    for path in paths:
        real = os.path.realpath(path)
        if real in seen:
            raise TraceFormatError(f"{path}: given more than once (also as {seen[real]}); one file per rank")
        seen[real] = path
    return paths


def read_jobs(inputs: str | os.PathLike | Sequence[str | os.PathLike]) -> tuple[Trace, ...]:
    """Read every file and group the ranks into jobs (trace/jobs.py): a folder may hold several jobs."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    return group_jobs([read_rank(p, i) for i, p in enumerate(trace_paths(inputs))])


def read_trace(inputs: str | os.PathLike | Sequence[str | os.PathLike]) -> Trace:
    """Read every rank of one job. Two files claiming the same rank of it are an error naming both; files of
    several jobs are an error saying which files belong together (`read_jobs` reads them all)."""
    jobs = read_jobs(inputs)
    if len(jobs) > 1:
        raise TraceFormatError(f"the trace files hold {len(jobs)} jobs ({'; '.join(describe_job(j) for j in jobs)}); "
                               f"give the files of one job")
    return jobs[0]
