"""A bare serving lane over fresh request arrays, for tests that drive `serving_sim.Lane` by hand."""
from __future__ import annotations

import numpy as np

from narrowpath.schedule.serving_sim import Lane, LaneSpec
from narrowpath.schedule.serving_stats import LaneTotals


def bare_lane(spec: LaneSpec, step, n_in, n_out, log=None):
    """A lane of `len(n_in)` requests all arrived at 0 with these prompt and output lengths, priced by `step`; returns
    the lane and its arrays (arr, n_in, n_out, first, finish) by name."""
    n = len(n_in)
    arrays = dict(arr=np.zeros(n), n_in=np.asarray(n_in, dtype=np.int64), n_out=np.asarray(n_out, dtype=np.int64),
                  first=np.full(n, np.nan), finish=np.full(n, np.nan))
    lane = Lane(spec, step, np.arange(n), arrays["arr"], arrays["n_in"], arrays["n_out"], arrays["first"],
                arrays["finish"], LaneTotals(), log)
    return lane, arrays
