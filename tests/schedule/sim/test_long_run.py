"""The long run's wall-time books: every second of the horizon is kept training or lost to one cause, once."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.errors import SimulationError
from narrowpath.schedule.sim.faults import LOSS_CAUSES, Population, book, long_run
from narrowpath.spec.noise import Failures

POP = Population(gpu=256, node=32, link=256, switch=12)


@pytest.mark.parametrize("mtbf_h,restart_s,maint_s", [(50.0, 300.0, 0.0), (2.0, 300.0, 0.0), (2.0, 3600.0, 7200.0),
                                                       (5000.0, 300.0, 3600.0)])
def test_lost_and_kept_time_add_up_to_the_horizon(mtbf_h, restart_s, maint_s):
    """Failures during a relaunch restart it: only the part of the interrupted relaunch that elapsed is lost (it
    was once booked whole again at each restart — 104,400 s lost and kept in an 86,400 s day at fail=gpu:50, ten
    days of restarts at fail=gpu:2), and nothing past the horizon."""
    f = Failures(mtbf_h=(("gpu", mtbf_h),), restart_s=restart_s, maintenance_every_s=maint_s)
    lr = long_run(f, POP, write_s=40.0, restore_s=90.0, interval_s=1800.0, mean_step_s=2.0, noise_free_step_s=1.9,
                  rng=np.random.default_rng(7))
    kept = lr.effective_training_time_ratio * f.horizon_s
    assert sum(lr.lost_s[k] for k in LOSS_CAUSES) + kept == pytest.approx(f.horizon_s, rel=1e-9)
    assert all(v >= 0 for v in lr.lost_s.values()) and 0 <= lr.goodput <= 1


def test_book_spends_the_elapsed_time_phase_by_phase():
    lost = dict.fromkeys(("a", "b", "c"), 0.0)
    book(lost, [("a", 10.0), ("b", 5.0), ("c", 1.0)], 12.0)
    assert lost == {"a": 10.0, "b": 2.0, "c": 0.0}


def test_a_run_of_millions_of_events_is_refused():
    """An MTBF of one hour per GPU on 16,384 GPUs: 4.6 failures a second, ~8 M over 20 replications of a day."""
    f = Failures(mtbf_h=(("gpu", 1.0),))
    with pytest.raises(SimulationError, match="the long run would play"):
        long_run(f, Population(gpu=16384, node=2048, link=16384, switch=512), 40.0, 90.0, 1800.0, 2.0, 1.9,
                 np.random.default_rng(0))
