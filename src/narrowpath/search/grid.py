"""The grid of a design-space sweep: systems × models × GPU counts × global batches × objectives, one cell each.

A GRID file (YAML or JSON) holds exactly these keys:

    systems:   [dgx-a100, my-system.yaml]     # catalog ids or system files (YAML/JSON, relative to the grid)
    models:    [llama3-8b, {hf_config: config.json, seq_len: 4096}]   # catalog ids, model files, or a
                                              # HuggingFace config.json with its training sequence length
    num_gpus:  [8, 16, 64]                    # GPU counts
    gbs:       [256, 512]                     # global batch sizes, sequences per step
    objective: time                           # time | energy | memory, or a list of them

Every system and model is resolved once, here, so a bad entry is one error naming its field
(`grid.systems[1]: unknown system 'dgx-a10'; nearest: ...`) before any cell runs, and the cells carry the
resolved specs (a remote worker needs neither the catalog files nor the grid's neighbours). A cell's `key`
names what decides its result, so a resumed sweep recognises the cells it already finished.
"""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from narrowpath.errors import NarrowpathError, SpecError
from narrowpath.search.rank import OBJECTIVES
from narrowpath.spec.model import Model
from narrowpath.spec.system import System

GRID_KEYS = ("systems", "models", "num_gpus", "gbs", "objective")
MAX_CELLS = 100_000
"""More cells than this is refused up front: at ~0.1–30 s a search, a larger grid is days of CPU time."""
MAX_GBS = 1 << 30
"""Global batch bound, sequences (~1e9; published runs use at most tens of thousands)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    """One search of the sweep: a system, a model, a GPU count, a global batch and an objective."""

    system_label: str
    """The grid's entry: a catalog id or a file name as written in the grid."""
    model_label: str
    system: System
    model: Model
    num_gpus: int
    gbs: int
    """Global batch, sequences per step."""
    objective: str

    @property
    def key(self) -> str:
        """What decides the cell's result, as one canonical string (rows are matched on it when resuming)."""
        return json.dumps([self.system_label, self.model_label, self.num_gpus, self.gbs, self.objective])


@dataclass(frozen=True, slots=True, kw_only=True)
class Grid:
    """A validated grid; `cells()` lists its cells in a fixed order (systems, models, GPUs, batches, objectives)."""

    systems: tuple[tuple[str, System], ...]
    models: tuple[tuple[str, Model], ...]
    num_gpus: tuple[int, ...]
    gbs: tuple[int, ...]
    objectives: tuple[str, ...]

    @property
    def num_cells(self) -> int:
        return len(self.systems) * len(self.models) * len(self.num_gpus) * len(self.gbs) * len(self.objectives)

    def cells(self) -> list[Cell]:
        return [Cell(system_label=sl, model_label=ml, system=s, model=m, num_gpus=n, gbs=b, objective=o)
                for (sl, s), (ml, m), n, b, o in itertools.product(self.systems, self.models, self.num_gpus,
                                                                   self.gbs, self.objectives)]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _list(field: str, value: Any, *, mappings: bool = False) -> list[Any]:
    """A non-empty list without repeats (a scalar, or a mapping where `mappings` allows them, counts as a list of
    one)."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise SpecError(field, "must list at least one value")
    seen: set[str] = set()
    for i, item in enumerate(items):
        if isinstance(item, list) or (isinstance(item, dict) and not mappings):
            raise SpecError(f"{field}[{i}]", f"must be a single value, got {_short(item)}")
        if repr(item) in seen:
            raise SpecError(f"{field}[{i}]", f"{_short(item)} is listed twice")
        seen.add(repr(item))
    return items


def _ints(field: str, value: Any, maximum: int) -> tuple[int, ...]:
    from narrowpath.spec._check import positive_int
    return tuple(positive_int(f"{field}[{i}]", v, maximum=maximum) for i, v in enumerate(_list(field, value)))


def _labels(field: str, value: Any) -> list[str]:
    items = _list(field, value)
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise SpecError(f"{field}[{i}]", f"must be a catalog id or a file name, got {_short(item)}")
    return items


def _model_entries(value: Any) -> list[tuple[str, Any]]:
    """(label, entry) of each model: a catalog id or file name (its own label), or `{hf_config: FILE, seq_len: N}`
    (a HuggingFace config states no training length) labelled by its `name`, else `FILE@seq_len`."""
    out = []
    for i, item in enumerate(_list("grid.models", value, mappings=True)):
        if isinstance(item, dict):
            if not isinstance(item.get("hf_config"), str):
                raise SpecError(f"grid.models[{i}]", "a mapping must be {hf_config: FILE, seq_len: N[, name: LABEL]}")
            label = item.get("name") or f"{item['hf_config']}@{item.get('seq_len')}"
            out.append((str(label), item))
        elif not isinstance(item, str) or not item.strip():
            raise SpecError(f"grid.models[{i}]", f"must be a catalog id, a file name or {{hf_config: FILE, seq_len: "
                                                 f"N}}, got {_short(item)}")
        else:
            out.append((item, item))
    return out


def _resolved(field: str, label: Any, resolve, base_dir: Path) -> Any:
    try:
        return resolve(label, base_dir)
    except SpecError as exc:
        raise SpecError(f"{field}: {exc.field}" if exc.field else field, exc.detail) from None
    except NarrowpathError as exc:
        raise SpecError(field, str(exc)) from None


def grid_from_dict(data: Any, base_dir: Path | None = None) -> Grid:
    """Validate a grid mapping; files named in it are taken relative to `base_dir` (default: the current one)."""
    from narrowpath.catalog.resolve import resolve_model, resolve_system
    from narrowpath.spec.scenario import MAX_GPUS
    if not isinstance(data, Mapping):
        raise SpecError("grid", f"must be a mapping with keys {', '.join(GRID_KEYS)}, got {type(data).__name__}")
    unknown = [k for k in data if k not in GRID_KEYS]
    if unknown:
        raise SpecError(f"grid.{str(unknown[0])[:40]}", f"unknown key; the keys are {', '.join(GRID_KEYS)}")
    for k in GRID_KEYS:
        if k not in data:
            raise SpecError(f"grid.{k}", "is required")
    lists = {k: _list(f"grid.{k}", data[k], mappings=k == "models") for k in GRID_KEYS}
    num_cells = 1
    for items in lists.values():
        num_cells *= len(items)
    if num_cells > MAX_CELLS:  # before resolving anything: a grid this large is refused whatever it holds
        raise SpecError("grid", f"{num_cells:,} cells (systems x models x num_gpus x gbs x objective); at most "
                                f"{MAX_CELLS:,} per sweep: split the grid")
    base = base_dir or Path(".")
    systems = tuple((s, _resolved(f"grid.systems[{i}]", s, resolve_system, base))
                    for i, s in enumerate(_labels("grid.systems", data["systems"])))
    models = tuple((label, _resolved(f"grid.models[{i}]", entry, resolve_model, base))
                   for i, (label, entry) in enumerate(_model_entries(data["models"])))
    objectives = tuple(lists["objective"])
    for i, o in enumerate(objectives):
        if o not in OBJECTIVES:
            raise SpecError(f"grid.objective[{i}]" if len(objectives) > 1 else "grid.objective",
                            f"must be one of {', '.join(OBJECTIVES)}, got {_short(o)}")
    grid = Grid(systems=systems, models=models, num_gpus=_ints("grid.num_gpus", data["num_gpus"], MAX_GPUS),
                gbs=_ints("grid.gbs", data["gbs"], MAX_GBS), objectives=objectives)
    return grid


def load_grid(path: str | Path) -> Grid:
    """Read and validate a GRID file (YAML or JSON)."""
    from narrowpath.catalog.resolve import read_data_file
    p = Path(path)
    if not p.is_file():
        raise NarrowpathError(f"{p}: no such grid file")
    return grid_from_dict(read_data_file(p), p.parent)
