"""Review 51 of the HTML report, the command-line cases: an empty output name (`--html ""`) wrote nothing and exited
0; a page that cannot be written named the temporary file beside it instead of the path the user gave. Both are now
one line naming the flag, exit 2 (tests.cli.one_line)."""
from __future__ import annotations

import os
import re

import pytest

from tests.cli.one_line import one_line_error

QUICK = ["--no-what-ifs", "--no-simulate"]


@pytest.mark.parametrize("argv, flag", [
    (["analyze", *QUICK, "--html", ""], "--html"),
    (["analyze", *QUICK, "--timeline", ""], "--timeline"),
    (["compare", "llama3-8b-h100-8", "--what-if", "top", "--html", ""], "--html"),
    (["compare", "llama3-8b-h100-8", "llama3-8b-h100-8", "--html", "  "], "--html"),
    (["report", "-o", ""], "-o"),
])
def test_an_empty_output_name_is_refused(argv, flag, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line_error(capsys, argv, flag)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv, flag", [(["analyze", *QUICK, "--html"], "--html"), (["report", "-o"], "-o")])
def test_an_unwritable_page_names_the_path_given_not_a_temporary_file(argv, flag, capsys):
    line = one_line_error(capsys, [*argv, "/proc/x.html"], flag, "/proc/x.html")
    assert not re.search(r"/proc/\.x\.html\.|x\.html\.tmp", line), line


@pytest.mark.parametrize("argv", [["analyze", "llama3-8b-h100-8", "--no-what-ifs", "--no-simulate", "--html", "r.txt"],
                                  ["compare", "llama3-8b-h100-8", "--what-if", "top", "--html", "r.json"],
                                  ["report", "llama3-8b-h100-8", "-o", "r.txt"]])
def test_every_page_flag_wants_an_html_name(argv, capsys, tmp_path, monkeypatch):
    """`report -o` refused a name that is not .html; `analyze --html` and `compare --html` wrote the page under any
    name. All three refuse it now, before any work: one line naming the flag, exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    flag = argv[-2]
    one_line_error(capsys, argv, flag)
    assert not list(tmp_path.iterdir())
