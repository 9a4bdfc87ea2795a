"""schedule: compose costs into a step — closed-form pipeline schedules and overlap."""
from narrowpath.schedule.step import BREAKDOWN_KEYS, StepPrediction, predict

__all__ = ["BREAKDOWN_KEYS", "StepPrediction", "predict"]
