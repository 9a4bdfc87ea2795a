"""Run a sweep's cells on a Dask cluster, writing each row as it arrives so a killed sweep resumes where it was.

Engine: Dask distributed (docs/search.md says why). Without a scheduler address a `LocalCluster` of `workers`
single-threaded worker processes starts on this machine and stops with the sweep; with one, the cells go to
that cluster's workers (which need narrowpath installed). Each cell is one task running `cell.run_cell`; the
largest GPU counts are submitted first, so the longest searches do not finish last.

Rows file (`rows.jsonl` in the output directory): one JSON object per finished cell, appended, flushed and
fsynced as soon as the cell's result reaches the driver. On `resume`, the rows already there are read back
(a last line cut by a kill is dropped and truncated away) and their cells are not run again; without `resume`
an existing, non-empty rows file is refused rather than mixed into.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from narrowpath.errors import NarrowpathError
from narrowpath.search.grid import Cell, Grid

ROWS_FILE = "rows.jsonl"


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepOutcome:
    """The rows of every cell of the grid, in the grid's order, and how many were reused from an earlier run."""

    rows: tuple[dict[str, Any], ...]
    num_reused: int
    num_computed: int
    rows_path: Path


def read_rows(path: Path) -> dict[str, dict[str, Any]]:
    """Rows of an earlier (possibly killed) run by cell key; a torn last line is cut from the file."""
    if not path.exists():
        return {}
    data = path.read_bytes()
    rows: dict[str, dict[str, Any]] = {}
    good_end = 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break  # written in part when the sweep was killed
        try:
            row = json.loads(line)
        except ValueError:
            raise NarrowpathError(f"{path}: line {len(rows) + 1} is not a sweep row (JSON object); "
                                  "give another output directory") from None
        if not isinstance(row, dict) or not isinstance(row.get("key"), str):
            raise NarrowpathError(f"{path}: line {len(rows) + 1} is not a sweep row (no 'key')")
        rows[row["key"]] = row
        good_end += len(line)
    if good_end < len(data):
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
    return rows


_HELD = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def _signals_held():
    """Hold Ctrl-C and SIGTERM back while a cluster starts or stops: Dask cannot close a LocalCluster interrupted
    half-built (its exit handler asserts on the workers' `init` status and prints a traceback), so a signal that
    comes meanwhile waits, blocked, and is delivered - as KeyboardInterrupt or Terminated - the moment the block ends,
    with the cluster built and closable. Threads and processes started meanwhile inherit the block: Dask's event-loop
    thread and the worker processes it spawns never see SIGINT (a terminal's Ctrl-C goes to the whole process group;
    each worker printed a KeyboardInterrupt traceback), as the search's pool workers ignore it; the driver stops them.
    Outside the main thread (no signal handlers run there), or without pthread_sigmask, nothing is held.
    multiprocessing's resource tracker is started first: launching it unblocks SIGINT and SIGTERM in the launching
    thread (resource_tracker.ensure_running's SIG_UNBLOCK), which would hand them back to the workers that thread
    spawns after."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    from multiprocessing import resource_tracker
    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class _Cluster:
    """A Dask client on a scheduler address, or on a LocalCluster started (and stopped) here; build and close it
    inside `_signals_held`."""

    def __init__(self, scheduler: str | None, workers: int):
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise NarrowpathError("sweep needs Dask: pip install 'narrowpath[sweep]' (dask[distributed])") from None
        self.cluster = None
        if scheduler:
            try:
                self.client = Client(scheduler, timeout=30)
            except (OSError, TimeoutError, ValueError) as exc:
                raise NarrowpathError(f"--scheduler {scheduler}: cannot connect ({exc})") from None
        else:  # worker logs silenced: a stop (Ctrl-C, SIGTERM) would print their heartbeat tracebacks; a cell's
            # own failure still reaches the driver through its future
            self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                        dashboard_address=":0", silence_logs=logging.CRITICAL)
            try:
                self.client = Client(self.cluster)
            except BaseException:
                self.cluster.close()
                raise

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def run_sweep(grid: Grid, out_dir: str | Path, *, scheduler: str | None = None, workers: int = 2,
              resume: bool = False, on_row: Callable[[dict[str, Any] | None, int, int], None] | None = None,
              cell_fn: Callable[[Cell], dict[str, Any]] | None = None) -> SweepOutcome:
    """Run every cell not yet in `out_dir`'s rows file; `on_row(row, done, total)` after each written row (and
    once with row None first when rows are reused).

    `cell_fn` defaults to `cell.run_cell` (imported on the workers)."""
    if cell_fn is None:
        from narrowpath.search.cell import run_cell as cell_fn
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / ROWS_FILE
    if not resume and rows_path.exists() and rows_path.stat().st_size > 0:
        raise NarrowpathError(f"-o {out}: holds a sweep already ({rows_path}); add --resume to continue it, "
                              f"or give another directory")
    cells = grid.cells()
    keys = {c.key for c in cells}
    done = {k: r for k, r in read_rows(rows_path).items() if k in keys} if resume else {}
    reused = len(done)
    todo = sorted((c for c in cells if c.key not in done), key=lambda c: -c.num_gpus)
    if on_row is not None and done:
        on_row(None, len(done), len(cells))
    if todo:
        with open(rows_path, "a", encoding="utf-8") as fh:
            _compute(todo, fh, done, len(cells), scheduler, workers, on_row, cell_fn)
    return SweepOutcome(rows=tuple(done[c.key] for c in cells), num_reused=reused, num_computed=len(cells) - reused,
                        rows_path=rows_path)


def _compute(todo: list[Cell], fh, done: dict[str, dict[str, Any]], total: int, scheduler: str | None,
             workers: int, on_row, cell_fn) -> None:
    from dask.distributed import KilledWorker, as_completed
    cluster = None
    run = uuid.uuid4().hex[:12]
    try:
        with _signals_held():  # a Ctrl-C while the cluster starts is raised once it can be closed
            cluster = _Cluster(scheduler, workers)
        futures = [cluster.client.submit(cell_fn, c, key=f"narrowpath-cell-{run}-{i}", pure=False,
                                         priority=len(todo) - i) for i, c in enumerate(todo)]
        cell_of = {f.key: c for f, c in zip(futures, todo)}
        for fut in as_completed(futures):
            try:
                row = fut.result()
            except KilledWorker:
                raise NarrowpathError(f"sweep: cell {cell_of[fut.key].key} killed the workers that ran it (out of "
                                      f"memory?); {len(done)} rows are saved, --resume skips them") from None
            fh.write(json.dumps(row, allow_nan=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            done[row["key"]] = row
            if on_row is not None:
                on_row(row, len(done), total)
    finally:
        if cluster is not None:
            with _signals_held():  # a second Ctrl-C while it stops is raised after
                cluster.close()
