"""Error bands of searched plans, and which plans are statistically tied with the best.

Each shown plan gets the band `analysis.band` gives its predicted step time; a plan whose band overlaps the best
plan's band is *tied* with it: the validation residuals of similar runs cannot tell the two apart, so the ranking
between them is not evidence (the search still orders them by the point prediction).
"""
from __future__ import annotations

import dataclasses

from narrowpath.analysis.band import Band, error_band
from narrowpath.search.rank import Candidate, SearchResult


def candidate_band(r: SearchResult, c: Candidate) -> Band:
    scn = dataclasses.replace(r.base, plan=c.plan, open_knobs=(), chosen=())
    return error_band(scn, c.step_time_s)


def overlaps(a: Band, b: Band) -> bool:
    return a.low_s <= b.high_s and b.low_s <= a.high_s


def shown_bands(r: SearchResult, top: int) -> dict[int, tuple[Band, bool]]:
    """(band, tied with the best) for the first `top` ranked plans and the baseline, keyed by id(candidate). The
    bands are of step time, so ties are marked only in a ranking by step time, and never for a plan that does not
    fit as the ranking counts fitting (with `min_free_bytes`, --min-free-gb, left free: the baseline may not), nor
    for the best plan itself (it is what the others tie with; the console leaves it unmarked too)."""
    shown = list(r.ranked[:top]) + ([r.baseline] if r.baseline is not None else [])
    bands = {id(c): candidate_band(r, c) for c in shown}
    if not r.ranked or r.objective != "time":
        return {k: (b, False) for k, b in bands.items()}
    best = r.ranked[0]
    fits = {id(c): c.headroom_bytes >= r.min_free_bytes for c in shown}
    return {k: (b, fits[k] and k != id(best) and overlaps(b, bands[id(best)])) for k, b in bands.items()}
