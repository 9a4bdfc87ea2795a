"""Analysis → JSON-ready dict: one key per account and budget (stable key set, SI units in the field names).

Keys: data_movement, collectives, overlap, topology, scaling, distance, communication, synchronisation, verdict,
energy (the CLI adds `prediction`). Infinite values become null; changed scenarios of what-ifs are left out.
"""
from __future__ import annotations

import dataclasses
import math

from narrowpath.analysis import Analysis

ANALYSIS_KEYS = ("data_movement", "collectives", "overlap", "topology", "scaling", "distance", "communication",
                 "synchronisation", "verdict", "energy")
_SKIP = {"scenario"}


def plain(obj):
    """Recursively turn dataclasses, mappings and tuples into JSON types."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name not in _SKIP}
        for prop in ("reduction_s", "reduction_fraction", "flags"):
            if hasattr(type(obj), prop) and isinstance(getattr(type(obj), prop), property):
                out[prop] = plain(getattr(obj, prop))
        return out
    if isinstance(obj, dict) or hasattr(obj, "items") and not isinstance(obj, (str, bytes)):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, float):
        return None if math.isinf(obj) or math.isnan(obj) else obj
    return obj


def analysis_to_json(a: Analysis) -> dict:
    out = {k: plain(getattr(a, k)) for k in ANALYSIS_KEYS}
    out["data_movement"] = {"useful_flop_convention": "model FLOPs per GPU: 3 x forward matrix + attention FLOPs, "
                                                      "no recompute (Korthikanti et al. 2022 §6) / num_gpus",
                            "useful_flop_per_gpu": a.context.useful_flop_per_rank,
                            "levels": out["data_movement"]}
    out["synchronisation"]["options"] = plain(a.options)
    return out
