"""Files of several jobs are told apart (distributedInfo, file-name pattern, time) and each job is analysed;
a file claiming a rank its job already has is an error naming both; `read_trace` wants one job."""
from __future__ import annotations

import json
import shutil

import pytest

from narrowpath.cli.main import main
from narrowpath.errors import TraceFormatError
from narrowpath.trace.jobs import name_pattern
from narrowpath.trace.reader import read_jobs, read_trace

SHARED = ("a100-16rank-rank0.json.gz", "a100-ddp-2rank-rank0.json.gz", "pp-128rank-sampled-rank0.json.gz",
          "pp-128rank-sampled-rank1.json.gz")


def _rank_file(path, rank, world, t0_us, *, info=True):
    """A one-kernel rank of a `world`-rank job whose events start at t0_us (Unix µs)."""
    data = {"deviceProperties": [{"name": "x"}], "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": t0_us + 10, "dur": 5,
         "args": {"stream": 7, "correlation": 1}}]}
    if info:
        data["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def shared_dir(r16_path, ddp_path, pp_paths, tmp_path):
    for p in (r16_path, ddp_path, *pp_paths):
        shutil.copy(p, tmp_path / p.name)
    return tmp_path


@pytest.mark.parametrize("name, pattern", [
    ("a100-16rank-rank0.json.gz", "a100-16rank-rank*.json.gz"), ("rank12.json", "rank*.json"),
    ("job_rank-3_trace.json", "job_rank-*_trace.json"), ("host1.12345.pt.trace.json", None)])
def test_name_pattern_masks_the_last_rank_number(name, pattern):
    assert name_pattern(f"/some/dir/{name}") == pattern


def test_the_shared_traces_are_three_jobs(shared_dir):
    jobs = read_jobs(shared_dir)
    assert [[r.path.rsplit("/", 1)[1] for r in j.ranks] for j in jobs] == [[SHARED[0]], [SHARED[1]], list(SHARED[2:])]
    assert [[r.rank for r in j.ranks] for j in jobs] == [[0], [0], [0, 1]]
    with pytest.raises(TraceFormatError, match=r"hold 3 jobs \(1 of 16 ranks from a100-16rank-rank\*.json.gz; .*"
                                               r"2 of 128 ranks from pp-128rank-sampled-rank\*.json.gz\)"):
        read_trace(shared_dir)


def test_cli_analyses_each_job(shared_dir, capsys):
    assert main(["trace", str(shared_dir)]) == 0
    out = capsys.readouterr().out
    assert [ln for ln in out.splitlines() if ln.startswith("=== job")] == [
        "=== job 1: 1 of 16 ranks from a100-16rank-rank*.json.gz ===",
        "=== job 2: 1 of 2 ranks from a100-ddp-2rank-rank*.json.gz ===",
        "=== job 3: 2 of 128 ranks from pp-128rank-sampled-rank*.json.gz ==="]
    assert main(["trace", str(shared_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [len(j["ranks"]) for j in data["jobs"]] == [1, 1, 2] and data["files_written"] == []
    assert data["jobs"][2]["files"][1].endswith(SHARED[3]) and data["jobs"][2]["stragglers"] is not None
    # one job alone keeps the single-job layout
    assert main(["trace", str(shared_dir / SHARED[1]), "--json"]) == 0
    assert "jobs" not in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("flag", ["--against", "--timeline"])
def test_one_job_flags_refuse_several_jobs(shared_dir, flag, tmp_path, capsys):
    value = "llama3-8b-h100-8" if flag == "--against" else str(tmp_path / "out" / "t.json")
    assert main(["trace", str(shared_dir), flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"narrowpath: error: {flag}: the traces hold 3 jobs") and len(err.splitlines()) == 1


@pytest.mark.parametrize("step, which", [(551, "jobs 1, 3 have it"), (4, "job 2 has it"), (9999, "no job has it")])
def test_step_refuses_several_jobs_and_says_which_have_it(shared_dir, step, which, capsys):
    """A ProfilerStep number belongs to one job: --step on several jobs is refused up front like --against and
    --timeline, naming the jobs that have the step (it used to fail on the first job without it, job 2, after
    analysing job 1, with no report at all)."""
    assert main(["trace", str(shared_dir), "--step", str(step)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"narrowpath: error: --step {step}: the traces hold 3 jobs") and len(err.splitlines()) == 1
    assert f"ProfilerStep#{step}: {which}; give the files of one job" in err, err


def test_step_missing_in_one_job_lists_its_steps(shared_dir, capsys):
    assert main(["trace", str(shared_dir / SHARED[1]), "--step", "551"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--step 551: no ProfilerStep#551 on every rank of the trace (steps there: " in err, err
    assert len(err.splitlines()) == 1


def test_two_jobs_at_the_same_time_are_told_apart_by_their_names(tmp_path):
    for job in ("jobA", "jobB"):
        for rank in (0, 1):
            _rank_file(tmp_path / f"{job}-rank{rank}.json", rank, 2, 1_700_000_000_000_000)
    jobs = read_jobs(tmp_path)
    assert [sorted(r.path.rsplit("/", 1)[1] for r in j.ranks) for j in jobs] == [
        ["jobA-rank0.json", "jobA-rank1.json"], ["jobB-rank0.json", "jobB-rank1.json"]]


def test_unnumbered_files_group_by_time_and_world_size(tmp_path):
    """Host-named files: the two that ran together are one job; one from a day later, or of another world size,
    is another."""
    _rank_file(tmp_path / "node1.111.pt.trace.json", 0, 2, 1_700_000_000_000_000)
    _rank_file(tmp_path / "node2.222.pt.trace.json", 1, 2, 1_700_000_000_000_500)
    _rank_file(tmp_path / "node3.333.pt.trace.json", 0, 2, 1_700_086_400_000_000)
    _rank_file(tmp_path / "node4.444.pt.trace.json", 0, 4, 1_700_000_000_000_000)
    jobs = read_jobs(tmp_path)
    assert sorted(sorted(r.path.rsplit("/", 1)[1][:5] for r in j.ranks) for j in jobs) == [
        ["node1", "node2"], ["node3"], ["node4"]]


def test_ranks_from_file_order_are_numbered_within_their_job(tmp_path):
    _rank_file(tmp_path / "a.json", 0, 1, 1_700_000_000_000_000, info=False)
    _rank_file(tmp_path / "b.json", 0, 1, 1_700_086_400_000_000, info=False)
    jobs = read_jobs(tmp_path)
    assert [[(r.rank, r.rank_source) for r in j.ranks] for j in jobs] == [[(0, "file order")], [(0, "file order")]]
