"""`narrowpath sweep` on a real local Dask cluster (2 worker processes): a cell's row is the search's best plan;
rows are written as cells finish, so a sweep killed mid-way resumes without searching its finished cells again
and ends with the rows of an uninterrupted run; SIGTERM stops the cluster and exits 143; `--scheduler` runs the
cells on a cluster started elsewhere. Dask is a test dependency: without it these tests fail, never skip."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from narrowpath.cli.main import main
from narrowpath.errors import NarrowpathError
from narrowpath.search.cell import ROW_FIELDS, run_cell
from narrowpath.search.grid import grid_from_dict
from narrowpath.search.sweep import ROWS_FILE, read_rows, run_sweep

GRID = {"systems": ["dgx-a100", "dgx-h100", "mi300x-platform"], "models": ["gpt-1.7b", "gpt-3.6b", "llama3-8b",
                                                                            "gnmt-lstm"],
        "num_gpus": [1, 2, 4, 8], "gbs": [2], "objective": "time"}
"""3 systems x 4 models x 4 GPU counts = 48 small cells (3,975 plans, ~2 s of searching on 2 workers)."""
VOLATILE = ("search_s",)


def _stable(rows):
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out.update(kids)
            todo += kids
    return out


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(p)
    return alive


def _wait_gone(pids: set[int], timeout_s: float) -> set[int]:
    end = time.monotonic() + timeout_s
    while _alive(pids) and time.monotonic() < end:
        time.sleep(0.1)
    return _alive(pids)


def _start_sweep(grid_path: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "narrowpath", "sweep", str(grid_path), "-o", str(out),
                             "--workers", "2", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _wait_for_rows(proc: subprocess.Popen, rows_path: Path, timeout_s: float = 120) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if rows_path.exists() and rows_path.read_bytes().count(b"\n") >= 1:
            return
        if proc.poll() is not None:
            pytest.fail(f"sweep ended before writing a row: {proc.stderr.read()[-2000:]}")
        time.sleep(0.01)
    pytest.fail("no row written in time")


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """The uninterrupted reference: the API on a local 2-worker cluster."""
    out = tmp_path_factory.mktemp("full")
    outcome = run_sweep(grid_from_dict(GRID), out, workers=2)
    return outcome


def test_cell_row_is_the_best_plan_of_the_search_command(capsys):
    grid = grid_from_dict({**GRID, "systems": ["dgx-h100"], "models": ["gpt-1.7b"], "num_gpus": [8], "gbs": [8]})
    row = run_cell(grid.cells()[0])
    assert main(["search", "--model", "gpt-1.7b", "--system", "dgx-h100", "--gpus", "8", "--gbs", "8", "--top",
                 "1", "--jobs", "1", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"][0]
    assert row["fits"] and row["reason"] is None and set(row) == set(ROW_FIELDS)
    assert {k: best["plan"][k] for k in row["plan"]} == row["plan"]
    assert row["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-12)
    assert row["tokens_per_s_per_gpu"] == pytest.approx(row["tokens_per_s"] / 8)
    tokens_per_step = 8 * 2048
    assert row["tokens_per_s_per_w"] == pytest.approx(tokens_per_step / row["energy_per_step_j"])


def test_cells_without_a_plan_say_why():
    grid = grid_from_dict({**GRID, "systems": ["dgx-a100"], "models": ["llama3-8b", "gnmt-lstm"], "num_gpus": [1, 16],
                           "gbs": [3]})
    rows = {(c.model_label, c.num_gpus): run_cell(c) for c in grid.cells()}
    oom = rows[("llama3-8b", 1)]
    assert not oom["fits"] and "fits in 85.9 GB per GPU" in oom["reason"] and oom["step_time_s"] is None
    inconsistent = rows[("gnmt-lstm", 16)]  # an LSTM varies tp (<= 8), dp and mbs only: 3 sequences cannot split
    assert not inconsistent["fits"] and inconsistent["reason"].startswith("no consistent plan")


def test_torn_last_line_is_dropped_and_cut(tmp_path):
    path = tmp_path / ROWS_FILE
    path.write_text('{"key": "a", "fits": true}\n{"key": "b", "fi')
    assert list(read_rows(path)) == ["a"]
    assert path.read_text() == '{"key": "a", "fits": true}\n'


def test_a_foreign_rows_file_is_refused(tmp_path):
    (tmp_path / ROWS_FILE).write_text("not json\n")
    with pytest.raises(NarrowpathError, match="line 1 is not a sweep row"):
        read_rows(tmp_path / ROWS_FILE)


def test_existing_sweep_needs_resume(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ROWS_FILE).write_text('{"key": "x"}\n')
    assert main(["sweep", str(grid), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    (["--workers", "0"], "--workers: must be >= 1"),
    (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "--workers: sizes the local cluster only"),
])
def test_bad_flags_are_one_line(argv, message, tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    assert main(["sweep", str(grid), "-o", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_output_directory_cannot_overwrite_the_grid(tmp_path, capsys):
    grid = tmp_path / "summary.txt"
    grid.write_text(yaml.safe_dump(GRID))
    assert main(["sweep", str(grid), "-o", str(tmp_path)]) == 2
    assert "is an input" in capsys.readouterr().err


def test_uninterrupted_run_has_one_row_per_cell(full_run):
    rows = full_run.rows
    assert len(rows) == 48 and full_run.num_computed == 48 and full_run.num_reused == 0
    assert len(_lines(full_run.rows_path)) == 48
    assert sum(r["fits"] for r in rows) >= 40
    fits = [r for r in rows if r["fits"]]
    assert all(r["tokens_per_s_per_gpu"] > 0 and r["tokens_per_s_per_w"] > 0 for r in fits)


def test_killed_sweep_resumes_without_searching_finished_cells(full_run, tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    out = tmp_path / "out"
    rows_path = out / ROWS_FILE
    proc = _start_sweep(grid, out, "--no-progress")
    try:
        _wait_for_rows(proc, rows_path)
        family = _descendants(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)  # the driver only: its worker processes must notice and go
        proc.wait(timeout=30)
        assert not _wait_gone(family, 20), "worker processes outlived the killed sweep"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    before = _lines(rows_path)
    finished = [ln for ln in before if ln.endswith("\n")]
    assert 1 <= len(finished) < 48, "the kill came too late to test resuming"

    resumed = subprocess.run([sys.executable, "-m", "narrowpath", "sweep", str(grid), "-o", str(out), "--resume",
                              "--workers", "2", "--json"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    data = json.loads(resumed.stdout)
    after = _lines(rows_path)
    assert after[:len(finished)] == finished  # the finished rows are untouched, not written again
    assert len(after) == 48 and data["num_reused"] == len(finished)
    keys = [json.loads(ln)["key"] for ln in after]
    assert len(set(keys)) == 48  # each cell searched exactly once over the two runs
    assert _stable(data["rows"]) == _stable(full_run.rows)
    assert "48/48 cells" in resumed.stderr  # the progress bar, counting the reused cells
    for name in ("summary.txt", "sweep.png"):
        assert (out / name).stat().st_size > 0


def test_sigterm_stops_the_cluster_and_keeps_the_rows(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({**GRID, "systems": ["dgx-h100"]}))
    out = tmp_path / "out"
    proc = _start_sweep(grid, out, "--no-progress")
    try:
        _wait_for_rows(proc, out / ROWS_FILE)
        family = _descendants(proc.pid)
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, err[-2000:]
    assert "sweep terminated" in err and "--resume" in err and "Traceback" not in err and err.count("\n") == 1
    assert took < 10
    assert not _wait_gone(family, 10)
    assert all(ln.endswith("\n") for ln in _lines(out / ROWS_FILE))


def test_scheduler_address_runs_the_cells_on_that_cluster(tmp_path, capsys):
    import logging

    from dask.distributed import Client, LocalCluster
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({**GRID, "systems": ["dgx-h100"], "models": ["gpt-1.7b"], "num_gpus": [1, 2]}))
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        assert main(["sweep", str(grid), "-o", str(tmp_path / "out"), "--scheduler", cluster.scheduler_address,
                     "--json", "--no-progress"]) == 0
        prefixes = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    data = json.loads(capsys.readouterr().out)
    assert data["num_cells"] == 2 and all(r["fits"] for r in data["rows"])
    assert any(p.startswith("narrowpath-cell") for p in prefixes), prefixes  # the cells ran there


def test_a_plan_label_carries_its_offload_and_partial_recompute():
    """Fifty-sixth session's review: the sweep's best plan at 3 GPUs read `tp1 pp3 cp1 dp1 mbs1 z0` while its row
    offloaded 3 layers' activations — copied as shown, the plan needs 92.5 GB of 85.9 and does not fit."""
    from narrowpath.report.sweep_table import plan_label
    from narrowpath.search.each import describe_plan
    from narrowpath.spec.plan import Plan
    row = {"tp": 1, "pp": 3, "vpp": 1, "cp": 1, "dp": 1, "ep": 1, "mbs": 1, "zero_stage": 0, "recompute": "none",
           "recompute_layers": 0, "offload_layers": 3, "sequence_parallel": False}
    assert plan_label(row) == "tp1 pp3 cp1 dp1 mbs1 z0 off:3"
    assert plan_label({**row, "recompute": "full", "recompute_layers": 2, "offload_layers": 0}) == \
        "tp1 pp3 cp1 dp1 mbs1 z0 rc=full:2"
    p = Plan(tp=1, pp=1, dp=8, gbs=8, recompute="full", recompute_layers=2)
    assert "recompute=full recompute_layers=2" in describe_plan(p) and "offload" not in describe_plan(p)
    assert "offload_layers=3" in describe_plan(Plan(tp=1, pp=1, dp=8, gbs=8, offload_layers=3))
