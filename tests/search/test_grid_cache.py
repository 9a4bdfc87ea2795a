"""The caches the bulk pricing keeps across calls change no number.

`Exact._grid` keeps every grid cell's value for the engine's life (search.exact._Cells), `Layout` keeps each
transfer's time (parts.Layout.time_s) and adds the phase sums up in Python floats, and `unique_rows` codes columns by
their offsets: here each is held, bit for bit, to the plain computation it replaces (the loop over every cell, the
sums in arrays, the columns coded by rank), and an engine that has priced other rows first, or a process that has
searched another space first, gives what a fresh one gives.
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import narrowpath
from narrowpath.catalog import load_scenario
from narrowpath.search import SearchSpace, search
from narrowpath.search.bulk import Bulk, _ranked_unique_rows, unique_rows
from narrowpath.search.each import scenario_of
from narrowpath.search.exact import _OUTER, Exact
from narrowpath.search.parts import SLOT_ATTENTION, SLOT_PAIR, SLOT_PHASE, SLOT_SHARE, SUMS, Layout, Parts
from narrowpath.search.table import build_table
from tests.search.scenarios import mixtral16


# ---- the plain computations the caches replace ------------------------------------------------------------------
def _plain_grid(self, part, rows, J, row_keys, var_keys, lay, fn, value="phase_sums", width=SUMS):
    """Exact._grid before its cache: fn and the layout's value at every distinct cell of every call."""
    P, c = self.p, self.b.cols
    rk = [c[k][rows] for k in _OUTER] + list(row_keys)
    vk = [self.t.comm["plc"][J]] + list(var_keys)
    rfirst, ri = _ranked_unique_rows(*rk)
    vfirst, vi = _ranked_unique_rows(*vk)
    out = np.zeros((len(rfirst), len(vfirst), width))
    rkeys = list(zip(*(np.asarray(k)[rfirst].tolist() for k in rk)))
    vkeys = list(zip(*(np.asarray(k)[vfirst].tolist() for k in vk)))
    for u, i in enumerate(rfirst):
        for v, j in enumerate(vfirst):
            tid = fn(rkeys[u] + vkeys[v], int(rows[i]), int(J[j]))
            tm = P.templates[tid]
            if tm.transfers:
                out[u, v] = getattr(P.layout_list[int(lay[i, j])], value)(tid, tm)
    return out[ri[:, None], vi[None, :]]


def _plain_phase_sums(self, tid, tm):
    """Layout.phase_sums added up in an array, every transfer priced afresh (no per-layout time cache)."""
    v = self.sums.get(tid)
    if v is None:
        v = np.zeros(SUMS)
        for tr, c, ph, ty in zip(tm.transfers, tm.count, tm.phase, tm.type):
            t = self._time_s(tr) * c
            v[ph] += t
            if ty == SLOT_PHASE:
                v[3 + ph] += t
            elif ty == SLOT_ATTENTION:
                v[6 + ph] += t
            elif ty == SLOT_PAIR:
                v[9 + ph] += t
            elif ty == SLOT_SHARE:
                v[12 + ph] += t
        self.sums[tid] = v
    return v


def _plain(m: pytest.MonkeyPatch) -> None:
    m.setattr(Exact, "_grid", _plain_grid)
    m.setattr(Layout, "phase_sums", _plain_phase_sums)
    m.setattr(Layout, "time_s", Layout._time_s)


# ---- spaces ----------------------------------------------------------------------------------------------------------
def _llama_full():
    scn = load_scenario("llama3-8b-h100-8")
    return scn, SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, extent="full")


def _mixtral_basic():
    scn = mixtral16()
    return scn, SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, extent="basic")


def _mixtral_full():
    """16 GPUs on two servers, every placement order: a template on placements whose groups span differently."""
    scn = mixtral16()
    return scn, SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, {"mbs": 1}, extent="full")


def _engine(scn, space) -> tuple[Bulk, Exact]:
    bulk = Bulk(build_table(space), Parts(scenario_of(scn, space, space.base), None))
    return bulk, Exact(bulk)


def _rows(bulk: Bulk, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    S = bulk.t.num_structural
    return np.sort(rng.choice(S, size=min(n, S), replace=False))


def _price(ex: Exact, sp, chunks) -> list[tuple[bytes, bytes, bytes]]:
    """(plan indices, step times, lower bounds) of every chunk of positions in `sp`, as bytes."""
    out = []
    for at in chunks:
        idx, t = ex.price_rows(sp, at)
        out.append((idx.tobytes(), t.tobytes(), ex.lower_rows(sp, at).tobytes()))
    return out


CASES = {"llama3-8b full": (_llama_full, 400), "mixtral16 basic": (_mixtral_basic, 300),
         "mixtral16 full": (_mixtral_full, 300)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cached_grid_is_the_plain_loop_bit_for_bit(name, monkeypatch):
    """The same chunks priced in the same order by the plain loop and by the cache (whose later chunks and second
    pass read cells the earlier ones stored) give the same bits; so do the placements' phase sums."""
    case, n = CASES[name]
    scn, space = case()
    chunks = np.array_split(np.arange(n), 5)
    with monkeypatch.context() as m:
        _plain(m)
        bulk, ex = _engine(scn, space)
        rows = _rows(bulk, n, 7)
        sp = bulk.structural(rows)
        want = _price(ex, sp, chunks) + _price(ex, sp, chunks[::-1])
        want_sums = [{k: v.tobytes() for k, v in L.sums.items()} for L in ex.p.layout_list]
    bulk, ex = _engine(scn, space)
    sp = bulk.structural(rows)
    assert _price(ex, sp, chunks) + _price(ex, sp, chunks[::-1]) == want
    assert [{k: v.tobytes() for k, v in L.sums.items()} for L in ex.p.layout_list] == want_sums
    assert ex._cells, "the grid keeps its cells"


@pytest.mark.parametrize("name", sorted(CASES))
def test_rows_priced_after_others_are_priced_as_alone(name):
    """An engine that has priced other rows first (its cells, memos and layouts filled by them) prices a set of rows
    as an engine that prices only those rows."""
    case, n = CASES[name]
    scn, space = case()
    bulk, ex = _engine(scn, space)
    rows = _rows(bulk, n, 11)
    first, later = rows[: n // 2], rows[n // 2:]
    sp = bulk.structural(np.concatenate([first, later]))
    _price(ex, sp, [np.arange(first.size)])
    after = _price(ex, sp, [np.arange(first.size, rows.size)])
    bulk2, ex2 = _engine(scn, space)
    alone = _price(ex2, bulk2.structural(later), [np.arange(later.size)])
    assert after == alone


def _same(x, y, path="result"):
    """x == y, floats and arrays bit for bit (a SearchResult's elapsed time skipped)."""
    if isinstance(x, float):
        assert isinstance(y, float) and np.float64(x).tobytes() == np.float64(y).tobytes(), path
    elif isinstance(x, np.ndarray):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), path
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        assert type(x) is type(y), path
        for f in dataclasses.fields(x):
            if f.name != "elapsed_s":
                _same(getattr(x, f.name), getattr(y, f.name), f"{path}.{f.name}")
    elif isinstance(x, (list, tuple)):
        assert type(x) is type(y) and len(x) == len(y), path
        for i, (u, v) in enumerate(zip(x, y)):
            _same(u, v, f"{path}[{i}]")
    elif isinstance(x, dict):
        assert list(x) == list(y), path
        for k in x:
            _same(x[k], y[k], f"{path}[{k!r}]")
    else:
        assert x == y, (path, x, y)


_ALONE = """
import pickle, sys
from tests.search.test_grid_cache import CASES
from narrowpath.search import search
scn, space = CASES[sys.argv[1]][0]()
with open(sys.argv[2], "wb") as f:
    pickle.dump(search(scn, space), f)
"""


def test_two_spaces_in_one_process_are_searched_as_each_alone(tmp_path):
    """Two spaces searched one after the other in this process (each in both orders) give what each gives searched
    alone in a fresh process."""
    src = os.path.dirname(os.path.dirname(narrowpath.__file__))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, root]))
    names = sorted(CASES)
    alone = {}
    for name in names:
        out = tmp_path / f"{len(alone)}.pkl"
        subprocess.run([sys.executable, "-c", _ALONE, name, str(out)], env=env, cwd=root, check=True)
        with open(out, "rb") as f:
            alone[name] = pickle.load(f)
    for order in (names, names[::-1]):
        for name in order:
            scn, space = CASES[name][0]()
            _same(search(scn, space), alone[name])


COLUMNS = [
    lambda rng, n: rng.integers(0, 5, n),
    lambda rng, n: rng.integers(-3, 3, n).astype(np.int8),
    lambda rng, n: rng.random(n) < 0.5,
    lambda rng, n: rng.choice([1, 2, 4, 8, 1024], n).astype(np.int16),
    lambda rng, n: rng.integers(0, 2 ** 40, n),  # wide: with the others, past the offsets' 2**62
    lambda rng, n: np.full(n, 7, dtype=np.int64),
]


@pytest.mark.parametrize("seed", range(40))
def test_unique_rows_is_the_rank_coded_one(seed):
    """unique_rows (offset codes when they fit) gives the same first rows and inverse as the rank codes."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([1, 2, 17, 300]))
    cols = [COLUMNS[int(k)](rng, n) for k in rng.integers(0, len(COLUMNS), int(rng.integers(1, 7)))]
    first, inv = unique_rows(*cols)
    f0, i0 = _ranked_unique_rows(*cols)
    assert first.tobytes() == f0.tobytes() and inv.tobytes() == i0.tobytes()
    assert first.dtype == f0.dtype and inv.dtype == i0.dtype


def test_unique_rows_without_rows():
    first, inv = unique_rows(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int8))
    f0, i0 = _ranked_unique_rows(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int8))
    assert first.tobytes() == f0.tobytes() and inv.tobytes() == i0.tobytes() and first.size == 0
