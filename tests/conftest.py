"""Shared fixtures: catalog scenarios and a small builder for custom ones."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario, model, system
from narrowpath.spec import Plan, Scenario


@pytest.fixture(scope="session")
def gpt175_a100() -> Scenario:
    return load_scenario("gpt3-175b-a100-1024")


def make_scenario(model_id: str = "gpt-1.7b", system_id: str = "dgx-a100", **plan_kw) -> Scenario:
    plan = Plan(**plan_kw)
    return Scenario(name="t", system=system(model_id and system_id), model=model(model_id), plan=plan,
                    num_gpus=plan.num_gpus)


@pytest.fixture
def build():
    return make_scenario


def replace_plan(scn: Scenario, **kw) -> Scenario:
    plan = dataclasses.replace(scn.plan, **kw)
    return dataclasses.replace(scn, plan=plan, num_gpus=plan.num_gpus)


def _exit_blockers() -> set:
    """What would hold this process at its exit: a live thread that is not a daemon (the interpreter joins it), and
    a multiprocessing pool never terminated (its exit finalizer terminates it, and a pool left half terminated -
    workers killed holding its queue's lock - waits there for ever)."""
    import multiprocessing.util
    import threading
    threads = {repr(t) for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()}
    pools = {f"a multiprocessing pool never terminated (exit finalizer {key})" for key, fin in list(multiprocessing.util._finalizer_registry.items())
             if getattr(getattr(fin, "_callback", None), "__name__", "") == "_terminate_pool"}
    return threads | pools


@pytest.fixture(autouse=True)
def _leaves_nothing_to_wait_for_at_exit():
    """A test leaves no thread or pool behind for the interpreter to wait on at exit: one did (a pool whose terminate
    a test had made hang), and pytest, its summary printed, never exited - CI ran out of its 90 minutes."""
    before = _exit_blockers()
    yield
    left = _exit_blockers() - before
    assert not left, f"left for the interpreter to wait on at exit: {sorted(left)}"
