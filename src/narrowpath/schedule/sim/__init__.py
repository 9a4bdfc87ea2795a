"""The step event simulator: the training step played as events from the same workload and cost model as the
closed form (`schedule.step`), with exact pipeline schedules, collectives as rendezvous, noise and faults."""
from narrowpath.schedule.sim.run import CheckpointInputs, SimResult, simulate

__all__ = ["CheckpointInputs", "SimResult", "simulate"]
