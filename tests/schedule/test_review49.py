"""From the forty-ninth session's reviews, held where the mutation tool's pool reaches (tests/schedule): a
concurrency cap never sends a request before it arrives, colocated or disaggregated, and the breakdown's
communication buckets know every axis the step books in them."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.schedule.serving_run import simulate
from narrowpath.schedule.step import BREAKDOWN_KEYS, _BUCKET, bucket_axes, bucket_of
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario

ARRIVALS = (0.0, 10.0, 20.0, 30.0, 40.0, 50.0)
TRACE = Load(arrival="trace", requests=tuple((t, 128, 16) for t in ARRIVALS), concurrency=1)


def _run(plan: ServingPlan, gpus: int):
    scn = ServingScenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=plan, load=TRACE,
                          num_gpus=gpus)
    return simulate(scn).result


@pytest.mark.parametrize("plan, gpus", [(ServingPlan(), 1), (ServingPlan(replicas=2, prefill_replicas=1), 2)],
                         ids=["colocated", "disaggregated"])
def test_a_capped_client_sends_no_request_before_it_arrives(plan, gpus):
    """Six requests 10 s apart under a cap of one: the GPU finishes each in well under a second, so every request
    waits for its own arrival, not for the one before it to end (the closed loop sent request i at request i−1's
    finish: all six within the first second). The run spans the trace's 50 s."""
    res = _run(plan, gpus)
    first = np.sort(res.first_token_s)
    assert np.all(first >= np.array(ARRIVALS)), first
    assert np.all(first < np.array(ARRIVALS) + 1.0), first
    assert 50.0 < res.makespan_s < 51.0


def test_the_breakdown_buckets_of_the_transfer_axes():
    """ep_inter / ep_intra (DeepSeek's hierarchical dispatch) and etp land in exposed_ep_comm, edp in dp, pp_ends and
    the host's in pp; bucket_axes is the inverse, each bucket's own axis first."""
    assert bucket_axes("ep") == ("ep", "etp", "ep_inter", "ep_intra")
    assert bucket_axes("dp") == ("dp", "edp")
    assert bucket_axes("pp") == ("pp", "pp_ends", "host")
    assert bucket_axes("tp") == ("tp",) and bucket_axes("cp") == ("cp",)
    for axis in ("tp", "cp", "ep", "pp", "dp", *_BUCKET):
        assert f"exposed_{bucket_of(axis)}_comm" in BREAKDOWN_KEYS and axis in bucket_axes(bucket_of(axis))
