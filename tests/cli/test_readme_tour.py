"""The README's tour, as written: the predict examples fit (and `--json` says so at the top level), the sequence
length is printed, and the calibrate line works on a probe of this machine."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from narrowpath.cli.main import main

README = Path(__file__).resolve().parents[2] / "README.md"


def tour_lines(command: str) -> list[list[str]]:
    """The README tour's `narrowpath <command> …` lines, comments dropped, as argv lists."""
    out = []
    for line in README.read_text().splitlines():
        if line.startswith(f"narrowpath {command} "):
            out.append(shlex.split(line.split("#")[0])[1:])
    return out


def test_the_tour_has_a_flag_built_predict_example():
    assert any("--model" in argv and "llama3-8b" in argv for argv in tour_lines("predict"))


@pytest.mark.parametrize("argv", [a for a in tour_lines("predict") if "llama3-8b" in a])
def test_readme_predict_example_fits(capsys, argv):
    assert main([*argv, "--json"] if "--json" not in argv else argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is True and data["reason"] is None, data["reason"]


def test_json_flags_a_plan_that_does_not_fit_at_the_top(capsys):
    """The README's former example (100 GB of 85.9): `fits` false and the `reason` names the overflow."""
    assert main(["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--tp", "2",
                 "--gbs", "64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data)[:3] == ["scenario", "fits", "reason"]
    assert data["fits"] is False and "over by" in data["reason"] and "optimizer_state" in data["reason"]
    assert data["fits"] == data["memory"]["fits"]


def test_text_prints_the_sequence_length_and_a_top_warning(capsys):
    assert main(["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--tp", "2",
                 "--gbs", "64"]) == 0
    head = capsys.readouterr().out.splitlines()[:3]
    assert " seq=8192 " in head[1] and head[2].startswith("  WARNING: does not fit")
    assert main(["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--tp", "2",
                 "--gbs", "64", "--seq-len", "2048", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seq_len"] == 2048
