"""A command that needs an optional extra says which one to install, in one line, before running anything
(`probe all` used to run three probes for a minute and then die with a ModuleNotFoundError traceback)."""
from __future__ import annotations

import sys
import time

import pytest

from tests.cli.one_line import one_line_error


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
