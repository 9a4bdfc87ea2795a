"""Turn one rank's streamed columns into a `RankTrace`: numpy arrays, seconds, classes, launches, metadata.

Launch of an activity = the runtime call with the same correlation id (CUDA graphs: one `cudaGraphLaunch`
serves every kernel of the graph). A communication kernel without collective args takes them from the
`record_param_comms` op that encloses its launch on the same host thread; failing that, its kind (only) comes
from the innermost `nccl:<op>` / `gloo:<op>` user annotation enclosing its launch on that thread (PyTorch's
ProcessGroup wraps each collective call in one; `record_param_comms` of PyTorch 1.13-2.0 carries no collective
name, and NCCL >= 2.12's generic kernels, `ncclDevKernel_Generic`, and all-to-all's `ncclKernel_SendRecv_*` do
not name the collective); failing that, from the kernel name (`ncclKernel_AllReduce_*`, ...).
"""
from __future__ import annotations

import math
import os
import re
from typing import Any

import numpy as np

from narrowpath.errors import TraceFormatError
from narrowpath.trace import schema
from narrowpath.trace.model import ProcessGroup, RankTrace

_NS = 1e-9


def _np(a, dtype) -> np.ndarray:
    return np.frombuffer(a, dtype=dtype).copy() if len(a) else np.zeros(0, dtype=dtype)


_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def rank_from_name(path: str) -> int | None:
    """Rank number in a file name such as `a100-ddp-2rank-rank0.json.gz` (the last `rank<N>`), or None."""
    found = _RANK_IN_NAME.findall(os.path.basename(path))
    return int(found[-1]) if found else None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_distributed_info(path: str, header: dict[str, Any]) -> None:
    """`distributedInfo`, when present, is an object whose `rank` and `world_size` (when given) are counts, the
    rank below the world size: anything else is refused rather than ignored (a rank "zero" used to fall back to
    the file name silently)."""
    if "distributedInfo" not in header:
        return
    info = header["distributedInfo"]
    if not isinstance(info, dict):
        raise TraceFormatError(f"{path}: distributedInfo must be an object, got {_short(info)}")
    for key in ("rank", "world_size"):
        if key in info and not _count(info[key]):
            raise TraceFormatError(f"{path}: distributedInfo.{key} must be an integer >= 0, got {_short(info[key])}")
    if "rank" in info and "world_size" in info and info["rank"] >= info["world_size"]:
        raise TraceFormatError(f"{path}: distributedInfo.rank {info['rank']} is not below distributedInfo.world_size "
                               f"{info['world_size']}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _rank_of(path: str, header: dict[str, Any], fallback: int) -> tuple[int, str, int | None]:
    check_distributed_info(path, header)
    info = header.get("distributedInfo")
    if isinstance(info, dict) and "rank" in info:
        ws = info.get("world_size")
        return info["rank"], "distributedInfo", ws
    by_name = rank_from_name(path)
    if by_name is not None:
        return by_name, "file name", None
    return fallback, "file order", None


def _process_groups(path: str, header: dict[str, Any]) -> tuple[ProcessGroup, ...]:
    """`distributedInfo.pg_config`, each entry checked (a group's ranks are counts; its size one too)."""
    info = header.get("distributedInfo")
    groups = info.get("pg_config") if isinstance(info, dict) else None
    if groups is None:
        return ()
    if not isinstance(groups, list):
        raise TraceFormatError(f"{path}: distributedInfo.pg_config must be a list, got {_short(groups)}")
    out = []
    for i, pg in enumerate(groups):
        where = f"{path}: distributedInfo.pg_config[{i}]"
        if not isinstance(pg, dict):
            raise TraceFormatError(f"{where} must be an object, got {_short(pg)}")
        ranks = pg.get("ranks", [])
        if not isinstance(ranks, list) or not all(_count(r) for r in ranks):
            raise TraceFormatError(f"{where}.ranks must be a list of ranks (integers >= 0), got {_short(ranks)}")
        size = pg.get("pg_size") or len(ranks)
        if not _count(size):
            raise TraceFormatError(f"{where}.pg_size must be an integer >= 0, got {_short(size)}")
        out.append(ProcessGroup(name=str(pg.get("pg_name", "")), size=size, ranks=tuple(ranks)))
    return tuple(out)


def finalize_rank(path: str, cols, header: dict[str, Any], fallback_rank: int) -> RankTrace:
    rank, rank_source, world_size = _rank_of(path, header, fallback_rank)
    groups = _process_groups(path, header)
    host_mode = len(cols.act["ts"]) == 0
    table = cols.host if host_mode else cols.act
    name = _np(table["name"], np.int64).astype(np.int32)
    ts = _np(table["ts"], np.int64)
    dur = _np(table["dur"], np.int64)
    if host_mode:
        lane, kind = _np(table["tid"], np.int64), np.full(ts.size, schema.KIND_HOST_OP, np.int8)
        corr = np.full(ts.size, -1, np.int64)
    else:
        lane, kind, corr = _np(table["lane"], np.int64), _np(table["kind"], np.int8), _np(table["corr"], np.int64)
    rt = {k: _np(v, np.int64) for k, v in cols.rt.items()}
    st = {k: _np(v, np.int64) for k, v in cols.steps.items()}
    starts = [a.min() for a in (ts, rt["ts"], st["ts"]) if a.size]
    origin = int(min(starts)) if starts else 0

    names = tuple(cols.name_ids)
    classify = schema.host_class if host_mode else schema.kernel_class
    class_of_name = np.array([classify(n) for n in names] or [0], dtype=np.int8)
    act_class = class_of_name[name] if name.size else np.zeros(0, np.int8)
    coll = np.full(ts.size, -1, np.int8)
    msg = np.full(ts.size, np.nan)
    group = np.zeros(ts.size, np.int32)
    for table_name, row, text, nbytes, gsize, _ in cols.coll_meta:
        if (table_name == "host") == host_mode:
            coll[row] = schema.COLLECTIVE_KINDS.index(schema.collective_kind(text))
            msg[row] = nbytes if nbytes > 0 else np.nan
            group[row] = gsize
    if host_mode:
        kind[coll >= 0] = schema.KIND_HOST_COMM

    # Launches: runtime call with the same correlation id.
    launch_ns = np.full(ts.size, -1, np.int64)
    launch_tid = np.full(ts.size, -1, np.int64)
    if host_mode:
        launch_ns, launch_tid = ts.copy(), lane.copy()
    elif rt["corr"].size and ts.size:
        order = np.argsort(rt["corr"], kind="stable")
        sorted_corr = rt["corr"][order]
        pos = np.clip(np.searchsorted(sorted_corr, corr), 0, sorted_corr.size - 1)
        hit = (sorted_corr[pos] == corr) & (corr >= 0)
        launch_ns[hit] = rt["ts"][order[pos[hit]]]
        launch_tid[hit] = rt["tid"][order[pos[hit]]]

    comm = act_class == schema.CLASS_COMM
    _attach_rpc(cols.rpc, comm, coll, msg, group, launch_ns, launch_tid)
    if not host_mode:
        _attach_rpc(_annotations(cols), comm, coll, msg, group, launch_ns, launch_tid, kind_only=True)
    for i in np.flatnonzero(comm & (coll < 0)):
        coll[i] = schema.COLLECTIVE_KINDS.index(schema.collective_kind(names[name[i]]))
    if host_mode:  # gloo annotations carry no group size: the default group is the world
        group[comm & (group == 0)] = world_size or _world_from_groups(groups) or 0

    order = np.argsort(ts, kind="stable")
    sec = lambda a: (a - origin) * _NS  # noqa: E731
    launch_s = np.where(launch_ns >= 0, sec(launch_ns.astype(np.float64)), np.nan)
    rt_order = np.argsort(rt["ts"], kind="stable")
    st_order = np.argsort(st["ts"], kind="stable")
    device = header.get("deviceProperties")
    device_name = device[0].get("name") if isinstance(device, list) and device and isinstance(device[0], dict) else None
    return RankTrace(
        path=os.fspath(path), rank=rank, rank_source=rank_source, world_size=world_size, device_name=device_name,
        host_mode=host_mode, names=names, origin_ns=origin,
        clock_offset_ns=_base_time_ns(path, header), process_groups=groups,
        act_name=name[order], act_start_s=sec(ts[order].astype(np.float64)), act_dur_s=dur[order] * _NS,
        act_lane=lane[order], act_kind=kind[order], act_class=act_class[order], act_corr=corr[order],
        act_launch_s=launch_s[order], act_launch_tid=launch_tid[order], act_coll=coll[order],
        act_message_bytes=msg[order], act_group_size=group[order],
        rt_name=rt["name"][rt_order].astype(np.int32), rt_start_s=sec(rt["ts"][rt_order].astype(np.float64)),
        rt_dur_s=rt["dur"][rt_order] * _NS, rt_corr=rt["corr"][rt_order], rt_tid=rt["tid"][rt_order],
        step_number=st["num"][st_order], step_start_s=sec(st["ts"][st_order].astype(np.float64)),
        step_dur_s=st["dur"][st_order] * _NS, num_events=cols.num_events, backend=_backend(header))


def _base_time_ns(path: str, header: dict[str, Any]) -> int:
    """`baseTimeNanoseconds` (0 when absent): a finite number, or the file is refused."""
    value = header.get("baseTimeNanoseconds")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraceFormatError(f"{path}: baseTimeNanoseconds must be a number of nanoseconds, got {_short(value)}")
    return int(value)


def _backend(header: dict[str, Any]) -> str | None:
    info = header.get("distributedInfo")
    backend = info.get("backend") if isinstance(info, dict) else None
    return str(backend)[:40] if backend is not None else None


def _world_from_groups(groups: tuple[ProcessGroup, ...]) -> int | None:
    return max((g.size for g in groups), default=None)


_ANNOTATION_RE = re.compile(r"^(nccl|gloo):")


def _annotations(cols) -> list[tuple[int, int, int, str, int, int]]:
    """The `nccl:<op>` / `gloo:<op>` user annotations of a GPU trace as record_param_comms-like rows
    (ts_ns, end_ns, tid, name, 0, 0): they name the collective but not reliably its size (their `Input Dims`
    is one tensor, the input or the output of an all-gather), so only the kind is taken from them."""
    host = cols.host
    return [(host["ts"][row], host["ts"][row] + host["dur"][row], host["tid"][row], text, 0, 0)
            for table_name, row, text, _, _, _ in cols.coll_meta
            if table_name == "host" and _ANNOTATION_RE.match(text)]


def _attach_rpc(rpc, comm, coll, msg, group, launch_ns, launch_tid, kind_only: bool = False) -> None:
    """Give comm kernels lacking args the metadata of the record_param_comms enclosing their launch (the
    innermost: the latest-starting one that encloses it); `kind_only`: the collective kind alone."""
    if not rpc:
        return
    r_ts = np.array([r[0] for r in rpc], np.int64)
    order = np.argsort(r_ts, kind="stable")
    r_ts = r_ts[order]
    for i in np.flatnonzero(comm & (coll < 0) & (launch_ns >= 0)):
        j = int(np.searchsorted(r_ts, launch_ns[i], side="right")) - 1
        while j >= 0:
            ts, end, tid, text, nbytes, gsize = rpc[order[j]]
            if end < launch_ns[i] - 10_000_000:  # look back at most 10 ms
                break
            if tid == launch_tid[i] and ts <= launch_ns[i] <= end:
                coll[i] = schema.COLLECTIVE_KINDS.index(schema.collective_kind(text))
                if not kind_only:
                    msg[i] = nbytes if nbytes > 0 else np.nan
                    group[i] = gsize
                break
            j -= 1
