"""narrowpath: where the time goes in distributed AI training — the narrowest path, and what would widen it.

Public API:
    load_scenario(name_or_path)  -> Scenario      (catalog id, YAML/JSON file, or mapping)
    predict(scenario)            -> StepPrediction (closed-form training step)
    run_validation(corpus_path)  -> ValidationReport
"""
from narrowpath.catalog import load_scenario
from narrowpath.errors import NarrowpathError
from narrowpath.schedule.step import StepPrediction, predict
from narrowpath.spec import Calibration, Device, Model, Plan, Scenario, System, Tier
from narrowpath.validate.run import run_validation

__version__ = "0.1.0"
__all__ = ["load_scenario", "predict", "run_validation", "StepPrediction", "NarrowpathError", "Calibration",
           "Device", "Model", "Plan", "Scenario", "System", "Tier", "__version__"]
