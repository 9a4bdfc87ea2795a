"""Which test files exercise which source lines: the map benchmarks/mutation.py selects a mutant's tests from.

Runs the test pool once, in-process, under coverage.py with one dynamic context per test, and writes
{"files": {test file: seconds}, "lines": {source path: {line: [test files]}}}. Run as
`python benchmarks/mutation_coverage.py OUT.json TEST_PATH...` (benchmarks/mutation.py does it, with
PYTHONPATH=src). Tests that spawn the CLI in a subprocess are timed but their coverage is not seen: the selection
is conservative (a mutant only such a test would kill can be counted as a survivor).
"""
from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import coverage
import pytest


class _PerTest:
    """pytest plugin: switch the coverage context to each test's file and time the files."""

    def __init__(self, cov: coverage.Coverage) -> None:
        self.cov = cov
        self.seconds: dict[str, float] = defaultdict(float)
        self.failed: list[str] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        test_file = item.nodeid.split("::", 1)[0]
        self.cov.switch_context(test_file)
        t0 = time.perf_counter()
        yield
        self.seconds[test_file] += time.perf_counter() - t0
        self.cov.switch_context("")

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.append(report.nodeid)


def collect(out: Path, test_paths: list[str], source_dirs: list[str]) -> int:
    cov = coverage.Coverage(source=source_dirs, data_file=None, branch=False)
    plugin = _PerTest(cov)
    cov.start()
    try:
        rc = pytest.main(["-q", "-p", "no:cacheprovider", *test_paths], plugins=[plugin])
    finally:
        cov.stop()
    data = cov.get_data()
    root = Path.cwd().resolve()
    lines: dict[str, dict[int, list[str]]] = {}
    for measured in data.measured_files():
        rel = str(Path(measured).resolve().relative_to(root))
        by_line = data.contexts_by_lineno(measured)
        lines[rel] = {ln: sorted(c for c in ctxs if c) for ln, ctxs in by_line.items() if any(ctxs)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"files": dict(plugin.seconds), "failed": plugin.failed, "lines": lines}))
    return int(rc)


if __name__ == "__main__":
    sys.path.insert(0, str(Path.cwd()))  # as `python -m pytest` does: tests import `tests.…` helpers
    dest, *paths = sys.argv[1:]
    sources = [str(Path("src/narrowpath") / s) for s in ("workload", "cost", "network", "schedule")]
    sys.exit(collect(Path(dest), paths, sources))
