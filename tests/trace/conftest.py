"""Fixtures of the trace tests: the real A100 traces of ../shared/traces, traces recorded here with
torch.profiler around a two-process gloo DDP job, and helpers that derive quirky or broken copies."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shared_paths import TRACES

DDP = TRACES / "a100-ddp-2rank-rank0.json.gz"
R16 = TRACES / "a100-16rank-rank0.json.gz"
PP0 = TRACES / "pp-128rank-sampled-rank0.json.gz"
PP1 = TRACES / "pp-128rank-sampled-rank1.json.gz"


def _need(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"real trace {path} not present (../shared/traces)")
    return path


@pytest.fixture(scope="session")
def ddp_path() -> Path:
    return _need(DDP)


@pytest.fixture(scope="session")
def r16_path() -> Path:
    return _need(R16)


@pytest.fixture(scope="session")
def pp_paths() -> tuple[Path, Path]:
    return _need(PP0), _need(PP1)


@pytest.fixture(scope="session")
def ddp_json(ddp_path) -> dict:
    with gzip.open(ddp_path, "rt") as fh:
        return json.load(fh)


@pytest.fixture(scope="session")
def gloo_dir(tmp_path_factory) -> Path:
    """Two real rank traces of a gloo DDP job, recorded once per session (skipped without torch)."""
    pytest.importorskip("torch", reason="recording traces needs torch (pip install torch==2.13.0, CPU build)")
    out = tmp_path_factory.mktemp("gloo")
    script = Path(__file__).with_name("record_gloo.py")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    errors = []
    for _ in range(3):  # the rendezvous port is picked free but can be taken before gloo binds it: retry
        try:
            proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True,
                                  timeout=180, env=env)
        except subprocess.TimeoutExpired as exc:
            errors.append(f"timed out after {exc.timeout} s")
            continue
        if proc.returncode == 0 and (out / "rank0.json").is_file() and (out / "rank1.json").is_file():
            return out
        errors.append(proc.stderr[-1500:])
    pytest.fail("recording the gloo DDP traces failed three times:\n" + "\n---\n".join(errors))


@pytest.fixture
def write_json():
    """write_json(path, data, indent=None, gz=False) -> path: a JSON (or gzip JSON) trace file."""
    return _write_json


def _write_json(path: Path, data, *, indent=None, gz: bool = False) -> Path:
    text = json.dumps(data, indent=indent)
    if gz:
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path
