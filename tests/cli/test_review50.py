"""From the fiftieth session's independent review of input handling, the command-line and serving-file cases: each bad
input ends in exit status 2 and one line naming the field or flag, never a traceback (tests.cli.one_line)."""
from __future__ import annotations

import pytest

from tests.cli.one_line import one_line_error

SERVE = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--no-whatif"]
SERVING_FILE = "system: dgx-h100\nmodel: llama3-8b\nnum_gpus: 1\nplan: {{tp: 1}}\nworkload: {workload}\n{extra}"


def _serving_file(tmp_path, workload, extra=""):
    f = tmp_path / "serve.yaml"
    f.write_text(SERVING_FILE.format(workload=workload, extra=extra))
    return str(f)


@pytest.mark.parametrize("value", ["5", "[a.csv]", "{a: 1}"])
def test_a_requests_file_that_is_no_path_is_refused(tmp_path, capsys, value):
    """`requests_file: 5` ended in a TypeError (Path of an int)."""
    one_line_error(capsys, ["serve", _serving_file(tmp_path, f"{{requests_file: {value}}}"), "--no-whatif"],
                   "workload.requests_file: must be a trace file path")


@pytest.mark.parametrize("name, text", [
    ("t.csv", "arrival_s,input_tokens,output_tokens\n0,inf,10\n"),
    ("t.csv", "arrival_s,input_tokens,output_tokens\n0,12,-inf\n"),
    ("t.json", '{"requests": [{"arrival_s": 0, "input_tokens": 1e400, "output_tokens": 5}]}'),
    ("t.jsonl", '{"arrival_s": 0, "input_tokens": 5, "output_tokens": 1e400}\n'),
])
def test_an_infinite_length_in_a_trace_is_refused(tmp_path, capsys, name, text):
    """int(float('inf')) raised OverflowError out of read_request_trace; since the fifty-sixth session a length is
    read as a number and refused unless a whole one (5.5 had been truncated to 5)."""
    f = tmp_path / name
    f.write_text(text)
    one_line_error(capsys, [*SERVE, "--requests", str(f)], "workload.requests_file", "request 1",
                   "must be an integer")


def _json(capsys, argv) -> dict:
    import json

    from narrowpath.cli.main import main
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


PREDICT = ["predict", "--system", "dgx-h100", "--model", "llama3-8b", "--gpus", "8"]


@pytest.mark.parametrize("name", ["H100-80GB", "h100-sxm5-80gb", "NVIDIA H100 80GB HBM3"])
def test_a_profile_is_named_as_its_device_is(tmp_path, capsys, name):
    """--system and hardware.gpu take a device's aliases and any case; --profile and a file's `calibration:` found
    no profile for them ('no calibration profile for device ...')."""
    want = _json(capsys, [*PREDICT, "--profile", "H100-SXM5-80GB"])["step_time_s"]
    assert _json(capsys, [*PREDICT, "--profile", name])["step_time_s"] == want
    for profile in ("H100-SXM5-80GB", name):
        (tmp_path / f"{profile}.yaml").write_text(f"system: dgx-h100\nmodel: llama3-8b\nnum_gpus: 8\n"
                                                  f"plan: {{tp: 1, dp: 8, gbs: 64}}\ncalibration: {profile}\n")
    in_file = _json(capsys, ["predict", str(tmp_path / f"{name}.yaml")])["step_time_s"]
    assert in_file == _json(capsys, ["predict", str(tmp_path / "H100-SXM5-80GB.yaml")])["step_time_s"]
    one_line_error(capsys, [*PREDICT, "--profile", "H100-nope"], "no calibration profile for device 'H100-nope'")


def test_a_serving_file_reads_its_calibration_file(tmp_path, capsys):
    """A serving file's `calibration: prof.yaml` was taken for a device name; a training scenario's loads the file."""
    (tmp_path / "prof.yaml").write_text("id: slow\ndevice: H100-SXM5-80GB\nmatrix_efficiency: {bf16: 0.1}\n"
                                        "vector_bw_efficiency: 0.2\n")
    work = "{scenario: offline, input_tokens: 128, output_tokens: 32, num_requests: 10}"
    base = _json(capsys, ["serve", _serving_file(tmp_path, work), "--no-whatif"])
    slow = _json(capsys, ["serve", _serving_file(tmp_path, work, "calibration: prof.yaml\n"), "--no-whatif"])
    assert slow["makespan_s"] > 2 * base["makespan_s"]
    inline = _json(capsys, ["serve", _serving_file(tmp_path, work, "calibration: {id: slow, device: H100-SXM5-80GB, "
                                                   "matrix_efficiency: {bf16: 0.1}, vector_bw_efficiency: 0.2}\n"),
                            "--no-whatif"])
    assert inline["makespan_s"] == slow["makespan_s"]
    one_line_error(capsys, ["serve", _serving_file(tmp_path, work, "calibration: nope.yaml\n"), "--no-whatif"],
                   "nope.yaml: no such file (calibration profile)")


@pytest.mark.parametrize("flags", [["--rate", "5"], ["--offline"], ["--num-requests", "3"],
                                   ["--input-len", "100", "--output-len", "10"]])
def test_load_flags_over_a_trace_file_name_the_clash(tmp_path, capsys, flags):
    """--rate over a file whose trace comes from requests_file failed with 'workload.input_tokens: is required';
    --input-len/--output-len or --num-requests alone were ignored and the trace served. The --requests flag already
    named such a clash."""
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n0,100,10\n0.5,200,20\n")
    f = _serving_file(tmp_path, "{requests_file: t.csv}")
    one_line_error(capsys, ["serve", f, "--no-whatif", *flags], f"{flags[0]}: the scenario's workload is a trace")
    trace = _json(capsys, ["serve", f, "--no-whatif"])
    own = _json(capsys, ["serve", f, "--no-whatif", "--rate", "5", "--input-len", "100", "--output-len", "10"])
    assert own["output_tokens_per_s"] != trace["output_tokens_per_s"]  # a load of its own replaces the trace


@pytest.mark.parametrize("flags, fragment", [
    ([], "needs dp_overlap (--dp-overlap)"),
    (["--dp-overlap"], "this plan runs no pipeline"),
    (["--dp-overlap", "--pp", "2", "--pipeline-schedule", "dualpipe", "--gbs", "64"], "this plan runs dualpipe"),
])
def test_a_grad_sync_launch_nothing_reads_is_refused(capsys, flags, fragment):
    """--grad-sync-launch without --dp-overlap, or without Megatron's pipeline, was ignored where --recompute-modules
    without selective recompute is refused."""
    one_line_error(capsys, [*PREDICT, "--gpus", "16", "--grad-sync-launch", "megatron", *flags],
                   "--grad-sync-launch", fragment)
    read = _json(capsys, [*PREDICT, "--gpus", "16", "--grad-sync-launch", "megatron", "--dp-overlap", "--pp", "2"])
    assert read["step_time_s"] > 0


def test_a_stacks_default_launch_mode_is_not_refused(tmp_path, capsys):
    """Megatron-LM's stack sets grad_sync_launch: aligned for every plan, overlapped or not: the refusal is the
    flag's alone."""
    f = tmp_path / "m.yaml"
    f.write_text("system: dgx-h100\nmodel: llama3-8b\nnum_gpus: 8\nplan: {tp: 1, dp: 8, gbs: 64, "
                 "framework: Megatron-LM}\n")
    assert _json(capsys, ["predict", str(f)])["plan"]["grad_sync_launch"] == "aligned"
    assert _json(capsys, ["predict", str(f), "--tp", "2"])["step_time_s"] > 0
