"""Offloaded activations in the accounts: the data-movement ledger's host row and the distance budget carry what a
plan with `offload_layers` moves to host memory and back (the ledger's host row once read "no offload modelled",
0 bytes, while the step priced 136 GB a step over the host link for the catalog's Llama-3 405B plan)."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.analysis import analyze
from narrowpath.catalog import load_scenario
from narrowpath.cost.memory import in_flight_microbatches
from narrowpath.schedule import predict

LLAMA_405B = "llama3-405b-h100-16k"  # vpp 8 (one layer a chunk), no recompute, offload_layers 1: every layer


def _kept_without_offload(scn) -> tuple[float, float]:
    """(activation bytes the busiest stage would hold with nothing offloaded, its micro-batches in flight)."""
    plain = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, offload_layers=0))
    pred = predict(plain)
    stage = pred.memory.stage
    return pred.memory_by_stage[stage].items["activations"], in_flight_microbatches(stage, plain)


def test_the_ledger_and_the_distance_budget_carry_the_offloaded_activations():
    """One layer a chunk and one layer offloaded a chunk: every saved tensor goes to host memory. So the host holds
    what the same plan without offloading keeps in HBM (68.25 GB on stage 1: 16 micro-batches in flight × 8 layers
    × ~533 MB), and the link moves each micro-batch's share out and back: 2 × m × (68.25 GB / 16)."""
    scn = load_scenario(LLAMA_405B)
    kept, in_flight = _kept_without_offload(scn)
    assert kept > 60e9 and in_flight == 16
    a = analyze(scn)
    m = a.prediction.workload.num_microbatches
    host = {r.level: r for r in a.data_movement}["host"]
    assert host.bytes_per_step == pytest.approx(2 * m * kept / in_flight, rel=1e-9)
    assert host.modelled_s == pytest.approx(sum(t.total_s for t in a.prediction.transfers if t.axis == "host"))
    assert host.modelled_s > 0
    items = {i.item: i for i in a.distance.items}
    assert items["activations"].bytes_per_rank == 0
    off = items["activations_offloaded"]
    assert off.level == "host" and off.bytes_per_rank == pytest.approx(kept, rel=1e-9)


def test_a_plan_that_offloads_nothing_shows_an_idle_host_link():
    scn = load_scenario("llama3-70b-h100-256")
    a = analyze(scn)
    host = {r.level: r for r in a.data_movement}["host"]
    assert host.bytes_per_step == 0 and host.modelled_s == 0 and host.source == "no activations offloaded"
    assert "activations_offloaded" not in {i.item for i in a.distance.items}
