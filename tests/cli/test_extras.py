"""A command that needs an optional extra says which one to install, in one line, before running anything
(`probe all` used to run three probes for a minute and then die with a ModuleNotFoundError traceback)."""
from __future__ import annotations

import sys
import time

import pytest

from narrowpath.cli.main import main


def one_line_error(capsys, argv: list[str], *fragments: str) -> str:
    t0 = time.perf_counter()
    assert main(argv) == 2
    assert time.perf_counter() - t0 < 5  # refused up front, not after the probes
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], err
    return lines[0]


@pytest.mark.parametrize("what", ["collectives", "all"])
def test_probe_without_torch_names_the_measure_extra(tmp_path, capsys, monkeypatch, what):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails, as without the extra
    one_line_error(capsys, ["probe", what, "--quick", "--no-progress", "-o", str(tmp_path / "p.json")],
                   f"`probe {what}`", "needs torch", "pip install 'narrowpath[measure]'")
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("argv", [["analyze", "gnmt-lstm-a100-8"], ["probe", "compute", "--quick"],
                                  ["trace", "nowhere.json"]])
def test_plots_without_matplotlib_names_the_plots_extra(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    one_line_error(capsys, [*argv, "--plots", str(tmp_path / "plots")], "--plots needs matplotlib",
                   "pip install 'narrowpath[plots]'")
