"""`narrowpath collective`: nccl-tests-style table, corpus JSON, compare to a real nccl-tests log, errors."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from narrowpath.cli import collective_cmd
from narrowpath.errors import NarrowpathError

LOG = Path(__file__).parents[1] / "network" / "data" / "all_reduce_perf_8gpu.log"


def _run(argv, capsys):
    parser = argparse.ArgumentParser()
    collective_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["collective", *argv])
    rc = args.func(args)
    return rc, capsys.readouterr().out


def test_sweep_prints_nccl_tests_columns(capsys):
    rc, out = _run(["--system", "dgx-h100", "--gpus", "16", "-b", "8", "-e", "1G", "-f", "8"], capsys)
    assert rc == 0
    assert "size" in out and "count" in out and "algbw" in out and "busbw" in out and "algorithm" in out
    data = [line.split() for line in out.splitlines() if line and not line.startswith("#")]
    assert [int(r[0]) for r in data] == [8 * 8**k for k in range(10)]
    assert "# Avg bus bandwidth" in out


def test_size_suffixes_are_binary_like_nccl_tests():
    assert collective_cmd.parse_size("8M") == 8 * 2**20 and collective_cmd.parse_size("1G") == 2**30
    assert collective_cmd.parse_size("64") == 64
    with pytest.raises(NarrowpathError):
        collective_cmd.parse_size("lots")


def test_corpus_json_has_cases_and_error_summary(capsys):
    rc, out = _run(["--corpus", "--json"], capsys)
    data = json.loads(out)
    assert rc == 0 and set(data) >= {"cases", "mean_abs_error", "max_abs_error"}
    for case in data["cases"]:
        assert {"id", "predicted_busbw_GBps", "measured_busbw_GBps", "error"} <= set(case)
        assert case["error"] == pytest.approx(case["predicted_busbw_GBps"] / case["measured_busbw_GBps"] - 1)
    assert data["max_abs_error"] < 0.10


def test_corpus_file_argument_and_shipped_copy_is_unmodified(capsys):
    shipped = Path(collective_cmd.__file__).parents[1] / "validate" / "corpora" / "collectives-public.yaml"
    shared = Path("/work/shared/validation/collectives-public.yaml")
    if shared.exists():
        assert shipped.read_bytes() == shared.read_bytes()
    rc, out = _run(["--corpus", str(shipped)], capsys)
    assert rc == 0 and "mean |error|" in out


def test_compare_reads_a_real_nccl_tests_log(capsys):
    """Every data row of the log appears beside the model; ranks and op come from the log."""
    rc, out = _run(["--system", "dgx-h100", "--compare", str(LOG)], capsys)
    assert rc == 0
    rows = [line.split() for line in out.splitlines() if line and not line.startswith("#")]
    assert len(rows) == 11 and rows[0][0] == "32768" and rows[-1][0] == "33554432"
    assert float(rows[-1][1]) == pytest.approx(195.40) and float(rows[-1][3]) == pytest.approx(300.51)
    assert "measured avg busbw 100.95" in out


def test_bad_input_raises_narrowpath_errors(tmp_path, capsys):
    with pytest.raises(NarrowpathError):
        _run(["--system", "no-such-system"], capsys)
    bad = tmp_path / "c.yaml"
    bad.write_text("schema: validation-corpus/1\ncases: []\n")
    with pytest.raises(NarrowpathError):
        _run(["--corpus", str(bad)], capsys)
    with pytest.raises(NarrowpathError):
        _run(["--system", "dgx-h100", "-b", "1G", "-e", "8"], capsys)
    with pytest.raises(NarrowpathError):
        _run(["--system", "dgx-h100", "--gpus", "0"], capsys)
