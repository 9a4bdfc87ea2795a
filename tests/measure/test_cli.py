"""`narrowpath probe` and `narrowpath calibrate` from the command line: JSON, plots, profile file, errors."""
from __future__ import annotations

import json

import pytest

from narrowpath.catalog.resolve import calibration_from
from narrowpath.cli.main import main


def test_probe_memory_json_and_plot(tmp_path, capsys):
    out = tmp_path / "mem.json"
    rc = main(["probe", "memory", "--quick", "--json", "--no-progress", "--max-bytes", str(8 * 2**20),
               "-o", str(out), "--plots", str(tmp_path / "plots")])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["levels"] and printed["samples"]
    for lv in printed["levels"]:
        assert set(lv) >= {"name", "capacity_bytes", "bandwidth_bytes_per_s"}
    assert json.loads(out.read_text())["probe"] == "memory"
    assert (tmp_path / "plots" / "memory_staircase.png").stat().st_size > 10_000


def test_probe_locality_uses_saved_levels(tmp_path, capsys, memory_result):
    mem = tmp_path / "mem.json"
    mem.write_text(json.dumps(memory_result))
    rc = main(["probe", "locality", "--quick", "--no-progress", "--max-bytes", str(4 * 2**20), "--memory-json",
               str(mem), "--plots", str(tmp_path)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "predicted" in text and "time/step (us)" in text
    assert (tmp_path / "locality_cliff.png").exists()


def test_collectives_probe_then_calibrate(tmp_path, capsys):
    pytest.importorskip("torch")
    res = tmp_path / "coll.json"
    assert main(["probe", "collectives", "--quick", "--no-progress", "--ranks", "2", "--ops", "all_reduce",
                 "--max-bytes", "65536", "-o", str(res)]) == 0
    assert "# Avg bus bandwidth" in capsys.readouterr().out
    prof = tmp_path / "prof.yaml"
    assert main(["calibrate", str(res), "--line-rate", "scale_up=10e9", "--name", "local", "-o", str(prof)]) == 0
    cal = calibration_from(str(prof))
    assert cal.name == "local" and cal.tier("scale_up").measured_num_ranks == 2


def test_calibrate_from_nccl_tests_log(tmp_path, capsys, nccl_log_text):
    log = tmp_path / "all_reduce.log"
    log.write_text(nccl_log_text)
    prof = tmp_path / "a100.yaml"
    rc = main(["calibrate", "--nccl-log", str(log), "--system", "dgx-a100", "--device", "A100-SXM4-80GB",
               "--base", "A100-SXM4-80GB", "-o", str(prof), "--json"])
    assert rc == 0
    fits = json.loads(capsys.readouterr().out)["fits"]
    assert any(f["fit"] == "tiers.scale_up.all_reduce" for f in fits)
    assert calibration_from(str(prof)).tier("scale_up").measured_num_ranks == 8


@pytest.mark.parametrize("argv,message", [
    (["calibrate", "-o", "x.yaml"], "needs probe results"),
    (["calibrate", "--nccl-log", "/nonexistent.log", "-o", "x.yaml"], "cannot read"),
    (["calibrate", "--nccl-log", "/dev/null", "--line-rate", "scale_up", "-o", "x.yaml"], "NAME=NUMBER"),
    (["probe", "collectives", "--ranks", "1"], "--ranks"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
