"""The GPU's waits for its host sit in the idle share when a prediction is put beside a trace: a GPU timeline shows
them as gaps (trace.idle: host_wait), not as kernels."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from narrowpath.trace.compare import predicted_shares


def test_host_waits_count_as_idle_not_compute():
    b = {"compute": 6.0, "exposed_tp_comm": 1.0, "bubble": 2.0, "optimizer": 1.0}
    eager = predicted_shares(SimpleNamespace(breakdown_s=b, step_time_s=10.0, host_wait_s=1.5))
    assert eager == pytest.approx({"compute": 55.0, "exposed_comm": 10.0, "memcpy": 0.0, "idle": 35.0})
    # a prediction object without the field (an older one, or a stand-in) reads as no wait
    assert predicted_shares(SimpleNamespace(breakdown_s=b, step_time_s=10.0))["compute"] == pytest.approx(70.0)
