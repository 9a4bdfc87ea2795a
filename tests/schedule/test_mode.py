"""Inference is not modelled yet: a scenario that asks for it is refused, never priced as a training step."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from narrowpath.catalog.resolve import load_scenario
from narrowpath.cli.main import main
from narrowpath.errors import NarrowpathError
from narrowpath.schedule.step import predict


def test_predict_refuses_inference_mode():
    scn = dataclasses.replace(load_scenario(None), mode="inference")
    with pytest.raises(NarrowpathError, match="mode: 'inference' is not modelled"):
        predict(scn)


@pytest.mark.parametrize("cmd", ["predict", "analyze"])
def test_cli_keeps_the_file_mode_and_refuses_it(tmp_path, capsys, cmd):
    path = tmp_path / "inf.yaml"
    path.write_text(yaml.safe_dump({"system": "dgx-h100", "model": "llama3-8b", "num_gpus": 8, "mode": "inference",
                                    "plan": {"tp": 1, "pp": 1, "dp": 8, "mbs": 1, "gbs": 8}}))
    assert main([cmd, str(path)]) == 2
    err = capsys.readouterr().err
    assert "mode: 'inference'" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    path.write_text(path.read_text().replace("inference", "training"))
    assert main([cmd, str(path), "--json"]) == 0
