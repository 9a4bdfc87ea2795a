"""Two source trees' searches side by side: the same numbers, and how long each takes.

For each scenario, each tree runs the search of the full space (or, with `--extent basic`, the basic one) in a fresh
process (imports and the catalog loaded, one
small unrelated search to load the calibration profiles, as bench_search.py does, then the timed search),
`--rounds` times, the trees interleaved (old, new, old, new, ...) so the machine's load falls on both alike.
Every run's result is compared with the first old run's, exactly: every field of the SearchResult but its
elapsed time — the ranked plans with their step times and memory, the counts — floats bit for bit. Reports the
median seconds of each tree and their ratio.

    python benchmarks/compare_search_trees.py OLD_SRC NEW_SRC [--rounds 3] [--scenario NAME ...] [--extent basic]

(OLD_SRC, NEW_SRC: folders holding the `narrowpath` package, e.g. a `git archive` of the base commit's src.)
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import statistics
import struct
import subprocess
import sys
import tempfile

import numpy as np

SCENARIOS = ["gpt3-175b-a100-1024", "llama3-405b-h100-16k"]

_RUN = r"""
import pickle, sys, time
import narrowpath
from narrowpath.catalog import load_scenario
from narrowpath.search import SearchSpace, search
name, out, extent = sys.argv[1], sys.argv[2], sys.argv[3]
warm = load_scenario("llama3-8b-h100-8")
search(warm, SearchSpace(warm.model, warm.system, 8, warm.plan.gbs, warm.plan, {"tp": 8, "cp": 1, "mbs": 1}))
scn = load_scenario(name)
space = SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, extent=extent)
t0 = time.perf_counter()
r = search(scn, space)
seconds = time.perf_counter() - t0
with open(out, "wb") as f:
    pickle.dump({"result": r, "seconds": seconds, "package": narrowpath.__file__}, f)
"""


def _run(src: str, name: str, out: str, extent: str = "full") -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    subprocess.run([sys.executable, "-c", _RUN, name, out, extent], env=env, check=True)
    with open(out, "rb") as f:
        got = pickle.load(f)
    if not got["package"].startswith(os.path.abspath(src)):
        raise SystemExit(f"{src}: imported {got['package']} instead")
    return got


def same(x, y, path: str = "result") -> None:
    """Raise AssertionError where x and y differ (floats and arrays bit for bit; a SearchResult's elapsed_s is
    skipped)."""
    if isinstance(x, float) and isinstance(y, float):
        assert struct.pack("<d", x) == struct.pack("<d", y), (path, x, y)
    elif isinstance(x, np.ndarray):
        assert isinstance(y, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape and \
            x.tobytes() == y.tobytes(), path
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        assert type(x) is type(y), (path, type(x), type(y))
        for f in dataclasses.fields(x):
            if f.name != "elapsed_s":
                same(getattr(x, f.name), getattr(y, f.name), f"{path}.{f.name}")
    elif isinstance(x, (list, tuple)):
        assert type(x) is type(y) and len(x) == len(y), (path, len(x), len(y))
        for i, (u, v) in enumerate(zip(x, y)):
            same(u, v, f"{path}[{i}]")
    elif isinstance(x, dict):
        assert type(x) is type(y) and list(x) == list(y), path
        for k in x:
            same(x[k], y[k], f"{path}[{k!r}]")
    else:
        assert type(x) is type(y) and x == y, (path, x, y)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scenario", action="append")
    ap.add_argument("--extent", choices=("full", "basic"), default="full")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.scenario or SCENARIOS:
            times: dict[str, list[float]] = {"old": [], "new": []}
            ref = None
            for i in range(args.rounds):
                for tree in ("old", "new"):
                    got = _run(getattr(args, tree), name, os.path.join(tmp, f"{tree}{i}.pkl"), args.extent)
                    times[tree].append(got["seconds"])
                    if ref is None:
                        ref = got["result"]
                    else:
                        same(ref, got["result"])
                    print(f"  {name} round {i + 1} {tree}: {got['seconds']:.2f} s", flush=True)
            old, new = statistics.median(times["old"]), statistics.median(times["new"])
            print(f"{name} ({args.extent}): identical results ({ref.num_candidates:,} candidates, {ref.num_priced:,} priced, "
                  f"{len(ref.ranked)} ranked, best {ref.ranked[0].step_time_s!r} s); median old {old:.2f} s, "
                  f"new {new:.2f} s, old/new {old / new:.2f}x", flush=True)


if __name__ == "__main__":
    main()
