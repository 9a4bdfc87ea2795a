"""Speed of the HTML report and of compare (issue 14 targets: `narrowpath report` of the default scenario ≤ 3 s end
to end; `narrowpath compare` of the default scenario with its top what-if ≤ 2 s). End to end = a fresh process,
as a user runs it (interpreter start and imports included). Also the in-process time of rendering each catalog
scenario's page and its size. Run: python benchmarks/bench_report.py"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from narrowpath.analysis import analyze
from narrowpath.catalog import load_scenario, scenario_ids
from narrowpath.report.html_report import report_html, shipped_cases


def end_to_end(argv: list[str], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "narrowpath", *argv], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    t0 = time.perf_counter()
    n = len(shipped_cases())
    print(f"read the shipped validation corpora ({n} cases, once per process)  {time.perf_counter() - t0:6.2f} s")
    for sid in scenario_ids():
        a = analyze(load_scenario(sid))
        t0 = time.perf_counter()
        html = report_html(a)
        dt = time.perf_counter() - t0
        print(f"render in-process  {sid:24s} {dt * 1e3:7.1f} ms, {len(html) / 1e3:7.1f} kB")
    with tempfile.TemporaryDirectory() as d:
        report = end_to_end(["report", "-o", str(Path(d) / "r.html")])
        html_cmp = end_to_end(["compare", "llama3-70b-h100-256", "--what-if", "top", "--html", str(Path(d) / "c.html")])
    cmp_text = end_to_end(["compare", "llama3-70b-h100-256", "--what-if", "top"])
    cmp_json = end_to_end(["compare", "llama3-70b-h100-256", "--what-if", "top", "--json"])
    print(f"narrowpath report -o r.html                       {report:6.2f} s  (target <= 3 s)")
    print(f"narrowpath compare DEFAULT --what-if top          {cmp_text:6.2f} s  (target <= 2 s)")
    print(f"narrowpath compare DEFAULT --what-if top --json   {cmp_json:6.2f} s  (target <= 2 s)")
    print(f"narrowpath compare DEFAULT --what-if top --html   {html_cmp:6.2f} s  (target <= 2 s)")
    ok = report <= 3.0 and max(cmp_text, cmp_json, html_cmp) <= 2.0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
