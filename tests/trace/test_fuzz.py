"""Property: whatever the bytes of a trace file, reading it gives a table or one TraceFormatError — nothing else —
and a table that was read is analysed and written as strict JSON without an error. Inputs are bytes, mutated
real Kineto text, and generated JSON documents with hostile field values (wrong types, NaN, huge numbers, odd
nesting), plain or gzip. Bounded in time and memory by construction: inputs of at most a few KB, a fixed number
of examples, each under a deadline."""
from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from narrowpath.cli.main import main
from narrowpath.errors import TraceFormatError
from narrowpath.trace.analyze import analyze, report_to_dict
from narrowpath.trace.model import Trace
from narrowpath.trace.reader import read_rank

SETTINGS = settings(max_examples=200, deadline=3000, suppress_health_check=[HealthCheck.too_slow],
                    derandomize=True)
KINETO = ('{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "GPU"}],\n  "distributedInfo": '
          '{"backend": "nccl", "rank": 0, "world_size": 2},\n  "traceEvents": [\n  {\n    "ph": "X", "cat": '
          '"user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1,\n    "ts": 100.5, "dur": 80\n  },\n  '
          '{\n    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,\n    "ts": 101, '
          '"dur": 4,\n    "args": {\n      "correlation": 9\n    }\n  },\n  {\n    "ph": "X", "cat": "kernel", '
          '"name": "ncclDevKernel_AllReduce_Sum_f32", "pid": 0, "tid": 7,\n    "ts": 110, "dur": 30,\n    "args": '
          '{\n      "stream": 7, "correlation": 9, "Collective name": "allreduce", "In msg nelems": 1024, '
          '"Group size": 2, "dtype": "Float"\n    }\n  },\n  {\n    "ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 110, '
          '"cat": "ac2g"\n  }\n  ]\n}\n').encode()

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=8), st.sampled_from(["7", "1e3", "nan", "-1", "Float", "allreduce"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=6)
CATS = ["kernel", "Kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "cuda_runtime", "cuda_driver", "cpu_op",
        "user_annotation", "python_function", "ac2g"]
NAMES = ["ProfilerStep#1", "record_param_comms", "cudaLaunchKernel", "cudaStreamSynchronize", "gloo:all_reduce",
         "ncclKernel_AllReduce", "Memcpy DtoH", "sm80_gemm", "Event Sync", "cudaEventQuery"]
ARG_KEYS = ["stream", "correlation", "Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
            "Input Dims", "Input type"]
events = st.fixed_dictionaries(
    {"ph": st.one_of(st.just("X"), st.sampled_from(["M", "f", "s", "i"]), values)},
    optional={"cat": st.one_of(st.sampled_from(CATS), values), "name": st.one_of(st.sampled_from(NAMES), values),
              "ts": st.one_of(st.integers(0, 10**6), st.floats(0, 1e6), values),
              "dur": st.one_of(st.integers(0, 1000), values), "tid": st.one_of(st.integers(0, 9), values),
              "pid": values,
              "args": st.one_of(st.dictionaries(st.sampled_from(ARG_KEYS), values, max_size=4), values)})
documents = st.fixed_dictionaries(
    {"traceEvents": st.one_of(st.lists(events, max_size=12), values)},
    optional={"deviceProperties": st.one_of(st.just([{"name": "GPU"}]), values),
              "distributedInfo": st.one_of(st.fixed_dictionaries({}, optional={
                  "rank": st.one_of(st.integers(-1, 3), values), "world_size": st.one_of(st.integers(0, 4), values),
                  "backend": values, "pg_config": values}), values),
              "baseTimeNanoseconds": values})


def _mutate(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    for pos, cut, insert in edits:
        pos %= len(data) + 1
        data = data[:pos] + insert + data[pos + cut:]
    return data


mutations = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 8), st.binary(max_size=4)), min_size=1,
                     max_size=4).map(lambda edits: _mutate(KINETO, edits))
raw_inputs = st.one_of(st.binary(max_size=512), mutations,
                       documents.map(lambda d: json.dumps(d).encode()),
                       documents.map(lambda d: json.dumps(d, indent=2).encode()))


def _read_and_analyse(data: bytes, gz: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "rank0.json"
        path.write_bytes(gzip.compress(data) if gz else data)
        try:
            rank = read_rank(path)
        except TraceFormatError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc)
            return
    out = report_to_dict(analyze(Trace(ranks=(rank,))))
    json.dumps(out, allow_nan=False)


@SETTINGS
@given(raw_inputs, st.booleans())
def test_any_bytes_read_as_a_table_or_one_trace_format_error(data, gz):
    _read_and_analyse(data, gz)


@settings(max_examples=60, deadline=3000, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(st.one_of(mutations, documents.map(lambda d: json.dumps(d).encode())))
def test_the_command_exits_0_or_2_with_strict_json(data):
    import contextlib
    import io
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "rank0.json"
        path.write_bytes(data)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["trace", str(path), "--json"])
    if code == 0:
        json.loads(out.getvalue(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    else:
        assert code == 2 and err.getvalue().startswith("narrowpath: error:") and err.getvalue().count("\n") == 1


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(alphabet=st.sampled_from("abcdeklmnorstuvxyzACEGKMNRSTUVZ_:0123456789<>( ,éİ"), max_size=40)
       .map(lambda s: s.replace("_", "_gemm" if len(s) % 7 == 0 else "_")))
def test_kernel_categories_match_the_case_insensitive_patterns(name):
    """The lower-cased fast matching of kernel names gives the category the original patterns give."""
    from narrowpath.trace import schema
    expected = next((c for c, p in schema.KERNEL_CATEGORIES if p.search(name)), "other")
    assert schema.kernel_category(name) == expected
