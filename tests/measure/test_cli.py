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


MEM = {"probe": "memory", "device": "cpu", "level_kernel": "read",
       "levels": [{"name": "L2", "capacity_bytes": 2e6, "bandwidth_bytes_per_s": 1e11,
                   "first_working_set_bytes": 65536, "last_working_set_bytes": 1e6}],
       "samples": [{"kernel": "read", "working_set_bytes": 65536, "bandwidth_bytes_per_s": 1e11}]}


@pytest.mark.parametrize("content, message", [
    (b"[1]", "a JSON list, not an object"),
    (b"", "cannot read probe JSON"),
    (b'{"\xe9": 1}', "not UTF-8"),
    (b'{"probe": "all", "compute": 5}', "a part is a int"),
    (b'{"probe": "memory"}', "memory.level_kernel"),
    (json.dumps({**MEM, "levels": 5}).encode(), "memory.levels: expected a non-empty list"),
    (json.dumps({**MEM, "samples": [{"x": 1}]}).encode(), "memory.samples[0].kernel"),
    (json.dumps({**MEM, "levels": [{**MEM["levels"][0], "bandwidth_bytes_per_s": 0}]}).encode(),
     "memory.levels[0].bandwidth_bytes_per_s: expected a number > 0, got 0"),
    (b'{"probe": "compute", "samples": []}', "compute.samples: expected a non-empty list"),
    (b'{"probe": "compute", "samples": [{"dtype": "fp32"}]}', "compute.samples[0].backend"),
    (b'{"probe": "collectives", "tier": "scale_up", "num_ranks": 2, "samples": 5}', "collectives.samples"),
])
def test_calibrate_bad_probe_result_names_file_and_field(content, message, capsys, tmp_path):
    res = tmp_path / "res.json"
    res.write_bytes(content)
    assert main(["calibrate", str(res), "-o", str(tmp_path / "p.yaml")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1
    assert str(res) in err and message in err, err


def test_calibrate_minimal_memory_result_still_fits(capsys, tmp_path):
    res = tmp_path / "res.json"
    res.write_text(json.dumps(MEM))
    assert main(["calibrate", str(res), "-o", str(tmp_path / "p.yaml")]) == 0
    assert calibration_from(str(tmp_path / "p.yaml")).memory_levels[0].name == "L2"


@pytest.mark.parametrize("argv, message", [
    (["--peak", "fp32=nan"], "--peak: expected NAME=POSITIVE_NUMBER"),
    (["--peak", "fp32=inf"], "--peak: expected NAME=POSITIVE_NUMBER"),
    (["--peak", "fp99=1e12"], "--peak: unknown name 'fp99'"),
    (["--line-rate", "foo=1e9"], "--line-rate: unknown name 'foo'"),
    (["--tier", "foo"], "--tier 'foo'"),
    (["--op", "foo"], "--op 'foo'"),
    (["--ranks", "0"], "--ranks must be >= 2"),
    (["-o", "."], "--output .: is a directory"),
])
def test_calibrate_bad_flags(argv, message, capsys, tmp_path, monkeypatch, nccl_log_text):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.log").write_text(nccl_log_text)
    assert main(["calibrate", "--nccl-log", "a.log", "-o", "p.yaml", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv, message", [
    (["collectives", "--ranks", "100000"], "--ranks must be from 2 to 128"),
    (["collectives", "--tier", "foo"], "--tier 'foo'"),
    (["collectives", "--ops", ","], "--ops: empty name"),
    (["memory", "--repeats", "0"], "--repeats must be >= 1"),
    (["memory", "--max-bytes", "nan"], "--max-bytes must be from"),
    (["memory", "--max-bytes", "1e30"], "--max-bytes must be from"),
    (["memory", "--max-bytes", "1000"], "--max-bytes must be from 262144"),
    (["locality", "--batch", "0"], "--batch must be >= 1"),
    (["memory", "-o", "."], "--output .: is a directory"),
    (["memory", "--plots", "afile"], "--plots afile: exists and is not a directory"),
    (["locality", "--memory-json", "afile"], "afile: cannot read probe JSON"),
    (["locality", "--memory-json", "nolevels.json"], "levels: expected a non-empty list"),
])
def test_probe_bad_flags_fail_before_probing(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "nolevels.json").write_text('{"probe": "memory", "levels": []}')
    assert main(["probe", *argv, "--quick", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_calibrate_fits_each_test_of_a_concatenated_log(tmp_path, capsys, nccl_log_text):
    """An all_reduce then an all_gather test in one file (8 ranks each): two fits, each with 8 ranks; merged they
    were one all_gather fit with measured_num_ranks 16 over the rows of both."""
    import yaml
    both = nccl_log_text + "\n" + nccl_log_text.replace("all_reduce_perf", "all_gather_perf")
    (tmp_path / "both.log").write_text(both)
    out = tmp_path / "p.yaml"
    assert main(["calibrate", "--nccl-log", str(tmp_path / "both.log"), "--line-rate", "scale_up=300e9",
                 "-o", str(out), "--json"]) == 0
    fits = json.loads(capsys.readouterr().out)["fits"]
    assert [(f["fit"], f["points"]) for f in fits] == [("tiers.scale_up.all_reduce", 5),
                                                       ("tiers.scale_up.all_gather", 5)]
    tier = yaml.safe_load(out.read_text())["profiles"][0]["tiers"]["scale_up"]
    assert tier["measured_num_ranks"] == 8
    assert "test of line 1: all_reduce" in yaml.safe_load(out.read_text())["profiles"][0]["sources"]["tiers.scale_up"]


def _one_rank(text: str) -> str:
    """The log as `all_reduce_perf -g 1` prints it: one `# Rank` line."""
    return "".join(line for line in text.splitlines(keepends=True) if "#  Rank" not in line or "Rank  0" in line)


def test_a_one_rank_log_is_refused_in_one_line(tmp_path, capsys, nccl_log_text):
    """One rank: bus factor 2(n-1)/n = 0 and ring steps 2(n-1) = 0, so the alpha fit divided by zero (a traceback,
    exit 1). Now one line naming the log and its rank count, exit 2."""
    from tests.cli.one_line import one_line_error
    (tmp_path / "ar1.log").write_text(_one_rank(nccl_log_text))
    one_line_error(capsys, ["calibrate", "--nccl-log", str(tmp_path / "ar1.log"), "--line-rate", "scale_up=450e9",
                            "-o", str(tmp_path / "p.yaml")], f"{tmp_path / 'ar1.log'}: a test over 1 rank",
                   "its one '# Rank' line")
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("flags, fragment", [
    (["--ranks", "4"], "the log lists 8 ranks (its '# Rank' lines), not --ranks 4"),
    (["--op", "all_gather"], "the log's test is all_reduce (its 'Collective test starting' line), not --op "
                             "all_gather"),
])
def test_flags_that_contradict_the_log_are_refused(tmp_path, capsys, nccl_log_text, flags, fragment):
    """tests/network/data/all_reduce_perf_8gpu.log fitted as --ranks 4 gave bw_efficiency 0.4027 (factor 2*3/4 =
    1.5 instead of 2*7/8 = 1.75: 0.4698 x 1.5 / 1.75 = 0.4027), and --op all_gather fitted an all_reduce as an
    all_gather, silently."""
    from tests.cli.one_line import one_line_error
    (tmp_path / "a.log").write_text(nccl_log_text)
    one_line_error(capsys, ["calibrate", "--nccl-log", str(tmp_path / "a.log"), "--line-rate", "scale_up=300e9",
                            "-o", str(tmp_path / "p.yaml"), *flags], f"{tmp_path / 'a.log'}: ", fragment)


def test_flags_stand_in_for_what_a_log_does_not_say(tmp_path, capsys, nccl_log_text):
    """A log naming no test and listing no ranks takes --op and --ranks; flags equal to what a log says pass."""
    import yaml
    bare = "".join(line for line in nccl_log_text.splitlines(keepends=True)
                   if "#  Rank" not in line and "Collective test starting" not in line)
    (tmp_path / "bare.log").write_text(bare)
    (tmp_path / "a.log").write_text(nccl_log_text)
    out = tmp_path / "p.yaml"
    assert main(["calibrate", "--nccl-log", str(tmp_path / "bare.log"), "--nccl-log", str(tmp_path / "a.log"),
                 "--op", "all_reduce", "--ranks", "8", "--line-rate", "scale_up=300e9", "-o", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["profiles"][0]["tiers"]["scale_up"]["measured_num_ranks"] == 8
    capsys.readouterr()
