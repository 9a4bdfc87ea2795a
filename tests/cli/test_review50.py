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
    """int(float('inf')) raised OverflowError out of read_request_trace."""
    f = tmp_path / name
    f.write_text(text)
    one_line_error(capsys, [*SERVE, "--requests", str(f)], "workload.requests_file", "request 1",
                   "must be finite numbers")
