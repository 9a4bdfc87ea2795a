"""One cell of a sweep: a full search for one system, model, GPU count, global batch and objective, as one row.

`run_cell` is the only function a sweep's workers run; it calls `search.rank.search` on the space `narrowpath
search --model M --system S --gpus N --gbs B --objective O --top 1 --jobs 1` searches, so any change to the search
(e.g. faster pricing) flows into sweeps. The row counts that space alone. The command also ranks its own plan, the
one its flags give (tp 1, pp 1, dp N, ZeRO-0, recompute none), and adds it to the space where it is consistent but
not one the space tries (ZeRO-0 over dp > 1): its `num_plans` is then one more than the row's (`num_fit` too when
that plan fits), and the first row it prints differs from the row's best plan only if that plan beats every
searched one.

Every knob the search does not vary keeps `Plan()`'s default (precision bf16, overlap switches, CP exchange,
placement order). The search starts from the first consistent plan of the space, so a cell where tp = 1,
dp = N is inconsistent (e.g. a batch smaller than the GPU count) is still searched.

Row fields (JSON-ready; units in the names): key, system, model, num_gpus, gbs, objective, fits, reason (why no
plan fits, else null), plan (the best plan's knobs), plan_text, step_time_s, tokens_per_s,
tokens_per_s_per_gpu, tokens_per_s_per_w (= tokens per joule: tokens per step over the analysis energy ledger's
GPU-level joules per step), energy_per_step_j, memory_per_gpu_bytes, mfu, num_plans, num_fit, search_s.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from narrowpath.errors import NarrowpathError
from narrowpath.search.grid import Cell
from narrowpath.search.rank import MAX_PLANS, describe_plan, search
from narrowpath.search.space import KNOBS, SearchSpace, candidate_plans
from narrowpath.spec.plan import Plan
from narrowpath.spec.scenario import Scenario
ROW_FIELDS = ("key", "system", "model", "num_gpus", "gbs", "objective", "fits", "reason", "plan", "plan_text",
              "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "tokens_per_s_per_w", "energy_per_step_j",
              "memory_per_gpu_bytes", "mfu", "num_plans", "num_fit", "search_s")


def _row(cell: Cell, **values: Any) -> dict[str, Any]:
    """A JSON-ready row: every field of ROW_FIELDS, NaN and infinities as None."""
    row = dict.fromkeys(ROW_FIELDS)
    row.update(key=cell.key, system=cell.system_label, model=cell.model_label, num_gpus=cell.num_gpus,
               gbs=cell.gbs, objective=cell.objective, fits=False, num_plans=0, num_fit=0)
    row.update(values)
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def _json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def run_cell(cell: Cell) -> dict[str, Any]:
    """Search the cell; a cell where nothing fits (or nothing is consistent) is a row with its reason."""
    t0 = time.perf_counter()
    try:
        space = SearchSpace(cell.model, cell.system, cell.num_gpus, cell.gbs,
                            Plan(gbs=cell.gbs, precision=cell.system.device.half_format))
        first = next(candidate_plans(space), None)
        if first is None:
            return _row(cell, reason=f"no consistent plan of {cell.model.name} on {cell.num_gpus} GPUs with a "
                                     f"global batch of {cell.gbs} (the batch must split over dp·mbs; tp must divide "
                                     f"the heads, pp·vpp fit the layers)", search_s=time.perf_counter() - t0)
        base = Scenario(name=f"{cell.model_label}@{cell.system_label}", system=cell.system, model=cell.model,
                        plan=first, num_gpus=cell.num_gpus)
        result = search(base, dataclasses.replace(space, base=first), objective=cell.objective, top=1,
                        max_plans=MAX_PLANS, jobs=1)
    except NarrowpathError as exc:
        return _row(cell, reason=str(exc), search_s=time.perf_counter() - t0)
    elapsed = time.perf_counter() - t0
    if not result.ranked:
        why = f"; first failure: {result.first_failure}" if result.first_failure else ""
        return _row(cell, reason=f"none of the {result.num_plans:,} plans fits in "
                                 f"{cell.system.device.hbm.capacity_bytes / 1e9:.1f} GB per GPU{why}",
                    num_plans=result.num_plans, search_s=elapsed)
    best = result.ranked[0]
    tokens_per_step = best.tokens_per_s * best.step_time_s
    energy = best.energy_per_step_j
    return _row(cell, fits=True, plan={k: _json(getattr(best.plan, k)) for k in KNOBS + ("dp",)},
                plan_text=describe_plan(best.plan), step_time_s=best.step_time_s, tokens_per_s=best.tokens_per_s,
                tokens_per_s_per_gpu=best.tokens_per_s / cell.num_gpus,
                tokens_per_s_per_w=tokens_per_step / energy if energy else None, energy_per_step_j=energy,
                memory_per_gpu_bytes=best.memory_bytes, mfu=best.mfu, num_plans=result.num_plans,
                num_fit=result.num_fit, search_s=elapsed)
