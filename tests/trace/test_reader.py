"""Reader: real Kineto traces become compact per-rank tables; layouts and quirks do not change the result."""
from __future__ import annotations

import copy
import json
import gzip
import shutil

import numpy as np
import pytest

from narrowpath.trace import schema
from narrowpath.trace.model import RankTrace
from narrowpath.trace.reader import read_rank, read_trace


def _same_tables(a: RankTrace, b: RankTrace) -> None:
    for field in ("act_start_s", "act_dur_s", "act_lane", "act_class", "act_coll", "act_group_size",
                  "rt_start_s", "step_number", "step_start_s"):
        x, y = getattr(a, field), getattr(b, field)
        assert x.shape == y.shape, field
        assert np.allclose(x, y, atol=1e-9, equal_nan=True), field
    assert [a.names[i] for i in a.act_name] == [b.names[i] for i in b.act_name]


def test_ddp_trace_tables(ddp_path):
    """rank 0 of the NCCL DDP job: kernels with correlation-matched launches, steps 4-6, AllReduce metadata."""
    r = read_rank(ddp_path)
    assert (r.rank, r.rank_source, r.world_size) == (0, "distributedInfo", 2)
    assert r.device_name == "NVIDIA A100-PG509-200" and not r.host_mode
    assert r.num_activities == 2700 + 960 + 114  # kernel + gpu_memcpy + gpu_memset events
    assert list(r.step_number) == [4, 5, 6]
    assert np.isfinite(r.act_launch_s).all()
    comm = r.act_class == schema.CLASS_COMM
    assert comm.sum() == 21
    allreduce = comm & (r.act_coll == schema.COLLECTIVE_KINDS.index("all_reduce"))
    assert allreduce.sum() == 15
    assert set(r.act_group_size[allreduce]) == {2}
    # Float all_reduce of 6,637,568 elements (first NCCL kernel of the file) = 26,550,272 bytes
    assert 6637568 * 4 in set(r.act_message_bytes[allreduce].astype(int))
    assert np.all(np.diff(r.act_start_s) >= 0)


def test_sixteen_rank_trace_kinds_from_nccl_annotations(r16_path):
    """No collective args in this trace (its record_param_comms carry none) and every NCCL kernel is
    `ncclKernel_SendRecv_*`: the kind comes from the `nccl:<op>` annotation enclosing the kernel's launch on the
    launch thread (a script matching launches by correlation id to annotations counted, in the whole file,
    45 all_to_all, 10 all_reduce, 10 _reduce_scatter_base, 10 _all_gather_base). The other 5 kernels have no
    launch in the file (launched before the profiler started): their kind stays the kernel name's, send_recv."""
    r = read_rank(r16_path)
    assert (r.rank, r.world_size) == (0, 16)
    comm = r.act_class == schema.CLASS_COMM
    assert comm.sum() == 80
    kinds = [schema.COLLECTIVE_KINDS[k] for k in r.act_coll[comm]]
    assert {k: kinds.count(k) for k in set(kinds)} == {"all_to_all": 45, "all_reduce": 10, "reduce_scatter": 10,
                                                       "all_gather": 10, "send_recv": 5}
    send_recv = comm & (r.act_coll == schema.COLLECTIVE_KINDS.index("send_recv"))
    assert np.isnan(r.act_launch_s[send_recv]).all()
    assert np.isnan(r.act_message_bytes[comm]).all()  # an annotation gives the kind, never a size
    assert list(r.step_number) == [550, 551, 552, 553, 554]


def _annotated_trace(tmp_path, write_json):
    """Four `ncclDevKernel_Generic` kernels (a name that says no collective), launched at 130, 150, 170 and
    310 us on thread 1. Thread 1 holds nccl:all_reduce over 100-200 us with nccl:_all_gather_base inside it
    over 120-140 us; thread 2 holds nccl:all_to_all over 300-400 us; record_param_comms with args encloses the
    launch at 170 us."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": 1, "tid": 1, "ts": 100,
               "dur": 100},
              {"ph": "X", "cat": "user_annotation", "name": "nccl:_all_gather_base", "pid": 1, "tid": 1, "ts": 120,
               "dur": 20, "args": {"Input Dims": [[1000]], "Input type": ["float"]}},
              {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 165, "dur": 10,
               "args": {"Collective name": "broadcast", "In msg nelems": 8, "Out msg nelems": 8,
                        "Group size": 4, "dtype": "Float"}},
              {"ph": "X", "cat": "user_annotation", "name": "nccl:all_to_all", "pid": 1, "tid": 2, "ts": 300,
               "dur": 100}]
    for i, launch in enumerate((130, 150, 170, 310)):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": launch, "dur": 2, "args": {"correlation": i + 1}})
        events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_Generic(ncclDevComm*, unsigned long, "
                       "ncclWork*)", "pid": 0, "tid": 7, "ts": 500 + 100 * i, "dur": 50,
                       "args": {"stream": 7, "correlation": i + 1}})
    data = {"deviceProperties": [{"name": "GPU"}], "distributedInfo": {"rank": 0, "world_size": 4},
            "traceEvents": events}
    return write_json(tmp_path / "annotated.json", data)


def test_kind_from_innermost_annotation_on_the_launch_thread(tmp_path, write_json):
    """Launch at 130 us: inside nccl:_all_gather_base (innermost) -> all_gather; at 150 us: only inside
    nccl:all_reduce -> all_reduce; at 170 us: record_param_comms's args win (broadcast, 8 floats = 32 B, group
    4); at 310 us: nccl:all_to_all is on thread 2, not the launch thread -> the name's kind, unknown. Sizes
    never come from an annotation (its one tensor may be an all-gather's input or output)."""
    r = read_rank(_annotated_trace(tmp_path, write_json))
    assert [schema.COLLECTIVE_KINDS[k] for k in r.act_coll] == ["all_gather", "all_reduce", "broadcast", "unknown"]
    assert np.isnan(r.act_message_bytes[[0, 1, 3]]).all() and r.act_message_bytes[2] == 32
    assert list(r.act_group_size) == [0, 0, 4, 0]


def test_two_ranks_from_a_directory(pp_paths, tmp_path):
    for p in pp_paths:
        shutil.copy(p, tmp_path / p.name)
    t = read_trace(tmp_path)
    assert [r.rank for r in t.ranks] == [0, 1]
    assert all(r.world_size == 128 for r in t.ranks)


def test_plain_compact_and_indented_layouts_read_the_same(ddp_path, ddp_json, tmp_path, write_json):
    """The Kineto fast path and the generic element-by-element path give identical tables."""
    ref = read_rank(ddp_path)
    plain = tmp_path / "plain.json"
    with gzip.open(ddp_path, "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    _same_tables(ref, read_rank(plain))
    _same_tables(ref, read_rank(write_json(tmp_path / "compact.json", ddp_json)))
    _same_tables(ref, read_rank(write_json(tmp_path / "indented.json.gz", ddp_json, indent=1, gz=True)))


def test_header_after_events_is_still_read(ddp_json, tmp_path, write_json):
    """distributedInfo written after traceEvents (key order is free in JSON) still gives the rank."""
    data = {"traceEvents": ddp_json["traceEvents"], "distributedInfo": {"rank": 7, "world_size": 8},
            "deviceProperties": ddp_json["deviceProperties"]}
    r = read_rank(write_json(tmp_path / "x.json", data))
    assert (r.rank, r.world_size) == (7, 8)


def test_missing_distributed_info_takes_rank_from_file_name(ddp_json, tmp_path, write_json):
    data = {k: v for k, v in ddp_json.items() if k != "distributedInfo"}
    r = read_rank(write_json(tmp_path / "job-rank3.json", data))
    assert (r.rank, r.rank_source, r.world_size) == (3, "file name", None)
    r = read_rank(write_json(tmp_path / "job.json", data), fallback_rank=5)
    assert (r.rank, r.rank_source) == (5, "file order")


def test_missing_profiler_steps_and_new_nccl_names(ddp_json, tmp_path, write_json):
    """No ProfilerStep: the whole trace is the window. ncclDevKernel_* is communication like ncclKernel_*."""
    data = copy.deepcopy(ddp_json)
    events = []
    for e in data["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep"):
            continue
        if str(e.get("name", "")).startswith("ncclKernel_"):
            e["name"] = e["name"].replace("ncclKernel_", "ncclDevKernel_")
        events.append(e)
    data["traceEvents"] = events
    r = read_rank(write_json(tmp_path / "x.json", data))
    assert r.step_number.size == 0
    assert (r.act_class == schema.CLASS_COMM).sum() == 21


def test_cuda_graph_launch_serves_many_kernels(ddp_json, tmp_path, write_json):
    """Kernels replayed from a CUDA graph share the correlation id of one cudaGraphLaunch."""
    data = copy.deepcopy(ddp_json)
    kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel"][:5]
    graph_corr = kernels[0]["args"]["correlation"]
    launch = next(e for e in data["traceEvents"] if e.get("cat") == "cuda_runtime"
                  and e.get("args", {}).get("correlation") == graph_corr)
    launch["name"] = "cudaGraphLaunch"
    for k in kernels[1:]:
        k["args"]["correlation"] = graph_corr
    r = read_rank(write_json(tmp_path / "graph.json", data))
    graph = r.act_corr == graph_corr
    assert graph.sum() == 5
    assert np.allclose(r.act_launch_s[graph], r.act_launch_s[graph][0])


def test_nanosecond_timestamps_keep_their_resolution(ddp_path, ddp_json):
    """Fractional-µs timestamps (ns resolution) survive: durations match the file to 1 ns."""
    r = read_rank(ddp_path)
    first = min((e for e in ddp_json["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    i = int(np.argmin(np.where(r.act_kind == schema.KIND_KERNEL, r.act_start_s, np.inf)))
    assert abs(r.act_dur_s[i] - first["dur"] * 1e-6) < 1e-9
    assert abs((r.origin_ns * 1e-9 + r.act_start_s[i]) * 1e6 - first["ts"]) < 2e-3


def test_record_param_comms_gives_metadata_to_bare_kernels(ddp_json, tmp_path, write_json):
    """Older PyTorch: collective args only on record_param_comms; the kernel launched inside gets them."""
    data = copy.deepcopy(ddp_json)
    for e in data["traceEvents"]:
        if e.get("cat") == "kernel" and "Collective name" in e.get("args", {}):
            for k in ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype"):
                e["args"].pop(k, None)
    r = read_rank(write_json(tmp_path / "old.json", data))
    comm = r.act_class == schema.CLASS_COMM
    sized = comm & np.isfinite(r.act_message_bytes)
    assert sized.sum() >= 10
    assert set(r.act_group_size[sized]) == {2}


@pytest.mark.parametrize("chunk_chars", [257, 4096])
def test_tiny_chunks_give_the_same_tables(ddp_path, chunk_chars, monkeypatch):
    """Refill boundaries fall everywhere (inside strings, numbers, separators): the tables do not change."""
    from narrowpath.trace import jsonstream
    ref = read_rank(ddp_path)
    monkeypatch.setattr(jsonstream, "CHUNK_CHARS", chunk_chars)
    _same_tables(ref, read_rank(ddp_path))


def test_tiny_chunks_on_compact_layout(ddp_json, tmp_path, write_json, monkeypatch):
    from narrowpath.trace import jsonstream
    path = write_json(tmp_path / "compact.json", ddp_json)
    ref = read_rank(path)
    monkeypatch.setattr(jsonstream, "CHUNK_CHARS", 300)
    _same_tables(ref, read_rank(path))


def test_profiler_step_marked_as_cpu_op_is_kept(ddp_json, tmp_path, write_json):
    """Older PyTorch writes ProfilerStep with cat "cpu_op"; the fast path must not skip it."""
    data = copy.deepcopy(ddp_json)
    for e in data["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep"):
            e["cat"] = "cpu_op"
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data, indent=None).replace("}, {", "},\n  {"))  # Kineto separators
    assert list(read_rank(path).step_number) == [4, 5, 6]


@pytest.mark.parametrize("name,kind", [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "all_gather"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all_gather"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "reduce_scatter"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "send_recv"),
    ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "send_recv"),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "broadcast"),
    ("ncclDevKernel_Reduce_Sum_f16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "reduce"),
])
def test_old_and_new_nccl_kernel_names_give_class_and_kind(name, kind):
    """Without collective args the kind comes from the kernel name, pre-2.19 `ncclKernel_*` and newer
    `ncclDevKernel_*` alike; both are HTA communication."""
    assert schema.kernel_class(name) == schema.CLASS_COMM
    assert schema.collective_kind(name) == kind
