"""Bad input on every route of the CLI: exit code 2, one line on stderr naming the flag/field (and the value),
no traceback. In-process main() (fast); test_cli.py keeps the subprocess checks of the real entry point."""
from __future__ import annotations

import gzip

import pytest

from narrowpath.cli.main import main
from tests.cli.one_line import one_line_error

S = "gpt3-175b-a100-1024"
NCCL_LOG = """\
# Collective test starting: all_reduce_perf
#  Rank  0 Group  0 Pid  1 on host device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid  1 on host device  1 [0x0f] NVIDIA A100-SXM4-80GB
     1048576        262144     float     sum      -1    62.78   16.70   29.23      0    61.42   17.07   29.88      0
    16777216       4194304     float     sum      -1    163.9  102.36  179.13      0    162.1  103.50  181.12      0
"""
CASE = ("schema: collective-corpus/1\ncases:\n  - {{hardware: {{gpu: H100-SXM5-80GB, num_gpus: {n}}}, "
        "collective: all_reduce, message_bytes: {size}, measured: {{busbw_GBps: {bw}}}}}\n")


def test_usage_error_is_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--gpus", "abc"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["narrowpath predict: error: argument --gpus: invalid int value: 'abc' "
                                        "(see `narrowpath predict --help`)"]


@pytest.mark.parametrize("flags, fragment", [
    (["--jitter-cv", "nan"], "--jitter-cv: must be a finite number from 0 to 1, got nan"),
    (["--jitter-cv", "1e300"], "--jitter-cv"),
    (["--slow-node", "inf"], "--slow-node"),
    (["--compression", "nan"], "--compression: must be a finite number >= 1, got nan"),
    (["--compression", "inf"], "--compression"),
    (["--failures-per-gpu-hour", "-1"], "--failures-per-gpu-hour"),
    (["--failures-per-gpu-hour", "inf"], "--failures-per-gpu-hour"),
    (["--seed", "-1"], "--seed: must be >= 0, got -1"),
])
def test_analyze_assumption_flags(capsys, flags, fragment):
    one_line_error(capsys, ["analyze", S, "--no-what-ifs", *flags], fragment)


@pytest.mark.parametrize("flags, fragment", [
    (["--gpus", "100000000000"], "--gpus: must be from 1 to 16,777,216"),
    (["--gpus-per-node", "0"], "--gpus-per-node: must be >= 1, got 0"),
    (["--nic-gbps", "nan"], "--nic-gbps"),
    (["--nic-gbps", "0"], "--nic-gbps"),
    (["-f", "nan"], "finite factor > 1"),
    (["-f", "inf"], "finite factor > 1"),
    (["-f", "1.0000001"], "collective.factor"),
    (["-b", "nan"], "collective.size"),
    (["-e", "inf"], "'inf'"),
    (["-e", "1e300"], "'1e300'"),
])
def test_collective_sweep_flags(capsys, flags, fragment):
    one_line_error(capsys, ["collective", "--system", "dgx-h100", *flags], fragment)


@pytest.mark.parametrize("body, fragment", [
    ("schema: collective-corpus/1\ncases: 5\n", "corpus.cases: "),
    ("schema: collective-corpus/1\ncases: [5]\n", "corpus.cases[0]: must be a mapping"),
    ("schema: collective-corpus/1\ncases: [{hardware: 5}]\n", "corpus.cases[0].hardware: must be a mapping"),
    (CASE.format(n="x", size="1e6", bw=100), "corpus.cases[0].hardware.num_gpus"),
    (CASE.format(n=0, size="1e6", bw=100), "corpus.cases[0].hardware.num_gpus"),
    (CASE.format(n=8, size="lots", bw=100), "corpus.cases[0].message_bytes: must be a number, got 'lots'"),
    (CASE.format(n=8, size=".nan", bw=100), "corpus.cases[0].message_bytes"),
    (CASE.format(n=8, size="1e6", bw="x"), "corpus.cases[0].measured.busbw_GBps"),
    (CASE.format(n=8, size="1e6", bw=0), "corpus.cases[0].measured.busbw_GBps"),
    (CASE.format(n=8, size="1e6", bw=100).replace("H100-SXM5-80GB", "Z100"), "cases[0].hardware.gpu"),
])
def test_collective_corpus_fields(tmp_path, capsys, body, fragment):
    f = tmp_path / "c.yaml"
    f.write_text(body)
    one_line_error(capsys, ["collective", "--corpus", str(f)], fragment)


def test_collective_corpus_numeric_strings_still_read(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text(CASE.format(n=8, size="1e6", bw=100))
    assert main(["collective", "--corpus", str(f), "--json"]) == 0


@pytest.mark.parametrize("content, fragment", [
    (b"", "no data rows found"),
    (b"hello\nworld 1 2 3\n", "no data rows found"),
    (b"\xe9\xe9\n", "no data rows found"),
    (b"\x1f\x8b\x08garbage", "cannot read nccl-tests log"),
])
def test_collective_compare_bad_log_names_the_file(tmp_path, capsys, content, fragment):
    log = tmp_path / "x.log"
    log.write_bytes(content)
    one_line_error(capsys, ["collective", "--system", "dgx-a100", "--compare", str(log)], str(log), fragment)


def test_collective_compare_reads_gzip_and_calibration_file(tmp_path, capsys):
    log = tmp_path / "x.log.gz"
    log.write_bytes(gzip.compress(NCCL_LOG.encode()))
    prof = tmp_path / "p.yaml"
    prof.write_text("device: A100-SXM4-80GB\nmatrix_efficiency: {bf16: 0.5}\n")
    assert main(["collective", "--system", "dgx-a100", "--compare", str(log), "--calibration", str(prof)]) == 0
    assert "vs model" in capsys.readouterr().out


def test_calibrate_bad_nccl_log_names_the_file(tmp_path, capsys):
    log = tmp_path / "x.log"
    log.write_bytes(b"\xe9 not a log\n")
    one_line_error(capsys, ["calibrate", "--nccl-log", str(log), "-o", str(tmp_path / "p.yaml")],
                   f"nccl-tests log {log}: no data rows found")


def test_validate_case_with_a_list_plan_fails_that_case_only(tmp_path, capsys):
    f = tmp_path / "v.yaml"
    f.write_text("schema: validation-corpus/1\ncases:\n  - {id: a, hardware: {gpu: H100-SXM5-80GB, num_gpus: 8}, "
                 "model: llama3-8b, plan: [1], assumed: {gbs: 8}, measured: {step_time_s: 1}}\n")
    assert main(["validate", "--corpus", str(f)]) == 1  # a failed case: non-zero exit
    assert "FAILED a: plan: must be a mapping" in capsys.readouterr().out
