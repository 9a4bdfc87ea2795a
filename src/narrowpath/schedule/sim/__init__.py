"""The step event simulator: the training step played as events from the same workload and cost model as the
closed form (`schedule.step`), with exact pipeline schedules, collectives as rendezvous, noise and faults.

The facade is imported lazily (PEP 562) so that the closed form (`schedule.pipeline`) can play a program
(`sim.playback`) without importing the simulator, which imports the closed form."""
from __future__ import annotations

__all__ = ["CheckpointInputs", "SimResult", "simulate"]


def __getattr__(name: str):
    if name in __all__:
        from narrowpath.schedule.sim import run
        return getattr(run, name)
    raise AttributeError(name)
