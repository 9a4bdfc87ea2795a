"""Property: any scenario file — YAML text built from a valid scenario by random edits (a field replaced by a value
of any type or size, removed, a junk field added, a line duplicated, a character inserted) — either gives a valid
prediction or a NarrowpathError; never another exception, and never a hang or a memory blow-up.

The examples run in a child process under a 4 GB address-space limit (a MemoryError there fails the test), each
example under a 5 s deadline, with a fixed seed so that CI sees the same examples every run.
"""
from __future__ import annotations

import math
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MEMORY_LIMIT_BYTES = 4_000_000_000
BASE = {"system": "dgx-h100", "model": "llama3-8b", "num_gpus": 8,
        "plan": {"tp": 2, "dp": 4, "mbs": 1, "gbs": 16, "zero_stage": 1, "recompute": "selective",
                 "sequence_parallel": True, "precision": "bf16"}}
INLINE_MODEL = {"layers": 4, "hidden": 256, "heads": 8, "kv_heads": 2, "ffn": 1024, "vocab": 1000, "seq_len": 512}
PLAN_KEYS = ["tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "gbs", "zero_stage", "recompute", "sequence_parallel",
             "precision", "dp_overlap", "tp_comm_overlap", "attention", "cp_comm", "bucket_bytes", "placement",
             "cuda_graphs", "moe_sync_free", "grad_sync_launch", "vp_group"]
MODEL_KEYS = list(INLINE_MODEL) + ["name", "ffn_act", "norm", "tied_embeddings", "moe", "arch", "head_dim"]
TOP_KEYS = ["system", "model", "num_gpus", "plan", "mode", "calibration", "hardware", "name"]

scalars = st.one_of(
    st.integers(min_value=-3, max_value=64),
    st.sampled_from([0, 1, 2, 3, 4, 8, 16, 128, 4096, 2**24, 2**24 + 1, 2**30, 2**31, 10**30, -(10**9)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, 1e-308, 0.5, 1.5, 2.0]),
    st.booleans(), st.none(),
    st.text(max_size=12),
    st.sampled_from(["dgx-h100", "dgx-a100", "llama3-8b", "gpt3-175b", "gnmt-lstm", "H100-SXM5-80GB", "bf16",
                     "fp8", "none", "full", "selective", "flash", "auto", "a2a", "inference", "training", "1e3",
                     "aligned", "megatron"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=8)
paths = st.one_of(st.sampled_from(TOP_KEYS).map(lambda k: (k,)),
                  st.sampled_from(PLAN_KEYS).map(lambda k: ("plan", k)),
                  st.sampled_from(MODEL_KEYS).map(lambda k: ("model", k)))
edits = st.lists(st.tuples(st.sampled_from(["set", "delete", "junk"]), paths, values), min_size=1, max_size=3)


def _apply(doc: dict, edit: tuple) -> None:
    kind, path, value = edit
    if path[0] == "model" and len(path) == 2 and not isinstance(doc.get("model"), dict):
        doc["model"] = dict(INLINE_MODEL)
    parent = doc
    for key in path[:-1]:
        if not isinstance(parent.get(key), dict):
            return
        parent = parent[key]
    if kind == "set":
        parent[path[-1]] = value
    elif kind == "delete":
        parent.pop(path[-1], None)
    else:
        parent[f"{path[-1]}_x"] = value


@st.composite
def scenario_texts(draw) -> str:
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    for edit in draw(edits):
        _apply(doc, edit)
    text = yaml.safe_dump(doc, default_flow_style=draw(st.booleans()), allow_unicode=True)
    how = draw(st.sampled_from(["as is", "as is", "duplicate a line", "insert a character"]))
    lines = text.splitlines(keepends=True)
    if how == "duplicate a line" and lines:
        i = draw(st.integers(0, len(lines) - 1))
        lines.insert(i, lines[i])
    elif how == "insert a character":
        i = draw(st.integers(0, len(text)))
        return text[:i] + draw(st.sampled_from(list(":-[]{}&*!|>'\"#%@`,?\t\n "))) + text[i:]
    return "".join(lines)


@settings(max_examples=250, deadline=5000, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(text=scenario_texts())
def fuzz_scenario_files(text: str) -> None:
    from narrowpath.catalog import load_scenario
    from narrowpath.errors import NarrowpathError
    from narrowpath.schedule.step import predict
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "s.yaml"
        f.write_text(text, encoding="utf-8")
        try:
            pred = predict(load_scenario(str(f)))
        except NarrowpathError as exc:
            assert str(exc) and len(str(exc)) <= 600 and "\n" not in str(exc).strip(), repr(str(exc))
            return
    assert math.isfinite(pred.step_time_s) and pred.step_time_s > 0
    assert math.isfinite(pred.memory.total_bytes) and pred.memory.total_bytes > 0


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def test_scenario_files_fuzzed():
    """The property above, in a child process under the memory limit (one BLAS thread: the limit counts the
    address space each thread reserves)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    code = (f"import runpy; runpy.run_path({str(Path(__file__))!r})['fuzz_scenario_files'](); "
            "print('fuzzed ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                       preexec_fn=_limit_memory)
    assert r.returncode == 0 and "fuzzed ok" in r.stdout, r.stdout[-4000:] + r.stderr[-8000:]
