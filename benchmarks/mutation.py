"""Mutation testing of the model stages (issue 10 item 6): how many small deliberate errors in workload/, cost/,
network/ and schedule/ the tests catch.

Each mutant (benchmarks/mutation_mutants.py: mutmut's operators, one edit of one file) is written into a private
copy of src/, and the test files that execute its line (benchmarks/mutation_coverage.py, measured once per source
state) run against it in a fresh process with PYTHONPATH pointing at that copy, `-x`, under a timeout (3x those
files' clean time + 10 s) and an address-space limit. A failing run kills the mutant; a timeout counts as killed
and is reported apart. Mutants judged equivalent (benchmarks/mutation_equivalent.yaml, one line why each) are
excluded from the rate. A full run over every mutant takes hours on two shared cores, so by default a seeded
random sample is run and the kill rate is given with its Wilson 95 % interval.

    python benchmarks/mutation.py --sample 300 --seed 1        # the figures in docs/testing.md
    python benchmarks/mutation.py --all --jobs 2               # every mutant
    python benchmarks/mutation.py --issue                      # the seven errors issue 10 says survived
    python benchmarks/mutation.py --ids ID [ID ...]            # named mutants (e.g. after adding a test)
    python benchmarks/mutation.py --report out/mutation/results.json   # re-summarise with today's equivalents

Needs the `bench` extra (`pip install -e '.[test,bench]'`). Writes out/mutation/results.json and survivors.txt.
Not part of `.ci/run`.
"""
from __future__ import annotations

import argparse
import compileall
import difflib
import hashlib
import json
import math
import os
import py_compile
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    from mutation_mutants import STAGES, Mutant, generate  # noqa: E402
except ModuleNotFoundError as e:  # mutmut (or libcst) missing
    sys.exit(f"benchmarks/mutation.py needs the bench extra ({e.name} is missing): pip install -e '.[test,bench]'")

ROOT = Path(__file__).resolve().parents[1]
POOL = ("tests/workload", "tests/cost", "tests/network", "tests/schedule")
"""The tests a mutant's selection is drawn from: the model stages' own (fast, no corpus sweep)."""
EQUIVALENT = ROOT / "benchmarks" / "mutation_equivalent.yaml"

ISSUE_MUTANTS = (  # (file, original text, mutated text, what issue 10 calls it)
    ("src/narrowpath/workload/moe.py", "3 * elements * A, plan.precision, saved_bytes=2",
     "2 * elements * A, plan.precision, saved_bytes=2", "SwiGLU MLP activation 3 -> 2 tensors"),
    ("src/narrowpath/workload/ops.py", '"bwd", 2.5 * op.flop', '"bwd", 2.0 * op.flop',
     "FlashAttention backward FLOPs 2.5x -> 2.0x"),
    ("src/narrowpath/schedule/step.py", "else cs.bwd_compute_s", "else cs.fwd_compute_s + cs.bwd_compute_s",
     "gradient-sync overlap window widened to forward + backward"),
    ("src/narrowpath/cost/collectives.py", "_TREE_BW = 0.9", "_TREE_BW = 1.0", "tree all-reduce bandwidth +11 %"),
    ("src/narrowpath/cost/collectives.py", "S * (n - r) / n / pm.nic_bw", "S * (n - 1) / n / pm.nic_bw",
     "all-to-all NIC bytes (n - r) -> (n - 1)"),
    ("src/narrowpath/workload/build.py", "(n_send + n_recv) / 2.0", "(n_send + n_recv) / 2.5",
     "pipeline sends /2 -> /2.5"),
    ("src/narrowpath/cost/roofline.py", "flop / (flop + half)", "flop / (flop + half / 2)",
     "GEMM size ramp: F_half halved"),
)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n (Wilson 1927; Agresti & Coull 1998)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha1()
    for p in sorted(paths):
        h.update(str(p.relative_to(ROOT)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def coverage_map(pool: tuple[str, ...], out: Path) -> dict:
    """The line -> test files map of the pool, cached per state of src/ and of the pool's tests."""
    files = list((ROOT / "src").rglob("*.py")) + [ROOT / "tests" / "conftest.py"]
    for p in pool:
        files += list((ROOT / p).rglob("*.py")) if (ROOT / p).is_dir() else [ROOT / p]
    dest = out / f"coverage-{_digest(files)}.json"
    if not dest.exists():
        print(f"measuring which tests cover which lines ({' '.join(pool)}) ...", flush=True)
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mutation_coverage.py"), str(dest), *pool],
                       cwd=ROOT, env=env, check=False, stdout=subprocess.DEVNULL)
    data = json.loads(dest.read_text()) if dest.exists() else {"files": {}}
    if not data["files"]:
        dest.unlink(missing_ok=True)
        sys.exit(f"no test of the pool ran under coverage (collection failed?): run "
                 f"`python benchmarks/mutation_coverage.py out.json {' '.join(pool)}` to see why")
    if data["failed"]:  # timing tests may fail under tracing; the clean baseline run (main) decides
        print(f"  under coverage {len(data['failed'])} test(s) failed: {', '.join(data['failed'])}")
    return data


def select_tests(m: Mutant, cov: dict) -> list[str]:
    """Test files that execute the mutant's statement (all of the pool's for import-time code), fastest first."""
    seconds = cov["files"]
    if m.import_time:
        chosen = set(seconds)
    else:
        by_line = cov["lines"].get(m.path, {})
        chosen = {f for ln in range(m.span[0], m.span[1] + 1) for f in by_line.get(str(ln), ())}
    return sorted(chosen, key=lambda f: (seconds.get(f, 0.0), f))


class Worker:
    """A private copy of src/ (bytecode checked by source hash, so a rewritten file is always recompiled)."""

    def __init__(self, base: Path) -> None:
        self.src = base / "src"
        shutil.copytree(ROOT / "src", self.src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        compileall.compile_dir(self.src, quiet=1, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)

    def run(self, rel: str, source: str, tests: list[str], timeout_s: float, mem_bytes: int) -> tuple[str, float]:
        target = self.src / Path(rel).relative_to("src")
        original = target.read_text()
        target.write_text(source)
        env = dict(os.environ, PYTHONPATH=str(self.src), PYTHONDONTWRITEBYTECODE="1")
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests]

        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=timeout_s, preexec_fn=limit)
            status = "survived" if proc.returncode == 0 else "killed"
            if proc.returncode == 5:
                status = "error"  # no test collected: a selection bug, not a verdict
        except subprocess.TimeoutExpired:
            status = "timeout"
        finally:
            target.write_text(original)
        return status, time.perf_counter() - t0


def run_mutants(jobs: list[tuple[Mutant, str, list[str]]], cov: dict, n_workers: int, mem_bytes: int,
                tmp: Path) -> list[dict]:
    """Run every (mutant, mutated source, tests) job; returns one record per job, in order."""
    workers = [Worker(tmp / f"w{i}") for i in range(n_workers)]
    free = list(workers)
    results: list[dict | None] = [None] * len(jobs)
    t_start = time.perf_counter()
    done = 0

    def one(i: int) -> None:
        nonlocal done
        m, source, tests = jobs[i]
        if not tests:
            results[i] = {**_record(m), "status": "no-tests", "tests": [], "seconds": 0.0,
                          "diff": changed_lines((ROOT / m.path).read_text(), source)}
        else:
            w = free.pop()
            try:
                budget = 3.0 * sum(cov["files"].get(f, 1.0) for f in tests) + 10.0
                status, secs = w.run(m.path, source, tests, budget, mem_bytes)
            finally:
                free.append(w)
            results[i] = {**_record(m), "status": status, "tests": tests, "seconds": round(secs, 2),
                          "diff": changed_lines((ROOT / m.path).read_text(), source)}
        done += 1
        if done % 10 == 0 or done == len(jobs):
            rate = (time.perf_counter() - t_start) / done
            print(f"  {done}/{len(jobs)} mutants run ({rate:.1f} s each)", flush=True)

    with ThreadPoolExecutor(max_workers=n_workers) as pool:
        list(pool.map(one, range(len(jobs))))
    return results  # type: ignore[return-value]


def _record(m: Mutant) -> dict:
    return {"id": m.id, "path": m.path, "line": m.line, "function": m.function, "operator": m.operator,
            "original": m.original, "mutated": m.mutated}


def changed_lines(original: str, mutated: str) -> list[str]:
    """The source lines a mutant changes, as '-old' / '+new' (whitespace squeezed)."""
    out = []
    for ln in difflib.unified_diff(original.splitlines(), mutated.splitlines(), lineterm="", n=0):
        if ln[:1] in "+-" and not ln.startswith(("+++", "---")):
            out.append(ln[0] + " ".join(ln[1:].split()))
    return out


def summarise(records: list[dict], generated: int, equivalent: dict[str, str]) -> dict:
    """Counts, kill rate over the non-equivalent sampled mutants, its Wilson interval, and per-stage rates."""
    def rate(recs):
        judged = [r for r in recs if not (r["status"] in ("survived", "no-tests") and r["id"] in equivalent)]
        killed = sum(r["status"] in ("killed", "timeout") for r in judged)
        lo, hi = wilson(killed, len(judged))
        return {"mutants": len(recs), "judged": len(judged), "killed": killed,
                "kill_rate": killed / len(judged) if judged else 0.0, "ci95": [lo, hi]}
    out = rate(records)
    out.update(generated=generated, sampled=len(records),
               timeouts=sum(r["status"] == "timeout" for r in records),
               survived=sum(r["status"] in ("survived", "no-tests") and r["id"] not in equivalent for r in records),
               no_tests=sum(r["status"] == "no-tests" for r in records),
               errors=sum(r["status"] == "error" for r in records),
               equivalent=sum(r["status"] in ("survived", "no-tests") and r["id"] in equivalent for r in records),
               equivalent_but_killed=[r["id"] for r in records if r["id"] in equivalent
                                      and r["status"] in ("killed", "timeout")])
    out["by_stage"] = {s: rate([r for r in records if r["path"].split("/")[2] == s]) for s in STAGES}
    return out


def print_summary(s: dict, records: list[dict], equivalent: dict[str, str], out: Path) -> None:
    lo, hi = s["ci95"]
    print(f"\nmutants generated {s['generated']}, sampled {s['sampled']}: killed {s['killed']} "
          f"(of which timeouts {s['timeouts']}), survived {s['survived']} (no covering test: {s['no_tests']}), "
          f"equivalent {s['equivalent']}, errors {s['errors']}")
    print(f"kill rate {s['kill_rate']:.1%} of {s['judged']} (95 % Wilson interval {lo:.1%} .. {hi:.1%})")
    for stage, r in s["by_stage"].items():
        print(f"  {stage:9s} {r['killed']:4d}/{r['judged']:<4d} {r['kill_rate']:.1%}")
    if s["equivalent_but_killed"]:
        print(f"listed as equivalent but killed (remove them from {EQUIVALENT.name}): {s['equivalent_but_killed']}")
    lines = []
    for r in records:
        if r["status"] in ("survived", "no-tests"):
            why = f"  [equivalent: {equivalent[r['id']]}]" if r["id"] in equivalent else ""
            diff = "\n".join(f"    {d}" for d in r.get("diff") or [f"-{r['original']}", f"+{r['mutated']}"])
            lines.append(f"{r['id']}  {r['path']}:{r['line']} {r['status']}{why}\n{diff}")
    (out / "survivors.txt").write_text("\n".join(lines) + "\n")
    print(f"survivors: {out / 'survivors.txt'}")


def issue_mutants(cov: dict, mem_bytes: int, tmp: Path) -> int:
    """The seven errors issue 10 found surviving the whole suite, each run against the whole pool."""
    jobs = []
    for rel, old, new, what in ISSUE_MUTANTS:
        text = (ROOT / rel).read_text()
        if text.count(old) != 1:
            sys.exit(f"{rel}: the text {old!r} of '{what}' is not there exactly once (the source moved on)")
        m = Mutant(f"issue:{what}", rel, 0, "-", "text", old, new, (0, 0), True)
        jobs.append((m, text.replace(old, new), sorted(cov["files"], key=lambda f: cov["files"][f])))
    recs = run_mutants(jobs, cov, 1, mem_bytes, tmp)
    for (_, _, _, what), r in zip(ISSUE_MUTANTS, recs):
        print(f"  {r['status']:9s} {what}")
    return 0 if all(r["status"] in ("killed", "timeout") for r in recs) else 1


def stale_equivalents(ids: set[str]) -> list[str]:
    """Ids listed as equivalent that no mutant of today's source carries: their mutated line or function changed,
    so they exclude nothing and their reason may no longer hold."""
    listed = yaml.safe_load(EQUIVALENT.read_text()) or {} if EQUIVALENT.exists() else {}
    return sorted(i for i in listed if i not in ids)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=300, help="mutants drawn at random (default 300)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the sample (numpy Generator)")
    ap.add_argument("--all", action="store_true", help="run every mutant (hours)")
    ap.add_argument("--ids", nargs="+", help="run these mutant ids only")
    ap.add_argument("--issue", action="store_true", help="run the seven mutants of issue 10 item 6")
    ap.add_argument("--list", action="store_true", help="count the mutants per file and stop")
    ap.add_argument("--report", type=Path, help="summarise a results.json again with today's equivalent list")
    ap.add_argument("--jobs", type=int, default=1, help="mutants run at once (default 1)")
    ap.add_argument("--pool", nargs="+", default=list(POOL), help="test paths the selection draws from")
    ap.add_argument("--mem-bytes", type=float, default=4e9, help="address-space limit per test run")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "mutation")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.report:
        old = json.loads(a.report.read_text())
        equivalent = yaml.safe_load(EQUIVALENT.read_text()) or {}
        summary = summarise(old["mutants"], old["summary"]["generated"], equivalent)
        print_summary(summary, old["mutants"], equivalent, a.out)
        return 0
    mutants, files = generate(ROOT)
    stale = stale_equivalents({m.id for m in mutants})
    if stale:
        print(f"{len(stale)} ids of {EQUIVALENT.name} match no mutant today (the line or function changed): re-derive "
              f"or drop them: {' '.join(stale)}", flush=True)
    if a.list:
        for rel in files:
            print(f"{sum(m.path == rel for m in mutants):6d}  {rel}")
        print(f"{len(mutants):6d}  total")
        return 0
    cov = coverage_map(tuple(a.pool), a.out)
    with tempfile.TemporaryDirectory(prefix="narrowpath-mutation-") as tmp:
        status, secs = Worker(Path(tmp) / "clean").run("src/narrowpath/__init__.py",
                                                       (ROOT / "src/narrowpath/__init__.py").read_text(),
                                                       list(a.pool), 600.0, int(a.mem_bytes))
        if status != "survived":
            sys.exit(f"the test pool fails on the unmutated source ({status}); fix that first")
        print(f"the pool passes on the unmutated source ({secs:.1f} s)", flush=True)
        if a.issue:
            return issue_mutants(cov, int(a.mem_bytes), Path(tmp))
        if a.ids:
            known = {m.id: m for m in mutants}
            missing = [i for i in a.ids if i not in known]
            if missing:
                sys.exit(f"unknown mutant ids: {missing}")
            chosen = [known[i] for i in a.ids]
        elif a.all or a.sample >= len(mutants):
            chosen = mutants
        else:
            rng = np.random.default_rng(a.seed)
            chosen = [mutants[i] for i in sorted(rng.choice(len(mutants), size=a.sample, replace=False))]
        print(f"{len(mutants)} mutants generated; running {len(chosen)} "
              f"({'all' if chosen is mutants else f'seed {a.seed}'}), {a.jobs} at a time", flush=True)
        jobs = [(m, files[m.path].source_of(m.id), select_tests(m, cov)) for m in chosen]
        records = run_mutants(jobs, cov, a.jobs, int(a.mem_bytes), Path(tmp))
    equivalent = yaml.safe_load(EQUIVALENT.read_text()) or {} if EQUIVALENT.exists() else {}
    summary = summarise(records, len(mutants), equivalent)
    summary.update(seed=None if a.all or a.ids else a.seed, pool=a.pool)
    (a.out / "results.json").write_text(json.dumps({"summary": summary, "mutants": records}, indent=1))
    print_summary(summary, records, equivalent, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
